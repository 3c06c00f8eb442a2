/*
 * Unit tests for core/calls/connect.c, driven in-process as preload/socket.c drives it: the
 * choice between the kernel connect and a faster path (policy, excluded ports, a socket that
 * is not new or is shared, a destination that is not local in shm mode, TCP first, a
 * listener without a shm companion) with the fallback reason each records; an accelerated
 * connect over loopback shm (0 blocking, EINPROGRESS non-blocking, as TCP says, and the
 * bytes then flow); a refused connect (ECONNREFUSED, nothing counted); and the kernel
 * connect's bookkeeping (connect_done, SO_ERROR settling a pending non-blocking connect);
 * the limit on setups in progress (a burst of non-blocking connects: the ones past it start
 * on TCP, and every way a setup ends gives its place back); what a direct connection tells
 * the destination history at its close (its age counts from its calls, not its connect);
 * when the default bearer (auto) takes a connection, and how a missing rendezvous is
 * remembered.
 * The dial_sync path (verbs) needs a device and is left to the Soft-RoCE guest.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/stats.h"
#include "calls/history.h"
#include "calls/sockopt.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"
#include "unit_count.h"
#include "unit_locks.h"

#define KERNEL RDMASOCK_TRANSPORT_KERNEL
#define RSK_HIST_DEPTH_VERDICT 4 /* connections ended before a destination has a verdict */
#define SHM RDMASOCK_TRANSPORT_SHM

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	return 0;
}

/* rsk_connect must leave @fd to the kernel with reason @why. */
static void assert_kernel(int fd, const struct sockaddr_in *a, enum rdmasock_fallback why)
{
	int rc = 12345;

	assert_int_equal(rsk_connect(fd, (const struct sockaddr *)a, sizeof(*a), &rc), 0);
	assert_int_equal(rc, 12345); /* not handled: nothing reported */
	assert_null(ucl_sock(fd)->conn);
	assert_int_equal(ucl_sock(fd)->fb_reason, why);
}

/* A socket the library does not track is never its business. */
static void test_untracked(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = 7;

	(void)state;
	assert_int_equal(rsk_connect(fd, (struct sockaddr *)&a, sizeof(a), &rc), 0);
	assert_int_equal(rc, 7);
	assert_null(rsk_sock_get(fd));
	close(fd);
	ucl_close(l);
}

/* Loopback with a shm listener: connect is handled here, 0 as a blocking TCP connect says,
 * and the accepted end is switched too; bytes flow both ways over shm. */
static void test_accelerated_blocking(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd = ucl_socket(0), sv, accel = 0;
	struct rsk_conn *c;
	char buf[16];

	(void)state;
	assert_int_equal(ucl_connect(fd, &a, &accel), 0);
	assert_int_equal(accel, 1);
	assert_non_null(ucl_sock(fd)->conn);
	assert_int_equal(ucl_sock(fd)->transport, SHM);
	assert_true(rsk_fdtab_is_accel(rsk_fdtab_load(fd)));
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->conn);
	assert_int_equal(rsk_stats.connections[SHM], 2); /* each end counted once */
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	assert_int_equal(ucl_send(fd, "hello", 5, 0), 5);
	assert_int_equal(ucl_recv(sv, buf, sizeof(buf), 0), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(ucl_send(sv, "back", 4, 0), 4);
	assert_int_equal(ucl_recv(fd, buf, sizeof(buf), 0), 4);
	assert_memory_equal(buf, "back", 4);
	/* a second connect on it: the socket is not new any more, nothing is set up again
	 * (preload answers EISCONN for an accelerated fd before asking) */
	c = ucl_sock(fd)->conn;
	assert_int_equal(rsk_connect(fd, (struct sockaddr *)&a, sizeof(a), &accel), 0);
	assert_ptr_equal(ucl_sock(fd)->conn, c);
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/* Non-blocking: EINPROGRESS, as the kernel said, yet the socket is writable at once. */
static void test_accelerated_nonblocking(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd = ucl_socket(SOCK_NONBLOCK), sv, accel = 0;
	struct pollfd p;
	char buf[8];

	(void)state;
	assert_int_equal(ucl_connect(fd, &a, &accel), -EINPROGRESS);
	assert_int_equal(accel, 1);
	assert_non_null(ucl_sock(fd)->conn);
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_true(p.revents & POLLOUT);
	assert_int_equal(ucl_recv(fd, buf, sizeof(buf), 0), -EAGAIN); /* non-blocking kept */
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_int_equal(ucl_send(fd, "x", 1, 0), 1);
	assert_int_equal(ucl_recv(sv, buf, sizeof(buf), 0), 1);
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/*
 * The calls a non-blocking shm connect makes (issue 9, cheap setup). The application's flags
 * are asked once each (F_GETFL, F_GETFD), and its O_NONBLOCK goes into the readiness pair
 * when it is made: no F_SETFL at all (before: one on the ctl end, one on the app end after
 * the switch). The look at the handshake reads the peer's name, which the connection keeps:
 * one getpeername and no poll (before: a poll, then a getpeername); only a handshake not
 * done at once (a busy host) adds the poll and a name read later.
 */
static void test_setup_calls(void **state)
{
	struct sockaddr_in a, got, cl;
	int l = ucl_listen(&a), fd = ucl_socket(SOCK_NONBLOCK), sv;
	socklen_t len = sizeof(got), clen = sizeof(cl);
	struct ucn_counts n;

	(void)state;
	ucn_count(1);
	assert_int_equal(ucl_connect(fd, &a, NULL), -EINPROGRESS);
	n = ucn;
	ucn_count(0);
	assert_non_null(ucl_sock(fd)->conn);
	assert_int_equal(n.setfl, 0);
	assert_int_equal(n.getfl, 1);
	assert_int_equal(n.getfd, 1);
	assert_int_equal(n.getpeername, n.poll + 1);
	assert_int_equal(n.getsockname, 1);
	assert_int_equal(n.getsockopt, 1); /* SO_PEERCRED of the rendezvous alone */
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK); /* the app end is non-blocking */
	/* the name kept is the kernel's: the server's listening address */
	assert_int_equal(rsk_opt_peername(fd, (struct sockaddr *)&got, &len), 0);
	assert_int_equal(len, sizeof(a));
	assert_memory_equal(&got, &a, sizeof(a));
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_int_equal(rsk_opt_sockname(fd, (struct sockaddr *)&cl, &clen), 0);
	len = sizeof(got);
	assert_int_equal(rsk_opt_peername(sv, (struct sockaddr *)&got, &len), 0);
	assert_memory_equal(&got, &cl, sizeof(cl)); /* each end's names match the other's */
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/*
 * TCP_NODELAY and TCP_CORK set through us before connect are carried into the connection
 * without asking the kernel (before: a getsockopt each); set behind our back (a raw system
 * call: as after a fork, whose child we do not see) they are asked, so the connection has
 * them either way.
 */
static void test_setup_options_kept(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd = ucl_socket(0), raw = ucl_socket(0), one = 1, v = 0, sv, sr;
	socklen_t len = sizeof(v);
	struct ucn_counts n;

	(void)state;
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	ucn_count(1);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	n = ucn;
	ucn_count(0);
	assert_non_null(ucl_sock(fd)->conn);
	assert_int_equal(n.getsockopt, 1); /* SO_PEERCRED alone */
	assert_int_equal(rsk_opt_get(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 1);
	v = 0;
	len = sizeof(v);
	assert_int_equal(rsk_opt_get(fd, IPPROTO_TCP, TCP_CORK, &v, &len), 0);
	assert_int_equal(v, 0);
	/* unseen: not known, asked */
	assert_int_equal(setsockopt(raw, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)), 0);
	ucl_sock(raw)->tcpopt_forks--; /* as if it forked since: the child may have set them */
	ucn_count(1);
	assert_int_equal(ucl_connect(raw, &a, NULL), 0);
	n = ucn;
	ucn_count(0);
	assert_int_equal(n.getsockopt, 3);
	v = 0;
	len = sizeof(v);
	assert_int_equal(rsk_opt_get(raw, IPPROTO_TCP, TCP_CORK, &v, &len), 0);
	assert_int_equal(v, 1);
	sv = ucl_accept(l, 0);
	sr = ucl_accept(l, 0);
	assert_true(sv >= 0 && sr >= 0);
	ucl_close(fd);
	ucl_close(raw);
	ucl_close(sv);
	ucl_close(sr);
	ucl_close(l);
}

/* The reasons a connect stays on the kernel, each recorded for the stats. */
static void test_fallback_reasons(void **state)
{
	struct sockaddr_in a, far = ucm_in4("192.0.2.1", 9), bad;
	int l = ucl_listen(&a), fd, d;

	(void)state;
	/* kernel mode: the policy */
	rsk_config.mode = RSK_MODE_KERNEL;
	fd = ucl_socket(0);
	assert_kernel(fd, &a, RDMASOCK_FB_POLICY);
	ucl_close(fd);
	rsk_config.mode = RSK_MODE_SHM;
	/* an excluded port: the policy too */
	rsk_config.n_exclude = 1;
	rsk_config.exclude[0].lo = rsk_config.exclude[0].hi = ntohs(a.sin_port);
	fd = ucl_socket(0);
	assert_kernel(fd, &a, RDMASOCK_FB_POLICY);
	ucl_close(fd);
	rsk_config.n_exclude = 0;
	/* shm mode and a destination on another host (no packet is sent for it) */
	fd = ucl_socket(0);
	assert_kernel(fd, &far, RDMASOCK_FB_NOT_LOCAL);
	ucl_close(fd);
	/* a socket two fds name: unsupported (the other fd would keep the TCP file) */
	fd = ucl_socket(0);
	d = dup(fd);
	assert_int_equal(rsk_sock_dup(fd, d), 0);
	assert_kernel(fd, &a, RDMASOCK_FB_UNSUPPORTED);
	ucl_close(d);
	ucl_close(fd);
	/* an address of another family than the socket's, or too short */
	fd = ucl_socket(0);
	bad = a;
	bad.sin_family = AF_INET6;
	assert_kernel(fd, &bad, RDMASOCK_FB_UNSUPPORTED);
	assert_int_equal(rsk_connect(fd, (struct sockaddr *)&a, sizeof(a) - 1, &d), 0);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_UNSUPPORTED);
	ucl_close(fd);
	/* no failed step leaves anything of ours open */
	assert_int_equal(rsk_stats.connections[SHM], 0);
	ucl_close(l);
}

/* A listener without a shm companion (a plain TCP server): no peer, the kernel connect. */
static void test_no_peer(void **state)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port), fd = ucl_socket(0), sv, before;
	struct sockaddr_in a = ucm_lo4(port);

	(void)state;
	before = ucm_fd_count();
	assert_kernel(fd, &a, RDMASOCK_FB_NO_PEER);
	assert_int_equal(ucm_fd_count(), before); /* the dial's attempt left no fd behind */
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTED);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_NO_PEER], 1);
	sv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(sv >= 0);
	close(sv);
	ucl_close(fd);
	close(l);
}

/* Refused (bound, not listening): ECONNREFUSED from the kernel; never counted. */
static void test_refused(void **state)
{
	uint16_t port;
	int dead = ucm_tcp_bound(0, &port), fd = ucl_socket(0), accel = 1;
	struct sockaddr_in a = ucm_lo4(port);
	struct pollfd p;
	int err = 0;
	socklen_t elen = sizeof(err);

	(void)state;
	assert_int_equal(ucl_connect(fd, &a, &accel), -ECONNREFUSED);
	assert_int_equal(accel, 0);
	assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_NEW);
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	ucl_close(fd);
	/* non-blocking: EINPROGRESS (or at once ECONNREFUSED on loopback), then SO_ERROR */
	fd = ucl_socket(SOCK_NONBLOCK);
	err = ucl_connect(fd, &a, &accel);
	assert_true(err == -EINPROGRESS || err == -ECONNREFUSED);
	if (err == -EINPROGRESS) {
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTING);
		p = (struct pollfd){.fd = fd, .events = POLLOUT};
		assert_int_equal(poll(&p, 1, 2000), 1);
		assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen), 0);
		assert_int_equal(err, ECONNREFUSED);
		rsk_connect_so_error(fd, err);
	}
	assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_NEW); /* it may connect again */
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	ucl_close(fd);
	close(dead);
}

/* A pending non-blocking kernel connect: SO_ERROR 0 settles it, counted once. */
static void test_so_error_settles(void **state)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port), fd, sv, rc;
	struct sockaddr_in a = ucm_lo4(port);
	struct pollfd p;

	(void)state;
	rsk_config.mode = RSK_MODE_KERNEL;
	fd = ucl_socket(SOCK_NONBLOCK);
	rc = ucl_connect(fd, &a, NULL);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	if (rc == -EINPROGRESS) {
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTING);
		assert_int_equal(rsk_stats.connections[KERNEL], 0);
		p = (struct pollfd){.fd = fd, .events = POLLOUT};
		assert_int_equal(poll(&p, 1, 2000), 1);
		rsk_connect_so_error(fd, 0);
	}
	assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTED);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_POLICY], 1);
	rsk_connect_so_error(fd, 0); /* asked again: counted once */
	rsk_connect_done(fd, -EISCONN);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	sv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(sv);
	ucl_close(fd);
	close(l);
}

/* A TCP-first non-blocking connect: SO_ERROR 0 asks the kernel nothing (the handshake may
 * still be on), and its first call that moves data settles it, counted once. */
static void test_so_error_tcp_first(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd, sv, rc;
	struct pollfd p;
	char b[4];

	(void)state;
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	fd = ucl_socket(SOCK_NONBLOCK);
	rc = ucl_connect(fd, &a, NULL);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	assert_non_null(ucl_sock(fd)->upg);
	if (rc == -EINPROGRESS) {
		p = (struct pollfd){.fd = fd, .events = POLLOUT};
		assert_int_equal(poll(&p, 1, 2000), 1);
		rsk_connect_so_error(fd, 0);
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTING);
		assert_int_equal(rsk_stats.connections[KERNEL], 0);
	}
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_int_equal(ucl_send(fd, "hi", 2, 0), 2);
	assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTED);
	assert_int_equal(rsk_stats.connections[KERNEL], 2); /* the client, and the server's */
	assert_int_equal(ucl_recv(sv, b, sizeof(b), 0), 2);
	assert_int_equal(ucl_send(fd, "hi", 2, 0), 2);
	assert_int_equal(rsk_stats.connections[KERNEL], 2);
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/*
 * A TCP-first connect takes no lock, from the destination's history to its result and the
 * SO_ERROR 0 that has nothing to settle on such a socket (3 before: the history's, and the
 * socket's at the result and at SO_ERROR). A failed SO_ERROR still settles it (NEW).
 */
static void test_tcp_first_connect_takes_no_lock(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd, sv, rc, n;
	struct pollfd p;

	(void)state;
	if (!LOCKS_COUNTED)
		skip();
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	fd = ucl_socket(SOCK_NONBLOCK);
	locks = 0;
	lock_counting = 1;
	rc = ucl_connect(fd, &a, NULL);
	lock_counting = 0;
	n = locks;
	assert_non_null(ucl_sock(fd)->upg);
	if (rc == -EINPROGRESS) {
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTING);
		p = (struct pollfd){.fd = fd, .events = POLLOUT};
		assert_int_equal(poll(&p, 1, 2000), 1);
		lock_counting = 1;
		rsk_connect_so_error(fd, 0);
		lock_counting = 0;
		n = locks;
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTING);
		rsk_connect_so_error(fd, ECONNREFUSED); /* (stands in for a failed handshake) */
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_NEW);
	} else {
		assert_int_equal(rc, 0);
		assert_int_equal(ucl_sock(fd)->state, RSK_SOCK_CONNECTED);
	}
	assert_int_equal(n, 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/* TCP first: the kernel connect, with the socket ready to move (reason tcp_first). */
static void test_tcp_first(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd = ucl_socket(0), sv, accel = 1, rc = 0;

	(void)state;
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	assert_int_equal(ucl_connect(fd, &a, &accel), 0);
	assert_int_equal(accel, 0);
	assert_null(ucl_sock(fd)->conn);
	assert_non_null(ucl_sock(fd)->upg);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_TCP_FIRST);
	/* a connect again (APR asks so for a non-blocking one's result) is the kernel's to
	 * answer (EISCONN), and the socket keeps its reason */
	assert_int_equal(rsk_connect(fd, (struct sockaddr *)&a, sizeof(a), &rc), 0);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_TCP_FIRST);
	assert_true(rsk_fdtab_is_data(rsk_fdtab_load(fd))); /* its calls come to us */
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(fd)));
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->upg);
	ucl_close(fd);
	ucl_close(sv);
	ucl_close(l);
}

/* Setups in progress: auto (TCP first learnt per destination), no history yet. */
static void config_learn(void)
{
	rsk_config.tcp_first = RSK_TCP_FIRST_AUTO;
	rsk_hist_clear();
	assert_int_equal(rsk_hist_setups(), 0);
}

/* A non-blocking connect that went direct and holds a setup in progress. */
static int connect_held(const struct sockaddr_in *a, int held_before)
{
	int fd = ucl_socket(SOCK_NONBLOCK), accel = 0;

	assert_int_equal(ucl_connect(fd, a, &accel), -EINPROGRESS);
	assert_int_equal(accel, 1);
	assert_non_null(ucl_sock(fd)->conn);
	assert_int_equal(rsk_hist_setups(), held_before + 1);
	return fd;
}

/*
 * A burst of non-blocking connects: RSK_HIST_SETUPS go direct and stay in progress until the
 * application sees them finish; the next starts on TCP (setup_limit, a socket that can move,
 * decided before anything was committed), while a blocking connect, finished inside the call,
 * still goes direct and holds nothing. Each way the application sees a connect finish gives
 * one place back, once: SO_ERROR (asked twice), a connect again, a data call, a close.
 */
static void test_setup_limit(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd[RSK_HIST_SETUPS], extra, blk, i, accel = 1, rc, err = -1;
	socklen_t elen = sizeof(err);
	char b;

	(void)state;
	config_learn();
	for (i = 0; i < RSK_HIST_SETUPS; i++)
		fd[i] = connect_held(&a, i);
	extra = ucl_socket(SOCK_NONBLOCK);
	rc = ucl_connect(extra, &a, &accel);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	assert_int_equal(accel, 0);
	assert_null(ucl_sock(extra)->conn);
	assert_non_null(ucl_sock(extra)->upg); /* on TCP, and it may move later */
	assert_int_equal(ucl_sock(extra)->fb_reason, RDMASOCK_FB_SETUP_LIMIT);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS);
	blk = ucl_socket(0);
	assert_int_equal(ucl_connect(blk, &a, &accel), 0);
	assert_int_equal(accel, 1);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS);
	assert_int_equal(rsk_opt_get(fd[0], SOL_SOCKET, SO_ERROR, &err, &elen), 0);
	assert_int_equal(err, 0);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS - 1);
	assert_int_equal(rsk_opt_get(fd[0], SOL_SOCKET, SO_ERROR, &err, &elen), 0);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS - 1); /* once */
	rsk_connect_again(fd[1]);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS - 2);
	assert_int_equal(ucl_recv(fd[2], &b, 1, 0), -EAGAIN);
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS - 3);
	ucl_close(fd[3]); /* closed before the application asked */
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS - 4);
	fd[3] = connect_held(&a, RSK_HIST_SETUPS - 4); /* a place given back is taken again */
	for (i = 0; i < RSK_HIST_SETUPS; i++)
		ucl_close(fd[i]);
	assert_int_equal(rsk_hist_setups(), 0);
	ucl_close(extra);
	ucl_close(blk);
	ucl_close(l);
}

/* A destination whose connections live on earns every setup back: a burst to it all goes
 * direct, holding nothing (the limit is for destinations without a verdict). */
static void test_setup_limit_lived(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), fd[RSK_HIST_SETUPS + 1], i, accel;

	(void)state;
	config_learn();
	for (i = 0; i < RSK_HIST_DEPTH_VERDICT; i++)
		rsk_hist_note((const struct sockaddr *)&a, 0);
	for (i = 0; i < RSK_HIST_SETUPS + 1; i++) {
		fd[i] = ucl_socket(SOCK_NONBLOCK);
		accel = 0;
		assert_int_equal(ucl_connect(fd[i], &a, &accel), -EINPROGRESS);
		assert_int_equal(accel, 1);
	}
	assert_int_equal(rsk_hist_setups(), 0);
	for (i = 0; i < RSK_HIST_SETUPS + 1; i++)
		ucl_close(fd[i]);
	ucl_close(l);
}

/*
 * Setups that end inside connect() hold nothing afterwards: a fallback found during the setup
 * (no peer listens there), and a non-blocking connect whose handshake did not finish (a full
 * backlog: the offer is withdrawn and the connection stays on TCP, reason handshake).
 */
static void test_setup_limit_ends(void **state)
{
	uint16_t port;
	int dead = ucm_tcp_bound(0, &port), fd, l, plain[2], i, rc;
	struct sockaddr_in a = ucm_lo4(port);

	(void)state;
	config_learn();
	fd = ucl_socket(SOCK_NONBLOCK);
	rc = ucl_connect(fd, &a, NULL);
	assert_true(rc == -EINPROGRESS || rc == -ECONNREFUSED);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_NO_PEER);
	assert_int_equal(rsk_hist_setups(), 0);
	ucl_close(fd);
	close(dead);
	/* backlog 0: the kernel queues one connection; two plain ones fill it */
	l = ucm_tcp_bound(0, &port);
	a = ucm_lo4(port);
	assert_int_equal(rsk_sock_track(l, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(l, 0), 0);
	rsk_accept_listen_done(l, 0);
	for (i = 0; i < 2; i++) {
		plain[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		(void)connect(plain[i], (struct sockaddr *)&a, sizeof(a));
	}
	usleep(20000);
	fd = ucl_socket(SOCK_NONBLOCK);
	assert_int_equal(ucl_connect(fd, &a, NULL), -EINPROGRESS);
	if (ucl_sock(fd)->conn == NULL) /* (a slow host may have let it in after all) */
		assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_HANDSHAKE);
	assert_int_equal(rsk_hist_setups(), ucl_sock(fd)->conn != NULL);
	ucl_close(fd);
	assert_int_equal(rsk_hist_setups(), 0);
	for (i = 0; i < 2; i++)
		close(plain[i]);
	ucl_close(l);
}

/* A connection set up at connect that makes RSK_HIST_AGE_CALLS + 2 small sends, @wait_ms
 * between its first and the rest (@before 1) or before its last (@before 0), then ends: the
 * history notes it. */
static void direct_lived(const struct sockaddr_in *a, int l, int wait_ms, int before)
{
	int fd = ucl_socket(0), sv, accel = 0, i, n = RSK_HIST_AGE_CALLS + 2, one = 1;
	char b = 'h';

	/* (each send a message: the stream's count of them was the old rule's calls) */
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	assert_int_equal(ucl_connect(fd, a, &accel), 0);
	assert_int_equal(accel, 1); /* direct */
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	for (i = 0; i < n; i++) {
		if (i == (before ? 1 : n - 1))
			unit_sleep_ms(wait_ms);
		assert_int_equal(ucl_send(fd, &b, 1, 0), 1);
	}
	ucl_close(fd);
	ucl_close(sv);
}

/*
 * A direct connection's age for the history counts from its first data call after
 * RSK_HIST_AGE_CALLS of them, as TCP first's threshold does: one that waited before its
 * calls (behind other setups in a server's accept loop) and then ended at once was short.
 * Counted from its connect, it was long, so the next ones went direct too, as slowly: nginx +
 * ab, 100 KiB without keep-alive, stuck at 1,200 req/s against kernel TCP's 10,400. One that
 * goes on making calls for RDMASOCK_UPGRADE_MS is long.
 */
static void test_direct_age_counts_from_calls(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), i, fd, accel = 1, rc;

	(void)state;
	config_learn();
	rsk_config.upgrade_ms = 200;
	rsk_config.upgrade_bytes = 1u << 30;
	for (i = 0; i < RSK_HIST_DEPTH_VERDICT; i++)
		direct_lived(&a, l, 250, 1);
	assert_int_equal(rsk_hist_verdict((const struct sockaddr *)&a), 1); /* all short */
	fd = ucl_socket(SOCK_NONBLOCK);
	rc = ucl_connect(fd, &a, &accel);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	assert_int_equal(accel, 0);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_TCP_FIRST);
	ucl_close(fd);
	rsk_hist_clear();
	for (i = 0; i < RSK_HIST_DEPTH_VERDICT; i++)
		direct_lived(&a, l, 250, 0);
	assert_int_equal(rsk_hist_verdict((const struct sockaddr *)&a), 0); /* all lived */
	ucl_close(l);
}

#define T(f) cmocka_unit_test_setup(f, setup)

/* A listener on 127.0.0.1:@port, as ucl_listen makes one (with the face and bearer the
 * configuration of the moment gives it), on a port a listener before it had. */
static int listen_again(const struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)), 0);
	assert_int_equal(bind(fd, (const struct sockaddr *)a, sizeof(*a)), 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(fd, 64), 0);
	rsk_accept_listen_done(fd, 64);
	return fd;
}

/* @n connects to @a, each closed at once (a bearer one accepted from listener @l first):
 * how many took the bearer (the number names a unix socket); each other one is TCP first's. */
static int bearer_connects(int l, const struct sockaddr_in *a, int n)
{
	int i, fd, sv, bearer = 0;
	struct rsk_sock *s;

	for (i = 0; i < n; i++) {
		fd = ucl_socket(0);
		assert_int_equal(ucl_connect(fd, a, NULL), 0);
		if ((s = rsk_sock_get(fd)) == NULL) { /* the kernel's unix socket: untracked */
			bearer++;
			sv = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
			assert_true(sv >= 0);
			close(sv);
			close(fd);
			continue;
		}
		assert_int_equal(s->fb_reason, RDMASOCK_FB_TCP_FIRST);
		rsk_sock_put(s);
		ucl_close(fd);
	}
	return bearer;
}

/*
 * RDMASOCK_BEARER=auto, the default: a connect takes the same-host bearer only where TCP
 * first would keep it on TCP (a destination whose connections end short), and one in eight
 * of those still starts on TCP first (its end keeps the history true); none without a
 * verdict or to a destination whose connections live on. A destination whose listener has
 * no rendezvous is marked at the first refusal, and only the one-in-eight tries it again, so
 * a rendezvous that appears later is found.
 */
static void test_bearer_auto(void **state)
{
	struct sockaddr_in a;
	int l, fd, i, n;

	(void)state;
	rsk_config.bearer = RSK_BEARER_AUTO;
	rsk_config.tcp_first = RSK_TCP_FIRST_AUTO;
	rsk_hist_clear();
	l = ucl_listen(&a);
	assert_int_not_equal(ucl_sock(l)->bearer_fd, 0);
	/* no verdict yet: a direct setup, not the bearer */
	fd = ucl_socket(0);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_non_null(ucl_sock(fd)->conn);
	ucl_close(fd);
	/* short: the bearer, bar the sampled ones (1 in 8, evenly spread: 2-4 of 24) */
	for (i = 0; i < 8; i++)
		rsk_hist_note((struct sockaddr *)&a, 1);
	n = bearer_connects(l, &a, 24);
	assert_in_range(n, 20, 22);
	assert_false(rsk_hist_no_bearer((struct sockaddr *)&a));
	/* connections that live on: direct again */
	for (i = 0; i < 8; i++)
		rsk_hist_note((struct sockaddr *)&a, 0);
	fd = ucl_socket(0);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_non_null(ucl_sock(fd)->conn);
	ucl_close(fd);
	ucl_close(l);

	/* no rendezvous (a listener without the bearer): marked, and seldom tried */
	rsk_config.bearer = RSK_BEARER_FACE;
	l = listen_again(&a);
	assert_int_equal(ucl_sock(l)->bearer_fd, 0);
	rsk_config.bearer = RSK_BEARER_AUTO;
	for (i = 0; i < 8; i++)
		rsk_hist_note((struct sockaddr *)&a, 1);
	assert_int_equal(bearer_connects(l, &a, 3), 0);
	assert_true(rsk_hist_no_bearer((struct sockaddr *)&a));
	ucl_close(l);
	/* the server comes back with its rendezvous: a sampled try finds it, and the rest follow */
	l = listen_again(&a);
	assert_int_not_equal(ucl_sock(l)->bearer_fd, 0);
	for (i = 0; i < 16 && rsk_hist_no_bearer((struct sockaddr *)&a); i++)
		(void)bearer_connects(l, &a, 1);
	assert_false(rsk_hist_no_bearer((struct sockaddr *)&a));
	assert_in_range(bearer_connects(l, &a, 16), 13, 15);
	ucl_close(l);
	rsk_hist_clear();
}

/* A bearer connection keeps the options set before its connect that a unix socket can carry
 * (TCP_NODELAY and TCP_KEEPIDLE read back from the stand-in's table, SO_KEEPALIVE and
 * SO_RCVTIMEO from the unix socket itself); one it cannot (SO_LINGER: a unix socket's close
 * never resets its peer) keeps the connection off the bearer. */
static void test_bearer_options_before_connect(void **state)
{
	struct sockaddr_in a;
	struct timeval tv = {.tv_sec = 7}, got;
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	int l, fd, sv, v = 0;
	socklen_t len = sizeof(v);

	(void)state;
	rsk_config.bearer = RSK_BEARER_UNIX;
	l = ucl_listen(&a);
	fd = ucl_socket(0);
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int)), 0);
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){33}, sizeof(int)), 0);
	assert_int_equal(rsk_opt_plain_set(fd, SOL_SOCKET, SO_KEEPALIVE, &(int){1}, sizeof(int)), 0);
	assert_int_equal(rsk_opt_plain_set(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_null(rsk_sock_get(fd)); /* the bearer's */
	assert_int_equal(rsk_opt_plain_get(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 1);
	len = sizeof(v);
	assert_int_equal(rsk_opt_plain_get(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
	assert_int_equal(v, 33);
	len = sizeof(v);
	assert_int_equal(rsk_opt_plain_get(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
	assert_int_equal(v, 1);
	len = sizeof(got);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &got, &len), 0);
	assert_int_equal(got.tv_sec, 7);
	sv = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(sv >= 0);
	close(sv);
	close(fd);
	fd = ucl_socket(0);
	assert_int_equal(rsk_opt_plain_set(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_non_null(ucl_sock(fd)->conn); /* set up on shm, not the bearer */
	ucl_close(fd);
	assert_int_equal(rsk_accept_bearer(l, NULL, NULL, 0, &(int){0}), -EAGAIN); /* nobody there */
	ucl_close(l);
}

/* A non-blocking connect through the bearer says 0 (the unix connection is made, as POSIX
 * allows any connect to say), not EINPROGRESS: the client starts at once, without a wait for
 * writability and a connect again. Such a connect again still says EISCONN, and SO_ERROR 0. */
static void test_bearer_nonblocking_connect(void **state)
{
	struct sockaddr_in a;
	struct pollfd p;
	int l, fd, sv, err = -1;
	socklen_t len = sizeof(err);

	(void)state;
	rsk_config.bearer = RSK_BEARER_UNIX;
	l = ucl_listen(&a);
	fd = ucl_socket(SOCK_NONBLOCK);
	assert_int_equal(ucl_connect(fd, &a, NULL), 0);
	assert_null(rsk_sock_get(fd)); /* the bearer's */
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	assert_int_equal(poll(&p, 1, 0), 1);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	assert_int_equal(err, 0);
	assert_int_equal(connect(fd, (const struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(rsk_opt_plain_connect_err(fd, -errno), -EISCONN);
	sv = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(sv >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(read(sv, &err, 1), 1);
	close(sv);
	close(fd);
	ucl_close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_untracked),
		T(test_accelerated_blocking),
		T(test_accelerated_nonblocking),
		T(test_setup_calls),
		T(test_setup_options_kept),
		T(test_fallback_reasons),
		T(test_no_peer),
		T(test_refused),
		T(test_so_error_settles),
		T(test_so_error_tcp_first),
		T(test_tcp_first_connect_takes_no_lock),
		T(test_tcp_first),
		T(test_setup_limit),
		T(test_setup_limit_lived),
		T(test_setup_limit_ends),
		T(test_direct_age_counts_from_calls),
		T(test_bearer_auto),
		T(test_bearer_options_before_connect),
		T(test_bearer_nonblocking_connect),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
