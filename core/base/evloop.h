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
 * The tick: @fn runs on the loop thread after every round, and the loop wakes at least every
 * millisecond while a tick is requested. rsk_evloop_request_tick() is cheap when a request
 * is already pending; rsk_evloop_take_tick() returns 1 and clears the request if there was
 * one (the tick function calls it, and requests again if work is left).
 */
void rsk_evloop_set_tick(void (*fn)(void));
void rsk_evloop_request_tick(void);

/* A tick is requested (set by request_tick, cleared by take_tick). Extern so that
 * take_tick is one load while none is: every wait of the application asks it. */
extern RSK_HIDDEN int rsk_ev_tick_wanted;

static inline int rsk_evloop_take_tick(void)
{
	if (!__atomic_load_n(&rsk_ev_tick_wanted, __ATOMIC_RELAXED))
		return 0;
	__atomic_store_n(&rsk_ev_tick_wanted, 0, __ATOMIC_SEQ_CST);
	return 1;
}

/* In a forked child: the thread and its epoll set are the parent's; forget every watch. */
void rsk_evloop_atfork_child(void);

/* For tests: is the calling thread the loop thread? */
int rsk_evloop_on_thread(void);

#endif
