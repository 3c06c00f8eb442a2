/*
 * Socket objects: the type-stable pool, fd-slot bookkeeping (track, dup, release), the
 * switch of an fd onto an accelerated connection, and the accounting of kernel connections.
 * Kernel sockets cost nothing on their data path: their bytes are read from TCP_INFO once,
 * when the last fd naming them closes (or at exit).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/spares.h"
#include "base/stats.h"
#include "base/statseg.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "bearer.h"
#include "conn/conn.h"
#include "listener.h"
#include "sock.h"
#include "transport/registry.h"

static pthread_mutex_t rsk_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_sock *rsk_pool_free;

/*
 * The last few objects given back, taken and given by exchanging a slot's pointer: no lock
 * (a short connection took the pool's lock twice on each side, at track and at the last
 * close). A whole slot is exchanged, so no ABA; the locked list takes the overflow.
 */
#define RSK_SOCK_SPARES 8
static void *rsk_sock_spares[RSK_SOCK_SPARES];

static struct rsk_sock *rsk_sock_alloc(void)
{
	struct rsk_sock *s = rsk_spares_take(rsk_sock_spares, RSK_SOCK_SPARES);

	if (s == NULL) {
		pthread_mutex_lock(&rsk_pool_lock);
		s = rsk_pool_free;
		if (s != NULL)
			rsk_pool_free = s->next_free;
		pthread_mutex_unlock(&rsk_pool_lock);
	}
	if (s == NULL) {
		s = calloc(1, sizeof(*s));
		if (s == NULL)
			return NULL;
		pthread_mutex_init(&s->lock, NULL);
	}
	/* refs stays 0 until the object is fully initialised and published. */
	s->nfds = 0;
	s->long_refs = 0;
	s->release_late = s->late_fd = 0;
	s->late_next = s->late_prev = NULL;
	s->state = RSK_SOCK_NEW;
	s->counted = 0;
	s->accounted = 0;
	s->transport = RDMASOCK_TRANSPORT_KERNEL;
	s->fb_reason = rsk_config.mode == RSK_MODE_KERNEL ? RDMASOCK_FB_POLICY : RDMASOCK_FB_NO_PEER;
	s->conn = NULL;
	s->detached = 0;
	s->relayed = 0;
	s->from_lst = 0;
	s->accepted = 0;
	s->tcp_lent = 0;
	s->setup_held = 0;
	s->lst = NULL;
	s->face_fd = s->face_on = 0;
	s->bearer_fd = s->bearer_shut = s->bearer_unset = s->bearer_tcp_last = 0;
	s->app_bound = s->app_opts = s->opts_set = 0;
	s->newopts = NULL;
	s->face_nb = 0;
	s->nepregs = 0;
	s->base_sent = s->base_rcvd = 0;
	s->own_sent = s->own_rcvd = 0;
	s->own_exact = 0;
	s->port = 0;
	s->upg = NULL;
	s->upg_kcalls = 0;
	s->upg_bytes = s->data_calls = 0;
	s->aged_ms = 0;
	s->upg_fast = 0;
	s->upg_named = 0;
	s->held_fork = 0; /* (forks count from 1: never one of ours) */
	return s;
}

static void rsk_sock_free(struct rsk_sock *s)
{
	free(s->newopts);
	s->newopts = NULL;
	free(s->epregs_more);
	s->epregs_more = NULL;
	s->epregs_more_cap = 0;
	if ((s = rsk_spares_give(rsk_sock_spares, RSK_SOCK_SPARES, s)) == NULL)
		return;
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
	if (s->transport != RDMASOCK_TRANSPORT_KERNEL && !s->relayed)
		return (uintptr_t)s;
	return (uintptr_t)s | RSK_FDTAB_TAG_KERNEL | (s->upg != NULL ? RSK_FDTAB_TAG_DIVERT : 0);
}

void rsk_sock_divert(struct rsk_sock *s, int fd, int on)
{
	uintptr_t v = rsk_fdtab_load(fd);

	if (rsk_fdtab_ptr(v) != s || rsk_fdtab_is_accel(v))
		return;
	(void)rsk_fdtab_replace(fd, v, on ? v | RSK_FDTAB_TAG_DIVERT : v & ~RSK_FDTAB_TAG_DIVERT);
}

static void (*rsk_sock_close_hook)(struct rsk_sock *s, int fd);

void rsk_sock_set_close_hook(void (*fn)(struct rsk_sock *s, int fd))
{
	rsk_sock_close_hook = fn;
}

/* Track @fd in @state; made by socket() with @type, or (-1) flags not known. */
static int rsk_sock_track_as(int fd, int domain, int state, int type)
{
	struct rsk_sock *s = rsk_sock_alloc();
	int rc;

	(void)rsk_statseg_start(); /* live stats (rdmasock stat): from the first tracked socket */
	if (s == NULL)
		return -ENOMEM;
	s->domain = domain;
	s->state = state;
	s->nfds = 1;
	/* A socket socket() just made has the kernel's defaults; any other (accepted, adopted)
	 * is told or stays unknown. */
	rsk_sock_opts_set(s, state == RSK_SOCK_NEW ? RSK_SOCK_OPT_KNOWN : 0);
	s->known_fl = type < 0 ? -1 : O_RDWR | ((type & SOCK_NONBLOCK) ? O_NONBLOCK : 0);
	s->known_fdfl = type < 0 ? -1 : (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	__atomic_store_n(&s->refs, 1, __ATOMIC_RELEASE);
	rc = rsk_fdtab_store(fd, rsk_sock_slot(s));
	if (rc < 0) {
		__atomic_store_n(&s->refs, 0, __ATOMIC_RELEASE);
		rsk_sock_free(s);
	}
	return rc;
}

int rsk_sock_track(int fd, int domain, int state)
{
	return rsk_sock_track_as(fd, domain, state, -1);
}

int rsk_sock_track_made(int fd, int domain, int type)
{
	return rsk_sock_track_as(fd, domain, RSK_SOCK_NEW, type);
}

/* Is what @s learnt from the application's calls (options, flags) still all there is? Not
 * after a fork, nor in the child: the process it shares the socket with calls unseen.
 * (The stamp is rsk_sock_opts_set's, made at track with the flags too.) */
static int rsk_sock_learnt_here(const struct rsk_sock *s)
{
	return s->tcpopt_pid == rsk_proc_pid() && s->tcpopt_forks == rsk_proc_forks();
}

int rsk_sock_getfl(struct rsk_sock *s, int fd, int cmd)
{
	int v = __atomic_load_n(cmd == F_GETFL ? &s->known_fl : &s->known_fdfl, __ATOMIC_ACQUIRE);

	if (v < 0 || !rsk_sock_learnt_here(s))
		return rsk_sys_fcntl(fd, cmd, 0);
	return v;
}

void rsk_sock_fl_seen(int fd, int cmd, unsigned long arg)
{
	/* F_SETFL's flags that a socket keeps (it sets them all; the access mode and creation
	 * flags in @arg are ignored). Only O_NONBLOCK is followed: another makes them unknown. */
	const unsigned long settable = O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME | O_NONBLOCK;
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	if (cmd == F_SETFL && !(arg & settable & ~(unsigned long)O_NONBLOCK))
		__atomic_store_n(&s->known_fl, O_RDWR | (int)(arg & O_NONBLOCK), __ATOMIC_RELEASE);
	else if (cmd == F_SETFD) { /* (not after a dup: each number has its own) */
		if (__atomic_load_n(&s->known_fdfl, __ATOMIC_ACQUIRE) >= 0)
			__atomic_store_n(&s->known_fdfl, (int)(arg & FD_CLOEXEC), __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(&s->known_fl, -1, __ATOMIC_RELEASE);
		__atomic_store_n(&s->known_fdfl, -1, __ATOMIC_RELEASE);
	}
	rsk_sock_put(s);
}

void rsk_sock_opts_set(struct rsk_sock *s, int bits)
{
	s->tcpopt_pid = rsk_proc_pid();
	s->tcpopt_forks = rsk_proc_forks();
	__atomic_store_n(&s->tcpopt, bits, __ATOMIC_RELEASE);
}

void rsk_sock_opt_seen(int fd, int name, int on)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int bit = name == TCP_NODELAY ? RSK_SOCK_OPT_NODELAY : RSK_SOCK_OPT_CORK, o;

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	o = __atomic_load_n(&s->tcpopt, __ATOMIC_ACQUIRE);
	/* A listener's queued connections took the old value already: unknown from now on. */
	if (s->state == RSK_SOCK_LISTENING)
		o = 0;
	else
		o = on ? (o | bit) : (o & ~bit);
	__atomic_store_n(&s->tcpopt, o, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

/* Keep option @level/@name of new socket @s for a bearer: 0, or -1 when it cannot. */
static int rsk_sock_newopt_keep(struct rsk_sock *s, int level, int name, const void *val,
				socklen_t len)
{
	struct rsk_sock_newopts *all;
	struct rsk_sock_newopt *o;
	int i;

	if (!rsk_bearer_carries(level, name) || val == NULL || len > sizeof(o->val))
		return -1;
	if (s->newopts == NULL) { /* (stored atomically: rsk_sock_newopts_take looks unlocked) */
		if ((all = calloc(1, sizeof(*all))) == NULL)
			return -1;
		__atomic_store_n(&s->newopts, all, __ATOMIC_RELEASE);
	}
	for (i = 0; i < s->newopts->n; i++) /* (set again: the last value counts) */
		if (s->newopts->o[i].level == level && s->newopts->o[i].name == name)
			break;
	if (i == RSK_SOCK_NEWOPTS)
		return -1;
	o = &s->newopts->o[i];
	o->level = level;
	o->name = name;
	o->len = len;
	memcpy(o->val, val, len);
	if (i == s->newopts->n)
		s->newopts->n++;
	return 0;
}

struct rsk_sock_newopts *rsk_sock_newopts_take(struct rsk_sock *s)
{
	struct rsk_sock_newopts *o;

	if (__atomic_load_n(&s->newopts, __ATOMIC_RELAXED) == NULL)
		return NULL; /* (most sockets: no lock) */
	pthread_mutex_lock(&s->lock);
	o = s->newopts;
	s->newopts = NULL;
	pthread_mutex_unlock(&s->lock);
	return o;
}

void rsk_sock_opt_new(int fd, int level, int name, const void *val, socklen_t len)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	/* (connected or listening: nothing to keep, and no lock on a server's per-connection
	 * setsockopt calls) */
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != RSK_SOCK_NEW) {
		rsk_sock_put(s);
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (s->state == RSK_SOCK_NEW && !__atomic_load_n(&s->app_opts, __ATOMIC_RELAXED) &&
	    rsk_sock_newopt_keep(s, level, name, val, len) < 0)
		__atomic_store_n(&s->app_opts, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

void rsk_sock_opt_carried(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int st;

	if (s == NULL)
		return;
	st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	if ((st == RSK_SOCK_NEW || st == RSK_SOCK_LISTENING) &&
	    !__atomic_load_n(&s->opts_set, __ATOMIC_RELAXED))
		__atomic_store_n(&s->opts_set, 1, __ATOMIC_RELEASE);
	rsk_sock_put(s);
}

void rsk_sock_bind_seen(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	__atomic_store_n(&s->app_bound, 1, __ATOMIC_RELEASE);
	rsk_sock_put(s);
}

int rsk_sock_tcp_opts(const struct rsk_sock *s)
{
	int o = __atomic_load_n(&s->tcpopt, __ATOMIC_ACQUIRE);

	if (!(o & RSK_SOCK_OPT_KNOWN) || !rsk_sock_learnt_here(s))
		return 0;
	return o;
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
		if (v == 0 || rsk_fd_slot_internal(v))
			return NULL;
		s = rsk_fdtab_ptr(v);
		if (!rsk_ref_inc_not_zero(&s->refs))
			continue; /* being freed; the slot must change soon */
		if (rsk_fdtab_load(fd) == v)
			return s;
		rsk_sock_put(s); /* recycled under us: look again */
	}
}

/* ---- a close under a call in progress (release_late) ---- */

/* The sockets whose release waits for a call: the exit ends them too (rsk_sock_walk_late). */
static pthread_mutex_t rsk_late_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_sock *rsk_late_head;

static void rsk_late_unlink(struct rsk_sock *s)
{
	if (s->late_prev != NULL)
		s->late_prev->late_next = s->late_next;
	else
		rsk_late_head = s->late_next;
	if (s->late_next != NULL)
		s->late_next->late_prev = s->late_prev;
	s->late_next = s->late_prev = NULL;
}

/* @s's waiting release taken, by exactly one of the callers that ask (rsk_late_lock held). */
static int rsk_late_take(struct rsk_sock *s)
{
	if (!__atomic_load_n(&s->release_late, __ATOMIC_RELAXED))
		return 0;
	__atomic_store_n(&s->release_late, 0, __ATOMIC_RELAXED);
	rsk_late_unlink(s);
	return 1;
}

/* The last call in progress on closed @s is over: its connection goes as the close's would
 * have, then the dup its calls used. */
static void rsk_late_end(struct rsk_sock *s)
{
	struct rsk_conn *c;
	int mine, late;

	pthread_mutex_lock(&rsk_late_lock);
	mine = rsk_late_take(s);
	pthread_mutex_unlock(&rsk_late_lock);
	if (!mine)
		return;
	c = s->conn;
	late = __atomic_load_n(&s->late_fd, __ATOMIC_ACQUIRE);
	__atomic_store_n(&s->conn, NULL, __ATOMIC_RELEASE);
	rsk_conn_release(c);
	__atomic_store_n(&s->late_fd, 0, __ATOMIC_RELEASE);
	rsk_fd_unhide_close(late - 1);
}

/*
 * Calls in progress on @s, whose last fd slot its closer has taken from the table (no new
 * call finds it): references beyond the slot's that no mirror keeps. Sequentially
 * consistent with rsk_sock_put's, so that either the closer sees a call's reference gone or
 * that call sees the release waiting for it.
 */
static int rsk_sock_busy(struct rsk_sock *s)
{
	return __atomic_load_n(&s->refs, __ATOMIC_SEQ_CST) -
		       __atomic_load_n(&s->long_refs, __ATOMIC_SEQ_CST) >
	       1;
}

/*
 * The last close of @s, at @fd (still open), with calls in progress on its connection: as the
 * kernel's socket outlives a close while a call holds its file, the release waits for them.
 * They go on with a hidden dup of the app end, made under the connection's lock: a call that
 * read no dup under it named @fd while it was still the app end. 1 when the release waits, 0
 * when it is due now (no call in progress, a move under way, or no fd for the dup).
 */
static int rsk_late_begin(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;
	int late;

	if (c == NULL || s->upg != NULL || !rsk_sock_busy(s))
		return 0;
	rsk_conn_lock(c);
	late = rsk_fd_hide_dup(fd);
	if (late >= 0)
		__atomic_store_n(&s->late_fd, late + 1, __ATOMIC_RELEASE);
	rsk_conn_unlock(c);
	if (late < 0)
		return 0;
	pthread_mutex_lock(&rsk_late_lock);
	s->late_prev = NULL;
	s->late_next = rsk_late_head;
	if (rsk_late_head != NULL)
		rsk_late_head->late_prev = s;
	rsk_late_head = s;
	__atomic_store_n(&s->release_late, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&rsk_late_lock);
	return 1; /* (the closer's own slot reference may be the last: rsk_sock_put sees it) */
}

/* (out of line: every data call ends in rsk_sock_put, which stays a few instructions) */
static __attribute__((noinline, cold)) void rsk_sock_put_late(struct rsk_sock *s, int left)
{
	if (left == __atomic_load_n(&s->long_refs, __ATOMIC_SEQ_CST))
		rsk_late_end(s);
	if (left == 0)
		rsk_sock_free(s);
}

void rsk_sock_put(struct rsk_sock *s)
{
	int left = __atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);

	if (rsk_unlikely(__atomic_load_n(&s->release_late, __ATOMIC_SEQ_CST)))
		rsk_sock_put_late(s, left);
	else if (left == 0)
		rsk_sock_free(s);
}

int rsk_sock_keep(struct rsk_sock *s)
{
	__atomic_add_fetch(&s->long_refs, 1, __ATOMIC_SEQ_CST);
	/* Closed already: its close may have counted this reference a call's, and a call's
	 * reference can turn into a kept one only while a close would still count it so. */
	if (__atomic_load_n(&s->nfds, __ATOMIC_SEQ_CST) > 0)
		return 1;
	__atomic_sub_fetch(&s->long_refs, 1, __ATOMIC_SEQ_CST);
	return 0;
}

void rsk_sock_put_kept(struct rsk_sock *s)
{
	__atomic_sub_fetch(&s->long_refs, 1, __ATOMIC_SEQ_CST);
	rsk_sock_put(s);
}

void rsk_sock_walk_late(void (*fn)(struct rsk_sock *s, int fd))
{
	struct rsk_sock *s;

	for (;;) {
		pthread_mutex_lock(&rsk_late_lock);
		/* (one whose last reference is on its way out is its putter's to end) */
		for (s = rsk_late_head; s != NULL && !rsk_ref_inc_not_zero(&s->refs);)
			s = s->late_next;
		if (s != NULL)
			(void)rsk_late_take(s);
		pthread_mutex_unlock(&rsk_late_lock);
		if (s == NULL)
			return;
		fn(s, -1);
		rsk_sock_put(s);
	}
}

void rsk_sock_late_forget(void)
{
	struct rsk_sock *s;
	struct rsk_conn *c;

	/* (a thread of the parent's may have held the lock at the fork) */
	pthread_mutex_init(&rsk_late_lock, NULL);
	while ((s = rsk_late_head) != NULL) {
		(void)rsk_late_take(s);
		rsk_fd_unhide_close(s->late_fd - 1);
		s->late_fd = 0;
		c = s->conn;
		s->conn = NULL;
		/* Our copies of its fds and memory, no shared state: the parent's connection goes
		 * on intact. (One that cannot follow a fork left our records already.) */
		if (rsk_transport_cm(c->ep)->fork_share)
			rsk_conn_forget(c);
	}
}

int rsk_sock_dup(int oldfd, int newfd)
{
	struct rsk_sock *s = rsk_sock_get(oldfd);
	int rc;

	if (s == NULL)
		return 0;
	__atomic_add_fetch(&s->nfds, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&s->own_exact, 0, __ATOMIC_RELAXED); /* its calls may pass us by */
	/* (the new number has close-on-exec of its own) */
	__atomic_store_n(&s->known_fl, -1, __ATOMIC_RELEASE);
	__atomic_store_n(&s->known_fdfl, -1, __ATOMIC_RELEASE);
	rc = rsk_fdtab_store(newfd, rsk_sock_slot(s)); /* the reference we took is the slot's */
	if (rc < 0) {
		__atomic_sub_fetch(&s->nfds, 1, __ATOMIC_ACQ_REL);
		rsk_sock_put(s);
	}
	return rc;
}

/* Count a connection once; a kernel one with the reason it did not get a faster path. */
void rsk_sock_count(struct rsk_sock *s, uint16_t port)
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

/* Bytes handed to TCP: bytes_sent (4.19+) counts data still unacknowledged at close too,
 * but also every retransmission (bytes_retrans, added with it): a loopback receiver that
 * falls behind under load made the stats count 5% more than the application wrote. */
static uint64_t rsk_tcp_sent(const struct tcp_info *ti, socklen_t len)
{
	if (len >= offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(ti->tcpi_bytes_retrans))
		return ti->tcpi_bytes_sent - ti->tcpi_bytes_retrans;
	return ti->tcpi_bytes_acked;
}

int rsk_sock_kernel_bytes(const struct rsk_sock *s, int fd, uint64_t *sent, uint64_t *rcvd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int rc;

	memset(&ti, 0, sizeof(ti));
	if ((rc = rsk_sys_getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len)) < 0)
		return rc;
	*sent = rsk_tcp_sent(&ti, len) - s->base_sent;
	*rcvd = ti.tcpi_bytes_received - s->base_rcvd;
	return 0;
}

/* The counts of a socket whose every byte we saw ourselves: no TCP_INFO (one system call
 * less at every close of a TCP-first connection). 0 when the kernel must be asked. */
static int rsk_sock_account_own(struct rsk_sock *s)
{
	if (!__atomic_load_n(&s->own_exact, __ATOMIC_RELAXED) || s->state != RSK_SOCK_CONNECTED)
		return 0;
	rsk_counter_add(&rsk_stats.bytes_sent[RDMASOCK_TRANSPORT_KERNEL],
			__atomic_load_n(&s->own_sent, __ATOMIC_RELAXED));
	rsk_counter_add(&rsk_stats.bytes_received[RDMASOCK_TRANSPORT_KERNEL],
			__atomic_load_n(&s->own_rcvd, __ATOMIC_RELAXED));
	return 1;
}

/*
 * Take a kernel socket's byte counts (our own, or TCP_INFO's). A non-blocking connect that
 * nobody confirmed through SO_ERROR is counted here if the kernel says it got past SYN_SENT.
 */
static void rsk_sock_account(struct rsk_sock *s, int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (s->transport != RDMASOCK_TRANSPORT_KERNEL ||
	    __atomic_exchange_n(&s->accounted, 1, __ATOMIC_ACQ_REL) || rsk_sock_account_own(s))
		return;
	memset(&ti, 0, sizeof(ti));
	if (rsk_sys_getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return;
	if (s->state == RSK_SOCK_CONNECTING &&
	    (ti.tcpi_bytes_received > 0 || ti.tcpi_bytes_acked > 1 ||
	     (ti.tcpi_state != RSK_TCPS_SYN_SENT && ti.tcpi_state != RSK_TCPS_CLOSE))) {
		__atomic_store_n(&s->state, RSK_SOCK_CONNECTED, __ATOMIC_RELEASE);
		rsk_sock_count(s, s->port);
	}
	if (s->state != RSK_SOCK_CONNECTED)
		return;
	rsk_counter_add(&rsk_stats.bytes_sent[RDMASOCK_TRANSPORT_KERNEL],
			rsk_tcp_sent(&ti, len) - s->base_sent);
	rsk_counter_add(&rsk_stats.bytes_received[RDMASOCK_TRANSPORT_KERNEL],
			ti.tcpi_bytes_received - s->base_rcvd);
}

/*
 * A connection accepted here whose endpoint cannot follow a fork (verbs), then a fork, then
 * closed here without a byte moved: the signature of a fork-per-connection server (accept,
 * fork, the child serves, the parent closes) whose child could not be relayed. The listener
 * then stops taking that transport's requests: later clients go to TCP at once.
 */
static void rsk_sock_fpc_check(struct rsk_sock *s)
{
	struct rsk_conn *c = s->conn;
	const struct rsk_cm_ops *cm;

	if (s->from_lst == 0 || c == NULL || rsk_proc_forks() == s->forks_at_accept)
		return;
	cm = rsk_transport_cm(c->ep);
	if (!cm->fork_share && c->st.bytes_sent == 0 && c->st.bytes_rcvd == 0)
		rsk_listener_note_id(s->from_lst, cm, RSK_LISTEN_REFUSE);
}

static void rsk_sock_face_gone(struct rsk_sock *s)
{
	int h = s->face_fd - 1;

	__atomic_store_n(&s->face_on, 0, __ATOMIC_RELEASE);
	s->face_fd = 0;
	rsk_fd_unhide_close(h);
}

int rsk_sock_release_fd(int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);
	struct rsk_sock *s;

	if (v == 0 || rsk_fd_slot_internal(v) || !rsk_fdtab_replace(fd, v, 0))
		return 0;
	s = rsk_fdtab_ptr(v);
	if (__atomic_sub_fetch(&s->nfds, 1, __ATOMIC_SEQ_CST) == 0) { /* (rsk_sock_keep) */
		if (rsk_sock_close_hook != NULL)
			rsk_sock_close_hook(s, fd);
		rsk_sock_fpc_check(s);
		rsk_sock_account(s, fd);
		if (s->conn != NULL && !rsk_late_begin(s, fd)) {
			rsk_conn_release(s->conn);
			s->conn = NULL;
		}
		if (s->lst != NULL)
			rsk_listener_close(s->lst);
		if (s->face_fd != 0) /* a listener's face (face.c): its TCP listener goes too */
			rsk_sock_face_gone(s);
		rsk_bearer_close(s); /* and its bearer rendezvous (bearer.c) */
		s->lst = NULL;
	}
	rsk_sock_put(s); /* the slot's reference */
	return 1;
}

void rsk_sock_account_tcp(struct rsk_sock *s, int fd)
{
	rsk_sock_account(s, fd);
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

/* Walks over the fd table. Accelerated sockets are visited once (dups share one object):
 * the generation marks the ones seen. */
static unsigned int rsk_sock_gen;

struct rsk_sock_walker {
	unsigned int gen;
	void (*accel)(struct rsk_sock *s, int fd);
	void (*any)(struct rsk_sock *s, int fd, uintptr_t v);
};

static int rsk_sock_walk_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock_walker *w = arg;
	struct rsk_sock *s;

	if ((w->accel != NULL && !rsk_fdtab_is_accel(v)) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	if (w->any != NULL)
		w->any(s, fd, v);
	else if (s->walk_gen != w->gen && s->conn != NULL) {
		s->walk_gen = w->gen;
		w->accel(s, fd);
	}
	rsk_sock_put(s);
	return 0;
}

void rsk_sock_walk_accel(void (*fn)(struct rsk_sock *s, int fd))
{
	struct rsk_sock_walker w = {.gen = ++rsk_sock_gen, .accel = fn};

	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_walk_one, &w);
}

void rsk_sock_walk(void (*fn)(struct rsk_sock *s, int fd, uintptr_t v))
{
	struct rsk_sock_walker w = {.any = fn};

	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_walk_one, &w);
}

/* (no reference taken: a count moved in a vfork child would be its parent's; a listener
 * closed by another thread during the exec is the application's race, as with the kernel) */
struct rsk_sock_exec_walk {
	int (*handed)(int fd, int cloexec, void *arg);
	void *arg;
};

static int rsk_sock_leak_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_sock_exec_walk *w = arg;
	struct rsk_sock *s;
	int fdfl;

	s = rsk_sock_kernel_of(v);
	if (s == NULL || !rsk_sock_listens(s))
		return 0;
	fdfl = rsk_sys_fcntl(fd, F_GETFD, 0);
	if (fdfl >= 0 && w->handed(fd, (fdfl & FD_CLOEXEC) != 0, w->arg))
		rsk_listener_note(s->lst, RSK_LISTEN_LEAKED);
	return 0;
}

void rsk_sock_exec_listeners(int (*handed)(int fd, int cloexec, void *arg), void *arg)
{
	struct rsk_sock_exec_walk w = {.handed = handed, .arg = arg};

	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_leak_one, &w);
}

/* Make every fd naming @arg (a socket) a kernel-watched slot. */
static int rsk_sock_retag_one(int fd, uintptr_t v, void *arg)
{
	if (rsk_fdtab_is_accel(v) && rsk_fdtab_ptr(v) == arg)
		(void)rsk_fdtab_replace(fd, v, v | RSK_FDTAB_TAG_KERNEL);
	return 0;
}

void rsk_sock_retag_kernel(struct rsk_sock *s)
{
	s->conn = NULL;
	s->relayed = 1; /* a dup made from now on is a kernel-watched slot too */
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_retag_one, s);
}

/* A relay's pipe end (struct rsk_swap) goes behind every fd naming the socket, whose slot
 * becomes kernel-watched. */
struct rsk_swap {
	struct rsk_sock *s;
	int file, done, err;
};

static int rsk_sock_swap_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_swap *w = arg;
	int fdfl, rc;

	if (!rsk_fdtab_is_accel(v) || rsk_fdtab_ptr(v) != w->s)
		return 0;
	fdfl = rsk_sys_fcntl(fd, F_GETFD, 0);
	rc = rsk_sys_dup3(w->file, fd, (fdfl > 0 && (fdfl & FD_CLOEXEC)) ? O_CLOEXEC : 0);
	if (rc < 0)
		w->err = rc; /* it keeps naming the old file (the number went away meanwhile) */
	else
		w->done++;
	(void)rsk_fdtab_replace(fd, v, v | RSK_FDTAB_TAG_KERNEL);
	return 0;
}

int rsk_sock_swap_file(struct rsk_sock *s, int file)
{
	struct rsk_swap w = {.s = s, .file = file};

	s->conn = NULL;
	s->relayed = 1;
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sock_swap_one, &w);
	return w.done > 0 ? w.done : w.err;
}

void rsk_sock_detach(struct rsk_sock *s)
{
	s->conn = NULL;
	s->detached = 1;
}

void rsk_sock_baseline(struct rsk_sock *s, int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	s->own_sent = s->own_rcvd = 0; /* a fresh account: what the parent moved is its own */
	memset(&ti, 0, sizeof(ti));
	if (s->state == RSK_SOCK_CONNECTED &&
	    rsk_sys_getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) {
		s->base_sent = rsk_tcp_sent(&ti, len);
		s->base_rcvd = ti.tcpi_bytes_received;
	}
}

static unsigned int rsk_sock_nbecome;

unsigned int rsk_sock_becomes(void)
{
	return __atomic_load_n(&rsk_sock_nbecome, __ATOMIC_ACQUIRE);
}

void rsk_sock_count_become(void)
{
	__atomic_add_fetch(&rsk_sock_nbecome, 1, __ATOMIC_RELEASE);
}

/* Room for registration number @i: 0, or -ENOMEM. s->lock held. */
static int rsk_sock_epreg_room(struct rsk_sock *s, int i)
{
	struct rsk_epreg *more;
	int cap;

	if (i < RSK_SOCK_EPREGS + s->epregs_more_cap)
		return 0;
	cap = s->epregs_more_cap > 0 ? 2 * s->epregs_more_cap : RSK_SOCK_EPREGS;
	more = realloc(s->epregs_more, (size_t)cap * sizeof(*more));
	if (more == NULL)
		return -ENOMEM;
	s->epregs_more = more;
	s->epregs_more_cap = cap;
	return 0;
}

void rsk_sock_epreg(struct rsk_sock *s, int epfd, int op, const struct epoll_event *ev)
{
	struct rsk_epreg *e;
	int i;

	for (i = 0; i < s->nepregs && rsk_sock_epreg_at(s, i)->epfd != epfd; i++)
		;
	/* (nepregs stored atomically: a DEL looks at it without the lock, rsk_life_epoll_note) */
	if (op == EPOLL_CTL_DEL && i < s->nepregs) {
		*rsk_sock_epreg_at(s, i) = *rsk_sock_epreg_at(s, s->nepregs - 1);
		__atomic_store_n(&s->nepregs, s->nepregs - 1, __ATOMIC_RELAXED);
	} else if (op != EPOLL_CTL_DEL && ev != NULL) {
		if (rsk_sock_epreg_room(s, i) < 0) {
			/* (the one registration that then does not follow a move) */
			rsk_warn("epoll set %d: registration not noted (out of memory)", epfd);
			return;
		}
		e = rsk_sock_epreg_at(s, i);
		e->epfd = epfd;
		e->ev = *ev;
		if (i == s->nepregs) {
			e->direct = 0;
			__atomic_store_n(&s->nepregs, i + 1, __ATOMIC_RELAXED);
		}
	}
}

void rsk_sock_epreg_replay(struct rsk_sock *s, int fd)
{
	struct epoll_event ev;
	int i, n = __atomic_load_n(&s->nepregs, __ATOMIC_RELAXED);

	for (i = 0; i < n; i++) {
		ev = rsk_sock_epreg_at(s, i)->ev;
		(void)rsk_sys_epoll_ctl(rsk_sock_epreg_at(s, i)->epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

int rsk_sock_become(struct rsk_sock *s, int fd, struct rsk_conn *c, int app, int ctl, int tcp,
		    const struct sockaddr *dest)
{
	/* (flags the caller knew are not asked again: rsk_conn_know) */
	int fdfl = c->app_fdfl >= 0 ? c->app_fdfl : rsk_sys_fcntl(fd, F_GETFD, 0);
	int fl = c->app_fl >= 0 ? c->app_fl : rsk_sys_fcntl(fd, F_GETFL, 0), i, rc;

	if (ctl >= 0 && (ctl = rsk_fd_hide(ctl)) < 0)
		return ctl;
	rsk_conn_take_tcp(c, fd, dest);
	/* Registrations the application made on the TCP file would keep reporting it: take
	 * them off while the number still names it, and put them on the new file below. */
	for (i = 0; i < s->nepregs; i++)
		(void)rsk_sys_epoll_ctl(rsk_sock_epreg_at(s, i)->epfd, EPOLL_CTL_DEL, fd, NULL);
	/* From here the application's number names the readiness socket (and the TCP file
	 * goes, unless the transport keeps a placeholder). */
	rc = rsk_sys_dup3(app, fd, (fdfl > 0 && (fdfl & FD_CLOEXEC)) ? O_CLOEXEC : 0);
	if (rc < 0) {
		if (ctl >= 0)
			rsk_fd_unhide_close(ctl);
		return rc;
	}
	(void)rsk_sys_close(app);
	if (fl >= 0 && (fl & O_NONBLOCK) && !c->pair_nonblock)
		(void)rsk_sys_fcntl(fd, F_SETFL, O_NONBLOCK);
	if (rsk_conn_attach(c, fd, ctl, tcp, fl >= 0 && (fl & O_NONBLOCK)) < 0)
		rsk_warn("fd %d: peer liveness not watched; a crashed peer shows only at close", fd);
	s->conn = c;
	s->transport = c->transport;
	__atomic_store_n(&s->state, RSK_SOCK_CONNECTED, __ATOMIC_RELEASE);
	rsk_fdtab_store(fd, (uintptr_t)s); /* untagged: the data path is ours now */
	/* Registered while it was TCP: an epoll set holds it that no mirror knows as a
	 * connection, and would take a lazy app end's stale token for data (calls/pollfast.c) */
	if (s->nepregs > 0)
		__atomic_store_n(&c->lazy_poll, -1, __ATOMIC_RELAXED);
	rsk_sock_epreg_replay(s, fd); /* onto the new file; they are its own from now on */
	__atomic_store_n(&s->nepregs, 0, __ATOMIC_RELAXED);
	rsk_sock_count_become();
	__atomic_store_n(&s->counted, 1, __ATOMIC_RELEASE);
	rsk_stats_conn(c->transport);
	rsk_dbg("fd %d: connection on %s", fd, rsk_transport_name(c->transport));
	return 0;
}
