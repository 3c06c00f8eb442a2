/*
 * Unit tests for core/calls/fastwait.c over a real in-process shm connection: a mirrored
 * epoll set answers a lazy connection from user space (and the kernel's view of it may be
 * stale); a real report of a stale token is filtered out; a wait that sleeps makes the app
 * end exact first and wakes for the next message; a kernel fd in the same set is reported
 * within the fairness bound while the connection stays ready; edge-triggered registrations,
 * dup, poll and fork-like events leave the connection eager and exact; close takes it out.
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
#include <unistd.h>

#include <cmocka.h>

#include "base/ready.h"
#include "conn/conn.h"
#include "transport/transport.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"

/* The fairness bound of fastwait.c (user-space answers between two real looks). */
#define FAIR_RETURNS 16

struct fx {
	int l, cl, sv, ep;
};
static struct fx F;

static int setup(void **state)
{
	struct sockaddr_in a;

	(void)state;
	ucl_config_shm();
	rsk_config.fastwait = 1;
	rsk_config.buf_count = 8;
	rsk_config.buf_size = 4096;
	F.l = ucl_listen(&a);
	F.cl = ucl_socket(0);
	assert_int_equal(ucl_connect(F.cl, &a, NULL), 0);
	F.sv = ucl_accept(F.l, SOCK_NONBLOCK);
	assert_true(F.sv >= 0);
	assert_non_null(ucl_sock(F.sv)->conn);
	F.ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(F.ep >= 0);
	rsk_fw_created(F.ep);
	assert_int_equal(rsk_fw_active, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rsk_fw_fd_gone(F.ep);
	close(F.ep);
	ucl_close(F.cl);
	if (F.sv >= 0)
		ucl_close(F.sv);
	ucl_close(F.l);
	return 0;
}

static struct rsk_conn *conn_of(int fd)
{
	return ucl_sock(fd)->conn;
}

/* epoll_ctl as preload/epoll.c: the real call, then the mirror follows it. */
static void ctl(int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = {.events = events, .data.u64 = data};

	assert_int_equal(epoll_ctl(F.ep, op, fd, &ev), 0);
	rsk_fw_ctl(F.ep, op, fd, &ev);
}

/* epoll_wait as preload/epoll.c, which must be served by the mirror. */
static int fw_wait(struct epoll_event *ev, int max, int timeout)
{
	int res = -1;

	assert_int_equal(rsk_fw_wait(F.ep, ev, max, timeout, NULL, &res), 1);
	return res;
}

static int kernel_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	assert_true(poll(&p, 1, 0) >= 0);
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

/* Answered from user space; the kernel's (stale) view is filtered; no token per message. */
static void test_user_space_answers(void **state)
{
	struct rsk_ready_state *rs;
	struct epoll_event ev[4];
	uint32_t raised;

	(void)state;
	ctl(EPOLL_CTL_ADD, F.sv, EPOLLIN, 0xabcdef0123ull);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	rs = rsk_ep_ready(conn_of(F.sv)->ep);
	assert_int_equal(fw_wait(ev, 4, 0), 0);

	send1("hello");
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	assert_int_equal(ev[0].events, EPOLLIN);
	assert_true(ev[0].data.u64 == 0xabcdef0123ull);
	drain();
	/* the kernel still sees the stale token; the mirror says nothing is ready */
	assert_int_equal(epoll_wait(F.ep, ev, 4, 0), 1);
	assert_int_equal(fw_wait(ev, 4, 0), 0);
	/* further messages find it SHOWN: the sender writes no token */
	raised = __atomic_load_n(&rs->rx, __ATOMIC_SEQ_CST) >> 1;
	send1("a");
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	drain();
	send1("b");
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	drain();
	assert_int_equal(__atomic_load_n(&rs->rx, __ATOMIC_SEQ_CST) >> 1, raised);
	/* EPOLLOUT interest: writable, answered the same way */
	ctl(EPOLL_CTL_MOD, F.sv, EPOLLIN | EPOLLOUT, 7);
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	assert_int_equal(ev[0].events, EPOLLOUT);
	assert_true(ev[0].data.u64 == 7);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
}

struct later {
	pthread_t t;
	int ms;
};

static void *later_send(void *arg)
{
	struct later *w = arg;

	unit_sleep_ms(w->ms);
	send1("wake");
	return NULL;
}

/* A wait that sleeps takes the stale token back first, so it sleeps, and the next message
 * (its token written because the app end is EMPTY now) wakes it. */
static void test_sleep_is_exact(void **state)
{
	struct epoll_event ev[4];
	struct later w = {.ms = 30};

	(void)state;
	rsk_config.spin_us = 0;
	ctl(EPOLL_CTL_ADD, F.sv, EPOLLIN, 1);
	send1("x");
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	drain();
	assert_true(kernel_readable(F.sv)); /* stale */
	assert_int_equal(fw_wait(ev, 4, 20), 0); /* slept the timeout: nothing was ready */
	assert_false(kernel_readable(F.sv));    /* exact since the sleep */
	assert_int_equal(pthread_create(&w.t, NULL, later_send, &w), 0);
	assert_int_equal(fw_wait(ev, 4, 10000), 1);
	assert_int_equal(ev[0].events, EPOLLIN);
	assert_int_equal(pthread_join(w.t, NULL), 0);
	drain();
}

/* A kernel fd in the same set is reported within the fairness bound while the lazy
 * connection is ready at every call (it is never drained). */
static void test_fairness(void **state)
{
	struct epoll_event ev[1];
	int p[2], i, seen = -1;

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	ctl(EPOLL_CTL_ADD, F.sv, EPOLLIN, 1);
	send1("ready");
	for (i = 0; i < 4; i++) /* past the first real look */
		assert_int_equal(fw_wait(ev, 1, 0), 1);
	ctl(EPOLL_CTL_ADD, p[0], EPOLLIN, 2);
	assert_int_equal(write(p[1], "k", 1), 1);
	for (i = 0; i < FAIR_RETURNS + 2 && seen < 0; i++) {
		assert_int_equal(fw_wait(ev, 1, 0), 1);
		if (ev[0].data.u64 == 2)
			seen = i;
	}
	assert_true(seen >= 0);
	assert_true(seen <= FAIR_RETURNS);
	close(p[0]);
	close(p[1]);
}

/* What another kind of wait may see goes eager for good, its app end exact. */
static void assert_eager_exact(void)
{
	struct rsk_conn *c = conn_of(F.sv);

	assert_int_equal(c->lazy, 0);
	assert_int_equal(c->lazy_never, 1);
	assert_false(kernel_readable(F.sv));
	send1("y");
	assert_true(kernel_readable(F.sv));
	drain();
	assert_false(kernel_readable(F.sv)); /* drained: the token went with the data */
}

static void make_stale(void)
{
	struct epoll_event ev[4];

	ctl(EPOLL_CTL_ADD, F.sv, EPOLLIN, 1);
	assert_int_equal(conn_of(F.sv)->lazy, 1);
	send1("s");
	assert_int_equal(fw_wait(ev, 4, 0), 1);
	drain();
	assert_true(kernel_readable(F.sv));
}

static void test_dup_goes_eager(void **state)
{
	(void)state;
	make_stale();
	rsk_fw_fd_shared(F.sv); /* as dup(), poll(), SCM_RIGHTS and stdio call it */
	assert_eager_exact();
}

static void test_edge_triggered_is_eager(void **state)
{
	(void)state;
	make_stale();
	ctl(EPOLL_CTL_MOD, F.sv, EPOLLIN | EPOLLET, 1);
	assert_eager_exact();
}

static void test_fork_goes_eager(void **state)
{
	struct epoll_event ev[4];
	int res;

	(void)state;
	make_stale();
	rsk_fw_all_eager();
	assert_eager_exact();
	assert_int_equal(rsk_fw_wait(F.ep, ev, 4, 0, NULL, &res), 0); /* the mirror ended */
}

/* Two registrations with the same data cannot be told apart in a real report. */
static void test_data_clash_is_eager(void **state)
{
	int p[2];

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	make_stale();
	ctl(EPOLL_CTL_ADD, p[0], EPOLLIN, 1);
	assert_eager_exact();
	close(p[0]);
	close(p[1]);
}

/* A closed connection leaves the mirror; the set then has nothing lazy. */
static void test_close_leaves(void **state)
{
	struct epoll_event ev[4];
	int res;

	(void)state;
	make_stale();
	ucl_close(F.sv);
	F.sv = -1;
	assert_int_equal(rsk_fw_wait(F.ep, ev, 4, 0, NULL, &res), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_user_space_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sleep_is_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fairness, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dup_goes_eager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_edge_triggered_is_eager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fork_goes_eager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_data_clash_is_eager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_leaves, setup, teardown),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
