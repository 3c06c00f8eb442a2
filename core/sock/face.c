/*
 * A listening socket's face: an epoll set on the application's number, the TCP listener
 * hidden behind it (see face.h). Made at listen() when RDMASOCK_BEARER asks for it, put back
 * before an exec (for the numbers the new image inherits) and for good when the process sets
 * up io_uring. The socket object keeps the hidden fd (face_fd) and closes it with the last
 * number (sock.c); this file makes and unmakes faces, and puts what a face holds into an
 * application's epoll set itself where the application asks for EPOLLEXCLUSIVE.
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

/* ---- EPOLLEXCLUSIVE: the face's listeners in the application's set ---- */

/* @s's noted registration in @epfd: its index in s->epregs, or -1. s->lock held. */
static int rsk_face_reg_at(struct rsk_sock *s, int epfd)
{
	int i;

	for (i = 0; i < s->nepregs; i++)
		if (rsk_sock_epreg_at(s, i)->epfd == epfd)
			return i;
	return -1;
}

/* Ask set @epfd about TCP listener @kfd with a MOD, which changes nothing: an exclusive
 * registration refuses it (-EINVAL), and -ENOENT says none is there (a set closed without a
 * DEL, its number reused). The kernel's answer. */
static int rsk_face_probe(int epfd, int kfd)
{
	struct epoll_event e = {.events = EPOLLIN};

	return rsk_sys_epoll_ctl(epfd, EPOLL_CTL_MOD, kfd, &e);
}

/*
 * The direct registrations of this process by set and data, for a wait that reports both of
 * a face's listeners (a client at each) to report the number once, as the kernel reports a
 * registration (rsk_face_reported). A slot holds the socket only to be found again (never
 * followed) and the TCP listener's number to be checked still in the set when the table is
 * full (a set closed without a DEL leaves its slot). Waits read it under the lock, tried
 * only: a wait never blocks on it (it reports as the kernel gave then).
 */
#define RSK_FACE_DREGS 16
static struct rsk_face_dreg {
	const struct rsk_sock *s; /* NULL: free */
	int epfd, kfd;
	uint64_t data;
} rsk_face_dregs[RSK_FACE_DREGS];
int rsk_face_dreg_live; /* slots in use */
static pthread_mutex_t rsk_face_dreg_lock = PTHREAD_MUTEX_INITIALIZER;

void rsk_face_atfork_child(void)
{
	/* (another thread of the parent may have held it: it is the child's alone now) */
	pthread_mutex_init(&rsk_face_dreg_lock, NULL);
}

/* A free slot, or one whose set no longer holds its TCP listener; -1 when none. Locked. */
static int rsk_face_dreg_slot(void)
{
	struct rsk_face_dreg *d;
	int i;

	for (i = 0; i < RSK_FACE_DREGS; i++)
		if (rsk_face_dregs[i].s == NULL)
			return i;
	for (i = 0; i < RSK_FACE_DREGS; i++) {
		d = &rsk_face_dregs[i];
		if (rsk_face_probe(d->epfd, d->kfd) != -EINVAL) {
			d->s = NULL; /* (EINVAL: an exclusive registration still there) */
			__atomic_sub_fetch(&rsk_face_dreg_live, 1, __ATOMIC_RELAXED);
			return i;
		}
	}
	return -1;
}

/* Note (@s, @epfd) with the application's @data; without a slot, its waits may report the
 * number twice. */
static void rsk_face_dreg_add(const struct rsk_sock *s, int epfd, uint64_t data)
{
	int i;

	pthread_mutex_lock(&rsk_face_dreg_lock);
	if ((i = rsk_face_dreg_slot()) >= 0) {
		rsk_face_dregs[i] = (struct rsk_face_dreg){s, epfd, s->face_fd - 1, data};
		__atomic_add_fetch(&rsk_face_dreg_live, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&rsk_face_dreg_lock);
}

/* Forget @s's slot for @epfd (every set's: -1). */
static void rsk_face_dreg_del(const struct rsk_sock *s, int epfd)
{
	int i;

	pthread_mutex_lock(&rsk_face_dreg_lock);
	for (i = 0; i < RSK_FACE_DREGS; i++)
		if (rsk_face_dregs[i].s == s && (epfd < 0 || rsk_face_dregs[i].epfd == epfd)) {
			rsk_face_dregs[i].s = NULL;
			__atomic_sub_fetch(&rsk_face_dreg_live, 1, __ATOMIC_RELAXED);
		}
	pthread_mutex_unlock(&rsk_face_dreg_lock);
}

/* Merge the events after the first with @data among @ev's @n into the first; the new n. */
static int rsk_face_merge_data(struct epoll_event *ev, int n, uint64_t data)
{
	int i, first = -1;

	for (i = 0; i < n; i++) {
		if (ev[i].data.u64 != data)
			continue;
		if (first < 0) {
			first = i;
			continue;
		}
		ev[first].events |= ev[i].events;
		memmove(&ev[i], &ev[i + 1], (size_t)(n - i - 1) * sizeof(*ev));
		n--;
		i--;
	}
	return n;
}

/* Do two of @ev's @n carry @data? */
static int rsk_face_twice(const struct epoll_event *ev, int n, uint64_t data)
{
	int i, seen = 0;

	for (i = 0; i < n; i++)
		if (ev[i].data.u64 == data && seen++)
			return 1;
	return 0;
}

int rsk_face_merge(int epfd, struct epoll_event *ev, int n)
{
	struct rsk_face_dreg *d;
	int i;

	if (pthread_mutex_trylock(&rsk_face_dreg_lock) != 0)
		return n;
	for (i = 0; i < RSK_FACE_DREGS && n > 1; i++) {
		d = &rsk_face_dregs[i];
		if (d->s == NULL || d->epfd != epfd || !rsk_face_twice(ev, n, d->data))
			continue;
		/* Still there? A set closed without a DEL leaves its slot, and a new set at its
		 * number may hold two fds of that data (one system call, on this rare path). */
		if (rsk_face_probe(epfd, d->kfd) == -EINVAL)
			n = rsk_face_merge_data(ev, n, d->data);
	}
	pthread_mutex_unlock(&rsk_face_dreg_lock);
	return n;
}

/* Take @s's TCP listener and rendezvous out of @epfd. */
static void rsk_face_direct_del(const struct rsk_sock *s, int epfd)
{
	int r = __atomic_load_n(&s->bearer_fd, __ATOMIC_ACQUIRE) - 1;

	(void)rsk_sys_epoll_ctl(epfd, EPOLL_CTL_DEL, s->face_fd - 1, NULL);
	if (r >= 0)
		(void)rsk_sys_epoll_ctl(epfd, EPOLL_CTL_DEL, r, NULL);
}

/* Put @s's TCP listener and (unless shut) rendezvous into @epfd with @ev, EPOLLEXCLUSIVE
 * kept, and note it. 0, or -errno with nothing done: the kernel's answer for the TCP
 * listener (the application asked for what a socket refuses), or -ENOSPC when no note fits
 * (the caller then adds the face as before). s->lock held. */
static int rsk_face_direct_add(struct rsk_sock *s, int epfd, const struct epoll_event *ev)
{
	struct epoll_event e = *ev;
	int r = __atomic_load_n(&s->bearer_fd, __ATOMIC_ACQUIRE) - 1, rc;

	if (s->nepregs >= RSK_SOCK_EPREGS && rsk_face_reg_at(s, epfd) < 0)
		return -ENOSPC;
	rc = rsk_sys_epoll_ctl(epfd, EPOLL_CTL_ADD, s->face_fd - 1, &e);
	if (rc == 0 && r >= 0 && !__atomic_load_n(&s->bearer_shut, __ATOMIC_ACQUIRE)) {
		e = *ev;
		if ((rc = rsk_sys_epoll_ctl(epfd, EPOLL_CTL_ADD, r, &e)) < 0)
			(void)rsk_sys_epoll_ctl(epfd, EPOLL_CTL_DEL, s->face_fd - 1, NULL);
	}
	if (rc < 0)
		return rc;
	rsk_sock_epreg(s, epfd, EPOLL_CTL_ADD, ev);
	rsk_sock_epreg_at(s, rsk_face_reg_at(s, epfd))->direct = 1; /* (below RSK_SOCK_EPREGS) */
	rsk_face_dreg_add(s, epfd, ev->data.u64);
	return 0;
}

/* Does @epfd still hold @s's TCP listener? A set closed without a DEL and its number reused
 * leaves a stale note. */
static int rsk_face_direct_live(const struct rsk_sock *s, int epfd)
{
	return rsk_face_probe(epfd, s->face_fd - 1) != -ENOENT;
}

/*
 * The kernel refuses EPOLLEXCLUSIVE for an epoll set, which a face is: added without it,
 * every process waiting on the listener would wake for each client (nginx's workers: 3.2
 * context switches per request against 1.1 over a kernel listener), and all but one find
 * nothing. So the TCP listener and the rendezvous go into the application's set themselves,
 * each exclusive, with the application's data: one waiter wakes, and its accept on the
 * number takes from both as before. Two events for the one number may come in one wait (a
 * client at each), where the kernel gives one: the wait merges them (rsk_face_reported).
 */
int rsk_face_ctl(int epfd, int op, int fd, const struct epoll_event *ev, int *rc)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int i, done = 1;

	if (s == NULL)
		return 0;
	pthread_mutex_lock(&s->lock);
	i = __atomic_load_n(&s->face_on, __ATOMIC_ACQUIRE) ? rsk_face_reg_at(s, epfd) : -2;
	if (i >= 0 && rsk_sock_epreg_at(s, i)->direct && !rsk_face_direct_live(s, epfd)) {
		rsk_face_dreg_del(s, epfd);
		rsk_sock_epreg(s, epfd, EPOLL_CTL_DEL, NULL);
		i = -1;
	}
	if (i == -1 && op == EPOLL_CTL_ADD && ev != NULL && (ev->events & EPOLLEXCLUSIVE)) {
		done = (*rc = rsk_face_direct_add(s, epfd, ev)) != -ENOSPC;
	} else if (i >= 0 && rsk_sock_epreg_at(s, i)->direct && op == EPOLL_CTL_DEL) {
		rsk_face_direct_del(s, epfd);
		rsk_face_dreg_del(s, epfd);
		rsk_sock_epreg(s, epfd, EPOLL_CTL_DEL, NULL);
		*rc = 0;
	} else if (i >= 0 && rsk_sock_epreg_at(s, i)->direct) {
		/* the kernel's: an exclusive registration is not modified, nor added again */
		*rc = op == EPOLL_CTL_ADD ? -EEXIST : -EINVAL;
	} else {
		done = 0;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
	return done;
}

/* Every direct registration of @s taken out (the number is its TCP listener again). */
static void rsk_face_direct_del_all(struct rsk_sock *s)
{
	int i;

	pthread_mutex_lock(&s->lock);
	for (i = rsk_bearer_direct_next(s, 0); i >= 0; i = rsk_bearer_direct_next(s, i + 1)) {
		rsk_face_direct_del(s, rsk_sock_epreg_at(s, i)->epfd);
		rsk_sock_epreg_at(s, i)->direct = 0;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_face_dreg_del(s, -1);
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
	if (w->inherit_only)
		return 0;
	/* The application's sets held the face, or its listeners (EPOLLEXCLUSIVE): now the TCP
	 * listener at the number. */
	rsk_face_direct_del_all(s);
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
