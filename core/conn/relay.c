/*
 * Relay of a connection through a plain byte pipe (see relay.h). Two cases share it:
 * - a verbs connection a forked child may serve: a queue pair belongs to the process that
 *   made it, so at the fork the app end every holder keeps becomes an ordinary unix stream
 *   socket carrying the data itself, and the parent's loop moves bytes between its other end
 *   (our ctl end) and the QP;
 * - a connection used through stdio (fdopen, a dup onto 0-2): glibc reads and writes with
 *   its internal calls, which no preload sees. A shm peer keeps writing readiness tokens
 *   into the app end, so the pipe is a fresh socketpair put behind the application's
 *   numbers, and the relay keeps the app end and reads it as the application did: the
 *   peer's tokens wake it, a fill blocks it, the partner's hang-up tells it the peer died.
 * The stream's flow control holds on the endpoint side and the socket buffers' on the pipe
 * side. The relay hooks itself into the connection's events (conn.c) and watches its fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/ready.h"
#include "base/stats.h"
#include "base/sys.h"
#include "conn.h"
#include "relay.h"
#include "transport/registry.h"

#define RSK_RELAY_BUF 65536
#define RSK_RELAY_ROUNDS 64    /* pump-and-arm rounds per step before other watches' turn */
#define RSK_RELAY_EXIT_MS 1000 /* at exit: how long written bytes may wait for the peer */
#define RSK_RELAY_PIPE_BUF (4 << 20) /* SO_SNDBUF of each end (tcp_wmem's default maximum) */

struct rsk_relay {
	struct rsk_conn *c;
	int pipe;     /* our end of the data pipe */
	int app;      /* the peer wakes the app end: our copy of it (else -1) */
	int own_pipe; /* the pipe is a fresh pair's, ours to close (else it is c->ctl_fd) */
	rsk_watch_t w, aw; /* the pipe, and the app end */
	int over;     /* the release is ours or on its way (under the connection lock) */
	int paused;   /* a hand-off is under way: steps do nothing (connection lock) */
	int take;     /* goes to the helper being forked (under rsk_relay_lock) */
	int handed;   /* runs in a helper process: 1 while it is forked, 2 once this process
		       * only has to forget it (under rsk_relay_lock) */
	int again;    /* a deferred step is queued: it frees the relay if released meanwhile */
	int gone;     /* released while that step was queued (under rsk_relay_lock) */
	char in[RSK_RELAY_BUF]; /* app -> stream, not sent yet */
	char out[RSK_RELAY_BUF]; /* stream -> app, not written yet */
	uint32_t in_off, in_len, out_off, out_len;
	int app_eof;  /* every holder closed or shut its writing side */
	/* An orphan: every holder of the app end is gone (closed, or the program died). It
	 * ends after rsk_config.orphan_ms without a byte moving, as the kernel ends an
	 * orphaned TCP socket. On the loop thread only (and adopt, before the loop runs). */
	int orphan;
	int expired;  /* its time ran out: the relay is over (connection lock) */
	int tfd;      /* its timer (a timerfd), or -1 */
	rsk_watch_t tw;
	int64_t moved_us; /* when a byte last moved, once an orphan (connection lock) */
	int peer_eof; /* the peer's FIN reached the app */
	int dead;     /* error: nothing more moves */
	int unread;   /* the app went leaving data of the peer unread: TCP resets */
	uint64_t up, down; /* bytes moved each way */
	struct rsk_relay *next; /* this process's relays */
};

/* This process's relays (exit, fork and exec walk them), and the flags above. */
static pthread_mutex_t rsk_relay_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_relay *rsk_relays;
static int rsk_relay_n;
static uint32_t rsk_relay_done; /* relays released (a futex: the exec helper waits on it) */

int rsk_relay_count(void)
{
	return __atomic_load_n(&rsk_relay_n, __ATOMIC_RELAXED);
}

static void rsk_relay_list(struct rsk_relay *r)
{
	pthread_mutex_lock(&rsk_relay_lock);
	r->next = rsk_relays;
	rsk_relays = r;
	__atomic_add_fetch(&rsk_relay_n, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&rsk_relay_lock);
}

/* Take @r off the list; returns 1 if it may be freed now (no deferred step holds it). */
static int rsk_relay_unlist(struct rsk_relay *r)
{
	struct rsk_relay **pp;
	int free_now;

	pthread_mutex_lock(&rsk_relay_lock);
	for (pp = &rsk_relays; *pp != NULL && *pp != r; pp = &(*pp)->next)
		;
	if (*pp == r) {
		*pp = r->next;
		__atomic_sub_fetch(&rsk_relay_n, 1, __ATOMIC_RELAXED);
	}
	free_now = !__atomic_load_n(&r->again, __ATOMIC_ACQUIRE);
	r->gone = !free_now;
	pthread_mutex_unlock(&rsk_relay_lock);
	return free_now;
}

/*
 * From here no token or fill may reach the app end: it carries data only. Lock held; the
 * flag is set under it, so an event the loop is handling right now (it found no hook yet,
 * and waits for the lock) writes no token after our collect.
 */
static void rsk_relay_quiet(struct rsk_conn *c, int app_fd)
{
	c->relayed = 1;
	__atomic_store_n(&c->lazy, 0, __ATOMIC_RELAXED); /* the collect below takes a stale token too */
	__atomic_store_n(&c->lazy_never, 1, __ATOMIC_RELAXED);
	rsk_conn_arm_locked(c); /* the relay's hook runs on events: none may stay quiet */
	rsk_ready_collect(rsk_ep_ready(c->ep), &c->ro, app_fd, 100);
	rsk_ready_flush(c->ctl_fd); /* a fill of ours must not be relayed as data */
	c->ro.fill = 0;
	/* The app end may have had its minimal send buffer (unwritable); as a data pipe it
	 * needs a normal one. */
	(void)rsk_sys_setsockopt_int(app_fd, SOL_SOCKET, SO_SNDBUF, RSK_RELAY_BUF * 4);
	c->ro.small = 0;
}

static int rsk_relay_pump(struct rsk_conn *c, struct rsk_relay *r);

static void rsk_relay_release(void *arg)
{
	struct rsk_relay *r = arg;
	int app = r->app;

	/* The app end goes after the stream ended: its hang-up must not reach the peer as our
	 * death before our FIN. */
	r->app = -1;
	rsk_conn_release(r->c); /* frees the relay (on_release) */
	if (app >= 0)
		rsk_fd_unhide_close(app);
	__atomic_add_fetch(&rsk_relay_done, 1, __ATOMIC_RELEASE);
	(void)rsk_sys_futex(&rsk_relay_done, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
}

/* After an arm: could another round move something? (A lower that found a message leaves
 * the app end shown, which makes no new edge.) */
static int rsk_relay_more(struct rsk_conn *c, struct rsk_relay *r)
{
	return (r->out_len == 0 && !r->peer_eof && rsk_stream_readable(&c->st)) ||
	       (r->in_len > 0 && rsk_stream_writable(&c->st));
}

/* Pump, then arm the app end's wake-ups (a peer-woken relay), until nothing more can move.
 * Lock held. 1: the relay is over; 0: it waits for an event; 2: more is left (bounded). */
static int rsk_relay_run(struct rsk_conn *c, struct rsk_relay *r)
{
	int i;

	for (i = 0; i < RSK_RELAY_ROUNDS; i++) {
		if (rsk_relay_pump(c, r))
			return 1;
		if (r->app < 0)
			return 0; /* our own loop wakes us (conn.c's hook) */
		rsk_conn_sync(c, r->app);
		if (!rsk_relay_more(c, r))
			return 0;
	}
	return 2;
}

static void rsk_relay_again(void *arg);

/* Move what can move; once the relay is over, release the connection (deferred: releasing
 * takes locks a callback may not). On the event loop, or the starting thread. */
static void rsk_relay_step(struct rsk_conn *c, void *ext)
{
	struct rsk_relay *r = ext;
	int st, release, again;

	rsk_conn_lock(c);
	if (r->paused) {
		rsk_conn_unlock(c);
		return; /* the hand-off's helper, or this process again, steps it afterwards */
	}
	st = rsk_relay_run(c, r);
	release = st == 1 && !r->over;
	if (release)
		r->over = 1;
	rsk_conn_unlock(c);
	/* No list lock here (resume_all steps under it): the flag is taken atomically, and read
	 * under the list lock where the relay is freed. */
	again = st == 2 && !__atomic_exchange_n(&r->again, 1, __ATOMIC_ACQ_REL);
	if (release && rsk_evloop_defer(rsk_relay_release, r) < 0) {
		rsk_conn_lock(c);
		r->over = 0; /* the next event tries again */
		rsk_conn_unlock(c);
	}
	if (again && rsk_evloop_defer(rsk_relay_again, r) < 0)
		__atomic_store_n(&r->again, 0, __ATOMIC_RELEASE);
}

/* A step that stopped at its bound goes on after the loop's other work. */
static void rsk_relay_again(void *arg)
{
	struct rsk_relay *r = arg;
	int gone;

	pthread_mutex_lock(&rsk_relay_lock);
	__atomic_store_n(&r->again, 0, __ATOMIC_RELEASE);
	gone = r->gone;
	pthread_mutex_unlock(&rsk_relay_lock);
	if (gone)
		free(r); /* released meanwhile: its connection is gone too */
	else
		rsk_relay_step(r->c, r);
}

/* ---- an orphan: the program closed its last fd for the connection, or died ---- */

/* Arm the orphan's timer @ms from now (a timerfd: the loop has no timers of its own). */
static void rsk_relay_orphan_arm(struct rsk_relay *r, int64_t ms)
{
	struct itimerspec its = {.it_value = {ms / 1000, (ms % 1000) * 1000000}};

	if (r->tfd >= 0)
		(void)timerfd_settime(r->tfd, 0, &its, NULL);
}

/* Is anything still on its way to the peer (the kernel's orphan would abort over it)? */
static int rsk_relay_pipe_has(struct rsk_relay *r);

static void rsk_relay_on_timer(void *arg, uint32_t events)
{
	struct rsk_relay *r = arg;
	struct rsk_conn *c = r->c;
	int64_t left, now = rsk_now_us();
	uint64_t n;

	(void)events;
	(void)rsk_sys_read(r->tfd, &n, sizeof(n));
	rsk_conn_lock(c);
	left = (int64_t)rsk_config.orphan_ms * 1000 - (now - r->moved_us);
	if (r->paused) /* a hand-off is under way: look again a whole period later */
		left = (int64_t)rsk_config.orphan_ms * 1000;
	if (left > 0 || r->over || r->expired) {
		rsk_conn_unlock(c);
		if (left > 0)
			rsk_relay_orphan_arm(r, left / 1000 + 1);
		return;
	}
	/* Bytes the peer never took: the kernel's orphan gives up and resets (ECONNRESET
	 * after what the peer's buffer holds); all delivered, our FIN too: it waited for the
	 * peer's FIN (FIN_WAIT2) and goes quietly. */
	if (r->in_len > 0 || rsk_relay_pipe_has(r) || !c->st.fin_sent)
		rsk_stream_reset(&c->st);
	r->expired = 1;
	rsk_conn_unlock(c);
	rsk_warn("relay of %p: the program is gone and its peer took nothing for %u ms: ended",
		 (void *)c, rsk_config.orphan_ms);
	rsk_relay_step(c, r);
}

static void rsk_relay_orphaned(struct rsk_relay *r)
{
	int fd;

	r->orphan = 1;
	rsk_conn_lock(r->c);
	r->moved_us = rsk_now_us();
	rsk_conn_unlock(r->c);
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd >= 0 && (r->tfd = rsk_fd_hide(fd)) >= 0 &&
	    rsk_evloop_watch(r->tfd, EPOLLIN, rsk_relay_on_timer, r, &r->tw) == 0) {
		rsk_relay_orphan_arm(r, rsk_config.orphan_ms);
		return;
	}
	rsk_warn("relay of %p: no orphan timer; it waits for its peer however long", (void *)r->c);
	if (r->tfd >= 0)
		rsk_fd_unhide_close(r->tfd);
	r->tfd = -1;
}

/* The pipe: data, room, or a hang-up, which means every holder of the app end is gone (a
 * half close makes none; both halves closed make the relay over anyway). */
static void rsk_relay_on_pipe(void *arg, uint32_t events)
{
	struct rsk_relay *r = arg;

	if ((events & EPOLLHUP) && !r->orphan)
		rsk_relay_orphaned(r);
	rsk_relay_step(r->c, r);
}

/* The app end we keep: a token (data or EOF), a drain (room), or the peer's hang-up. */
static void rsk_relay_on_app(void *arg, uint32_t events)
{
	struct rsk_relay *r = arg;

	if (events & (EPOLLHUP | EPOLLERR))
		rsk_conn_saw_events(r->c, r->app, POLLHUP);
	rsk_relay_step(r->c, r);
}

static void rsk_relay_close_fds(struct rsk_relay *r)
{
	if (r->app >= 0)
		rsk_fd_unhide_close(r->app);
	if (r->own_pipe && r->pipe >= 0)
		rsk_fd_unhide_close(r->pipe);
	r->app = r->pipe = -1;
}

static void rsk_relay_free(struct rsk_conn *c, void *ext)
{
	struct rsk_relay *r = ext;

	(void)c;
	rsk_evloop_unwatch(r->w);
	rsk_evloop_unwatch(r->aw);
	rsk_evloop_unwatch(r->tw);
	if (r->tfd >= 0)
		rsk_fd_unhide_close(r->tfd);
	rsk_relay_close_fds(r);
	if (rsk_relay_unlist(r))
		free(r);
}

/* The pipe stands in for the TCP socket: its ends carry the connection's names (base/addr.h)
 * so that getsockname/getpeername on the app end answer as for TCP, also after an exec
 * (inetd). Best effort: an unnamed end reports AF_UNIX, as before. */
static void rsk_relay_name(const struct rsk_conn *c, int app_side, int our_side)
{
	if (c->local_len > 0)
		(void)rsk_addr_name_bind(app_side, (const struct sockaddr *)&c->local, c->local_len,
					 NULL);
	if (c->peer_len > 0)
		(void)rsk_addr_name_bind(our_side, (const struct sockaddr *)&c->peer, c->peer_len,
					 NULL);
}

/* The peer wakes the app end: a fresh pipe (*@pipe_app its application side, carrying
 * @app_fd's O_NONBLOCK), and our own copy of the app end. */
static int rsk_relay_pipe(struct rsk_relay *r, int app_fd, int *pipe_app)
{
	int sv[2], fl = rsk_sys_fcntl(app_fd, F_GETFL, 0), rc;

	rc = rsk_sys_socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
	if (rc < 0)
		return rc;
	r->own_pipe = 1;
	r->app = rsk_fd_hide_dup(app_fd);
	r->pipe = rsk_fd_hide(sv[1]);
	rc = r->app < 0 ? r->app : r->pipe;
	if (rc >= 0)
		rc = rsk_sys_fcntl(r->pipe, F_SETFL, O_NONBLOCK);
	/* The pipe stands for TCP's socket buffers, which loopback grows to MiBs: a program that
	 * writes a MiB before it reads its echo must not deadlock on a 200 KiB unix socket.
	 * (The kernel caps the size at net.core.wmem_max; memory is only taken as used.) */
	(void)rsk_sys_setsockopt_int(sv[0], SOL_SOCKET, SO_SNDBUF, RSK_RELAY_PIPE_BUF);
	(void)rsk_sys_setsockopt_int(r->pipe, SOL_SOCKET, SO_SNDBUF, RSK_RELAY_PIPE_BUF);
	if (rc >= 0 && fl > 0 && (fl & O_NONBLOCK))
		rc = rsk_sys_fcntl(sv[0], F_SETFL, O_NONBLOCK);
	if (rc < 0) {
		rsk_relay_close_fds(r);
		(void)rsk_sys_close(sv[0]);
		return rc;
	}
	rsk_relay_name(r->c, sv[0], r->pipe);
	*pipe_app = sv[0];
	return 0;
}

/* Our own loop wakes the app end (verbs): it becomes the pipe, unless it can no longer
 * carry both ways. Lock held. */
static int rsk_relay_own(struct rsk_conn *c, struct rsk_relay *r, int app_fd)
{
	if (c->st.err || c->eof_shown || c->hup_shown || c->ctl_fd < 0)
		return -EBUSY;
	r->pipe = c->ctl_fd;
	r->app = -1;
	rsk_relay_quiet(c, app_fd);
	rsk_relay_name(c, app_fd, c->ctl_fd);
	return 0;
}

static int rsk_relay_watch(struct rsk_relay *r)
{
	int rc = rsk_evloop_watch(r->pipe, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				  rsk_relay_on_pipe, r, &r->w);

	if (rc == 0 && r->app >= 0)
		rc = rsk_evloop_watch(r->app, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				      rsk_relay_on_app, r, &r->aw);
	return rc;
}

int rsk_relay_start(struct rsk_conn *c, int app_fd, int *pipe_app)
{
	struct rsk_relay *r = calloc(1, sizeof(*r));
	int rc;

	*pipe_app = -1;
	if (r == NULL)
		return -ENOMEM;
	r->c = c;
	r->app = r->pipe = r->tfd = -1;
	if (c->ctl_fd < 0) {
		rc = rsk_relay_pipe(r, app_fd, pipe_app);
	} else {
		rsk_conn_lock(c);
		rc = rsk_relay_own(c, r, app_fd);
		rsk_conn_unlock(c);
	}
	if (rc == 0)
		rc = rsk_conn_set_hook(c, rsk_relay_step, r, rsk_relay_free);
	if (rc < 0) {
		rsk_relay_close_fds(r);
		if (*pipe_app >= 0)
			(void)rsk_sys_close(*pipe_app);
		*pipe_app = -1;
		free(r);
		return rc;
	}
	rsk_relay_list(r);
	/* Under the list lock: a stream that ended before the switch makes the relay over at
	 * its first event, and the loop's release must not free it before our step. */
	pthread_mutex_lock(&rsk_relay_lock);
	rc = rsk_relay_watch(r);
	if (rc < 0)
		rsk_warn("relay of %p not watched (%s); its connection stalls", (void *)c,
			 strerror(-rc));
	rsk_dbg("connection %p now relayed through %s", (void *)c,
		r->own_pipe ? "a pipe of its own" : "its socketpair");
	rsk_relay_step(c, r); /* what is already there */
	pthread_mutex_unlock(&rsk_relay_lock);
	return 0;
}

/*
 * In-band credits (verbs): what the relay consumed goes back once the stream is empty and
 * the application has read everything we placed in the pipe, as for a reader whose recv
 * found nothing (the loop's settle): the peer's only proof that nothing of its was left
 * unread here should this process die, so it then reads EOF, not ECONNRESET. Bytes still in
 * the pipe keep theirs owed: a death now leaves them unread, which the peer must see as a
 * reset. The application's reads wake us (the pipe's EPOLLOUT edge), so a drained pipe is
 * seen. (Before, a relay returned credits at half a window only.) Asked only with nothing
 * of ours held back (out_len 0).
 */
static int rsk_relay_pipe_drained(const struct rsk_relay *r)
{
	int queued = 0;

	return rsk_sys_ioctl(r->pipe, SIOCOUTQ, (unsigned long)&queued) == 0 && queued == 0;
}

/* stream -> app. Returns 1 if something moved. */
static int rsk_relay_down(struct rsk_conn *c, struct rsk_relay *r)
{
	struct iovec iov = {r->out, sizeof(r->out)};
	ssize_t k;
	int moved = 0;

	if (r->out_len == 0 && !r->peer_eof) {
		k = rsk_stream_recv(&c->st, &iov, 1, 0);
		if (k > 0) {
			r->out_off = 0;
			r->out_len = (uint32_t)k;
			rsk_counter_add(&rsk_stats.bytes_received[c->transport], (uint64_t)k);
			moved = 1;
		} else if (k == 0) { /* the peer's FIN: the app sees EOF */
			(void)rsk_sys_shutdown(r->pipe, SHUT_WR);
			r->peer_eof = 1;
			moved = 1;
		} else if (k != -EAGAIN) {
			r->dead = 1;
		} else if (rsk_stream_credits_due(&c->st) && rsk_relay_pipe_drained(r)) {
			rsk_conn_settle_soon();
		}
	}
	if (r->out_len > 0) {
		k = rsk_sys_send(r->pipe, r->out + r->out_off, r->out_len,
				  MSG_DONTWAIT | MSG_NOSIGNAL); /* the loop never waits */
		if (k > 0) {
			r->out_off += (uint32_t)k;
			r->out_len -= (uint32_t)k;
			r->down += (uint64_t)k;
			moved = 1;
		} else if (k < 0 && k != -EAGAIN && k != -EINTR) {
			r->dead = 1; /* nobody holds the app end any more */
			r->unread = 1; /* and our bytes for it were never read */
		}
	}
	return moved;
}

/* app -> stream. Returns 1 if something moved. */
static int rsk_relay_up(struct rsk_conn *c, struct rsk_relay *r)
{
	struct iovec iov;
	ssize_t k;
	int moved = 0;

	if (r->in_len == 0 && !r->app_eof) {
		k = rsk_sys_recv(r->pipe, r->in, sizeof(r->in), MSG_DONTWAIT);
		if (k > 0) {
			r->in_off = 0;
			r->in_len = (uint32_t)k;
			moved = 1;
		} else if (k == 0) {
			r->app_eof = 1;
			moved = 1;
		} else if (k == -ECONNRESET) {
			r->dead = 1; /* the app closed over relayed bytes it had not read */
			r->unread = 1;
		} else if (k != -EAGAIN && k != -EINTR) {
			r->app_eof = 1;
		}
	}
	if (r->in_len > 0) {
		iov.iov_base = r->in + r->in_off;
		iov.iov_len = r->in_len;
		k = rsk_stream_send(&c->st, &iov, 1, 0);
		if (k > 0) {
			r->in_off += (uint32_t)k;
			r->in_len -= (uint32_t)k;
			r->up += (uint64_t)k;
			rsk_counter_add(&rsk_stats.bytes_sent[c->transport], (uint64_t)k);
			moved = 1;
		} else if (k != -EAGAIN) {
			r->dead = 1;
		}
	}
	if (r->app_eof && r->in_len == 0 && !c->st.fin_sent && !c->st.fin_pending)
		(void)rsk_stream_shutdown_wr(&c->st);
	return moved;
}

/* Move what can move both ways (lock held). Returns 1 once the relay is over. */
static int rsk_relay_pump(struct rsk_conn *c, struct rsk_relay *r)
{
	int rounds;

	for (rounds = 0; rounds < 256 && !r->dead && !c->st.err; rounds++)
		if (!(rsk_relay_down(c, r) | rsk_relay_up(c, r)))
			break;
	if (rounds > 0 && r->moved_us != 0)
		r->moved_us = rsk_now_us(); /* an orphan's clock starts again */
	if (c->st.err || r->dead) { /* the app end learns it: EOF, then EPIPE on writes */
		rsk_dbg("relay of %p ends: %s (err %d rst %d fin %d)", (void *)c,
			c->st.err ? "stream reset" : "app end gone", c->st.err, c->st.rst_rcvd,
			c->st.fin_rcvd);
		if (r->unread && !c->st.err)
			rsk_stream_reset(&c->st);
		(void)rsk_sys_shutdown(r->pipe, SHUT_RDWR);
		return 1;
	}
	if ((r->app_eof && r->in_len == 0 && r->peer_eof && r->out_len == 0) || r->expired) {
		rsk_dbg("relay of %p is over%s: %llu bytes up, %llu down", (void *)c,
			r->expired ? " (an orphan out of time)" : "", (unsigned long long)r->up,
			(unsigned long long)r->down);
		return 1;
	}
	return 0;
}

/* ---- the process's end, and its forks ---- */

/* Does the pipe hold bytes the application wrote that we have not taken? */
static int rsk_relay_pipe_has(struct rsk_relay *r)
{
	char b;

	return rsk_sys_recv(r->pipe, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/*
 * Exit: move what the application wrote into the stream, waiting (bounded) for room, as
 * the kernel keeps sending a TCP socket's queue after its process is gone. What cannot be
 * delivered (the time ran out, or bytes of the peer we took for the application and could
 * not place) ends the stream with a reset, never a FIN that would claim a clean end.
 */
static void rsk_relay_flush(struct rsk_conn *c, struct rsk_relay *r)
{
	int64_t end = rsk_now_ms() + RSK_RELAY_EXIT_MS;
	int done;

	for (;;) {
		rsk_conn_lock(c);
		(void)rsk_relay_pump(c, r);
		if (r->app >= 0 && !c->st.err)
			rsk_conn_sync(c, r->app); /* so the peer's repost is noticed */
		done = r->dead || c->st.err || (r->in_len == 0 && !rsk_relay_pipe_has(r));
		if (done || rsk_now_ms() >= end) {
			if (!c->st.err && (r->in_len > 0 || r->out_len > 0 || r->unread))
				rsk_stream_reset(&c->st);
			rsk_conn_unlock(c);
			return;
		}
		rsk_conn_unlock(c);
		(void)rsk_sys_poll(NULL, 0, 1);
	}
}

/* Claim the next relay not yet claimed for the exit (its release becomes ours). */
static struct rsk_relay *rsk_relay_claim_next(void)
{
	struct rsk_relay *r, *found = NULL;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL && found == NULL; r = r->next) {
		rsk_conn_lock(r->c);
		if (!r->over) {
			r->over = 1;
			found = r;
		}
		rsk_conn_unlock(r->c);
	}
	pthread_mutex_unlock(&rsk_relay_lock);
	return found;
}

void rsk_relay_exit_all(void)
{
	struct rsk_relay *r;

	/* A relay already over is released by the loop (or dies with the process: its peer
	 * then sees the end the stream already has). */
	while ((r = rsk_relay_claim_next()) != NULL) {
		rsk_evloop_unwatch(r->w); /* no step of the loop's runs on it from here */
		rsk_evloop_unwatch(r->aw);
		r->w = r->aw = 0;
		rsk_relay_flush(r->c, r);
		rsk_relay_release(r);
	}
}

void rsk_relay_atfork_child(void)
{
	struct rsk_relay *r, *next;

	pthread_mutex_init(&rsk_relay_lock, NULL);
	for (r = rsk_relays; r != NULL; r = next) {
		next = r->next;
		rsk_relay_close_fds(r); /* the child's copies: the pipe's end is the parent's */
		free(r);
	}
	rsk_relays = NULL;
	__atomic_store_n(&rsk_relay_n, 0, __ATOMIC_RELAXED);
}

/* ---- exec: the relays go on in a helper process ---- */

/* Can another process take @r over? (Its endpoint tells which fds it holds.) */
static int rsk_relay_movable(const struct rsk_relay *r)
{
	return rsk_transport_cm(r->c->ep)->ep_fds != NULL;
}

/* Pause (@on) the relays a helper can take over, or resume those paused. A relay already
 * over is left to its release here; one in a helper already is not ours. List lock held. */
static int rsk_relay_pause_one(struct rsk_relay *r, int on)
{
	int ok;

	if (r->handed || (on ? !rsk_relay_movable(r) : !r->take))
		return 0; /* stays: it ends with this image (verbs: the QP does) */
	rsk_conn_lock(r->c);
	ok = !on || !r->over;
	if (ok)
		r->paused = on;
	rsk_conn_unlock(r->c);
	if (ok)
		r->take = on;
	return ok;
}

static int rsk_relay_pause(int on)
{
	struct rsk_relay *r;
	int n = 0;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL; r = r->next)
		n += rsk_relay_pause_one(r, on);
	pthread_mutex_unlock(&rsk_relay_lock);
	return n;
}

int rsk_relay_pause_all(void)
{
	return rsk_relay_pause(1) > 0;
}

void rsk_relay_resume_all(void)
{
	struct rsk_relay *r;

	/* Events that came while paused were taken and dropped: step each once. The loop may
	 * release one meanwhile, so each is stepped under the list lock (a release unlists
	 * under it first). */
	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL; r = r->next)
		if (rsk_relay_pause_one(r, 0))
			rsk_relay_step(r->c, r);
	pthread_mutex_unlock(&rsk_relay_lock);
}

int rsk_relay_fds(int *out, int max)
{
	const struct rsk_cm_ops *cm;
	struct rsk_relay *r;
	int n = 0;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL && n + 3 <= max; r = r->next) {
		if (!r->take)
			continue;
		cm = rsk_transport_cm(r->c->ep);
		out[n++] = r->pipe;
		if (r->app >= 0)
			out[n++] = r->app;
		n += cm->ep_fds(r->c->ep, out + n, max - n);
	}
	pthread_mutex_unlock(&rsk_relay_lock);
	return n;
}

int rsk_relay_adopt_all(void)
{
	struct rsk_relay **pp, *r;
	int n = 0;

	pthread_mutex_init(&rsk_relay_lock, NULL);
	__atomic_store_n(&rsk_relay_done, 0, __ATOMIC_RELAXED);
	/* Under the list lock: a relay that is over at its first event (all sent and ended
	 * before we got here) is released by the loop as soon as it is watched, and its
	 * release frees it only once unlisted, after we stepped the last one. */
	pthread_mutex_lock(&rsk_relay_lock);
	for (pp = &rsk_relays; (r = *pp) != NULL;) {
		if (!r->take) { /* not ours (its fds were closed here): the program's, another
				 * helper's, or one that ends with the exec'd image */
			*pp = r->next;
			__atomic_sub_fetch(&rsk_relay_n, 1, __ATOMIC_RELAXED);
			free(r);
			continue;
		}
		r->again = r->gone = r->paused = 0; /* deferred steps stayed behind */
		r->take = r->handed = r->over = 0;
		r->w = r->aw = r->tw = 0;
		/* an orphan's timer stayed behind (its fd closed): the pipe's hang-up, reported
		 * when it is watched again, starts a new one */
		r->orphan = 0;
		r->tfd = -1;
		if (rsk_relay_watch(r) < 0)
			rsk_warn("relay of %p not watched after exec", (void *)r->c);
		pp = &r->next;
		n++;
	}
	for (r = rsk_relays; r != NULL; r = r->next)
		rsk_relay_step(r->c, r);
	pthread_mutex_unlock(&rsk_relay_lock);
	return n;
}

void rsk_relay_wait_done(int n)
{
	uint32_t d;

	while ((d = __atomic_load_n(&rsk_relay_done, __ATOMIC_ACQUIRE)) < (uint32_t)n)
		(void)rsk_sys_futex(&rsk_relay_done, FUTEX_WAIT_PRIVATE, d, NULL);
}

/* ---- a relay outlives its process: it runs in a helper from its start ---- */

int rsk_relay_taken(void *ext)
{
	return ((const struct rsk_relay *)ext)->take;
}

/* Take @r for the helper (list lock held): no step of ours moves a byte of it from here,
 * and neither our exit nor our loop releases it. 1 if taken. */
static int rsk_relay_hand_one(struct rsk_relay *r)
{
	int ok;

	if (r->handed || !rsk_relay_movable(r))
		return 0;
	rsk_conn_lock(r->c);
	ok = !r->over;
	if (ok)
		r->over = r->paused = 1;
	rsk_conn_unlock(r->c);
	if (!ok)
		return 0;
	r->take = r->handed = 1;
	/* Events from here wait in the kernel objects for the helper's own watches: a callback
	 * of ours could take a wake-up (a token) the helper then never sees. */
	rsk_evloop_unwatch(r->w);
	rsk_evloop_unwatch(r->aw);
	r->w = r->aw = 0;
	rsk_conn_watching(r->c, 0);
	return 1;
}

int rsk_relay_hand_prepare(void)
{
	struct rsk_relay *r;
	int n = 0;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL; r = r->next)
		n += rsk_relay_hand_one(r);
	pthread_mutex_unlock(&rsk_relay_lock);
	return n;
}

void rsk_relay_hand_failed(void)
{
	struct rsk_relay *r;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL; r = r->next) {
		if (!r->take || r->handed != 1)
			continue;
		r->take = r->handed = 0;
		rsk_conn_lock(r->c);
		r->over = r->paused = 0;
		rsk_conn_unlock(r->c);
		rsk_conn_watching(r->c, 1);
		if (rsk_relay_watch(r) < 0)
			rsk_warn("relay of %p not watched again; it stalls", (void *)r->c);
		rsk_relay_step(r->c, r); /* what came meanwhile */
	}
	pthread_mutex_unlock(&rsk_relay_lock);
}

/* On the loop (after any step of ours still queued for @r): the helper runs it; close our
 * copies of its fds and forget it and its connection, whose stream the helper goes on with. */
static void rsk_relay_forget(void *arg)
{
	struct rsk_relay *r = arg;
	struct rsk_conn *c = r->c;

	rsk_relay_close_fds(r);
	if (rsk_relay_unlist(r))
		free(r);
	rsk_conn_forget(c);
}

void rsk_relay_hand_done(void)
{
	struct rsk_relay *r;

	pthread_mutex_lock(&rsk_relay_lock);
	for (r = rsk_relays; r != NULL; r = r->next) {
		if (!r->take || r->handed != 1)
			continue;
		r->take = 0;
		r->handed = 2;
		if (rsk_evloop_defer(rsk_relay_forget, r) < 0)
			rsk_warn("relay of %p: our copies of its fds stay open", (void *)r->c);
	}
	pthread_mutex_unlock(&rsk_relay_lock);
}
