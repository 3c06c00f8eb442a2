/*
 * The verbs demultiplexer (core/transport/verbs_demux.c), without a device: tokens name
 * exactly one live slot; a removed endpoint's token stays stale when its slot is reused (an
 * event drained late never reaches the new owner); bound watches come back with the event.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "transport/verbs_demux.h"

static int g_calls[4];
static void *g_last;

static void note_fn(void *obj, int kind)
{
	g_last = obj;
	g_calls[kind]++;
}

static void test_live_and_stale(void **state)
{
	int a = 1, b = 2, live;
	uint64_t ta, tb;

	(void)state;
	ta = rsk_vdemux_add(&a);
	assert_true(ta != 0);
	assert_int_equal(rsk_vdemux_count(), 1);
	rsk_vdemux_bind(ta, RSK_VDEMUX_CQ, 77);
	assert_int_equal(rsk_vdemux_note(ta, RSK_VDEMUX_CQ, note_fn, &live), 77);
	assert_int_equal(live, 1);
	assert_ptr_equal(g_last, &a);
	assert_int_equal(rsk_vdemux_note(ta, RSK_VDEMUX_CM, note_fn, &live), 0); /* not bound */
	assert_int_equal(live, 1);
	rsk_vdemux_del(ta);
	assert_int_equal(rsk_vdemux_count(), 0);
	g_last = NULL;
	/* the slot is reused at once: the old token must not reach the new owner */
	tb = rsk_vdemux_add(&b);
	assert_int_equal((uint32_t)tb, (uint32_t)ta);
	assert_true(tb != ta);
	rsk_vdemux_bind(tb, RSK_VDEMUX_CQ, 88);
	assert_int_equal(rsk_vdemux_note(ta, RSK_VDEMUX_CQ, note_fn, &live), 0);
	assert_int_equal(live, 0);
	assert_null(g_last);
	rsk_vdemux_bind(ta, RSK_VDEMUX_CQ, 99); /* a stale bind changes nothing */
	assert_int_equal(rsk_vdemux_note(tb, RSK_VDEMUX_CQ, note_fn, &live), 88);
	assert_ptr_equal(g_last, &b);
	rsk_vdemux_del(ta); /* stale: no effect */
	assert_int_equal(rsk_vdemux_count(), 1);
	rsk_vdemux_del(tb);
	assert_int_equal(rsk_vdemux_count(), 0);
}

static void test_garbage_tokens(void **state)
{
	int live = 1;

	(void)state;
	assert_int_equal(rsk_vdemux_add(NULL), 0);
	assert_int_equal(rsk_vdemux_note(0, RSK_VDEMUX_CQ, note_fn, &live), 0);
	assert_int_equal(live, 0);
	assert_int_equal(rsk_vdemux_note(((uint64_t)1 << 32) | 123456, RSK_VDEMUX_CQ, note_fn,
					 &live),
			 0);
	assert_int_equal(live, 0);
	assert_int_equal(rsk_vdemux_note(0, 7, note_fn, &live), 0); /* no such kind */
	rsk_vdemux_del(0);
	rsk_vdemux_bind(0, 9, 1);
}

/* Many at once (the table grows): each token names its own object, in any order of removal. */
static void test_many(void **state)
{
	static int obj[1000];
	uint64_t tok[1000];
	int i, live;

	(void)state;
	for (i = 0; i < 1000; i++) {
		tok[i] = rsk_vdemux_add(&obj[i]);
		assert_true(tok[i] != 0);
		rsk_vdemux_bind(tok[i], RSK_VDEMUX_CM, (uint64_t)i + 1);
	}
	assert_int_equal(rsk_vdemux_count(), 1000);
	for (i = 0; i < 1000; i += 2)
		rsk_vdemux_del(tok[i]);
	for (i = 0; i < 1000; i++) {
		g_last = NULL;
		assert_int_equal(rsk_vdemux_note(tok[i], RSK_VDEMUX_CM, note_fn, &live),
				 i % 2 ? (uint64_t)i + 1 : 0);
		assert_ptr_equal(g_last, i % 2 ? &obj[i] : NULL);
	}
	for (i = 1; i < 1000; i += 2)
		rsk_vdemux_del(tok[i]);
	assert_int_equal(rsk_vdemux_count(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_live_and_stale),
		cmocka_unit_test(test_garbage_tokens),
		cmocka_unit_test(test_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
