/*
 * The event loop (see evloop.h). Watches live in a generation-tagged table (gentab.h); a
 * handle is its token, slot index and generation, and the token is what epoll carries, so an
 * event that was harvested just before its watch went is recognised as stale. The thread
 * takes the loop's lock per event and calls back under it; deferred work and the tick run
 * without it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "clock.h"
#include "evloop.h"
#include "fdhide.h"
#include "gentab.h"
#include "sys.h"
#include "thread.h"

/* A watch: the table's entry. */
struct rsk_ev_slot {
	rsk_watch_fn fn;
	void *arg;
	int fd; /* -1: virtual */
};

struct rsk_ev_defer {
	struct rsk_ev_defer *next;
	void (*fn)(void *arg);
	void *arg;
};

#define RSK_EV_WAKE ((uint64_t)UINT32_MAX) /* the eventfd's data: generation 0, no token */
#define RSK_EV_TICK_MS 1

static pthread_mutex_t rsk_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_gentab rsk_ev_slots = RSK_GENTAB_INIT(sizeof(struct rsk_ev_slot));
static struct rsk_ev_defer *rsk_ev_deferred;
static int rsk_ev_epfd = -1, rsk_ev_evfd = -1, rsk_ev_started;
static pthread_t rsk_ev_thread;
static __thread int rsk_ev_in_dispatch; /* this thread holds the lock in a callback */
static void (*rsk_ev_tick_fn)(void);
static void (*rsk_ev_async_fn)(void); /* rsk_evloop_run_async's one pending request */

/* Tick requests, RSK_EV_WANT_* (seq_cst: a Dekker pair with the thread's announcement that it
 * sleeps untimed). */
unsigned int rsk_ev_tick_wanted;
static int rsk_ev_sleeping;
static int64_t rsk_ev_settle_due_us; /* the loop's: end of the open settle window, 0 none */
static uint64_t rsk_ev_kick_count;   /* requests that woke the untimed sleep */

static void rsk_ev_lock_take(void)
{
	if (!rsk_ev_in_dispatch)
		pthread_mutex_lock(&rsk_ev_lock);
}

static void rsk_ev_lock_drop(void)
{
	if (!rsk_ev_in_dispatch)
		pthread_mutex_unlock(&rsk_ev_lock);
}

/* The slot @w names if it is still that watch, else NULL. Lock held. */
static struct rsk_ev_slot *rsk_ev_slot_of(rsk_watch_t w)
{
	return rsk_gentab_of(&rsk_ev_slots, w);
}

/* One event: the callback of its watch if the watch is still the one it was for. */
static void rsk_ev_dispatch(uint64_t data, uint32_t events)
{
	struct rsk_ev_slot *s;
	uint64_t scratch;

	if (data == RSK_EV_WAKE) {
		(void)rsk_sys_read(rsk_ev_evfd, &scratch, sizeof(scratch));
		return;
	}
	pthread_mutex_lock(&rsk_ev_lock);
	rsk_ev_in_dispatch = 1;
	s = rsk_ev_slot_of(data);
	if (s != NULL)
		s->fn(s->arg, events); /* the slot may move if fn adds a watch: read it first */
	rsk_ev_in_dispatch = 0;
	pthread_mutex_unlock(&rsk_ev_lock);
}

/*
 * The sleep's bound for requests @v: a tick soon, or the end of the settle window, opened now
 * if none is (the requests seen so far are its own: SEEN is cleared, so that only requests
 * made during the window open the next one).
 */
static int rsk_ev_wanted_ms(unsigned int v)
{
	int64_t now, left;

	if (v & RSK_EV_WANT_NOW)
		return RSK_EV_TICK_MS;
	now = rsk_now_us(); /* one clock read per sleep: a system call where there is no vDSO */
	if (rsk_ev_settle_due_us == 0) {
		__atomic_fetch_and(&rsk_ev_tick_wanted, ~RSK_EV_WANT_SEEN, __ATOMIC_SEQ_CST);
		rsk_ev_settle_due_us = now + RSK_EV_TICK_MS * 1000;
	}
	left = rsk_ev_settle_due_us - now;
	return left <= 0 ? 0 : (int)((left + 999) / 1000);
}

/* Untimed sleep unless a request is pending or a settle window is open; the requests are
 * re-read after announcing the sleep. */
static int rsk_ev_timeout(void)
{
	unsigned int v = __atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_SEQ_CST);

	if (v || rsk_ev_settle_due_us)
		return rsk_ev_wanted_ms(v);
	__atomic_store_n(&rsk_ev_sleeping, 1, __ATOMIC_SEQ_CST);
	v = __atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_SEQ_CST);
	if (v) {
		__atomic_store_n(&rsk_ev_sleeping, 0, __ATOMIC_SEQ_CST);
		return rsk_ev_wanted_ms(v);
	}
	return -1;
}

/*
 * At the end of a settle window: a settle request still pending (no wait of the application
 * took it) is due now. A window in which requests came is followed by another, so a busy
 * server's requests keep costing no system call; after one without, the loop may sleep
 * untimed again.
 */
static void rsk_ev_settle_window(void)
{
	unsigned int v;
	int64_t now;

	if (rsk_ev_settle_due_us == 0 || (now = rsk_now_us()) < rsk_ev_settle_due_us)
		return;
	v = __atomic_fetch_and(&rsk_ev_tick_wanted, ~RSK_EV_WANT_SEEN, __ATOMIC_SEQ_CST);
	if (v & RSK_EV_WANT_SETTLE)
		__atomic_fetch_or(&rsk_ev_tick_wanted, RSK_EV_WANT_NOW, __ATOMIC_SEQ_CST);
	rsk_ev_settle_due_us = (v & RSK_EV_WANT_SEEN) ? now + RSK_EV_TICK_MS * 1000 : 0;
}

static void rsk_ev_run_deferred(void)
{
	struct rsk_ev_defer *d, *next;

	pthread_mutex_lock(&rsk_ev_lock);
	d = rsk_ev_deferred;
	rsk_ev_deferred = NULL;
	pthread_mutex_unlock(&rsk_ev_lock);
	for (; d != NULL; d = next) {
		next = d->next;
		d->fn(d->arg);
		free(d);
	}
}

/* First in a round: whoever asked may be waiting with a bound (an _exit). */
static void rsk_ev_run_async(void)
{
	void (*fn)(void) = __atomic_load_n(&rsk_ev_async_fn, __ATOMIC_ACQUIRE);

	if (fn == NULL)
		return;
	fn();
	__atomic_store_n(&rsk_ev_async_fn, NULL, __ATOMIC_RELEASE);
}

static void *rsk_ev_main(void *arg)
{
	struct epoll_event ev[32];
	void (*tick)(void);
	int n, i;

	(void)arg;
	for (;;) {
		n = rsk_sys_epoll_wait(rsk_ev_epfd, ev, 32, rsk_ev_timeout());
		__atomic_store_n(&rsk_ev_sleeping, 0, __ATOMIC_SEQ_CST);
		if (n < 0 && n != -EINTR)
			break;
		rsk_thread_work_begin(); /* a fork waits for this round (thread.h) */
		rsk_ev_run_async();
		for (i = 0; i < n; i++)
			rsk_ev_dispatch(ev[i].data.u64, ev[i].events);
		rsk_ev_run_deferred();
		rsk_ev_settle_window();
		tick = __atomic_load_n(&rsk_ev_tick_fn, __ATOMIC_ACQUIRE);
		if (tick != NULL)
			tick();
		rsk_thread_work_end();
	}
	return NULL;
}

static int rsk_ev_open_fds(void)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = RSK_EV_WAKE};
	int ep, efd, rc;

	ep = rsk_sys_epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0 || (ep = rsk_fd_hide(ep)) < 0)
		return ep;
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	rc = efd < 0 ? -errno : 0;
	if (rc == 0 && (efd = rsk_fd_hide(efd)) < 0)
		rc = efd;
	if (rc == 0 && (rc = rsk_sys_epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev)) < 0)
		rsk_fd_unhide_close(efd);
	if (rc < 0) {
		rsk_fd_unhide_close(ep);
		return rc;
	}
	rsk_ev_epfd = ep;
	rsk_ev_evfd = efd;
	return 0;
}

/* Start the thread (lock held). It takes no signals: they belong to the application. */
static int rsk_ev_start(void)
{
	int rc = rsk_ev_open_fds();

	if (rc < 0)
		return rc;
	rc = rsk_thread_spawn(rsk_ev_main, NULL, &rsk_ev_thread);
	if (rc < 0) {
		rsk_fd_unhide_close(rsk_ev_epfd);
		rsk_fd_unhide_close(rsk_ev_evfd);
		rsk_ev_epfd = rsk_ev_evfd = -1;
		return rc;
	}
	__atomic_store_n(&rsk_ev_started, 1, __ATOMIC_RELEASE);
	return 0;
}

int rsk_evloop_start(void)
{
	int rc = 0;

	if (__atomic_load_n(&rsk_ev_started, __ATOMIC_ACQUIRE))
		return 0;
	rsk_ev_lock_take();
	if (!rsk_ev_started)
		rc = rsk_ev_start();
	rsk_ev_lock_drop();
	return rc;
}

/* Under the loop's lock: start the loop if need be and fill a free slot for @fn(@arg) on
 * @fd (-1: virtual); its handle in *@w. 0 or -errno. */
static int rsk_ev_slot_claim(int fd, rsk_watch_fn fn, void *arg, rsk_watch_t *w)
{
	struct rsk_ev_slot *s;
	int rc = 0;

	if (!rsk_ev_started)
		rc = rsk_ev_start();
	if (rc < 0)
		return rc;
	s = rsk_gentab_add(&rsk_ev_slots, w);
	if (s == NULL)
		return -ENOMEM;
	s->fn = fn;
	s->arg = arg;
	s->fd = fd;
	return 0;
}

int rsk_evloop_watch(int fd, uint32_t events, rsk_watch_fn fn, void *arg, rsk_watch_t *out)
{
	struct epoll_event ev = {.events = events};
	rsk_watch_t w;
	int rc;

	rsk_ev_lock_take();
	rc = rsk_ev_slot_claim(fd, fn, arg, &w);
	if (rc == 0) {
		ev.data.u64 = w;
		rc = rsk_sys_epoll_ctl(rsk_ev_epfd, EPOLL_CTL_ADD, fd, &ev);
		if (rc < 0)
			(void)rsk_gentab_del(&rsk_ev_slots, w);
		else
			*out = w;
	}
	rsk_ev_lock_drop();
	return rc;
}

int rsk_evloop_watch_virtual(rsk_watch_fn fn, void *arg, rsk_watch_t *out)
{
	int rc;

	rsk_ev_lock_take();
	/* fd -1: nothing in the epoll set, rsk_evloop_fire calls it */
	rc = rsk_ev_slot_claim(-1, fn, arg, out);
	rsk_ev_lock_drop();
	return rc;
}

int rsk_evloop_fire(rsk_watch_t w, uint32_t events)
{
	struct rsk_ev_slot *s;
	int held = rsk_ev_in_dispatch, fired = 0;

	if (w == 0)
		return 0;
	rsk_ev_lock_take();
	rsk_ev_in_dispatch = 1; /* the callback may watch and unwatch, as from an epoll event */
	s = rsk_ev_slot_of(w);
	if (s != NULL && s->fd < 0) {
		s->fn(s->arg, events);
		fired = 1;
	}
	rsk_ev_in_dispatch = held;
	rsk_ev_lock_drop();
	return fired;
}

void rsk_evloop_unwatch(rsk_watch_t w)
{
	struct rsk_ev_slot *s;

	if (w == 0)
		return;
	rsk_ev_lock_take();
	s = rsk_ev_slot_of(w);
	if (s != NULL) {
		if (s->fd >= 0)
			(void)rsk_sys_epoll_ctl(rsk_ev_epfd, EPOLL_CTL_DEL, s->fd, NULL);
		(void)rsk_gentab_del(&rsk_ev_slots, w);
	}
	rsk_ev_lock_drop();
}

int rsk_evloop_defer(void (*fn)(void *arg), void *arg)
{
	struct rsk_ev_defer *d = malloc(sizeof(*d));
	uint64_t one = 1;
	int rc = 0;

	if (d == NULL)
		return -ENOMEM;
	d->fn = fn;
	d->arg = arg;
	rsk_ev_lock_take();
	if (!rsk_ev_started)
		rc = rsk_ev_start();
	if (rc == 0) {
		d->next = rsk_ev_deferred;
		rsk_ev_deferred = d;
	}
	rsk_ev_lock_drop();
	if (rc < 0) {
		free(d);
		return rc;
	}
	/* Outside a callback (another thread, or a deferred or tick function) no round may be
	 * coming: the loop can be in its untimed sleep. Wake it so the work runs now. */
	if (!rsk_ev_in_dispatch)
		(void)rsk_sys_write(rsk_ev_evfd, &one, sizeof(one));
	return 0;
}

int rsk_evloop_run_async(void (*fn)(void))
{
	void (*none)(void) = NULL;
	uint64_t one = 1;
	int efd = __atomic_load_n(&rsk_ev_evfd, __ATOMIC_ACQUIRE);

	if (!__atomic_load_n(&rsk_ev_started, __ATOMIC_ACQUIRE) || efd < 0)
		return -ESRCH;
	if (rsk_evloop_on_thread())
		return -EDEADLK;
	if (!__atomic_compare_exchange_n(&rsk_ev_async_fn, &none, fn, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return -EBUSY;
	(void)rsk_sys_write(efd, &one, sizeof(one));
	return 0;
}

void rsk_evloop_set_tick(void (*fn)(void))
{
	__atomic_store_n(&rsk_ev_tick_fn, fn, __ATOMIC_RELEASE);
}

/* Add @bits to the requests; wake the loop if it sleeps untimed. */
static void rsk_ev_request(unsigned int bits)
{
	uint64_t one = 1;

	if ((__atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_RELAXED) & bits) == bits)
		return;
	__atomic_fetch_or(&rsk_ev_tick_wanted, bits, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&rsk_ev_sleeping, 0, __ATOMIC_SEQ_CST) && rsk_ev_evfd >= 0) {
		__atomic_add_fetch(&rsk_ev_kick_count, 1, __ATOMIC_RELAXED);
		(void)rsk_sys_write(rsk_ev_evfd, &one, sizeof(one));
	}
}

void rsk_evloop_request_tick(void)
{
	rsk_ev_request(RSK_EV_WANT_NOW);
}

void rsk_evloop_request_settle(void)
{
	rsk_ev_request(RSK_EV_WANT_SETTLE | RSK_EV_WANT_SEEN);
}

uint64_t rsk_evloop_kicks(void)
{
	return __atomic_load_n(&rsk_ev_kick_count, __ATOMIC_RELAXED);
}

void rsk_evloop_atfork_child(void)
{
	/* The lock may have been held by another thread at fork: start from a fresh one. */
	pthread_mutex_init(&rsk_ev_lock, NULL);
	if (rsk_ev_epfd >= 0)
		rsk_fd_unhide_close(rsk_ev_epfd); /* our copy of the parent's set: not ours */
	if (rsk_ev_evfd >= 0)
		rsk_fd_unhide_close(rsk_ev_evfd);
	rsk_ev_epfd = rsk_ev_evfd = -1;
	rsk_ev_started = 0;
	rsk_ev_sleeping = 0;
	rsk_ev_settle_due_us = 0; /* the parent's thread's window */
	rsk_ev_async_fn = NULL; /* the parent's request, for the parent's thread */
	rsk_gentab_clear(&rsk_ev_slots); /* stale handles held above stay stale */
	while (rsk_ev_deferred != NULL) { /* the parent's work, not ours */
		struct rsk_ev_defer *d = rsk_ev_deferred;

		rsk_ev_deferred = d->next;
		free(d);
	}
}

int rsk_evloop_on_thread(void)
{
	return rsk_ev_started && pthread_equal(pthread_self(), rsk_ev_thread);
}
