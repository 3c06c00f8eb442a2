/*
 * Client side of acceleration: decide whether connect() may take the same-host path, and
 * take it. Every resource is acquired before the real TCP connect, so each failure up to
 * that point is a clean fallback with its reason; after it the connection is ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "conn.h"
#include "hs.h"
#include "log.h"
#include "monitor.h"
#include "ready.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "transport/shm.h"
#include "transport/verbs.h"

/* The path a connect may try, after the policy allowed acceleration. */
enum rsk_path { RSK_PATH_SHM = -1, RSK_PATH_VERBS = -2 };

/*
 * Why @s must stay on the kernel for this connect (a fallback reason), or the path to try:
 * shm for this host's addresses (auto, shm), verbs for other hosts (auto) or for every
 * destination (verbs: also to this host, which is how the Soft-RoCE guest tests it).
 */
static int rsk_connect_policy(struct rsk_sock *s, const struct sockaddr *addr, socklen_t len)
{
	if (rsk_config.mode == RSK_MODE_KERNEL || !rsk_config_port_allowed(&rsk_config,
									   rsk_sa_port(addr)))
		return RDMASOCK_FB_POLICY;
	if (s->state != RSK_SOCK_NEW || s->nfds != 1 || addr->sa_family != s->domain ||
	    len < rsk_sa_len(addr))
		return RDMASOCK_FB_UNSUPPORTED;
	if (rsk_config.mode == RSK_MODE_VERBS)
		return RSK_PATH_VERBS;
	if (rsk_hs_is_local(addr))
		return RSK_PATH_SHM;
	return rsk_config.mode == RSK_MODE_SHM ? RDMASOCK_FB_NOT_LOCAL : RSK_PATH_VERBS;
}

/* Bind an unbound socket where the route to @dest leaves, so that our address is known now
 * and is the one the kernel would have chosen. */
static int rsk_connect_bind(int fd, const struct sockaddr *dest, struct sockaddr_storage *me)
{
	socklen_t len = sizeof(*me);
	struct sockaddr_storage b;
	int rc;

	if (RSK_REAL(getsockname)(fd, (struct sockaddr *)me, &len) < 0)
		return -errno;
	if (rsk_sa_port((struct sockaddr *)me) == 0) {
		if ((rc = rsk_hs_route_src(dest, &b)) < 0)
			return rc;
		if (RSK_REAL(bind)(fd, (struct sockaddr *)&b, len) < 0)
			return -errno;
		len = sizeof(*me);
		if (RSK_REAL(getsockname)(fd, (struct sockaddr *)me, &len) < 0)
			return -errno;
	}
	return 0;
}

struct rsk_client_setup {
	int rdv, memfd, app, ctl, tcp;
	struct rsk_conn *c;
};

static void rsk_client_undo(struct rsk_client_setup *u)
{
	if (u->c != NULL) {
		if (u->c->ep != NULL)
			rsk_ep_destroy(u->c->ep);
		munmap(u->c, u->c->map_len);
	}
	if (u->rdv >= 0)
		RSK_REAL(close)(u->rdv);
	if (u->memfd >= 0)
		RSK_REAL(close)(u->memfd);
	if (u->app >= 0)
		RSK_REAL(close)(u->app);
	if (u->ctl >= 0)
		rsk_fd_unhide_close(u->ctl);
	if (u->tcp >= 0)
		rsk_fd_unhide_close(u->tcp);
}

static int rsk_conn_resolver(void *owner)
{
	struct rsk_conn *c = owner;

	return rsk_conn_resolve(c, 1000) < 0 ? -1 : rsk_shm_peer_ctl(c->ep);
}

/* Everything up to the offer: any failure here is a fallback (returns its reason). */
static int rsk_client_prepare(int fd, const struct sockaddr *dest, struct rsk_client_setup *u)
{
	struct rsk_hs_offer o;
	int rc;

	memset(&o, 0, sizeof(o));
	if (rsk_connect_bind(fd, dest, &o.client) < 0)
		return RDMASOCK_FB_RESOURCES;
	u->rdv = rsk_hs_find(dest, (struct sockaddr *)&o.client);
	if (u->rdv < 0)
		return u->rdv == -ENOENT ? RDMASOCK_FB_NO_PEER : RDMASOCK_FB_RESOURCES;
	u->memfd = rsk_shm_create(rsk_config.buf_count, rsk_config.buf_size);
	u->c = u->memfd >= 0 ? rsk_conn_alloc(rsk_config.buf_count) : NULL;
	if (u->c == NULL)
		return RDMASOCK_FB_RESOURCES;
	rc = rsk_shm_open(u->memfd, RSK_SHM_CLIENT, -1, rsk_conn_ep_mem(u->c), &u->c->ep);
	if (rc == 0)
		rc = rsk_conn_prepare(u->c, fd, &u->app, &u->ctl, &u->tcp);
	if (rc < 0)
		return RDMASOCK_FB_RESOURCES;
	o.magic = RSK_HS_MAGIC;
	o.version = RSK_HS_VERSION;
	o.nbuf = rsk_config.buf_count;
	o.buf_size = rsk_config.buf_size;
	memcpy(&o.server, dest, rsk_sa_len(dest));
	if (rsk_hs_offer(u->rdv, &o, u->memfd, u->ctl) < 0)
		return RDMASOCK_FB_RESOURCES;
	RSK_REAL(close)(u->memfd); /* the server got its copy; our mapping stays */
	u->memfd = -1;
	rsk_shm_set_resolver(u->c->ep, rsk_conn_resolver, u->c);
	return -1;
}

/* ---- verbs: remembered failures, so an unreachable peer costs one timeout, not one per
 * connect ---- */

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
	int fd = *(int *)arg;
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);

	if (RSK_REAL(getsockname)(fd, (struct sockaddr *)&me, &len) < 0)
		return -errno;
	if (rsk_sa_port((struct sockaddr *)&me) == 0) {
		if (RSK_REAL(bind)(fd, src, rsk_sa_len(src)) < 0)
			return -errno;
		len = sizeof(me);
		if (RSK_REAL(getsockname)(fd, (struct sockaddr *)&me, &len) < 0)
			return -errno;
	}
	return rsk_sa_port((struct sockaddr *)&me);
}

static int rsk_verbs_reason(int err)
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
	default:
		return RDMASOCK_FB_RESOURCES;
	}
}

/* rdma_cm connect, then the connection's local parts. A fallback reason, or -1 to go on. */
static int rsk_client_prepare_verbs(int fd, const struct sockaddr *dest, socklen_t len,
				    struct rsk_client_setup *u)
{
	struct sockaddr_storage src;
	struct rsk_ep *ep;
	int rc, why;

	if ((rc = rsk_verbs_probe()) < 0)
		return RDMASOCK_FB_NO_DEVICE;
	if (rsk_negcache_hit(dest, len))
		return RDMASOCK_FB_NEGATIVE_CACHE;
	rc = rsk_verbs_connect(dest, len, (int)rsk_config.connect_timeout_ms, &src,
			       rsk_verbs_bind_tcp, &fd, &ep);
	if (rc < 0) {
		why = rsk_verbs_reason(rc);
		if (why == RDMASOCK_FB_NO_ROUTE || why == RDMASOCK_FB_REFUSED ||
		    why == RDMASOCK_FB_TIMEOUT)
			rsk_negcache_add(dest, len);
		rsk_dbg("fd %d: no verbs connection: %s", fd, strerror(-rc));
		return why;
	}
	u->c = rsk_conn_alloc(ep->nbuf);
	if (u->c == NULL) {
		rsk_ep_destroy(ep);
		return RDMASOCK_FB_RESOURCES;
	}
	u->c->ep = ep;
	rc = rsk_conn_prepare(u->c, fd, &u->app, &u->ctl, &u->tcp);
	return rc < 0 ? RDMASOCK_FB_RESOURCES : -1;
}

/* The kernel connect of a verbs client, finished here (bounded) even on a non-blocking
 * socket: the server's hello must be seen before the application may use the QP. */
static int rsk_verbs_tcp_connect(int fd, const struct sockaddr *addr, socklen_t len,
				 int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	socklen_t elen = sizeof(int);
	int err = 0, left;

	if (RSK_REAL(connect)(fd, addr, len) == 0)
		return 0;
	if (errno != EINPROGRESS && errno != EINTR)
		return -errno;
	do {
		left = (int)(deadline - rsk_now_ms());
		if (left <= 0)
			return -ETIMEDOUT;
	} while (RSK_REAL(poll)(&p, 1, left) <= 0);
	if (RSK_REAL(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		return -errno;
	return -err;
}

/*
 * Least time a client waits for the server's hello: it is sent when the server application
 * accepts. If it does not come, the QP is destroyed and the connection stays TCP; a server
 * that claims it after all sees the disconnect and resets it (never a silent mismatch).
 */
#define RSK_HELLO_MIN_MS 5000

/*
 * Wait for the server's hello on the QP: it took the connection (0). A server process that
 * will not (it closed the socket unused, e.g. a fork-per-connection parent, or it forked
 * away) destroys the QP instead: the disconnect says so at once (-ECONNREFUSED).
 */
static int rsk_verbs_await_hello(struct rsk_conn *c, int64_t deadline)
{
	struct pollfd p[2] = {{.fd = rsk_verbs_cq_fd(c->ep), .events = POLLIN},
			      {.fd = rsk_verbs_cm_fd(c->ep), .events = POLLIN}};
	int left;

	for (;;) {
		(void)rsk_stream_progress(&c->st);
		if (c->st.msgs_rcvd > 0)
			return 0;
		if (c->st.err)
			return c->st.err;
		left = (int)(deadline - rsk_now_ms());
		if (left <= 0)
			return -ETIMEDOUT;
		if (RSK_REAL(poll)(p, p[1].fd >= 0 ? 2 : 1, left < 10 ? left : 10) <= 0)
			continue;
		if (p[0].revents)
			rsk_verbs_cq_event(c->ep);
		if (p[1].fd >= 0 && p[1].revents && rsk_verbs_cm_event(c->ep)) {
			(void)rsk_stream_progress(&c->st); /* a hello just before the disconnect */
			return c->st.msgs_rcvd > 0 ? 0 : -ECONNREFUSED;
		}
	}
}

/*
 * Verbs client after its QP is up: TCP connect, the server's hello, then the switch. If the
 * hello does not come (the process that accepted us does not own the rdma_cm listener, e.g.
 * a prefork child), the QP goes and the connection simply stays TCP: the application has not
 * sent a byte yet. Returns 1 with *rc as connect() must report, as rsk_sock_connect does.
 */
static int rsk_sock_connect_verbs(struct rsk_sock *s, int fd, const struct sockaddr *addr,
				  socklen_t len, struct rsk_client_setup *u, int *rc)
{
	int64_t deadline = rsk_now_ms() + (int64_t)rsk_config.connect_timeout_ms;
	int nonblock = (RSK_REAL(fcntl)(fd, F_GETFL) & O_NONBLOCK) != 0;
	int err = rsk_verbs_tcp_connect(fd, addr, len, deadline);

	if (err < 0) {
		*rc = err;
		rsk_client_undo(u);
		return 1;
	}
	/* The hello comes when the server application accepts, which may take longer than
	 * the rdma_cm setup: give it at least RSK_HELLO_MIN_MS. */
	if (deadline < rsk_now_ms() + RSK_HELLO_MIN_MS)
		deadline = rsk_now_ms() + RSK_HELLO_MIN_MS;
	err = rsk_verbs_await_hello(u->c, deadline);
	if (err < 0) {
		rsk_dbg("fd %d: no hello from the verbs server (%s): staying on TCP", fd,
			strerror(-err));
		rsk_client_undo(u);
		s->fb_reason = RDMASOCK_FB_HANDSHAKE;
		rsk_negcache_add(addr, len);
		rsk_sock_connect_done(fd, nonblock ? -EINPROGRESS : 0);
		*rc = nonblock ? -EINPROGRESS : 0;
		return 1;
	}
	*rc = rsk_sock_become(s, fd, u->c, u->app, u->ctl, u->tcp);
	/* A non-blocking connect reports EINPROGRESS as TCP does; the socket is writable and
	 * SO_ERROR 0 at once. */
	if (*rc == 0 && nonblock)
		*rc = -EINPROGRESS;
	return 1;
}

int rsk_sock_connect(int fd, const struct sockaddr *addr, socklen_t len, int *rc)
{
	struct rsk_client_setup u = {.rdv = -1, .memfd = -1, .app = -1, .ctl = -1, .tcp = -1};
	struct rsk_sock *s = rsk_sock_get(fd);
	int why, path, inprogress;

	if (s == NULL)
		return 0;
	why = path = rsk_connect_policy(s, addr, len);
	if (why == RSK_PATH_SHM)
		why = rsk_client_prepare(fd, addr, &u);
	else if (why == RSK_PATH_VERBS)
		why = rsk_client_prepare_verbs(fd, addr, len, &u);
	if (why >= 0) {
		s->fb_reason = (enum rdmasock_fallback)why;
		rsk_dbg("fd %d: connect stays on the kernel (%s)", fd, rsk_fallback_name(why));
		rsk_client_undo(&u);
		rsk_sock_put(s);
		return 0;
	}
	if (path == RSK_PATH_VERBS) {
		why = rsk_sock_connect_verbs(s, fd, addr, len, &u, rc);
		rsk_sock_put(s);
		return why;
	}
	/* The offer is queued before our SYN: whoever accepts this will find it. */
	inprogress = 0;
	if (RSK_REAL(connect)(fd, addr, len) < 0) {
		if (errno != EINPROGRESS) {
			*rc = -errno;
			rsk_client_undo(&u);
			rsk_sock_put(s);
			return 1;
		}
		inprogress = 1;
	}
	if (u.rdv >= 0) { /* shm: the server's answer comes through the rendezvous */
		u.c->answer_pending = 1;
		u.c->offer_fd = rsk_fd_hide(u.rdv);
		u.rdv = -1;
	}
	*rc = rsk_sock_become(s, fd, u.c, u.app, u.ctl, u.tcp);
	/* Non-blocking: EINPROGRESS, as the kernel said; the readiness socket is writable and
	 * SO_ERROR reads 0 at once (the shm path does not depend on the handshake). */
	if (*rc == 0 && inprogress)
		*rc = -EINPROGRESS;
	rsk_sock_put(s);
	return 1;
}

/* Replay epoll registrations made on the TCP socket onto the new file at the same number. */
static void rsk_become_replay_epoll(struct rsk_sock *s, int fd)
{
	struct epoll_event ev;
	int i;

	for (i = 0; i < s->nepregs; i++) {
		ev = s->epregs[i].ev;
		(void)RSK_REAL(epoll_ctl)(s->epregs[i].epfd, EPOLL_CTL_ADD, fd, &ev);
	}
	s->nepregs = 0;
}

/*
 * TCP_NODELAY and TCP_CORK as the application left them on the TCP socket (set before
 * connect, or inherited from the listener by an accepted socket, as Linux does).
 */
static void rsk_sock_tcp_opts(struct rsk_conn *c)
{
	socklen_t len = sizeof(int);
	int v = 0;

	if (RSK_REAL(getsockopt)(c->tcp_fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0)
		c->st.nodelay = v != 0;
	len = sizeof(int);
	v = 0;
	if (RSK_REAL(getsockopt)(c->tcp_fd, IPPROTO_TCP, TCP_CORK, &v, &len) == 0)
		c->st.cork = v != 0;
}

int rsk_sock_become(struct rsk_sock *s, int fd, struct rsk_conn *c, int app, int ctl, int tcp)
{
	int fdfl = RSK_REAL(fcntl)(fd, F_GETFD), fl = RSK_REAL(fcntl)(tcp, F_GETFL);

	int i;

	/* Registrations the application made on the TCP file would keep reporting it: take
	 * them off while the number still names it, and put them on the new file below. */
	for (i = 0; i < s->nepregs; i++)
		(void)RSK_REAL(epoll_ctl)(s->epregs[i].epfd, EPOLL_CTL_DEL, fd, NULL);
	/* From here the application's number names the readiness socket. */
	if (RSK_REAL(dup3)(app, fd, (fdfl > 0 && (fdfl & FD_CLOEXEC)) ? O_CLOEXEC : 0) < 0)
		return -errno;
	RSK_REAL(close)(app);
	if (fl >= 0 && (fl & O_NONBLOCK))
		(void)RSK_REAL(fcntl)(fd, F_SETFL, O_NONBLOCK);
	c->nonblock = fl >= 0 && (fl & O_NONBLOCK);
	c->ctl_fd = ctl;
	c->tcp_fd = tcp;
	rsk_sock_tcp_opts(c);
	c->transport = c->ep->ops->id;
	if (c->transport == RDMASOCK_TRANSPORT_SHM)
		rsk_shm_set_self_ctl(c->ep, ctl);
	else
		rsk_verbs_set_self_ctl(c->ep, ctl);
	rsk_conn_lock(c);
	rsk_conn_sync(c, fd);
	rsk_conn_unlock(c);
	s->conn = c;
	s->transport = c->transport;
	s->state = RSK_SOCK_CONNECTED;
	rsk_fdtab_store(fd, (uintptr_t)s); /* untagged: the data path is ours now */
	rsk_become_replay_epoll(s, fd);
	if (rsk_monitor_add(c) < 0)
		rsk_warn("fd %d: peer liveness not watched; a crashed peer shows only at close", fd);
	__atomic_store_n(&s->counted, 1, __ATOMIC_RELEASE);
	rsk_stats_conn(c->transport);
	__atomic_add_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	rsk_dbg("fd %d: connection on %s", fd, rsk_transport_name(c->transport));
	return 0;
}
