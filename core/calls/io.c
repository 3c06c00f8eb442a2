/*
 * The accelerated socket calls (see io.h). Each data call runs the engine under the
 * connection's lock, syncs the app end's readiness, and, when it must wait, spins for
 * RDMASOCK_SPIN_US (a cross-core wake-up costs ~30 us here) before sleeping in poll() on
 * the app end itself, whose readiness the peer's kick changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/stats.h"
#include "base/sys.h"
#include "conn/conn.h"
#include "history.h"
#include "io.h"
#include "pollfast.h"
#include "sock/sock.h"
#include "calls.h"
#include "upgrade.h"

/*
 * A blocking call interrupted by a signal: TCP restarts it when the handler that ran was
 * installed with SA_RESTART, and returns EINTR otherwise (always, with SO_RCVTIMEO or
 * SO_SNDTIMEO set). A blocking read lets the kernel decide (rsk_io_sleep_rx). Where we wait
 * in poll, which is never restarted, we cannot tell which signal came: EINTR is returned
 * when any caught signal lacks SA_RESTART.
 */
static int rsk_io_restartable(void)
{
	struct sigaction sa;
	int sig;

	for (sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
		    !(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}

/*
 * The common wait, a blocking read without a deadline: sleep in a peek at the app end, which
 * its waker makes readable (a token, EOF, or its going). The kernel restarts the peek after
 * an SA_RESTART handler and fails it with EINTR after another, exactly as it would a read of
 * a TCP socket. 1: woke, 0: the fd did not block (look with poll), or -EINTR.
 */
static int rsk_io_sleep_rx(struct rsk_conn *c, int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b;
	ssize_t r = rsk_sys_recv(fd, &b, 1, MSG_PEEK);

	if (r == -EINTR)
		return -EINTR;
	if (r == -EAGAIN)
		return 0;
	if (rsk_sys_poll(&p, 1, 0) > 0)
		rsk_conn_saw_events(c, fd, p.revents); /* a hang-up: the peer went */
	return 1;
}

/*
 * Wait for the app end (@s's, the application's @app_fd: rsk_sock_call_fd) to report
 * @events, until @deadline_us (0: forever). Returns 0 to retry the operation, -EAGAIN at the
 * deadline, -EINTR for a signal the caller must see. A call that moved bytes already
 * (@progress) returns them at any signal, SA_RESTART or not, as TCP's does: it sleeps in
 * poll, which reports every signal, not in the peek the kernel would restart unseen.
 */
static int rsk_io_sleep(struct rsk_conn *c, const struct rsk_sock *s, int app_fd, short events,
			 int64_t deadline_us, int pending, int progress)
{
	struct pollfd p = {.fd = -1, .events = events};
	int64_t left;
	int ms = -1, rc, fd;

	if ((events & POLLIN) && c->lazy) {
		/* a stale token would end the sleep at once, and every sleep after it */
		rsk_conn_lock(c);
		rc = rsk_conn_exact(c, rsk_sock_call_fd(s, app_fd));
		rsk_conn_unlock(c);
		if (rc)
			return 0; /* data came: retry */
	}
	p.fd = fd = rsk_sock_call_fd(s, app_fd);
	if (events == POLLIN && !deadline_us && !pending && !progress) {
		rsk_conn_sleep_begin(); /* a quiet endpoint (ours too) is armed and harvested */
		rc = rsk_io_sleep_rx(c, fd);
		rsk_conn_sleep_end();
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}
	if (deadline_us) {
		left = deadline_us - rsk_now_us();
		if (left <= 0)
			return -EAGAIN;
		ms = (int)((left + 999) / 1000);
	}
	/* A moving connection's app end may have no waker yet (verbs: its loop watches the
	 * connection once the move ends): look again every millisecond. */
	if (pending && (ms < 0 || ms > 1))
		ms = 1;
	rsk_conn_sleep_begin();
	rc = rsk_sys_poll(&p, 1, ms);
	rsk_conn_sleep_end();
	if (rc == -EINTR && (deadline_us || progress || !rsk_io_restartable()))
		return -EINTR; /* with a timeout set, TCP never restarts */
	if (rc > 0)
		rsk_conn_saw_events(c, fd, p.revents); /* a hang-up: the peer went */
	return 0;
}

struct rsk_io_ctx {
	struct rsk_sock *s;
	struct rsk_conn *c;
	int app_fd;  /* the app end whose readiness the call keeps (the fd, until a move ends) */
	int pending; /* a moving connection's app end is still aside (calls/upgrade.c) */
	int nonblock;
	int64_t deadline, spin_end, spin_start;
	int64_t clock_at;    /* the spin's last clock read (0: none yet) */
	unsigned int rounds; /* spin rounds since that read (rsk_spin_pace) */
	int spinning;        /* a wait is under way (0: the next wait starts one, and its spin) */
	int skip;            /* its spin is skipped (rsk_spin_pays): slept at once */
	int crowded;         /* its spin ended at a yield that found the core wanted */
	int progress;        /* the call moved bytes already: a signal ends it (rsk_io_sleep) */
	int slept;           /* it slept */
	int64_t wait_at;     /* when the wait began (its spin's first clock read, or the skip) */
	int rx_hint;         /* arrivals show in user space (rsk_conn_can_lazy, set locked) */
};

/* The app end's fd for this call now: the application's, or the dup its close left the call
 * (rsk_sock_call_fd; a move's aside app end is never closed so). */
static inline int rsk_io_fd(const struct rsk_io_ctx *x)
{
	return rsk_sock_call_fd(x->s, x->app_fd);
}

/*
 * A non-blocking caller that finds nothing: the peer may have gone without a word (the
 * partner of our app end closed, which the kernel shows as a hang-up on the application's
 * fd, and wakes its poll or epoll). One poll says so; it is asked at most once a
 * millisecond, so a program that reads until EAGAIN pays no system call per read.
 */
#define RSK_IO_HUP_CHECK_US 1000

static int rsk_io_nothing(struct rsk_io_ctx *x)
{
	/* the app end: while a move is under way the fd still names the TCP socket */
	struct pollfd p = {.fd = rsk_io_fd(x), .events = 0};
	int64_t now = rsk_now_us();

	if (now - x->s->hup_checked_us < RSK_IO_HUP_CHECK_US || x->c->peer_hup)
		return -EAGAIN;
	x->s->hup_checked_us = now;
	if (rsk_sys_poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLERR)))
		return -EAGAIN;
	rsk_conn_saw_events(x->c, p.fd, p.revents);
	return x->c->peer_hup ? 0 : -EAGAIN; /* the peer went: try again, the stream knows */
}


/* 0 with an accelerated connection in @x, 1 for an upgradable TCP socket, or -errno. */
static int rsk_io_begin(int fd, int flags, int64_t timeo_us, struct rsk_io_ctx *x)
{
	x->s = rsk_sock_get(fd);
	x->app_fd = fd;
	x->spinning = 0;
	x->pending = 0;
	x->rx_hint = 0;
	x->progress = 0;
	/* (read once: the exit's release may clear it meanwhile, rsk_life_exit) */
	x->c = x->s != NULL ? __atomic_load_n(&x->s->conn, __ATOMIC_ACQUIRE) : NULL;
	if (x->s != NULL && x->c == NULL && x->s->upg != NULL)
		return 1;
	if (x->s == NULL || x->c == NULL) {
		int rc = x->s != NULL && x->s->detached ? -ENOTCONN : -EBADF;

		if (x->s != NULL)
			rsk_sock_put(x->s);
		return rc; /* ENOTCONN: a connection that stayed the parent's at a fork */
	}
	if (rsk_unlikely(__atomic_load_n(&x->s->setup_held, __ATOMIC_RELAXED)))
		rsk_hist_setup_seen(x->s); /* a data call: the connect is over for the application */
	x->nonblock = x->c->nonblock || (flags & MSG_DONTWAIT);
	x->deadline = timeo_us ? rsk_now_us() + timeo_us : 0;
	return 0;
}

/*
 * The spin of a poll/epoll/select wait. The kernel is asked (@poll0, a zero-timeout real
 * wait) at the start, whenever one of our rings shows a message its readiness may not show
 * yet, and otherwise every RSK_SPIN_POLL_US: the fairness rule for the kernel fds in the same
 * set, which wait at most that long past their event while we spin. Between looks the spin
 * makes no system call but a yield when one helps (rsk_spin_yield: the peer may be waiting
 * for our core).
 */
#define RSK_SPIN_POLL_US 10
/*
 * Spin rounds per clock read. Where the clock is a system call (a guest without a vDSO
 * clocksource, as qemu's hpet) a read per round would be the spin's main cost, so a spin reads
 * it only every rsk_spin_pace rounds, learned so that reads come about every
 * rsk_spin_clock_us() (spin_us / 16, at least RSK_SPIN_YIELD_US, at most
 * RSK_SPIN_CLOCK_MAX_US): a long spin reads the clock (and yields) rarely, a short one often
 * enough to end on time. A wait that is over within its first pace reads no clock at all (its
 * spin is timed from its first read). One learned pace per kind of round (their costs differ).
 */
#define RSK_SPIN_CLOCK_EVERY 8
#define RSK_SPIN_CLOCK_MAX_US 2000
#define RSK_SPIN_PACE_MAX (1u << 20)

struct rsk_spin_pace {
	unsigned int every; /* rounds per clock read (relaxed atomics: a hint) */
};

static struct rsk_spin_pace rsk_pace_io = {RSK_SPIN_CLOCK_EVERY};
static struct rsk_spin_pace rsk_pace_wait = {RSK_SPIN_CLOCK_EVERY};

static int64_t rsk_spin_clock_us(void)
{
	int64_t us = (int64_t)rsk_config.spin_us / 16;

	if (us < RSK_SPIN_YIELD_US)
		return RSK_SPIN_YIELD_US;
	return us > RSK_SPIN_CLOCK_MAX_US ? RSK_SPIN_CLOCK_MAX_US : us;
}

static unsigned int rsk_spin_every(const struct rsk_spin_pace *p)
{
	return __atomic_load_n(&p->every, __ATOMIC_RELAXED);
}

/* @dt_us passed over one pace of rounds: double it when reads come too often, halve it when
 * they come too late. */
static void rsk_spin_learn(struct rsk_spin_pace *p, int64_t dt_us)
{
	unsigned int e = rsk_spin_every(p);
	int64_t want = rsk_spin_clock_us();

	if (dt_us * 2 < want && e < RSK_SPIN_PACE_MAX)
		__atomic_store_n(&p->every, e * 2, __ATOMIC_RELAXED);
	else if (dt_us > want * 2 && e > RSK_SPIN_CLOCK_EVERY)
		__atomic_store_n(&p->every, e / 2, __ATOMIC_RELAXED);
}

int rsk_io_wait_spin(int (*poll0)(void *arg), void *arg, int timeout_ms, int *spent_ms)
{
	int64_t start, now, polled, last, budget = (int64_t)rsk_config.spin_us;
	unsigned int rounds = 0;
	int rc, crowded = 0;

	*spent_ms = 0;
	rsk_conn_push_all(); /* the application waits: nothing of ours may stay staged */
	(void)rsk_conn_harvest_quiet(); /* what quiet endpoints hold shows in the kernel's answer */
	if (timeout_ms == 0 || rsk_config.spin_us == 0 ||
	    __atomic_load_n(&rsk_conn_live, __ATOMIC_RELAXED) <= 0)
		return 0;
	if ((rc = poll0(arg)) != 0)
		return rc;
	if (timeout_ms > 0 && (int64_t)timeout_ms * 1000 < budget)
		budget = (int64_t)timeout_ms * 1000; /* no spin past the wait's timeout */
	start = polled = now = last = rsk_now_us();
	do {
		rsk_cpu_relax();
		if (++rounds >= rsk_spin_every(&rsk_pace_wait)) {
			now = rsk_now_us();
			rsk_spin_learn(&rsk_pace_wait, now - last);
			rounds = 0;
			/* only on a clock just read: rsk_spin_yield times the yield from it */
			now = last = rsk_spin_yield(now, start, &crowded);
		}
		/* after a crowded yield one more look: what ran may have brought our event */
		if (crowded || now - polled >= RSK_SPIN_POLL_US || rsk_conn_any_arrival()) {
			if ((rc = poll0(arg)) != 0)
				return rc;
			polled = now;
		}
	} while (!crowded && now - start < budget);
	*spent_ms = (int)((now - start) / 1000);
	return 0;
}

/* A spin round of rsk_io_wait: 1 while the spin goes on (the clock read only once a pace). */
static int rsk_io_spin_round(struct rsk_io_ctx *x)
{
	int64_t now;

	if (rsk_config.spin_us == 0)
		return 0;
	if (!x->spinning) {
		x->spinning = 1;
		x->slept = 0;
		x->rounds = 0;
		x->clock_at = 0;
		x->crowded = 0;
		x->skip = !rsk_spin_pays(&x->s->spin_hist);
		if (x->skip)
			x->wait_at = rsk_now_us(); /* the gap is still learned, from a sleep's end */
	}
	if (x->skip || (x->clock_at != 0 && x->spin_end <= x->clock_at))
		return 0; /* over (as of the last read): sleep */
	if (++x->rounds < rsk_spin_every(&rsk_pace_io)) {
		rsk_cpu_relax();
		return 1;
	}
	x->rounds = 0;
	now = rsk_now_us();
	if (x->clock_at == 0) {
		x->spin_end = now + rsk_config.spin_us;
		if (x->deadline && x->deadline < x->spin_end)
			x->spin_end = x->deadline; /* no spin past SO_RCVTIMEO/SO_SNDTIMEO */
		x->spin_start = x->wait_at = now;
	} else {
		rsk_spin_learn(&rsk_pace_io, now - x->clock_at);
	}
	x->clock_at = now;
	if (now >= x->spin_end)
		return 0;
	(void)rsk_spin_yield(now, x->spin_start, &x->crowded); /* the peer may need our core */
	if (x->crowded)
		x->spin_end = now; /* others want this core: one more try, then sleep (a miss) */
	return 1;
}

/*
 * A wait of @x ended (@hit: 1 with what it waited for, 0 at its deadline): whether its spin
 * paid (rsk_spin_hit). A wait that never slept hit (no clock read); one that slept, spun or
 * not, hit when it ended within RSK_SPIN_FAR windows of its start (its spin's first clock
 * read). The next wait starts a new spin.
 */
static void rsk_io_waited(struct rsk_io_ctx *x, int hit)
{
	if (!x->spinning || rsk_config.spin_us == 0)
		return;
	if (hit && x->slept)
		hit = rsk_spin_hit(rsk_now_us() - x->wait_at);
	if (x->crowded)
		hit = 0; /* its spin took a crowded core's time, whatever came after */
	rsk_spin_outcome(&x->s->spin_hist, hit);
	x->spinning = 0;
}

/* Nothing to do yet: spin a little, then sleep. Returns 0 to retry, or -errno. */
static int rsk_io_wait(struct rsk_io_ctx *x, short events)
{
	int rc;

	if (x->nonblock)
		return rsk_io_nothing(x);
	if (rsk_io_spin_round(x)) {
		/* A reader spins on the ring's shared counter, not on the connection lock: a
		 * locked look per round costs a robust-mutex pair and the stream's work, which
		 * delays the round that sees the message. Anything that is no arrival (a local
		 * shutdown, a peer that died) shows at the locked retry after the spin. */
		if (events == POLLIN && x->rx_hint)
			while (!rsk_ep_rx_pending(x->c->ep) && rsk_io_spin_round(x))
				;
		return 0;
	}
	x->slept = 1;
	rc = rsk_io_sleep(x->c, x->s, x->app_fd, events, x->deadline, x->pending, x->progress);
	if (rc == -EAGAIN)
		rsk_io_waited(x, 0); /* the deadline: nothing came within the window either */
	return rc;
}

/* Advance a private copy of an iovec past @n bytes. */
static void rsk_iov_advance(struct iovec **iov, int *cnt, size_t n)
{
	while (*cnt > 0 && n >= (*iov)->iov_len) {
		n -= (*iov)->iov_len;
		(*iov)++;
		(*cnt)--;
	}
	if (*cnt > 0 && n > 0) {
		(*iov)->iov_base = (char *)(*iov)->iov_base + n;
		(*iov)->iov_len -= n;
	}
}

static size_t rsk_iov_len(const struct iovec *iov, int cnt)
{
	size_t n = 0;
	int i;

	for (i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

#define RSK_IOV_STACK 64

static ssize_t rsk_io_recv_loop(struct rsk_io_ctx *x, struct iovec *iov, int cnt,
				int flags)
{
	size_t want = rsk_iov_len(iov, cnt), total = 0;
	ssize_t n;
	int rc;

	if (want == 0) { /* TCP's: 0 once a byte or the end is there to read; until then a
			  * read's EAGAIN or wait, and 0 at SO_RCVTIMEO's end */
		char b;
		struct iovec one = {&b, 1};

		n = rsk_io_recv_loop(x, &one, 1, MSG_PEEK);
		return n > 0 || (n == -EAGAIN && !x->nonblock) ? 0 : n;
	}
	for (;;) {
		rsk_conn_lock(x->c);
		n = rsk_stream_recv(&x->c->st, iov, cnt, flags);
		if (n == -EAGAIN && rsk_stream_credits_due(&x->c->st))
			rsk_conn_settle_soon(); /* its wait or the tick returns them, unless we answer */
		rsk_conn_sync(x->c, rsk_io_fd(x));
		x->rx_hint = !x->pending && rsk_conn_can_lazy(x->c);
		rsk_conn_unlock(x->c);
		if (n > 0) {
			rsk_io_waited(x, 1);
			if (!(flags & MSG_PEEK))
				rsk_counter_add(&rsk_stats.bytes_received[x->c->transport], n);
			total += (size_t)n;
			if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK) || total == want)
				return (ssize_t)total;
			rsk_iov_advance(&iov, &cnt, (size_t)n);
			continue;
		}
		if (n != -EAGAIN && n < 0 && total > 0 && n == x->c->st.err) {
			rsk_conn_lock(x->c); /* the reset waits for the next call, as TCP's */
			rsk_stream_error_unreported(&x->c->st);
			rsk_conn_unlock(x->c);
		}
		if (n == 0 || (n != -EAGAIN && total > 0))
			return (ssize_t)total;
		if (n != -EAGAIN)
			return n;
		x->progress = total > 0;
		rc = rsk_io_wait(x, POLLIN);
		if (rc < 0)
			return total > 0 ? (ssize_t)total : rc;
	}
}

static ssize_t rsk_io_send_loop(struct rsk_io_ctx *x, struct iovec *iov, int cnt,
				int flags)
{
	size_t want = rsk_iov_len(iov, cnt), total = 0;
	unsigned int sflags = (flags & MSG_MORE) ? RSK_STREAM_MORE : 0;
	ssize_t n;
	int rc;

	if (want == 0)
		return 0;
	for (;;) {
		rsk_conn_lock(x->c);
		n = rsk_stream_send(&x->c->st, iov, cnt, sflags);
		if (x->c->st.stage_len)
			rsk_conn_staged();
		if (n == -EAGAIN)
			rsk_counter_add(&rsk_stats.credit_stalls, 1);
		rsk_conn_sync(x->c, rsk_io_fd(x));
		rsk_conn_unlock(x->c);
		if (n > 0) {
			rsk_io_waited(x, 1);
			rsk_counter_add(&rsk_stats.bytes_sent[x->c->transport], n);
			total += (size_t)n;
			if (total == want)
				return (ssize_t)total;
			rsk_iov_advance(&iov, &cnt, (size_t)n);
			continue;
		}
		if (n != -EAGAIN) {
			if (total == 0)
				return n;
			if (n == x->c->st.err) { /* the error waits for the next call */
				rsk_conn_lock(x->c);
				rsk_stream_error_unreported(&x->c->st);
				rsk_conn_unlock(x->c);
			}
			return (ssize_t)total;
		}
		x->progress = total > 0;
		rc = rsk_io_wait(x, POLLOUT);
		if (rc < 0)
			return total > 0 ? (ssize_t)total : rc;
	}
}

/* The loops on x->c over a private copy of @msg's iovec (they advance it). */
static ssize_t rsk_io_conn_msg(struct rsk_io_ctx *x, const struct msghdr *msg, int flags, int rx)
{
	struct iovec stack[RSK_IOV_STACK], *iov = stack;
	int cnt = (int)msg->msg_iovlen;
	ssize_t n;

	if (cnt > RSK_IOV_STACK && (iov = malloc(sizeof(*iov) * (size_t)cnt)) == NULL)
		return -ENOMEM;
	memcpy(iov, msg->msg_iov, sizeof(*iov) * (size_t)cnt);
	n = rx ? rsk_io_recv_loop(x, iov, cnt, flags & (MSG_PEEK | MSG_WAITALL))
	       : rsk_io_send_loop(x, iov, cnt, flags);
	if (iov != stack)
		free(iov);
	return n;
}

/* An accelerated connection's call, with the deadline from SO_RCVTIMEO/SO_SNDTIMEO. */
static ssize_t rsk_io_accel_msg(struct rsk_io_ctx *x, const struct msghdr *msg, int flags,
				int rx)
{
	int64_t timeo = rx ? x->c->rcvtimeo_us : x->c->sndtimeo_us;
	ssize_t n;

	x->nonblock = x->c->nonblock || (flags & MSG_DONTWAIT);
	x->deadline = timeo ? rsk_now_us() + timeo : 0;
	/* a hint without the lock (rsk_pf_adopt decides under it): relaxed loads, as the flags
	 * are stored, since other threads' calls set them */
	if (rsk_unlikely(!__atomic_load_n(&x->c->lazy, __ATOMIC_RELAXED) &&
			 !__atomic_load_n(&x->c->lazy_never, __ATOMIC_RELAXED) &&
			 __atomic_load_n(&x->c->lazy_poll, __ATOMIC_RELAXED) == 0))
		rsk_pf_adopt(x->s, x->app_fd); /* lazy from its first call, if only we wait on it */
	n = rsk_io_conn_msg(x, msg, flags, rx);
	if (n > 0 && !(flags & MSG_PEEK) && !x->s->accepted) /* (its age: a client's history) */
		rsk_hist_called(&x->s->data_calls, &x->s->aged_ms);
	return n;
}

/* A send of a moving connection: into the stream, its app end still aside. */
static ssize_t rsk_io_upg_send(struct rsk_io_ctx *x, int fd, const struct msghdr *msg,
			       int flags, const struct rsk_upg_route *r)
{
	int fl = rsk_sys_fcntl(fd, F_GETFL, 0);
	ssize_t n;

	x->c = r->c;
	x->app_fd = r->app_fd;
	x->pending = r->pending;
	x->nonblock = (fl >= 0 && (fl & O_NONBLOCK)) || (flags & MSG_DONTWAIT);
	x->deadline = 0;
	n = rsk_io_conn_msg(x, msg, flags, 0);
	/* Not on the event loop yet, whose tick posts coalesced writes: post them now. */
	rsk_conn_lock(x->c);
	(void)rsk_stream_push(&x->c->st);
	rsk_conn_unlock(x->c);
	return n;
}

/* A send's EPIPE raises SIGPIPE unless MSG_NOSIGNAL: once, here, for both send paths (the
 * kernel calls below always pass MSG_NOSIGNAL). Returns @n. */
static inline ssize_t rsk_io_epipe(ssize_t n, int flags)
{
	if (n == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return n;
}

/* The kernel call on one buffer: send/recv, which copy no message header or iovec in. */
static inline ssize_t rsk_io_kernel_one(int fd, void *buf, size_t len, int flags, int rx)
{
	return rx ? rsk_sys_recv(fd, buf, len, flags)
		  : rsk_sys_send(fd, buf, len, flags | MSG_NOSIGNAL);
}

/* The kernel call itself. One buffer, no address or ancillary data (read, write, send, recv:
 * nearly every call) goes as send/recv. */
static ssize_t rsk_io_kernel_call(int fd, struct msghdr *m, int flags, int rx)
{
	if (m->msg_iovlen != 1 || m->msg_name != NULL || m->msg_controllen != 0)
		return rx ? rsk_sys_recvmsg(fd, m, flags)
			  : rsk_sys_sendmsg(fd, m, flags | MSG_NOSIGNAL);
	if (!rx)
		return rsk_io_kernel_one(fd, m->msg_iov[0].iov_base, m->msg_iov[0].iov_len,
					 flags, 0);
	m->msg_flags = 0; /* as recvmsg reports a TCP read */
	return rsk_io_kernel_one(fd, m->msg_iov[0].iov_base, m->msg_iov[0].iov_len, flags, 1);
}

/* A TCP-first socket's kernel call @n counted (rsk_upg_after, lock-free while no move
 * concerns it): @n or -errno; 1 in *moved when a read's EOF was the peer's move (the caller
 * reads on from the stream). */
static inline ssize_t rsk_io_upg_counted(struct rsk_sock *s, int fd, int rx, ssize_t n,
					 int *moved)
{
	int rc = rsk_upg_after(s, fd, rx, n);

	*moved = rc == 1;
	return rc < 0 ? rc : n;
}

/* One kernel call of a TCP-first socket, counted. */
static ssize_t rsk_io_upg_kernel(struct rsk_io_ctx *x, int fd, struct msghdr *m, int flags,
				 int rx, int *moved)
{
	return rsk_io_upg_counted(x->s, fd, rx, rsk_io_kernel_call(fd, m, flags, rx), moved);
}

/*
 * A TCP-first socket (calls/upgrade.c): the kernel call, or the stream once a move made it
 * so. A read that reaches the FIN of a move goes on with the stream; under MSG_WAITALL the
 * rest of the request comes from there too (that FIN is no end of the data).
 */
static ssize_t rsk_io_upg_msg(struct rsk_io_ctx *x, int fd, const struct msghdr *msg,
			      int flags, int rx)
{
	struct iovec stack[RSK_IOV_STACK], *base = stack, *iov;
	struct msghdr m = *msg;
	struct rsk_upg_route r;
	int cnt = (int)msg->msg_iovlen, rc, moved, probe = 0;
	ssize_t n, total = 0;

	if (cnt > RSK_IOV_STACK && (base = malloc(sizeof(*base) * (size_t)cnt)) == NULL)
		return -ENOMEM;
	memcpy(base, msg->msg_iov, sizeof(*base) * (size_t)cnt);
	iov = base;
	for (;;) {
		m.msg_iov = iov;
		m.msg_iovlen = (size_t)cnt;
		rc = rsk_upg_route(x->s, fd, rx, &r);
		if (rc == RSK_UPG_MOVED) {
			x->c = x->s->conn;
			n = rsk_io_accel_msg(x, &m, flags, rx);
		} else if (rc == RSK_UPG_STREAM) {
			n = rsk_io_upg_send(x, fd, &m, flags, &r);
			rsk_upg_stream_done(x->s);
			if (n == -EAGAIN && rsk_upg_try_finish(x->s, fd))
				continue; /* moved: the stream is at the fd now */
		} else if (rc < 0) {
			n = rc;
		} else {
			/* after a short MSG_WAITALL read: only to learn whether a FIN is next */
			n = rsk_io_upg_kernel(x, fd, &m, probe ? flags | MSG_DONTWAIT : flags, rx,
					      &moved);
			if (moved)
				continue; /* the FIN was a move's: read on from the stream */
			if (n > 0 && rx && (flags & MSG_WAITALL) && !(flags & MSG_PEEK) &&
			    (size_t)n < rsk_iov_len(iov, cnt)) {
				total += n; /* short: a FIN (perhaps a move's), a signal or an error */
				rsk_iov_advance(&iov, &cnt, (size_t)n);
				probe = !probe; /* a probe that found more data: wait again */
				continue;
			}
			if (probe && n == -EAGAIN)
				n = 0; /* a signal cut the wait short: what we have, as TCP */
		}
		break;
	}
	if (base != stack)
		free(base);
	if (total > 0)
		n = n > 0 ? total + n : total;
	return n;
}

/*
 * Flags a TCP connection answers without its stream: 1 with the answer in *@res. Its error
 * queue holds nothing of ours (an empty queue says EAGAIN; read from the stream, it took the
 * application's data); no urgent byte is ever pending (EINVAL, as TCP without one; the
 * stream carries a sent one inline); a connected socket refuses MSG_FASTOPEN (EISCONN).
 */
static inline int rsk_io_flags_answer(int flags, int rx, ssize_t *res)
{
	if (rsk_likely(!(flags & (MSG_ERRQUEUE | MSG_OOB | MSG_FASTOPEN))))
		return 0;
	if (rx && (flags & MSG_ERRQUEUE))
		*res = -EAGAIN;
	else if (rx && (flags & MSG_OOB))
		*res = -EINVAL;
	else if (!rx && (flags & MSG_FASTOPEN))
		*res = -EISCONN;
	else
		return 0;
	return 1;
}

/* The application's call on a socket of ours: its iovec checked, then the right path. */
static ssize_t rsk_io_msg(int fd, const struct msghdr *msg, int flags, int rx)
{
	struct rsk_io_ctx x;
	ssize_t n;
	int rc;

	if ((int)msg->msg_iovlen < 0 || (int)msg->msg_iovlen > IOV_MAX)
		return -EINVAL;
	rc = rsk_io_begin(fd, flags, 0, &x);
	if (rc < 0)
		return rc;
	if (rc == 1)
		n = rsk_io_upg_msg(&x, fd, msg, flags, rx); /* (on TCP: the kernel answers them) */
	else if (!rsk_io_flags_answer(flags, rx, &n))
		n = rsk_io_accel_msg(&x, msg, flags, rx);
	rsk_sock_put(x.s);
	return n;
}

/*
 * Most data calls of a short connection that stays on TCP: one buffer, on a socket whose
 * lock-free route is open (calls/upgrade.c). They went through a message header, a copy of
 * its iovec and a call context first, about a third of the library's work per call. A
 * read under MSG_WAITALL, a FIN that was a move's, and everything else take the general path
 * (before any byte is taken: a move's FIN consumed nothing).
 */
int rsk_io_tcp_one(int fd, void *buf, size_t n, int flags, int rx, ssize_t *res)
{
	struct rsk_sock *s;
	ssize_t r;
	int moved;

	/* An accelerated slot has no TCP route: the general path at once, with one lookup and
	 * one reference where this took a second pair of atomics per call. */
	if ((rx && (flags & MSG_WAITALL)) || rsk_fdtab_is_accel(rsk_fdtab_load(fd)))
		return 0;
	if ((s = rsk_sock_get(fd)) == NULL)
		return 0;
	if (!rsk_upg_route_tcp(s)) {
		rsk_sock_put(s);
		return 0;
	}
	r = rsk_io_upg_counted(s, fd, rx, rsk_io_kernel_one(fd, buf, n, flags, rx), &moved);
	rsk_sock_put(s);
	if (moved)
		return 0; /* the FIN of a move: the stream has the rest */
	*res = rx ? r : rsk_io_epipe(r, flags);
	return 1;
}

ssize_t rsk_io_recvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t n = rsk_io_msg(fd, msg, flags, 1);

	msg->msg_namelen = 0; /* a stream has no source address per read, as TCP */
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	return n;
}

ssize_t rsk_io_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return rsk_io_epipe(rsk_io_msg(fd, msg, flags, 0), flags);
}

#define RSK_BOUNCE 65536

/*
 * A TCP-first socket still on TCP: the kernel's own sendfile (no copy through a bounce
 * buffer: nginx sends every static file so), counted as a send. 1 with its result in *@res,
 * 0 when the socket is not (or no longer) on TCP and the bounce path serves it.
 */
static int rsk_io_upg_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n, ssize_t *res)
{
	struct rsk_upg_route r;
	struct rsk_io_ctx x;
	int rc = rsk_io_begin(out_fd, 0, 0, &x), done = 0;

	if (rc < 0)
		return 0;
	if (rc == 1) {
		rc = rsk_upg_route(x.s, out_fd, 0, &r);
		if (rc == RSK_UPG_TCP) {
			*res = rsk_sys_sendfile(out_fd, in_fd, off_in, n);
			rc = rsk_upg_after(x.s, out_fd, 0, *res);
			done = rc == 0; /* 1: a move cut it short (nothing sent): the stream's */
			if (rc < 0)
				*res = rc;
		} else if (rc == RSK_UPG_STREAM) {
			rsk_upg_stream_done(x.s);
		} else if (rc < 0) {
			*res = rc;
			done = 1;
		}
	}
	rsk_sock_put(x.s);
	return done;
}

ssize_t rsk_io_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n)
{
	char *buf;
	struct iovec iov;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t got, sent, total = 0;

	if (rsk_io_upg_sendfile(out_fd, in_fd, off_in, n, &total))
		return total;
	total = 0;
	if ((buf = malloc(RSK_BOUNCE)) == NULL)
		return -ENOMEM;
	while ((size_t)total < n) {
		size_t want = n - (size_t)total < RSK_BOUNCE ? n - (size_t)total : RSK_BOUNCE;

		got = off_in ? rsk_sys_ret(pread(in_fd, buf, want, *off_in))
			     : rsk_sys_read(in_fd, buf, want);
		if (got <= 0) {
			if (got < 0 && total == 0)
				total = got;
			break;
		}
		iov.iov_base = buf;
		iov.iov_len = (size_t)got;
		sent = rsk_io_sendmsg(out_fd, &msg, MSG_NOSIGNAL);
		if (sent <= 0) {
			if (total == 0)
				total = sent;
			break;
		}
		if (off_in)
			*off_in += sent;
		else if (sent < got) /* give back what we read but could not send */
			(void)lseek(in_fd, sent - got, SEEK_CUR);
		total += sent;
		if (sent < got)
			break;
	}
	free(buf);
	return total;
}

/*
 * TCP's splice from a pipe moves what the pipe holds, up to @n: it waits only while the pipe
 * is empty (with SPLICE_F_NONBLOCK not at all: EAGAIN), and says 0 once its writers are
 * gone. Before, the pipe was read as sendfile reads a file, until @n: a pipe holding less
 * waited for bytes that might never come. One read takes what is there; all of it is then
 * sent (a non-blocking socket's short send loses the rest, as before: the pipe cannot take
 * it back). Only a pipe can be spliced from into a socket (EINVAL), at no offset (ESPIPE).
 */
ssize_t rsk_io_splice_to(int in_fd, loff_t *off_in, int out_fd, size_t n, unsigned int flags)
{
	struct pollfd p = {.fd = in_fd, .events = POLLIN};
	struct iovec iov;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct stat st;
	ssize_t got, sent;
	char *buf;

	if (fstat(in_fd, &st) < 0)
		return -errno;
	if (!S_ISFIFO(st.st_mode))
		return -EINVAL;
	if (off_in != NULL)
		return -ESPIPE;
	if (n == 0)
		return 0;
	if ((flags & SPLICE_F_NONBLOCK) && rsk_sys_poll(&p, 1, 0) == 0)
		return -EAGAIN;
	if ((buf = malloc(RSK_BOUNCE)) == NULL)
		return -ENOMEM;
	got = rsk_sys_read(in_fd, buf, n < RSK_BOUNCE ? n : RSK_BOUNCE);
	iov.iov_base = buf;
	iov.iov_len = got > 0 ? (size_t)got : 0;
	sent = got > 0 ? rsk_io_sendmsg(out_fd, &msg, MSG_NOSIGNAL) : got;
	free(buf);
	return sent;
}

ssize_t rsk_io_splice_from(int in_fd, int out_fd, loff_t *off_out, size_t n)
{
	char *buf = malloc(RSK_BOUNCE);
	struct iovec iov = {buf, n < RSK_BOUNCE ? n : RSK_BOUNCE};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t got, put;

	if (buf == NULL)
		return -ENOMEM;
	got = rsk_io_recvmsg(in_fd, &msg, 0);
	if (got > 0) {
		put = off_out ? rsk_sys_ret(pwrite(out_fd, buf, (size_t)got, *off_out))
			      : rsk_sys_write(out_fd, buf, (size_t)got);
		if (put < 0)
			got = put; /* the bytes are lost, as with a failing splice target */
		else if (off_out)
			*off_out += put;
	}
	free(buf);
	return got;
}

/* Run @fn on the connection of accelerated socket @fd with the lock held. */
#define RSK_WITH_CONN(fd, c, body)                                                                 \
	do {                                                                                       \
		struct rsk_sock *s_ = rsk_sock_get(fd);                                            \
		if (s_ == NULL || s_->conn == NULL) {                                              \
			if (s_ != NULL)                                                            \
				rsk_sock_put(s_);                                                  \
			return -EBADF;                                                             \
		}                                                                                  \
		c = s_->conn;                                                                      \
		rsk_conn_lock(c);                                                                  \
		body;                                                                              \
		rsk_conn_unlock(c);                                                                \
		rsk_sock_put(s_);                                                                  \
	} while (0)

/* A TCP-first socket still on (or leaving) TCP: its own shutdown (calls/upgrade.c). */
static int rsk_io_shutdown_upg(int fd, int how, int *done)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int rc = 0;

	*done = s != NULL && s->conn == NULL && s->upg != NULL;
	if (*done)
		rc = rsk_upg_shutdown(s, fd, how);
	if (s != NULL)
		rsk_sock_put(s);
	return rc;
}

int rsk_io_shutdown(int fd, int how)
{
	struct rsk_conn *c;
	int rc = 0, done;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	rc = rsk_io_shutdown_upg(fd, how, &done);
	if (done)
		return rc;
	RSK_WITH_CONN(fd, c, {
		(void)rsk_stream_progress(&c->st);
		if (rsk_stream_ended(&c->st))
			rc = -ENOTCONN; /* TCP's socket is CLOSE: nothing to shut */
		if (rc == 0 && how != SHUT_WR)
			c->st.shut_rd = 1;
		if (rc == 0 && how != SHUT_RD)
			rc = rsk_stream_shutdown_wr(&c->st);
		rsk_conn_sync(c, fd);
	});
	return rc;
}

void rsk_io_setfl(int fd, int flags)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	if (s->conn != NULL)
		s->conn->nonblock = (flags & O_NONBLOCK) != 0;
	rsk_sock_put(s);
}
