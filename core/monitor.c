/*
 * The liveness thread (see monitor.h). It blocks in epoll_wait on the hidden TCP sockets;
 * an event means the peer's TCP end closed or failed. Connections are looked up in a small
 * registry under a mutex so a connection being released is never touched afterwards.
 * While some connection holds a staged (coalesced, unposted) message the thread also ticks
 * every millisecond and posts it, so Nagle can never hold data longer than that even when
 * the application waits somewhere we do not see; with nothing staged it sleeps untimed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "conn.h"
#include "transport/verbs.h"
#include "log.h"
#include "monitor.h"
#include "relay.h"
#include "real.h"

static pthread_mutex_t rsk_mon_lock = PTHREAD_MUTEX_INITIALIZER;
static int rsk_mon_epfd = -1;
static int rsk_mon_started;
static int rsk_mon_evfd = -1; /* wakes the thread out of its untimed sleep */

/* Staging hint (atomics, seq_cst: a Dekker pair with the thread's sleep, see below). */
static int rsk_mon_hint;     /* a connection may hold a staged message */
static int rsk_mon_sleeping; /* the thread is about to sleep, or sleeps, untimed */

#define RSK_MON_TICK_MS 1

/* Registry: which connections are live here (the thread only touches registered ones). */
static struct rsk_conn **rsk_mon_conns;
static size_t rsk_mon_n, rsk_mon_cap;

static int rsk_mon_find(struct rsk_conn *c)
{
	size_t i;

	for (i = 0; i < rsk_mon_n; i++)
		if (rsk_mon_conns[i] == c)
			return (int)i;
	return -1;
}

static void rsk_mon_relay_step(struct rsk_conn *c);

static void rsk_mon_event(struct rsk_conn *c)
{
	pthread_mutex_lock(&rsk_mon_lock);
	if (rsk_mon_find(c) < 0) { /* released meanwhile */
		pthread_mutex_unlock(&rsk_mon_lock);
		return;
	}
	rsk_conn_lock(c);
	rsk_conn_peer_gone(c);
	/* Stop listening: the event is level-triggered and will not go away. */
	(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->tcp_fd, NULL);
	rsk_conn_unlock(c);
	if (c->relay != NULL)
		rsk_mon_relay_step(c);
	pthread_mutex_unlock(&rsk_mon_lock);
}

/* epoll data: a pointer with its kind in the low bits (all are 8-byte aligned). */
#define RSK_MON_TCP 0u      /* a connection's TCP placeholder: the peer went away */
#define RSK_MON_CQ 1u       /* a verbs connection's completion channel */
#define RSK_MON_LISTENER 2u /* a verbs listener's rdma_cm events */
#define RSK_MON_EVFD 3u
#define RSK_MON_CM 4u /* a verbs connection's rdma_cm events: the peer disconnected */
#define RSK_MON_RELAY 5u /* a relayed connection's socketpair end (relay.c) */

/* Relayed connections whose relay is over, released after the dispatch (not under our
 * lock: releasing takes it). */
static struct rsk_conn *rsk_mon_done[64];
static int rsk_mon_ndone;

/* Pump a relayed connection (our lock held, @c registered); queue it once it is over. */
static void rsk_mon_relay_step(struct rsk_conn *c)
{
	int over;

	rsk_conn_lock(c);
	over = rsk_relay_pump(c);
	if (over && !c->relay_done && rsk_mon_ndone < 64) {
		c->relay_done = 1;
		rsk_mon_done[rsk_mon_ndone++] = c;
	}
	rsk_conn_unlock(c);
}

static uint64_t rsk_mon_tag(const void *p, unsigned int kind)
{
	return (uint64_t)(uintptr_t)p | kind;
}

/* Registered verbs listeners (the thread touches registered ones only). */
static struct rsk_verbs_listener *rsk_mon_lsn[64];
static size_t rsk_mon_nlsn;

static void rsk_mon_cq(struct rsk_conn *c)
{
	pthread_mutex_lock(&rsk_mon_lock);
	if (rsk_mon_find(c) >= 0) {
		rsk_verbs_cq_event(c->ep);
		if (c->relay != NULL) {
			rsk_mon_relay_step(c);
		} else {
			rsk_conn_lock(c);
			rsk_conn_remote_wake(c);
			rsk_conn_unlock(c);
		}
	}
	pthread_mutex_unlock(&rsk_mon_lock);
}

static void rsk_mon_cm(struct rsk_conn *c)
{
	pthread_mutex_lock(&rsk_mon_lock);
	if (rsk_mon_find(c) >= 0 && rsk_verbs_cm_event(c->ep)) {
		rsk_conn_lock(c);
		rsk_conn_peer_gone(c);
		rsk_conn_unlock(c);
		if (c->relay != NULL)
			rsk_mon_relay_step(c);
	}
	pthread_mutex_unlock(&rsk_mon_lock);
}

static void rsk_mon_listener(struct rsk_verbs_listener *l)
{
	size_t i;

	pthread_mutex_lock(&rsk_mon_lock);
	for (i = 0; i < rsk_mon_nlsn; i++)
		if (rsk_mon_lsn[i] == l)
			rsk_verbs_listener_event(l);
	pthread_mutex_unlock(&rsk_mon_lock);
}

static void rsk_mon_dispatch(uint64_t data, uint64_t *scratch)
{
	void *p = (void *)(uintptr_t)(data & ~(uint64_t)7);

	switch ((unsigned int)(data & 7)) {
	case RSK_MON_TCP:
		rsk_mon_event(p);
		break;
	case RSK_MON_CQ:
		rsk_mon_cq(p);
		break;
	case RSK_MON_LISTENER:
		rsk_mon_listener(p);
		break;
	case RSK_MON_CM:
		rsk_mon_cm(p);
		break;
	case RSK_MON_RELAY:
		pthread_mutex_lock(&rsk_mon_lock);
		if (rsk_mon_find(p) >= 0)
			rsk_mon_relay_step(p);
		pthread_mutex_unlock(&rsk_mon_lock);
		break;
	default:
		(void)!RSK_REAL(read)(rsk_mon_evfd, scratch, sizeof(*scratch));
	}
}

void rsk_monitor_staged(void)
{
	uint64_t one = 1;

	if (__atomic_load_n(&rsk_mon_hint, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&rsk_mon_hint, 1, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&rsk_mon_sleeping, 0, __ATOMIC_SEQ_CST) && rsk_mon_evfd >= 0)
		(void)!RSK_REAL(write)(rsk_mon_evfd, &one, sizeof(one));
}

/*
 * Post every staged message. The hint is cleared before the pass, so a stage made during
 * it sets the hint again; stages we could not reach (lock busy) keep it set.
 */
void rsk_monitor_push_all(void)
{
	struct rsk_conn *c;
	int left = 0, rc;
	size_t i;

	if (!__atomic_load_n(&rsk_mon_hint, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&rsk_mon_hint, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&rsk_mon_lock);
	for (i = 0; i < rsk_mon_n; i++) {
		c = rsk_mon_conns[i];
		rc = pthread_mutex_trylock(&c->lock);
		if (rc == EOWNERDEAD) { /* as rsk_conn_lock: a holder died inside */
			rsk_stream_set_error(&c->st, -ECONNRESET);
			pthread_mutex_consistent(&c->lock);
		} else if (rc != 0) {
			left = 1; /* busy: the next pass (or the owner) sees it */
			continue;
		}
		/* Writability does not change (a stage already counts as a used buffer) and the
		 * peer is kicked by the post, so no readiness sync is needed here. */
		(void)rsk_stream_push(&c->st);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&rsk_mon_lock);
	if (left)
		__atomic_store_n(&rsk_mon_hint, 1, __ATOMIC_SEQ_CST);
}

/* Untimed sleep unless a stage may exist; the hint is re-read after announcing the sleep. */
static int rsk_mon_timeout(void)
{
	if (__atomic_load_n(&rsk_mon_hint, __ATOMIC_SEQ_CST))
		return RSK_MON_TICK_MS;
	__atomic_store_n(&rsk_mon_sleeping, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&rsk_mon_hint, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&rsk_mon_sleeping, 0, __ATOMIC_SEQ_CST);
		return RSK_MON_TICK_MS;
	}
	return -1;
}

/* Relays that are over: end their streams and free them (this takes our lock itself). */
static void rsk_mon_release_done(void)
{
	struct rsk_conn *done[64];
	int n, i;

	pthread_mutex_lock(&rsk_mon_lock);
	n = rsk_mon_ndone;
	for (i = 0; i < n; i++)
		done[i] = rsk_mon_done[i];
	rsk_mon_ndone = 0;
	pthread_mutex_unlock(&rsk_mon_lock);
	for (i = 0; i < n; i++)
		rsk_conn_release(done[i]);
}

int rsk_monitor_relay(struct rsk_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				 .data.u64 = rsk_mon_tag(c, RSK_MON_RELAY)};
	int rc = 0;

	pthread_mutex_lock(&rsk_mon_lock);
	if (rsk_mon_find(c) < 0 ||
	    RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, c->ctl_fd, &ev) < 0)
		rc = -EINVAL;
	else
		rsk_mon_relay_step(c); /* what is already there */
	pthread_mutex_unlock(&rsk_mon_lock);
	return rc;
}

static void *rsk_mon_main(void *arg)
{
	struct epoll_event ev[32];
	uint64_t v;
	int n, i;

	(void)arg;
	for (;;) {
		n = RSK_REAL(epoll_wait)(rsk_mon_epfd, ev, 32, rsk_mon_timeout());
		__atomic_store_n(&rsk_mon_sleeping, 0, __ATOMIC_SEQ_CST);
		if (n < 0 && errno != EINTR)
			break;
		for (i = 0; i < n; i++)
			rsk_mon_dispatch(ev[i].data.u64, &v);
		rsk_mon_release_done();
		rsk_monitor_push_all();
	}
	return NULL;
}

static int rsk_mon_evfd_open(void)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = rsk_mon_tag(NULL, RSK_MON_EVFD)};
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	if (fd < 0)
		return -errno;
	fd = rsk_fd_hide(fd);
	if (fd < 0)
		return fd;
	if (RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		rsk_fd_unhide_close(fd);
		return -errno;
	}
	rsk_mon_evfd = fd;
	return 0;
}

static int rsk_mon_start(void)
{
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t t;
	int fd, rc;

	fd = RSK_REAL(epoll_create1)(EPOLL_CLOEXEC);
	if (fd < 0)
		return -errno;
	fd = rsk_fd_hide(fd);
	if (fd < 0)
		return fd;
	rsk_mon_epfd = fd;
	rc = rsk_mon_evfd_open();
	if (rc < 0) {
		rsk_fd_unhide_close(fd);
		rsk_mon_epfd = -1;
		return rc;
	}
	/* The thread takes no signals: they belong to the application's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	rc = pthread_create(&t, &a, rsk_mon_main, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		rsk_fd_unhide_close(fd);
		rsk_fd_unhide_close(rsk_mon_evfd);
		rsk_mon_epfd = rsk_mon_evfd = -1;
		return -rc;
	}
	rsk_mon_started = 1;
	return 0;
}

int rsk_monitor_add(struct rsk_conn *c)
{
	struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR, .data.ptr = c};
	struct rsk_conn **n;
	int rc = 0;

	pthread_mutex_lock(&rsk_mon_lock);
	if (!rsk_mon_started)
		rc = rsk_mon_start();
	if (rc == 0 && rsk_mon_n == rsk_mon_cap) {
		n = realloc(rsk_mon_conns, (rsk_mon_cap ? rsk_mon_cap * 2 : 64) * sizeof(*n));
		if (n == NULL)
			rc = -ENOMEM;
		else {
			rsk_mon_conns = n;
			rsk_mon_cap = rsk_mon_cap ? rsk_mon_cap * 2 : 64;
		}
	}
	if (rc == 0 && RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, c->tcp_fd, &ev) < 0)
		rc = -errno;
	if (rc == 0 && c->transport == RDMASOCK_TRANSPORT_VERBS) {
		struct epoll_event cq = {.events = EPOLLIN, .data.u64 = rsk_mon_tag(c, RSK_MON_CQ)};

		struct epoll_event cm = {.events = EPOLLIN, .data.u64 = rsk_mon_tag(c, RSK_MON_CM)};

		if (RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, rsk_verbs_cq_fd(c->ep), &cq) <
		    0) {
			rc = -errno;
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->tcp_fd, NULL);
		} else if (rsk_verbs_cm_fd(c->ep) >= 0) {
			/* best effort: the TCP placeholder reports a dead peer anyway */
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, rsk_verbs_cm_fd(c->ep),
						  &cm);
		}
	}
	if (rc == 0)
		rsk_mon_conns[rsk_mon_n++] = c;
	pthread_mutex_unlock(&rsk_mon_lock);
	return rc;
}

void rsk_monitor_del(struct rsk_conn *c)
{
	int i;

	pthread_mutex_lock(&rsk_mon_lock);
	i = rsk_mon_find(c);
	if (i >= 0) {
		rsk_mon_conns[i] = rsk_mon_conns[--rsk_mon_n];
		if (rsk_mon_epfd >= 0)
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->tcp_fd, NULL);
		if (rsk_mon_epfd >= 0 && c->relay != NULL)
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->ctl_fd, NULL);
		if (rsk_mon_epfd >= 0 && c->transport == RDMASOCK_TRANSPORT_VERBS &&
		    !rsk_verbs_ep_foreign(c->ep)) {
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, rsk_verbs_cq_fd(c->ep),
						  NULL);
			if (rsk_verbs_cm_fd(c->ep) >= 0)
				(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL,
							  rsk_verbs_cm_fd(c->ep), NULL);
		}
	}
	pthread_mutex_unlock(&rsk_mon_lock);
}

int rsk_monitor_add_listener(struct rsk_verbs_listener *l)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = rsk_mon_tag(l, RSK_MON_LISTENER)};
	int rc = 0;

	pthread_mutex_lock(&rsk_mon_lock);
	if (!rsk_mon_started)
		rc = rsk_mon_start();
	if (rc == 0 && rsk_mon_nlsn == sizeof(rsk_mon_lsn) / sizeof(rsk_mon_lsn[0]))
		rc = -ENOSPC;
	if (rc == 0 && RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, rsk_verbs_listener_fd(l),
					   &ev) < 0)
		rc = -errno;
	if (rc == 0)
		rsk_mon_lsn[rsk_mon_nlsn++] = l;
	pthread_mutex_unlock(&rsk_mon_lock);
	return rc;
}

void rsk_monitor_del_listener(struct rsk_verbs_listener *l)
{
	size_t i;

	pthread_mutex_lock(&rsk_mon_lock);
	for (i = 0; i < rsk_mon_nlsn; i++) {
		if (rsk_mon_lsn[i] != l)
			continue;
		rsk_mon_lsn[i] = rsk_mon_lsn[--rsk_mon_nlsn];
		(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, rsk_verbs_listener_fd(l), NULL);
		break;
	}
	pthread_mutex_unlock(&rsk_mon_lock);
}

void rsk_monitor_listener_fpc(struct rsk_verbs_listener *l)
{
	size_t i;

	pthread_mutex_lock(&rsk_mon_lock);
	for (i = 0; i < rsk_mon_nlsn; i++)
		if (rsk_mon_lsn[i] == l)
			rsk_verbs_listener_refuse(l);
	pthread_mutex_unlock(&rsk_mon_lock);
}

void rsk_monitor_atfork_child(void)
{
	size_t i, n;
	struct rsk_conn **old;

	/* The lock may have been held by another thread at fork: start from a fresh one. */
	pthread_mutex_init(&rsk_mon_lock, NULL);
	if (rsk_mon_epfd >= 0)
		rsk_fd_unhide_close(rsk_mon_epfd); /* shared with the parent's thread: not ours */
	rsk_mon_epfd = -1;
	if (rsk_mon_evfd >= 0)
		rsk_fd_unhide_close(rsk_mon_evfd);
	rsk_mon_evfd = -1;
	rsk_mon_sleeping = 0;
	rsk_mon_started = 0;
	old = rsk_mon_conns;
	n = rsk_mon_n;
	rsk_mon_conns = NULL;
	rsk_mon_n = rsk_mon_cap = 0;
	for (i = 0; i < n; i++)
		if (old[i]->transport != RDMASOCK_TRANSPORT_VERBS) /* not the child's (sock.c) */
			(void)rsk_monitor_add(old[i]);
	free(old);
	rsk_mon_nlsn = 0; /* verbs listeners stay the parent's */
}
