/*
 * Unit tests of the shared claim-judge-remove sweep (core/base/sweep.c), in a private
 * directory: only prefixed names are looked at, the candidate filter and the judge decide,
 * a live file is put back under its name, a file made under the name while the old one was
 * claimed stays (the claimed one goes), a dead sweeper's claim is taken over and a live
 * sweeper's is not, links and directories are never judged, and a sweep is bounded in files
 * removed and stops when asked.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include "base/sweep.h"
#include "unit_files.h"

#define PFX "rsk-sw."

static char dir[] = "/tmp/rsk-sweep-XXXXXX";

/* A file @name in the test directory holding @body (its judge reads it). */
static void put(const char *name, const char *body)
{
	unit_file_put(dir, name, body, strlen(body));
}

static int there(const char *name)
{
	return unit_file_there(dir, name);
}

/* Judge: a file whose body starts with "dead" is stale. */
static int judge_body(int fd, const char *name, void *arg)
{
	char b[8] = {0};

	(void)name;
	(void)arg;
	return pread(fd, b, 4, 0) == 4 && memcmp(b, "dead", 4) == 0;
}

static int skip_keep(const char *name, void *arg)
{
	(void)arg;
	return strstr(name, "keep") == NULL;
}

static const struct rsk_sweep by_body = {
	.prefix = PFX, .scan = 1000, .remove = 1000, .stale = judge_body};

static int setup(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/rsk-sweep-XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Dead files go, live ones are put back under their own name, other names are untouched. */
static void test_judged(void **state)
{
	(void)state;
	put(PFX "1", "dead");
	put(PFX "2", "live");
	put(PFX "3", "dead");
	put("other.1", "dead");
	assert_int_equal(rsk_sweep_dir(dir, &by_body, NULL), 2);
	assert_false(there(PFX "1"));
	assert_true(there(PFX "2"));
	assert_false(there(PFX "3"));
	assert_true(there("other.1"));
	assert_int_equal(rsk_sweep_dir(dir, &by_body, NULL), 0);
}

/* The candidate filter runs first: a name it refuses is never claimed, whatever its body. */
static void test_candidate(void **state)
{
	struct rsk_sweep w = by_body;

	(void)state;
	w.candidate = skip_keep;
	put(PFX "keep", "dead");
	put(PFX "x", "dead");
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 1);
	assert_true(there(PFX "keep"));
	assert_false(there(PFX "x"));
}

/* judge_first: a live file is never renamed (a reader opening it by name would miss it for
 * the claim's moment); a stale one is still claimed and removed. Without it both are
 * claimed, the live one put back: a rename each way. */
static void test_judge_first(void **state)
{
	struct rsk_sweep w = by_body;
	int ifd;

	(void)state;
	ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(ifd >= 0);
	assert_true(inotify_add_watch(ifd, dir, IN_MOVED_FROM) >= 0);
	put(PFX "live", "live");
	put(PFX "dead", "dead");
	w.judge_first = 1;
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 1);
	assert_true(there(PFX "live"));
	assert_false(there(PFX "dead"));
	assert_int_equal(unit_files_renamed(ifd, NULL), 1); /* the dead one's claim only */
	w.judge_first = 0;
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 0);
	assert_true(there(PFX "live"));
	assert_int_equal(unit_files_renamed(ifd, NULL), 2); /* claimed, and put back */
	close(ifd);
}

/* While the old file is claimed a new owner creates the name: the judge says "live" (it
 * read the old file, which is some other image's), the put-back finds the new file there
 * and the claimed one goes; the new file stays. */
static int judge_and_replace(int fd, const char *name, void *arg)
{
	(void)fd;
	(void)arg;
	put(name, "new");
	return 0;
}

static void test_replaced_while_claimed(void **state)
{
	struct rsk_sweep w = by_body;
	char p[PATH_MAX], b[8] = {0};
	int fd;

	(void)state;
	w.stale = judge_and_replace;
	put(PFX "r", "old");
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 1);
	snprintf(p, sizeof(p), "%s/" PFX "r", dir);
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, b, 3), 3);
	close(fd);
	assert_string_equal(b, "new");
	assert_int_equal(rsk_sweep_dir(dir, &by_body, NULL), 0); /* no claim left behind */
}

/* A dead pid (a child we reaped), for claims of sweepers that died. */
static pid_t dead_pid(void)
{
	pid_t p = fork();

	if (p == 0)
		_exit(0);
	assert_true(p > 0);
	assert_int_equal(waitpid(p, NULL, 0), p);
	return p;
}

/* A claim whose sweeper died is taken over: judged under its original name and then removed
 * or put back there; a live sweeper's claim and a garbage suffix are left alone. */
static void test_dead_claims(void **state)
{
	char n1[64], n2[64], n3[64];
	pid_t q = dead_pid();

	(void)state;
	snprintf(n1, sizeof(n1), PFX "a" RSK_SWEEP_CLAIM "%d", (int)q);
	snprintf(n2, sizeof(n2), PFX "b" RSK_SWEEP_CLAIM "%d", (int)q);
	snprintf(n3, sizeof(n3), PFX "c" RSK_SWEEP_CLAIM "%d", (int)getppid());
	put(n1, "dead");
	put(n2, "live");
	put(n3, "dead");
	put(PFX "d" RSK_SWEEP_CLAIM "x1", "dead");
	assert_int_equal(rsk_sweep_dir(dir, &by_body, NULL), 1);
	assert_false(there(n1));
	assert_false(there(n2));
	assert_true(there(PFX "b")); /* put back under its own name */
	assert_true(there(n3));
	assert_true(there(PFX "d" RSK_SWEEP_CLAIM "x1"));
}

/* Symbolic links and directories are not judged (the judge would follow or fail). */
static void test_not_regular(void **state)
{
	char p[PATH_MAX], t[PATH_MAX];

	(void)state;
	put("target", "dead");
	snprintf(t, sizeof(t), "%s/target", dir);
	snprintf(p, sizeof(p), "%s/" PFX "link", dir);
	assert_int_equal(symlink(t, p), 0);
	snprintf(p, sizeof(p), "%s/" PFX "dir", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(rsk_sweep_dir(dir, &by_body, NULL), 0);
	assert_true(there(PFX "link"));
	assert_true(there(PFX "dir"));
	assert_true(there("target"));
}

/* At most `remove` files per sweep; later sweeps go on. A raised stop word ends it at once. */
static void test_bounded(void **state)
{
	struct rsk_sweep w = by_body;
	char n[32];
	int i, stop = 1;

	(void)state;
	for (i = 0; i < 10; i++) {
		snprintf(n, sizeof(n), PFX "%d", i);
		put(n, "dead");
	}
	w.stop = &stop;
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 0);
	w.stop = NULL;
	w.remove = 4;
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 4);
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 4);
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 2);
	assert_int_equal(rsk_sweep_dir(dir, &w, NULL), 0);
}

/* The pid parser: decimal, no sign, no leading zero, fits an int. */
static void test_parse_pid(void **state)
{
	const char *end;

	(void)state;
	assert_int_equal(rsk_sweep_parse_pid("123.x", &end), 123);
	assert_string_equal(end, ".x");
	assert_int_equal(rsk_sweep_parse_pid("0123", &end), 0);
	assert_int_equal(rsk_sweep_parse_pid("-5", &end), 0);
	assert_int_equal(rsk_sweep_parse_pid("99999999999", &end), 0);
	assert_true(rsk_sweep_pid_gone(dead_pid()));
	assert_false(rsk_sweep_pid_gone(getpid()));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_judged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_candidate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_judge_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replaced_while_claimed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_claims, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_regular, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parse_pid, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
