/*
 * Micro-program for bench/passthrough.sh: K x (send 64 B + recv 64 B) over a connected pair,
 * run under valgrind --tool=callgrind --toggle-collect=bench_loop with and without
 * LD_PRELOAD=librdmasock.so, so the instructions the library adds per pass-through call can
 * be read off. Not part of the CMake build: the script compiles it with cc -O2.
 * Usage: callgrind_io KIND [K]   (prints "calls send=N recv=M wait=W" on success)
 *   tcp, unix      a loopback TCP pair / an AF_UNIX socketpair: send + recv per round
 *   poll, select   the TCP pair, and between send and recv a poll() / select() for POLLIN on
 *                  the receiving end with no timeout (ready at once: the wrapper's cost only)
 *   pollmixed      as poll on the AF_UNIX pair while the process also holds the TCP pair
 *                  (which a preloaded library may carry itself: then its fd-classifying
 *                  poll path runs for a set of kernel fds only)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG 64

static unsigned long n_send, n_recv, n_wait;
static int wait_kind; /* 0 none, 1 poll, 2 select */

static void die(const char *what)
{
	fprintf(stderr, "callgrind_io: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A connected loopback TCP pair: listen on 127.0.0.1:0, connect, accept. */
static void tcp_pair(int sv[2])
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int one = 1, l;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		die("socket");
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0)
		die("bind/listen");
	if (getsockname(l, (struct sockaddr *)&a, &len) < 0)
		die("getsockname");
	sv[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (sv[0] < 0)
		die("socket");
	if (connect(sv[0], (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect");
	sv[1] = accept(l, NULL, NULL);
	if (sv[1] < 0)
		die("accept");
	setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	close(l);
}

/* One send of MSG bytes, then recv until those MSG bytes are back (counting every call). */
static void one_round(int tx, int rx, char *buf)
{
	size_t got = 0;
	ssize_t n;

	n = send(tx, buf, MSG, 0);
	n_send++;
	if (n != MSG)
		die("send");
	if (wait_kind == 1) {
		struct pollfd p = {.fd = rx, .events = POLLIN};

		n_wait++;
		if (poll(&p, 1, -1) != 1)
			die("poll");
	} else if (wait_kind == 2) {
		fd_set r;

		FD_ZERO(&r);
		FD_SET(rx, &r);
		n_wait++;
		if (select(rx + 1, &r, NULL, NULL, NULL) != 1)
			die("select");
	}
	while (got < MSG) {
		n = recv(rx, buf + got, MSG - got, 0);
		n_recv++;
		if (n <= 0)
			die("recv");
		got += (size_t)n;
	}
}

/* The only function callgrind collects (--toggle-collect=bench_loop). */
__attribute__((noinline, noclone)) void bench_loop(int tx, int rx, char *buf, unsigned long k)
{
	unsigned long i;

	for (i = 0; i < k; i++)
		one_round(tx, rx, buf);
}

int main(int argc, char **argv)
{
	static char buf[MSG];
	unsigned long k = 100000, warm = 100;
	int sv[2], held[2] = {-1, -1};
	const char *kind = argc > 1 ? argv[1] : "";

	if (strcmp(kind, "tcp") != 0 && strcmp(kind, "unix") != 0 && strcmp(kind, "poll") != 0 &&
	    strcmp(kind, "select") != 0 && strcmp(kind, "pollmixed") != 0) {
		fprintf(stderr, "usage: %s tcp|unix|poll|select|pollmixed [K]\n", argv[0]);
		return 2;
	}
	if (argc > 2)
		k = strtoul(argv[2], NULL, 10);
	wait_kind = strcmp(kind, "select") == 0 ? 2 : strncmp(kind, "poll", 4) == 0 ? 1 : 0;
	if (strcmp(kind, "pollmixed") == 0) {
		tcp_pair(held);
		if (send(held[0], "x", 1, 0) != 1 || recv(held[1], buf, 1, 0) != 1)
			die("held pair"); /* used once: a library carrying it has set it up */
	}
	if (strcmp(kind, "unix") == 0 || strcmp(kind, "pollmixed") == 0) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
			die("socketpair");
	} else {
		tcp_pair(sv);
	}
	memset(buf, 'x', sizeof(buf));
	/* Warm-up outside the collected function: first-call binding, page faults. */
	for (unsigned long i = 0; i < warm; i++)
		one_round(sv[0], sv[1], buf);
	n_send = n_recv = n_wait = 0;
	bench_loop(sv[0], sv[1], buf, k);
	printf("calls send=%lu recv=%lu wait=%lu\n", n_send, n_recv, n_wait);
	close(sv[0]);
	close(sv[1]);
	if (held[0] >= 0) {
		close(held[0]);
		close(held[1]);
	}
	return 0;
}
