/*
 * Role: connections recycled at a high rate while asynchronous events for the ones just
 * closed are still on their way (test_scale_stale.sh). A new connection reuses the old one's
 * fd number and, in the library, very likely its memory; an event meant for the old one (a
 * close notification, a peer's death) must never reset or end the new one.
 *
 *   stale server PORT
 *   stale client PORT SEQ_CYCLES CONC_CYCLES CONC
 *   stale victim PORT SEQ          (internal: spawned by the client)
 *
 * Each cycle is one connection: a 16-byte request (sequence number, mode, magic) and a
 * 16-byte response that echoes the sequence number. By mode (sequence number % 4):
 *   0 server closes first: it writes the response and closes at once; the client closes as
 *     soon as it has the response, without waiting for the EOF (the close is still pending)
 *   1 client closes first: the server waits for the client's EOF, then closes
 *   2 the server's side dies: a child forked for the connection (it closes every other
 *     connection it inherited) writes the response, waits for the client's EOF and kills
 *     itself with SIGKILL -- a peer death for a connection the client already closed
 *   3 the client's side dies: a separate client process (posix_spawn, so it inherits
 *     nothing) reads its response and kills itself with SIGKILL without closing -- a peer
 *     death the server learns of while it accepts the next connections
 * The client runs SEQ_CYCLES cycles one at a time (every new connection lands where the last
 * one was), then CONC_CYCLES with CONC in flight (one epoll loop, non-blocking connects).
 *
 * Failures: a connection of ours that is reset, ends or times out (10 s) before its whole
 * response, or gets another's; on the server, a connection that ends before its whole
 * request, or a mode-1 connection reset instead of closed. The server prints its counts at
 * SIGTERM ("stale-server: ..."), the client its own ("stale-client: ..."); each exits 1 on
 * any failure.
 */
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#include "progs.h"
#include "scale.h"

const char *prog_name = "stale";

#define MAGIC 0x5ca1ab1eu
#define HANG_S 10.0
#define MAX_FD 65536
#define MAX_VICTIMS 2

extern char **environ;

struct msg {
	uint64_t seq;
	uint32_t mode;
	uint32_t magic;
};

_Static_assert(sizeof(struct msg) == 16, "16-byte messages");

/* ---- server ---- */

enum { S_NONE, S_REQUEST, S_WAIT_EOF, S_WAIT_END };

struct sconn {
	int state;
	size_t got;
	struct msg m;
};

static volatile sig_atomic_t stop;
static struct sconn *sc;
static long s_accepted, s_served, s_early, s_bad, s_reset_after, s_children, s_child_bad;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void s_drop(int ep, int fd)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	sc[fd].state = S_NONE;
}

/* The child of a mode-2 connection: the response, the client's EOF, then death. */
static void s_child(int fd, int lfd, int ep, const struct msg *rsp)
{
	char b;
	int i;

	close(lfd);
	close(ep);
	for (i = 0; i < MAX_FD; i++)
		if (i != fd && sc[i].state != S_NONE)
			close(i); /* what the parent serves is not ours */
	if (write_all(fd, rsp, sizeof(*rsp)) < 0)
		_exit(3);
	if (!(wait_fd(fd, POLLIN, 5000) & (POLLIN | POLLHUP)) || read(fd, &b, 1) != 0)
		_exit(4); /* the client sends nothing more: EOF is all there can be */
	raise(SIGKILL);
	_exit(5);
}

static void s_request_done(int ep, int lfd, int fd)
{
	struct sconn *c = &sc[fd];
	struct msg rsp = {.seq = c->m.seq, .mode = c->m.mode, .magic = ~MAGIC};
	pid_t pid;

	if (c->m.magic != MAGIC || c->m.mode > 3) {
		if (s_bad++ < 5)
			prog_msg("fd %d: a request that is not one (seq %llu)", fd,
				 (unsigned long long)c->m.seq);
		s_drop(ep, fd);
		return;
	}
	s_served++;
	if (c->m.mode == 2) {
		pid = fork();
		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0)
			s_child(fd, lfd, ep, &rsp);
		s_children++;
		s_drop(ep, fd); /* the child holds it now */
		return;
	}
	if (write_all(fd, &rsp, sizeof(rsp)) < 0) {
		if (s_early++ < 5)
			prog_msg("fd %d (seq %llu): response not sent: %s", fd,
				 (unsigned long long)c->m.seq, strerror(errno));
		s_drop(ep, fd);
		return;
	}
	if (c->m.mode == 0)
		s_drop(ep, fd);
	else
		c->state = c->m.mode == 1 ? S_WAIT_EOF : S_WAIT_END;
}

static void s_readable(int ep, int lfd, int fd)
{
	struct sconn *c = &sc[fd];
	char b[64];
	ssize_t r;

	if (c->state == S_REQUEST) {
		r = read(fd, (char *)&c->m + c->got, sizeof(c->m) - c->got);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0) {
			if (s_early++ < 5)
				prog_msg("fd %d: the connection ended after %zu bytes of its request "
					 "(%s)",
					 fd, c->got, r == 0 ? "EOF" : strerror(errno));
			s_drop(ep, fd);
			return;
		}
		c->got += (size_t)r;
		if (c->got == sizeof(c->m))
			s_request_done(ep, lfd, fd);
		return;
	}
	r = read(fd, b, sizeof(b));
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r > 0) {
		if (s_bad++ < 5)
			prog_msg("fd %d: bytes after the request", fd);
	} else if (r < 0 && c->state == S_WAIT_EOF) {
		/* The client closed in order: a reset here is an event that was not its own. */
		if (s_reset_after++ < 5)
			prog_msg("fd %d (seq %llu, client closes first): %s instead of EOF", fd,
				 (unsigned long long)c->m.seq, strerror(errno));
	}
	s_drop(ep, fd); /* EOF, or (mode 3) the dead client's EOF or reset */
}

static void s_reap(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			continue; /* as intended */
		if (s_child_bad++ < 5)
			prog_msg("child %d: %s %d (3: response not sent, 4: no EOF from the client)",
				 (int)pid, WIFEXITED(status) ? "exit" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	}
}

static int run_server(int port)
{
	struct sockaddr_in sa = loopback(port);
	struct epoll_event ev = {.events = EPOLLIN}, evs[64];
	int lfd, ep, fd, i, n, one = 1;
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_handler = on_term;
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	sc = calloc(MAX_FD, sizeof(*sc));
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (sc == NULL || lfd < 0)
		die("setup: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1024) < 0)
		die("bind/listen %d: %s", port, strerror(errno));
	set_nonblocking(lfd);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = lfd;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll: %s", strerror(errno));
	alarm(280);
	while (!stop) {
		n = epoll_wait(ep, evs, 64, 100);
		for (i = 0; i < n; i++) {
			if (evs[i].data.fd != lfd) {
				s_readable(ep, lfd, evs[i].data.fd);
				continue;
			}
			while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
				if (fd >= MAX_FD)
					die("fd %d too high", fd);
				sc[fd] = (struct sconn){.state = S_REQUEST};
				ev.data.fd = fd;
				if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
					die("epoll_ctl: %s", strerror(errno));
				s_accepted++;
			}
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				die("accept: %s", strerror(errno));
		}
		s_reap();
	}
	s_reap();
	printf("stale-server: accepted=%ld served=%ld early_end=%ld bad=%ld reset_after_close=%ld "
	       "children=%ld children_failed=%ld\n",
	       s_accepted, s_served, s_early, s_bad, s_reset_after, s_children, s_child_bad);
	return s_early || s_bad || s_reset_after || s_child_bad ? 1 : 0;
}

/* ---- victim (mode 3) ---- */

static int run_victim(int port, uint64_t seq)
{
	struct msg req = {.seq = seq, .mode = 3, .magic = MAGIC}, rsp;
	int fd = tcp_connect(port);

	if (fd < 0)
		die("victim %llu: connect: %s", (unsigned long long)seq, strerror(errno));
	if (write_all(fd, &req, sizeof(req)) < 0)
		die("victim %llu: write: %s", (unsigned long long)seq, strerror(errno));
	if (!(wait_fd(fd, POLLIN, 10000) & (POLLIN | POLLHUP | POLLERR)))
		die("victim %llu: no response in 10 s", (unsigned long long)seq);
	if (read_full(fd, &rsp, sizeof(rsp), 0) != (ssize_t)sizeof(rsp))
		die("victim %llu: response cut short: %s", (unsigned long long)seq, strerror(errno));
	if (rsp.seq != seq || rsp.magic != ~MAGIC)
		die("victim %llu: got the response of %llu", (unsigned long long)seq,
		    (unsigned long long)rsp.seq);
	raise(SIGKILL); /* die holding the connection */
	return 9;
}

/* ---- client ---- */

struct cslot {
	int fd;
	int sent;
	size_t got;
	uint64_t seq;
	double t0;
	pid_t victim;
	struct msg rsp;
};

struct client {
	int ep, port;
	long started, ok, failed, f_connect, f_reset, f_eof, f_mismatch, f_hang, f_victim;
	long victims_live;
	const char *self;
};

static void c_fail(struct client *k, struct cslot *s, long *counter, const char *what, int e)
{
	if (k->failed++ < 10)
		prog_msg("connection %llu (mode %llu, fd %d): %s%s%s", (unsigned long long)s->seq,
			 (unsigned long long)(s->seq % 4), s->fd, what, e ? ": " : "",
			 e ? strerror(e) : "");
	(*counter)++;
	if (s->fd >= 0) {
		epoll_ctl(k->ep, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
	}
	s->fd = -1;
}

static void c_spawn_victim(struct client *k, struct cslot *s)
{
	char port[16], seq[32];
	char *argv[] = {(char *)"stale", (char *)"victim", port, seq, NULL};
	int rc;

	snprintf(port, sizeof(port), "%d", k->port);
	snprintf(seq, sizeof(seq), "%llu", (unsigned long long)s->seq);
	rc = posix_spawn(&s->victim, k->self, NULL, NULL, argv, environ);
	if (rc != 0)
		die("posix_spawn: %s", strerror(rc));
	k->victims_live++;
}

static void c_start(struct client *k, struct cslot *s)
{
	struct sockaddr_in sa = loopback(k->port);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = s};

	s->seq = (uint64_t)k->started++;
	s->sent = 0;
	s->got = 0;
	s->t0 = now_sec();
	s->victim = 0;
	if (s->seq % 4 == 3) {
		c_spawn_victim(k, s);
		return;
	}
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		c_fail(k, s, &k->f_connect, "connect", errno);
		return;
	}
	if (epoll_ctl(k->ep, EPOLL_CTL_ADD, s->fd, &ev) < 0)
		die("epoll_ctl: %s", strerror(errno));
}

static void c_event(struct client *k, struct cslot *s, uint32_t events)
{
	struct msg req = {.seq = s->seq, .mode = (uint32_t)(s->seq % 4), .magic = MAGIC};
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
	socklen_t len = sizeof(int);
	int err = 0;
	ssize_t r;

	if (!s->sent) {
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
			c_fail(k, s, &k->f_connect, "connect (SO_ERROR)", err ? err : errno);
			return;
		}
		if (write(s->fd, &req, sizeof(req)) != (ssize_t)sizeof(req)) {
			c_fail(k, s, errno == ECONNRESET || errno == EPIPE ? &k->f_reset : &k->f_eof,
			       "request not sent", errno);
			return;
		}
		s->sent = 1;
		epoll_ctl(k->ep, EPOLL_CTL_MOD, s->fd, &ev);
		return;
	}
	r = read(s->fd, (char *)&s->rsp + s->got, sizeof(s->rsp) - s->got);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r < 0) {
		c_fail(k, s, errno == ECONNRESET ? &k->f_reset : &k->f_eof,
		       "read before the whole response", errno);
		return;
	}
	if (r == 0) {
		c_fail(k, s, &k->f_eof, "EOF before the whole response", 0);
		return;
	}
	s->got += (size_t)r;
	if (s->got < sizeof(s->rsp))
		return;
	if (s->rsp.seq != s->seq || s->rsp.magic != ~MAGIC) {
		c_fail(k, s, &k->f_mismatch, "another connection's response", 0);
		return;
	}
	/* Closed at once, whatever the server does next: its close or death is still coming. */
	epoll_ctl(k->ep, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	s->fd = -1;
	k->ok++;
}

/* Collect victims that ended: killed as intended is a success. */
static void c_reap(struct client *k, struct cslot *slots, int conc)
{
	int i, status;

	for (i = 0; i < conc; i++) {
		struct cslot *s = &slots[i];

		if (s->victim <= 0 || waitpid(s->victim, &status, WNOHANG) != s->victim)
			continue;
		k->victims_live--;
		s->victim = 0;
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			k->ok++;
		else
			c_fail(k, s, &k->f_victim, "victim process failed (see its message)", 0);
	}
}

static void c_run(struct client *k, long upto, int conc)
{
	struct cslot *slots = calloc((size_t)conc, sizeof(*slots));
	struct epoll_event evs[64];
	int i, n, live;
	double now;

	if (slots == NULL)
		die("out of memory");
	for (i = 0; i < conc; i++)
		slots[i].fd = -1;
	for (;;) {
		live = 0;
		now = now_sec();
		c_reap(k, slots, conc);
		for (i = 0; i < conc; i++) {
			struct cslot *s = &slots[i];

			if ((s->fd >= 0 || s->victim > 0) && now - s->t0 > HANG_S) {
				if (s->victim > 0) {
					kill(s->victim, SIGKILL);
					waitpid(s->victim, NULL, 0);
					k->victims_live--;
					s->victim = 0;
				}
				c_fail(k, s, &k->f_hang, "nothing for 10 s (hang)", 0);
			}
			/* at most MAX_VICTIMS processes at once: spawning is the slow part */
			if (s->fd < 0 && s->victim <= 0 && k->started < upto &&
			    (k->started % 4 != 3 || k->victims_live < MAX_VICTIMS))
				c_start(k, s);
			live += s->fd >= 0 || s->victim > 0;
		}
		if (live == 0 && k->started >= upto)
			break;
		n = epoll_wait(k->ep, evs, 64, k->victims_live ? 1 : 100);
		for (i = 0; i < n; i++)
			c_event(k, evs[i].data.ptr, evs[i].events);
	}
	free(slots);
}

static int run_client(int port, long seq_cycles, long conc_cycles, int conc, const char *self)
{
	struct client k = {.port = port, .self = self};
	double t0 = now_sec(), t1;

	signal(SIGPIPE, SIG_IGN);
	alarm(280);
	k.ep = epoll_create1(EPOLL_CLOEXEC);
	if (k.ep < 0)
		die("epoll_create1: %s", strerror(errno));
	c_run(&k, seq_cycles, 1);
	t1 = now_sec();
	c_run(&k, seq_cycles + conc_cycles, conc);
	printf("stale-client: cycles=%ld ok=%ld failed=%ld connect=%ld reset=%ld eof=%ld "
	       "mismatch=%ld hang=%ld victim_failed=%ld seq_seconds=%.2f conc_seconds=%.2f\n",
	       k.started, k.ok, k.failed, k.f_connect, k.f_reset, k.f_eof, k.f_mismatch, k.f_hang,
	       k.f_victim, t1 - t0, now_sec() - t1);
	return k.failed || k.ok != k.started ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "server") == 0)
		return run_server(port_arg(argv[2]));
	if (argc == 4 && strcmp(argv[1], "victim") == 0)
		return run_victim(port_arg(argv[2]), strtoull(argv[3], NULL, 10));
	if (argc == 6 && strcmp(argv[1], "client") == 0)
		return run_client(port_arg(argv[2]), atol(argv[3]), atol(argv[4]), atoi(argv[5]),
				  "/proc/self/exe");
	die("usage: stale server PORT | stale client PORT SEQ_CYCLES CONC_CYCLES CONC");
}
