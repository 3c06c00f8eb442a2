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
#include "base/sys.h"
#include "listener.h"
#include "transport/registry.h"

struct rsk_tlistener {
	const struct rsk_cm_ops *cm;
	void *lh;
	rsk_watch_t w;
};

struct rsk_listener {
	struct rsk_listener *next;
	uint64_t id;
	int n;
	struct rsk_tlistener t[RSK_TRANSPORT_MAX];
};

/* How long accept() waits for a claim whose setup is still under way (verbs: ESTABLISHED). */
#define RSK_CLAIM_WAIT_MS 1000

static pthread_mutex_t rsk_lst_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_listener *rsk_lst_all;
static uint64_t rsk_lst_next_id = 1;

static void rsk_listener_on_event(void *arg, uint32_t events)
{
	struct rsk_tlistener *t = arg;

	(void)events;
	t->cm->listen_event(t->lh);
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
	int rc = cm->listen(ss, v6only, &t->lh), efd;

	if (rc < 0) {
		rsk_dbg("fd %d: no companion listener: %s", fd, strerror(-rc));
		return rc;
	}
	t->cm = cm;
	efd = cm->listen_fd != NULL ? cm->listen_fd(t->lh) : -1;
	if (efd >= 0 && (rc = rsk_evloop_watch(efd, EPOLLIN, rsk_listener_on_event, t, &t->w)) < 0) {
		rsk_warn("fd %d: listener events not watched (%s); its clients fall back", fd,
			 strerror(-rc));
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
	int v6only, n, i, rc;

	if ((rc = rsk_listener_addr(fd, &ss, &v6only, why)) < 0)
		return rc;
	n = rsk_transport_listening(rsk_config.mode, cms);
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

static void rsk_listener_unlink(struct rsk_listener *l)
{
	struct rsk_listener **pp;

	pthread_mutex_lock(&rsk_lst_lock);
	for (pp = &rsk_lst_all; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	pthread_mutex_unlock(&rsk_lst_lock);
}

void rsk_listener_close(struct rsk_listener *l)
{
	int i;

	rsk_listener_unlink(l);
	for (i = 0; i < l->n; i++) {
		rsk_evloop_unwatch(l->t[i].w); /* no callback for it runs after this */
		l->t[i].cm->unlisten(l->t[i].lh);
	}
	free(l);
}

void rsk_listener_note(struct rsk_listener *l, enum rsk_listen_note note)
{
	int i;

	for (i = 0; i < l->n; i++)
		if (l->t[i].cm->listen_note != NULL)
			l->t[i].cm->listen_note(l->t[i].lh, note);
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
		if (l->t[i].cm == cm && cm->listen_note != NULL)
			cm->listen_note(l->t[i].lh, note);
	pthread_mutex_unlock(&rsk_lst_lock);
}

void rsk_listener_forget(struct rsk_listener *l)
{
	int i, k = 0;

	for (i = 0; i < l->n; i++) {
		l->t[i].w = 0; /* the loop forgot the parent's watches (evloop.c) */
		if (!l->t[i].cm->fork_share)
			continue; /* its objects are the parent's: never used nor destroyed here */
		l->t[k++] = l->t[i];
	}
	l->n = k;
}

int rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer,
		       struct rsk_claim *cl, const struct rsk_cm_ops **cm)
{
	const struct sockaddr_storage *local = cl->local; /* the caller's: kept for each */
	int i, rc;

	for (i = 0; i < l->n; i++) {
		memset(cl, 0, sizeof(*cl));
		cl->peer = peer;
		cl->local = local;
		rc = l->t[i].cm->claim(l->t[i].lh, cl, RSK_CLAIM_WAIT_MS);
		if (rc != 0 || cl->why != RDMASOCK_FB_NO_PEER) {
			*cm = l->t[i].cm;
			return rc; /* found, failed, or a definite "stay on TCP" */
		}
	}
	return 0;
}
