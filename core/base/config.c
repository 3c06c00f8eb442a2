/*
 * RDMASOCK_* environment parsing (see config.h). Strict: a value is either fully valid or
 * rejected with a message naming the variable, the value and what was expected.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "config.h"
#include "rdmasock.h"

struct rsk_config rsk_config;

struct rsk_config_ctx {
	const char *(*get)(const char *name);
	void (*err)(const char *msg, void *arg);
	void *arg;
	int bad;
};

static const char *const rsk_mode_names[] = {"auto", "kernel", "shm", "verbs"};
static const char *const rsk_level_names[] = {"error", "warn", "info", "debug"};
static const char *const rsk_tcp_first_names[] = {"auto", "on", "off", "learn"};
static const char *const rsk_coalesce_names[] = {"safe", "always"};
static const char *const rsk_bearer_names[] = {"none", "unix", "face", "auto"};

void rsk_config_defaults(struct rsk_config *c)
{
	memset(c, 0, sizeof(*c));
	c->mode = RSK_MODE_AUTO;
	c->log_level = RSK_LOG_WARN;
	c->spin_us = RSK_DEFAULT_SPIN_US;
	c->buf_size = RSK_DEFAULT_BUF_SIZE;
	c->buf_count = RSK_DEFAULT_BUF_COUNT;
	c->inline_size = RSK_DEFAULT_INLINE;
	c->connect_timeout_ms = RSK_DEFAULT_CONNECT_TIMEOUT_MS;
	c->tcp_first = RSK_TCP_FIRST_AUTO;
	c->upgrade_bytes = RSK_DEFAULT_UPGRADE_BYTES;
	c->upgrade_ms = RSK_DEFAULT_UPGRADE_MS;
	c->orphan_ms = RSK_DEFAULT_ORPHAN_MS;
	c->fastwait = 1; /* eager tokens (0) stay for comparison and as a way out */
	c->bearer = RSK_BEARER_AUTO; /* short same-host connections: cheaper than TCP's */
}

enum rsk_start rsk_config_start(const struct rsk_config *c, int slow_setup)
{
	if (c->tcp_first == RSK_TCP_FIRST_ON)
		return RSK_START_TCP;
	if (c->tcp_first == RSK_TCP_FIRST_OFF)
		return RSK_START_DIRECT;
	if (slow_setup)
		return RSK_START_TCP; /* a verbs setup costs far more than a short connection earns */
	return RSK_START_LEARN; /* shm (auto or learn): TCP first where connections end short */
}

const char *rsk_mode_name(enum rsk_mode mode)
{
	return (unsigned int)mode < RSK_ARRAY_SIZE(rsk_mode_names) ? rsk_mode_names[mode] : "?";
}

static void rsk_config_reject(struct rsk_config_ctx *ctx, const char *name, const char *val,
			      const char *expected)
{
	char msg[512];

	ctx->bad++;
	if (ctx->err == NULL)
		return;
	snprintf(msg, sizeof(msg), "invalid %s=\"%.128s\": expected %s; using the default", name,
		 val, expected);
	ctx->err(msg, ctx->arg);
}

static int rsk_config_enum(struct rsk_config_ctx *ctx, const char *name,
			   const char *const *names, unsigned int n, const char *expected, int *out)
{
	const char *val = ctx->get(name);
	unsigned int i;

	if (val == NULL)
		return 0;
	for (i = 0; i < n; i++) {
		if (strcasecmp(val, names[i]) == 0) {
			*out = (int)i;
			return 0;
		}
	}
	rsk_config_reject(ctx, name, val, expected);
	return -EINVAL;
}

/* Parse a decimal in [lo, hi]; rejects empty strings, signs, trailing junk and overflow. */
int rsk_parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static void rsk_config_uint(struct rsk_config_ctx *ctx, const char *name, unsigned long lo,
			    unsigned long hi, int pow2, unsigned int *out)
{
	const char *val = ctx->get(name);
	unsigned long v;
	char expected[96];

	if (val == NULL)
		return;
	if (rsk_parse_uint(val, lo, hi, &v) == 0 && (!pow2 || (v & (v - 1)) == 0)) {
		*out = (unsigned int)v;
		return;
	}
	snprintf(expected, sizeof(expected), "%san integer from %lu to %lu",
		 pow2 ? "a power of two, " : "", lo, hi);
	rsk_config_reject(ctx, name, val, expected);
}

static void rsk_config_path(struct rsk_config_ctx *ctx, const char *name, char *out, size_t size)
{
	const char *val = ctx->get(name);

	if (val == NULL)
		return;
	if (*val == '\0' || strlen(val) >= size) {
		rsk_config_reject(ctx, name, val, "a non-empty path shorter than PATH_MAX");
		return;
	}
	memcpy(out, val, strlen(val) + 1);
}

/* One "N" or "N-M" item of a port list. */
int rsk_parse_port_item(const char *s, size_t len, struct rsk_port_range *r)
{
	char buf[16], *dash;
	unsigned long lo, hi;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	dash = strchr(buf, '-');
	if (dash != NULL)
		*dash = '\0';
	if (rsk_parse_uint(buf, 1, 65535, &lo) < 0)
		return -EINVAL;
	hi = lo;
	if (dash != NULL && rsk_parse_uint(dash + 1, lo, 65535, &hi) < 0)
		return -EINVAL;
	r->lo = (uint16_t)lo;
	r->hi = (uint16_t)hi;
	return 0;
}

static void rsk_config_ports(struct rsk_config_ctx *ctx, const char *name,
			     struct rsk_port_range *out, unsigned int *n_out)
{
	struct rsk_port_range tmp[RSK_CONFIG_MAX_RULES];
	const char *val = ctx->get(name), *p, *comma;
	unsigned int n = 0;
	size_t len;

	if (val == NULL)
		return;
	for (p = val;; p = comma + 1) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		if (n == RSK_CONFIG_MAX_RULES || rsk_parse_port_item(p, len, &tmp[n]) < 0) {
			rsk_config_reject(ctx, name, val,
					  "a comma-separated list of at most 32 ports or ranges "
					  "like 6379,8000-8100");
			return;
		}
		n++;
		if (comma == NULL)
			break;
	}
	memcpy(out, tmp, n * sizeof(tmp[0]));
	*n_out = n;
}

static void rsk_config_device(struct rsk_config_ctx *ctx, struct rsk_config *c)
{
	const char *val = ctx->get(RDMASOCK_ENV_DEVICE);

	if (val == NULL)
		return;
	if (*val == '\0' || strlen(val) >= sizeof(c->device)) {
		rsk_config_reject(ctx, RDMASOCK_ENV_DEVICE, val, "an RDMA device name like mlx5_0");
		return;
	}
	memcpy(c->device, val, strlen(val) + 1);
}

int rsk_config_parse(struct rsk_config *c, const char *(*get)(const char *name),
		     void (*err)(const char *msg, void *arg), void *arg)
{
	struct rsk_config_ctx ctx = {.get = get, .err = err, .arg = arg};
	int v;

	rsk_config_defaults(c);
	v = (int)c->mode;
	rsk_config_enum(&ctx, RDMASOCK_ENV_TRANSPORT, rsk_mode_names, 4, "auto, kernel, shm or verbs",
			&v);
	c->mode = (enum rsk_mode)v;
	v = (int)c->log_level;
	rsk_config_enum(&ctx, RDMASOCK_ENV_LOG, rsk_level_names, 4, "error, warn, info or debug",
			&v);
	c->log_level = (enum rsk_log_level)v;
	rsk_config_path(&ctx, RDMASOCK_ENV_LOG_FILE, c->log_file, sizeof(c->log_file));
	rsk_config_path(&ctx, RDMASOCK_ENV_STATS, c->stats_file, sizeof(c->stats_file));
	rsk_config_ports(&ctx, RDMASOCK_ENV_INCLUDE_PORTS, c->include, &c->n_include);
	rsk_config_ports(&ctx, RDMASOCK_ENV_EXCLUDE_PORTS, c->exclude, &c->n_exclude);
	rsk_config_uint(&ctx, RDMASOCK_ENV_SPIN_US, 0, 1000000, 0, &c->spin_us);
	rsk_config_uint(&ctx, RDMASOCK_ENV_BUF_SIZE, 1024, 4u << 20, 1, &c->buf_size);
	rsk_config_uint(&ctx, RDMASOCK_ENV_BUF_COUNT, 6, 1024, 0, &c->buf_count);
	rsk_config_uint(&ctx, RDMASOCK_ENV_INLINE, 0, 1024, 0, &c->inline_size);
	rsk_config_uint(&ctx, RDMASOCK_ENV_CONNECT_TIMEOUT_MS, 1, 60000, 0,
			&c->connect_timeout_ms);
	rsk_config_device(&ctx, c);
	v = (int)c->tcp_first;
	rsk_config_enum(&ctx, RDMASOCK_ENV_TCP_FIRST, rsk_tcp_first_names, 4, "auto, on, off or learn",
			&v);
	c->tcp_first = (enum rsk_tcp_first)v;
	rsk_config_uint(&ctx, RDMASOCK_ENV_UPGRADE_BYTES, 0, 1u << 30, 0, &c->upgrade_bytes);
	rsk_config_uint(&ctx, RDMASOCK_ENV_UPGRADE_MS, 0, 3600000, 0, &c->upgrade_ms);
	rsk_config_uint(&ctx, RDMASOCK_ENV_FASTWAIT, 0, 1, 0, &c->fastwait);
	rsk_config_uint(&ctx, RDMASOCK_ENV_ORPHAN_MS, 1, 3600000, 0, &c->orphan_ms);
	v = (int)c->coalesce;
	rsk_config_enum(&ctx, RDMASOCK_ENV_COALESCE, rsk_coalesce_names, 2, "safe or always", &v);
	c->coalesce = (enum rsk_coalesce)v;
	v = (int)c->bearer;
	rsk_config_enum(&ctx, RDMASOCK_ENV_BEARER, rsk_bearer_names, 4, "none, unix, face or auto", &v);
	c->bearer = (enum rsk_bearer)v;
	return ctx.bad;
}

static int rsk_port_in(const struct rsk_port_range *r, unsigned int n, uint16_t port)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (port >= r[i].lo && port <= r[i].hi)
			return 1;
	return 0;
}

int rsk_config_port_allowed(const struct rsk_config *c, uint16_t port)
{
	if (c->n_include > 0 && !rsk_port_in(c->include, c->n_include, port))
		return 0;
	return !rsk_port_in(c->exclude, c->n_exclude, port);
}
