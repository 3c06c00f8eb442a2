/*
 * Accelerated connections (see conn.h): shared-region allocation, the process-shared lock,
 * readiness synchronisation (the arm/kick protocol of ready.h seen from our side), and the
 * orderly or abortive end of a stream.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "conn.h"
#include "credit.h"
#include "hs.h"
#include "log.h"
#include "monitor.h"
#include "ready.h"
#include "real.h"
#include "transport/shm.h"

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
 * must never block: every token written to our app end is counted (before it is written)
 * and every unblock of it is counted (after it is done), so we always know whether the
 * kernel object shows a wake we have already consumed.
 */

/*
 * A waker clears our armed bit first and counts only when it is done. Once we see our bit
 * cleared by somebody else, we wait for that count before touching the app end again:
 * otherwise its drain could hit the fill we are about to make (and the edge-triggered
 * wake-up it produces would be lost), or its token could arrive after we drained.
 */
static void rsk_conn_settle(struct rsk_conn *c, unsigned int what, uint32_t seen)
{
	int spins;

	for (spins = 0; spins < 1000000 && rsk_ep_wakes(c->ep, what) == seen; spins++)
		rsk_cpu_relax();
}

/* We armed @what and now find the event ourselves: take the wake back, or let it land. */
static void rsk_conn_unarm(struct rsk_conn *c, unsigned int what, uint32_t seen)
{
	if (rsk_ep_disarm(c->ep, what))
		rsk_ep_wake_self(c->ep, what); /* nobody kicked us: do what a kick would have */
	else
		rsk_conn_settle(c, what, seen);
}

/* Drain exactly the tokens committed so far (a token may still be on its way: wait briefly). */
static void rsk_conn_drain_tokens(struct rsk_conn *c, int app_fd)
{
	uint32_t target = rsk_ep_wakes(c->ep, RSK_WAIT_RX);
	uint32_t due = target - c->raised_seen;

	if (due > 0 && rsk_ready_take(app_fd, (int)due) < (int)due)
		rsk_dbg("readiness: %u token(s) never arrived (waker died?)", due);
	c->raised_seen = target;
}

/* Drain, arm, re-check: afterwards either a token is due or the data is visible. */
static void rsk_conn_lower(struct rsk_conn *c, int app_fd)
{
	if (c->rx_lowered && !(rsk_ep_armed(c->ep) & RSK_WAIT_RX))
		rsk_conn_settle(c, RSK_WAIT_RX, c->raised_seen);
	rsk_conn_drain_tokens(c, app_fd);
	rsk_ep_arm(c->ep, RSK_WAIT_RX);
	c->rx_lowered = 1;
	(void)rsk_stream_progress(&c->st);
	if (rsk_stream_readable(&c->st)) {
		rsk_conn_unarm(c, RSK_WAIT_RX, c->raised_seen);
		c->rx_lowered = 0;
	}
}

/* Count, fill, arm, re-check (the order matters: see rsk_shm_wake). */
static void rsk_conn_block(struct rsk_conn *c, int app_fd)
{
	if (c->tx_blocked && !(rsk_ep_armed(c->ep) & RSK_WAIT_TX))
		rsk_conn_settle(c, RSK_WAIT_TX, c->unblocked_seen);
	c->unblocked_seen = rsk_ep_wakes(c->ep, RSK_WAIT_TX);
	rsk_ready_block(app_fd);
	rsk_ep_arm(c->ep, RSK_WAIT_TX);
	c->tx_blocked = 1;
	(void)rsk_stream_progress(&c->st);
	if (rsk_stream_writable(&c->st)) {
		rsk_conn_unarm(c, RSK_WAIT_TX, c->unblocked_seen);
		c->tx_blocked = 0;
	}
}

static void rsk_conn_sync_rx(struct rsk_conn *c, int app_fd)
{
	if (rsk_stream_readable(&c->st)) {
		if (c->rx_lowered)
			rsk_conn_unarm(c, RSK_WAIT_RX, c->raised_seen);
		c->rx_lowered = 0;
		return;
	}
	/* Steady: lowered, still armed, and no token committed since we drained. */
	if (c->rx_lowered && (rsk_ep_armed(c->ep) & RSK_WAIT_RX) &&
	    rsk_ep_wakes(c->ep, RSK_WAIT_RX) == c->raised_seen)
		return;
	rsk_conn_lower(c, app_fd);
}

static void rsk_conn_sync_tx(struct rsk_conn *c, int app_fd)
{
	if (rsk_stream_writable(&c->st)) {
		if (c->tx_blocked)
			rsk_conn_unarm(c, RSK_WAIT_TX, c->unblocked_seen);
		c->tx_blocked = 0;
		return;
	}
	if (c->tx_blocked && (rsk_ep_armed(c->ep) & RSK_WAIT_TX) &&
	    rsk_ep_wakes(c->ep, RSK_WAIT_TX) == c->unblocked_seen)
		return;
	rsk_conn_block(c, app_fd);
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
	if (!rsk_shm_peer_closed_cleanly(c->ep))
		rsk_stream_set_error(&c->st, -ECONNRESET);
	if (c->st.err && !c->hup_shown) {
		c->hup_shown = 1;
		rsk_ready_hup(c->ctl_fd);
	} else if (!c->st.err && !c->eof_shown && c->st.fin_rcvd) {
		c->eof_shown = 1;
		rsk_ready_eof(c->ctl_fd);
	}
}

void rsk_conn_hold(struct rsk_conn *c)
{
	__atomic_add_fetch(&c->holders, 1, __ATOMIC_ACQ_REL);
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
	rsk_shm_mark_fin(c->ep); /* our TCP placeholder closing now means "closed", not "died" */
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
	rsk_conn_unlock(c);
	munmap(c, c->map_len);
}
