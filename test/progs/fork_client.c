/*
 * Role: echo client that checks sockets across fork() and the dup family.
 *
 *   fork_client PORT
 *
 * 1. close in the child: four connections; the child closes two with close() and the other
 *    two with close_range(602, ~0U), makes a connection of its own on one of the numbers
 *    just closed (echo, EOF), then exit(0); afterwards every connection still echoes in
 *    the parent (a child's close must not end the parent's stream).
 * 2. inherited use: the child does an echo round trip on an inherited connection, exit(0);
 *    then the parent does its own round trip on the same connection.
 * 3. dup family: dup, dup2, dup3(O_CLOEXEC), fcntl(F_DUPFD_CLOEXEC) of a connection, each
 *    time closing the previous fd and doing I/O on the new one; close_range(CLOSE_RANGE_
 *    CLOEXEC) keeps the fd open; dup2 onto another live connection's fd makes that fd name
 *    our connection (same local address); dup2(fd, fd) and dup3(fd, fd) behave as in libc.
 * Every connection ends with shutdown(SHUT_WR) and EOF. Prints "fork_client: ... ok".
 * Connections made: 4 + 1 + 2 = 7 by the parent, 1 by the first child.
 */
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "fork_client";

#define NCLOSE 4

static int port;
static uint64_t seq;
static unsigned long round_trips;

static int my_close_range(unsigned int first, unsigned int last, int flags)
{
	return close_range(first, last, flags);
}

/* One echo round trip of a fresh pattern on @fd (0 = ok). */
static int round_trip(int fd, size_t len)
{
	static char out[32768], in[32768];
	uint64_t s = ++seq;
	ssize_t r;

	if (len > sizeof(out))
		len = sizeof(out);
	pat_fill(out, len, s, 0);
	if (write_all(fd, out, len) < 0)
		return -1;
	r = read_full(fd, in, len, 1000);
	if (r != (ssize_t)len || memcmp(in, out, len) != 0)
		return -1;
	round_trips++;
	return 0;
}

static void must_round_trip(int fd, size_t len, const char *what)
{
	if (round_trip(fd, len) < 0)
		die("%s: echo round trip on fd %d failed: %s", what, fd,
		    errno ? strerror(errno) : "short or wrong data");
}

/* shutdown(SHUT_WR), then the echo server's EOF must arrive; closes @fd. */
static void finish(int fd, const char *what)
{
	char c;
	ssize_t r;

	if (shutdown(fd, SHUT_WR) < 0)
		die("%s: shutdown: %s", what, strerror(errno));
	r = read(fd, &c, 1);
	if (r != 0)
		die("%s: expected EOF, read returned %zd", what, r);
	if (close(fd) < 0)
		die("%s: close: %s", what, strerror(errno));
}

static int child_status(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static int connect_or_die(void)
{
	int fd = tcp_connect(port);

	if (fd < 0)
		die("connect: %s", strerror(errno));
	return fd;
}

/* 1: the child closes every inherited connection; the parent's must keep working. */
static void child_closes(void)
{
	int fds[NCLOSE], i, rc;
	pid_t pid;

	for (i = 0; i < NCLOSE; i++)
		fds[i] = connect_or_die();
	/* Move them to consecutive numbers 600..603 for close_range (dup2, close originals). */
	for (i = 0; i < NCLOSE; i++) {
		if (dup2(fds[i], 600 + i) != 600 + i)
			die("dup2 to %d: %s", 600 + i, strerror(errno));
		close(fds[i]);
		fds[i] = 600 + i;
		must_round_trip(fds[i], 1000 + (size_t)i, "before fork");
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		if (close(fds[0]) < 0 || close(fds[1]) < 0)
			die("child: close: %s", strerror(errno));
		/* The daemon idiom: everything from here up (602, 603 and nothing else). */
		if (my_close_range((unsigned int)fds[2], ~0u, 0) < 0)
			die("child: close_range: %s", strerror(errno));
		for (i = 0; i < NCLOSE; i++)
			if (fcntl(fds[i], F_GETFD) != -1 || errno != EBADF)
				die("child: fd %d still open after close", fds[i]);
		/* A new connection of the child's own on a number just closed. */
		i = connect_or_die();
		if (dup2(i, fds[0]) != fds[0])
			die("child: dup2: %s", strerror(errno));
		close(i);
		must_round_trip(fds[0], 3333, "child's own connection on a reused fd number");
		finish(fds[0], "child's own connection");
		exit(0);
	}
	rc = child_status(pid);
	if (rc != 0)
		die("closing child exited with %d", rc);
	for (i = 0; i < NCLOSE; i++)
		must_round_trip(fds[i], 20000, "after the child closed its copies");
	for (i = 0; i < NCLOSE; i++)
		finish(fds[i], "after child close");
}

/* 2: the child uses the inherited connection first, then the parent. */
static void child_uses(void)
{
	int fd = connect_or_die(), rc;
	pid_t pid;

	must_round_trip(fd, 100, "before fork");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		if (round_trip(fd, 5000) < 0 || round_trip(fd, 1) < 0)
			die("child: round trip on the inherited connection failed");
		exit(0); /* no close: exit closes it */
	}
	rc = child_status(pid);
	if (rc != 0)
		die("child using the inherited connection exited with %d", rc);
	must_round_trip(fd, 7000, "parent after the child's round trips");
	finish(fd, "inherited");
}

static void expect_cloexec(int fd, int want, const char *what)
{
	int fl = fcntl(fd, F_GETFD);

	if (fl < 0)
		die("%s: F_GETFD: %s", what, strerror(errno));
	if (!!(fl & FD_CLOEXEC) != want)
		die("%s: FD_CLOEXEC is %d, expected %d", what, !!(fl & FD_CLOEXEC), want);
}

static uint16_t local_port(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("getsockname(%d): %s", fd, strerror(errno));
	return ntohs(sa.sin_port);
}

/* 3: dup family. */
static void dups(void)
{
	int s = connect_or_die(), t = connect_or_die(), d1, d2, d3, d4;
	uint16_t sport = local_port(s);

	must_round_trip(s, 300, "original");
	must_round_trip(t, 300, "second connection");

	d1 = dup(s);
	if (d1 < 0)
		die("dup: %s", strerror(errno));
	must_round_trip(s, 10, "original while dup open");
	if (close(s) < 0)
		die("close original: %s", strerror(errno));
	must_round_trip(d1, 4000, "dup after close of the original");

	d2 = dup2(d1, 100);
	if (d2 != 100)
		die("dup2 returned %d: %s", d2, strerror(errno));
	expect_cloexec(d2, 0, "dup2");
	close(d1);
	must_round_trip(d2, 4001, "dup2 after close");

	d3 = dup3(d2, 101, O_CLOEXEC);
	if (d3 != 101)
		die("dup3 returned %d: %s", d3, strerror(errno));
	expect_cloexec(d3, 1, "dup3(O_CLOEXEC)");
	close(d2);
	must_round_trip(d3, 4002, "dup3 after close");

	d4 = fcntl(d3, F_DUPFD_CLOEXEC, 200);
	if (d4 < 200)
		die("F_DUPFD_CLOEXEC returned %d: %s", d4, strerror(errno));
	expect_cloexec(d4, 1, "F_DUPFD_CLOEXEC");
	close(d3);
	must_round_trip(d4, 4003, "F_DUPFD_CLOEXEC after close");

	if (local_port(d4) != sport)
		die("the dup chain ended on another connection");
	if (dup2(d4, d4) != d4)
		die("dup2(fd, fd) did not return fd: %s", strerror(errno));
	if (dup3(d4, d4, 0) != -1 || errno != EINVAL)
		die("dup3(fd, fd) did not fail with EINVAL");
	must_round_trip(d4, 50, "after dup2(fd, fd)");

	/* CLOSE_RANGE_CLOEXEC only marks: the fd stays open and usable. */
	expect_cloexec(t, 0, "second connection");
	if (my_close_range((unsigned int)t, (unsigned int)t, CLOSE_RANGE_CLOEXEC) < 0)
		die("close_range(CLOSE_RANGE_CLOEXEC): %s", strerror(errno));
	expect_cloexec(t, 1, "close_range(CLOSE_RANGE_CLOEXEC)");
	must_round_trip(t, 600, "after CLOSE_RANGE_CLOEXEC");

	/* dup2 onto a live connection: t is closed silently and now names d4's connection. */
	if (dup2(d4, t) != t)
		die("dup2 onto a live connection: %s", strerror(errno));
	if (local_port(t) != sport)
		die("after dup2, fd %d does not name the duplicated connection", t);
	must_round_trip(t, 3000, "dup2 target");
	close(d4);
	must_round_trip(t, 3001, "dup2 target after close of the source");
	finish(t, "dup chain");
}

int main(int argc, char **argv)
{
	alarm(CLIENT_TIME_LIMIT); /* a hang ends in SIGALRM, not in the test timeout */
	if (argc < 2)
		die("usage: fork_client PORT");
	port = port_arg(argv[1]);
	signal(SIGPIPE, SIG_IGN);
	child_closes();
	child_uses();
	dups();
	printf("fork_client: connections 7+1 children 2 round trips %lu: ok\n", round_trips);
	return 0;
}
