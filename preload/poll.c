/*
 * Readiness waits without epoll: poll, ppoll, select, pselect and the fortify variants
 * __poll_chk, __ppoll_chk. A set holding shm connections of ours is answered from their
 * rings first (calls/pollfast.c); otherwise the fds the application waits on are real kernel
 * objects whose readiness the library keeps true, so these go to the kernel; poll, select and
 * pselect (like epoll_wait) first spin briefly when this process has accelerated connections
 * (see rsk_io_wait_spin). A process with no connection of ours goes straight to the kernel
 * (rsk_io_none_ours).
 */
#include <poll.h>
#include <stdint.h>
#include <sys/select.h>

#include "base/clock.h"
#include "calls/fastwait.h"
#include "calls/io.h"
#include "calls/pollfast.h"
#include "calls/upgrade.h"
#include "preload.h"
#include "timeout.h"

/*
 * A TCP-first socket in the middle of its move: its fd still names the TCP side, whose
 * report may be only the move's FIN (calls/upgrade.c, rsk_upg_settle). Then the move is
 * taken forward and the wait asked again, with what is left of its timeout. Each round that
 * asks again ended a move for good; bounded all the same (the last answer stands).
 */
#define RSK_POLL_SETTLE_ROUNDS 8

extern void __chk_fail(void) __attribute__((noreturn));

struct rsk_poll_args {
	struct pollfd *fds;
	nfds_t n;
};

static int rsk_poll_poll0(void *arg)
{
	struct rsk_poll_args *a = arg;

	return RSK_REAL(poll)(a->fds, a->n, 0);
}

/* poll() when this process has connections of ours (or lazy fds): the fast path, the spin. */
static __attribute__((noinline)) int rsk_poll_ours(struct pollfd *fds, nfds_t n, int timeout)
{
	struct rsk_poll_args a = {fds, n};
	int rc, spent, k;

	if (!rsk_pf_has_ours(fds, n)) { /* kernel fds only: nothing to classify or taint */
		k = rsk_io_kwait_kernel(timeout);
		rc = RSK_REAL(poll)(fds, n, timeout);
		rsk_io_kwait_end(k);
		return rc;
	}
	if (rsk_pf_poll(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000, NULL, &rc))
		return (int)rsk_ret(rc);
	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_poll_shared(fds, n); /* the kernel answers poll: lazy fds in it go eager */
	/* kernel fds only: no spin (a timeout of 0 only pushes and harvests) */
	rc = rsk_io_wait_spin(rsk_poll_poll0, &a, rsk_pf_has_ours(fds, n) ? timeout : 0, &spent);
	if (rc != 0)
		return rc;
	if (timeout > 0)
		timeout = timeout > spent ? timeout - spent : 0;
	k = rsk_io_kwait_begin(timeout);
	rc = RSK_REAL(poll)(fds, n, timeout);
	rsk_io_kwait_end(k);
	return rc;
}

/*
 * poll() in a process with connections of ours: a set of kernel fds only that needs nothing
 * around its real call (rsk_io_kwait_none) goes to the kernel at once. Apart from poll()
 * and from rsk_poll_ours, so that neither the pass-through path nor this one pays the
 * other's registers.
 */
static __attribute__((noinline)) int rsk_poll_some(struct pollfd *fds, nfds_t n, int timeout)
{
	__typeof__(rsk_real.poll) fn = __atomic_load_n(&rsk_real.poll, __ATOMIC_ACQUIRE);

	/* not resolved yet: rsk_poll_ours resolves it (no call here, so no frame) */
	if (fn != NULL && !rsk_pf_has_ours(fds, n) && rsk_io_kwait_none())
		return fn(fds, n, timeout);
	return rsk_poll_ours(fds, n, timeout);
}

/* poll() while a move is under way in this process (see RSK_POLL_SETTLE_ROUNDS). */
static __attribute__((noinline)) int rsk_poll_moving(struct pollfd *fds, nfds_t n, int timeout)
{
	int64_t start = rsk_now_us(), total = timeout < 0 ? -1 : (int64_t)timeout * 1000;
	int rc, round;

	for (round = 0;; round++) {
		rc = rsk_poll_some(fds, n, timeout);
		if (rc <= 0 || round >= RSK_POLL_SETTLE_ROUNDS ||
		    !rsk_pf_settle(fds, n, rsk_poll_end_us(total, start), &rc))
			return rc;
		if (timeout > 0) /* (rounded up: a wait never ends before its time) */
			timeout = (int)((rsk_poll_left_us(total, start) + 999) / 1000);
	}
}

RSK_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (rsk_io_none_ours())
		return RSK_REAL(poll)(fds, n, timeout);
	if (rsk_unlikely(rsk_upg_any_moving()))
		return rsk_poll_moving(fds, n, timeout);
	return rsk_poll_some(fds, n, timeout);
}

/* ppoll() when this process has connections of ours (or lazy fds): the fast path, the spin. */
static __attribute__((noinline)) int
rsk_ppoll_ours(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	int rc, k, zero;

	if (!rsk_pf_has_ours(fds, n)) { /* kernel fds only: nothing to classify or taint */
		zero = tmo != NULL && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
		k = rsk_io_kwait_kernel(zero ? 0 : -1);
		rc = RSK_REAL(ppoll)(fds, n, tmo, mask);
		rsk_io_kwait_end(k);
		return rc;
	}
	if ((tmo == NULL ||
	     (tmo->tv_sec >= 0 && tmo->tv_nsec >= 0 && tmo->tv_nsec < 1000000000L)) &&
	    rsk_pf_poll(fds, n,
			tmo == NULL ? -1 : rsk_us_of(tmo->tv_sec, (tmo->tv_nsec + 999) / 1000),
			mask, &rc))
		return (int)rsk_ret(rc);
	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_poll_shared(fds, n);
	k = rsk_io_kwait_begin(tmo != NULL && tmo->tv_sec == 0 && tmo->tv_nsec == 0 ? 0 : -1);
	rc = RSK_REAL(ppoll)(fds, n, tmo, mask);
	rsk_io_kwait_end(k);
	return rc;
}

/* ppoll() in a process with connections of ours: as rsk_poll_some. */
static __attribute__((noinline)) int
rsk_ppoll_some(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	__typeof__(rsk_real.ppoll) fn = __atomic_load_n(&rsk_real.ppoll, __ATOMIC_ACQUIRE);

	if (fn != NULL && !rsk_pf_has_ours(fds, n) && rsk_io_kwait_none())
		return fn(fds, n, tmo, mask);
	return rsk_ppoll_ours(fds, n, tmo, mask);
}

/* ppoll() while a move is under way in this process (see RSK_POLL_SETTLE_ROUNDS). */
static __attribute__((noinline)) int
rsk_ppoll_moving(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	int64_t start = rsk_now_us(), total = rsk_ts_total_us(tmo);
	struct timespec ts;
	int rc, round;

	for (round = 0;; round++) {
		rc = rsk_ppoll_some(fds, n, tmo, mask);
		if (rc <= 0 || round >= RSK_POLL_SETTLE_ROUNDS ||
		    !rsk_pf_settle(fds, n, rsk_poll_end_us(total, start), &rc))
			return rc;
		tmo = rsk_ts_next(tmo, total, start, &ts);
	}
}

RSK_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	if (rsk_io_none_ours())
		return RSK_REAL(ppoll)(fds, n, tmo, mask);
	if (rsk_unlikely(rsk_upg_any_moving()))
		return rsk_ppoll_moving(fds, n, tmo, mask);
	return rsk_ppoll_some(fds, n, tmo, mask);
}

/* select() rewrites its sets: each zero-timeout try works on copies. */
struct rsk_select_args {
	int n;
	fd_set *r, *w, *e;
};

static int rsk_select_poll0(void *arg)
{
	struct rsk_select_args *a = arg;
	fd_set r, w, e;
	struct timeval zero = {0, 0};
	int rc;

	if (a->r)
		r = *a->r;
	if (a->w)
		w = *a->w;
	if (a->e)
		e = *a->e;
	rc = RSK_REAL(select)(a->n, a->r ? &r : NULL, a->w ? &w : NULL, a->e ? &e : NULL, &zero);
	if (rc > 0) {
		if (a->r)
			*a->r = r;
		if (a->w)
			*a->w = w;
		if (a->e)
			*a->e = e;
	}
	return rc;
}

/* Milliseconds of a select/pselect timeout for the spin decision (-1: none, i.e. forever). */
static int rsk_ms_of(long sec, long usec)
{
	return sec > 1000000 ? 1000000000 : (int)(sec * 1000 + usec / 1000);
}

/* select() when this process has connections of ours (or lazy fds): the fast path, the spin. */
static __attribute__((noinline)) int rsk_select_ours(int n, fd_set *r, fd_set *w, fd_set *e,
						     struct timeval *tmo)
{
	struct rsk_select_args a = {n, r, w, e};
	int64_t left;
	int rc, spent, k, spin, zero;

	if (n <= 0 || !rsk_pf_sel_has_ours(n, r, w, e)) { /* kernel fds only (or a sleep) */
		zero = tmo != NULL && tmo->tv_sec == 0 && tmo->tv_usec == 0;
		k = n <= 0 ? 0 : rsk_io_kwait_kernel(zero ? 0 : -1);
		rc = RSK_REAL(select)(n, r, w, e, tmo);
		rsk_io_kwait_end(k);
		return rc;
	}
	if ((tmo == NULL || (tmo->tv_sec >= 0 && tmo->tv_usec >= 0 && tmo->tv_usec < 1000000)) &&
	    rsk_pf_select(n, r, w, e, tmo == NULL ? -1 : rsk_us_of(tmo->tv_sec, tmo->tv_usec), NULL,
			  &rc, &left)) {
		if (tmo != NULL) { /* what is left, as Linux's select reports it */
			tmo->tv_sec = (time_t)(left / 1000000);
			tmo->tv_usec = (suseconds_t)(left % 1000000);
		}
		return (int)rsk_ret(rc);
	}
	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_select_shared(n, r, w, e);
	/* select(0, NULL, NULL, NULL, &tv) is a sleep: never spin on it. */
	if (n <= 0)
		return RSK_REAL(select)(n, r, w, e, tmo);
	if (tmo != NULL && tmo->tv_sec == 0 && tmo->tv_usec == 0) {
		(void)rsk_io_kwait_begin(0);
		return RSK_REAL(select)(n, r, w, e, tmo);
	}
	spin = !rsk_pf_sel_has_ours(n, r, w, e) ? 0 : tmo ? rsk_ms_of(tmo->tv_sec, tmo->tv_usec) : -1;
	rc = rsk_io_wait_spin(rsk_select_poll0, &a, spin, &spent); /* kernel fds only: no spin */
	if (rc != 0)
		return rc;
	k = rsk_io_kwait_begin(-1);
	rc = RSK_REAL(select)(n, r, w, e, tmo); /* Linux shortens *tmo; a spin of <1 ms is noise */
	rsk_io_kwait_end(k);
	return rc;
}

/* select() in a process with connections of ours: as rsk_poll_some. */
static __attribute__((noinline)) int rsk_select_some(int n, fd_set *r, fd_set *w, fd_set *e,
						     struct timeval *tmo)
{
	__typeof__(rsk_real.select) fn = __atomic_load_n(&rsk_real.select, __ATOMIC_ACQUIRE);

	if (fn != NULL && !rsk_pf_sel_has_ours(n, r, w, e) && rsk_io_kwait_none())
		return fn(n, r, w, e, tmo);
	return rsk_select_ours(n, r, w, e, tmo);
}

/* The caller's sets, kept to be asked again (a NULL set stays NULL). */
struct rsk_sel_copy {
	fd_set r, w, e;
};

static void rsk_sel_keep(struct rsk_sel_copy *k, const fd_set *r, const fd_set *w, const fd_set *e)
{
	if (r != NULL)
		k->r = *r;
	if (w != NULL)
		k->w = *w;
	if (e != NULL)
		k->e = *e;
}

static void rsk_sel_restore(const struct rsk_sel_copy *k, fd_set *r, fd_set *w, fd_set *e)
{
	if (r != NULL)
		*r = k->r;
	if (w != NULL)
		*w = k->w;
	if (e != NULL)
		*e = k->e;
}

/* select() while a move is under way in this process (see RSK_POLL_SETTLE_ROUNDS). Its
 * timeval is shortened by each round, as Linux's select does: the next round takes it. */
static __attribute__((noinline)) int rsk_select_moving(int n, fd_set *r, fd_set *w, fd_set *e,
						       struct timeval *tmo)
{
	int64_t start = rsk_now_us();
	int64_t total = tmo == NULL ? -1 : rsk_us_of(tmo->tv_sec, tmo->tv_usec);
	struct rsk_sel_copy k;
	int rc, round;

	rsk_sel_keep(&k, r, w, e);
	for (round = 0;; round++) {
		rc = rsk_select_some(n, r, w, e, tmo);
		if (rc <= 0 || round >= RSK_POLL_SETTLE_ROUNDS ||
		    !rsk_pf_sel_settle(n, r, rsk_poll_end_us(total, start), &rc))
			return rc;
		rsk_sel_restore(&k, r, w, e);
	}
}

RSK_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo)
{
	if (rsk_io_none_ours())
		return RSK_REAL(select)(n, r, w, e, tmo);
	if (rsk_unlikely(rsk_upg_any_moving()))
		return rsk_select_moving(n, r, w, e, tmo);
	return rsk_select_some(n, r, w, e, tmo);
}

/* pselect() when this process has connections of ours (or lazy fds): the fast path, the spin. */
static __attribute__((noinline)) int rsk_pselect_ours(int n, fd_set *r, fd_set *w, fd_set *e,
						      const struct timespec *tmo,
						      const sigset_t *mask)
{
	struct rsk_select_args a = {n, r, w, e};
	int rc, spent, k, spin, zero;

	if (n <= 0 || !rsk_pf_sel_has_ours(n, r, w, e)) { /* kernel fds only (or a sleep) */
		zero = tmo != NULL && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
		k = n <= 0 ? 0 : rsk_io_kwait_kernel(zero ? 0 : -1);
		rc = RSK_REAL(pselect)(n, r, w, e, tmo, mask);
		rsk_io_kwait_end(k);
		return rc;
	}
	if ((tmo == NULL ||
	     (tmo->tv_sec >= 0 && tmo->tv_nsec >= 0 && tmo->tv_nsec < 1000000000L)) &&
	    rsk_pf_select(n, r, w, e,
			  tmo == NULL ? -1 : rsk_us_of(tmo->tv_sec, (tmo->tv_nsec + 999) / 1000),
			  mask, &rc, NULL))
		return (int)rsk_ret(rc);
	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_select_shared(n, r, w, e);
	if (n <= 0)
		return RSK_REAL(pselect)(n, r, w, e, tmo, mask);
	if (tmo != NULL && tmo->tv_sec == 0 && tmo->tv_nsec == 0) {
		(void)rsk_io_kwait_begin(0);
		return RSK_REAL(pselect)(n, r, w, e, tmo, mask);
	}
	/* The spin polls without @mask: signals stay as they were outside the wait. */
	spin = !rsk_pf_sel_has_ours(n, r, w, e) ? 0
	       : tmo != NULL ? rsk_ms_of(tmo->tv_sec, tmo->tv_nsec / 1000)
			     : -1;
	rc = rsk_io_wait_spin(rsk_select_poll0, &a, spin, &spent); /* kernel fds only: no spin */
	if (rc != 0)
		return rc;
	k = rsk_io_kwait_begin(-1);
	rc = RSK_REAL(pselect)(n, r, w, e, tmo, mask);
	rsk_io_kwait_end(k);
	return rc;
}

/* pselect() in a process with connections of ours: as rsk_poll_some. */
static __attribute__((noinline)) int rsk_pselect_some(int n, fd_set *r, fd_set *w, fd_set *e,
						      const struct timespec *tmo,
						      const sigset_t *mask)
{
	__typeof__(rsk_real.pselect) fn = __atomic_load_n(&rsk_real.pselect, __ATOMIC_ACQUIRE);

	if (fn != NULL && !rsk_pf_sel_has_ours(n, r, w, e) && rsk_io_kwait_none())
		return fn(n, r, w, e, tmo, mask);
	return rsk_pselect_ours(n, r, w, e, tmo, mask);
}

/* pselect() while a move is under way in this process (see RSK_POLL_SETTLE_ROUNDS). */
static __attribute__((noinline)) int rsk_pselect_moving(int n, fd_set *r, fd_set *w, fd_set *e,
							const struct timespec *tmo,
							const sigset_t *mask)
{
	int64_t start = rsk_now_us(), total = rsk_ts_total_us(tmo);
	struct rsk_sel_copy k;
	struct timespec ts;
	int rc, round;

	rsk_sel_keep(&k, r, w, e);
	for (round = 0;; round++) {
		rc = rsk_pselect_some(n, r, w, e, tmo, mask);
		if (rc <= 0 || round >= RSK_POLL_SETTLE_ROUNDS ||
		    !rsk_pf_sel_settle(n, r, rsk_poll_end_us(total, start), &rc))
			return rc;
		rsk_sel_restore(&k, r, w, e);
		tmo = rsk_ts_next(tmo, total, start, &ts);
	}
}

RSK_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
		       const sigset_t *mask)
{
	if (rsk_io_none_ours())
		return RSK_REAL(pselect)(n, r, w, e, tmo, mask);
	if (rsk_unlikely(rsk_upg_any_moving()))
		return rsk_pselect_moving(n, r, w, e, tmo, mask);
	return rsk_pselect_some(n, r, w, e, tmo, mask);
}

RSK_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

RSK_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
			   const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, tmo, mask);
}
