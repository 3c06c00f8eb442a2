/*
 * Unit tests for core/calls/upgrade.c (TCP first) over loopback in one process, the calls
 * driven as preload/ drives them: the client's threshold (RDMASOCK_UPGRADE_BYTES moved, or
 * RDMASOCK_UPGRADE_MS of age, checked at its calls: below both it never dials), the move
 * itself, byte-exact both ways (TCP up to each side's FIN, then the stream) and counted once
 * as shm; a socket that must stay TCP (used where the library cannot see, shared by two fds,
 * shut for writing before its threshold) gives its data path back to the kernel; the
 * server's address map, whose key folds an IPv4-mapped IPv6 address to IPv4, so an offer
 * announced in either spelling finds the socket, and nothing once the socket closed; a
 * server forked while its side moves (parent or child closing first): the client gets the
 * child's whole answer and EOF, the parent's region is never another connection's while the
 * child holds it, and the last holder's close fails the client's later sends; a move that
 * ends while the fork is being prepared is counted once for the child; a client forked while
 * its offer is out follows the server's move in whichever process uses it; the last close
 * of a moving side over unread data resets the peer, as any close does; a wait (poll,
 * select, epoll level- and edge-triggered through the set's mirror) during a move reports
 * what the stream would, never the move's FIN, and a zero-timeout one returns at once even
 * when the move cannot end yet (a transport whose deliveries are synchronous and late stands
 * in for verbs); a client whose dial fails is counted once, under the dial's reason, however
 * its connect was settled. The verbs move needs a device and is left to the Soft-RoCE guest (vm_verbs
 * tcpfirst_*).
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
#include <time.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fdtab.h"
#include "base/stats.h"
#include "calls/history.h"
#include "calls/pollfast.h"
#include "calls/upgrade.h"
#include "conn/conn.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/announce.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"
#include "unit_clocks.h"
#include "unit_locks.h"

#define KERNEL RDMASOCK_TRANSPORT_KERNEL
#define SHM RDMASOCK_TRANSPORT_SHM

struct pair {
	int l, cl, sv;
};

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_config.mode = RSK_MODE_SHM;
	rsk_config.tcp_first = RSK_TCP_FIRST_ON;
	rsk_config.bearer = RSK_BEARER_NONE; /* (accepts on the number: no face) */
	rsk_config.upgrade_bytes = 1000;
	rsk_config.upgrade_ms = 600000; /* only the bytes decide, unless a test says */
	rsk_config.spin_us = 0;
	rsk_stats_reset();
	return 0;
}

/* A TCP-first connection: both ends upgradable, on TCP. */
static void pair_open(struct pair *p)
{
	struct sockaddr_in a;

	p->l = ucl_listen(&a);
	p->cl = ucl_socket(0);
	assert_int_equal(ucl_connect(p->cl, &a, NULL), 0);
	p->sv = ucl_accept(p->l, 0);
	assert_true(p->sv >= 0);
	assert_non_null(ucl_sock(p->cl)->upg);
	assert_non_null(ucl_sock(p->sv)->upg);
	assert_null(ucl_sock(p->cl)->conn);
}

static void pair_close(struct pair *p)
{
	ucl_close(p->cl);
	ucl_close(p->sv);
	ucl_close(p->l);
}

static unsigned char pat(uint64_t i)
{
	return (unsigned char)(i * 13 + i / 253);
}

/* Send @n pattern bytes from stream offset *@off on @fd (blocking). */
static void send_pat(int fd, uint64_t *off, size_t n)
{
	unsigned char b[4096];
	size_t i;

	assert_true(n <= sizeof(b));
	for (i = 0; i < n; i++)
		b[i] = pat(*off + i);
	assert_int_equal(ucl_send(fd, b, n, 0), (ssize_t)n);
	*off += n;
}

/* Read what @fd has now (non-blocking), checking it continues the pattern at *@off. */
static ssize_t recv_pat(int fd, uint64_t *off)
{
	unsigned char b[8192];
	ssize_t n = ucl_recv(fd, b, sizeof(b), MSG_DONTWAIT), i;

	for (i = 0; i < n; i++)
		assert_int_equal(b[i], pat(*off + (uint64_t)i));
	if (n > 0)
		*off += (uint64_t)n;
	return n;
}

/* Read until *@off reaches @want (bounded). */
static void recv_until(int fd, uint64_t *off, uint64_t want)
{
	int64_t end = rsk_now_ms() + 2000;

	while (*off < want && rsk_now_ms() < end)
		if (recv_pat(fd, off) == -EAGAIN)
			unit_sleep_ms(1);
	assert_int_equal(*off, want);
}

/* recv_until bounded by tries, not by the clock (for tests that count clock reads). */
static void recv_counted(int fd, uint64_t *off, uint64_t want)
{
	int i;

	for (i = 0; i < 2000 && *off < want; i++)
		if (recv_pat(fd, off) == -EAGAIN)
			unit_sleep_ms(1);
	assert_int_equal(*off, want);
}

/*
 * A TCP-first socket's bytes are counted by its own calls, exactly, so its close asks the
 * kernel for no TCP_INFO; a second fd (dup) may pass us by, and its account asks the kernel
 * again. Either way the stats hold the bytes TCP carried.
 */
static void test_own_counts(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0, btx = 0, brx = 0;
	int d;

	(void)state;
	pair_open(&p);
	send_pat(p.cl, &tx, 600);
	recv_until(p.sv, &rx, 600);
	send_pat(p.sv, &btx, 300);
	recv_until(p.cl, &brx, 300);
	assert_true(ucl_sock(p.cl)->own_exact);
	assert_true(ucl_sock(p.sv)->own_exact);
	assert_int_equal(ucl_sock(p.cl)->own_sent, 600);
	assert_int_equal(ucl_sock(p.cl)->own_rcvd, 300);
	assert_int_equal(ucl_sock(p.sv)->own_rcvd, 600);
	/* the server's socket gets a second fd: what goes through it is not seen by us */
	d = dup(p.sv);
	assert_true(d >= 0);
	assert_int_equal(rsk_sock_dup(p.sv, d), 0);
	assert_false(ucl_sock(p.sv)->own_exact);
	assert_int_equal(write(d, "abcd", 4), 4); /* straight to the kernel */
	assert_int_equal(ucl_recv(p.cl, (char[8]){0}, 8, 0), 4);
	ucl_close(d);
	ucl_close(p.sv); /* from TCP_INFO (before the client's FIN, which it would count) */
	p.sv = -1;
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 304);
	assert_int_equal(rsk_stats.bytes_received[KERNEL], 600);
	pair_close(&p); /* the client: its own counts */
	assert_int_equal(rsk_stats.bytes_sent[KERNEL], 904);
	assert_int_equal(rsk_stats.bytes_received[KERNEL], 904);
}

/*
 * Counting the allocations of the test's thread: calloc and malloc of libc, wrapped by
 * defining them here (this executable's definitions come first). Not under a sanitizer,
 * whose allocator must see every call.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_COUNTED 0
#else
#define ALLOC_COUNTED 1
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_malloc(size_t size);
static __thread int alloc_counting;
static int allocs;

void *calloc(size_t n, size_t size)
{
	allocs += alloc_counting;
	return __libc_calloc(n, size);
}

void *malloc(size_t size)
{
	allocs += alloc_counting;
	return __libc_malloc(size);
}
#endif

/*
 * A TCP-first connection that ends on TCP allocates nothing once the process has had one:
 * each side's state comes from those of ended connections, and the server's address map
 * keeps its table while empty. Before, every such connection made a calloc on each side
 * (1.2 KiB: past malloc's per-thread cache), and a server with one open at a time a malloc
 * and a calloc for the map's table.
 */
static void test_short_connection_allocates_nothing(void **state)
{
	struct sockaddr_in a;
	int l, i, cl, sv;

	(void)state;
	if (!ALLOC_COUNTED)
		skip();
#if ALLOC_COUNTED
	l = ucl_listen(&a);
	for (i = 0; i < 3; i++) { /* the first makes what the others reuse */
		if (i == 1) {
			allocs = 0;
			alloc_counting = 1;
		}
		cl = ucl_socket(0);
		assert_int_equal(ucl_connect(cl, &a, NULL), 0);
		sv = ucl_accept(l, 0);
		assert_true(sv >= 0);
		assert_non_null(ucl_sock(sv)->upg);
		assert_non_null(ucl_sock(cl)->upg);
		assert_int_equal(ucl_send(cl, "ping", 4, 0), 4);
		assert_int_equal(ucl_recv(sv, (char[8]){0}, 8, 0), 4);
		ucl_close(cl);
		ucl_close(sv);
	}
	alloc_counting = 0;
	ucl_close(l);
	assert_int_equal(allocs, 0);
#else
	(void)a, (void)l, (void)i, (void)cl, (void)sv;
#endif
}

/*
 * The data calls of a TCP-first connection that no move concerns take no lock (the server's
 * first names the thread it belongs to, lock-free; the client's first send settles its
 * connect): they count themselves in and out lock-free, also a read that finds the peer's FIN. They took the socket's lock twice
 * each before. Their bytes still count toward the threshold and the stats.
 */
static void test_data_calls_take_no_lock(void **state)
{
	struct pollfd pf;
	struct pair p;
	char b[64] = {0};
	int n;

	(void)state;
	if (!LOCKS_COUNTED)
		skip();
	pair_open(&p);
	assert_int_equal(ucl_send(p.cl, b, 8, 0), 8); /* (its first: the connect is proven) */
	pf = (struct pollfd){.fd = p.sv, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 2000), 1);
	locks = 0;
	lock_counting = 1;
	n = (int)ucl_recv(p.sv, b, 8, 0); /* the server's first: names its thread, lock-free */
	lock_counting = 0;
	assert_int_equal(n, 8);
	assert_int_equal(locks, 0);
	lock_counting = 1;
	n = (int)ucl_send(p.cl, b, sizeof(b), 0);
	lock_counting = 0;
	assert_int_equal(n, (int)sizeof(b));
	assert_int_equal(poll(&pf, 1, 2000), 1);
	lock_counting = 1;
	n = (int)ucl_recv(p.sv, b, sizeof(b), 0);
	if (n == (int)sizeof(b))
		n += (int)ucl_send(p.sv, b, 16, 0);
	lock_counting = 0;
	assert_int_equal(n, (int)sizeof(b) + 16);
	assert_int_equal(locks, 0);
	assert_int_equal(ucl_recv(p.cl, b, 16, 0), 16);
	assert_int_equal(ucl_sock(p.cl)->upg_bytes, 88);
	assert_int_equal(ucl_sock(p.cl)->own_sent, 72);
	assert_int_equal(ucl_sock(p.sv)->own_rcvd, 72);
	assert_int_equal(ucl_sock(p.sv)->own_sent, 16);
	assert_int_equal(ucl_sock(p.sv)->upg_kcalls, 0);
	assert_int_equal(ucl_sock(p.cl)->upg_kcalls, 0);
	/* the client's FIN, on a connection no move concerns: the end, with no lock either */
	ucl_close(p.cl);
	assert_int_equal(poll(&pf, 1, 2000), 1);
	lock_counting = 1;
	n = (int)ucl_recv(p.sv, b, sizeof(b), 0);
	lock_counting = 0;
	assert_int_equal(n, 0);
	assert_int_equal(locks, 0);
	assert_int_equal(ucl_sock(p.sv)->upg_kcalls, 0);
	ucl_close(p.sv);
	ucl_close(p.l);
}

/* A pair whose client would move only after a second of calls or a GiB, clock reads
 * counted from here on. */
static void pair_open_slow(struct pair *p)
{
	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 1000; /* far above a few calls, even under load */
	pair_open(p);
	clock_reads = 0;
}

/*
 * A client's first data calls read no clock: its age counts only from RSK_HIST_AGE_CALLS
 * calls. Where the clock has no vDSO (the Soft-RoCE guest's hpet) every read was a system
 * call, three per short connection.
 */
static void test_young_calls_read_no_clock(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int i;

	(void)state;
	pair_open_slow(&p);
	clock_counting = 1;
	for (i = 0; i < RSK_HIST_AGE_CALLS; i++) /* each sees the calls made before it */
		send_pat(p.cl, &tx, 10);
	clock_counting = 0;
	assert_int_equal(clock_reads, 0);
	recv_until(p.sv, &rx, 10 * RSK_HIST_AGE_CALLS);
	clock_counting = 1;
	send_pat(p.cl, &tx, 10); /* the first that may find it old: the age is read now */
	clock_counting = 0;
	assert_true(clock_reads > 0);
	recv_until(p.sv, &rx, 10 * (RSK_HIST_AGE_CALLS + 1));
	pair_close(&p);
}

/*
 * A short TCP-first connection reads no clock on either side: connect, accept, a request, its
 * answer, close. Its TCP-first state took a birth time it never used (one system call per side
 * and connection in the Soft-RoCE guest, whose clock has no vDSO).
 */
static void test_short_connection_reads_no_clock(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;

	(void)state;
	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 1000;
	clock_reads = 0;
	clock_counting = 1;
	pair_open(&p);
	send_pat(p.cl, &tx, 64);
	recv_counted(p.sv, &rx, 64);
	send_pat(p.sv, &tx, 64);
	recv_counted(p.cl, &rx, 128);
	ucl_close(p.cl);
	ucl_close(p.sv);
	clock_counting = 0;
	assert_int_equal(clock_reads, 0);
	ucl_close(p.l);
}

/*
 * A server's data calls are not counted: only a client's age is ever asked (its move
 * threshold, its destination's history). Before, every server connection read the clock at
 * its fifth call for nothing.
 */
static void test_server_calls_not_aged(void **state)
{
	struct pair p;
	struct rsk_sock *s;
	uint64_t tx = 0, rx = 0;
	int i;

	(void)state;
	pair_open_slow(&p);
	for (i = 0; i < 6; i++) { /* (the server's calls counted, the client's not) */
		clock_counting = 1;
		send_pat(p.sv, &tx, 16);
		clock_counting = 0;
		recv_counted(p.cl, &rx, 16 * (uint64_t)(i + 1));
	}
	assert_int_equal(clock_reads, 0);
	assert_non_null(s = rsk_sock_get(p.sv));
	assert_int_equal(__atomic_load_n(&s->data_calls, __ATOMIC_RELAXED), 0);
	assert_int_equal(__atomic_load_n(&s->aged_ms, __ATOMIC_RELAXED), 0);
	rsk_sock_put(s);
	assert_non_null(s = rsk_sock_get(p.cl)); /* (the client's are: it may move) */
	assert_int_equal(__atomic_load_n(&s->data_calls, __ATOMIC_RELAXED), 4);
	assert_true(__atomic_load_n(&s->aged_ms, __ATOMIC_RELAXED) != 0);
	rsk_sock_put(s);
	pair_close(&p);
}

static void *recv8_thread(void *arg)
{
	char b[8];

	return (void *)(intptr_t)ucl_recv(*(int *)arg, b, sizeof(b), 0);
}

/*
 * A server socket that a second thread uses stays on TCP (its reader may be about to block
 * under a move), also once its calls take the lock-free route: that route is only its first
 * thread's. Without the thread check the second thread's call went by unseen.
 */
static void test_second_thread_keeps_server_on_tcp(void **state)
{
	struct pair p;
	pthread_t t;
	void *ret;
	char b[8] = {0};

	(void)state;
	pair_open(&p);
	assert_int_equal(ucl_send(p.cl, b, 8, 0), 8);
	assert_int_equal(ucl_recv(p.sv, b, 8, 0), 8); /* its first call: this thread's */
	assert_int_equal(ucl_send(p.cl, b, 8, 0), 8);
	assert_int_equal(ucl_recv(p.sv, b, 8, 0), 8); /* (the lock-free route, open now) */
	assert_true(rsk_fdtab_load(p.sv) & RSK_FDTAB_TAG_DIVERT);
	assert_int_equal(ucl_send(p.cl, b, 8, 0), 8);
	assert_int_equal(pthread_create(&t, NULL, recv8_thread, &p.sv), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_int_equal((intptr_t)ret, 8);
	assert_false(rsk_fdtab_load(p.sv) & RSK_FDTAB_TAG_DIVERT); /* gave up: the kernel's */
	assert_true(rsk_fdtab_load(p.cl) & RSK_FDTAB_TAG_DIVERT); /* (the client's is its own) */
	pair_close(&p);
}

/* Below both thresholds a client never dials; at the byte threshold it does (its next call). */
static void test_bytes_threshold(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int fds;

	(void)state;
	pair_open(&p);
	fds = ucm_fd_count();
	send_pat(p.cl, &tx, 600);
	recv_until(p.sv, &rx, 600);
	send_pat(p.cl, &tx, 399); /* 999 moved: still below */
	recv_until(p.sv, &rx, 999);
	send_pat(p.cl, &tx, 1); /* the call that brings it to 1000 was routed at 999 */
	assert_int_equal(ucm_fd_count(), fds); /* no stream set up yet */
	recv_until(p.sv, &rx, 1000);
	send_pat(p.cl, &tx, 1); /* due: this call dials and offers (its bytes still TCP) */
	assert_true(ucm_fd_count() > fds); /* its app end, the rendezvous */
	assert_null(ucl_sock(p.cl)->conn); /* offered, not moved: the server has not taken it */
	recv_until(p.sv, &rx, 1001);
	pair_close(&p);
}

/*
 * The age threshold: a client that moved few bytes dials once it has gone on making data
 * calls for RDMASOCK_UPGRADE_MS after its first RSK_HIST_AGE_CALLS. One request that waited
 * long (a loaded machine's queues, or a setup that was slow) is not worth a setup: it stays
 * on TCP however old it is. The age used to count from the connect, so the call after
 * RSK_HIST_AGE_CALLS slow ones dialed at once.
 */
static void test_age_threshold(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int fds, i;

	(void)state;
	pair_open_slow(&p);
	fds = ucm_fd_count();
	send_pat(p.cl, &tx, 10);
	assert_int_equal(ucm_fd_count(), fds); /* young */
	recv_until(p.sv, &rx, 10);
	unit_sleep_ms(1100);
	for (i = 1; i < RSK_HIST_AGE_CALLS; i++) { /* old, but its calls are too few */
		send_pat(p.cl, &tx, 10);
		assert_int_equal(ucm_fd_count(), fds);
	}
	send_pat(p.cl, &tx, 10); /* old since its connect, but its age starts now */
	assert_int_equal(ucm_fd_count(), fds);
	assert_true(ucl_sock(p.cl)->aged_ms != 0);
	recv_until(p.sv, &rx, 10 * (RSK_HIST_AGE_CALLS + 1));
	unit_sleep_ms(1100);
	send_pat(p.cl, &tx, 10);
	assert_true(ucm_fd_count() > fds); /* busy for long enough since: dialed */
	recv_until(p.sv, &rx, 10 * (RSK_HIST_AGE_CALLS + 2));
	pair_close(&p);
}

/* RDMASOCK_UPGRADE_MS=0: every connection is worth a move, at its first call. */
static void test_age_zero(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int fds;

	(void)state;
	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0;
	pair_open(&p);
	fds = ucm_fd_count();
	send_pat(p.cl, &tx, 10);
	assert_true(ucm_fd_count() > fds);
	recv_until(p.sv, &rx, 10);
	pair_close(&p);
}

/*
 * The whole move: TCP bytes, the threshold, the offer, each side's first stream message and
 * FIN; both fds then name the stream, and every byte arrived once and in order each way.
 */
static void test_move_byte_exact(void **state)
{
	struct pair p;
	uint64_t c2s = 0, s2c = 0, got_s = 0, got_c = 0;
	int64_t end;

	(void)state;
	pair_open(&p);
	send_pat(p.cl, &c2s, 1500); /* past the threshold */
	send_pat(p.sv, &s2c, 700);
	send_pat(p.cl, &c2s, 100);  /* dials; these bytes still go into TCP */
	end = rsk_now_ms() + 3000;
	while ((ucl_sock(p.cl)->conn == NULL || ucl_sock(p.sv)->conn == NULL) &&
	       rsk_now_ms() < end) {
		(void)recv_pat(p.sv, &got_s); /* takes the offer, then TCP up to the client's FIN */
		(void)recv_pat(p.cl, &got_c); /* follows, then TCP up to the server's FIN */
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p.cl)->conn);
	assert_non_null(ucl_sock(p.sv)->conn);
	assert_null(ucl_sock(p.cl)->upg);
	assert_null(ucl_sock(p.sv)->upg);
	assert_true(rsk_fdtab_is_accel(rsk_fdtab_load(p.cl)));
	assert_int_equal(ucl_sock(p.cl)->transport, SHM);
	/* moved: counted as shm now, no longer as kernel */
	assert_int_equal(rsk_stats.connections[SHM], 2);
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	/* the stream carries on where TCP ended, both ways */
	send_pat(p.cl, &c2s, 3000);
	send_pat(p.sv, &s2c, 2500);
	recv_until(p.sv, &got_s, c2s);
	recv_until(p.cl, &got_c, s2c);
	/* and the end: EOF after everything */
	ucl_close(p.cl);
	{
		char b[4];

		assert_int_equal(ucl_recv(p.sv, b, sizeof(b), 0), 0);
	}
	ucl_close(p.sv);
	ucl_close(p.l);
}

/*
 * The accept's claim finds no offer (the client has not dialed yet), and the listener's loop
 * announces the client's offer before the accepted socket is in the address map: nobody
 * hears it. The accept looks at the count of unheard announcements once its socket is in
 * the map, so the server's first call claims the offer and both sides move. Before, the
 * offer sat unclaimed and the connection stayed on TCP (CI's int_version_mix_shm). The race
 * is made certain here: the claim is wrapped, and the client dials inside it.
 */
int __real_rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer,
			      int fd, struct rsk_claim *cl, const struct rsk_cm_ops **cm);
int __wrap_rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer,
			      int fd, struct rsk_claim *cl, const struct rsk_cm_ops **cm);
static int race_cl = -1;
static uint64_t race_c2s;

int __wrap_rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer,
			      int fd, struct rsk_claim *cl, const struct rsk_cm_ops **cm)
{
	int rc = __real_rsk_listener_claim(l, peer, fd, cl, cm), i;
	uint32_t mark = rsk_upg_unheard_mark();

	if (rc != 0 || race_cl < 0)
		return rc;
	send_pat(race_cl, &race_c2s, 1500); /* past the threshold */
	send_pat(race_cl, &race_c2s, 100);  /* dials and offers */
	assert_non_null(ucl_sock(race_cl)->upg);
	for (i = 0; i < 2000 && rsk_upg_unheard_mark() == mark; i++)
		unit_sleep_ms(1); /* the loop announces it: no socket has the client's address */
	assert_int_not_equal(rsk_upg_unheard_mark(), mark);
	return rc;
}

static void test_offer_announced_before_mapped(void **state)
{
	struct sockaddr_in a;
	struct pair p;
	uint64_t s2c = 0, got_s = 0, got_c = 0;
	int64_t end;

	(void)state;
	p.l = ucl_listen(&a);
	p.cl = ucl_socket(0);
	assert_int_equal(ucl_connect(p.cl, &a, NULL), 0);
	race_cl = p.cl;
	race_c2s = 0;
	p.sv = ucl_accept(p.l, 0);
	race_cl = -1;
	assert_true(p.sv >= 0);
	assert_non_null(ucl_sock(p.sv)->upg);
	send_pat(p.sv, &s2c, 700);
	end = rsk_now_ms() + 3000;
	while ((ucl_sock(p.cl)->conn == NULL || ucl_sock(p.sv)->conn == NULL) &&
	       rsk_now_ms() < end) {
		(void)recv_pat(p.sv, &got_s); /* takes the offer, then TCP up to the client's FIN */
		(void)recv_pat(p.cl, &got_c);
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p.cl)->conn);
	assert_non_null(ucl_sock(p.sv)->conn);
	assert_int_equal(rsk_stats.connections[SHM], 2);
	assert_int_equal(rsk_stats.connections[KERNEL], 0);
	send_pat(p.cl, &race_c2s, 3000);
	recv_until(p.sv, &got_s, race_c2s);
	recv_until(p.cl, &got_c, s2c);
	pair_close(&p);
}

/* Used where the library cannot see (stdio, a fork): the kernel's data path from then on. */
static void test_never(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int fds;

	(void)state;
	pair_open(&p);
	fds = ucm_fd_count();
	rsk_upg_never(ucl_sock(p.cl), p.cl);
	assert_false(rsk_fdtab_is_data(rsk_fdtab_load(p.cl))); /* no divert any more */
	send_pat(p.cl, &tx, 2000); /* past the threshold: no dial */
	recv_until(p.sv, &rx, 2000);
	send_pat(p.cl, &tx, 10);
	assert_int_equal(ucm_fd_count(), fds);
	assert_null(ucl_sock(p.cl)->conn);
	recv_until(p.sv, &rx, 2010);
	pair_close(&p);
}

/* Shared by two fds, or shut for writing, when the threshold comes: it stays TCP. */
static void test_unmovable_gives_up(void **state)
{
	struct pair p;
	uint64_t tx = 0, rx = 0;
	int fds, d;
	char b[8];

	(void)state;
	pair_open(&p);
	d = dup(p.cl);
	assert_int_equal(rsk_sock_dup(p.cl, d), 0);
	fds = ucm_fd_count();
	send_pat(p.cl, &tx, 1200);
	send_pat(p.cl, &tx, 10); /* due, but two fds name it */
	assert_int_equal(ucm_fd_count(), fds);
	assert_false(rsk_fdtab_is_data(rsk_fdtab_load(p.cl)));
	recv_until(p.sv, &rx, 1210);
	ucl_close(d);
	pair_close(&p);
	/* shut for writing before the threshold: reads go on, no move */
	pair_open(&p);
	fds = ucm_fd_count();
	tx = rx = 0;
	send_pat(p.cl, &tx, 1200);
	recv_until(p.sv, &rx, 1200);
	assert_int_equal(rsk_upg_shutdown(ucl_sock(p.cl), p.cl, SHUT_WR), 0);
	assert_int_equal(ucl_recv(p.sv, b, sizeof(b), 0), 0); /* the client's FIN, a real end */
	assert_int_equal(ucl_send(p.sv, "tail", 4, 0), 4);
	assert_int_equal(ucl_recv(p.cl, b, sizeof(b), 0), 4);
	assert_int_equal(ucm_fd_count(), fds);
	assert_null(ucl_sock(p.cl)->conn);
	assert_int_equal(rsk_upg_shutdown(ucl_sock(p.cl), p.cl, 9), -EINVAL);
	pair_close(&p);
}

static struct sockaddr_storage ss4(const struct sockaddr_in *a)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, a, sizeof(*a));
	return ss;
}

/* ::ffff:a.b.c.d, port @port. */
static struct sockaddr_storage ss_mapped(const struct sockaddr_in *a)
{
	struct sockaddr_storage ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	s6->sin6_family = AF_INET6;
	s6->sin6_port = a->sin_port;
	s6->sin6_addr.s6_addr[10] = 0xff;
	s6->sin6_addr.s6_addr[11] = 0xff;
	memcpy(&s6->sin6_addr.s6_addr[12], &a->sin_addr, 4);
	return ss;
}

/* The server's map: an offer announced in either spelling of its client's address finds it. */
static void test_map_key_folding(void **state)
{
	struct sockaddr_in a, peer, other;
	struct sockaddr_storage ss;
	struct sockaddr_in6 v6;
	socklen_t len = sizeof(peer);
	int l = ucl_listen(&a), c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), sv;

	(void)state;
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(c, (struct sockaddr *)&peer, &len), 0);
	sv = ucl_accept(l, 0);
	assert_true(sv >= 0);
	assert_non_null(ucl_sock(sv)->upg);
	ss = ss4(&peer);
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 1);
	ss = ss_mapped(&peer);
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 1); /* folded to the same key */
	other = peer;
	other.sin_port = htons((uint16_t)(ntohs(peer.sin_port) ^ 1));
	ss = ss4(&other);
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 0); /* another port */
	other = peer;
	other.sin_addr.s_addr = htonl(0x7f000002);
	ss = ss_mapped(&other);
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 0); /* another address */
	v6 = ucm_in6("::1", ntohs(peer.sin_port));
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, &v6, sizeof(v6));
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 0); /* a real IPv6 address */
	/* an announcement without a real offer behind it: the socket stays usable on TCP */
	assert_int_equal(send(c, "ping", 4, 0), 4);
	{
		char b[8];
		int64_t end = rsk_now_ms() + 2000;
		ssize_t n;

		while ((n = ucl_recv(sv, b, sizeof(b), MSG_DONTWAIT)) == -EAGAIN &&
		       rsk_now_ms() < end)
			unit_sleep_ms(1);
		assert_int_equal(n, 4);
		assert_memory_equal(b, "ping", 4);
	}
	/* closed: out of the map */
	ucl_close(sv);
	ss = ss4(&peer);
	assert_int_equal(rsk_transport_upgrade_offer(&ss), 0);
	close(c);
	ucl_close(l);
}

static short upoll(int fd, int ms); /* below, with the other waiters */

/*
 * Make @p's server side moving: the client offers with its first call (the request, 16
 * bytes), the server takes the offer at a call and moves (its FIN), the client follows. No
 * server call after that: it would read the client's TCP FIN and finish the server's move
 * too. While it waits the client reads all it has (into *@got_c: TCP up to the server's FIN,
 * then the stream), or with @got_c NULL only waits as poll does, finding nothing to read.
 */
static void pair_moving(struct pair *p, uint64_t *c2s, uint64_t *got_s, uint64_t *got_c)
{
	int i;

	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0; /* the client offers at its first call */
	send_pat(p->cl, c2s, 16);
	recv_until(p->sv, got_s, 16);
	for (i = 0; i < 2000 && ucl_sock(p->cl)->conn == NULL; i++) {
		assert_int_equal(recv_pat(p->sv, got_s), -EAGAIN);
		if (got_c == NULL)
			assert_int_equal(upoll(p->cl, 0), 0);
		else
			while (recv_pat(p->cl, got_c) > 0)
				;
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p->cl)->conn);
	assert_null(ucl_sock(p->sv)->conn); /* the server: still reading TCP up to that FIN */
	assert_non_null(ucl_sock(p->sv)->upg);
}

/*
 * A server's moved connection tells no destination history at its close: only a client's
 * connections do (the history is consulted at connect). Before, the server noted the
 * client's address, and since accepted sockets count no data calls it would have noted it
 * short whatever the connection did.
 */
static void test_moved_server_notes_no_history(void **state)
{
	struct pair p;
	struct sockaddr_storage peer;
	uint64_t c2s = 0, s2c = 0, got_s = 0, got_c = 0;
	int i;

	(void)state;
	rsk_hist_clear();
	pair_open(&p);
	pair_moving(&p, &c2s, &got_s, &got_c);
	send_pat(p.sv, &s2c, 10); /* the server's call: it finishes its move */
	for (i = 0; i < 2000 && ucl_sock(p.sv)->conn == NULL; i++) {
		(void)recv_pat(p.sv, &got_s);
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p.sv)->conn);
	recv_until(p.cl, &got_c, s2c);
	peer = ucl_sock(p.sv)->conn->peer; /* the client's address, as the close would note it */
	assert_int_equal(peer.ss_family, AF_INET);
	pair_close(&p);
	/* three notes more: with the server's a verdict (four), without none yet */
	for (i = 0; i < 3; i++)
		rsk_hist_note((const struct sockaddr *)&peer, 0);
	assert_int_equal(rsk_hist_verdict((const struct sockaddr *)&peer), -1);
}

/* ---- a fork while the server's side is moving (a fork-per-connection server) ---- */

#define FORK_RSP 3000 /* the child's response: more than one stream message */

struct fork_case {
	struct pair *p;
	int parent_first; /* the parent closes its copy before the child answers */
	int go[2];        /* parent -> child: "answer now" */
};

/* The forked server child: the others' sockets closed, the response, its close. */
static int fork_child(void *arg)
{
	struct fork_case *fc = arg;
	uint64_t off = 0;
	char b;

	rsk_life_fork_child();
	close(fc->go[1]);
	ucl_close(fc->p->cl); /* the client is the parent's (its holder count goes down) */
	ucl_close(fc->p->l);
	if (fc->parent_first && read(fc->go[0], &b, 1) != 1)
		return 10;
	while (off < FORK_RSP) {
		unsigned char r[1000];
		size_t i;

		for (i = 0; i < sizeof(r); i++)
			r[i] = pat(off + i);
		if (ucl_send(fc->p->sv, r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return 11;
		off += sizeof(r);
	}
	ucl_close(fc->p->sv);
	return 0;
}

/* Read the client's side to its EOF (bounded); the bytes must be the pattern. */
static void client_to_eof(int fd, uint64_t *off)
{
	int64_t end = rsk_now_ms() + 5000;
	ssize_t n = -EAGAIN;

	while (n != 0 && rsk_now_ms() < end) {
		n = recv_pat(fd, off);
		if (n == -EAGAIN)
			unit_sleep_ms(1);
	}
	assert_int_equal(n, 0);
}

/*
 * A server whose side is moving (its first stream message out, the client's TCP FIN not yet
 * read) forks; the child answers and closes, the parent closes its copy, in either order
 * (mode 2 of test/progs/stale.c, int_scale_stale_move_auto). The client gets the whole
 * answer, then EOF; and the parent's own close, which is not the last, leaves the region
 * alone: new connections of the parent never get it (they would while the child still
 * writes into it, the pool of 8471b87 did through rsk_conn_discard), and the last holder
 * ends the stream as any close does (a send of the client after it fails, as after TCP's
 * close, where before it went into a ring nobody would read again).
 */
static void fork_during_move(int parent_first)
{
	struct fork_case fc = {.parent_first = parent_first};
	struct rsk_conn *news[20];
	uint64_t c2s = 0, got_s = 0, got_c = 0;
	struct pair p;
	pid_t pid;
	int i, st;

	pair_open(&p);
	fc.p = &p;
	pair_moving(&p, &c2s, &got_s, &got_c);
	assert_int_equal(pipe(fc.go), 0);

	rsk_life_fork_prepare();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fork_child(&fc));
	close(fc.go[0]);
	if (!parent_first)
		assert_int_equal(unit_reap(pid, 10000), 0); /* the child answered and closed */
	ucl_close(p.sv);
	/* Connections of the parent's that follow: none may take the child's region. */
	for (i = 0; i < 20; i++) {
		news[i] = rsk_conn_alloc(rsk_config.buf_count, rsk_shm_ep_size());
		assert_non_null(news[i]);
		memset(news[i]->mem, 0x5a, 256); /* what a new connection writes there */
	}
	if (parent_first) {
		assert_int_equal(write(fc.go[1], "g", 1), 1);
		st = unit_reap(pid, 10000);
		assert_int_equal(st, 0);
	}
	close(fc.go[1]);
	for (i = 0; i < 20; i++)
		rsk_conn_discard(news[i], -1, -1, -1);
	got_c = 0;
	client_to_eof(p.cl, &got_c);
	assert_int_equal(got_c, FORK_RSP);
	/* Every holder of the server's side closed: the client's sends fail (EPIPE). */
	for (i = 0; i < 3 && (st = (int)ucl_send(p.cl, "x", 1, MSG_DONTWAIT)) == 1; i++)
		;
	assert_int_equal(st, -EPIPE);
	ucl_close(p.cl);
	ucl_close(p.l);
}

static void test_fork_during_move_parent_first(void **state)
{
	(void)state;
	fork_during_move(1);
}

static void test_fork_during_move_child_first(void **state)
{
	(void)state;
	fork_during_move(0);
}

/* ---- a fork of the client while its offer is out, the server moving after it ---- */

#define OFFER_REQ 16
#define OFFER_MORE 3000

/* Read @want pattern bytes from @fd at *@off on (bounded); 0 or a child's exit code. */
static int child_recv_pat(int fd, uint64_t *off, uint64_t want)
{
	int64_t end = rsk_now_ms() + 5000;
	unsigned char b[4096];
	ssize_t n, i;

	while (*off < want && rsk_now_ms() < end) {
		n = ucl_recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (n == -EAGAIN) {
			unit_sleep_ms(1);
			continue;
		}
		if (n <= 0)
			return n == 0 ? 20 : 21; /* an early EOF, an error (the reset) */
		for (i = 0; i < n; i++)
			if (b[i] != pat(*off + (uint64_t)i))
				return 22;
		*off += (uint64_t)n;
	}
	return *off == want ? 0 : 23;
}

/* Send pattern bytes [@from, @to) on @fd; 0 or a child's exit code. */
static int child_send_pat(int fd, uint64_t from, uint64_t to)
{
	unsigned char b[1000];
	uint64_t off;
	size_t i, n;

	for (off = from; off < to; off += n) {
		n = to - off < sizeof(b) ? (size_t)(to - off) : sizeof(b);
		for (i = 0; i < n; i++)
			b[i] = pat(off + i);
		if (ucl_send(fd, b, n, 0) != (ssize_t)n)
			return 24;
	}
	return 0;
}

struct offer_fork {
	struct pair *p;
	int child_uses; /* the child uses the connection, the parent closes its copy at once */
	int done[2];    /* parent -> child: the parent is done with it (closed: EOF) */
};

/* The client's child: the connection's user (the answer, more bytes, the close), or a
 * holder that closes its copy once the parent is done with it. */
static int offer_child(void *arg)
{
	struct offer_fork *of = arg;
	uint64_t got = 0;
	char b;
	int rc;

	rsk_life_fork_child();
	close(of->done[1]);
	ucl_close(of->p->l); /* the server is the parent's */
	if (!of->child_uses) {
		if (read(of->done[0], &b, 1) != 0)
			return 40;
		ucl_close(of->p->cl);
		return 0;
	}
	if ((rc = child_recv_pat(of->p->cl, &got, FORK_RSP)) != 0)
		return rc;
	if ((rc = child_send_pat(of->p->cl, OFFER_REQ, OFFER_REQ + OFFER_MORE)) != 0)
		return rc;
	ucl_close(of->p->cl);
	return 0;
}

/* The server (its socket accepted after the fork: one fd, in one process, so it moves):
 * takes the offer at a call and moves; its reads take TCP up to the client's FIN, which
 * comes once the client followed. With @cl (the parent uses the client), drive it too. */
static void offer_server_moves(struct pair *p, int cl, uint64_t *got_c)
{
	uint64_t got_s = OFFER_REQ;
	int i;

	for (i = 0; i < 5000 && ucl_sock(p->sv)->conn == NULL; i++) {
		assert_int_equal(recv_pat(p->sv, &got_s), -EAGAIN);
		if (cl >= 0)
			while (recv_pat(cl, got_c) > 0)
				;
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p->sv)->conn); /* the client followed (else: its TCP FIN) */
}

/*
 * A client forks while its offer is out (it dialed; the server has not taken it), and then
 * the server moves. As with a TCP socket, parent and child share the connection: whichever
 * process uses it follows the server's move (the first to look moves our sending side, once)
 * and gets the whole answer in order, and its further bytes reach the server in order, then
 * its EOF once every holder closed. Before, a process forked since the dial could not
 * follow: "cannot follow the server", a shutdown of the TCP side, and the answer lost in a
 * stream nobody read (the server saw the client end on TCP, the client an early EOF).
 */
static void fork_during_offer(int child_uses)
{
	struct offer_fork of = {.child_uses = child_uses};
	uint64_t c2s = 0, got_s = 0, got_c = 0;
	struct sockaddr_in a;
	struct pair p;
	pid_t pid;

	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0; /* the client offers at its first call */
	p.l = ucl_listen(&a);
	p.cl = ucl_socket(0);
	assert_int_equal(ucl_connect(p.cl, &a, NULL), 0);
	send_pat(p.cl, &c2s, OFFER_REQ); /* the offer goes out */
	assert_non_null(ucl_sock(p.cl)->upg);
	assert_null(ucl_sock(p.cl)->conn);
	of.p = &p;
	assert_int_equal(pipe(of.done), 0);

	rsk_life_fork_prepare();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(offer_child(&of));
	close(of.done[0]);
	p.sv = ucl_accept(p.l, 0); /* finds the offer */
	assert_true(p.sv >= 0);
	recv_until(p.sv, &got_s, OFFER_REQ);
	if (child_uses) {
		ucl_close(p.cl);
		offer_server_moves(&p, -1, NULL);
	} else {
		offer_server_moves(&p, p.cl, &got_c);
		assert_non_null(ucl_sock(p.cl)->conn); /* it followed */
	}
	send_pat(p.sv, &(uint64_t){0}, 1000);
	send_pat(p.sv, &(uint64_t){1000}, 1000);
	send_pat(p.sv, &(uint64_t){2000}, FORK_RSP - 2000);
	if (!child_uses) {
		recv_until(p.cl, &got_c, FORK_RSP);
		assert_int_equal(child_send_pat(p.cl, OFFER_REQ, OFFER_REQ + OFFER_MORE), 0);
	}
	recv_until(p.sv, &got_s, OFFER_REQ + OFFER_MORE);
	close(of.done[1]);
	if (!child_uses) {
		assert_int_equal(unit_reap(pid, 10000), 0);
		ucl_close(p.cl); /* the last holder */
	}
	{
		char b[8];
		int64_t end = rsk_now_ms() + 5000;
		ssize_t n;

		while ((n = ucl_recv(p.sv, b, sizeof(b), MSG_DONTWAIT)) == -EAGAIN &&
		       rsk_now_ms() < end)
			unit_sleep_ms(1);
		assert_int_equal(n, 0); /* the client's end, after every byte */
	}
	if (child_uses)
		assert_int_equal(unit_reap(pid, 10000), 0);
	ucl_close(p.sv);
	ucl_close(p.l);
}

static void test_fork_during_offer_parent_uses(void **state)
{
	(void)state;
	fork_during_offer(0);
}

static void test_fork_during_offer_child_uses(void **state)
{
	(void)state;
	fork_during_offer(1);
}

/*
 * A server whose side is moving (its first stream message out, the client's TCP FIN not yet
 * read) closes, the last holder, with data of the client's unread in the stream: the client
 * gets everything the server sent, then a reset, as from TCP's close over unread data and
 * as from the close of a moved connection (test_conn's test_release_unread_resets); before,
 * it got a FIN, and the client took a lost request for an orderly end.
 */
static void test_moving_close_unread_resets(void **state)
{
	uint64_t c2s = 0, s2c = 0, got_s = 0, got_c = 0;
	struct pair p;
	char b[64];

	(void)state;
	pair_open(&p);
	send_pat(p.sv, &s2c, 300); /* TCP: delivered before the move */
	pair_moving(&p, &c2s, &got_s, &got_c);
	assert_int_equal(got_c, 300);
	send_pat(p.cl, &c2s, 100); /* into the stream; the server never reads it */
	/* the client waits for the answer: its request, staged behind its unread first
	 * message (Nagle), goes out */
	assert_int_equal(ucl_recv(p.cl, b, sizeof(b), MSG_DONTWAIT), -EAGAIN);
	ucl_close(p.sv);
	assert_int_equal(ucl_recv(p.cl, b, sizeof(b), 0), -ECONNRESET);
	assert_int_equal(ucl_recv(p.cl, b, sizeof(b), 0), 0); /* then EOF, as TCP reports it */
	assert_true(ucl_send(p.cl, "x", 1, MSG_DONTWAIT) < 0);
	ucl_close(p.cl);
	ucl_close(p.l);
}

/*
 * The move of @moving's server side ends while the fork is being prepared, in the middle of
 * the library's walk over this process's connections: here from inside the prepare step of
 * an accelerated connection with a higher fd (its shm endpoint asks for its server's answer,
 * which this stands in for), as another thread of the application would.
 */
static struct pair *walk_moving;
static int walk_moved;

static int finish_move_now(int fd, int wait_ms)
{
	char b[64];

	(void)fd;
	(void)wait_ms;
	if (walk_moving != NULL && ucl_sock(walk_moving->sv)->conn == NULL) {
		(void)ucl_recv(walk_moving->sv, b, sizeof(b), MSG_DONTWAIT); /* the client's FIN */
		walk_moved = ucl_sock(walk_moving->sv)->conn != NULL;
	}
	return -EAGAIN; /* no answer yet: the endpoint stays as it was */
}

/*
 * A child is counted as a holder of every connection it inherits, whatever form the
 * connection has at that moment: a move that ends between the walk over accelerated sockets
 * and the one over moving ones was counted by neither (before: 1 holder after the prepare,
 * the child's close would then be the "last" and end the parent's stream). Undone exactly by
 * a failed fork.
 */
static void test_fork_prepare_counts_a_move_ending_meanwhile(void **state)
{
	struct pair mv, acc;
	uint64_t c2s = 0, got_s = 0, got_c = 0;
	struct rsk_conn *c;
	int hook_fd;

	(void)state;
	pair_open(&mv); /* moving: the lower fds */
	pair_moving(&mv, &c2s, &got_s, &got_c);

	rsk_config.tcp_first = RSK_TCP_FIRST_OFF; /* accelerated at connect */
	{
		struct sockaddr_in a;

		acc.l = ucl_listen(&a);
		acc.cl = ucl_socket(0);
		assert_int_equal(ucl_connect(acc.cl, &a, NULL), 0);
		acc.sv = ucl_accept(acc.l, 0);
	}
	assert_non_null(ucl_sock(acc.cl)->conn);
	assert_true(acc.cl > mv.sv); /* walked after the moving socket */
	hook_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(hook_fd >= 0);
	rsk_shm_set_answer(ucl_sock(acc.cl)->conn->ep, hook_fd, finish_move_now);
	walk_moving = &mv;
	walk_moved = 0;

	rsk_life_fork_prepare();
	walk_moving = NULL;
	rsk_shm_set_answer(ucl_sock(acc.cl)->conn->ep, -1, NULL);
	close(hook_fd);
	assert_true(walk_moved); /* the move ended inside the prepare */
	c = ucl_sock(mv.sv)->conn;
	assert_non_null(c);
	assert_int_equal(c->holders, 2); /* ours and the child's */
	rsk_life_fork_failed();
	assert_int_equal(c->holders, 1);
	assert_int_equal(ucl_sock(acc.cl)->conn->holders, 1);
	assert_int_equal(ucl_sock(mv.cl)->conn->holders, 1);
	pair_close(&acc);
	pair_close(&mv);
}

/* ---- readiness while a move is under way: each wait as preload/ makes it ---- */

/*
 * A transport whose sends complete only when the peer's device says so (sends_sync, as
 * verbs): a side that follows the server's move waits for its first stream message to be
 * delivered before its TCP FIN (rsk_conn_flush_sends). Put in for the shm ends of a test by
 * a wrapper of rsk_transport_cm; `slow_done` says whether the delivery happened, and each
 * look at it is counted.
 */
const struct rsk_cm_ops *__real_rsk_transport_cm(const struct rsk_ep *ep);
const struct rsk_cm_ops *__wrap_rsk_transport_cm(const struct rsk_ep *ep);
static struct rsk_cm_ops slow_cm;
static int slow_on, slow_done, slow_looks;

static int slow_sends_done(struct rsk_ep *ep)
{
	(void)ep;
	__atomic_add_fetch(&slow_looks, 1, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&slow_done, __ATOMIC_SEQ_CST);
}

const struct rsk_cm_ops *__wrap_rsk_transport_cm(const struct rsk_ep *ep)
{
	const struct rsk_cm_ops *cm = __real_rsk_transport_cm(ep);

	if (__atomic_load_n(&slow_on, __ATOMIC_ACQUIRE) && cm == &rsk_shm_cm_ops)
		return &slow_cm;
	return cm;
}

static void slow_sends(int on)
{
	if (on) {
		slow_cm = rsk_shm_cm_ops;
		slow_cm.sends_sync = 1;
		slow_cm.sends_done = slow_sends_done;
		__atomic_store_n(&slow_done, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&slow_looks, 0, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(&slow_on, on, __ATOMIC_RELEASE);
}

static int teardown(void **state)
{
	(void)state;
	slow_sends(0); /* a failed test may leave it in */
	return 0;
}

/* The end of a wait of @ms begun now (-1: none), and what is left of it in ms. */
static int64_t wait_end(int ms)
{
	return ms < 0 ? -1 : rsk_now_us() + (int64_t)ms * 1000;
}

static int wait_left(int ms, int64_t end)
{
	int64_t left;

	if (ms <= 0)
		return ms;
	left = end - rsk_now_us();
	return left > 0 ? (int)((left + 999) / 1000) : 0;
}

/* poll() of one fd as preload/poll.c runs it: the kernel's answer, asked again when that
 * answer was only a move's FIN and the move ended (rsk_pf_settle). */
static short upoll(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int64_t end = wait_end(ms);
	int i, n = 0;

	for (i = 0; i < 8; i++) {
		p.revents = 0;
		n = poll(&p, 1, ms);
		if (n <= 0 || !rsk_pf_settle(&p, 1, end, &n))
			break;
		ms = wait_left(ms, end);
	}
	return n > 0 ? p.revents : 0;
}

/* select() for reading one fd as preload/poll.c runs it (rsk_pf_sel_settle): POLLIN or 0. */
static short uselect(int fd, int ms)
{
	int64_t end = wait_end(ms);
	struct timeval tv;
	fd_set r;
	int i, n = 0;

	for (i = 0; i < 8; i++) {
		FD_ZERO(&r);
		FD_SET(fd, &r);
		tv.tv_sec = ms / 1000;
		tv.tv_usec = (ms % 1000) * 1000;
		n = select(fd + 1, &r, NULL, NULL, ms < 0 ? NULL : &tv);
		if (n <= 0 || !rsk_pf_sel_settle(fd + 1, &r, end, &n))
			break;
		ms = wait_left(ms, end);
	}
	assert_true(n <= 0 || FD_ISSET(fd, &r));
	return n > 0 ? POLLIN : 0;
}

/* Each fd waited on by epoll has a set of its own, made while it is on TCP: mirrored, or not
 * (@ep_bare: as after a fork, or with RDMASOCK_FASTWAIT=0). */
#define EP_FDS 256
static int ep_of[EP_FDS];
static uint32_t ep_flags; /* EPOLLET or 0 */
static int ep_bare;

/* epoll_ctl ADD as preload/epoll.c: the real call, then the socket's note of it (it may
 * move: the registration follows, calls/lifecycle.c) and the mirror. */
static void uep_add(int fd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | ep_flags,
				 .data.u64 = 1000u + (unsigned)fd};
	uintptr_t v = rsk_fdtab_load(fd);
	int ep;

	assert_true(fd < EP_FDS);
	rsk_config.fastwait = 1;
	ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(ep >= 0);
	if (!ep_bare)
		rsk_fw_created(ep);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	if (v != 0 && !rsk_fdtab_is_accel(v))
		rsk_life_epoll_note(ep, EPOLL_CTL_ADD, fd, &ev);
	rsk_fw_ctl(ep, EPOLL_CTL_ADD, fd, &ev, 0);
	ep_of[fd] = ep;
}

static void uep_close(int fd)
{
	rsk_fw_fd_gone(ep_of[fd]);
	close(ep_of[fd]);
	ep_of[fd] = -1;
}

/* epoll_wait on @fd's set as preload/epoll.c runs it: the mirror's answer (or the kernel's),
 * then a report that was only a move's FIN settled (rsk_fw_settle), asked again while
 * nothing but moves' FINs came. Its events, or 0. */
static short uepoll(int fd, int ms)
{
	struct epoll_event ev[4];
	int64_t end = wait_end(ms);
	int i, n = 0, moved;

	for (i = 0; i < 8; i++) {
		if (!rsk_fw_wait(ep_of[fd], ev, 4, ms, NULL, &n))
			n = epoll_wait(ep_of[fd], ev, 4, ms);
		if (n <= 0)
			break;
		moved = 0;
		n = rsk_fw_settle(ep_of[fd], ev, n, end, &moved);
		if (n > 0 || !moved)
			break;
		ms = wait_left(ms, end);
	}
	assert_true(n <= 1);
	if (n <= 0)
		return 0;
	assert_int_equal(ev[0].data.u64, 1000u + (unsigned)fd);
	return (short)ev[0].events;
}

/* A way to wait for one fd's readiness: poll, select, epoll (level- or edge-triggered). */
struct waiter {
	short (*wait)(int fd, int ms);
	uint32_t ep_flags; /* epoll: EPOLLET or 0 */
	int bare;          /* epoll: a set the library does not mirror */
};

static const struct waiter W_POLL = {upoll, 0, 0}, W_SELECT = {uselect, 0, 0},
			   W_EPOLL_LT = {uepoll, 0, 0}, W_EPOLL_ET = {uepoll, EPOLLET, 0},
			   W_BARE_LT = {uepoll, 0, 1}, W_BARE_ET = {uepoll, EPOLLET, 1};

static void waiter_open(const struct waiter *w, const struct pair *p)
{
	ep_flags = w->ep_flags;
	ep_bare = w->bare;
	if (w->wait == uepoll) {
		uep_add(p->cl);
		uep_add(p->sv);
	}
}

static void waiter_close(const struct waiter *w, const struct pair *p)
{
	if (w->wait == uepoll) {
		uep_close(p->cl);
		uep_close(p->sv);
	}
}

/*
 * Readiness while a connection moves is what kernel TCP would report: the TCP side shows
 * each side's move as the end (the server's FIN to the client; the client's FIN, with the
 * server's own, as POLLIN|POLLHUP to the server) before the peer sent or ended anything in
 * the stream. A wait answers from where a read would read: nothing while the peer is quiet,
 * then its bytes, then its EOF, and a non-blocking read after a report never finds EAGAIN.
 * Before, poll reported both fds readable, and the reads (which ended the moves) returned
 * EAGAIN: a forked server child of test/progs/stale.c took that for a lost EOF. For epoll
 * (before: not settled) the events carry the application's data: the mirror maps them back
 * to the fd; an edge-triggered registration loses no event (the stream's app end, put in
 * the set by the move, reports its own edges).
 */
static void readiness_is_the_stream(const struct waiter *w)
{
	uint64_t c2s = 0, s2c = 0, got_s = 0, got_c = 0;
	struct pair p;
	char b[64];
	int i;

	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0; /* the client offers at its first call */
	pair_open(&p);
	waiter_open(w, &p);
	send_pat(p.cl, &c2s, 16); /* the request; the offer goes out with it */
	recv_until(p.sv, &got_s, 16);
	/* The server takes the offer at a call and moves (its FIN); the client, whose only
	 * calls are waits, follows from its wait and ends its move: nothing to read. */
	for (i = 0; i < 2000 && ucl_sock(p.cl)->conn == NULL; i++) {
		assert_int_equal(recv_pat(p.sv, &got_s), -EAGAIN);
		assert_int_equal(w->wait(p.cl, 0), 0);
		unit_sleep_ms(1);
	}
	assert_non_null(ucl_sock(p.cl)->conn);
	/* The server's wait sees the client's TCP FIN and its own: the move, not the end. */
	assert_non_null(ucl_sock(p.sv)->upg);
	assert_int_equal(w->wait(p.sv, 0), 0);
	assert_non_null(ucl_sock(p.sv)->conn);
	assert_int_equal(ucl_recv(p.sv, b, sizeof(b), MSG_DONTWAIT), -EAGAIN);
	/* Then what the peers send, and their ends, as TCP reports them. */
	send_pat(p.sv, &s2c, 16);
	assert_true(w->wait(p.cl, 2000) & POLLIN);
	assert_int_equal(recv_pat(p.cl, &got_c), 16);
	send_pat(p.cl, &c2s, 16);
	assert_true(w->wait(p.sv, 2000) & POLLIN);
	assert_int_equal(recv_pat(p.sv, &got_s), 16);
	ucl_close(p.cl);
	assert_true(w->wait(p.sv, 2000) & POLLIN);
	assert_int_equal(ucl_recv(p.sv, b, sizeof(b), MSG_DONTWAIT), 0);
	waiter_close(w, &p);
	ucl_close(p.sv);
	ucl_close(p.l);
}

/* A TCP-first client of a plain (not preloaded) listener dials at its first call and learns
 * there is no peer; whether it was counted before (blocking connect) or at that call
 * (non-blocking: its first data settles it), it is counted once, under that reason. */
static int late_reason_client(const struct sockaddr_in *a, int flags)
{
	struct pollfd pf;
	int fd = ucl_socket(flags);
	int rc = ucl_connect(fd, a, NULL);

	assert_true(rc == 0 || (flags && rc == -EINPROGRESS));
	pf.fd = fd;
	pf.events = POLLOUT;
	assert_int_equal(poll(&pf, 1, 2000), 1); /* the kernel's handshake, not ours */
	assert_int_equal(ucl_send(fd, "x", 1, 0), 1); /* due (age 0): dials, no peer, stays */
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_NO_PEER);
	return fd;
}

static void test_late_reason_counted_once(void **state)
{
	static const int flags[] = {0, SOCK_NONBLOCK};
	struct sockaddr_in a;
	uint16_t port;
	int l, cl, sv, i, r;
	uint64_t sum;

	(void)state;
	rsk_config.upgrade_ms = 0;
	l = ucm_tcp_bound(1, &port); /* a plain listener: no rendezvous */
	a = ucm_lo4(port);
	for (i = 0; i < 2; i++) {
		rsk_stats_reset();
		cl = late_reason_client(&a, flags[i]);
		sv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		assert_true(sv >= 0);
		ucl_close(cl);
		close(sv);
		for (sum = 0, r = 0; r < RDMASOCK_FB_COUNT; r++)
			sum += rsk_stats.fallbacks[r];
		assert_int_equal(rsk_stats.connections[KERNEL], 1);
		assert_int_equal(sum, 1);
		if (rsk_stats.fallbacks[RDMASOCK_FB_NO_PEER] != 1)
			fail_msg("%s connect: counted as tcp_first %llu, no_peer %llu",
				 flags[i] ? "non-blocking" : "blocking",
				 (unsigned long long)rsk_stats.fallbacks[RDMASOCK_FB_TCP_FIRST],
				 (unsigned long long)rsk_stats.fallbacks[RDMASOCK_FB_NO_PEER]);
	}
	close(l);
}

static void test_moving_readiness_is_the_stream(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_POLL);
}

static void test_moving_readiness_select(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_SELECT);
}

static void test_moving_readiness_epoll_lt(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_EPOLL_LT);
}

static void test_moving_readiness_epoll_et(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_EPOLL_ET);
}

/* A set not mirrored: found by the socket's own note of its registration, the data checked
 * to be its alone in the set's fdinfo. */
static void test_moving_readiness_epoll_bare(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_BARE_LT);
}

static void test_moving_readiness_epoll_bare_et(void **state)
{
	(void)state;
	readiness_is_the_stream(&W_BARE_ET);
}

/*
 * A report whose data another registration of the set shares cannot be told whose it is:
 * it is left as the kernel made it (the move's FIN reported, as before), never dropped (it
 * may be the other fd's, edge-triggered). The move ends at the read, as before.
 */
static int tcp_readable(int fd);

static void shared_data_left_alone(int bare)
{
	uint64_t c2s = 0, got_s = 0, got_c = 0;
	struct epoll_event ev = {.events = EPOLLIN};
	struct pair p;
	int pfd[2], i;

	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0;
	pair_open(&p);
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	ep_flags = 0;
	ep_bare = bare;
	uep_add(p.cl);
	ev.data.u64 = 1000u + (unsigned)p.cl; /* the client's data, on a pipe too */
	assert_int_equal(epoll_ctl(ep_of[p.cl], EPOLL_CTL_ADD, pfd[0], &ev), 0);
	rsk_fw_ctl(ep_of[p.cl], EPOLL_CTL_ADD, pfd[0], &ev, 0);
	send_pat(p.cl, &c2s, 16);
	recv_until(p.sv, &got_s, 16);
	for (i = 0; i < 2000 && !tcp_readable(p.cl); i++) {
		assert_int_equal(recv_pat(p.sv, &got_s), -EAGAIN);
		unit_sleep_ms(1);
	}
	assert_true(uepoll(p.cl, 0) & EPOLLIN); /* the server's FIN, as the kernel reports it */
	assert_null(ucl_sock(p.cl)->conn);
	assert_int_equal(recv_pat(p.cl, &got_c), -EAGAIN); /* the read ends the move */
	assert_non_null(ucl_sock(p.cl)->conn);
	uep_close(p.cl);
	close(pfd[0]);
	close(pfd[1]);
	pair_close(&p);
}

static void test_moving_shared_data_left_alone(void **state)
{
	(void)state;
	shared_data_left_alone(0);
}

static void test_moving_shared_data_left_alone_bare(void **state)
{
	(void)state;
	shared_data_left_alone(1);
}

/* Is @fd's TCP side readable (the kernel's own answer, nothing settled)? */
static int tcp_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

/*
 * A wait that reports a moving fd takes the move forward within the wait's own time: a
 * client following the server's move whose first stream message is not delivered yet (a
 * verbs completion still out) gets a zero-timeout wait's answer at once, and a short
 * timeout's within it, both "not readable yet" (the report was only the server's FIN), with
 * its move left half done; a later wait ends it once the delivery came. Before, the settle
 * inside the wait waited for the delivery for up to 2 s (RSK_UPG_FLUSH_MS), then reset the
 * connection. An edge-triggered registration hears of the FIN again (re-armed), or its
 * program would never wait on past it.
 */
static void zero_timeout_never_blocks(const struct waiter *w)
{
	uint64_t c2s = 0, s2c = 0, got_s = 0, got_c = 0;
	struct pair p;
	int64_t t0;
	int i, looks;
	short ev;

	rsk_config.upgrade_bytes = 1u << 30;
	rsk_config.upgrade_ms = 0;
	pair_open(&p);
	waiter_open(w, &p);
	send_pat(p.cl, &c2s, 16);
	recv_until(p.sv, &got_s, 16);
	/* The server moves at a call of its own: its FIN reaches the client's TCP side. */
	for (i = 0; i < 2000 && !tcp_readable(p.cl); i++) {
		assert_int_equal(recv_pat(p.sv, &got_s), -EAGAIN);
		unit_sleep_ms(1);
	}
	assert_true(tcp_readable(p.cl));
	slow_sends(1);
	t0 = rsk_now_ms();
	ev = w->wait(p.cl, 0);
	t0 = rsk_now_ms() - t0;
	looks = __atomic_load_n(&slow_looks, __ATOMIC_SEQ_CST);
	print_message("zero-timeout wait: %lld ms, %d looks at the delivery\n", (long long)t0, looks);
	assert_true(t0 < 500); /* 2,000 before */
	assert_true(looks >= 1 && looks <= 2); /* a look at the delivery, no wait for it */
	assert_int_equal(ev, 0);
	assert_null(ucl_sock(p.cl)->conn); /* still moving */
	t0 = rsk_now_ms();
	ev = w->wait(p.cl, 30);
	assert_true(rsk_now_ms() - t0 < 500);
	assert_int_equal(ev, 0);
	assert_null(ucl_sock(p.cl)->conn);
	__atomic_store_n(&slow_done, 1, __ATOMIC_SEQ_CST); /* delivered */
	assert_int_equal(w->wait(p.cl, 0), 0);
	assert_non_null(ucl_sock(p.cl)->conn); /* the move ended */
	slow_sends(0);
	/* and the connection is whole */
	send_pat(p.sv, &s2c, 16);
	assert_true(w->wait(p.cl, 2000) & POLLIN);
	assert_int_equal(recv_pat(p.cl, &got_c), 16);
	send_pat(p.cl, &c2s, 16);
	for (i = 0; i < 2000 && got_s < 32; i++)
		if (recv_pat(p.sv, &got_s) == -EAGAIN)
			unit_sleep_ms(1);
	assert_int_equal(got_s, 32);
	waiter_close(w, &p);
	pair_close(&p);
}

static void test_zero_timeout_poll_never_blocks(void **state)
{
	(void)state;
	zero_timeout_never_blocks(&W_POLL);
}

static void test_zero_timeout_select_never_blocks(void **state)
{
	(void)state;
	zero_timeout_never_blocks(&W_SELECT);
}

static void test_zero_timeout_epoll_never_blocks(void **state)
{
	(void)state;
	zero_timeout_never_blocks(&W_EPOLL_LT);
}

static void test_zero_timeout_epoll_et_never_blocks(void **state)
{
	(void)state;
	zero_timeout_never_blocks(&W_EPOLL_ET);
}

static void test_zero_timeout_epoll_bare_et_never_blocks(void **state)
{
	(void)state;
	zero_timeout_never_blocks(&W_BARE_ET);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_own_counts),
		T(test_short_connection_allocates_nothing),
		T(test_data_calls_take_no_lock),
		T(test_second_thread_keeps_server_on_tcp),
		T(test_bytes_threshold),
		T(test_age_threshold),
		T(test_young_calls_read_no_clock),
		T(test_short_connection_reads_no_clock),
		T(test_server_calls_not_aged),
		T(test_moved_server_notes_no_history),
		T(test_age_zero),
		T(test_move_byte_exact),
		T(test_offer_announced_before_mapped),
		T(test_never),
		T(test_unmovable_gives_up),
		T(test_map_key_folding),
		T(test_fork_during_move_parent_first),
		T(test_fork_during_move_child_first),
		T(test_moving_close_unread_resets),
		T(test_fork_during_offer_parent_uses),
		T(test_fork_during_offer_child_uses),
		T(test_fork_prepare_counts_a_move_ending_meanwhile),
		T(test_moving_readiness_is_the_stream),
		T(test_late_reason_counted_once),
		T(test_moving_readiness_select),
		T(test_moving_readiness_epoll_lt),
		T(test_moving_readiness_epoll_et),
		T(test_moving_readiness_epoll_bare),
		T(test_moving_readiness_epoll_bare_et),
		T(test_moving_shared_data_left_alone),
		T(test_moving_shared_data_left_alone_bare),
		T(test_zero_timeout_poll_never_blocks),
		T(test_zero_timeout_select_never_blocks),
		T(test_zero_timeout_epoll_never_blocks),
		T(test_zero_timeout_epoll_et_never_blocks),
		T(test_zero_timeout_epoll_bare_et_never_blocks),
	};

	return cmocka_run_group_tests(tests, ucl_group_setup, NULL);
}
