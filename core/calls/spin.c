/*
 * The spin policy (spin.h): yields that back off when nobody else wants the core, and the
 * per-object record of whether spinning pays. Kept apart from io.c so that every waiter
 * (io, fastwait, pollfast) can use it without depending on each other.
 */
#include <sched.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/config.h"
#include "spin.h"

/* This thread's yield interval (0: not learned yet, RSK_SPIN_YIELD_US) and its last yield. */
static __thread int64_t rsk_yield_every_us, rsk_yield_at_us;

int64_t rsk_spin_yield_every(void)
{
	return rsk_yield_every_us ? rsk_yield_every_us : RSK_SPIN_YIELD_US;
}

void rsk_spin_yield_learn(int64_t took_us)
{
	int64_t e = rsk_spin_yield_every() * 2;

	if (took_us >= RSK_YIELD_QUICK_US) {
		rsk_yield_every_us = RSK_SPIN_CROWDED_US; /* someone ran: hand the core over often */
		return;
	}
	if (e < RSK_SPIN_YIELD_US)
		e = RSK_SPIN_YIELD_US;
	rsk_yield_every_us = e > RSK_YIELD_MAX_US ? RSK_YIELD_MAX_US : e;
}

int64_t rsk_spin_yield(int64_t now, int64_t start, int *crowded)
{
	int64_t after, every = rsk_spin_yield_every();

	if (now - start < (every < RSK_SPIN_YIELD_US ? every : RSK_SPIN_YIELD_US) ||
	    (rsk_yield_at_us >= start && now - rsk_yield_at_us < every))
		return now; /* too young, or this spin yielded within the interval */
	sched_yield();
	after = rsk_now_us();
	rsk_spin_yield_learn(after - now);
	rsk_yield_at_us = after;
	if (crowded != NULL && after - now >= RSK_YIELD_QUICK_US)
		*crowded = 1;
	return after;
}

/* *hist: the misses in a row (low byte, saturating) and the waits skipped since (above). */
#define RSK_SPIN_MISS_MASK 0xffu

int rsk_spin_pays(unsigned int *hist)
{
	unsigned int w = __atomic_load_n(hist, __ATOMIC_RELAXED);
	unsigned int skipped = (w >> 8) + 1;

	if ((w & RSK_SPIN_MISS_MASK) < RSK_SPIN_MISSES)
		return 1;
	if (skipped >= RSK_SPIN_PROBE)
		skipped = 0; /* the probe: this wait spins, and tells whether the pattern changed */
	__atomic_store_n(hist, (skipped << 8) | (w & RSK_SPIN_MISS_MASK), __ATOMIC_RELAXED);
	return skipped == 0;
}

int rsk_spin_hit(int64_t gap_us)
{
	return gap_us <= (int64_t)rsk_config.spin_us * RSK_SPIN_FAR;
}

void rsk_spin_outcome(unsigned int *hist, int hit)
{
	unsigned int w = __atomic_load_n(hist, __ATOMIC_RELAXED);

	if (hit)
		w = 0;
	else if ((w & RSK_SPIN_MISS_MASK) < RSK_SPIN_MISS_MASK)
		w++;
	__atomic_store_n(hist, w, __ATOMIC_RELAXED);
}
