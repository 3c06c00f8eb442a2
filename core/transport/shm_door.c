/*
 * A process's door: an abstract unix datagram socket named after its pid ("rsk1/d/<netns>/
 * <pid>/0", shm_rdv.h), opened by its first accept on a rendezvous it shares with siblings
 * and watched by its event loop. A knock names the TCP address of a client whose upgrade
 * offer is queued on such a rendezvous, where no loop looks (the siblings' loops would take
 * each other's offers); the door hands it to its opener (shm_cm.c), which announces it, so
 * that the connection of this process with that peer, if any, takes the offer. A knock
 * proves nothing: the offer it points at is checked as any other. Only knocks of our own
 * user count (as only their offers are read); a forged one costs a look at the rendezvous.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/cmsgfd.h"
#include "base/evloop.h"
#include "base/fdhide.h"
#include "base/proc.h"
#include "base/sys.h"
#include "shm_door.h"
#include "shm_rdv.h"

/* Knocks read per event at most (a level-triggered watch: the rest come next round). */
#define RSK_DOOR_BATCH 64
/* Least time between two tries to open the door after one failed. */
#define RSK_DOOR_RETRY_MS 1000

static pthread_mutex_t rsk_door_lock = PTHREAD_MUTEX_INITIALIZER;
static int rsk_door = -1;  /* the open door, or a parent's copy (rsk_door_pid differs) */
static pid_t rsk_door_pid; /* whose door rsk_door is (atomic: the cheap look) */
static pid_t rsk_door_failed_pid;
static int64_t rsk_door_failed_ms;
static rsk_knock_fn rsk_door_fn; /* (atomic) */

/* A datagram may carry fds: none is wanted here, and their sender's message is no knock. */
static void rsk_door_fd_drop(int fd, void *ok)
{
	(void)rsk_sys_close(fd);
	*(int *)ok = 0;
}

/* Was the knock in @msg sent by a process of our own user? (SO_PASSCRED: the kernel says.) */
static int rsk_door_sender_ok(struct msghdr *msg)
{
	struct cmsghdr *c;
	struct ucred cr;

	for (c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(cr))) {
			memcpy(&cr, CMSG_DATA(c), sizeof(cr));
			return cr.uid == geteuid();
		}
	return 0;
}

static void rsk_door_event(void *arg, uint32_t events)
{
	char buf[sizeof(struct rsk_rdv_knock) + 1];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 16)];
	} cbuf;
	struct iovec iov = {buf, sizeof(buf)};
	rsk_knock_fn fn = __atomic_load_n(&rsk_door_fn, __ATOMIC_ACQUIRE);
	struct sockaddr_storage peer;
	struct msghdr msg;
	int fd = (int)(intptr_t)arg, i, ok;
	ssize_t n;

	(void)events;
	for (i = 0; i < RSK_DOOR_BATCH; i++) {
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf.space;
		msg.msg_controllen = sizeof(cbuf.space);
		n = rsk_sys_recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0)
			return; /* drained (or the door is not ours any more) */
		ok = rsk_door_sender_ok(&msg);
		/* (a knock is bytes only: one that carries fds, or more than fits, is not one) */
		rsk_cmsg_fds_each(&msg, rsk_door_fd_drop, &ok);
		if (ok && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
		    rsk_rdv_knock_parse(buf, (size_t)n, &peer) == 0 && fn != NULL)
			fn(&peer);
	}
}

/* A new door for process @me, watched. Its fd, or -errno. Locked. */
static int rsk_door_make(pid_t me)
{
	struct sockaddr_un un;
	socklen_t len = rsk_rdv_door_name(&un, me);
	rsk_watch_t w;
	int fd, rc;

	fd = rsk_sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	if ((rc = rsk_sys_setsockopt_int(fd, SOL_SOCKET, SO_PASSCRED, 1)) < 0 ||
	    (rc = rsk_sys_bind(fd, (struct sockaddr *)&un, len)) < 0) {
		(void)rsk_sys_close(fd);
		return rc;
	}
	if ((fd = rsk_fd_hide(fd)) < 0)
		return fd;
	/* (a callback never takes our lock: the watch may be made under it) */
	rc = rsk_evloop_watch(fd, EPOLLIN, rsk_door_event, (void *)(intptr_t)fd, &w);
	if (rc < 0) {
		rsk_fd_unhide_close(fd);
		return rc;
	}
	return fd;
}

int rsk_door_open(rsk_knock_fn fn)
{
	pid_t me = rsk_proc_pid();
	int fd;

	__atomic_store_n(&rsk_door_fn, fn, __ATOMIC_RELEASE);
	if (__atomic_load_n(&rsk_door_pid, __ATOMIC_ACQUIRE) == me)
		return 0;
	pthread_mutex_lock(&rsk_door_lock);
	if (rsk_door_pid == me) {
		pthread_mutex_unlock(&rsk_door_lock);
		return 0;
	}
	if (rsk_door_failed_pid == me && rsk_now_ms() - rsk_door_failed_ms < RSK_DOOR_RETRY_MS) {
		pthread_mutex_unlock(&rsk_door_lock);
		return -EAGAIN;
	}
	if (rsk_door >= 0) /* our copy of a parent's door: its loop reads it, not ours */
		rsk_fd_unhide_close(rsk_door);
	rsk_door = fd = rsk_door_make(me);
	if (fd >= 0) {
		__atomic_store_n(&rsk_door_pid, me, __ATOMIC_RELEASE);
	} else {
		rsk_door_failed_pid = me;
		rsk_door_failed_ms = rsk_now_ms();
	}
	pthread_mutex_unlock(&rsk_door_lock);
	return fd < 0 ? fd : 0;
}

void rsk_door_atfork_child(void)
{
	/* The lock may have been held by another thread at the fork: start from a fresh one. */
	pthread_mutex_init(&rsk_door_lock, NULL);
	if (rsk_door >= 0)
		rsk_fd_unhide_close(rsk_door);
	rsk_door = -1;
	__atomic_store_n(&rsk_door_pid, 0, __ATOMIC_RELEASE);
	rsk_door_failed_pid = 0;
}

int rsk_door_fd(void)
{
	int fd;

	pthread_mutex_lock(&rsk_door_lock);
	fd = rsk_door_pid == rsk_proc_pid() ? rsk_door : -1;
	pthread_mutex_unlock(&rsk_door_lock);
	return fd;
}
