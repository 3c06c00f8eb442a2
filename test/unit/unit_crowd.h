/*
 * A crowded core on demand: the test executable is linked with -Wl,--wrap=rsk_spin_yield
 * (test/unit/CMakeLists.txt), so core/'s spins come here. They yield as the library's do,
 * but find the core crowded (calls/spin.h) only while a test sets crowd_on, from the age a
 * spin first yields at, so that a loaded machine cannot turn other tests' spins into sleeps;
 * crowd_yields counts the crowded yields. Include once, in the test's .c file.
 */
#ifndef RSK_TEST_UNIT_CROWD_H
#define RSK_TEST_UNIT_CROWD_H

#include <stdint.h>

#include "calls/spin.h"

static int crowd_on, crowd_yields;

int64_t __real_rsk_spin_yield(int64_t now, int64_t start, int *crowded);
int64_t __wrap_rsk_spin_yield(int64_t now, int64_t start, int *crowded);

int64_t __wrap_rsk_spin_yield(int64_t now, int64_t start, int *crowded)
{
	if (!crowd_on || now - start < RSK_SPIN_YIELD_US)
		return __real_rsk_spin_yield(now, start, NULL);
	crowd_yields++;
	*crowded = 1;
	return now;
}

#endif
