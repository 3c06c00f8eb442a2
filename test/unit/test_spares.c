/*
 * Unit tests of the lock-free spare slots (core/base/spares.h): an empty set gives nothing,
 * given objects come back (each once), a full set hands the overflow back to the caller, and
 * threads taking and giving at once never lose or duplicate an object.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/spares.h"

#define N 4

static void test_take_give(void **state)
{
	void *slots[N] = {0};
	int obj[N + 1], seen[N + 1] = {0}, i;
	void *p;

	(void)state;
	assert_null(rsk_spares_take(slots, N));
	for (i = 0; i < N; i++)
		assert_null(rsk_spares_give(slots, N, &obj[i]));
	assert_ptr_equal(rsk_spares_give(slots, N, &obj[N]), &obj[N]); /* full: the overflow */
	for (i = 0; i < N; i++) {
		p = rsk_spares_take(slots, N);
		assert_non_null(p);
		assert_true((int *)p >= obj && (int *)p < obj + N);
		seen[(int *)p - obj]++;
	}
	assert_null(rsk_spares_take(slots, N));
	for (i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
	assert_null(rsk_spares_give(slots, N, NULL)); /* nothing given: nothing back */
	assert_null(rsk_spares_take(slots, N));
}

#define THREADS 4
#define ROUNDS 100000

static void *slots_mt[N];
static int owned[THREADS * 2];

/* Each thread owns two objects; it gives and takes back in a loop. Whatever it holds at any
 * moment must be an object nobody else holds (checked by a per-object counter). */
static void *churn(void *arg)
{
	int t = (int)(intptr_t)arg, r, *mine[2] = {&owned[2 * t], &owned[2 * t + 1]}, held = 2;
	void *p, *back;

	for (r = 0; r < ROUNDS; r++) {
		if (held > 0 && (r & 1) == 0) {
			p = mine[--held];
			assert_int_equal(__atomic_sub_fetch((int *)p, 1, __ATOMIC_ACQ_REL), 0);
			back = rsk_spares_give(slots_mt, N, p);
			if (back != NULL) { /* no slot: still ours */
				assert_int_equal(__atomic_add_fetch((int *)back, 1, __ATOMIC_ACQ_REL), 1);
				mine[held++] = back;
			}
		} else if (held < 2 && (p = rsk_spares_take(slots_mt, N)) != NULL) {
			assert_int_equal(__atomic_add_fetch((int *)p, 1, __ATOMIC_ACQ_REL), 1);
			mine[held++] = p;
		}
	}
	return (void *)(intptr_t)held;
}

static void test_threads(void **state)
{
	pthread_t th[THREADS];
	intptr_t total = 0;
	void *rc, *p;
	int i;

	(void)state;
	for (i = 0; i < THREADS * 2; i++)
		owned[i] = 1; /* each held by its thread */
	for (i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)(intptr_t)i), 0);
	for (i = 0; i < THREADS; i++) {
		assert_int_equal(pthread_join(th[i], &rc), 0);
		total += (intptr_t)rc;
	}
	while ((p = rsk_spares_take(slots_mt, N)) != NULL) {
		assert_int_equal(*(int *)p, 0);
		total++;
	}
	assert_int_equal(total, THREADS * 2); /* none lost, none twice */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_give),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
