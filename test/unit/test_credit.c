/*
 * Unit tests for core/credit.h: the 32-bit immediate (credits in bits 0-15, flags in 16-23,
 * tag in 24-31) round-trips every field and masks out-of-range inputs, rsk_imm_valid accepts
 * exactly the right tag with known flags, and the two credit rules hold at their boundaries:
 * data needs two credits (the last is reserved), a credit-only message needs half the window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "stream/credit.h"

static void test_imm_round_trip_credits(void **state)
{
	static const uint32_t flags[] = {0, RSK_IMM_FIN, RSK_IMM_RST, RSK_IMM_FIN | RSK_IMM_RST};
	uint32_t c, imm;
	unsigned int f;

	(void)state;
	for (f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
		for (c = 0; c <= RSK_CREDIT_MAX; c++) {
			imm = rsk_imm_make(c, flags[f]);
			assert_int_equal(rsk_imm_credits(imm), c);
			assert_int_equal(rsk_imm_flags(imm), flags[f]);
			assert_int_equal(imm >> 24, RSK_IMM_TAG);
			assert_true(rsk_imm_valid(imm));
		}
	}
}

static void test_imm_round_trip_flags(void **state)
{
	static const uint32_t credits[] = {0, 1, 7, 0x100, 0x8000, RSK_CREDIT_MAX};
	uint32_t f, imm;
	unsigned int i;

	(void)state;
	for (i = 0; i < sizeof(credits) / sizeof(credits[0]); i++) {
		for (f = 0; f <= 0xff; f++) {
			imm = rsk_imm_make(credits[i], f);
			assert_int_equal(rsk_imm_flags(imm), f);
			assert_int_equal(rsk_imm_credits(imm), credits[i]);
			assert_int_equal(imm >> 24, RSK_IMM_TAG);
		}
	}
}

/* Out-of-range inputs are masked into their field and never spill into a neighbour. */
static void test_imm_masks_overflow(void **state)
{
	uint32_t imm;

	(void)state;
	imm = rsk_imm_make(0x10000u, 0);
	assert_int_equal(rsk_imm_credits(imm), 0);
	assert_int_equal(rsk_imm_flags(imm), 0);
	assert_true(rsk_imm_valid(imm));

	imm = rsk_imm_make(0x12345u, RSK_IMM_FIN);
	assert_int_equal(rsk_imm_credits(imm), 0x2345);
	assert_int_equal(rsk_imm_flags(imm), RSK_IMM_FIN);

	imm = rsk_imm_make(3, 0x100u | RSK_IMM_RST);
	assert_int_equal(rsk_imm_flags(imm), RSK_IMM_RST);
	assert_int_equal(rsk_imm_credits(imm), 3);
	assert_int_equal(imm >> 24, RSK_IMM_TAG);

	imm = rsk_imm_make(UINT32_MAX, UINT32_MAX);
	assert_int_equal(rsk_imm_credits(imm), RSK_CREDIT_MAX);
	assert_int_equal(rsk_imm_flags(imm), 0xff);
	assert_int_equal(imm >> 24, RSK_IMM_TAG);
	assert_false(rsk_imm_valid(imm)); /* unknown flags */
}

static void test_imm_valid_tag(void **state)
{
	uint32_t tag, imm;

	(void)state;
	for (tag = 0; tag <= 0xff; tag++) {
		imm = (tag << 24) | (RSK_IMM_FIN << 16) | 5;
		if (tag == RSK_IMM_TAG)
			assert_true(rsk_imm_valid(imm));
		else
			assert_false(rsk_imm_valid(imm));
	}
	assert_false(rsk_imm_valid(0));
	assert_false(rsk_imm_valid(UINT32_MAX));
	assert_false(rsk_imm_valid(RSK_IMM_TAG)); /* the tag in the wrong byte */
}

static void test_imm_valid_flags(void **state)
{
	uint32_t f;

	(void)state;
	for (f = 0; f <= 0xff; f++) {
		uint32_t imm = rsk_imm_make(1, f);

		if ((f & ~RSK_IMM_FLAGS_KNOWN) == 0)
			assert_true(rsk_imm_valid(imm));
		else
			assert_false(rsk_imm_valid(imm));
	}
	/* every single unknown bit on its own is refused */
	for (f = 0x04; f <= 0x80; f <<= 1)
		assert_false(rsk_imm_valid(rsk_imm_make(0, f)));
	assert_true(rsk_imm_valid(rsk_imm_make(RSK_CREDIT_MAX, RSK_IMM_FLAGS_KNOWN)));
}

static void test_can_send_data(void **state)
{
	(void)state;
	assert_false(rsk_credit_can_send_data(0));
	assert_false(rsk_credit_can_send_data(1)); /* the reserved credit */
	assert_true(rsk_credit_can_send_data(2));
	assert_true(rsk_credit_can_send_data(8));
	assert_true(rsk_credit_can_send_data(RSK_CREDIT_MAX));
	assert_true(rsk_credit_can_send_data(UINT32_MAX));
}

static void test_should_return(void **state)
{
	uint32_t nbuf, owed;

	(void)state;
	/* nothing owed: never, whatever the window or the credits */
	for (nbuf = 2; nbuf <= 1024; nbuf++) {
		assert_false(rsk_credit_should_return(0, nbuf, 0));
		assert_false(rsk_credit_should_return(0, nbuf, nbuf));
	}
	/* the threshold is exactly half the window (rounded down), for every window size */
	for (nbuf = 2; nbuf <= 1024; nbuf++) {
		for (owed = 1; owed <= nbuf; owed++) {
			int want = owed >= nbuf / 2;

			assert_int_equal(!!rsk_credit_should_return(owed, nbuf, 1), want);
			assert_int_equal(!!rsk_credit_should_return(owed, nbuf, nbuf), want);
			/* no credit at all: impossible to send, even the reserved one is gone */
			assert_false(rsk_credit_should_return(owed, nbuf, 0));
		}
	}
	/* spot checks */
	assert_false(rsk_credit_should_return(3, 8, 1));
	assert_true(rsk_credit_should_return(4, 8, 1)); /* the reserved credit may carry it */
	assert_true(rsk_credit_should_return(8, 8, 8));
	assert_true(rsk_credit_should_return(1, 2, 1));
	assert_false(rsk_credit_should_return(3, 9, 5));
	assert_true(rsk_credit_should_return(4, 9, 5));
}

/* The reserve rule: whatever is owed, a side that stopped at the data limit can still return. */
static void test_reserve_leaves_a_credit(void **state)
{
	uint32_t nbuf, credits;

	(void)state;
	for (nbuf = 2; nbuf <= 64; nbuf++) {
		credits = nbuf;
		while (rsk_credit_can_send_data(credits))
			credits--;
		assert_int_equal(credits, 1);
		assert_true(rsk_credit_should_return(nbuf / 2 ? nbuf / 2 : 1, nbuf, credits));
		assert_true(rsk_credit_should_return(nbuf, nbuf, credits));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_imm_round_trip_credits),
		cmocka_unit_test(test_imm_round_trip_flags),
		cmocka_unit_test(test_imm_masks_overflow),
		cmocka_unit_test(test_imm_valid_tag),
		cmocka_unit_test(test_imm_valid_flags),
		cmocka_unit_test(test_can_send_data),
		cmocka_unit_test(test_should_return),
		cmocka_unit_test(test_reserve_leaves_a_credit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
