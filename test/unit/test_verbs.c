/*
 * The stream engine over the verbs transport (real rdma_cm and RC QPs; the Soft-RoCE guest
 * runs it, see test/vm). Without an RDMA device it exits 77: ctest reports it skipped.
 *
 * One process plays both ends: a listener on RSK_VERBS_TEST_ADDR (default 192.0.2.2) whose
 * rdma_cm events a thread answers, and a client from this host's route to it. Each test
 * gets a fresh pair: data both ways with random sizes, credit exhaustion and return, the
 * one-way reader that starved credit updates with ring-order reposts (verbs reposts empty
 * messages at once), FIN after data, reset, and the completion channel raising an event.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "stream/stream.h"
#include "transport/verbs.h"
#include "transport/verbs_cm.h"
#include "transport/verbs_demux.h"

#define NBUF 8
#define BSIZE 4096
#define WIN ((NBUF - 1) * BSIZE)

static struct rsk_verbs_listener *g_l;
static struct sockaddr_in g_addr;
static volatile int g_stop;
static pthread_t g_thr;

static void *listener_thread(void *arg)
{
	struct pollfd p = {.fd = rsk_verbs_listener_fd(g_l), .events = POLLIN};

	(void)arg;
	while (!g_stop)
		if (poll(&p, 1, 50) > 0)
			rsk_verbs_listener_event(g_l);
	return NULL;
}

static int64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a connected pair ---- */

struct vpair {
	struct rsk_ep *ea, *eb;
	struct rsk_stream a, b;
	int tcp; /* the bound socket whose port the hello carried */
};

static int bind_tcp(const struct sockaddr *src, void *arg)
{
	struct sockaddr_in me;
	socklen_t len = sizeof(me);
	int *fd = arg;

	*fd = socket(AF_INET, SOCK_STREAM, 0);
	if (*fd < 0 || bind(*fd, src, sizeof(struct sockaddr_in)) < 0 ||
	    getsockname(*fd, (struct sockaddr *)&me, &len) < 0)
		return -errno;
	return ntohs(me.sin_port);
}

static void vp_open(struct vpair *p)
{
	struct sockaddr_storage src;
	int64_t end = ms_now() + 5000;
	int upgrade = -1;

	memset(p, 0, sizeof(*p));
	assert_int_equal(rsk_verbs_connect((struct sockaddr *)&g_addr, sizeof(g_addr), 10000, 0,
					   &src, bind_tcp, &p->tcp, &p->ea),
			 0);
	do
		p->eb = rsk_verbs_listener_claim(g_l, (struct sockaddr *)&src, 1000, &upgrade);
	while (p->eb == NULL && ms_now() < end);
	assert_int_equal(upgrade, 0); /* a direct connection's hello says so */
	assert_non_null(p->eb);
	assert_true(p->eb != RSK_VERBS_CLAIM_FAILED);
	assert_int_equal(rsk_stream_init(&p->a, p->ea, NULL), 0);
	assert_int_equal(rsk_stream_init(&p->b, p->eb, NULL), 0);
	p->a.nodelay = p->b.nodelay = 1;
}

static void vp_close(struct vpair *p)
{
	rsk_stream_fini(&p->a);
	rsk_stream_fini(&p->b);
	rsk_ep_destroy(p->ea);
	rsk_ep_destroy(p->eb);
	close(p->tcp);
}

static ssize_t ssend(struct rsk_stream *st, const void *buf, size_t n)
{
	struct iovec iov = {(void *)buf, n};

	return rsk_stream_send(st, &iov, 1, 0);
}

/* recv, progressing until something comes (completions are asynchronous here). */
static ssize_t srecv_wait(struct rsk_stream *st, void *buf, size_t n)
{
	struct iovec iov = {buf, n};
	int64_t end = ms_now() + 5000;
	ssize_t k;

	do
		k = rsk_stream_recv(st, &iov, 1, 0);
	while (k == -EAGAIN && ms_now() < end);
	return k;
}

static uint8_t pat(uint32_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + seed;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return (uint8_t)(x >> ((off & 7) * 8));
}

/* ---- tests ---- */

static void test_round_trip(void **state)
{
	struct vpair p;
	char buf[64];

	(void)state;
	vp_open(&p);
	assert_int_equal(ssend(&p.a, "hello", 5), 5);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(ssend(&p.b, "world!", 6), 6);
	assert_int_equal(srecv_wait(&p.a, buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "world!", 6);
	vp_close(&p);
}

/* 8 MiB each way, interleaved, random write and read sizes, checked byte by byte. */
static void test_bidir_random(void **state)
{
	const size_t total = 8u << 20;
	size_t sent[2] = {0, 0}, rcvd[2] = {0, 0}, n, i;
	struct rsk_stream *st[2];
	uint8_t *buf = malloc(3 * BSIZE * NBUF);
	uint64_t rs = 12345;
	int64_t end = ms_now() + 120000;
	struct vpair p;
	ssize_t k;
	int side;

	(void)state;
	assert_non_null(buf);
	vp_open(&p);
	st[0] = &p.a;
	st[1] = &p.b;
	while ((rcvd[0] < total || rcvd[1] < total) && ms_now() < end) {
		for (side = 0; side < 2; side++) {
			rs = rs * 6364136223846793005ull + 1442695040888963407ull;
			n = 1 + (rs >> 33) % (3 * BSIZE * NBUF);
			if (sent[side] < total) {
				if (n > total - sent[side])
					n = total - sent[side];
				for (i = 0; i < n; i++)
					buf[i] = pat(side + 1, sent[side] + i);
				k = ssend(st[side], buf, n);
				assert_true(k > 0 || k == -EAGAIN);
				if (k > 0)
					sent[side] += (size_t)k;
			}
			struct iovec iov = {buf, 1 + (rs >> 17) % (3 * BSIZE * NBUF)};

			k = rsk_stream_recv(st[!side], &iov, 1, 0);
			assert_true(k > 0 || k == -EAGAIN);
			for (i = 0; k > 0 && i < (size_t)k; i++)
				if (buf[i] != pat(side + 1, rcvd[side] + i))
					fail_msg("corrupt byte at %zu direction %d", rcvd[side] + i, side);
			if (k > 0)
				rcvd[side] += (size_t)k;
		}
	}
	assert_int_equal(rcvd[0], total);
	assert_int_equal(rcvd[1], total);
	vp_close(&p);
	free(buf);
}

/* A reader that does not read: the writer gets exactly the window (one buffer kept back),
 * then EAGAIN and unwritable; reading gives the credits back. */
static void test_credit_exhaustion(void **state)
{
	static uint8_t data[2 * WIN], got[2 * WIN];
	size_t sent = 0, n = 0;
	int64_t end = ms_now() + 5000;
	struct vpair p;
	ssize_t k;

	(void)state;
	vp_open(&p);
	while ((k = ssend(&p.a, data + sent, BSIZE)) > 0)
		sent += (size_t)k;
	assert_int_equal(k, -EAGAIN);
	assert_int_equal(sent, WIN);
	assert_false(rsk_stream_writable(&p.a));
	while (n < sent && ms_now() < end) {
		struct iovec iov = {got + n, sizeof(got) - n};

		k = rsk_stream_recv(&p.b, &iov, 1, 0);
		if (k > 0)
			n += (size_t)k;
	}
	assert_int_equal(n, sent);
	end = ms_now() + 5000;
	while (!rsk_stream_writable(&p.a) && ms_now() < end)
		(void)rsk_stream_progress(&p.a);
	assert_true(rsk_stream_writable(&p.a));
	vp_close(&p);
}

/*
 * a fills b's window and b never reads; then b streams 1 MiB to a, which reads. a's credit
 * updates land in b's receive queue behind a's unread data: with ring-order reposts they
 * would hold b's buffers and starve a of credits (test_stream's known bug); verbs reposts
 * empty messages at once, so the stream must complete.
 */
static void test_one_way_reader(void **state)
{
	static uint8_t fill[WIN], buf[64 * 1024];
	const size_t n = 1u << 20;
	size_t sent = 0, got = 0;
	int64_t end = ms_now() + 60000;
	struct vpair p;
	ssize_t k;

	(void)state;
	vp_open(&p);
	assert_int_equal(ssend(&p.a, fill, WIN), WIN);
	while (got < n && ms_now() < end) {
		if (sent < n && (k = ssend(&p.b, buf, n - sent < sizeof(buf) ? n - sent : sizeof(buf))) > 0)
			sent += (size_t)k;
		struct iovec iov = {buf, sizeof(buf)};

		if ((k = rsk_stream_recv(&p.a, &iov, 1, 0)) > 0)
			got += (size_t)k;
	}
	assert_int_equal(got, n);
	vp_close(&p);
}

static void test_fin_after_data(void **state)
{
	struct vpair p;
	char buf[64];

	(void)state;
	vp_open(&p);
	assert_int_equal(ssend(&p.a, "last words", 10), 10);
	assert_int_equal(rsk_stream_shutdown_wr(&p.a), 0);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "last words", 10);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 0);
	assert_int_equal(ssend(&p.a, "x", 1), -EPIPE);
	vp_close(&p);
}

static void test_reset(void **state)
{
	struct vpair p;
	char buf[8];

	(void)state;
	vp_open(&p);
	rsk_stream_reset(&p.a);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), -ECONNRESET);
	vp_close(&p);
}

/* Until the event loop handed @ep a completion event (the shared channel's), up to @ms. */
static int wait_pending(struct rsk_ep *ep, int ms)
{
	int64_t end = ms_now() + ms;
	struct timespec ts = {0, 1000000};

	while (!(rsk_verbs_pending(ep) & (1u << RSK_VDEMUX_CQ))) {
		if (ms_now() >= end)
			return 0;
		nanosleep(&ts, NULL);
	}
	return 1;
}

/* The device's shared completion channel (which the event loop drains) hands an arrival's
 * event to its endpoint, and a thread waiting without the loop (event_wait) wakes for it. */
static void test_completion_channel(void **state)
{
	struct vpair p;
	char buf[8];

	(void)state;
	vp_open(&p);
	(void)rsk_verbs_event_wait(p.eb, 0); /* take what came at setup, and arm */
	assert_int_equal(rsk_verbs_event_wait(p.eb, 0) & RSK_EPEV_DATA, 0);
	assert_int_equal(ssend(&p.a, "ping", 4), 4);
	assert_true(rsk_verbs_event_wait(p.eb, 5000) & RSK_EPEV_DATA);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 4);
	assert_int_equal(rsk_verbs_event_wait(p.eb, 0) & RSK_EPEV_GONE, 0);
	vp_close(&p);
}

/* Many endpoints on one channel: each event reaches its own endpoint, and none reaches a
 * destroyed one (its token is stale; the demux table holds exactly the live ones). */
static void test_shared_channel_demux(void **state)
{
	struct vpair p[4];
	uint32_t base = rsk_vdemux_count();
	char buf[8];
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		vp_open(&p[i]);
		(void)rsk_verbs_event_wait(p[i].eb, 0);
	}
	assert_int_equal(rsk_vdemux_count(), base + 8);
	assert_int_equal(ssend(&p[2].a, "ping", 4), 4);
	assert_true(rsk_verbs_event_wait(p[2].eb, 5000) & RSK_EPEV_DATA);
	for (i = 0; i < 4; i++)
		if (i != 2)
			assert_int_equal(rsk_verbs_pending(p[i].eb) & (1u << RSK_VDEMUX_CQ), 0);
	assert_int_equal(srecv_wait(&p[2].b, buf, sizeof(buf)), 4);
	/* an arrival for an endpoint destroyed before the loop drains it: nothing happens */
	assert_int_equal(ssend(&p[1].a, "gone", 4), 4);
	rsk_stream_fini(&p[1].b);
	rsk_ep_destroy(p[1].eb);
	p[1].eb = NULL;
	assert_int_equal(rsk_vdemux_count(), base + 7);
	for (i = 0; i < 4; i++) {
		if (i == 1) {
			rsk_stream_fini(&p[1].a);
			rsk_ep_destroy(p[1].ea);
			close(p[1].tcp);
			continue;
		}
		vp_close(&p[i]);
	}
	assert_int_equal(rsk_vdemux_count(), base);
}

/*
 * Quiet (ops->arm): an event taken with ep->quiet_ok leaves the CQ unarmed, so the next
 * completions raise none while our threads poll; arm(1) takes it back exactly once and the
 * next completion raises an event again. (Before, every event re-armed: the loop thread woke
 * for every message a spinning reader had polled itself.)
 */
static void test_quiet_until_armed(void **state)
{
	struct vpair p;
	char buf[8];

	(void)state;
	vp_open(&p);
	assert_int_equal(ssend(&p.a, "ping", 4), 4);
	assert_true(wait_pending(p.eb, 5000)); /* armed since it was made */
	__atomic_store_n(&p.eb->quiet_ok, 1, __ATOMIC_RELAXED);
	assert_int_equal(rsk_verbs_cq_event(p.eb), 1); /* taken, left unarmed */
	__atomic_store_n(&p.eb->quiet_ok, 0, __ATOMIC_RELAXED);
	assert_int_equal(rsk_ep_arm(p.eb, 0), 1);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 4);
	assert_int_equal(ssend(&p.a, "next", 4), 4);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 4); /* polled by us */
	assert_false(wait_pending(p.eb, 100));                    /* and no event for it */
	assert_int_equal(rsk_ep_arm(p.eb, 1), 1); /* was quiet: now armed */
	assert_int_equal(rsk_ep_arm(p.eb, 1), 0); /* only once */
	assert_int_equal(rsk_ep_arm(p.eb, 0), 0);
	assert_int_equal(ssend(&p.a, "pong", 4), 4);
	assert_true(wait_pending(p.eb, 5000)); /* armed: the completion raises one */
	assert_int_equal(rsk_verbs_cq_event(p.eb), 0); /* without quiet_ok: re-armed */
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 4);
	assert_int_equal(ssend(&p.a, "more", 4), 4);
	assert_true(wait_pending(p.eb, 5000));
	(void)rsk_verbs_cq_event(p.eb);
	assert_int_equal(srecv_wait(&p.b, buf, sizeof(buf)), 4);
	vp_close(&p);
}

static int setup(void **state)
{
	const char *a = getenv("RSK_VERBS_TEST_ADDR");

	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_config.buf_count = NBUF;
	rsk_config.buf_size = BSIZE;
	memset(&g_addr, 0, sizeof(g_addr));
	g_addr.sin_family = AF_INET;
	g_addr.sin_port = htons(18515);
	if (inet_pton(AF_INET, a ? a : "192.0.2.2", &g_addr.sin_addr) != 1)
		return -1;
	if (rsk_verbs_listen((struct sockaddr *)&g_addr, sizeof(g_addr), &g_l) != 0)
		return -1;
	return pthread_create(&g_thr, NULL, listener_thread, NULL);
}

static int teardown(void **state)
{
	(void)state;
	g_stop = 1;
	pthread_join(g_thr, NULL);
	rsk_verbs_listener_close(g_l);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_credit_exhaustion),
		cmocka_unit_test(test_one_way_reader),
		cmocka_unit_test(test_fin_after_data),
		cmocka_unit_test(test_reset),
		cmocka_unit_test(test_completion_channel),
		cmocka_unit_test(test_shared_channel_demux),
		cmocka_unit_test(test_quiet_until_armed),
		cmocka_unit_test(test_bidir_random),
	};

	if (rsk_verbs_probe() != 0) {
		fprintf(stderr, "test_verbs: no RDMA device here: skipped (the Soft-RoCE guest runs "
				"it, test/vm)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
