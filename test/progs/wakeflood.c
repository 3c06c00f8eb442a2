/*
 * Role: a reader that stays readable through a long run of arrivals, then waits in poll() or
 * select() for the next few (the pattern behind the flaky socat relay: a socat child reads
 * one 8 KiB message at a time behind a writer that keeps its window full).
 *
 *   wakeflood MODE [ROUNDS]     (default 10 rounds)
 *
 * A writer process (forked before anything is connected) connects to our loopback listener
 * with TCP_NODELAY, so each of its 64-byte writes is one message. Every round:
 *   1. flood: the writer writes N1 = 600 messages. The reader consumes them one at a time,
 *      but only while at least two are queued (FIONREAD), so it never runs dry: on the shm
 *      transport every arrival writes a readiness token that nobody takes until the reader
 *      is drained -- hundreds of them, more than the token socket's send buffer holds.
 *   2. the reader sends 'g' and drains the flood; the writer, 5 ms after the 'g', writes
 *      N2 = 3 more messages 2 ms apart and stops.
 *   3. the reader waits for those in poll() (select() in fork mode) and reads them, then
 *      sends 'a', and the next round starts.
 * A wait in step 3 that sees nothing for 2 s while FIONREAD shows the bytes is the lost
 * wake-up: the program fails with the numbers.
 *
 * MODE (who reads):
 *   plain  the process that accepted the connection reads it
 *   fork   the accepting process forks; the child reads (select), the parent closes its copy
 *          at once: socat's TCP-LISTEN:...,fork
 *   idle   as plain, but the reader does not read at all during the flood (it waits for all
 *          N1 messages to be queued: run it with RDMASOCK_BUF_COUNT=1024 so they fit), so the
 *          tokens come from the writer's edge wakes alone
 *
 * Prints "wakeflood: MODE rounds R messages M: ok" and exits 0 only when every round
 * completed; the whole run is bounded by an alarm (TIME_LIMIT seconds).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "wakeflood";

#define MSG 64
#define N1 600
#define N2 3
#define STALL_MS 2000
#define TIME_LIMIT 25

enum mode { PLAIN, FORK, IDLE };

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int queued(int fd)
{
	int n = 0;

	if (ioctl(fd, FIONREAD, &n) < 0)
		die("FIONREAD: %s", strerror(errno));
	return n;
}

/* One byte from the peer within @ms, or die. */
static char recv_byte(int fd, int ms, const char *what)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c;

	if (poll(&p, 1, ms) <= 0)
		die("no '%s' from the peer within %d ms", what, ms);
	if (read(fd, &c, 1) != 1)
		die("no '%s' from the peer: it closed (or failed) first", what);
	return c;
}

static void writer(int port, int rounds)
{
	char msg[MSG];
	int fd = tcp_connect(port), one = 1, r, i;

	if (fd < 0)
		die("writer: connect: %s", strerror(errno));
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("writer: TCP_NODELAY: %s", strerror(errno));
	memset(msg, 'm', sizeof(msg));
	for (r = 0; r < rounds; r++) {
		for (i = 0; i < N1; i++)
			if (write_all(fd, msg, sizeof(msg)) < 0)
				die("writer: round %d: write: %s", r, strerror(errno));
		if (recv_byte(fd, 10000, "g") != 'g')
			die("writer: round %d: bad go byte", r);
		sleep_us(5000);
		for (i = 0; i < N2; i++) {
			if (write_all(fd, msg, sizeof(msg)) < 0)
				die("writer: round %d: write: %s", r, strerror(errno));
			sleep_us(2000);
		}
		/* The reader reports a stall itself; we only must not outlive it. */
		if (recv_byte(fd, STALL_MS + 10000, "a") != 'a')
			die("writer: round %d: bad ack byte", r);
	}
	close(fd);
	exit(0);
}

/* Wait until @fd is readable (poll or select): 1, or 0 after STALL_MS without an event. */
static int wait_readable(int fd, int use_select)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	struct timeval tv = {STALL_MS / 1000, 0};
	fd_set r;
	int n;

	do {
		if (use_select) {
			FD_ZERO(&r);
			FD_SET(fd, &r);
			n = select(fd + 1, &r, NULL, NULL, &tv);
		} else {
			n = poll(&p, 1, STALL_MS);
		}
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		die("%s: %s", use_select ? "select" : "poll", strerror(errno));
	return n > 0;
}

/* Read one round's N1 + N2 messages from @fd. */
static void read_round(int fd, enum mode m, int round)
{
	char buf[N1 * MSG];
	long got = 0, want = (long)(N1 + N2) * MSG, spins;
	ssize_t n;

	/* 1. flood: never let the queue run dry (or, idle, do not read at all). */
	for (spins = 0; got < (long)(N1 - 1) * MSG; spins++) {
		if (spins > 200000)
			die("round %d: flood: writer stuck at %ld of %d bytes", round, got, N1 * MSG);
		if (m == IDLE ? queued(fd) < N1 * MSG : queued(fd) < 2 * MSG) {
			sleep_us(50);
			continue;
		}
		n = read(fd, buf, m == IDLE ? (size_t)(N1 - 1) * MSG : MSG);
		if (n <= 0)
			die("round %d: flood: read: %s", round, n < 0 ? strerror(errno) : "EOF");
		got += n;
	}
	/* 2. go, and drain: the last read leaves the stream empty. */
	if (write_all(fd, "g", 1) < 0)
		die("round %d: write go: %s", round, strerror(errno));
	/* 3. the rest arrives while we wait for it, as socat waits in select(). */
	while (got < want) {
		if (!wait_readable(fd, m == FORK))
			die("round %d: lost wake-up: no readiness for %d ms with %d byte(s) queued "
			    "(FIONREAD), %ld of %ld read",
			    round, STALL_MS, queued(fd), got, want);
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue; /* readable for nothing: not this test's business */
		if (n <= 0)
			die("round %d: read: %s", round, n < 0 ? strerror(errno) : "EOF");
		got += n;
	}
	if (got != want)
		die("round %d: %ld bytes, expected %ld", round, got, want);
	if (write_all(fd, "a", 1) < 0)
		die("round %d: write ack: %s", round, strerror(errno));
}

static void reader(int fd, enum mode m, int rounds)
{
	char c;
	int r;

	for (r = 0; r < rounds; r++)
		read_round(fd, m, r);
	if (read(fd, &c, 1) != 0)
		die("no EOF after the last round");
	close(fd);
}

/* Wait for @pid (bounded by the alarm): its exit status, or 1. */
static int reap(pid_t pid, const char *what)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid %s: %s", what, strerror(errno));
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	prog_msg("%s killed by signal %d", what, WTERMSIG(st));
	return 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	int lfd, fd, rounds = argc > 2 ? atoi(argv[2]) : 10, rc;
	pid_t wpid, rpid;
	enum mode m;

	if (argc < 2 || rounds <= 0 || rounds > 1000)
		die("usage: wakeflood plain|fork|idle [ROUNDS]");
	if (strcmp(argv[1], "plain") == 0)
		m = PLAIN;
	else if (strcmp(argv[1], "fork") == 0)
		m = FORK;
	else if (strcmp(argv[1], "idle") == 0)
		m = IDLE;
	else
		die("unknown mode \"%s\"", argv[1]);
	alarm(TIME_LIMIT);
	signal(SIGPIPE, SIG_IGN);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		die("listener: %s", strerror(errno));
	wpid = fork();
	if (wpid < 0)
		die("fork: %s", strerror(errno));
	if (wpid == 0) {
		close(lfd);
		writer(ntohs(sa.sin_port), rounds);
	}
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	if (m == FORK) {
		rpid = fork();
		if (rpid < 0)
			die("fork: %s", strerror(errno));
		if (rpid == 0) {
			reader(fd, m, rounds);
			exit(0);
		}
		close(fd); /* socat's parent: the child serves the connection */
		rc = reap(rpid, "reader child");
	} else {
		reader(fd, m, rounds);
		rc = 0;
	}
	rc |= reap(wpid, "writer");
	if (rc != 0)
		die("%s: failed", argv[1]);
	printf("wakeflood: %s rounds %d messages %d: ok\n", argv[1], rounds, rounds * (N1 + N2));
	return 0;
}
