/*
 * The system calls core/ makes, as liburing's __sys_* do: each goes through the resolved real
 * table (never an interposed name, which would re-enter our own wrappers in the .so) and
 * returns >= 0 or -errno, so no caller repeats "if (rc < 0) return -errno".
 */
#ifndef RSK_BASE_SYS_H
#define RSK_BASE_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

#include "real.h"

/* @rc is what libc returned (-1 with errno on failure). */
static inline long rsk_sys_ret(long rc)
{
	return rc < 0 ? -errno : rc;
}

/* A futex on a shared word (another process may wait or wake on it): FUTEX_WAIT/WAKE. */
static inline int rsk_sys_futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return (int)rsk_sys_ret(RSK_REAL(syscall)(SYS_futex, word, op, val, ts, NULL, 0));
}

static inline int rsk_sys_socket(int domain, int type, int protocol)
{
	return (int)rsk_sys_ret(RSK_REAL(socket)(domain, type, protocol));
}

static inline int rsk_sys_socketpair(int domain, int type, int protocol, int sv[2])
{
	return (int)rsk_sys_ret(RSK_REAL(socketpair)(domain, type, protocol, sv));
}

static inline int rsk_sys_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	return (int)rsk_sys_ret(RSK_REAL(bind)(fd, addr, len));
}

static inline int rsk_sys_listen(int fd, int backlog)
{
	return (int)rsk_sys_ret(RSK_REAL(listen)(fd, backlog));
}

static inline int rsk_sys_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	return (int)rsk_sys_ret(RSK_REAL(accept4)(fd, addr, len, flags));
}

static inline int rsk_sys_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	return (int)rsk_sys_ret(RSK_REAL(connect)(fd, addr, len));
}

static inline int rsk_sys_close(int fd)
{
	return (int)rsk_sys_ret(RSK_REAL(close)(fd));
}

static inline int rsk_sys_shutdown(int fd, int how)
{
	return (int)rsk_sys_ret(RSK_REAL(shutdown)(fd, how));
}

static inline ssize_t rsk_sys_read(int fd, void *buf, size_t n)
{
	return rsk_sys_ret(RSK_REAL(read)(fd, buf, n));
}

static inline ssize_t rsk_sys_write(int fd, const void *buf, size_t n)
{
	return rsk_sys_ret(RSK_REAL(write)(fd, buf, n));
}

static inline ssize_t rsk_sys_send(int fd, const void *buf, size_t n, int flags)
{
	return rsk_sys_ret(RSK_REAL(send)(fd, buf, n, flags));
}

static inline ssize_t rsk_sys_recv(int fd, void *buf, size_t n, int flags)
{
	return rsk_sys_ret(RSK_REAL(recv)(fd, buf, n, flags));
}

static inline ssize_t rsk_sys_sendfile(int out, int in, off_t *off, size_t n)
{
	return rsk_sys_ret(RSK_REAL(sendfile)(out, in, off, n));
}

static inline ssize_t rsk_sys_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return rsk_sys_ret(RSK_REAL(sendmsg)(fd, msg, flags));
}

static inline ssize_t rsk_sys_recvmsg(int fd, struct msghdr *msg, int flags)
{
	return rsk_sys_ret(RSK_REAL(recvmsg)(fd, msg, flags));
}

static inline int rsk_sys_poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return (int)rsk_sys_ret(RSK_REAL(poll)(fds, n, timeout));
}

static inline int rsk_sys_epoll_create1(int flags)
{
	return (int)rsk_sys_ret(RSK_REAL(epoll_create1)(flags));
}

static inline int rsk_sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return (int)rsk_sys_ret(RSK_REAL(epoll_ctl)(epfd, op, fd, ev));
}

static inline int rsk_sys_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	return (int)rsk_sys_ret(RSK_REAL(epoll_wait)(epfd, ev, max, timeout));
}

/* fcntl with an integer argument (F_GETFL/F_SETFL/F_GETFD/F_SETFD/F_DUPFD*, seals). */
static inline int rsk_sys_fcntl(int fd, int cmd, long arg)
{
	return (int)rsk_sys_ret(RSK_REAL(fcntl)(fd, cmd, arg));
}

/* Add @flags (O_NONBLOCK, ...) to @fd's file status flags. */
static inline int rsk_sys_set_fl(int fd, int flags)
{
	int fl = rsk_sys_fcntl(fd, F_GETFL, 0);

	return fl < 0 ? fl : rsk_sys_fcntl(fd, F_SETFL, fl | flags);
}

static inline int rsk_sys_ioctl(int fd, unsigned long req, unsigned long arg)
{
	return (int)rsk_sys_ret(RSK_REAL(ioctl)(fd, req, arg));
}

static inline int rsk_sys_dup3(int fd, int fd2, int flags)
{
	return (int)rsk_sys_ret(RSK_REAL(dup3)(fd, fd2, flags));
}

static inline int rsk_sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	return (int)rsk_sys_ret(RSK_REAL(getsockopt)(fd, level, name, val, len));
}

static inline int rsk_sys_setsockopt(int fd, int level, int name, const void *val,
				     socklen_t len)
{
	return (int)rsk_sys_ret(RSK_REAL(setsockopt)(fd, level, name, val, len));
}

/* An int-valued socket option. */
static inline int rsk_sys_setsockopt_int(int fd, int level, int name, int v)
{
	return rsk_sys_setsockopt(fd, level, name, &v, sizeof(v));
}

static inline int rsk_sys_getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	return (int)rsk_sys_ret(RSK_REAL(getsockname)(fd, addr, len));
}

static inline int rsk_sys_getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	return (int)rsk_sys_ret(RSK_REAL(getpeername)(fd, addr, len));
}

#endif
