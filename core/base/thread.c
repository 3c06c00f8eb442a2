/*
 * Background threads (thread.h). The caller's signal mask is swapped for a full one only
 * around pthread_create, which is how the new thread inherits "everything blocked"; the
 * caller's own mask is back before this returns.
 */
#include <signal.h>

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
