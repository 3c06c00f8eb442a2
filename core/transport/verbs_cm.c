/*
 * Connection setup of the verbs transport with rdma_cm in RDMA_PS_TCP, on the application's
 * own address and port. The client connects its QP first (hello in the private data: buffer
 * geometry and the port its TCP placeholder is bound to), then makes the ordinary TCP
 * connection; the server answers requests from the event loop (rsk_verbs_listener_event)
 * and keeps each accepted QP as an offer until accept() returns the TCP connection from the
 * same client address, exactly as shm offers are claimed. At the end, the ops table.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/sys.h"
#include "verbs.h"
#include "verbs_cm.h"
#include "announce.h"

#define RSK_VERBS_OFFER_TTL_MS 10000
/* Unclaimed accepted QPs a listener keeps at most (each holds registered buffers). */
#define RSK_VERBS_MAX_OFFERS 256
#define RSK_VERBS_MAX_NBUF 4096
#define RSK_VERBS_MIN_BSIZE 1024
#define RSK_VERBS_MAX_BSIZE (4u << 20)

static void rsk_hello_fill(struct rsk_verbs_hello *h, uint16_t port, uint32_t nbuf, uint32_t bsize,
			   unsigned int flags)
{
	h->flags = htons((uint16_t)flags);
	h->magic = htonl(RSK_VERBS_MAGIC);
	h->version = htons(RSK_VERBS_VERSION);
	h->tcp_port = htons(port);
	h->nbuf = htonl(nbuf);
	h->buf_size = htonl(bsize);
}

_Static_assert(offsetof(struct rsk_verbs_hello, magic) == offsetof(struct rsk_verbs_hdr, magic) &&
		       offsetof(struct rsk_verbs_hello, version) ==
			       offsetof(struct rsk_verbs_hdr, version) &&
		       sizeof(struct rsk_verbs_hdr) == 6,
	       "a hello starts with the frozen header");

/* Another build's hello: our magic in its frozen start (struct rsk_verbs_hdr), another
 * version. */
static int rsk_hello_other_version(const void *data, uint8_t len)
{
	struct rsk_verbs_hdr v;

	if (data == NULL || len < sizeof(v))
		return 0;
	memcpy(&v, data, sizeof(v));
	return ntohl(v.magic) == RSK_VERBS_MAGIC && ntohs(v.version) != RSK_VERBS_VERSION;
}

/* A hello we can serve: ours, and a geometry the engine runs with. 0, -EPROTONOSUPPORT
 * (another version's, whatever follows its start) or -EPROTO. */
int rsk_hello_parse(const void *data, uint8_t len, struct rsk_verbs_hello *h)
{
	uint32_t nbuf, bsize;

	if (rsk_hello_other_version(data, len))
		return -EPROTONOSUPPORT;
	if (data == NULL || len < sizeof(*h))
		return -EPROTO;
	memcpy(h, data, sizeof(*h));
	nbuf = ntohl(h->nbuf);
	bsize = ntohl(h->buf_size);
	h->flags = ntohs(h->flags);
	if (ntohl(h->magic) != RSK_VERBS_MAGIC || ntohs(h->version) != RSK_VERBS_VERSION ||
	    (h->flags & ~RSK_VERBS_HELLO_UPGRADE) != 0 ||
	    nbuf < RSK_EP_MIN_NBUF || nbuf > RSK_VERBS_MAX_NBUF ||
	    bsize < RSK_VERBS_MIN_BSIZE || bsize > RSK_VERBS_MAX_BSIZE)
		return -EPROTO;
	h->nbuf = nbuf;
	h->buf_size = bsize;
	h->tcp_port = ntohs(h->tcp_port);
	return 0;
}

/* ---- client ---- */

/* Wait for the next event on @ch until @deadline; it must be @want. 0 or -errno. */
static int rsk_cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
			 int64_t deadline, struct rsk_verbs_hello *reply)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	int64_t left;
	enum rdma_cm_event_type type;
	int rc, status;

	for (;;) {
		left = deadline - rsk_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		rc = rsk_sys_poll(&p, 1, (int)left);
		if (rc == -EINTR)
			continue;
		if (rc <= 0) {
			rsk_dbg("verbs: no rdma_cm event (waiting for %s): %s", rdma_event_str(want),
				rc < 0 ? strerror(-rc) : "timeout");
			return rc < 0 ? rc : -ETIMEDOUT;
		}
		if (rdma_get_cm_event(ch, &ev) != 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		break;
	}
	type = ev->event;
	status = ev->status;
	rc = 0;
	rsk_dbg("verbs: %s (status %d)", rdma_event_str(type), status);
	if (type == want && reply != NULL)
		rc = rsk_hello_parse(ev->param.conn.private_data, ev->param.conn.private_data_len,
				     reply);
	/* a server of another build rejects us with its own hello's start: say so */
	if (type == RDMA_CM_EVENT_REJECTED &&
	    rsk_hello_other_version(ev->param.conn.private_data,
				    ev->param.conn.private_data_len))
		rc = -EPROTONOSUPPORT;
	rdma_ack_cm_event(ev);
	if (type == want)
		return rc;
	rsk_dbg("verbs: rdma_cm %s (status %d) instead of %s", rdma_event_str(type), status,
		rdma_event_str(want));
	if (rc == -EPROTONOSUPPORT)
		return rc;
	switch (type) {
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -ENETUNREACH;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return -ETIMEDOUT;
	default:
		return -EPROTO;
	}
}

/*
 * Resolve @dest from @src on a fresh id, retrying with a new id until @deadline: the first
 * resolution towards a neighbour not yet in the ARP cache can go unanswered (seen with rxe:
 * the ARP completes but the request is never finished), and the next one then succeeds.
 */
static int rsk_cm_resolve(struct rdma_event_channel *ch, struct rdma_cm_id **idp,
			  const struct sockaddr *src, const struct sockaddr *dest, int64_t deadline)
{
	int64_t left, step;
	int rc = -ETIMEDOUT;

	while ((left = deadline - rsk_now_ms()) > 0) {
		step = left < 500 ? left : 500;
		if (rdma_create_id(ch, idp, NULL, RDMA_PS_TCP) != 0)
			return -errno;
		if (rdma_resolve_addr(*idp, (struct sockaddr *)src, (struct sockaddr *)dest,
				      (int)step) != 0) {
			rsk_dbg("verbs: rdma_resolve_addr: %s", strerror(errno));
			rc = -ENETUNREACH;
		} else {
			rc = rsk_cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, rsk_now_ms() + step, NULL);
		}
		if (rc != -ETIMEDOUT)
			return rc; /* resolved (0), or a definite answer */
		rdma_destroy_id(*idp); /* a late event for it is discarded with it */
		*idp = NULL;
	}
	return rc;
}

int rsk_verbs_connect(const struct sockaddr *dest, socklen_t dlen, int timeout_ms,
		      unsigned int hello_flags, struct sockaddr_storage *src,
		      int (*bind_tcp)(const struct sockaddr *src, void *arg), void *arg,
		      struct rsk_ep **out)
{
	int64_t deadline = rsk_now_ms() + timeout_ms;
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp;
	struct rsk_verbs_hello hello, reply;
	struct rdma_cm_id *id = NULL;
	struct rsk_ep *ep = NULL;
	int rc, port = 0;

	(void)dlen;
	if ((rc = rsk_verbs_probe()) < 0)
		return rc;
	ch = rdma_create_event_channel();
	if (ch == NULL)
		return errno == ENODEV ? -ENODEV : -ENOMEM;
	(void)rsk_sys_set_fl(ch->fd, O_NONBLOCK);
	rc = rsk_addr_route_src(dest, src);
	if (rc == 0)
		rc = rsk_cm_resolve(ch, &id, (struct sockaddr *)src, dest, deadline);
	if (rc == 0)
		rc = rdma_resolve_route(id, timeout_ms) ? -ENETUNREACH : 0;
	if (rc == 0)
		rc = rsk_cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, NULL);
	if (rc == 0) { /* our TCP placeholder leaves from the address rdma_cm chose */
		memset(src, 0, sizeof(*src));
		memcpy(src, rdma_get_local_addr(id), rsk_sa_len(rdma_get_local_addr(id)));
		rsk_sa_set_port(src, 0);
		port = bind_tcp((struct sockaddr *)src, arg);
		rc = port < 0 ? port : 0;
		if (rc == 0)
			rsk_sa_set_port(src, (uint16_t)port);
	}
	if (rc == 0)
		rc = rsk_verbs_ep_create(id, rsk_config.buf_count, rsk_config.buf_size, &ep);
	if (rc == 0) {
		rsk_hello_fill(&hello, (uint16_t)port, ep->nbuf, ep->buf_size, hello_flags);
		memset(&cp, 0, sizeof(cp));
		cp.private_data = &hello;
		cp.private_data_len = sizeof(hello);
		cp.retry_count = 7;
		cp.rnr_retry_count = 7; /* credits make RNR impossible; never fail on it anyway */
		rc = rdma_connect(id, &cp) ? -ECONNREFUSED : 0;
	}
	if (rc == 0)
		rc = rsk_cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED, deadline, &reply);
	if (rc == 0 && (reply.nbuf != ep->nbuf || reply.buf_size != ep->buf_size))
		rc = -EPROTO;
	/* Set up: the id's later events go to the process's shared channel, and this one (an
	 * fd for the handshake's synchronous waits only) goes. */
	if (rc == 0)
		rc = rsk_verbs_ep_attach_cm(ep, id);
	if (rc < 0) {
		if (ep != NULL)
			rsk_ep_destroy(ep); /* with the id */
		else if (id != NULL)
			rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
		return rc;
	}
	rdma_destroy_event_channel(ch);
	*out = ep;
	return 0;
}

/* ---- server ---- */

struct rsk_verbs_offer {
	struct rsk_verbs_offer *next;
	struct rsk_ep *ep;
	struct rdma_cm_id *id;
	struct sockaddr_storage tcp; /* the client's TCP address: its IP, the hello's port */
	int ready;                   /* ESTABLISHED seen */
	int upgrade;                 /* for an existing TCP connection (RSK_VERBS_HELLO_UPGRADE) */
	int64_t born;
};

struct rsk_verbs_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rsk_verbs_offer *offers;
	int interest; /* this process accepts here (atomic) */
	int forked;   /* it forked with the listener open (atomic) */
	int noffers;  /* offers in the list (lock) */
	int refuse;   /* serves fork-per-connection: no more verbs (atomic) */
	int paused;   /* short of fds: reject for now (atomic) */
};

int rsk_verbs_listen(const struct sockaddr *addr, socklen_t len, struct rsk_verbs_listener **out)
{
	struct rsk_verbs_listener *l;
	int rc;

	(void)len;
	if ((rc = rsk_verbs_probe()) < 0)
		return rc;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	l->ch = rdma_create_event_channel();
	if (l->ch == NULL) {
		free(l);
		return -ENODEV;
	}
	(void)rsk_sys_set_fl(l->ch->fd, O_NONBLOCK);
	rc = rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP) ? -errno : 0;
	if (rc == 0 && rdma_bind_addr(l->id, (struct sockaddr *)addr) != 0)
		rc = -errno;
	if (rc == 0 && rdma_listen(l->id, 1024) != 0)
		rc = -errno;
	if (rc < 0) {
		if (l->id != NULL)
			rdma_destroy_id(l->id);
		rdma_destroy_event_channel(l->ch);
		free(l);
		return rc;
	}
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
	*out = l;
	return 0;
}

int rsk_verbs_listener_fd(struct rsk_verbs_listener *l)
{
	return l->ch->fd;
}

void rsk_verbs_listener_interest(struct rsk_verbs_listener *l)
{
	__atomic_store_n(&l->interest, 1, __ATOMIC_RELEASE);
}

void rsk_verbs_listener_refuse(struct rsk_verbs_listener *l)
{
	if (!__atomic_exchange_n(&l->refuse, 1, __ATOMIC_ACQ_REL))
		rsk_info("verbs listener: connections are served by forked children here; "
			 "further clients stay on TCP");
}

void rsk_verbs_listener_pause(struct rsk_verbs_listener *l, int on)
{
	__atomic_store_n(&l->paused, on, __ATOMIC_RELEASE);
}

void rsk_verbs_listener_forked(struct rsk_verbs_listener *l)
{
	__atomic_store_n(&l->forked, 1, __ATOMIC_RELEASE);
}

/*
 * Accept a connection request, or reject it (never an error to anyone: the client falls
 * back to TCP on a reject). Returns an id to destroy once the event is acked, or NULL.
 */
static struct rdma_cm_id *rsk_verbs_on_request(struct rsk_verbs_listener *l,
					       struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;
	struct rsk_verbs_hello h, reply;
	struct rdma_conn_param cp;
	struct rsk_verbs_offer *o;
	struct rsk_ep *ep = NULL;
	int rc;

	rc = rsk_hello_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, &h);
	if (rc == 0 && __atomic_load_n(&l->forked, __ATOMIC_ACQUIRE) &&
	    !__atomic_load_n(&l->interest, __ATOMIC_ACQUIRE))
		rc = -EAGAIN; /* its children accept, not we: the client stays TCP */
	if (rc == 0 && __atomic_load_n(&l->refuse, __ATOMIC_ACQUIRE))
		rc = -EPERM; /* fork-per-connection: children cannot use our QPs */
	if (rc == 0 && __atomic_load_n(&l->paused, __ATOMIC_ACQUIRE))
		rc = -EMFILE; /* short of fds: the client stays TCP */
	if (rc == 0 && __atomic_load_n(&l->noffers, __ATOMIC_RELAXED) >= RSK_VERBS_MAX_OFFERS)
		rc = -ENOBUFS; /* nobody claims them (or a flood): the client stays TCP */
	o = rc == 0 ? calloc(1, sizeof(*o)) : NULL;
	if (o != NULL)
		rc = rsk_verbs_ep_create(id, h.nbuf, h.buf_size, &ep);
	if (o == NULL || rc < 0) {
		rsk_dbg("verbs: rejecting a connection request (%s)", strerror(rc < 0 ? -rc : ENOMEM));
		/* Another build's client learns our version from the reject (its fallback
		 * reason); to anyone else a reject says no more than before. */
		rsk_hello_fill(&reply, 0, 0, 0, 0);
		(void)rdma_reject(id, rc == -EPROTONOSUPPORT ? &reply : NULL,
				  rc == -EPROTONOSUPPORT ? (uint8_t)sizeof(struct rsk_verbs_hdr) : 0);
		free(o);
		return id;
	}
	memcpy(&o->tcp, rdma_get_peer_addr(id), rsk_sa_len(rdma_get_peer_addr(id)));
	rsk_sa_set_port(&o->tcp, h.tcp_port);
	o->ep = ep;
	o->id = id;
	o->born = rsk_now_ms();
	o->upgrade = (h.flags & RSK_VERBS_HELLO_UPGRADE) != 0;
	rsk_hello_fill(&reply, 0, h.nbuf, h.buf_size, 0);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &reply;
	cp.private_data_len = sizeof(reply);
	cp.rnr_retry_count = 7;
	/* Offered before the accept: the client's TCP connect comes only after ESTABLISHED. */
	pthread_mutex_lock(&l->lock);
	o->next = l->offers;
	l->offers = o;
	l->noffers++;
	pthread_mutex_unlock(&l->lock);
	if (rdma_accept(id, &cp) != 0)
		rsk_dbg("verbs: rdma_accept failed: %s", strerror(errno));
	return NULL;
}

/* Take offer @o out of the list (lock held); returns it. */
static struct rsk_verbs_offer *rsk_verbs_unlink(struct rsk_verbs_listener *l,
						struct rsk_verbs_offer *o)
{
	struct rsk_verbs_offer **pp;

	for (pp = &l->offers; *pp != NULL; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			l->noffers--;
			return o;
		}
	return NULL;
}

/* Offers nobody claimed in time, or whose client went away: drop them (lock held). */
static void rsk_verbs_expire(struct rsk_verbs_listener *l, struct rdma_cm_id *gone,
			     struct rsk_verbs_offer **dead)
{
	struct rsk_verbs_offer *o, *next;
	int64_t now = rsk_now_ms();

	for (o = l->offers; o != NULL; o = next) {
		next = o->next;
		if (o->id == gone || now - o->born > RSK_VERBS_OFFER_TTL_MS) {
			rsk_verbs_unlink(l, o);
			o->next = *dead;
			*dead = o;
		}
	}
}

void rsk_verbs_listener_event(struct rsk_verbs_listener *l)
{
	struct rsk_verbs_offer *o, *dead = NULL;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	enum rdma_cm_event_type type;
	struct sockaddr_storage up;
	int announce;

	while (rdma_get_cm_event(l->ch, &ev) == 0) {
		type = ev->event;
		id = ev->id;
		rsk_dbg("verbs listener: %s (status %d)", rdma_event_str(type), ev->status);
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			id = rsk_verbs_on_request(l, ev);
			rdma_ack_cm_event(ev);
			if (id != NULL)
				rdma_destroy_id(id);
			continue;
		}
		rdma_ack_cm_event(ev);
		announce = 0;
		pthread_mutex_lock(&l->lock);
		if (type == RDMA_CM_EVENT_ESTABLISHED) {
			for (o = l->offers; o != NULL; o = o->next)
				if (o->id == id) {
					o->ready = 1;
					if (o->upgrade) {
						up = o->tcp;
						announce = 1;
					}
				}
			pthread_cond_broadcast(&l->cond);
		} else if (id != l->id) { /* an offer failed or its client left */
			rsk_verbs_expire(l, id, &dead);
		}
		pthread_mutex_unlock(&l->lock);
		/* Claimable now: the connection it is for takes it at its next call. */
		if (announce)
			(void)rsk_transport_upgrade_offer(&up);
	}
	pthread_mutex_lock(&l->lock);
	rsk_verbs_expire(l, NULL, &dead);
	pthread_mutex_unlock(&l->lock);
	while ((o = dead) != NULL) { /* after the acks: destroying an id waits for them */
		dead = o->next;
		rsk_ep_destroy(o->ep);
		free(o);
	}
}

struct rsk_ep *rsk_verbs_listener_claim(struct rsk_verbs_listener *l,
					const struct sockaddr *peer, int wait_ms, int *upgrade)
{
	int64_t deadline = -1; /* read the clock only to wait: most accepts find no offer */
	struct rsk_verbs_offer *o;
	struct timespec ts;
	struct rsk_ep *ep;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		for (o = l->offers; o != NULL; o = o->next)
			if (rsk_addr_same_v4m((struct sockaddr *)&o->tcp, peer))
				break;
		if (o == NULL || o->ready)
			break;
		if (deadline < 0)
			deadline = rsk_now_ms() + wait_ms;
		else if (rsk_now_ms() >= deadline)
			break;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 5 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		(void)pthread_cond_timedwait(&l->cond, &l->lock, &ts);
	}
	if (o != NULL)
		rsk_verbs_unlink(l, o);
	pthread_mutex_unlock(&l->lock);
	if (o == NULL)
		return NULL;
	*upgrade = o->upgrade;
	ep = o->ep;
	/* The connection's later events must not reach the listener (it may close first): they
	 * go to the process's shared channel, bound to the endpoint. */
	if (!o->ready || rsk_verbs_ep_attach_cm(ep, o->id) < 0) {
		rsk_ep_destroy(ep);
		free(o);
		return RSK_VERBS_CLAIM_FAILED;
	}
	free(o);
	return ep;
}

void rsk_verbs_listener_close(struct rsk_verbs_listener *l)
{
	struct rsk_verbs_offer *o;

	while ((o = l->offers) != NULL) {
		l->offers = o->next;
		rsk_ep_destroy(o->ep);
		free(o);
	}
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	pthread_mutex_destroy(&l->lock);
	pthread_cond_destroy(&l->cond);
	free(l);
}

/* ---- the connection-management ops ---- */

/* Remembered failures, so an unreachable peer costs one timeout, not one per connect. */
#define RSK_NEGCACHE_SLOTS 64
#define RSK_NEGCACHE_MS 10000

static struct {
	struct sockaddr_storage dest;
	int64_t until;
} rsk_negcache[RSK_NEGCACHE_SLOTS];
static pthread_mutex_t rsk_negcache_lock = PTHREAD_MUTEX_INITIALIZER;

static int rsk_negcache_slot(const struct sockaddr *a, socklen_t len)
{
	uint32_t h = 2166136261u;
	socklen_t i;

	for (i = 0; i < len; i++)
		h = (h ^ ((const uint8_t *)a)[i]) * 16777619u;
	return (int)(h % RSK_NEGCACHE_SLOTS);
}

static int rsk_negcache_hit(const struct sockaddr *a, socklen_t len)
{
	int i = rsk_negcache_slot(a, len), hit;

	pthread_mutex_lock(&rsk_negcache_lock);
	hit = rsk_negcache[i].until > rsk_now_ms() && memcmp(&rsk_negcache[i].dest, a, len) == 0;
	pthread_mutex_unlock(&rsk_negcache_lock);
	return hit;
}

static void rsk_negcache_add(const struct sockaddr *a, socklen_t len)
{
	int i = rsk_negcache_slot(a, len);

	pthread_mutex_lock(&rsk_negcache_lock);
	memset(&rsk_negcache[i].dest, 0, sizeof(rsk_negcache[i].dest));
	memcpy(&rsk_negcache[i].dest, a, len);
	rsk_negcache[i].until = rsk_now_ms() + RSK_NEGCACHE_MS;
	pthread_mutex_unlock(&rsk_negcache_lock);
}

/* The placeholder leaves from the address rdma_cm chose (the server claims by it). */
static int rsk_verbs_bind_tcp(const struct sockaddr *src, void *arg)
{
	int fd = *(int *)arg, rc;
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);

	if ((rc = rsk_sys_getsockname(fd, (struct sockaddr *)&me, &len)) < 0)
		return rc;
	if (rsk_sa_port((struct sockaddr *)&me) == 0) {
		if ((rc = rsk_sys_bind(fd, src, rsk_sa_len(src))) < 0)
			return rc;
		len = sizeof(me);
		if ((rc = rsk_sys_getsockname(fd, (struct sockaddr *)&me, &len)) < 0)
			return rc;
	}
	return rsk_sa_port((struct sockaddr *)&me);
}

static enum rdmasock_fallback rsk_verbs_reason(int err)
{
	switch (err) {
	case -ENODEV:
	case -ENOSYS:
		return RDMASOCK_FB_NO_DEVICE;
	case -ENETUNREACH:
	case -EADDRNOTAVAIL:
	case -EHOSTUNREACH:
		return RDMASOCK_FB_NO_ROUTE;
	case -ECONNREFUSED:
		return RDMASOCK_FB_REFUSED;
	case -ETIMEDOUT:
		return RDMASOCK_FB_TIMEOUT;
	case -EDQUOT:
		return RDMASOCK_FB_MEMLOCK;
	case -EPROTO:
		return RDMASOCK_FB_HANDSHAKE;
	case -EPROTONOSUPPORT:
		return RDMASOCK_FB_VERSION;
	default:
		return RDMASOCK_FB_RESOURCES;
	}
}

/* rdma_cm connect of our QP; the kernel connect follows (dial_sync). */
static int rsk_verbs_dial(struct rsk_dial *d)
{
	struct sockaddr_storage src;
	int rc;

	if ((rc = rsk_verbs_probe()) < 0) {
		d->why = RDMASOCK_FB_NO_DEVICE;
		return rc;
	}
	if (rsk_negcache_hit(d->dest, d->dest_len)) {
		d->why = RDMASOCK_FB_NEGATIVE_CACHE;
		return -EHOSTUNREACH;
	}
	rc = rsk_verbs_connect(d->dest, d->dest_len, (int)rsk_config.connect_timeout_ms,
			       d->upgrade ? RSK_VERBS_HELLO_UPGRADE : 0, &src, rsk_verbs_bind_tcp,
			       &d->fd, &d->ep);
	if (rc < 0) {
		d->why = rsk_verbs_reason(rc);
		if (d->why == RDMASOCK_FB_NO_ROUTE || d->why == RDMASOCK_FB_REFUSED ||
		    d->why == RDMASOCK_FB_TIMEOUT || d->why == RDMASOCK_FB_VERSION)
			rsk_negcache_add(d->dest, d->dest_len);
		rsk_dbg("fd %d: no verbs connection: %s", d->fd, strerror(-rc));
	}
	return rc;
}

/* The server never claimed our QP (no hello): this destination stays on TCP for a while. */
static void rsk_verbs_dial_failed(struct rsk_dial *d)
{
	rsk_negcache_add(d->dest, d->dest_len);
}

static int rsk_verbs_listen_op(const struct sockaddr *bound, int v6only, void **lh)
{
	(void)v6only;
	return rsk_verbs_listen(bound, sizeof(struct sockaddr_storage),
				(struct rsk_verbs_listener **)lh);
}

static int rsk_verbs_listen_fd(void *lh, int i)
{
	return i == 0 ? rsk_verbs_listener_fd(lh) : -1;
}

static void rsk_verbs_listen_event(void *lh, int i)
{
	(void)i;
	rsk_verbs_listener_event(lh);
}

/* Always 0: the fd the loop watches (the listener's event channel) lives as long as it. */
static int rsk_verbs_listen_note(void *lh, enum rsk_listen_note note)
{
	if (note == RSK_LISTEN_INTEREST)
		rsk_verbs_listener_interest(lh);
	else if (note == RSK_LISTEN_FORKED)
		rsk_verbs_listener_forked(lh);
	else if (note == RSK_LISTEN_REFUSE)
		rsk_verbs_listener_refuse(lh);
	else if (note == RSK_LISTEN_PAUSE || note == RSK_LISTEN_RESUME)
		rsk_verbs_listener_pause(lh, note == RSK_LISTEN_PAUSE);
	/* RSK_LISTEN_FORGET: the objects are the parent's; the caller drops the handle */
	return 0;
}

static void rsk_verbs_unlisten(void *lh)
{
	rsk_verbs_listener_close(lh);
}

/* A verbs client of ours (it connected its QP before this TCP connection)? */
static int rsk_verbs_claim_op(void *lh, struct rsk_claim *cl, int wait_ms)
{
	struct rsk_ep *ep = rsk_verbs_listener_claim(lh, (const struct sockaddr *)cl->peer,
						     wait_ms, &cl->upgrade);

	if (ep == NULL) {
		cl->why = RDMASOCK_FB_NO_PEER;
		return 0;
	}
	if (ep == RSK_VERBS_CLAIM_FAILED) {
		/* Its QP is gone with the offer: the client sees the disconnect instead of our
		 * hello and stays on TCP, and so do we. */
		cl->why = RDMASOCK_FB_HANDSHAKE;
		return 0;
	}
	cl->ep = ep;
	cl->nbuf = ep->nbuf;
	return 1;
}

static int rsk_verbs_claim_open(struct rsk_claim *cl)
{
	return cl->ep != NULL ? 0 : -EINVAL; /* the endpoint was made at the request */
}

static void rsk_verbs_unclaim(struct rsk_claim *cl, int accepted)
{
	(void)cl; /* an unaccepted endpoint is destroyed with its connection */
	(void)accepted;
}

const struct rsk_cm_ops rsk_verbs_cm_ops = {
	.dial_sync = 1,
	.accept_hello = 1,
	.keeps_ctl = 1,
	/* No placeholder (issue 9: one hidden fd per connection): the addresses were copied at
	 * the switch, and a dead peer's rdma_cm id goes with its process (our DISCONNECTED). */
	.keeps_tcp = 0,
	.sends_sync = 1,
	.slow_setup = 1,
	.dial = rsk_verbs_dial,
	.dial_failed = rsk_verbs_dial_failed,
	.listen = rsk_verbs_listen_op,
	.listen_fd = rsk_verbs_listen_fd,
	.listen_event = rsk_verbs_listen_event,
	.listen_note = rsk_verbs_listen_note,
	.unlisten = rsk_verbs_unlisten,
	.claim = rsk_verbs_claim_op,
	.claim_open = rsk_verbs_claim_open,
	.unclaim = rsk_verbs_unclaim,
	.event_fd = rsk_verbs_event_fd,
	.on_event = rsk_verbs_on_event,
	.event_bind = rsk_verbs_event_bind,
	.event_wait = rsk_verbs_event_wait,
	.sends_done = rsk_verbs_sends_done,
	.foreign = rsk_verbs_ep_foreign,
};
