/*
 * Socket objects: the type-stable pool, fd-slot bookkeeping (track, dup, release), and the
 * accounting of kernel connections. Kernel sockets cost nothing on their data path: their
 * bytes are read from TCP_INFO once, when the last fd naming them closes (or at exit).
 */
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conn.h"
#include "log.h"
#include "monitor.h"
#include "real.h"
#include "sock.h"
#include "stats.h"
#include "relay.h"
#include "transport/verbs.h"

/* tcpi_state values (include/net/tcp_states.h); linux/tcp.h does not export them. */
#define RSK_TCP_SYN_SENT 2
#define RSK_TCP_CLOSE 7

static pthread_mutex_t rsk_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_sock *rsk_pool_free;

static struct rsk_sock *rsk_sock_alloc(void)
{
	struct rsk_sock *s;

	pthread_mutex_lock(&rsk_pool_lock);
	s = rsk_pool_free;
	if (s != NULL)
		rsk_pool_free = s->next_free;
	pthread_mutex_unlock(&rsk_pool_lock);
	if (s == NULL) {
		s = calloc(1, sizeof(*s));
		if (s == NULL)
			return NULL;
		pthread_mutex_init(&s->lock, NULL);
	}
	/* refs stays 0 until the object is fully initialised and published. */
	s->nfds = 0;
	s->state = RSK_SOCK_NEW;
	s->counted = 0;
	s->accounted = 0;
	s->transport = RDMASOCK_TRANSPORT_KERNEL;
	s->fb_reason = rsk_config.mode == RSK_MODE_KERNEL ? RDMASOCK_FB_POLICY : RDMASOCK_FB_NO_PEER;
	s->conn = NULL;
	s->lst = NULL;
	s->nepregs = 0;
	s->base_sent = s->base_rcvd = 0;
	return s;
}

static void rsk_sock_free(struct rsk_sock *s)
{
	pthread_mutex_lock(&rsk_pool_lock);
	s->next_free = rsk_pool_free;
	rsk_pool_free = s;
	pthread_mutex_unlock(&rsk_pool_lock);
}

int rsk_sock_wanted(int domain, int type)
{
	return (domain == AF_INET || domain == AF_INET6) &&
	       (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_STREAM;
}

static uintptr_t rsk_sock_slot(struct rsk_sock *s)
{
	return (uintptr_t)s | (s->transport == RDMASOCK_TRANSPORT_KERNEL ? RSK_FDTAB_TAG_KERNEL : 0);
}

int rsk_sock_track(int fd, int domain, int state)
{
	struct rsk_sock *s = rsk_sock_alloc();
	int rc;

	if (s == NULL)
		return -ENOMEM;
	s->domain = domain;
	s->state = state;
	s->nfds = 1;
	__atomic_store_n(&s->refs, 1, __ATOMIC_RELEASE);
	rc = rsk_fdtab_store(fd, rsk_sock_slot(s));
	if (rc < 0) {
		__atomic_store_n(&s->refs, 0, __ATOMIC_RELEASE);
		rsk_sock_free(s);
	}
	return rc;
}

static int rsk_ref_inc_not_zero(int *refs)
{
	int old = __atomic_load_n(refs, __ATOMIC_RELAXED);

	do {
		if (old == 0)
			return 0;
	} while (!__atomic_compare_exchange_n(refs, &old, old + 1, 1, __ATOMIC_ACQUIRE,
					      __ATOMIC_RELAXED));
	return 1;
}

struct rsk_sock *rsk_sock_get(int fd)
{
	uintptr_t v;
	struct rsk_sock *s;

	for (;;) {
		v = rsk_fdtab_load(fd);
		if (v == 0 || rsk_fd_is_internal(fd))
			return NULL;
		s = rsk_fdtab_ptr(v);
		if (!rsk_ref_inc_not_zero(&s->refs))
			continue; /* being freed; the slot must change soon */
		if (rsk_fdtab_load(fd) == v)
			return s;
		rsk_sock_put(s); /* recycled under us: look again */
	}
}

void rsk_sock_put(struct rsk_sock *s)
{
	if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
		rsk_sock_free(s);
}

int rsk_sock_dup(int oldfd, int newfd)
{
	struct rsk_sock *s = rsk_sock_get(oldfd);
	int rc;

	if (s == NULL)
		return 0;
	__atomic_add_fetch(&s->nfds, 1, __ATOMIC_ACQ_REL);
	rc = rsk_fdtab_store(newfd, rsk_sock_slot(s)); /* the reference we took is the slot's */
	if (rc < 0) {
		__atomic_sub_fetch(&s->nfds, 1, __ATOMIC_ACQ_REL);
		rsk_sock_put(s);
	}
	return rc;
}

/* Count a connection once; a kernel one with the reason it did not get a faster path. */
static void rsk_sock_count(struct rsk_sock *s, uint16_t port)
{
	if (__atomic_exchange_n(&s->counted, 1, __ATOMIC_ACQ_REL))
		return;
	rsk_stats_conn(s->transport);
	if (s->transport == RDMASOCK_TRANSPORT_KERNEL) {
		if (!rsk_config_port_allowed(&rsk_config, port))
			s->fb_reason = RDMASOCK_FB_POLICY;
		rsk_stats_fallback(s->fb_reason);
	}
}

static uint16_t rsk_sock_peer_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (RSK_REAL(getpeername)(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

static uint16_t rsk_sock_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (RSK_REAL(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

/* Bytes handed to TCP: bytes_sent (4.19+) counts data still unacknowledged at close too. */
static uint64_t rsk_tcp_sent(const struct tcp_info *ti, socklen_t len)
{
	if (len >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(ti->tcpi_bytes_sent))
		return ti->tcpi_bytes_sent;
	return ti->tcpi_bytes_acked;
}

/*
 * Take a kernel socket's byte counts from TCP_INFO. A non-blocking connect that nobody
 * confirmed through SO_ERROR is counted here if the kernel says it got past SYN_SENT.
 */
static void rsk_sock_account(struct rsk_sock *s, int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (s->transport != RDMASOCK_TRANSPORT_KERNEL ||
	    __atomic_exchange_n(&s->accounted, 1, __ATOMIC_ACQ_REL))
		return;
	memset(&ti, 0, sizeof(ti));
	if (RSK_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return;
	if (s->state == RSK_SOCK_CONNECTING &&
	    (ti.tcpi_bytes_received > 0 || ti.tcpi_bytes_acked > 1 ||
	     (ti.tcpi_state != RSK_TCP_SYN_SENT && ti.tcpi_state != RSK_TCP_CLOSE))) {
		s->state = RSK_SOCK_CONNECTED;
		rsk_sock_count(s, rsk_sock_peer_port(fd));
	}
	if (s->state != RSK_SOCK_CONNECTED)
		return;
	rsk_counter_add(&rsk_stats.bytes_sent[RDMASOCK_TRANSPORT_KERNEL],
			rsk_tcp_sent(&ti, len) - s->base_sent);
	rsk_counter_add(&rsk_stats.bytes_received[RDMASOCK_TRANSPORT_KERNEL],
			ti.tcpi_bytes_received - s->base_rcvd);
}

/*
 * A verbs connection accepted here, then a fork, then closed here without a byte moved: the
 * signature of a fork-per-connection server (accept, fork, the child serves, the parent
 * closes). Its child could not use the QP (it gets ENOTCONN), so the listener stops taking
 * rdma_cm requests: later clients go to TCP at once (reason refused). The first connection
 * of such a server is lost; see README.
 */
static void rsk_sock_fpc_check(struct rsk_sock *s)
{
	struct rsk_conn *c = s->conn;

	if (s->from_vl == NULL || c == NULL || c->transport != RDMASOCK_TRANSPORT_VERBS ||
	    __atomic_load_n(&rsk_sock_forks, __ATOMIC_RELAXED) == s->forks_at_accept)
		return;
	if (c->st.bytes_sent == 0 && c->st.bytes_rcvd == 0)
		rsk_monitor_listener_fpc(s->from_vl);
}

int rsk_sock_release_fd(int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);
	struct rsk_sock *s;

	if (v == 0 || rsk_fd_is_internal(fd) || !rsk_fdtab_replace(fd, v, 0))
		return 0;
	s = rsk_fdtab_ptr(v);
	if (__atomic_sub_fetch(&s->nfds, 1, __ATOMIC_ACQ_REL) == 0) {
		rsk_sock_fpc_check(s);
		rsk_sock_account(s, fd);
		if (s->conn != NULL)
			rsk_conn_release(s->conn);
		if (s->lst != NULL)
			rsk_listen_close(s->lst);
		s->conn = NULL;
		s->lst = NULL;
	}
	rsk_sock_put(s); /* the slot's reference */
	return 1;
}

void rsk_sock_connect_done(int fd, int rc)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	if (rc == 0 || rc == -EISCONN) {
		s->state = RSK_SOCK_CONNECTED;
		rsk_sock_count(s, rsk_sock_peer_port(fd));
	} else if (rc == -EINPROGRESS || rc == -EALREADY) {
		s->state = RSK_SOCK_CONNECTING;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

void rsk_sock_so_error_seen(int fd, int err)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	if (s->state == RSK_SOCK_CONNECTING && err == 0 && rsk_sock_peer_port(fd) != 0) {
		s->state = RSK_SOCK_CONNECTED;
		rsk_sock_count(s, rsk_sock_peer_port(fd));
	} else if (s->state == RSK_SOCK_CONNECTING && err != 0) {
		s->state = RSK_SOCK_NEW;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

void rsk_sock_listen_done(int fd, int backlog)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->state = RSK_SOCK_LISTENING;
	if (s->lst == NULL && rsk_config.mode != RSK_MODE_KERNEL)
		(void)rsk_listen_setup(s, fd, backlog);
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

int rsk_sock_accept_done(int lfd, int fd, int flags)
{
	struct rsk_sock *ls = rsk_sock_get(lfd);
	struct rsk_sock *s;
	int rc = fd;

	(void)flags;
	if (ls == NULL)
		return fd;
	if (rsk_sock_track(fd, ls->domain, RSK_SOCK_CONNECTED) == 0 &&
	    (s = rsk_sock_get(fd)) != NULL) {
		if (ls->lst != NULL)
			rc = rsk_listen_accept(ls, s, fd);
		else
			s->fb_reason = ls->fb_reason; /* why the listener has no rendezvous */
		if (rc >= 0)
			rsk_sock_count(s, rsk_sock_local_port(fd));
		rsk_sock_put(s);
	}
	rsk_sock_put(ls);
	return rc;
}

void rsk_sock_accept_begin(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listen_interest(s->lst);
	rsk_sock_put(s);
}

void rsk_sock_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int i;

	if (s == NULL)
		return;
	if (op != EPOLL_CTL_DEL && s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listen_interest(s->lst); /* an event loop that will accept here */
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->nepregs && s->epregs[i].epfd != epfd; i++)
		;
	if (op == EPOLL_CTL_DEL && i < s->nepregs)
		s->epregs[i] = s->epregs[--s->nepregs];
	else if (op != EPOLL_CTL_DEL && ev != NULL && i < RSK_SOCK_EPREGS) {
		s->epregs[i].epfd = epfd;
		s->epregs[i].ev = *ev;
		if (i == s->nepregs)
			s->nepregs++;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

static int rsk_sock_account_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	(void)arg;
	(void)v;
	if (s != NULL) {
		rsk_sock_account(s, fd);
		rsk_sock_put(s);
	}
	return 0;
}

void rsk_sock_account_open(void)
{
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_account_one, NULL);
}

/* Walk every accelerated socket once (dups share one object): @fn(s) for each. */
static unsigned int rsk_sock_gen;

struct rsk_sock_walk {
	unsigned int gen;
	void (*fn)(struct rsk_sock *s);
};

static int rsk_sock_walk_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock_walk *w = arg;
	struct rsk_sock *s;

	if (!rsk_fdtab_is_accel(v) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	if (s->fork_gen != w->gen && s->conn != NULL) {
		s->fork_gen = w->gen;
		w->fn(s);
	}
	rsk_sock_put(s);
	return 0;
}

static void rsk_sock_walk_accel(void (*fn)(struct rsk_sock *s))
{
	struct rsk_sock_walk w = {.gen = ++rsk_sock_gen, .fn = fn};

	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_walk_one, &w);
}

static void rsk_sock_hold_one(struct rsk_sock *s)
{
	if (s->transport == RDMASOCK_TRANSPORT_VERBS)
		return; /* stays the parent's alone (see rsk_sock_orphan_one) */
	rsk_conn_lock(s->conn);
	/* A child must be able to kick the server: learn its fd now if it has answered. */
	(void)rsk_conn_resolve(s->conn, 100);
	rsk_conn_hold(s->conn);
	rsk_conn_unlock(s->conn);
	rsk_dbg("connection %p held for a child", (void *)s->conn);
}

static void rsk_sock_unhold_one(struct rsk_sock *s)
{
	if (s->transport == RDMASOCK_TRANSPORT_VERBS)
		return;
	__atomic_sub_fetch(&s->conn->holders, 1, __ATOMIC_ACQ_REL);
}

static int rsk_sock_forked_listener(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s;

	(void)v;
	(void)arg;
	if ((s = rsk_sock_get(fd)) == NULL)
		return 0;
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listen_forked(s->lst);
	rsk_sock_put(s);
	return 0;
}

unsigned int rsk_sock_forks;

/* Make every fd naming @arg (a socket) a kernel-watched slot. */
static int rsk_sock_retag_one(int fd, uintptr_t v, void *arg)
{
	if (rsk_fdtab_is_accel(v) && rsk_fdtab_ptr(v) == arg)
		(void)rsk_fdtab_replace(fd, v, v | RSK_FDTAB_TAG_KERNEL);
	return 0;
}

/*
 * A verbs connection that has not moved a byte yet, at a fork: most likely a
 * fork-per-connection server handing it to its child. The child cannot use our QP, so the
 * connection is relayed from now on (relay.c): its app end carries the data itself, for the
 * child and for us alike, and our monitor thread moves it to and from the QP.
 */
static int rsk_sock_relay_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s;
	struct rsk_conn *c;

	(void)arg;
	if (!rsk_fdtab_is_accel(v) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	c = s->conn;
	if (c != NULL && c->transport == RDMASOCK_TRANSPORT_VERBS && !rsk_verbs_ep_foreign(c->ep) &&
	    c->st.bytes_sent == 0 && c->st.bytes_rcvd == 0 && rsk_relay_start(c, fd) == 0) {
		s->conn = NULL;
		rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_retag_one, s);
		if (rsk_monitor_relay(c) < 0)
			rsk_warn("fd %d: relay not watched; a forked child's connection stalls", fd);
	}
	rsk_sock_put(s);
	return 0;
}

void rsk_sock_fork_prepare(void)
{
	__atomic_add_fetch(&rsk_sock_forks, 1, __ATOMIC_RELAXED);
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_relay_one, NULL);
	rsk_sock_walk_accel(rsk_sock_hold_one);
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_forked_listener, NULL);
}

void rsk_sock_fork_parent_failed(void)
{
	rsk_sock_walk_accel(rsk_sock_unhold_one);
}

/* A child's account starts at fork: what its inherited kernel sockets carried so far is the
 * parent's to report. */
static int rsk_sock_baseline_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	(void)arg;
	if (rsk_fdtab_is_accel(v) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	memset(&ti, 0, sizeof(ti));
	if (s->state == RSK_SOCK_CONNECTED &&
	    RSK_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) {
		s->base_sent = rsk_tcp_sent(&ti, len);
		s->base_rcvd = ti.tcpi_bytes_received;
	}
	rsk_sock_put(s);
	return 0;
}

/*
 * A queue pair cannot be shared with a child: its resources belong to the parent's device
 * file, and the child's use (or destruction) would be the parent's. A child's inherited
 * verbs socket is therefore disconnected for the child alone: data calls fail with
 * ENOTCONN, close() and exit touch nothing, and the parent's connection goes on intact
 * (redis' BGSAVE child). Verbs listeners likewise stay with the process that listened.
 */
static int rsk_sock_orphan_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock *s;

	(void)arg;
	if ((s = rsk_sock_get(fd)) == NULL)
		return 0;
	if (rsk_fdtab_is_accel(v) && s->conn != NULL && s->transport == RDMASOCK_TRANSPORT_VERBS) {
		s->conn = NULL;
		__atomic_sub_fetch(&rsk_conn_live, 1, __ATOMIC_RELAXED);
	}
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listen_forget_verbs(s->lst);
	rsk_sock_put(s);
	return 0;
}

void rsk_sock_fork_child(void)
{
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_orphan_one, NULL);
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_baseline_one, NULL);
	rsk_monitor_atfork_child();
}

static void rsk_sock_exit_one(struct rsk_sock *s)
{
	struct rsk_conn *c = s->conn;

	s->conn = NULL;
	rsk_conn_release(c);
}

void rsk_sock_exit(void)
{
	rsk_sock_walk_accel(rsk_sock_exit_one);
}
