/*
 * Unit tests for core/conn/conn.c over an in-process shm pair: two connections set up the way
 * calls/connect.c and calls/accept.c do (alloc, prepare, the server's initial look, attach),
 * each end driven as calls/io.c drives it (engine operation, then sync, under the lock).
 * They check what conn.c itself owns: bytes in order across credit cycles, the app end's
 * readiness and its token accounting, blocking and unblocking on credits, the orderly end
 * (FIN after everything, at the last holder's release) and the abortive one (RST when unread
 * data is left, or SO_LINGER {1, 0}), a peer that went with or without its FIN, holders
 * across prefork/undo and a forked child, take_tcp, discard and release closing every fd,
 * hello/flush/await_first on shm, the registry (visit, hook, on_release, rsk_conn_live), the
 * tick that posts staged writes, the robust lock after a holder died inside it, and the pool
 * of regions kept for the next connection (reused zeroed, bounded, none of it in a child),
 * the quiet-endpoint counters (a sleeper arriving while the loop takes an event), and the
 * release at process exit (the stream ends, its memory stays for other threads' calls).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/ready.h"
#include "conn/conn.h"
#include "stream/stream.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/transport.h"
#include "unit.h"
#include "unit_cm.h"

#define NBUF 8
#define BSIZE 1024

/* One end: its connection and the app end the application would hold. */
struct end {
	struct rsk_conn *c;
	int app;
};

struct pair {
	struct end cl, sv;
	int memfd;
	int ctl_s; /* the server's ctl end until its initial look; then -1 */
	int attached;
};

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	/* The loop's own fds (epoll, wake-up) stay once it runs: start it before any count. */
	assert_int_equal(rsk_evloop_start(), 0);
	return 0;
}

/*
 * Up to the server's initial look: the client's endpoint in its region (as shm dial), the
 * server's on the same memfd with the client's ctl end (the offer hands it over), and the
 * client told the server's ctl end (the answer). Neither end keeps its own ctl end (shm).
 */
static void pair_setup(struct pair *p)
{
	int ctl_c = -1, tcp = -1;

	memset(p, 0, sizeof(*p));
	p->cl.c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	p->sv.c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(p->cl.c);
	assert_non_null(p->sv.c);
	assert_int_equal(p->cl.c->holders, 1);
	assert_int_equal(p->cl.c->ctl_fd, -1);
	assert_int_equal(p->cl.c->tcp_fd, -1);
	p->memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(p->cl.c), &p->cl.c->ep);
	assert_true(p->memfd >= 0);
	assert_int_equal(rsk_conn_prepare(p->cl.c, -1, &p->cl.app, &ctl_c, &tcp), 0);
	assert_int_equal(tcp, -1); /* shm keeps no TCP placeholder */
	assert_int_equal(rsk_shm_open(p->memfd, RSK_SHM_SERVER, ctl_c, rsk_conn_ep_mem(p->sv.c),
				      &p->sv.c->ep),
			 0);
	assert_int_equal(rsk_conn_prepare(p->sv.c, -1, &p->sv.app, &p->ctl_s, &tcp), 0);
	assert_int_equal(tcp, -1);
	rsk_shm_set_peer_ctl(p->cl.c->ep, dup(p->ctl_s));
}

/* The server's initial look (it still holds its ctl end), then both ends attached. */
static void pair_attach(struct pair *p)
{
	rsk_conn_show_initial(p->sv.c, p->sv.app, p->ctl_s);
	close(p->ctl_s);
	p->ctl_s = -1;
	assert_int_equal(rsk_conn_attach(p->cl.c, p->cl.app, -1, -1, 1), 0);
	assert_int_equal(rsk_conn_attach(p->sv.c, p->sv.app, -1, -1, 1), 0);
	assert_int_equal(p->cl.c->transport, RDMASOCK_TRANSPORT_SHM);
	assert_int_equal(p->cl.c->nonblock, 1);
	p->attached = 1;
}

static void pair_open(struct pair *p)
{
	pair_setup(p);
	pair_attach(p);
}

/* Release an attached end (NULL afterwards) and close its app end, as close() does. */
static void end_release(struct end *e)
{
	if (e->c != NULL)
		rsk_conn_release(e->c);
	e->c = NULL;
	if (e->app >= 0)
		close(e->app);
	e->app = -1;
}

static void pair_close(struct pair *p)
{
	end_release(&p->cl);
	end_release(&p->sv);
	close(p->memfd);
}

static short revents(int fd, short events)
{
	struct pollfd pfd = {.fd = fd, .events = events};

	assert_true(poll(&pfd, 1, 0) >= 0);
	return pfd.revents & (events | POLLHUP | POLLERR);
}

/* As calls/io.c: the engine operation and the sync under the lock. */
static ssize_t end_send(struct end *e, const void *buf, size_t len)
{
	struct iovec iov = {(void *)buf, len};
	ssize_t n;

	rsk_conn_lock(e->c);
	n = rsk_stream_send(&e->c->st, &iov, 1, 0);
	if (e->c->st.stage_len)
		rsk_conn_staged();
	rsk_conn_sync(e->c, e->app);
	rsk_conn_unlock(e->c);
	return n;
}

static ssize_t end_recv(struct end *e, void *buf, size_t len)
{
	struct iovec iov = {buf, len};
	ssize_t n;

	rsk_conn_lock(e->c);
	n = rsk_stream_recv(&e->c->st, &iov, 1, 0);
	rsk_conn_sync(e->c, e->app);
	rsk_conn_unlock(e->c);
	return n;
}

static void end_nodelay(struct end *e, int on)
{
	rsk_conn_lock(e->c);
	rsk_stream_set_nodelay(&e->c->st, on);
	rsk_conn_unlock(e->c);
}

static struct rsk_ready_state *rs_of(struct end *e)
{
	return rsk_ep_ready(e->c->ep);
}

/* ---- data and readiness ---- */

/* A pattern byte for stream offset @i (never a multiple of the buffer size: shifts show). */
static unsigned char pat(uint64_t i)
{
	return (unsigned char)(i * 7 + i / 251);
}

/* @total bytes from @tx to @rx in odd-sized writes, read in other odd sizes, checked. */
static void pump(struct end *tx, struct end *rx, uint64_t total)
{
	unsigned char w[1500], r[700];
	uint64_t sent = 0, got = 0;
	int64_t end = rsk_now_ms() + 2000;
	ssize_t n;
	size_t i, len;

	while (got < total && rsk_now_ms() < end) {
		while (sent < total) {
			len = (size_t)(total - sent < sizeof(w) ? total - sent : sizeof(w));
			len = len > 1 + sent % 997 ? 1 + sent % 997 : len;
			for (i = 0; i < len; i++)
				w[i] = pat(sent + i);
			n = end_send(tx, w, len);
			if (n == -EAGAIN)
				break;
			assert_true(n > 0);
			sent += (uint64_t)n;
		}
		for (;;) {
			n = end_recv(rx, r, 1 + got % sizeof(r));
			if (n == -EAGAIN)
				break;
			assert_true(n > 0);
			for (i = 0; i < (size_t)n; i++)
				assert_int_equal(r[i], pat(got + i));
			got += (uint64_t)n;
		}
	}
	assert_int_equal(got, total);
	assert_int_equal(rx->c->st.rx_bytes, 0);
}

/* Many times the window, both ways: every byte arrives once and in order. */
static void test_bytes_in_order(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p);
	end_nodelay(&p.cl, 1);
	pump(&p.cl, &p.sv, 40u * NBUF * BSIZE + 123);
	pump(&p.sv, &p.cl, 17u * NBUF * BSIZE + 5); /* Nagle on: stages come and go */
	assert_int_equal(p.cl.c->st.err, 0);
	assert_int_equal(p.sv.c->st.err, 0);
	pair_close(&p);
}

/* The app end is readable exactly while data waits, with one token per shown episode. */
static void test_readable_on_arrival(void **state)
{
	struct rsk_ready_state *rs;
	struct pair p;
	char b[64];

	(void)state;
	pair_open(&p);
	rs = rs_of(&p.sv);
	/* the initial look found nothing: EMPTY, no token, not readable */
	assert_int_equal(rs->rx & RSK_RX_SHOWN, 0);
	assert_int_equal(rsk_ready_unread(rs), 0);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(revents(p.sv.app, POLLOUT), POLLOUT);
	assert_int_equal(revents(p.cl.app, POLLIN), 0);

	assert_int_equal(end_send(&p.cl, "hello", 5), 5);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(rsk_ready_unread(rs), 1);
	assert_int_equal(revents(p.cl.app, POLLIN), 0); /* the sender was not touched */

	/* a partial read leaves it readable, token in place */
	assert_int_equal(end_recv(&p.sv, b, 2), 2);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(rsk_ready_unread(rs), 1);
	/* the rest: not readable, the token taken back (EMPTY again) */
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 3);
	assert_memory_equal(b, "llo", 3);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(rsk_ready_unread(rs), 0);
	assert_int_equal(rs->taken, 1);
	assert_int_equal(rs->rx & RSK_RX_SHOWN, 0);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), -EAGAIN);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);

	/* the next arrival shows again */
	assert_int_equal(end_send(&p.cl, "x", 1), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(rsk_ready_unread(rs), 0);
	assert_int_equal(rs->taken, 2);
	pair_close(&p);
}

/* A client may send before accept() returns: the server's initial look shows it. */
static void test_show_initial_data_first(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	pair_setup(&p);
	assert_int_equal(end_send(&p.cl, "early", 5), 5);
	/* the server still shows its placeholder: the client's kick wrote nothing */
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	pair_attach(&p);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(rsk_ready_unread(rs_of(&p.sv)), 1);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 5);
	assert_memory_equal(b, "early", 5);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(rsk_ready_unread(rs_of(&p.sv)), 0);
	pair_close(&p);
}

/* Out of credits: the app end stops being writable; the reader's consumption reopens it. */
static void test_writable_follows_credits(void **state)
{
	unsigned char b[BSIZE];
	struct pair p;
	int i, rounds;
	ssize_t n;

	(void)state;
	memset(b, 'w', sizeof(b));
	pair_open(&p);
	end_nodelay(&p.cl, 1);
	for (rounds = 0; rounds < 3; rounds++) {
		for (i = 0; i < 4 * NBUF && (n = end_send(&p.cl, b, sizeof(b))) > 0; i++)
			;
		assert_true(i < 4 * NBUF); /* the window is bounded */
		assert_int_equal(end_send(&p.cl, b, sizeof(b)), -EAGAIN);
		assert_int_equal(revents(p.cl.app, POLLOUT), 0);
		assert_true(rs_of(&p.cl)->tx & RSK_TX_BLOCKED);
		/* the reader takes everything: its reposts are our credits, and wake us */
		while (end_recv(&p.sv, b, sizeof(b)) > 0)
			;
		assert_int_equal(revents(p.cl.app, POLLOUT), POLLOUT);
		assert_false(rs_of(&p.cl)->tx & RSK_TX_BLOCKED);
	}
	pair_close(&p);
}

/* ---- the end of a connection ---- */

/* The last holder's release sends FIN after every byte, staged ones too: EOF, not reset. */
static void test_release_fin_after_data(void **state)
{
	char b[64], all[64];
	struct pair p;
	size_t got = 0;
	ssize_t n;

	(void)state;
	pair_open(&p);
	/* Nagle on: the second and third writes are staged behind the unconsumed first */
	assert_int_equal(end_send(&p.cl, "abc", 3), 3);
	assert_int_equal(end_send(&p.cl, "def", 3), 3);
	assert_int_equal(end_send(&p.cl, "ghi", 3), 3);
	assert_true(p.cl.c->st.stage_len > 0);
	end_release(&p.cl);
	assert_true(rsk_shm_peer_ended(p.sv.c->ep)); /* our FIN is in the peer's memory */
	assert_int_equal(revents(p.sv.app, POLLIN | POLLRDHUP) & (POLLIN | POLLRDHUP),
			 POLLIN | POLLRDHUP);
	while (got < sizeof(all) && (n = end_recv(&p.sv, b, 2)) > 0) {
		memcpy(all + got, b, (size_t)n);
		got += (size_t)n;
	}
	assert_int_equal(got, 9);
	assert_memory_equal(all, "abcdefghi", 9);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0); /* EOF for good */
	assert_int_equal(p.sv.c->st.err, 0);
	/* the client's endpoint went (its copy of our ctl end): a hang-up after the FIN is an
	 * orderly close, not a reset */
	assert_true(revents(p.sv.app, POLLIN) & POLLHUP);
	rsk_conn_saw_events(p.sv.c, p.sv.app, POLLHUP);
	assert_int_equal(p.sv.c->st.err, 0);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	/* our side is done too once we shut down: HUP, as TCP reports it */
	rsk_conn_lock(p.sv.c);
	(void)rsk_stream_shutdown_wr(&p.sv.c->st);
	rsk_conn_sync(p.sv.c, p.sv.app);
	assert_int_equal(p.sv.c->hup_shown, 1);
	rsk_conn_unlock(p.sv.c);
	pair_close(&p);
}

/* The client's view after the server's release reset the stream. */
static void assert_reset_seen(struct pair *p)
{
	char b[16];

	assert_false(rsk_shm_peer_ended(p->cl.c->ep)); /* no FIN mark */
	assert_int_equal(end_recv(&p->cl, b, sizeof(b)), -ECONNRESET);
	assert_int_equal(p->cl.c->st.err, -ECONNRESET);
	assert_true(p->cl.c->hup_shown);
	assert_int_equal(revents(p->cl.app, POLLIN) & (POLLIN | POLLHUP), POLLIN | POLLHUP);
	assert_true(end_send(&p->cl, "x", 1) < 0);
}

/* Unread data left at the last release: the peer is reset (as TCP's RST), no FIN. */
static void test_release_unread_resets(void **state)
{
	struct pair p;
	char b[2];

	(void)state;
	pair_open(&p);
	assert_int_equal(end_send(&p.cl, "unread", 6), 6);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 2); /* 4 bytes left */
	end_release(&p.sv);
	assert_reset_seen(&p);
	pair_close(&p);
}

/* The same when the application never looked: the data is in our memory all the same (in
 * TCP's receive queue), so closing over it is a reset too. */
static void test_release_unharvested_resets(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p);
	assert_int_equal(end_send(&p.cl, "unread", 6), 6);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN); /* shown, never read */
	assert_int_equal(p.sv.c->st.rx_bytes, 0);            /* not harvested yet */
	end_release(&p.sv);
	assert_reset_seen(&p);
	pair_close(&p);
}

/* SO_LINGER {1, 0}: close resets even with nothing unread. */
static void test_release_linger0_resets(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	pair_open(&p);
	p.sv.c->linger0 = 1;
	end_release(&p.sv);
	assert_false(rsk_shm_peer_ended(p.cl.c->ep));
	assert_int_equal(end_recv(&p.cl, b, sizeof(b)), -ECONNRESET);
	assert_true(revents(p.cl.app, POLLIN) & POLLHUP);
	pair_close(&p);
}

/* A pair where only the server is registered: the client can "die" (dead_client_goes). */
static void dead_client_pair(struct pair *p)
{
	pair_setup(p);
	rsk_conn_show_initial(p->sv.c, p->sv.app, p->ctl_s);
	close(p->ctl_s);
	p->ctl_s = -1;
	assert_int_equal(rsk_conn_attach(p->sv.c, p->sv.app, -1, -1, 0), 0);
}

/* The client's endpoint and fds go, without a FIN: its process died. */
static void dead_client_goes(struct pair *p)
{
	rsk_conn_discard(p->cl.c, p->cl.app, -1, -1);
	p->cl.c = NULL;
	p->cl.app = -1;
}

/* A peer that went without its FIN (it died) while data of ours sat unread there: its
 * hang-up resets the stream, as its kernel would have (a close over unread data is a RST);
 * what it had sent is read first. */
static void test_peer_died_resets(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	dead_client_pair(&p);
	assert_int_equal(end_send(&p.cl, "last", 4), 4);
	assert_int_equal(end_send(&p.sv, "unread", 6), 6);
	dead_client_goes(&p);
	assert_true(revents(p.sv.app, POLLIN) & POLLHUP);
	assert_int_equal(p.sv.c->st.err, 0);
	rsk_conn_saw_events(p.sv.c, p.sv.app, POLLIN | POLLHUP);
	assert_int_equal(p.sv.c->peer_hup, 1);
	assert_int_equal(p.sv.c->st.err, -ECONNRESET);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 4);
	assert_memory_equal(b, "last", 4);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), -ECONNRESET);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	pair_close(&p);
}

/* A peer that died with nothing of ours unread: as its kernel's close would send a FIN, the
 * stream ends after what it sent, including what it had staged but not posted; our sends
 * then fail with EPIPE. */
static void test_peer_died_quietly_ends(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	dead_client_pair(&p);
	assert_int_equal(end_send(&p.cl, "posted", 6), 6);
	/* Nagle holds a short write while the first is unconsumed: staged, not posted */
	assert_int_equal(end_send(&p.cl, "staged", 6), 6);
	assert_true(p.cl.c->st.stage_len > 0);
	dead_client_goes(&p);
	rsk_conn_saw_events(p.sv.c, p.sv.app, POLLIN | POLLHUP);
	assert_int_equal(p.sv.c->st.err, 0);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 12);
	assert_memory_equal(b, "postedstaged", 12);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	assert_int_equal(end_send(&p.sv, "x", 1), -EPIPE);
	pair_close(&p);
}

/* ---- holders across fork ---- */

static struct rsk_conn *child_conn;

/* The forked child: drop its hold, as its close() would (not the last holder). */
static int child_release(void *arg)
{
	(void)arg;
	rsk_evloop_atfork_child();
	rsk_conn_atfork_child();
	rsk_conn_release(child_conn);
	return 0;
}

static void test_holders_prefork(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	pair_open(&p);
	assert_int_equal(p.cl.c->holders, 1);
	rsk_conn_prefork(p.cl.c, p.cl.app);
	assert_int_equal(p.cl.c->holders, 2);
	rsk_conn_prefork_undo(p.cl.c); /* the fork failed */
	assert_int_equal(p.cl.c->holders, 1);

	/* a real child: its release is not the last, so no FIN and nothing shown to the peer */
	rsk_conn_prefork(p.cl.c, p.cl.app);
	child_conn = p.cl.c;
	assert_int_equal(unit_in_child(child_release, NULL, 5000), 0);
	assert_int_equal(p.cl.c->holders, 1);
	assert_int_equal(revents(p.sv.app, POLLIN | POLLRDHUP), 0);
	assert_false(rsk_shm_peer_ended(p.sv.c->ep));
	/* the parent still has it, and its last release ends the stream */
	assert_int_equal(end_send(&p.cl, "after", 5), 5);
	end_release(&p.cl);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 5);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	assert_int_equal(p.sv.c->st.err, 0);
	pair_close(&p);
}

/* ---- the TCP socket's names and options ---- */

static void test_take_tcp(void **state)
{
	struct sockaddr_storage a;
	struct sockaddr_in dest;
	struct rsk_conn *c;
	socklen_t len;
	uint16_t port;
	int lfd, cfd, sfd, one = 1, fresh;

	(void)state;
	lfd = ucm_tcp_bound(1, &port);
	dest = ucm_lo4(port);
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cfd >= 0);
	assert_int_equal(setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	assert_int_equal(connect(cfd, (struct sockaddr *)&dest, sizeof(dest)), 0);
	sfd = accept(lfd, NULL, NULL);
	assert_true(sfd >= 0);
	assert_int_equal(setsockopt(sfd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)), 0);

	c = rsk_conn_alloc(NBUF, 0);
	assert_non_null(c);
	rsk_conn_take_tcp(c, cfd, NULL);
	assert_true(c->st.nodelay);
	assert_false(c->st.cork);
	assert_int_equal(c->domain, AF_INET);
	len = sizeof(a);
	assert_int_equal(getsockname(cfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(c->local_len, len);
	assert_memory_equal(&c->local, &a, len);
	len = sizeof(a);
	assert_int_equal(getpeername(cfd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(c->peer_len, len);
	assert_memory_equal(&c->peer, &a, len);
	/* taken once: a later look (the socket it came from is gone) changes nothing */
	rsk_conn_take_tcp(c, sfd, NULL);
	assert_true(c->st.nodelay);
	assert_false(c->st.cork);
	assert_memory_equal(&c->peer, &a, len);
	rsk_conn_discard(c, -1, -1, -1);

	/* the other end: TCP_CORK; and a connect still under way gives the destination */
	c = rsk_conn_alloc(NBUF, 0);
	rsk_conn_take_tcp(c, sfd, NULL);
	assert_false(c->st.nodelay);
	assert_true(c->st.cork);
	assert_int_equal(ucm_port_of(sfd), ntohs(((struct sockaddr_in *)&c->local)->sin_port));
	rsk_conn_discard(c, -1, -1, -1);
	fresh = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	c = rsk_conn_alloc(NBUF, 0);
	rsk_conn_take_tcp(c, fresh, (struct sockaddr *)&dest);
	assert_int_equal(c->peer_len, sizeof(dest));
	assert_memory_equal(&c->peer, &dest, sizeof(dest));
	rsk_conn_discard(c, -1, -1, -1);
	close(fresh);
	close(cfd);
	close(sfd);
	close(lfd);
}

/* ---- fds and memory ---- */

/* Is [@p, @p + @len) mapped? msync says ENOMEM for an unmapped range. */
static int mapped(void *p, size_t len)
{
	return msync(p, len, MS_ASYNC) == 0;
}

/* Is @c among the regions kept for reuse? Taking every pooled region of its size finds it. */
static int region_pooled(struct rsk_conn *c)
{
	struct rsk_conn *got[17];
	int n = 0, found = 0, i;

	while (n < 17 && rsk_conn_pool_count() > 0) { /* past 16: fresh mappings */
		got[n] = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
		assert_non_null(got[n]);
		found |= got[n++] == c;
	}
	for (i = 0; i < n; i++)
		rsk_conn_discard(got[i], -1, -1, -1);
	return found;
}

/* A setup that fails after prepare (discard) and a full life (release) leave no fd behind. */
static void test_discard_and_release_close_everything(void **state)
{
	int before = ucm_fd_count(), memfd, app = -1, ctl = -1, tcp = -1;
	struct rsk_conn *c;
	struct pair p;
	size_t len;

	(void)state;
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(c);
	len = c->map_len;
	assert_int_equal(len % 4096, 0);
	assert_true(len >= sizeof(*c) + rsk_shm_ep_size() + NBUF * sizeof(struct rsk_rxmsg));
	assert_true((uintptr_t)rsk_conn_rxq(c) >=
		    (uintptr_t)rsk_conn_ep_mem(c) + rsk_shm_ep_size());
	memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(c), &c->ep);
	assert_true(memfd >= 0);
	assert_int_equal(rsk_conn_prepare(c, -1, &app, &ctl, &tcp), 0);
	assert_true(ucm_fd_count() >= before + 3);
	assert_true(mapped(c, len));
	rsk_conn_discard(c, app, ctl, tcp);
	close(memfd);
	assert_int_equal(ucm_fd_count(), before);
	assert_true(mapped(c, len) == region_pooled(c)); /* kept for the next one, or gone */

	pair_open(&p);
	assert_true(ucm_fd_count() > before);
	end_send(&p.cl, "z", 1);
	pair_close(&p);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * The release at process exit (rsk_conn_release_exiting): the stream ends as at a close (the
 * peer reads every byte, then EOF), and nothing a call of another thread still uses goes:
 * the region stays mapped and out of the pool, the endpoint and its ctl end stay, and the
 * stream can still be looked at. rsk_conn_release freed them (region pooled, endpoint
 * destroyed), and a reader woken by the end took a message into freed memory (a SIGSEGV at
 * exit, int_exit_threads).
 */
static void test_release_exiting_keeps_memory(void **state)
{
	struct rsk_conn *c;
	char b[16];
	struct pair p;
	size_t len;
	ssize_t n;

	(void)state;
	pair_open(&p);
	c = p.cl.c;
	len = c->map_len;
	assert_int_equal(end_send(&p.cl, "abc", 3), 3);
	rsk_conn_release_exiting(c);
	assert_int_equal(c->holders, 0);
	assert_true(rsk_shm_peer_ended(p.sv.c->ep)); /* the FIN is in the peer's memory */
	n = end_recv(&p.sv, b, sizeof(b));
	assert_int_equal(n, 3);
	assert_memory_equal(b, "abc", 3);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 0);
	/* what another thread's call would touch next is all there */
	assert_true(mapped(c, len));
	assert_false(region_pooled(c));
	assert_non_null(c->st.rxq);
	assert_int_equal(end_recv(&p.cl, b, sizeof(b)), -EAGAIN);
	/* (the process's end would take the rest: here the test lets go of it) */
	p.cl.c = NULL;
	rsk_ep_destroy(c->ep);
	munmap(c, len);
	pair_close(&p);
}

/*
 * The region of a connection that ended here is kept mapped and is the next connection's
 * (no mmap, no page faults, no munmap and its TLB shootdown), and it starts zeroed. Fails on
 * the code before the pool: the region was unmapped at discard and release.
 */
static void test_region_reused_clean(void **state)
{
	struct rsk_conn *c, *d;
	struct pair p;
	size_t len;

	(void)state;
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(c);
	len = c->map_len;
	memset(c->mem, 0xa5, len - offsetof(struct rsk_conn, mem)); /* the last one's bytes */
	c->transport = RDMASOCK_TRANSPORT_SHM;
	rsk_conn_discard(c, -1, -1, -1);
	assert_true(mapped(c, len));
	d = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_ptr_equal(d, c);
	assert_int_equal(d->map_len, len);
	assert_int_equal(d->holders, 1);
	assert_int_equal(d->ctl_fd, -1);
	assert_int_equal(d->transport, 0);
	assert_true(d->mem[0] == 0 && d->mem[len - offsetof(struct rsk_conn, mem) - 1] == 0);
	rsk_conn_discard(d, -1, -1, -1);

	/* a full life too: the last holder's release keeps the region */
	pair_open(&p);
	c = p.cl.c;
	end_send(&p.cl, "z", 1);
	pair_close(&p);
	assert_true(mapped(c, c->map_len));
	assert_true(region_pooled(c));
}

/* At most 16 regions are kept; the rest are unmapped. Fails on code without the bound. */
static void test_region_pool_bounded(void **state)
{
	struct rsk_conn *c[24];
	size_t len;
	int i, kept = 0;

	(void)state;
	for (i = 0; i < 24; i++)
		assert_non_null(c[i] = rsk_conn_alloc(NBUF, rsk_shm_ep_size()));
	len = c[0]->map_len;
	for (i = 0; i < 24; i++)
		rsk_conn_discard(c[i], -1, -1, -1);
	assert_int_equal(rsk_conn_pool_count(), 16);
	for (i = 0; i < 24; i++)
		kept += mapped(c[i], len);
	assert_int_equal(kept, 16);
}

static struct rsk_conn *pooled_in_parent;

/* In a forked child: the parent's pooled regions are not the child's to hand out. */
static int child_pool(void *arg)
{
	struct rsk_conn *c;

	(void)arg;
	rsk_conn_atfork_child();
	if (rsk_conn_pool_count() != 0 || mapped(pooled_in_parent, 4096))
		return 1;
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	if (c == NULL || c == pooled_in_parent)
		return 2;
	memset(c->mem, 0x5a, 64); /* would be the parent's next connection's state if shared */
	rsk_conn_discard(c, -1, -1, -1);
	return 0;
}

/*
 * A forked child starts with an empty pool and its inherited copies unmapped: the regions
 * are MAP_SHARED, and a region handed out by both would be two connections at once. Fails
 * without rsk_conn_pool_drop in rsk_conn_atfork_child (exit 1).
 */
static void test_region_pool_fork(void **state)
{
	struct rsk_conn *c;

	(void)state;
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(c);
	rsk_conn_discard(c, -1, -1, -1);
	assert_true(rsk_conn_pool_count() > 0);
	pooled_in_parent = c;
	assert_int_equal(unit_in_child(child_pool, NULL, 5000), 0);
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_ptr_equal(c, pooled_in_parent); /* still the parent's, and untouched */
	assert_int_equal(c->mem[0], 0);
	rsk_conn_discard(c, -1, -1, -1);
}

/* ---- setup handshakes on shm ---- */

static void test_hello_flush_await(void **state)
{
	struct pair p;
	int64_t t0;
	char b[4];

	(void)state;
	pair_open(&p);
	/* no hello yet: the client's wait is bounded */
	t0 = rsk_now_ms();
	assert_int_equal(rsk_conn_await_first(p.cl.c, rsk_now_ms() + 30), -ETIMEDOUT);
	assert_true(rsk_now_ms() - t0 >= 29);
	assert_true(rsk_now_ms() - t0 < 1000);
	/* shm: a posted message is in the peer's memory, nothing to wait for */
	t0 = rsk_now_ms();
	assert_int_equal(rsk_conn_flush_sends(p.sv.c, 5000), 0);
	assert_true(rsk_now_ms() - t0 < 100);
	assert_int_equal(rsk_conn_hello(p.sv.c, p.sv.app), 0);
	assert_int_equal(rsk_conn_flush_sends(p.sv.c, 5000), 0);
	assert_true(rsk_now_ms() - t0 < 100);
	t0 = rsk_now_ms();
	assert_int_equal(rsk_conn_await_first(p.cl.c, rsk_now_ms() + 5000), 0);
	assert_true(rsk_now_ms() - t0 < 100);
	/* an empty message is no data: the client is not readable, its reads wait */
	assert_int_equal(end_recv(&p.cl, b, sizeof(b)), -EAGAIN);
	assert_int_equal(revents(p.cl.app, POLLIN), 0);
	assert_int_equal(revents(p.sv.app, POLLOUT), POLLOUT);
	pair_close(&p);
}

/* ---- this process's record of its connections ---- */

static void count_visit(const struct rsk_conn *c, void *arg)
{
	(void)c;
	UNIT_INC((int *)arg);
}

static int hook_calls, release_calls;
static struct rsk_conn *released_conn;

static void hook_fn(struct rsk_conn *c, void *ext)
{
	(void)c;
	(void)ext;
	UNIT_INC(&hook_calls);
}

static void on_release_fn(struct rsk_conn *c, void *ext)
{
	assert_ptr_equal(ext, &release_calls);
	released_conn = c;
	UNIT_INC(&release_calls);
}

static void test_registry(void **state)
{
	int live = UNIT_LOAD(&rsk_conn_live), visits = 0;
	struct rsk_conn *cl;
	struct pair p;

	(void)state;
	pair_setup(&p);
	/* not attached yet: not ours to visit or hook */
	assert_int_equal(rsk_conn_visit(p.cl.c, count_visit, &visits), 0);
	assert_int_equal(visits, 0);
	assert_int_equal(rsk_conn_set_hook(p.cl.c, hook_fn, NULL, NULL), -ENOENT);
	pair_attach(&p);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), live + 2);
	assert_int_equal(rsk_conn_visit(p.cl.c, count_visit, &visits), 1);
	assert_int_equal(rsk_conn_visit(p.sv.c, count_visit, &visits), 1);
	assert_int_equal(visits, 2);
	release_calls = 0;
	assert_int_equal(rsk_conn_set_hook(p.cl.c, hook_fn, &release_calls, on_release_fn), 0);
	cl = p.cl.c;
	end_release(&p.cl);
	assert_int_equal(release_calls, 1);
	assert_ptr_equal(released_conn, cl);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), live + 1);
	/* gone from the registry: never visited again (the address is only looked up) */
	assert_int_equal(rsk_conn_visit(cl, count_visit, &visits), 0);
	assert_int_equal(visits, 2);
	end_release(&p.sv);
	assert_int_equal(release_calls, 1);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), live);
	close(p.memfd);
}

static uint32_t stage_len(struct end *e)
{
	uint32_t n;

	rsk_conn_lock(e->c);
	n = e->c->st.stage_len;
	rsk_conn_unlock(e->c);
	return n;
}

/* A staged write is posted by the event loop's tick, without the writer doing more. */
static void test_tick_posts_stage(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	pair_open(&p);
	assert_int_equal(end_send(&p.cl, "1", 1), 1);
	assert_int_equal(end_send(&p.cl, "2", 1), 1); /* staged: the first is unconsumed */
	/* take the first at once; the second is on its way only by the tick */
	assert_true(UNIT_WAIT(revents(p.sv.app, POLLIN) != 0, 2000));
	assert_true(UNIT_WAIT(stage_len(&p.cl) == 0, 2000));
	rsk_conn_lock(p.sv.c);
	(void)rsk_stream_progress(&p.sv.c->st);
	rsk_conn_unlock(p.sv.c);
	assert_int_equal(p.sv.c->st.rx_bytes, 2);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 2);
	assert_memory_equal(b, "12", 2);
	/* the explicit push (the application is about to wait) finds nothing left */
	rsk_conn_push_all();
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), -EAGAIN);
	pair_close(&p);
}

/* ---- the process-shared robust lock ---- */

static struct rsk_conn *lock_conn;

static int child_dies_locked(void *arg)
{
	(void)arg;
	rsk_conn_lock(lock_conn);
	return 0; /* _exit with the lock held */
}

static void test_lock_owner_died(void **state)
{
	struct pair p;
	char b[4];

	(void)state;
	pair_open(&p);
	lock_conn = p.sv.c;
	assert_int_equal(unit_in_child(child_dies_locked, NULL, 5000), 0);
	/* the next locker recovers the lock and resets the stream (its state is suspect) */
	rsk_conn_lock(p.sv.c);
	assert_int_equal(p.sv.c->st.err, -ECONNRESET);
	rsk_conn_unlock(p.sv.c);
	rsk_conn_lock(p.sv.c); /* consistent again: an ordinary lock */
	rsk_conn_unlock(p.sv.c);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), -ECONNRESET);
	assert_int_equal(p.cl.c->st.err, 0); /* the other connection's lock is its own */
	pair_close(&p);
}

/* ---- lazy readiness (calls/fastwait.c) ---- */

static void end_lazy(struct end *e, int on)
{
	rsk_conn_lock(e->c);
	rsk_conn_set_lazy(e->c, e->app, on);
	rsk_conn_unlock(e->c);
}

static int end_exact(struct end *e)
{
	int r;

	rsk_conn_lock(e->c);
	r = rsk_conn_exact(e->c, e->app);
	rsk_conn_unlock(e->c);
	return r;
}

static int end_fast(struct end *e)
{
	int r;

	rsk_conn_lock(e->c);
	r = rsk_conn_fast_events(e->c, e->app);
	rsk_conn_unlock(e->c);
	return r;
}

/*
 * Lazy: a drained app end keeps its token, so the sender, finding it SHOWN, writes none (no
 * system call per message); data always has a token; the user-space answer is exact while
 * the kernel's may be stale; rsk_conn_exact makes the kernel's exact again before a sleep.
 */
static void test_lazy_stale_token(void **state)
{
	struct rsk_ready_state *rs;
	struct pair p;
	char b[16];
	uint32_t raised;

	(void)state;
	pair_open(&p);
	end_nodelay(&p.cl, 1);
	rs = rs_of(&p.sv);
	end_lazy(&p.sv, 1);
	assert_int_equal(p.sv.c->lazy, 1);
	assert_int_equal(end_fast(&p.sv), EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);

	assert_int_equal(end_send(&p.cl, "a", 1), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN); /* data: a token, as always */
	assert_int_equal(end_fast(&p.sv), EPOLLIN | EPOLLRDNORM | EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 1);
	/* drained: the token stays (stale), the user-space answer says nothing to read */
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(rsk_ready_unread(rs), 1);
	assert_int_equal(rs->taken, 0);
	assert_int_equal(end_fast(&p.sv) & EPOLLIN, 0);

	/* the next messages find SHOWN: no token written */
	raised = rs->rx >> 1;
	assert_int_equal(end_send(&p.cl, "b", 1), 1);
	assert_int_equal(end_send(&p.cl, "c", 1), 1);
	assert_int_equal(rs->rx >> 1, raised);
	assert_int_equal(rsk_ready_unread(rs), 1);
	assert_int_equal(end_fast(&p.sv) & EPOLLIN, EPOLLIN);

	/* before a sleep: with data nothing is taken; without, the stale token goes */
	assert_int_equal(end_exact(&p.sv), 1);
	assert_int_equal(rsk_ready_unread(rs), 1);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 2);
	assert_int_equal(end_exact(&p.sv), 0);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(rsk_ready_unread(rs), 0);
	assert_int_equal(rs->rx & RSK_RX_SHOWN, 0);
	/* EMPTY again: the next message raises a token (a sleeper wakes) */
	assert_int_equal(end_send(&p.cl, "d", 1), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), POLLIN); /* stale once more */

	/* eager again: exact at once, and drained app ends lose their tokens as before */
	end_lazy(&p.sv, 0);
	assert_int_equal(p.sv.c->lazy, 0);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	assert_int_equal(end_send(&p.cl, "e", 1), 1);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 1);
	assert_int_equal(revents(p.sv.app, POLLIN), 0);
	pair_close(&p);
}

/* Past the plain state (here the peer's FIN) only the kernel object answers exactly; a
 * connection marked never-lazy stays eager. */
static void test_lazy_ends_with_the_stream(void **state)
{
	struct pair p;
	char b[16];

	(void)state;
	pair_open(&p);
	end_lazy(&p.sv, 1);
	assert_int_equal(end_send(&p.cl, "x", 1), 1);
	assert_int_equal(end_recv(&p.sv, b, sizeof(b)), 1);
	rsk_conn_lock(p.cl.c);
	assert_int_equal(rsk_stream_shutdown_wr(&p.cl.c->st), 0);
	rsk_conn_sync(p.cl.c, p.cl.app);
	rsk_conn_unlock(p.cl.c);
	assert_int_equal(end_fast(&p.sv), -1);
	assert_int_equal(revents(p.sv.app, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);

	end_lazy(&p.cl, 0);
	p.cl.c->lazy_never = 1;
	end_lazy(&p.cl, 1);
	assert_int_equal(p.cl.c->lazy, 0);
	pair_close(&p);
}

/*
 * ---- quiet endpoints (conn.c: rsk_conn_sleepers / rsk_conn_nquiet) ----
 * A verbs endpoint whose completion event comes while no thread of ours sleeps in the kernel
 * goes quiet (its CQ left unarmed); a thread about to sleep arms it again. The two sides are
 * ordered like Dekker's flags (docs/design.md, "Quiet CQs"): the loop counts the endpoint in
 * nquiet before it goes quiet and looks at the sleepers after; a sleeper counts itself and
 * looks at nquiet after. Played here by one end of a shm pair whose ops gain an `arm` (a
 * flag standing for the unarmed CQ) and whose cm (test_conn links with
 * --wrap=rsk_transport_cm) gains an event fd and an on_event that can let a sleeper in at
 * either point of the window: before the endpoint goes quiet, or after.
 */
enum { QT_NONE, QT_BEFORE, QT_AFTER };

static struct {
	struct rsk_transport_ops ops;
	struct rsk_cm_ops cm;
	int evfd;
	int inject;
	int quiet; /* the "CQ" is unarmed */
	int takes; /* arm(ep, 1) that took it out of quiet */
	int looks; /* arm(ep, 0): someone looked whether it is quiet */
	sem_t in_window, go, done;
} qt;

const struct rsk_cm_ops *__real_rsk_transport_cm(const struct rsk_ep *ep);
const struct rsk_cm_ops *__wrap_rsk_transport_cm(const struct rsk_ep *ep);

const struct rsk_cm_ops *__wrap_rsk_transport_cm(const struct rsk_ep *ep)
{
	return ep->ops == &qt.ops ? &qt.cm : __real_rsk_transport_cm(ep);
}

static int qt_arm(struct rsk_ep *ep, int sleep)
{
	(void)ep;
	if (!sleep) {
		__atomic_add_fetch(&qt.looks, 1, __ATOMIC_SEQ_CST);
		return __atomic_load_n(&qt.quiet, __ATOMIC_SEQ_CST);
	}
	if (!__atomic_exchange_n(&qt.quiet, 0, __ATOMIC_SEQ_CST))
		return 0;
	__atomic_add_fetch(&qt.takes, 1, __ATOMIC_SEQ_CST);
	return 1;
}

static int qt_event_fd(struct rsk_ep *ep, int i)
{
	(void)ep;
	return i == 0 ? qt.evfd : -1;
}

static void qt_timed_wait(sem_t *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	assert_int_equal(sem_timedwait(s, &ts), 0);
}

/* Another thread arrives to sleep now (the test's thread, while the loop waits). */
static void qt_let_sleeper_in(void)
{
	sem_post(&qt.in_window);
	qt_timed_wait(&qt.go);
}

static void qt_done(void *arg)
{
	(void)arg;
	sem_post(&qt.done);
}

static unsigned int qt_on_event(struct rsk_ep *ep, int i)
{
	uint64_t v;
	int quiet;

	(void)i;
	assert_int_equal(read(qt.evfd, &v, sizeof(v)), (ssize_t)sizeof(v));
	if (qt.inject == QT_BEFORE)
		qt_let_sleeper_in();
	quiet = __atomic_load_n(&ep->quiet_ok, __ATOMIC_RELAXED);
	if (quiet) /* as verbs: events taken, the CQ not re-armed */
		__atomic_store_n(&qt.quiet, 1, __ATOMIC_SEQ_CST);
	if (qt.inject == QT_AFTER)
		qt_let_sleeper_in();
	/* runs after this round, i.e. once conn.c has finished with the event */
	assert_int_equal(rsk_evloop_defer(qt_done, NULL), 0);
	return RSK_EPEV_DATA | (quiet ? RSK_EPEV_QUIET : 0);
}

static void qt_open(struct pair *p, int inject)
{
	memset(&qt, 0, sizeof(qt));
	qt.ops = rsk_shm_ops;
	qt.ops.arm = qt_arm;
	qt.cm = rsk_shm_cm_ops;
	qt.cm.event_fd = qt_event_fd;
	qt.cm.on_event = qt_on_event;
	qt.inject = inject;
	qt.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(qt.evfd >= 0);
	assert_int_equal(sem_init(&qt.in_window, 0, 0), 0);
	assert_int_equal(sem_init(&qt.go, 0, 0), 0);
	assert_int_equal(sem_init(&qt.done, 0, 0), 0);
	pair_setup(p);
	p->cl.c->ep->ops = &qt.ops; /* before attach: the watch takes qt.cm's event fd */
	pair_attach(p);
}

static void qt_close(struct pair *p)
{
	pair_close(p);
	close(qt.evfd);
	sem_destroy(&qt.in_window);
	sem_destroy(&qt.go);
	sem_destroy(&qt.done);
}

/* One completion event through the loop; a sleeper (this thread) arrives in its window as
 * qt.inject says and stays counted. Returns once conn.c has handled the event. */
static void qt_event(void)
{
	uint64_t one = 1;

	assert_int_equal(write(qt.evfd, &one, sizeof(one)), (ssize_t)sizeof(one));
	if (qt.inject != QT_NONE) {
		qt_timed_wait(&qt.in_window);
		rsk_conn_sleep_begin();
		sem_post(&qt.go);
	}
	qt_timed_wait(&qt.done);
}

/* Is anything counted quiet? harvest_quiet looks at the endpoints only when nquiet > 0. */
static int qt_counted_quiet(void)
{
	int before = __atomic_load_n(&qt.looks, __ATOMIC_SEQ_CST);

	(void)rsk_conn_harvest_quiet();
	return __atomic_load_n(&qt.looks, __ATOMIC_SEQ_CST) != before;
}

/*
 * No sleeper: the event leaves the endpoint quiet and counted; the next sleeper finds it by
 * the count, arms it (exactly once) and uncounts it.
 */
static void test_quiet_taken_by_next_sleeper(void **state)
{
	struct pair p;

	(void)state;
	qt_open(&p, QT_NONE);
	assert_false(qt_counted_quiet());
	qt_event();
	assert_int_equal(qt.quiet, 1); /* nobody sleeps: no event needed */
	assert_true(qt_counted_quiet());
	rsk_conn_sleep_begin();
	assert_int_equal(qt.quiet, 0); /* armed before the sleep */
	assert_int_equal(qt.takes, 1);
	rsk_conn_sleep_end();
	assert_false(qt_counted_quiet()); /* nquiet back to 0 */
	qt_close(&p);
}

/*
 * A sleeper arrives while the loop is inside the event, before or after the endpoint goes
 * quiet: either the sleeper sees it counted and quiet and arms it, or the loop sees the
 * sleeper after it went quiet and arms it. Never quiet under a sleeper; armed once; the
 * count back to 0.
 */
static void test_quiet_sleeper_in_window(void **state)
{
	static const int when[] = {QT_BEFORE, QT_AFTER};
	struct pair p;
	size_t k;

	(void)state;
	for (k = 0; k < sizeof(when) / sizeof(when[0]); k++) {
		qt_open(&p, when[k]);
		qt_event();
		assert_int_equal(qt.quiet, 0);
		assert_int_equal(qt.takes, 1);
		assert_false(qt_counted_quiet());
		rsk_conn_sleep_end();
		qt_close(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_in_order),
		cmocka_unit_test(test_readable_on_arrival),
		cmocka_unit_test(test_show_initial_data_first),
		cmocka_unit_test(test_writable_follows_credits),
		cmocka_unit_test(test_release_fin_after_data),
		cmocka_unit_test(test_release_exiting_keeps_memory),
		cmocka_unit_test(test_release_unread_resets),
		cmocka_unit_test(test_release_unharvested_resets),
		cmocka_unit_test(test_release_linger0_resets),
		cmocka_unit_test(test_peer_died_resets),
		cmocka_unit_test(test_peer_died_quietly_ends),
		cmocka_unit_test(test_holders_prefork),
		cmocka_unit_test(test_take_tcp),
		cmocka_unit_test(test_discard_and_release_close_everything),
		cmocka_unit_test(test_region_reused_clean),
		cmocka_unit_test(test_region_pool_bounded),
		cmocka_unit_test(test_region_pool_fork),
		cmocka_unit_test(test_hello_flush_await),
		cmocka_unit_test(test_registry),
		cmocka_unit_test(test_tick_posts_stage),
		cmocka_unit_test(test_lock_owner_died),
		cmocka_unit_test(test_lazy_stale_token),
		cmocka_unit_test(test_lazy_ends_with_the_stream),
		cmocka_unit_test(test_quiet_taken_by_next_sleeper),
		cmocka_unit_test(test_quiet_sleeper_in_window),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
