/*
 * Unit tests for core/sock/sock (the socket objects): which sockets are ours, tracking and
 * the fd slot's tagged value, references (get/put, a released slot gives NULL), dups naming
 * one object and the last close doing the accounting once, a kernel connection counted once
 * with its fallback reason (or policy when a port rule says so), its bytes taken from
 * TCP_INFO at the last close (a non-blocking connect that nobody confirmed is counted if the
 * kernel got past SYN_SENT, one that failed is not), the exit-time account of what is still
 * open, a forked child's baseline, the walks (every fd; accelerated objects once), retagging
 * and detaching, the file flags a connect need not ask (known from socket() and fcntl,
 * forgotten at a dup, FIONBIO or a fork). rsk_sock_become needs a connection (core/conn),
 * which is tested elsewhere; its replay of the epoll sets noted (any number of them) is here.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/fdhide.h"
#include "base/fdtab.h"
#include "base/proc.h"
#include "base/stats.h"
#include "sock/sock.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_locks.h"

#define KERNEL RDMASOCK_TRANSPORT_KERNEL

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_stats_reset();
	return 0;
}

/* A connected loopback pair: *cli (the one we track) and *srv. */
static void tcp_pair(int *cli, int *srv)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port);
	struct sockaddr_in a = ucm_lo4(port);

	*cli = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(*cli >= 0);
	assert_int_equal(connect(*cli, (struct sockaddr *)&a, sizeof(a)), 0);
	*srv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(*srv >= 0);
	close(l);
}

/* Move @n bytes from @from to @to and read them there. */
static void move_bytes(int from, int to, size_t n)
{
	static char buf[65536];
	struct pollfd p = {.fd = to, .events = POLLIN};
	size_t got = 0;
	ssize_t r;

	assert_true(n <= sizeof(buf));
	assert_int_equal(send(from, buf, n, MSG_NOSIGNAL), (ssize_t)n);
	while (got < n) {
		assert_int_equal(poll(&p, 1, 2000), 1);
		r = recv(to, buf, sizeof(buf), MSG_DONTWAIT);
		assert_true(r > 0);
		got += (size_t)r;
	}
	assert_int_equal(got, n);
}

static void test_wanted(void **state)
{
	(void)state;
	assert_true(rsk_sock_wanted(AF_INET, SOCK_STREAM));
	assert_true(rsk_sock_wanted(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC));
	assert_false(rsk_sock_wanted(AF_UNIX, SOCK_STREAM));
	assert_false(rsk_sock_wanted(AF_INET, SOCK_DGRAM));
	assert_false(rsk_sock_wanted(AF_INET, SOCK_SEQPACKET));
	assert_false(rsk_sock_wanted(AF_INET, SOCK_RAW));
	assert_false(rsk_sock_wanted(AF_INET, SOCK_STREAM | 0x40000000));
}

static void test_track_get_put(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), h;
	struct rsk_sock *s, *t;
	uintptr_t v;

	(void)state;
	assert_null(rsk_sock_get(fd)); /* not tracked yet */
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	v = rsk_fdtab_load(fd);
	assert_true(v != 0);
	assert_false(rsk_fdtab_is_accel(v)); /* a kernel socket: the data path passes it by */
	s = rsk_sock_get(fd);
	assert_non_null(s);
	assert_ptr_equal(rsk_fdtab_ptr(v), s);
	assert_int_equal(s->domain, AF_INET);
	assert_int_equal(s->state, RSK_SOCK_NEW);
	assert_int_equal(s->nfds, 1);
	assert_int_equal(s->transport, KERNEL);
	assert_int_equal(s->fb_reason, RDMASOCK_FB_NO_PEER); /* auto mode's default reason */
	assert_int_equal(s->refs, 2); /* the slot's and ours */
	t = rsk_sock_get(fd);
	assert_ptr_equal(t, s);
	assert_int_equal(s->refs, 3);
	rsk_sock_put(t);
	rsk_sock_put(s);
	assert_int_equal(s->refs, 1);
	/* the library's own fds are never sockets of the application's */
	h = rsk_fd_hide_dup(fd);
	assert_null(rsk_sock_get(h));
	assert_int_equal(rsk_sock_release_fd(h), 0);
	rsk_fd_unhide_close(h);
	/* release: the slot is free, the object goes back to the pool */
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_null(rsk_sock_get(fd));
	assert_int_equal(rsk_sock_release_fd(fd), 0); /* twice: not ours any more */
	close(fd);
	/* kernel mode: the reason a socket is not accelerated is the policy */
	rsk_config.mode = RSK_MODE_KERNEL;
	fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET6, RSK_SOCK_NEW), 0);
	s = rsk_sock_get(fd);
	assert_int_equal(s->fb_reason, RDMASOCK_FB_POLICY);
	assert_int_equal(s->domain, AF_INET6);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
	/* out of the table's range: refused, and the fd simply stays a plain socket */
	assert_int_equal(rsk_sock_track(-1, AF_INET, RSK_SOCK_NEW), -EBADF);
}

/* A pooled object comes back clean: no counts or port of the socket it was before
 * (a stale own_exact would report a plain socket's bytes as 0). */
static void test_pool_reset(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct rsk_sock *s, *t;

	(void)state;
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	s = rsk_sock_get(fd);
	s->own_exact = 1;
	s->own_sent = 5;
	s->own_rcvd = 6;
	s->port = 80;
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	t = rsk_sock_get(fd);
	assert_ptr_equal(t, s); /* the pool gave the same object back */
	assert_int_equal(t->own_exact, 0);
	assert_int_equal(t->own_sent, 0);
	assert_int_equal(t->own_rcvd, 0);
	assert_int_equal(t->port, 0);
	rsk_sock_put(t);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
}

/* A reference outlives the slot: the object is not reused until the last put. */
static void test_reference_outlives_slot(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd2;
	struct rsk_sock *s, *n;

	(void)state;
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	s = rsk_sock_get(fd); /* a call in progress */
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(s->refs, 1);
	fd2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd2, AF_INET, RSK_SOCK_LISTENING), 0);
	n = rsk_sock_get(fd2);
	assert_true(n != s); /* still in use: not handed out again */
	rsk_sock_put(n);
	rsk_sock_put(s); /* the last reference: back to the pool */
	assert_int_equal(rsk_sock_release_fd(fd2), 1);
	close(fd);
	close(fd2);
}

static void test_dup_and_last_close(void **state)
{
	int cli, srv, d1, d2;
	struct rsk_sock *s;

	(void)state;
	tcp_pair(&cli, &srv);
	assert_int_equal(rsk_sock_track(cli, AF_INET, RSK_SOCK_CONNECTED), 0);
	d1 = dup(cli);
	d2 = dup(cli);
	assert_int_equal(rsk_sock_dup(cli, d1), 0);
	assert_int_equal(rsk_sock_dup(d1, d2), 0);
	assert_int_equal(rsk_sock_dup(srv, d1), 0); /* untracked source: nothing to do */
	assert_ptr_equal(rsk_fdtab_ptr(rsk_fdtab_load(d2)), rsk_fdtab_ptr(rsk_fdtab_load(cli)));
	s = rsk_sock_get(d1);
	assert_int_equal(s->nfds, 3);
	rsk_sock_put(s);
	move_bytes(cli, srv, 1000);
	move_bytes(srv, cli, 300);
	/* closing a dup accounts nothing; the last fd does, once */
	assert_int_equal(rsk_sock_release_fd(cli), 1);
	close(cli);
	assert_int_equal(rsk_sock_release_fd(d1), 1);
	close(d1);
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 0);
	assert_int_equal(rsk_sock_release_fd(d2), 1);
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 1000);
	assert_int_equal(rsk_stats.bytes_received[KERNEL], 300);
	close(d2);
	close(srv);
}

static void test_count_once(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct rsk_sock *s;

	(void)state;
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_CONNECTED), 0);
	s = rsk_sock_get(fd);
	s->fb_reason = RDMASOCK_FB_NOT_LOCAL;
	rsk_sock_count(s, 6379);
	rsk_sock_count(s, 6379);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_NOT_LOCAL], 1);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
	/* a port the rules exclude: counted as policy, whatever the reason was */
	rsk_config.n_exclude = 1;
	rsk_config.exclude[0].lo = rsk_config.exclude[0].hi = 6379;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_CONNECTED), 0);
	s = rsk_sock_get(fd);
	rsk_sock_count(s, 6379);
	assert_int_equal(s->fb_reason, RDMASOCK_FB_POLICY);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_POLICY], 1);
	assert_int_equal(rsk_stats.connections[KERNEL], 2);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
}

/* A non-blocking connect nobody confirmed (no SO_ERROR read): the last close decides. */
static void test_unconfirmed_connect(void **state)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port), fd, srv, dead;
	struct sockaddr_in a = ucm_lo4(port);
	struct pollfd p;

	(void)state;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_CONNECTING), 0);
	assert_true(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS);
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	assert_int_equal(poll(&p, 1, 2000), 1);
	srv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	move_bytes(fd, srv, 100);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_NO_PEER], 1);
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 100);
	close(fd);
	close(srv);
	/* one that was refused never became a connection */
	dead = ucm_tcp_bound(0, &port); /* bound, not listening: the SYN gets a reset */
	a = ucm_lo4(port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_CONNECTING), 0);
	assert_true(connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0);
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	close(fd);
	close(dead);
	close(l);
}

/* At exit: every socket still open is accounted, once (a later close adds nothing). */
static void test_account_open(void **state)
{
	int cli, srv;

	(void)state;
	tcp_pair(&cli, &srv);
	assert_int_equal(rsk_sock_track(cli, AF_INET, RSK_SOCK_CONNECTED), 0);
	move_bytes(cli, srv, 2000);
	rsk_sock_account_open();
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 2000);
	rsk_sock_account_open();
	move_bytes(cli, srv, 10);
	assert_int_equal(rsk_sock_release_fd(cli), 1);
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 2000);
	close(cli);
	close(srv);
}

/* A forked child's copy: what the socket carried before is the parent's to report. */
static void test_baseline(void **state)
{
	struct rsk_sock *s;
	int cli, srv;

	(void)state;
	tcp_pair(&cli, &srv);
	assert_int_equal(rsk_sock_track(cli, AF_INET, RSK_SOCK_CONNECTED), 0);
	move_bytes(cli, srv, 4000);
	move_bytes(srv, cli, 40);
	s = rsk_sock_get(cli);
	rsk_sock_baseline(s, cli);
	rsk_sock_put(s);
	move_bytes(cli, srv, 5);
	move_bytes(srv, cli, 7);
	assert_int_equal(rsk_sock_release_fd(cli), 1);
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 5);
	assert_int_equal(rsk_stats.bytes_received[KERNEL], 7);
	close(cli);
	close(srv);
}

/* ---- file flags known from socket() and fcntl ---- */

/* What rsk_sock_getfl says for @fd (tracked) and @cmd. */
static int getfl(int fd, int cmd)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int v;

	assert_non_null(s);
	v = rsk_sock_getfl(s, fd, cmd);
	rsk_sock_put(s);
	return v;
}

/* A connect asks the kernel for neither flag while every change came through us: the
 * socket is told it was made non-blocking but the kernel's is blocking, so an answer of
 * O_NONBLOCK proves nothing was asked; unknown ones (FIONBIO, a dup, a fork since) are. */
static void test_flags_known(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), d; /* (blocking, no close-on-exec) */

	(void)state;
	assert_int_equal(rsk_sock_track_made(fd, AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC), 0);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR | O_NONBLOCK);
	assert_int_equal(getfl(fd, F_GETFD), FD_CLOEXEC);
	/* F_SETFL sets every flag a socket keeps (the access mode in @arg is ignored) */
	rsk_sock_fl_seen(fd, F_SETFL, O_RDWR);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR);
	rsk_sock_fl_seen(fd, F_SETFL, O_NONBLOCK);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR | O_NONBLOCK);
	rsk_sock_fl_seen(fd, F_SETFD, 0);
	assert_int_equal(getfl(fd, F_GETFD), 0);
	assert_int_equal(fcntl(fd, F_SETFD, FD_CLOEXEC), 0); /* (unseen: the kernel's now) */
	/* another settable flag than O_NONBLOCK: unknown, asked */
	rsk_sock_fl_seen(fd, F_SETFL, O_NONBLOCK | O_ASYNC);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR);
	/* FIONBIO: both asked */
	rsk_sock_fl_seen(fd, F_SETFL, O_NONBLOCK);
	rsk_sock_fl_seen(fd, 0, 0);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR);
	assert_int_equal(getfl(fd, F_GETFD), FD_CLOEXEC);
	/* a dup: the numbers' close-on-exec differ, so F_SETFD on one teaches nothing */
	rsk_sock_fl_seen(fd, F_SETFL, O_NONBLOCK);
	d = dup(fd);
	assert_int_equal(rsk_sock_dup(fd, d), 0);
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR);
	rsk_sock_fl_seen(d, F_SETFD, 0);
	assert_int_equal(getfl(fd, F_GETFD), FD_CLOEXEC);
	rsk_sock_fl_seen(d, F_SETFL, O_NONBLOCK); /* O_NONBLOCK is the open file's: shared */
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR | O_NONBLOCK);
	assert_int_equal(rsk_sock_release_fd(d), 1);
	close(d);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
	/* a fork since: the child may have changed the open file's flags unseen */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(rsk_sock_track_made(fd, AF_INET, SOCK_STREAM | SOCK_NONBLOCK), 0);
	rsk_proc_forking();
	assert_int_equal(getfl(fd, F_GETFL), O_RDWR);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
	/* an accepted or adopted socket's are not known */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(getfl(fd, F_GETFD), FD_CLOEXEC);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
}

/* ---- walks, retag, detach ---- */

static int walk_calls, walk_fds[8];

static void on_any(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)v;
	if (s->refs >= 2 && walk_calls < 8) /* a reference is held for the call */
		walk_fds[walk_calls] = fd;
	walk_calls++;
}

static void on_accel(struct rsk_sock *s, int fd)
{
	(void)s;
	if (walk_calls < 8)
		walk_fds[walk_calls] = fd;
	walk_calls++;
}

/* Make @s look accelerated to the walks (a non-NULL conn, untagged slots) without one. */
static struct rsk_conn *const fake_conn = (struct rsk_conn *)&walk_calls;

static void test_walks_retag_detach(void **state)
{
	int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), b = dup(a), k;
	struct rsk_sock *s;

	(void)state;
	k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(rsk_sock_track(a, AF_INET, RSK_SOCK_CONNECTED), 0);
	assert_int_equal(rsk_sock_dup(a, b), 0);
	assert_int_equal(rsk_sock_track(k, AF_INET, RSK_SOCK_NEW), 0);
	walk_calls = 0;
	rsk_sock_walk(on_any);
	assert_int_equal(walk_calls, 3);
	/* no accelerated socket yet */
	walk_calls = 0;
	rsk_sock_walk_accel(on_accel);
	assert_int_equal(walk_calls, 0);
	/* accelerated (two fds, one object): visited once, with one of its fds */
	s = rsk_sock_get(a);
	s->conn = fake_conn;
	s->transport = RDMASOCK_TRANSPORT_SHM;
	rsk_fdtab_store(a, (uintptr_t)s);
	rsk_fdtab_store(b, (uintptr_t)s);
	walk_calls = 0;
	rsk_sock_walk_accel(on_accel);
	assert_int_equal(walk_calls, 1);
	assert_true(walk_fds[0] == a || walk_fds[0] == b);
	walk_calls = 0;
	rsk_sock_walk_accel(on_accel); /* a new walk visits it again */
	assert_int_equal(walk_calls, 1);
	/* retag: the fds are kernel-watched again and the walk passes it by */
	rsk_sock_retag_kernel(s);
	assert_null(s->conn);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(a)));
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(b)));
	assert_ptr_equal(rsk_fdtab_ptr(rsk_fdtab_load(b)), s);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(k))); /* others untouched */
	walk_calls = 0;
	rsk_sock_walk_accel(on_accel);
	assert_int_equal(walk_calls, 0);
	/* detach: a forked child's view of a connection that stays the parent's */
	s->conn = fake_conn;
	rsk_sock_detach(s);
	assert_null(s->conn);
	assert_int_equal(s->detached, 1);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(a), 1);
	assert_int_equal(rsk_sock_release_fd(b), 1);
	assert_int_equal(rsk_sock_release_fd(k), 1);
	close(a);
	close(b);
	close(k);
	walk_calls = 0;
	rsk_sock_walk(on_any);
	assert_int_equal(walk_calls, 0);
}

/*
 * A relay with a pipe of its own (stdio): every number naming the socket now names the pipe
 * (close-on-exec kept per number), the slots are kernel-watched, others are untouched, and a
 * dup made afterwards is kernel-watched too (it was an accelerated slot without a
 * connection: EBADF on every call).
 */
static void test_swap_file(void **state)
{
	int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), b = dup(a), k, sv[2], d;
	struct rsk_sock *s;
	char c = 0;

	(void)state;
	k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(rsk_sock_track(a, AF_INET, RSK_SOCK_CONNECTED), 0);
	assert_int_equal(rsk_sock_dup(a, b), 0); /* b: no close-on-exec (dup) */
	assert_int_equal(rsk_sock_track(k, AF_INET, RSK_SOCK_CONNECTED), 0);
	s = rsk_sock_get(a);
	s->conn = fake_conn;
	s->transport = RDMASOCK_TRANSPORT_SHM;
	rsk_fdtab_store(a, (uintptr_t)s);
	rsk_fdtab_store(b, (uintptr_t)s);
	assert_int_equal(rsk_sock_swap_file(s, sv[0]), 2);
	assert_null(s->conn);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(a)));
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(b)));
	assert_true(fcntl(a, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(b, F_GETFD) & FD_CLOEXEC);
	/* both numbers are the pipe now: a byte written at one end comes out at a and b */
	assert_int_equal(write(sv[1], "xy", 2), 2);
	assert_int_equal(read(a, &c, 1), 1);
	assert_int_equal(c, 'x');
	assert_int_equal(read(b, &c, 1), 1);
	assert_int_equal(c, 'y');
	assert_ptr_not_equal(rsk_fdtab_ptr(rsk_fdtab_load(k)), s);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(k)));
	/* a later dup of a relayed fd */
	d = dup(a);
	assert_int_equal(rsk_sock_dup(a, d), 0);
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(d)));
	assert_ptr_equal(rsk_fdtab_ptr(rsk_fdtab_load(d)), s);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(a), 1);
	assert_int_equal(rsk_sock_release_fd(b), 1);
	assert_int_equal(rsk_sock_release_fd(d), 1);
	assert_int_equal(rsk_sock_release_fd(k), 1);
	close(a);
	close(b);
	close(d);
	close(k);
	close(sv[0]);
	close(sv[1]);
}

#define T(f) cmocka_unit_test_setup(f, setup)

/* A socket object comes and goes without a lock: a short connection took the pool's lock at
 * track and again at its last close, on each side (the spares are exchanged lock-free). */
static void test_track_release_take_no_lock(void **state)
{
	int cli, srv, i, n;

	(void)state;
	if (!LOCKS_COUNTED)
		skip();
	for (i = 0; i < 3; i++) { /* the first one makes the object the others reuse */
		tcp_pair(&cli, &srv);
		if (i > 0) {
			locks = 0;
			lock_counting = 1;
		}
		assert_int_equal(rsk_sock_track(cli, AF_INET, RSK_SOCK_CONNECTED), 0);
		assert_int_equal(rsk_sock_release_fd(cli), 1);
		lock_counting = 0;
		n = locks;
		close(cli);
		close(srv);
		if (i > 0)
			assert_int_equal(n, 0);
	}
}

/*
 * Every epoll set a socket was registered in is noted, past the RSK_SOCK_EPREGS kept in the
 * socket itself, and follows it onto a new file: a move (rsk_sock_become) replays them. Before,
 * a fifth set was not noted, its registration stayed on the closed TCP file, and a wait there
 * never woke again (test/progs/move.c many_sets). A DEL moves the last one into its place.
 */
#define SETS 9

static void test_epregs_many(void **state)
{
	int ep[SETS], sv[2], nf, k, n = 0;
	struct rsk_sock *s;
	struct epoll_event ev;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(rsk_sock_track(sv[0], AF_INET, RSK_SOCK_CONNECTED), 0);
	s = rsk_sock_get(sv[0]);
	assert_non_null(s);
	pthread_mutex_lock(&s->lock);
	for (k = 0; k < SETS; k++) {
		ev = (struct epoll_event){.events = EPOLLIN, .data.u32 = (uint32_t)k};
		ep[k] = epoll_create1(EPOLL_CLOEXEC);
		assert_true(ep[k] >= 0);
		rsk_sock_epreg(s, ep[k], EPOLL_CTL_ADD, &ev);
	}
	assert_int_equal(s->nepregs, SETS);
	rsk_sock_epreg(s, ep[1], EPOLL_CTL_DEL, NULL); /* inside */
	rsk_sock_epreg(s, ep[6], EPOLL_CTL_DEL, NULL); /* past the socket's own */
	assert_int_equal(s->nepregs, SETS - 2);
	nf = dup(sv[1]); /* the new file behind the number */
	rsk_sock_epreg_replay(s, nf);
	pthread_mutex_unlock(&s->lock);
	assert_int_equal(write(sv[0], "x", 1), 1); /* nf readable */
	for (k = 0; k < SETS; k++) {
		int got = epoll_wait(ep[k], &ev, 1, 0);

		if (k == 1 || k == 6) {
			assert_int_equal(got, 0); /* taken back */
			continue;
		}
		assert_int_equal(got, 1);
		assert_int_equal(ev.data.u32, (uint32_t)k);
		n++;
	}
	assert_int_equal(n, SETS - 2);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(sv[0]), 1);
	for (k = 0; k < SETS; k++)
		close(ep[k]);
	close(nf);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_wanted),
		T(test_swap_file),
		T(test_track_get_put),
		T(test_pool_reset),
		T(test_reference_outlives_slot),
		T(test_dup_and_last_close),
		T(test_count_once),
		T(test_unconfirmed_connect),
		T(test_account_open),
		T(test_baseline),
		T(test_flags_known),
		T(test_walks_retag_detach),
		T(test_track_release_take_no_lock),
		T(test_epregs_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
