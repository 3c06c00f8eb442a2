/*
 * The user-space epoll fast path (RDMASOCK_FASTWAIT): a mirror of each epoll set this process
 * created, so that epoll_wait answers from the rings of its lazy connections without a
 * system call; the kernel holds those edge-triggered, so a sleep leaves their stale tokens in
 * place and their peers write one token, an edge, for a sleeping thread.
 * See docs/design.md "Readiness: the fast path" for the rules and why each case keeps the
 * eager tokens. All entry points are cheap no-ops while no mirror exists.
 */
#ifndef RSK_FASTWAIT_H
#define RSK_FASTWAIT_H

#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/compiler.h"

/* Set for good once this process made a mirror: the gate of every hook below, so that a
 * process without the fast path pays one load and branch. */
extern RSK_HIDDEN int rsk_fw_active;
/* rsk_fw_active, read from any thread without a lock (a plain load on x86: it is the
 * pass-through path's test); set once, atomically, and never cleared while threads run. */
static inline int rsk_fw_on(void)
{
	return __atomic_load_n(&rsk_fw_active, __ATOMIC_RELAXED);
}

/* Epoll sets mirrored now (under the table lock; read as a hint without it). */
extern RSK_HIDDEN int rsk_fw_mirrors;
/* Is some epoll set mirrored now? (A hint, without a lock: one load, inline, since every
 * poll/select of a process with connections of ours asks it.) */
static inline int rsk_fw_any_mirror(void)
{
	return __atomic_load_n(&rsk_fw_mirrors, __ATOMIC_RELAXED) != 0;
}

/* epoll_create/epoll_create1 returned @epfd: mirror it (when the fast path is on). */
void rsk_fw_created(int epfd);

/*
 * Before the real epoll_ctl(@epfd, @op, @fd, @ev): 1 if the kernel should get @ev's events |
 * EPOLLET, because @fd will likely be a lazy candidate of the set (its mirror decides after
 * the call, and gives the application's events back if not): saves a MOD per ADD/MOD.
 */
int rsk_fw_ctl_et(int epfd, int op, int fd, const struct epoll_event *ev);

/*
 * Before the real epoll_ctl(@epfd, @op, @fd, @ev) of an accelerated @fd: 1 when the mirror
 * answered it from user space (the result, 0 or -errno, in *@res; make no real call), else 0.
 */
int rsk_fw_ctl_user(int epfd, int op, int fd, const struct epoll_event *ev, int *res);

/*
 * Before the real epoll_ctl on @epfd of an fd that is not accelerated (a kernel fd, a TCP-first
 * socket): @epfd's mirror when it follows nothing now (its set holds no candidate), and the
 * call needs no following; then, at once after the real call (nothing that may wait for a lock
 * in between), rsk_fw_ctl_end (@done: it succeeded), and no rsk_fw_ctl. NULL: as before
 * (rsk_fw_ctl follows it). No lock either way.
 */
struct rsk_fw;
struct rsk_fw *rsk_fw_ctl_begin(int epfd);
void rsk_fw_ctl_end(struct rsk_fw *m, int fd, int done);

/*
 * Before TCP-first socket @s (at @fd) moves onto a stream (rsk_sock_become replays
 * s->epregs): its registrations in the mirrored sets that follow nothing now, which its ctls
 * there left unrecorded (preload/epoll.c), read from the kernel into s->epregs. A set that
 * starts following records them (rsk_fw_follow), and so does one whose mirror ends while the
 * set lives on (rsk_fw_kill). The caller holds s->lock. 0, or -errno when a set could not be
 * read (no /proc, no fd free): a registration may be missing, and the move must not go on as
 * though none were (the application would wait for events that never come).
 */
struct rsk_sock;
int rsk_fw_epregs(struct rsk_sock *s, int fd);

/* The registrations epoll set @epfd holds, from the kernel (/proc/self/fdinfo, read whole):
 * each to @fn with its fd, events (without EPOLLERR and EPOLLHUP, which the kernel adds to
 * every one) and data, until @fn returns non-zero. 0, -errno, or @fn's value. */
int rsk_fw_each_reg(int epfd, int (*fn)(void *arg, int fd, uint32_t ev, uint64_t data),
		    void *arg);

/* A real epoll_ctl(@epfd, @op, @fd, @ev) succeeded (with EPOLLET added if @kernel_et):
 * follow it. */
void rsk_fw_ctl(int epfd, int op, int fd, const struct epoll_event *ev, int kernel_et);

/*
 * epoll_wait/epoll_pwait on @epfd through its mirror. Returns 1 with the wait's result (a
 * count or -errno) in *@res when it was handled here, 0 when the caller must wait as before
 * (no mirror, or no lazy candidate in it).
 */
int rsk_fw_wait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask,
		int *res);

/*
 * A wait on @epfd (mirrored) reported @n events in @ev while a TCP-first socket of this process
 * is in the middle of its move: a report that is only a move's FIN (the fd still names the
 * TCP side) is mapped back to its fd through the mirror and settled as poll's are
 * (calls/upgrade.c, rsk_upg_settle) by the wait's end @end_us (rsk_now_us's clock; -1: none).
 * The report of an fd that moved is dropped (*@moved set: the stream's app end, put in the
 * set by the move, reports for itself); one whose move could not end by then loses the FIN's
 * bits (and an edge-triggered or one-shot registration is re-armed). Returns how many events
 * are left, in order. A set not mirrored is settled the same way when a moving socket notes a
 * registration in it with the event's data and the set's fdinfo shows that data is the
 * socket's alone (a look in /proc, made only then).
 */
int rsk_fw_settle(int epfd, struct epoll_event *ev, int n, int64_t end_us, int *moved);

/* @fd is about to stop naming its file here (close, a dup onto it); every number in
 * [@first, @last] (close_range). */
void rsk_fw_fd_gone(int fd);
void rsk_fw_range_gone(unsigned int first, unsigned int last);

/*
 * @fd is about to be seen by a wait that is not a mirrored epoll_wait of this process (a
 * dup, poll/select, a nested epoll set, SCM_RIGHTS, stdio): what it names goes eager for
 * good (a lazy connection, or every connection of a mirrored epoll set).
 */
void rsk_fw_fd_shared(int fd);

/* @fd's connection is about to leave it (stdio relays it through a pipe of its own): no
 * mirror may answer @fd from the connection any more; the kernel answers the pipe. */
void rsk_fw_fd_relayed(int fd);

/* poll/select sets: rsk_fw_fd_shared for each fd in them (SCM_RIGHTS messages: calls.h,
 * rsk_life_fds_passed). */
void rsk_fw_poll_shared(void *pollfds, unsigned long n);
void rsk_fw_select_shared(int n, const void *r, const void *w, const void *e);

/* exec or spawn: every epoll_ctl held back in user space reaches the kernel (a set that
 * survives the exec holds only what the application registered). Nothing in a vfork child. */
void rsk_fw_flush_all(void);

/* fork or io_uring: other processes or the kernel itself may wait on anything: every
 * connection goes eager for good and the mirrors end. */
void rsk_fw_all_eager(void);

#endif
