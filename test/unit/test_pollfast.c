/*
 * Unit tests for core/calls/pollfast.c over real in-process shm connections: poll and select
 * answer a lazy connection from its ring without a real poll (the kernel's stale view is
 * ignored, and the peer writes no token per message); a wait that sleeps first makes the app
 * end exact, sleeps once, and is woken by the next message; a pipe in the same set is
 * reported within the fairness bound while the connection stays readable; an ending
 * connection (EOF) is the kernel's again, reported as before. A connection only read and
 * written by blocking calls is lazy from its first call: no token per message, and a
 * blocking recv that sleeps is still woken. A set of kernel fds only has nothing of ours to
 * spin for (unless an epoll set is mirrored); in a process whose connection is lazy it
 * needs nothing around its real call, while a mixed set, or an epoll fd of a mirrored set,
 * still goes through the fast path's classification.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/ready.h"
#include "base/real.h"
#include "calls/io.h"
#include "calls/pollfast.h"
#include "conn/conn.h"
#include "transport/transport.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"

/* pollfast.c's fairness bounds between two real looks: answers from user space, and time
 * (RSK_PF_FAIR_US). */
#define FAIR_RETURNS 16
#define FAIR_US 1000

struct fx {
	int l, cl, sv;
	struct sockaddr_in a;
};
static struct fx F;

/* The library's real poll and ppoll calls on the server's fd, counted by wrappers put in
 * their slots of rsk_real: zero-timeout looks and sleeps apart (a recv's hang-up check, which
 * asks for no events, is not counted). */
static int (*libc_poll)(struct pollfd *, nfds_t, int);
static int (*libc_ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
static int looks, sleeps;

static int ours(const struct pollfd *fds, nfds_t n)
{
	nfds_t i;

	for (i = 0; i < n; i++)
		if (fds[i].fd == F.sv && fds[i].events != 0)
			return 1;
	return 0;
}

static int counting_poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (ours(fds, n))
		__atomic_add_fetch(timeout == 0 ? &looks : &sleeps, 1, __ATOMIC_SEQ_CST);
	return libc_poll(fds, n, timeout);
}

static int counting_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t,
			  const sigset_t *m)
{
	if (ours(fds, n))
		__atomic_add_fetch(t != NULL && t->tv_sec == 0 && t->tv_nsec == 0 ? &looks : &sleeps,
				   1, __ATOMIC_SEQ_CST);
	return libc_ppoll(fds, n, t, m);
}

static void count_real(int on)
{
	if (on && libc_poll == NULL) {
		libc_poll = RSK_REAL(poll);
		libc_ppoll = RSK_REAL(ppoll);
		__atomic_store_n(&rsk_real.poll, counting_poll, __ATOMIC_RELEASE);
		__atomic_store_n(&rsk_real.ppoll, counting_ppoll, __ATOMIC_RELEASE);
	} else if (!on && libc_poll != NULL) {
		__atomic_store_n(&rsk_real.poll, libc_poll, __ATOMIC_RELEASE);
		__atomic_store_n(&rsk_real.ppoll, libc_ppoll, __ATOMIC_RELEASE);
		libc_poll = NULL;
	}
	__atomic_store_n(&looks, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&sleeps, 0, __ATOMIC_SEQ_CST);
}

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.fastwait = 1;
	F.l = ucl_listen(&F.a);
	F.cl = ucl_socket(0);
	assert_int_equal(ucl_connect(F.cl, &F.a, NULL), 0);
	F.sv = ucl_accept(F.l, SOCK_NONBLOCK);
	assert_true(F.sv >= 0);
	assert_non_null(ucl_sock(F.sv)->conn);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	count_real(0); /* a failed test may leave the wrappers in */
	ucl_close(F.cl);
	if (F.sv >= 0)
		ucl_close(F.sv);
	ucl_close(F.l);
	return 0;
}

#define conn_of ucl_conn
#define rs_of ucl_rs
#define raised_of ucl_raised

static int kernel_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	assert_true(libc_poll != NULL ? libc_poll(&p, 1, 0) >= 0 : poll(&p, 1, 0) >= 0);
	return (p.revents & POLLIN) != 0;
}

static void send1(const char *s)
{
	assert_int_equal(ucl_send(F.cl, s, strlen(s), 0), (ssize_t)strlen(s));
}

static void drain(void)
{
	char b[256];

	assert_true(ucl_recv(F.sv, b, sizeof(b), 0) > 0);
	assert_int_equal(ucl_recv(F.sv, b, sizeof(b), 0), -EAGAIN);
}

/* poll through the fast path, which must take the set. */
static int pf_poll(struct pollfd *p, nfds_t n, int64_t timeout_us)
{
	int res = -1;

	assert_int_equal(rsk_pf_poll(p, n, timeout_us, NULL, &res), 1);
	return res;
}

/* Answered from user space: no real poll, and no token per message once it is lazy. The old
 * poll asked the kernel every time (looks > 0). */
static void test_poll_user_space(void **state)
{
	struct pollfd p = {.fd = F.sv, .events = POLLIN};
	uint32_t raised;
	int i;

	(void)state;
	send1("a");
	count_real(1);
	assert_int_equal(pf_poll(&p, 1, 0), 1);
	assert_int_equal(p.revents, POLLIN);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	assert_int_equal(UNIT_LOAD(&looks), 0);
	drain();
	assert_true(kernel_readable(F.sv)); /* a stale token stays: nothing read it back */
	raised = raised_of(F.sv);
	for (i = 0; i < 5; i++) {
		send1("b");
		p.revents = -1;
		assert_int_equal(pf_poll(&p, 1, -1), 1); /* ready: no spin, no sleep */
		assert_int_equal(p.revents, POLLIN);
		drain();
	}
	assert_int_equal(raised_of(F.sv), raised); /* the sender wrote no token */
	assert_int_equal(UNIT_LOAD(&looks) + UNIT_LOAD(&sleeps), 0);
	/* nothing ready: the stale token is not reported */
	assert_int_equal(pf_poll(&p, 1, 0), 0);
	assert_int_equal(p.revents, 0);
	/* POLLOUT from user space too */
	p.events = POLLOUT;
	assert_int_equal(pf_poll(&p, 1, 0), 1);
	assert_int_equal(p.revents, POLLOUT); /* masked by the events, as the kernel does */
}

struct later {
	pthread_t t;
	int exact; /* the app end was exact (no token) while the poll slept */
};

static void *later_send(void *arg)
{
	struct later *w = arg;

	if (!UNIT_WAIT(UNIT_LOAD(&sleeps) >= 1, 5000))
		return NULL;
	unit_sleep_ms(20); /* the sleeper is in the kernel by now (or about to be) */
	w->exact = !kernel_readable(F.sv) && rsk_ready_unread(rs_of(F.sv)) == 0;
	send1("z");
	return NULL;
}

/*
 * A wait that sleeps makes the app end exact first, sleeps once (a stale token left in
 * would end every sleep at once: without rsk_pf_exact it loops, sleeps > 1), and the next
 * message wakes it (a lost wake-up would time out: 0 after 5 s).
 */
static void test_poll_sleep_exact_wakes(void **state)
{
	struct pollfd p = {.fd = F.sv, .events = POLLIN};
	struct later w = {0};

	(void)state;
	rsk_config.spin_us = 0;
	send1("a");
	assert_int_equal(pf_poll(&p, 1, 0), 1);
	drain();
	assert_true(kernel_readable(F.sv)); /* stale */
	count_real(1);
	assert_int_equal(pthread_create(&w.t, NULL, later_send, &w), 0);
	assert_int_equal(pf_poll(&p, 1, 5 * 1000 * 1000), 1);
	assert_int_equal(pthread_join(w.t, NULL), 0);
	assert_int_equal(p.revents, POLLIN);
	assert_true(w.exact);
	assert_int_equal(UNIT_LOAD(&sleeps), 1);
	drain();
}

/* select the same way: ready from user space without a real call, the sets rewritten. */
static void test_select_user_space(void **state)
{
	fd_set r, w;
	int res = -1;

	(void)state;
	send1("a");
	count_real(1);
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_SET(F.sv, &r);
	FD_SET(F.sv, &w);
	assert_int_equal(rsk_pf_select(F.sv + 1, &r, &w, NULL, 0, NULL, &res, NULL), 1);
	assert_int_equal(res, 2);
	assert_true(FD_ISSET(F.sv, &r) && FD_ISSET(F.sv, &w));
	drain();
	FD_ZERO(&r);
	FD_SET(F.sv, &r);
	assert_int_equal(rsk_pf_select(F.sv + 1, &r, NULL, NULL, 0, NULL, &res, NULL), 1);
	assert_int_equal(res, 0); /* the stale token is not readable */
	assert_false(FD_ISSET(F.sv, &r));
	assert_int_equal(UNIT_LOAD(&looks), 1); /* a zero-timeout "nothing" asked once (first) */
	assert_int_equal(UNIT_LOAD(&sleeps), 0);
}

/*
 * A pipe beside an always-readable connection is reported within the fairness bound (a
 * fast path that never asked the kernel would starve it), while the connection is still
 * answered from user space in between.
 */
static void test_pipe_within_fairness(void **state)
{
	struct pollfd p[2];
	int pfd[2], i, seen = -1;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	send1("a"); /* stays unread: always ready */
	p[0] = (struct pollfd){.fd = F.sv, .events = POLLIN};
	p[1] = (struct pollfd){.fd = pfd[0], .events = POLLIN};
	assert_int_equal(pf_poll(p, 2, 0), 1); /* an unknown set's first look is real */
	assert_int_equal(p[1].revents, 0);
	assert_int_equal(write(pfd[1], "p", 1), 1);
	count_real(1);
	for (i = 0; i < 2 * FAIR_RETURNS + 2 && seen < 0; i++) {
		assert_true(pf_poll(p, 2, -1) >= 1);
		assert_int_equal(p[0].revents, POLLIN);
		if (p[1].revents & POLLIN)
			seen = i;
	}
	close(pfd[0]);
	close(pfd[1]);
	assert_true(seen >= 0 && seen <= FAIR_RETURNS);
	assert_true(UNIT_LOAD(&looks) <= 1); /* the answers before it were user space's */
}

/* EOF is the kernel's to report, as before: POLLIN|POLLRDHUP, the connection eager again. */
static void test_eof_reported(void **state)
{
	struct pollfd p = {.fd = F.sv, .events = POLLIN | POLLRDHUP};
	char b[8];

	(void)state;
	send1("a");
	assert_int_equal(pf_poll(&p, 1, 0), 1);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	drain();
	assert_int_equal(rsk_io_shutdown(F.cl, SHUT_WR), 0);
	assert_int_equal(pf_poll(&p, 1, 5 * 1000 * 1000), 1);
	assert_int_equal(p.revents & (POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
	assert_int_equal(conn_of(F.sv)->lazy, 0);
	assert_int_equal(conn_of(F.sv)->lazy_never, 1);
	assert_int_equal(ucl_recv(F.sv, b, sizeof(b), 0), 0);
}

/* A dup'd connection (two numbers) is not made lazy: the kernel answers it. */
static void test_dup_stays_eager(void **state)
{
	struct pollfd p = {.fd = F.sv, .events = POLLIN};
	int d = dup(F.sv), res = 0;

	(void)state;
	assert_true(d >= 0);
	assert_int_equal(rsk_sock_dup(F.sv, d), 0);
	send1("a");
	assert_int_equal(rsk_pf_poll(&p, 1, 0, NULL, &res), 0);
	assert_int_equal(conn_of(F.sv)->lazy, 0);
	ucl_close(d);
}

/* Read and written with plain calls only: lazy from the first call, so its messages cost no
 * token (the old code raised one per message on an EMPTY app end). */
static void test_data_calls_lazy(void **state)
{
	char b[8];
	uint32_t raised;
	int i;

	(void)state;
	send1("a");
	assert_int_equal(ucl_recv(F.sv, b, sizeof(b), 0), 1);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	assert_int_equal(conn_of(F.cl)->lazy, 1);
	raised = raised_of(F.sv);
	for (i = 0; i < 5; i++) {
		send1("b");
		assert_int_equal(ucl_recv(F.sv, b, sizeof(b), 0), 1);
	}
	assert_int_equal(ucl_recv(F.sv, b, sizeof(b), 0), -EAGAIN);
	assert_int_equal(raised_of(F.sv), raised);
}

struct later_reply {
	pthread_t t;
};

static void *reply_later(void *arg)
{
	(void)arg;
	unit_sleep_ms(50); /* the reader sleeps by now (spin 0), or is about to */
	assert_int_equal(ucl_send(F.sv, "r", 1, 0), 1);
	return NULL;
}

/* A blocking recv on a lazy connection with a stale token sleeps and is woken by the next
 * message (it makes the app end exact first; a lost wake-up would block for good: the test
 * would time out). */
static void test_blocking_recv_woken(void **state)
{
	struct later_reply w;
	char b[8];

	(void)state;
	rsk_config.spin_us = 0;
	assert_int_equal(ucl_send(F.sv, "q", 1, 0), 1);
	assert_int_equal(ucl_recv(F.cl, b, sizeof(b), 0), 1); /* F.cl blocks */
	assert_int_equal(conn_of(F.cl)->lazy, 1);
	assert_true(kernel_readable(F.cl)); /* stale */
	assert_int_equal(pthread_create(&w.t, NULL, reply_later, NULL), 0);
	assert_int_equal(ucl_recv(F.cl, b, sizeof(b), 0), 1);
	assert_int_equal(pthread_join(w.t, NULL), 0);
	assert_int_equal(b[0], 'r');
}

/*
 * Whether a poll/select wrapper's spin can see anything of ours (rsk_pf_has_ours,
 * rsk_pf_sel_has_ours): not for a set of kernel fds only (a pipe), which the wrappers then
 * wait on without spinning (no zero-timeout real poll first); yes with a connection of ours in
 * it, and yes while an epoll set is mirrored (an epoll fd in the set may nest ours).
 */
static void test_has_ours(void **state)
{
	struct pollfd p[2];
	fd_set r;
	int pp[2], ep;

	(void)state;
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	p[0] = (struct pollfd){.fd = pp[0], .events = POLLIN};
	p[1] = (struct pollfd){.fd = -1};
	FD_ZERO(&r);
	FD_SET(pp[0], &r);
	assert_int_equal(rsk_fw_any_mirror(), 0);
	assert_int_equal(rsk_pf_has_ours(p, 2), 0);
	assert_int_equal(rsk_pf_sel_has_ours(pp[0] + 1, &r, NULL, NULL), 0);
	p[1] = (struct pollfd){.fd = F.sv, .events = POLLIN};
	FD_SET(F.sv, &r);
	assert_int_equal(rsk_pf_has_ours(p, 2), 1);
	assert_int_equal(rsk_pf_sel_has_ours(F.sv + 1, &r, NULL, NULL), 1);
	assert_int_equal(rsk_pf_sel_has_ours(F.sv, &r, NULL, NULL), 0); /* only fds below n */
	ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(ep >= 0);
	rsk_fw_created(ep);
	assert_int_equal(rsk_pf_has_ours(p, 1), 1); /* the pipe alone, but a mirror exists */
	rsk_fw_fd_gone(ep);
	close(ep);
	assert_int_equal(rsk_pf_has_ours(p, 1), 0);
	close(pp[0]);
	close(pp[1]);
}

/*
 * A set of kernel fds only in a process whose connection is lazy (what the wrappers send
 * straight to the kernel): rsk_pf_has_ours is 0 and nothing needs doing around the call
 * (rsk_io_kwait_none), so the wrapper makes the real call alone and the connection stays
 * lazy. A mixed set is ours wherever our fd sits in it (a check that stopped at the first
 * kernel fd would send it to the kernel, whose stale token the old wait reported), and is
 * still answered from the ring without a real look once the set is known.
 */
static void test_kernel_only_set(void **state)
{
	struct pollfd p[3];
	int64_t t0, dt;
	int pp[2];

	(void)state;
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	send1("a");
	p[0] = (struct pollfd){.fd = F.sv, .events = POLLIN};
	assert_int_equal(pf_poll(p, 1, 0), 1);
	drain();
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	p[0] = (struct pollfd){.fd = -1};
	p[1] = (struct pollfd){.fd = pp[0], .events = POLLIN};
	assert_int_equal(rsk_pf_has_ours(p, 2), 0);
	assert_int_equal(rsk_io_kwait_none(), 1);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	p[2] = (struct pollfd){.fd = F.sv, .events = POLLIN}; /* behind two fds not ours */
	assert_int_equal(rsk_pf_has_ours(p, 3), 1);
	t0 = rsk_now_us();
	assert_int_equal(pf_poll(p, 3, 0), 0); /* an unknown set's first look: real, nothing */
	send1("b");
	count_real(1);
	assert_int_equal(pf_poll(p, 3, -1), 1);
	dt = rsk_now_us() - t0;
	assert_int_equal(p[2].revents, POLLIN);
	assert_int_equal(p[1].revents, 0);
	assert_int_equal(UNIT_LOAD(&sleeps), 0);
	/* No real look, within the fairness time since the set's first (real) look; past it
	 * (a loaded machine: the two calls took longer than FAIR_US) the kernel fds are due
	 * one zero-timeout look by that rule, and only one. */
	if (dt < FAIR_US)
		assert_int_equal(UNIT_LOAD(&looks), 0);
	else
		assert_true(UNIT_LOAD(&looks) <= 1);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	drain();
	close(pp[0]);
	close(pp[1]);
}

/* What makes a set of kernel fds need the wrapper's work after all: a staged write to push,
 * the fast path off (no taint at epoll_ctl), an endpoint that went quiet. */
static void test_kernel_only_gates(void **state)
{
	(void)state;
	assert_int_equal(rsk_io_kwait_none(), 1);
	rsk_config.fastwait = 0;
	assert_int_equal(rsk_io_kwait_none(), 0);
	rsk_config.fastwait = 1;
	__atomic_store_n(&rsk_conn_quiet_seen, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(rsk_io_kwait_none(), 0);
	__atomic_store_n(&rsk_conn_quiet_seen, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(rsk_io_kwait_none(), 1);
}

/*
 * An epoll fd that mirrors our lazy connection, polled alone: a set of "kernel fds" that
 * must still take the slow path (rsk_pf_has_ours 1 while a mirror exists; a check of the fd
 * table alone would say 0), whose classification ends the mirror and makes the connection
 * eager for good, since the poll's sleep would see its stale token through the epoll fd.
 */
static void test_kernel_only_mirror(void **state)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7}, kev = ev;
	struct pollfd p = {.events = POLLIN};
	int ep, et, res = -1;

	(void)state;
	ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(ep >= 0);
	rsk_fw_created(ep);
	et = rsk_fw_ctl_et(ep, EPOLL_CTL_ADD, F.sv, &ev);
	if (et)
		kev.events |= EPOLLET;
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, F.sv, &kev), 0);
	rsk_fw_ctl(ep, EPOLL_CTL_ADD, F.sv, &ev, et);
	assert_int_equal(conn_of(F.sv)->lazy, 1); /* the mirror's candidate */
	p.fd = ep;
	assert_int_equal(rsk_pf_has_ours(&p, 1), 1);
	assert_int_equal(rsk_pf_poll(&p, 1, 0, NULL, &res), 0); /* the kernel's, but classified */
	assert_int_equal(rsk_fw_any_mirror(), 0);
	assert_int_equal(conn_of(F.sv)->lazy, 0);
	assert_int_equal(conn_of(F.sv)->lazy_never, 1);
	rsk_fw_fd_gone(ep);
	close(ep);
}

/* select's sets a word at a time: an fd of ours in the second word is found (fd 100, a dup
 * of ours), only below n, and n past FD_SETSIZE reads no further than the sets. */
static void test_sel_has_ours_words(void **state)
{
	fd_set r;
	int d;

	(void)state;
	d = dup2(F.sv, 100);
	assert_int_equal(d, 100);
	assert_int_equal(rsk_sock_dup(F.sv, d), 0);
	FD_ZERO(&r);
	FD_SET(d, &r);
	assert_int_equal(rsk_pf_sel_has_ours(d + 1, &r, NULL, NULL), 1);
	assert_int_equal(rsk_pf_sel_has_ours(d + 1, NULL, NULL, &r), 1);
	assert_int_equal(rsk_pf_sel_has_ours(d, &r, NULL, NULL), 0);
	FD_ZERO(&r);
	FD_SET(d - 64, &r); /* the same bit one word down: not ours */
	assert_int_equal(rsk_pf_sel_has_ours(FD_SETSIZE + 100, &r, NULL, NULL), 0);
	ucl_close(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_poll_user_space, setup, teardown),
		cmocka_unit_test_setup_teardown(test_has_ours, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_only_set, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_only_gates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kernel_only_mirror, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sel_has_ours_words, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_sleep_exact_wakes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_select_user_space, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipe_within_fairness, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dup_stays_eager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_data_calls_lazy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blocking_recv_woken, setup, teardown),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
