/*
 * librdmasock public interface. Applications need none of it: LD_PRELOAD=librdmasock.so is
 * the whole integration. This header names the environment variables, the stats keys, and
 * the few rdmasock_* entry points for programs that want to ask the library directly.
 */
#ifndef RDMASOCK_H
#define RDMASOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMASOCK_VERSION_MAJOR 0
#define RDMASOCK_VERSION_MINOR 1
#define RDMASOCK_VERSION_PATCH 0

/* Environment variables (see README "Configuration"). */
#define RDMASOCK_ENV_TRANSPORT "RDMASOCK_TRANSPORT"       /* auto|kernel|shm|verbs */
#define RDMASOCK_ENV_LOG "RDMASOCK_LOG"                   /* error|warn|info|debug */
#define RDMASOCK_ENV_LOG_FILE "RDMASOCK_LOG_FILE"         /* path; default stderr */
#define RDMASOCK_ENV_STATS "RDMASOCK_STATS"               /* path; JSON line at exit */
#define RDMASOCK_ENV_INCLUDE_PORTS "RDMASOCK_INCLUDE_PORTS" /* "6379,8000-8100" */
#define RDMASOCK_ENV_EXCLUDE_PORTS "RDMASOCK_EXCLUDE_PORTS" /* "22,53" */
#define RDMASOCK_ENV_SPIN_US "RDMASOCK_SPIN_US"
#define RDMASOCK_ENV_BUF_SIZE "RDMASOCK_BUF_SIZE"
#define RDMASOCK_ENV_BUF_COUNT "RDMASOCK_BUF_COUNT"
#define RDMASOCK_ENV_INLINE "RDMASOCK_INLINE"
#define RDMASOCK_ENV_CONNECT_TIMEOUT_MS "RDMASOCK_CONNECT_TIMEOUT_MS"
#define RDMASOCK_ENV_DEVICE "RDMASOCK_DEVICE"
/* TCP first: a connection starts on kernel TCP and moves to shm/verbs once it proves busy or
 * long-lived (in band, byte-exact). auto = learn (default: always for verbs; for shm where
 * the destination's recent connections ended short), on, off (set up at connect). */
#define RDMASOCK_ENV_TCP_FIRST "RDMASOCK_TCP_FIRST"
#define RDMASOCK_ENV_UPGRADE_BYTES "RDMASOCK_UPGRADE_BYTES" /* moved after this many bytes */
#define RDMASOCK_ENV_UPGRADE_MS "RDMASOCK_UPGRADE_MS"       /* or at its first call this old */
/* 1: epoll_wait answers lazy shm connections from user space (docs/design.md, Readiness) */
#define RDMASOCK_ENV_FASTWAIT "RDMASOCK_FASTWAIT"
/* How long a relay whose program is gone (every holder of its fd closed) waits without a byte
 * moving before it ends, as the kernel ends an orphaned TCP socket (tcp_fin_timeout) */
#define RDMASOCK_ENV_ORPHAN_MS "RDMASOCK_ORPHAN_MS"
/* Which transports coalesce small writes (Nagle, TCP_CORK, MSG_MORE): "safe" (default) only
 * where held bytes outlive a killed process (shm); "always" also verbs, where a SIGKILL or a
 * crash loses what is held (less than one buffer) */
#define RDMASOCK_ENV_COALESCE "RDMASOCK_COALESCE"
/* A same-host bearer for short connections (docs/design.md): "none" (default) or "unix".
 * Today "unix" puts only the listener's face in place (an epoll set on the listening
 * socket's number, the TCP listener behind it); no connection takes the bearer yet. */
#define RDMASOCK_ENV_BEARER "RDMASOCK_BEARER"
#define RDMASOCK_ENV_CONFIG "RDMASOCK_CONFIG"     /* rules file; default /etc/rdmasock.conf */
#define RDMASOCK_ENV_STAT_DIR "RDMASOCK_STAT_DIR" /* live stats segments; default /dev/shm */

/* Transports, the index of every per-transport counter. */
enum rdmasock_transport {
	RDMASOCK_TRANSPORT_KERNEL = 0,
	RDMASOCK_TRANSPORT_SHM = 1,
	RDMASOCK_TRANSPORT_VERBS = 2,
	RDMASOCK_TRANSPORT_COUNT
};

/* Why a connection stayed on (or went back to) the kernel. Names are the JSON keys. */
enum rdmasock_fallback {
	RDMASOCK_FB_POLICY = 0,    /* "policy": RDMASOCK_TRANSPORT=kernel, a port list or a rule */
	RDMASOCK_FB_NO_PEER,       /* "no_peer": no preloaded listener at the destination */
	RDMASOCK_FB_NOT_LOCAL,     /* "not_local": shm only, destination on another host */
	RDMASOCK_FB_NO_DEVICE,     /* "no_device": no usable RDMA device */
	RDMASOCK_FB_NO_ROUTE,      /* "no_route": rdma_cm could not resolve address/route */
	RDMASOCK_FB_REFUSED,       /* "refused": the peer rejected the accelerated connect */
	RDMASOCK_FB_TIMEOUT,       /* "timeout": the accelerated connect took too long */
	RDMASOCK_FB_MEMLOCK,       /* "memlock": ulimit -l too low to register memory */
	RDMASOCK_FB_RESOURCES,     /* "resources": memory, fds, QP or ring creation failed */
	RDMASOCK_FB_HANDSHAKE,     /* "handshake": version or parameters not agreed */
	RDMASOCK_FB_UNSUPPORTED,   /* "unsupported": socket state/options we cannot carry */
	RDMASOCK_FB_NEGATIVE_CACHE, /* "negative_cache": destination recently failed */
	RDMASOCK_FB_FD_LIMIT,      /* "fd_limit": too close to RLIMIT_NOFILE for a hidden fd */
	/* "tcp_first": started on TCP and ended before it moved (a move that failed counts
	 * under the reason it failed for) */
	RDMASOCK_FB_TCP_FIRST,
	RDMASOCK_FB_OTHER_USER,    /* "other_user": the same-host peer runs as another user */
	/* "setup_limit": started on TCP while the process had as many accelerated setups in
	 * progress as it allows at once (a burst of non-blocking connects), and ended before
	 * it moved */
	RDMASOCK_FB_SETUP_LIMIT,
	/* "version": the same-host peer runs a build of the library whose handshake this one
	 * does not read (another protocol version, or a message it could not parse): declined
	 * before either end committed */
	RDMASOCK_FB_VERSION,
	RDMASOCK_FB_COUNT
};

/*
 * Room for fallback reasons: the fallbacks[] array keeps this size as reasons are added, so
 * no field after it ever moves (slots from RDMASOCK_FB_COUNT on read 0).
 */
#define RDMASOCK_FB_CAPACITY 32

/*
 * Fields are only appended: a field's offset never changes once released, and new fields go
 * at the end, so a program built against an older (smaller) copy of this header reads a
 * prefix of today's layout. The smallest size rdmasock_get_stats() accepts is
 * RDMASOCK_STATS_MIN_SIZE: everything up to and including the twelve original reasons.
 */
struct rdmasock_stats {
	uint64_t connections[RDMASOCK_TRANSPORT_COUNT];
	uint64_t bytes_sent[RDMASOCK_TRANSPORT_COUNT];
	uint64_t bytes_received[RDMASOCK_TRANSPORT_COUNT];
	uint64_t messages_sent[RDMASOCK_TRANSPORT_COUNT];
	uint64_t messages_received[RDMASOCK_TRANSPORT_COUNT];
	uint64_t credit_stalls;
	uint64_t fallbacks[RDMASOCK_FB_CAPACITY]; /* indexed by enum rdmasock_fallback */
	/* Writes (or their pieces) that joined a pending message instead of taking a buffer
	 * of their own: Nagle coalescing with TCP_NODELAY off, TCP_CORK or MSG_MORE. */
	uint64_t writes_coalesced;
	/* Messages sent only to return credits (no data, no FIN/RST): a reader that owed them
	 * and had no answer to carry them (half a window owed, or due at its wait or the
	 * event loop's tick). Over shared memory credits go out of band and this stays 0. */
	uint64_t credit_messages;
	/* Listening sockets given a face for a same-host bearer (RDMASOCK_BEARER=unix): an epoll
	 * set on their number, the TCP listener behind it. */
	uint64_t listener_faces;
	/* Connections carried by the same-host bearer (RDMASOCK_BEARER=unix): a unix stream
	 * connection made in place of a TCP one, counted at each end that made or accepted it.
	 * Not in connections[] (no transport's stream carries them: the kernel's unix socket
	 * does). */
	uint64_t bearer_connections;
	/* new fields here, and only here */
};

/* connections .. credit_stalls and fallbacks[0 .. RDMASOCK_FB_NEGATIVE_CACHE] */
#define RDMASOCK_STATS_MIN_SIZE (28 * sizeof(uint64_t))

/* "MAJOR.MINOR.PATCH". */
const char *rdmasock_version(void);

/*
 * Copy this process's counters into @out; pass @size = sizeof(*out). A program built against
 * an older header passes its smaller size and gets exactly that many bytes (its fields, in
 * the same places); a newer, larger one gets this library's fields and zeros after them.
 * Headers from before fallbacks[] had a fixed capacity (sizes 232 to 376) kept
 * writes_coalesced right after their reasons: those sizes get it in their last 8 bytes.
 * Returns 0, or -1 with errno EINVAL (@out NULL, @size below RDMASOCK_STATS_MIN_SIZE or not
 * a multiple of 8). Kernel byte counts cover closed sockets only (they are read from
 * TCP_INFO when a socket closes; the line written at exit covers the open ones too);
 * accelerated transports are counted as the bytes move.
 */
int rdmasock_get_stats(struct rdmasock_stats *out, size_t size);

/* Write the stats JSON line (the RDMASOCK_STATS format) into @buf. Returns its length. */
int rdmasock_stats_json(char *buf, size_t size);

/*
 * Transport carrying @fd: RDMASOCK_TRANSPORT_KERNEL/SHM/VERBS, or -1 with errno EBADF
 * when @fd is not a socket this library knows (then it is a plain kernel fd).
 */
int rdmasock_fd_transport(int fd);

#ifdef __cplusplus
}
#endif

#endif
