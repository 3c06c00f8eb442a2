/*
 * Process identity (see proc.h). The pid is cached in a plain global: it only changes in a
 * forked child, where rsk_proc_forked_child() runs before the child uses the library. Also
 * the start of processes that are not the program's children (rsk_proc_spawn_orphan).
 */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "real.h"

static pid_t rsk_proc_cached;
static unsigned int rsk_proc_nforks;

pid_t rsk_proc_pid(void)
{
	pid_t p = __atomic_load_n(&rsk_proc_cached, __ATOMIC_RELAXED);

	if (p == 0) {
		p = getpid();
		__atomic_store_n(&rsk_proc_cached, p, __ATOMIC_RELAXED);
	}
	return p;
}

unsigned int rsk_proc_forks(void)
{
	return __atomic_load_n(&rsk_proc_nforks, __ATOMIC_RELAXED);
}

void rsk_proc_forking(void)
{
	__atomic_add_fetch(&rsk_proc_nforks, 1, __ATOMIC_RELAXED);
}

void rsk_proc_forked_child(void)
{
	__atomic_store_n(&rsk_proc_cached, getpid(), __ATOMIC_RELAXED);
}

int rsk_proc_each_fd(int (*fn)(int fd, void *arg), void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int fd;

	if (d == NULL)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		fd = atoi(de->d_name);
		if (fd != dirfd(d) && fn(fd, arg) != 0)
			break;
	}
	closedir(d);
	return 0;
}

/* glibc's own name for clone(), exported beside it. Sanitizers interpose clone() (TSan
 * treats every clone as a fork and would run its fork-child bookkeeping in the middle
 * process, on our memory, as if the cloning thread were a new process); __clone is the real
 * one. The middle's fork() still goes through a sanitizer's fork, as a fork of ours does. */
extern int __clone(int (*fn)(void *arg), void *stack, int flags, void *arg, ...);

/* The middle process's stack, which the grandchild goes on using for its main thread (it
 * never returns into the program's frames). Reserved, touched only as far as used. */
#define RSK_PROC_ORPHAN_STACK (1u << 20)

struct rsk_proc_mid {
	int (*fn)(void *arg);
	void *arg;
};

/*
 * The middle process. It shares our memory (CLONE_VM) while the thread that cloned it waits
 * (CLONE_VFORK), so it acts as that thread: glibc's fork here takes the locks the program's
 * other threads may hold (malloc's, stdio's, the atfork handlers') as a fork by that thread
 * would, and the grandchild gets a consistent copy. Both end by the exit system call: no
 * exit handler or sanitizer hook may run on the cloning thread's state, or on this stack.
 * Not instrumented: it never returns, so a sanitizer's entry bookkeeping would stay behind
 * in the cloning thread's state.
 */
__attribute__((no_sanitize_address, no_sanitize_thread)) static int rsk_proc_mid_main(void *arg)
{
	struct rsk_proc_mid *m = arg;
	pid_t h = RSK_REAL(fork)();
	int status = h < 0;

	if (h == 0)
		status = m->fn(m->arg);
	/* exit_group, not the clone trampoline's exit: the helper has threads of its own */
	(void)RSK_REAL(syscall)(SYS_exit_group, status);
	return status;
}

static int rsk_proc_wait_mid(pid_t mid)
{
	int st = 0;

	while (waitpid(mid, &st, __WCLONE) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EAGAIN;
}

int rsk_proc_spawn_orphan(int (*fn)(void *arg), void *arg)
{
	struct rsk_proc_mid m = {fn, arg};
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = RSK_PROC_ORPHAN_STACK + page;
	int err = errno, rc;
	sigset_t all, old;
	char *stk;
	pid_t mid;

	stk = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (stk == MAP_FAILED)
		return -ENOMEM;
	(void)mprotect(stk, page, PROT_NONE); /* a guard: an overflow ends that process only */
	/* No handler of the program may run in the middle process (on our memory, as this
	 * thread) or in the grandchild before it sets its own: both start with all blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* Exit signal 0 (no SIGCHLD in the flags): nothing is sent to us when it ends, the
	 * kernel never reaps it for a program that ignores SIGCHLD, and only a wait with
	 * __WCLONE or __WALL sees it. CLONE_VFORK: we go on once it has ended. */
	mid = __clone(rsk_proc_mid_main, stk + len, CLONE_VM | CLONE_VFORK, &m);
	rc = mid < 0 ? -errno : 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		rc = rsk_proc_wait_mid(mid);
	munmap(stk, len);
	errno = err;
	return rc;
}
