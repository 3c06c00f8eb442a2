/*
 * The rules file (RDMASOCK_CONFIG, default /etc/rdmasock.conf), parsed into a struct:
 * "PROGRAM ROLE ADDRESS[/PREFIX] PORTS SETTING..." per line, a program glob, client/server,
 * an address prefix and a port range that select connections, and the transport and
 * tunables to use. Pure parsing and matching; policy.c applies them to the process.
 */
#ifndef RSK_BASE_RULES_H
#define RSK_BASE_RULES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RSK_RULES_MAX 64
#define RSK_RULES_FILE_MAX (64 * 1024) /* bytes read from the file at most */
#define RSK_RULES_DEFAULT_PATH "/etc/rdmasock.conf"

enum rsk_rule_role { RSK_ROLE_ANY = 0, RSK_ROLE_CLIENT, RSK_ROLE_SERVER };

/* What a rule may set; bit (1 << key) in rsk_rule.set when the line gives it. */
enum rsk_rule_key {
	RSK_RK_TRANSPORT = 0, /* enum rsk_mode */
	RSK_RK_SPIN_US,
	RSK_RK_BUF_SIZE,
	RSK_RK_BUF_COUNT,
	RSK_RK_INLINE,
	RSK_RK_CONNECT_TIMEOUT_MS,
	RSK_RK_COUNT
};

struct rsk_rule {
	char program[64]; /* fnmatch(3) glob against the program name */
	int role;         /* enum rsk_rule_role */
	uint8_t addr[16]; /* IPv6, IPv4 as ::ffff:a.b.c.d */
	unsigned int prefix; /* bits of addr that must match (0: any address) */
	uint16_t port_lo, port_hi;
	unsigned int set;    /* 1 << enum rsk_rule_key for each setting given */
	unsigned int val[RSK_RK_COUNT];
	unsigned int line;
};

struct rsk_rules {
	struct rsk_rule r[RSK_RULES_MAX];
	unsigned int n;
};

/* One message per bad line, "FILE:LINE: what is wrong; line ignored". */
typedef void (*rsk_rules_err_fn)(const char *msg, void *arg);

/* Does the rule select every connection of its program (role, address and ports are *)? */
int rsk_rule_process_wide(const struct rsk_rule *r);

/*
 * Parse @len bytes of @text (named @file in messages) into @rs, appending to its rules.
 * Bad lines are reported through @err and skipped; the others apply. Returns the number
 * of bad lines.
 */
int rsk_rules_parse(struct rsk_rules *rs, const char *text, size_t len, const char *file,
		    rsk_rules_err_fn err, void *arg);

/*
 * Read and parse file @path (see rsk_rules_parse). Returns the number of bad lines, or
 * -errno when the file cannot be read (-ENOENT: it does not exist; -EFBIG: larger than
 * RSK_RULES_FILE_MAX).
 */
int rsk_rules_load(struct rsk_rules *rs, const char *path, rsk_rules_err_fn err, void *arg);

/*
 * The first rule matching a connection of @program in @role to (client) or at (server)
 * address @addr, port included; NULL when none. @program NULL matches every glob (the
 * rules were already filtered by program).
 */
const struct rsk_rule *rsk_rules_match(const struct rsk_rules *rs, const char *program, int role,
				       const struct sockaddr *addr);

/* Keep only the rules whose program glob matches @program, in order. */
void rsk_rules_filter(struct rsk_rules *rs, const char *program);

#endif
