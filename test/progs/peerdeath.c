/*
 * Role: what a blocked TCP call sees when the peer process dies (SIGKILL) or closes normally.
 *
 *   peerdeath SCENARIO            run one scenario (list below), print one result line
 *   peerdeath victim_client PORT NOTIFY_FD MODE      (internal: the peer, exec'd)
 *   peerdeath victim_server NOTIFY_FD MODE           (internal: the peer, exec'd)
 *
 * The peer is a separate program image (fork + exec of /proc/self/exe), so under LD_PRELOAD
 * it is a second preloaded process. It connects (or listens and accepts), sends "hello",
 * never reads, and then, by MODE: pause (wait to be killed), close (close the socket after
 * 300 ms, then exit(0)), exit (exit(0) after 300 ms without closing), _exit (_exit(0) after
 * 300 ms without closing). For the kill scenarios a thread of ours sends SIGKILL 300 ms after
 * our main thread entered the blocking call (and checks it is still in it); the time from the
 * kill to the call's return is measured and must be under 1 s (env PEERDEATH_LIMIT=SECS
 * changes that: the qemu TCG guest of test/vm is slower than a real host).
 *
 * Scenarios (us = the program run with SCENARIO):
 *   server_recv          we serve, blocked in recv; client killed: ECONNRESET or EOF
 *   server_epoll         we serve, blocked in epoll_wait; client killed: an event, then
 *                        recv gives ECONNRESET or EOF
 *   server_send          we serve, blocked in send (client does not read); client killed:
 *                        send fails (ECONNRESET, or EPIPE on the kernel)
 *   client_recv          we are the client, blocked in recv; server killed: ECONNRESET
 *                        (EOF allowed on the kernel transport, where the dead server's
 *                        kernel sends a FIN)
 *   client_recv_unread   as client_recv, but the server had unread bytes from us: its kernel
 *                        resets, so ECONNRESET on every transport
 *   client_send          we are the client, blocked in send on a full window; server killed:
 *                        send fails (ECONNRESET, or EPIPE on the kernel)
 *   close_client         the client closes normally: we (server, in recv) read EOF, twice
 *   close_server         the server closes normally: we (client, in recv) read EOF, twice
 *   exit_client          the client exits with exit(0) without closing: EOF
 *   exit_server          the server exits with exit(0) without closing: EOF
 *   _exit_client         the client leaves with _exit(0) without closing: TCP gives EOF
 *                        (informational: printed with "info", never fails)
 * PEERDEATH_TRANSPORT=shm asks for the loopback kernel's own outcome exactly: a killed peer
 * that left nothing of ours unread gives EOF (its kernel's close sends FIN), one that did
 * gives ECONNRESET, and _exit_client is checked. Elsewhere (verbs) a reset is accepted too.
 *
 * Prints "peerdeath: SCENARIO: RESULT after T s: ok" (or ": FAIL: why", or ": info") and
 * exits 0 only when ok (or info).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "peerdeath";

static int shm_rules;
static pid_t victim;
static volatile int in_call;	 /* main thread is inside the blocking call */
static volatile int call_done;	 /* ... and has returned from it */
static volatile int was_in_call; /* the call had not returned when the kill was sent */
static double t_kill;
static double limit_secs = 1.0; /* kill to return, env PEERDEATH_LIMIT */

static void on_alarm(int sig)
{
	static const char msg[] = "peerdeath: HUNG: the blocked call did not return in 10 s\n";

	(void)sig;
	if (victim > 0)
		kill(victim, SIGKILL);
	(void)!write(1, msg, sizeof(msg) - 1);
	_exit(3);
}

static const char *label; /* instead of the result's name */

static const char *res_name(ssize_t r, int e)
{
	static char b[64];

	if (label != NULL)
		return label;
	if (r == 0)
		return "EOF";
	if (r > 0) {
		snprintf(b, sizeof(b), "%zd bytes", r);
		return b;
	}
	switch (e) {
	case ECONNRESET:
		return "ECONNRESET";
	case EPIPE:
		return "EPIPE";
	case EAGAIN:
		return "EAGAIN";
	default:
		snprintf(b, sizeof(b), "errno %d (%s)", e, strerror(e));
		return b;
	}
}

static const char *evstr(uint32_t ev)
{
	static char b[128];

	snprintf(b, sizeof(b), "event%s%s%s%s%s", ev & EPOLLIN ? " IN" : "",
		 ev & EPOLLOUT ? " OUT" : "", ev & EPOLLRDHUP ? " RDHUP" : "",
		 ev & EPOLLHUP ? " HUP" : "", ev & EPOLLERR ? " ERR" : "");
	return b;
}

/* ---- the peer ------------------------------------------------------------------------- */

static void victim_end(int fd, const char *mode)
{
	if (strcmp(mode, "pause") == 0) {
		for (;;)
			pause();
	}
	usleep(300000);
	if (strcmp(mode, "close") == 0) {
		if (close(fd) < 0)
			die("victim close: %s", strerror(errno));
		exit(0);
	}
	if (strcmp(mode, "exit") == 0)
		exit(0);
	if (strcmp(mode, "_exit") == 0)
		_exit(0);
	die("unknown victim mode %s", mode);
}

static int victim_client(int port, int nfd, const char *mode)
{
	int fd = tcp_connect(port);

	if (fd < 0)
		die("victim connect: %s", strerror(errno));
	if (write_all(fd, "hello", 5) < 0)
		die("victim write: %s", strerror(errno));
	if (write(nfd, "c", 1) != 1)
		die("notify");
	victim_end(fd, mode);
	return 0;
}

static int victim_server(int nfd, const char *mode)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	char line[16];
	int lfd, fd;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		die("victim listen: %s", strerror(errno));
	snprintf(line, sizeof(line), "%5d", ntohs(sa.sin_port));
	if (write(nfd, line, 5) != 5)
		die("notify");
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("victim accept: %s", strerror(errno));
	close(lfd);
	if (write_all(fd, "hello", 5) < 0)
		die("victim write: %s", strerror(errno));
	victim_end(fd, mode);
	return 0;
}

/* ---- us ------------------------------------------------------------------------------- */

/* fork + exec the peer; its notifications come through the returned pipe's read end. */
static int spawn(const char *role, int port, const char *mode)
{
	char nfd[16], portstr[16];
	int p[2];

	if (pipe(p) < 0)
		die("pipe: %s", strerror(errno));
	snprintf(nfd, sizeof(nfd), "%d", p[1]);
	snprintf(portstr, sizeof(portstr), "%d", port);
	fflush(NULL);
	victim = fork();
	if (victim < 0)
		die("fork: %s", strerror(errno));
	if (victim == 0) {
		close(p[0]);
		if (strcmp(role, "victim_client") == 0)
			execl("/proc/self/exe", "peerdeath", role, portstr, nfd, mode,
			      (char *)NULL);
		else
			execl("/proc/self/exe", "peerdeath", role, nfd, mode, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	return p[0];
}

static void *killer(void *arg)
{
	(void)arg;
	while (!in_call)
		usleep(1000);
	usleep(300000);
	was_in_call = !call_done;
	t_kill = now_sec();
	kill(victim, SIGKILL);
	return NULL;
}

static void start_killer(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, killer, NULL) != 0)
		die("pthread_create");
	pthread_detach(t);
}

/* Our server end: listen, spawn the client peer, accept, read its hello. */
static int serve_victim(const char *mode)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	char b[5], c;
	int lfd, fd, nfd;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		die("listen: %s", strerror(errno));
	nfd = spawn("victim_client", ntohs(sa.sin_port), mode);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	if (read(nfd, &c, 1) != 1)
		die("the client peer did not start");
	close(nfd);
	if (read_full(fd, b, 5, 0) != 5 || memcmp(b, "hello", 5) != 0)
		die("no hello from the client peer");
	return fd;
}

/* Our client end: spawn the server peer, connect, read its hello. */
static int connect_victim(const char *mode)
{
	char line[6] = {0}, b[5];
	int nfd, fd;

	nfd = spawn("victim_server", 0, mode);
	if (read_full(nfd, line, 5, 0) != 5)
		die("the server peer did not start");
	close(nfd);
	fd = tcp_connect(atoi(line));
	if (fd < 0)
		die("connect: %s", strerror(errno));
	if (read_full(fd, b, 5, 0) != 5 || memcmp(b, "hello", 5) != 0)
		die("no hello from the server peer");
	return fd;
}

struct result {
	ssize_t r;
	int err;
	double secs;	 /* from the kill (or the blocking call's start) to the return */
	ssize_t partial; /* send: what the call blocked at the kill returned, if it did not fail */
};

static void timed_recv(int fd, struct result *res)
{
	char b[64];
	double t0 = now_sec();

	in_call = 1;
	do
		res->r = recv(fd, b, sizeof(b), 0);
	while (res->r < 0 && errno == EINTR);
	res->err = errno;
	call_done = 1;
	res->secs = now_sec() - (t_kill > 0 ? t_kill : t0);
}

/* Blocking sends of 64 MiB until one fails (the first may return short when the peer dies). */
static void timed_send(int fd, struct result *res)
{
	size_t n = 64u << 20;
	char *big = calloc(1, n);
	double t0 = now_sec();

	if (big == NULL)
		die("out of memory");
	in_call = 1;
	for (;;) {
		res->r = send(fd, big, n, MSG_NOSIGNAL);
		res->err = errno;
		if (res->r < 0 && errno == EINTR)
			continue;
		if (res->r < 0 || t_kill > 0)
			break;
	}
	if (res->r >= 0) { /* returned short after the kill: the next one must fail */
		res->partial = res->r;
		res->r = send(fd, big, n, MSG_NOSIGNAL);
		res->err = errno;
	}
	call_done = 1;
	res->secs = now_sec() - (t_kill > 0 ? t_kill : t0);
	free(big);
}

static int report(const char *scen, const struct result *res, int ok, const char *why)
{
	char sh[64] = "";

	if (res->partial > 0)
		snprintf(sh, sizeof(sh), " (the blocked send returned %zd first)", res->partial);
	if (ok > 0)
		why = NULL;
	printf("peerdeath: %s: %s%s after %.3f s: %s%s%s\n", scen, res_name(res->r, res->err), sh,
	       res->secs,
	       ok > 0	 ? "ok"
	       : ok == 0 ? "FAIL"
			 : "info",
	       why ? ": " : "", why ? why : "");
	return ok >= 0 ? (ok ? 0 : 1) : 0;
}

/* Common verdict for kill scenarios: returned after the kill, within limit_secs, with @accept. */
static int verdict(const char *scen, const struct result *res, int accept_eof, int accept_epipe)
{
	char why[256];

	if (!was_in_call)
		return report(scen, res, 0, "the call returned before the peer was killed");
	if (res->secs >= limit_secs) {
		snprintf(why, sizeof(why), "took %.3f s after the kill (limit %g s)", res->secs,
			 limit_secs);
		return report(scen, res, 0, why);
	}
	if (shm_rules) /* exactly the loopback kernel's outcome: EOF where it gives EOF */
		return report(scen, res,
			      accept_eof ? res->r == 0 : res->r < 0 && res->err == ECONNRESET,
			      accept_eof ? "expected EOF (the dead peer left nothing unread: FIN)"
					 : "expected ECONNRESET");
	if (res->r < 0 && res->err == ECONNRESET)
		return report(scen, res, 1, NULL);
	if (res->r == 0 && accept_eof)
		return report(scen, res, 1, NULL);
	if (res->r < 0 && res->err == EPIPE && accept_epipe)
		return report(scen, res, 1, NULL);
	return report(scen, res, 0, "expected ECONNRESET");
}

static void reap(void)
{
	int st;

	if (victim > 0)
		waitpid(victim, &st, 0);
	victim = 0;
}

static int run(const char *scen)
{
	struct result res = {0};
	struct epoll_event ev;
	int fd, ep, n, rc;
	double t0;
	char b;

	if (strcmp(scen, "server_recv") == 0) {
		fd = serve_victim("pause");
		start_killer();
		timed_recv(fd, &res);
		reap();
		return verdict(scen, &res, 1, 0);
	}
	if (strcmp(scen, "server_epoll") == 0) {
		fd = serve_victim("pause");
		ep = epoll_create1(0);
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.fd = fd;
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll: %s", strerror(errno));
		start_killer();
		in_call = 1;
		do
			n = epoll_wait(ep, &ev, 1, 5000);
		while (n < 0 && errno == EINTR);
		call_done = 1;
		res.secs = now_sec() - t_kill;
		reap();
		if (n != 1) {
			res.r = -1;
			res.err = EAGAIN;
			return report(scen, &res, 0, "epoll_wait reported nothing within 5 s");
		}
		res.r = -1;	      /* an event counts as the wanted result; */
		res.err = ECONNRESET; /* its timing is what verdict() checks here */
		label = evstr(ev.events);
		rc = verdict(scen, &res, !shm_rules, 0); /* the ECONNRESET above marks the event */
		label = NULL;
		if (rc != 0)
			return rc;
		t0 = now_sec();
		res.r = recv(fd, &b, 1, MSG_DONTWAIT);
		res.err = errno;
		res.secs = now_sec() - t0;
		t_kill = 0;
		if (shm_rules)
			return report("server_epoll(recv)", &res, res.r == 0,
				      "after the event recv must give EOF, as on the kernel");
		return report("server_epoll(recv)", &res,
			      res.r == 0 || (res.r < 0 && res.err == ECONNRESET),
			      "after the event recv must give EOF or ECONNRESET");
	}
	if (strcmp(scen, "server_send") == 0) {
		fd = serve_victim("pause");
		start_killer();
		timed_send(fd, &res);
		reap();
		return verdict(scen, &res, 0, 1);
	}
	if (strcmp(scen, "client_recv") == 0 || strcmp(scen, "client_recv_unread") == 0) {
		fd = connect_victim("pause");
		if (strcmp(scen, "client_recv_unread") == 0 && write_all(fd, "unread", 6) < 0)
			die("write: %s", strerror(errno));
		usleep(20000);
		start_killer();
		timed_recv(fd, &res);
		reap();
		return verdict(scen, &res, strcmp(scen, "client_recv") == 0, 0);
	}
	if (strcmp(scen, "client_send") == 0) {
		fd = connect_victim("pause");
		start_killer();
		timed_send(fd, &res);
		reap();
		return verdict(scen, &res, 0, 1);
	}
	if (strcmp(scen, "close_client") == 0 || strcmp(scen, "exit_client") == 0 ||
	    strcmp(scen, "_exit_client") == 0 || strcmp(scen, "close_server") == 0 ||
	    strcmp(scen, "exit_server") == 0) {
		const char *mode = scen[0] == 'c' ? "close" : scen[0] == 'e' ? "exit" : "_exit";
		int info = scen[0] == '_' && !shm_rules; /* verbs: a QP gone without FIN resets */

		fd = strstr(scen, "client") ? serve_victim(mode) : connect_victim(mode);
		timed_recv(fd, &res);
		if (res.r != 0)
			return report(scen, &res, info ? -1 : 0,
				      "a peer that ended normally must give EOF");
		res.r = recv(fd, &b, 1, 0);
		res.err = errno;
		reap();
		if (res.r != 0)
			return report(scen, &res, info ? -1 : 0, "the second read after EOF");
		return report(scen, &res, info ? -1 : 1, NULL);
	}
	die("unknown scenario %s", scen);
}

int main(int argc, char **argv)
{
	const char *tr = getenv("PEERDEATH_TRANSPORT");
	struct sigaction sa;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && strcmp(argv[1], "victim_client") == 0)
		return victim_client(port_arg(argv[2]), atoi(argv[3]), argv[4]);
	if (argc == 4 && strcmp(argv[1], "victim_server") == 0)
		return victim_server(atoi(argv[2]), argv[3]);
	if (argc != 2)
		die("usage: peerdeath SCENARIO");
	shm_rules = tr != NULL && strcmp(tr, "shm") == 0;
	if (getenv("PEERDEATH_LIMIT") != NULL)
		limit_secs = atof(getenv("PEERDEATH_LIMIT"));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	alarm(10);
	return run(argv[1]);
}
