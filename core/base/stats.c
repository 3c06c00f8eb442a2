/*
 * Counters and their JSON rendering. The key names are a public interface (README,
 * tests and users parse them): change them only with a version bump.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sys.h"
#include "stats.h"

struct rdmasock_stats rsk_stats;

static const char *const rsk_transport_names[RDMASOCK_TRANSPORT_COUNT] = {"kernel", "shm",
									    "verbs"};
static const char *const rsk_fallback_names[RDMASOCK_FB_COUNT] = {
	[RDMASOCK_FB_POLICY] = "policy",
	[RDMASOCK_FB_NO_PEER] = "no_peer",
	[RDMASOCK_FB_NOT_LOCAL] = "not_local",
	[RDMASOCK_FB_NO_DEVICE] = "no_device",
	[RDMASOCK_FB_NO_ROUTE] = "no_route",
	[RDMASOCK_FB_REFUSED] = "refused",
	[RDMASOCK_FB_TIMEOUT] = "timeout",
	[RDMASOCK_FB_MEMLOCK] = "memlock",
	[RDMASOCK_FB_RESOURCES] = "resources",
	[RDMASOCK_FB_HANDSHAKE] = "handshake",
	[RDMASOCK_FB_UNSUPPORTED] = "unsupported",
	[RDMASOCK_FB_NEGATIVE_CACHE] = "negative_cache",
	[RDMASOCK_FB_FD_LIMIT] = "fd_limit",
	[RDMASOCK_FB_TCP_FIRST] = "tcp_first",
	[RDMASOCK_FB_OTHER_USER] = "other_user",
	[RDMASOCK_FB_SETUP_LIMIT] = "setup_limit",
	[RDMASOCK_FB_VERSION] = "version",
};

/* Copied at start: programs like nginx overwrite argv (and with it the libc name). */
static char rsk_program[64];

void rsk_stats_set_program(const char *name)
{
	snprintf(rsk_program, sizeof(rsk_program), "%s", name ? name : "");
}

const char *rsk_stats_program(void)
{
	return rsk_program[0] ? rsk_program : program_invocation_short_name;
}

void rsk_stats_fallback(enum rdmasock_fallback why)
{
	rsk_counter_add(&rsk_stats.fallbacks[why], 1);
}

const char *rsk_transport_name(enum rdmasock_transport t)
{
	return (unsigned int)t < RDMASOCK_TRANSPORT_COUNT ? rsk_transport_names[t] : "?";
}

const char *rsk_fallback_name(enum rdmasock_fallback why)
{
	return (unsigned int)why < RDMASOCK_FB_COUNT ? rsk_fallback_names[why] : "?";
}

void rsk_stats_snapshot(struct rdmasock_stats *out)
{
	const uint64_t *src = (const uint64_t *)&rsk_stats;
	uint64_t *dst = (uint64_t *)out;
	size_t i;

	for (i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = rsk_counter_read(&src[i]);
}

_Static_assert(RDMASOCK_FB_COUNT <= RDMASOCK_FB_CAPACITY, "fallbacks[] is full: see rdmasock.h");

int rsk_stats_copy_out(const struct rdmasock_stats *s, void *out, size_t size)
{
	size_t wc = offsetof(struct rdmasock_stats, writes_coalesced);
	size_t n = size < sizeof(*s) ? size : sizeof(*s);

	if (out == NULL || size < RDMASOCK_STATS_MIN_SIZE || size % sizeof(uint64_t) != 0)
		return -EINVAL;
	if (size > RDMASOCK_STATS_MIN_SIZE && size < wc) {
		/* a header from before the fixed capacity: its reasons, then writes_coalesced */
		memcpy(out, s, size - sizeof(uint64_t));
		memcpy((char *)out + size - sizeof(uint64_t), &s->writes_coalesced,
		       sizeof(uint64_t));
		return 0;
	}
	memcpy(out, s, n);
	memset((char *)out + n, 0, size - n);
	return 0;
}

void rsk_stats_reset(void)
{
	uint64_t *p = (uint64_t *)&rsk_stats;
	size_t i;

	for (i = 0; i < sizeof(rsk_stats) / sizeof(uint64_t); i++)
		__atomic_store_n(&p[i], 0, __ATOMIC_RELAXED);
}

struct rsk_buf {
	char *p;
	size_t size, len;
	int overflow;
};

static void rsk_buf_printf(struct rsk_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void rsk_buf_printf(struct rsk_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b->p + b->len, b->size > b->len ? b->size - b->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0 || b->len + (size_t)n >= b->size)
		b->overflow = 1;
	else
		b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at @s, 0 if it is not one. */
static int rsk_utf8_len(const unsigned char *s)
{
	int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	int i;

	if (s[0] < 0x80)
		return 1;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* JSON string escaping for the program name (it can hold anything the user named it):
 * control characters are escaped, valid UTF-8 passes, stray bytes become '?'. */
static void rsk_buf_json_str(struct rsk_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	int n;

	rsk_buf_printf(b, "\"");
	while (*s) {
		n = rsk_utf8_len(s);
		if (*s == '"' || *s == '\\')
			rsk_buf_printf(b, "\\%c", *s);
		else if (*s < 0x20)
			rsk_buf_printf(b, "\\u%04x", *s);
		else if (n == 0)
			rsk_buf_printf(b, "?");
		else
			rsk_buf_printf(b, "%.*s", n, (const char *)s);
		s += n ? n : 1;
	}
	rsk_buf_printf(b, "\"");
}

static void rsk_buf_per_transport(struct rsk_buf *b, const char *key, const uint64_t *v)
{
	int t;

	rsk_buf_printf(b, ",\"%s\":{", key);
	for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++)
		rsk_buf_printf(b, "%s\"%s\":%llu", t ? "," : "", rsk_transport_names[t],
			       (unsigned long long)v[t]);
	rsk_buf_printf(b, "}");
}

int rsk_stats_format(const struct rdmasock_stats *s, int pid, const char *program, char *buf,
		     size_t size)
{
	struct rsk_buf b = {.p = buf, .size = size};
	int r;

	rsk_buf_printf(&b, "{\"pid\":%d,\"program\":", pid);
	rsk_buf_json_str(&b, program ? program : "");
	rsk_buf_per_transport(&b, "connections", s->connections);
	rsk_buf_per_transport(&b, "bytes_sent", s->bytes_sent);
	rsk_buf_per_transport(&b, "bytes_received", s->bytes_received);
	rsk_buf_per_transport(&b, "messages_sent", s->messages_sent);
	rsk_buf_per_transport(&b, "messages_received", s->messages_received);
	rsk_buf_printf(&b, ",\"credit_stalls\":%llu,\"fallbacks\":{",
		       (unsigned long long)s->credit_stalls);
	for (r = 0; r < RDMASOCK_FB_COUNT; r++)
		rsk_buf_printf(&b, "%s\"%s\":%llu", r ? "," : "", rsk_fallback_names[r],
			       (unsigned long long)s->fallbacks[r]);
	rsk_buf_printf(&b, "},\"writes_coalesced\":%llu", (unsigned long long)s->writes_coalesced);
	rsk_buf_printf(&b, ",\"credit_messages\":%llu", (unsigned long long)s->credit_messages);
	rsk_buf_printf(&b, ",\"listener_faces\":%llu", (unsigned long long)s->listener_faces);
	rsk_buf_printf(&b, ",\"bearer_connections\":%llu}",
		       (unsigned long long)s->bearer_connections);
	return b.overflow ? -ENOSPC : (int)b.len;
}

int rsk_stats_append(const char *path, const struct rdmasock_stats *s)
{
	char line[4096];
	int fd, n, err = 0;

	n = rsk_stats_format(s, (int)getpid(), rsk_stats_program(), line, sizeof(line) - 1);
	if (n < 0)
		return n;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (rsk_sys_write(fd, line, (size_t)n) != n)
		err = -EIO;
	(void)rsk_sys_close(fd);
	return err;
}
