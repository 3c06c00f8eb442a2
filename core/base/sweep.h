/*
 * Bounded removal of files that dead processes left in a shared directory (/dev/shm): the
 * stats segments (statseg.c) and the rendezvous bells (transport/shm_rdv.c). A file is never
 * judged by name and then unlinked by name: a new process could create a live file under the
 * same name in between. It is first claimed, renamed atomically to "NAME.sweep-PID" (a name
 * only this sweeper uses), judged there by its owner's callback, and then unlinked, or put
 * back under NAME without replacing anything (a file made there meanwhile is the live one, so
 * the claimed one is unlinked). A claim whose sweeper died before finishing is taken over by
 * the next sweep. (A look by name, judge_first, only decides whether to claim.)
 */
#ifndef RSK_BASE_SWEEP_H
#define RSK_BASE_SWEEP_H

#include <sys/types.h>

#define RSK_SWEEP_CLAIM ".sweep-"

struct rsk_sweep {
	const char *prefix; /* only names that start with it are looked at */
	int scan;           /* at most this many directory entries read per sweep */
	int remove;         /* at most this many files removed per sweep */
	const int *stop;    /* optional: the sweep ends early once *stop is non-zero */
	/* By name only (cheap): is the file @name (prefix included, no claim suffix) worth
	 * claiming? NULL: every name with the prefix is. */
	int (*candidate)(const char *name, void *arg);
	/* On the claimed file's fd: 1 if it is a dead owner's (removed), 0 if not (put back).
	 * @name is its unclaimed name. */
	int (*stale)(int fd, const char *name, void *arg);
	/* Judge the file opened by name first, and claim only one that looks stale: for files
	 * that others open by name while they live (a client ringing a listener's bell), which
	 * a claim would hide for a moment. The claimed file is judged again. */
	int judge_first;
};

/* Sweep directory @dir by @w. Only regular files of our euid (root: anyone's) are judged.
 * Returns how many files were removed. Every fd it opens is closed before it returns. */
int rsk_sweep_dir(const char *dir, const struct rsk_sweep *w, void *arg);

/* Claim, judge (w->stale) and remove or put back the one file @name in directory @dfd.
 * Returns 1 if it was removed, else 0. */
int rsk_sweep_reap(int dfd, const char *name, const struct rsk_sweep *w, void *arg);

/* A decimal pid at @p, without sign or leading zero: the pid (*@end: what follows), else 0. */
pid_t rsk_sweep_parse_pid(const char *p, const char **end);

/* Is process @pid gone (ESRCH)? Another user's live process (EPERM) is not. */
int rsk_sweep_pid_gone(pid_t pid);

#endif
