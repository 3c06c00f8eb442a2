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

/*
 * Start @fn(@arg) in a process that is not our child: a grandchild whose parent, the middle
 * process, ends at once, so that init (or a subreaper) adopts it, as a daemon's double fork
 * does. Unlike fork()+fork(), the program never sees a SIGCHLD for the middle process nor a
 * child of ours that its waitpid(-1) could reap, whatever its SIGCHLD disposition: the
 * middle is cloned with no exit signal and reaped here (__WCLONE). @fn runs in a glibc
 * fork() of the middle (a consistent copy of this process, atfork handlers run), on a
 * private 1 MiB stack, with every signal blocked; its return value is the grandchild's exit
 * status (it should return rather than call _exit). 0 once the grandchild exists, -errno
 * (-EAGAIN: the middle could not fork it).
 */
int rsk_proc_spawn_orphan(int (*fn)(void *arg), void *arg);

#endif
