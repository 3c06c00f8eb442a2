/*
 * Readiness socketpair operations (see ready.h). Every call is non-blocking and costs one
 * or two syscalls; callers invoke them only on state transitions (arm/kick protocol in the
 * stream engine), never per byte.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>
#include <unistd.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "ready.h"
#include "sys.h"

#define RSK_APP_END_PREFIX "rsk1/a/"

/* Name the app end so a later program image (after exec) can recognise it (see below). */
static void rsk_ready_mark(int fd)
{
	static unsigned int seq;
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	int n;

	n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, RSK_APP_END_PREFIX "%d/%u",
		     (int)getpid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	(void)rsk_sys_bind(fd, (struct sockaddr *)&un,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n));
}

int rsk_ready_pair(int *app, int *ctl)
{
	int sv[2], small = 1; /* the kernel rounds up to its minimum */

	int rc = rsk_sys_socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);

	if (rc < 0)
		return rc;
	rsk_ready_mark(sv[0]);
	/* A small send buffer on the app end: a single write fills it (rsk_ready_block). */
	(void)rsk_sys_setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	*app = sv[0];
	*ctl = sv[1];
	return 0;
}

void rsk_ready_raise(int ctl)
{
	char token = 'r';

	(void)rsk_sys_send(ctl, &token, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void rsk_ready_lower(int app, void (*on_fd)(int fd, void *arg), void *arg)
{
	char buf[256];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr msg;
	struct cmsghdr *c;
	ssize_t n;
	int i, nfds, fds[4];

	do {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf.space;
		msg.msg_controllen = sizeof(cbuf.space);
		n = rsk_sys_recvmsg(app, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		for (c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; c != NULL; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)nfds);
			for (i = 0; i < nfds; i++) {
				if (on_fd != NULL)
					on_fd(fds[i], arg);
				else
					(void)rsk_sys_close(fds[i]);
			}
		}
	} while (n == (ssize_t)sizeof(buf));
}

int rsk_ready_take(int app, int n)
{
	struct pollfd p = {.fd = app, .events = POLLIN};
	char buf[256];
	int got = 0, tries = 0;
	ssize_t r;

	while (got < n && tries < 20) {
		r = rsk_sys_recv(app, buf, (size_t)(n - got) < sizeof(buf) ? (size_t)(n - got)
								  : sizeof(buf),
				 MSG_DONTWAIT);
		if (r > 0) {
			got += (int)r;
			continue;
		}
		if (r == 0 || (r != -EAGAIN && r != -EINTR))
			break; /* EOF (peer end shut) or error: nothing more will come */
		tries++;
		(void)rsk_sys_poll(&p, 1, 1);
	}
	return got;
}

void rsk_ready_block(int app)
{
	static const char fill[4096];
	int i;

	/* Bounded: the send buffer is a few KiB; a handful of writes always fill it. */
	for (i = 0; i < 64; i++)
		if (rsk_sys_send(app, fill, sizeof(fill), MSG_DONTWAIT | MSG_NOSIGNAL) <= 0)
			break;
}

void rsk_ready_unblock(int ctl)
{
	char buf[4096];
	int i;

	for (i = 0; i < 64; i++)
		if (rsk_sys_recv(ctl, buf, sizeof(buf), MSG_DONTWAIT) < (ssize_t)sizeof(buf))
			break;
}

void rsk_ready_eof(int ctl)
{
	(void)rsk_sys_shutdown(ctl, SHUT_WR);
}

void rsk_ready_hup(int ctl)
{
	rsk_ready_unblock(ctl);
	(void)rsk_sys_shutdown(ctl, SHUT_RDWR);
}

/* Is @fd the app end of an accelerated socket (of any process image)? */
static int rsk_ready_is_app_end(int fd)
{
	struct sockaddr_un un;
	socklen_t len = sizeof(un);
	size_t plen = sizeof(RSK_APP_END_PREFIX) - 1;

	if (rsk_sys_getsockname(fd, (struct sockaddr *)&un, &len) < 0 || un.sun_family != AF_UNIX)
		return 0;
	return len > offsetof(struct sockaddr_un, sun_path) + plen && un.sun_path[0] == '\0' &&
	       memcmp(un.sun_path + 1, RSK_APP_END_PREFIX, plen) == 0;
}

int rsk_ready_sweep_stale(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int fd, sv[2], n = 0;

	if (d == NULL)
		return 0;
	while ((de = readdir(d)) != NULL) {
		fd = atoi(de->d_name);
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(d) ||
		    !rsk_ready_is_app_end(fd))
			continue;
		/* The library state behind it died with the old image: make the number a socket
		 * whose peer is gone (reads see EOF, writes EPIPE) instead of leaking tokens. */
		if (rsk_sys_socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
			continue;
		(void)rsk_sys_close(sv[1]);
		if (rsk_sys_dup3(sv[0], fd, (rsk_sys_fcntl(fd, F_GETFD, 0) & FD_CLOEXEC) ? O_CLOEXEC : 0) >= 0)
			n++;
		(void)rsk_sys_close(sv[0]);
	}
	closedir(d);
	return n;
}
