/*
 * Helpers shared by the test programs (header only): loopback connect, full reads and
 * writes, and the deterministic byte patterns the echo checks compare against. The
 * programs link nothing of librdmasock; they run under LD_PRELOAD.
 */
#ifndef RSK_PROGS_H
#define RSK_PROGS_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Seconds a client may run before SIGALRM ends it (the tests must finish within a minute). */
#define CLIENT_TIME_LIMIT 40

extern const char *prog_name;

static inline void prog_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void prog_msg(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "%s[%d]: ", prog_name, (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

/* Report and leave through exit(): a failing run still writes its stats line. */
#define die(...)                                                                                   \
	do {                                                                                       \
		prog_msg(__VA_ARGS__);                                                             \
		exit(1);                                                                           \
	} while (0)

static inline int port_arg(const char *s)
{
	char *end;
	long p = strtol(s, &end, 10);

	if (*end != '\0' || p <= 0 || p > 65535)
		die("bad port \"%s\"", s);
	return (int)p;
}

/*
 * 127.0.0.1:@port, the address every server binds and every client connects to. Env
 * RSK_TEST_ADDR (IPv4 dotted) replaces 127.0.0.1: the Soft-RoCE guest (test/vm) needs the
 * address of its second rxe device so that the traffic crosses the veth pair.
 */
static inline struct sockaddr_in loopback(int port)
{
	const char *addr = getenv("RSK_TEST_ADDR");
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (addr != NULL && *addr != '\0' && inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		die("bad RSK_TEST_ADDR \"%s\" (want IPv4 dotted)", addr);
	return sa;
}

/* A blocking TCP connection to loopback(@port) (127.0.0.1 by default), or -1 with errno. */
static inline int tcp_connect(int port)
{
	struct sockaddr_in sa = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* A listening TCP socket on loopback(@port), SO_REUSEADDR, with @backlog; dies on failure. */
static inline int tcp_listen(int port, int backlog)
{
	struct sockaddr_in sa = loopback(port);
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind %d: %s", port, strerror(errno));
	if (listen(fd, backlog) < 0)
		die("listen: %s", strerror(errno));
	return fd;
}

/* Write all @n bytes (blocking fd). 0 or -1 with errno. */
static inline int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Read exactly @n bytes in pieces of at most @chunk (0 = no limit), so the peer's stream is
 * consumed through many partial reads. Returns the bytes read (< @n only at EOF) or -1.
 */
static inline ssize_t read_full(int fd, void *buf, size_t n, size_t chunk)
{
	char *p = buf;
	size_t got = 0, want;
	ssize_t r;

	while (got < n) {
		want = n - got;
		if (chunk != 0 && want > chunk)
			want = chunk;
		r = read(fd, p + got, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* splitmix64: the pseudo-random source of sizes and patterns (deterministic per seed). */
static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint64_t rng_next(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return mix64(*state);
}

/* Byte @off of the stream named @seed: cheap, position dependent, differs between streams. */
static inline uint8_t pat_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (seed * 0x100000001b3ull) ^ (off >> 3);

	return (uint8_t)((mix64(x) >> ((off & 7) * 8)) & 0xff);
}

static inline void pat_fill(void *buf, size_t n, uint64_t seed, uint64_t off)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = pat_byte(seed, off + i);
}

/* Index of the first byte of @buf that differs from the pattern, or -1 if all match. */
static inline ssize_t pat_check(const void *buf, size_t n, uint64_t seed, uint64_t off)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != pat_byte(seed, off + i))
			return (ssize_t)i;
	return -1;
}

static inline double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
