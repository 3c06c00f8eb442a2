/*
 * Connection management of the shared-memory transport (rsk_shm_cm_ops). A client sends its
 * offer (memfd + readiness fd) to the listener's rendezvous before its TCP SYN; the process
 * that accepts the TCP connection claims the offer by the client's address and answers on
 * the offer connection. Offers for other connections a process took out of the rendezvous
 * are handed back into it, so in a prefork server any process can claim any offer.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/addr.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/sys.h"
#include "shm.h"
#include "shm_cm.h"
#include "shm_rdv.h"

/* How long a process waits for an offer it knows exists but a sibling holds. */
#define RSK_CLAIM_WAIT_MS 1000
/* Longest gap between a client's rendezvous connect and its offer (a few syscalls). */
#define RSK_OFFER_GAP_MS 200
/* The rendezvous queue is not the application's: sized for bursts of connects (a full one
 * sends clients to the kernel path, and offers handed back need room). */
#define RSK_RDV_BACKLOG 4096

/* ---- client ---- */

struct rsk_shm_dial {
	int rdv, memfd;
	struct sockaddr_storage client; /* our TCP address: the key of the server's claim */
};

_Static_assert(sizeof(struct rsk_shm_dial) <= RSK_CM_PRIV, "rsk_dial.priv too small");

static struct rsk_shm_dial *rsk_shm_dial_of(struct rsk_dial *d)
{
	return (struct rsk_shm_dial *)d->priv;
}

/* Bind an unbound socket where the route to @dest leaves, so that our address is known now
 * (the offer names it) and is the one the kernel would have chosen. */
static int rsk_shm_bind_src(int fd, const struct sockaddr *dest, struct sockaddr_storage *me)
{
	socklen_t len = sizeof(*me);
	struct sockaddr_storage b;
	int rc;

	if ((rc = rsk_sys_getsockname(fd, (struct sockaddr *)me, &len)) < 0)
		return rc;
	if (rsk_sa_port((struct sockaddr *)me) != 0)
		return 0;
	if ((rc = rsk_addr_route_src(dest, &b)) < 0 ||
	    (rc = rsk_sys_bind(fd, (struct sockaddr *)&b, len)) < 0)
		return rc;
	len = sizeof(*me);
	return rsk_sys_getsockname(fd, (struct sockaddr *)me, &len);
}

static void rsk_shm_dial_close(struct rsk_shm_dial *p)
{
	if (p->rdv >= 0)
		(void)rsk_sys_close(p->rdv);
	if (p->memfd >= 0)
		(void)rsk_sys_close(p->memfd);
	p->rdv = p->memfd = -1;
}

/* Find the listener's rendezvous and build our endpoint; every failure is a fallback. */
static int rsk_shm_dial(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	int rc;

	memset(p, 0, sizeof(*p));
	p->rdv = p->memfd = -1;
	d->why = RDMASOCK_FB_RESOURCES;
	if ((rc = rsk_shm_bind_src(d->fd, d->dest, &p->client)) < 0)
		return rc;
	p->rdv = rsk_rdv_find(d->dest, (struct sockaddr *)&p->client);
	if (p->rdv < 0) {
		rc = p->rdv;
		d->why = rc == -ENOENT ? RDMASOCK_FB_NO_PEER : RDMASOCK_FB_RESOURCES;
		return rc;
	}
	p->memfd = rc = rsk_shm_create(d->nbuf, d->buf_size);
	if (rc >= 0)
		rc = rsk_shm_open(p->memfd, RSK_SHM_CLIENT, -1, d->ep_mem, &d->ep);
	if (rc < 0)
		rsk_shm_dial_close(p);
	return rc < 0 ? rc : 0;
}

/* The offer goes before our SYN: whoever accepts the TCP connection will find it. */
static int rsk_shm_offer(struct rsk_dial *d, int ctl)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	struct rsk_rdv_offer o;
	int rc;

	memset(&o, 0, sizeof(o));
	o.magic = RSK_RDV_MAGIC;
	o.version = RSK_RDV_VERSION;
	o.nbuf = d->ep->nbuf;
	o.buf_size = d->ep->buf_size;
	o.client = p->client;
	memcpy(&o.server, d->dest, rsk_sa_len(d->dest));
	rc = rsk_rdv_offer(p->rdv, &o, p->memfd, ctl);
	if (rc < 0) {
		d->why = RDMASOCK_FB_RESOURCES;
		return rc;
	}
	(void)rsk_sys_close(p->memfd); /* the server got its copy; our mapping stays */
	p->memfd = -1;
	return 0;
}

/* Read the server's answer (the ep's resolver): its kick fd, or its refusal. */
static int rsk_shm_resolve(struct rsk_ep *ep, int wait_ms)
{
	int ctl = -1, rc = rsk_rdv_read_answer(rsk_shm_offer_fd(ep), wait_ms, &ctl);

	if (rc == -ETIMEDOUT)
		return rc; /* not yet: ask again later */
	rsk_shm_answered(ep, rc == 0 ? ctl : -1, rc < 0 ? -ECONNRESET : 0);
	return rc;
}

/* The TCP connect went out: the answer will come on the offer connection. */
static void rsk_shm_dialed(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	int fd = rsk_fd_hide(p->rdv);

	p->rdv = -1;
	if (fd >= 0)
		rsk_shm_set_resolver(d->ep, fd, rsk_shm_resolve);
}

static void rsk_shm_undial(struct rsk_dial *d)
{
	rsk_shm_dial_close(rsk_shm_dial_of(d));
}

/* ---- server ---- */

struct rsk_offer {
	struct rsk_offer *next;
	struct rsk_rdv_offer o;
	int conn; /* the accepted rendezvous connection */
	int memfd, ctl, reply;
	int have; /* offer read */
};

struct rsk_shm_listener {
	pthread_mutex_t lock;
	int rdv[2];
	int nrdv;
	struct rsk_offer *pending;
};

static int rsk_shm_listen(const struct sockaddr *bound, int v6only, void **lh)
{
	struct rsk_shm_listener *l = calloc(1, sizeof(*l));
	int n, i;

	if (l == NULL)
		return -ENOMEM;
	n = rsk_rdv_listen(bound, v6only, RSK_RDV_BACKLOG, l->rdv);
	if (n < 0) {
		free(l);
		return n;
	}
	for (i = 0; i < n; i++)
		l->rdv[i] = rsk_fd_hide(l->rdv[i]);
	l->nrdv = n;
	pthread_mutex_init(&l->lock, NULL);
	*lh = l;
	return 0;
}

static void rsk_offer_free(struct rsk_offer *e)
{
	if (e->have) { /* received fds are hidden as they arrive (shm_rdv.c) */
		rsk_fd_unhide_close(e->memfd);
		if (e->ctl >= 0)
			rsk_fd_unhide_close(e->ctl);
		if (e->reply != e->conn)
			rsk_fd_unhide_close(e->reply);
	}
	rsk_fd_unhide_close(e->conn);
	free(e);
}

static void rsk_shm_unlisten(void *lh)
{
	struct rsk_shm_listener *l = lh;
	struct rsk_offer *e;
	int i;

	while ((e = l->pending) != NULL) {
		l->pending = e->next;
		rsk_offer_free(e);
	}
	for (i = 0; i < l->nrdv; i++)
		rsk_fd_unhide_close(l->rdv[i]);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/* Is the client behind offer @e gone (it closed its offer connection)? */
static int rsk_offer_dead(struct rsk_offer *e)
{
	struct pollfd p = {.fd = e->have ? e->reply : e->conn, .events = POLLIN | POLLRDHUP};

	if (rsk_sys_poll(&p, 1, 0) <= 0)
		return 0;
	/* Closed, and (for an offer not read yet) with nothing left to read. */
	return (p.revents & (POLLHUP | POLLERR)) ||
	       ((p.revents & POLLRDHUP) && !(p.revents & POLLIN));
}

/* Accept one waiting rendezvous connection into the pending list. 1 if one came. */
static int rsk_listen_take_one(struct rsk_shm_listener *l)
{
	struct rsk_offer *e;
	int i, fd;

	for (i = 0; i < l->nrdv; i++) {
		fd = rsk_sys_accept4(l->rdv[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
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

	(void)rsk_sys_poll(&p, 1, ms);
}

/* Read what has arrived; take the offer from @peer out of the list if it is there. */
static struct rsk_offer *rsk_listen_scan(struct rsk_shm_listener *l,
					 const struct sockaddr_storage *peer)
{
	struct rsk_offer *e, **pp, *mine = NULL;
	int rc;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (!e->have) {
			/* A client sends its offer right after connecting: catch it in that gap. */
			rsk_offer_wait(e, RSK_OFFER_GAP_MS);
			rc = rsk_rdv_read_offer(e->conn, &e->o, &e->memfd, &e->ctl, &e->reply);
			e->have = rc == 0;
		}
		if (!e->have || rsk_offer_dead(e)) { /* malformed, abandoned or silent */
			*pp = e->next;
			rsk_offer_free(e);
			continue;
		}
		if (mine == NULL && rsk_addr_same(&e->o.client, peer)) {
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
static void rsk_listen_give_back(struct rsk_shm_listener *l)
{
	struct rsk_offer *e, **pp;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (rsk_rdv_forward(&e->o, e->memfd, e->ctl, e->reply) < 0) {
			pp = &e->next; /* rendezvous full: keep it, our next accept looks again */
			continue;
		}
		*pp = e->next;
		rsk_offer_free(e);
	}
}

static struct rsk_offer *rsk_listen_find(struct rsk_shm_listener *l,
					 const struct sockaddr_storage *peer, int wait_ms,
					 int *exists)
{
	struct timespec ms = {0, 1000000};
	struct rsk_offer *e = NULL;
	int slept = 0, present = -1;

	pthread_mutex_lock(&l->lock);
	while (slept < wait_ms) {
		/* Take everything queued (each at most once per round), then look. */
		while (rsk_listen_take_one(l))
			;
		e = rsk_listen_scan(l, peer);
		if (e != NULL)
			break;
		/* Not here: a plain client, or its offer is held by a sibling process. */
		if (present < 0 || slept % 64 == 0)
			present = rsk_rdv_client_present((const struct sockaddr *)peer);
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

struct rsk_shm_claim {
	struct rsk_offer *e;
};

_Static_assert(sizeof(struct rsk_shm_claim) <= RSK_CM_PRIV, "rsk_claim.priv too small");

static struct rsk_shm_claim *rsk_shm_claim_of(struct rsk_claim *cl)
{
	return (struct rsk_shm_claim *)cl->priv;
}

/* A present client whose offer never shows up is dropped: it is committed to shm. */
static int rsk_shm_claim(void *lh, struct rsk_claim *cl, int wait_ms)
{
	struct rsk_offer *e;
	int exists;

	(void)wait_ms; /* the wait is this transport's own: offers come before the SYN */
	e = rsk_listen_find(lh, cl->peer, RSK_CLAIM_WAIT_MS, &exists);
	rsk_shm_claim_of(cl)->e = e;
	if (e == NULL && !exists) {
		cl->why = RDMASOCK_FB_NO_PEER; /* a plain TCP client */
		return 0;
	}
	if (e == NULL)
		return -ETIMEDOUT;
	cl->nbuf = e->o.nbuf;
	return 1;
}

static int rsk_shm_claim_open(struct rsk_claim *cl)
{
	struct rsk_offer *e = rsk_shm_claim_of(cl)->e;
	int peer_ctl = e->ctl, rc; /* hidden on arrival; the endpoint owns it from here */

	e->ctl = -1;
	if (peer_ctl < 0)
		return peer_ctl;
	rc = rsk_shm_open(e->memfd, RSK_SHM_SERVER, peer_ctl, cl->ep_mem, &cl->ep);
	if (rc < 0)
		rsk_fd_unhide_close(peer_ctl);
	return rc;
}

static int rsk_shm_answer(struct rsk_claim *cl, int ctl)
{
	return rsk_rdv_answer(rsk_shm_claim_of(cl)->e->reply, RSK_RDV_ACCEPT, ctl);
}

static void rsk_shm_unclaim(struct rsk_claim *cl, int accepted)
{
	struct rsk_offer *e = rsk_shm_claim_of(cl)->e;

	if (e == NULL)
		return;
	if (!accepted)
		(void)rsk_rdv_answer(e->reply, RSK_RDV_DECLINE, -1);
	rsk_offer_free(e); /* memfd mapped, ctl taken, reply answered */
	rsk_shm_claim_of(cl)->e = NULL;
}

const struct rsk_cm_ops rsk_shm_cm_ops = {
	.ep_size = rsk_shm_ep_size,
	.fork_share = 1,
	.dial = rsk_shm_dial,
	.offer = rsk_shm_offer,
	.dialed = rsk_shm_dialed,
	.undial = rsk_shm_undial,
	.listen = rsk_shm_listen,
	.unlisten = rsk_shm_unlisten,
	.claim = rsk_shm_claim,
	.claim_open = rsk_shm_claim_open,
	.answer = rsk_shm_answer,
	.unclaim = rsk_shm_unclaim,
	.fin_sent = rsk_shm_fin_sent,
	.peer_ended = rsk_shm_peer_ended,
	.prefork = rsk_shm_prefork,
};
