/*
 * Unit tests for core/calls/lifecycle, the process's life-cycle hooks: epoll registrations
 * remembered while a socket may still change its file (added, modified, removed, bounded,
 * per epoll set); fork: the fork is counted, a shareable connection (shm) is held for the
 * child before it exists and let go again if the fork failed, and in the child it stays
 * shared while kernel sockets start a fresh account; exit: every accelerated stream this
 * process holds is ended in order (the peer reads EOF). stdio on a shm connection: the fd
 * names the relay's pipe, the relay goes to a helper process at once (this process keeps no
 * record of it), bytes flow, an epoll registration follows it; exec: nothing to hand over
 * then, and for relays that run here a failed exec gives the paused relays back. A close
 * while a call is inside the socket (a reference held): the connection waits for the call,
 * which names the app end by a hidden dup; the exit ends it too, a forked child forgets it. The relay
 * of a connection that cannot follow a fork needs verbs (a device) and is left to the
 * Soft-RoCE guest; the exec that succeeds is int_stdio_relay_* (inetd).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/fdhide.h"
#include "base/proc.h"
#include "base/stats.h"
#include "calls/calls.h"
#include "conn/conn.h"
#include "conn/relay.h"
#include "sock/listener.h"
#include "sock/sock.h"
#include "stream/stream.h"
#include "transport/shm.h"
#include "transport/shm_rdv.h"
#include "unit.h"
#include "unit_cm.h"

#define NBUF 8
#define BSIZE 4096

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_stats_reset();
	return 0;
}

/* ---- epoll registrations ---- */

static struct rsk_sock *sock_of(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	assert_non_null(s);
	rsk_sock_put(s); /* the slot's reference keeps it */
	return s;
}

static void test_epoll_notes(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ep[RSK_SOCK_EPREGS + 1], i;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
	struct rsk_sock *s;

	(void)state;
	/* an untracked fd: nothing to remember, nothing breaks */
	rsk_life_epoll_note(3, EPOLL_CTL_ADD, fd, &ev);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	s = sock_of(fd);
	for (i = 0; i <= RSK_SOCK_EPREGS; i++)
		ep[i] = 100 + i; /* the epoll fds are only remembered, never used here */
	rsk_life_epoll_note(ep[0], EPOLL_CTL_ADD, fd, &ev);
	assert_int_equal(s->nepregs, 1);
	assert_int_equal(s->epregs[0].epfd, ep[0]);
	assert_int_equal(s->epregs[0].ev.events, EPOLLIN);
	/* MOD replaces the same set's entry */
	ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
	ev.data.u64 = 2;
	rsk_life_epoll_note(ep[0], EPOLL_CTL_MOD, fd, &ev);
	assert_int_equal(s->nepregs, 1);
	assert_int_equal(s->epregs[0].ev.events, EPOLLIN | EPOLLOUT | EPOLLET);
	assert_int_equal(s->epregs[0].ev.data.u64, 2);
	/* one per epoll set, past the socket's own RSK_SOCK_EPREGS too (each must follow a
	 * move: sock.c, rsk_sock_epreg) */
	for (i = 1; i <= RSK_SOCK_EPREGS; i++) {
		ev.data.u64 = 10 + (uint64_t)i;
		rsk_life_epoll_note(ep[i], EPOLL_CTL_ADD, fd, &ev);
	}
	assert_int_equal(s->nepregs, RSK_SOCK_EPREGS + 1);
	assert_int_equal(rsk_sock_epreg_at(s, RSK_SOCK_EPREGS)->epfd, ep[RSK_SOCK_EPREGS]);
	assert_int_equal(rsk_sock_epreg_at(s, RSK_SOCK_EPREGS)->ev.data.u64, 10 + RSK_SOCK_EPREGS);
	/* DEL of a set forgets it (the others stay: the last takes its place); DEL of an
	 * unknown set changes nothing */
	rsk_life_epoll_note(ep[1], EPOLL_CTL_DEL, fd, NULL);
	assert_int_equal(s->nepregs, RSK_SOCK_EPREGS);
	for (i = 0; i < s->nepregs; i++)
		assert_true(rsk_sock_epreg_at(s, i)->epfd != ep[1]);
	assert_int_equal(s->epregs[1].epfd, ep[RSK_SOCK_EPREGS]);
	rsk_life_epoll_note(999, EPOLL_CTL_DEL, fd, NULL);
	assert_int_equal(s->nepregs, RSK_SOCK_EPREGS);
	/* an ADD without an event (a caller bug) is not remembered */
	rsk_life_epoll_note(ep[1], EPOLL_CTL_ADD, fd, NULL);
	assert_int_equal(s->nepregs, RSK_SOCK_EPREGS);
	/* a set added again is remembered again, at the end */
	ev.data.u64 = 77;
	rsk_life_epoll_note(ep[1], EPOLL_CTL_ADD, fd, &ev);
	assert_int_equal(s->nepregs, RSK_SOCK_EPREGS + 1);
	assert_int_equal(rsk_sock_epreg_at(s, RSK_SOCK_EPREGS)->epfd, ep[1]);
	assert_int_equal(rsk_sock_epreg_at(s, RSK_SOCK_EPREGS)->ev.data.u64, 77);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
}

/* A listening socket registered in an epoll set: its listeners learn that we accept. */
static void test_epoll_note_listener_interest(void **state)
{
	enum rdmasock_fallback why;
	struct epoll_event ev = {.events = EPOLLIN};
	struct rsk_sock *s;
	uint16_t port;
	int fd;

	(void)state;
	rsk_config.mode = RSK_MODE_SHM;
	fd = ucm_tcp_bound(1, &port);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_LISTENING), 0);
	s = sock_of(fd);
	assert_int_equal(rsk_listener_open(fd, &s->lst, &why), 0);
	rsk_life_epoll_note(100, EPOLL_CTL_ADD, fd, &ev); /* shm takes the note (a no-op) */
	assert_int_equal(s->nepregs, 1);
	assert_int_equal(rsk_sock_release_fd(fd), 1); /* closes the listener */
	close(fd);
}

/*
 * A listener another program may accept on where no library sees it takes no new clients:
 * at exec only a listener the new image inherits (no FD_CLOEXEC) and is handed by a known
 * convention (here nginx's NGINX list), not one a helper merely inherits; and any listener
 * passed with SCM_RIGHTS. Other fds passed, and listeners an exec closes, keep their
 * rendezvous.
 */
static void test_listeners_leaked(void **state)
{
	struct sockaddr_in kept, inherited, handed, passed;
	int k = ucm_listener_open(&kept), i = ucm_listener_open(&inherited);
	int h = ucm_listener_open(&handed), p = ucm_listener_open(&passed), fds[2] = {k, p}, sv[2];
	char cbuf[CMSG_SPACE(sizeof(fds))], var[32];
	char *envp[] = {"PATH=/usr/bin", var, NULL};
	struct msghdr m = {.msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;

	(void)state;
	assert_int_equal(fcntl(i, F_SETFD, 0), 0); /* inherited by an exec, not handed */
	assert_int_equal(fcntl(h, F_SETFD, 0), 0);
	snprintf(var, sizeof(var), "NGINX=%d;", h);
	assert_int_equal(rsk_life_exec_prepare(NULL, envp), 0);
	assert_false(rsk_rdv_exists((struct sockaddr *)&handed));
	assert_true(rsk_rdv_exists((struct sockaddr *)&inherited));
	assert_true(rsk_rdv_exists((struct sockaddr *)&kept));
	assert_true(rsk_rdv_exists((struct sockaddr *)&passed));
	/* a message passing a socketpair end and the listener p: only p is leaked */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fds[0] = sv[0];
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	rsk_life_fds_passed(&m);
	assert_false(rsk_rdv_exists((struct sockaddr *)&passed));
	assert_true(rsk_rdv_exists((struct sockaddr *)&kept));
	close(sv[0]);
	close(sv[1]);
	ucm_listener_close(k);
	ucm_listener_close(i);
	ucm_listener_close(h);
	ucm_listener_close(p);
}

/* The conventions that hand an exec'd program a listener, and what does not. */
static void test_exec_hands(void **state)
{
	char pid[32], other[32];
	char *sd[] = {"LISTEN_FDS=2", pid, NULL}, *sd_other[] = {"LISTEN_FDS=2", other, NULL};
	char *sd_nopid[] = {"LISTEN_FDS=1", NULL}, *none[] = {NULL};
	char *lists[] = {"NGINX=6;7;", "SERVER_STARTER_PORT=127.0.0.1:8080=9", "EINHORN_FDS=11 12",
			 "UNICORN_FD=13,14", "GUNICORN_FD=15", "FOO=16", "XNGINX=17;", NULL};
	const struct {
		int fd;
		char **envp;
		int want;
	} c[] = {
		{0, NULL, 1}, {2, none, 1}, /* inetd: the listener on stdin */
		{3, NULL, 0}, {3, none, 0},
		{3, sd, 1}, {4, sd, 1}, {5, sd, 0},
		{3, sd_other, 0}, /* for another process */
		{3, sd_nopid, 1}, {4, sd_nopid, 0},
		{6, lists, 1}, {7, lists, 1}, {8, lists, 0}, {9, lists, 1}, {12, lists, 1},
		{14, lists, 1}, {15, lists, 1},
		{16, lists, 0}, {17, lists, 0}, /* not hand-over variables */
	};
	size_t i;

	(void)state;
	snprintf(pid, sizeof(pid), "LISTEN_PID=%d", (int)getpid());
	snprintf(other, sizeof(other), "LISTEN_PID=%d", (int)getpid() + 1);
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct rsk_newprog p = {.envp = c[i].envp, .pid = getpid()};

		if (rsk_life_hands(c[i].fd, &p) != c[i].want)
			fail_msg("case %zu: fd %d, want %d", i, c[i].fd, c[i].want);
	}
}

/* A listener named on the new program's command line: an argument that says "fd" and then,
 * after separators, a list of numbers (in one word, or the next), in any case. */
static void test_exec_hands_argv(void **state)
{
	const struct {
		int fd;
		char *argv[4];
		int want;
	} c[] = {
		{3, {"gunicorn", "--bind", "fd://3", NULL}, 1},
		{5, {"prog", "--listen-fd=5", NULL}, 1},
		{7, {"socat", "ACCEPT-FD:7", "STDIO", NULL}, 1},
		{9, {"prog", "--fds", "8,9", NULL}, 1},
		{9, {"prog", "--FD", "9", NULL}, 1},
		{4, {"cat", "/dev/fd/4", NULL}, 1},
		{6, {"sh -c 'server --fd 6 &'", NULL}, 1}, /* system(): one command line */
		{3, {"prog", "--fd=30", NULL}, 0},        /* another number */
		{3, {"prog", "--fds=4,5", NULL}, 0},
		{3, {"prog", "3", NULL}, 0},             /* a bare number names nothing */
		{3, {"prog", "--fdx=3", "fd3", NULL}, 0}, /* other words */
		{3, {"prog", "--port", "3", NULL}, 0},
		{3, {"prog", "--fd", NULL}, 0}, /* nothing after it */
		{3, {NULL}, 0},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct rsk_newprog p = {.argv = c[i].argv, .pid = getpid()};

		if (rsk_life_hands(c[i].fd, &p) != c[i].want)
			fail_msg("case %zu: fd %d, want %d", i, c[i].fd, c[i].want);
	}
}

/* ---- an accelerated connection, as rsk_sock_become leaves it (see test_sockopt) ---- */

struct accel {
	int fd, other;
	struct rsk_conn *c;
	struct rsk_sock *s;
	int memfd;
	struct rsk_ep *peer;
	struct rsk_stream pst;
};

static void accel_open(struct accel *a)
{
	int sv[2];

	memset(a, 0, sizeof(*a));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	a->fd = sv[0];
	a->other = sv[1];
	a->c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(a->c);
	a->memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(a->c), &a->c->ep);
	assert_true(a->memfd >= 0);
	assert_int_equal(rsk_shm_open(a->memfd, RSK_SHM_SERVER, -1, NULL, &a->peer), 0);
	assert_int_equal(rsk_stream_init(&a->c->st, a->c->ep, rsk_conn_rxq(a->c)), 0);
	assert_int_equal(rsk_stream_init(&a->pst, a->peer, NULL), 0);
	a->c->transport = RDMASOCK_TRANSPORT_SHM;
	a->c->domain = AF_INET;
	assert_int_equal(rsk_sock_track(a->fd, AF_INET, RSK_SOCK_CONNECTED), 0);
	a->s = sock_of(a->fd);
	a->s->conn = a->c;
	a->s->transport = RDMASOCK_TRANSPORT_SHM;
	assert_int_equal(rsk_fdtab_store(a->fd, (uintptr_t)a->s), 0);
}

/* The peer's side, and the socketpair's other end. */
static void accel_peer_close(struct accel *a)
{
	rsk_stream_fini(&a->pst);
	rsk_ep_destroy(a->peer);
	close(a->memfd);
	close(a->other);
}

/* @released: rsk_life_exit already ended and freed the connection. */
static void accel_close(struct accel *a, int released)
{
	a->s->conn = NULL;
	(void)rsk_sock_release_fd(a->fd);
	if (!released) {
		rsk_stream_fini(&a->c->st);
		rsk_conn_discard(a->c, -1, -1, -1);
	}
	close(a->fd);
	accel_peer_close(a);
}

static void test_fork_prepare_and_failed(void **state)
{
	unsigned int forks = rsk_proc_forks();
	struct accel a;

	(void)state;
	accel_open(&a);
	assert_int_equal(a.c->holders, 1);
	rsk_life_fork_prepare();
	assert_int_equal(rsk_proc_forks(), forks + 1);
	assert_int_equal(a.c->holders, 2); /* the child holds it too, before it exists */
	rsk_life_fork_failed();
	assert_int_equal(a.c->holders, 1);
	/* a kernel socket is not held (the kernel shares it) */
	accel_close(&a, 0);
}

/* The peer's read after waiting up to @wait ms for progress: bytes into @buf, 0 EOF, -EAGAIN
 * nothing yet (the stream has not ended). */
static ssize_t peer_read_into(struct accel *a, void *buf, size_t len, int wait)
{
	struct iovec iov = {buf, len};
	int i;

	for (i = 0; i < wait && rsk_stream_progress(&a->pst) == 0; i++)
		unit_sleep_ms(1);
	(void)rsk_stream_progress(&a->pst);
	return rsk_stream_recv(&a->pst, &iov, 1, 0);
}

/* The peer's view after a look: 0 EOF, -EAGAIN nothing yet. */
static ssize_t peer_read(struct accel *a, int wait)
{
	char buf[8];

	return peer_read_into(a, buf, sizeof(buf), wait);
}

/* In the child: the shm connection stays shared and usable; kernel sockets start afresh. */
struct child_arg {
	struct accel *a;
	int kcli, ksrv;
};

static int child_after_fork(void *arg)
{
	struct child_arg *k = arg;
	struct rsk_sock *s;
	char buf[16] = "child";
	struct iovec iov = {buf, 5};

	rsk_life_fork_child();
	if (rsk_proc_pid() != getpid())
		return 10;
	s = rsk_sock_get(k->a->fd);
	if (s == NULL || s->conn != k->a->c || s->detached)
		return 11;
	rsk_sock_put(s);
	/* the child sends on the shared stream */
	if (rsk_stream_send(&k->a->c->st, &iov, 1, 0) != 5)
		return 12;
	/* what the kernel socket carried before the fork is the parent's to report */
	if (send(k->kcli, "xyz", 3, MSG_NOSIGNAL) != 3)
		return 13;
	if (rsk_sock_release_fd(k->kcli) != 1)
		return 14;
	if (rsk_stats.bytes_sent[RDMASOCK_TRANSPORT_KERNEL] != 3)
		return 15;
	return 0;
}

static void test_fork_child(void **state)
{
	struct child_arg k;
	struct accel a;
	char buf[64];
	uint16_t port;
	int l;

	(void)state;
	accel_open(&a);
	k.a = &a;
	l = ucm_tcp_bound(1, &port);
	{
		struct sockaddr_in to = ucm_lo4(port);

		k.kcli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(connect(k.kcli, (struct sockaddr *)&to, sizeof(to)), 0);
		k.ksrv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	}
	assert_int_equal(rsk_sock_track(k.kcli, AF_INET, RSK_SOCK_CONNECTED), 0);
	assert_int_equal(send(k.kcli, "before-fork", 11, MSG_NOSIGNAL), 11);
	rsk_life_fork_prepare();
	assert_int_equal(unit_in_child(child_after_fork, &k, 5000), 0);
	/* the child's message arrived on the connection both share */
	assert_int_equal(peer_read_into(&a, buf, sizeof(buf), 1000), 5);
	assert_memory_equal(buf, "child", 5);
	/* the child held it and exited without closing it (_exit): still counted here */
	assert_int_equal(a.c->holders, 2);
	a.c->holders = 1;
	assert_int_equal(rsk_sock_release_fd(k.kcli), 1);
	close(k.kcli);
	close(k.ksrv);
	close(l);
	accel_close(&a, 0);
}

/* At exit: each accelerated stream we hold ends in order, as the kernel ends TCP's. */
static void test_exit_ends_streams(void **state)
{
	struct accel a;

	(void)state;
	accel_open(&a);
	rsk_life_exit();
	assert_null(a.s->conn);
	assert_int_equal(peer_read(&a, 1000), 0); /* EOF: a FIN, not a reset */
	assert_true(a.peer->ops->peer_closed(a.peer));
	/* a second exit hook finds nothing left to end */
	rsk_life_exit();
	accel_close(&a, 1);
}

/* _exit: the same end, from a thread of ours; nothing at all when no connection is live. */
static void test_quick_exit_ends_streams(void **state)
{
	struct accel a;

	(void)state;
	accel_open(&a);
	/* accel_open does not register it: to the fast path, the process holds no connection */
	rsk_life_quick_exit();
	assert_ptr_equal(a.s->conn, a.c);
	__atomic_add_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	rsk_life_quick_exit(); /* returns once the thread ended the stream */
	__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	assert_null(a.s->conn);
	assert_int_equal(peer_read(&a, 1000), 0); /* EOF: a FIN, not a reset */
	assert_true(a.peer->ops->peer_closed(a.peer));
	accel_close(&a, 1);
}

/* _exit with a listener open and no connection: its doorbell file still goes, as with exit
 * (the destructors do that; _exit runs none). */
static void test_quick_exit_removes_bells(void **state)
{
	struct rsk_rdv_bell *b[2];
	struct sockaddr_in dest;
	char path[160];
	struct stat ns;
	uint16_t port;
	int hold, l[2], st;
	pid_t pid;

	(void)state;
	hold = ucm_tcp_bound(0, &port);
	dest = ucm_lo4(port);
	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/rdmasock-rdv.%lu.127.0.0.1.%u",
		 (unsigned long)ns.st_ino, (unsigned int)port);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		rsk_life_fork_child();
		if (rsk_rdv_listen_bells((struct sockaddr *)&dest, 0, 16, l, b) != 1 ||
		    access(path, F_OK) != 0)
			_exit(2);
		rsk_life_quick_exit();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_not_equal(access(path, F_OK), 0);
	close(hold);
}

/* ---- stdio: a shm connection switched to a relay with its own pipe, and exec ---- */

/* A shm connection as the application has it: attached and registered, the peer its waker
 * (its kicks write tokens into our app end), tracked at the app end's number. */
struct relayed {
	struct rsk_conn *c;
	struct rsk_ep *peer;
	struct rsk_stream pst;
	int fd, ctl, memfd;
};

static void relayed_open(struct relayed *r)
{
	int tcp = -1;

	memset(r, 0, sizeof(*r));
	r->c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(r->c);
	r->memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(r->c), &r->c->ep);
	assert_true(r->memfd >= 0);
	assert_int_equal(rsk_conn_prepare(r->c, -1, &r->fd, &r->ctl, &tcp), 0);
	assert_int_equal(rsk_shm_open(r->memfd, RSK_SHM_SERVER, r->ctl, NULL, &r->peer), 0);
	assert_int_equal(rsk_stream_init(&r->pst, r->peer, NULL), 0);
	rsk_stream_set_nodelay(&r->pst, 1);
	assert_int_equal(rsk_conn_attach(r->c, r->fd, -1, -1, 0), 0);
	rsk_conn_lock(r->c);
	rsk_stream_set_nodelay(&r->c->st, 1);
	rsk_conn_unlock(r->c);
	assert_int_equal(rsk_sock_track(r->fd, AF_INET, RSK_SOCK_CONNECTED), 0);
	sock_of(r->fd)->conn = r->c;
	sock_of(r->fd)->transport = RDMASOCK_TRANSPORT_SHM;
	assert_int_equal(rsk_fdtab_store(r->fd, (uintptr_t)sock_of(r->fd)), 0);
}

/* Both ways through the application's fd, @tag in the bytes. */
static void relayed_echo(struct relayed *r, const char *tag)
{
	struct pollfd p = {.fd = r->fd, .events = POLLIN};
	size_t n = strlen(tag);
	char buf[64];
	struct iovec iov = {buf, sizeof(buf)};
	ssize_t k = -EAGAIN;
	int i;

	assert_int_equal(send(r->fd, tag, n, MSG_NOSIGNAL), (ssize_t)n);
	for (i = 0; i < 2000 && (k = rsk_stream_recv(&r->pst, &iov, 1, 0)) == -EAGAIN; i++)
		unit_sleep_ms(1);
	assert_int_equal(k, (ssize_t)n);
	assert_memory_equal(buf, tag, n);
	iov.iov_base = (void *)tag;
	iov.iov_len = n;
	assert_int_equal(rsk_stream_send(&r->pst, &iov, 1, 0), (ssize_t)n);
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_int_equal(recv(r->fd, buf, sizeof(buf), 0), (ssize_t)n);
	assert_memory_equal(buf, tag, n);
}

static void relayed_close(struct relayed *r)
{
	assert_int_equal(rsk_sock_release_fd(r->fd), 1);
	close(r->fd); /* the pipe's last holder: FIN, and with the peer's FIN the relay ends */
	(void)rsk_stream_shutdown_wr(&r->pst);
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000));
	rsk_stream_fini(&r->pst);
	rsk_ep_destroy(r->peer); /* closes our ctl end */
	close(r->memfd);
}

/*
 * stdio on a connection already on shm: the application's number names a pipe from then on
 * (a kernel-watched slot), bytes flow both ways through it, and an epoll registration made
 * before follows it (its data kept; EPOLL_CTL_DEL finds it).
 */
static void test_stdio_relays_shm(void **state)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42}, got;
	struct relayed r;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	(void)state;
	relayed_open(&r);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, r.fd, &ev), 0);
	rsk_life_stdio(r.fd);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(r.fd)));
	assert_null(sock_of(r.fd)->conn);
	/* The relay runs in a helper process from its start (it must outlive this one): our
	 * records of it and of its connection go, and the bytes still flow, moved over there. */
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0 && rsk_relay_count() == 0, 2000));
	assert_int_equal(rsk_life_exec_prepare(NULL, NULL), 0); /* nothing left here for an exec */
	relayed_echo(&r, "through the pipe");
	assert_int_equal(epoll_wait(ep, &got, 1, 0), 0); /* read: nothing more to report */
	{
		struct iovec iov = {"again", 5};

		assert_int_equal(rsk_stream_send(&r.pst, &iov, 1, 0), 5);
	}
	assert_int_equal(epoll_wait(ep, &got, 1, 2000), 1);
	assert_int_equal(got.data.u64, 42);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_DEL, r.fd, NULL), 0);
	close(ep);
	relayed_close(&r);
}

/*
 * exec, for relays that still run here (their helper could not be forked; here: started
 * so): the relays pause and a helper process waits for the exec; an exec that fails brings
 * them back here (the helper leaves without touching them). Without relays, or in a vfork
 * child, nothing is handed over.
 */
static void test_exec_handoff_failed(void **state)
{
	struct relayed r;

	(void)state;
	rsk_life_relay_helper = 0;
	assert_int_equal(rsk_life_exec_prepare(NULL, NULL), 0); /* no relay */
	relayed_open(&r);
	rsk_life_stdio(r.fd);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), 1); /* the relay holds it, here */
	assert_int_equal(rsk_life_exec_prepare(NULL, NULL), 1);
	rsk_life_exec_failed();
	relayed_echo(&r, "after a failed exec");
	relayed_close(&r);
	rsk_life_relay_helper = 1;
}

/* ---- close() while another thread is inside a call on the socket ---- */

/* Same file (the app end) behind two numbers. */
static int same_file(int x, int y)
{
	struct stat sx, sy;

	return fstat(x, &sx) == 0 && fstat(y, &sy) == 0 && sx.st_ino == sy.st_ino &&
	       sx.st_dev == sy.st_dev;
}

/*
 * A call holds a reference (rsk_sock_get) when the application's last close comes: the
 * connection stays whole (no FIN: the peer reads nothing), the call names the app end by a
 * hidden dup of it from then on, and the call's end releases it: the peer reads EOF and the
 * dup is gone.
 */
static void test_close_under_call_waits(void **state)
{
	struct accel a;
	struct rsk_sock *s;
	int late;

	(void)state;
	accel_open(&a);
	s = rsk_sock_get(a.fd); /* the call in progress */
	assert_int_equal(rsk_sock_release_fd(a.fd), 1);
	assert_int_equal(s->release_late, 1);
	assert_ptr_equal(s->conn, a.c);
	late = rsk_sock_call_fd(s, a.fd);
	assert_int_not_equal(late, a.fd);
	assert_true(same_file(late, a.fd));
	close(a.fd); /* the real close: the number is the application's again */
	assert_int_equal(rsk_sock_call_fd(s, a.fd), late);
	assert_int_equal(peer_read(&a, 50), -EAGAIN); /* no FIN while the call runs */
	assert_int_equal(a.c->holders, 1);
	rsk_sock_put(s); /* the call returns: the close's release now */
	assert_null(s->conn);
	assert_int_equal(s->release_late, 0);
	assert_int_equal(fcntl(late, F_GETFD), -1);
	assert_int_equal(peer_read(&a, 1000), 0); /* EOF: a FIN, not a reset */
	accel_peer_close(&a);
}

/* Without a call in progress the close releases at once; an epoll mirror's kept reference
 * (rsk_sock_keep) is no call, and a reference cannot be kept once the socket is closed. */
static void test_close_kept_ref_no_wait(void **state)
{
	struct accel a;
	struct rsk_sock *s;

	(void)state;
	accel_open(&a);
	s = rsk_sock_get(a.fd);
	assert_int_equal(rsk_sock_keep(s), 1);
	assert_int_equal(rsk_sock_release_fd(a.fd), 1);
	assert_int_equal(s->release_late, 0);
	assert_null(s->conn);
	assert_int_equal(rsk_sock_call_fd(s, a.fd), a.fd);
	assert_int_equal(peer_read(&a, 1000), 0);
	assert_int_equal(rsk_sock_keep(s), 0); /* closed: it stays a call's reference */
	assert_int_equal(s->long_refs, 1);
	rsk_sock_put_kept(s);
	close(a.fd);
	accel_peer_close(&a);
}

/* The exit ends a connection closed under a call too (the peer reads EOF), and leaves it
 * mapped with the dup open for the call: its return then releases nothing more. */
static void test_exit_ends_closed_under_call(void **state)
{
	struct accel a;
	struct rsk_sock *s;
	int late;

	(void)state;
	accel_open(&a);
	s = rsk_sock_get(a.fd);
	assert_int_equal(rsk_sock_release_fd(a.fd), 1);
	late = rsk_sock_call_fd(s, a.fd);
	close(a.fd);
	rsk_life_exit();
	assert_null(s->conn);
	assert_int_equal(peer_read(&a, 1000), 0);
	assert_int_equal(fcntl(late, F_GETFD), FD_CLOEXEC); /* the call may still use it */
	assert_true(a.c->map_len > 0); /* still mapped: this read does not fault */
	rsk_sock_put(s);
	assert_int_equal(fcntl(late, F_GETFD), FD_CLOEXEC);
	rsk_life_exit(); /* nothing left to end */
	rsk_fd_unhide_close(late);
	accel_peer_close(&a);
}

/* A forked child has no thread inside the parent's call: it forgets the connection (its
 * copies of the fds and memory; the dup closed), which goes on whole for the parent. */
static int child_forgets_late(void *arg)
{
	struct rsk_sock *s = arg;
	int late = rsk_sock_call_fd(s, -1);

	rsk_life_fork_child();
	if (s->conn != NULL)
		return 10;
	if (fcntl(late, F_GETFD) != -1)
		return 11;
	return 0;
}

static void test_fork_child_forgets_closed_under_call(void **state)
{
	struct accel a;
	struct rsk_sock *s;

	(void)state;
	accel_open(&a);
	s = rsk_sock_get(a.fd);
	assert_int_equal(rsk_sock_release_fd(a.fd), 1);
	close(a.fd);
	rsk_life_fork_prepare();
	assert_int_equal(unit_in_child(child_forgets_late, s, 5000), 0);
	assert_int_equal(a.c->holders, 1); /* the child never held it */
	assert_int_equal(peer_read(&a, 50), -EAGAIN);
	rsk_sock_put(s);
	assert_int_equal(peer_read(&a, 1000), 0);
	accel_peer_close(&a);
}

#define T(f) cmocka_unit_test_setup(f, setup)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_epoll_notes),
		T(test_epoll_note_listener_interest),
		T(test_listeners_leaked),
		T(test_exec_hands),
		T(test_exec_hands_argv),
		T(test_fork_prepare_and_failed),
		T(test_fork_child),
		T(test_exit_ends_streams),
		T(test_quick_exit_ends_streams),
		T(test_quick_exit_removes_bells),
		T(test_stdio_relays_shm),
		T(test_exec_handoff_failed),
		T(test_close_under_call_waits),
		T(test_close_kept_ref_no_wait),
		T(test_exit_ends_closed_under_call),
		T(test_fork_child_forgets_closed_under_call),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
