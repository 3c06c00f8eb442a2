/*
 * This process: its pid, cached so that hot paths never call getpid() (the fork hooks
 * refresh it in the child), and how many times it has forked (a parent's count, used to
 * tell a fork-per-connection server from one that serves its own connections), and its
 * open fds.
 */
#ifndef RSK_BASE_PROC_H
#define RSK_BASE_PROC_H

#include <sys/types.h>

/* Our pid (never a syscall after the first call in a process image). */
pid_t rsk_proc_pid(void);

/* fork() calls this process has made so far. */
unsigned int rsk_proc_forks(void);

/* Around fork(): the parent counts the fork; the child learns its new pid. */
void rsk_proc_forking(void);
void rsk_proc_forked_child(void);

/* Call @fn(fd, @arg) for each fd this process has open (from /proc/self/fd, the walk's own
 * directory fd left out) until @fn returns nonzero. -errno if the directory cannot be read. */
int rsk_proc_each_fd(int (*fn)(int fd, void *arg), void *arg);

#endif
