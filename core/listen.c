/*
 * Server side of acceleration: a listener's rendezvous, the offers waiting in it, and the
 * switch of an accepted TCP connection to the path its client offered. Offers are claimed
 * by the client's TCP address, so in prefork servers any process can claim any offer
 * (one that another process drained is forwarded back into the rendezvous).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "conn.h"
#include "hs.h"
#include "log.h"
#include "ready.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "monitor.h"
#include "transport/shm.h"
#include "transport/verbs.h"

struct rsk_offer {
	struct rsk_offer *next;
	struct rsk_hs_offer o;
	int conn;  /* the accepted rendezvous connection */
	int memfd, ctl, reply;
	int have;  /* offer read */
};

struct rsk_listener {
	pthread_mutex_t lock;
	int rdv[2];
	int nrdv;
	struct rsk_offer *pending;
	struct rsk_verbs_listener *vl; /* rdma_cm on the same address and port, or NULL */
};

/* How long a process waits for an offer it knows exists but a sibling holds. */
#define RSK_CLAIM_WAIT_MS 1000
/* Longest gap between a client's rendezvous connect and its offer (a few syscalls). */
#define RSK_OFFER_GAP_MS 200

/* Beside the kernel listener: rdma_cm on the same address and port (auto, verbs). */
static void rsk_listen_setup_verbs(struct rsk_listener *l, const struct sockaddr *addr, int fd)
{
	int rc;

	if (rsk_config.mode != RSK_MODE_AUTO && rsk_config.mode != RSK_MODE_VERBS)
		return;
	rc = rsk_verbs_listen(addr, sizeof(struct sockaddr_storage), &l->vl);
	if (rc < 0) {
		rsk_dbg("fd %d: no rdma_cm listener: %s", fd, strerror(-rc));
		l->vl = NULL;
		return;
	}
	if (rsk_monitor_add_listener(l->vl) < 0) {
		rsk_warn("fd %d: rdma_cm listener not watched; verbs clients fall back", fd);
		rsk_verbs_listener_close(l->vl);
		l->vl = NULL;
	}
}

int rsk_listen_setup(struct rsk_sock *s, int fd, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct rsk_listener *l;
	int v6only = 0, reuse = 0, n, i;

	len = sizeof(ss);
	if (RSK_REAL(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	len = sizeof(reuse);
	(void)RSK_REAL(getsockopt)(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &len);
	if (reuse) { /* several listeners share the port: offers could reach the wrong one */
		s->fb_reason = RDMASOCK_FB_UNSUPPORTED;
		return -EOPNOTSUPP;
	}
	len = sizeof(v6only);
	if (ss.ss_family == AF_INET6)
		(void)RSK_REAL(getsockopt)(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len);
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	/* The rendezvous queue is not the application's: size it for bursts of connects (a
	 * full one sends clients to the kernel path, and offers handed back need room). */
	(void)backlog;
	n = rsk_hs_listen((struct sockaddr *)&ss, v6only, 4096, l->rdv);
	if (n < 0) {
		rsk_dbg("fd %d: no same-host rendezvous: %s", fd, strerror(-n));
		s->fb_reason = RDMASOCK_FB_RESOURCES;
		free(l);
		return n;
	}
	for (i = 0; i < n; i++)
		l->rdv[i] = rsk_fd_hide(l->rdv[i]);
	l->nrdv = n;
	pthread_mutex_init(&l->lock, NULL);
	s->lst = l;
	rsk_listen_setup_verbs(l, (struct sockaddr *)&ss, fd);
	return 0;
}

static void rsk_offer_free(struct rsk_offer *e)
{
	if (e->have) { /* received fds are hidden as they arrive (hs.c) */
		rsk_fd_unhide_close(e->memfd);
		if (e->ctl >= 0)
			rsk_fd_unhide_close(e->ctl);
		if (e->reply != e->conn)
			rsk_fd_unhide_close(e->reply);
	}
	rsk_fd_unhide_close(e->conn);
	free(e);
}

void rsk_listen_interest(struct rsk_listener *l)
{
	if (l->vl != NULL)
		rsk_verbs_listener_interest(l->vl);
}

void rsk_listen_forked(struct rsk_listener *l)
{
	if (l->vl != NULL)
		rsk_verbs_listener_forked(l->vl);
}

void rsk_listen_forget_verbs(struct rsk_listener *l)
{
	l->vl = NULL; /* its memory stays: the objects in it are the parent's */
}

void rsk_listen_close(struct rsk_listener *l)
{
	struct rsk_offer *e;
	int i;

	while ((e = l->pending) != NULL) {
		l->pending = e->next;
		rsk_offer_free(e);
	}
	for (i = 0; i < l->nrdv; i++)
		rsk_fd_unhide_close(l->rdv[i]);
	if (l->vl != NULL) {
		rsk_monitor_del_listener(l->vl);
		rsk_verbs_listener_close(l->vl);
	}
	free(l);
}

/* Is the client behind offer @e gone (it closed its offer connection)? */
static int rsk_offer_dead(struct rsk_offer *e)
{
	struct pollfd p = {.fd = e->have ? e->reply : e->conn, .events = POLLIN | POLLRDHUP};

	if (RSK_REAL(poll)(&p, 1, 0) <= 0)
		return 0;
	/* Closed, and (for an offer not read yet) with nothing left to read. */
	return (p.revents & (POLLHUP | POLLERR)) ||
	       ((p.revents & POLLRDHUP) && !(p.revents & POLLIN));
}

/* Accept one waiting rendezvous connection into the pending list. 1 if one came. */
static int rsk_listen_take_one(struct rsk_listener *l)
{
	struct rsk_offer *e;
	int i, fd;

	for (i = 0; i < l->nrdv; i++) {
		fd = RSK_REAL(accept4)(l->rdv[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		e = calloc(1, sizeof(*e));
		if (e == NULL || (fd = rsk_fd_hide(fd)) < 0) {
			free(e);
			continue;
		}
		e->conn = fd;
		e->next = l->pending;
		l->pending = e;
		return 1;
	}
	return 0;
}

/* Wait up to @ms for the offer's bytes on a just-accepted rendezvous connection. */
static void rsk_offer_wait(struct rsk_offer *e, int ms)
{
	struct pollfd p = {.fd = e->conn, .events = POLLIN};

	(void)RSK_REAL(poll)(&p, 1, ms);
}

/* Read what has arrived; take the offer from @peer out of the list if it is there. */
static struct rsk_offer *rsk_listen_scan(struct rsk_listener *l, struct sockaddr_storage *peer)
{
	struct rsk_offer *e, **pp, *mine = NULL;
	int rc;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (!e->have) {
			/* A client sends its offer right after connecting: catch it in that gap. */
			rsk_offer_wait(e, RSK_OFFER_GAP_MS);
			rc = rsk_hs_read_offer(e->conn, &e->o, &e->memfd, &e->ctl, &e->reply);
			e->have = rc == 0;
		}
		if (!e->have || rsk_offer_dead(e)) { /* malformed, abandoned or silent */
			*pp = e->next;
			rsk_offer_free(e);
			continue;
		}
		if (mine == NULL && rsk_hs_same_addr(&e->o.client, peer)) {
			*pp = e->next;
			mine = e;
			continue;
		}
		pp = &e->next;
	}
	return mine;
}

/*
 * Offers for other connections go back into the rendezvous: in a prefork server the
 * process that accepted their TCP connection may be waiting for them, and in a single
 * process the next accept() finds them there again.
 */
static void rsk_listen_give_back(struct rsk_listener *l)
{
	struct rsk_offer *e, **pp;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (rsk_hs_forward(&e->o, e->memfd, e->ctl, e->reply) < 0) {
			pp = &e->next; /* rendezvous full: keep it, our next accept looks again */
			continue;
		}
		*pp = e->next;
		rsk_offer_free(e);
	}
}

static struct rsk_offer *rsk_listen_find(struct rsk_listener *l, struct sockaddr_storage *peer,
					 int *exists)
{
	struct timespec ms = {0, 1000000};
	struct rsk_offer *e = NULL;
	int slept = 0, present = -1;

	pthread_mutex_lock(&l->lock);
	while (slept < RSK_CLAIM_WAIT_MS) {
		/* Take everything queued (each at most once per round), then look. */
		while (rsk_listen_take_one(l))
			;
		e = rsk_listen_scan(l, peer);
		if (e != NULL)
			break;
		/* Not here: a plain client, or its offer is held by a sibling process. */
		if (present < 0 || slept % 64 == 0)
			present = rsk_hs_client_present((struct sockaddr *)peer);
		if (!present)
			break;
		rsk_listen_give_back(l);
		slept++;
		pthread_mutex_unlock(&l->lock);
		nanosleep(&ms, NULL);
		pthread_mutex_lock(&l->lock);
	}
	rsk_listen_give_back(l);
	pthread_mutex_unlock(&l->lock);
	*exists = e != NULL || present > 0;
	return e;
}

/* Build the accelerated connection from offer @e for accepted socket @fd. */
static int rsk_listen_switch(struct rsk_sock *s, int fd, struct rsk_offer *e)
{
	struct rsk_conn *c = rsk_conn_alloc(e->o.nbuf);
	int app = -1, ctl = -1, tcp = -1, peer_ctl, rc;

	if (c == NULL)
		return -ENOMEM;
	peer_ctl = e->ctl; /* hidden on arrival; the endpoint owns it from here */
	e->ctl = -1;
	rc = peer_ctl < 0 ? peer_ctl
			  : rsk_shm_open(e->memfd, RSK_SHM_SERVER, peer_ctl, rsk_conn_ep_mem(c),
					 &c->ep);
	if (rc < 0 && peer_ctl >= 0)
		rsk_fd_unhide_close(peer_ctl);
	if (rc == 0)
		rc = rsk_conn_prepare(c, fd, &app, &ctl, &tcp);
	if (rc == 0)
		rc = rsk_hs_answer(e->reply, RSK_HS_ACCEPT, ctl);
	if (rc == 0)
		rc = rsk_sock_become(s, fd, c, app, ctl, tcp);
	if (rc == 0)
		return 0;
	rsk_conn_discard(c, app, ctl, tcp);
	return rc;
}

/* Build the accelerated connection on verbs endpoint @ep for accepted socket @fd. */
static int rsk_listen_switch_verbs(struct rsk_sock *s, int fd, struct rsk_ep *ep)
{
	struct rsk_conn *c = rsk_conn_alloc(ep->nbuf);
	int app = -1, ctl = -1, tcp = -1, rc;

	if (c == NULL) {
		rsk_ep_destroy(ep);
		return -ENOMEM;
	}
	c->ep = ep;
	rc = rsk_conn_prepare(c, fd, &app, &ctl, &tcp);
	if (rc == 0)
		rc = rsk_sock_become(s, fd, c, app, ctl, tcp);
	if (rc == 0) {
		/* The client waits for this before it uses the QP: we claimed it (a process that
		 * does not own the rdma_cm listener never sends it, and the client stays TCP). */
		rsk_conn_lock(c);
		rc = rsk_stream_hello(&c->st);
		rsk_conn_sync(c, fd);
		rsk_conn_unlock(c);
		if (rc < 0)
			rsk_warn("fd %d: verbs hello not sent (%s)", fd, strerror(-rc));
		return 0;
	}
	rsk_conn_discard(c, app, ctl, tcp);
	return rc;
}

/* A verbs client of ours (it connected its QP before this TCP connection)? */
static int rsk_listen_accept_verbs(struct rsk_sock *ls, struct rsk_sock *s, int fd,
				   const struct sockaddr *peer, int *rc)
{
	struct rsk_ep *ep;

	if (ls->lst->vl == NULL)
		return 0;
	ep = rsk_verbs_listener_claim(ls->lst->vl, peer, RSK_CLAIM_WAIT_MS);
	if (ep == NULL)
		return 0;
	if (ep == RSK_VERBS_CLAIM_FAILED) {
		/* Its QP is gone with the offer: the client sees the disconnect instead of our
		 * hello and stays on TCP, and so do we. */
		s->fb_reason = RDMASOCK_FB_HANDSHAKE;
		*rc = 0;
		return 1;
	}
	*rc = rsk_listen_switch_verbs(s, fd, ep);
	if (*rc == 0) {
		s->from_vl = ls->lst->vl;
		s->forks_at_accept = __atomic_load_n(&rsk_sock_forks, __ATOMIC_RELAXED);
	}
	return 1;
}

int rsk_listen_accept(struct rsk_sock *ls, struct rsk_sock *s, int fd)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	struct rsk_offer *e;
	int exists, rc;

	if (RSK_REAL(getpeername)(fd, (struct sockaddr *)&peer, &len) < 0)
		return fd; /* already reset: the application will find out */
	if (rsk_listen_accept_verbs(ls, s, fd, (struct sockaddr *)&peer, &rc)) {
		if (rc == 0)
			return fd;
		rsk_warn("fd %d: accelerated accept (verbs) failed (%s); dropping the connection",
			 fd, strerror(-rc));
		rsk_stats_fallback(RDMASOCK_FB_RESOURCES);
		rsk_sock_release_fd(fd);
		RSK_REAL(close)(fd);
		return -ECONNABORTED;
	}
	e = rsk_listen_find(ls->lst, &peer, &exists);
	if (e == NULL && !exists) {
		s->fb_reason = RDMASOCK_FB_NO_PEER; /* a plain TCP client */
		return fd;
	}
	rc = e != NULL ? rsk_listen_switch(s, fd, e) : -ETIMEDOUT;
	if (rc == 0) {
		rsk_offer_free(e); /* memfd mapped, ctl taken, reply answered */
		return fd;
	}
	/* The client is committed to the fast path and we cannot follow: drop it visibly. */
	rsk_warn("fd %d: accelerated accept failed (%s); dropping the connection", fd,
		 strerror(-rc));
	if (e != NULL) {
		(void)rsk_hs_answer(e->reply, RSK_HS_DECLINE, -1);
		rsk_offer_free(e);
	}
	rsk_stats_fallback(RDMASOCK_FB_RESOURCES);
	rsk_sock_release_fd(fd);
	RSK_REAL(close)(fd);
	return -ECONNABORTED;
}
