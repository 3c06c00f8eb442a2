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
#include "sock/face.h"
#include "sock/sock.h"

static int rsk_fcntl_common(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg)
{
	int kfd = rsk_face_kfd(fd), to = RSK_FACE_TO_NUMBER, rc;
	uintptr_t v;

	if (rsk_unlikely(kfd != fd) && (to = rsk_face_fcntl_to(cmd)) == RSK_FACE_TO_LISTENER)
		return real(kfd, cmd, arg);
	if (rsk_unlikely(rsk_fw_on()) && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		rsk_fw_fd_shared(fd); /* as dup */
	rc = real(fd, cmd, arg);
	if (rsk_unlikely(to == RSK_FACE_TO_BOTH) && rc >= 0) {
		(void)real(kfd, cmd, arg);
		rsk_face_flags_changed(fd);
	}

	if (rc < 0 || (v = rsk_fdtab_load(fd)) == 0)
		return rc;
	if (cmd == F_SETFL && rsk_fdtab_is_accel(v))
		rsk_io_setfl(fd, (int)arg);
	else if ((cmd == F_SETFL || cmd == F_SETFD) && !rsk_fd_is_internal(fd))
		rsk_sock_fl_seen(fd, cmd, arg); /* (a connect need not ask them) */
	else if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !rsk_fd_is_internal(fd))
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

/* An ioctl on a listener's face: the number's, its TCP listener's, or both (face.h). */
static int rsk_ioctl_face(int fd, unsigned long req, unsigned long arg)
{
	enum rsk_face_to to = rsk_face_ioctl_to(req);
	int rc;

	if (to == RSK_FACE_TO_LISTENER)
		return RSK_REAL(ioctl)(rsk_face_kfd(fd), req, arg);
	rc = RSK_REAL(ioctl)(fd, req, arg);
	if (rc == 0 && to == RSK_FACE_TO_BOTH) {
		(void)RSK_REAL(ioctl)(rsk_face_kfd(fd), req, arg);
		rsk_face_flags_changed(fd);
	}
	return rc;
}

RSK_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	unsigned long arg;
	va_list ap;
	uintptr_t v;
	int rc;

	va_start(ap, req);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	if (rsk_unlikely(rsk_face_is(fd)))
		return rsk_ioctl_face(fd, req, arg);
	if (rsk_likely(!rsk_fdtab_is_accel(v = rsk_fdtab_load(fd)))) {
		rc = RSK_REAL(ioctl)(fd, req, arg);
		if (rsk_unlikely(req == FIONBIO) && v != 0 && rc == 0 && !rsk_fd_is_internal(fd))
			rsk_sock_fl_seen(fd, 0, 0); /* O_NONBLOCK changed: not known any more */
		return rc;
	}
	return (int)rsk_ret(rsk_opt_ioctl(fd, req, arg));
}
