/*
 * Readiness socketpair operations and the protocol on struct rsk_ready_state (see ready.h).
 * Every call is non-blocking and costs at most a syscall or two; callers make them only on
 * state transitions, never per byte. Each state word packs a count (upper bits) with the
 * state (bit 0), so that one compare-and-swap both moves the state and tells how many
 * tokens (or drains) belong to the state being left.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>
#include <unistd.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "compiler.h"
#include "proc.h"
#include "ready.h"
#include "sys.h"

#define RSK_APP_END_PREFIX "rsk1/a/"

/* Name the app end so a later program image (after exec) can recognise it (see below). */
static void rsk_ready_mark(int fd)
{
	static unsigned int seq;
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	int n;

	n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, RSK_APP_END_PREFIX "%d/%u",
		     (int)rsk_proc_pid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	(void)rsk_sys_bind(fd, (struct sockaddr *)&un,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n));
}

/* The kernel's default send buffer of a unix socket (what a self-open restores). */
static int rsk_ready_sndbuf_default;

int rsk_ready_pair(int *app, int *ctl)
{
	return rsk_ready_pair_flags(app, ctl, 0);
}

int rsk_ready_pair_flags(int *app, int *ctl, int nonblock)
{
	int type = SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0);
	int sv[2], v = 0, rc = rsk_sys_socketpair(AF_UNIX, type, 0, sv);
	socklen_t len = sizeof(v);

	if (rc < 0)
		return rc;
	/* ctl is ours alone and must never block the thread that writes it (the event loop's
	 * relay, a waker); the app end keeps the application's own flags. */
	if (!nonblock && (rc = rsk_sys_fcntl(sv[1], F_SETFL, O_NONBLOCK)) < 0) {
		(void)rsk_sys_close(sv[0]);
		(void)rsk_sys_close(sv[1]);
		return rc;
	}
	rsk_ready_mark(sv[0]);
	if (__atomic_load_n(&rsk_ready_sndbuf_default, __ATOMIC_RELAXED) == 0 &&
	    rsk_sys_getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &v, &len) == 0 && v > 0)
		__atomic_store_n(&rsk_ready_sndbuf_default, v, __ATOMIC_RELAXED);
	*app = sv[0];
	*ctl = sv[1];
	return 0;
}

#define RSK_RW_STATE 1u /* bit 0 of a state word; the rest counts (in steps of 2) */
#define RSK_RW_COUNT(w) ((w) >> 1)

/* ---- the waker's side ---- */

static uint32_t rsk_ready_unread_w(const struct rsk_ready_state *st, uint32_t w)
{
	return RSK_RW_COUNT(w) - __atomic_load_n(&st->dropped, __ATOMIC_SEQ_CST) -
	       __atomic_load_n(&st->taken, __ATOMIC_SEQ_CST);
}

uint32_t rsk_ready_unread(const struct rsk_ready_state *st)
{
	return rsk_ready_unread_w(st, __atomic_load_n(&st->rx, __ATOMIC_SEQ_CST));
}

/* A sleeping owner that no edge was written for since its last report: claim that edge. */
static int rsk_ready_claim_kick(struct rsk_ready_state *st)
{
	uint32_t s = __atomic_load_n(&st->sleep, __ATOMIC_SEQ_CST);

	while (s >= 2 && !(s & RSK_SLEEP_KICKED))
		if (__atomic_compare_exchange_n(&st->sleep, &s, s | RSK_SLEEP_KICKED, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return 1;
	return 0;
}

/* A kick claimed for a state that went EMPTY meanwhile: its SHOW token is the edge, and a
 * SHOW may be unclaimed, so KICKED must not stay (clearing it only risks one more token). */
static void rsk_ready_unkick(struct rsk_ready_state *st)
{
	__atomic_and_fetch(&st->sleep, ~RSK_SLEEP_KICKED, __ATOMIC_SEQ_CST);
}

int rsk_ready_claim_rx(struct rsk_ready_state *st, int edge, uint32_t *word)
{
	uint32_t w = __atomic_load_n(&st->rx, __ATOMIC_SEQ_CST), was;
	int kick = 0;

	for (;;) {
		if (w & RSK_RW_STATE) {
			/* SHOWN: the owner will see the message when it looks, unless it sleeps on
			 * an edge-triggered registration (lazy: its token is stale); an
			 * edge-triggered one that has not drained wants a new edge, but a bounded
			 * number. */
			if (!kick)
				kick = rsk_ready_claim_kick(st);
			if (!kick && (!edge || rsk_ready_unread_w(st, w) >= RSK_READY_EDGE_MAX ||
				      __atomic_load_n(&st->lazy, __ATOMIC_RELAXED)))
				return 0;
		} else if (kick) {
			rsk_ready_unkick(st);
			kick = 0;
		}
		/* EMPTY -> SHOWN, one more token; or the extra edge while SHOWN */
		was = w;
		if (__atomic_compare_exchange_n(&st->rx, &w, (w + 2) | RSK_RX_SHOWN, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			if (word != NULL)
				*word = (was + 2) | RSK_RX_SHOWN;
			if (!(was & RSK_RW_STATE))
				return RSK_CLAIM_SHOW;
			return kick ? RSK_CLAIM_WAKE : RSK_CLAIM_EDGE;
		}
	}
}

void rsk_ready_unclaim_rx(struct rsk_ready_state *st, uint32_t word, int kind)
{
	/* Still exactly our SHOWN: undo the claim whole (state and count), as if it never
	 * was; nobody counted on its token. An edge's SHOWN is not ours (the token of the claim
	 * that showed it is in the app end), so an edge only ever counts as dropped. */
	if (kind == RSK_CLAIM_SHOW &&
	    __atomic_compare_exchange_n(&st->rx, &word, (word - 2) & ~RSK_RW_STATE, 0,
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return;
	/* The owner went EMPTY since (and may wait for our token), or a waker raised on top:
	 * the token is counted and will never come. */
	__atomic_add_fetch(&st->dropped, 1, __ATOMIC_SEQ_CST);
}

void rsk_ready_count_raise(struct rsk_ready_state *st)
{
	uint32_t w = __atomic_load_n(&st->rx, __ATOMIC_SEQ_CST);

	while (!__atomic_compare_exchange_n(&st->rx, &w, (w + 2) | RSK_RX_SHOWN, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}

void rsk_ready_token(struct rsk_ready_state *st, int ctl)
{
	char token = 'r';

	if (rsk_sys_send(ctl, &token, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
		return;
	__atomic_add_fetch(&st->dropped, 1, __ATOMIC_SEQ_CST); /* full (or gone) */
	/* If this was a sleeper's edge (a kick), no edge came: a KICKED left set would stop
	 * every later waker, and the sleeper would sleep through them. Clearing it for a token
	 * that was not the kick only risks one more token. */
	rsk_ready_unkick(st);
}

void rsk_ready_sleep(struct rsk_ready_state *st, int on)
{
	/* seq_cst both ways: the owner's ring recheck comes after, the waker's read after its
	 * post; one of them sees the other. */
	if (on)
		(void)__atomic_add_fetch(&st->sleep, 2, __ATOMIC_SEQ_CST);
	else
		(void)__atomic_sub_fetch(&st->sleep, 2, __ATOMIC_SEQ_CST);
}

void rsk_ready_edge_seen(struct rsk_ready_state *st)
{
	if (__atomic_load_n(&st->sleep, __ATOMIC_SEQ_CST) & RSK_SLEEP_KICKED)
		rsk_ready_unkick(st);
}

uint32_t rsk_ready_trim(struct rsk_ready_state *st, int app, uint32_t keep)
{
	char buf[256];
	uint32_t due = rsk_ready_unread(st);
	ssize_t r;

	if (due <= keep || due >= 1u << 30) /* nothing to take, or a peer writing nonsense */
		return 0;
	due -= keep;
	/* Only counted tokens are ever written, so what is there is at most @due of them. */
	r = rsk_sys_recv(app, buf, due < sizeof(buf) ? due : sizeof(buf), MSG_DONTWAIT);
	if (r <= 0)
		return 0;
	__atomic_add_fetch(&st->taken, (uint32_t)r, __ATOMIC_SEQ_CST);
	return (uint32_t)r;
}

int rsk_ready_claim_tx(struct rsk_ready_state *st)
{
	uint32_t w = __atomic_load_n(&st->tx, __ATOMIC_SEQ_CST);

	while (w & RSK_TX_BLOCKED)
		if (__atomic_compare_exchange_n(&st->tx, &w, (w + 2) & ~RSK_RW_STATE, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return 1;
	return 0;
}

void rsk_ready_flush(int fd)
{
	char buf[4096];
	int i;

	/* Bounded: a fill is a few KiB; tokens are single bytes. */
	for (i = 0; i < 64; i++)
		if (rsk_sys_recv(fd, buf, sizeof(buf), MSG_DONTWAIT) < (ssize_t)sizeof(buf))
			break;
}

void rsk_ready_drain_fill(struct rsk_ready_state *st, int ctl)
{
	rsk_ready_flush(ctl);
	__atomic_add_fetch(&st->unblocked, 1, __ATOMIC_SEQ_CST);
}

void rsk_ready_eof(int ctl)
{
	(void)rsk_sys_shutdown(ctl, SHUT_WR);
}

/* ---- the owner's side ---- */

/*
 * Waiting is what keeps the app end exact: a token that came after we went EMPTY would show
 * readable with nothing to read. A waker stalls between claim and write only for as long as
 * it is preempted; one that is stopped (or gone without closing) is waited for once.
 */
static void rsk_ready_collect_upto(struct rsk_ready_state *st, struct rsk_ready_owner *o,
				   int app, uint32_t w, int wait_ms)
{
	struct pollfd p = {.fd = app, .events = POLLIN};
	char buf[256];
	uint32_t due;
	ssize_t r;
	int waited = 0;

	for (;;) {
		/* Only tokens up to @w's count: later ones belong to a state a waker raised
		 * since, and must stay in the app end. */
		due = rsk_ready_unread_w(st, w);
		if (due == 0 || due >= 1u << 30) { /* nothing, or a peer writing nonsense */
			o->late = 0;
			return;
		}
		if (o->late > due)
			o->late = due;
		r = rsk_sys_recv(app, buf, due < sizeof(buf) ? due : sizeof(buf), MSG_DONTWAIT);
		if (r > 0) {
			__atomic_add_fetch(&st->taken, (uint32_t)r, __ATOMIC_SEQ_CST);
			continue;
		}
		if (r == 0 || (r != -EAGAIN && r != -EINTR))
			return; /* EOF (the partner shut or went) or error: nothing more will come */
		if (due <= o->late || waited >= wait_ms) {
			o->late = due;
			return;
		}
		waited++;
		(void)rsk_sys_poll(&p, 1, 1);
	}
}

void rsk_ready_collect(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		       int wait_ms)
{
	rsk_ready_collect_upto(st, o, app, __atomic_load_n(&st->rx, __ATOMIC_SEQ_CST), wait_ms);
}

int rsk_ready_lower(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		    int (*readable)(void *arg), void *arg)
{
	uint32_t w = __atomic_load_n(&st->rx, __ATOMIC_SEQ_CST);

	do {
		if (!(w & RSK_RX_SHOWN)) {
			/* already EMPTY: the waker raises with its next message; a late token of
			 * an earlier state may have come since */
			if (rsk_unlikely(o->late))
				rsk_ready_collect_upto(st, o, app, w, 0);
			return 1;
		}
	} while (!__atomic_compare_exchange_n(&st->rx, &w, w & ~RSK_RW_STATE, 0, __ATOMIC_SEQ_CST,
					      __ATOMIC_SEQ_CST));
	/* Published EMPTY. A message that came just before must not be left unshown. */
	if (readable(arg)) {
		uint32_t e = w & ~RSK_RW_STATE;

		/* Back to SHOWN with our tokens in place, unless the waker raised already. */
		(void)__atomic_compare_exchange_n(&st->rx, &e, w, 0, __ATOMIC_SEQ_CST,
						  __ATOMIC_SEQ_CST);
		return 0;
	}
	/* Every token up to the count we left belongs to the old state: take exactly those
	 * (fewer only when the partner is gone or shut: the stream learns that elsewhere). */
	rsk_ready_collect_upto(st, o, app, w, RSK_READY_LATE_MS);
	return 1;
}

/* SO_SNDBUF of the app end: its minimum makes a fill unwritable, the default undoes it. */
static void rsk_ready_sndbuf(struct rsk_ready_owner *o, int app, int small)
{
	if (o->small == small)
		return;
	int big = __atomic_load_n(&rsk_ready_sndbuf_default, __ATOMIC_RELAXED);

	/* The kernel doubles the value set, and rounds a tiny one up to its minimum. */
	(void)rsk_sys_setsockopt_int(app, SOL_SOCKET, SO_SNDBUF, small ? 1 : (big > 0 ? big : 212992) / 2);
	o->small = small;
}

static int rsk_ready_draining(struct rsk_ready_state *st, uint32_t opens)
{
	return (int32_t)(__atomic_load_n(&st->unblocked, __ATOMIC_SEQ_CST) - opens) < 0;
}

/* A waker that drained our fill: wait (bounded) until its drain is done before a new fill,
 * or the drain would take the new fill too. */
static void rsk_ready_settle(struct rsk_ready_state *st, struct rsk_ready_owner *o, uint32_t opens)
{
	int spins, ms;

	if (opens == o->drains_seen)
		return;
	/* Spin briefly (a drain is a syscall away), then sleep in 1 ms steps: a waker
	 * preempted on a shared core can take far longer than any spin. Bounded by time. */
	for (spins = 0; spins < 1000 && rsk_ready_draining(st, opens); spins++)
		rsk_cpu_relax();
	for (ms = 0; ms < RSK_READY_LATE_MS && rsk_ready_draining(st, opens); ms++)
		(void)rsk_sys_poll(NULL, 0, 1);
	o->drains_seen = opens;
	o->fill = 0;
}

void rsk_ready_block(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		     int (*writable)(void *arg), void *arg)
{
	static const char fill[4096];
	uint32_t w = __atomic_load_n(&st->tx, __ATOMIC_SEQ_CST);

	if (w & RSK_TX_BLOCKED)
		return;
	rsk_ready_settle(st, o, RSK_RW_COUNT(w));
	if (!o->fill) {
		/* One skb of a few KiB: more than a minimal send buffer allows, far less than the
		 * default one (so a self-open needs no drain). */
		(void)rsk_sys_send(app, fill, sizeof(fill), MSG_DONTWAIT | MSG_NOSIGNAL);
		o->fill = 1;
	}
	rsk_ready_sndbuf(o, app, 1);
	/* Only the owner sets BLOCKED (the waker only clears it): a plain CAS publishes it. */
	if (!__atomic_compare_exchange_n(&st->tx, &w, w | RSK_TX_BLOCKED, 0, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST)) {
		rsk_ready_sndbuf(o, app, 0); /* cannot happen (BLOCKED is ours); never stay stuck */
		return;
	}
	if (writable(arg))
		rsk_ready_open(st, o, app); /* credits came back before the waker saw BLOCKED */
}

void rsk_ready_open(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app)
{
	uint32_t w = __atomic_load_n(&st->tx, __ATOMIC_SEQ_CST);

	while (w & RSK_TX_BLOCKED)
		if (__atomic_compare_exchange_n(&st->tx, &w, w & ~RSK_RW_STATE, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST)) {
			rsk_ready_sndbuf(o, app, 0); /* the fill stays: the next block reuses it */
			return;
		}
}

void rsk_ready_shut(int app, int how)
{
	int big = __atomic_load_n(&rsk_ready_sndbuf_default, __ATOMIC_RELAXED);

	(void)rsk_sys_shutdown(app, how);
	/* A TCP socket shut for writing (or reset) polls writable, and the write then fails
	 * with the error: a blocked app end (minimal send buffer) must show POLLOUT too. */
	if (how != SHUT_RD)
		(void)rsk_sys_setsockopt_int(app, SOL_SOCKET, SO_SNDBUF,
					     (big > 0 ? big : 212992) / 2);
}

/* Is @fd the app end of an accelerated socket (of any process image)? */
static int rsk_ready_is_app_end(int fd)
{
	struct sockaddr_un un;
	socklen_t len = sizeof(un);
	size_t plen = sizeof(RSK_APP_END_PREFIX) - 1;

	if (rsk_sys_getsockname(fd, (struct sockaddr *)&un, &len) < 0 || un.sun_family != AF_UNIX)
		return 0;
	return len > offsetof(struct sockaddr_un, sun_path) + plen && un.sun_path[0] == '\0' &&
	       memcmp(un.sun_path + 1, RSK_APP_END_PREFIX, plen) == 0;
}

/* One fd of the sweep: an app end of the old image becomes a socket whose peer is gone. */
static int rsk_ready_sweep_one(int fd, void *arg)
{
	int *n = arg, sv[2];

	if (!rsk_ready_is_app_end(fd))
		return 0;
	/* The library state behind it died with the old image: make the number a socket
	 * whose peer is gone (reads see EOF, writes EPIPE) instead of leaking tokens. */
	if (rsk_sys_socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	(void)rsk_sys_close(sv[1]);
	if (rsk_sys_dup3(sv[0], fd, (rsk_sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC) ? O_CLOEXEC : 0) >= 0)
		(*n)++;
	(void)rsk_sys_close(sv[0]);
	return 0;
}

int rsk_ready_sweep_stale(void)
{
	int n = 0;

	(void)rsk_proc_each_fd(rsk_ready_sweep_one, &n);
	return n;
}
