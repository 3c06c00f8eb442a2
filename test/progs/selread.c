/*
 * Role: select() says readable, then a blocking read() must not block -- socat's relay loop
 * over two connections (the mt_client "Alarm clock" through socat).
 *
 *   selread [SECONDS]     (default 12)
 *
 * A writer process (forked before anything is connected) opens two connections X and Y to
 * our loopback listener, with TCP_NODELAY, and then takes turns: two 100-byte messages on X,
 * wait for X's 1-byte reply; the same on Y; and so on. The reader waits in select() on both
 * and, for each fd it reports, does one blocking read() of up to 8 KiB, as socat does; after
 * a turn's 200 bytes it replies. A readiness token for a message that was already read (a
 * stale wake-up) makes select() report an fd with nothing to read: the blocking read()
 * sleeps, while the writer waits for the reply on the other connection. Each read has
 * SO_RCVTIMEO 2 s: a read that returns EAGAIN after select() said readable is the failure.
 *
 * Runs SECONDS (or 1,000,000 turns) and prints "selread: turns N: ok"; exits 0 only then.
 */
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "selread";

#define MSG 100
#define MAX_TURNS 1000000

static void writer(int port)
{
	char msg[MSG], r;
	int fd[2], one = 1, k, t;

	for (k = 0; k < 2; k++) {
		fd[k] = tcp_connect(port);
		if (fd[k] < 0 || setsockopt(fd[k], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
			die("writer: connect: %s", strerror(errno));
	}
	memset(msg, 'm', sizeof(msg));
	for (t = 0;; t++) {
		k = t & 1;
		if (write_all(fd[k], msg, sizeof(msg)) < 0 || write_all(fd[k], msg, sizeof(msg)) < 0)
			die("writer: turn %d: write: %s", t, strerror(errno));
		if (read(fd[k], &r, 1) != 1)
			break; /* EOF: the reader is done (or failed and says why) */
	}
	exit(0);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	struct timeval tmo = {2, 0};
	double secs = argc > 1 ? atof(argv[1]) : 12, end;
	long got[2] = {0, 0}, turns = 0;
	char buf[8192];
	int lfd, fd[2], k, st;
	ssize_t n;
	pid_t wpid;

	if (secs <= 0 || secs > 20)
		die("usage: selread [SECONDS <= 20]");
	alarm(25);
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
		writer(ntohs(sa.sin_port));
	}
	for (k = 0; k < 2; k++) {
		fd[k] = accept(lfd, NULL, NULL);
		if (fd[k] < 0 || setsockopt(fd[k], SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo)) < 0)
			die("accept: %s", strerror(errno));
	}
	close(lfd);
	end = now_sec() + secs;
	for (;;) {
		struct timeval t = {2, 0};
		fd_set r;

		FD_ZERO(&r);
		FD_SET(fd[0], &r);
		FD_SET(fd[1], &r);
		n = select((fd[0] > fd[1] ? fd[0] : fd[1]) + 1, &r, NULL, NULL, &t);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("turn %ld: select: %s", turns, n < 0 ? strerror(errno) : "nothing for 2 s");
		for (k = 0; k < 2; k++) {
			if (!FD_ISSET(fd[k], &r))
				continue;
			n = read(fd[k], buf, sizeof(buf));
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				die("turn %ld: select() said connection %c readable, then its blocking "
				    "read() found nothing for 2 s (%ld of its 200 bytes read)",
				    turns, "XY"[k], got[k]);
			if (n <= 0)
				die("turn %ld: read: %s", turns, n < 0 ? strerror(errno) : "EOF");
			got[k] += n;
			if (got[k] > 200)
				die("turn %ld: %ld bytes on %c, expected 200", turns, got[k], "XY"[k]);
			if (got[k] == 200) {
				got[k] = 0;
				if (++turns >= MAX_TURNS || now_sec() >= end)
					goto done; /* no reply: the writer waits in read() and sees EOF */
				if (write_all(fd[k], "a", 1) < 0)
					die("turn %ld: reply: %s", turns, strerror(errno));
			}
		}
	}
done:
	close(fd[0]);
	close(fd[1]);
	while (waitpid(wpid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("writer failed");
	printf("selread: turns %ld: ok\n", turns);
	return 0;
}
