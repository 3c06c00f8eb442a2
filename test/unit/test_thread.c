/*
 * Unit tests for core/base/thread (background threads and the fork gate): a child forked
 * through the gate never catches a background thread in the middle of its work (without
 * the gate, a child forked while our thread was inside ASan's allocator hung for ever);
 * work waits while a fork is under way and goes on after it in the parent; the child has a
 * gate of its own that works; a thread that works longer than the gate waits delays a fork
 * by that bound, never blocks it; a thread is not started while a fork is under way (its
 * start-up in the C and ASan runtimes allocates before it runs a line of ours), and a
 * thread of ours that starts another from inside its work does not deadlock a fork.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/thread.h"
#include "unit.h"

#define FORKS 30
#define WAIT_MS 5000

/* The worker: rounds of work inside the gate, each long enough (1 ms) that a fork landing
 * anywhere in the loop lands inside one most of the time, and a short wait between them. */
static int stop, in_work, rounds, hold; /* hold: the next round lasts until hold is 0 */
static int held; /* a round is being held (it saw hold set, in its work) */

static void *worker(void *arg)
{
	(void)arg;
	while (!UNIT_LOAD(&stop)) {
		rsk_thread_work_begin();
		__atomic_store_n(&in_work, 1, __ATOMIC_SEQ_CST);
		free(malloc(64)); /* what the real threads do there: the allocator's locks */
		unit_sleep_ms(1);
		while (UNIT_LOAD(&hold)) {
			__atomic_store_n(&held, 1, __ATOMIC_SEQ_CST);
			unit_sleep_ms(1);
		}
		__atomic_store_n(&held, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&in_work, 0, __ATOMIC_SEQ_CST);
		UNIT_INC(&rounds);
		rsk_thread_work_end();
		unit_sleep_ms(1);
	}
	__atomic_store_n(&stop, 2, __ATOMIC_SEQ_CST);
	return NULL;
}

static void worker_start(void)
{
	__atomic_store_n(&stop, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&rounds, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(rsk_thread_spawn(worker, NULL, NULL), 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&rounds) >= 3, WAIT_MS));
}

static void worker_stop(void)
{
	__atomic_store_n(&hold, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
	assert_true(UNIT_WAIT(UNIT_LOAD(&stop) == 2, WAIT_MS));
}

/* fork as preload/fork.c does it; @child's status, or -1 if it died or hung. */
static int gated_fork(int (*child)(void))
{
	pid_t pid;

	rsk_thread_fork_prepare();
	pid = fork();
	if (pid == 0) {
		rsk_thread_fork_child();
		_exit(child());
	}
	rsk_thread_fork_parent();
	return pid < 0 ? -1 : unit_reap(pid, WAIT_MS);
}

/* The child's copy of the worker's state, and the allocator in it. */
static int child_sees_no_work(void)
{
	int i;

	if (UNIT_LOAD(&in_work))
		return 10;
	for (i = 0; i < 64; i++)
		free(malloc((size_t)16 << (i % 9)));
	return 0;
}

static void test_fork_never_inside_work(void **state)
{
	int i, before;

	(void)state;
	worker_start();
	for (i = 0; i < FORKS; i++) {
		before = UNIT_LOAD(&rounds);
		assert_int_equal(gated_fork(child_sees_no_work), 0);
		/* the parent's worker goes on after each fork */
		assert_true(UNIT_WAIT(UNIT_LOAD(&rounds) > before, WAIT_MS));
	}
	worker_stop();
}

/* In the child the gate is fresh: a thread of the child's own works and the child forks. */
static int child_uses_gate(void)
{
	worker_start();
	if (gated_fork(child_sees_no_work) != 0)
		return 11;
	worker_stop();
	return 0;
}

static void test_child_gate_works(void **state)
{
	(void)state;
	worker_start();
	assert_int_equal(gated_fork(child_uses_gate), 0);
	worker_stop();
}

/* A worker stuck in its work: the fork waits RSK_THREAD_FORK_WAIT_MS, then goes on. */
static int child_ok(void)
{
	return 0;
}

static void test_stuck_worker_delays_fork_only(void **state)
{
	(void)state;
	worker_start();
	__atomic_store_n(&hold, 1, __ATOMIC_SEQ_CST);
	/* Wait for a round that is really held: in_work alone may still be the round that
	 * passed its check of hold before it was set (a worker slowed down there, past any
	 * fixed sleep, ends that round during the fork and is between rounds after it). */
	assert_true(UNIT_WAIT(UNIT_LOAD(&held) == 1, WAIT_MS));
	assert_int_equal(UNIT_LOAD(&in_work), 1);
	assert_int_equal(gated_fork(child_ok), 0);
	assert_int_equal(UNIT_LOAD(&in_work), 1); /* still held: the fork did not wait for it */
	worker_stop();
}

/* A thread that says it ran, and one that starts it from an application thread. */
static int started;

static void *mark_started(void *arg)
{
	(void)arg;
	UNIT_INC(&started);
	return NULL;
}

static void *spawner(void *arg)
{
	(void)arg;
	assert_int_equal(rsk_thread_spawn(mark_started, NULL, NULL), 0);
	return NULL;
}

static void test_no_start_during_fork(void **state)
{
	pthread_t t;

	(void)state;
	__atomic_store_n(&started, 0, __ATOMIC_SEQ_CST);
	rsk_thread_fork_prepare(); /* as fork() does, up to the copy */
	assert_int_equal(pthread_create(&t, NULL, spawner, NULL), 0);
	unit_sleep_ms(200);
	assert_int_equal(UNIT_LOAD(&started), 0); /* waits for the fork's end */
	rsk_thread_fork_parent();
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&started) == 1, WAIT_MS));
}

/* Our thread starts another from inside its work while a fork waits for it: the fork goes on
 * once both are out, well before its RSK_THREAD_FORK_WAIT_MS bound. */
static void *spawn_in_work(void *arg)
{
	(void)arg;
	rsk_thread_work_begin();
	__atomic_store_n(&in_work, 1, __ATOMIC_SEQ_CST);
	while (UNIT_LOAD(&hold))
		unit_sleep_ms(1);
	assert_int_equal(rsk_thread_spawn(mark_started, NULL, NULL), 0);
	rsk_thread_work_end();
	return NULL;
}

static void *release_later(void *arg)
{
	(void)arg;
	unit_sleep_ms(50);
	__atomic_store_n(&hold, 0, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_spawn_from_work(void **state)
{
	pthread_t t, r;
	int64_t t0;

	(void)state;
	__atomic_store_n(&started, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&in_work, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&hold, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(pthread_create(&t, NULL, spawn_in_work, NULL), 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&in_work) == 1, WAIT_MS));
	assert_int_equal(pthread_create(&r, NULL, release_later, NULL), 0);
	t0 = rsk_now_ms();
	rsk_thread_fork_prepare();
	rsk_thread_fork_parent();
	assert_true(rsk_now_ms() - t0 < RSK_THREAD_FORK_WAIT_MS / 2);
	assert_true(UNIT_WAIT(UNIT_LOAD(&started) == 1, WAIT_MS));
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(pthread_join(r, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_never_inside_work),
		cmocka_unit_test(test_child_gate_works),
		cmocka_unit_test(test_stuck_worker_delays_fork_only),
		cmocka_unit_test(test_no_start_during_fork),
		cmocka_unit_test(test_spawn_from_work),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
