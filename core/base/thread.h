/*
 * The library's own background threads (the event loop, the live stats publisher):
 * detached, on a small stack, and with every signal blocked, because signals belong to the
 * application's threads and a handler must never run on ours.
 */
#ifndef RSK_BASE_THREAD_H
#define RSK_BASE_THREAD_H

#include <pthread.h>

/* Start @fn(@arg) that way; *@out (if not NULL) names it. 0 or -errno. */
int rsk_thread_spawn(void *(*fn)(void *arg), void *arg, pthread_t *out);

#endif
