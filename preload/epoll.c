/*
 * epoll family: epoll_create, epoll_create1, epoll_ctl, epoll_wait, epoll_pwait,
 * epoll_pwait2. The application's epoll set holds the real kernel objects behind its fds, so
 * level/edge/oneshot/exclusive and nested epoll keep the kernel's exact semantics.
 */
#include <sys/epoll.h>

#include "preload.h"
#include "sock.h"

RSK_EXPORT int epoll_create(int size)
{
	return RSK_REAL(epoll_create)(size);
}

RSK_EXPORT int epoll_create1(int flags)
{
	return RSK_REAL(epoll_create1)(flags);
}

RSK_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	uintptr_t v = rsk_fdtab_load(fd);
	int rc = RSK_REAL(epoll_ctl)(epfd, op, fd, ev);

	/* A socket not yet connected may still get a new file behind its number (see sock.h):
	 * remember where it was registered so the registration can follow it. */
	if (rsk_unlikely(v != 0) && rc == 0 && !rsk_fdtab_is_accel(v))
		rsk_sock_epoll_note(epfd, op, fd, ev);
	return rc;
}

RSK_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	return RSK_REAL(epoll_wait)(epfd, ev, max, timeout);
}

RSK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			   const sigset_t *mask)
{
	return RSK_REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
}

RSK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max,
			    const struct timespec *tmo, const sigset_t *mask)
{
	return RSK_REAL(epoll_pwait2)(epfd, ev, max, tmo, mask);
}
