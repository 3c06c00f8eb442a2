/*
 * Accelerated connections (see conn.h): shared-region allocation, the process-shared lock,
 * readiness synchronisation (the arm/kick protocol of ready.h seen from our side), the
 * process's record of its connections and their event-loop watches, and the orderly or
 * abortive end of a stream.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <uthash.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/ready.h"
#include "base/sys.h"
#include "conn.h"
#include "transport/registry.h"

int rsk_conn_live;

/*
 * Regions of connections that ended in this process, kept mapped for the next connection of
 * the same size. A fresh region cost an mmap, a page fault per page and, at the end, an
 * munmap whose TLB shootdown interrupts every core that ran one of our threads: together the
 * largest part of a short shm connection's setup and teardown (docs/design.md, What a short
 * connection costs). Only a region no other process holds comes here: the last holder's
 * release or let-go (`holders` goes down under the region's lock only, rsk_conn_unshare),
 * or the discard of a setup never shared. A forked child drops the list it inherited
 * (rsk_conn_atfork_child): the regions are MAP_SHARED, so parent and child must never both
 * hand one out.
 */
#define RSK_CONN_POOL_MAX 16

static struct {
	void *p[RSK_CONN_POOL_MAX];
	size_t len[RSK_CONN_POOL_MAX];
	int n;
} rsk_conn_pool;
static pthread_mutex_t rsk_conn_pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* A pooled region of @len bytes, zeroed, or NULL. */
static void *rsk_conn_pool_take(size_t len)
{
	void *p = NULL;
	int i;

	pthread_mutex_lock(&rsk_conn_pool_lock);
	for (i = rsk_conn_pool.n - 1; i >= 0 && p == NULL; i--) {
		if (rsk_conn_pool.len[i] != len)
			continue;
		p = rsk_conn_pool.p[i];
		rsk_conn_pool.n--;
		rsk_conn_pool.p[i] = rsk_conn_pool.p[rsk_conn_pool.n];
		rsk_conn_pool.len[i] = rsk_conn_pool.len[rsk_conn_pool.n];
	}
	pthread_mutex_unlock(&rsk_conn_pool_lock);
	if (p != NULL)
		memset(p, 0, len); /* nothing of the last connection's state survives */
	return p;
}

/* The end of region @c, which no other process holds: into the pool, or unmapped. */
static void rsk_conn_free(struct rsk_conn *c)
{
	size_t len = c->map_len;
	int kept = 0;

	pthread_mutex_lock(&rsk_conn_pool_lock);
	if (rsk_conn_pool.n < RSK_CONN_POOL_MAX) {
		rsk_conn_pool.p[rsk_conn_pool.n] = c;
		rsk_conn_pool.len[rsk_conn_pool.n++] = len;
		kept = 1;
	}
	pthread_mutex_unlock(&rsk_conn_pool_lock);
	if (!kept)
		munmap(c, len);
}

/* This process's end of region @c: the last holder's goes to the pool (or is unmapped), any
 * other holder's is only unmapped. */
static void rsk_conn_unmap(struct rsk_conn *c, int last)
{
	if (last)
		rsk_conn_free(c);
	else
		munmap(c, c->map_len);
}

int rsk_conn_pool_count(void)
{
	int n;

	pthread_mutex_lock(&rsk_conn_pool_lock);
	n = rsk_conn_pool.n;
	pthread_mutex_unlock(&rsk_conn_pool_lock);
	return n;
}

/* Forked child: the pooled regions are shared with the parent, which may hand them out. */
static void rsk_conn_pool_drop(void)
{
	int i;

	pthread_mutex_init(&rsk_conn_pool_lock, NULL);
	for (i = 0; i < rsk_conn_pool.n; i++)
		munmap(rsk_conn_pool.p[i], rsk_conn_pool.len[i]);
	rsk_conn_pool.n = 0;
}

/* Layout of mem[]: the endpoint (its size rounded to a cache line), then the rx queue. */
struct rsk_conn *rsk_conn_alloc(uint32_t nbuf, size_t ep_size)
{
	size_t off = (ep_size + 63) & ~(size_t)63; /* the rx queue after the endpoint */
	size_t len = sizeof(struct rsk_conn) + off + nbuf * sizeof(struct rsk_rxmsg);
	pthread_mutexattr_t a;
	struct rsk_conn *c;

	len = (len + 4095) & ~(size_t)4095;
	c = rsk_conn_pool_take(len);
	if (c == NULL)
		c = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->map_len = len;
	c->rxq_off = off;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&c->lock, &a);
	pthread_mutexattr_destroy(&a);
	c->holders = 1;
	c->ctl_fd = c->tcp_fd = -1;
	c->app_fl = c->app_fdfl = -1;
	return c;
}

void rsk_conn_know_opts(struct rsk_conn *c, int nodelay, int cork)
{
	c->st.nodelay = nodelay != 0;
	c->st.cork = cork != 0;
	c->known |= RSK_CONN_KNOW_OPTS;
}

void rsk_conn_know(struct rsk_conn *c, const struct sockaddr *local, const struct sockaddr *peer,
		   int fl, int fdfl)
{
	if (local != NULL) {
		c->local_len = rsk_sa_len(local);
		memcpy(&c->local, local, c->local_len);
		c->known |= RSK_CONN_KNOW_LOCAL;
	}
	if (peer != NULL) {
		c->peer_len = rsk_sa_len(peer);
		memcpy(&c->peer, peer, c->peer_len);
		c->known |= RSK_CONN_KNOW_PEER;
	}
	if (fl >= 0)
		c->app_fl = fl & O_NONBLOCK;
	if (fdfl >= 0)
		c->app_fdfl = fdfl & FD_CLOEXEC;
}

void *rsk_conn_ep_mem(struct rsk_conn *c)
{
	return c->mem;
}

struct rsk_rxmsg *rsk_conn_rxq(struct rsk_conn *c)
{
	return (struct rsk_rxmsg *)(c->mem + c->rxq_off);
}

int rsk_conn_prepare(struct rsk_conn *c, int fd, int *app, int *ctl, int *tcp)
{
	int rc = rsk_stream_init(&c->st, c->ep, rsk_conn_rxq(c));

	c->st.stage_volatile = rsk_config.coalesce == RSK_COALESCE_ALWAYS;
	/* A non-blocking application fd gets a non-blocking pair at once: no F_SETFL on its
	 * ctl end now, nor on the app end once it is the application's. */
	c->pair_nonblock = c->app_fl > 0;
	if (rc == 0)
		rc = rsk_ready_pair_flags(app, ctl, c->pair_nonblock);
	if (rc == 0 && tcp != NULL && rsk_transport_cm(c->ep)->keeps_tcp &&
	    (*tcp = rsk_fd_hide_dup(fd)) < 0)
		rc = *tcp;
	return rc;
}

/* This process's copies of @c's readiness pair ends and endpoint go (fds or ep unset: -1,
 * NULL); the region stays for the caller. */
static void rsk_conn_drop_copies(struct rsk_conn *c, int app, int ctl)
{
	if (app >= 0)
		(void)rsk_sys_close(app);
	if (ctl >= 0)
		(void)rsk_sys_close(ctl);
	if (c->ep != NULL)
		rsk_ep_destroy(c->ep);
}

void rsk_conn_discard(struct rsk_conn *c, int app, int ctl, int tcp)
{
	if (tcp >= 0)
		rsk_fd_unhide_close(tcp);
	rsk_conn_drop_copies(c, app, ctl);
	rsk_conn_free(c); /* never shared yet */
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
 * must never block, and an edge-triggered one must see every transition. The app end shows
 * what the stream is (base/ready.h): its waker raises tokens and drains our fill, we take
 * tokens back and fill or open ourselves, and the compare-and-swap protocol on the shared
 * state block makes each transition happen exactly once.
 */
static int rsk_conn_recheck_rx(void *arg)
{
	struct rsk_conn *c = arg;

	(void)rsk_stream_progress(&c->st);
	return rsk_stream_readable(&c->st);
}

static int rsk_conn_recheck_tx(void *arg)
{
	struct rsk_conn *c = arg;

	(void)rsk_stream_progress(&c->st);
	return rsk_stream_writable(&c->st);
}

/* Tokens raised into our app end that we have not taken yet. */
static uint32_t rsk_conn_tokens_due(struct rsk_conn *c)
{
	return rsk_ready_unread(rsk_ep_ready(c->ep));
}

static void rsk_conn_sync_rx(struct rsk_conn *c, int app_fd)
{
	if (rsk_stream_readable(&c->st))
		return; /* shown: the waker raised when it posted (or we did, initially) */
	if (c->lazy)
		return; /* a stale token stays: rsk_conn_exact takes it before a sleep */
	(void)rsk_ready_lower(rsk_ep_ready(c->ep), &c->ro, app_fd, rsk_conn_recheck_rx, c);
}

static void rsk_conn_sync_tx(struct rsk_conn *c, int app_fd)
{
	struct rsk_ready_state *rs = rsk_ep_ready(c->ep);

	if (!rsk_stream_writable(&c->st))
		rsk_ready_block(rs, &c->ro, app_fd, rsk_conn_recheck_tx, c);
	else if (__atomic_load_n(&rs->tx, __ATOMIC_SEQ_CST) & RSK_TX_BLOCKED)
		rsk_ready_open(rs, &c->ro, app_fd); /* credits back before the waker said so */
}

void rsk_conn_sync(struct rsk_conn *c, int app_fd)
{
	if (c->relayed)
		return; /* the app end is a data pipe: its readiness is the data's own */
	if (c->ep->ops->settle != NULL)
		c->ep->ops->settle(c->ep, app_fd, rsk_conn_tokens_due(c) != 0);
	if (c->hup_shown)
		return;
	if (c->st.err) {
		c->hup_shown = 1;
		rsk_ready_shut(app_fd, SHUT_RDWR); /* readable, HUP */
		return;
	}
	if ((c->st.fin_rcvd || c->st.shut_rd) && !c->eof_shown) {
		c->eof_shown = 1;
		rsk_ready_shut(app_fd, SHUT_RD); /* readable + RDHUP for good */
	}
	if (c->st.fin_rcvd && (c->st.shut_wr || c->st.fin_sent)) {
		c->hup_shown = 1; /* both directions done: HUP, as TCP reports it */
		rsk_ready_shut(app_fd, SHUT_RDWR);
		return;
	}
	if (!c->eof_shown)
		rsk_conn_sync_rx(c, app_fd);
	rsk_conn_sync_tx(c, app_fd);
}

int rsk_conn_can_lazy(const struct rsk_conn *c)
{
	/* Only where an arrival is visible in user space (shm's ring): a transport that cannot
	 * tell must be asked through its kernel objects, which a lazy app end would fool. */
	return c->ep->ops->rx_pending != NULL && c->ctl_fd < 0 && !c->relayed;
}

uint32_t rsk_conn_tokens(struct rsk_conn *c)
{
	return rsk_conn_tokens_due(c);
}

void rsk_conn_set_lazy(struct rsk_conn *c, int app_fd, int on)
{
	if (c->lazy_never)
		rsk_conn_arm_locked(c); /* a wait we cannot see needs the eager wake-ups */
	on = on && !c->lazy_never && rsk_conn_can_lazy(c);
	if (c->lazy == on)
		return;
	__atomic_store_n(&c->lazy, on, __ATOMIC_RELAXED);
	__atomic_store_n(&rsk_ep_ready(c->ep)->lazy, (uint32_t)on, __ATOMIC_RELAXED);
	if (!on)
		rsk_conn_sync(c, app_fd); /* exact again: a stale token goes */
}

int rsk_conn_exact(struct rsk_conn *c, int app_fd)
{
	(void)rsk_stream_progress(&c->st);
	if (rsk_stream_readable(&c->st))
		return 1;
	if (c->lazy && !c->eof_shown && !c->hup_shown && !c->relayed)
		return !rsk_ready_lower(rsk_ep_ready(c->ep), &c->ro, app_fd, rsk_conn_recheck_rx, c);
	return 0;
}

void rsk_conn_sleep(struct rsk_conn *c, int on)
{
	rsk_ready_sleep(rsk_ep_ready(c->ep), on);
}

void rsk_conn_edge_seen(struct rsk_conn *c)
{
	rsk_ready_edge_seen(rsk_ep_ready(c->ep));
}

void rsk_conn_trim(struct rsk_conn *c, int app_fd)
{
	struct rsk_ready_state *rs = rsk_ep_ready(c->ep);

	/* One token stays: should the connection go eager, a readable stream must still have
	 * one (rsk_conn_sync_rx leaves a readable SHOWN as it is). */
	if (c->lazy && !c->eof_shown && !c->hup_shown && !c->relayed &&
	    (__atomic_load_n(&rs->rx, __ATOMIC_SEQ_CST) & RSK_RX_SHOWN) &&
	    rsk_ready_unread(rs) >= RSK_CONN_TRIM_AT)
		(void)rsk_ready_trim(rs, app_fd, 1);
}

/* Plain: open both ways, nothing the app end must show by its own shutdown. */
static int rsk_conn_plain(const struct rsk_conn *c)
{
	const struct rsk_stream *st = &c->st;

	return !c->relayed && !c->eof_shown && !c->hup_shown && !c->peer_hup && !st->err &&
	       !st->fin_rcvd && !st->shut_rd && !st->shut_wr && !st->fin_sent && !st->fin_pending;
}

int rsk_conn_fast_events(struct rsk_conn *c, int app_fd)
{
	int ev = 0;

	(void)rsk_stream_progress(&c->st);
	rsk_conn_sync(c, app_fd); /* what the harvest changed (an EOF, a block) is shown */
	if (!rsk_conn_plain(c))
		return -1;
	if (rsk_stream_readable(&c->st))
		ev |= EPOLLIN | EPOLLRDNORM;
	if (rsk_stream_writable(&c->st))
		ev |= EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND;
	return ev;
}

void rsk_conn_show_initial(struct rsk_conn *c, int app, int ctl)
{
	struct rsk_ready_state *rs = rsk_ep_ready(c->ep);
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);
	uint32_t w = __atomic_load_n(&rs->rx, __ATOMIC_SEQ_CST);

	rsk_conn_lock(c);
	(void)rsk_stream_progress(&c->st);
	if ((w & RSK_RX_SHOWN) && rsk_ready_unread(rs) == 0) {
		/* "shown" with no token: the placeholder state a server starts in */
		if (rsk_stream_readable(&c->st)) {
			rsk_ready_count_raise(rs);
			rsk_ready_token(rs, ctl);
			goto shown;
		}
		(void)__atomic_compare_exchange_n(&rs->rx, &w, w & ~RSK_RX_SHOWN, 0,
						  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	/* EMPTY: a message that came first is ours to show (the waker may claim it instead). */
	if (rsk_conn_recheck_rx(c) && rsk_ready_claim_rx(rs, 0, NULL))
		rsk_ready_token(rs, ctl);
shown:
	if (cm->shown != NULL)
		cm->shown(c->ep);
	rsk_conn_sync(c, app);
	rsk_conn_unlock(c);
}

/*
 * As the waker of our own app end (we hold its ctl end: verbs): show the stream's end, and
 * raise or unblock what the harvest made due, as a shm peer's kick would.
 */
static void rsk_conn_wake_own(struct rsk_conn *c)
{
	struct rsk_ready_state *rs = rsk_ep_ready(c->ep);

	if (c->ctl_fd < 0)
		return; /* the peer is our waker (shm): its kicks and its going reach us directly */
	if (c->relayed)
		return; /* a token now would reach the app as data: the relay's hook moves it */
	if (c->st.err) {
		rsk_ready_shut(c->ctl_fd, SHUT_RDWR); /* the app end: readable, HUP */
		return;
	}
	if (c->st.fin_rcvd)
		rsk_ready_eof(c->ctl_fd);
	if (rsk_stream_readable(&c->st) && rsk_ready_claim_rx(rs, 0, NULL))
		rsk_ready_token(rs, c->ctl_fd);
	if (rsk_stream_writable(&c->st) && rsk_ready_claim_tx(rs))
		rsk_ready_drain_fill(rs, c->ctl_fd);
}

void rsk_conn_peer_gone(struct rsk_conn *c)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);
	int ended = cm->peer_ended != NULL ? cm->peer_ended(c->ep) : 0, unread = 1;

	/* Ask before harvesting: a dead peer's staged message is posted by the ask. */
	if (!ended && !c->st.fin_rcvd && cm->peer_died != NULL)
		unread = cm->peer_died(c->ep);
	(void)rsk_stream_progress(&c->st);
	/* A transport that cannot look at the dead peer's side: our credit ledger says. */
	if (cm->peer_died == NULL)
		unread = rsk_stream_peer_unread(&c->st);
	/* In order (its FIN is here or in the ring), or, as its kernel would have closed a TCP
	 * socket, a FIN when it left nothing of ours unread and a reset when it did. */
	if (!ended && !c->st.fin_rcvd && !c->st.err) {
		if (unread)
			rsk_stream_set_error(&c->st, -ECONNRESET);
		else
			rsk_stream_peer_quit(&c->st);
	}
	rsk_conn_wake_own(c);
}

void rsk_conn_saw_events(struct rsk_conn *c, int app_fd, short revents)
{
	if (!(revents & (POLLHUP | POLLERR)) || c->peer_hup)
		return;
	/* Our own shutdown(SHUT_RDWR) shows HUP too: only a partner that went is news. */
	rsk_conn_lock(c);
	if (!c->hup_shown) {
		c->peer_hup = 1;
		rsk_conn_peer_gone(c);
		rsk_conn_sync(c, app_fd);
	}
	rsk_conn_unlock(c);
}

void rsk_conn_remote_wake(struct rsk_conn *c)
{
	(void)rsk_stream_progress(&c->st);
	rsk_conn_wake_own(c);
}

/* ---- this process's record of its connections ---- */

/*
 * One per connection this process holds, in process-local memory (the connection itself is
 * shared with forked children; watches and hooks belong to one process). Found by the
 * connection's address, which is unique while the connection is mapped here.
 */
struct rsk_conn_rec {
	struct rsk_conn *c;
	rsk_watch_t tcp_w;
	rsk_watch_t ev_w[RSK_EP_MAX_EVFDS];
	void (*hook)(struct rsk_conn *c, void *ext);
	void (*on_release)(struct rsk_conn *c, void *ext);
	void *ext;
	UT_hash_handle hh;
};

/* A watch's callback argument: the record and which endpoint fd (or -1: the TCP socket). */
struct rsk_conn_evarg {
	struct rsk_conn_rec *rec;
	int i;
};

static pthread_mutex_t rsk_conn_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_conn_rec *rsk_conn_reg;
static int rsk_conn_tick_set;

static struct rsk_conn_rec *rsk_conn_rec_find(struct rsk_conn *c)
{
	struct rsk_conn_rec *r;

	HASH_FIND_PTR(rsk_conn_reg, &c, r);
	return r;
}

/* The peer's TCP end closed or failed: its process died, or it closed the connection. */
static void rsk_conn_on_tcp(void *arg, uint32_t events)
{
	struct rsk_conn_rec *r = arg;

	(void)events; /* one-shot: it fires once, the state it reports does not go away */
	rsk_conn_lock(r->c);
	rsk_conn_peer_gone(r->c);
	rsk_conn_unlock(r->c);
	if (r->hook != NULL)
		r->hook(r->c, r->ext);
}

/*
 * Quiet endpoints (transport.h, ops->arm). While no thread of ours sleeps in the kernel, a
 * completion event need not be raised again: whoever waits next looks at the endpoint in user
 * space first (its own recv polls the CQ; a poll/epoll/select harvests the quiet ones,
 * rsk_conn_harvest_quiet), and a thread about to sleep arms and harvests them all
 * (rsk_conn_sleep_begin). The loop's leaving one quiet and a sleeper's arrival are ordered
 * like Dekker's flags: the loop counts the endpoint in rsk_conn_nquiet before it goes quiet and
 * looks at rsk_conn_sleepers after; a sleeper counts itself and looks at rsk_conn_nquiet
 * after. Sequentially consistent, so one of them sees the other and arms it.
 */
int rsk_conn_sleepers;
int rsk_conn_nquiet;
int rsk_conn_quiet_seen;

/* Arm @c's endpoint if it is quiet, and count it out of rsk_conn_nquiet: 1 if it was quiet
 * (its completions may wait in its CQ: the caller harvests or wakes). */
static int rsk_conn_take_quiet(struct rsk_conn *c)
{
	if (!rsk_ep_arm(c->ep, 1))
		return 0; /* not quiet, or another thread took it back */
	__atomic_sub_fetch(&rsk_conn_nquiet, 1, __ATOMIC_SEQ_CST);
	return 1;
}

/* May @r's endpoint go quiet at its next event? Only if every wait on its app end is ours. */
static int rsk_conn_may_quiet(const struct rsk_conn_rec *r)
{
	const struct rsk_conn *c = r->c;

	return c->ep->ops->arm != NULL && r->hook == NULL && !c->relayed && !c->lazy_never &&
	       __atomic_load_n(&rsk_conn_sleepers, __ATOMIC_SEQ_CST) == 0;
}

void rsk_conn_arm_locked(struct rsk_conn *c)
{
	if (rsk_conn_take_quiet(c))
		rsk_conn_remote_wake(c);
}

/* Take @c's endpoint out of quiet (it was found quiet): arm and harvest. Lock not held. */
static void rsk_conn_unquiet(struct rsk_conn *c)
{
	if (!rsk_conn_take_quiet(c))
		return; /* another thread took it back (and harvests it) */
	rsk_conn_lock(c);
	rsk_conn_remote_wake(c);
	rsk_conn_unlock(c);
}

/* The event of endpoint fd @i, with @c's endpoint allowed to go quiet (see above). */
static unsigned int rsk_conn_ep_event(struct rsk_conn *c, int i, int quiet)
{
	unsigned int what;

	if (quiet) {
		if (!__atomic_load_n(&rsk_conn_quiet_seen, __ATOMIC_RELAXED))
			__atomic_store_n(&rsk_conn_quiet_seen, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&rsk_conn_nquiet, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(&c->ep->quiet_ok, quiet, __ATOMIC_RELAXED);
	what = rsk_transport_cm(c->ep)->on_event(c->ep, i);
	__atomic_store_n(&c->ep->quiet_ok, 0, __ATOMIC_RELAXED);
	if (quiet && !(what & RSK_EPEV_QUIET))
		__atomic_sub_fetch(&rsk_conn_nquiet, 1, __ATOMIC_SEQ_CST);
	if (!(what & RSK_EPEV_QUIET))
		return what;
	if (__atomic_load_n(&rsk_conn_sleepers, __ATOMIC_SEQ_CST) == 0)
		return what & ~RSK_EPEV_DATA; /* the next waiter harvests it in user space */
	/* a sleeper came meanwhile: arm again, and wake as without quiet */
	(void)rsk_conn_take_quiet(c);
	return what;
}

/* An endpoint event fd fired (verbs: completions, or the peer's QP went). */
static void rsk_conn_on_ep(struct rsk_conn_rec *r, int i)
{
	struct rsk_conn *c = r->c;
	unsigned int what = rsk_conn_ep_event(c, i, i == 0 && rsk_conn_may_quiet(r));

	if ((what & RSK_EPEV_DATA) && r->hook == NULL) {
		rsk_conn_lock(c);
		rsk_conn_remote_wake(c);
		rsk_conn_unlock(c);
	}
	if (what & RSK_EPEV_GONE) {
		rsk_conn_lock(c);
		rsk_conn_peer_gone(c);
		rsk_conn_unlock(c);
	}
	if (what != 0 && r->hook != NULL)
		r->hook(c, r->ext);
}

static void rsk_conn_on_ep0(void *arg, uint32_t events)
{
	(void)events;
	rsk_conn_on_ep(arg, 0);
}

static void rsk_conn_on_ep1(void *arg, uint32_t events)
{
	(void)events;
	rsk_conn_on_ep(arg, 1);
}

static void rsk_conn_unwatch(struct rsk_conn_rec *r)
{
	int i;

	rsk_evloop_unwatch(r->tcp_w);
	for (i = 0; i < RSK_EP_MAX_EVFDS; i++)
		rsk_evloop_unwatch(r->ev_w[i]);
	r->tcp_w = 0;
	memset(r->ev_w, 0, sizeof(r->ev_w));
}

/* Watch the TCP placeholder (peer liveness) and the endpoint's own event fds. */
static int rsk_conn_watch(struct rsk_conn_rec *r)
{
	static const rsk_watch_fn ep_fn[RSK_EP_MAX_EVFDS] = {rsk_conn_on_ep0, rsk_conn_on_ep1};
	const struct rsk_cm_ops *cm = rsk_transport_cm(r->c->ep);
	int rc, i, fd;

	rc = r->c->tcp_fd < 0 ? 0
			      : rsk_evloop_watch(r->c->tcp_fd,
						 EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLONESHOT,
						 rsk_conn_on_tcp, r, &r->tcp_w);
	for (i = 0; rc == 0 && cm->event_bind != NULL && i < RSK_EP_MAX_EVFDS; i++) {
		/* events from an fd the transport shares: a watch of no fd, fired by it */
		rc = rsk_evloop_watch_virtual(ep_fn[i], r, &r->ev_w[i]);
		if (rc == 0)
			cm->event_bind(r->c->ep, i, r->ev_w[i]);
	}
	for (i = 0; rc == 0 && cm->event_fd != NULL && i < RSK_EP_MAX_EVFDS; i++) {
		fd = cm->event_fd(r->c->ep, i);
		if (fd < 0)
			continue;
		rc = rsk_evloop_watch(fd, EPOLLIN, ep_fn[i], r, &r->ev_w[i]);
		if (rc < 0 && i > 0)
			rc = 0; /* best effort: the TCP placeholder reports a dead peer anyway */
	}
	if (rc < 0)
		rsk_conn_unwatch(r);
	return rc;
}

/* Only what is due: a settle request waits for its window (rsk_evloop_request_settle). */
static void rsk_conn_tick(void)
{
	if (rsk_evloop_take_due())
		rsk_conn_push_taken();
}

/* Record @c as held by this process and watch it. */
static int rsk_conn_register(struct rsk_conn *c)
{
	struct rsk_conn_rec *r = calloc(1, sizeof(*r));
	int rc;

	if (r == NULL)
		return -ENOMEM;
	r->c = c;
	pthread_mutex_lock(&rsk_conn_reg_lock);
	HASH_ADD_PTR(rsk_conn_reg, c, r);
	if (!rsk_conn_tick_set) {
		rsk_evloop_set_tick(rsk_conn_tick);
		rsk_conn_tick_set = 1;
	}
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	__atomic_add_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	/* Outside the registry lock: watching takes the loop's lock, which callbacks hold. The
	 * loop runs even with nothing to watch: its tick posts coalesced writes. */
	rc = rsk_evloop_start();
	if (rc == 0)
		rc = rsk_conn_watch(r);
	return rc;
}

void rsk_conn_take_tcp(struct rsk_conn *c, int fd, const struct sockaddr *dest)
{
	socklen_t len = sizeof(int);
	int v = 0;

	if (c->local_len != 0 && !(c->known & RSK_CONN_KNOW_LOCAL))
		return; /* taken while the TCP connection was still up (an upgrade) */
	if (!(c->known & RSK_CONN_KNOW_OPTS) &&
	    rsk_sys_getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0)
		c->st.nodelay = v != 0;
	len = sizeof(int);
	v = 0;
	if (!(c->known & RSK_CONN_KNOW_OPTS) &&
	    rsk_sys_getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &len) == 0)
		c->st.cork = v != 0;
	c->local_len = (c->known & RSK_CONN_KNOW_LOCAL) ? c->local_len : sizeof(c->local);
	if (!(c->known & RSK_CONN_KNOW_LOCAL) &&
	    rsk_sys_getsockname(fd, (struct sockaddr *)&c->local, &c->local_len) < 0)
		c->local_len = 0;
	c->known &= ~RSK_CONN_KNOW_LOCAL; /* taken: a second call returns above */
	if (c->known & RSK_CONN_KNOW_PEER) {
		c->domain = c->local.ss_family;
		return;
	}
	c->peer_len = sizeof(c->peer);
	if (rsk_sys_getpeername(fd, (struct sockaddr *)&c->peer, &c->peer_len) < 0) {
		c->peer_len = dest != NULL ? rsk_sa_len(dest) : 0; /* a connect still under way */
		if (dest != NULL)
			memcpy(&c->peer, dest, c->peer_len);
	}
	c->domain = c->local.ss_family;
}

int rsk_conn_attach(struct rsk_conn *c, int app_fd, int ctl, int tcp, int nonblock)
{
	c->nonblock = nonblock;
	c->ctl_fd = ctl;
	c->tcp_fd = tcp;
	c->transport = c->ep->ops->id;
	rsk_conn_lock(c);
	rsk_conn_sync(c, app_fd);
	rsk_conn_unlock(c);
	return rsk_conn_register(c);
}

int rsk_conn_set_hook(struct rsk_conn *c, void (*fn)(struct rsk_conn *c, void *ext), void *ext,
		      void (*on_release)(struct rsk_conn *c, void *ext))
{
	struct rsk_conn_rec *r;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	r = rsk_conn_rec_find(c);
	if (r != NULL) {
		r->ext = ext;
		r->on_release = on_release;
		__atomic_store_n(&r->hook, fn, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	return r != NULL ? 0 : -ENOENT;
}

void rsk_conn_staged(void)
{
	rsk_evloop_request_tick();
}

void rsk_conn_settle_soon(void)
{
	rsk_evloop_request_settle();
}

/* Past this many connections a scan costs more than the system call it saves. */
#define RSK_ARRIVAL_SCAN_MAX 64

/* Harvest quiet @c if its lock is free: 1 when completions came (its app end shows them). */
static int rsk_conn_harvest_one(struct rsk_conn *c)
{
	int n, rc = pthread_mutex_trylock(&c->lock);

	if (rc == EOWNERDEAD) { /* as rsk_conn_lock: a holder died inside */
		rsk_stream_set_error(&c->st, -ECONNRESET);
		pthread_mutex_consistent(&c->lock);
	} else if (rc != 0) {
		return 1; /* busy: its holder harvests it; ask the kernel to be sure */
	}
	n = rsk_stream_progress(&c->st);
	if (n != 0)
		rsk_conn_wake_own(c);
	pthread_mutex_unlock(&c->lock);
	return n != 0;
}

int rsk_conn_harvest_some(void)
{
	struct rsk_conn_rec *r, *tmp;
	int any = 0;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	HASH_ITER(hh, rsk_conn_reg, r, tmp)
		if (rsk_ep_arm(r->c->ep, 0))
			any |= rsk_conn_harvest_one(r->c);
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	return any;
}

void rsk_conn_sleep_arm(void)
{
	struct rsk_conn_rec *r, *tmp;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	HASH_ITER(hh, rsk_conn_reg, r, tmp)
		if (rsk_ep_arm(r->c->ep, 0))
			rsk_conn_unquiet(r->c);
	pthread_mutex_unlock(&rsk_conn_reg_lock);
}

int rsk_conn_any_arrival(void)
{
	struct rsk_conn_rec *r, *tmp;
	int any = 0, n = 0;

	if (pthread_mutex_trylock(&rsk_conn_reg_lock) != 0)
		return 1;
	HASH_ITER(hh, rsk_conn_reg, r, tmp) {
		if (rsk_ep_arm(r->c->ep, 0)) { /* quiet: no event will come, look ourselves */
			if (++n > RSK_ARRIVAL_SCAN_MAX || rsk_conn_harvest_one(r->c)) {
				any = 1;
				break;
			}
			continue;
		}
		if (++n > RSK_ARRIVAL_SCAN_MAX || rsk_ep_rx_pending(r->c->ep)) {
			any = 1;
			break;
		}
	}
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	return any;
}

/*
 * Post every staged message, and credits due for consumed data (rsk_stream_settle). The
 * request is taken before the pass, so a stage made during
 * it requests again; stages we could not reach (lock busy) request again too.
 */
void rsk_conn_push_taken(void)
{
	struct rsk_conn_rec *r, *tmp;
	int left = 0, rc;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	HASH_ITER(hh, rsk_conn_reg, r, tmp) {
		rc = pthread_mutex_trylock(&r->c->lock);
		if (rc == EOWNERDEAD) { /* as rsk_conn_lock: a holder died inside */
			rsk_stream_set_error(&r->c->st, -ECONNRESET);
			pthread_mutex_consistent(&r->c->lock);
		} else if (rc != 0) {
			left = 1; /* busy: the next pass (or the owner) sees it */
			continue;
		}
		/* Writability does not change (a stage already counts as a used buffer, a credit
		 * message never takes the last data credit) and the peer is kicked by the post,
		 * so no readiness sync is needed here. */
		rsk_stream_settle(&r->c->st);
		pthread_mutex_unlock(&r->c->lock);
	}
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	if (left)
		rsk_evloop_request_tick();
}

/* ---- waiting on the endpoint's own event fds (setup and linger) ---- */

/* Wait up to @ms for the endpoint's events; returns RSK_EPEV_* bits of what happened. */
static unsigned int rsk_conn_wait_ep(struct rsk_conn *c, int ms)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);
	struct pollfd p[RSK_EP_MAX_EVFDS];
	unsigned int what = 0;
	int n = 0, i;

	if (rsk_conn_take_quiet(c))
		return RSK_EPEV_DATA; /* it was quiet: harvest before sleeping on its fds */
	if (cm->event_wait != NULL)
		return cm->event_wait(c->ep, ms);
	for (i = 0; cm->event_fd != NULL && i < RSK_EP_MAX_EVFDS; i++) {
		p[n].fd = cm->event_fd(c->ep, i);
		p[n].events = POLLIN;
		if (p[n].fd >= 0)
			n++;
	}
	if (n == 0 || rsk_sys_poll(p, (nfds_t)n, ms) <= 0)
		return 0;
	for (i = 0; i < n; i++)
		if (p[i].revents)
			what |= cm->on_event(c->ep, i);
	return what;
}

int rsk_conn_await_first(struct rsk_conn *c, int64_t deadline_ms)
{
	int left;

	for (;;) {
		(void)rsk_stream_progress(&c->st);
		if (c->st.msgs_rcvd > 0)
			return 0;
		if (c->st.err)
			return c->st.err;
		left = (int)(deadline_ms - rsk_now_ms());
		if (left <= 0)
			return -ETIMEDOUT;
		if (rsk_conn_wait_ep(c, left < 10 ? left : 10) & RSK_EPEV_GONE) {
			(void)rsk_stream_progress(&c->st); /* a hello just before the disconnect */
			return c->st.msgs_rcvd > 0 ? 0 : -ECONNREFUSED;
		}
	}
}

int rsk_conn_flush_sends(struct rsk_conn *c, int ms)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);
	int64_t end = rsk_now_ms() + ms;
	int done;

	if (!cm->sends_sync || cm->sends_done == NULL)
		return 0; /* a posted message is in the peer's memory already */
	for (;;) {
		rsk_conn_lock(c);
		(void)rsk_stream_progress(&c->st);
		done = cm->sends_done(c->ep) || c->st.err;
		rsk_conn_unlock(c);
		if (done)
			return c->st.err;
		if (rsk_now_ms() >= end)
			return -ETIMEDOUT;
		(void)rsk_conn_wait_ep(c, 1);
	}
}

int rsk_conn_hello(struct rsk_conn *c, int app_fd)
{
	int rc;

	rsk_conn_lock(c);
	rc = rsk_stream_hello(&c->st);
	rsk_conn_sync(c, app_fd);
	rsk_conn_unlock(c);
	return rc;
}

void rsk_conn_prefork(struct rsk_conn *c, int app_fd)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);

	rsk_conn_lock(c);
	if (cm->prefork != NULL)
		cm->prefork(c->ep, app_fd);
	__atomic_add_fetch(&c->holders, 1, __ATOMIC_ACQ_REL);
	rsk_conn_unlock(c);
	rsk_dbg("connection %p held for a child", (void *)c);
}

void rsk_conn_prefork_undo(struct rsk_conn *c)
{
	__atomic_sub_fetch(&c->holders, 1, __ATOMIC_ACQ_REL);
}

/*
 * A forked child's copy of a connection its parent relays: the child holds no share of it
 * (the relay's process holds the one it had). Its copy of a shareable endpoint keeps fds of
 * the peer's (its readiness end): they go, so the peer sees the relay's process end when it
 * does. An endpoint that cannot be shared stays untouched (its teardown is the parent's).
 */
static void rsk_conn_forget_relayed(struct rsk_conn_rec *r)
{
	struct rsk_conn *c = r->c;

	HASH_DEL(rsk_conn_reg, r);
	free(r);
	__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	if (!rsk_transport_cm(c->ep)->fork_share)
		return;
	rsk_ep_destroy(c->ep);
	munmap(c, c->map_len);
}

void rsk_conn_atfork_child(void)
{
	struct rsk_conn_rec *r, *tmp;

	/* The lock may have been held by another thread at fork: start from a fresh one. */
	pthread_mutex_init(&rsk_conn_reg_lock, NULL);
	rsk_conn_pool_drop();
	rsk_conn_sleepers = 0; /* the other threads' sleeps stayed in the parent */
	rsk_conn_nquiet = 0;   /* and the quiet endpoints (verbs) with them: never shared */
	HASH_ITER(hh, rsk_conn_reg, r, tmp) {
		r->tcp_w = 0; /* the parent's watches; the loop forgot them (evloop.c) */
		memset(r->ev_w, 0, sizeof(r->ev_w));
		if (r->hook != NULL) { /* a relay is its parent's work (relay.c closes its fds) */
			rsk_conn_forget_relayed(r);
			continue;
		}
		if (rsk_transport_cm(r->c->ep)->fork_share) {
			(void)rsk_conn_watch(r);
			continue;
		}
		HASH_DEL(rsk_conn_reg, r); /* the parent's alone (its endpoint cannot follow) */
		free(r);
		__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	}
}

void rsk_conn_atexec_helper(int (*keep)(void *ext))
{
	struct rsk_conn_rec *r, *tmp;

	pthread_mutex_init(&rsk_conn_reg_lock, NULL);
	HASH_ITER(hh, rsk_conn_reg, r, tmp) {
		r->tcp_w = 0; /* the old image's loop's watches */
		memset(r->ev_w, 0, sizeof(r->ev_w));
		if (r->hook != NULL && rsk_transport_cm(r->c->ep)->ep_fds != NULL && keep(r->ext)) {
			(void)rsk_conn_watch(r); /* relayed here from now on */
			continue;
		}
		HASH_DEL(rsk_conn_reg, r); /* the exec'd image's: its fds are not ours */
		free(r);
		__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	}
}

void rsk_conn_watching(struct rsk_conn *c, int on)
{
	struct rsk_conn_rec *r;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	r = rsk_conn_rec_find(c);
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	/* Outside the registry lock (the loop's callbacks take it). The record stays: only the
	 * hand-off, on this thread, removes a hooked connection's record meanwhile. */
	if (r == NULL)
		return;
	if (on)
		(void)rsk_conn_watch(r);
	else
		rsk_conn_unwatch(r);
}

/* ---- the end of a connection ---- */

#define RSK_LINGER_MS 1000

/*
 * Disconnecting a transport that still sends (verbs' QP flushes its send queue): like TCP's
 * close, which keeps sending in the background, wait (bounded) until the FIN is posted (it
 * may need a credit back) and every send completed. Lock held; released while sleeping.
 */
static void rsk_conn_linger(struct rsk_conn *c)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);
	struct pollfd peer = {.fd = c->tcp_fd, .events = POLLRDHUP};
	int64_t end = rsk_now_ms() + RSK_LINGER_MS;
	unsigned int gone;

	for (;;) {
		(void)rsk_stream_progress(&c->st);
		if (c->st.err || ((c->st.fin_sent || !c->st.fin_pending) && cm->sends_done(c->ep)))
			return;
		/* The peer closed its TCP end: it reads nothing more, so nothing is worth waiting
		 * for (its endpoint is gone too; our sends would only time out). */
		if (c->tcp_fd >= 0 && rsk_sys_poll(&peer, 1, 0) > 0 &&
		    (peer.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return;
		if (rsk_now_ms() >= end)
			return;
		rsk_conn_unlock(c);
		gone = rsk_conn_wait_ep(c, 10) & RSK_EPEV_GONE;
		rsk_conn_lock(c);
		/* The peer disconnected (a moved connection has no TCP end to tell us): what we
		 * still send can never be delivered, so waiting would only cost the bound. */
		if (gone)
			return;
	}
}

void rsk_conn_end_ours(struct rsk_conn *c)
{
	/* What arrived but was never harvested is unread too (TCP's receive queue). */
	(void)rsk_stream_progress(&c->st);
	if (c->st.err == 0) {
		if (c->st.rx_bytes > 0 || c->linger0)
			rsk_stream_reset(&c->st);
		else
			(void)rsk_stream_shutdown_wr(&c->st);
	}
}

/* The last holder: FIN after everything sent (RST if we leave unread data, as TCP does). */
static void rsk_conn_end_stream(struct rsk_conn *c)
{
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);

	rsk_conn_end_ours(c);
	if (cm->sends_done != NULL && (cm->foreign == NULL || !cm->foreign(c->ep)))
		rsk_conn_linger(c);
	/* Our TCP placeholder closing now means "closed", not "died" -- but only if our FIN is
	 * really in the peer's memory; otherwise the peer must see a reset, never wait. */
	if (c->st.err == 0 && c->st.fin_sent && cm->fin_sent != NULL)
		cm->fin_sent(c->ep);
	c->ep->ops->shutdown(c->ep); /* and the peer's sends fail with EPIPE, as after TCP's RST */
}

static void rsk_close_hidden(int fd)
{
	if (fd >= 0)
		rsk_fd_unhide_close(fd);
}

/* Take this process's record of @c out of the registry (NULL if there is none) and stop its
 * watches: no callback runs for it after this returns. Before @c's lock: the loop's
 * callbacks take the loop's, then ours. */
static struct rsk_conn_rec *rsk_conn_rec_take(struct rsk_conn *c)
{
	struct rsk_conn_rec *r;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	r = rsk_conn_rec_find(c);
	if (r != NULL)
		HASH_DEL(rsk_conn_reg, r);
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	if (r != NULL) {
		(void)rsk_conn_take_quiet(c); /* no scan looks for it any more */
		rsk_conn_unwatch(r);
	}
	return r;
}

static void rsk_conn_rec_free(struct rsk_conn_rec *r)
{
	free(r);
	__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
}

/* Forget this process's record of @c, telling its owner (on_release). */
static void rsk_conn_unregister(struct rsk_conn *c)
{
	struct rsk_conn_rec *r = rsk_conn_rec_take(c);

	if (r == NULL)
		return;
	if (r->on_release != NULL)
		r->on_release(c, r->ext);
	rsk_conn_rec_free(r);
}

/* This process's share of @c goes: its record, Nagle's stage posted, the holders count; the
 * last holder ends the stream. Returns with @c locked: 1 if this was the last holder. */
static int rsk_conn_let_go_share(struct rsk_conn *c, const char *how)
{
	int last;

	rsk_conn_unregister(c);
	rsk_conn_lock(c);
	(void)rsk_stream_push(&c->st); /* another holder's loop may not know of the stage */
	last = __atomic_sub_fetch(&c->holders, 1, __ATOMIC_ACQ_REL) == 0;
	rsk_dbg("connection %p released %s, %s", (void *)c, how,
		last ? "the last holder" : "still held");
	if (last)
		rsk_conn_end_stream(c);
	return last;
}

void rsk_conn_release(struct rsk_conn *c)
{
	int last = rsk_conn_let_go_share(c, "here");

	/* The fd numbers are the same in every holder (inherited): each process closes its own
	 * copies and leaves the shared fields alone for the others. */
	rsk_close_hidden(c->tcp_fd);
	rsk_close_hidden(c->ctl_fd);
	if (last)
		rsk_ep_retire(c->ep); /* nothing here touches the shared memory from now on */
	rsk_ep_destroy(c->ep); /* unmaps the rings and closes our copy of the peer's fds */
	if (last)
		rsk_stream_fini(&c->st);
	rsk_conn_unlock(c);
	rsk_conn_unmap(c, last);
}

/*
 * The process is ending (the destructor, or _exit's flush), yet the application's other
 * threads run until it is gone, and one may be inside a call on @c: a reader blocked in recv
 * (a Python daemon thread, a worker of a program that returns from main) wakes when the
 * stream ends, and it read a freed connection (a crash at exit in about one run in two). So
 * the stream ends as a close ends it, and everything such a call touches stays: @c mapped,
 * its endpoint, stream and hidden fds (the kernel takes them with the process). Not retired
 * either: a shm peer must not reuse a segment a thread of ours may still write; it loses only
 * that reuse.
 */
void rsk_conn_release_exiting(struct rsk_conn *c)
{
	(void)rsk_conn_let_go_share(c, "at exit");
	rsk_conn_unlock(c);
}

/*
 * Holds of a connection that no record of this process names yet (a move under way at a
 * fork, calls/upgrade.c). As in rsk_conn_release, `holders` only goes down under the lock,
 * and a holder that is not the last drops its copy of the endpoint inside the same hold of
 * it: the last holder's retire (in the shared region, which an endpoint's teardown reads to
 * decide whether its segment may be reused) always comes after every other copy is gone.
 */
int rsk_conn_unshare(struct rsk_conn *c, int app, int ctl)
{
	int last;

	rsk_conn_lock(c);
	last = __atomic_load_n(&c->holders, __ATOMIC_ACQUIRE) == 1;
	if (!last) {
		__atomic_sub_fetch(&c->holders, 1, __ATOMIC_ACQ_REL);
		rsk_conn_drop_copies(c, app, ctl);
	}
	rsk_conn_unlock(c);
	if (!last)
		munmap(c, c->map_len); /* another process still uses it: ours to unmap only */
	rsk_dbg("connection %p let go here, %s", (void *)c, last ? "the last holder" : "still held");
	return last;
}

void rsk_conn_let_go(struct rsk_conn *c, int app, int ctl)
{
	int last;

	rsk_conn_lock(c);
	last = __atomic_sub_fetch(&c->holders, 1, __ATOMIC_ACQ_REL) == 0;
	/* A stream we ended (our FIN or reset in it: a close while moving, calls/upgrade.c), or
	 * one that failed, ends as a close ends it: the peer's sends fail from now on, and our
	 * FIN, if posted, means "closed", not "died". One only offered is left as it is: a
	 * server taking the offer right now reads our end on TCP. Either way nothing here
	 * touches the region again. */
	if (last && c->st.ep != NULL && (c->st.fin_sent || c->st.fin_pending || c->st.err)) {
		if (c->st.err == 0 && c->st.fin_sent && rsk_transport_cm(c->ep)->fin_sent != NULL)
			rsk_transport_cm(c->ep)->fin_sent(c->ep);
		c->ep->ops->shutdown(c->ep);
	}
	if (last && c->st.ep != NULL)
		rsk_ep_retire(c->ep);
	rsk_conn_drop_copies(c, app, ctl);
	rsk_conn_unlock(c);
	rsk_conn_unmap(c, last);
}

void rsk_conn_forget(struct rsk_conn *c)
{
	struct rsk_conn_rec *r = rsk_conn_rec_take(c);

	if (r != NULL)
		rsk_conn_rec_free(r);
	/* Our copies only (the numbers are the same in the helper, inherited); the shared
	 * fields stay as they are for it. */
	rsk_close_hidden(c->tcp_fd);
	rsk_close_hidden(c->ctl_fd);
	rsk_ep_destroy(c->ep);
	munmap(c, c->map_len);
	rsk_dbg("connection %p forgotten here: another process serves it", (void *)c);
}

/* ---- live stats hook (rdmasock stat, sock/sockstat.c) ---- */

int rsk_conn_visit(struct rsk_conn *c, void (*fn)(const struct rsk_conn *c, void *arg), void *arg)
{
	int found;

	pthread_mutex_lock(&rsk_conn_reg_lock);
	found = rsk_conn_rec_find(c) != NULL;
	if (found)
		fn(c, arg);
	pthread_mutex_unlock(&rsk_conn_reg_lock);
	return found;
}
