/*
 * Data-path and control entry points for accelerated sockets. preload/ maps every libc
 * read/write-family call onto rsk_io_recvmsg/rsk_io_sendmsg, and the socket-option, ioctl,
 * fcntl and address calls onto the rest, so the engine has one receive and one send path.
 * All return >= 0 or -errno.
 */
#ifndef RSK_IO_H
#define RSK_IO_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* recvmsg() on accelerated socket @fd: bytes, 0 at EOF, or -errno. Blocks unless told. */
ssize_t rsk_io_recvmsg(int fd, struct msghdr *msg, int flags);

/* sendmsg() on accelerated socket @fd: bytes accepted or -errno (EPIPE raises SIGPIPE). */
ssize_t rsk_io_sendmsg(int fd, const struct msghdr *msg, int flags);

/*
 * One buffer (read, write, recv, send) on a TCP-first socket that no move concerns: the
 * kernel call, counted, with no message header, iovec or call context. 1 with the result
 * (bytes or -errno) in *@res; 0 when the call must take rsk_io_recvmsg/rsk_io_sendmsg.
 */
int rsk_io_tcp_one(int fd, void *buf, size_t n, int flags, int rx, ssize_t *res);

/*
 * sendfile()/splice() with the accelerated socket as one end: data is bounced through a
 * bounded buffer. @off_in may be NULL (use and advance the file position).
 */
ssize_t rsk_io_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n);
ssize_t rsk_io_splice_from(int in_fd, int out_fd, loff_t *off_out, size_t n);
/* splice() from pipe @in_fd into accelerated socket @out_fd (SPLICE_F_* @flags). */
ssize_t rsk_io_splice_to(int in_fd, loff_t *off_in, int out_fd, size_t n, unsigned int flags);

int rsk_io_shutdown(int fd, int how);

/* fcntl(F_SETFL) on an accelerated fd happened (@flags): mirror O_NONBLOCK. */
void rsk_io_setfl(int fd, int flags);

/*
 * Waits of the application (epoll_wait, poll, ...): with accelerated connections in this
 * process, a wait that would block first re-polls with timeout 0 for up to
 * RDMASOCK_SPIN_US, yielding the CPU between tries (the peer may share our core). A wake-up
 * across cores costs ~30 us on these machines; the peer's kick lands within the window.
 * @poll0 runs the application's wait with timeout 0 and returns its result. Returns the
 * first non-zero result, or 0 with *spent_ms set when the caller should block.
 */
int rsk_io_wait_spin(int (*poll0)(void *arg), void *arg, int timeout_ms, int *spent_ms);

#include "base/config.h"
#include "conn/conn.h"
#include "fastwait.h"
#include "spin.h"

/*
 * Around the application's own kernel wait on its fds (after the spin): begin harvests the
 * quiet endpoints (conn.h) for a zero @timeout_ms, and for a wait that may sleep also arms
 * them and counts the sleeper; end undoes it (pass begin's result). Inline: without quiet
 * endpoints or staged writes they cost a load or an atomic add and a load.
 */
static inline int rsk_io_kwait_begin(int timeout_ms)
{
	if (timeout_ms == 0) {
		(void)rsk_conn_harvest_quiet();
		return 0;
	}
	rsk_conn_sleep_begin();
	return 1;
}

static inline void rsk_io_kwait_end(int began)
{
	if (began)
		rsk_conn_sleep_end();
}

/*
 * rsk_io_kwait_begin for a wait on kernel fds only (rsk_pf_has_ours 0) in a process with
 * connections of ours: staged writes are posted first (the application may wait for an
 * answer to them), and nothing is spun for. Pass its result to rsk_io_kwait_end.
 */
static inline int rsk_io_kwait_kernel(int timeout_ms)
{
	rsk_conn_push_all(); /* the application waits: nothing of ours may stay staged */
	return rsk_io_kwait_begin(timeout_ms);
}

/*
 * A wait on kernel fds only (rsk_pf_has_ours 0) that needs nothing around its real call, so
 * the wrapper calls the kernel at once: nothing is staged (no write to push), and with the
 * fast path on no endpoint of this process ever went quiet (shm only), so there is nothing
 * to harvest and no one the sleeper count could concern. Why that count is not needed even
 * then: an endpoint goes quiet only while every wait on its app end is ours; with the fast
 * path on, a connection added to an epoll set we do not mirror goes eager for good (armed,
 * never quiet), one in a mirrored set makes rsk_pf_has_ours 1, and any other fd number of it
 * is ours in the fd table. With the fast path off (no taint at epoll_ctl) or once an
 * endpoint went quiet (verbs), every such wait counts its sleep as before
 * (rsk_io_kwait_kernel).
 */
static inline int rsk_io_kwait_none(void)
{
	return rsk_config.fastwait && !rsk_evloop_tick_pending() &&
	       !__atomic_load_n(&rsk_conn_quiet_seen, __ATOMIC_RELAXED);
}

/*
 * A readiness wait (poll, ppoll, select, pselect) in a process that holds no connection of
 * ours and never made an fd lazy (the fast path's taint hooks are off): there is nothing to
 * push, harvest, spin on or count a sleeper for, so the wrapper calls the kernel at once. This
 * keeps a program that only has kernel fds at the pass-through cost (bench/passthrough.sh).
 */
static inline int rsk_io_none_ours(void)
{
	return __atomic_load_n(&rsk_conn_live, __ATOMIC_RELAXED) == 0 && !rsk_fw_on();
}

#endif
