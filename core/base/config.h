/*
 * Configuration from RDMASOCK_* environment variables. Parsed once at start; every invalid
 * value produces one clear line through the error callback and leaves the safe default.
 */
#ifndef RSK_CONFIG_H
#define RSK_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

enum rsk_mode {
	RSK_MODE_AUTO = 0,
	RSK_MODE_KERNEL,
	RSK_MODE_SHM,
	RSK_MODE_VERBS,
};

enum rsk_log_level {
	RSK_LOG_ERROR = 0,
	RSK_LOG_WARN,
	RSK_LOG_INFO,
	RSK_LOG_DEBUG,
};

enum rsk_tcp_first {
	RSK_TCP_FIRST_AUTO = 0, /* each transport's default (rsk_config_start) */
	RSK_TCP_FIRST_ON,
	RSK_TCP_FIRST_OFF,
	RSK_TCP_FIRST_LEARN, /* the same as auto, by its name (TCP first where connections end short) */
};

/* Where small writes may wait in a stage (RDMASOCK_COALESCE). */
enum rsk_coalesce {
	RSK_COALESCE_SAFE = 0, /* only where the stage outlives the process (rsk_ep_stage_survives) */
	RSK_COALESCE_ALWAYS,   /* also where it dies with it: throughput over a killed sender's tail */
};

/* A same-host bearer for short connections (RDMASOCK_BEARER). */
enum rsk_bearer {
	RSK_BEARER_NONE = 0,
	RSK_BEARER_UNIX, /* faces, and same-host clients connect through them (sock/bearer.c) */
	RSK_BEARER_FACE, /* listeners get their face (sock/face.c), no bearer connection yet */
	RSK_BEARER_AUTO, /* faces; a client takes the bearer where a setup would not pay
			  * (calls/connect.c: its destination's connections end short) */
};

#define RSK_CONFIG_MAX_RULES 32

struct rsk_port_range {
	uint16_t lo, hi;
};

struct rsk_config {
	enum rsk_mode mode;
	enum rsk_log_level log_level;
	char log_file[PATH_MAX];
	char stats_file[PATH_MAX];
	struct rsk_port_range include[RSK_CONFIG_MAX_RULES];
	unsigned int n_include;
	struct rsk_port_range exclude[RSK_CONFIG_MAX_RULES];
	unsigned int n_exclude;
	unsigned int spin_us;
	unsigned int buf_size;
	unsigned int buf_count;
	unsigned int inline_size;
	unsigned int connect_timeout_ms;
	char device[64];
	enum rsk_tcp_first tcp_first;
	unsigned int upgrade_bytes;
	unsigned int upgrade_ms;
	unsigned int fastwait; /* the user-space epoll fast path (calls/fastwait.c) */
	unsigned int orphan_ms; /* an orphaned relay's patience (conn/relay.c) */
	enum rsk_coalesce coalesce;
	enum rsk_bearer bearer;
};

/* Defaults: 256 KiB of receive buffers per direction, like rsocket's 128 KiB order of size. */
#define RSK_DEFAULT_SPIN_US 50
#define RSK_DEFAULT_BUF_SIZE 32768
#define RSK_DEFAULT_BUF_COUNT 8
#define RSK_DEFAULT_INLINE 64
#define RSK_DEFAULT_CONNECT_TIMEOUT_MS 1000
/* A TCP-first connection moves once it carried this much, or at its first call this old: a
 * short request/response connection (the kind connect-per-request clients make) never pays
 * for a setup it cannot earn back (see docs/design.md, "TCP first"). */
/* What a connection must carry before a setup pays (bench/connrate.sh: nginx + ab without
 * keep-alive, 100 KiB responses, ran at 0.31x kernel TCP with each connection set up on shm;
 * bulk flows still move by age within milliseconds). */
#define RSK_DEFAULT_UPGRADE_BYTES 1048576
#define RSK_DEFAULT_UPGRADE_MS 5
/* The kernel's default net.ipv4.tcp_fin_timeout: how long an orphaned socket waits for its
 * peer's FIN (a zero-window orphan is given up after about as long). */
#define RSK_DEFAULT_ORPHAN_MS 60000

extern RSK_HIDDEN struct rsk_config rsk_config;

/* Fill @c with defaults only. */
void rsk_config_defaults(struct rsk_config *c);

/*
 * Parse the environment through @get (getenv in the library, a table in tests) into @c.
 * @err, if not NULL, receives one message per invalid value. Returns the number of invalid
 * values (0 = all good); @c always ends up fully valid.
 */
int rsk_config_parse(struct rsk_config *c, const char *(*get)(const char *name),
		     void (*err)(const char *msg, void *arg), void *arg);

/* Port policy: may a connection on @port be accelerated? (include list empty = all ports). */
int rsk_config_port_allowed(const struct rsk_config *c, uint16_t port);

const char *rsk_mode_name(enum rsk_mode mode);

/* How a client connection over a transport starts (RDMASOCK_TCP_FIRST). */
enum rsk_start {
	RSK_START_DIRECT = 0, /* the transport's setup at connect */
	RSK_START_TCP,        /* on TCP; it moves once it proves busy or long-lived */
	RSK_START_LEARN,      /* TCP first where this destination's connections end short */
};

/* auto: TCP first for a transport whose setup is costly (@slow_setup: verbs), else learn. */
enum rsk_start rsk_config_start(const struct rsk_config *c, int slow_setup);
/* Parsers the rules file shares (rules.c): a decimal in [lo, hi] (no sign, no junk), and one
 * "N" or "N-M" port item of @len bytes. 0 or -EINVAL. */
int rsk_parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out);
int rsk_parse_port_item(const char *s, size_t len, struct rsk_port_range *r);

#endif
