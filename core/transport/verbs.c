/*
 * The verbs transport's endpoint (see verbs.h): one RC QP per connection, one CQ for both
 * directions behind its device's completion channel (one per device context and process,
 * shared by every CQ there; so is one rdma_cm event channel for the connected ids: the
 * event loop drains both and hands each event to its endpoint through verbs_demux), a ring of nbuf receive buffers and one of nbuf send
 * buffers taken from the device's registered pool (verbs_pool.c). Sends are signalled selectively (a quarter of the ring), so a
 * send buffer is reused only after a later signalled completion proves it went; completions
 * are harvested in batches, receives handed to the engine in order, sends consumed here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/ready.h"
#include "base/sys.h"
#include "verbs.h"
#include "verbs_demux.h"
#include "verbs_pool.h"

struct rsk_verbs_ep {
	struct rsk_ep base;
	pid_t owner; /* the process that made it: a forked child must not touch it */
	struct rdma_cm_id *id;
	uint64_t tok; /* our demux slot: the CQ's cq_context, the id's context */
	struct ibv_cq *cq;
	/* whose channel our CQ uses (counted in its ncq) */
	struct rsk_verbs_dev *dev;
	struct rsk_vring rx, tx; /* from the device's registered pool */
	/* send side: buffers in a ring, the send queue as counters */
	uint32_t tx_data, tx_data_done; /* data sends posted / known complete */
	uint32_t sq_posted, sq_done, sq_depth, sig_every, since_sig;
	int broken;
	/* 1: an event was taken and the CQ left unarmed, because a thread of ours harvests it
	 * itself (ep.quiet_ok); ops->arm arms it again before anyone sleeps. Atomic. */
	int quiet;
	/* Events the shared channels brought (RSK_VERBS_PEND_*), taken by on_event and
	 * event_wait; a futex word (waiters counts the sleepers). gone: the peer's id went
	 * (sticky). Atomic. */
	uint32_t pend, waiters;
	int gone;
	/* readiness of our app end; our own event loop is its waker (rsk_conn_remote_wake) */
	struct rsk_ready_state rs;
};

#define RSK_VERBS_PEND_CQ (1u << RSK_VDEMUX_CQ)
#define RSK_VERBS_PEND_CM (1u << RSK_VDEMUX_CM)

#define RSK_VERBS_EP(ep) ((struct rsk_verbs_ep *)(ep))

/* One protection domain per device context, shared by every connection on it, and one
 * completion channel per context and process (pid: a forked child makes its own). */
#define RSK_VERBS_MAX_DEV 16
static struct rsk_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	pid_t pid;
	rsk_watch_t w;
	int ncq; /* this process's CQs on cc: how many events it can hold at once (atomic) */
} rsk_verbs_pds[RSK_VERBS_MAX_DEV];
static pthread_mutex_t rsk_verbs_lock = PTHREAD_MUTEX_INITIALIZER;

/* The process's rdma_cm channel for connected ids (pid as above), under rsk_verbs_lock. */
static struct rdma_event_channel *rsk_verbs_cmch;
static pid_t rsk_verbs_cmch_pid;
static rsk_watch_t rsk_verbs_cmch_w;

/* @ctx's entry, made with its protection domain if new; NULL when none fits. Lock held. */
static struct rsk_verbs_dev *rsk_verbs_dev_of(struct ibv_context *ctx)
{
	struct ibv_pd *pd;
	int i;

	for (i = 0; i < RSK_VERBS_MAX_DEV && rsk_verbs_pds[i].ctx != NULL; i++)
		if (rsk_verbs_pds[i].ctx == ctx)
			return &rsk_verbs_pds[i];
	if (i == RSK_VERBS_MAX_DEV || (pd = ibv_alloc_pd(ctx)) == NULL)
		return NULL;
	rsk_verbs_pds[i].ctx = ctx;
	rsk_verbs_pds[i].pd = pd;
	return &rsk_verbs_pds[i];
}

/* ---- the shared channels: drained by the event loop, events handed out by token ---- */

/* An event of @kind for endpoint @obj; the demux lock is held, so it is not destroyed
 * meanwhile. Wakes a thread sleeping in event_wait. */
static void rsk_verbs_pend(void *obj, int kind)
{
	struct rsk_verbs_ep *e = obj;

	if (kind == RSK_VDEMUX_CM)
		__atomic_store_n(&e->gone, 1, __ATOMIC_SEQ_CST);
	__atomic_or_fetch(&e->pend, 1u << kind, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&e->waiters, __ATOMIC_SEQ_CST) > 0)
		(void)rsk_sys_futex(&e->pend, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

/* Hand an event to the endpoint @tok names, if it still does, and to its owner's watch. */
static void rsk_verbs_deliver(uint64_t tok, int kind)
{
	int live;
	uint64_t w = rsk_vdemux_note(tok, kind, rsk_verbs_pend, &live);

	if (w != 0)
		(void)rsk_evloop_fire(w, EPOLLIN);
}

#define RSK_VERBS_EV_BATCH 32

/* Ack @n events of @cq[] with one call per CQ (an ack takes the CQ's lock and signals). */
static void rsk_verbs_ack_batch(struct ibv_cq **cq, int n)
{
	unsigned int cnt;
	int i, k;

	for (i = 0; i < n; i++) {
		if (cq[i] == NULL)
			continue;
		for (k = i + 1, cnt = 1; k < n; k++)
			if (cq[k] == cq[i]) {
				cnt++;
				cq[k] = NULL;
			}
		ibv_ack_cq_events(cq[i], cnt);
	}
}

/*
 * The loop's callback for a device's completion channel (@arg: its rsk_verbs_dev). Every
 * event is acked before any endpoint hears of it: ibv_destroy_cq waits until its CQ's events
 * are acked, and the owner we call may be destroying another endpoint (or wait for a lock of
 * one that is). A CQ raises one event per arm, and none of ours is re-armed before its event
 * is delivered, so the channel holds at most ncq events now: we read no more than that. The
 * read that would find it empty is a system call per event for a process with one busy
 * connection (half the reads of a bulk transfer); one left there (a CQ armed again meanwhile
 * by a waiter, or ncq behind) keeps the level-triggered watch ready for the next round.
 */
static void rsk_verbs_cc_ready(void *arg, uint32_t events)
{
	struct rsk_verbs_dev *d = arg;
	struct ibv_comp_channel *cc = __atomic_load_n(&d->cc, __ATOMIC_ACQUIRE);
	struct ibv_cq *cq[RSK_VERBS_EV_BATCH], *one;
	uint64_t tok[RSK_VERBS_EV_BATCH];
	int left = __atomic_load_n(&d->ncq, __ATOMIC_RELAXED), n, i;
	void *ctx;

	(void)events;
	if (left < 1)
		left = 1; /* an event of a CQ destroyed since: read it, it is acked and dropped */
	do {
		for (n = 0;
		     n < RSK_VERBS_EV_BATCH && n < left && ibv_get_cq_event(cc, &one, &ctx) == 0;
		     n++) {
			cq[n] = one;
			tok[n] = (uint64_t)(uintptr_t)ctx; /* a token, never dereferenced */
		}
		left -= n;
		rsk_verbs_ack_batch(cq, n);
		for (i = 0; i < n; i++)
			rsk_verbs_deliver(tok[i], RSK_VDEMUX_CQ);
	} while (n == RSK_VERBS_EV_BATCH && left > 0);
}

/* The loop's callback for the process's rdma_cm channel: as above; only the events that
 * say the connection is gone matter to an established one. */
static void rsk_verbs_cm_ready(void *arg, uint32_t events)
{
	struct rdma_event_channel *ch = arg;
	struct rdma_cm_event *ev;
	uint64_t tok[RSK_VERBS_EV_BATCH];
	int n = 0, i, more = 1;

	(void)events;
	while (more) {
		while (n < RSK_VERBS_EV_BATCH && (more = rdma_get_cm_event(ch, &ev) == 0)) {
			if (ev->event == RDMA_CM_EVENT_DISCONNECTED ||
			    ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ||
			    ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT)
				tok[n++] = (uint64_t)(uintptr_t)ev->id->context;
			rdma_ack_cm_event(ev); /* rdma_destroy_id waits for it */
		}
		for (i = 0; i < n; i++)
			rsk_verbs_deliver(tok[i], RSK_VDEMUX_CM);
		n = 0;
	}
}

/*
 * Watch a shared channel's fd once per process. Not under rsk_verbs_lock: a loop callback
 * (the listener's) takes that lock while the loop's is held. Whoever wins @state watches;
 * events that came before are still there for the (level-triggered) watch to report.
 */
static int rsk_verbs_watch_once(int *state, int fd, rsk_watch_fn fn, void *arg, rsk_watch_t *w)
{
	int zero = 0, rc;

	if (!__atomic_compare_exchange_n(state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 0;
	rc = rsk_evloop_watch(fd, EPOLLIN, fn, arg, w);
	if (rc < 0)
		__atomic_store_n(state, 0, __ATOMIC_RELEASE);
	return rc;
}

static struct ibv_pd *rsk_verbs_pd(struct ibv_context *ctx)
{
	struct rsk_verbs_dev *d;

	pthread_mutex_lock(&rsk_verbs_lock);
	d = rsk_verbs_dev_of(ctx);
	pthread_mutex_unlock(&rsk_verbs_lock);
	return d != NULL ? d->pd : NULL;
}

static int rsk_verbs_cc_watched[RSK_VERBS_MAX_DEV];

/* @ctx's completion channel in this process (made and watched at first use), or NULL; its
 * entry in *@dev. */
static struct ibv_comp_channel *rsk_verbs_cc(struct ibv_context *ctx, struct rsk_verbs_dev **dev)
{
	struct ibv_comp_channel *cc = NULL;
	struct rsk_verbs_dev *d;
	int i = 0;

	pthread_mutex_lock(&rsk_verbs_lock);
	d = rsk_verbs_dev_of(ctx);
	if (d != NULL && (d->cc == NULL || d->pid != rsk_proc_pid())) {
		/* A forked child's copy is the parent's: it makes its own (the parent's fd
		 * stays open here, as the parent's per-connection fds did). */
		i = (int)(d - rsk_verbs_pds);
		__atomic_store_n(&d->cc, ibv_create_comp_channel(ctx), __ATOMIC_RELEASE);
		d->pid = rsk_proc_pid();
		__atomic_store_n(&d->ncq, 0, __ATOMIC_RELAXED); /* the parent's CQs are not on it */
		__atomic_store_n(&rsk_verbs_cc_watched[i], 0, __ATOMIC_RELEASE);
		if (d->cc != NULL)
			(void)rsk_sys_set_fl(d->cc->fd, O_NONBLOCK);
	}
	if (d != NULL) {
		cc = d->cc;
		i = (int)(d - rsk_verbs_pds);
	}
	pthread_mutex_unlock(&rsk_verbs_lock);
	if (cc != NULL && rsk_verbs_watch_once(&rsk_verbs_cc_watched[i], cc->fd, rsk_verbs_cc_ready,
					       d, &rsk_verbs_pds[i].w) < 0)
		return NULL;
	*dev = d;
	return cc;
}

static int rsk_verbs_cmch_watched;

struct rdma_event_channel *rsk_verbs_cm_channel(void)
{
	struct rdma_event_channel *ch;

	pthread_mutex_lock(&rsk_verbs_lock);
	if (rsk_verbs_cmch == NULL || rsk_verbs_cmch_pid != rsk_proc_pid()) {
		rsk_verbs_cmch = rdma_create_event_channel();
		rsk_verbs_cmch_pid = rsk_proc_pid();
		__atomic_store_n(&rsk_verbs_cmch_watched, 0, __ATOMIC_RELEASE);
		if (rsk_verbs_cmch != NULL)
			(void)rsk_sys_set_fl(rsk_verbs_cmch->fd, O_NONBLOCK);
	}
	ch = rsk_verbs_cmch;
	pthread_mutex_unlock(&rsk_verbs_lock);
	if (ch != NULL && rsk_verbs_watch_once(&rsk_verbs_cmch_watched, ch->fd, rsk_verbs_cm_ready,
					       ch, &rsk_verbs_cmch_w) < 0)
		return NULL;
	return ch;
}

int rsk_verbs_ep_attach_cm(struct rsk_ep *ep, struct rdma_cm_id *id)
{
	struct rdma_event_channel *ch = rsk_verbs_cm_channel();

	if (ch == NULL)
		return -ENOMEM;
	id->context = (void *)(uintptr_t)RSK_VERBS_EP(ep)->tok;
	return rdma_migrate_id(id, ch) != 0 ? -errno : 0;
}

static int rsk_verbs_probe_once(void)
{
	struct ibv_device **list;
	int n = 0, i, found = 0;

	/* Registered memory must survive fork in the parent (children never use it). Kernels
	 * with MADV-free fork support make this a no-op; failure only matters after a fork. */
	if (ibv_fork_init() != 0)
		rsk_dbg("verbs: ibv_fork_init failed; fork with live connections is unsafe");
	list = ibv_get_device_list(&n);
	if (list == NULL)
		return -ENOSYS;
	for (i = 0; i < n; i++)
		if (rsk_config.device[0] == '\0' ||
		    strcmp(ibv_get_device_name(list[i]), rsk_config.device) == 0)
			found = 1;
	ibv_free_device_list(list);
	return found ? 0 : -ENODEV;
}

int rsk_verbs_probe(void)
{
	static int state = 1; /* 1 = not probed; else the answer (a device does not come later) */
	int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);

	if (s == 1) {
		s = rsk_verbs_probe_once();
		__atomic_store_n(&state, s, __ATOMIC_RELEASE);
	}
	return s;
}

static int rsk_verbs_post_recv_slot(struct rsk_verbs_ep *e, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(e->rx.mem + (size_t)slot * e->base.buf_size),
		.length = e->base.buf_size,
		.lkey = e->rx.lkey,
	};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;

	return -ibv_post_recv(e->id->qp, &wr, &bad);
}

static int rsk_verbs_make_qp(struct rsk_verbs_ep *e, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr qa;
	struct rsk_verbs_dev *d = NULL;
	struct ibv_comp_channel *cc = rsk_verbs_cc(e->id->verbs, &d);
	uint32_t nbuf = e->base.nbuf;

	if (cc == NULL)
		return -ENOMEM;
	e->sq_depth = 2 * nbuf + 8; /* data ring + control messages, with room to spare */
	e->sig_every = nbuf / 4 ? nbuf / 4 : 1;
	/* cq_context is our token, not our address: an event drained after we are gone finds
	 * a stale token (verbs_demux.h) */
	e->cq = ibv_create_cq(e->id->verbs, (int)(nbuf + e->sq_depth), (void *)(uintptr_t)e->tok,
			      cc, 0);
	if (e->cq == NULL)
		return -errno;
	e->dev = d;
	__atomic_add_fetch(&d->ncq, 1, __ATOMIC_RELAXED);
	if (ibv_req_notify_cq(e->cq, 0) != 0)
		return -EIO;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = e->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = e->sq_depth;
	qa.cap.max_recv_wr = nbuf;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = rsk_config.inline_size;
	if (rdma_create_qp(e->id, pd, &qa) != 0) {
		qa.cap.max_inline_data = 0; /* a device without inline sends */
		if (rdma_create_qp(e->id, pd, &qa) != 0)
			return -errno ? -errno : -ENOMEM;
	}
	e->base.max_inline = qa.cap.max_inline_data;
	return 0;
}

static int rsk_verbs_make_bufs(struct rsk_verbs_ep *e, struct ibv_pd *pd)
{
	size_t len = (size_t)e->base.nbuf * e->base.buf_size;
	uint32_t i;
	int rc;

	if ((rc = rsk_vpool_get(pd, len, &e->rx)) < 0 || (rc = rsk_vpool_get(pd, len, &e->tx)) < 0)
		return rc;
	for (i = 0; i < e->base.nbuf; i++)
		if ((rc = rsk_verbs_post_recv_slot(e, i)) < 0)
			return rc;
	return 0;
}

static void rsk_verbs_ep_free(struct rsk_verbs_ep *e)
{
	/* First: from now on no event reaches us (one drained already is acked by the loop
	 * before it looks us up, so ibv_destroy_cq and rdma_destroy_id below need not wait). */
	rsk_vdemux_del(e->tok);
	if (e->id != NULL && e->id->qp != NULL)
		rdma_destroy_qp(e->id);
	rsk_vpool_put(&e->rx); /* after the QP: nothing can land in them any more */
	rsk_vpool_put(&e->tx);
	if (e->cq != NULL)
		ibv_destroy_cq(e->cq);
	if (e->dev != NULL && e->owner == rsk_proc_pid())
		__atomic_sub_fetch(&e->dev->ncq, 1, __ATOMIC_RELAXED);
	if (e->id != NULL)
		rdma_destroy_id(e->id);
	free(e);
}

int rsk_verbs_ep_create(struct rdma_cm_id *id, uint32_t nbuf, uint32_t buf_size,
			struct rsk_ep **out)
{
	struct rsk_verbs_ep *e = calloc(1, sizeof(*e));
	struct ibv_pd *pd;
	int rc;

	if (e == NULL)
		return -ENOMEM;
	e->base.ops = &rsk_verbs_ops;
	e->base.nbuf = nbuf;
	e->base.buf_size = buf_size;
	e->base.oob_credits = 0;
	e->base.repost_any = 1;
	e->owner = rsk_proc_pid();
	e->id = id;
	e->tok = rsk_vdemux_add(e);
	pd = rsk_verbs_pd(id->verbs);
	rc = pd == NULL || e->tok == 0 ? -ENOMEM : rsk_verbs_make_qp(e, pd);
	if (rc == 0)
		rc = rsk_verbs_make_bufs(e, pd);
	if (rc < 0) {
		if (id->qp != NULL)
			rdma_destroy_qp(id);
		e->id = NULL; /* the caller still owns the id */
		rsk_verbs_ep_free(e);
		return rc;
	}
	*out = &e->base;
	return 0;
}

/* Take a completion event the loop handed us: re-arm, or go quiet (ep->quiet_ok). */
int rsk_verbs_cq_event(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	__atomic_and_fetch(&e->pend, ~RSK_VERBS_PEND_CQ, __ATOMIC_SEQ_CST);
	/* Quiet: no re-arm, so the next completions raise no event (no wake-up of the loop, no
	 * read, no re-arm ioctl per message) while our own threads poll the CQ. The store is
	 * sequentially consistent: the caller then looks for sleepers (conn.c). */
	if (__atomic_load_n(&ep->quiet_ok, __ATOMIC_RELAXED)) {
		__atomic_store_n(&e->quiet, 1, __ATOMIC_SEQ_CST);
		return 1;
	}
	/* Re-arm before anyone polls: a completion after this poll raises a new event. */
	(void)ibv_req_notify_cq(e->cq, 0);
	return 0;
}

/* Take an rdma_cm event the loop handed us: 1 when the connection is gone. */
int rsk_verbs_cm_event(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	return (__atomic_fetch_and(&e->pend, ~RSK_VERBS_PEND_CM, __ATOMIC_SEQ_CST) &
		RSK_VERBS_PEND_CM) != 0;
}

int rsk_verbs_event_fd(struct rsk_ep *ep, int i)
{
	(void)ep;
	(void)i;
	return -1; /* none of our own: the shared channels' events come through event_bind */
}

unsigned int rsk_verbs_on_event(struct rsk_ep *ep, int i)
{
	if (i == RSK_VDEMUX_CQ)
		return RSK_EPEV_DATA | (rsk_verbs_cq_event(ep) ? RSK_EPEV_QUIET : 0);
	return i == RSK_VDEMUX_CM && rsk_verbs_cm_event(ep) ? RSK_EPEV_GONE : 0;
}

/* Once the next round of the loop runs: fire @arg (a watch) for an event that came before
 * its owner bound it. */
static void rsk_verbs_fire_late(void *arg)
{
	(void)rsk_evloop_fire((rsk_watch_t)(uintptr_t)arg, EPOLLIN);
}

void rsk_verbs_event_bind(struct rsk_ep *ep, int i, uint64_t w)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	rsk_vdemux_bind(e->tok, i, w);
	/* An event the loop drained before this bind reached nobody (and left the CQ unarmed):
	 * it is delivered now, as an fd watched late would still have reported it. */
	if (w != 0 && (__atomic_load_n(&e->pend, __ATOMIC_SEQ_CST) & (1u << i)))
		(void)rsk_evloop_defer(rsk_verbs_fire_late, (void *)(uintptr_t)w);
}

unsigned int rsk_verbs_event_wait(struct rsk_ep *ep, int ms)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	unsigned int what = 0;
	uint32_t got;

	__atomic_add_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&e->pend, __ATOMIC_SEQ_CST) == 0 &&
	    !__atomic_load_n(&e->gone, __ATOMIC_SEQ_CST) && ms > 0)
		(void)rsk_sys_futex(&e->pend, FUTEX_WAIT_PRIVATE, 0, &ts);
	__atomic_sub_fetch(&e->waiters, 1, __ATOMIC_SEQ_CST);
	/* The CQ's event only: the loop's on_event takes the rdma_cm one (the owner must learn
	 * that the peer went), and `gone` tells us. */
	got = __atomic_fetch_and(&e->pend, ~RSK_VERBS_PEND_CQ, __ATOMIC_SEQ_CST);
	if (got & RSK_VERBS_PEND_CQ) {
		(void)ibv_req_notify_cq(e->cq, 0);
		what |= RSK_EPEV_DATA;
	}
	if (__atomic_load_n(&e->gone, __ATOMIC_SEQ_CST))
		what |= RSK_EPEV_GONE;
	return what;
}

unsigned int rsk_verbs_pending(struct rsk_ep *ep)
{
	return __atomic_load_n(&RSK_VERBS_EP(ep)->pend, __ATOMIC_SEQ_CST);
}

int rsk_verbs_sends_done(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	return e->broken || e->sq_done == e->sq_posted;
}

struct rdma_cm_id *rsk_verbs_id(struct rsk_ep *ep)
{
	return RSK_VERBS_EP(ep)->id;
}

int rsk_verbs_ep_foreign(struct rsk_ep *ep)
{
	return RSK_VERBS_EP(ep)->owner != rsk_proc_pid();
}

/* ---- the ops ---- */

static int rsk_verbs_probe_op(void)
{
	return rsk_verbs_probe();
}

static int rsk_verbs_post_recv(struct rsk_ep *ep, uint32_t slot)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	if (rsk_unlikely(slot >= ep->nbuf || e->owner != rsk_proc_pid()))
		return -EINVAL;
	return rsk_verbs_post_recv_slot(e, slot);
}

static const void *rsk_verbs_recv_buf(struct rsk_ep *ep, uint32_t slot)
{
	return RSK_VERBS_EP(ep)->rx.mem + (size_t)slot * ep->buf_size;
}

static int rsk_verbs_sq_full(const struct rsk_verbs_ep *e)
{
	return e->sq_posted - e->sq_done >= e->sq_depth;
}

static void *rsk_verbs_send_buf(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	/* A buffer is free once a signalled send at or after it completed; the engine polls
	 * (and so learns of completions) when we say the queue is full. */
	if (e->tx_data - e->tx_data_done >= ep->nbuf || rsk_verbs_sq_full(e) || e->broken)
		return NULL;
	return e->tx.mem + (size_t)(e->tx_data % ep->nbuf) * ep->buf_size;
}

static int rsk_verbs_post_send(struct rsk_ep *ep, const void *buf, uint32_t len, uint32_t imm,
			       unsigned int flags)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = e->tx.lkey};
	struct ibv_send_wr wr, *bad;
	int data = buf != NULL && len > 0 && !(flags & RSK_SEND_INLINE);
	int rc;

	if (e->broken)
		return e->broken;
	if (rsk_verbs_sq_full(e) || e->owner != rsk_proc_pid())
		return -EAGAIN;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(imm);
	if (len > 0) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
	}
	if (len <= ep->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	else if (!data)
		return -EINVAL; /* inline data from arbitrary memory must fit inline */
	e->sq_posted++;
	if (data)
		e->tx_data++;
	/* Signal every sig_every sends, whenever the queue is half full, and when asked (the
	 * engine asks for FIN/RST: that completion tells close() that everything before went). */
	if (++e->since_sig >= e->sig_every || (flags & RSK_SEND_SIGNALED) ||
	    e->sq_posted - e->sq_done >= e->sq_depth / 2) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		e->since_sig = 0;
	}
	wr.wr_id = ((uint64_t)e->tx_data << 32) | e->sq_posted;
	rc = ibv_post_send(e->id->qp, &wr, &bad);
	if (rc != 0) {
		e->broken = -ECONNRESET;
		return -ECONNRESET;
	}
	return 0;
}

static int rsk_verbs_tx_room(struct rsk_ep *ep)
{
	(void)ep;
	return 0; /* credits travel in immediates (oob_credits is 0) */
}

#define RSK_VERBS_BATCH 32

static int rsk_verbs_poll(struct rsk_ep *ep, struct rsk_wc *out, int n)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);
	struct ibv_wc wc[RSK_VERBS_BATCH];
	int got = 0, k, i, want;

	if (e->broken)
		return e->broken;
	if (e->owner != rsk_proc_pid())
		return -ENOTCONN;
	while (got < n) {
		want = n - got < RSK_VERBS_BATCH ? n - got : RSK_VERBS_BATCH;
		k = ibv_poll_cq(e->cq, want, wc);
		if (k < 0) {
			e->broken = -ECONNRESET;
			return e->broken;
		}
		for (i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				rsk_dbg("verbs: completion error %s", ibv_wc_status_str(wc[i].status));
				e->broken = -ECONNRESET;
				return e->broken;
			}
			if (wc[i].opcode & IBV_WC_RECV) {
				if (wc[i].wr_id >= ep->nbuf) {
					e->broken = -EPROTO;
					return e->broken;
				}
				out[got].op = RSK_WC_RECV;
				out[got].status = 0;
				out[got].slot = (uint32_t)wc[i].wr_id;
				out[got].len = wc[i].byte_len;
				out[got].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data)
										 : 0; /* rejected */
				got++;
			} else { /* a signalled send: it and everything before it went */
				e->sq_done = (uint32_t)wc[i].wr_id;
				e->tx_data_done = (uint32_t)(wc[i].wr_id >> 32);
			}
		}
		if (k < want)
			break;
	}
	return got;
}

static void rsk_verbs_kick(struct rsk_ep *ep, unsigned int what)
{
	(void)ep; /* the peer's event loop sees our completion and wakes it (see verbs.h) */
	(void)what;
}

static int rsk_verbs_arm(struct rsk_ep *ep, int sleep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	if (!sleep)
		return __atomic_load_n(&e->quiet, __ATOMIC_SEQ_CST);
	/* Exactly one caller takes a quiet CQ back (the loop or a sleeper) and arms it; what
	 * came before the arm raised nothing, and that caller harvests it. */
	if (!__atomic_exchange_n(&e->quiet, 0, __ATOMIC_SEQ_CST))
		return 0;
	(void)ibv_req_notify_cq(e->cq, 0);
	return 1;
}

static struct rsk_ready_state *rsk_verbs_ready(struct rsk_ep *ep)
{
	return &RSK_VERBS_EP(ep)->rs;
}

static void rsk_verbs_shutdown(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	/* The peer's next sends fail (its QP leaves RTS), as after TCP's RST. */
	if (e->owner == rsk_proc_pid() && e->id != NULL)
		(void)rdma_disconnect(e->id);
}

static int rsk_verbs_peer_closed(struct rsk_ep *ep)
{
	(void)ep;
	return 0; /* a closed peer shows as failing sends (flush errors) and its TCP end closing */
}

static void rsk_verbs_destroy(struct rsk_ep *ep)
{
	struct rsk_verbs_ep *e = RSK_VERBS_EP(ep);

	/* A forked child shares the device file with its parent: destroying "its" copy would
	 * destroy the parent's QP. The child just forgets it. */
	if (e->owner != rsk_proc_pid())
		return;
	rsk_verbs_ep_free(e);
}

const struct rsk_transport_ops rsk_verbs_ops = {
	.name = "verbs",
	.id = RDMASOCK_TRANSPORT_VERBS,
	.probe = rsk_verbs_probe_op,
	.post_recv = rsk_verbs_post_recv,
	.recv_buf = rsk_verbs_recv_buf,
	.send_buf = rsk_verbs_send_buf,
	.post_send = rsk_verbs_post_send,
	.tx_room = rsk_verbs_tx_room,
	.poll = rsk_verbs_poll,
	.kick = rsk_verbs_kick,
	.arm = rsk_verbs_arm,
	.ready = rsk_verbs_ready,
	.shutdown = rsk_verbs_shutdown,
	.peer_closed = rsk_verbs_peer_closed,
	.destroy = rsk_verbs_destroy,
};
