/*
 * A same-host bearer (see bearer.h): a listener's rendezvous beside its face, and the
 * client's unix connection to it in place of a TCP one. The rendezvous' name is the stand-in
 * name of the listener's address with a unique part anyone of its user can compute (the
 * user's id), so a client finds it with one connect and no lookup, and only its own user's:
 * names in the abstract namespace have no owner, so the client also checks who listens
 * (SO_PEERCRED) before it commits, and the listener checks who connected.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/standin.h"
#include "base/stats.h"
#include "base/sys.h"
#include "bearer.h"

/* The unique part of a rendezvous' name: its user's id under a tag no process id reaches
 * (a client's own name carries its pid there, base/addr.c). */
#define RSK_BEARER_UNIQ(uid) (0xbea0000000000000ull | (uint64_t)(uint32_t)(uid))
/* Clients' stand-in ports: below the kernel's default ephemeral range (32768-60999), so a
 * server seldom sees the same address from a TCP client at once. */
#define RSK_BEARER_PORT_MIN 1024u
#define RSK_BEARER_PORTS 31744u
#define RSK_BEARER_BACKLOG 4096
#define RSK_BEARER_REJECTS 8 /* strangers an accept turns away before it says EAGAIN */

int rsk_bearer_allowed(void)
{
	return rsk_config.bearer == RSK_BEARER_UNIX || rsk_config.bearer == RSK_BEARER_AUTO;
}

int rsk_bearer_carries(int level, int name)
{
	if (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)
		return 1;
	if (level != SOL_SOCKET)
		return 0;
	switch (name) {
	case SO_KEEPALIVE:
	case SO_RCVBUF:
	case SO_SNDBUF:
	case SO_RCVTIMEO:
	case SO_SNDTIMEO:
	case SO_REUSEADDR:
	case SO_PRIORITY:
	case SO_RCVLOWAT:
		return 1;
	default:
		return 0;
	}
}

/* The address a client of listener address @sa finds the rendezvous by: the listener's own,
 * or for a wildcard listener the loopback address of its family (what same-host clients
 * mostly dial). */
static void rsk_bearer_rdv_addr(const struct sockaddr *sa, struct sockaddr_storage *out)
{
	memcpy(out, sa, rsk_sa_len(sa));
	if (out->ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)out;

		if (a->sin_addr.s_addr == htonl(INADDR_ANY))
			a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else if (out->ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;

		if (IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr))
			a->sin6_addr = in6addr_loopback;
		a->sin6_flowinfo = 0;
	}
}

/* This process's effective user, asked once (a process that changes it later keeps
 * finding the rendezvous of the user it started as). */
static uid_t rsk_bearer_uid(void)
{
	static uid_t uid = (uid_t)-1;
	uid_t u = __atomic_load_n(&uid, __ATOMIC_RELAXED);

	if (u == (uid_t)-1) {
		u = geteuid();
		__atomic_store_n(&uid, u, __ATOMIC_RELAXED);
	}
	return u;
}

int rsk_bearer_rdv_uniq(uint64_t uniq)
{
	return (uniq >> 32) == (RSK_BEARER_UNIQ(0) >> 32);
}

socklen_t rsk_bearer_name(const struct sockaddr *sa, struct sockaddr_un *un)
{
	struct sockaddr_storage a;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return 0;
	rsk_bearer_rdv_addr(sa, &a);
	return rsk_addr_name_of(un, (const struct sockaddr *)&a, rsk_sa_len(sa),
				RSK_BEARER_UNIQ(rsk_bearer_uid()));
}

/* Did a process of ours (this user, or root) make the other end of unix socket @fd? */
static int rsk_bearer_peer_ours(int fd)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);

	return rsk_sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
	       (cr.uid == 0 || cr.uid == rsk_bearer_uid());
}

int rsk_bearer_listen(struct rsk_sock *s, int fd)
{
	struct sockaddr_storage bound;
	struct sockaddr_un un;
	socklen_t blen = sizeof(bound), n;
	struct epoll_event ev = {.events = EPOLLIN};
	int r, rc;

	if (s->bearer_fd != 0 || s->face_fd == 0)
		return 0;
	rc = rsk_sys_getsockname(s->face_fd - 1, (struct sockaddr *)&bound, &blen);
	if (rc < 0)
		return rc;
	if ((n = rsk_bearer_name((struct sockaddr *)&bound, &un)) == 0)
		return -EAFNOSUPPORT;
	r = rsk_sys_socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (r < 0)
		return r;
	if ((r = rsk_fd_hide(r)) < 0)
		return r;
	rc = rsk_sys_bind(r, (struct sockaddr *)&un, n);
	if (rc == 0)
		rc = rsk_sys_listen(r, RSK_BEARER_BACKLOG);
	ev.data.fd = r;
	if (rc == 0) /* the face's set: every wait on the number wakes for our clients too */
		rc = rsk_sys_epoll_ctl(fd, EPOLL_CTL_ADD, r, &ev);
	if (rc < 0) {
		rsk_fd_unhide_close(r);
		return rc;
	}
	s->bearer_fd = r + 1;
	rsk_dbg("fd %d: bearer rendezvous at %d", fd, r);
	return 0;
}

/* Copy TCP address @tcp (@n bytes) out as accept() reports an address: truncated to the
 * room *@len gives, *@len set to its full length. */
static void rsk_bearer_addr_out(const struct sockaddr_storage *tcp, socklen_t n,
				struct sockaddr *addr, socklen_t *len)
{
	if (addr == NULL || len == NULL)
		return;
	memcpy(addr, tcp, *len < n ? *len : n);
	*len = n;
}

/* One queued client, or -EAGAIN; a stranger's connection (not our user's, or without a
 * stand-in name) is closed and *@stranger set. */
static int rsk_bearer_take(int r, struct sockaddr *addr, socklen_t *len, int flags,
			   int *stranger)
{
	struct sockaddr_un un;
	struct sockaddr_storage tcp;
	struct rsk_standin si;
	socklen_t ulen = sizeof(un), n;
	int c = rsk_sys_accept4(r, (struct sockaddr *)&un, &ulen, flags & (SOCK_NONBLOCK | SOCK_CLOEXEC));

	if (c < 0)
		return c == -ECONNABORTED ? -EAGAIN : c;
	n = ulen <= sizeof(un) ? rsk_addr_name_parse((struct sockaddr *)&un, ulen, &tcp, &si.peer)
			       : 0;
	if (n == 0 || !rsk_bearer_peer_ours(c)) {
		(void)rsk_sys_close(c);
		*stranger = 1;
		return -EAGAIN;
	}
	/* Its own name is the rendezvous's: the options and names it is asked for need no
	 * proof by system calls now (base/standin.h). */
	si.own = RSK_BEARER_UNIQ(rsk_bearer_uid());
	si.family = tcp.ss_family;
	rsk_standin_note(c, &si);
	rsk_bearer_addr_out(&tcp, n, addr, len);
	rsk_counter_add(&rsk_stats.bearer_connections, 1);
	return c;
}

/*
 * Shut @s's rendezvous @r for good, and take it out of the face's set (@set: the number the
 * accept was called on): a shut unix listener polls readable for ever, and a server that
 * waits for its listener before a blocking accept (select, then accept: iperf3) would wake
 * at once and then block in the TCP listener's accept, with nobody coming.
 */
static void rsk_bearer_shut_in(struct rsk_sock *s, int r, int set)
{
	rsk_bearer_shut(s);
	if (!__atomic_exchange_n(&s->bearer_unset, 1, __ATOMIC_ACQ_REL))
		(void)rsk_sys_epoll_ctl(set, EPOLL_CTL_DEL, r, NULL);
}

int rsk_bearer_direct_next(const struct rsk_sock *s, int i)
{
	int n = __atomic_load_n(&s->nepregs, __ATOMIC_RELAXED);

	for (; i < n && i < (int)RSK_ARRAY_SIZE(s->epregs); i++) /* (direct ones: all here) */
		if (__atomic_load_n(&s->epregs[i].direct, __ATOMIC_RELAXED))
			return i;
	return -1;
}

/* Does an application's set of this process hold @s's rendezvous itself (sock/face.c,
 * EPOLLEXCLUSIVE)? */
static int rsk_bearer_direct(const struct rsk_sock *s)
{
	return rsk_bearer_direct_next(s, 0) >= 0;
}

/* Was @c (the last take's answer) the rendezvous @r found shut, by us or by another process
 * that shares it (an exec, its blocking accept)? A blocking take says EINVAL then; a
 * non-blocking one EAGAIN, as for nobody queued, so that one asks (poll: POLLRDHUP) where
 * this process's sets hold the rendezvous themselves and it would wake them for ever. */
static int rsk_bearer_found_shut(const struct rsk_sock *s, int r, int c)
{
	struct pollfd p = {.fd = r, .events = POLLIN | POLLRDHUP};

	if (c == -EINVAL)
		return 1;
	return c == -EAGAIN && !__atomic_load_n(&s->bearer_shut, __ATOMIC_ACQUIRE) &&
	       rsk_bearer_direct(s) && rsk_sys_poll(&p, 1, 0) == 1 &&
	       (p.revents & (POLLRDHUP | POLLHUP));
}

int rsk_bearer_accept(struct rsk_sock *s, int set, struct sockaddr *addr, socklen_t *len,
		      int flags)
{
	int r = __atomic_load_n(&s->bearer_fd, __ATOMIC_ACQUIRE) - 1, c, i, stranger;

	if (r < 0)
		return -EAGAIN;
	for (i = 0; i < RSK_BEARER_REJECTS; i++) {
		stranger = 0;
		c = rsk_bearer_take(r, addr, len, flags, &stranger);
		if (c >= 0 || !stranger)
			break;
	}
	/* Shut with nobody queued: out of this process's sets that hold it themselves. */
	if (rsk_bearer_found_shut(s, r, c)) {
		rsk_bearer_shut(s); /* (once: it guards itself) */
		c = -EAGAIN;
	}
	if (c != -EAGAIN || set < 0)
		return c;
	rsk_bearer_shut_in(s, r, set);
	stranger = 0;
	return rsk_bearer_take(r, addr, len, flags, &stranger); /* one that came meanwhile */
}

/* @s's rendezvous @r out of the application's sets that hold it themselves (sock/face.c):
 * shut, it polls readable for ever. */
static void rsk_bearer_unset_direct(const struct rsk_sock *s, int r)
{
	int i;

	for (i = rsk_bearer_direct_next(s, 0); i >= 0; i = rsk_bearer_direct_next(s, i + 1))
		(void)rsk_sys_epoll_ctl(s->epregs[i].epfd, EPOLL_CTL_DEL, r, NULL); /* (i < EPREGS) */
}

void rsk_bearer_shut(struct rsk_sock *s)
{
	int r = __atomic_load_n(&s->bearer_fd, __ATOMIC_ACQUIRE) - 1;

	/* A shut unix listener refuses connects (ECONNREFUSED: the client takes TCP) and
	 * keeps what is queued for our accepts. */
	if (r >= 0 && !__atomic_exchange_n(&s->bearer_shut, 1, __ATOMIC_ACQ_REL)) {
		(void)rsk_sys_shutdown(r, SHUT_RD);
		rsk_bearer_unset_direct(s, r);
		rsk_info("bearer rendezvous at %d takes no new clients (a blocking accept, or the "
			 "face is gone)",
			 r);
	}
}

void rsk_bearer_close(struct rsk_sock *s)
{
	int r = s->bearer_fd - 1;

	s->bearer_fd = 0;
	if (r >= 0)
		rsk_fd_unhide_close(r);
}

/* The client's own TCP address: the destination's (a connection within the host comes from
 * the address it goes to), 127.0.0.1 for any of 127/8, with a port of ours. */
static void rsk_bearer_own_addr(const struct sockaddr *dest, struct sockaddr_storage *own)
{
	static uint32_t seq;
	uint32_t k = (uint32_t)rsk_proc_pid() * 2654435761u + __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
	uint16_t port = htons((uint16_t)(RSK_BEARER_PORT_MIN + k % RSK_BEARER_PORTS));

	memcpy(own, dest, rsk_sa_len(dest));
	if (own->ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)own;

		if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
			a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a->sin_port = port;
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)own;

		a->sin6_flowinfo = 0;
		a->sin6_port = port;
	}
}

/* A unix socket bound to a stand-in name for @dest (its unique part in *@uniq), connected to
 * @un (@n bytes) and made by our user at the other end: the fd, or -errno. */
static int rsk_bearer_dial(const struct sockaddr *dest, const struct sockaddr_un *un, socklen_t n,
			   uint64_t *uniq)
{
	struct sockaddr_storage own;
	int u = rsk_sys_socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), rc;

	if (u < 0)
		return u;
	rsk_bearer_own_addr(dest, &own);
	rc = rsk_addr_name_bind(u, (struct sockaddr *)&own, rsk_sa_len(dest), uniq);
	/* Non-blocking: a full backlog says EAGAIN at once, and the client takes TCP. */
	if (rc == 0)
		rc = rsk_sys_connect(u, (const struct sockaddr *)un, n);
	if (rc == 0 && !rsk_bearer_peer_ours(u))
		rc = -EPERM; /* someone else's name: it gets a connection that ends at once */
	if (rc < 0) {
		(void)rsk_sys_close(u);
		return rc;
	}
	return u;
}

int rsk_bearer_connect(int fd, const struct sockaddr *dest, socklen_t len, int fl, int fdfl)
{
	struct sockaddr_un un;
	struct rsk_standin si = {.peer = RSK_BEARER_UNIQ(rsk_bearer_uid()),
				 .family = dest->sa_family};
	socklen_t n;
	int u, rc;

	if (len < rsk_sa_len(dest) || (n = rsk_bearer_name(dest, &un)) == 0)
		return -EAFNOSUPPORT;
	if (fl < 0 || fdfl < 0)
		return -EBADF;
	if ((u = rsk_bearer_dial(dest, &un, n, &si.own)) < 0)
		return u;
	rc = (fl & O_NONBLOCK) ? 0 : rsk_sys_fcntl(u, F_SETFL, fl & ~O_NONBLOCK);
	if (rc == 0)
		rc = rsk_sys_dup3(u, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
	(void)rsk_sys_close(u);
	if (rc < 0)
		return rc; /* (the server sees a connection that ends at once) */
	rsk_standin_note(fd, &si);
	rsk_counter_add(&rsk_stats.bearer_connections, 1);
	return (fl & O_NONBLOCK) ? 1 : 0;
}
