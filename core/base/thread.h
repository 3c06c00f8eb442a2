/*
 * The library's own background threads (the event loop, the live stats publisher):
 * detached, on a small stack, and with every signal blocked, because signals belong to the
 * application's threads and a handler must never run on ours.
 *
 * The fork gate: a fork copies only the calling thread, so a lock that another thread holds
 * at that instant stays held in the child for ever. glibc's malloc takes its own locks
 * around fork, but a sanitizer's allocator does not (gcc 12's and clang 14's ASan): a child
 * forked while our thread was inside malloc hung at its next allocation or in the leak
 * check at exit. So a background thread works (between two of its waits) inside the gate,
 * and fork closes the gate first: no thread of ours is inside malloc, or holds any lock,
 * while the process is copied.
 */
#ifndef RSK_BASE_THREAD_H
#define RSK_BASE_THREAD_H

#include <pthread.h>

/* Start @fn(@arg) that way; *@out (if not NULL) names it. 0 or -errno. */
int rsk_thread_spawn(void *(*fn)(void *arg), void *arg, pthread_t *out);

/* Around a background thread's work: begin waits while a fork is under way. */
void rsk_thread_work_begin(void);
void rsk_thread_work_end(void);

/*
 * Around fork, in the forking thread: prepare waits (at most RSK_THREAD_FORK_WAIT_MS, after
 * which the fork goes on without the gate, as it would without this) until no background
 * thread is working and keeps new work from starting; parent reopens the gate; child starts
 * a fresh one (the threads that shared it are the parent's). Call prepare holding none of
 * the library's locks: a working thread may be waiting for one.
 */
#define RSK_THREAD_FORK_WAIT_MS 2000
void rsk_thread_fork_prepare(void);
void rsk_thread_fork_parent(void);
void rsk_thread_fork_child(void);

#endif
