/*
 * Role: the server side of the connection-scale tests (test_scale_*.sh): one process, one
 * epoll loop on 127.0.0.1:PORT, that echoes what each connection sends and closes it after
 * the client's EOF. It holds as many connections as its fd limit allows.
 *
 *   connserver PORT [--backlog N] [--hold-ms MS] [--close-listener] [--emfile-stop]
 *                   [--nofile-max] [--seconds S]
 *
 * --backlog N       listen(fd, N) (default 4096)
 * --hold-ms MS      accept nothing for MS after listen() (a server slow to accept)
 * --close-listener  after the hold, close the listener instead of accepting (what queued
 *                   clients see when a server goes away)
 * --emfile-stop     when accept() fails with EMFILE/ENFILE, print the connections held and
 *                   the fds open (hidden ones included) and stop accepting; the rest of the
 *                   backlog waits, as in a server that ran out of fds
 * --nofile-max      raise the soft RLIMIT_NOFILE to the hard one
 * --seconds S       exit after S seconds (default 300): every run is bounded
 *
 * SIGTERM ends the loop; it then prints one summary line
 *   connserver: accepted=A open=O max_open=M resets=R errors=E accept_errors=X emfile_at=H
 * (resets: reads or writes that failed with ECONNRESET/EPIPE; errors: any other failure;
 * emfile_at: connections held at the first EMFILE, -1 if none) and returns from main, so the
 * library writes its stats line.
 */
#include <signal.h>
#include <sys/epoll.h>

#include "progs.h"
#include "scale.h"

const char *prog_name = "connserver";

#define LISTEN_TAG (-1)

static volatile sig_atomic_t stop;
static int fd_dir = -1; /* /proc/self/fd, opened first: it can be listed at the fd limit */
static long accepted, open_now, max_open, resets, errors, accept_errors, emfile_at = -1;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int listen_on(int port, int backlog)
{
	int fd = tcp_listen(port, backlog);

	set_nonblocking(fd); /* accept until EAGAIN */
	return fd;
}

static void drop(int ep, int fd)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	open_now--;
}

/* Echo what @fd has; close it at EOF or on an error (counted). */
static void serve(int ep, int fd)
{
	char buf[4096];
	ssize_t r;

	for (;;) {
		r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r == 0) {
			drop(ep, fd);
			return;
		}
		if (r < 0) {
			if (errno == ECONNRESET)
				resets++;
			else
				errors++, prog_msg("read fd %d: %s", fd, strerror(errno));
			drop(ep, fd);
			return;
		}
		/* Small requests: the reply always fits an empty send buffer; anything else is
		 * a failure of the test's own protocol, reported. */
		if (write(fd, buf, (size_t)r) != r) {
			if (errno == ECONNRESET || errno == EPIPE)
				resets++;
			else
				errors++, prog_msg("write fd %d: %s", fd, strerror(errno));
			drop(ep, fd);
			return;
		}
	}
}

/* Accept what is queued. Returns 0, or -1 when accepting stopped for good (--emfile-stop). */
static int accept_all(int ep, int lfd, int emfile_stop)
{
	struct epoll_event ev = {.events = EPOLLIN};
	int fd;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			if (emfile_at < 0) {
				emfile_at = open_now;
				printf("connserver: accept %s with %ld connections held, %ld fds open\n",
				       errno == EMFILE ? "EMFILE" : "ENFILE", open_now,
				       count_dir_fd(fd_dir, 1));
				fflush(stdout);
			}
			if (emfile_stop)
				return -1;
			usleep(1000); /* an fd may come back when a client leaves */
			return 0;
		}
		if (fd < 0) {
			accept_errors++;
			prog_msg("accept: %s", strerror(errno));
			return 0;
		}
		ev.data.fd = fd;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll_ctl ADD %d: %s", fd, strerror(errno));
		accepted++;
		if (++open_now > max_open)
			max_open = open_now;
	}
}

int main(int argc, char **argv)
{
	int port, backlog = 4096, hold_ms = 0, close_listener = 0, emfile_stop = 0, seconds = 300;
	struct epoll_event ev = {.events = EPOLLIN}, evs[256];
	struct sigaction sa;
	int i, n, lfd, ep;
	double end;

	if (argc < 2)
		die("usage: connserver PORT [--backlog N] [--hold-ms MS] [--close-listener] "
		    "[--emfile-stop] [--nofile-max] [--seconds S]");
	port = port_arg(argv[1]);
	for (i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--backlog") == 0 && i + 1 < argc)
			backlog = atoi(argv[++i]);
		else if (strcmp(argv[i], "--hold-ms") == 0 && i + 1 < argc)
			hold_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--close-listener") == 0)
			close_listener = 1;
		else if (strcmp(argv[i], "--emfile-stop") == 0)
			emfile_stop = 1;
		else if (strcmp(argv[i], "--nofile-max") == 0)
			(void)nofile_raise();
		else
			die("unknown option %s", argv[i]);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term; /* no SA_RESTART: epoll_wait returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	end = now_sec() + seconds;
	fd_dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd_dir < 0)
		die("open /proc/self/fd: %s", strerror(errno));

	lfd = listen_on(port, backlog);
	printf("connserver: listening on %d (backlog %d), RLIMIT_NOFILE %ld, %ld fds open\n", port,
	       backlog, nofile_soft(), count_dir_fd(fd_dir, 1));
	if (hold_ms > 0)
		usleep((useconds_t)hold_ms * 1000);
	if (close_listener) {
		close(lfd);
		lfd = -1;
		printf("connserver: listener closed after %d ms\n", hold_ms);
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1: %s", strerror(errno));
	ev.data.fd = LISTEN_TAG;
	if (lfd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll_ctl ADD listener: %s", strerror(errno));
	while (!stop && now_sec() < end) {
		n = epoll_wait(ep, evs, 256, 200);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (i = 0; i < n; i++) {
			if (evs[i].data.fd != LISTEN_TAG) {
				serve(ep, evs[i].data.fd);
			} else if (accept_all(ep, lfd, emfile_stop) < 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL); /* the backlog stays queued */
			}
		}
	}
	printf("connserver: accepted=%ld open=%ld max_open=%ld resets=%ld errors=%ld "
	       "accept_errors=%ld emfile_at=%ld\n",
	       accepted, open_now, max_open, resets, errors, accept_errors, emfile_at);
	return 0;
}
