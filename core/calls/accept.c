/*
 * listen() and accept(): a listening socket gets the transports' listeners beside it, and an
 * accepted TCP connection whose client offered a faster path is claimed and switched over.
 * A client that committed to that path and cannot be served is dropped (ECONNABORTED, as the
 * kernel reports a connection lost before accept), never left waiting.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/proc.h"
#include "base/stats.h"
#include "base/sys.h"
#include "calls.h"
#include "sockopt.h"
#include "conn/conn.h"
#include "sock/bearer.h"
#include "sock/face.h"
#include "sock/listener.h"
#include "sock/sock.h"
#include "transport/registry.h"
#include "upgrade.h"

void rsk_accept_listen_done(int fd, int backlog)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	enum rdmasock_fallback why = RDMASOCK_FB_RESOURCES;
	int rc;

	(void)backlog; /* the companions' queues are sized for bursts, not by the application */
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->state = RSK_SOCK_LISTENING;
	s->port = rsk_addr_local_port(rsk_face_kfd(fd)); /* (a listen again: a face already) */
	if (s->lst == NULL && rsk_config.mode != RSK_MODE_KERNEL &&
	    rsk_listener_open(fd, &s->lst, &why) < 0)
		s->fb_reason = why;
	/* Last: the companions asked the TCP listener at this number for its address. */
	if (s->face_fd == 0 && rsk_config.mode != RSK_MODE_KERNEL && rsk_face_allowed() &&
	    (rc = rsk_face_open(s, fd)) < 0)
		rsk_info("fd %d: no face for the listener (%s); it stays a plain socket", fd,
			 strerror(-rc));
	if (s->face_fd != 0 && s->bearer_fd == 0 && rsk_bearer_allowed() &&
	    (rc = rsk_bearer_listen(s, fd)) < 0)
		rsk_info("fd %d: no bearer rendezvous (%s); TCP clients only", fd, strerror(-rc));
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

/*
 * The fds an accelerated accept needs for a moment beyond the connection's own: the offer's
 * (memory, the client's readiness end, its TCP socket) and the new readiness pair.
 */
#define RSK_ACCEPT_SWITCH_FDS 6

int rsk_accept_begin(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int rc = 0;

	if (s == NULL)
		return 0;
	if (rsk_sock_listens(s)) {
		rsk_listener_note(s->lst, RSK_LISTEN_INTEREST);
		if (__atomic_load_n(&s->fd_pressed, __ATOMIC_RELAXED) &&
		    rsk_fd_room_now(fd, RSK_ACCEPT_SWITCH_FDS + 1) <= RSK_ACCEPT_SWITCH_FDS)
			rc = -EMFILE;
	}
	rsk_sock_put(s);
	return rc;
}

/* Bearer errors the TCP listener's accept would give too (the process's limits). */
static int rsk_accept_bearer_fatal(int rc)
{
	return rc == -EMFILE || rc == -ENFILE || rc == -ENOBUFS || rc == -ENOMEM;
}

/* Does an accept on face @fd (of @s) block? Its flags as last seen (sock.h face_nb). */
static int rsk_accept_blocks(struct rsk_sock *s, int fd)
{
	int nb = __atomic_load_n(&s->face_nb, __ATOMIC_ACQUIRE), fl;

	if (nb == 0) {
		if ((fl = rsk_sys_fcntl(fd, F_GETFL, 0)) < 0)
			return 0;
		nb = (fl & O_NONBLOCK) ? 1 : 2;
		__atomic_store_n(&s->face_nb, nb, __ATOMIC_RELEASE);
	}
	return nb == 2;
}

/* A bearer client @rc taken from listener @s's rendezvous at @fd (or an error, made -EAGAIN
 * unless TCP's accept would give it too): TCP_NODELAY and the listener's other options
 * inherited, as TCP's accept does. */
static int rsk_accept_bearer_got(struct rsk_sock *s, int fd, int rc)
{
	if (rc >= 0) {
		if (__atomic_load_n(&s->bearer_tcp_last, __ATOMIC_RELAXED))
			__atomic_store_n(&s->bearer_tcp_last, 0, __ATOMIC_RELAXED);
		if (rsk_sock_tcp_opts(s) & RSK_SOCK_OPT_NODELAY)
			(void)rsk_opt_plain_set(rc, IPPROTO_TCP, TCP_NODELAY, &(int){1},
						sizeof(int));
		else if (!(rsk_sock_tcp_opts(s) & RSK_SOCK_OPT_KNOWN))
			rsk_opt_standin_nodelay(rc, rsk_face_kfd(fd));
		if (__atomic_load_n(&s->opts_set, __ATOMIC_ACQUIRE))
			rsk_opt_standin_inherit(rc, rsk_face_kfd(fd));
	}
	rsk_sock_put(s);
	return rc >= 0 || rsk_accept_bearer_fatal(rc) ? rc : -EAGAIN;
}

int rsk_accept_bearer(int fd, struct sockaddr *addr, socklen_t *len, int flags, int *later)
{
	struct rsk_sock *s;
	int rc;

	*later = 0;
	if (!rsk_face_is(fd) || (s = rsk_sock_get(fd)) == NULL)
		return -EAGAIN;
	/* (only where TCP's accept does not block: a blocking one must look here first) */
	if (__atomic_load_n(&s->bearer_tcp_last, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&s->face_nb, __ATOMIC_ACQUIRE) == 1) {
		*later = 1;
		rsk_sock_put(s);
		return -EAGAIN;
	}
	rc = rsk_bearer_accept(s, -1, addr, len, flags);
	/* A blocking accept would wait in the TCP listener alone: it shuts the rendezvous. */
	if (rc == -EAGAIN && !__atomic_load_n(&s->bearer_shut, __ATOMIC_ACQUIRE) &&
	    rsk_accept_blocks(s, fd))
		rc = rsk_bearer_accept(s, fd, addr, len, flags);
	return rsk_accept_bearer_got(s, fd, rc);
}

int rsk_accept_bearer_later(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return -EAGAIN;
	return rsk_accept_bearer_got(s, fd, rsk_bearer_accept(s, -1, addr, len, flags));
}

/*
 * What accept already told us of the new socket @fd, so that the switch asks the kernel
 * nothing more: its peer (the address accept4 returned), its own address (the claim proved
 * the offer by it) and its flags (exactly what accept4's @flags made them: an accepted
 * socket inherits neither O_NONBLOCK nor FD_CLOEXEC from its listener).
 */
static void rsk_accept_known(struct rsk_conn *c, const struct rsk_claim *cl, int flags)
{
	rsk_conn_know(c, cl->own_len != 0 ? (const struct sockaddr *)&cl->own : NULL,
		      (const struct sockaddr *)cl->peer, (flags & SOCK_NONBLOCK) ? O_NONBLOCK : 0,
		      (flags & SOCK_CLOEXEC) ? FD_CLOEXEC : 0);
}

/* Build the accelerated connection from claim @cl for accepted socket @s at @fd (accept4's
 * @flags) of listener @ls. 0 or -errno. */
static int rsk_accept_switch(struct rsk_sock *ls, struct rsk_sock *s, int fd,
			     const struct rsk_cm_ops *cm, struct rsk_claim *cl, int flags)
{
	struct rsk_conn *c = rsk_conn_alloc(cl->nbuf, cm->ep_size != NULL ? cm->ep_size() : 0);
	int app = -1, ctl = -1, tcp = -1, gone = 0, rc, opts;

	if (c == NULL) {
		cm->unclaim(cl, 0);
		if (cl->ep != NULL)
			rsk_ep_destroy(cl->ep);
		return -ENOMEM;
	}
	cl->ep_mem = rsk_conn_ep_mem(c);
	rc = cm->claim_open(cl);
	c->ep = cl->ep;
	rsk_accept_known(c, cl, flags);
	if (rc == 0)
		rc = rsk_conn_prepare(c, fd, &app, &ctl, &tcp);
	if (rc == 0 && (opts = rsk_sock_tcp_opts(ls)) != 0) /* inherited from the listener */
		rsk_conn_know_opts(c, opts & RSK_SOCK_OPT_NODELAY, opts & RSK_SOCK_OPT_CORK);
	if (rc == 0 && __atomic_load_n(&ls->opts_set, __ATOMIC_ACQUIRE))
		rsk_opt_adopt_kernel(c, ls->domain, fd); /* the rest the listener gave it */
	/* The answer first: a client that finds us EMPTY then always has our ctl end to wake
	 * us with (its claims before our initial look find the placeholder SHOWN, and the look
	 * itself catches what they announced). */
	if (rc == 0 && cm->answer != NULL && (rc = cm->answer(cl, ctl)) == -EPIPE) {
		gone = 1; /* what it sent before it went is ours to read, as over TCP */
		rc = 0;
	}
	if (rc == 0)
		rsk_conn_show_initial(c, app, ctl); /* the client may have sent already */
	if (rc == 0 && gone)
		rsk_conn_saw_events(c, app, POLLHUP);
	if (rc == 0 && !cm->keeps_ctl) { /* the answer handed it to the client, our waker */
		(void)rsk_sys_close(ctl);
		ctl = -1;
	}
	if (rc == 0)
		rc = rsk_sock_become(s, fd, c, app, ctl, tcp, NULL);
	cm->unclaim(cl, rc == 0); /* before a discard: a decline still needs the endpoint */
	if (rc < 0) {
		rsk_conn_discard(c, app, ctl, tcp);
		return rc;
	}
	/* The client waits for this before it uses the endpoint: we took it (a process that
	 * does not own the transport's listener never sends it, and the client stays TCP). */
	if (cm->accept_hello && (rc = rsk_conn_hello(c, fd)) < 0)
		rsk_warn("fd %d: hello not sent (%s)", fd, strerror(-rc));
	return 0;
}

/* The client is committed to the fast path and we cannot follow: drop it visibly. */
static int rsk_accept_drop(int fd, int err)
{
	rsk_warn("fd %d: accelerated accept failed (%s); dropping the connection", fd,
		 strerror(-err));
	rsk_stats_fallback(RDMASOCK_FB_RESOURCES);
	rsk_sock_release_fd(fd);
	(void)rsk_sys_close(fd);
	return -ECONNABORTED;
}

/*
 * Each accelerated connection takes one more fd of ours: a process getting close to its fd
 * limit (the application's newest fd @fd near our hidden ones) stops taking new clients
 * until it has room again, so they stay on TCP instead of failing later. A listener never
 * paused here is not told to resume: that note cost every accept a third of its listener
 * work (the transport's lock, and the loop's watches looked over again), for nothing. Once
 * paused, every accept with room tells it again, as a resume may not take at once (the
 * shm rendezvous is remade only once its queue is drained).
 */
static void rsk_accept_fd_pressure(struct rsk_sock *ls, int fd)
{
	int room = rsk_fd_headroom(fd), reserve = rsk_fd_reserve();

	if (room < reserve) {
		__atomic_store_n(&ls->fd_pressed, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&ls->fd_paused, 1, __ATOMIC_RELAXED);
		rsk_listener_note(ls->lst, RSK_LISTEN_PAUSE);
	} else if (room >= 2 * reserve && __atomic_load_n(&ls->fd_paused, __ATOMIC_RELAXED) &&
		   !rsk_policy_is_kernel_only()) {
		__atomic_store_n(&ls->fd_pressed, 0, __ATOMIC_RELAXED);
		rsk_listener_note(ls->lst, RSK_LISTEN_RESUME);
	}
}

/* Claim and switch accepted socket @s (at @fd, from @peer, accept4's @flags) of listener
 * @ls. Returns @fd or -errno. */
static int rsk_accept_claim(struct rsk_sock *ls, struct rsk_sock *s, int fd,
			    const struct sockaddr_storage *peer, int flags)
{
	const struct rsk_cm_ops *cm = NULL;
	uint32_t unheard = rsk_upg_unheard_mark();
	struct rsk_claim cl;
	int rc;

	rsk_accept_fd_pressure(ls, fd);
	memset(&cl, 0, sizeof(cl));
	cl.why = RDMASOCK_FB_NO_PEER;
	/* Both ends of the accepted connection: an offer must hold the other end of exactly
	 * this one (the transport asks @fd for its own address if it must). */
	rc = rsk_listener_claim(ls->lst, peer, fd, &cl, &cm);
	if (rc == 0) {
		s->fb_reason = cl.why; /* a plain TCP client, or one that stays on TCP for now */
		/* A TCP-first client offers later: its offer finds us through the address map. */
		if (rsk_config.tcp_first != RSK_TCP_FIRST_OFF)
			(void)rsk_upg_server(s, fd, ls->lst, peer, NULL, NULL, unheard);
		return fd;
	}
	if (rc > 0 && cl.upgrade) { /* it offered before we accepted: it moves at its first call */
		s->fb_reason = RDMASOCK_FB_TCP_FIRST;
		if (rsk_upg_server(s, fd, ls->lst, peer, &cl, cm, unheard) < 0) {
			cm->unclaim(&cl, 0);
			if (cl.ep != NULL)
				rsk_ep_destroy(cl.ep);
		}
		return fd;
	}
	if (rc > 0)
		rc = rsk_accept_switch(ls, s, fd, cm, &cl, flags);
	if (rc < 0)
		return rsk_accept_drop(fd, rc);
	s->from_lst = rsk_listener_id(ls->lst);
	s->forks_at_accept = rsk_proc_forks();
	return fd;
}

/* The accepted connection's peer: as accept() returned it (@len bytes at @addr), or asked. */
static int rsk_accept_peer(int fd, const struct sockaddr *addr, socklen_t len,
			   struct sockaddr_storage *peer)
{
	socklen_t plen = sizeof(*peer);

	if (addr != NULL && len > 0 && len <= sizeof(*peer)) {
		memcpy(peer, addr, len);
		return 0;
	}
	return rsk_sys_getpeername(fd, (struct sockaddr *)peer, &plen);
}

int rsk_accept_done(int lfd, int fd, int flags, const struct sockaddr *addr, socklen_t len)
{
	struct rsk_sock *ls = rsk_sock_get(lfd);
	struct sockaddr_storage peer;
	struct rsk_sock *s;
	int rc = fd;

	if (ls == NULL)
		return fd;
	/* (from TCP: the next accept on a non-blocking face looks there first) */
	if (ls->bearer_fd != 0 && !__atomic_load_n(&ls->bearer_tcp_last, __ATOMIC_RELAXED))
		__atomic_store_n(&ls->bearer_tcp_last, 1, __ATOMIC_RELAXED);
	if (rsk_sock_track(fd, ls->domain, RSK_SOCK_CONNECTED) == 0 &&
	    (s = rsk_sock_get(fd)) != NULL) {
		s->accepted = 1;
		if (ls->lst == NULL)
			s->fb_reason = ls->fb_reason; /* why the listener has no companions */
		else if (rsk_accept_peer(fd, addr, len, &peer) == 0)
			rc = rsk_accept_claim(ls, s, fd, &peer, flags);
		/* (no peer: already reset, the application will find out) */
		if (rc >= 0 && !s->counted) /* an accelerated one was counted as it switched */
			rsk_sock_count(s, ls->port);
		rsk_sock_put(s);
	}
	rsk_sock_put(ls);
	return rc;
}
