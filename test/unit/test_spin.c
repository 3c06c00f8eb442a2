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
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/config.h"
#include "calls/spin.h"

/*
 * The yield back-off, driven through the learner: a yield slower than RSK_YIELD_QUICK_US
 * makes the thread crowded (interval RSK_SPIN_CROWDED_US); a quick one doubles the interval,
 * at least to RSK_SPIN_YIELD_US and at most to RSK_YIELD_MAX_US. Fails on the old code (a
 * fixed 20-us interval: no learner), and on the mutations "no reset on a slow yield", "no
 * floor" and "no cap".
 */
static void test_yield_backoff(void **state)
{
	int64_t e;

	(void)state;
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US); /* someone ran */
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_CROWDED_US);
	rsk_spin_yield_learn(0); /* nobody: back to the uncontended floor at once */
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_YIELD_US);
	for (e = RSK_SPIN_YIELD_US * 2; e <= RSK_YIELD_MAX_US; e *= 2) {
		rsk_spin_yield_learn(0);
		assert_int_equal(rsk_spin_yield_every(), e);
	}
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US - 1);
	assert_int_equal(rsk_spin_yield_every(), RSK_YIELD_MAX_US); /* the cap */
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US);
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_CROWDED_US);
}

/*
 * When rsk_spin_yield yields, without timing: a spin younger than RSK_SPIN_YIELD_US never
 * does (it returns the clock it was given); a due one yields and returns the clock read after
 * it (given a clock 10 s ahead, the yield is "quick": the interval doubles); the next call
 * within the new interval of that yield does not. Fails on the mutations "yield from the
 * spin's start" and "no interval since the last yield".
 */
/*
 * sched_yield, wrapped (test_spin links with --wrap=sched_yield): a yield takes as long as the
 * test says (yield_us), so that a loaded machine cannot make a "quick" one slow.
 */
int __wrap_sched_yield(void);
static int yield_us, yields;

int __wrap_sched_yield(void)
{
	yields++;
	if (yield_us > 0)
		usleep((useconds_t)yield_us);
	return 0;
}

static void test_yield_when_due(void **state)
{
	int64_t ahead = rsk_now_us() + 10 * 1000 * 1000, after;
	int crowded = 0;

	(void)state;
	rsk_spin_yield_learn(RSK_YIELD_QUICK_US);
	rsk_spin_yield_learn(0); /* the interval: RSK_SPIN_YIELD_US, not crowded */
	assert_int_equal(rsk_spin_yield(ahead, ahead - RSK_SPIN_YIELD_US + 1, &crowded), ahead);
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_YIELD_US);
	after = rsk_spin_yield(ahead, ahead - RSK_SPIN_YIELD_US, &crowded);
	assert_true(after < ahead); /* it yielded and read the clock */
	assert_int_equal(crowded, 0); /* a quick yield: the spin goes on */
	assert_int_equal(rsk_spin_yield_every(), 2 * RSK_SPIN_YIELD_US);
	/* RSK_SPIN_YIELD_US past that yield: within its interval of 2 * RSK_SPIN_YIELD_US */
	assert_int_equal(rsk_spin_yield(after + RSK_SPIN_YIELD_US, 0, NULL),
			 after + RSK_SPIN_YIELD_US);
	assert_int_equal(rsk_spin_yield_every(), 2 * RSK_SPIN_YIELD_US);
}

/*
 * A yield that was not quick (here: given a clock 1 ms behind, it "took" 1 ms) found others
 * wanting the core: it sets *crowded, so that the spin ends and its wait counts as a miss,
 * and makes the thread crowded: its next spin yields once RSK_SPIN_CROWDED_US old, not
 * RSK_SPIN_YIELD_US. A spin not yet due to yield leaves *crowded alone. Fails on the old code (no way to tell) and on the mutation "crowded on
 * every yield".
 */
static void test_yield_crowded(void **state)
{
	int64_t behind, after, start;
	int crowded = 0, n;

	(void)state;
	usleep(3000); /* past the interval of the last test's yield (taken at the real clock) */
	behind = rsk_now_us();
	yield_us = 1000; /* a yield that takes 1 ms: others ran */
	rsk_spin_yield_learn(0); /* not crowded: the interval RSK_SPIN_YIELD_US */
	assert_int_equal(rsk_spin_yield(behind, behind - RSK_SPIN_YIELD_US + 1, &crowded),
			 behind); /* too young */
	assert_int_equal(crowded, 0);
	after = rsk_spin_yield(behind, behind - RSK_SPIN_YIELD_US, &crowded);
	assert_true(after - behind >= RSK_YIELD_QUICK_US);
	assert_int_equal(crowded, 1);
	assert_int_equal(rsk_spin_yield_every(), RSK_SPIN_CROWDED_US);
	/* crowded: the next spin yields as soon as it is RSK_SPIN_CROWDED_US old (no pointer:
	 * the caller does not ask, nothing is written) */
	yield_us = 0;
	n = yields;
	usleep(5);
	start = rsk_now_us();
	(void)rsk_spin_yield(start + RSK_SPIN_CROWDED_US - 1, start, NULL);
	assert_int_equal(yields, n); /* too young even so */
	(void)rsk_spin_yield(start + RSK_SPIN_CROWDED_US, start, NULL);
	assert_int_equal(yields, n + 1);
}

/*
 * Every spin yields once it is RSK_SPIN_YIELD_US old, whatever the thread's interval: the
 * first yield is what tells a crowded core. After quick yields have stretched the interval to
 * RSK_YIELD_MAX_US, a new spin (started after the last yield) still yields at once, and
 * within the interval a second time only once it has passed. Fails on the old rule (the
 * interval alone: no yield in the new spin).
 */
static void test_yield_each_spin(void **state)
{
	int64_t t, start;
	int i, n;

	(void)state;
	yield_us = 0;
	for (i = 0; i < 10; i++)
		rsk_spin_yield_learn(0); /* quick yields: the interval at its cap */
	assert_int_equal(rsk_spin_yield_every(), RSK_YIELD_MAX_US);
	usleep(2000);
	start = rsk_now_us();
	(void)rsk_spin_yield(start + RSK_SPIN_YIELD_US, start - 1000000, NULL); /* an old spin */
	n = yields;
	usleep(5);
	t = rsk_now_us();
	start = t; /* a new spin, begun after that yield (the real clock, as yields read it) */
	(void)rsk_spin_yield(t + RSK_SPIN_YIELD_US, start, NULL);
	assert_int_equal(yields, n + 1); /* its first yield */
	(void)rsk_spin_yield(t + 2 * RSK_SPIN_YIELD_US, start, NULL);
	assert_int_equal(yields, n + 1); /* within the interval: none */
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
		cmocka_unit_test(test_yield_crowded),
		cmocka_unit_test(test_yield_each_spin),
		cmocka_unit_test(test_spin_learner),
	};

	rsk_config_defaults(&rsk_config);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
