/*
 * Unit tests of the rules file (core/base/rules.c) and its application (core/base/policy.c):
 * every kind of bad line is reported once with FILE:LINE and skipped while the rest
 * applies, the first matching rule wins, and the environment beats the file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/policy.h"
#include "base/rules.h"
#include "rdmasock.h"

static char errs[8][512];
static int nerr;

static void collect(const char *msg, void *arg)
{
	(void)arg;
	if (nerr < 8)
		snprintf(errs[nerr], sizeof(errs[nerr]), "%s", msg);
	nerr++;
}

static int parse(struct rsk_rules *rs, const char *text)
{
	memset(rs, 0, sizeof(*rs));
	nerr = 0;
	return rsk_rules_parse(rs, text, strlen(text), "t.conf", collect, NULL);
}

/* A socket address for numeric @ip (IPv4 or IPv6) and @port. */
static struct sockaddr_storage sa(const char *ip, unsigned int port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':') == NULL) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	} else {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
	}
	return ss;
}

static void test_valid_file(void **state)
{
	struct rsk_rules rs;
	const char *text = "# comment line\n"
			   "\n"
			   "redis-*  server  *            6379       transport=shm   # trailing\n"
			   "*\tclient\t10.1.0.0/16\t6000-6100\ttransport=verbs\r\n"
			   "sockperf * * * spin_us=200 buf_count=16 buf_size=65536 inline=128 "
			   "connect_timeout_ms=250\n"
			   "   \t  \n";

	(void)state;
	assert_int_equal(parse(&rs, text), 0);
	assert_int_equal(nerr, 0);
	assert_int_equal(rs.n, 3);
	assert_string_equal(rs.r[0].program, "redis-*");
	assert_int_equal(rs.r[0].role, RSK_ROLE_SERVER);
	assert_int_equal(rs.r[0].port_lo, 6379);
	assert_int_equal(rs.r[0].port_hi, 6379);
	assert_int_equal(rs.r[0].val[RSK_RK_TRANSPORT], RSK_MODE_SHM);
	assert_int_equal(rs.r[0].line, 3);
	assert_int_equal(rs.r[1].role, RSK_ROLE_CLIENT);
	assert_int_equal(rs.r[1].prefix, 96 + 16);
	assert_int_equal(rs.r[1].port_lo, 6000);
	assert_int_equal(rs.r[1].port_hi, 6100);
	assert_int_equal(rs.r[1].val[RSK_RK_TRANSPORT], RSK_MODE_VERBS);
	assert_true(rsk_rule_process_wide(&rs.r[2]));
	assert_int_equal(rs.r[2].val[RSK_RK_SPIN_US], 200);
	assert_int_equal(rs.r[2].val[RSK_RK_BUF_COUNT], 16);
	assert_int_equal(rs.r[2].val[RSK_RK_BUF_SIZE], 65536);
	assert_int_equal(rs.r[2].val[RSK_RK_INLINE], 128);
	assert_int_equal(rs.r[2].val[RSK_RK_CONNECT_TIMEOUT_MS], 250);
	assert_false(rs.r[2].set & (1u << RSK_RK_TRANSPORT));
}

/* Each line alone must be rejected with exactly one message naming t.conf:1 and @what. */
static const struct {
	const char *line, *what;
} bad_lines[] = {
	{"redis", "expected PROGRAM ROLE ADDRESS PORTS"},
	{"redis server * 6379", "no setting"},
	{"redis clinet * * transport=shm", "invalid role \"clinet\""},
	{"redis * 10.0.0.300 * transport=shm", "invalid address \"10.0.0.300\""},
	{"redis * 10.0.0.0/33 * transport=shm", "invalid prefix length"},
	{"redis * 10.0.0.0/ * transport=shm", "invalid prefix length"},
	{"redis * 10.0.0.0/x * transport=shm", "invalid prefix length"},
	{"redis * ::1/129 * transport=shm", "invalid prefix length"},
	{"redis * fe80::zz * transport=shm", "invalid address"},
	{"redis * localhost * transport=shm", "invalid address \"localhost\""},
	{"redis * * 0 transport=shm", "invalid ports \"0\""},
	{"redis * * 70000 transport=shm", "invalid ports \"70000\""},
	{"redis * * 10-5 transport=shm", "invalid ports \"10-5\""},
	{"redis * * 5- transport=shm", "invalid ports \"5-\""},
	{"redis * * 80,443 transport=shm", "invalid ports \"80,443\""},
	{"redis * * * transport=rdma", "invalid transport \"rdma\""},
	{"redis * * * transport=", "invalid transport \"\""},
	{"redis * * * color=blue", "unknown setting \"color=blue\""},
	{"redis * * * transport", "expected KEY=VALUE"},
	{"redis * * * transport=shm transport=kernel", "\"transport\" is set twice"},
	{"redis * * * buf_size=3000", "invalid buf_size=\"3000\" (a power of two"},
	{"redis * * * buf_size=512", "invalid buf_size=\"512\""},
	{"redis * * * buf_count=5", "invalid buf_count=\"5\""},
	{"redis * * * spin_us=-1", "invalid spin_us=\"-1\""},
	{"redis * * * spin_us=12abc", "invalid spin_us=\"12abc\""},
	{"redis * * * inline=99999999999999999999", "invalid inline="},
	{"redis * * * connect_timeout_ms=0", "invalid connect_timeout_ms=\"0\""},
	{"redis server * 6379 buf_count=16", "tunables apply to the whole process"},
	{"redis * 127.0.0.1 * spin_us=10", "tunables apply to the whole process"},
	{"a-program-glob-that-is-far-too-long-to-be-the-name-of-any-program-at-all * * * "
	 "transport=shm",
	 "longer than 63 characters"},
	{"redis * * * transport=shm spin_us=1 buf_size=1024 buf_count=8 inline=0 "
	 "connect_timeout_ms=1 spin_us=2",
	 "more than 10 fields"},
};

static void test_every_bad_line(void **state)
{
	struct rsk_rules rs;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad_lines) / sizeof(bad_lines[0]); i++) {
		assert_int_equal(parse(&rs, bad_lines[i].line), 1);
		assert_int_equal(nerr, 1);
		assert_int_equal(rs.n, 0);
		if (strncmp(errs[0], "t.conf:1: ", 10) != 0 || strstr(errs[0], bad_lines[i].what) == NULL ||
		    strstr(errs[0], "line ignored") == NULL)
			fail_msg("line \"%s\": got \"%s\", want \"%s\"", bad_lines[i].line, errs[0],
				 bad_lines[i].what);
	}
}

static void test_long_line_and_nul(void **state)
{
	struct rsk_rules rs;
	char text[1200];

	(void)state;
	memset(text, 'x', sizeof(text));
	memcpy(text, "redis * * * transport=shm #", 27);
	text[sizeof(text) - 1] = '\0';
	assert_int_equal(parse(&rs, text), 1);
	assert_non_null(strstr(errs[0], "t.conf:1: line longer than 1024"));
	memset(&rs, 0, sizeof(rs));
	nerr = 0;
	assert_int_equal(rsk_rules_parse(&rs, "ok * * * transport=shm\nre\0dis * * * transport=shm\n",
					 48, "t.conf", collect, NULL),
			 1);
	assert_int_equal(rs.n, 1);
	assert_non_null(strstr(errs[0], "t.conf:2: NUL byte"));
}

/* A bad line costs itself only: the rules around it apply, and its line number is right. */
static void test_bad_line_rest_applies(void **state)
{
	struct rsk_rules rs;

	(void)state;
	assert_int_equal(parse(&rs, "a * * * transport=shm\n"
				    "# fine\n"
				    "b server * 99999 transport=kernel\n"
				    "c * * * transport=verbs\n"),
			 1);
	assert_int_equal(rs.n, 2);
	assert_string_equal(rs.r[0].program, "a");
	assert_string_equal(rs.r[1].program, "c");
	assert_int_equal(rs.r[1].line, 4);
	assert_int_equal(strncmp(errs[0], "t.conf:3: invalid ports", 23), 0);
}

static void test_too_many_rules(void **state)
{
	struct rsk_rules rs;
	char text[RSK_RULES_MAX * 32 + 64];
	size_t len = 0;
	int i;

	(void)state;
	for (i = 0; i <= RSK_RULES_MAX; i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "p%d * * * transport=shm\n", i);
	assert_int_equal(parse(&rs, text), 1);
	assert_int_equal(rs.n, RSK_RULES_MAX);
	assert_non_null(strstr(errs[0], "t.conf:65: more than 64 rules"));
}

static const char *match_transport(const struct rsk_rules *rs, const char *prog, int role,
				   struct sockaddr_storage ss)
{
	static const char *const names[] = {"auto", "kernel", "shm", "verbs"};
	const struct rsk_rule *r = rsk_rules_match(rs, prog, role, (struct sockaddr *)&ss);

	return r == NULL ? "none" : names[r->val[RSK_RK_TRANSPORT]];
}

static void test_first_match_wins(void **state)
{
	struct rsk_rules rs;

	(void)state;
	assert_int_equal(parse(&rs, "redis-server server * 6379 transport=kernel\n"
				    "redis-* * 10.1.0.0/16 6000-6999 transport=verbs\n"
				    "* client 2001:db8::/32 * transport=verbs\n"
				    "redis-* * * * transport=shm\n"
				    "* * 127.0.0.0/8 22 transport=kernel\n"),
			 0);
	assert_string_equal(match_transport(&rs, "redis-server", RSK_ROLE_SERVER, sa("0.0.0.0", 6379)),
			    "kernel");
	/* same port, client role: the first rule does not apply */
	assert_string_equal(match_transport(&rs, "redis-server", RSK_ROLE_CLIENT, sa("10.1.2.3", 6379)),
			    "verbs");
	assert_string_equal(match_transport(&rs, "redis-cli", RSK_ROLE_CLIENT, sa("10.2.0.1", 6379)),
			    "shm");
	assert_string_equal(match_transport(&rs, "redis-cli", RSK_ROLE_CLIENT, sa("10.1.0.1", 7000)),
			    "shm");
	/* IPv4-mapped IPv6 matches an IPv4 rule */
	assert_string_equal(match_transport(&rs, "redis-cli", RSK_ROLE_CLIENT,
					    sa("::ffff:10.1.255.255", 6000)),
			    "verbs");
	assert_string_equal(match_transport(&rs, "curl", RSK_ROLE_CLIENT, sa("2001:db8::1", 80)),
			    "verbs");
	assert_string_equal(match_transport(&rs, "curl", RSK_ROLE_CLIENT, sa("2001:db9::1", 80)),
			    "none");
	assert_string_equal(match_transport(&rs, "sshd", RSK_ROLE_SERVER, sa("127.0.0.1", 22)),
			    "kernel");
	assert_string_equal(match_transport(&rs, "sshd", RSK_ROLE_SERVER, sa("127.0.0.1", 23)),
			    "none");
	rsk_rules_filter(&rs, "redis-cli");
	assert_int_equal(rs.n, 4);
	assert_string_equal(rs.r[0].program, "redis-*");
}

static void test_prefix_bits(void **state)
{
	struct rsk_rules rs;

	(void)state;
	assert_int_equal(parse(&rs, "* * 192.168.4.0/22 * transport=shm\n* * ::/0 * transport=kernel\n"),
			 0);
	assert_string_equal(match_transport(&rs, "x", RSK_ROLE_CLIENT, sa("192.168.7.255", 1)), "shm");
	assert_string_equal(match_transport(&rs, "x", RSK_ROLE_CLIENT, sa("192.168.8.0", 1)),
			    "kernel");
	assert_string_equal(match_transport(&rs, "x", RSK_ROLE_CLIENT, sa("192.168.3.255", 1)),
			    "kernel");
}

static char tmp_path[64];

static void write_file(const char *text)
{
	int fd;

	snprintf(tmp_path, sizeof(tmp_path), "/tmp/rsk-rules-XXXXXX");
	fd = mkstemp(tmp_path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void test_load(void **state)
{
	struct rsk_rules rs;
	char *big;
	size_t i;

	(void)state;
	memset(&rs, 0, sizeof(rs));
	assert_int_equal(rsk_rules_load(&rs, "/nonexistent/rdmasock.conf", collect, NULL), -ENOENT);
	write_file("x * * * transport=shm\nbad line\n");
	nerr = 0;
	assert_int_equal(rsk_rules_load(&rs, tmp_path, collect, NULL), 1);
	assert_int_equal(rs.n, 1);
	assert_int_equal(strncmp(errs[0], tmp_path, strlen(tmp_path)), 0);
	assert_non_null(strstr(errs[0], ":2: "));
	unlink(tmp_path);
	big = malloc(RSK_RULES_FILE_MAX + 2);
	assert_non_null(big);
	for (i = 0; i < RSK_RULES_FILE_MAX + 1; i++)
		big[i] = i % 64 == 63 ? '\n' : '#';
	big[RSK_RULES_FILE_MAX + 1] = '\0';
	write_file(big);
	free(big);
	assert_int_equal(rsk_rules_load(&rs, tmp_path, collect, NULL), -EFBIG);
	unlink(tmp_path);
}

/* A fake environment for policy tests. */
static const char *env_names[8], *env_vals[8];
static int nenv;

static const char *fake_get(const char *name)
{
	int i;

	for (i = 0; i < nenv; i++)
		if (strcmp(env_names[i], name) == 0)
			return env_vals[i];
	return NULL;
}

static void set_env(const char *name, const char *val)
{
	env_names[nenv] = name;
	env_vals[nenv++] = val;
}

static void policy_load(const char *text, const char *program)
{
	write_file(text);
	set_env(RDMASOCK_ENV_CONFIG, tmp_path);
	nerr = 0;
	rsk_config_defaults(&rsk_config);
	rsk_config_parse(&rsk_config, fake_get, NULL, NULL);
	assert_true(rsk_policy_init(&rsk_config, fake_get, program, collect, NULL) >= 0);
	unlink(tmp_path);
}

static const char *const policy_text = "other * * * transport=verbs buf_count=64\n"
				       "prog server * 7000 transport=kernel\n"
				       "prog * * * transport=shm buf_count=32 spin_us=7\n"
				       "prog * * * buf_count=99\n";

static void test_policy_file_applies(void **state)
{
	struct sockaddr_storage a = sa("127.0.0.1", 7000);

	(void)state;
	nenv = 0;
	policy_load(policy_text, "prog");
	assert_int_equal(nerr, 0);
	assert_int_equal(rsk_policy_mode(RSK_ROLE_SERVER, (struct sockaddr *)&a), RSK_MODE_KERNEL);
	assert_int_equal(rsk_policy_mode(RSK_ROLE_CLIENT, (struct sockaddr *)&a), RSK_MODE_SHM);
	/* tunables: the first process-wide rule of this program, not "other"'s, not line 4 */
	assert_int_equal(rsk_config.buf_count, 32);
	assert_int_equal(rsk_config.spin_us, 7);
	assert_int_equal(rsk_config.buf_size, RSK_DEFAULT_BUF_SIZE);
	rsk_policy_reset();
}

static void test_policy_env_beats_file(void **state)
{
	struct sockaddr_storage a = sa("127.0.0.1", 7000);

	(void)state;
	nenv = 0;
	set_env(RDMASOCK_ENV_TRANSPORT, "verbs");
	set_env(RDMASOCK_ENV_BUF_COUNT, "12");
	policy_load(policy_text, "prog");
	assert_int_equal(rsk_policy_mode(RSK_ROLE_SERVER, (struct sockaddr *)&a), RSK_MODE_VERBS);
	assert_int_equal(rsk_policy_mode(RSK_ROLE_CLIENT, (struct sockaddr *)&a), RSK_MODE_VERBS);
	assert_int_equal(rsk_config.buf_count, 12);
	assert_int_equal(rsk_config.spin_us, 7); /* not in the environment: the file's */
	rsk_policy_reset();
}

static void test_policy_no_rules(void **state)
{
	struct sockaddr_storage a = sa("127.0.0.1", 7000);

	(void)state;
	nenv = 0;
	policy_load(policy_text, "unrelated");
	assert_int_equal(rsk_policy_mode(RSK_ROLE_SERVER, (struct sockaddr *)&a), RSK_MODE_AUTO);
	assert_int_equal(rsk_config.buf_count, RSK_DEFAULT_BUF_COUNT);
	nenv = 0;
	set_env(RDMASOCK_ENV_CONFIG, "/nonexistent/rules.conf");
	assert_int_equal(rsk_policy_init(&rsk_config, fake_get, "prog", collect, NULL), -ENOENT);
	assert_int_equal(rsk_policy_mode(RSK_ROLE_SERVER, (struct sockaddr *)&a), RSK_MODE_AUTO);
	rsk_policy_reset();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_file),
		cmocka_unit_test(test_every_bad_line),
		cmocka_unit_test(test_long_line_and_nul),
		cmocka_unit_test(test_bad_line_rest_applies),
		cmocka_unit_test(test_too_many_rules),
		cmocka_unit_test(test_first_match_wins),
		cmocka_unit_test(test_prefix_bits),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_policy_file_applies),
		cmocka_unit_test(test_policy_env_beats_file),
		cmocka_unit_test(test_policy_no_rules),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
