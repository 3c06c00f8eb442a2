/*
 * The library's own fds, kept out of the application's way: moved above the numbers it is
 * likely to use, close-on-exec, and marked internal in the fd table so that the application
 * cannot close them by accident (close() on one fails with EBADF, as for a closed fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>

#include "fdhide.h"
#include "fdtab.h"
#include "sys.h"

/* Internal fds carry this marker in the fd table; tagged kernel, so data calls pass through. */
static char rsk_internal_marker __attribute__((aligned(8)));
#define RSK_INTERNAL_SLOT ((uintptr_t)&rsk_internal_marker | RSK_FDTAB_TAG_KERNEL)

/*
 * Where hidden fds go: downwards from a ceiling (the soft RLIMIT_NOFILE, at most 65536 so
 * the kernel's fd table stays small), so the application, which allocates from the bottom,
 * meets them only when the process is nearly out of fds. @next is the number tried next;
 * holes our closes leave above it are reused first (F_DUPFD gives the lowest free >= base).
 */
#define RSK_HIDE_CEILING_MAX 65536

static pthread_mutex_t rsk_hide_lock = PTHREAD_MUTEX_INITIALIZER;
/* Written under the lock, and atomically: rsk_fd_reserve and rsk_fd_headroom read them
 * without it (every accept and connect asks). */
static int rsk_hide_ceiling; /* 0: not known yet */
static int rsk_hide_next;

static void rsk_hide_limits(void)
{
	struct rlimit rl;
	int ceil = 1024;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		ceil = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > RSK_HIDE_CEILING_MAX
			       ? RSK_HIDE_CEILING_MAX
			       : (int)rl.rlim_cur;
	if (ceil != rsk_hide_ceiling) { /* first use, or the limit changed since */
		__atomic_store_n(&rsk_hide_ceiling, ceil, __ATOMIC_RELAXED);
		__atomic_store_n(&rsk_hide_next, ceil - 1, __ATOMIC_RELAXED);
	}
}

/* Move @fd to a hidden number (a new fd, close-on-exec), or -errno. Lock held. */
static int rsk_hide_place(int fd)
{
	int nfd, i;

	if (rsk_hide_ceiling == 0)
		rsk_hide_limits();
	for (i = 0; i < 2; i++) {
		nfd = rsk_hide_next >= rsk_hide_ceiling / 2
			      ? rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, rsk_hide_next)
			      : -EMFILE;
		if (nfd >= 0) {
			if (nfd == rsk_hide_next) /* took the slot: the next one goes below */
				__atomic_store_n(&rsk_hide_next, nfd - 1, __ATOMIC_RELAXED);
			return nfd;
		}
		rsk_hide_limits(); /* the application may have changed its limit */
	}
	return nfd;
}

int rsk_fd_hide(int fd)
{
	int nfd;

	pthread_mutex_lock(&rsk_hide_lock);
	nfd = rsk_hide_place(fd);
	pthread_mutex_unlock(&rsk_hide_lock);
	if (nfd < 0) { /* No room up there: keep the original number rather than fail. */
		nfd = fd;
		(void)rsk_sys_fcntl(nfd, F_SETFD, FD_CLOEXEC);
	} else {
		(void)rsk_sys_close(fd); /* F_DUPFD_CLOEXEC set close-on-exec on the new one */
	}
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		(void)rsk_sys_close(nfd);
		return -EMFILE;
	}
	return nfd;
}

int rsk_fd_hide_dup(int fd)
{
	int nfd;

	pthread_mutex_lock(&rsk_hide_lock);
	nfd = rsk_hide_place(fd);
	pthread_mutex_unlock(&rsk_hide_lock);
	if (nfd < 0)
		nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, 0); /* as rsk_fd_hide: rather than fail */
	if (nfd < 0)
		return nfd;
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		(void)rsk_sys_close(nfd);
		return -EMFILE;
	}
	return nfd;
}

int rsk_fd_reserve(void)
{
	int ceil = __atomic_load_n(&rsk_hide_ceiling, __ATOMIC_RELAXED);

	if (ceil == 0) {
		pthread_mutex_lock(&rsk_hide_lock);
		rsk_hide_limits();
		ceil = rsk_hide_ceiling;
		pthread_mutex_unlock(&rsk_hide_lock);
	}
	return ceil / 8 > 64 ? ceil / 8 : 64;
}

int rsk_fd_headroom(int fd)
{
	int next = __atomic_load_n(&rsk_hide_next, __ATOMIC_RELAXED);

	if (next == 0) { /* nothing hidden yet: the whole range above @fd */
		(void)rsk_fd_reserve();
		next = __atomic_load_n(&rsk_hide_next, __ATOMIC_RELAXED);
	}
	return next - fd;
}

void rsk_fd_unhide_close(int fd)
{
	rsk_fdtab_replace(fd, RSK_INTERNAL_SLOT, 0);
	(void)rsk_sys_close(fd);
}

int rsk_fd_is_internal(int fd)
{
	return rsk_fdtab_load(fd) == RSK_INTERNAL_SLOT;
}
