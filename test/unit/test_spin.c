/*
 * Unit tests for core/calls/spin.c, the spin policy every spinning wait uses: the per-thread
 * yield back-off (quick yields lengthen the interval up to a cap, a slow one resets it, no
 * yield before a spin is RSK_SPIN_YIELD_US old or within the interval) and the per-object
 * learner (misses in a row stop the spin but for a periodic probe; a hit restores it). No
 * timing assertions: the learners are driven with chosen clock values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/config.h"
#include "calls/spin.h"

/*
 * The yield back-off, driven through the learner: a yield back within RSK_YIELD_QUICK_US
 * doubles the thread's interval up to RSK_YIELD_MAX_US, a slower one puts it back to
 * RSK_SPIN_YIELD_US. Fails on the old code (a fixed 20-us interval: no learner), and on the
 * mutations "no reset on a slow yield" and "no cap".
 */
static void test_yield_backoff(void **state)
{
	int64_t e;

	(void)state;
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US); /* someone ran */
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_YIELD_US);
	for (e = RSK_SPIN_YIELD_US * 2; e <= RSK_YIELD_MAX_US; e *= 2) {
		rsk_spin_yield_learn(0);
		assert_int_equal(rsk_spin_yield_every(), e);
	}
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US - 1);
	assert_int_equal(rsk_spin_yield_every(), RSK_YIELD_MAX_US); /* the cap */
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US);
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_YIELD_US);
}

/*
 * When rsk_spin_yield yields, without timing: a spin younger than RSK_SPIN_YIELD_US never
 * does (it returns the clock it was given); a due one yields and returns the clock read after
 * it (given a clock 10 s ahead, the yield is "quick": the interval doubles); the next call
 * within the new interval of that yield does not. Fails on the mutations "yield from the
 * spin's start" and "no interval since the last yield".
 */
static void test_yield_when_due(void **state)
{
	int64_t ahead = rsk_now_us() + 10 * 1000 * 1000, after;

	(void)state;
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US); /* the interval: RSK_SPIN_YIELD_US */
	assert_int_equal(rsk_spin_yield(ahead, ahead - RSK_SPIN_YIELD_US + 1), ahead);
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_YIELD_US);
	after = rsk_spin_yield(ahead, ahead - RSK_SPIN_YIELD_US);
	assert_true(after < ahead); /* it yielded and read the clock */
	assert_int_equal(rsk_spin_yield_every(), 2 * RSK_SPIN_YIELD_US);
	/* RSK_SPIN_YIELD_US past that yield: within its interval of 2 * RSK_SPIN_YIELD_US */
	assert_int_equal(rsk_spin_yield(after + RSK_SPIN_YIELD_US, 0), after + RSK_SPIN_YIELD_US);
	assert_int_equal(rsk_spin_yield_every(), 2 * RSK_SPIN_YIELD_US);
}

/*
 * The spin learner on its word: spins pay until RSK_SPIN_MISSES misses in a row; then the
 * waits sleep at once but for every RSK_SPIN_PROBE-th, which spins; one hit makes them all
 * spin again; the miss count saturates; a hit is a gap of up to RSK_SPIN_FAR windows. Fails on
 * the old code (every wait spins) and on the mutations "no probe", "a hit does not reset",
 * "misses wrap" and "a hit only within one window".
 */
static void test_spin_learner(void **state)
{
	unsigned int h = 0;
	int i, round;

	(void)state;
	for (i = 0; i < RSK_SPIN_MISSES; i++) {
		assert_true(rsk_spin_pays(&h));
		rsk_spin_outcome(&h, 0);
	}
	for (round = 0; round < 2; round++)
		for (i = 1; i <= RSK_SPIN_PROBE; i++)
			assert_int_equal(rsk_spin_pays(&h), i == RSK_SPIN_PROBE);
	rsk_spin_outcome(&h, 1);
	for (i = 0; i < RSK_SPIN_PROBE; i++)
		assert_true(rsk_spin_pays(&h));
	for (i = 0; i < 300; i++)
		rsk_spin_outcome(&h, 0);
	assert_false(rsk_spin_pays(&h)); /* still missing after 300 */
	rsk_spin_outcome(&h, 1);
	assert_true(rsk_spin_pays(&h));
	rsk_config.spin_us = 50; /* a hit: ready within RSK_SPIN_FAR windows */
	assert_true(rsk_spin_hit(50 * RSK_SPIN_FAR));
	assert_false(rsk_spin_hit(50 * RSK_SPIN_FAR + 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_yield_backoff),
		cmocka_unit_test(test_yield_when_due),
		cmocka_unit_test(test_spin_learner),
	};

	rsk_config_defaults(&rsk_config);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
