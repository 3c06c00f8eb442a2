/*
 * Unit tests for core/base/proc (process identity): the cached pid is ours and stays cached
 * (a forked child sees the parent's until rsk_proc_forked_child() refreshes it, which is why
 * the fork hooks must call it before anything else), and the fork counter counts exactly,
 * also when threads fork at once; the fd walk reports every open fd, never its own
 * directory's, and stops when asked.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/proc.h"
#include "unit.h"

static void test_pid_is_ours(void **state)
{
	(void)state;
	assert_int_equal(rsk_proc_pid(), getpid());
	assert_int_equal(rsk_proc_pid(), getpid());
}

/* In the child: exit 0 when the cache behaves as proc.h says. */
static int child_pid_check(void *arg)
{
	pid_t parent = *(pid_t *)arg;

	if (getpid() == parent)
		return 1;
	/* No hook ran yet: the cache still holds the parent's pid (no syscall was made). */
	if (rsk_proc_pid() != parent)
		return 2;
	rsk_proc_forked_child();
	if (rsk_proc_pid() != getpid())
		return 3;
	return 0;
}

static void test_forked_child_refreshes_pid(void **state)
{
	pid_t parent = getpid();

	(void)state;
	assert_int_equal(rsk_proc_pid(), parent); /* cached before the fork */
	assert_int_equal(unit_in_child(child_pid_check, &parent, 5000), 0);
	assert_int_equal(rsk_proc_pid(), parent); /* the child's refresh is the child's */
}

static int child_nothing(void *arg)
{
	(void)arg;
	return 0;
}

static void test_forks_counter(void **state)
{
	unsigned int n = rsk_proc_forks();

	(void)state;
	rsk_proc_forking();
	assert_int_equal(rsk_proc_forks(), n + 1);
	rsk_proc_forking();
	rsk_proc_forking();
	assert_int_equal(rsk_proc_forks(), n + 3);
	/* Only the hook counts (the preload fork wrapper calls it): a bare fork() does not. */
	assert_int_equal(unit_in_child(child_nothing, NULL, 5000), 0);
	assert_int_equal(rsk_proc_forks(), n + 3);
}

#define THREADS 4
#define PER_THREAD 3000000

static pthread_barrier_t start_line;

static void *fork_a_lot(void *arg)
{
	int i;

	(void)arg;
	pthread_barrier_wait(&start_line); /* all at once, or there is no race to lose */
	for (i = 0; i < PER_THREAD; i++)
		rsk_proc_forking();
	return NULL;
}

static void test_forks_counter_concurrent(void **state)
{
	unsigned int n = rsk_proc_forks();
	pthread_t t[THREADS];
	int i;

	(void)state;
	assert_int_equal(pthread_barrier_init(&start_line, NULL, THREADS), 0);
	for (i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, fork_a_lot, NULL), 0);
	for (i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	pthread_barrier_destroy(&start_line);
	assert_int_equal(rsk_proc_forks(), n + THREADS * PER_THREAD);
}

/* Open fds among the first 4096, counted without /proc. */
static int open_fds(void)
{
	int fd, n = 0;

	for (fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

struct seen {
	int want[2], found[2], bad, calls, stop_after;
};

static int note_fd(int fd, void *arg)
{
	struct seen *w = arg;
	int i;

	w->calls++;
	for (i = 0; i < 2; i++)
		if (fd == w->want[i])
			w->found[i]++;
	if (fcntl(fd, F_GETFD) < 0)
		w->bad++;
	return w->stop_after != 0 && w->calls >= w->stop_after;
}

/* Every open fd once, each really open; and a nonzero return ends the walk. */
static void test_each_fd(void **state)
{
	struct seen w = {0};
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	w.want[0] = p[0];
	w.want[1] = p[1];
	assert_int_equal(rsk_proc_each_fd(note_fd, &w), 0);
	assert_int_equal(w.found[0], 1);
	assert_int_equal(w.found[1], 1);
	assert_int_equal(w.bad, 0);
	/* as many as are open outside the walk: its own directory fd is not reported */
	assert_int_equal(w.calls, open_fds());
	memset(&w, 0, sizeof(w));
	w.stop_after = 2;
	assert_int_equal(rsk_proc_each_fd(note_fd, &w), 0);
	assert_int_equal(w.calls, 2);
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pid_is_ours),
		cmocka_unit_test(test_forked_child_refreshes_pid),
		cmocka_unit_test(test_forks_counter),
		cmocka_unit_test(test_forks_counter_concurrent),
		cmocka_unit_test(test_each_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
