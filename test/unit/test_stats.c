/*
 * Unit tests for core/stats: the RDMASOCK_STATS JSON line (exact key set and values checked by
 * a small strict JSON parser here, and cross-checked with python3's json module when present),
 * escaping of awkward program names, -ENOSPC on short buffers without overrunning them,
 * rsk_stats_append (one line per call), rsk_stats_reset and the per-reason fallback counters.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/stats.h"

/* ---- a strict little JSON parser: objects, strings and unsigned integers only ---- */

#define JMAX_LEAVES 64
#define JMAX_STR 4096

struct jleaf {
	char path[96]; /* "connections.kernel" */
	int is_str;
	char str[JMAX_STR];
	unsigned long long num;
};

struct jdoc {
	const char *p;
	struct jleaf leaves[JMAX_LEAVES];
	int n;
	const char *err;
};

static struct jdoc doc;

static void jws(struct jdoc *d)
{
	while (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')
		d->p++;
}

static int jfail(struct jdoc *d, const char *why)
{
	if (d->err == NULL)
		d->err = why;
	return -1;
}

static int jhex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decode a string at d->p (on the opening quote) into @out. */
static int jstring(struct jdoc *d, char *out, size_t size)
{
	size_t len = 0;
	unsigned int cp;
	int i, h;
	char c;

	if (*d->p != '"')
		return jfail(d, "expected a string");
	d->p++;
	for (;;) {
		c = *d->p++;
		if (c == '\0')
			return jfail(d, "unterminated string");
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20)
			return jfail(d, "raw control character in a string");
		if (c == '\\') {
			c = *d->p++;
			switch (c) {
			case '"':
			case '\\':
			case '/':
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u':
				cp = 0;
				for (i = 0; i < 4; i++) {
					h = jhex(*d->p++);
					if (h < 0)
						return jfail(d, "bad \\u escape");
					cp = cp << 4 | (unsigned int)h;
				}
				if (cp >= 0x80)
					return jfail(d, "\\u escape above ASCII");
				c = (char)cp;
				break;
			default:
				return jfail(d, "bad escape");
			}
		}
		if (len + 1 >= size)
			return jfail(d, "string too long for the checker");
		out[len++] = c;
	}
	out[len] = '\0';
	return 0;
}

static struct jleaf *jleaf_new(struct jdoc *d, const char *path)
{
	struct jleaf *l;

	if (d->n == JMAX_LEAVES) {
		jfail(d, "too many values");
		return NULL;
	}
	l = &d->leaves[d->n++];
	memset(l, 0, sizeof(*l));
	snprintf(l->path, sizeof(l->path), "%s", path);
	return l;
}

static int jvalue(struct jdoc *d, const char *path);

static int jobject(struct jdoc *d, const char *path)
{
	char keys[32][64], sub[96];
	int nkeys = 0, i, n;

	d->p++; /* '{' */
	jws(d);
	if (*d->p == '}') {
		d->p++;
		return 0;
	}
	for (;;) {
		jws(d);
		if (nkeys == 32)
			return jfail(d, "too many keys");
		if (jstring(d, keys[nkeys], sizeof(keys[0])) < 0)
			return -1;
		for (i = 0; i < nkeys; i++)
			if (strcmp(keys[i], keys[nkeys]) == 0)
				return jfail(d, "duplicate key");
		n = snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", keys[nkeys]);
		if (n < 0 || (size_t)n >= sizeof(sub))
			return jfail(d, "key path too long for the checker");
		nkeys++;
		jws(d);
		if (*d->p++ != ':')
			return jfail(d, "expected ':'");
		jws(d);
		if (jvalue(d, sub) < 0)
			return -1;
		jws(d);
		if (*d->p == ',') {
			d->p++;
			continue;
		}
		if (*d->p == '}') {
			d->p++;
			return 0;
		}
		return jfail(d, "expected ',' or '}'");
	}
}

static int jvalue(struct jdoc *d, const char *path)
{
	struct jleaf *l;
	const char *start;
	char *end;

	if (*d->p == '{')
		return jobject(d, path);
	if (*d->p == '"') {
		l = jleaf_new(d, path);
		if (l == NULL)
			return -1;
		l->is_str = 1;
		return jstring(d, l->str, sizeof(l->str));
	}
	if (*d->p >= '0' && *d->p <= '9') {
		start = d->p;
		if (*d->p == '0' && d->p[1] >= '0' && d->p[1] <= '9')
			return jfail(d, "leading zero");
		while (*d->p >= '0' && *d->p <= '9')
			d->p++;
		if (*d->p == '.' || *d->p == 'e' || *d->p == 'E')
			return jfail(d, "non-integer number");
		l = jleaf_new(d, path);
		if (l == NULL)
			return -1;
		errno = 0;
		l->num = strtoull(start, &end, 10);
		if (errno != 0 || end != d->p)
			return jfail(d, "integer overflow");
		return 0;
	}
	return jfail(d, "unexpected value (only objects, strings, unsigned integers expected)");
}

/* Parse @json into the global doc; fails the test with the reason if it is not valid. */
static void jparse(const char *json)
{
	const char *q;

	memset(&doc, 0, sizeof(doc));
	for (q = json; *q; q++)
		if ((unsigned char)*q < 0x20)
			fail_msg("raw control byte 0x%02x at offset %td in %s", (unsigned char)*q,
				 q - json, json);
	doc.p = json;
	jws(&doc);
	if (*doc.p != '{')
		fail_msg("not an object: %s", json);
	if (jvalue(&doc, "") < 0)
		fail_msg("invalid JSON (%s) at offset %td: %s", doc.err, doc.p - json, json);
	jws(&doc);
	if (*doc.p != '\0')
		fail_msg("trailing bytes at offset %td: %s", doc.p - json, json);
}

static const struct jleaf *jfind(const char *path)
{
	const struct jleaf *found = NULL;
	int i;

	for (i = 0; i < doc.n; i++) {
		if (strcmp(doc.leaves[i].path, path) == 0) {
			if (found != NULL)
				fail_msg("key %s twice", path);
			found = &doc.leaves[i];
		}
	}
	return found;
}

static void jexpect_num(const char *path, unsigned long long want)
{
	const struct jleaf *l = jfind(path);

	if (l == NULL)
		fail_msg("key %s missing", path);
	if (l->is_str)
		fail_msg("key %s is a string", path);
	if (l->num != want)
		fail_msg("key %s = %llu, expected %llu", path, l->num, want);
}

static const char *const per_transport_keys[] = {"connections", "bytes_sent", "bytes_received",
						 "messages_sent", "messages_received"};

static const uint64_t *per_transport(const struct rdmasock_stats *s, unsigned int k)
{
	const uint64_t *const v[] = {s->connections, s->bytes_sent, s->bytes_received,
				     s->messages_sent, s->messages_received};

	return v[k];
}

/*
 * The parsed doc must hold exactly: pid, program, the five per-transport objects with one key
 * per transport, credit_stalls, fallbacks with one key per reason, writes_coalesced,
 * credit_messages, listener_faces, bearer_connections; values as in @s.
 */
static void jexpect_stats(const struct rdmasock_stats *s, int pid, const char *program)
{
	const struct jleaf *l;
	char path[96];
	unsigned int k, t, r;
	int want = 0;

	jexpect_num("pid", (unsigned long long)pid);
	want++;
	l = jfind("program");
	assert_non_null(l);
	assert_true(l->is_str);
	assert_string_equal(l->str, program);
	want++;
	for (k = 0; k < RSK_ARRAY_SIZE(per_transport_keys); k++) {
		for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++) {
			snprintf(path, sizeof(path), "%s.%s", per_transport_keys[k],
				 rsk_transport_name((enum rdmasock_transport)t));
			jexpect_num(path, per_transport(s, k)[t]);
			want++;
		}
	}
	jexpect_num("credit_stalls", s->credit_stalls);
	want++;
	for (r = 0; r < RDMASOCK_FB_COUNT; r++) {
		snprintf(path, sizeof(path), "fallbacks.%s",
			 rsk_fallback_name((enum rdmasock_fallback)r));
		jexpect_num(path, s->fallbacks[r]);
		want++;
	}
	jexpect_num("writes_coalesced", s->writes_coalesced);
	want++;
	jexpect_num("credit_messages", s->credit_messages);
	want++;
	jexpect_num("listener_faces", s->listener_faces);
	want++;
	jexpect_num("bearer_connections", s->bearer_connections);
	want++;
	/* Nothing else: every leaf was one of the expected keys. */
	assert_int_equal(doc.n, want);
}

/*
 * Validate each line of @text with python3's json module. Returns 1 valid, 0 invalid,
 * -1 when python3 is not available (the C checker above still ran).
 */
static int python_valid(const char *text)
{
	FILE *p = popen("python3 -c 'import json,sys\n"
			"for l in sys.stdin.buffer.read().split(b\"\\n\"):\n"
			"  l and json.loads(l.decode(\"utf-8\"))' 2>/dev/null",
			"w");
	int st;

	if (p == NULL)
		return -1;
	fputs(text, p);
	st = pclose(p);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
		return -1;
	return WEXITSTATUS(st) == 0;
}

static void expect_python_valid(const char *text)
{
	int v = python_valid(text);

	if (v < 0) {
		print_message("python3 not available: JSON cross-check skipped\n");
		return;
	}
	if (v == 0)
		fail_msg("python3 json.loads rejected: %s", text);
}

/* ---- tests ---- */

static void fill(struct rdmasock_stats *s)
{
	unsigned int t, r;

	memset(s, 0, sizeof(*s));
	for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++) {
		s->connections[t] = 10 + t;
		s->bytes_sent[t] = UINT64_MAX - t; /* full 64 bits must survive */
		s->bytes_received[t] = (1ull << 40) + t;
		s->messages_sent[t] = 100 + t;
		s->messages_received[t] = 200 + t;
	}
	s->credit_stalls = 77;
	for (r = 0; r < RDMASOCK_FB_COUNT; r++)
		s->fallbacks[r] = 1000 + r;
	s->writes_coalesced = 4242;
	s->credit_messages = 4343;
	s->listener_faces = 4444;
	s->bearer_connections = 5555;
}

static void test_format_keys_and_values(void **state)
{
	struct rdmasock_stats s;
	char buf[4096];
	int n;

	(void)state;
	fill(&s);
	n = rsk_stats_format(&s, 4242, "redis-server", buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(n, strlen(buf));
	jparse(buf);
	jexpect_stats(&s, 4242, "redis-server");
	expect_python_valid(buf);

	/* All zero, NULL program: "" and zeros, same key set. */
	memset(&s, 0, sizeof(s));
	n = rsk_stats_format(&s, 1, NULL, buf, sizeof(buf));
	assert_int_equal(n, strlen(buf));
	jparse(buf);
	jexpect_stats(&s, 1, "");
}

static void test_checker_can_fail(void **state)
{
	int v;

	(void)state;
	/* The python cross-check must be able to say no, or it proves nothing. */
	v = python_valid("{\"pid\":1,\"program\":\"a\nb\"}\n");
	if (v >= 0)
		assert_int_equal(v, 0);
	v = python_valid("{\"pid\":1,}\n");
	if (v >= 0)
		assert_int_equal(v, 0);
	v = python_valid("{\"program\":\"a\x01" "b\"}\n"); /* raw control byte in a string */
	if (v >= 0)
		assert_int_equal(v, 0);
	v = python_valid("{\"program\":\"a\\u0001b\"}\n"); /* the same, escaped: fine */
	if (v >= 0)
		assert_int_equal(v, 1);
}

static void test_program_escaping(void **state)
{
	static const char *const names[] = {
		"quo\"te",
		"back\\slash",
		"\"\\\"\\\\",
		"ctl\x01\x02\x1f",
		"nl\nret\rtab\tbs\bff\f",
		"slash/and\xc3\xa9utf8",
		"del\x7f",
		"{\"pid\":0}",
	};
	struct rdmasock_stats s;
	char buf[4096], all[16384];
	size_t used = 0;
	unsigned int i;
	int n;

	(void)state;
	fill(&s);
	for (i = 0; i < RSK_ARRAY_SIZE(names); i++) {
		n = rsk_stats_format(&s, 7, names[i], buf, sizeof(buf));
		assert_true(n > 0);
		jparse(buf); /* also rejects raw control bytes */
		jexpect_stats(&s, 7, names[i]);
		used += (size_t)snprintf(all + used, sizeof(all) - used, "%s\n", buf);
		assert_true(used < sizeof(all));
	}
	expect_python_valid(all);
}

static void test_format_enospc(void **state)
{
	struct rdmasock_stats s;
	char ref[4096], buf[4096 + 64];
	size_t sizes[8], k;
	int n, i;

	(void)state;
	fill(&s);
	n = rsk_stats_format(&s, 123456, "a-long-program-name-for-the-test", ref, sizeof(ref));
	assert_true(n > 100);
	sizes[0] = 0;
	sizes[1] = 1;
	sizes[2] = 2;
	sizes[3] = 17;
	sizes[4] = (size_t)n / 2;
	sizes[5] = (size_t)n - 1;
	sizes[6] = (size_t)n; /* no room for the terminating NUL */
	for (k = 0; k < 7; k++) {
		memset(buf, 'Z', sizeof(buf));
		assert_int_equal(rsk_stats_format(&s, 123456, "a-long-program-name-for-the-test",
						  buf, sizes[k]),
				 -ENOSPC);
		for (i = (int)sizes[k]; i < (int)sizeof(buf); i++)
			if (buf[i] != 'Z')
				fail_msg("size %zu: byte %d overwritten", sizes[k], i);
	}
	/* Exactly enough. */
	memset(buf, 'Z', sizeof(buf));
	assert_int_equal(rsk_stats_format(&s, 123456, "a-long-program-name-for-the-test", buf,
					  (size_t)n + 1),
			 n);
	assert_string_equal(buf, ref);
	assert_int_equal(buf[n + 1], 'Z');
}

static char tmpdir[64];

static int setup_tmpdir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/rsk-test-stats-XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown_tmpdir(void **state)
{
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/stats.jsonl", tmpdir);
	unlink(path);
	return rmdir(tmpdir);
}

static void test_append_lines(void **state)
{
	struct rdmasock_stats s1, s2;
	char path[128], text[16384], *nl, *line2;
	FILE *f;
	size_t len;

	(void)state;
	snprintf(path, sizeof(path), "%s/stats.jsonl", tmpdir);
	fill(&s1);
	memset(&s2, 0, sizeof(s2));
	s2.credit_stalls = 5;
	s2.connections[RDMASOCK_TRANSPORT_SHM] = 9;

	assert_int_equal(rsk_stats_append(path, &s1), 0);
	assert_int_equal(rsk_stats_append(path, &s2), 0);
	f = fopen(path, "r");
	assert_non_null(f);
	len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = '\0';
	assert_true(len > 0);
	assert_int_equal(text[len - 1], '\n');

	nl = strchr(text, '\n');
	assert_non_null(nl);
	*nl = '\0';
	line2 = nl + 1;
	nl = strchr(line2, '\n');
	assert_non_null(nl);
	assert_ptr_equal(nl, text + len - 1); /* exactly two lines */
	*nl = '\0';

	jparse(text);
	jexpect_stats(&s1, (int)getpid(), program_invocation_short_name);
	jparse(line2);
	jexpect_stats(&s2, (int)getpid(), program_invocation_short_name);

	/* Appending keeps what is there: a third call makes a third line. */
	assert_int_equal(rsk_stats_append(path, &s2), 0);
	f = fopen(path, "r");
	assert_non_null(f);
	len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = '\0';
	{
		int lines = 0;
		size_t i;

		for (i = 0; i < len; i++)
			lines += text[i] == '\n';
		assert_int_equal(lines, 3);
	}
}

static void test_append_errors(void **state)
{
	struct rdmasock_stats s;
	char path[128];

	(void)state;
	memset(&s, 0, sizeof(s));
	snprintf(path, sizeof(path), "%s/no/such/dir/stats.jsonl", tmpdir);
	assert_int_equal(rsk_stats_append(path, &s), -ENOENT);
	assert_int_equal(rsk_stats_append(tmpdir, &s), -EISDIR);
}

static void test_reset(void **state)
{
	struct rdmasock_stats snap, zero;
	unsigned int t, r;

	(void)state;
	for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++) {
		rsk_stats_conn((enum rdmasock_transport)t);
		rsk_stats_sent((enum rdmasock_transport)t, 1000 + t);
		rsk_stats_received((enum rdmasock_transport)t, 2000 + t);
	}
	for (r = 0; r < RDMASOCK_FB_COUNT; r++)
		rsk_stats_fallback((enum rdmasock_fallback)r);
	rsk_counter_add(&rsk_stats.credit_stalls, 3);

	rsk_stats_snapshot(&snap);
	for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++) {
		assert_true(snap.connections[t] >= 1);
		assert_true(snap.bytes_sent[t] >= 1000 + t);
		assert_true(snap.bytes_received[t] >= 2000 + t);
		assert_true(snap.messages_sent[t] >= 1);
		assert_true(snap.messages_received[t] >= 1);
	}
	for (r = 0; r < RDMASOCK_FB_COUNT; r++)
		assert_true(snap.fallbacks[r] >= 1);
	assert_true(snap.credit_stalls >= 3);

	rsk_stats_reset();
	memset(&zero, 0, sizeof(zero));
	rsk_stats_snapshot(&snap);
	assert_memory_equal(&snap, &zero, sizeof(snap));
	assert_memory_equal(&rsk_stats, &zero, sizeof(rsk_stats));
}

static void test_counters(void **state)
{
	struct rdmasock_stats snap, want;
	unsigned int r, i;

	(void)state;
	for (r = 0; r < RDMASOCK_FB_COUNT; r++) {
		rsk_stats_reset();
		for (i = 0; i <= r; i++)
			rsk_stats_fallback((enum rdmasock_fallback)r);
		memset(&want, 0, sizeof(want));
		want.fallbacks[r] = r + 1;
		rsk_stats_snapshot(&snap);
		if (memcmp(&snap, &want, sizeof(snap)) != 0)
			fail_msg("rsk_stats_fallback(%s) touched the wrong counter",
				 rsk_fallback_name((enum rdmasock_fallback)r));
	}

	rsk_stats_reset();
	rsk_stats_conn(RDMASOCK_TRANSPORT_VERBS);
	rsk_stats_sent(RDMASOCK_TRANSPORT_SHM, 100);
	rsk_stats_sent(RDMASOCK_TRANSPORT_SHM, 23);
	rsk_stats_received(RDMASOCK_TRANSPORT_KERNEL, 7);
	memset(&want, 0, sizeof(want));
	want.connections[RDMASOCK_TRANSPORT_VERBS] = 1;
	want.bytes_sent[RDMASOCK_TRANSPORT_SHM] = 123;
	want.messages_sent[RDMASOCK_TRANSPORT_SHM] = 2;
	want.bytes_received[RDMASOCK_TRANSPORT_KERNEL] = 7;
	want.messages_received[RDMASOCK_TRANSPORT_KERNEL] = 1;
	rsk_stats_snapshot(&snap);
	assert_memory_equal(&snap, &want, sizeof(snap));
	rsk_stats_reset();
}

static void test_names(void **state)
{
	/* The JSON keys are public (include/rdmasock.h): exactly these, in enum order. */
	static const char *const fb[RDMASOCK_FB_COUNT] = {
		"policy",   "no_peer",   "not_local", "no_device",   "no_route",  "refused",
		"timeout",  "memlock",   "resources", "handshake",   "unsupported",
		"negative_cache", "fd_limit",  "tcp_first", "other_user", "setup_limit",
		"version",
	};
	unsigned int r;

	(void)state;
	assert_string_equal(rsk_transport_name(RDMASOCK_TRANSPORT_KERNEL), "kernel");
	assert_string_equal(rsk_transport_name(RDMASOCK_TRANSPORT_SHM), "shm");
	assert_string_equal(rsk_transport_name(RDMASOCK_TRANSPORT_VERBS), "verbs");
	assert_string_equal(rsk_transport_name(RDMASOCK_TRANSPORT_COUNT), "?");
	for (r = 0; r < RDMASOCK_FB_COUNT; r++)
		assert_string_equal(rsk_fallback_name((enum rdmasock_fallback)r), fb[r]);
	assert_string_equal(rsk_fallback_name(RDMASOCK_FB_COUNT), "?");
}

/* Released offsets, recorded: a field inserted (or an array grown) in the middle of struct
 * rdmasock_stats moves one of these and breaks every program built against an older header. */
static void test_layout_offsets(void **state)
{
	static const struct {
		const char *name;
		size_t at, want;
	} f[] = {
		{"connections", offsetof(struct rdmasock_stats, connections), 0},
		{"bytes_sent", offsetof(struct rdmasock_stats, bytes_sent), 24},
		{"bytes_received", offsetof(struct rdmasock_stats, bytes_received), 48},
		{"messages_sent", offsetof(struct rdmasock_stats, messages_sent), 72},
		{"messages_received", offsetof(struct rdmasock_stats, messages_received), 96},
		{"credit_stalls", offsetof(struct rdmasock_stats, credit_stalls), 120},
		{"fallbacks", offsetof(struct rdmasock_stats, fallbacks), 128},
		{"writes_coalesced", offsetof(struct rdmasock_stats, writes_coalesced), 384},
		{"credit_messages", offsetof(struct rdmasock_stats, credit_messages), 392},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].at != f[i].want)
			fail_msg("%s moved from offset %zu to %zu", f[i].name, f[i].want, f[i].at);
	/* the reasons are indices into fallbacks[]: one renumbered moves its counter too */
	assert_int_equal(RDMASOCK_FB_NEGATIVE_CACHE, 11);
	assert_int_equal(RDMASOCK_FB_VERSION, 16);
	assert_int_equal(RDMASOCK_STATS_MIN_SIZE,
			 offsetof(struct rdmasock_stats, fallbacks[RDMASOCK_FB_NEGATIVE_CACHE + 1]));
	assert_true(sizeof(struct rdmasock_stats) >= 400);
}

/* Every u64 of @s is its own index + 1, so a copied word says where it came from. */
static void stats_numbered(struct rdmasock_stats *s)
{
	uint64_t *w = (uint64_t *)s;
	size_t i;

	for (i = 0; i < sizeof(*s) / sizeof(uint64_t); i++)
		w[i] = i + 1;
}

static void test_copy_out_sizes(void **state)
{
	unsigned char buf[sizeof(struct rdmasock_stats) + 64];
	struct rdmasock_stats s;
	size_t old = RDMASOCK_STATS_MIN_SIZE, i;

	(void)state;
	stats_numbered(&s);
	/* the oldest header: exactly its prefix, not a byte after it */
	memset(buf, 0xa5, sizeof(buf));
	assert_int_equal(rsk_stats_copy_out(&s, buf, old), 0);
	assert_memory_equal(buf, &s, old);
	for (i = old; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xa5);
	/* today's size: all of it */
	memset(buf, 0xa5, sizeof(buf));
	assert_int_equal(rsk_stats_copy_out(&s, buf, sizeof(s)), 0);
	assert_memory_equal(buf, &s, sizeof(s));
	assert_int_equal(buf[sizeof(s)], 0xa5);
	/* a newer, larger header: ours, then zeros for fields this build does not keep */
	memset(buf, 0xa5, sizeof(buf));
	assert_int_equal(rsk_stats_copy_out(&s, buf, sizeof(s) + 16), 0);
	assert_memory_equal(buf, &s, sizeof(s));
	for (i = sizeof(s); i < sizeof(s) + 16; i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(buf[sizeof(s) + 16], 0xa5);
	/* too small, ragged, or nowhere to write */
	assert_int_equal(rsk_stats_copy_out(&s, buf, old - 8), -EINVAL);
	assert_int_equal(rsk_stats_copy_out(&s, buf, 0), -EINVAL);
	assert_int_equal(rsk_stats_copy_out(&s, buf, sizeof(s) - 4), -EINVAL);
	assert_int_equal(rsk_stats_copy_out(&s, NULL, sizeof(s)), -EINVAL);
}

/* Headers before the fixed capacity: 12 to 30 reasons, then writes_coalesced (the 17-reason
 * one, 272 bytes, is the header just before it). */
static void test_copy_out_legacy(void **state)
{
	unsigned char buf[sizeof(struct rdmasock_stats)];
	struct rdmasock_stats s;
	size_t size, n;
	uint64_t w;

	(void)state;
	stats_numbered(&s);
	for (n = 12; n < RDMASOCK_FB_CAPACITY - 1; n++) {
		size = offsetof(struct rdmasock_stats, fallbacks[n]) + sizeof(uint64_t);
		memset(buf, 0xa5, sizeof(buf));
		assert_int_equal(rsk_stats_copy_out(&s, buf, size), 0);
		assert_memory_equal(buf, &s, size - sizeof(uint64_t));
		memcpy(&w, buf + size - sizeof(uint64_t), sizeof(w));
		assert_int_equal(w, s.writes_coalesced);
		assert_int_equal(buf[size], 0xa5);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_layout_offsets),
		cmocka_unit_test(test_copy_out_sizes),
		cmocka_unit_test(test_copy_out_legacy),
		cmocka_unit_test(test_format_keys_and_values),
		cmocka_unit_test(test_checker_can_fail),
		cmocka_unit_test(test_program_escaping),
		cmocka_unit_test(test_format_enospc),
		cmocka_unit_test_setup_teardown(test_append_lines, setup_tmpdir, teardown_tmpdir),
		cmocka_unit_test_setup_teardown(test_append_errors, setup_tmpdir, teardown_tmpdir),
		cmocka_unit_test(test_reset),
		cmocka_unit_test(test_counters),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
