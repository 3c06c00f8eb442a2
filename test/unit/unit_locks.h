/*
 * Counting the mutex locks the test's thread takes: pthread_mutex_lock wrapped by defining it
 * in the test executable (its definition comes first for core/, which is linked in). Not
 * under a sanitizer, which wraps it itself: LOCKS_COUNTED is 0 there and a test skips.
 * Include once, in the test's .c file.
 */
#ifndef RSK_TEST_UNIT_LOCKS_H
#define RSK_TEST_UNIT_LOCKS_H

#include <pthread.h>

static __thread int lock_counting; /* set around the calls counted */
static int locks;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCKS_COUNTED 0
#else
#define LOCKS_COUNTED 1

/* libc's own, by its other versioned name (dlsym would take locks of its own first, and the
 * default name would bind to the definition below) */
extern int real_mutex_lock(pthread_mutex_t *m);
__asm__(".symver real_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");

int pthread_mutex_lock(pthread_mutex_t *m)
{
	locks += lock_counting;
	return real_mutex_lock(m);
}
#endif

#endif
