/*
 * epoll family: epoll_create, epoll_create1, epoll_ctl, epoll_wait, epoll_pwait,
 * epoll_pwait2. The application's epoll set holds the real kernel objects behind its fds, so
 * level/edge/oneshot/exclusive and nested epoll keep the kernel's exact semantics.
 */
#include <sys/epoll.h>

#include "base/clock.h"
#include "base/config.h"
#include "calls/fastwait.h"
#include "calls/io.h"
#include "calls/upgrade.h"
#include "preload.h"
#include "timeout.h"
#include "calls/calls.h"
#include "sock/face.h"
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
	struct epoll_event kev, *kp = ev;
	struct rsk_fw *quiet = NULL;
	int rc, et = 0, face;

	/* A lazy candidate's MOD/DEL/re-ADD is answered by its mirror; otherwise a likely
	 * candidate is held edge-triggered by the kernel (calls/fastwait.c). Any other fd in a
	 * set that holds no candidate goes by its mirror, which follows nothing then. */
	if (rsk_unlikely(rsk_fw_on()) && rsk_fdtab_is_accel(v)) {
		if (rsk_fw_ctl_user(epfd, op, fd, ev, &rc))
			return (int)rsk_ret(rc);
		if ((et = rsk_fw_ctl_et(epfd, op, fd, ev)) != 0) {
			kev = *ev;
			kev.events |= EPOLLET;
			kp = &kev;
		}
	} else if (rsk_unlikely(rsk_fw_on())) {
		quiet = rsk_fw_ctl_begin(epfd);
	}
	/* The kernel refuses EPOLLEXCLUSIVE for an epoll set, which a face is: its listeners
	 * go into the set themselves (sock/face.c); failing that, every waiter wakes instead of
	 * one (an accept that finds nothing says EAGAIN, as to the others). */
	face = rsk_unlikely(rsk_face_is(fd));
	if (face && rsk_face_ctl(epfd, op, fd, ev, &rc)) {
		rc = (int)rsk_ret(rc);
	} else {
		if (rsk_unlikely(op == EPOLL_CTL_ADD && ev != NULL &&
				 (ev->events & EPOLLEXCLUSIVE) && face)) {
			kev = *ev;
			kev.events &= ~(uint32_t)EPOLLEXCLUSIVE;
			kp = &kev;
		}
		rc = RSK_REAL(epoll_ctl)(epfd, op, fd, kp);
	}
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

/* Microseconds left until @end_us (none left: 0). */
static int64_t rsk_left_us(int64_t end_us)
{
	int64_t left = end_us - rsk_now_us();

	return left > 0 ? left : 0;
}

/* Remaining timeout after @spent ms of spinning (-1 stays forever). */
static int rsk_timeout_left(int timeout, int spent)
{
	if (timeout < 0)
		return timeout;
	return timeout > spent ? timeout - spent : 0;
}

/* epoll_wait with no move under way in this process. */
static int rsk_epoll_wait_some(int epfd, struct epoll_event *ev, int max, int timeout)
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

/* epoll_pwait with no move under way in this process. */
static int rsk_epoll_pwait_some(int epfd, struct epoll_event *ev, int max, int timeout,
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

/*
 * A TCP-first socket in the middle of its move: a report of its fd may be only the move's FIN
 * (calls/fastwait.c, rsk_fw_settle, through the set's mirror). Such a report is settled and
 * dropped (or loses its FIN's bits, when the move cannot end within the wait's time); when
 * nothing else was reported and a move ended, the wait is asked again with what is left of
 * its timeout (each such round ended a move for good; bounded all the same). A set the
 * library does not mirror, or a quiet one, is settled through its fdinfo (docs/design.md,
 * "Readiness during a move").
 */
#define RSK_EPOLL_SETTLE_ROUNDS 8

static __attribute__((noinline)) int rsk_epoll_moving(int epfd, struct epoll_event *ev, int max,
						      int timeout, const sigset_t *mask, int pwait)
{
	int64_t start = rsk_now_us(), end = timeout < 0 ? -1 : start + (int64_t)timeout * 1000;
	int rc, round, moved;

	for (round = 0;; round++) {
		rc = pwait ? rsk_epoll_pwait_some(epfd, ev, max, timeout, mask)
			   : rsk_epoll_wait_some(epfd, ev, max, timeout);
		if (rc <= 0 || round >= RSK_EPOLL_SETTLE_ROUNDS)
			return rc;
		moved = 0;
		rc = rsk_fw_settle(epfd, ev, rc, end, &moved);
		if (rc > 0 || !moved)
			return rc;
		if (timeout > 0) /* (rounded up: a wait never ends before its time) */
			timeout = (int)((rsk_left_us(end) + 999) / 1000);
	}
}

RSK_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	int n;

	if (rsk_unlikely(rsk_upg_any_moving()))
		n = rsk_epoll_moving(epfd, ev, max, timeout, NULL, 0);
	else
		n = rsk_epoll_wait_some(epfd, ev, max, timeout);
	return rsk_face_reported(epfd, ev, n);
}

RSK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			   const sigset_t *mask)
{
	int n;

	if (rsk_unlikely(rsk_upg_any_moving()))
		n = rsk_epoll_moving(epfd, ev, max, timeout, mask, 1);
	else
		n = rsk_epoll_pwait_some(epfd, ev, max, timeout, mask);
	return rsk_face_reported(epfd, ev, n);
}

/* epoll_pwait2 with no move under way in this process. */
static int rsk_epoll_pwait2_some(int epfd, struct epoll_event *ev, int max,
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

/* epoll_pwait2 while a move is under way (as rsk_epoll_moving; its set is never mirrored). */
static __attribute__((noinline)) int rsk_epoll_pwait2_moving(int epfd, struct epoll_event *ev,
							     int max, const struct timespec *tmo,
							     const sigset_t *mask)
{
	int64_t start = rsk_now_us(), total = rsk_ts_total_us(tmo);
	int64_t end = rsk_poll_end_us(total, start);
	struct timespec ts;
	int rc, round, moved;

	for (round = 0;; round++) {
		rc = rsk_epoll_pwait2_some(epfd, ev, max, tmo, mask);
		if (rc <= 0 || round >= RSK_EPOLL_SETTLE_ROUNDS)
			return rc;
		moved = 0;
		rc = rsk_fw_settle(epfd, ev, rc, end, &moved);
		if (rc > 0 || !moved)
			return rc;
		tmo = rsk_ts_next(tmo, total, start, &ts);
	}
}

RSK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *tmo, const sigset_t *mask)
{
	int n;

	if (rsk_unlikely(rsk_upg_any_moving()))
		n = rsk_epoll_pwait2_moving(epfd, ev, max, tmo, mask);
	else
		n = rsk_epoll_pwait2_some(epfd, ev, max, tmo, mask);
	return rsk_face_reported(epfd, ev, n);
}
