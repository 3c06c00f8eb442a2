/*
 * Unit tests for core/base/log: lines go to stderr or RDMASOCK_LOG_FILE (appended, the fd
 * hidden from the application and close-on-exec), never to stdout; one line per call, with
 * the pid and the level's tag, cut at the buffer's size but always ending in a newline;
 * levels above the configured one cost nothing and write nothing; errno is left as it was;
 * lines from many threads never interleave; a log file that cannot be opened keeps stderr.
 * The log target is per process, so every case runs in a forked child of its own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "unit.h"

/* In the child (no cmocka there): every check returns its own exit code. */
#define CHECK(cond, code)                                                                          \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return (code);                                                             \
	} while (0)

static char path[64];

static int setup(void **state)
{
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/rsk-test-log-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

/* The whole of @file into @buf (NUL-terminated); its length or -1. */
static ssize_t slurp(const char *file, char *buf, size_t size)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;

	if (fd < 0)
		return -1;
	while ((size_t)total < size - 1 && (n = read(fd, buf + total, size - 1 - (size_t)total)) > 0)
		total += n;
	close(fd);
	buf[total] = '\0';
	return total;
}

static void config_for(struct rsk_config *c, const char *file, enum rsk_log_level level)
{
	rsk_config_defaults(c);
	c->log_level = level;
	snprintf(c->log_file, sizeof(c->log_file), "%s", file);
}

/* The fd that names @file, or -1. */
static int fd_of(const char *file)
{
	char link[300], target[256];
	struct dirent *de;
	DIR *d = opendir("/proc/self/fd");
	ssize_t n;
	int fd = -1;

	while (d != NULL && fd < 0 && (de = readdir(d)) != NULL) {
		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, file) == 0)
			fd = atoi(de->d_name);
	}
	if (d != NULL)
		closedir(d);
	return fd;
}

static int child_file(void *arg)
{
	struct rsk_config c;
	char buf[4096], want[256];
	int low, fd;

	(void)arg;
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	CHECK(fd >= 0 && write(fd, "old\n", 4) == 4, 2);
	close(fd);
	config_for(&c, path, RSK_LOG_INFO);
	low = unit_lowest_free_fd();
	CHECK(rsk_log_open(&c) == 0, 3);
	CHECK(rsk_log_level_now == RSK_LOG_INFO, 4);
	/* the file's fd is the library's: not on the application's next number */
	fd = fd_of(path);
	CHECK(fd >= 0 && fd != low, 5);
	CHECK(rsk_fd_is_internal(fd), 6);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC, 7);
	CHECK(unit_lowest_free_fd() == low, 8);
	errno = EDOM;
	rsk_warn("first %d", 1);
	CHECK(errno == EDOM, 9); /* a log call in an error path keeps the caller's errno */
	rsk_info("second %s", "two");
	rsk_dbg("not at this level");
	rsk_err("third");
	CHECK(slurp(path, buf, sizeof(buf)) > 0, 10);
	snprintf(want, sizeof(want),
		 "old\nrdmasock[%d]: warn: first 1\nrdmasock[%d]: info: second two\n"
		 "rdmasock[%d]: error: third\n",
		 (int)getpid(), (int)getpid(), (int)getpid());
	CHECK(strcmp(buf, want) == 0, 11); /* appended, one line each, nothing else */
	return 0;
}

static void test_file_target(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_file, NULL, 5000), 0);
}

/* Longer than the line buffer: cut, and still one line with its newline. */
static int child_long(void *arg)
{
	static char msg[5000], buf[8192];
	struct rsk_config c;
	ssize_t n;

	(void)arg;
	memset(msg, 'x', sizeof(msg) - 1);
	config_for(&c, path, RSK_LOG_WARN);
	CHECK(rsk_log_open(&c) == 0, 2);
	rsk_warn("%s", msg);
	rsk_warn("after");
	n = slurp(path, buf, sizeof(buf));
	CHECK(n > 1000 && n < 1100, 3);
	CHECK(strchr(buf, '\n') == buf + 1022, 4); /* 1023 bytes with the newline */
	CHECK(strstr(buf + 1023, "warn: after\n") != NULL, 5);
	return 0;
}

static void test_long_line(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_long, NULL, 5000), 0);
}

/* No file: stderr, never stdout. */
static int child_stderr(void *arg)
{
	char buf[512], want[128];
	struct rsk_config c;
	int out[2], err[2];
	ssize_t n;

	(void)arg;
	CHECK(pipe2(out, O_NONBLOCK) == 0 && pipe2(err, O_NONBLOCK) == 0, 2);
	CHECK(dup2(out[1], STDOUT_FILENO) == STDOUT_FILENO, 3);
	CHECK(dup2(err[1], STDERR_FILENO) == STDERR_FILENO, 4);
	config_for(&c, "", RSK_LOG_DEBUG);
	CHECK(rsk_log_open(&c) == 0, 5);
	rsk_dbg("to stderr %d", 7);
	n = read(err[0], buf, sizeof(buf) - 1);
	CHECK(n > 0, 6);
	buf[n] = '\0';
	snprintf(want, sizeof(want), "rdmasock[%d]: debug: to stderr 7\n", (int)getpid());
	CHECK(strcmp(buf, want) == 0, 7);
	CHECK(read(out[0], buf, sizeof(buf)) < 0 && errno == EAGAIN, 8); /* nothing on stdout */
	return 0;
}

static void test_stderr_target(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_stderr, NULL, 5000), 0);
}

/* A file that cannot be opened: -errno, and the lines still reach stderr. */
static int child_bad_file(void *arg)
{
	struct rsk_config c;
	char buf[256];
	int err[2];

	(void)arg;
	CHECK(pipe2(err, O_NONBLOCK) == 0, 2);
	CHECK(dup2(err[1], STDERR_FILENO) == STDERR_FILENO, 3);
	config_for(&c, "/nonexistent-dir-rsk/log", RSK_LOG_WARN);
	CHECK(rsk_log_open(&c) == -ENOENT, 4);
	CHECK(rsk_log_level_now == RSK_LOG_WARN, 5);
	rsk_warn("still here");
	CHECK(read(err[0], buf, sizeof(buf)) > 0, 6);
	CHECK(strstr(buf, "warn: still here\n") != NULL, 7);
	return 0;
}

static void test_bad_file_keeps_stderr(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_bad_file, NULL, 5000), 0);
}

/* Only the configured level and below; ERROR alone is always there. */
static int child_levels(void *arg)
{
	struct rsk_config c;
	char buf[1024];

	(void)arg;
	config_for(&c, path, RSK_LOG_ERROR);
	CHECK(rsk_log_open(&c) == 0, 2);
	rsk_dbg("d");
	rsk_info("i");
	rsk_warn("w");
	rsk_err("e");
	CHECK(slurp(path, buf, sizeof(buf)) > 0, 3);
	CHECK(strstr(buf, ": error: e\n") != NULL, 4);
	CHECK(strstr(buf, ": warn:") == NULL && strstr(buf, ": info:") == NULL &&
		      strstr(buf, ": debug:") == NULL,
	      5);
	return 0;
}

static void test_levels(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_levels, NULL, 5000), 0);
}

/* ---- many threads ---- */

#define THREADS 4
#define LINES 500

static void *log_lines(void *arg)
{
	int t = (int)(intptr_t)arg, i;

	for (i = 0; i < LINES; i++)
		rsk_warn("thread %d line %d %s", t, i, "................................................");
	return NULL;
}

static int child_threads(void *arg)
{
	static char buf[THREADS * LINES * 128];
	pthread_t th[THREADS];
	struct rsk_config c;
	char *line, *save = NULL;
	int i, n = 0, t, k, seen[THREADS] = {0};

	(void)arg;
	config_for(&c, path, RSK_LOG_WARN);
	CHECK(rsk_log_open(&c) == 0, 2);
	for (i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, log_lines, (void *)(intptr_t)i) == 0, 3);
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK(slurp(path, buf, sizeof(buf)) > 0, 4);
	/* every line whole, each thread's in its own order */
	for (line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char tail[64];

		CHECK(sscanf(strstr(line, "warn: ") + 6, "thread %d line %d %63s", &t, &k, tail) == 3,
		      5);
		CHECK(t >= 0 && t < THREADS && k == seen[t], 6);
		CHECK(strlen(tail) == 48, 7);
		seen[t]++;
		n++;
	}
	CHECK(n == THREADS * LINES, 8);
	return 0;
}

static void test_threads_do_not_interleave(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_threads, NULL, 10000), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_file_target),
		T(test_long_line),
		T(test_stderr_target),
		T(test_bad_file_keeps_stderr),
		T(test_levels),
		T(test_threads_do_not_interleave),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
