/*
 * Accelerated connections (see conn.h): shared-region allocation, the process-shared lock,
 * readiness synchronisation (the arm/kick protocol of ready.h seen from our side), and the
 * orderly or abortive end of a stream.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "compiler.h"
#include "conn.h"
#include "credit.h"
#include "hs.h"
#include "log.h"
#include "monitor.h"
#include "ready.h"
#include "real.h"
#include "relay.h"
#include "transport/shm.h"
#include "transport/verbs.h"

int rsk_conn_live;

static size_t rsk_conn_ep_off(void)
{
	return 0;
}

static size_t rsk_conn_rxq_off(void)
{
	return (rsk_shm_ep_size() + 63) & ~(size_t)63;
}

struct rsk_conn *rsk_conn_alloc(uint32_t nbuf)
{
	size_t len = sizeof(struct rsk_conn) + rsk_conn_rxq_off() + nbuf * sizeof(struct rsk_rxmsg);
	pthread_mutexattr_t a;
	struct rsk_conn *c;

	len = (len + 4095) & ~(size_t)4095;
	c = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->map_len = len;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&c->lock, &a);
	pthread_mutexattr_destroy(&a);
	c->holders = 1;
	c->ctl_fd = c->tcp_fd = c->offer_fd = -1;
	return c;
}

void *rsk_conn_ep_mem(struct rsk_conn *c)
{
	return c->mem + rsk_conn_ep_off();
}

struct rsk_rxmsg *rsk_conn_rxq(struct rsk_conn *c)
{
	return (struct rsk_rxmsg *)(c->mem + rsk_conn_rxq_off());
}

int rsk_conn_prepare(struct rsk_conn *c, int fd, int *app, int *ctl, int *tcp)
{
	int rc = rsk_stream_init(&c->st, c->ep, rsk_conn_rxq(c));

	if (rc == 0)
		rc = rsk_ready_pair(app, ctl);
	if (rc == 0 && (*ctl = rsk_fd_hide(*ctl)) < 0)
		rc = *ctl;
	if (rc == 0 && (*tcp = rsk_fd_hide_dup(fd)) < 0)
		rc = *tcp;
	return rc;
}

void rsk_conn_discard(struct rsk_conn *c, int app, int ctl, int tcp)
{
	if (app >= 0)
		RSK_REAL(close)(app);
	if (ctl >= 0)
		rsk_fd_unhide_close(ctl);
	if (tcp >= 0)
		rsk_fd_unhide_close(tcp);
	if (c->ep != NULL)
		rsk_ep_destroy(c->ep);
	munmap(c, c->map_len);
}

void rsk_conn_lock(struct rsk_conn *c)
{
	/* A holder died inside the lock: the state is still consistent enough to reset. */
	if (pthread_mutex_lock(&c->lock) == EOWNERDEAD) {
		rsk_stream_set_error(&c->st, -ECONNRESET);
		pthread_mutex_consistent(&c->lock);
	}
}

void rsk_conn_unlock(struct rsk_conn *c)
{
	pthread_mutex_unlock(&c->lock);
}

/*
 * Readiness is kept exact, because a program that select()s and then does a blocking read
 * must never block, and an edge-triggered one must see every transition. The app end is
 * readable exactly while a token waits in it (RX) and unwritable exactly while our fill sits
 * in it (TX). Wakes are counted in shared memory (tokens before they are written, unblocks
 * after they are done), and the ledger below tells us which count to wait for before we
 * touch the app end again, so a wake in flight never lands on the wrong state.
 */
struct rsk_ledger {
	unsigned int bit;
	int *pending;
	uint32_t *expect;
};

static struct rsk_ledger rsk_ledger_of(struct rsk_conn *c, unsigned int bit)
{
	if (bit == RSK_WAIT_RX)
		return (struct rsk_ledger){bit, &c->rx_pending, &c->rx_expect};
	return (struct rsk_ledger){bit, &c->tx_pending, &c->tx_expect};
}

static void rsk_arm(struct rsk_conn *c, unsigned int bit)
{
	struct rsk_ledger l = rsk_ledger_of(c, bit);

	if (*l.pending)
		return;
	*l.pending = 1;
	rsk_ep_arm(c->ep, bit);
}

/* Has a kick consumed our pending arm? Then its wake is on the way: expect it. */
static void rsk_arm_resolve(struct rsk_conn *c, unsigned int bit)
{
	struct rsk_ledger l = rsk_ledger_of(c, bit);

	if (*l.pending && !(rsk_ep_armed(c->ep) & bit)) {
		*l.pending = 0;
		(*l.expect)++;
	}
}

/* Withdraw a pending arm. Returns 1 if it was still ours (no kick will come for it). */
static int rsk_arm_take_back(struct rsk_conn *c, unsigned int bit)
{
	struct rsk_ledger l = rsk_ledger_of(c, bit);

	if (!*l.pending)
		return 0;
	*l.pending = 0;
	if (rsk_ep_disarm(c->ep, bit))
		return 1;
	(*l.expect)++; /* a kicker beat us to it */
	return 0;
}

static void rsk_wake_self(struct rsk_conn *c, unsigned int bit)
{
	(*rsk_ledger_of(c, bit).expect)++;
	rsk_ep_wake_self(c->ep, bit);
}

/* Wait until every wake we expect has been counted (a kicker is between its steps). */
static void rsk_settle(struct rsk_conn *c, unsigned int bit)
{
	uint32_t expect = *rsk_ledger_of(c, bit).expect;
	int spins;

	for (spins = 0; spins < 1000000 && (int32_t)(rsk_ep_wakes(c->ep, bit) - expect) < 0;
	     spins++)
		rsk_cpu_relax();
}

/* Tokens committed to the app end and not yet taken. */
static uint32_t rsk_tokens(struct rsk_conn *c)
{
	return rsk_ep_wakes(c->ep, RSK_WAIT_RX) - c->rx_drained;
}

/* Readable: make sure a token is there or coming, and stay armed so each new arrival makes
 * a new edge (as TCP wakes readers on every arrival). */
static void rsk_conn_show_readable(struct rsk_conn *c)
{
	rsk_arm_resolve(c, RSK_WAIT_RX);
	if (rsk_tokens(c) == 0 && (int32_t)(c->rx_expect - rsk_ep_wakes(c->ep, RSK_WAIT_RX)) <= 0 &&
	    (!c->rx_pending || rsk_arm_take_back(c, RSK_WAIT_RX)))
		rsk_wake_self(c, RSK_WAIT_RX);
	rsk_arm(c, RSK_WAIT_RX);
}

static void rsk_conn_sync_rx(struct rsk_conn *c, int app_fd)
{
	uint32_t due;

	if (rsk_stream_readable(&c->st)) {
		rsk_conn_show_readable(c);
		return;
	}
	rsk_arm_resolve(c, RSK_WAIT_RX);
	if (c->rx_pending && rsk_tokens(c) == 0 &&
	    (int32_t)(rsk_ep_wakes(c->ep, RSK_WAIT_RX) - c->rx_expect) >= 0)
		return; /* steady: armed, nothing shown, nothing in flight */
	/* Lower: let wakes in flight land, take exactly the committed tokens, arm, re-check. */
	rsk_settle(c, RSK_WAIT_RX);
	due = rsk_tokens(c);
	if (due > 0 && rsk_ready_take(app_fd, (int)due) < (int)due)
		rsk_dbg("readiness: %u token(s) never arrived (waker died?)", due);
	c->rx_drained += due;
	rsk_arm(c, RSK_WAIT_RX);
	(void)rsk_stream_progress(&c->st);
	if (rsk_stream_readable(&c->st))
		rsk_conn_show_readable(c);
}

static void rsk_conn_sync_tx(struct rsk_conn *c, int app_fd)
{
	rsk_arm_resolve(c, RSK_WAIT_TX);
	if (rsk_stream_writable(&c->st)) {
		/* Unblock: by a kick that consumed our arm (expected), or ourselves. */
		if (c->tx_blocked && c->tx_pending && rsk_arm_take_back(c, RSK_WAIT_TX))
			rsk_wake_self(c, RSK_WAIT_TX);
		c->tx_blocked = 0;
		return;
	}
	if (c->tx_blocked && c->tx_pending)
		return; /* steady: filled and armed */
	/* Block: no unblock may be in flight when we fill, or it would drain the new fill. */
	rsk_settle(c, RSK_WAIT_TX);
	rsk_ready_block(app_fd);
	c->tx_blocked = 1;
	rsk_arm(c, RSK_WAIT_TX);
	(void)rsk_stream_progress(&c->st);
	if (rsk_stream_writable(&c->st))
		rsk_conn_sync_tx(c, app_fd);
}

void rsk_conn_sync(struct rsk_conn *c, int app_fd)
{
	if (c->st.err) {
		if (!c->hup_shown) {
			c->hup_shown = 1;
			rsk_ready_hup(c->ctl_fd); /* readable, writable (errors), HUP */
		}
		return;
	}
	if ((c->st.fin_rcvd || c->st.shut_rd) && !c->eof_shown) {
		c->eof_shown = 1;
		rsk_ready_eof(c->ctl_fd); /* readable + RDHUP for good */
	}
	if (c->st.fin_rcvd && (c->st.shut_wr || c->st.fin_sent) && !c->hup_shown) {
		c->hup_shown = 1; /* both directions done: HUP, as TCP reports it */
		rsk_ready_hup(c->ctl_fd);
	}
	if (!c->eof_shown)
		rsk_conn_sync_rx(c, app_fd);
	rsk_conn_sync_tx(c, app_fd);
}

int rsk_conn_resolve(struct rsk_conn *c, int wait_ms)
{
	int ctl, rc;

	if (!c->answer_pending)
		return 0;
	rc = rsk_hs_read_answer(c->offer_fd, wait_ms, &ctl);
	if (rc == -ETIMEDOUT)
		return rc;
	c->answer_pending = 0;
	rsk_fd_unhide_close(c->offer_fd);
	c->offer_fd = -1;
	if (rc < 0) {
		rsk_stream_set_error(&c->st, -ECONNRESET); /* the server declined after all */
		return rc;
	}
	rsk_shm_set_peer_ctl(c->ep, ctl); /* hidden on arrival (hs.c) */
	return 0;
}

void rsk_conn_peer_gone(struct rsk_conn *c)
{
	(void)rsk_stream_progress(&c->st);
	/* shm knows whether the peer closed in order; over verbs its FIN must have arrived */
	if (c->transport == RDMASOCK_TRANSPORT_SHM ? !rsk_shm_peer_closed_cleanly(c->ep)
						   : !c->st.fin_rcvd)
		rsk_stream_set_error(&c->st, -ECONNRESET);
	if (c->st.err && !c->hup_shown) {
		c->hup_shown = 1;
		rsk_ready_hup(c->ctl_fd);
	} else if (!c->st.err && !c->eof_shown && c->st.fin_rcvd) {
		c->eof_shown = 1;
		rsk_ready_eof(c->ctl_fd);
	}
}

void rsk_conn_remote_wake(struct rsk_conn *c)
{
	unsigned int want = 0, got;

	(void)rsk_stream_progress(&c->st);
	if (c->st.err) {
		if (!c->hup_shown) {
			c->hup_shown = 1;
			rsk_ready_hup(c->ctl_fd);
		}
		return;
	}
	if (c->st.fin_rcvd && !c->eof_shown) {
		c->eof_shown = 1;
		rsk_ready_eof(c->ctl_fd);
	}
	/* What a peer's kick would do on shm: consume the arms whose event happened and wake
	 * them; the ledger (rsk_arm_resolve) then expects exactly these wakes. */
	if (rsk_stream_readable(&c->st))
		want |= RSK_WAIT_RX;
	if (rsk_stream_writable(&c->st))
		want |= RSK_WAIT_TX;
	got = want ? rsk_ep_disarm(c->ep, want) : 0;
	if (got)
		rsk_ep_wake_self(c->ep, got);
}

void rsk_conn_hold(struct rsk_conn *c)
{
	__atomic_add_fetch(&c->holders, 1, __ATOMIC_ACQ_REL);
}

#define RSK_VERBS_LINGER_MS 1000

/*
 * verbs: disconnecting the QP flushes what is still in its send queue. Like TCP's close,
 * which keeps sending in the background, wait (bounded) until the FIN is posted (it may
 * need a credit back) and every send completed. Lock held; released while sleeping.
 */
static void rsk_conn_verbs_linger(struct rsk_conn *c)
{
	struct pollfd p = {.fd = rsk_verbs_cq_fd(c->ep), .events = POLLIN};
	struct pollfd peer = {.fd = c->tcp_fd, .events = POLLRDHUP};
	int64_t end = rsk_now_ms() + RSK_VERBS_LINGER_MS;

	for (;;) {
		(void)rsk_stream_progress(&c->st);
		if (c->st.err || ((c->st.fin_sent || !c->st.fin_pending) &&
				  rsk_verbs_sends_done(c->ep)))
			return;
		/* The peer closed its TCP end: it reads nothing more, so nothing is worth waiting
		 * for (its QP is gone too; our sends would only time out). */
		if (RSK_REAL(poll)(&peer, 1, 0) > 0 && (peer.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return;
		if (rsk_now_ms() >= end)
			return;
		rsk_conn_unlock(c);
		if (RSK_REAL(poll)(&p, 1, 10) > 0)
			rsk_verbs_cq_event(c->ep);
		rsk_conn_lock(c);
	}
}

/* The last holder: FIN after everything sent (RST if we leave unread data, as TCP does). */
static void rsk_conn_end_stream(struct rsk_conn *c)
{
	if (c->st.err == 0) {
		if (c->st.rx_bytes > 0)
			rsk_stream_reset(&c->st);
		else
			(void)rsk_stream_shutdown_wr(&c->st);
	}
	if (c->transport == RDMASOCK_TRANSPORT_VERBS && !rsk_verbs_ep_foreign(c->ep))
		rsk_conn_verbs_linger(c);
	/* Our TCP placeholder closing now means "closed", not "died" -- but only if our FIN is
	 * really in the peer's ring; otherwise the peer must see a reset, never wait. */
	if (c->st.err == 0 && c->st.fin_sent && c->transport == RDMASOCK_TRANSPORT_SHM)
		rsk_shm_mark_fin(c->ep);
	c->ep->ops->shutdown(c->ep); /* and the peer's sends fail with EPIPE, as after TCP's RST */
}

static void rsk_close_hidden(int fd)
{
	if (fd >= 0)
		rsk_fd_unhide_close(fd);
}

void rsk_conn_release(struct rsk_conn *c)
{
	int last;

	rsk_monitor_del(c); /* before our lock: the monitor takes its lock, then ours */
	__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	rsk_conn_lock(c);
	(void)rsk_stream_push(&c->st); /* another holder's monitor may not know of the stage */
	last = __atomic_sub_fetch(&c->holders, 1, __ATOMIC_ACQ_REL) == 0;
	rsk_dbg("connection %p released here, %s", (void *)c, last ? "the last holder" : "still held");
	if (last)
		rsk_conn_end_stream(c);
	/* The fd numbers are the same in every holder (inherited): each process closes its own
	 * copies and leaves the shared fields alone for the others. */
	rsk_close_hidden(c->tcp_fd);
	rsk_close_hidden(c->offer_fd);
	rsk_close_hidden(c->ctl_fd);
	rsk_ep_destroy(c->ep); /* unmaps the rings and closes our copy of the peer's fd */
	if (last)
		rsk_stream_fini(&c->st);
	rsk_relay_free(c);
	rsk_conn_unlock(c);
	munmap(c, c->map_len);
}
