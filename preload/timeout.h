/*
 * Timeouts of the waits asked again while a move settles (poll.c: ppoll, pselect; epoll.c:
 * epoll_pwait2): a timespec or timeval read once in microseconds, the end it gives, and what
 * is left of it for the next round. One copy for every wait that takes a timespec.
 */
#ifndef RSK_PRELOAD_TIMEOUT_H
#define RSK_PRELOAD_TIMEOUT_H

#include <stdint.h>
#include <time.h>

#include "base/clock.h"

/* What is left of a wait of @total_us begun at @start_us (-1 stays -1: none). */
static inline int64_t rsk_poll_left_us(int64_t total_us, int64_t start_us)
{
	int64_t left;

	if (total_us <= 0)
		return total_us;
	left = total_us - (rsk_now_us() - start_us);
	return left > 0 ? left : 0;
}

/* The end of a wait of @total_us begun at @start_us, for a settle (-1: none). A settle inside
 * a zero-timeout wait must not block: its end is its start. */
static inline int64_t rsk_poll_end_us(int64_t total_us, int64_t start_us)
{
	return total_us < 0 ? -1 : start_us + total_us;
}

/* A timeout in microseconds for the fast path (-1: none), rounded up, bounded. */
static inline int64_t rsk_us_of(long sec, long usec)
{
	if (sec < 0 || usec < 0)
		return 0; /* the kernel fails it with EINVAL: the fast path does not take it */
	return sec > 1000000000L ? (int64_t)1000000000L * 1000000 : (int64_t)sec * 1000000 + usec;
}

/* A ppoll/pselect/epoll_pwait2 timeout in microseconds for a wait asked again (-1: none, or one the kernel
 * fails with EINVAL: the first round's answer stands then). */
static inline int64_t rsk_ts_total_us(const struct timespec *tmo)
{
	if (tmo == NULL || tmo->tv_sec < 0 || tmo->tv_nsec < 0 || tmo->tv_nsec >= 1000000000L)
		return -1;
	return rsk_us_of(tmo->tv_sec, (tmo->tv_nsec + 999) / 1000);
}

/* The timeout for the next round of a wait of @total_us begun at @start_us: what is left of
 * it in @ts, or @tmo itself when there is nothing to shorten (none, zero or invalid). */
static inline const struct timespec *rsk_ts_next(const struct timespec *tmo, int64_t total_us,
						 int64_t start_us, struct timespec *ts)
{
	int64_t left;

	if (total_us <= 0)
		return tmo;
	left = rsk_poll_left_us(total_us, start_us);
	ts->tv_sec = (time_t)(left / 1000000);
	ts->tv_nsec = (long)(left % 1000000) * 1000;
	return ts;
}

#endif
