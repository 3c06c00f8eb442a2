/*
 * Readiness waits without epoll: poll, ppoll, select, pselect and the fortify variants
 * __poll_chk, __ppoll_chk. The fds the application waits on are real kernel objects whose
 * readiness the library keeps true, so these go to the kernel; poll (like epoll_wait) first
 * spins briefly when this process has accelerated connections (see rsk_io_wait_spin).
 */
#include <poll.h>
#include <sys/select.h>

#include "io.h"
#include "preload.h"

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

RSK_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct rsk_poll_args a = {fds, n};
	int rc, spent;

	rc = rsk_io_wait_spin(rsk_poll_poll0, &a, timeout, &spent);
	if (rc != 0)
		return rc;
	if (timeout > 0)
		timeout = timeout > spent ? timeout - spent : 0;
	return RSK_REAL(poll)(fds, n, timeout);
}

RSK_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
		     const sigset_t *mask)
{
	return RSK_REAL(ppoll)(fds, n, tmo, mask);
}

RSK_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo)
{
	return RSK_REAL(select)(n, r, w, e, tmo);
}

RSK_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
		       const sigset_t *mask)
{
	return RSK_REAL(pselect)(n, r, w, e, tmo, mask);
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
