/*
 * connect(): decide whether the connection may take a faster path, and take it through the
 * chosen transport's connection-management table. Every resource is acquired before the
 * real TCP connect, so each failure up to that point is a clean fallback with its reason;
 * after it the connection is ours. Also the kernel connect's own bookkeeping.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/proc.h"
#include "base/stats.h"
#include "base/sys.h"
#include "calls.h"
#include "conn/conn.h"
#include "sock/bearer.h"
#include "sock/sock.h"
#include "transport/registry.h"
#include "history.h"
#include "sockopt.h"
#include "upgrade.h"

/*
 * Least time a dial_sync client waits for the server's first message: it is sent when the
 * server application accepts. If it does not come, the endpoint goes and the connection stays
 * TCP; a server that claims it after all sees the disconnect and resets it (never a silent
 * mismatch).
 */
#define RSK_HELLO_MIN_MS 5000

/* Why @s must stay on the kernel for this connect (a fallback reason), or -1 with *cm. */
static int rsk_connect_policy(struct rsk_sock *s, int fd, const struct sockaddr *addr,
			      socklen_t len, const struct rsk_cm_ops **cm)
{
	enum rdmasock_fallback why = RDMASOCK_FB_UNSUPPORTED;
	enum rsk_mode mode = rsk_policy_mode(RSK_ROLE_CLIENT, addr); /* rules file hook */

	if (mode == RSK_MODE_KERNEL || !rsk_config_port_allowed(&rsk_config, rsk_sa_port(addr)))
		return RDMASOCK_FB_POLICY;
	if (s->nfds != 1 || addr->sa_family != s->domain || len < rsk_sa_len(addr))
		return RDMASOCK_FB_UNSUPPORTED; /* (a socket past NEW never gets here) */
	if (rsk_fd_headroom(fd) < rsk_fd_reserve())
		return RDMASOCK_FB_FD_LIMIT; /* the application's own fds come first */
	*cm = rsk_transport_route(mode, addr, &why);
	return *cm != NULL ? -1 : (int)why;
}

/*
 * Start on TCP (and move later) rather than set the transport up now? A fallback reason
 * (tcp_first, setup_limit), or -1: set it up, holding a setup in progress (s->setup_held)
 * when the application will not wait for it inside this call (a non-blocking connect of a
 * transport that does not finish its setup here, to a destination without a verdict).
 * Taken before anything is committed.
 */
static int rsk_connect_tcp_first(struct rsk_sock *s, int fd, const struct rsk_cm_ops *cm,
				 const struct sockaddr *dest)
{
	enum rsk_start st = rsk_config_start(&rsk_config, cm->slow_setup);
	int verdict = st == RSK_START_LEARN ? rsk_hist_verdict(dest) : -1;

	if (st == RSK_START_TCP || verdict == 1)
		return RDMASOCK_FB_TCP_FIRST;
	/* (a destination whose connections live on earns every setup back: direct) */
	if (st != RSK_START_LEARN || verdict == 0 || cm->dial_sync ||
	    !(rsk_sock_getfl(s, fd, F_GETFL) & O_NONBLOCK))
		return -1;
	if (!rsk_hist_setup_begin())
		return RDMASOCK_FB_SETUP_LIMIT;
	__atomic_store_n(&s->setup_held, 1, __ATOMIC_RELEASE);
	return -1;
}

void rsk_connect_again(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	rsk_hist_setup_seen(s);
	rsk_sock_put(s);
}

struct rsk_client {
	const struct rsk_cm_ops *cm;
	struct rsk_dial d;
	struct rsk_conn *c;
	int app, ctl, tcp;
	int dialed; /* cm->dial succeeded: cm->undial owes its resources back */
};

static void rsk_client_undo(struct rsk_client *u)
{
	if (u->dialed && u->cm->undial != NULL)
		u->cm->undial(&u->d);
	if (u->c != NULL)
		rsk_conn_discard(u->c, u->app, u->ctl, u->tcp);
	u->c = NULL;
	u->dialed = 0;
}

/* The endpoint, the connection's local parts and the offer: a fallback reason, or -1. */
static int rsk_client_setup(struct rsk_client *u, struct rsk_sock *s, int fd,
			    const struct sockaddr *addr, socklen_t len)
{
	const struct rsk_cm_ops *cm = u->cm;
	int opts;

	u->c = rsk_conn_alloc(rsk_config.buf_count, cm->ep_size != NULL ? cm->ep_size() : 0);
	if (u->c == NULL)
		return RDMASOCK_FB_RESOURCES;
	u->d.fd = fd;
	u->d.dest = addr;
	u->d.dest_len = len;
	u->d.nbuf = rsk_config.buf_count;
	u->d.buf_size = rsk_config.buf_size;
	u->d.ep_mem = rsk_conn_ep_mem(u->c);
	if (cm->dial(&u->d) < 0)
		return u->d.why;
	u->dialed = 1;
	u->c->ep = u->d.ep;
	/* Known once, here: the readiness pair is made with them, and the switch needs them. */
	rsk_conn_know(u->c, NULL, NULL, rsk_sock_getfl(s, fd, F_GETFL), rsk_sock_getfl(s, fd, F_GETFD));
	if (rsk_conn_prepare(u->c, fd, &u->app, &u->ctl, &u->tcp) < 0)
		return RDMASOCK_FB_RESOURCES;
	if ((opts = rsk_sock_tcp_opts(s)) != 0) /* every setsockopt on it came through us */
		rsk_conn_know_opts(u->c, opts & RSK_SOCK_OPT_NODELAY, opts & RSK_SOCK_OPT_CORK);
	if (__atomic_load_n(&s->opts_set, __ATOMIC_ACQUIRE)) /* timeouts, linger, keepalive */
		rsk_opt_adopt_kernel(u->c, addr->sa_family, fd);
	if (cm->offer != NULL && cm->offer(&u->d, u->ctl) < 0)
		return u->d.why;
	if (!cm->keeps_ctl) { /* the offer handed it to the peer, our waker */
		(void)rsk_sys_close(u->ctl);
		u->ctl = -1;
	}
	return -1;
}

/* The kernel connect of a dial_sync client, finished here (bounded) even on a non-blocking
 * socket: the server's first message must be seen before the application may use it. */
static int rsk_connect_tcp_bounded(int fd, const struct sockaddr *addr, socklen_t len,
				   int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	socklen_t elen = sizeof(int);
	int err = 0, left, rc = rsk_sys_connect(fd, addr, len);

	if (rc == 0)
		return 0;
	if (rc != -EINPROGRESS && rc != -EINTR)
		return rc;
	do {
		left = (int)(deadline - rsk_now_ms());
		if (left <= 0)
			return -ETIMEDOUT;
	} while (rsk_sys_poll(&p, 1, left) <= 0);
	if ((rc = rsk_sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen)) < 0)
		return rc;
	return -err;
}

/*
 * A dial_sync client after its endpoint is up: TCP connect, the server's first message, then
 * the switch. If that message does not come (the process that accepted us does not own the
 * transport's listener, e.g. a prefork child), the endpoint goes and the connection simply
 * stays TCP: the application has not sent a byte yet. Returns what connect() reports.
 */
static int rsk_connect_sync(struct rsk_sock *s, int fd, const struct sockaddr *addr,
			    socklen_t len, struct rsk_client *u)
{
	int64_t deadline = rsk_now_ms() + (int64_t)rsk_config.connect_timeout_ms;
	int nonblock = (rsk_sock_getfl(s, fd, F_GETFL) & O_NONBLOCK) != 0;
	int rc = rsk_connect_tcp_bounded(fd, addr, len, deadline);

	if (rc < 0) {
		rsk_client_undo(u);
		return rc;
	}
	if (deadline < rsk_now_ms() + RSK_HELLO_MIN_MS)
		deadline = rsk_now_ms() + RSK_HELLO_MIN_MS;
	rc = rsk_conn_await_first(u->c, deadline);
	if (rc < 0) {
		rsk_dbg("fd %d: no hello from the server (%s): staying on TCP", fd, strerror(-rc));
		if (u->cm->dial_failed != NULL)
			u->cm->dial_failed(&u->d);
		rsk_client_undo(u);
		s->fb_reason = RDMASOCK_FB_HANDSHAKE;
		rsk_connect_done(fd, nonblock ? -EINPROGRESS : 0);
		return nonblock ? -EINPROGRESS : 0;
	}
	if (u->ctl >= 0)
		rsk_conn_show_initial(u->c, u->app, u->ctl); /* the server may have spoken already */
	rc = rsk_sock_become(s, fd, u->c, u->app, u->ctl, u->tcp, addr);
	if (rc < 0) {
		rsk_client_undo(u);
		return rc;
	}
	/* A non-blocking connect reports EINPROGRESS as TCP does; the socket is writable and
	 * SO_ERROR 0 at once. */
	return nonblock ? -EINPROGRESS : 0;
}

/* The others: the offer went before our SYN, so whoever accepts this will find it. */
static int rsk_connect_async(struct rsk_sock *s, int fd, const struct sockaddr *addr,
			     socklen_t len, struct rsk_client *u)
{
	int rc = rsk_sys_connect(fd, addr, len), inprogress = rc == -EINPROGRESS;

	if (rc < 0 && !inprogress) {
		rsk_client_undo(u);
		return rc;
	}
	/* Not connected at once (a full backlog): as a kernel connect, the handshake must say
	 * when it is done -- with the offer taken back it stays TCP. */
	if (inprogress && u->cm->withdraw != NULL && u->cm->withdraw(&u->d, fd) == 1) {
		rsk_dbg("fd %d: the handshake is slow: the connection stays on TCP", fd);
		rsk_client_undo(u);
		s->tcp_lent = 1; /* the offer carried our socket: see rsk_life_closed */
		s->forks_at_lend = rsk_proc_forks();
		s->fb_reason = RDMASOCK_FB_HANDSHAKE;
		rsk_connect_done(fd, -EINPROGRESS);
		return -EINPROGRESS;
	}
	if (u->cm->dialed != NULL)
		u->cm->dialed(&u->d);
	u->dialed = 0; /* what the dial holds now belongs to the endpoint */
	if (u->d.peer_len != 0) /* the withdraw's look at the handshake read it */
		rsk_conn_know(u->c, NULL, (const struct sockaddr *)&u->d.peer, -1, -1);
	rc = rsk_sock_become(s, fd, u->c, u->app, u->ctl, u->tcp, addr);
	if (rc < 0) {
		rsk_client_undo(u);
		return rc;
	}
	/* Non-blocking: EINPROGRESS, as the kernel said; the readiness socket is writable and
	 * SO_ERROR reads 0 at once (the transport does not depend on the handshake). */
	return inprogress ? -EINPROGRESS : 0;
}

/*
 * Through a listener's same-host bearer (sock/bearer.h), if it has one: @fd's number names
 * the unix connection, which is not ours to track (1, with *@rc 0). 0: connect as usual,
 * nothing changed.
 *
 * A non-blocking connect says 0 too, as a unix socket's does and as POSIX allows for any:
 * the connection is made. Saying EINPROGRESS, as TCP's does, cost a client the wait for
 * writability and a connect again to learn it (ab: 3.5 of its 19 system calls per
 * connection, an epoll_ctl pair, the connect's EINVAL and our getsockname to make it
 * EISCONN), for a connection that was there all along.
 */
static int rsk_connect_bearer(struct rsk_sock *s, int fd, const struct sockaddr *addr,
			      socklen_t len, int *rc)
{
	struct rsk_sock_newopts *opts;
	int r;

	/* Its own address (TCP's), or an option set before the connect that a unix socket
	 * cannot carry (SO_LINGER: its close never resets the peer; sock/bearer.h). */
	if (__atomic_load_n(&s->app_bound, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&s->app_opts, __ATOMIC_ACQUIRE))
		return 0;
	r = rsk_bearer_connect(fd, addr, len, rsk_sock_getfl(s, fd, F_GETFL),
			       rsk_sock_getfl(s, fd, F_GETFD));
	rsk_hist_set_no_bearer(addr, r < 0 && r != -EAGAIN); /* (a full backlog: not for long) */
	if (r < 0)
		return 0;
	__atomic_store_n(&s->accounted, 1, __ATOMIC_RELEASE); /* no TCP bytes to count */
	/* The options set before it, set again on the unix socket (read back as set). */
	opts = rsk_sock_newopts_take(s);
	(void)rsk_sock_release_fd(fd);
	rsk_opt_standin_adopt(fd, opts);
	free(opts);
	*rc = 0;
	return 1;
}

/* One connect in RSK_CONNECT_SAMPLE, spread evenly over any interleaving of destinations
 * (the top bits of a counter times the golden ratio: a Weyl sequence). */
#define RSK_CONNECT_SAMPLE_BITS 3
static int rsk_connect_sampled(void)
{
	static uint32_t n;
	uint32_t x = __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) * 2654435761u;

	return (x >> (32 - RSK_CONNECT_SAMPLE_BITS)) == 0;
}

/*
 * Try the same-host bearer for this connect (the policy chose transport @cm)? With
 * RDMASOCK_BEARER=unix wherever a listener has one. By default (auto) only where TCP first
 * would keep the connection on TCP anyway, the setup not paying: a transport that learns
 * (RSK_START_LEARN: shm) and a destination whose connections end short (history.h). A
 * bearer connection is the kernel's unix socket and never moves to a transport, and its end
 * writes no history, so one such connect in eight takes TCP first still: its end keeps the
 * verdict true, and a destination whose connections begin to live on goes direct again.
 * Where the bearer found no rendezvous lately (a server without the library), only that
 * one in eight tries it again.
 */
static int rsk_connect_bearer_wanted(const struct rsk_cm_ops *cm, const struct sockaddr *dest)
{
	int sampled;

	if (!rsk_bearer_allowed())
		return 0;
	if (rsk_config.bearer != RSK_BEARER_AUTO)
		return 1;
	if (rsk_config_start(&rsk_config, cm->slow_setup) != RSK_START_LEARN ||
	    rsk_hist_verdict(dest) != 1)
		return 0;
	sampled = rsk_connect_sampled();
	return rsk_hist_no_bearer(dest) ? sampled : !sampled;
}

int rsk_connect(int fd, const struct sockaddr *addr, socklen_t len, int *rc)
{
	struct rsk_client u = {.app = -1, .ctl = -1, .tcp = -1};
	struct rsk_sock *s = rsk_sock_get(fd);
	int why, first;

	if (s == NULL)
		return 0;
	/* A connect again (APR asks for the result of a non-blocking one so) is the kernel's
	 * to answer, and the socket keeps the reason its first connect gave it. */
	if (s->state != RSK_SOCK_NEW) {
		rsk_sock_put(s);
		return 0;
	}
	s->port = rsk_sa_port(addr); /* (the kernel's connect rejects a short @addr) */
	why = rsk_connect_policy(s, fd, addr, len, &u.cm);
	if (why < 0 && rsk_connect_bearer_wanted(u.cm, addr) &&
	    rsk_connect_bearer(s, fd, addr, len, rc)) {
		rsk_sock_put(s);
		return 1;
	}
	free(rsk_sock_newopts_take(s)); /* (kept for a bearer's connect only) */
	if (why < 0 && s->upg == NULL && (first = rsk_connect_tcp_first(s, fd, u.cm, addr)) >= 0 &&
	    rsk_upg_client(s, fd, addr, len, u.cm) == 0)
		why = first; /* the kernel connect; it may move later */
	if (why < 0)
		why = rsk_client_setup(&u, s, fd, addr, len);
	if (why >= 0 && u.d.start_tcp) { /* not now, but once connected (shm: no bell) */
		rsk_client_undo(&u);
		if (s->upg != NULL || rsk_upg_client(s, fd, addr, len, u.cm) < 0)
			why = RDMASOCK_FB_RESOURCES;
	}
	if (why >= 0) {
		s->fb_reason = (enum rdmasock_fallback)why;
		rsk_dbg("fd %d: connect stays on the kernel (%s)", fd, rsk_fallback_name(why));
		rsk_client_undo(&u);
		rsk_hist_setup_seen(s); /* no setup (any taken above) */
		rsk_sock_put(s);
		return 0;
	}
	*rc = u.cm->dial_sync ? rsk_connect_sync(s, fd, addr, len, &u)
			      : rsk_connect_async(s, fd, addr, len, &u);
	/* Only a setup that went on past this call is in progress: connected at once, failed
	 * or left on TCP (a withdrawn offer), it is over. */
	if (*rc != -EINPROGRESS || s->conn == NULL)
		rsk_hist_setup_seen(s);
	rsk_sock_put(s);
	return 1;
}

/* Without the socket's lock (one round trip per connect less): the state moves by atomic
 * stores, and a connection is counted once whoever counts it (rsk_sock_count). */
void rsk_connect_done(int fd, int rc)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int was = RSK_SOCK_NEW;

	if (s == NULL)
		return;
	if (rc == 0 || rc == -EISCONN) {
		__atomic_store_n(&s->state, RSK_SOCK_CONNECTED, __ATOMIC_RELEASE);
		rsk_sock_count(s, s->port);
	} else if (rc == -EINPROGRESS || rc == -EALREADY) {
		/* (a data call of another thread may have found it connected already) */
		(void)__atomic_compare_exchange_n(&s->state, &was, RSK_SOCK_CONNECTING, 0,
						  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	}
	rsk_sock_put(s);
}

void rsk_connect_so_error(int fd, int err)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	/* Nothing to settle (no lock then): not connecting, or a TCP-first socket's SO_ERROR 0
	 * (its data calls come to us, and its first one that moves data says it is connected,
	 * without a system call of ours: calls/upgrade.c). */
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != RSK_SOCK_CONNECTING ||
	    (err == 0 && __atomic_load_n(&s->upg, __ATOMIC_ACQUIRE) != NULL)) {
		rsk_sock_put(s);
		return;
	}
	pthread_mutex_lock(&s->lock);
	/* SO_ERROR 0 also while the handshake is still on: the peer's name says it is done. */
	if (s->state == RSK_SOCK_CONNECTING && err == 0 && s->upg == NULL &&
	    rsk_addr_peer_port(fd) != 0) {
		__atomic_store_n(&s->state, RSK_SOCK_CONNECTED, __ATOMIC_RELEASE);
		rsk_sock_count(s, s->port);
	} else if (s->state == RSK_SOCK_CONNECTING && err != 0) {
		__atomic_store_n(&s->state, RSK_SOCK_NEW, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}
