/*
 * Helpers shared by the unit tests of core/base: bounded waits, fork-and-wait, fd numbering.
 * Every wait here has a deadline, so a broken library fails a test instead of hanging ctest.
 * Header-only (static functions) so a test that uses none of them pays nothing.
 */
#ifndef RSK_TEST_UNIT_H
#define RSK_TEST_UNIT_H

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

static inline void unit_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0)
		;
}

/* Wait (polling every millisecond) until @cond is true or @ms passed; the value of @cond. */
#define UNIT_WAIT(cond, ms)                                                                        \
	({                                                                                         \
		int64_t unit_end_ = rsk_now_ms() + (ms);                                           \
		while (!(cond) && rsk_now_ms() < unit_end_)                                        \
			unit_sleep_ms(1);                                                          \
		(cond);                                                                            \
	})

/* Atomic int load/increment for counters that a loop thread writes and the test reads. */
#define UNIT_LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define UNIT_INC(p) ((void)__atomic_add_fetch((p), 1, __ATOMIC_SEQ_CST))

/* Wait up to @timeout_ms for child @pid: its exit status (0-255), or -1 if it had to be
 * killed or died of a signal. */
static inline int unit_reap(pid_t pid, int timeout_ms)
{
	int64_t end;
	int status = 0;
	pid_t r = 0;

	end = rsk_now_ms() + timeout_ms;
	while ((r = waitpid(pid, &status, WNOHANG)) == 0 && rsk_now_ms() < end)
		unit_sleep_ms(1);
	if (r == 0) {
		kill(pid, SIGKILL);
		(void)waitpid(pid, &status, 0);
		return -1;
	}
	return r == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * Run @fn(@arg) in a forked child and return its exit status (0-255); -1 if the child had to
 * be killed after @timeout_ms or died of a signal. The child leaves with _exit(): it must not
 * run cmocka's or the parent's exit-time work.
 */
static inline int unit_in_child(int (*fn)(void *arg), void *arg, int timeout_ms)
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(fn(arg));
	return unit_reap(pid, timeout_ms);
}

/* The number the application's next open() would get (the lowest free fd). */
static inline int unit_lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (fd >= 0)
		close(fd);
	return fd;
}

#endif
