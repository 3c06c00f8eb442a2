/*
 * Listener objects (see listener.h): for each transport the configured mode listens with, a
 * listener bound like the kernel's, watched on the event loop when it has events of its own.
 * Objects are kept in a process-local list so that a late note (a connection accepted long
 * ago) reaches a listener only while it is still open.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "base/config.h"
#include "base/evloop.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/sys.h"
#include "listener.h"
#include "transport/registry.h"

struct rsk_tlistener;

/* A watch's argument: which listener, which of its fds. */
struct rsk_twatch {
	struct rsk_tlistener *t;
	int i;
	int fd;         /* the fd watched, -1 none */
	rsk_watch_t w;
};

struct rsk_tlistener {
	const struct rsk_cm_ops *cm;
	void *lh;
	struct rsk_twatch ws[RSK_LISTEN_MAX_FDS];
	int retry; /* a watch could not be made: the next note tries again */
};

struct rsk_listener {
	struct rsk_listener *next;
	uint64_t id;
	/* Accepted connections that may still move through it, with RSK_LST_CLOSING once the
	 * application closed it (it goes with the last hold). Atomic: a hold and its drop,
	 * once per TCP-first connection, take no lock (they took the list's lock and walked
	 * it, each). */
	unsigned int holds;
	int n;
	struct rsk_tlistener t[RSK_TRANSPORT_MAX];
};

#define RSK_LST_CLOSING 0x80000000u

/* How long accept() waits for a claim whose setup is still under way (verbs: ESTABLISHED). */
#define RSK_CLAIM_WAIT_MS 1000

static pthread_mutex_t rsk_lst_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_listener *rsk_lst_all;
static uint64_t rsk_lst_next_id = 1;

static void rsk_listener_on_event(void *arg, uint32_t events)
{
	struct rsk_twatch *tw = arg;

	(void)events;
	tw->t->cm->listen_event(tw->t->lh, tw->i);
}

static void rsk_listener_unwatch(struct rsk_tlistener *t)
{
	int i;

	for (i = 0; i < RSK_LISTEN_MAX_FDS; i++) {
		rsk_evloop_unwatch(t->ws[i].w); /* no callback for it runs after this */
		t->ws[i].w = 0;
		t->ws[i].fd = -1;
	}
}

/* Watch the fds the transport's listener has now (they change with pauses and forks). */
static int rsk_listener_watch(struct rsk_tlistener *t)
{
	struct rsk_twatch *tw;
	int i, fd, rc;

	for (i = 0; i < RSK_LISTEN_MAX_FDS; i++) {
		tw = &t->ws[i];
		fd = t->cm->listen_fd != NULL ? t->cm->listen_fd(t->lh, i) : -1;
		if (fd == tw->fd && (fd < 0 || tw->w != 0))
			continue;
		rsk_evloop_unwatch(tw->w);
		tw->w = 0;
		tw->fd = -1;
		tw->t = t;
		tw->i = i;
		if (fd < 0)
			continue;
		/* Edge-triggered: a transport short of fds may leave entries queued for its
		 * accepts (shm), and a level-triggered watch would spin on them. */
		if ((rc = rsk_evloop_watch(fd, EPOLLIN | EPOLLET, rsk_listener_on_event, tw,
					   &tw->w)) < 0)
			return rc;
		tw->fd = fd;
	}
	return 0;
}

/* The socket's address, and whether it may have companions at all. */
static int rsk_listener_addr(int fd, struct sockaddr_storage *ss, int *v6only,
			     enum rdmasock_fallback *why)
{
	socklen_t len = sizeof(*ss);
	int reuse = 0, rc;

	if ((rc = rsk_sys_getsockname(fd, (struct sockaddr *)ss, &len)) < 0) {
		*why = RDMASOCK_FB_RESOURCES;
		return rc;
	}
	len = sizeof(reuse);
	(void)rsk_sys_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &len);
	if (reuse) { /* several listeners share the port: offers could reach the wrong one */
		*why = RDMASOCK_FB_UNSUPPORTED;
		return -EOPNOTSUPP;
	}
	*v6only = 0;
	len = sizeof(*v6only);
	if (ss->ss_family == AF_INET6)
		(void)rsk_sys_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, v6only, &len);
	return 0;
}

/* One transport's listener, watched if it has an event fd. 0 or -errno. */
static int rsk_listener_add(struct rsk_listener *l, const struct rsk_cm_ops *cm,
			    const struct sockaddr *ss, int v6only, int fd)
{
	struct rsk_tlistener *t = &l->t[l->n];
	int rc = cm->listen(ss, v6only, &t->lh), i;

	if (rc < 0) {
		rsk_dbg("fd %d: no companion listener: %s", fd, strerror(-rc));
		return rc;
	}
	t->cm = cm;
	for (i = 0; i < RSK_LISTEN_MAX_FDS; i++)
		t->ws[i].fd = -1;
	if ((rc = rsk_listener_watch(t)) < 0) {
		rsk_warn("fd %d: listener events not watched (%s); its clients fall back", fd,
			 strerror(-rc));
		rsk_listener_unwatch(t);
		cm->unlisten(t->lh);
		return rc;
	}
	l->n++;
	return 0;
}

int rsk_listener_open(int fd, struct rsk_listener **out, enum rdmasock_fallback *why)
{
	const struct rsk_cm_ops *cms[RSK_TRANSPORT_MAX];
	struct sockaddr_storage ss;
	struct rsk_listener *l;
	enum rsk_mode mode;
	int v6only, n, i, rc;

	if ((rc = rsk_listener_addr(fd, &ss, &v6only, why)) < 0)
		return rc;
	mode = rsk_policy_mode(RSK_ROLE_SERVER, (struct sockaddr *)&ss); /* the rules file */
	if (mode == RSK_MODE_KERNEL) {
		*why = RDMASOCK_FB_POLICY; /* and so for the connections it accepts */
		return -EPERM;
	}
	n = rsk_transport_listening(mode, cms);
	l = calloc(1, sizeof(*l));
	if (l == NULL) {
		*why = RDMASOCK_FB_RESOURCES;
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		(void)rsk_listener_add(l, cms[i], (struct sockaddr *)&ss, v6only, fd);
	if (l->n == 0) {
		free(l);
		*why = RDMASOCK_FB_RESOURCES;
		return -ENODEV;
	}
	pthread_mutex_lock(&rsk_lst_lock);
	l->id = rsk_lst_next_id++;
	l->next = rsk_lst_all;
	rsk_lst_all = l;
	pthread_mutex_unlock(&rsk_lst_lock);
	*out = l;
	return 0;
}

static void rsk_listener_unlink_locked(struct rsk_listener *l)
{
	struct rsk_listener **pp;

	for (pp = &rsk_lst_all; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
}

static void rsk_listener_destroy(struct rsk_listener *l)
{
	int i;

	for (i = 0; i < l->n; i++) {
		rsk_listener_unwatch(&l->t[i]);
		l->t[i].cm->unlisten(l->t[i].lh);
	}
	free(l);
}

/* Off the list (no id finds it any more), then gone. */
static void rsk_listener_end(struct rsk_listener *l)
{
	pthread_mutex_lock(&rsk_lst_lock);
	rsk_listener_unlink_locked(l);
	pthread_mutex_unlock(&rsk_lst_lock);
	rsk_listener_destroy(l);
}

/*
 * The kernel's listener closed. Ours go too, unless accepted connections may still move
 * through them (TCP first: their offers come to our rendezvous): then with the last of those.
 * Once closing, nothing takes a hold any more, so exactly one of the close and the last drop
 * sees no holds left and ends it.
 */
void rsk_listener_close(struct rsk_listener *l)
{
	unsigned int was = __atomic_fetch_or(&l->holds, RSK_LST_CLOSING, __ATOMIC_ACQ_REL);

	if ((was & ~RSK_LST_CLOSING) == 0)
		rsk_listener_end(l);
}

int rsk_listener_hold(struct rsk_listener *l)
{
	unsigned int h = __atomic_load_n(&l->holds, __ATOMIC_ACQUIRE);

	do {
		if (h & RSK_LST_CLOSING)
			return -ENOENT;
	} while (!__atomic_compare_exchange_n(&l->holds, &h, h + 1, 1, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	return 0;
}

void rsk_listener_drop(struct rsk_listener *l)
{
	if (__atomic_sub_fetch(&l->holds, 1, __ATOMIC_ACQ_REL) == RSK_LST_CLOSING)
		rsk_listener_end(l); /* the last hold of a closed one */
}

/*
 * An interest (every accept, and an epoll registration) changes none of the fds a transport
 * listens on: the watches are looked over again only when the note says they changed, or a
 * watch failed before. Looking them over cost every accept the transport's lock once per fd.
 */
void rsk_listener_note(struct rsk_listener *l, enum rsk_listen_note note)
{
	struct rsk_tlistener *t;
	int i, changed;

	for (i = 0; i < l->n; i++) {
		t = &l->t[i];
		changed = t->cm->listen_note != NULL && t->cm->listen_note(t->lh, note);
		if (changed)
			rsk_listener_unwatch(t); /* same numbers may now be other sockets */
		/* (a leak may be told from a vfork child: nothing of ours is touched) */
		if (note != RSK_LISTEN_FORGET && note != RSK_LISTEN_LEAKED &&
		    (changed || note != RSK_LISTEN_INTEREST || t->retry))
			t->retry = rsk_listener_watch(t) < 0;
	}
}

uint64_t rsk_listener_id(const struct rsk_listener *l)
{
	return l->id;
}

void rsk_listener_note_id(uint64_t id, const struct rsk_cm_ops *cm, enum rsk_listen_note note)
{
	struct rsk_listener *l;
	int i;

	pthread_mutex_lock(&rsk_lst_lock);
	for (l = rsk_lst_all; l != NULL && l->id != id; l = l->next)
		;
	for (i = 0; l != NULL && i < l->n; i++)
		if (l->t[i].cm == cm && cm->listen_note != NULL) {
			if (cm->listen_note(l->t[i].lh, note))
				rsk_listener_unwatch(&l->t[i]);
			l->t[i].retry = rsk_listener_watch(&l->t[i]) < 0;
		}
	pthread_mutex_unlock(&rsk_lst_lock);
}

void rsk_listener_forget(struct rsk_listener *l)
{
	int i, k = 0;

	for (i = 0; i < l->n; i++) {
		memset(l->t[i].ws, 0, sizeof(l->t[i].ws)); /* the loop forgot the parent's watches */
		if (!l->t[i].cm->fork_share)
			continue; /* its objects are the parent's: never used nor destroyed here */
		l->t[k++] = l->t[i];
	}
	l->n = k;
	for (i = 0; i < l->n; i++) { /* the watch arguments point into the array: rebuild */
		memset(l->t[i].ws, 0, sizeof(l->t[i].ws));
		l->t[i].ws[0].fd = l->t[i].ws[1].fd = -1;
		l->t[i].retry = rsk_listener_watch(&l->t[i]) < 0;
	}
}

static int rsk_listener_claim_wait(struct rsk_listener *l, const struct sockaddr_storage *peer,
				   int fd, struct rsk_claim *cl, const struct rsk_cm_ops **cm,
				   int wait_ms)
{
	int i, rc;

	for (i = 0; i < l->n; i++) {
		memset(cl, 0, sizeof(*cl));
		cl->peer = peer;
		cl->fd = fd;
		rc = l->t[i].cm->claim(l->t[i].lh, cl, wait_ms);
		if (rc != 0 || cl->why != RDMASOCK_FB_NO_PEER) {
			*cm = l->t[i].cm;
			return rc; /* found, failed, or a definite "stay on TCP" */
		}
	}
	return 0;
}

int rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer, int fd,
		       struct rsk_claim *cl, const struct rsk_cm_ops **cm)
{
	return rsk_listener_claim_wait(l, peer, fd, cl, cm, RSK_CLAIM_WAIT_MS);
}

int rsk_listener_claim_id(uint64_t id, const struct sockaddr_storage *peer, int fd,
			  struct rsk_claim *cl, const struct rsk_cm_ops **cm)
{
	struct rsk_listener *l;
	int rc = 0;

	pthread_mutex_lock(&rsk_lst_lock);
	for (l = rsk_lst_all; l != NULL && l->id != id; l = l->next)
		;
	if (l != NULL)
		rc = rsk_listener_claim_wait(l, peer, fd, cl, cm, 0);
	pthread_mutex_unlock(&rsk_lst_lock);
	return rc;
}
