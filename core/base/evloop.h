/*
 * The event loop: one thread per process, started on first use, that sleeps in epoll_wait
 * (untimed unless a tick is requested) and calls back whoever registered a watch. It knows
 * no module above it: connections, relays and listeners register {fd, callback} watches,
 * queue deferred work, and request the periodic tick (net/smc's handler registration).
 *
 * Lock order: a callback runs with the loop's lock held, so a caller that holds any lock a
 * callback takes (a connection's) must not call watch/unwatch. In exchange, once
 * rsk_evloop_unwatch() returns, that watch's callback is not running and never runs again:
 * every event carries the watch's id and generation, so an event queued for a watch that
 * was removed (and whose slot or memory was reused) is dropped, never delivered to the new
 * owner.
 */
#ifndef RSK_BASE_EVLOOP_H
#define RSK_BASE_EVLOOP_H

#include <stdint.h>

#include "compiler.h"

/* @events: what epoll reported (EPOLLIN, EPOLLHUP, ...). Runs on the loop thread. */
typedef void (*rsk_watch_fn)(void *arg, uint32_t events);

/* A watch handle: 0 is never a valid one. */
typedef uint64_t rsk_watch_t;

/*
 * Watch @fd for @events (epoll bits, EPOLLET and EPOLLONESHOT allowed). Starts the thread
 * if needed. 0 or -errno; *@out is set on success. May be called from a callback.
 */
int rsk_evloop_watch(int fd, uint32_t events, rsk_watch_fn fn, void *arg, rsk_watch_t *out);

/* Make sure the thread runs (the tick needs it even with nothing watched). 0 or -errno. */
int rsk_evloop_start(void);

/*
 * A watch without an fd of its own, for events a module demultiplexes itself from one fd it
 * shares between many objects (verbs: one completion channel per device, one rdma_cm channel
 * per process). rsk_evloop_fire() calls its callback under the loop's lock, from the loop
 * thread (a callback of the shared fd's watch, or deferred work): a stale handle (the watch
 * was removed, its slot perhaps reused) is dropped, so the object's owner gets the same
 * promise as for an fd watch. Returns 1 when the callback ran.
 */
int rsk_evloop_watch_virtual(rsk_watch_fn fn, void *arg, rsk_watch_t *out);
int rsk_evloop_fire(rsk_watch_t w, uint32_t events);

/* Remove a watch (0 and stale handles are ignored). May be called from a callback. */
void rsk_evloop_unwatch(rsk_watch_t w);

/* Run @fn(@arg) on the loop thread without the loop's lock (for work that takes locks a
 * callback may not, such as releasing a connection): after the current round when called
 * from a callback, else promptly (the loop is woken; started if needed). 0 or -errno. */
int rsk_evloop_defer(void (*fn)(void *arg), void *arg);

/*
 * Run @fn once on the loop thread, asked from anywhere, a signal handler included: an atomic
 * exchange and a write(2), no lock and no allocation, so it cannot wait for whatever the
 * interrupted thread holds (rsk_evloop_defer allocates and takes the loop's lock). One request
 * at a time. 0, -ESRCH when the thread does not run (none started in this process), -EDEADLK
 * on the loop thread itself (it would wait for itself), -EBUSY while a request is pending.
 */
int rsk_evloop_run_async(void (*fn)(void));

/*
 * The tick: @fn runs on the loop thread after every round. Two kinds of request:
 * - rsk_evloop_request_tick(): soon. The loop wakes at once (an eventfd write when it sleeps
 *   untimed) and at least every millisecond while one is pending (a stage to post);
 * - rsk_evloop_request_settle(): within about two RSK_EV_TICK_MS, never before one has passed
 *   since the loop saw the first request (credits a reader owes: its answer, usually sent
 *   well within that, carries them for free). Only a request that finds the loop in its
 *   untimed sleep writes the eventfd; the loop then stays in timed sleeps while requests keep
 *   coming, one window after the last, so further requests cost no system call.
 * Both are cheap when a request of their kind is pending. The tick function takes what is due
 * with rsk_evloop_take_due() (a settle request becomes due when its window ends) and requests
 * again if work is left; a wait of the application, which does the same work, takes every
 * request at once with rsk_evloop_take_tick().
 */
void rsk_evloop_set_tick(void (*fn)(void));
void rsk_evloop_request_tick(void);
void rsk_evloop_request_settle(void);

/* How many requests woke the loop from its untimed sleep (eventfd writes), for tests and
 * benchmarks. */
uint64_t rsk_evloop_kicks(void);

/* Requests (RSK_EV_WANT_* bits: set by the request functions, cleared by the takes). Extern
 * so that a take is one load while none is: every wait of the application asks it. */
#define RSK_EV_WANT_NOW 1u    /* request_tick, or a settle request whose window ended */
#define RSK_EV_WANT_SETTLE 2u /* request_settle */
#define RSK_EV_WANT_SEEN 4u   /* a settle request came in this window (the loop clears it) */
extern RSK_HIDDEN unsigned int rsk_ev_tick_wanted;

static inline int rsk_evloop_take_bits(unsigned int bits)
{
	if (!(__atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_RELAXED) & bits))
		return 0;
	__atomic_fetch_and(&rsk_ev_tick_wanted, ~(RSK_EV_WANT_NOW | RSK_EV_WANT_SETTLE),
			   __ATOMIC_SEQ_CST);
	return 1;
}

/* A request is pending (a wait has work: rsk_evloop_take_tick would return 1). */
static inline int rsk_evloop_tick_pending(void)
{
	return (__atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_RELAXED) &
		(RSK_EV_WANT_NOW | RSK_EV_WANT_SETTLE)) != 0;
}

static inline int rsk_evloop_take_tick(void)
{
	return rsk_evloop_take_bits(RSK_EV_WANT_NOW | RSK_EV_WANT_SETTLE);
}

static inline int rsk_evloop_take_due(void)
{
	return rsk_evloop_take_bits(RSK_EV_WANT_NOW);
}

/* In a forked child: the thread and its epoll set are the parent's; forget every watch. */
void rsk_evloop_atfork_child(void);

/* For tests: is the calling thread the loop thread? */
int rsk_evloop_on_thread(void);

#endif
