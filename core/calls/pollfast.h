/*
 * The user-space fast path of poll, ppoll, select and pselect (RDMASOCK_FASTWAIT, as the
 * epoll one): a shm connection waited on this way is lazy (conn.h) and answered from its
 * ring without a system call; the kernel object behind its fd is made exact only when a
 * wait is about to sleep in the kernel on it. See docs/design.md "The poll fast path".
 */
#ifndef RSK_POLLFAST_H
#define RSK_POLLFAST_H

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/select.h>

#include "base/fdtab.h"
#include "fastwait.h"

/*
 * poll/ppoll of @fds through the fast path, @timeout_us microseconds (-1: forever), the
 * sleep under @mask (NULL: the thread's own). Returns 1 with the wait's result (a count or
 * -errno) in *@res when handled here, 0 when no fd of the set can be answered from user
 * space (the caller waits as before).
 */
int rsk_pf_poll(struct pollfd *fds, nfds_t n, int64_t timeout_us, const sigset_t *mask,
		int *res);

/*
 * select/pselect the same way (the sets rewritten as select does, a count or -errno in
 * *@res). *@left_us (if not NULL) gets what is left of @timeout_us when handled (select
 * reports it in its timeval, as Linux's does).
 */
int rsk_pf_select(int n, fd_set *r, fd_set *w, fd_set *e, int64_t timeout_us,
		  const sigset_t *mask, int *res, int64_t *left_us);

/*
 * May this poll set / these select sets see something of ours? 1 when one of its fds is a
 * socket of ours or some epoll set is mirrored (an epoll fd in the set may hold connections
 * of ours: polling it must end its mirror); 0 for kernel fds only. A set of kernel fds only
 * has nothing lazy in it and nothing to taint (a lazy connection's every fd number is ours
 * in the fd table; an epoll set we do not mirror holds none, since adding one made it eager),
 * and nothing to spin for: the wrappers then only push staged writes and count the sleeper
 * around the real call (rsk_io_kwait_kernel). Inline, one pass with an early exit: it is the
 * whole classification a process with connections of ours pays for such a set.
 */
static inline int rsk_pf_has_ours(const struct pollfd *fds, nfds_t n)
{
	nfds_t i;

	if (rsk_fw_any_mirror())
		return 1;
	for (i = 0; fds != NULL && i < n; i++) /* a negative fd is out of the table's range */
		if (rsk_fdtab_is_accel(rsk_fdtab_load(fds[i].fd)))
			return 1;
	return 0;
}

int rsk_pf_sel_has_ours(int n, const fd_set *r, const fd_set *w, const fd_set *e);

/*
 * A data call on @s's connection at @fd, which is neither lazy nor eager for good yet: make
 * it lazy when only our waits can see it (a blocking recv makes it exact before it sleeps;
 * poll, select and epoll answer it from its ring), so that a connection read and written
 * with blocking calls alone costs no token per message. Cheap once decided.
 */
struct rsk_sock;
void rsk_pf_adopt(struct rsk_sock *s, int fd);

/*
 * After a wait answered *@count (the kernel's report in the revents, or select's read set): a
 * TCP-first socket in the middle of its move whose report is only its move's FIN (the
 * fd names the TCP side still) has its move taken forward as a read would take it, by the
 * wait's end @end_us at the latest (rsk_now_us's clock, -1: none; calls/upgrade.c,
 * rsk_upg_settle). 1 when an fd moved: its report is void, the caller asks the wait again
 * (the fd names the stream now). A move that could not end by then is not readable yet: its
 * FIN's bits go from the report (and *@count counts it no more). Nothing without a move
 * under way.
 */
int rsk_pf_settle(struct pollfd *fds, nfds_t n, int64_t end_us, int *count);
int rsk_pf_sel_settle(int n, fd_set *r, int64_t end_us, int *count);

#endif
