/*
 * fcntl, fcntl64 and ioctl. They are variadic: the third argument is fetched as one
 * machine word and handed on unchanged, which is how every libc passes int or pointer
 * arguments on the ABIs we build for. F_DUPFD* create fds that must share the socket.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>

#include "calls/io.h"
#include "calls/sockopt.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "preload.h"
#include "calls/calls.h"
#include "calls/fastwait.h"
#include "sock/sock.h"

static int rsk_fcntl_common(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg)
{
	int rc;

	if (rsk_unlikely(rsk_fw_on()) && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		rsk_fw_fd_shared(fd); /* as dup */
	rc = real(fd, cmd, arg);

	if (rc >= 0 && cmd == F_SETFL && rsk_fdtab_is_accel(rsk_fdtab_load(fd)))
		rsk_io_setfl(fd, (int)arg);
	if (rc >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && rsk_fdtab_load(fd) != 0 &&
	    !rsk_fd_is_internal(fd))
		(void)rsk_sock_dup(fd, rc);
	return rc;
}

RSK_EXPORT int fcntl(int fd, int cmd, ...)
{
	unsigned long arg;
	va_list ap;

	va_start(ap, cmd);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	if (rsk_likely(rsk_fdtab_load(fd) == 0 && !rsk_fw_on()))
		return RSK_REAL(fcntl)(fd, cmd, arg);
	return rsk_fcntl_common(RSK_REAL(fcntl), fd, cmd, arg);
}

RSK_EXPORT int fcntl64(int fd, int cmd, ...)
{
	unsigned long arg;
	va_list ap;

	va_start(ap, cmd);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	if (rsk_likely(rsk_fdtab_load(fd) == 0 && !rsk_fw_on()))
		return RSK_REAL(fcntl64)(fd, cmd, arg);
	return rsk_fcntl_common(RSK_REAL(fcntl64), fd, cmd, arg);
}

RSK_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	unsigned long arg;
	va_list ap;

	va_start(ap, req);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	if (rsk_likely(!rsk_fdtab_is_accel(rsk_fdtab_load(fd))))
		return RSK_REAL(ioctl)(fd, req, arg);
	return (int)rsk_ret(rsk_opt_ioctl(fd, req, arg));
}
