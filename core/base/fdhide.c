/*
 * The library's own fds, kept out of the application's way: moved above the numbers it is
 * likely to use, close-on-exec, and marked internal in the fd table so that the application
 * cannot close them by accident (close() on one fails with EBADF, as for a closed fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "fdhide.h"
#include "fdtab.h"
#include "sys.h"

/* (fdhide.h: the marker of internal fds in the fd table) */
char rsk_internal_marker __attribute__((aligned(8)));
#define RSK_INTERNAL_SLOT ((uintptr_t)&rsk_internal_marker | RSK_FDTAB_TAG_KERNEL)

/*
 * Where hidden fds go: downwards from a ceiling (the soft RLIMIT_NOFILE, at most 65536 so
 * the kernel's fd table stays small), each on the highest free number, so the application,
 * which allocates from the bottom, meets them only when the process is nearly out of fds.
 * No fixed floor: a window (it was the upper half) capped the accelerated connections of a
 * process at a fraction of its limit whatever the application used; what keeps room for the
 * application is the reserve (rsk_fd_reserve: connect and accept stay on TCP below it).
 * @next is the number tried next: every number above it is ours, a hole, or the
 * application's. Holes (numbers our closes freed above @next) are reused first, highest
 * first, and the region shrinks back over them when its lowest fd closes: a process that
 * opens and closes connections for ever must not creep down into the application's numbers.
 */
#define RSK_HIDE_CEILING_MAX 65536

static pthread_mutex_t rsk_hide_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rsk_hide_once = PTHREAD_ONCE_INIT;
/* Written under the lock, and atomically: rsk_fd_reserve and rsk_fd_headroom read them
 * without it (every accept and connect asks). */
static int rsk_hide_ceiling; /* 0: not known yet */
static int rsk_hide_next;
static uint64_t rsk_hide_holes[RSK_HIDE_CEILING_MAX / 64]; /* one bit per number */
static int rsk_hide_nholes; /* under the lock only */

static int rsk_hole_test(int fd)
{
	return (rsk_hide_holes[fd >> 6] >> (fd & 63)) & 1;
}

static void rsk_hole_flip(int fd, int on)
{
	if (on)
		rsk_hide_holes[fd >> 6] |= 1ull << (fd & 63);
	else
		rsk_hide_holes[fd >> 6] &= ~(1ull << (fd & 63));
	rsk_hide_nholes += on ? 1 : -1;
}

/* The highest hole, taken out of the set; -1 if none. Holes lie in (next, ceiling). */
static int rsk_hole_take(void)
{
	int w;

	if (rsk_hide_nholes == 0)
		return -1;
	for (w = (rsk_hide_ceiling - 1) >> 6; w >= 0 && w >= (rsk_hide_next + 1) >> 6; w--) {
		if (rsk_hide_holes[w] != 0) {
			int fd = (w << 6) + 63 - __builtin_clzll(rsk_hide_holes[w]);

			rsk_hole_flip(fd, 0);
			return fd;
		}
	}
	rsk_hide_nholes = 0; /* cannot happen: the count and the bits disagree */
	return -1;
}

/*
 * fork() while another thread is inside a hide: the child would inherit the lock held by a
 * thread it does not have, and its first hide (the fork hooks close and open fds of ours)
 * would wait for ever. The lock is taken around fork, so both sides get it released and the
 * holes and the next number consistent.
 */
static void rsk_hide_lock_fork(void)
{
	pthread_mutex_lock(&rsk_hide_lock);
}

static void rsk_hide_unlock_fork(void)
{
	pthread_mutex_unlock(&rsk_hide_lock);
}

static void rsk_hide_register_fork(void)
{
	(void)pthread_atfork(rsk_hide_lock_fork, rsk_hide_unlock_fork, rsk_hide_unlock_fork);
}

static void rsk_hide_take(void)
{
	(void)pthread_once(&rsk_hide_once, rsk_hide_register_fork);
	pthread_mutex_lock(&rsk_hide_lock);
}

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
		memset(rsk_hide_holes, 0, sizeof(rsk_hide_holes));
		rsk_hide_nholes = 0;
	}
}

/*
 * The highest free number below @below, every number from @below up being taken: the
 * largest x for which F_DUPFD(x) finds one, by bisection (F_DUPFD gives the lowest free
 * number >= x). At most 2 * 17 system calls, and only where the application's fds meet the
 * region. -EMFILE: none free; or another -errno.
 */
static int rsk_hide_highest_free(int fd, int below)
{
	int lo = 0, hi = below - 1, mid, nfd, found = -1;

	while (lo <= hi) {
		mid = lo + (hi - lo) / 2;
		nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, mid);
		if (nfd == -EMFILE) {
			hi = mid - 1;
			continue;
		}
		if (nfd < 0)
			return nfd;
		(void)rsk_sys_close(nfd);
		found = mid;
		lo = mid + 1;
	}
	return found >= 0 ? found : -EMFILE;
}

/* A hole, or the region's next number (going around the application's fds up there), or
 * -errno (-EMFILE: no number is free). Lock held. */
static int rsk_hide_try(int fd)
{
	int nfd, h;

	while ((h = rsk_hole_take()) >= 0) {
		nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, h);
		if (nfd >= 0 || (nfd != -EMFILE && nfd != -EINVAL))
			return nfd; /* the hole (or a free number above it), or a bad @fd */
		/* the application took it since, or the limit went below it */
	}
	while (rsk_hide_next >= 0) {
		nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, rsk_hide_next);
		if (nfd >= 0) {
			if (nfd == rsk_hide_next)
				__atomic_store_n(&rsk_hide_next, nfd - 1, __ATOMIC_RELAXED); /* next below */
			return nfd;
		}
		if (nfd != -EMFILE)
			return nfd; /* -EINVAL: the limit went below us; or a bad @fd */
		/* it and all above are taken (the application's): on to the highest free below */
		h = rsk_hide_highest_free(fd, rsk_hide_next);
		if (h < 0)
			return h;
		__atomic_store_n(&rsk_hide_next, h, __ATOMIC_RELAXED);
	}
	return -EMFILE;
}

/* Move @fd to a hidden number (a new fd, close-on-exec), or -errno. Lock held. */
static int rsk_hide_place(int fd)
{
	int nfd, i;

	if (rsk_hide_ceiling == 0)
		rsk_hide_limits();
	for (i = 0; i < 2; i++) {
		nfd = rsk_hide_try(fd);
		if (nfd >= 0 || nfd == -EBADF)
			return nfd;
		rsk_hide_limits(); /* the application may have changed its limit */
	}
	return nfd;
}

int rsk_fd_hide(int fd)
{
	int nfd;

	rsk_hide_take();
	nfd = rsk_hide_place(fd);
	pthread_mutex_unlock(&rsk_hide_lock);
	if (nfd == -EBADF)
		return nfd; /* not an open fd: nothing to keep, and its number is not ours */
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

	rsk_hide_take();
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
		rsk_hide_take();
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

#define RSK_ROOM_PROBE_MAX 16

int rsk_fd_room_now(int any_fd, int want)
{
	int got[RSK_ROOM_PROBE_MAX], n = 0, i, fd;

	if (want > RSK_ROOM_PROBE_MAX)
		want = RSK_ROOM_PROBE_MAX;
	/* Counting, not computing: numbers freed behind our hidden ones, or taken by the
	 * application among them, make any arithmetic on the region's bounds wrong. */
	while (n < want && (fd = rsk_sys_fcntl(any_fd, F_DUPFD_CLOEXEC, 0)) >= 0)
		got[n++] = fd;
	for (i = 0; i < n; i++)
		(void)rsk_sys_close(got[i]);
	return n;
}

int rsk_fd_hide_at(int fd, int hidden)
{
	int rc;

	if (!rsk_fd_is_internal(hidden))
		return rsk_fd_hide(fd); /* not one of ours: never replace a number blindly */
	/* The number stays open throughout (dup3 replaces its file atomically), so no other
	 * thread can take it in between, and it stays marked internal. */
	rc = rsk_sys_dup3(fd, hidden, O_CLOEXEC);
	if (rc < 0) {
		rsk_fd_unhide_close(hidden);
		return rsk_fd_hide(fd);
	}
	(void)rsk_sys_close(fd);
	return hidden;
}

void rsk_fd_unhide_close(int fd)
{
	rsk_fdtab_replace(fd, RSK_INTERNAL_SLOT, 0);
	(void)rsk_sys_close(fd);
	rsk_hide_take();
	if (fd > rsk_hide_next && fd < rsk_hide_ceiling && !rsk_hole_test(fd)) {
		rsk_hole_flip(fd, 1);
		/* Our lowest fd went: the region shrinks back over the holes above it. */
		while (rsk_hide_next + 1 < rsk_hide_ceiling && rsk_hole_test(rsk_hide_next + 1)) {
			__atomic_store_n(&rsk_hide_next, rsk_hide_next + 1, __ATOMIC_RELAXED);
			rsk_hole_flip(rsk_hide_next, 0);
		}
	}
	pthread_mutex_unlock(&rsk_hide_lock);
}
