/*
 * epoll family: epoll_create, epoll_create1, epoll_ctl, epoll_wait, epoll_pwait,
 * epoll_pwait2. The application's epoll set holds the real kernel objects behind its fds, so
 * level/edge/oneshot/exclusive and nested epoll keep the kernel's exact semantics.
 */
#include <sys/epoll.h>

#include "base/config.h"
#include "calls/fastwait.h"
#include "calls/io.h"
#include "preload.h"
#include "calls/calls.h"
#include "sock/sock.h"

RSK_EXPORT int epoll_create(int size)
{
	int fd = RSK_REAL(epoll_create)(size);

	if (fd >= 0 && rsk_config.fastwait)
		rsk_fw_created(fd);
	return fd;
}

RSK_EXPORT int epoll_create1(int flags)
{
	int fd = RSK_REAL(epoll_create1)(flags);

	if (fd >= 0 && rsk_config.fastwait)
		rsk_fw_created(fd);
	return fd;
}

RSK_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	uintptr_t v = rsk_fdtab_load(fd);
	struct epoll_event kev;
	struct rsk_fw *quiet = NULL;
	int rc, et = 0;

	/* A lazy candidate's MOD/DEL/re-ADD is answered by its mirror; otherwise a likely
	 * candidate is held edge-triggered by the kernel (calls/fastwait.c). Any other fd in a
	 * set that holds no candidate goes by its mirror, which follows nothing then. */
	if (rsk_unlikely(rsk_fw_on()) && rsk_fdtab_is_accel(v)) {
		if (rsk_fw_ctl_user(epfd, op, fd, ev, &rc))
			return (int)rsk_ret(rc);
		if ((et = rsk_fw_ctl_et(epfd, op, fd, ev)) != 0) {
			kev = *ev;
			kev.events |= EPOLLET;
		}
	} else if (rsk_unlikely(rsk_fw_on())) {
		quiet = rsk_fw_ctl_begin(epfd);
	}
	rc = RSK_REAL(epoll_ctl)(epfd, op, fd, et ? &kev : ev);
	if (quiet != NULL) /* (at once: a mirror to follow again waits for it) */
		rsk_fw_ctl_end(quiet, fd, rc == 0);

	/* A socket not yet connected may still get a new file behind its number (see sock.h):
	 * remember where it was registered so the registration can follow it. A TCP-first
	 * connection's ADD or MOD in a set whose mirror follows nothing is read from the kernel
	 * if it moves (rsk_fw_epregs), not recorded at each ctl; its DEL still takes back what
	 * was recorded (no lock when nothing was). */
	if (rsk_unlikely(v != 0) && rc == 0 && !rsk_fdtab_is_accel(v) &&
	    (quiet == NULL || (v & RSK_FDTAB_TAGS) != RSK_FDTAB_TAGS || op == EPOLL_CTL_DEL))
		rsk_life_epoll_note(epfd, op, fd, ev);
	if (quiet != NULL)
		return rc;
	/* Also before any connection is lazy (no mirror yet: the set is one we do not mirror):
	 * a poll or a recv may make it lazy later, which this set must not see. */
	if ((rsk_unlikely(rsk_fw_on()) || (rsk_fdtab_is_accel(v) && rsk_config.fastwait)) &&
	    rc == 0)
		rsk_fw_ctl(epfd, op, fd, ev, et);
	return rc;
}

struct rsk_epoll_args {
	int epfd, max;
	struct epoll_event *ev;
};

static int rsk_epoll_poll0(void *arg)
{
	struct rsk_epoll_args *a = arg;

	return RSK_REAL(epoll_wait)(a->epfd, a->ev, a->max, 0);
}

/* Remaining timeout after @spent ms of spinning (-1 stays forever). */
static int rsk_timeout_left(int timeout, int spent)
{
	if (timeout < 0)
		return timeout;
	return timeout > spent ? timeout - spent : 0;
}

RSK_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	struct rsk_epoll_args a = {epfd, max, ev};
	int rc, spent, k;

	if (rsk_unlikely(rsk_fw_on()) && rsk_fw_wait(epfd, ev, max, timeout, NULL, &rc))
		return (int)rsk_ret(rc);
	rc = rsk_io_wait_spin(rsk_epoll_poll0, &a, timeout, &spent);
	if (rc != 0)
		return rc;
	timeout = rsk_timeout_left(timeout, spent);
	k = rsk_io_kwait_begin(timeout);
	rc = RSK_REAL(epoll_wait)(epfd, ev, max, timeout);
	rsk_io_kwait_end(k);
	return rc;
}

RSK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			   const sigset_t *mask)
{
	struct rsk_epoll_args a = {epfd, max, ev};
	int rc, spent, k;

	if (rsk_unlikely(rsk_fw_on()) && rsk_fw_wait(epfd, ev, max, timeout, mask, &rc))
		return (int)rsk_ret(rc);
	/* The spin polls without @mask: signals stay as they were outside the wait. */
	rc = rsk_io_wait_spin(rsk_epoll_poll0, &a, timeout, &spent);
	if (rc != 0)
		return rc;
	timeout = rsk_timeout_left(timeout, spent);
	k = rsk_io_kwait_begin(timeout);
	rc = RSK_REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
	rsk_io_kwait_end(k);
	return rc;
}

RSK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *tmo, const sigset_t *mask)
{
	int rc, k;

	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_fd_shared(epfd); /* not mirrored: the set's lazy connections go eager */
	k = rsk_io_kwait_begin(tmo != NULL && tmo->tv_sec == 0 && tmo->tv_nsec == 0 ? 0 : -1);
	rc = RSK_REAL(epoll_pwait2)(epfd, ev, max, tmo, mask);
	rsk_io_kwait_end(k);
	return rc;
}
