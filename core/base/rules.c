/*
 * Rules file parsing and matching (rules.h). Strict like the environment parser: a line is
 * either fully valid or reported once with FILE:LINE and skipped, so one typo never takes
 * the other rules with it. Addresses are kept as IPv6 (IPv4 mapped) so one compare serves.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "rules.h"
#include "sys.h"

#define RSK_RULE_LINE_MAX 1024
#define RSK_RULE_TOKENS (4 + RSK_RK_COUNT)

struct rsk_rule_key_def {
	const char *name;
	unsigned long lo, hi;
	int pow2;
};

/* The ranges are the environment's (README "Configuration", config.c). */
static const struct rsk_rule_key_def rsk_rule_keys[RSK_RK_COUNT] = {
	[RSK_RK_TRANSPORT] = {"transport", 0, 3, 0},
	[RSK_RK_SPIN_US] = {"spin_us", 0, 1000000, 0},
	[RSK_RK_BUF_SIZE] = {"buf_size", 1024, 4u << 20, 1},
	[RSK_RK_BUF_COUNT] = {"buf_count", 6, 1024, 0},
	[RSK_RK_INLINE] = {"inline", 0, 1024, 0},
	[RSK_RK_CONNECT_TIMEOUT_MS] = {"connect_timeout_ms", 1, 60000, 0},
};

static const char *const rsk_rule_transports[] = {"auto", "kernel", "shm", "verbs"};

struct rsk_rule_ctx {
	const char *file;
	unsigned int line;
	rsk_rules_err_fn err;
	void *arg;
	char why[256]; /* the first problem of the current line */
};

static int rsk_rule_bad(struct rsk_rule_ctx *x, const char *fmt, const char *tok)
{
	snprintf(x->why, sizeof(x->why), fmt, tok);
	return -EINVAL;
}

static int rsk_rule_role(struct rsk_rule_ctx *x, const char *t, struct rsk_rule *r)
{
	if (strcmp(t, "*") == 0)
		r->role = RSK_ROLE_ANY;
	else if (strcmp(t, "client") == 0)
		r->role = RSK_ROLE_CLIENT;
	else if (strcmp(t, "server") == 0)
		r->role = RSK_ROLE_SERVER;
	else
		return rsk_rule_bad(x, "invalid role \"%.64s\" (client, server or *)", t);
	return 0;
}

/* "*", "a.b.c.d[/n]" or an IPv6 address "[/n]"; stored as IPv6 with the prefix in bits. */
static int rsk_rule_addr(struct rsk_rule_ctx *x, const char *t, struct rsk_rule *r)
{
	char buf[INET6_ADDRSTRLEN], *slash;
	unsigned long bits, max;
	int v4;

	if (strcmp(t, "*") == 0)
		return 0;
	if (strlen(t) >= sizeof(buf))
		return rsk_rule_bad(x, "invalid address \"%.64s\"", t);
	strcpy(buf, t);
	slash = strchr(buf, '/');
	if (slash != NULL)
		*slash++ = '\0';
	v4 = strchr(buf, ':') == NULL;
	if (v4 && inet_pton(AF_INET, buf, r->addr + 12) == 1) {
		r->addr[10] = r->addr[11] = 0xff;
	} else if (v4 || inet_pton(AF_INET6, buf, r->addr) != 1) {
		return rsk_rule_bad(x, "invalid address \"%.64s\" (IPv4 or IPv6, optional /PREFIX)", t);
	}
	max = v4 ? 32 : 128;
	bits = max;
	if (slash != NULL && rsk_parse_uint(slash, 0, max, &bits) < 0)
		return rsk_rule_bad(x, "invalid prefix length in \"%.64s\"", t);
	r->prefix = (unsigned int)(v4 ? 96 + bits : bits);
	return 0;
}

static int rsk_rule_ports(struct rsk_rule_ctx *x, const char *t, struct rsk_rule *r)
{
	struct rsk_port_range pr;

	if (strcmp(t, "*") == 0) {
		r->port_lo = 0;
		r->port_hi = 65535;
		return 0;
	}
	if (rsk_parse_port_item(t, strlen(t), &pr) < 0)
		return rsk_rule_bad(x, "invalid ports \"%.64s\" (*, N or N-M within 1-65535)", t);
	r->port_lo = pr.lo;
	r->port_hi = pr.hi;
	return 0;
}

static int rsk_rule_value(struct rsk_rule_ctx *x, int k, const char *v, unsigned int *out)
{
	const struct rsk_rule_key_def *d = &rsk_rule_keys[k];
	unsigned long n;
	unsigned int i;

	if (k == RSK_RK_TRANSPORT) {
		for (i = 0; i < 4; i++)
			if (strcmp(v, rsk_rule_transports[i]) == 0) {
				*out = i;
				return 0;
			}
		return rsk_rule_bad(x, "invalid transport \"%.64s\" (auto, kernel, shm or verbs)", v);
	}
	if (rsk_parse_uint(v, d->lo, d->hi, &n) < 0 || (d->pow2 && (n & (n - 1)) != 0)) {
		snprintf(x->why, sizeof(x->why), "invalid %s=\"%.64s\" (%san integer from %lu to %lu)",
			 d->name, v, d->pow2 ? "a power of two, " : "", d->lo, d->hi);
		return -EINVAL;
	}
	*out = (unsigned int)n;
	return 0;
}

static int rsk_rule_setting(struct rsk_rule_ctx *x, const char *t, struct rsk_rule *r)
{
	const char *eq = strchr(t, '=');
	size_t klen = eq ? (size_t)(eq - t) : 0;
	int k;

	if (eq == NULL)
		return rsk_rule_bad(x, "expected KEY=VALUE, not \"%.64s\"", t);
	for (k = 0; k < RSK_RK_COUNT; k++)
		if (strlen(rsk_rule_keys[k].name) == klen && strncmp(t, rsk_rule_keys[k].name, klen) == 0)
			break;
	if (k == RSK_RK_COUNT)
		return rsk_rule_bad(x, "unknown setting \"%.64s\" (transport, spin_us, buf_size, "
				       "buf_count, inline or connect_timeout_ms)", t);
	if (r->set & (1u << k))
		return rsk_rule_bad(x, "\"%.64s\" is set twice on this line", rsk_rule_keys[k].name);
	if (rsk_rule_value(x, k, eq + 1, &r->val[k]) < 0)
		return -EINVAL;
	r->set |= 1u << k;
	return 0;
}

int rsk_rule_process_wide(const struct rsk_rule *r)
{
	return r->role == RSK_ROLE_ANY && r->prefix == 0 && r->port_lo == 0 && r->port_hi == 65535;
}

/* Split @line (modified) into at most @max whitespace-separated tokens; -1 if more. */
static int rsk_rule_split(char *line, char **tok, int max)
{
	int n = 0;
	char *p = strtok(line, " \t\r");

	for (; p != NULL; p = strtok(NULL, " \t\r")) {
		if (n == max)
			return -1;
		tok[n++] = p;
	}
	return n;
}

static int rsk_rule_fields(struct rsk_rule_ctx *x, char **tok, int n, struct rsk_rule *r)
{
	int i;

	if (n < 5)
		return rsk_rule_bad(x, "%sexpected PROGRAM ROLE ADDRESS PORTS SETTING...",
				    n == 4 ? "no setting; " : "");
	if (strlen(tok[0]) >= sizeof(r->program))
		return rsk_rule_bad(x, "program glob \"%.64s...\" longer than 63 characters", tok[0]);
	strcpy(r->program, tok[0]);
	if (rsk_rule_role(x, tok[1], r) < 0 || rsk_rule_addr(x, tok[2], r) < 0 ||
	    rsk_rule_ports(x, tok[3], r) < 0)
		return -EINVAL;
	for (i = 4; i < n; i++)
		if (rsk_rule_setting(x, tok[i], r) < 0)
			return -EINVAL;
	if ((r->set & ~(1u << RSK_RK_TRANSPORT)) && !rsk_rule_process_wide(r))
		return rsk_rule_bad(x, "%stunables apply to the whole process: give them on a rule "
				       "whose ROLE, ADDRESS and PORTS are *", "");
	return 0;
}

/* One line (without its newline). 1 if it made a rule, 0 if empty, -EINVAL if bad. */
static int rsk_rule_line(struct rsk_rule_ctx *x, const char *s, size_t len, struct rsk_rules *rs)
{
	char buf[RSK_RULE_LINE_MAX + 1], *hash, *tok[RSK_RULE_TOKENS + 1];
	struct rsk_rule r;
	int n;

	if (len > RSK_RULE_LINE_MAX)
		return rsk_rule_bad(x, "line longer than %s characters", "1024");
	memcpy(buf, s, len);
	buf[len] = '\0';
	if ((hash = strchr(buf, '#')) != NULL)
		*hash = '\0';
	n = rsk_rule_split(buf, tok, RSK_RULE_TOKENS);
	if (n == 0)
		return 0;
	if (n < 0)
		return rsk_rule_bad(x, "more than %s fields", "10");
	memset(&r, 0, sizeof(r));
	r.line = x->line;
	if (rsk_rule_fields(x, tok, n, &r) < 0)
		return -EINVAL;
	if (rs->n == RSK_RULES_MAX)
		return rsk_rule_bad(x, "more than %s rules", "64");
	rs->r[rs->n++] = r;
	return 1;
}

static void rsk_rule_report(struct rsk_rule_ctx *x)
{
	char msg[512];

	if (x->err == NULL)
		return;
	snprintf(msg, sizeof(msg), "%s:%u: %s; line ignored", x->file, x->line, x->why);
	x->err(msg, x->arg);
}

int rsk_rules_parse(struct rsk_rules *rs, const char *text, size_t len, const char *file,
		    rsk_rules_err_fn err, void *arg)
{
	struct rsk_rule_ctx x = {.file = file ? file : "rules", .err = err, .arg = arg};
	const char *p = text, *end = text + len, *nl;
	int bad = 0;

	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		x.line++;
		if (memchr(p, '\0', (size_t)(nl - p)) != NULL)
			rsk_rule_bad(&x, "%sNUL byte in the line", "");
		else if (rsk_rule_line(&x, p, (size_t)(nl - p), rs) >= 0)
			continue;
		bad++;
		rsk_rule_report(&x);
	}
	return bad;
}

int rsk_rules_load(struct rsk_rules *rs, const char *path, rsk_rules_err_fn err, void *arg)
{
	static char buf[RSK_RULES_FILE_MAX + 1];
	size_t len = 0;
	ssize_t n = 1;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -errno;
	while (len <= RSK_RULES_FILE_MAX && (n > 0 || n == -EINTR)) {
		n = rsk_sys_read(fd, buf + len, RSK_RULES_FILE_MAX + 1 - len);
		if (n > 0)
			len += (size_t)n;
	}
	rc = n < 0 ? (int)n : 0;
	(void)rsk_sys_close(fd);
	if (rc == 0 && len > RSK_RULES_FILE_MAX)
		rc = -EFBIG;
	return rc < 0 ? rc : rsk_rules_parse(rs, buf, len, path, err, arg);
}

static int rsk_rule_addr_match(const struct rsk_rule *r, const uint8_t *a)
{
	unsigned int full = r->prefix / 8, rest = r->prefix % 8;

	if (memcmp(r->addr, a, full) != 0)
		return 0;
	return rest == 0 || ((r->addr[full] ^ a[full]) & (0xff << (8 - rest))) == 0;
}

/* @sa as IPv6 bytes (IPv4 mapped) and its port. -1 for other families. */
static int rsk_rule_key(const struct sockaddr *sa, uint8_t a[16], unsigned int *port)
{
	const struct sockaddr_in *s4 = (const void *)sa;
	const struct sockaddr_in6 *s6 = (const void *)sa;

	memset(a, 0, 16);
	if (sa->sa_family == AF_INET) {
		a[10] = a[11] = 0xff;
		memcpy(a + 12, &s4->sin_addr, 4);
		*port = ntohs(s4->sin_port);
		return 0;
	}
	if (sa->sa_family != AF_INET6)
		return -1;
	memcpy(a, &s6->sin6_addr, 16);
	*port = ntohs(s6->sin6_port);
	return 0;
}

const struct rsk_rule *rsk_rules_match(const struct rsk_rules *rs, const char *program, int role,
				       const struct sockaddr *addr)
{
	const struct rsk_rule *r;
	unsigned int i, port;
	uint8_t a[16];

	if (rsk_rule_key(addr, a, &port) < 0)
		return NULL;
	for (i = 0; i < rs->n; i++) {
		r = &rs->r[i];
		if ((r->role == RSK_ROLE_ANY || r->role == role) && port >= r->port_lo &&
		    port <= r->port_hi && rsk_rule_addr_match(r, a) &&
		    (program == NULL || fnmatch(r->program, program, 0) == 0))
			return r;
	}
	return NULL;
}

void rsk_rules_filter(struct rsk_rules *rs, const char *program)
{
	unsigned int i, k = 0;

	for (i = 0; i < rs->n; i++)
		if (fnmatch(rs->r[i].program, program, 0) == 0)
			rs->r[k++] = rs->r[i];
	rs->n = k;
}
