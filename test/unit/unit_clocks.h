/*
 * Counting the CLOCK_MONOTONIC reads the test's thread makes: the test executable is linked
 * with -Wl,--wrap=clock_gettime (test/unit/CMakeLists.txt), so core/'s reads come here.
 * Include once, in the test's .c file.
 */
#ifndef RSK_TEST_UNIT_CLOCKS_H
#define RSK_TEST_UNIT_CLOCKS_H

#include <time.h>

static __thread int clock_counting; /* set around the calls counted */
static int clock_reads;

int __real_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts);

int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
	if (clock_counting && id == CLOCK_MONOTONIC)
		clock_reads++;
	return __real_clock_gettime(id, ts);
}

#endif
