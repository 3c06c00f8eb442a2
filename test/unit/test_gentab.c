/*
 * Unit tests of the generation-tagged slot table (core/base/gentab.c): a token names its
 * entry until it is deleted and never again, not even once its slot serves a new entry;
 * growth keeps every earlier token and entry; the generation wraps past UINT32_MAX to 1,
 * never 0, so no token is 0 (nor below 2^32); a failed growth (realloc wrapped to fail, or a
 * size that cannot be allocated) leaves the table as it was; clear makes every token stale.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/gentab.h"

/* realloc, wrapped (-Wl,--wrap=realloc): fails on demand, and counts its calls. */
void *__real_realloc(void *p, size_t n);
static int g_fail_realloc, g_reallocs;

void *__wrap_realloc(void *p, size_t n)
{
	g_reallocs++;
	return g_fail_realloc ? NULL : __real_realloc(p, n);
}

struct ent {
	uint64_t val;
	void *ptr;
};

static void test_add_of_del(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	struct ent *e;
	uint64_t tok = 0;

	(void)state;
	assert_int_equal(rsk_gentab_count(&t), 0);
	e = rsk_gentab_add(&t, &tok);
	assert_non_null(e);
	assert_true(tok >> 32 != 0); /* generation never 0: no token below 2^32 */
	assert_int_equal(e->val, 0);
	assert_null(e->ptr);
	e->val = 42;
	assert_ptr_equal(rsk_gentab_of(&t, tok), e);
	assert_int_equal(rsk_gentab_count(&t), 1);
	assert_int_equal(rsk_gentab_del(&t, tok), 1);
	assert_null(rsk_gentab_of(&t, tok));
	assert_int_equal(rsk_gentab_count(&t), 0);
	assert_int_equal(rsk_gentab_del(&t, tok), 0); /* twice: stale, nothing freed */
	/* The slot's next token, before the slot is given out again: a free slot is no entry. */
	assert_null(rsk_gentab_of(&t, tok + ((uint64_t)1 << 32)));
	assert_int_equal(rsk_gentab_count(&t), 0);
	rsk_gentab_destroy(&t);
}

/* A slot serving a new entry: the old token names nothing, the new one its entry, which
 * starts zeroed; deleting by the old token leaves the new entry alone. */
static void test_stale_after_reuse(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	struct ent *a, *b;
	uint64_t ta, tb;

	(void)state;
	a = rsk_gentab_add(&t, &ta);
	assert_non_null(a);
	a->val = 7;
	a->ptr = &ta;
	assert_int_equal(rsk_gentab_del(&t, ta), 1);
	b = rsk_gentab_add(&t, &tb);
	assert_non_null(b);
	assert_int_equal((uint32_t)tb, (uint32_t)ta); /* the same slot, reused first */
	assert_ptr_equal(b, a);
	assert_true(tb != ta);
	assert_int_equal(b->val, 0);
	assert_null(b->ptr);
	assert_null(rsk_gentab_of(&t, ta));
	assert_ptr_equal(rsk_gentab_of(&t, tb), b);
	assert_int_equal(rsk_gentab_del(&t, ta), 0);
	assert_ptr_equal(rsk_gentab_of(&t, tb), b);
	assert_int_equal(rsk_gentab_count(&t), 1);
	assert_int_equal(rsk_gentab_del(&t, tb), 1);
	rsk_gentab_destroy(&t);
}

#define MANY 1000 /* past the first 64 slots: four doublings */

/* Growth moves the entries: every token from before still names its own (moved) entry. */
static void test_growth_keeps_tokens(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	static uint64_t tok[MANY];
	struct ent *e;
	int i, j;

	(void)state;
	for (i = 0; i < MANY; i++) {
		e = rsk_gentab_add(&t, &tok[i]);
		assert_non_null(e);
		e->val = (uint64_t)i + 1;
		for (j = 0; j < i; j += 97) /* earlier tokens, checked while the table grows */
			assert_int_equal(((struct ent *)rsk_gentab_of(&t, tok[j]))->val, j + 1);
	}
	assert_int_equal(rsk_gentab_count(&t), MANY);
	for (i = 0; i < MANY; i += 2)
		assert_int_equal(rsk_gentab_del(&t, tok[i]), 1);
	for (i = 0; i < MANY; i++) {
		e = rsk_gentab_of(&t, tok[i]);
		if (i % 2 == 0) {
			assert_null(e);
		} else {
			assert_non_null(e);
			assert_int_equal(e->val, i + 1);
		}
	}
	for (i = 1; i < MANY; i += 2)
		assert_int_equal(rsk_gentab_del(&t, tok[i]), 1);
	assert_int_equal(rsk_gentab_count(&t), 0);
	rsk_gentab_destroy(&t);
}

/* The generation after UINT32_MAX is 1: 0 would make the slot-0 token 0, a "no watch". */
static void test_generation_wrap(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	uint64_t tok, old, again;
	void *e;

	(void)state;
	e = rsk_gentab_add(&t, &tok);
	assert_non_null(e);
	assert_int_equal((uint32_t)tok, 0);
	old = rsk_gentab_set_gen(&t, tok, UINT32_MAX);
	assert_int_equal(old, ((uint64_t)UINT32_MAX << 32) | 0);
	assert_null(rsk_gentab_of(&t, tok)); /* the token of the generation before */
	assert_ptr_equal(rsk_gentab_of(&t, old), e);
	assert_int_equal(rsk_gentab_del(&t, old), 1);
	assert_non_null(rsk_gentab_add(&t, &again));
	assert_int_equal(again, ((uint64_t)1 << 32) | 0);
	assert_null(rsk_gentab_of(&t, old));
	assert_null(rsk_gentab_of(&t, 0));
	assert_int_equal(rsk_gentab_set_gen(&t, again, 0), 0); /* 0 is refused */
	assert_ptr_equal(rsk_gentab_of(&t, again), e);
	rsk_gentab_destroy(&t);
}

/* 0, a generation-0 value (evloop's eventfd data), an index past the table: nothing. */
static void test_garbage_tokens(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	uint64_t tok;

	(void)state;
	assert_null(rsk_gentab_of(&t, 0)); /* empty, nothing allocated */
	assert_int_equal(rsk_gentab_del(&t, 0), 0);
	assert_non_null(rsk_gentab_add(&t, &tok)); /* slot 0 in use, generation 1 */
	assert_null(rsk_gentab_of(&t, 0));
	assert_null(rsk_gentab_of(&t, UINT32_MAX));
	assert_null(rsk_gentab_of(&t, ((uint64_t)1 << 32) | 123456));
	assert_null(rsk_gentab_of(&t, tok + ((uint64_t)1 << 32))); /* a later generation */
	assert_int_equal(rsk_gentab_del(&t, 0), 0);
	assert_int_equal(rsk_gentab_count(&t), 1);
	assert_int_equal(rsk_gentab_set_gen(&t, 0, 5), 0);
	assert_non_null(rsk_gentab_of(&t, tok));
	rsk_gentab_destroy(&t);
}

/* Growth that fails leaves every entry and token; the table grows once memory is back. */
static void test_enomem(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	uint64_t tok[65];
	struct ent *e;
	int i;

	(void)state;
	for (i = 0; i < 64; i++) { /* the first allocation, full */
		e = rsk_gentab_add(&t, &tok[i]);
		assert_non_null(e);
		e->val = (uint64_t)i + 1;
	}
	g_fail_realloc = 1;
	g_reallocs = 0;
	assert_null(rsk_gentab_add(&t, &tok[64]));
	g_fail_realloc = 0;
	assert_int_equal(g_reallocs, 1);
	assert_int_equal(rsk_gentab_count(&t), 64);
	for (i = 0; i < 64; i++)
		assert_int_equal(((struct ent *)rsk_gentab_of(&t, tok[i]))->val, i + 1);
	e = rsk_gentab_add(&t, &tok[64]);
	assert_non_null(e);
	assert_ptr_equal(rsk_gentab_of(&t, tok[64]), e);
	for (i = 0; i < 64; i++)
		assert_int_equal(((struct ent *)rsk_gentab_of(&t, tok[i]))->val, i + 1);
	rsk_gentab_destroy(&t);
}

/* A size whose table cannot be counted in size_t is refused before any allocation. */
static void test_size_overflow(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(SIZE_MAX / 16);
	uint64_t tok = 0;

	(void)state;
	g_reallocs = 0;
	assert_null(rsk_gentab_add(&t, &tok));
	assert_int_equal(g_reallocs, 0);
	assert_int_equal(rsk_gentab_count(&t), 0);
	rsk_gentab_destroy(&t);
}

/* Clear (a forked child's reset): every token stale, the slots free for new entries. */
static void test_clear(void **state)
{
	struct rsk_gentab t = RSK_GENTAB_INIT(sizeof(struct ent));
	uint64_t tok[100], fresh;
	int i;

	(void)state;
	for (i = 0; i < 100; i++)
		assert_non_null(rsk_gentab_add(&t, &tok[i]));
	assert_int_equal(rsk_gentab_del(&t, tok[3]), 1);
	rsk_gentab_clear(&t);
	assert_int_equal(rsk_gentab_count(&t), 0);
	for (i = 0; i < 100; i++)
		assert_null(rsk_gentab_of(&t, tok[i]));
	for (i = 0; i < 100; i++) {
		assert_non_null(rsk_gentab_add(&t, &fresh));
		assert_true((uint32_t)fresh < 100); /* the freed slots come first */
		assert_null(rsk_gentab_of(&t, tok[(uint32_t)fresh]));
	}
	assert_int_equal(rsk_gentab_count(&t), 100);
	rsk_gentab_destroy(&t);
}

/* Entries of any size, aligned for anything (an entry may hold a long double). */
static void test_entry_sizes(void **state)
{
	size_t sizes[] = {0, 1, 24, 100};
	struct rsk_gentab t;
	unsigned char *e[70];
	uint64_t tok;
	size_t s;
	int i;

	(void)state;
	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		t = (struct rsk_gentab)RSK_GENTAB_INIT(sizes[s]);
		for (i = 0; i < 70; i++) {
			e[i] = rsk_gentab_add(&t, &tok);
			assert_non_null(e[i]);
			assert_int_equal((uintptr_t)e[i] % _Alignof(max_align_t), 0);
			memset(e[i], 0xa5, sizes[s]);
			if (i > 0 && i < 64) /* no overlap: neighbours in the first allocation */
				assert_true((size_t)(e[i] - e[i - 1]) >= sizes[s]);
		}
		rsk_gentab_destroy(&t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_of_del),
		cmocka_unit_test(test_stale_after_reuse),
		cmocka_unit_test(test_growth_keeps_tokens),
		cmocka_unit_test(test_generation_wrap),
		cmocka_unit_test(test_garbage_tokens),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_size_overflow),
		cmocka_unit_test(test_clear),
		cmocka_unit_test(test_entry_sizes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
