/*
 * Background threads and the fork gate (thread.h). The caller's signal mask is swapped for a
 * full one only around pthread_create, which is how the new thread inherits "everything
 * blocked"; the caller's own mask is back before this returns. The gate is one word: a
 * "closed" bit that fork sets, and the number of threads working; work waits while the bit
 * is set, so a loop that works again and again cannot keep a fork waiting. Not a pthread
 * rwlock: the forking thread's child must reopen it, and neither glibc (which knows a writer
 * by a thread id the child no longer has) nor TSan (a lock held at fork stays held for it)
 * lets a child take over a lock its parent's thread held.
 */
#include <linux/futex.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "sys.h"

#include "thread.h"

#define RSK_THREAD_STACK (64 * 1024)

#define RSK_GATE_CLOSED 0x80000000u /* a fork is under way; the rest counts working threads */

static uint32_t rsk_thread_gate;
static __thread int rsk_thread_gate_closed; /* this thread, forking, closed the gate */
static __thread int rsk_thread_working;     /* this thread's work_begin depth */

/* Sleep until the gate word moves from @seen or @ms pass (-1: no bound). */
static void rsk_gate_wait(uint32_t seen, int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	(void)rsk_sys_futex(&rsk_thread_gate, FUTEX_WAIT_PRIVATE, seen, ms < 0 ? NULL : &ts);
}

static void rsk_gate_wake(void)
{
	(void)rsk_sys_futex(&rsk_thread_gate, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
}

void rsk_thread_work_begin(void)
{
	uint32_t v = __atomic_load_n(&rsk_thread_gate, __ATOMIC_ACQUIRE);

	for (;;) {
		if (v & RSK_GATE_CLOSED) {
			rsk_gate_wait(v, -1);
			v = __atomic_load_n(&rsk_thread_gate, __ATOMIC_ACQUIRE);
		} else if (__atomic_compare_exchange_n(&rsk_thread_gate, &v, v + 1, 0,
						       __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
			rsk_thread_working++;
			return;
		}
	}
}

/* The count's side of work_end, also for a thread that counted before it ran (spawn). */
static void rsk_gate_leave(void)
{
	uint32_t v = __atomic_sub_fetch(&rsk_thread_gate, 1, __ATOMIC_RELEASE);

	if (v == RSK_GATE_CLOSED) /* the last one out, and a fork waits */
		rsk_gate_wake();
}

void rsk_thread_work_end(void)
{
	rsk_thread_working--;
	rsk_gate_leave();
}

/* What a new thread runs first: it counted as working from before it existed. */
struct rsk_thread_start {
	void *(*fn)(void *arg);
	void *arg;
};

static void *rsk_thread_trampoline(void *p)
{
	struct rsk_thread_start st = *(struct rsk_thread_start *)p;

	free(p);
	rsk_gate_leave(); /* the runtime's start-up is behind us, and the free above */
	return st.fn(st.arg);
}

/*
 * A thread counts as working from before pthread_create to its trampoline: the C runtime
 * (and a sanitizer's, which allocates there) sets a new thread up before it runs a line of
 * ours, and a fork in that window copied ASan's allocator locked (a forked child hung in its
 * leak check at exit). A thread already working (ours, spawning) adds to the count without
 * waiting: the fork it would wait for is itself waiting for that thread.
 */
int rsk_thread_spawn(void *(*fn)(void *arg), void *arg, pthread_t *out)
{
	struct rsk_thread_start *st = malloc(sizeof(*st));
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t t;
	int rc;

	if (st == NULL)
		return -ENOMEM;
	st->fn = fn;
	st->arg = arg;
	if (rsk_thread_working > 0) {
		__atomic_add_fetch(&rsk_thread_gate, 1, __ATOMIC_ACQUIRE);
	} else {
		rsk_thread_work_begin();
		rsk_thread_working--; /* the count is the new thread's, not this one's */
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, RSK_THREAD_STACK);
	rc = pthread_create(out != NULL ? out : &t, &a, rsk_thread_trampoline, st);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		free(st);
		rsk_gate_leave();
	}
	return -rc;
}

/* Close the gate (another fork may hold it: wait for that one first). 0 when past @end. */
static int rsk_gate_close(int64_t end)
{
	uint32_t v = __atomic_load_n(&rsk_thread_gate, __ATOMIC_ACQUIRE);
	int64_t left;

	for (;;) {
		if (!(v & RSK_GATE_CLOSED)) {
			if (__atomic_compare_exchange_n(&rsk_thread_gate, &v, v | RSK_GATE_CLOSED, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return 1;
			continue;
		}
		if ((left = end - rsk_now_ms()) <= 0)
			return 0;
		rsk_gate_wait(v, left);
		v = __atomic_load_n(&rsk_thread_gate, __ATOMIC_ACQUIRE);
	}
}

void rsk_thread_fork_prepare(void)
{
	int64_t end = rsk_now_ms() + RSK_THREAD_FORK_WAIT_MS, left;
	uint32_t v;

	rsk_thread_gate_closed = rsk_gate_close(end);
	if (!rsk_thread_gate_closed)
		return;
	while ((v = __atomic_load_n(&rsk_thread_gate, __ATOMIC_ACQUIRE)) != RSK_GATE_CLOSED) {
		if ((left = end - rsk_now_ms()) <= 0) {
			rsk_thread_fork_parent(); /* fork without the gate, as before it existed */
			return;
		}
		rsk_gate_wait(v, left);
	}
}

void rsk_thread_fork_parent(void)
{
	if (!rsk_thread_gate_closed)
		return;
	rsk_thread_gate_closed = 0;
	__atomic_and_fetch(&rsk_thread_gate, ~RSK_GATE_CLOSED, __ATOMIC_RELEASE);
	rsk_gate_wake();
}

/* Only this thread exists here: no thread of the child works, and none waits. */
void rsk_thread_fork_child(void)
{
	rsk_thread_gate_closed = 0;
	__atomic_store_n(&rsk_thread_gate, 0, __ATOMIC_RELEASE);
}
