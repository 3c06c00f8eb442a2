/*
 * A listening socket's face (RDMASOCK_BEARER=unix; docs/design.md, "A same-host bearer"):
 * the application's number names an epoll set that holds the TCP listener, which moves to a
 * hidden fd. An epoll set is pollable, so every wait on that number (poll, select, an epoll
 * set, one nested in another) is the kernel's own and wakes for anything the set holds: the
 * TCP listener today, a bearer's rendezvous beside it later. The calls made on the number
 * itself go to the TCP listener (rsk_face_kfd), and the face is taken down where the number
 * must be a socket to code the library cannot see: exec, io_uring.
 */
#ifndef RSK_FACE_H
#define RSK_FACE_H

#include <stddef.h>
#include <sys/socket.h>

#include "base/compiler.h"
#include "base/fdhide.h"
#include "base/fdtab.h"
#include "sock.h"

/* Faces in place in this process (a fast "none" for every call's rsk_face_kfd). */
extern RSK_HIDDEN int rsk_face_live;

/*
 * Listening socket @s at @fd gets its face (the caller holds s->lock). 0, or -errno with
 * nothing changed: the socket stays a plain listener.
 */
int rsk_face_open(struct rsk_sock *s, int fd);

/*
 * Every number naming a face names its TCP listener again, keeping its close-on-exec, and
 * the application's epoll registrations of it follow (an exec; io_uring, which may accept
 * on it). With @forever no face is made from now on. Returns how many numbers changed.
 */
int rsk_face_restore_all(int forever);

/*
 * epoll_ctl @op of face @fd in set @epfd (@ev), where the face's listeners go into the set
 * themselves: an ADD with EPOLLEXCLUSIVE, and what follows it in that set (DEL; MOD and a
 * second ADD refused as the kernel refuses them on an exclusive registration). 1 with the
 * answer in *@rc (0 or -errno), or 0: the kernel's call on the number, as for any fd.
 */
int rsk_face_ctl(int epfd, int op, int fd, const struct epoll_event *ev, int *rc);

/*
 * A wait on set @epfd reported @n events in @ev: where a face's two listeners are in the set
 * themselves (rsk_face_ctl) and both were reported, the two become one event with both
 * events' bits, as the kernel reports a registration once per wait (an application may free
 * what an event names at the first). Returns the new count. One load when the process has
 * no such registration.
 */
extern int rsk_face_dreg_live;
int rsk_face_merge(int epfd, struct epoll_event *ev, int n);
static inline int rsk_face_reported(int epfd, struct epoll_event *ev, int n)
{
	if (rsk_likely(n <= 1 || __atomic_load_n(&rsk_face_dreg_live, __ATOMIC_RELAXED) == 0))
		return n;
	return rsk_face_merge(epfd, ev, n);
}

/* In a forked child, before any other call of this file. */
void rsk_face_atfork_child(void);

/* Faces may be made (configured, and not given up for io_uring). */
int rsk_face_allowed(void);

/*
 * A sendmsg's @msg passes fds (SCM_RIGHTS) of which some are faces: *@out becomes @msg with
 * a copy of its control data in @buf (@room bytes) naming their TCP listeners instead, so
 * that the receiver gets a listening socket. 1 when *@out is to be sent, 0 to send @msg as
 * it is (no face among them, or control data larger than @room).
 */
int rsk_face_msg(const struct msghdr *msg, struct msghdr *out, void *buf, size_t room);

/* Where an fcntl or ioctl made on a face's number goes: the number alone (its own flags,
 * dups), the TCP listener alone (what only a socket has: SIGIO's owner, socket ioctls), or
 * both (the file flags, which each keeps as the application set them: the TCP listener
 * blocks, or not, as the number does, for an accept there and for a process it is passed
 * to). */
enum rsk_face_to {
	RSK_FACE_TO_NUMBER,
	RSK_FACE_TO_LISTENER,
	RSK_FACE_TO_BOTH,
};
enum rsk_face_to rsk_face_fcntl_to(int cmd);
enum rsk_face_to rsk_face_ioctl_to(unsigned long req);

/* The fd the kernel call for the application's @fd must name: the hidden TCP listener when
 * @fd is a face, @fd itself otherwise. */
static inline int rsk_face_kfd(int fd)
{
	const struct rsk_sock *s;
	int h;

	if (rsk_likely(__atomic_load_n(&rsk_face_live, __ATOMIC_RELAXED) == 0))
		return fd;
	if ((s = rsk_sock_kernel_of(rsk_fdtab_load(fd))) == NULL) /* (only those have a face) */
		return fd;
	h = __atomic_load_n(&s->face_on, __ATOMIC_ACQUIRE);
	return h > 0 ? h - 1 : fd;
}

/* The file flags of face @fd's number were set (F_SETFL, FIONBIO): whether it blocks is
 * asked again at the next accept that needs to know. */
void rsk_face_flags_changed(int fd);

/* @fd is a face (its number names our epoll set, not a socket). */
static inline int rsk_face_is(int fd)
{
	return rsk_face_kfd(fd) != fd;
}

#endif
