/*
 * Role: the non-blocking connect an event-loop program (Java NIO, libuv, redis replicas)
 * makes, as a stand-alone client for the Soft-RoCE guest's scenario suite (guest/verbs.sh).
 *
 *   nbconnect ADDR PORT [BYTES]
 *
 * Steps, each checked: fcntl(O_NONBLOCK) on a fresh socket; connect() returns -1/EINPROGRESS
 * (an at-once success is a failure here: the asynchronous path is what is under test);
 * poll(POLLOUT) reports writable within 10 s; getsockopt(SO_ERROR) is 0; getpeername() is
 * ADDR:PORT; then BYTES (default 1 MiB) of a known pattern go to an echo server and come back
 * byte-exact through a poll() loop on the still non-blocking socket, and shutdown(SHUT_WR)
 * gives EOF after the echo. Prints "nbconnect: connect Ts, echo B bytes in Ts: ok"; exit 0
 * only then. Uses nothing but poll/fcntl/getsockopt, which rsocket's preload also covers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

static int fail(const char *what, int err)
{
	fprintf(stderr, "nbconnect: %s: %s\n", what, err ? strerror(err) : "failed");
	return 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Byte @off of the stream: position dependent, so a lost or repeated chunk shows. */
static unsigned char pat(uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	return (unsigned char)(x >> ((off & 7) * 8));
}

/* Connect asynchronously; 0 and the connected fd in *@out, or 1 after a message. */
static int nb_connect(const struct sockaddr_in *sa, int *out, double *secs)
{
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	struct pollfd p;
	double t0 = now();
	int fd, fl, err = 0, n;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail("socket", errno);
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return fail("fcntl O_NONBLOCK", errno);
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
		return fail("connect completed at once, want EINPROGRESS", 0);
	if (errno != EINPROGRESS)
		return fail("connect, want EINPROGRESS", errno);
	p.fd = fd;
	p.events = POLLOUT;
	do
		n = poll(&p, 1, 10000);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return fail("poll", errno);
	if (n == 0)
		return fail("not writable within 10 s of the connect", 0);
	len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return fail("getsockopt SO_ERROR", errno);
	if (err != 0)
		return fail("SO_ERROR after POLLOUT", err);
	len = sizeof(peer);
	if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
		return fail("getpeername", errno);
	if (peer.sin_addr.s_addr != sa->sin_addr.s_addr || peer.sin_port != sa->sin_port)
		return fail("getpeername is not the address connected to", 0);
	*secs = now() - t0;
	*out = fd;
	return 0;
}

/* Send @n pattern bytes and read the echo back, both through one poll loop. */
static int echo(int fd, uint64_t n)
{
	static unsigned char out[CHUNK], in[CHUNK];
	uint64_t sent = 0, rcvd = 0, i;
	struct pollfd p;
	ssize_t r;
	size_t len;
	int shut = 0;

	for (;;) {
		if (sent == n && !shut) {
			if (shutdown(fd, SHUT_WR) < 0)
				return fail("shutdown", errno);
			shut = 1;
		}
		p.fd = fd;
		p.events = POLLIN | (sent < n ? POLLOUT : 0);
		if (poll(&p, 1, 10000) <= 0) {
			fprintf(stderr, "nbconnect: nothing for 10 s (sent %llu, echoed %llu)\n",
				(unsigned long long)sent, (unsigned long long)rcvd);
			return 1;
		}
		if (sent < n && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			len = n - sent < CHUNK ? (size_t)(n - sent) : CHUNK;
			for (i = 0; i < len; i++)
				out[i] = pat(sent + i);
			r = write(fd, out, len);
			if (r < 0 && errno != EAGAIN)
				return fail("write", errno);
			if (r > 0)
				sent += (uint64_t)r;
		}
		if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
			r = read(fd, in, sizeof(in));
			if (r < 0 && errno != EAGAIN)
				return fail("read", errno);
			if (r == 0)
				break;
			for (i = 0; r > 0 && i < (uint64_t)r; i++)
				if (in[i] != pat(rcvd + i)) {
					fprintf(stderr, "nbconnect: echo byte %llu differs\n",
						(unsigned long long)(rcvd + i));
					return 1;
				}
			if (r > 0)
				rcvd += (uint64_t)r;
		}
	}
	if (rcvd != n) {
		fprintf(stderr, "nbconnect: EOF after %llu of %llu echoed bytes\n",
			(unsigned long long)rcvd, (unsigned long long)n);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	uint64_t n = 1 << 20;
	double tc = 0, t0;
	int fd = -1;

	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: nbconnect ADDR PORT [BYTES]\n");
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
		return fail("bad address", 0);
	if (argc == 4)
		n = strtoull(argv[3], NULL, 10);
	alarm(60);
	if (nb_connect(&sa, &fd, &tc) != 0)
		return 1;
	t0 = now();
	if (echo(fd, n) != 0)
		return 1;
	close(fd);
	printf("nbconnect: connect %.3fs, echo %llu bytes in %.3fs: ok\n", tc,
	       (unsigned long long)n, now() - t0);
	return 0;
}
