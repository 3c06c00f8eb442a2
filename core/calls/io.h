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
 * sendfile()/splice() with the accelerated socket as one end: data is bounced through a
 * bounded buffer. @off_in may be NULL (use and advance the file position).
 */
ssize_t rsk_io_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n);
ssize_t rsk_io_splice_from(int in_fd, int out_fd, loff_t *off_out, size_t n);

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

/*
 * Around the application's own kernel wait on its fds (after the spin): begin harvests the
 * quiet endpoints (conn.h) for a zero @timeout_ms, and for a wait that may sleep also arms
 * them and counts the sleeper; end undoes it (pass begin's result).
 */
int rsk_io_kwait_begin(int timeout_ms);
void rsk_io_kwait_end(int began);

/*
 * Spins yield only when it helps (the peer may share our core; docs/design.md, "Waits"). A
 * spin that has run RSK_SPIN_YIELD_US yields when this thread's interval has passed since its
 * last yield; each yield is timed: one back within RSK_YIELD_QUICK_US found nobody else
 * wanting the core and doubles the interval (up to RSK_YIELD_MAX_US, so an uncontended spin
 * makes no system call but one probe yield per that long), a slower one (someone ran) puts it
 * back to RSK_SPIN_YIELD_US. Per thread. rsk_spin_yield takes the clock @now and the spin's
 * @start and returns the clock after the yield, or @now when none was due.
 */
#define RSK_SPIN_YIELD_US 20
#define RSK_YIELD_QUICK_US 8
#define RSK_YIELD_MAX_US 1280
int64_t rsk_spin_yield(int64_t now, int64_t start);
/* This thread's yield interval now, and what a yield that took @took_us teaches it. */
int64_t rsk_spin_yield_every(void);
void rsk_spin_yield_learn(int64_t took_us);

/*
 * Whether the waits on one object (an epoll set, a socket: *@hist, a hint word updated with
 * relaxed atomics, 0 to start) pay for their spin. A wait *misses* when it timed out, or its
 * readiness came more than RSK_SPIN_FAR windows (RDMASOCK_SPIN_US) after it began
 * (rsk_spin_hit); otherwise it *hits*, spun or not. After RSK_SPIN_MISSES misses in a row the
 * object's waits sleep at once, but every RSK_SPIN_PROBE-th of them spins anyway; one hit
 * makes them spin again. rsk_spin_pays: 1 to spin, 0 to sleep at once (it counts the probe).
 * Why RSK_SPIN_FAR and not 1: a wait that slept measures its gap with the wake-up in it
 * (~30 us here), so a gap within the window would look longer than it and keep the object
 * sleeping; and a spin costs at most 1/RSK_SPIN_FAR of a longer gap, while every needless
 * sleep costs the peer an edge token per connection (docs/design.md, the fast path).
 */
#define RSK_SPIN_MISSES 16
#define RSK_SPIN_PROBE 16
#define RSK_SPIN_FAR 4
int rsk_spin_pays(unsigned int *hist);
void rsk_spin_outcome(unsigned int *hist, int hit);
/* A wait whose readiness came @gap_us after it began: 1 for a hit. */
int rsk_spin_hit(int64_t gap_us);

#endif
