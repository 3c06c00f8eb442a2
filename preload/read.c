/*
 * Receive family: read, readv, recv, recvfrom, recvmsg, recvmmsg and the fortify variants
 * glibc exports (__read_chk, __recv_chk, __recvfrom_chk). Kernel fds pass straight through;
 * accelerated sockets map onto one core receive call.
 */
#include <string.h>
#include <sys/socket.h>

#include "calls/io.h"
#include "preload.h"

/* glibc's fortify failure: what the same call would do without us (it never returns). */
extern void __chk_fail(void) __attribute__((noreturn));

static ssize_t rsk_read_iov(int fd, struct iovec *iov, int cnt, int flags, struct sockaddr *addr,
			    socklen_t *alen)
{
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
	ssize_t rc;

	rc = rsk_io_recvmsg(fd, &msg, flags);
	if (rc >= 0 && alen != NULL && addr != NULL)
		*alen = 0; /* stream sockets report no source address, as TCP does */
	return rsk_ret(rc);
}

/* The accelerated path of the single-buffer calls, out of line so that the pass-through
 * path of read/recv/recvfrom needs no stack frame. */
static __attribute__((noinline)) ssize_t rsk_read_one(int fd, void *buf, size_t n, int flags,
						      struct sockaddr *addr, socklen_t *alen)
{
	struct iovec iov = {buf, n};
	ssize_t rc;

	if (rsk_io_tcp_one(fd, buf, n, flags, 1, &rc)) {
		if (rc >= 0 && alen != NULL && addr != NULL)
			*alen = 0; /* as rsk_read_iov */
		return rsk_ret(rc);
	}
	return rsk_read_iov(fd, &iov, 1, flags, addr, alen);
}

RSK_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	RSK_PASS_UNLESS_ACCEL(fd, read, fd, buf, n);
	return rsk_read_one(fd, buf, n, 0, NULL, NULL);
}

RSK_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	RSK_PASS_UNLESS_ACCEL(fd, readv, fd, iov, cnt);
	return rsk_read_iov(fd, (struct iovec *)iov, cnt, 0, NULL, NULL);
}

RSK_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	RSK_PASS_UNLESS_ACCEL(fd, recv, fd, buf, n, flags);
	return rsk_read_one(fd, buf, n, flags, NULL, NULL);
}

RSK_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
			    socklen_t *alen)
{
	RSK_PASS_UNLESS_ACCEL(fd, recvfrom, fd, buf, n, flags, addr, alen);
	return rsk_read_one(fd, buf, n, flags, addr, alen);
}

RSK_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	RSK_PASS_UNLESS_ACCEL(fd, recvmsg, fd, msg, flags);
	return rsk_ret(rsk_io_recvmsg(fd, msg, flags));
}

RSK_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			struct timespec *tmo)
{
	unsigned int i;
	ssize_t rc;

	RSK_PASS_UNLESS_ACCEL(fd, recvmmsg, fd, vec, vlen, flags, tmo);
	/* A stream has no message boundaries: fill the first header, then take only what is
	 * already there for the rest (MSG_WAITFORONE semantics after the first). */
	for (i = 0; i < vlen; i++) {
		rc = rsk_io_recvmsg(fd, &vec[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags);
		if (rc < 0) {
			if (i > 0)
				break;
			return (int)rsk_ret(rc);
		}
		vec[i].msg_len = (unsigned int)rc;
		if (rc == 0)
			return (int)i + 1;
	}
	return (int)i;
}

RSK_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	RSK_PASS_UNLESS_ACCEL(fd, __read_chk, fd, buf, n, buflen);
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}

RSK_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	RSK_PASS_UNLESS_ACCEL(fd, __recv_chk, fd, buf, n, buflen, flags);
	if (n > buflen)
		__chk_fail();
	return recv(fd, buf, n, flags);
}

RSK_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
				  struct sockaddr *addr, socklen_t *alen)
{
	RSK_PASS_UNLESS_ACCEL(fd, __recvfrom_chk, fd, buf, n, buflen, flags, addr, alen);
	if (n > buflen)
		__chk_fail();
	return recvfrom(fd, buf, n, flags, addr, alen);
}
