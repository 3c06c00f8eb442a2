/*
 * close and close_range. A closed socket's fd slot is released (and its connection
 * accounted) before the real close, because afterwards the number may already belong to a
 * new file. The library's own fds are not the application's to close.
 */
#include <linux/close_range.h>
#include <unistd.h>

#include "base/fdhide.h"
#include "base/log.h"
#include "base/standin.h"
#include "preload.h"
#include "calls/calls.h"
#include "calls/fastwait.h"
#include "sock/sock.h"

RSK_EXPORT int close(int fd)
{
	rsk_standin_drop(fd); /* a bearer's stand-in is not tracked, only noted */
	if (rsk_likely(rsk_fdtab_load(fd) == 0)) {
		if (rsk_unlikely(rsk_fw_on()))
			rsk_fw_fd_gone(fd); /* an epoll set's mirror */
		return RSK_REAL(close)(fd);
	}
	if (rsk_fd_is_internal(fd)) {
		errno = EBADF; /* as if it were not open: the application never opened it */
		return -1;
	}
	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_fd_gone(fd); /* out of every mirror before its connection can go */
	rsk_sock_release_fd(fd);
	return RSK_REAL(close)(fd);
}

struct rsk_close_range {
	unsigned int next; /* first fd not yet closed */
	unsigned int last;
	int flags;
	int rc;
};

/* Close [cr->next, fd) for real, skip the internal @fd, release tracked sockets on the way. */
static int rsk_close_range_step(int fd, uintptr_t v, void *arg)
{
	struct rsk_close_range *cr = arg;

	(void)v;
	if (!rsk_fd_is_internal(fd)) {
		if (!(cr->flags & CLOSE_RANGE_CLOEXEC)) {
			if (rsk_unlikely(rsk_fw_on()))
				rsk_fw_fd_gone(fd);
			rsk_sock_release_fd(fd);
		}
		return 0;
	}
	if ((unsigned int)fd > cr->next &&
	    RSK_REAL(close_range)(cr->next, (unsigned int)fd - 1, cr->flags) < 0)
		cr->rc = -errno;
	cr->next = (unsigned int)fd + 1;
	return 0;
}

RSK_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	struct rsk_close_range cr = {.next = first, .last = last, .flags = flags};

	/* Invalid requests fail before anything is released: the sockets stay open then. */
	if (first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE))) {
		errno = EINVAL;
		return -1;
	}
	if (rsk_unlikely(rsk_fw_on()) && !(flags & CLOSE_RANGE_CLOEXEC))
		rsk_fw_range_gone(first, last);
	if (!(flags & CLOSE_RANGE_CLOEXEC))
		rsk_standin_drop_range(first, last);
	rsk_fdtab_walk(first, last, rsk_close_range_step, &cr);
	if (cr.next <= last && cr.next >= first &&
	    RSK_REAL(close_range)(cr.next, last, flags) < 0)
		cr.rc = -errno;
	return (int)rsk_ret(cr.rc);
}
