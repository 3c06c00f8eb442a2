/*
 * Unit tests for core/calls/accept.c, driven in-process as preload/socket.c drives it:
 * listen() gives a tracked socket its shm companion (none in kernel mode, and its accepted
 * sockets then carry the policy reason); accept() tracks what it returns, counts it once and
 * records why it stays on TCP (a plain client: no_peer); a preloaded client's connection is
 * claimed and switched to shm, and one whose client already exited is taken all the same,
 * its bytes readable and then EOF; a client committed to shm whose endpoint cannot be opened
 * is dropped visibly (ECONNABORTED); TCP first leaves the accepted socket ready to move. The
 * verbs claim (accept_hello) needs a device and is left to the Soft-RoCE guest.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/stats.h"
#include "calls/sockopt.h"
#include "sock/listener.h"
#include "transport/shm_rdv.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"
#include "unit_count.h"
#include "unit_locks.h"

#define KERNEL RDMASOCK_TRANSPORT_KERNEL
#define SHM RDMASOCK_TRANSPORT_SHM

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	return 0;
}

static void test_listen_done(void **state)
{
	struct sockaddr_in a;
	uint16_t port;
	int l = ucl_listen(&a), k, u;

	(void)state;
	assert_int_equal(ucl_sock(l)->state, RSK_SOCK_LISTENING);
	assert_non_null(ucl_sock(l)->lst);
	assert_true(rsk_rdv_exists((struct sockaddr *)&a)); /* a preloaded client finds it */
	ucl_close(l);
	assert_false(rsk_rdv_exists((struct sockaddr *)&a)); /* gone with the last close */
	/* kernel mode: no companion */
	rsk_config.mode = RSK_MODE_KERNEL;
	k = ucl_listen(&a);
	assert_int_equal(ucl_sock(k)->state, RSK_SOCK_LISTENING);
	assert_null(ucl_sock(k)->lst);
	assert_false(rsk_rdv_exists((struct sockaddr *)&a));
	ucl_close(k);
	/* an untracked socket: nothing happens, and accept_done returns what it got */
	u = ucm_tcp_bound(1, &port);
	rsk_accept_listen_done(u, 8);
	assert_null(rsk_sock_get(u));
	assert_int_equal(rsk_accept_done(u, 77, 0, NULL, 0), 77);
	close(u);
}

/* A plain TCP client: tracked, on the kernel for the reason no_peer, counted once. */
static void test_plain_client(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sv;
	char b[4];

	(void)state;
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_null(ucl_sock(sv)->conn);
	assert_int_equal(ucl_sock(sv)->state, RSK_SOCK_CONNECTED);
	assert_int_equal(ucl_sock(sv)->fb_reason, RDMASOCK_FB_NO_PEER);
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_NO_PEER], 1);
	assert_false(rsk_fdtab_is_data(rsk_fdtab_load(sv))); /* the kernel's data path */
	assert_int_equal(send(c, "abc", 3, 0), 3);
	assert_int_equal(recv(sv, b, sizeof(b), 0), 3);
	close(c);
	ucl_close(sv);
	ucl_close(l);
}

/* Kernel mode: the accepted sockets carry the listener's reason (the policy). */
static void test_kernel_listener_reason(void **state)
{
	struct sockaddr_in a;
	int l, c, sv;

	(void)state;
	rsk_config.mode = RSK_MODE_KERNEL;
	l = ucl_listen(&a);
	c = ucl_socket(0);
	assert_int_equal(ucl_connect(c, &a, NULL), 0);
	sv = ucl_accept(l, SOCK_NONBLOCK);
	assert_true(sv >= 0);
	assert_int_equal(ucl_sock(sv)->fb_reason, RDMASOCK_FB_POLICY);
	assert_null(ucl_sock(sv)->conn);
	assert_int_equal(rsk_stats.connections[KERNEL], 2);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_POLICY], 2);
	ucl_close(c);
	ucl_close(sv);
	ucl_close(l);
}

/* A preloaded client: claimed and switched; counted once as shm, not as kernel. */
static void test_switch(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c = ucl_socket(0), sv;
	char b[8];

	(void)state;
	assert_int_equal(ucl_connect(c, &a, NULL), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->conn);
	assert_int_equal(ucl_sock(sv)->transport, SHM);
	assert_true(rsk_fdtab_is_accel(rsk_fdtab_load(sv)));
	assert_int_equal(ucl_sock(sv)->from_lst, rsk_listener_id(ucl_sock(l)->lst));
	assert_int_equal(rsk_stats.connections[SHM], 2);
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	/* the server speaks first: the client reads it (the answer reached it) */
	assert_int_equal(ucl_send(sv, "srv", 3, 0), 3);
	assert_int_equal(ucl_recv(c, b, sizeof(b), 0), 3);
	assert_memory_equal(b, "srv", 3);
	ucl_close(c);
	assert_int_equal(ucl_recv(sv, b, sizeof(b), 0), 0); /* its close: EOF */
	ucl_close(sv);
	ucl_close(l);
}

/*
 * The calls an accelerated accept makes (issue 9, cheap setup): the accepted socket's flags
 * are what accept4's flags made them, its peer is the address accept4 returned and its own
 * address the one the claim proved the offer by, so it is asked nothing: no F_GETFL, F_GETFD
 * or F_SETFL (before: one each, and one more F_SETFL on the readiness pair's ctl end), and
 * only the offer's socket is asked its names (one getsockname, one getpeername; before: both
 * again of the accepted socket). What getsockname and getpeername report is still the
 * kernel's, and the connection stays non-blocking as accept4 made it.
 */
static void test_switch_calls(void **state)
{
	struct sockaddr_in a, got, cl;
	int l = ucl_listen(&a), c = ucl_socket(0), sv;
	socklen_t len = sizeof(got), clen = sizeof(cl);
	struct ucn_counts n;
	char b[8];

	(void)state;
	assert_int_equal(ucl_connect(c, &a, NULL), 0);
	ucn_count(1);
	sv = ucl_accept(l, SOCK_NONBLOCK);
	n = ucn;
	ucn_count(0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->conn);
	assert_int_equal(n.getfl, 0);
	assert_int_equal(n.getfd, 0);
	assert_int_equal(n.setfl, 0);
	assert_int_equal(n.getsockname, 1);
	assert_int_equal(n.getpeername, 1);
	/* SO_PEERCRED of the rendezvous connection alone: the options are the listener's (all
	 * set through us) */
	assert_int_equal(n.getsockopt, 1);
	assert_true(fcntl(sv, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(sv, F_GETFD) & FD_CLOEXEC); /* (ucl_accept asks for SOCK_CLOEXEC) */
	assert_int_equal(ucl_recv(sv, b, sizeof(b), 0), -EAGAIN);
	assert_int_equal(rsk_opt_sockname(sv, (struct sockaddr *)&got, &len), 0);
	assert_int_equal(len, sizeof(a));
	assert_memory_equal(&got, &a, sizeof(a));
	assert_int_equal(rsk_opt_sockname(c, (struct sockaddr *)&cl, &clen), 0);
	len = sizeof(got);
	assert_int_equal(rsk_opt_peername(sv, (struct sockaddr *)&got, &len), 0);
	assert_int_equal(len, sizeof(cl));
	assert_memory_equal(&got, &cl, sizeof(cl));
	ucl_close(c);
	ucl_close(sv);
	ucl_close(l);
}

/*
 * An accepted connection has its listener's TCP_NODELAY (the kernel copies it at the
 * handshake): set through us before listen(), it is known and not asked; set while listening
 * (queued connections may have the old value) it is asked again. Either way the accelerated
 * connection reports the kernel's value.
 */
static void test_switch_listener_options(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c = ucl_socket(0), one = 1, v, sv, i;
	socklen_t len;
	struct ucn_counts n;

	(void)state;
	/* (ucl_listen listens at once: the set below is while listening, for the second round) */
	ucl_sock(l)->state = RSK_SOCK_NEW;
	assert_int_equal(rsk_opt_plain_set(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	ucl_sock(l)->state = RSK_SOCK_LISTENING;
	for (i = 0; i < 2; i++) {
		if (i == 1) {
			c = ucl_socket(0);
			assert_int_equal(
				rsk_opt_plain_set(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
		}
		assert_int_equal(ucl_connect(c, &a, NULL), 0);
		ucn_count(1);
		sv = ucl_accept(l, 0);
		n = ucn;
		ucn_count(0);
		assert_true(sv >= 0);
		assert_non_null(ucl_sock(sv)->conn);
		assert_int_equal(n.getsockopt, i == 0 ? 1 : 3); /* (SO_PEERCRED, and the two asked) */
		v = 0;
		len = sizeof(v);
		assert_int_equal(rsk_opt_get(sv, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
		assert_int_equal(v, 1);
		ucl_close(c);
		ucl_close(sv);
	}
	ucl_close(l);
}

/* accept() without an address (or with one too long for us): core asks for the peer
 * itself, and the offer is still claimed. */
static void test_switch_peer_asked(void **state)
{
	struct sockaddr_in a, big;
	int l = ucl_listen(&a), c, sv, i;

	(void)state;
	for (i = 0; i < 2; i++) {
		c = ucl_socket(0);
		assert_int_equal(ucl_connect(c, &a, NULL), 0);
		rsk_accept_begin(l);
		sv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		assert_true(sv >= 0);
		memset(&big, 0, sizeof(big));
		/* i = 1: a length past any address: not trusted, asked again */
		assert_int_equal(rsk_accept_done(l, sv, 0, i ? (struct sockaddr *)&big : NULL,
						 i ? 4096 : 0),
				 sv);
		assert_non_null(ucl_sock(sv)->conn);
		assert_int_equal(ucl_sock(sv)->transport, SHM);
		ucl_close(c);
		ucl_close(sv);
	}
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	ucl_close(l);
}

/* A wildcard listener: the claim learns the accepted connection's own address from its
 * socket (asked only once an offer names the peer), and the client is switched. */
static void test_switch_wildcard(void **state)
{
	struct sockaddr_in any = {.sin_family = AF_INET}, a;
	socklen_t len = sizeof(any);
	int l = socket(AF_INET, SOCK_STREAM, 0), c, sv;

	(void)state;
	assert_int_equal(bind(l, (struct sockaddr *)&any, sizeof(any)), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&any, &len), 0);
	assert_int_equal(rsk_sock_track(l, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(l, 8), 0);
	rsk_accept_listen_done(l, 8);
	assert_int_equal(ucl_sock(l)->port, ntohs(any.sin_port));
	a = ucm_lo4(ntohs(any.sin_port));
	c = ucl_socket(0);
	assert_int_equal(ucl_connect(c, &a, NULL), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->conn);
	assert_int_equal(ucl_sock(sv)->transport, SHM);
	ucl_close(c);
	ucl_close(sv);
	ucl_close(l);
}

/* A client that connects, writes and exits before the server accepts. */
static struct sockaddr_in g_addr;

static int child_write_exit(void *arg)
{
	int c = ucl_socket(0);

	(void)arg;
	if (ucl_connect(c, &g_addr, NULL) != 0 || ucl_sock(c)->conn == NULL)
		return 2;
	if (ucl_send(c, "last words", 10, 0) != 10)
		return 3;
	return 0; /* _exit: no close, no exit hook; its kernel closes what it held */
}

static void test_client_already_exited(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), sv;
	char b[32];
	struct pollfd p;

	(void)state;
	g_addr = a;
	assert_int_equal(unit_in_child(child_write_exit, NULL, 5000), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0); /* taken, not dropped */
	assert_non_null(ucl_sock(sv)->conn);
	p = (struct pollfd){.fd = sv, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_int_equal(ucl_recv(sv, b, sizeof(b), 0), 10);
	assert_memory_equal(b, "last words", 10);
	assert_int_equal(ucl_recv(sv, b, sizeof(b), 0), 0); /* then EOF, as over TCP */
	assert_int_equal(ucl_recv(sv, b, sizeof(b), MSG_DONTWAIT), 0);
	ucl_close(sv);
	ucl_close(l);
}

/*
 * A client committed to shm (its offer names this connection) whose memory cannot be mapped:
 * the connection is dropped with ECONNABORTED, counted as a resources fallback, its fd closed.
 */
static void test_drop_unusable_offer(void **state)
{
	struct sockaddr_in a;
	struct rsk_rdv_offer o;
	int l = ucl_listen(&a), c, rdv, sp[2], fds[3], sv, before;
	struct pollfd p;
	char b[1];

	(void)state;
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	fds[0] = memfd_create("not-a-ring", MFD_CLOEXEC); /* empty: no connection region */
	assert_true(fds[0] >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	fds[1] = sp[0];
	fds[2] = c;
	rdv = rsk_rdv_find((struct sockaddr *)&a, NULL, NULL, NULL);
	assert_true(rdv >= 0);
	o = ucm_offer((struct sockaddr *)&a, RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE);
	assert_int_equal(ucm_send_fds(rdv, &o, sizeof(o), fds, 3), (ssize_t)sizeof(o));
	unit_sleep_ms(50); /* the listener's loop reads the offer before the SYN arrives */
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	before = unit_lowest_free_fd();
	sv = ucl_accept(l, 0);
	assert_int_equal(sv, -ECONNABORTED);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_RESOURCES], 1);
	assert_int_equal(rsk_stats.connections[SHM], 0);
	assert_int_equal(unit_lowest_free_fd(), before); /* the accepted fd was closed */
	assert_int_equal(rsk_fdtab_load(before), 0);     /* and released */
	/* the client sees its connection end */
	p = (struct pollfd){.fd = c, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_true(recv(c, b, 1, MSG_DONTWAIT) <= 0);
	close(c);
	close(rdv);
	close(sp[0]);
	close(sp[1]);
	close(fds[0]);
	ucl_close(l);
}

/* TCP first: the accepted socket is ready to move when its client offers. */
static void test_tcp_first(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sv;

	(void)state;
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_null(ucl_sock(sv)->conn);
	assert_non_null(ucl_sock(sv)->upg);
	assert_true(rsk_fdtab_is_data(rsk_fdtab_load(sv))); /* its calls come to us */
	assert_int_equal(rsk_stats.connections[KERNEL], 1);
	ucl_close(sv);
	/* off: no upgrade state at all */
	rsk_config.tcp_first = RSK_TCP_FIRST_OFF;
	close(c);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	sv = ucl_accept(l, 0);
	assert_null(ucl_sock(sv)->upg);
	close(c);
	ucl_close(sv);
	ucl_close(l);
}

/* Locks taken by one accept of a TCP-first connection on listener @l (the application's
 * accept and the one that finds the backlog empty, as an event loop makes them). */
static int accept_locks(int l, const struct sockaddr_in *a)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sv, n;

	assert_int_equal(connect(c, (const struct sockaddr *)a, sizeof(*a)), 0);
	locks = 0;
	lock_counting = 1;
	sv = ucl_accept(l, SOCK_NONBLOCK);
	assert_int_equal(ucl_accept(l, SOCK_NONBLOCK), -EAGAIN);
	lock_counting = 0;
	n = locks;
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->upg);
	close(c);
	ucl_close(sv);
	return n;
}

/*
 * A process with fds to spare never tells its listener to resume: it was never paused.
 * Before, every accept did, and so took the transport's lock and looked over the loop's
 * watches (two more locks) once more than it needs: 3 of the accept's locks. Once paused
 * for fds, each accept with room tells it again until it takes (the shm rendezvous is remade
 * only once drained), and those 3 locks come back.
 */
static void test_no_resume_unless_paused(void **state)
{
	struct sockaddr_in a;
	int l, quiet, paused;

	(void)state;
	if (!LOCKS_COUNTED)
		skip();
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	l = ucl_listen(&a);
	assert_int_equal(fcntl(l, F_SETFL, O_NONBLOCK), 0); /* an event loop's listener */
	(void)accept_locks(l, &a); /* the first connection's one-time work */
	quiet = accept_locks(l, &a);
	assert_int_equal(accept_locks(l, &a), quiet);
	ucl_sock(l)->fd_paused = 1; /* as a pause for fds left it */
	paused = accept_locks(l, &a);
	ucl_close(l);
	assert_int_equal(paused, quiet + 3);
}

#define T(f) cmocka_unit_test_setup(f, setup)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_listen_done),
		T(test_plain_client),
		T(test_kernel_listener_reason),
		T(test_switch),
		T(test_switch_calls),
		T(test_switch_listener_options),
		T(test_switch_peer_asked),
		T(test_switch_wildcard),
		T(test_client_already_exited),
		T(test_drop_unusable_offer),
		T(test_tcp_first),
		T(test_no_resume_unless_paused),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
