/*
 * When a wait spins, and how it shares the core while it does: the per-thread yield back-off
 * and the per-object spin learner that every spinning wait of the calls layer uses (io.c's
 * blocking calls and poll spin, fastwait.c's epoll spin, pollfast.c). Policy only: it makes
 * no wait of its own.
 */
#ifndef RSK_CALLS_SPIN_H
#define RSK_CALLS_SPIN_H

#include <stdint.h>

/*
 * Spins yield only when it helps (the peer may share our core; docs/design.md, "Waits"). A
 * spin yields once it has run RSK_SPIN_YIELD_US, and then again whenever this thread's
 * interval has passed since its last yield; each yield is timed (from @now, which callers
 * pass fresh: they yield only right after a clock read, one more read here would be a system
 * call in a guest without a vDSO clock, and a stale one would make a yield look slow): one
 * back within RSK_YIELD_QUICK_US found nobody else wanting the core and doubles the interval
 * (at least RSK_SPIN_YIELD_US, at most RSK_YIELD_MAX_US, so a long uncontended spin makes one
 * system call per that long and a wait answered within RSK_SPIN_YIELD_US none), a slower one
 * (someone ran) makes the thread *crowded*: interval RSK_SPIN_CROWDED_US, and its spins'
 * first yields come that early too, until a quick yield. The first yield of every spin is what
 * tells a crowded core; with only the interval, a thread whose last yields were quick spun a
 * whole window on a core others had come to want. Per thread. rsk_spin_yield takes the clock
 * @now and the spin's @start and returns the clock after the yield, or @now when none was due.
 */
#define RSK_SPIN_YIELD_US 20
#define RSK_SPIN_CROWDED_US 2
#define RSK_YIELD_QUICK_US 8
#define RSK_YIELD_MAX_US 1280
/*
 * A yield that was not quick also ends the spin: it found other threads wanting this core,
 * and a spin there only delays them (pgbench's TPC-B against PostgreSQL on 2 cores, 4 backends:
 * 0.85x of kernel TCP with the 50-us spin, 1.1x without any; docs/design.md, "Waits").
 * rsk_spin_yield sets *@crowded to 1 then (@crowded may be NULL); the spin looks once more
 * (what ran may have brought the event), the wait then sleeps and counts as a miss for its
 * object (rsk_spin_outcome), so that a crowded object's waits soon sleep at once.
 */
int64_t rsk_spin_yield(int64_t now, int64_t start, int *crowded);
/* This thread's yield interval now, and what a yield that took @took_us teaches it. */
int64_t rsk_spin_yield_every(void);
void rsk_spin_yield_learn(int64_t took_us);

/*
 * Whether the waits on one object (an epoll set, a socket: *@hist, a hint word updated with
 * relaxed atomics, 0 to start) pay for their spin. A wait *misses* when it timed out, or its
 * readiness came more than RSK_SPIN_FAR windows (RDMASOCK_SPIN_US) after it began
 * (rsk_spin_hit); otherwise it *hits*, spun or not. After RSK_SPIN_MISSES misses in a row the
 * object's waits sleep at once, but every RSK_SPIN_PROBE-th of them spins anyway; one hit
 * makes them spin again. rsk_spin_pays: 1 to spin, 0 to sleep at once (it counts the probe).
 * Why RSK_SPIN_FAR and not 1: a wait that slept measures its gap with the wake-up in it
 * (~30 us here), so a gap within the window would look longer than it and keep the object
 * sleeping; and a spin costs at most 1/RSK_SPIN_FAR of a longer gap, while every needless
 * sleep costs the peer an edge token per connection (docs/design.md, the fast path).
 */
#define RSK_SPIN_MISSES 16
#define RSK_SPIN_PROBE 16
#define RSK_SPIN_FAR 4
int rsk_spin_pays(unsigned int *hist);
void rsk_spin_outcome(unsigned int *hist, int hit);
/* A wait whose readiness came @gap_us after it began: 1 for a hit. */
int rsk_spin_hit(int64_t gap_us);

#endif
