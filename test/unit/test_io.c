/*
 * Unit tests for core/calls/io.c over a real in-process shm connection (connect and accept
 * driven as preload/ drives them): which sockets the data path serves (EBADF for ours that
 * are not accelerated, ENOTCONN for a forked child's detached one, EINVAL for a bad iovec
 * count); non-blocking and MSG_DONTWAIT calls (EAGAIN); a blocking recv that waits for the
 * peer, SO_RCVTIMEO and SO_SNDTIMEO (EAGAIN at the deadline), a blocking send that waits for
 * credits; the restart rule for a signal (restarted after an SA_RESTART handler whatever
 * others are installed, EINTR after one without, always EINTR with SO_RCVTIMEO set);
 * MSG_PEEK, MSG_WAITALL and scattered iovecs; EPIPE with and without SIGPIPE; shutdown and
 * O_NONBLOCK mirroring; rsk_io_wait_spin's bounds; the spins' yield back-off and the spin
 * learner (a socket's blocking calls stop spinning after a run of misses, probe, and spin again
 * after a hit); when the readiness wrappers may skip the library (rsk_io_none_ours), and
 * what their wait on kernel fds only still does (push staged writes, count the sleeper); a
 * spinning recv looks at the ring without the connection lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/real.h"
#include "base/stats.h"
#include "conn/conn.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"
#include "unit_crowd.h"

#define SHM RDMASOCK_TRANSPORT_SHM

/* The client (cl) and the accepted (sv) ends of one shm connection. */
struct pair {
	int l, cl, sv;
};

static struct pair P;

/* P: a listener, a client connected to it, and the connection accepted. */
static void pair_open(void)
{
	struct sockaddr_in a;

	P.l = ucl_listen(&a);
	P.cl = ucl_socket(0);
	assert_int_equal(ucl_connect(P.cl, &a, NULL), 0);
	P.sv = ucl_accept(P.l, 0);
	assert_true(P.sv >= 0);
}

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.spin_us = 0; /* every wait sleeps at once: the timing below is the poll's */
	rsk_config.buf_count = 8;
	rsk_config.buf_size = 4096;
	pair_open();
	assert_non_null(ucl_sock(P.cl)->conn);
	assert_non_null(ucl_sock(P.sv)->conn);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	signal(SIGUSR1, SIG_DFL); /* a failed test must not leave its handler to the next */
	if (P.cl >= 0)
		ucl_close(P.cl);
	if (P.sv >= 0)
		ucl_close(P.sv);
	ucl_close(P.l);
	return 0;
}

static struct rsk_conn *conn_of(int fd)
{
	return ucl_sock(fd)->conn;
}

/* ---- a helper thread that acts after a delay ---- */

struct later {
	pthread_t t;
	int ms, fd, what; /* 0: send @len bytes, 1: read up to @len, 2: signal @target */
	size_t len;
	pthread_t target;
	pid_t target_tid;
	ssize_t rc;
};

/* /proc/self/task/@tid/@what into @buf (NUL-terminated); its length, or -1. */
static ssize_t tid_read(pid_t tid, const char *what, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, what);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/*
 * Is thread @tid asleep in the kernel (state S), in a system call other than a futex wait?
 * A futex is a lock (the connection's, the loop's) or the TSan runtime's own wait (its
 * pthread_create waits for the new thread: the data thread's, started after the signal's),
 * not the call under test: a signal sent then was handled before that call slept (under TSan
 * on a loaded host: the recv then returned the late data, 3, not EINTR). Where /proc shows
 * no system call (no such file), state S alone.
 */
static int tid_sleeping(pid_t tid)
{
	char buf[512], *p;
	long nr;

	if (tid_read(tid, "stat", buf, sizeof(buf)) <= 0)
		return 0;
	p = strrchr(buf, ')'); /* the name may hold spaces */
	if (p == NULL || p[1] != ' ' || p[2] != 'S')
		return 0;
	if (tid_read(tid, "syscall", buf, sizeof(buf)) <= 0)
		return 1;
	/* "NR args...": blocked in NR; "running"; "-1 ...": blocked outside a system call */
	if (sscanf(buf, "%ld", &nr) != 1)
		return 0;
	return nr >= 0 && nr != SYS_futex;
}

/*
 * Signal only once the target sleeps in its call (bounded: 10 s): a signal that came before
 * the call began waiting would be handled outside it, and the call would then return the
 * data, not EINTR (seen under TSan on a loaded host).
 */
static int later_signal(struct later *w)
{
	int i;

	for (i = 0; i < 10000 && !tid_sleeping(w->target_tid); i++)
		unit_sleep_ms(1);
	return pthread_kill(w->target, SIGUSR1);
}

static void *later_run(void *arg)
{
	static char buf[1 << 16];
	struct later *w = arg;

	unit_sleep_ms(w->ms);
	if (w->what == 0)
		w->rc = ucl_send(w->fd, buf, w->len, 0);
	else if (w->what == 1)
		w->rc = ucl_recv(w->fd, buf, w->len, 0);
	else
		w->rc = later_signal(w);
	return NULL;
}

static void later_start(struct later *w, int what, int fd, size_t len, int ms)
{
	w->what = what;
	w->fd = fd;
	w->len = len;
	w->ms = ms;
	w->target = pthread_self();
	w->target_tid = gettid();
	assert_int_equal(pthread_create(&w->t, NULL, later_run, w), 0);
}

static void later_join(struct later *w)
{
	assert_int_equal(pthread_join(w->t, NULL), 0);
}

/* ---- tests ---- */

/* Only accelerated (or upgradable) sockets are the data path's. */
static void test_which_sockets(void **state)
{
	struct iovec iov = {NULL, 0};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	int k = ucl_socket(0), u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char b[4];

	(void)state;
	assert_int_equal(ucl_recv(u, b, sizeof(b), 0), -EBADF);     /* not ours */
	assert_int_equal(ucl_recv(k, b, sizeof(b), 0), -EBADF);     /* ours, on the kernel */
	assert_int_equal(ucl_send(k, b, sizeof(b), 0), -EBADF);
	assert_int_equal(rsk_io_shutdown(k, SHUT_WR), -EBADF);
	/* a forked child's view of a connection that stayed the parent's */
	ucl_sock(k)->detached = 1;
	assert_int_equal(ucl_recv(k, b, sizeof(b), 0), -ENOTCONN);
	ucl_sock(k)->detached = 0;
	/* iovec counts the kernel refuses */
	m.msg_iovlen = (size_t)IOV_MAX + 1;
	assert_int_equal(rsk_io_recvmsg(P.sv, &m, 0), -EINVAL);
	assert_int_equal(rsk_io_sendmsg(P.cl, &m, MSG_NOSIGNAL), -EINVAL);
	/* nothing asked: TCP's answers, EAGAIN with nothing there (a blocking one would wait),
	 * 0 once a byte is, which stays */
	m.msg_iovlen = 1;
	assert_int_equal(rsk_io_recvmsg(P.sv, &m, MSG_DONTWAIT), -EAGAIN);
	assert_int_equal(ucl_send(P.cl, "q", 1, 0), 1);
	assert_int_equal(rsk_io_recvmsg(P.sv, &m, 0), 0);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 1);
	assert_int_equal(rsk_io_shutdown(P.sv, 7), -EINVAL);
	ucl_close(k);
	close(u);
}

/* Non-blocking (O_NONBLOCK mirrored by rsk_io_setfl, or MSG_DONTWAIT): EAGAIN. */
static void test_nonblocking(void **state)
{
	char b[16];

	(void)state;
	assert_int_equal(conn_of(P.sv)->nonblock, 0);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), MSG_DONTWAIT), -EAGAIN);
	rsk_io_setfl(P.sv, O_RDWR | O_NONBLOCK);
	assert_int_equal(conn_of(P.sv)->nonblock, 1);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), -EAGAIN);
	assert_int_equal(ucl_send(P.cl, "abc", 3, 0), 3);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 3);
	rsk_io_setfl(P.sv, O_RDWR);
	assert_int_equal(conn_of(P.sv)->nonblock, 0);
	rsk_io_setfl(-1, O_NONBLOCK); /* not ours: nothing */
}

/* A blocking recv waits for the peer's bytes; SO_RCVTIMEO bounds the wait. */
static void test_blocking_recv_and_timeout(void **state)
{
	struct later w;
	int64_t t0;
	char b[256];

	(void)state;
	/* t0 before the helper starts its 100 ms: taken after, a main thread descheduled
	 * between the two (a loaded host) saw less than 90 ms pass */
	t0 = rsk_now_ms();
	later_start(&w, 0, P.cl, 100, 100);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 100);
	assert_true(rsk_now_ms() - t0 >= 90); /* it waited for them */
	later_join(&w);
	assert_int_equal(w.rc, 100);
	assert_int_equal(rsk_stats.bytes_received[SHM], 100);
	/* SO_RCVTIMEO 150 ms: EAGAIN after about that long, never much sooner */
	conn_of(P.sv)->rcvtimeo_us = 150000;
	t0 = rsk_now_ms();
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), -EAGAIN);
	assert_true(rsk_now_ms() - t0 >= 140);
	assert_true(rsk_now_ms() - t0 < 2000);
	/* data that comes within it is returned */
	later_start(&w, 0, P.cl, 7, 30);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 7);
	later_join(&w);
}

/* Fill the window with non-blocking sends; returns the bytes it took. */
static size_t fill(int fd)
{
	static char buf[4096];
	size_t total = 0;
	ssize_t n;
	int i;

	for (i = 0; i < 10000; i++) {
		n = ucl_send(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == -EAGAIN)
			return total;
		assert_true(n > 0);
		total += (size_t)n;
	}
	fail_msg("the window never filled");
	return total;
}

/* Drain what @fd has, non-blocking. */
static size_t drain(int fd)
{
	static char buf[1 << 16];
	size_t total = 0;
	ssize_t n;

	while ((n = ucl_recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		total += (size_t)n;
	assert_int_equal(n, -EAGAIN);
	return total;
}

/* A full window: a blocking send waits for the reader's credits; SO_SNDTIMEO bounds it. */
static void test_blocking_send_credits(void **state)
{
	static char big[3 * 4096];
	struct later w;
	size_t full, got = 0;
	int64_t t0;
	ssize_t n;

	(void)state;
	full = fill(P.cl);
	assert_true(full > 0);
	assert_true(full <= 8u * 4096u);
	/* SO_SNDTIMEO: EAGAIN at the deadline, nothing taken */
	conn_of(P.cl)->sndtimeo_us = 100000;
	t0 = rsk_now_ms();
	assert_int_equal(ucl_send(P.cl, big, sizeof(big), 0), -EAGAIN);
	assert_true(rsk_now_ms() - t0 >= 90);
	conn_of(P.cl)->sndtimeo_us = 0;
	/* the reader drains after 100 ms: the blocked send completes, all of it */
	t0 = rsk_now_ms(); /* before the helper's 100 ms begin (test_blocking_recv_and_timeout) */
	later_start(&w, 1, P.sv, 1 << 16, 100);
	n = ucl_send(P.cl, big, sizeof(big), 0);
	assert_int_equal(n, (ssize_t)sizeof(big));
	assert_true(rsk_now_ms() - t0 >= 90);
	later_join(&w);
	assert_true(w.rc > 0);
	got = (size_t)w.rc;
	t0 = rsk_now_ms();
	while (got < full + sizeof(big) && rsk_now_ms() - t0 < 2000)
		got += drain(P.sv);
	assert_int_equal(got, full + sizeof(big));
	assert_true(rsk_stats.credit_stalls > 0);
}

static int g_sigs;

static void on_sig(int sig)
{
	(void)sig;
	UNIT_INC(&g_sigs);
}

static void catch_sig(int sig, int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(sig, &sa, NULL), 0);
}

/* @n bytes drained from @fd within a bound (what a rescue sender sent). */
static void drain_n(int fd, size_t n)
{
	int64_t end = rsk_now_ms() + 2000;
	size_t got = 0;

	while (got < n && rsk_now_ms() < end)
		got += drain(fd);
	assert_int_equal(got, n);
}

/*
 * A signal during a blocking call, as TCP: EINTR when the handler that ran lacks SA_RESTART,
 * a restarted call when it has it (whatever other handlers are installed), and always EINTR
 * with SO_RCVTIMEO set. A late "rescue" send ends a call a broken rule would leave waiting.
 */
static void test_signal_restart_rule(void **state)
{
	struct later sig, data;
	char b[64];

	(void)state;
	g_sigs = 0;
	/* no SA_RESTART: EINTR */
	catch_sig(SIGUSR1, 0);
	later_start(&sig, 2, -1, 0, 50);
	later_start(&data, 0, P.cl, 3, 1000);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), -EINTR);
	later_join(&sig);
	assert_int_equal(UNIT_LOAD(&g_sigs), 1);
	later_join(&data);
	drain_n(P.sv, 3);
	/* SA_RESTART on the signal that came, another handler without it: restarted */
	catch_sig(SIGUSR1, SA_RESTART);
	catch_sig(SIGUSR2, 0);
	later_start(&sig, 2, -1, 0, 50);
	later_start(&data, 0, P.cl, 5, 150);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 5);
	later_join(&sig);
	later_join(&data);
	assert_int_equal(UNIT_LOAD(&g_sigs), 2);
	signal(SIGUSR2, SIG_DFL);
	/* SO_RCVTIMEO set: EINTR even after an SA_RESTART handler */
	conn_of(P.sv)->rcvtimeo_us = 2000000;
	later_start(&sig, 2, -1, 0, 50);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), -EINTR);
	later_join(&sig);
	conn_of(P.sv)->rcvtimeo_us = 0;
	/* a send blocked on a full window (nothing taken yet), no SA_RESTART: EINTR too */
	catch_sig(SIGUSR1, 0);
	conn_of(P.cl)->sndtimeo_us = 2000000; /* (a bound: EINTR either way) */
	(void)fill(P.cl);
	later_start(&sig, 2, -1, 0, 50);
	assert_int_equal(ucl_send(P.cl, b, sizeof(b), 0), -EINTR);
	later_join(&sig);
	signal(SIGUSR1, SIG_DFL);
	(void)drain(P.sv);
}

/* MSG_PEEK leaves the bytes; MSG_WAITALL gathers two sends; scattered iovecs in order. */
static void test_peek_waitall_iovec(void **state)
{
	struct iovec iov[3];
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
	char a[3], b[4], c[5], buf[16];
	struct later w;
	struct sockaddr_in from;

	(void)state;
	assert_int_equal(ucl_send(P.cl, "peekaboo", 8, 0), 8);
	assert_int_equal(ucl_recv(P.sv, buf, 4, MSG_PEEK), 4);
	assert_memory_equal(buf, "peek", 4);
	assert_int_equal(rsk_stats.bytes_received[SHM], 0); /* a peek is no read */
	assert_int_equal(ucl_recv(P.sv, buf, sizeof(buf), 0), 8);
	assert_memory_equal(buf, "peekaboo", 8);
	/* MSG_WAITALL: 8 bytes now, the rest 100 ms later; one call returns all 12 */
	assert_int_equal(ucl_send(P.cl, "12345678", 8, 0), 8);
	later_start(&w, 0, P.cl, 4, 100);
	assert_int_equal(ucl_recv(P.sv, buf, 12, MSG_WAITALL), 12);
	assert_memory_equal(buf, "12345678", 8);
	later_join(&w);
	/* writev/readv: the pieces in order; recvmsg reports no address, no control */
	iov[0] = (struct iovec){(void *)"abc", 3};
	iov[1] = (struct iovec){(void *)"defg", 4};
	iov[2] = (struct iovec){(void *)"hijkl", 5};
	assert_int_equal(rsk_io_sendmsg(P.cl, &m, MSG_NOSIGNAL), 12);
	iov[0] = (struct iovec){a, 3};
	iov[1] = (struct iovec){b, 4};
	iov[2] = (struct iovec){c, 5};
	m.msg_name = &from;
	m.msg_namelen = sizeof(from);
	m.msg_control = buf;
	m.msg_controllen = sizeof(buf);
	m.msg_flags = 0x55;
	assert_int_equal(rsk_io_recvmsg(P.sv, &m, MSG_WAITALL), 12);
	assert_memory_equal(a, "abc", 3);
	assert_memory_equal(b, "defg", 4);
	assert_memory_equal(c, "hijkl", 5);
	assert_int_equal(m.msg_namelen, 0);
	assert_int_equal(m.msg_controllen, 0);
	assert_int_equal(m.msg_flags, 0);
}

/* shutdown(SHUT_WR): the peer reads what was sent, then EOF; its sends still arrive. */
static void test_shutdown(void **state)
{
	char b[16];

	(void)state;
	assert_int_equal(ucl_send(P.cl, "bye", 3, 0), 3);
	assert_int_equal(rsk_io_shutdown(P.cl, SHUT_WR), 0);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 3);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 0);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 0); /* EOF stays */
	assert_int_equal(ucl_send(P.cl, "x", 1, 0), -EPIPE);  /* our side is shut */
	assert_int_equal(ucl_send(P.sv, "ok", 2, 0), 2);
	assert_int_equal(ucl_recv(P.cl, b, sizeof(b), 0), 2);
	/* SHUT_RD: reads end at once, whatever comes */
	assert_int_equal(rsk_io_shutdown(P.cl, SHUT_RD), 0);
	assert_int_equal(ucl_recv(P.cl, b, sizeof(b), 0), 0);
}

/* The peer closed: EPIPE; SIGPIPE raised unless MSG_NOSIGNAL. */
static void test_epipe_sigpipe(void **state)
{
	struct iovec iov = {(void *)"z", 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct sigaction sa, old;
	ssize_t n = 0;
	int i;

	(void)state;
	ucl_close(P.sv);
	P.sv = -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_RESTART;
	assert_int_equal(sigaction(SIGPIPE, &sa, &old), 0);
	g_sigs = 0;
	for (i = 0; i < 100 && (n = rsk_io_sendmsg(P.cl, &m, MSG_NOSIGNAL)) > 0; i++)
		unit_sleep_ms(1);
	assert_int_equal(n, -EPIPE);
	assert_int_equal(UNIT_LOAD(&g_sigs), 0);
	assert_int_equal(rsk_io_sendmsg(P.cl, &m, 0), -EPIPE);
	assert_int_equal(UNIT_LOAD(&g_sigs), 1);
	assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
}

/*
 * rsk_io_tcp_one, a TCP-first connection's single-buffer calls: served (and counted) on a
 * socket whose lock-free route is open (a server's from its first call), left to the
 * general path for an accelerated socket, an untracked fd and a MSG_WAITALL read; a send
 * to a peer gone is EPIPE with SIGPIPE unless MSG_NOSIGNAL, as over the general path.
 */
static void test_tcp_one(void **state)
{
	struct sockaddr_in a;
	struct sigaction sa, old;
	struct pollfd pf;
	char b[16] = "0123456789abcdef";
	int l, cl, sv, i;
	ssize_t r = 0;

	(void)state;
	assert_int_equal(rsk_io_tcp_one(P.cl, b, 4, 0, 0, &r), 0); /* accelerated: not this */
	assert_int_equal(rsk_io_tcp_one(0, b, 4, 0, 0, &r), 0);    /* not ours */
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	rsk_config.upgrade_bytes = 1 << 20;
	rsk_config.upgrade_ms = 600000;
	l = ucl_listen(&a);
	cl = ucl_socket(0);
	assert_int_equal(ucl_connect(cl, &a, NULL), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(cl)->upg);
	assert_int_equal(rsk_io_tcp_one(cl, b, 16, 0, 0, &r), 1);
	assert_int_equal(r, 16);
	pf = (struct pollfd){.fd = sv, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 2000), 1);
	assert_int_equal(rsk_io_tcp_one(sv, b, 4, MSG_WAITALL, 1, &r), 0); /* general path */
	assert_int_equal(rsk_io_tcp_one(sv, b, 4, 0, 1, &r), 1); /* its first names its thread */
	assert_int_equal(r, 4);
	assert_int_equal(rsk_io_tcp_one(sv, b, 12, 0, 1, &r), 1);
	assert_int_equal(r, 12);
	assert_memory_equal(b, "456789abcdef", 12);
	assert_int_equal(ucl_sock(cl)->own_sent, 16);
	assert_int_equal(ucl_sock(sv)->own_rcvd, 16);
	assert_int_equal(rsk_io_tcp_one(sv, b, 4, MSG_DONTWAIT, 1, &r), 1);
	assert_int_equal(r, -EAGAIN);
	/* the peer gone: EPIPE, SIGPIPE only without MSG_NOSIGNAL */
	ucl_close(sv);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sa.sa_flags = SA_RESTART;
	assert_int_equal(sigaction(SIGPIPE, &sa, &old), 0);
	g_sigs = 0;
	for (i = 0; i < 100 && rsk_io_tcp_one(cl, b, 1, MSG_NOSIGNAL, 0, &r) == 1 && r > 0; i++)
		unit_sleep_ms(1);
	assert_true(r == -EPIPE || r == -ECONNRESET);
	assert_int_equal(UNIT_LOAD(&g_sigs), 0);
	assert_int_equal(rsk_io_tcp_one(cl, b, 1, 0, 0, &r), 1);
	assert_int_equal(r, -EPIPE);
	assert_int_equal(UNIT_LOAD(&g_sigs), 1);
	assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
	ucl_close(cl);
	ucl_close(l);
}

static int g_polls;

static int poll0_after_3(void *arg)
{
	(void)arg;
	return ++g_polls >= 3 ? 42 : 0;
}

static int poll0_never(void *arg)
{
	(void)arg;
	++g_polls;
	return 0;
}

/*
 * rsk_io_wait_spin: no spinning for timeout 0 or spin_us 0; else bounded by spin_us, and
 * ended by the first yield that finds the core crowded: a 20-ms spin that polls every
 * RSK_SPIN_POLL_US then polls a few times, not ~2,000 (fails on the old code, which had no
 * way to end it).
 */
static void test_wait_spin(void **state)
{
	int spent = -1;
	int64_t t0;

	(void)state;
	g_polls = 0;
	assert_true(rsk_conn_live > 0); /* our pair */
	assert_int_equal(rsk_io_wait_spin(poll0_never, NULL, 100, &spent), 0); /* spin_us 0 */
	assert_int_equal(g_polls, 0);
	assert_int_equal(spent, 0);
	rsk_config.spin_us = 20000;
	assert_int_equal(rsk_io_wait_spin(poll0_never, NULL, 0, &spent), 0); /* timeout 0 */
	assert_int_equal(g_polls, 0);
	/* A spin ends at the poll's first answer. Its budget is no part of this: 20 ms was too
	 * little on a loaded machine (CI under TSan), where the spin's first yield (or a
	 * preemption) can hand the core to others for that long: it then looked only twice and
	 * gave up (0, not 42). */
	rsk_config.spin_us = 10 * 1000 * 1000;
	assert_int_equal(rsk_io_wait_spin(poll0_after_3, NULL, 10000, &spent), 42);
	assert_int_equal(g_polls, 3);
	rsk_config.spin_us = 20000;
	g_polls = 0;
	t0 = rsk_now_us();
	assert_int_equal(rsk_io_wait_spin(poll0_never, NULL, -1, &spent), 0);
	assert_true(rsk_now_us() - t0 >= 20000);
	assert_true(g_polls > 1);
	assert_true(spent >= 19 && spent < 1000);
	crowd_on = 1;
	g_polls = 0;
	assert_int_equal(rsk_io_wait_spin(poll0_never, NULL, -1, &spent), 0);
	crowd_on = 0;
	print_message("crowded: %d polls\n", g_polls);
	assert_true(g_polls >= 1 && g_polls < 100);
}

/*
 * A blocking recv spins on the ring's counter, not on the connection lock: while it spins
 * with nothing come, another thread's trylock of the connection never finds the lock held.
 * Fails on the old code, whose every spin round took the lock to look: 20000-89000 of the
 * 200000 trylocks found it busy in 3 of 4 runs on a loaded machine (the 4th passed: its
 * spinning thread hardly ran). 0 with the change in 11 runs.
 */
static void test_recv_spin_lockless(void **state)
{
	struct rsk_conn *c = conn_of(P.sv);
	struct later w;
	int i, rc, busy = 0;

	(void)state;
	rsk_config.spin_us = 2000000;
	later_start(&w, 1, P.sv, 8, 0);
	unit_sleep_ms(30); /* its first locked look is over: it spins */
	for (i = 0; i < 200000; i++) {
		rc = pthread_mutex_trylock(&c->lock);
		if (rc == 0)
			pthread_mutex_unlock(&c->lock);
		else
			busy++;
	}
	assert_int_equal(ucl_send(P.cl, "x", 1, 0), 1);
	later_join(&w);
	assert_int_equal(w.rc, 1); /* the arrival ended the spin */
	assert_int_equal(busy, 0);
	rsk_config.spin_us = 0;
}

/* Sleeps of the data path: the library's poll() calls with a timeout, counted by a wrapper
 * in its slot of rsk_real. */
static int (*libc_poll)(struct pollfd *, nfds_t, int);
static int g_sleeps;

static int counting_poll(struct pollfd *p, nfds_t n, int timeout)
{
	if (timeout != 0)
		__atomic_add_fetch(&g_sleeps, 1, __ATOMIC_SEQ_CST);
	return libc_poll(p, n, timeout);
}

static void count_sleeps(int on)
{
	if (on && libc_poll == NULL) {
		libc_poll = RSK_REAL(poll);
		__atomic_store_n(&rsk_real.poll, counting_poll, __ATOMIC_RELEASE);
	} else if (!on && libc_poll != NULL) {
		__atomic_store_n(&rsk_real.poll, libc_poll, __ATOMIC_RELEASE);
		libc_poll = NULL;
	}
	g_sleeps = 0;
}

/* A blocking recv with SO_RCVTIMEO 1 ms that finds nothing: -EAGAIN; did it sleep in poll? */
static int recv_slept(void)
{
	char b[8];
	int before = __atomic_load_n(&g_sleeps, __ATOMIC_SEQ_CST);

	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), -EAGAIN);
	return __atomic_load_n(&g_sleeps, __ATOMIC_SEQ_CST) - before;
}

/*
 * A socket learns whether its blocking calls' spins pay. With a 5-s spin window and
 * SO_RCVTIMEO 1 ms, a recv that spins spins out its deadline (no poll) and misses; after
 * RSK_SPIN_MISSES of them the recvs sleep in poll at once, but for every RSK_SPIN_PROBE-th,
 * which spins; a recv whose data comes while it sleeps (100 ms, within the window) is a hit,
 * and the next recv spins again. Fails on the old code (every recv spins: no poll; its spin
 * also ran past SO_RCVTIMEO) and on the mutation "rsk_spin_pays always 1".
 */
static void test_recv_learns_spin(void **state)
{
	struct later w;
	char b[16];
	int i;

	(void)state;
	rsk_config.spin_us = 5 * 1000 * 1000;
	conn_of(P.sv)->rcvtimeo_us = 1000;
	count_sleeps(1);
	for (i = 0; i < RSK_SPIN_MISSES; i++)
		assert_int_equal(recv_slept(), 0);
	for (i = 1; i <= RSK_SPIN_PROBE; i++)
		assert_int_equal(recv_slept() > 0, i != RSK_SPIN_PROBE);
	conn_of(P.sv)->rcvtimeo_us = 10 * 1000 * 1000;
	later_start(&w, 0, P.cl, 7, 100);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), 0), 7); /* slept, and hit */
	later_join(&w);
	assert_true(g_sleeps > 0);
	conn_of(P.sv)->rcvtimeo_us = 1000;
	assert_int_equal(recv_slept(), 0); /* spins again */
	count_sleeps(0);
}

/* A TCP-first pair instead of the shm one (nothing moves: thresholds out of reach). */
static int setup_tcp_first(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 600000;
	pair_open();
	assert_non_null(ucl_sock(P.sv)->upg);
	assert_null(ucl_sock(P.sv)->conn);
	return 0;
}

/*
 * sendfile on a TCP-first socket still on TCP: the kernel's own (from an offset and from the
 * file position), every byte delivered in order and counted as the socket's own.
 */
static void test_sendfile_tcp_first(void **state)
{
	static unsigned char data[150000], got[150000];
	char path[] = "/tmp/rsk-sendfile.XXXXXX";
	int f = mkstemp(path), i;
	off_t off = 1000;
	size_t have = 0;
	ssize_t n;

	(void)state;
	assert_true(f >= 0);
	unlink(path);
	for (i = 0; i < (int)sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + i / 251);
	assert_int_equal(write(f, data, sizeof(data)), (ssize_t)sizeof(data));
	assert_int_equal(rsk_io_sendfile(P.sv, f, &off, 100000), 100000);
	assert_int_equal(off, 101000);
	assert_int_equal(lseek(f, 140000, SEEK_SET), 140000);
	assert_int_equal(rsk_io_sendfile(P.sv, f, NULL, 20000), 10000); /* to the end */
	assert_int_equal(lseek(f, 0, SEEK_CUR), 150000);
	while (have < 110000 && (n = ucl_recv(P.cl, got + have, sizeof(got) - have, 0)) > 0)
		have += (size_t)n;
	assert_int_equal(have, 110000);
	assert_memory_equal(got, data + 1000, 100000);
	assert_memory_equal(got + 100000, data + 140000, 10000);
	assert_int_equal(ucl_sock(P.sv)->own_sent, 110000);
	assert_true(ucl_sock(P.sv)->own_exact);
	close(f);
}

/*
 * rsk_io_none_ours (the readiness wrappers' pass-through test): true only while the process
 * holds no connection of ours and the fast path's taint hooks are off; a connection, or a
 * lazy fd ever made (rsk_fw_active), sends the waits through the library again. Runs first,
 * before any test's pair exists.
 */
static void test_none_ours(void **state)
{
	(void)state;
	assert_int_equal(__atomic_load_n(&rsk_conn_live, __ATOMIC_SEQ_CST), 0);
	assert_int_equal(rsk_fw_on(), 0);
	assert_true(rsk_io_none_ours());
	__atomic_store_n(&rsk_fw_active, 1, __ATOMIC_SEQ_CST);
	assert_false(rsk_io_none_ours());
	__atomic_store_n(&rsk_fw_active, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(setup(NULL), 0);
	assert_false(rsk_io_none_ours()); /* our pair */
	assert_int_equal(teardown(NULL), 0);
}

/*
 * The wrappers' wait on kernel fds only (rsk_io_kwait_kernel): it still posts what is staged
 * (the application may wait elsewhere for the answer to it), rsk_io_kwait_none says there is
 * work until then, and a wait that may sleep counts itself a sleeper until its end (a quiet
 * endpoint must not go quiet under it). Without the push the second byte would reach the
 * peer only at the loop's tick, up to a millisecond later, so the read right after the call
 * finds one byte (a tick that falls between the write and the read hides that, rarely).
 */
static void test_kwait_kernel(void **state)
{
	char b[8];
	int k;

	(void)state;
	assert_int_equal(ucl_send(P.cl, "1", 1, 0), 1);
	assert_int_equal(ucl_send(P.cl, "2", 1, 0), 1); /* staged: the first is unconsumed */
	k = rsk_io_kwait_kernel(0);
	assert_int_equal(k, 0);
	assert_int_equal(ucl_recv(P.sv, b, sizeof(b), MSG_DONTWAIT), 2);
	assert_memory_equal(b, "12", 2);
	assert_int_equal(rsk_io_kwait_none(), 1);
	k = rsk_io_kwait_kernel(-1);
	assert_int_equal(__atomic_load_n(&rsk_conn_sleepers, __ATOMIC_SEQ_CST), 1);
	rsk_io_kwait_end(k);
	assert_int_equal(__atomic_load_n(&rsk_conn_sleepers, __ATOMIC_SEQ_CST), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_none_ours),
		T(test_which_sockets),
		T(test_nonblocking),
		T(test_blocking_recv_and_timeout),
		T(test_blocking_send_credits),
		T(test_signal_restart_rule),
		T(test_peek_waitall_iovec),
		T(test_shutdown),
		T(test_epipe_sigpipe),
		T(test_tcp_one),
		T(test_wait_spin),
		T(test_recv_spin_lockless),
		T(test_recv_learns_spin),
		T(test_kwait_kernel),
		cmocka_unit_test_setup_teardown(test_sendfile_tcp_first, setup_tcp_first, teardown),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
