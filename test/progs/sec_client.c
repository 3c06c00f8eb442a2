/*
 * Role: the victim of the security tests (test_crossuid.sh, test_offerrace.sh), run
 * preloaded or not; its attackers are sec_peer.
 *
 *   sec_client PORT BYTES [BINDPORT]
 *       An echo client of 127.0.0.1:PORT. With BINDPORT it binds 127.0.0.1:BINDPORT with
 *       SO_REUSEADDR first (so a forger can bind the same port). Sends BYTES of a pattern,
 *       shuts down its sending side, reads the echo back and compares. Prints
 *       "client ok BYTES" (exit 0) or fails.
 */
#include "progs.h"

const char *prog_name = "sec_client";

static int client(int port, size_t bytes, int bindport)
{
	struct sockaddr_in sa = loopback(port), me = loopback(bindport);
	char *out = malloc(bytes), *in = malloc(bytes);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	ssize_t got;
	size_t i;

	if (out == NULL || in == NULL || fd < 0)
		die("setup: %s", strerror(errno));
	for (i = 0; i < bytes; i++)
		out[i] = (char)(mix64(i / 8) >> (8 * (i % 8)));
	if (bindport > 0 &&
	    (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	     bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0))
		die("bind 127.0.0.1:%d: %s", bindport, strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect: %s", strerror(errno));
	if (write_all(fd, out, bytes) < 0)
		die("write: %s", strerror(errno));
	if (shutdown(fd, SHUT_WR) < 0)
		die("shutdown: %s", strerror(errno));
	got = read_full(fd, in, bytes, 0);
	if (got != (ssize_t)bytes)
		die("echo: %zd of %zu bytes (%s)", got, bytes, got < 0 ? strerror(errno) : "EOF");
	if (memcmp(in, out, bytes) != 0)
		die("echo differs from what was sent");
	close(fd);
	free(in);
	free(out);
	printf("client ok %zu\n", bytes);
	return 0;
}

int main(int argc, char **argv)
{
	alarm(CLIENT_TIME_LIMIT);
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: sec_client PORT BYTES [BINDPORT]\n");
		return 2;
	}
	return client(port_arg(argv[1]), (size_t)atol(argv[2]), argc > 3 ? port_arg(argv[3]) : 0);
}
