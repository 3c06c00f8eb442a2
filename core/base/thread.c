/*
 * Background threads and the fork gate (thread.h). The caller's signal mask is swapped for a
 * full one only around pthread_create, which is how the new thread inherits "everything
 * blocked"; the caller's own mask is back before this returns. The gate is a reader-writer
 * lock, shared by working threads and taken alone by fork; it prefers the writer, so a loop
 * that works again and again cannot keep a fork waiting.
 */
#include <signal.h>
#include <time.h>

#include "thread.h"

#define RSK_THREAD_STACK (64 * 1024)

int rsk_thread_spawn(void *(*fn)(void *arg), void *arg, pthread_t *out)
{
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t t;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, RSK_THREAD_STACK);
	rc = pthread_create(out != NULL ? out : &t, &a, fn, arg);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -rc;
}

static pthread_rwlock_t rsk_thread_gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static __thread int rsk_thread_gate_closed; /* this thread, forking, holds the gate */

void rsk_thread_work_begin(void)
{
	(void)pthread_rwlock_rdlock(&rsk_thread_gate);
}

void rsk_thread_work_end(void)
{
	(void)pthread_rwlock_unlock(&rsk_thread_gate);
}

/* Timed on CLOCK_REALTIME, which the timed lock takes (a clock step only moves the bound). */
void rsk_thread_fork_prepare(void)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += RSK_THREAD_FORK_WAIT_MS / 1000;
	until.tv_nsec += (RSK_THREAD_FORK_WAIT_MS % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	rsk_thread_gate_closed = pthread_rwlock_timedwrlock(&rsk_thread_gate, &until) == 0;
}

void rsk_thread_fork_parent(void)
{
	if (rsk_thread_gate_closed)
		(void)pthread_rwlock_unlock(&rsk_thread_gate);
	rsk_thread_gate_closed = 0;
}

/* Not an unlock: glibc knows a writer by its thread id, which the child's thread no longer
 * has. Only this thread exists here, so nobody else can be using the lock. */
void rsk_thread_fork_child(void)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	(void)pthread_rwlock_init(&rsk_thread_gate, &a);
	pthread_rwlockattr_destroy(&a);
	rsk_thread_gate_closed = 0;
}
