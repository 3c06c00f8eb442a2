/*
 * Send family: write, writev, send, sendto, sendmsg, sendmmsg, and the file-to-socket calls
 * sendfile, sendfile64 and splice. Kernel fds pass straight through; accelerated sockets map
 * onto one core send call.
 */
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "calls/calls.h"
#include "calls/sockopt.h"
#include "sock/face.h"
#include "calls/io.h"
#include "preload.h"

static ssize_t rsk_write_iov(int fd, const struct iovec *iov, int cnt, int flags)
{
	struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};

	return rsk_ret(rsk_io_sendmsg(fd, &msg, flags));
}

/* The accelerated path of the single-buffer calls, out of line so that the pass-through
 * path of write/send/sendto needs no stack frame. */
static __attribute__((noinline)) ssize_t rsk_write_one(int fd, const void *buf, size_t n,
						       int flags)
{
	struct iovec iov = {(void *)buf, n};
	ssize_t rc;

	if (rsk_io_tcp_one(fd, (void *)buf, n, flags, 0, &rc))
		return rsk_ret(rc);
	return rsk_write_iov(fd, &iov, 1, flags);
}

RSK_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	RSK_PASS_UNLESS_ACCEL(fd, write, fd, buf, n);
	return rsk_write_one(fd, buf, n, 0);
}

RSK_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	RSK_PASS_UNLESS_ACCEL(fd, writev, fd, iov, cnt);
	return rsk_write_iov(fd, iov, cnt, 0);
}

RSK_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	RSK_PASS_UNLESS_ACCEL(fd, send, fd, buf, n, flags);
	return rsk_write_one(fd, buf, n, flags);
}

/* A send with an address that a stand-in refused (a bearer connection's unix socket says
 * EISCONN where a connected TCP socket ignores the address): again without it. Else -1 with
 * errno as it was. */
static __attribute__((noinline)) ssize_t rsk_send_unnamed(int fd, const struct msghdr *msg,
							  int flags)
{
	struct msghdr m;

	if (!rsk_opt_plain_is_standin(fd)) {
		errno = EISCONN;
		return -1;
	}
	m = *msg;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return RSK_REAL(sendmsg)(fd, &m, flags);
}

/* sendmsg on @fd, accelerated or not (a stand-in's EISCONN for an address answered as TCP's). */
static inline ssize_t rsk_sendmsg_any(int fd, const struct msghdr *msg, int flags)
{
	if (rsk_likely(!rsk_fdtab_is_data(rsk_fdtab_load(fd)))) {
		ssize_t rc = RSK_REAL(sendmsg)(fd, msg, flags);

		if (rsk_unlikely(rc < 0 && msg != NULL && msg->msg_name != NULL && errno == EISCONN))
			return rsk_send_unnamed(fd, msg, flags);
		return rc;
	}
	return rsk_ret(rsk_io_sendmsg(fd, msg, flags));
}

RSK_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
			  socklen_t alen)
{
	ssize_t rc;

	if (rsk_likely(!rsk_fdtab_is_data(rsk_fdtab_load(fd)))) {
		rc = RSK_REAL(sendto)(fd, buf, n, flags, addr, alen);
		if (rsk_unlikely(rc < 0 && addr != NULL && errno == EISCONN)) {
			struct iovec iov = {(void *)buf, n};
			struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

			return rsk_send_unnamed(fd, &m, flags);
		}
		return rc;
	}
	/* A connected stream ignores the address, as TCP does (EISCONN only for other types). */
	return rsk_write_one(fd, buf, n, flags);
}

/* fds passed while listeners have faces: a face passed on gives the receiver its TCP
 * listener (sock/face.h). */
static __attribute__((noinline)) ssize_t rsk_sendmsg_faces(int fd, const struct msghdr *msg,
							   int flags)
{
	struct msghdr m;
	char cm[1024];

	if (rsk_face_msg(msg, &m, cm, sizeof(cm)))
		msg = &m;
	return rsk_sendmsg_any(fd, msg, flags);
}

RSK_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	/* SCM_RIGHTS: another process may wait or accept on what it names */
	if (rsk_unlikely(msg != NULL && msg->msg_controllen != 0)) {
		rsk_life_fds_passed(msg);
		if (rsk_face_live)
			return rsk_sendmsg_faces(fd, msg, flags);
	}
	return rsk_sendmsg_any(fd, msg, flags);
}

RSK_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	unsigned int i;
	ssize_t rc;

	for (i = 0; vec != NULL && i < vlen; i++)
		if (rsk_unlikely(vec[i].msg_hdr.msg_controllen != 0))
			rsk_life_fds_passed(&vec[i].msg_hdr);
	RSK_PASS_UNLESS_ACCEL(fd, sendmmsg, fd, vec, vlen, flags);
	for (i = 0; i < vlen; i++) {
		rc = rsk_io_sendmsg(fd, &vec[i].msg_hdr, flags);
		if (rc < 0) {
			if (i > 0)
				break;
			return (int)rsk_ret(rc);
		}
		vec[i].msg_len = (unsigned int)rc;
	}
	return (int)i;
}

RSK_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	RSK_PASS_UNLESS_ACCEL(out, sendfile, out, in, off, n);
	return rsk_ret(rsk_io_sendfile(out, in, off, n));
}

RSK_EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n)
{
	RSK_PASS_UNLESS_ACCEL(out, sendfile64, out, in, off, n);
	return rsk_ret(rsk_io_sendfile(out, in, (off_t *)off, n));
}

RSK_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n,
			  unsigned int flags)
{
	if (rsk_likely(!rsk_fdtab_is_accel(rsk_fdtab_load(in)) &&
		       !rsk_fdtab_is_accel(rsk_fdtab_load(out))))
		return RSK_REAL(splice)(in, off_in, out, off_out, n, flags);
	if (rsk_fdtab_is_accel(rsk_fdtab_load(out)))
		return rsk_ret(rsk_io_splice_to(in, off_in, out, n, flags));
	return rsk_ret(rsk_io_splice_from(in, out, off_out, n));
}
