/*
 * Unit tests for core/config: RDMASOCK_* parsing through a fake getenv table. Defaults, every
 * valid enum spelling, and for every class of bad value exactly one error message naming the
 * variable and the value, with the default kept and the return value counting bad variables.
 * Also the port policy (include/exclude lists) of rsk_config_port_allowed.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/compiler.h"
#include "base/config.h"
#include "rdmasock.h"

/* ---- the fake environment and the message capture ---- */

#define MAX_VARS 16
#define MAX_MSGS 32

static const char *env_names[MAX_VARS];
static const char *env_vals[MAX_VARS];
static int env_n;
static int env_lookups_unknown; /* names asked for that are not RDMASOCK_* */

static char msgs[MAX_MSGS][600];
static int n_msgs;
static struct rsk_config cfg, defaults;

static const char *fake_get(const char *name)
{
	int i;

	if (strncmp(name, "RDMASOCK_", 9) != 0)
		env_lookups_unknown++;
	for (i = 0; i < env_n; i++)
		if (strcmp(env_names[i], name) == 0)
			return env_vals[i];
	return NULL;
}

static void capture(const char *msg, void *arg)
{
	assert_ptr_equal(arg, &n_msgs); /* the cookie is passed through */
	if (n_msgs < MAX_MSGS)
		snprintf(msgs[n_msgs], sizeof(msgs[0]), "%s", msg);
	n_msgs++;
}

static void env_reset(void)
{
	env_n = 0;
	env_lookups_unknown = 0;
	n_msgs = 0;
}

static void env_set(const char *name, const char *val)
{
	assert_true(env_n < MAX_VARS);
	env_names[env_n] = name;
	env_vals[env_n] = val;
	env_n++;
}

static int parse(void)
{
	memset(&cfg, 0xa5, sizeof(cfg)); /* parse must not depend on what was there */
	n_msgs = 0;
	return rsk_config_parse(&cfg, fake_get, capture, &n_msgs);
}

static int setup(void **state)
{
	(void)state;
	env_reset();
	rsk_config_defaults(&defaults);
	return 0;
}

/* True when @msg names @name and quotes @val (its first 64 bytes for long values). */
static int msg_names(const char *msg, const char *name, const char *val)
{
	char want[128];
	size_t len = strlen(val);

	if (len > 64)
		snprintf(want, sizeof(want), "%s=\"%.64s", name, val);
	else
		snprintf(want, sizeof(want), "%s=\"%s\"", name, val);
	return strstr(msg, want) != NULL;
}

/* How many captured messages name @name=@val. */
static int named_count(const char *name, const char *val)
{
	int m, hits = 0;

	for (m = 0; m < n_msgs && m < MAX_MSGS; m++)
		hits += msg_names(msgs[m], name, val);
	return hits;
}

/* @name=@val alone must be rejected: one message, return 1, config left at the defaults. */
static void expect_rejected(const char *name, const char *val)
{
	int rc;

	env_reset();
	env_set(name, val);
	rc = parse();
	if (rc != 1 || n_msgs != 1)
		fail_msg("%s=\"%.80s\": rc %d, %d messages (expected 1 and 1)", name, val, rc,
			 n_msgs);
	if (!msg_names(msgs[0], name, val))
		fail_msg("message does not name %s=\"%.80s\": %s", name, val, msgs[0]);
	if (memcmp(&cfg, &defaults, sizeof(cfg)) != 0)
		fail_msg("%s=\"%.80s\" changed the configuration", name, val);
}

/* @name=@val alone must be accepted silently. */
static void expect_accepted(const char *name, const char *val)
{
	int rc;

	env_reset();
	env_set(name, val);
	rc = parse();
	if (rc != 0 || n_msgs != 0)
		fail_msg("%s=\"%.80s\" rejected: rc %d, %d messages: %s", name, val, rc, n_msgs,
			 n_msgs ? msgs[0] : "");
}

static void expect_uint(const char *name, const char *val, const unsigned int *field,
			unsigned int want)
{
	expect_accepted(name, val);
	if (*field != want)
		fail_msg("%s=\"%s\": got %u, expected %u", name, val, *field, want);
}

/* A malloc'ed string of @len copies of @c. */
static char *repeat(char c, size_t len)
{
	char *s = malloc(len + 1);

	assert_non_null(s);
	memset(s, c, len);
	s[len] = '\0';
	return s;
}

/* ---- defaults and valid values ---- */

static void test_defaults(void **state)
{
	(void)state;
	assert_int_equal(parse(), 0);
	assert_int_equal(n_msgs, 0);
	assert_int_equal(env_lookups_unknown, 0);
	assert_int_equal(cfg.mode, RSK_MODE_AUTO);
	assert_int_equal(cfg.log_level, RSK_LOG_WARN);
	assert_string_equal(cfg.log_file, "");
	assert_string_equal(cfg.stats_file, "");
	assert_int_equal(cfg.n_include, 0);
	assert_int_equal(cfg.n_exclude, 0);
	assert_int_equal(cfg.spin_us, RSK_DEFAULT_SPIN_US);
	assert_int_equal(cfg.buf_size, RSK_DEFAULT_BUF_SIZE);
	assert_int_equal(cfg.buf_count, RSK_DEFAULT_BUF_COUNT);
	assert_int_equal(cfg.inline_size, RSK_DEFAULT_INLINE);
	assert_int_equal(cfg.connect_timeout_ms, RSK_DEFAULT_CONNECT_TIMEOUT_MS);
	assert_int_equal(cfg.orphan_ms, 60000); /* the kernel's tcp_fin_timeout */
	assert_int_equal(cfg.fastwait, 1);
	assert_int_equal(cfg.coalesce, RSK_COALESCE_SAFE); /* no byte held where a kill takes it */
	/* measured faster than TCP first for short same-host connections (bench/connrate.sh) */
	assert_int_equal(cfg.bearer, RSK_BEARER_AUTO);
	assert_string_equal(cfg.device, "");
	/* rsk_config_defaults and a parse of an empty environment agree exactly. */
	assert_memory_equal(&cfg, &defaults, sizeof(cfg));
	/* A NULL error callback is allowed. */
	assert_int_equal(rsk_config_parse(&cfg, fake_get, NULL, NULL), 0);
}

static void test_transport_values(void **state)
{
	static const struct {
		const char *s;
		enum rsk_mode m;
	} ok[] = {
		{"auto", RSK_MODE_AUTO},   {"kernel", RSK_MODE_KERNEL}, {"shm", RSK_MODE_SHM},
		{"verbs", RSK_MODE_VERBS}, {"AUTO", RSK_MODE_AUTO},     {"Kernel", RSK_MODE_KERNEL},
		{"SHM", RSK_MODE_SHM},     {"vErBs", RSK_MODE_VERBS},   {"KERNEL", RSK_MODE_KERNEL},
	};
	unsigned int i;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(ok); i++) {
		expect_accepted(RDMASOCK_ENV_TRANSPORT, ok[i].s);
		assert_int_equal(cfg.mode, ok[i].m);
	}
	assert_string_equal(rsk_mode_name(RSK_MODE_AUTO), "auto");
	assert_string_equal(rsk_mode_name(RSK_MODE_KERNEL), "kernel");
	assert_string_equal(rsk_mode_name(RSK_MODE_SHM), "shm");
	assert_string_equal(rsk_mode_name(RSK_MODE_VERBS), "verbs");
	assert_string_equal(rsk_mode_name((enum rsk_mode)4), "?");
}

static void test_log_values(void **state)
{
	static const struct {
		const char *s;
		enum rsk_log_level l;
	} ok[] = {
		{"error", RSK_LOG_ERROR}, {"warn", RSK_LOG_WARN},   {"info", RSK_LOG_INFO},
		{"debug", RSK_LOG_DEBUG}, {"ERROR", RSK_LOG_ERROR}, {"Warn", RSK_LOG_WARN},
		{"INFO", RSK_LOG_INFO},   {"DeBuG", RSK_LOG_DEBUG},
	};
	unsigned int i;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(ok); i++) {
		expect_accepted(RDMASOCK_ENV_LOG, ok[i].s);
		assert_int_equal(cfg.log_level, ok[i].l);
	}
}

static void test_coalesce_values(void **state)
{
	(void)state;
	expect_accepted(RDMASOCK_ENV_COALESCE, "always");
	assert_int_equal(cfg.coalesce, RSK_COALESCE_ALWAYS);
	expect_accepted(RDMASOCK_ENV_COALESCE, "SAFE");
	assert_int_equal(cfg.coalesce, RSK_COALESCE_SAFE);
}

static void test_bearer_values(void **state)
{
	(void)state;
	expect_accepted(RDMASOCK_ENV_BEARER, "unix");
	assert_int_equal(cfg.bearer, RSK_BEARER_UNIX);
	expect_accepted(RDMASOCK_ENV_BEARER, "face");
	assert_int_equal(cfg.bearer, RSK_BEARER_FACE);
	expect_accepted(RDMASOCK_ENV_BEARER, "None");
	assert_int_equal(cfg.bearer, RSK_BEARER_NONE);
	expect_accepted(RDMASOCK_ENV_BEARER, "auto");
	assert_int_equal(cfg.bearer, RSK_BEARER_AUTO);
}

static void test_numeric_valid(void **state)
{
	(void)state;
	expect_uint(RDMASOCK_ENV_SPIN_US, "0", &cfg.spin_us, 0);
	expect_uint(RDMASOCK_ENV_SPIN_US, "1000000", &cfg.spin_us, 1000000);
	expect_uint(RDMASOCK_ENV_SPIN_US, "007", &cfg.spin_us, 7);
	expect_uint(RDMASOCK_ENV_BUF_SIZE, "1024", &cfg.buf_size, 1024);
	expect_uint(RDMASOCK_ENV_BUF_SIZE, "65536", &cfg.buf_size, 65536);
	expect_uint(RDMASOCK_ENV_BUF_SIZE, "4194304", &cfg.buf_size, 4u << 20);
	expect_uint(RDMASOCK_ENV_BUF_COUNT, "6", &cfg.buf_count, 6);
	expect_uint(RDMASOCK_ENV_BUF_COUNT, "1024", &cfg.buf_count, 1024);
	expect_uint(RDMASOCK_ENV_BUF_COUNT, "17", &cfg.buf_count, 17);
	expect_uint(RDMASOCK_ENV_INLINE, "0", &cfg.inline_size, 0);
	expect_uint(RDMASOCK_ENV_INLINE, "1024", &cfg.inline_size, 1024);
	expect_uint(RDMASOCK_ENV_CONNECT_TIMEOUT_MS, "1", &cfg.connect_timeout_ms, 1);
	expect_uint(RDMASOCK_ENV_CONNECT_TIMEOUT_MS, "60000", &cfg.connect_timeout_ms, 60000);
	expect_uint(RDMASOCK_ENV_FASTWAIT, "0", &cfg.fastwait, 0);
	expect_uint(RDMASOCK_ENV_FASTWAIT, "1", &cfg.fastwait, 1);
	expect_uint(RDMASOCK_ENV_ORPHAN_MS, "1", &cfg.orphan_ms, 1);
	expect_uint(RDMASOCK_ENV_ORPHAN_MS, "3600000", &cfg.orphan_ms, 3600000);
}

static void test_paths_valid(void **state)
{
	char *max = repeat('p', PATH_MAX - 1);

	(void)state;
	max[0] = '/';
	expect_accepted(RDMASOCK_ENV_LOG_FILE, "/tmp/rdmasock.log");
	assert_string_equal(cfg.log_file, "/tmp/rdmasock.log");
	assert_string_equal(cfg.stats_file, "");
	expect_accepted(RDMASOCK_ENV_LOG_FILE, max);
	assert_string_equal(cfg.log_file, max);
	expect_accepted(RDMASOCK_ENV_STATS, "stats.jsonl");
	assert_string_equal(cfg.stats_file, "stats.jsonl");
	assert_string_equal(cfg.log_file, "");
	expect_accepted(RDMASOCK_ENV_STATS, max);
	assert_string_equal(cfg.stats_file, max);
	free(max);

	max = repeat('d', sizeof(cfg.device) - 1);
	expect_accepted(RDMASOCK_ENV_DEVICE, "mlx5_0");
	assert_string_equal(cfg.device, "mlx5_0");
	expect_accepted(RDMASOCK_ENV_DEVICE, max);
	assert_string_equal(cfg.device, max);
	free(max);
}

/* ---- rejections, one class at a time ---- */

static void test_enum_rejected(void **state)
{
	static const char *const bad_mode[] = {"bogus", "", "rdma", "tcp", "kernel ", " shm",
					       "verbs2", "auto,kernel", "0", "ker"};
	static const char *const bad_log[] = {"bogus", "", "warning", "trace", "3", "err",
					      "debug\n", "INFO "};
	unsigned int i;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(bad_mode); i++)
		expect_rejected(RDMASOCK_ENV_TRANSPORT, bad_mode[i]);
	for (i = 0; i < RSK_ARRAY_SIZE(bad_log); i++)
		expect_rejected(RDMASOCK_ENV_LOG, bad_log[i]);
	expect_rejected(RDMASOCK_ENV_COALESCE, "on");
	expect_rejected(RDMASOCK_ENV_COALESCE, "");
	expect_rejected(RDMASOCK_ENV_COALESCE, "1");
	expect_rejected(RDMASOCK_ENV_BEARER, "tcp");
	expect_rejected(RDMASOCK_ENV_BEARER, "");
}

/* Bad in every numeric variable whatever its range. */
static const char *const bad_numbers[] = {
	"",     "12x", "-1",   "+5",   "99999999999999999999", "18446744073709551616",
	" 5",   "5 ",  "0x10", "1e3",  "1.5",                  "abc",
	"5\n",  "-0",  "--1",  "1 2",
};

static const char *const numeric_vars[] = {
	RDMASOCK_ENV_SPIN_US, RDMASOCK_ENV_BUF_SIZE, RDMASOCK_ENV_BUF_COUNT, RDMASOCK_ENV_INLINE,
	RDMASOCK_ENV_CONNECT_TIMEOUT_MS, RDMASOCK_ENV_ORPHAN_MS,
};

static void test_numeric_syntax_rejected(void **state)
{
	unsigned int v, i;

	(void)state;
	for (v = 0; v < RSK_ARRAY_SIZE(numeric_vars); v++)
		for (i = 0; i < RSK_ARRAY_SIZE(bad_numbers); i++)
			expect_rejected(numeric_vars[v], bad_numbers[i]);
}

static void test_numeric_range_rejected(void **state)
{
	(void)state;
	expect_rejected(RDMASOCK_ENV_SPIN_US, "1000001");
	expect_rejected(RDMASOCK_ENV_SPIN_US, "4294967296"); /* UINT_MAX + 1: no wrap to 0 */
	expect_rejected(RDMASOCK_ENV_SPIN_US, "4294967346"); /* wraps to 50 in 32 bits */

	expect_rejected(RDMASOCK_ENV_FASTWAIT, "2");
	expect_rejected(RDMASOCK_ENV_ORPHAN_MS, "0");
	expect_rejected(RDMASOCK_ENV_ORPHAN_MS, "3600001");

	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "3000"); /* in range, not a power of two */
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "1023");
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "1025");
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "512"); /* power of two, too small */
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "0");
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "4194303");
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "8388608"); /* power of two, too large */
	expect_rejected(RDMASOCK_ENV_BUF_SIZE, "4294967296");

	expect_rejected(RDMASOCK_ENV_BUF_COUNT, "0");
	expect_rejected(RDMASOCK_ENV_BUF_COUNT, "1");
	expect_rejected(RDMASOCK_ENV_BUF_COUNT, "5");
	expect_rejected(RDMASOCK_ENV_BUF_COUNT, "1025");

	expect_rejected(RDMASOCK_ENV_INLINE, "1025");
	expect_rejected(RDMASOCK_ENV_INLINE, "4294967296");

	expect_rejected(RDMASOCK_ENV_CONNECT_TIMEOUT_MS, "0");
	expect_rejected(RDMASOCK_ENV_CONNECT_TIMEOUT_MS, "60001");
}

static void test_paths_rejected(void **state)
{
	char *at_max = repeat('q', PATH_MAX);
	char *over = repeat('r', PATH_MAX + 100);
	char *dev = repeat('d', sizeof(cfg.device));

	(void)state;
	expect_rejected(RDMASOCK_ENV_LOG_FILE, "");
	expect_rejected(RDMASOCK_ENV_LOG_FILE, at_max);
	expect_rejected(RDMASOCK_ENV_LOG_FILE, over);
	expect_rejected(RDMASOCK_ENV_STATS, "");
	expect_rejected(RDMASOCK_ENV_STATS, at_max);
	expect_rejected(RDMASOCK_ENV_STATS, over);
	expect_rejected(RDMASOCK_ENV_DEVICE, dev);
	expect_rejected(RDMASOCK_ENV_DEVICE, over);
	expect_rejected(RDMASOCK_ENV_DEVICE, "");
	free(at_max);
	free(over);
	free(dev);
}

/* ---- port lists ---- */

static void check_ranges(const struct rsk_port_range *r, unsigned int n, const uint16_t *want,
			 unsigned int nwant)
{
	unsigned int i;

	assert_int_equal(n, nwant);
	for (i = 0; i < n; i++) {
		assert_int_equal(r[i].lo, want[2 * i]);
		assert_int_equal(r[i].hi, want[2 * i + 1]);
	}
}

static char *port_list(unsigned int count)
{
	static char buf[512];
	size_t len = 0;
	unsigned int i;

	buf[0] = '\0';
	for (i = 1; i <= count; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%u", i > 1 ? "," : "",
					i);
	return buf;
}

static void test_ports_valid(void **state)
{
	static const uint16_t one[] = {6379, 6379};
	static const uint16_t three[] = {80, 80, 443, 443, 8000, 8100};
	static const uint16_t edges[] = {1, 1, 65535, 65535, 7, 7, 1, 65535};
	static const char *const vars[] = {RDMASOCK_ENV_INCLUDE_PORTS,
					   RDMASOCK_ENV_EXCLUDE_PORTS};
	unsigned int v;

	(void)state;
	for (v = 0; v < 2; v++) {
		const struct rsk_port_range *r = v ? cfg.exclude : cfg.include;
		const unsigned int *n = v ? &cfg.n_exclude : &cfg.n_include;
		const unsigned int *other = v ? &cfg.n_include : &cfg.n_exclude;

		expect_accepted(vars[v], "6379");
		check_ranges(r, *n, one, 1);
		assert_int_equal(*other, 0);
		expect_accepted(vars[v], "80,443,8000-8100");
		check_ranges(r, *n, three, 3);
		assert_int_equal(*other, 0);
		expect_accepted(vars[v], "1,65535,7-7,1-65535");
		check_ranges(r, *n, edges, 4);
		expect_accepted(vars[v], port_list(RSK_CONFIG_MAX_RULES));
		assert_int_equal(*n, RSK_CONFIG_MAX_RULES);
		assert_int_equal(r[RSK_CONFIG_MAX_RULES - 1].lo, RSK_CONFIG_MAX_RULES);
		assert_int_equal(r[RSK_CONFIG_MAX_RULES - 1].hi, RSK_CONFIG_MAX_RULES);
	}
}

static void test_ports_rejected(void **state)
{
	static const char *const bad[] = {
		"0",   "65536", "10-5", "a",      "1,,2",   "1,",     "",        ",1",
		"1-",  "-5",    "0-10", "1-65536", "1 ,2",  " 1",     "80;443",  "8000-8100-9000",
		"+80", "80x",   ",",    "1-2,",   "99999999999999999999",
	};
	static const char *const vars[] = {RDMASOCK_ENV_INCLUDE_PORTS,
					   RDMASOCK_ENV_EXCLUDE_PORTS};
	char list33[512];
	unsigned int v, i;

	(void)state;
	snprintf(list33, sizeof(list33), "%s", port_list(RSK_CONFIG_MAX_RULES + 1));
	for (v = 0; v < 2; v++) {
		for (i = 0; i < RSK_ARRAY_SIZE(bad); i++)
			expect_rejected(vars[v], bad[i]);
		expect_rejected(vars[v], list33);
	}
}

/* ---- several at once ---- */

static void test_all_bad_at_once(void **state)
{
	static const char *const kv[][2] = {
		{RDMASOCK_ENV_TRANSPORT, "rdma"},
		{RDMASOCK_ENV_LOG, "loud"},
		{RDMASOCK_ENV_LOG_FILE, ""},
		{RDMASOCK_ENV_STATS, ""},
		{RDMASOCK_ENV_INCLUDE_PORTS, "0"},
		{RDMASOCK_ENV_EXCLUDE_PORTS, "10-5"},
		{RDMASOCK_ENV_SPIN_US, "-1"},
		{RDMASOCK_ENV_BUF_SIZE, "3000"},
		{RDMASOCK_ENV_BUF_COUNT, "1"},
		{RDMASOCK_ENV_INLINE, "12x"},
		{RDMASOCK_ENV_CONNECT_TIMEOUT_MS, "+5"},
		{RDMASOCK_ENV_DEVICE, ""},
	};
	unsigned int i;
	int hits;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(kv); i++)
		env_set(kv[i][0], kv[i][1]);
	assert_int_equal(parse(), (int)RSK_ARRAY_SIZE(kv));
	assert_int_equal(n_msgs, (int)RSK_ARRAY_SIZE(kv));
	/* One message per variable (RDMASOCK_LOG vs RDMASOCK_LOG_FILE kept apart by the '='). */
	for (i = 0; i < RSK_ARRAY_SIZE(kv); i++) {
		hits = named_count(kv[i][0], kv[i][1]);
		if (hits != 1)
			fail_msg("%s=\"%s\" named in %d messages", kv[i][0], kv[i][1], hits);
	}
	assert_memory_equal(&cfg, &defaults, sizeof(cfg));
	/* Without a callback the count is the same. */
	assert_int_equal(rsk_config_parse(&cfg, fake_get, NULL, NULL), (int)RSK_ARRAY_SIZE(kv));
	assert_memory_equal(&cfg, &defaults, sizeof(cfg));
}

static void test_mixed_good_and_bad(void **state)
{
	(void)state;
	env_set(RDMASOCK_ENV_TRANSPORT, "shm");
	env_set(RDMASOCK_ENV_LOG, "verbose");
	env_set(RDMASOCK_ENV_SPIN_US, "0");
	env_set(RDMASOCK_ENV_BUF_SIZE, "99999999999999999999");
	env_set(RDMASOCK_ENV_BUF_COUNT, "64");
	env_set(RDMASOCK_ENV_INCLUDE_PORTS, "6379,1,");
	env_set(RDMASOCK_ENV_EXCLUDE_PORTS, "22");
	env_set(RDMASOCK_ENV_DEVICE, "mlx5_1");
	assert_int_equal(parse(), 3);
	assert_int_equal(n_msgs, 3);
	assert_int_equal(named_count(RDMASOCK_ENV_LOG, "verbose"), 1);
	assert_int_equal(named_count(RDMASOCK_ENV_INCLUDE_PORTS, "6379,1,"), 1);
	assert_int_equal(named_count(RDMASOCK_ENV_BUF_SIZE, "99999999999999999999"), 1);
	assert_int_equal(cfg.mode, RSK_MODE_SHM);
	assert_int_equal(cfg.log_level, RSK_LOG_WARN);
	assert_int_equal(cfg.spin_us, 0);
	assert_int_equal(cfg.buf_size, RSK_DEFAULT_BUF_SIZE);
	assert_int_equal(cfg.buf_count, 64);
	assert_int_equal(cfg.n_include, 0); /* a bad list is dropped whole, not in part */
	assert_int_equal(cfg.n_exclude, 1);
	assert_int_equal(cfg.exclude[0].lo, 22);
	assert_string_equal(cfg.device, "mlx5_1");
}

/* ---- port policy ---- */

static void set_ports(const char *inc, const char *exc)
{
	env_reset();
	if (inc)
		env_set(RDMASOCK_ENV_INCLUDE_PORTS, inc);
	if (exc)
		env_set(RDMASOCK_ENV_EXCLUDE_PORTS, exc);
	assert_int_equal(parse(), 0);
}

static void test_port_allowed(void **state)
{
	(void)state;
	set_ports(NULL, NULL);
	assert_true(rsk_config_port_allowed(&cfg, 0));
	assert_true(rsk_config_port_allowed(&cfg, 1));
	assert_true(rsk_config_port_allowed(&cfg, 6379));
	assert_true(rsk_config_port_allowed(&cfg, 65535));

	set_ports("6379", NULL);
	assert_true(rsk_config_port_allowed(&cfg, 6379));
	assert_false(rsk_config_port_allowed(&cfg, 6378));
	assert_false(rsk_config_port_allowed(&cfg, 6380));
	assert_false(rsk_config_port_allowed(&cfg, 80));

	set_ports("80,443,8000-8100", NULL);
	assert_true(rsk_config_port_allowed(&cfg, 80));
	assert_true(rsk_config_port_allowed(&cfg, 443));
	assert_false(rsk_config_port_allowed(&cfg, 444));
	assert_false(rsk_config_port_allowed(&cfg, 7999));
	assert_true(rsk_config_port_allowed(&cfg, 8000));
	assert_true(rsk_config_port_allowed(&cfg, 8050));
	assert_true(rsk_config_port_allowed(&cfg, 8100));
	assert_false(rsk_config_port_allowed(&cfg, 8101));

	set_ports(NULL, "22,53");
	assert_false(rsk_config_port_allowed(&cfg, 22));
	assert_false(rsk_config_port_allowed(&cfg, 53));
	assert_true(rsk_config_port_allowed(&cfg, 23));
	assert_true(rsk_config_port_allowed(&cfg, 6379));

	/* Exclude wins over include. */
	set_ports("8000-8100", "8050,8100");
	assert_true(rsk_config_port_allowed(&cfg, 8000));
	assert_true(rsk_config_port_allowed(&cfg, 8049));
	assert_false(rsk_config_port_allowed(&cfg, 8050));
	assert_true(rsk_config_port_allowed(&cfg, 8051));
	assert_false(rsk_config_port_allowed(&cfg, 8100));
	assert_false(rsk_config_port_allowed(&cfg, 9000));

	set_ports("1-65535", "1-65535");
	assert_false(rsk_config_port_allowed(&cfg, 1));
	assert_false(rsk_config_port_allowed(&cfg, 65535));

	/* An invalid include list is dropped: everything allowed again. */
	env_reset();
	env_set(RDMASOCK_ENV_INCLUDE_PORTS, "6379,x");
	assert_int_equal(parse(), 1);
	assert_true(rsk_config_port_allowed(&cfg, 80));
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, NULL)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_defaults),
		T(test_transport_values),
		T(test_log_values),
		T(test_coalesce_values),
		T(test_bearer_values),
		T(test_numeric_valid),
		T(test_paths_valid),
		T(test_enum_rejected),
		T(test_numeric_syntax_rejected),
		T(test_numeric_range_rejected),
		T(test_paths_rejected),
		T(test_ports_valid),
		T(test_ports_rejected),
		T(test_all_bad_at_once),
		T(test_mixed_good_and_bad),
		T(test_port_allowed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
