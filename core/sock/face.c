/*
 * A listening socket's face: an epoll set on the application's number, the TCP listener
 * hidden behind it (see face.h). Made at listen() when RDMASOCK_BEARER asks for it, put back
 * before an exec (for the numbers the new image inherits) and for good when the process sets
 * up io_uring. The socket object keeps the hidden fd (face_fd) and closes it with the last
 * number (sock.c); this file only makes and unmakes faces.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include "base/config.h"
#include "base/log.h"
#include "base/stats.h"
#include "base/sys.h"
#include "bearer.h"
#include "face.h"

int rsk_face_live;
static int rsk_face_never; /* io_uring: no more faces */

int rsk_face_allowed(void)
{
	/* (by default not in a process confined to verbs: none of its clients takes the
	 * same-host bearer, so a face would only cost its listener an empty look per accept) */
	return rsk_config.bearer != RSK_BEARER_NONE &&
	       !(rsk_config.bearer == RSK_BEARER_AUTO && rsk_config.mode == RSK_MODE_VERBS) &&
	       !__atomic_load_n(&rsk_face_never, __ATOMIC_RELAXED);
}

/* The epoll set of a face: holding hidden listener @h, blocking as @fd's file is (the two
 * keep the same flags from now on: rsk_face_fcntl_to). */
static int rsk_face_set(int fd, int h)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = h};
	int ep = rsk_sys_epoll_create1(EPOLL_CLOEXEC), fl, rc;

	if (ep < 0)
		return ep;
	fl = rsk_sys_fcntl(fd, F_GETFL, 0);
	rc = fl < 0 ? fl : rsk_sys_epoll_ctl(ep, EPOLL_CTL_ADD, h, &ev);
	if (rc == 0 && (fl & O_NONBLOCK))
		rc = rsk_sys_fcntl(ep, F_SETFL, O_NONBLOCK);
	if (rc < 0) {
		(void)rsk_sys_close(ep);
		return rc;
	}
	return ep;
}

int rsk_face_open(struct rsk_sock *s, int fd)
{
	int h, ep, fdfl, rc;

	if (s->face_fd != 0)
		return 0;
	if (!rsk_face_allowed())
		return -EPERM;
	fdfl = rsk_sys_fcntl(fd, F_GETFD, 0);
	if (fdfl < 0)
		return fdfl;
	if ((h = rsk_fd_hide_dup(fd)) < 0)
		return h;
	if ((ep = rsk_face_set(fd, h)) < 0) {
		rsk_fd_unhide_close(h);
		return ep;
	}
	rc = rsk_sys_dup3(ep, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
	(void)rsk_sys_close(ep);
	if (rc < 0) {
		rsk_fd_unhide_close(h);
		return rc;
	}
	s->face_fd = h + 1;
	__atomic_store_n(&s->face_on, h + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rsk_face_live, 1, __ATOMIC_RELEASE);
	rsk_counter_add(&rsk_stats.listener_faces, 1);
	rsk_dbg("fd %d: listening through a face (TCP listener at %d)", fd, h);
	return 0;
}

void rsk_face_flags_changed(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	__atomic_store_n(&s->face_nb, 0, __ATOMIC_RELEASE);
	rsk_sock_put(s);
}

struct rsk_face_walk {
	int inherit_only; /* an exec: only numbers the new image keeps, and no epoll change */
	int changed;
};

static int rsk_face_put_back(int fd, uintptr_t v, void *arg)
{
	struct rsk_face_walk *w = arg;
	struct rsk_sock *s = rsk_sock_kernel_of(v);
	int h, fdfl;

	if (s == NULL || (h = __atomic_load_n(&s->face_on, __ATOMIC_ACQUIRE)) == 0)
		return 0;
	fdfl = rsk_sys_fcntl(fd, F_GETFD, 0);
	if (fdfl < 0 || (w->inherit_only && (fdfl & FD_CLOEXEC)))
		return 0; /* gone meanwhile; or an exec closes it anyway */
	if (rsk_sys_dup3(h - 1, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
		return 0;
	w->changed++;
	if (!w->inherit_only) /* the application's sets held the face: now its TCP listener */
		rsk_sock_epreg_replay(s, fd);
	return 0;
}

static int rsk_face_off(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s = rsk_sock_kernel_of(v);

	(void)fd;
	(void)arg;
	if (s == NULL)
		return 0;
	__atomic_store_n(&s->face_on, 0, __ATOMIC_RELEASE);
	rsk_bearer_shut(s); /* waits on the number no longer see its clients */
	return 0;
}

int rsk_face_restore_all(int forever)
{
	struct rsk_face_walk w = {.inherit_only = !forever};

	if (forever)
		__atomic_store_n(&rsk_face_never, 1, __ATOMIC_RELAXED);
	if (!__atomic_load_n(&rsk_face_live, __ATOMIC_ACQUIRE))
		return 0;
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_face_put_back, &w);
	/* An exec that fails leaves the numbers it kept on the TCP listener itself, the very
	 * file the face routed to: nothing to undo, so the faces stay noted as they were (a
	 * vfork child shares this memory with its parent, whose faces stand). */
	if (forever) {
		rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_face_off, NULL);
		__atomic_store_n(&rsk_face_live, 0, __ATOMIC_RELEASE);
	}
	return w.changed;
}

int rsk_face_msg(const struct msghdr *msg, struct msghdr *out, void *buf, size_t room)
{
	struct msghdr m = *msg;
	struct cmsghdr *cm;
	int *fds, n, i, k, kfd, swapped = 0;

	if (msg->msg_control == NULL || msg->msg_controllen > room)
		return 0;
	memcpy(buf, msg->msg_control, msg->msg_controllen);
	m.msg_control = buf;
	for (cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		fds = (int *)(void *)CMSG_DATA(cm);
		for (i = 0; i < n; i++) {
			memcpy(&k, &fds[i], sizeof(k)); /* (unaligned where the caller packed it) */
			if ((kfd = rsk_face_kfd(k)) != k) {
				memcpy(&fds[i], &kfd, sizeof(kfd));
				swapped = 1;
			}
		}
	}
	if (swapped)
		*out = m;
	return swapped;
}

enum rsk_face_to rsk_face_fcntl_to(int cmd)
{
	switch (cmd) {
	case F_SETFL:
		return RSK_FACE_TO_BOTH;
	case F_SETOWN:
	case F_GETOWN:
	case F_SETOWN_EX:
	case F_GETOWN_EX:
	case F_SETSIG:
	case F_GETSIG:
		return RSK_FACE_TO_LISTENER; /* SIGIO comes from the socket */
	default:
		return RSK_FACE_TO_NUMBER; /* F_GETFL (the same flags), F_*FD, dups, locks */
	}
}

enum rsk_face_to rsk_face_ioctl_to(unsigned long req)
{
	switch (req) {
	case FIOCLEX:
	case FIONCLEX:
		return RSK_FACE_TO_NUMBER; /* close-on-exec is the number's own */
	case FIONBIO:
	case FIOASYNC:
		return RSK_FACE_TO_BOTH;
	default:
		return RSK_FACE_TO_LISTENER;
	}
}
