/*
 * Unit tests for core/base/proc (process identity): the cached pid is ours and stays cached
 * (a forked child sees the parent's until rsk_proc_forked_child() refreshes it, which is why
 * the fork hooks must call it before anything else), and the fork counter counts exactly,
 * also when threads fork at once; the fd walk reports every open fd, never its own
 * directory's, and stops when asked; a process started by rsk_proc_spawn_orphan is never
 * the program's to see: no SIGCHLD (handler, SA_NOCLDWAIT, ignored, default), no child left
 * for waitpid(-1, __WALL), none taken by a thread blocked in waitpid(-1), and it starts
 * with every signal blocked and another parent.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
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

/* ---- rsk_proc_spawn_orphan: a grandchild the program never sees ---- */

static volatile sig_atomic_t chld_seen;

static void on_chld(int sig)
{
	(void)sig;
	chld_seen++;
}

/* In the grandchild: report its parent, whether SIGTERM is blocked (all are, at first), and
 * its pid, through the pipe in @arg; then end with status 7 (nobody of ours collects it). */
static int orphan_report(void *arg)
{
	int *p = arg;
	sigset_t cur;
	long msg[3];

	close(p[0]);
	sigprocmask(SIG_SETMASK, NULL, &cur);
	msg[0] = (long)getppid();
	msg[1] = sigismember(&cur, SIGTERM);
	msg[2] = (long)getpid();
	if (write(p[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		return 1;
	return 7;
}

/* Start one with SIGCHLD handled as @how says; check what proc.h promises. */
static void spawn_with(void (*how)(int), int flags)
{
	struct sigaction sa, old;
	long msg[3];
	int p[2], st;
	pid_t w;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = how;
	sa.sa_flags = flags;
	assert_int_equal(sigaction(SIGCHLD, &sa, &old), 0);
	assert_int_equal(pipe(p), 0);
	chld_seen = 0;
	errno = 1234;
	assert_int_equal(rsk_proc_spawn_orphan(orphan_report, p), 0);
	assert_int_equal(errno, 1234); /* left as it was */
	/* The middle process ended before the call returned: a SIGCHLD for it would have been
	 * delivered by now (on our way out of the wait). */
	assert_int_equal(chld_seen, 0);
	w = waitpid(-1, &st, WNOHANG | __WALL); /* no child left, not even a clone child */
	assert_int_equal(w, -1);
	assert_int_equal(errno, ECHILD);
	close(p[1]);
	assert_int_equal(read(p[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
	close(p[0]);
	assert_true(msg[0] != (long)getpid()); /* its parent: the middle, then init's side */
	assert_int_equal(msg[1], 1);
	assert_true(msg[2] > 0 && msg[2] != (long)getpid());
	assert_int_equal(chld_seen, 0); /* nor when the grandchild ended */
	assert_int_equal(sigaction(SIGCHLD, &old, NULL), 0);
}

/* A program with a SIGCHLD handler gets no signal and has nothing to reap; one that ignores
 * SIGCHLD, or asks SA_NOCLDWAIT, has no zombie of ours left either (the kernel reaps only
 * SIGCHLD children for it: the library must reap its own). */
static void test_spawn_orphan_invisible(void **state)
{
	(void)state;
	spawn_with(on_chld, SA_RESTART);
	spawn_with(on_chld, SA_RESTART | SA_NOCLDWAIT);
	spawn_with(SIG_IGN, 0);
	spawn_with(SIG_DFL, 0);
}

/* A thread in a blocking waitpid(-1) for the program's own child meanwhile gets that child
 * and nothing else (with fork+fork it could take the middle process). */
struct waiter {
	pid_t own, got_other;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	pid_t p;

	while ((p = waitpid(-1, NULL, 0)) != w->own)
		if (p > 0)
			w->got_other = p;
		else if (errno != EINTR)
			break;
	return NULL;
}

static void test_spawn_orphan_waitpid_thread(void **state)
{
	struct waiter w = {0, 0};
	pthread_t t;
	int gate[2], p[2], i;
	long msg[3];
	char b;

	(void)state;
	assert_int_equal(pipe(gate), 0);
	w.own = fork();
	assert_true(w.own >= 0);
	if (w.own == 0) {
		close(gate[1]);
		_exit(read(gate[0], &b, 1) < 0);
	}
	close(gate[0]);
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	for (i = 0; i < 20; i++) {
		assert_int_equal(pipe(p), 0);
		assert_int_equal(rsk_proc_spawn_orphan(orphan_report, p), 0);
		close(p[1]);
		assert_int_equal(read(p[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
		close(p[0]);
	}
	close(gate[1]);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.got_other, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pid_is_ours),
		cmocka_unit_test(test_forked_child_refreshes_pid),
		cmocka_unit_test(test_forks_counter),
		cmocka_unit_test(test_forks_counter_concurrent),
		cmocka_unit_test(test_each_fd),
		cmocka_unit_test(test_spawn_orphan_invisible),
		cmocka_unit_test(test_spawn_orphan_waitpid_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
