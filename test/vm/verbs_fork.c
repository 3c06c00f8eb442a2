/*
 * fork() with a verbs connection open (run preloaded in the Soft-RoCE guest, see
 * guest/verbs.sh): what a child gets for an inherited verbs socket, and that the parent's
 * connection survives the child's use, close and exit -- the redis BGSAVE case.
 *
 *   verbs_fork ADDR PORT
 *
 * The server serves fork-per-connection: it accepts (must be verbs), forks a child that
 * echoes everything until EOF, and closes its own copy unused. The connection had not moved
 * a byte at the fork, so the library relays it (relay.c) and the child's socket works.
 * The client connects (must be verbs), echoes, and then, as redis does for BGSAVE, forks a
 * child that finds recv/send failing with ENOTCONN on the inherited socket (it had moved
 * bytes: not relayed), closes it and leaves through exit() (library destructors run), then a
 * second that just _exit()s; after each the client echoes 100 more messages on the same
 * socket. The server's child must see every byte and then EOF. Prints "verbs_fork: ok".
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/rdmasock.h"

#define die(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "verbs_fork: FAIL: " __VA_ARGS__);                                 \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

/* One message out and back; on failure, why goes to *why (for the message only). */
static int echo_once(int fd, int i, const char **why)
{
	char out[32], in[32];
	int n = snprintf(out, sizeof(out), "message %d", i), got = 0, k;

	if (write(fd, out, (size_t)n) != n) {
		*why = "write";
		return -1;
	}
	while (got < n) {
		k = (int)read(fd, in + got, (size_t)(n - got));
		if (k <= 0) {
			*why = k == 0 ? "read: EOF" : "read";
			return -1;
		}
		got += k;
	}
	if (memcmp(in, out, (size_t)n) == 0)
		return 0;
	fprintf(stderr, "verbs_fork: sent \"%.*s\", got:", n, out);
	for (k = 0; k < n; k++)
		fprintf(stderr, " %02x", (unsigned char)in[k]);
	fputc('\n', stderr);
	*why = "the echo differs";
	return -1;
}

static void child_checks(int fd, int use_exit);

static int transport_of(int fd)
{
	int (*transport)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");

	return transport != NULL ? transport(fd) : -1;
}

static void wait_ok(pid_t pid, const char *who)
{
	int status;

	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("%s failed", who);
}

static void server(int lfd)
{
	char buf[4096];
	ssize_t k;
	pid_t kid;
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		die("accept: %s", strerror(errno));
	if (transport_of(fd) != RDMASOCK_TRANSPORT_VERBS)
		die("accepted connection is not on verbs (%d)", transport_of(fd));
	kid = fork(); /* fork-per-connection: the child serves, we close our copy */
	if (kid == 0) {
		close(lfd);
		while ((k = read(fd, buf, sizeof(buf))) > 0)
			if (write(fd, buf, (size_t)k) != k)
				die("server's child write: %s", strerror(errno));
		if (k < 0)
			die("server's child read: %s", strerror(errno));
		exit(0);
	}
	close(fd);
	wait_ok(kid, "server's child");
}

static void child_checks(int fd, int use_exit)
{
	char c;

	if (read(fd, &c, 1) != -1 || errno != ENOTCONN)
		die("child: read on an inherited verbs socket: want ENOTCONN, got %s",
		    strerror(errno));
	if (write(fd, "x", 1) != -1 || errno != ENOTCONN)
		die("child: write on an inherited verbs socket: want ENOTCONN, got %s",
		    strerror(errno));
	close(fd);
	if (use_exit)
		exit(0);
	_exit(0);
}

static void client(const struct sockaddr_in *sa)
{
	int fd, i, round;
	const char *why = "";
	pid_t kid;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		die("connect: %s", strerror(errno));
	if (transport_of(fd) != RDMASOCK_TRANSPORT_VERBS)
		die("the connection is not on verbs (transport %d)", transport_of(fd));
	for (i = 0; i < 10; i++)
		if (echo_once(fd, i, &why) < 0)
			die("echo %d before fork: %s (%s)", i, why, strerror(errno));
	for (round = 0; round < 2; round++) {
		kid = fork();
		if (kid == 0)
			child_checks(fd, round == 0);
		wait_ok(kid, round == 0 ? "client's child (exit)" : "client's child (_exit)");
		for (i = 0; i < 100; i++)
			if (echo_once(fd, 1000 * (round + 1) + i, &why) < 0)
				die("echo after child %d exited: %s (%s)", round, why, strerror(errno));
	}
	close(fd);
	exit(0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int lfd;
	pid_t cli;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
		die("usage: verbs_fork ADDR PORT");
	sa.sin_port = htons((uint16_t)atoi(argv[2]));
	alarm(120);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0)
		die("listen: %s", strerror(errno));
	cli = fork();
	if (cli == 0) {
		close(lfd);
		client(&sa);
	}
	server(lfd);
	wait_ok(cli, "client");
	printf("verbs_fork: ok\n");
	return 0;
}
