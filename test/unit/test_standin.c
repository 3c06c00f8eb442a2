/*
 * Unit tests for core/base/standin (the stand-in notes by fd): a note reads back as noted,
 * is replaced by a later one, and is gone after a drop, a range drop or the table turned
 * off; the count follows; numbers at chunk edges and out of range; a range drop over
 * chunks never made; and readers beside a writer that rewrites one note never see a torn
 * one (its fields always belong together).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "base/standin.h"

static int setup(void **state)
{
	(void)state;
	rsk_standin_clear();
	return 0;
}

static struct rsk_standin si_of(uint64_t k)
{
	struct rsk_standin si = {.own = k, .peer = ~k, .family = (k & 1) ? AF_INET6 : AF_INET};

	return si;
}

static void test_note_get_drop(void **state)
{
	struct rsk_standin si = si_of(7), got;

	(void)state;
	assert_int_equal(rsk_standin_get(5, &got), 0);
	rsk_standin_note(5, &si);
	assert_int_equal(rsk_standin_count(), 1);
	assert_int_equal(rsk_standin_get(5, &got), 1);
	assert_true(got.own == 7 && got.peer == ~(uint64_t)7 && got.family == AF_INET6);
	assert_int_equal(rsk_standin_get(6, &got), 0); /* its neighbour: nothing */
	si = si_of(8);
	rsk_standin_note(5, &si); /* a new note on the number replaces the old one */
	assert_int_equal(rsk_standin_count(), 1);
	assert_int_equal(rsk_standin_get(5, &got), 1);
	assert_true(got.own == 8 && got.family == AF_INET);
	rsk_standin_drop(5);
	assert_int_equal(rsk_standin_get(5, &got), 0);
	assert_int_equal(rsk_standin_count(), 0);
	rsk_standin_drop(5); /* twice: nothing more */
	assert_int_equal(rsk_standin_count(), 0);
	si.family = 0; /* no family: no note */
	rsk_standin_note(5, &si);
	assert_int_equal(rsk_standin_get(5, &got), 0);
}

static void test_edges(void **state)
{
	static const int fds[] = {0, 4095, 4096, 65535, 1 << 20, (1 << 30) - 1};
	struct rsk_standin si, got;
	unsigned int i;

	(void)state;
	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		si = si_of((uint64_t)i + 100);
		rsk_standin_note(fds[i], &si);
	}
	assert_int_equal(rsk_standin_count(), 6);
	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		assert_int_equal(rsk_standin_get(fds[i], &got), 1);
		assert_true(got.own == (uint64_t)i + 100);
	}
	si = si_of(1);
	rsk_standin_note(1 << 30, &si); /* past the kernel's largest table: not kept */
	rsk_standin_note(-1, &si);
	assert_int_equal(rsk_standin_get(1 << 30, &got), 0);
	assert_int_equal(rsk_standin_get(-1, &got), 0);
	assert_int_equal(rsk_standin_count(), 6);
	rsk_standin_drop(-1);
	rsk_standin_drop(1 << 30);
	assert_int_equal(rsk_standin_count(), 6);
}

/* close_range's: only the numbers in the range, over chunks never made, to the end. */
static void test_drop_range(void **state)
{
	struct rsk_standin si = si_of(3), got;

	(void)state;
	rsk_standin_drop_range(0, ~0u); /* nothing noted: nothing to do */
	rsk_standin_note(3, &si);
	rsk_standin_note(10, &si);
	rsk_standin_note(4097, &si);
	rsk_standin_note(1 << 20, &si);
	rsk_standin_drop_range(4, 4097);
	assert_int_equal(rsk_standin_get(3, &got), 1);
	assert_int_equal(rsk_standin_get(10, &got), 0);
	assert_int_equal(rsk_standin_get(4097, &got), 0);
	assert_int_equal(rsk_standin_get(1 << 20, &got), 1);
	assert_int_equal(rsk_standin_count(), 2);
	rsk_standin_drop_range(4, ~0u);
	assert_int_equal(rsk_standin_get(1 << 20, &got), 0);
	assert_int_equal(rsk_standin_get(3, &got), 1);
	assert_int_equal(rsk_standin_count(), 1);
	rsk_standin_drop_range(3, 3);
	assert_int_equal(rsk_standin_count(), 0);
}

/* io_uring: nothing is read back, and nothing new is noted. */
static void test_off(void **state)
{
	struct rsk_standin si = si_of(3), got;

	(void)state;
	rsk_standin_note(3, &si);
	rsk_standin_off();
	assert_int_equal(rsk_standin_get(3, &got), 0);
	rsk_standin_note(4, &si);
	assert_int_equal(rsk_standin_get(4, &got), 0);
	rsk_standin_drop(3);
	assert_int_equal(rsk_standin_count(), 0);
}

/* A writer rewrites one number's note with fields that belong together (peer = ~own,
 * family from own's low bit); readers take a note only whole. */
static int race_stop;

static void *race_reader(void *arg)
{
	struct rsk_standin got;
	long seen = 0, bad = 0;

	(void)arg;
	while (!__atomic_load_n(&race_stop, __ATOMIC_ACQUIRE)) {
		if (!rsk_standin_get(42, &got))
			continue;
		seen++;
		bad += got.peer != ~got.own || got.family != ((got.own & 1) ? AF_INET6 : AF_INET);
	}
	return (void *)(bad > 0 ? -1L : seen);
}

static void test_torn_never(void **state)
{
	struct rsk_standin si;
	pthread_t t[2];
	void *r;
	uint64_t k;
	int i;

	(void)state;
	si = si_of(0);
	rsk_standin_note(42, &si);
	race_stop = 0;
	for (i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, race_reader, NULL), 0);
	for (k = 1; k <= 200000; k++) {
		si = si_of(k * 0x9e3779b97f4a7c15ull);
		if (k % 64 == 0)
			rsk_standin_drop(42);
		else
			rsk_standin_note(42, &si);
	}
	__atomic_store_n(&race_stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i], &r), 0);
		assert_true((long)r >= 0);
	}
	assert_true(rsk_standin_count() <= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_note_get_drop, setup),
		cmocka_unit_test_setup(test_edges, setup),
		cmocka_unit_test_setup(test_drop_range, setup),
		cmocka_unit_test_setup(test_off, setup),
		cmocka_unit_test_setup(test_torn_never, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
