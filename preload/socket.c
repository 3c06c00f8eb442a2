/*
 * Socket life-cycle calls: socket, socketpair, bind, listen, accept, accept4, connect,
 * shutdown, getsockopt, setsockopt, getsockname, getpeername. They perform the real call
 * (or hand an accelerated socket to core/io) and tell core/sock what happened; every
 * decision about a socket is made in core.
 */
#include <string.h>
#include <sys/socket.h>

#include "calls/io.h"
#include "calls/sockopt.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "preload.h"
#include "calls/calls.h"
#include "sock/face.h"
#include "sock/sock.h"

/* A tracked socket the application (not the library) is operating on. */
static inline int rsk_tracked(int fd)
{
	return rsk_fdtab_load(fd) != 0 && !rsk_guard && !rsk_fd_is_internal(fd);
}

RSK_EXPORT int socket(int domain, int type, int protocol)
{
	int fd = RSK_REAL(socket)(domain, type, protocol);

	if (fd < 0 || rsk_guard || !rsk_sock_wanted(domain, type))
		return fd;
	rsk_init_ensure();
	(void)rsk_sock_track_made(fd, domain, type); /* untracked = plain kernel socket */
	return fd;
}

RSK_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	return RSK_REAL(socketpair)(domain, type, protocol, sv);
}

RSK_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rc;

	if (rsk_unlikely(rsk_fdtab_is_accel(rsk_fdtab_load(fd)))) {
		errno = EINVAL; /* already bound and connected, as the kernel would say */
		return -1;
	}
	rc = RSK_REAL(bind)(rsk_face_kfd(fd), addr, len);
	if (rc == 0 && rsk_tracked(fd))
		rsk_sock_bind_seen(fd); /* (its connect keeps the address: no bearer) */
	return rc;
}

RSK_EXPORT int listen(int fd, int backlog)
{
	int rc = RSK_REAL(listen)(rsk_face_kfd(fd), backlog);

	if (rc == 0 && rsk_tracked(fd)) {
		rsk_init_ensure();
		rsk_accept_listen_done(fd, backlog);
	}
	return rc;
}

/*
 * The real accept4 for a tracked listener, with the peer's address asked for in the same
 * call (core needs it for every connection; a getpeername after would be one more system
 * call). The application's buffer is used when it gave one, and reported as it asked.
 */
static int rsk_accept_tracked(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sockaddr_storage own;
	socklen_t olen = sizeof(own), in;
	struct sockaddr *a = addr != NULL ? addr : (struct sockaddr *)&own;
	socklen_t *alen = addr != NULL ? len : &olen;
	int nfd = rsk_accept_begin(fd), later;

	if (nfd < 0)
		return (int)rsk_ret(nfd);
	/* A same-host bearer's client (untracked: its number names a unix socket), first or
	 * after TCP's said EAGAIN. */
	nfd = rsk_accept_bearer(fd, addr, len, flags, &later);
	if (nfd != -EAGAIN)
		return (int)rsk_ret(nfd);
	/* (a bad @len is one the kernel would fault on too; NULL: it fails with EFAULT) */
	in = alen != NULL ? *alen : 0;
	/* (a listener's face: its TCP listener, which blocks as the number does) */
	nfd = RSK_REAL(accept4)(rsk_face_kfd(fd), a, alen, flags);
	if (nfd < 0) {
		int e = errno;

		if (later && (e == EAGAIN || e == EWOULDBLOCK) &&
		    (nfd = rsk_accept_bearer_later(fd, addr, len, flags)) != -EAGAIN)
			return (int)rsk_ret(nfd);
		errno = e;
		return -1;
	}
	/* truncated: core asks itself */
	return (int)rsk_ret(rsk_accept_done(fd, nfd, flags, *alen <= in ? a : NULL, *alen));
}

RSK_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	if (rsk_tracked(fd))
		return rsk_accept_tracked(fd, addr, len, flags);
	return RSK_REAL(accept4)(fd, addr, len, flags);
}

RSK_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (rsk_tracked(fd))
		return rsk_accept_tracked(fd, addr, len, 0);
	return RSK_REAL(accept)(fd, addr, len);
}

RSK_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rc, saved;

	if (rsk_unlikely(rsk_fdtab_is_accel(rsk_fdtab_load(fd)))) {
		rsk_connect_again(fd); /* the result of a non-blocking connect, asked for */
		errno = EISCONN;
		return -1;
	}
	if (rsk_unlikely(rsk_face_is(fd)))
		return RSK_REAL(connect)(rsk_face_kfd(fd), addr, len); /* a listener: its errno */
	if (rsk_tracked(fd) && addr != NULL) {
		rsk_init_ensure();
		if (rsk_connect(fd, addr, len, &rc))
			return (int)rsk_ret(rc);
	}
	rc = RSK_REAL(connect)(fd, addr, len);
	saved = errno;
	if (rsk_tracked(fd)) {
		rsk_connect_done(fd, rc < 0 ? -saved : 0);
		errno = saved;
	} else if (rc < 0 && saved == EINVAL && addr != NULL && addr->sa_family != AF_UNIX) {
		errno = -rsk_opt_plain_connect_err(fd, -EINVAL); /* a stand-in, connected */
	}
	return rc;
}

RSK_EXPORT int shutdown(int fd, int how)
{
	if (rsk_likely(!rsk_fdtab_is_data(rsk_fdtab_load(fd))))
		return RSK_REAL(shutdown)(rsk_face_kfd(fd), how); /* (a face's: wakes its accepts) */
	return (int)rsk_ret(rsk_io_shutdown(fd, how));
}

RSK_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int rc;

	if (rsk_unlikely(rsk_fdtab_is_accel(rsk_fdtab_load(fd))))
		return (int)rsk_ret(rsk_opt_get(fd, level, name, val, len));
	rc = (int)rsk_ret(rsk_opt_plain_get(fd, level, name, val, len));
	if (rc == 0 && level == SOL_SOCKET && name == SO_ERROR && val != NULL && len != NULL &&
	    *len >= (socklen_t)sizeof(int) && rsk_tracked(fd)) {
		int err;

		memcpy(&err, val, sizeof(err)); /* only what the kernel wrote: no over-read */
		rsk_connect_so_error(fd, err);
	}
	return rc;
}

RSK_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (rsk_likely(!rsk_fdtab_is_accel(rsk_fdtab_load(fd))))
		return (int)rsk_ret(rsk_opt_plain_set(fd, level, name, val, len));
	return (int)rsk_ret(rsk_opt_set(fd, level, name, val, len));
}

RSK_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (rsk_likely(!rsk_fdtab_is_accel(rsk_fdtab_load(fd))))
		return (int)rsk_ret(rsk_opt_plain_name(fd, addr, len, 0));
	return (int)rsk_ret(rsk_opt_sockname(fd, addr, len));
}

RSK_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (rsk_likely(!rsk_fdtab_is_accel(rsk_fdtab_load(fd))))
		return (int)rsk_ret(rsk_opt_plain_name(fd, addr, len, 1));
	return (int)rsk_ret(rsk_opt_peername(fd, addr, len));
}
