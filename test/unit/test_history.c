/*
 * Unit tests for core/calls/history.c, the destination history: what counts as short, the
 * verdict once enough connections to a destination ended (most of the last few short: start
 * on TCP), per destination; the count of setups in progress and its limit; that the two
 * spellings of an IPv4 destination share a history, that a look and a note take no lock,
 * and where a connection's age counts from; the mark of a destination without a bearer's
 * rendezvous.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/config.h"
#include "calls/history.h"
#include "unit_locks.h"

static struct sockaddr_in dst(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_hist_clear();
	return 0;
}

#define SA(a) ((const struct sockaddr *)&(a))

static void test_is_short(void **state)
{
	(void)state;
	rsk_config.upgrade_ms = 5;
	rsk_config.upgrade_bytes = 1000;
	assert_true(rsk_hist_is_short(1, 10, 10));
	assert_false(rsk_hist_is_short(1, 1000, 1)); /* enough bytes */
	assert_false(rsk_hist_is_short(10, 10, RSK_HIST_AGE_CALLS)); /* old, and busy */
	assert_true(rsk_hist_is_short(1000, 10, RSK_HIST_AGE_CALLS - 1)); /* old, idle */
	rsk_config.upgrade_ms = 0;
	assert_false(rsk_hist_is_short(0, 0, 0)); /* 0: every connection is worth it */
}

/* The verdict needs half the depth ended; then the majority decides. */
static void test_verdict(void **state)
{
	struct sockaddr_in a = dst(7000), b = dst(7001);
	int i;

	(void)state;
	assert_false(rsk_hist_short(SA(a)));
	for (i = 0; i < 3; i++)
		rsk_hist_note(SA(a), 1);
	assert_false(rsk_hist_short(SA(a))); /* too few to tell */
	rsk_hist_note(SA(a), 1);
	assert_true(rsk_hist_short(SA(a)));
	assert_false(rsk_hist_short(SA(b))); /* another port is another destination */
	for (i = 0; i < 5; i++)
		rsk_hist_note(SA(a), 0);
	assert_false(rsk_hist_short(SA(a))); /* most of the last ones lived */
	rsk_hist_clear();
	assert_false(rsk_hist_short(SA(a)));
}

/* The verdict: none until half the depth ended, then short or not by majority. */
static void test_verdict_values(void **state)
{
	struct sockaddr_in a = dst(7300);
	int i;

	(void)state;
	assert_int_equal(rsk_hist_verdict(SA(a)), -1);
	for (i = 0; i < 3; i++)
		rsk_hist_note(SA(a), 0);
	assert_int_equal(rsk_hist_verdict(SA(a)), -1);
	rsk_hist_note(SA(a), 0);
	assert_int_equal(rsk_hist_verdict(SA(a)), 0);
	for (i = 0; i < 8; i++)
		rsk_hist_note(SA(a), 1);
	assert_int_equal(rsk_hist_verdict(SA(a)), 1);
}

/* Setups in progress: RSK_HIST_SETUPS at once, then none until one ends (test_connect.c
 * drives the connects that take and give them back). */
static void test_setups(void **state)
{
	int i;

	(void)state;
	assert_int_equal(rsk_hist_setups(), 0);
	for (i = 0; i < RSK_HIST_SETUPS; i++)
		assert_true(rsk_hist_setup_begin());
	assert_false(rsk_hist_setup_begin());
	assert_int_equal(rsk_hist_setups(), RSK_HIST_SETUPS);
	rsk_hist_setup_end();
	assert_true(rsk_hist_setup_begin());
	assert_false(rsk_hist_setup_begin());
	for (i = 0; i < RSK_HIST_SETUPS; i++)
		rsk_hist_setup_end();
	assert_int_equal(rsk_hist_setups(), 0);
}

/* An IPv4 destination and its IPv4-mapped IPv6 spelling are one destination; an IPv6 one
 * with the same port is another. */
static void test_v4_mapped_folds(void **state)
{
	struct sockaddr_in a = dst(7000);
	struct sockaddr_in6 m, o;
	int i;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.sin6_family = AF_INET6;
	m.sin6_port = htons(7000);
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &m.sin6_addr);
	o = m;
	inet_pton(AF_INET6, "::1", &o.sin6_addr);
	for (i = 0; i < 8; i++)
		rsk_hist_note(SA(m), 1);
	assert_int_equal(rsk_hist_verdict(SA(a)), 1);
	assert_int_equal(rsk_hist_verdict(SA(o)), -1);
	for (i = 0; i < 8; i++)
		rsk_hist_note(SA(o), 0);
	assert_int_equal(rsk_hist_verdict(SA(o)), 0);
	assert_int_equal(rsk_hist_verdict(SA(m)), 1);
}

/* A connect's look and a close's note take no lock (both did, once per short connection). */
static void test_no_lock(void **state)
{
	struct sockaddr_in a = dst(7001);
	int v;

	(void)state;
	if (!LOCKS_COUNTED)
		skip();
	locks = 0;
	lock_counting = 1;
	rsk_hist_note(SA(a), 1);
	v = rsk_hist_verdict(SA(a));
	lock_counting = 0;
	assert_int_equal(v, -1);
	assert_int_equal(locks, 0);
}

/*
 * A connection's age counts from its first data call after RSK_HIST_AGE_CALLS of them: the
 * calls before are counted without a clock read, that one sets the mark, later ones leave it,
 * and the count stops at RSK_HIST_AGE_CALLS (nothing asks for more).
 */
static void test_age_marks_after_calls(void **state)
{
	uint64_t calls = 0;
	int64_t mark = 0, m;
	int i;

	(void)state;
	for (i = 0; i < RSK_HIST_AGE_CALLS; i++) {
		rsk_hist_called(&calls, &mark);
		assert_int_equal(mark, 0);
		assert_int_equal(rsk_hist_age(&mark), 0);
	}
	assert_int_equal(calls, RSK_HIST_AGE_CALLS);
	rsk_hist_called(&calls, &mark);
	assert_true(mark > 0);
	m = mark;
	mark -= 40; /* as if it had been set 40 ms ago */
	m -= 40;
	assert_true(rsk_hist_age(&mark) >= 40);
	rsk_hist_called(&calls, &mark);
	assert_int_equal(mark, m); /* the first one's moment stays */
	assert_int_equal(calls, RSK_HIST_AGE_CALLS);
}

#define T(f) cmocka_unit_test_setup(f, setup)

/* The mark "no rendezvous there" (a bearer connect refused): only on a destination with a
 * history, kept while its connections are noted, and for that destination alone. */
static void test_no_bearer_mark(void **state)
{
	struct sockaddr_in a = dst(7100), b = dst(7101);
	int i;

	(void)state;
	rsk_hist_set_no_bearer(SA(a), 1);
	assert_false(rsk_hist_no_bearer(SA(a))); /* no history: nothing to keep it with */
	for (i = 0; i < 8; i++)
		rsk_hist_note(SA(a), 1);
	rsk_hist_set_no_bearer(SA(a), 1);
	assert_true(rsk_hist_no_bearer(SA(a)));
	assert_false(rsk_hist_no_bearer(SA(b)));
	for (i = 0; i < 8; i++)
		rsk_hist_note(SA(a), i & 1);
	assert_true(rsk_hist_no_bearer(SA(a))); /* notes keep it */
	assert_int_equal(rsk_hist_verdict(SA(a)), 0); /* and it does not change the verdict */
	rsk_hist_set_no_bearer(SA(a), 0);
	assert_false(rsk_hist_no_bearer(SA(a)));
	assert_int_equal(rsk_hist_verdict(SA(a)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_is_short),
		T(test_verdict),
		T(test_verdict_values),
		T(test_setups),
		T(test_v4_mapped_folds),
		T(test_no_lock),
		T(test_age_marks_after_calls),
		T(test_no_bearer_mark),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
