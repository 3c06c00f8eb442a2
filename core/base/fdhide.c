/*
 * The library's own fds, kept out of the application's way: moved above the numbers it is
 * likely to use, close-on-exec, and marked internal in the fd table so that the application
 * cannot close them by accident (close() on one fails with EBADF, as for a closed fd).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>

#include "fdhide.h"
#include "fdtab.h"
#include "sys.h"

/* Internal fds carry this marker in the fd table; tagged kernel, so data calls pass through. */
static char rsk_internal_marker __attribute__((aligned(8)));
#define RSK_INTERNAL_SLOT ((uintptr_t)&rsk_internal_marker | RSK_FDTAB_TAG_KERNEL)

static int rsk_fd_hide_base(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > 65536)
		return 32768;
	if (rl.rlim_cur >= 512)
		return (int)rl.rlim_cur - 256;
	return (int)rl.rlim_cur / 2;
}

int rsk_fd_hide(int fd)
{
	int nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, rsk_fd_hide_base());

	if (nfd < 0) /* No room up there: keep the original number rather than fail. */
		nfd = fd;
	else
		(void)rsk_sys_close(fd);
	(void)rsk_sys_fcntl(nfd, F_SETFD, FD_CLOEXEC);
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		(void)rsk_sys_close(nfd);
		return -EMFILE;
	}
	return nfd;
}

int rsk_fd_hide_dup(int fd)
{
	int nfd = rsk_sys_fcntl(fd, F_DUPFD_CLOEXEC, rsk_fd_hide_base());

	if (nfd < 0)
		return nfd;
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		(void)rsk_sys_close(nfd);
		return -EMFILE;
	}
	return nfd;
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
