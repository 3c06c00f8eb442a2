/*
 * Unit tests for core/conn/relay.c: a connection turned into a plain byte pipe through its
 * readiness socketpair, the event loop moving the bytes between the pipe and the stream. The
 * relay only uses the stream, the endpoint's readiness block and the ctl end, so it runs
 * here over a shm endpoint (a verbs one needs a device: the fork-per-connection relay itself
 * is left to the Soft-RoCE guest). The peer is a bare stream on the other side of the ring,
 * whose kicks towards us go nowhere (as a verbs peer's: our own loop wakes us). Checked: the
 * guards (a stream already ended, failed or shown at EOF, a connection this
 * process does not hold), bytes both ways in order through the pipe and counted as the
 * transport's, the ends (the app's SHUT_WR reaches the peer as FIN, the peer's FIN reaches
 * the app as EOF, then the relay releases the connection), a peer's reset ending the pipe
 * both ways, and no readiness token written into the pipe by an event that raced the start.
 *
 * The second fixture is a shm connection as the application has it: the peer is its waker
 * (the peer's kicks write tokens into our app end), so the relay (stdio: fdopen, a dup onto
 * 0-2) gets a pipe of its own and keeps the app end to read the peer's wake-ups. Checked:
 * megabytes both ways at once, exact and in order, with no token among them; bytes that were
 * in the stream before the start come first; the peer's FIN as EOF while the app still
 * writes; the app's close as FIN; the peer's death (its readiness end closed) as the end of
 * the pipe; the exit flush (what the app wrote reaches the peer, then FIN); the relay's fds
 * closed with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/evloop.h"
#include "base/ready.h"
#include "base/stats.h"
#include "conn/conn.h"
#include "conn/relay.h"
#include "stream/stream.h"
#include "transport/shm.h"
#include "unit.h"
#include "unit_cm.h"

#define NBUF 8
#define BSIZE 4096
#define SHM RDMASOCK_TRANSPORT_SHM

struct fix {
	struct rsk_conn *c;
	int app, ctl, memfd;
	int x; /* the pipe's application side (a relay with a pipe of its own) */
	struct rsk_ep *peer;
	struct rsk_stream pst;
	int released; /* the relay released c (or the test did) */
	int fds;      /* open fds before the fixture */
};

static struct fix F;

static int group_setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	return rsk_evloop_start() < 0 ? -1 : 0;
}

/* Our connection (attached, registered, keeping its ctl end) and the bare peer stream. */
static int setup(void **state)
{
	int tcp = -1;

	(void)state;
	rsk_stats_reset();
	memset(&F, 0, sizeof(F));
	F.fds = ucm_fd_count();
	F.c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(F.c);
	F.memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(F.c), &F.c->ep);
	assert_true(F.memfd >= 0);
	assert_int_equal(rsk_conn_prepare(F.c, -1, &F.app, &F.ctl, &tcp), 0);
	assert_int_equal(rsk_shm_open(F.memfd, RSK_SHM_SERVER, -1, NULL, &F.peer), 0);
	assert_int_equal(rsk_stream_init(&F.pst, F.peer, NULL), 0);
	rsk_stream_set_nodelay(&F.pst, 1);
	assert_int_equal(rsk_conn_attach(F.c, F.app, F.ctl, -1, 1), 0);
	rsk_conn_lock(F.c);
	rsk_stream_set_nodelay(&F.c->st, 1); /* the relay's sends go out at once */
	rsk_conn_unlock(F.c);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* the relay releases the connection itself once it is over (deferred to the loop) */
	if (!F.released && !UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 200))
		rsk_conn_release(F.c);
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000));
	rsk_stream_fini(&F.pst);
	rsk_ep_destroy(F.peer);
	close(F.memfd);
	if (F.app >= 0)
		close(F.app);
	/* the ctl end went with the connection (the loop closes the relay's fds just after it
	 * releases the connection: wait for that, bounded) */
	assert_true(UNIT_WAIT(ucm_fd_count() == F.fds, 2000));
	return 0;
}

/* A relay through the app end itself (our own loop wakes it): no pipe of its own. */
static int start_own(struct rsk_conn *c)
{
	int pipe_app = 7;
	int rc = rsk_relay_start(c, F.app, &pipe_app);

	assert_int_equal(pipe_app, -1);
	return rc;
}


static ssize_t peer_send(const void *buf, size_t len)
{
	struct iovec iov = {(void *)buf, len};

	return rsk_stream_send(&F.pst, &iov, 1, 0);
}

/* Read from the peer stream until @len bytes or its end (bounded). */
static ssize_t peer_recv_all(char *buf, size_t len, int *eof)
{
	int64_t end = rsk_now_ms() + 2000;
	size_t got = 0;
	ssize_t n;

	*eof = 0;
	while (got < len && rsk_now_ms() < end) {
		struct iovec iov = {buf + got, len - got};

		n = rsk_stream_recv(&F.pst, &iov, 1, 0);
		if (n == 0) {
			*eof = 1;
			break;
		}
		if (n == -EAGAIN) {
			unit_sleep_ms(1);
			continue;
		}
		if (n < 0)
			return n;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* The peer's end after its data: FIN (0) within the bound, or -EAGAIN. */
static ssize_t peer_next(void)
{
	int64_t end = rsk_now_ms() + 2000;
	char b[16];
	ssize_t n;

	do {
		struct iovec iov = {b, sizeof(b)};

		n = rsk_stream_recv(&F.pst, &iov, 1, 0);
		if (n == -EAGAIN)
			unit_sleep_ms(1);
	} while (n == -EAGAIN && rsk_now_ms() < end);
	return n;
}

/* Read from the app end (a plain socket now) until @len bytes or EOF (bounded). */
static ssize_t app_recv_all(char *buf, size_t len, int *eof)
{
	struct pollfd p = {.fd = F.app, .events = POLLIN};
	size_t got = 0;
	ssize_t n;

	*eof = 0;
	while (got < len) {
		if (poll(&p, 1, 2000) != 1)
			break;
		n = recv(F.app, buf + got, len - got, MSG_DONTWAIT);
		if (n == 0) {
			*eof = 1;
			break;
		}
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static void test_guards(void **state)
{
	struct rsk_conn *c;

	(void)state;
	/* the stream already failed, or its end was shown: leave it as it is */
	F.c->st.err = -ECONNRESET;
	assert_int_equal(start_own(F.c), -EBUSY);
	F.c->st.err = 0;
	F.c->eof_shown = 1;
	assert_int_equal(start_own(F.c), -EBUSY);
	F.c->eof_shown = 0;
	F.c->hup_shown = 1;
	assert_int_equal(start_own(F.c), -EBUSY);
	F.c->hup_shown = 0;
	/* a connection this process does not hold (never registered) */
	c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(c);
	c->ep = F.c->ep;
	c->ctl_fd = F.ctl;
	assert_int_equal(start_own(c), -ENOENT);
	c->ep = NULL;
	rsk_conn_discard(c, -1, -1, -1);
}

/* Bytes both ways through the pipe, in order, counted; each app write wakes the relay. */
static void test_bytes_both_ways(void **state)
{
	static char up[20000], down[20000], got[20000];
	size_t i, off = 0;
	ssize_t n;
	int eof;

	(void)state;
	for (i = 0; i < sizeof(up); i++) {
		up[i] = (char)(i * 7 + 1);
		down[i] = (char)(i * 11 + 3);
	}
	assert_int_equal(peer_send("early", 5), 5); /* there before the relay starts */
	assert_int_equal(start_own(F.c), 0);
	assert_int_equal(app_recv_all(got, 5, &eof), 5);
	assert_memory_equal(got, "early", 5);
	/* app -> peer: more than one relay buffer's worth would not fit the window at once */
	assert_int_equal(send(F.app, up, 3000, 0), 3000);
	assert_int_equal(peer_recv_all(got, 3000, &eof), 3000);
	assert_memory_equal(got, up, 3000);
	/* peer -> app, woken by the app's next write (the loop pumps both ways each step) */
	while (off < sizeof(down)) {
		n = peer_send(down + off, sizeof(down) - off);
		if (n == -EAGAIN)
			break;
		assert_true(n > 0);
		off += (size_t)n;
	}
	assert_true(off > 0);
	assert_int_equal(send(F.app, up + 3000, 1, 0), 1);
	assert_int_equal(app_recv_all(got, off, &eof), (ssize_t)off);
	assert_memory_equal(got, down, off);
	assert_int_equal(peer_recv_all(got, 1, &eof), 1);
	assert_int_equal(got[0], up[3000]);
	/* the loop counts a send after the stream took it: the peer may have the byte first */
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_stats.bytes_sent[SHM]) == 3001, 2000));
	assert_int_equal(UNIT_LOAD(&rsk_stats.bytes_received[SHM]), 5 + off);
}

/*
 * In-band credits (verbs' mode, set on both shm ends here): a relay that has moved the
 * peer's bytes on and found the stream empty gives their buffers back within the loop's
 * settle window once the application has read them from the pipe, as a reader whose recv
 * found nothing does, so that its death then reads as an EOF at the peer
 * (rsk_stream_peer_unread); bytes still in the pipe keep theirs owed (a death would leave
 * them unread: a reset). Two messages are under half the window: before, a relay returned
 * credits at half a window only, and they stayed owed. (Credits also ride on the relay's
 * data towards the peer, for bytes the pipe may still hold: not covered here.)
 */
static void test_consumed_credits_return(void **state)
{
	char got[16];
	int eof, i;

	(void)state;
	F.c->ep->oob_credits = 0;
	F.peer->oob_credits = 0;
	assert_int_equal(peer_send("one", 3), 3);
	assert_int_equal(peer_send("two", 3), 3);
	assert_true(rsk_stream_peer_unread(&F.pst));
	assert_int_equal(start_own(F.c), 0); /* its first step moves both into the pipe */
	/* Unread by the application: a death now would leave them unread, a reset at the
	 * peer, never an EOF. */
	for (i = 0; i < 50; i++) {
		struct iovec iov = {got, sizeof(got)};

		assert_int_equal(rsk_stream_recv(&F.pst, &iov, 1, 0), -EAGAIN); /* takes in any */
		assert_true(rsk_stream_peer_unread(&F.pst));
		unit_sleep_ms(1);
	}
	/* Read: the application's read wakes the relay, which gives the buffers back. */
	assert_int_equal(app_recv_all(got, 6, &eof), 6);
	assert_memory_equal(got, "onetwo", 6);
	for (i = 0; i < 1000 && rsk_stream_peer_unread(&F.pst); i++) {
		struct iovec iov = {got, sizeof(got)};

		assert_int_equal(rsk_stream_recv(&F.pst, &iov, 1, 0), -EAGAIN);
		unit_sleep_ms(1);
	}
	assert_false(rsk_stream_peer_unread(&F.pst));
	/* still a working pipe, both ways */
	assert_int_equal(send(F.app, "up", 2, 0), 2);
	assert_int_equal(peer_recv_all(got, 2, &eof), 2);
	assert_memory_equal(got, "up", 2);
	assert_int_equal(peer_send("down", 4), 4);
	assert_int_equal(send(F.app, "!", 1, 0), 1); /* (wakes the relay: the peer's kicks go nowhere) */
	assert_int_equal(app_recv_all(got, 4, &eof), 4);
	assert_memory_equal(got, "down", 4);
}

/* The ends: the peer's FIN is the app's EOF, the app's SHUT_WR the peer's FIN; then the
 * relay is over and releases the connection by itself. */
static void test_orderly_end(void **state)
{
	char b[64];
	int eof;

	(void)state;
	assert_int_equal(start_own(F.c), 0);
	assert_int_equal(peer_send("last", 4), 4);
	assert_int_equal(rsk_stream_shutdown_wr(&F.pst), 0);
	assert_int_equal(send(F.app, "mine", 4, 0), 4);
	assert_int_equal(shutdown(F.app, SHUT_WR), 0);
	assert_int_equal(app_recv_all(b, sizeof(b), &eof), 4);
	assert_memory_equal(b, "last", 4);
	assert_int_equal(eof, 1);
	assert_int_equal(peer_recv_all(b, 4, &eof), 4);
	assert_memory_equal(b, "mine", 4);
	assert_int_equal(peer_next(), 0); /* FIN after everything */
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000)); /* released, relay freed */
	F.released = 1;
}

/* The relay released the connection (the fixture's teardown then has nothing to free). */
static void assert_released(void)
{
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000));
	F.released = 1;
}

/* The app wrote "gone", the peer sent bytes the app never reads, the app closed: the peer
 * gets "gone" (into @b) first. */
static void app_closes_with_unread(char *b, int *eof)
{
	assert_int_equal(start_own(F.c), 0);
	assert_int_equal(send(F.app, "gone", 4, 0), 4);
	assert_int_equal(peer_send("unread", 6), 6);
	close(F.app);
	F.app = -1;
	assert_int_equal(peer_recv_all(b, 4, eof), 4);
}

/* The peer's FIN alone: the app reads EOF while its own direction still flows (half close). */
static void test_half_close(void **state)
{
	char b[16];
	int eof;

	(void)state;
	assert_int_equal(start_own(F.c), 0);
	assert_int_equal(peer_send("x", 1), 1);
	assert_int_equal(rsk_stream_shutdown_wr(&F.pst), 0);
	assert_int_equal(send(F.app, "ping", 4, 0), 4); /* wakes the relay */
	assert_int_equal(app_recv_all(b, sizeof(b), &eof), 1);
	assert_int_equal(eof, 1); /* EOF although the relay goes on (our side is open) */
	assert_int_equal(peer_recv_all(b, 4, &eof), 4);
	assert_memory_equal(b, "ping", 4);
	assert_int_equal(send(F.app, "after", 5, 0), 5);
	assert_int_equal(peer_recv_all(b, 5, &eof), 5);
	assert_memory_equal(b, "after", 5);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), 1); /* not over yet */
	assert_int_equal(shutdown(F.app, SHUT_WR), 0);
	assert_int_equal(peer_next(), 0);
	assert_released();
}

/* A reset from the peer: the pipe ends both ways (EOF, then the app's writes fail). */
static void test_peer_reset(void **state)
{
	char b[8];
	int eof, i, err;
	ssize_t n = 0;

	(void)state;
	assert_int_equal(start_own(F.c), 0);
	rsk_stream_reset(&F.pst);
	/* Wakes the relay, unless the reset woke it first: its loop may run before this send
	 * (a loaded machine), and then the pipe is shut both ways already (EPIPE). */
	n = send(F.app, "x", 1, MSG_NOSIGNAL);
	err = n < 0 ? errno : 0;
	if (n != 1) {
		assert_int_equal(n, -1);
		assert_int_equal(err, EPIPE);
	}
	assert_int_equal(app_recv_all(b, sizeof(b), &eof), 0);
	assert_int_equal(eof, 1);
	for (i = 0; i < 100 && (n = send(F.app, "y", 1, MSG_NOSIGNAL)) > 0; i++)
		unit_sleep_ms(1);
	assert_int_equal(n, -1);
	assert_int_equal(errno, EPIPE);
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000)); /* over: released */
	F.released = 1;
}

/* Every holder closed the app end: the peer reads FIN after the bytes sent before, and the
 * relay releases the connection. */
static void test_app_closes(void **state)
{
	char b[16];
	int eof;

	(void)state;
	app_closes_with_unread(b, &eof);
	assert_memory_equal(b, "gone", 4);
	assert_true(peer_next() <= 0); /* the end (see test_app_closes_unread_resets) */
	assert_released();
}

/*
 * The app end closed while bytes of the peer were still unread (they were in our stream
 * before the close): TCP answers such a close with a reset, and so must the relay, though it
 * had already moved those bytes into its own buffer or the pipe.
 */
static void test_app_closes_unread_resets(void **state)
{
	char b[16];
	int eof;

	(void)state;
	app_closes_with_unread(b, &eof);
	assert_int_equal(peer_next(), -ECONNRESET);
	assert_released();
}

/*
 * An arrival the loop was handling as the relay started: it found no hook yet, then waited
 * for the lock the relay's start held, and wakes the app end after it. That wake must not
 * write a readiness token into what is now a data pipe (the app would read an 'r' first: the
 * vm_engine fork scenario saw "rmessage " for "message 0").
 */
static void test_wake_after_start_writes_no_token(void **state)
{
	char b[16];
	int eof;

	(void)state;
	assert_int_equal(start_own(F.c), 0);
	assert_int_equal(peer_send("abc", 3), 3); /* its kick goes nowhere, as a verbs peer's */
	/* The shm peer's kick marked our app end shown (its token went nowhere); a verbs peer
	 * never touches our readiness block, so it is EMPTY, and our own loop is the waker. */
	__atomic_and_fetch(&rsk_ep_ready(F.c->ep)->rx, ~RSK_RX_SHOWN, __ATOMIC_SEQ_CST);
	rsk_conn_lock(F.c);
	rsk_conn_remote_wake(F.c); /* what that late event does */
	rsk_conn_unlock(F.c);
	assert_int_equal(send(F.app, "x", 1, 0), 1); /* wakes the relay: it pumps both ways */
	assert_int_equal(app_recv_all(b, 3, &eof), 3);
	assert_memory_equal(b, "abc", 3);
	assert_int_equal(peer_recv_all(b, 1, &eof), 1);
	assert_int_equal(b[0], 'x');
}


/* ---- a relay with a pipe of its own (the peer wakes the app end: shm, stdio) ---- */

/* Our connection as a shm application has it: no ctl end of ours; the peer's kicks write
 * tokens into our app end. */
static int setup_pipe(void **state)
{
	int tcp = -1;

	(void)state;
	rsk_stats_reset();
	memset(&F, 0, sizeof(F));
	F.x = -1;
	F.fds = ucm_fd_count();
	F.c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(F.c);
	F.memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(F.c), &F.c->ep);
	assert_true(F.memfd >= 0);
	assert_int_equal(rsk_conn_prepare(F.c, -1, &F.app, &F.ctl, &tcp), 0);
	/* the peer endpoint holds our ctl end (its destroy closes it) */
	assert_int_equal(rsk_shm_open(F.memfd, RSK_SHM_SERVER, F.ctl, NULL, &F.peer), 0);
	assert_int_equal(rsk_stream_init(&F.pst, F.peer, NULL), 0);
	rsk_stream_set_nodelay(&F.pst, 1);
	assert_int_equal(rsk_conn_attach(F.c, F.app, -1, -1, 0), 0);
	rsk_conn_lock(F.c);
	rsk_stream_set_nodelay(&F.c->st, 1);
	rsk_conn_unlock(F.c);
	return 0;
}

static int teardown_pipe(void **state)
{
	(void)state;
	if (F.x >= 0)
		close(F.x); /* every holder of the pipe gone: the relay ends */
	if (!F.released && !UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000))
		rsk_conn_release(F.c);
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_conn_live) == 0, 2000));
	assert_int_equal(rsk_relay_count(), 0);
	if (F.peer != NULL) {
		rsk_stream_fini(&F.pst);
		rsk_ep_destroy(F.peer);
	}
	close(F.memfd);
	if (F.app >= 0)
		close(F.app);
	/* the relay's pipe and app end copy went (closed by the loop just after the release) */
	assert_true(UNIT_WAIT(ucm_fd_count() == F.fds, 2000));
	return 0;
}

/* Start the relay; the application's number now names the pipe (as lifecycle.c's swap does). */
static void start_pipe(void)
{
	assert_int_equal(rsk_relay_start(F.c, F.app, &F.x), 0);
	assert_true(F.x >= 0);
	close(F.app); /* the relay keeps its own copy of the app end */
	F.app = -1;
	assert_int_equal(rsk_relay_count(), 1);
}

/* 2 MiB each way at once, both sides non-blocking and interleaved (bounded by time). */
static void test_pipe_bulk_both_ways(void **state)
{
	const size_t n = 2u << 20;
	char *up = malloc(n), *down = malloc(n), *got_up = malloc(n), *got_down = malloc(n);
	size_t su = 0, sd = 0, ru = 0, rd = 0, i;
	int64_t end = rsk_now_ms() + 20000;
	ssize_t k;

	(void)state;
	assert_true(up && down && got_up && got_down);
	for (i = 0; i < n; i++) {
		up[i] = (char)(i * 7 + (i >> 12));
		down[i] = (char)(i * 13 + (i >> 10));
	}
	start_pipe();
	while ((ru < n || rd < n) && rsk_now_ms() < end) {
		int moved = 0;

		if (su < n && (k = send(F.x, up + su, n - su, MSG_DONTWAIT)) > 0)
			su += (size_t)k, moved = 1;
		if (sd < n && (k = peer_send(down + sd, n - sd)) > 0)
			sd += (size_t)k, moved = 1;
		if (rd < n && (k = recv(F.x, got_down + rd, n - rd, MSG_DONTWAIT)) > 0)
			rd += (size_t)k, moved = 1;
		if (ru < n) {
			struct iovec iov = {got_up + ru, n - ru};

			if ((k = rsk_stream_recv(&F.pst, &iov, 1, 0)) > 0)
				ru += (size_t)k, moved = 1;
		}
		if (!moved)
			unit_sleep_ms(1);
	}
	assert_int_equal(ru, n);
	assert_int_equal(rd, n);
	assert_memory_equal(got_up, up, n);
	assert_memory_equal(got_down, down, n); /* no readiness token among the data */
	assert_true(UNIT_WAIT(UNIT_LOAD(&rsk_stats.bytes_sent[SHM]) == n, 2000));
	assert_int_equal(UNIT_LOAD(&rsk_stats.bytes_received[SHM]), n);
	free(up);
	free(down);
	free(got_up);
	free(got_down);
}

/* What the stream held before the start (its token in the app end) comes first. */
static void test_pipe_earlier_bytes_first(void **state)
{
	char b[32];
	int eof;

	(void)state;
	assert_int_equal(peer_send("before;", 7), 7);
	start_pipe();
	assert_int_equal(peer_send("after", 5), 5);
	F.app = F.x; /* app_recv_all reads F.app */
	assert_int_equal(app_recv_all(b, 12, &eof), 12);
	F.app = -1;
	assert_memory_equal(b, "before;after", 12);
}

/* The peer's FIN is the app's EOF; the app's direction goes on, and its close is our FIN. */
static void test_pipe_half_close_then_close(void **state)
{
	char b[16];
	int eof;

	(void)state;
	start_pipe();
	assert_int_equal(peer_send("bye", 3), 3);
	assert_int_equal(rsk_stream_shutdown_wr(&F.pst), 0);
	F.app = F.x;
	assert_int_equal(app_recv_all(b, sizeof(b), &eof), 3);
	F.app = -1;
	assert_int_equal(eof, 1);
	assert_int_equal(send(F.x, "still", 5, 0), 5);
	assert_int_equal(peer_recv_all(b, 5, &eof), 5);
	assert_memory_equal(b, "still", 5);
	close(F.x);
	F.x = -1;
	assert_int_equal(peer_next(), 0); /* FIN */
	assert_released();
}

/* The peer died (its readiness end closed, as its kernel does): the pipe ends, the relay
 * releases the connection. */
static void test_pipe_peer_dies(void **state)
{
	char b[16];
	int eof;

	(void)state;
	start_pipe();
	assert_int_equal(peer_send("last", 4), 4);
	rsk_stream_fini(&F.pst);
	rsk_ep_destroy(F.peer); /* closes our ctl end: the app end hangs up */
	F.peer = NULL;
	F.app = F.x;
	assert_int_equal(app_recv_all(b, sizeof(b), &eof), 4); /* its data first */
	F.app = -1;
	assert_memory_equal(b, "last", 4);
	assert_int_equal(eof, 1);
	assert_int_equal(UNIT_LOAD(&rsk_conn_live), 1); /* ours is open until the app closes */
	close(F.x);
	F.x = -1;
	assert_released();
}

/* At exit, what the app wrote into the pipe (the loop may not have moved it yet) reaches
 * the peer, then FIN. (Within the peer's window: this peer reads only afterwards.) */
static void test_pipe_exit_flush(void **state)
{
	static char buf[(NBUF - 2) * BSIZE], got[sizeof(buf)];
	size_t i, off = 0;
	ssize_t k;
	int eof;

	(void)state;
	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 31 + 5);
	start_pipe();
	while (off < sizeof(buf) && (k = send(F.x, buf + off, sizeof(buf) - off, MSG_DONTWAIT)) > 0)
		off += (size_t)k;
	assert_true(off > 0);
	rsk_relay_exit_all();
	assert_int_equal(rsk_relay_count(), 0);
	assert_int_equal(peer_recv_all(got, off, &eof), (ssize_t)off);
	assert_memory_equal(got, buf, off);
	assert_int_equal(peer_next(), 0);
	F.released = 1;
}

/* exec hand-off: a paused relay moves nothing; resumed, it moves what came meanwhile. Its
 * fds for a helper: the pipe, the app end copy and the endpoint's (the peer's ctl end). */
static void test_pipe_pause_resume_fds(void **state)
{
	int fds[8], one;
	char b[8];
	int eof;

	(void)state;
	start_pipe();
	assert_int_equal(rsk_relay_fds(fds, 8), 0); /* only a paused relay's are a helper's */
	assert_int_equal(rsk_relay_pause_all(), 1);
	/* the pipe and the app end; our endpoint holds no fd here (its kicks go nowhere) */
	assert_int_equal(rsk_relay_fds(fds, 8), 2);
	assert_int_equal(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(fcntl(fds[1], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	rsk_shm_set_peer_ctl(F.c->ep, 1000);
	assert_int_equal(rsk_relay_fds(fds, 8), 3);
	assert_int_equal(fds[2], 1000);
	rsk_shm_set_peer_ctl(F.c->ep, -1);
	assert_int_equal(rsk_relay_fds(&one, 1), 0); /* no room for a whole relay's: none */
	assert_int_equal(send(F.x, "held", 4, 0), 4);
	assert_int_equal(peer_send("back", 4), 4);
	unit_sleep_ms(50);
	{
		struct iovec iov = {b, sizeof(b)};

		assert_int_equal(rsk_stream_recv(&F.pst, &iov, 1, 0), -EAGAIN);
	}
	assert_int_equal(recv(F.x, b, sizeof(b), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
	rsk_relay_resume_all();
	assert_int_equal(peer_recv_all(b, 4, &eof), 4);
	assert_memory_equal(b, "held", 4);
	F.app = F.x;
	assert_int_equal(app_recv_all(b, 4, &eof), 4);
	F.app = -1;
	assert_memory_equal(b, "back", 4);
}

/* A forked child holds no relay: its copies of the relay's fds go (the parent's pipe end is
 * then the only one: the application's side reads EOF when the parent's relay ends). */
static int child_forgets(void *arg)
{
	int fds[8], n;

	(void)arg;
	(void)rsk_relay_pause_all(); /* (the child's copy of the list) to name the fds */
	n = rsk_relay_fds(fds, 8);
	rsk_evloop_atfork_child();
	rsk_conn_atfork_child();
	rsk_relay_atfork_child();
	if (rsk_relay_count() != 0 || UNIT_LOAD(&rsk_conn_live) != 0)
		return 1;
	return n == 2 && fcntl(fds[0], F_GETFD) < 0 && fcntl(fds[1], F_GETFD) < 0 ? 0 : 2;
}

static void test_pipe_fork_child_forgets(void **state)
{
	(void)state;
	start_pipe();
	assert_int_equal(unit_in_child(child_forgets, NULL, 5000), 0);
	assert_int_equal(rsk_relay_count(), 1); /* the parent's goes on */
	assert_int_equal(send(F.x, "z", 1, 0), 1);
	{
		char b;
		int eof;

		assert_int_equal(peer_recv_all(&b, 1, &eof), 1);
		assert_int_equal(b, 'z');
	}
}

/*
 * A relay handed to a helper process (calls/lifecycle.c forks it): taken, it moves nothing
 * here, cannot be taken twice, and is no exec's to hand over; its fds are named for the
 * helper. No helper came (hand_failed): it goes on here with what came meanwhile. Once the
 * helper exists (hand_done), this process forgets the relay and its connection (our copies
 * of their fds close) without ending the stream: the peer reads neither FIN nor reset.
 */
static void test_pipe_hand_off(void **state)
{
	struct iovec iov;
	char b[8];
	int fds[8], eof;

	(void)state;
	start_pipe();
	assert_int_equal(rsk_relay_fds(fds, 8), 0);
	assert_int_equal(rsk_relay_hand_prepare(), 1);
	assert_int_equal(rsk_relay_hand_prepare(), 0);
	assert_int_equal(rsk_relay_fds(fds, 8), 2);
	assert_int_equal(send(F.x, "held", 4, 0), 4);
	unit_sleep_ms(50);
	iov.iov_base = b;
	iov.iov_len = sizeof(b);
	assert_int_equal(rsk_stream_recv(&F.pst, &iov, 1, 0), -EAGAIN);
	rsk_relay_hand_failed();
	assert_int_equal(peer_recv_all(b, 4, &eof), 4);
	assert_memory_equal(b, "held", 4);
	assert_int_equal(rsk_relay_hand_prepare(), 1);
	assert_int_equal(rsk_relay_pause_all(), 0); /* a handed relay is no exec's */
	rsk_relay_hand_done();
	assert_int_equal(rsk_relay_fds(fds, 8), 0);
	assert_true(UNIT_WAIT(rsk_relay_count() == 0 && UNIT_LOAD(&rsk_conn_live) == 0, 2000));
	F.released = 1;
	assert_int_equal(recv(F.x, b, sizeof(b), 0), 0); /* our pipe end went */
	unit_sleep_ms(50);
	assert_int_equal(rsk_stream_recv(&F.pst, &iov, 1, 0), -EAGAIN); /* the stream goes on */
}

#define P(f) cmocka_unit_test_setup_teardown(f, setup_pipe, teardown_pipe)

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_guards),
		T(test_bytes_both_ways),
		T(test_consumed_credits_return),
		T(test_orderly_end),
		T(test_half_close),
		T(test_peer_reset),
		T(test_app_closes),
		T(test_app_closes_unread_resets),
		T(test_wake_after_start_writes_no_token),
		P(test_pipe_bulk_both_ways),
		P(test_pipe_earlier_bytes_first),
		P(test_pipe_half_close_then_close),
		P(test_pipe_peer_dies),
		P(test_pipe_exit_flush),
		P(test_pipe_pause_resume_fds),
		P(test_pipe_fork_child_forgets),
		P(test_pipe_hand_off),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
