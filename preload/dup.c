/*
 * dup, dup2, dup3: the new fd names the same socket object as the old one, so the stream is
 * shared exactly as the kernel shares an open file description.
 */
#include <fcntl.h>
#include <unistd.h>

#include "base/fdhide.h"
#include "base/log.h"
#include "base/standin.h"
#include "preload.h"
#include "calls/calls.h"
#include "calls/fastwait.h"
#include "sock/sock.h"

RSK_EXPORT int dup(int fd)
{
	int nfd;

	if (rsk_unlikely(rsk_fw_on()))
		rsk_fw_fd_shared(fd); /* a second number: waits we cannot pair with the mirror */
	nfd = RSK_REAL(dup)(fd);

	if (nfd >= 0 && rsk_fdtab_load(fd) != 0 && !rsk_fd_is_internal(fd))
		(void)rsk_sock_dup(fd, nfd);
	return nfd;
}

/* dup2/dup3 onto @fd2: what the real call will silently close must be released first. */
static int rsk_dup_onto(int fd, int fd2, int flags, int is_dup3)
{
	int rc;

	if (rsk_fd_is_internal(fd2)) {
		errno = EBUSY; /* Linux's own answer when the target number is not usable now */
		return -1;
	}
	if (rsk_unlikely(rsk_fw_on()) && fd != fd2) {
		rsk_fw_fd_shared(fd);
		rsk_fw_fd_gone(fd2);
	}
	if (fd != fd2 && rsk_fdtab_load(fd2) != 0 && RSK_REAL(fcntl)(fd, F_GETFD) >= 0)
		rsk_sock_release_fd(fd2);
	/* stdin/stdout/stderr are stdio's: an inetd-style server, or bash's >&3 on /dev/tcp */
	if (fd2 <= 2 && fd != fd2 && rsk_fdtab_load(fd) != 0 && !rsk_fd_is_internal(fd))
		rsk_life_stdio(fd);
	rc = is_dup3 ? RSK_REAL(dup3)(fd, fd2, flags) : RSK_REAL(dup2)(fd, fd2);
	if (rc >= 0 && fd != fd2 && rsk_fdtab_load(fd) != 0 && !rsk_fd_is_internal(fd))
		(void)rsk_sock_dup(fd, fd2);
	return rc;
}

RSK_EXPORT int dup2(int fd, int fd2)
{
	if (fd != fd2)
		rsk_standin_drop(fd2); /* (before the number is the new file's) */
	if (rsk_likely(rsk_fdtab_load(fd) == 0 && rsk_fdtab_load(fd2) == 0 && !rsk_fw_on()))
		return RSK_REAL(dup2)(fd, fd2);
	return rsk_dup_onto(fd, fd2, 0, 0);
}

RSK_EXPORT int dup3(int fd, int fd2, int flags)
{
	if (fd != fd2)
		rsk_standin_drop(fd2);
	if (rsk_likely(rsk_fdtab_load(fd) == 0 && rsk_fdtab_load(fd2) == 0 && !rsk_fw_on()))
		return RSK_REAL(dup3)(fd, fd2, flags);
	return rsk_dup_onto(fd, fd2, flags, 1);
}
