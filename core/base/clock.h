/*
 * Monotonic time for the library's bounded waits (deadlines, spins, lingers), in one place
 * so that every timeout is measured the same way.
 */
#ifndef RSK_CLOCK_H
#define RSK_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t rsk_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t rsk_now_ms(void)
{
	return rsk_now_us() / 1000;
}

#endif
