/*
 * Role: readiness of TCP sockets as epoll, poll, ppoll, select and pselect report it,
 * checked one by one against the program's own server.
 *
 *   readiness [CHECK...]        (default: every check, in order)
 *
 * Same frame as semantics.c: each check runs in a forked child (a hang becomes that check's
 * failure after CHECK_SECS) with its own listener on 127.0.0.1; client and server ends are in
 * the same preloaded process, except for the peer-death checks, whose peer is a forked
 * grandchild killed with SIGKILL. SEMANTICS_EXPECT=kernel|shm additionally requires every
 * connection to be carried by that transport (rdmasock_fd_transport via dlsym).
 *
 * Prints "readiness: check NAME: ok" or "readiness: check NAME: FAIL: detail" per check,
 * then "readiness: N checks, F failed"; exits 1 if any failed.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "checks.h"
#include "progs.h"

const char *prog_name = "readiness";

#define CHECK_SECS 8

static const char *evstr(uint32_t ev)
{
	static char b[4][128];
	static int i;
	char *p;

	i = (i + 1) % 4;
	p = b[i];
	p[0] = '\0';
	if (ev == 0)
		return "none";
#define F(x)                                                                                       \
	if (ev & x)                                                                                \
		strcat(p, "|" #x + (p[0] ? 0 : 1));
	F(EPOLLIN)
	F(EPOLLOUT) F(EPOLLRDHUP) F(EPOLLHUP) F(EPOLLERR) F(EPOLLPRI)
#undef F
	    return p;
}

static int pair(int *c, int *s)
{
	*c = tcp_connect(lport);
	REQ(*c >= 0, "connect: %s", strerror(errno));
	*s = accept(lfd, NULL, NULL);
	REQ(*s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(*c, "client end"));
	TRY(on_transport(*s, "server end"));
	return 0;
}

/* Read whatever is queued (non-blocking or MSG_DONTWAIT) until EAGAIN; returns bytes. */
static ssize_t drain(int fd)
{
	static char b[65536];
	ssize_t r, total = 0;

	for (;;) {
		r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (r <= 0)
			return r < 0 && errno == EAGAIN ? total : r < 0 ? -1 : total;
		total += r;
	}
}

/* epoll_wait on @ep for @ms; the events of data @fd (0 if none), count in *n. */
static uint32_t ewait(int ep, int fd, int ms, int *n)
{
	struct epoll_event ev[8];
	uint32_t got = 0;
	int k, i;

	do
		k = epoll_wait(ep, ev, 8, ms);
	while (k < 0 && errno == EINTR);
	if (n != NULL)
		*n = 0;
	for (i = 0; i < k; i++) {
		if (ev[i].data.fd != fd)
			continue;
		got |= ev[i].events;
		if (n != NULL)
			(*n)++;
	}
	return got;
}

static int eadd(int ep, int op, int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.fd = fd};

	REQ(epoll_ctl(ep, op, fd, &ev) == 0, "epoll_ctl(%d, fd %d, %s): %s", op, fd, evstr(events),
	    strerror(errno));
	return 0;
}

/* Fill @fd's send window (the peer does not read) until even one byte stays out, settled. */
static int fill_window(int fd)
{
	static char junk[65536];
	size_t total = 0;
	ssize_t r;
	int round;

	for (round = 0; round < 20; round++) {
		for (;;) {
			r = send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
			if (r < 0) {
				REQ(errno == EAGAIN, "send while filling: %s", strerror(errno));
				break;
			}
			total += (size_t)r;
			REQ(total < (512u << 20), "512 MiB sent and the window never filled");
		}
		usleep(50000); /* let the kernel move what it will; then is it still full? */
		r = send(fd, junk, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0 && errno == EAGAIN)
			return 0;
		REQ(r >= 0, "send while filling: %s", strerror(errno));
	}
	FAILF("the window did not stay full");
}

/* ---- epoll ---------------------------------------------------------------------------- */

static int chk_epoll_lt(void)
{
	char b[8];
	uint32_t e;
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC), i;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN));
	e = ewait(ep, s, 100, NULL);
	REQ(e == 0, "idle socket reported %s", evstr(e));
	TRY(send_all(c, "0123456789", 10));
	for (i = 0; i < 3; i++) {
		e = ewait(ep, s, 1000, NULL);
		REQ(e & EPOLLIN, "level-triggered wait #%d with 10 bytes queued: %s", i, evstr(e));
	}
	TRY(recv_exact(s, b, 5));
	e = ewait(ep, s, 1000, NULL);
	REQ(e & EPOLLIN, "5 bytes still queued but %s", evstr(e));
	TRY(recv_exact(s, b, 5));
	e = ewait(ep, s, 100, NULL);
	REQ(e == 0, "drained socket still reports %s", evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_et(void)
{
	uint32_t e;
	int c, s, n, ep = epoll_create1(0);
	ssize_t r;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLET));
	e = ewait(ep, s, 100, &n);
	REQ(e == 0, "idle socket reported %s", evstr(e));
	TRY(send_all(c, "abc", 3));
	e = ewait(ep, s, 1000, &n);
	REQ((e & EPOLLIN) && n == 1, "first arrival: %s (%d events)", evstr(e), n);
	e = ewait(ep, s, 150, &n);
	REQ(e == 0, "no new data, not drained: edge-triggered reported %s again", evstr(e));
	r = drain(s);
	REQ(r == 3, "drained %zd bytes, expected 3", r);
	e = ewait(ep, s, 150, &n);
	REQ(e == 0, "drained, no new data: %s", evstr(e));
	TRY(send_all(c, "defg", 4));
	e = ewait(ep, s, 1000, &n);
	REQ((e & EPOLLIN) && n == 1, "arrival after draining: %s (%d events)", evstr(e), n);
	r = drain(s);
	REQ(r == 4, "drained %zd bytes, expected 4", r);
	e = ewait(ep, s, 150, &n);
	REQ(e == 0, "after the second drain: %s", evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

/* Linux: every arrival is an edge, also while earlier data is still unread. */
static int chk_epoll_et_rearrival(void)
{
	uint32_t e;
	int c, s, n, i, ep = epoll_create1(0);
	ssize_t r;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLET));
	for (i = 0; i < 3; i++) {
		TRY(send_all(c, "x", 1));
		e = ewait(ep, s, 1000, &n);
		REQ((e & EPOLLIN) && n == 1,
		    "arrival #%d with %d earlier bytes unread: %s (%d events), expected one "
		    "EPOLLIN",
		    i + 1, i, evstr(e), n);
		e = ewait(ep, s, 100, &n);
		REQ(e == 0, "arrival #%d reported twice (%s)", i + 1, evstr(e));
	}
	r = drain(s);
	REQ(r == 3, "drained %zd bytes, expected 3", r);
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_oneshot(void)
{
	uint32_t e;
	int c, s, ep = epoll_create1(0);

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLONESHOT));
	TRY(send_all(c, "1", 1));
	e = ewait(ep, s, 1000, NULL);
	REQ(e & EPOLLIN, "first event: %s", evstr(e));
	e = ewait(ep, s, 150, NULL);
	REQ(e == 0, "one-shot reported again without re-arming: %s", evstr(e));
	TRY(send_all(c, "2", 1));
	e = ewait(ep, s, 150, NULL);
	REQ(e == 0, "one-shot reported new data without re-arming: %s", evstr(e));
	TRY(eadd(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT));
	e = ewait(ep, s, 1000, NULL);
	REQ(e & EPOLLIN, "after EPOLL_CTL_MOD re-arm with data queued: %s", evstr(e));
	e = ewait(ep, s, 150, NULL);
	REQ(e == 0, "reported twice after one re-arm: %s", evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_nested(void)
{
	int c, s, inner = epoll_create1(0), outer = epoll_create1(0), n;
	uint32_t e;

	REQ(inner >= 0 && outer >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(inner, EPOLL_CTL_ADD, s, EPOLLIN));
	TRY(eadd(outer, EPOLL_CTL_ADD, inner, EPOLLIN));
	e = ewait(outer, inner, 100, NULL);
	REQ(e == 0, "outer epoll reported %s with nothing queued", evstr(e));
	TRY(send_all(c, "n", 1));
	e = ewait(outer, inner, 1000, NULL);
	REQ(e & EPOLLIN, "outer epoll after data: %s", evstr(e));
	e = ewait(inner, s, 0, &n);
	REQ((e & EPOLLIN) && n == 1, "inner epoll: %s", evstr(e));
	TRY(recv_exact(s, (char[1]){0}, 1));
	e = ewait(outer, inner, 100, NULL);
	REQ(e == 0, "outer epoll still reports %s after draining", evstr(e));
	close(c);
	close(s);
	close(inner);
	close(outer);
	return 0;
}

static int chk_epoll_rdhup(void)
{
	int c, s, ep = epoll_create1(0);
	uint32_t e;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP));
	e = ewait(ep, s, 100, NULL);
	REQ(e == 0, "idle: %s", evstr(e));
	REQ(shutdown(c, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
	e = ewait(ep, s, 1000, NULL);
	if ((e & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP)) {
		uint32_t e2, e3;
		char b;
		ssize_t r;

		usleep(300000);
		e2 = ewait(ep, s, 0, NULL);
		r = read(s, &b, 1);
		e3 = ewait(ep, s, 0, NULL);
		FAILF("after the peer's SHUT_WR: %s, expected EPOLLIN|EPOLLRDHUP (0.3 s later %s; "
		      "read() then returned %zd, and epoll reported %s)",
		      evstr(e), evstr(e2), r, evstr(e3));
	}
	REQ(!(e & (EPOLLHUP | EPOLLERR)), "half-close reported %s (HUP/ERR: only a full close)",
	    evstr(e));
	/* Our direction still works. */
	TRY(send_all(s, "r", 1));
	TRY(recv_exact(c, (char[1]){0}, 1));
	close(c);
	close(s);
	close(ep);
	return 0;
}

/* Both directions shut (the peer's FIN in, our own SHUT_WR): EPOLLHUP, as TCP reports. */
static int chk_epoll_hup(void)
{
	int c, s, ep = epoll_create1(0);
	uint32_t e;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP));
	REQ(shutdown(c, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
	e = ewait(ep, s, 1000, NULL);
	REQ(!(e & EPOLLHUP), "only the peer's side is shut, but %s", evstr(e));
	REQ(shutdown(s, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
	e = ewait(ep, s, 1000, NULL);
	REQ((e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) == (EPOLLIN | EPOLLRDHUP | EPOLLHUP),
	    "both directions shut: %s, expected EPOLLIN|EPOLLRDHUP|EPOLLHUP", evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

/*
 * A forked grandchild connects, then dies by SIGKILL when told. With @unread, we first send
 * it bytes it never reads (its kernel then resets the connection, as for any crash with
 * data pending). Returns the events seen within 1 s of the death and the time they took.
 */
static int peer_dies(int unread, uint32_t *events, double *secs)
{
	int cmd[2], ack[2], s, ep;
	char b = 0;
	pid_t pid;
	double t0;

	REQ(pipe(cmd) == 0 && pipe(ack) == 0, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	REQ(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int c = tcp_connect(lport);

		b = c >= 0 ? 'c' : 'x';
		if (write(ack[1], &b, 1) != 1 || read(cmd[0], &b, 1) != 1)
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	REQ(read(ack[0], &b, 1) == 1 && b == 'c', "the peer could not connect");
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(s, "server end"));
	if (unread)
		TRY(send_all(s, "unread-bytes", 12));
	ep = epoll_create1(0);
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP));
	*events = ewait(ep, s, 100, NULL);
	REQ(*events == 0, "before the peer died: %s", evstr(*events));
	usleep(50000);
	t0 = now_sec();
	REQ(write(cmd[1], "k", 1) == 1, "pipe write");
	*events = ewait(ep, s, 1000, NULL);
	*secs = now_sec() - t0;
	waitpid(pid, NULL, 0);
	close(ep);
	close(s);
	close(cmd[0]);
	close(cmd[1]);
	close(ack[0]);
	close(ack[1]);
	return 0;
}

static int chk_epoll_peer_killed(void)
{
	uint32_t e;
	double dt;

	TRY(peer_dies(0, &e, &dt));
	REQ((e & EPOLLIN) && (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)),
	    "peer killed (nothing pending): %s within 1 s, expected EPOLLIN with "
	    "EPOLLRDHUP/EPOLLHUP/EPOLLERR",
	    evstr(e));
	TRY(peer_dies(1, &e, &dt));
	REQ((e & EPOLLIN) && (e & (EPOLLHUP | EPOLLERR)),
	    "peer killed with unread data (reset): %s within 1 s, expected EPOLLIN with "
	    "EPOLLHUP or EPOLLERR",
	    evstr(e));
	return 0;
}

static int chk_epoll_before_connect(void)
{
	struct sockaddr_in sa = loopback(lport);
	int c, s, ep = epoll_create1(0), n;
	uint32_t e;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	/* Blocking connect, registered for input before. */
	c = socket(AF_INET, SOCK_STREAM, 0);
	REQ(c >= 0, "socket: %s", strerror(errno));
	TRY(eadd(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP));
	REQ(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(c, "client end"));
	e = ewait(ep, c, 100, &n);
	REQ(e == 0, "connected, nothing sent: %s (%d events)", evstr(e), n);
	TRY(send_all(s, "hello", 5));
	e = ewait(ep, c, 1000, &n);
	REQ((e & EPOLLIN) && n == 1, "registered before connect: after data %s (%d events)",
	    evstr(e), n);
	TRY(recv_exact(c, (char[5]){0}, 5));
	e = ewait(ep, c, 100, &n);
	REQ(e == 0, "drained: %s (%d events)", evstr(e), n);
	/* The registration can be modified and removed like any other. */
	TRY(eadd(ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLOUT));
	e = ewait(ep, c, 1000, &n);
	REQ(e == EPOLLOUT && n == 1, "after EPOLL_CTL_MOD to IN|OUT: %s (%d events)", evstr(e), n);
	REQ(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == 0, "EPOLL_CTL_DEL: %s", strerror(errno));
	TRY(send_all(s, "x", 1));
	e = ewait(ep, c, 150, &n);
	REQ(n == 0, "after EPOLL_CTL_DEL the fd still reports %s (%d events)", evstr(e), n);
	close(c);
	close(s);

	close(ep);
	return 0;
}

/*
 * Non-blocking connect with the fd registered (IN|OUT) before: EPOLLOUT once connected,
 * EPOLLIN when data comes, each reported as ONE event for the fd, and no EPOLLOUT while the
 * send window is full (three checks).
 */
static int nb_connect_registered(int *ep, int *c)
{
	struct sockaddr_in sa = loopback(lport);
	int r;

	*ep = epoll_create1(0);
	REQ(*ep >= 0, "epoll_create1: %s", strerror(errno));
	*c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	REQ(*c >= 0, "socket: %s", strerror(errno));
	TRY(eadd(*ep, EPOLL_CTL_ADD, *c, EPOLLIN | EPOLLOUT));
	r = connect(*c, (struct sockaddr *)&sa, sizeof(sa));
	REQ(r == 0 || errno == EINPROGRESS, "non-blocking connect: %s", strerror(errno));
	return 0;
}

static int chk_epoll_before_nb_connect(void)
{
	int c, s, ep, n, r;
	uint32_t e;

	TRY(nb_connect_registered(&ep, &c));
	e = ewait(ep, c, 1000, &n);
	REQ(e & EPOLLOUT, "non-blocking connect: %s, expected EPOLLOUT", evstr(e));
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(c, "client end"));
	TRY(send_all(s, "data", 4));
	e = ewait(ep, c, 1000, &n);
	REQ(e == (EPOLLIN | EPOLLOUT), "after data: %s, expected EPOLLIN|EPOLLOUT", evstr(e));
	r = (int)drain(c);
	REQ(r == 4, "drained %d bytes, expected 4", r);
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_before_connect_once(void)
{
	int c, s, ep, n;
	uint32_t e;

	TRY(nb_connect_registered(&ep, &c));
	e = ewait(ep, c, 1000, &n);
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	REQ(n == 1, "connected: %d events for the one fd (%s), expected 1", n, evstr(e));
	TRY(send_all(s, "data", 4));
	usleep(20000);
	e = ewait(ep, c, 1000, &n);
	REQ(n == 1, "after data: %d events for the one fd (%s), expected 1", n, evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_before_connect_full(void)
{
	int c, s, ep, n;
	uint32_t e;

	TRY(nb_connect_registered(&ep, &c));
	(void)ewait(ep, c, 1000, &n);
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(c, "client end"));
	TRY(eadd(ep, EPOLL_CTL_MOD, c, EPOLLOUT));
	TRY(fill_window(c));
	e = ewait(ep, c, 200, &n);
	REQ(n == 0, "registered before connect, window full: %s (%d events), expected none",
	    evstr(e), n);
	REQ(drain(s) > 0, "peer drain");
	e = ewait(ep, c, 1000, &n);
	REQ(e == EPOLLOUT, "window drained: %s (%d events)", evstr(e), n);
	close(c);
	close(s);
	close(ep);
	return 0;
}

static int chk_epoll_out(void)
{
	int c, s, ep = epoll_create1(0), n;
	uint32_t e;
	ssize_t got;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(eadd(ep, EPOLL_CTL_ADD, c, EPOLLOUT));
	e = ewait(ep, c, 1000, &n);
	REQ(e == EPOLLOUT, "new connection: %s, expected EPOLLOUT", evstr(e));
	TRY(fill_window(c));
	e = ewait(ep, c, 200, &n);
	REQ(e == 0, "window full (peer not reading): %s, expected nothing", evstr(e));
	/* Edge-triggered too: no edge while full, one when the peer drains. */
	TRY(eadd(ep, EPOLL_CTL_MOD, c, EPOLLOUT | EPOLLET));
	e = ewait(ep, c, 100, &n);
	REQ(e == 0, "window full, EPOLLET: %s", evstr(e));
	got = drain(s);
	REQ(got > 0, "peer drained nothing");
	e = ewait(ep, c, 1000, &n);
	REQ(e & EPOLLOUT, "peer drained %zd bytes: %s, expected EPOLLOUT", got, evstr(e));
	TRY(eadd(ep, EPOLL_CTL_MOD, c, EPOLLOUT));
	/* And once more, level-triggered. */
	TRY(fill_window(c));
	e = ewait(ep, c, 200, &n);
	REQ(e == 0, "full again: %s", evstr(e));
	got = drain(s);
	e = ewait(ep, c, 1000, &n);
	REQ(e & EPOLLOUT, "drained again (%zd bytes): %s", got, evstr(e));
	close(c);
	close(s);
	close(ep);
	return 0;
}

/* ---- poll, ppoll, select, pselect ---------------------------------------------------- */

static int chk_poll(void)
{
	struct pollfd p[2];
	double t0, dt;
	int c, s, r;

	TRY(pair(&c, &s));
	p[0] = (struct pollfd){.fd = s, .events = POLLIN};
	p[1] = (struct pollfd){.fd = c, .events = POLLOUT};
	r = poll(p, 2, 1000);
	REQ(r == 1 && p[0].revents == 0 && p[1].revents == POLLOUT,
	    "idle: %d, s 0x%x c 0x%x (expected only c POLLOUT)", r, p[0].revents, p[1].revents);
	t0 = now_sec();
	r = poll(p, 1, 150);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.14 && dt < 0.6,
	    "poll timeout: %d after %.3f s, expected 0 after 0.15", r, dt);
	TRY(send_all(c, "p", 1));
	t0 = now_sec();
	r = poll(p, 2, 1000);
	REQ(r == 2 && p[0].revents == POLLIN && p[1].revents == POLLOUT,
	    "after data: %d, s 0x%x c 0x%x", r, p[0].revents, p[1].revents);
	REQ(now_sec() - t0 < 0.5, "readable reported late (%.3f s)", now_sec() - t0);
	TRY(recv_exact(s, (char[1]){0}, 1));
	r = poll(p, 1, 0);
	REQ(r == 0, "drained: %d 0x%x", r, p[0].revents);
	TRY(fill_window(c));
	r = poll(p + 1, 1, 150);
	REQ(r == 0, "window full: poll POLLOUT gave %d revents 0x%x", r, p[1].revents);
	REQ(drain(s) > 0, "drain");
	r = poll(p + 1, 1, 1000);
	REQ(r == 1 && (p[1].revents & POLLOUT), "drained peer: %d 0x%x", r, p[1].revents);
	close(c);
	close(s);
	return 0;
}

static int chk_ppoll(void)
{
	struct timespec ts = {0, 150000000};
	struct pollfd p;
	sigset_t mask;
	double t0, dt;
	int c, s, r;

	sigemptyset(&mask);
	TRY(pair(&c, &s));
	p = (struct pollfd){.fd = s, .events = POLLIN};
	t0 = now_sec();
	r = ppoll(&p, 1, &ts, &mask);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.14 && dt < 0.6, "ppoll timeout: %d after %.3f s", r, dt);
	TRY(send_all(c, "p", 1));
	ts.tv_sec = 1;
	ts.tv_nsec = 0;
	r = ppoll(&p, 1, &ts, NULL);
	REQ(r == 1 && p.revents == POLLIN, "ppoll after data: %d 0x%x", r, p.revents);
	p = (struct pollfd){.fd = c, .events = POLLOUT};
	r = ppoll(&p, 1, &ts, &mask);
	REQ(r == 1 && p.revents == POLLOUT, "ppoll writable: %d 0x%x", r, p.revents);
	close(c);
	close(s);
	return 0;
}

static int chk_select(int use_pselect)
{
	const char *name = use_pselect ? "pselect" : "select";
	struct timeval tv;
	struct timespec ts;
	fd_set rd, wr;
	double t0, dt;
	int c, s, r, mx;

	TRY(pair(&c, &s));
	mx = (c > s ? c : s) + 1;
#define SEL(rds, wrs, ms)                                                                          \
	(tv = (struct timeval){(ms) / 1000, ((ms) % 1000) * 1000},                                 \
	 ts = (struct timespec){(ms) / 1000, ((ms) % 1000) * 1000000L},                            \
	 use_pselect ? pselect(mx, rds, wrs, NULL, &ts, NULL) : select(mx, rds, wrs, NULL, &tv))
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(s, &rd);
	FD_SET(c, &wr);
	r = SEL(&rd, &wr, 1000);
	REQ(r == 1 && !FD_ISSET(s, &rd) && FD_ISSET(c, &wr),
	    "%s idle: %d (readable %d, writable %d), expected only writable", name, r,
	    FD_ISSET(s, &rd), FD_ISSET(c, &wr));
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	t0 = now_sec();
	r = SEL(&rd, NULL, 150);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.14 && dt < 0.6, "%s timeout: %d after %.3f s", name, r, dt);
	TRY(send_all(c, "s", 1));
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(s, &rd);
	FD_SET(c, &wr);
	r = SEL(&rd, &wr, 1000);
	REQ(r == 2 && FD_ISSET(s, &rd) && FD_ISSET(c, &wr), "%s after data: %d", name, r);
	TRY(recv_exact(s, (char[1]){0}, 1));
	TRY(fill_window(c));
	FD_ZERO(&wr);
	FD_SET(c, &wr);
	r = SEL(NULL, &wr, 150);
	REQ(r == 0, "%s: window full but writable reported (%d)", name, r);
	REQ(drain(s) > 0, "drain");
	FD_ZERO(&wr);
	FD_SET(c, &wr);
	r = SEL(NULL, &wr, 1000);
	REQ(r == 1 && FD_ISSET(c, &wr), "%s: drained peer, not writable (%d)", name, r);
	close(s);
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	r = SEL(&rd, NULL, 1000);
	REQ(r == 1 && FD_ISSET(c, &rd), "%s: peer closed, EOF not readable (%d)", name, r);
	close(c);
#undef SEL
	return 0;
}

static int chk_select_rw(void)
{
	return chk_select(0);
}

static int chk_pselect_rw(void)
{
	return chk_select(1);
}

static int chk_select_sleep(void)
{
	struct timeval tv = {0, 200000};
	struct timespec ts = {0, 200000000};
	double t0, dt;
	int r;

	t0 = now_sec();
	r = select(0, NULL, NULL, NULL, &tv);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.19 && dt < 0.7,
	    "select(0, NULL...) slept %.3f s (rc %d), expected 0.2", dt, r);
	t0 = now_sec();
	r = pselect(0, NULL, NULL, NULL, &ts, NULL);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.19 && dt < 0.7, "pselect(0, NULL...) slept %.3f s (rc %d)", dt, r);
	t0 = now_sec();
	r = poll(NULL, 0, 200);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.19 && dt < 0.7, "poll(NULL, 0, 200) slept %.3f s (rc %d)", dt, r);
	return 0;
}

/*
 * TCP: readable means a read will not block. Random-size messages both ways (each read
 * back completely), then whenever poll reports POLLIN on a drained socket, a recv with
 * MSG_DONTWAIT must find data or EOF, never EAGAIN (a blocking reader would hang).
 */
static int spurious(int fd, const char *who, int round)
{
	char b[16];
	ssize_t r;

	if (!(poll1(fd, POLLIN, 0) & POLLIN))
		return 0;
	r = recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
	REQ(!(r < 0 && errno == EAGAIN),
	    "round %d: %s polls readable with nothing to read (recv(MSG_DONTWAIT) gives EAGAIN): "
	    "a blocking read would hang",
	    round, who);
	FAILF("round %d: %s readable after everything was read: recv gives %zd", round, who, r);
}

static int chk_no_spurious_readable(void)
{
	static char buf[70000];
	uint64_t rng = 99;
	size_t n;
	int c, s, i, from_c;

	TRY(pair(&c, &s));
	/* No Nagle/delayed-ACK pauses on the kernel path: this is about readiness, not timing. */
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	for (i = 0; i < 400; i++) {
		from_c = (rng_next(&rng) & 1) != 0;
		n = 1 + (size_t)(rng_next(&rng) % (i % 10 == 9 ? sizeof(buf) : 3000));
		pat_fill(buf, n, 5, (uint64_t)i);
		TRY(send_all(from_c ? c : s, buf, n));
		TRY(recv_exact(from_c ? s : c, buf, n));
		REQ(pat_check(buf, n, 5, (uint64_t)i) < 0, "round %d: wrong bytes", i);
		usleep(200); /* let whatever the peer sends back in return arrive */
		TRY(spurious(c, "client", i));
		TRY(spurious(s, "server", i));
	}
	close(c);
	close(s);
	return 0;
}

/* ---- idle CPU ------------------------------------------------------------------------- */

static double cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru); /* every thread, the library's too */
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static int chk_idle_cpu(void)
{
	struct timeval tv = {1, 0};
	struct epoll_event ev[4];
	double c0, t0, cpu, wall;
	int c, s, c2, s2, ep = epoll_create1(0), r;
	char b;

	REQ(ep >= 0, "epoll_create1: %s", strerror(errno));
	TRY(pair(&c, &s));
	TRY(pair(&c2, &s2));
	/* Traffic first, so every lazily started part of the library is running. */
	TRY(send_all(c, "warm", 4));
	TRY(recv_exact(s, (char[4]){0}, 4));
	TRY(send_all(s2, "warm", 4));
	TRY(recv_exact(c2, (char[4]){0}, 4));
	TRY(eadd(ep, EPOLL_CTL_ADD, s, EPOLLIN));
	TRY(eadd(ep, EPOLL_CTL_ADD, c, EPOLLIN));
	TRY(eadd(ep, EPOLL_CTL_ADD, c2, EPOLLIN | EPOLLET));
	c0 = cpu_secs();
	t0 = now_sec();
	r = epoll_wait(ep, ev, 4, 1000);
	wall = now_sec() - t0;
	cpu = cpu_secs() - c0;
	REQ(r == 0, "idle epoll_wait returned %d", r);
	REQ(cpu < 0.05 * wall,
	    "blocked in epoll_wait for %.2f s the process used %.3f s CPU "
	    "(%.1f%%, limit 5%%)",
	    wall, cpu, 100 * cpu / wall);
	/* A blocking recv with nothing to read: spins at most briefly, then sleeps. */
	setsockopt(s2, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	c0 = cpu_secs();
	t0 = now_sec();
	r = (int)recv(s2, &b, 1, 0);
	wall = now_sec() - t0;
	cpu = cpu_secs() - c0;
	REQ(r < 0 && errno == EAGAIN, "recv with SO_RCVTIMEO: %d %s", r, strerror(errno));
	REQ(cpu < 0.05 * wall, "blocked in recv for %.2f s the process used %.3f s CPU (%.1f%%)",
	    wall, cpu, 100 * cpu / wall);
	close(c);
	close(s);
	close(c2);
	close(s2);
	close(ep);
	return 0;
}

static const struct check checks[] = {
    {"epoll_level_triggered", chk_epoll_lt},
    {"epoll_edge_triggered", chk_epoll_et},
    {"epoll_edge_rearrival", chk_epoll_et_rearrival},
    {"epoll_oneshot", chk_epoll_oneshot},
    {"epoll_nested", chk_epoll_nested},
    {"epoll_rdhup", chk_epoll_rdhup},
    {"epoll_hup_both_shut", chk_epoll_hup},
    {"epoll_peer_killed", chk_epoll_peer_killed},
    {"epoll_before_connect", chk_epoll_before_connect},
    {"epoll_before_nb_connect", chk_epoll_before_nb_connect},
    {"epoll_before_connect_one_event", chk_epoll_before_connect_once},
    {"epoll_before_connect_full_window", chk_epoll_before_connect_full},
    {"epoll_out_window", chk_epoll_out},
    {"poll", chk_poll},
    {"ppoll", chk_ppoll},
    {"select", chk_select_rw},
    {"pselect", chk_pselect_rw},
    {"select_sleep", chk_select_sleep},
    {"no_spurious_readable", chk_no_spurious_readable},
    {"idle_cpu", chk_idle_cpu},
};

#define NCHECKS ((int)(sizeof(checks) / sizeof(checks[0])))

int main(int argc, char **argv)
{
	/* SIGPIPE ignored: a reset peer must show as EPIPE in these checks, not end them. */
	return run_checks(argc, argv, checks, NCHECKS, CHECK_SECS, 1);
}
