/*
 * TCP first (see upgrade.h): the per-socket state of a kernel connection that may move onto a
 * transport, the process's map from client addresses to its upgradable server sockets (for
 * the offers listeners announce), and the move itself on both sides.
 *
 * Why byte-exact: every byte the application sent before its side moved went into TCP and
 * comes before that side's FIN; every later byte goes into the stream. A reader takes TCP up
 * to the peer's FIN, then the stream. Both sides move at a call of their own (never from
 * another thread behind the application's back), and only a socket that one fd in one
 * process names, so nothing else can be using the TCP side in the middle. One exception: a
 * client that forked while its offer was out has committed already (the server may be
 * moving), so the processes holding it follow together, as they share a TCP socket
 * (rsk_upg_follow).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/fdtab.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/proc.h"
#include "base/spares.h"
#include "base/stats.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "conn/conn.h"
#include "sock/listener.h"
#include "transport/announce.h"
#include "history.h"
#include "sockopt.h"
#include "upgrade.h"

enum rsk_upg_state {
	RSK_UPGS_TCP = 0,  /* on TCP: the client dials at its threshold, the server waits */
	RSK_UPGS_DIALED,   /* client: offer out, waiting for the server's first message */
	RSK_UPGS_SWITCHED, /* sends go to the stream; reads take TCP until the peer's FIN */
	RSK_UPGS_NEVER,    /* stays TCP */
};

/* Calls of the application inside the kernel on @s's TCP side now. */
static int rsk_upg_kcalls(struct rsk_sock *s)
{
	return __atomic_load_n(&s->upg_kcalls, __ATOMIC_SEQ_CST); /* (rsk_upg_fast) */
}

/* Moving now? The client's threshold: bytes moved, or its age at this call, counted from its
 * first call after a few (rsk_hist_is_short). From the socket's fields only (the lock-free
 * route). */
static int rsk_upg_due_s(struct rsk_sock *s)
{
	uint64_t bytes = __atomic_load_n(&s->upg_bytes, __ATOMIC_RELAXED);
	uint64_t calls = __atomic_load_n(&s->data_calls, __ATOMIC_RELAXED);

	if (rsk_policy_is_kernel_only())
		return 0; /* io_uring: its I/O on this socket would not see the move */
	return !rsk_hist_is_short(rsk_hist_age(&s->aged_ms), bytes, calls);
}

/*
 * The lock-free route. A connection on TCP that no move concerns yet (no offer for a server,
 * not due for a client), used by one thread at a time (a server: only by the thread of its
 * first call), sends its calls to the kernel counted in without the socket's lock: on a
 * short connection that lock was taken before and after every data call. Closed (0) by
 * anything that may start a move or find several threads: every locked route (it opens it
 * again as it leaves the socket on TCP), an announced offer, a give-up, the last close.
 * Against a move another thread starts: the call counts itself in, then looks again (both
 * sequentially consistent), and the mover closes, then looks at the count; one of them sees
 * the other. Reads only the socket, which the call holds a reference on (upg may go).
 */
static void rsk_upg_fast_off(struct rsk_sock *s)
{
	__atomic_store_n(&s->upg_fast, 0, __ATOMIC_SEQ_CST);
}

/*
 * A server moves from one thread only: the thread of its first data call (a server socket
 * that another thread uses stays on TCP). Is the caller that thread? The first caller names
 * itself, lock-free: a compare-exchange from unnamed to naming, the thread, then named. A
 * caller that finds another thread named, or being named right now, is not.
 */
static int rsk_upg_ours(struct rsk_sock *s)
{
	int n = __atomic_load_n(&s->upg_named, __ATOMIC_ACQUIRE);

	if (n == 0 && __atomic_compare_exchange_n(&s->upg_named, &n, 1, 0, __ATOMIC_ACQ_REL,
						  __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&s->upg_tid, pthread_self(), __ATOMIC_RELAXED);
		__atomic_store_n(&s->upg_named, 2, __ATOMIC_RELEASE);
		return 1;
	}
	return n == 2 && pthread_equal(__atomic_load_n(&s->upg_tid, __ATOMIC_RELAXED),
				       pthread_self());
}

static int rsk_upg_fast(struct rsk_sock *s)
{
	int f = __atomic_load_n(&s->upg_fast, __ATOMIC_ACQUIRE);

	if (f == 0 || (f == 2 && !rsk_upg_ours(s)) || (f == 1 && rsk_upg_due_s(s)))
		return 0;
	if (__atomic_fetch_add(&s->upg_kcalls, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&s->upg_fast, __ATOMIC_SEQ_CST) == f)
		return 1; /* counted in, until rsk_upg_after */
	/* another call inside, or closed meanwhile: the locked route decides */
	__atomic_sub_fetch(&s->upg_kcalls, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* The key of the address map: IPv4-mapped IPv6 folded to IPv4, so both spellings meet. */
struct rsk_upg_key {
	uint16_t family, port;
	uint8_t addr[16];
};

struct rsk_upg {
	int server;
	int state; /* enum rsk_upg_state, under the socket's lock */
	const struct rsk_cm_ops *cm;
	int64_t born_ms;    /* a dialed client's offer: when it went out */
	unsigned int forks; /* rsk_proc_forks() when it became ours: a fork shares the TCP side */
	int fd;             /* the application's fd (the only one naming the socket) */
	int shut_wr;        /* the application shut its writing side: no move from then on */
	int64_t peeked_us;  /* switched: when a send last looked for the peer's FIN */
	int64_t answer_us;  /* offered: the next look at the server's answer, 0 none yet */
	int force;          /* a reader waited its bound for them: end the move regardless */
	int threads;        /* used by several threads (a server: at all; a client: at once) */
	unsigned int held_fork; /* the fork (rsk_proc_forks()) that counted a child as a holder */
	/* server */
	uint64_t lst_id;
	struct rsk_listener *lst; /* the listener, held while @held */
	int held;           /* we keep the listener's companions open (rsk_listener_hold) */
	int offer;          /* an offer was announced for us (atomic) */
	int claim_tries;    /* claims that found a sibling holding offers (retried) */
	const struct rsk_cm_ops *cl_cm;
	int have_claim;
	struct rsk_upg_key key;
	int in_map;
	struct rsk_sock *s;
	UT_hash_handle hh;
	/* the stream being set up or used */
	struct rsk_conn *c;
	int app, ctl;
	int moving; /* counted in rsk_upg_moving */
	/* client following the server's move: its first stream message is out, its delivery
	 * not yet seen (a wait's bounded settle left it so); since hello_us */
	int hello_out;
	int64_t hello_us;
	/*
	 * From here on not cleared when the state is made (rsk_upg_alloc), but as each is first
	 * used: 1 KiB that most connections never touch, whose clearing was a tenth of a short
	 * connection's state work on each side.
	 */
	/* client: its destination (set at creation); the dial (cleared as it is made, with
	 * dest and dest_len kept: set at creation) */
	struct sockaddr_storage dest;
	struct rsk_dial d;
	/* server: the client (set at creation); a claim (valid while have_claim) */
	struct sockaddr_storage peer;
	struct rsk_claim cl;
};

/* A move that cannot finish within this long is given up (the offer expires). */
#define RSK_UPG_DIAL_TTL_MS 10000
/* Least time between two looks of a call at the other side's progress that cost a system
 * call (the peer's FIN when switched, its answer when offered). */
#define RSK_UPG_PEEK_US 1000
/* Claims of an announced offer a server makes again while siblings hold entries. */
#define RSK_UPG_CLAIM_TRIES 16
/* Longest a side waits for its first stream message to reach the peer before its FIN. */
#define RSK_UPG_FLUSH_MS 2000

int rsk_upg_moving;

/* Who reads a socket's unrecorded epoll registrations before its move replays them: the
 * epoll fast path registers rsk_fw_epregs when it makes its first mirror (the path above the
 * moves; without a mirror there is nothing unrecorded to read). */
static int rsk_upg_no_epregs(struct rsk_sock *s, int fd)
{
	(void)s;
	(void)fd;
	return 0;
}

static int (*rsk_upg_epregs_fn)(struct rsk_sock *s, int fd) = rsk_upg_no_epregs;

void rsk_upg_set_epregs(int (*fn)(struct rsk_sock *s, int fd))
{
	__atomic_store_n(&rsk_upg_epregs_fn, fn, __ATOMIC_RELEASE);
}

/* The move is under way (offered, or our side switched) until it ends either way. */
static void rsk_upg_count_moving(struct rsk_upg *u, int on)
{
	if (u->moving == on)
		return;
	u->moving = on;
	__atomic_add_fetch(&rsk_upg_moving, on ? 1 : -1, __ATOMIC_RELAXED);
}

static pthread_mutex_t rsk_upg_map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_upg *rsk_upg_map;
/* Always in the map, under a key no socket has (family 0): uthash frees its table with its
 * last entry and makes it anew with the next, a malloc, a calloc and two frees for every
 * connection of a server that has one open at a time. */
static struct rsk_upg rsk_upg_keeper;

/*
 * The state of ended connections, kept for the next ones. At 1.2 KiB it is past malloc's
 * per-thread cache: a calloc per connection went through the arena, with a consolidation of
 * its fast bins (about 600 instructions of a short connection's 9,000 in the library on a
 * server). Lock-free: a slot is taken and given only by exchanging its pointer.
 */
#define RSK_UPG_SPARES 4
static void *rsk_upg_spares[RSK_UPG_SPARES];

static struct rsk_upg *rsk_upg_alloc(void)
{
	struct rsk_upg *u = rsk_spares_take(rsk_upg_spares, RSK_UPG_SPARES);

	if (u == NULL)
		return calloc(1, sizeof(struct rsk_upg));
	memset(u, 0, offsetof(struct rsk_upg, dest)); /* (the rest: as used) */
	return u;
}

static void rsk_upg_free(struct rsk_upg *u)
{
	u = rsk_spares_give(rsk_upg_spares, RSK_UPG_SPARES, u);
	free(u); /* every slot full (or another thread's spare came back from the exchange) */
}

static void rsk_upg_key_of(const struct sockaddr_storage *ss, struct rsk_upg_key *k)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
	static const uint8_t v4m[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	memset(k, 0, sizeof(*k));
	if (ss->ss_family == AF_INET6 && memcmp(s6->sin6_addr.s6_addr, v4m, 12) == 0) {
		k->family = AF_INET;
		k->port = s6->sin6_port;
		memcpy(k->addr, s6->sin6_addr.s6_addr + 12, 4);
	} else if (ss->ss_family == AF_INET6) {
		k->family = AF_INET6;
		k->port = s6->sin6_port;
		memcpy(k->addr, s6->sin6_addr.s6_addr, 16);
	} else {
		k->family = AF_INET;
		k->port = s4->sin_port;
		memcpy(k->addr, &s4->sin_addr, 4);
	}
}

/*
 * Announcements that found no socket, counted under the map's lock. An accept reads it
 * before its claim (rsk_upg_unheard_mark) and looks again once its socket is in the map
 * (rsk_upg_server): an offer the loop announced in between, after the claim's look and
 * before the socket could be found, was heard by nobody, and the client stayed on TCP.
 */
static uint32_t rsk_upg_unheard;

uint32_t rsk_upg_unheard_mark(void)
{
	return __atomic_load_n(&rsk_upg_unheard, __ATOMIC_SEQ_CST);
}

/* A listener's event loop: an offer for the client at @peer arrived. */
static int rsk_upg_announced(const struct sockaddr_storage *peer)
{
	struct rsk_upg_key k;
	struct rsk_upg *u;

	rsk_upg_key_of(peer, &k);
	pthread_mutex_lock(&rsk_upg_map_lock);
	HASH_FIND(hh, rsk_upg_map, &k, sizeof(k), u);
	if (u == &rsk_upg_keeper)
		u = NULL; /* (no client has its key: family 0; never act on it) */
	if (u != NULL) {
		__atomic_store_n(&u->offer, 1, __ATOMIC_SEQ_CST);
		rsk_upg_fast_off(u->s); /* its next call takes the lock, and the offer */
		/* Its next data-path call comes to us and takes the offer. */
		rsk_sock_divert(u->s, u->fd, 1);
	} else {
		__atomic_add_fetch(&rsk_upg_unheard, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&rsk_upg_map_lock);
	rsk_dbg("an offer for a connection %s", u != NULL ? "of ours: it moves at its next call"
							  : "not (yet) accepted here");
	return u != NULL;
}

static void rsk_upg_unmap(struct rsk_upg *u)
{
	if (u->held)
		rsk_listener_drop(u->lst); /* no offer can be for us any more */
	u->held = 0;
	if (!u->in_map)
		return;
	pthread_mutex_lock(&rsk_upg_map_lock);
	HASH_DELETE(hh, rsk_upg_map, u);
	pthread_mutex_unlock(&rsk_upg_map_lock);
	u->in_map = 0;
}

/* Locked (or not yet published), leaving @u on TCP: later calls may take the lock-free route
 * (rsk_upg_fast; a server's only from the thread of its first data call, rsk_upg_ours), and
 * only while no offer is announced: one announced meanwhile may have closed it before we
 * opened, so look at it again. */
static void rsk_upg_fast_on(struct rsk_sock *s, struct rsk_upg *u)
{
	if (u->state != RSK_UPGS_TCP || u->threads)
		return;
	__atomic_store_n(&s->upg_fast, u->server ? 2 : 1, __ATOMIC_SEQ_CST);
	if (u->server && __atomic_load_n(&u->offer, __ATOMIC_SEQ_CST))
		rsk_upg_fast_off(s);
}

static struct rsk_upg *rsk_upg_new(struct rsk_sock *s, int fd, int server)
{
	struct rsk_upg *u = rsk_upg_alloc();

	if (u == NULL)
		return NULL;
	u->server = server;
	u->born_ms = 0; /* (read only once dialed, which sets it: no clock read per connection) */
	__atomic_store_n(&s->upg_fast, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->upg_named, 0, __ATOMIC_RELAXED);
	u->forks = rsk_proc_forks();
	u->fd = fd;
	u->s = s;
	u->app = u->ctl = -1;
	__atomic_store_n(&s->upg_bytes, 0, __ATOMIC_RELAXED); /* (none moved over TCP yet) */
	__atomic_store_n(&s->data_calls, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->aged_ms, 0, __ATOMIC_RELAXED);
	return u;
}

int rsk_upg_client(struct rsk_sock *s, int fd, const struct sockaddr *dest, socklen_t len,
		   const struct rsk_cm_ops *cm)
{
	struct rsk_upg *u = rsk_upg_new(s, fd, 0);

	if (u == NULL)
		return -ENOMEM;
	u->cm = cm;
	memset(&u->dest, 0, sizeof(u->dest));
	memcpy(&u->dest, dest, len < sizeof(u->dest) ? len : sizeof(u->dest));
	u->d.dest = (const struct sockaddr *)&u->dest;
	u->d.dest_len = len;
	s->upg = u;
	s->own_exact = s->nfds == 1; /* every data call comes to us: we count its bytes */
	rsk_upg_fast_on(s, u);
	rsk_sock_divert(s, fd, 1); /* it counts its bytes until it moves */
	return 0;
}

int rsk_upg_server(struct rsk_sock *s, int fd, struct rsk_listener *lst,
		   const struct sockaddr_storage *peer, struct rsk_claim *cl,
		   const struct rsk_cm_ops *cm, uint32_t unheard)
{
	struct rsk_upg *u, *dup;
	unsigned int hv;

	if (rsk_listener_hold(lst) < 0)
		return -ENOENT;
	if ((u = rsk_upg_new(s, fd, 1)) == NULL) {
		rsk_listener_drop(lst);
		return -ENOMEM;
	}
	u->lst_id = rsk_listener_id(lst);
	u->lst = lst;
	u->held = 1;
	u->peer = *peer;
	rsk_upg_key_of(peer, &u->key);
	if (cl != NULL) { /* offered before we accepted: move at the first call */
		u->cl = *cl;
		u->cl_cm = cm;
		u->have_claim = 1;
		u->offer = 1;
	}
	s->upg = u;
	s->own_exact = s->nfds == 1;
	HASH_VALUE(&u->key, sizeof(u->key), hv); /* once, for the look and the add; unlocked */
	pthread_mutex_lock(&rsk_upg_map_lock);
	if (rsk_upg_map == NULL)
		HASH_ADD(hh, rsk_upg_map, key, sizeof(rsk_upg_keeper.key), &rsk_upg_keeper);
	HASH_FIND_BYHASHVALUE(hh, rsk_upg_map, &u->key, sizeof(u->key), hv, dup);
	if (dup == NULL) { /* (an address is one connection's while it is open) */
		HASH_ADD_BYHASHVALUE(hh, rsk_upg_map, key, sizeof(u->key), hv, u);
		u->in_map = 1;
	}
	pthread_mutex_unlock(&rsk_upg_map_lock);
	/* An offer announced unheard since the accept's claim may be ours: the first call
	 * claims (nothing there costs one look, and the socket stays on TCP). */
	if (rsk_upg_unheard_mark() != unheard)
		__atomic_store_n(&u->offer, 1, __ATOMIC_SEQ_CST);
	if (!u->have_claim) /* (an offer found at accept: its first call takes the lock) */
		rsk_upg_fast_on(s, u);
	/* Every data call comes to us from the start, not only once an offer is announced: a
	 * read that entered the kernel unseen would take the move's FIN for the end of the
	 * data (rsk_upg_route counts the calls inside and never moves under one). */
	rsk_sock_divert(s, fd, 1);
	return 0;
}

/* ---- building and ending the stream ---- */

/* Our share of the stream goes (a child forked during the move may hold it too). */
static void rsk_upg_drop_conn(struct rsk_upg *u)
{
	if (u->c != NULL)
		rsk_conn_let_go(u->c, u->app, u->ctl);
	u->c = NULL;
	u->app = u->ctl = -1;
}

static void rsk_upg_tx_mark(struct rsk_upg *u, int how);

/* It stays TCP: free what a move had built, and give its data path back to the kernel. */
static void rsk_upg_give_up(struct rsk_sock *s, struct rsk_upg *u, const char *why)
{
	rsk_dbg("fd %d: stays on TCP (%s)", u->fd, why);
	rsk_upg_fast_off(s);
	if (u->hello_out) /* our half-done move of the sending side: other holders wait on it */
		rsk_upg_tx_mark(u, RSK_CONN_TX_FAILED);
	u->hello_out = 0;
	rsk_upg_drop_conn(u);
	if (u->have_claim) {
		u->cl_cm->unclaim(&u->cl, 0);
		if (u->cl.ep != NULL)
			rsk_ep_destroy(u->cl.ep);
		u->have_claim = 0;
	}
	u->state = RSK_UPGS_NEVER;
	rsk_upg_count_moving(u, 0);
	rsk_upg_unmap(u);
	/* Its calls pass us by from now on, unless this is its last close (no fd left). */
	if (__atomic_load_n(&s->nfds, __ATOMIC_ACQUIRE) > 0)
		__atomic_store_n(&s->own_exact, 0, __ATOMIC_RELAXED);
	rsk_sock_divert(s, u->fd, 0);
}

/*
 * The connection stays on the kernel for reason @why, learnt late (a dial or an offer that
 * failed). Counted already (a blocking connect, or data moved) under its start's reason: the
 * count moves to @why. Not yet (a non-blocking connect whose first call dials): it is
 * counted under @why when it settles. Either way once, and under the reason a row of
 * `rdmasock stat` shows; assigning fb_reason alone counted the first kind as tcp_first.
 */
static void rsk_upg_reason(struct rsk_sock *s, enum rdmasock_fallback why)
{
	if (s->counted && s->fb_reason != why)
		rsk_stats_refallback(s->fb_reason, why);
	s->fb_reason = why;
}

/* Our sending side still open on TCP (a shutdown may have bypassed us: the server's data
 * path is the kernel's until an offer comes); the peer's too unless @peer_fin_ok (a client
 * following the server's move, whose FIN came with it). */
static int rsk_upg_open(int fd, int peer_fin_ok)
{
	int st = rsk_sys_tcp_state(fd);

	return st == RSK_TCPS_ESTABLISHED || (peer_fin_ok && st == RSK_TCPS_CLOSE_WAIT);
}

/* May this socket move now? One fd, no fork since, the TCP directions still open. */
static int rsk_upg_movable(struct rsk_sock *s, struct rsk_upg *u, int fd, int peer_fin_ok)
{
	return s->nfds == 1 && fd == u->fd && u->forks == rsk_proc_forks() && !u->shut_wr &&
	       rsk_upg_open(fd, peer_fin_ok);
}

/*
 * The first stream message of a side that moves, delivered before its FIN goes into TCP.
 * Its delivery (a verbs completion) is waited for RSK_UPG_FLUSH_MS from the message at most,
 * and never past @end_us, the end of a wait that settles the move (-1: none): when that
 * comes first, -EAGAIN, the message out (u->hello_out) and the move left for a later call to
 * go on with. A zero-timeout poll must not block for it.
 */
static int rsk_upg_move_tx(struct rsk_upg *u, int fd, int64_t end_us)
{
	int64_t now = rsk_now_us(), left;
	int rc, bounded;

	if (!u->hello_out) {
		if ((rc = rsk_conn_hello(u->c, u->app)) < 0)
			return rc;
		u->hello_out = 1;
		u->hello_us = now;
	}
	left = u->hello_us + (int64_t)RSK_UPG_FLUSH_MS * 1000 - now;
	bounded = end_us >= 0 && end_us - now < left;
	if (bounded)
		left = end_us - now;
	rc = rsk_conn_flush_sends(u->c, left > 0 ? (int)(left / 1000) : 0);
	if (rc == -ETIMEDOUT && bounded)
		return -EAGAIN;
	u->hello_out = 0;
	if (rc == 0)
		rc = rsk_sys_shutdown(fd, SHUT_WR);
	if (rc == 0) {
		u->state = RSK_UPGS_SWITCHED;
		rsk_upg_count_moving(u, 1);
	}
	return rc;
}

/* Client: the threshold is met; dial and offer. Failures leave it on TCP for good. */
static void rsk_upg_dial(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	const struct rsk_cm_ops *cm = u->cm;
	struct rsk_dial *d = &u->d;
	const struct sockaddr *dest = d->dest;
	socklen_t dest_len = d->dest_len;
	int rc;

	memset(d, 0, sizeof(*d)); /* not cleared at creation: only its destination was set */
	d->dest = dest;
	d->dest_len = dest_len;

	u->c = rsk_conn_alloc(rsk_config.buf_count, cm->ep_size != NULL ? cm->ep_size() : 0);
	if (u->c == NULL)
		return rsk_upg_give_up(s, u, "no memory");
	d->fd = fd;
	d->nbuf = rsk_config.buf_count;
	d->buf_size = rsk_config.buf_size;
	d->ep_mem = rsk_conn_ep_mem(u->c);
	d->upgrade = 1;
	if ((rc = cm->dial(d)) < 0) {
		rsk_conn_discard(u->c, -1, -1, -1);
		u->c = NULL;
		rsk_upg_reason(s, d->why);
		return rsk_upg_give_up(s, u, rsk_fallback_name(d->why));
	}
	u->c->ep = d->ep;
	rc = rsk_conn_prepare(u->c, fd, &u->app, &u->ctl, NULL);
	if (rc == 0 && cm->offer != NULL)
		rc = cm->offer(d, u->ctl);
	if (rc < 0) {
		if (cm->undial != NULL)
			cm->undial(d);
		return rsk_upg_give_up(s, u, "offer failed");
	}
	if (!cm->keeps_ctl) { /* the offer handed it to the server, our waker */
		(void)rsk_sys_close(u->ctl);
		u->ctl = -1;
	}
	if (cm->dialed != NULL)
		cm->dialed(d); /* what the dial holds belongs to the endpoint now */
	rsk_conn_take_tcp(u->c, fd, u->d.dest);
	rsk_opt_adopt_kernel(u->c, u->c->domain, fd); /* (a move is rare: always asked) */
	u->state = RSK_UPGS_DIALED;
	rsk_upg_count_moving(u, 1);
	u->born_ms = rsk_now_ms(); /* the offer's age from here */
	rsk_dbg("fd %d: offered a move to %s", fd, rsk_transport_name(d->ep->ops->id));
}

/* No fork since the dial, or each one since counted its child as a holder of the stream
 * (rsk_upg_prefork: every fork after the dial finds it set up). */
static int rsk_upg_held_here(const struct rsk_upg *u)
{
	unsigned int forks = rsk_proc_forks();

	return u->forks == forks || u->held_fork == forks;
}

/* Client: the shared record of our sending side's move (RSK_CONN_TX_*), taking the move
 * when no holder has (then RSK_CONN_TX_TCP comes back). A holder in another process moving
 * it right now is waited for on the record itself (a shared futex: its mark wakes us), and
 * bounded: it may have died in the middle. Not past @end_us (a wait's end, -1: none): then
 * RSK_CONN_TX_MOVING comes back (still moving; a later call looks again). */
static int rsk_upg_tx_turn(struct rsk_upg *u, int64_t end_us)
{
	int64_t end = rsk_now_ms() + 2 * RSK_UPG_FLUSH_MS, left;
	struct timespec ts;
	uint32_t was;
	int mine = 0;

	if (end_us >= 0 && end_us / 1000 < end) {
		end = end_us / 1000;
		mine = 1;
	}

	for (;;) {
		rsk_conn_lock(u->c);
		was = u->c->tx_moved;
		if (was == RSK_CONN_TX_TCP)
			u->c->tx_moved = RSK_CONN_TX_MOVING;
		rsk_conn_unlock(u->c);
		if (was != RSK_CONN_TX_MOVING)
			return (int)was;
		left = end - rsk_now_ms();
		if (left <= 0)
			return mine ? RSK_CONN_TX_MOVING : RSK_CONN_TX_FAILED;
		ts.tv_sec = left / 1000;
		ts.tv_nsec = (left % 1000) * 1000000;
		(void)rsk_sys_futex(&u->c->tx_moved, FUTEX_WAIT, RSK_CONN_TX_MOVING, &ts);
	}
}

static void rsk_upg_tx_mark(struct rsk_upg *u, int how)
{
	rsk_conn_lock(u->c);
	u->c->tx_moved = (uint32_t)how;
	rsk_conn_unlock(u->c);
	/* other holders wait for the end of our move (rsk_upg_tx_turn) */
	(void)rsk_sys_futex(&u->c->tx_moved, FUTEX_WAKE, INT32_MAX, NULL);
}

/*
 * Client: follow the server's move. Our first message (or the FIN already posted when the
 * application shut its writing side first) goes before our TCP FIN. A fork while the offer
 * was out shares the connection, as it shares a TCP socket: the first holder to look moves
 * our sending side, the others find it moved and switch too; each reads TCP up to the
 * server's FIN, then the stream, so the bytes stay in order whichever process reads.
 */
static int rsk_upg_follow(struct rsk_sock *s, struct rsk_upg *u, int fd, int64_t end_us)
{
	int was, rc;

	if (s->nfds > 1 || fd != u->fd || !rsk_upg_held_here(u))
		return -EBUSY; /* (0 fds: the last close, which ends through the stream) */
	if (u->shut_wr && !u->hello_out) {
		u->state = RSK_UPGS_SWITCHED;
		return 0;
	}
	/* (a move of ours left half done holds the record's turn already) */
	was = u->hello_out ? RSK_CONN_TX_TCP : rsk_upg_tx_turn(u, end_us);
	if (was == RSK_CONN_TX_MOVING)
		return -EAGAIN; /* another holder is moving it: not within this wait */
	if (was == RSK_CONN_TX_MOVED) {
		u->state = RSK_UPGS_SWITCHED;
		return 0;
	}
	if (was != RSK_CONN_TX_TCP)
		return -ECONNRESET;
	rc = rsk_upg_move_tx(u, fd, end_us);
	if (rc == -EAGAIN)
		return rc; /* the turn stays ours (MOVING) until the move ends */
	rsk_upg_tx_mark(u, rc == 0 ? RSK_CONN_TX_MOVED : RSK_CONN_TX_FAILED);
	return rc;
}

/* Client, offer out: did the server decline it (another build of the library)? A system
 * call, so asked only until the server moves, and ever less often: a decline comes within a
 * millisecond or so of the offer (the listener's loop reads it at once), while a server
 * that takes it may move only at its next call, rounds later. At an offer's age of 1 ms,
 * then each time its age doubled: at most 14 looks in its 10 s. */
static int rsk_upg_declined(struct rsk_sock *s, struct rsk_upg *u)
{
	int64_t now, age;
	int why;

	if (u->cm->declined == NULL || u->c->ep == NULL)
		return 0;
	now = rsk_now_us();
	age = now - u->born_ms * 1000;
	if (age < RSK_UPG_PEEK_US || now < u->answer_us)
		return 0;
	u->answer_us = now + age;
	if ((why = u->cm->declined(u->c->ep)) < 0)
		return 0;
	if (why < RDMASOCK_FB_COUNT)
		rsk_upg_reason(s, (enum rdmasock_fallback)why);
	return 1;
}

/* Client: has the server moved (its first message is there)? Then move too, by @end_us
 * (a wait's end; -1: none). -EAGAIN: the server moved and ours could not end by then. */
static int rsk_upg_client_look_by(struct rsk_sock *s, struct rsk_upg *u, int fd, int64_t end_us)
{
	int moved, err, rc;

	rsk_conn_lock(u->c);
	(void)rsk_stream_progress(&u->c->st);
	moved = u->c->st.msgs_rcvd > 0;
	err = u->c->st.err;
	rsk_conn_unlock(u->c);
	if (err || (!moved && !u->shut_wr && rsk_now_ms() - u->born_ms > RSK_UPG_DIAL_TTL_MS)) {
		rsk_upg_give_up(s, u, "the server did not take the offer");
		return 0;
	}
	if (!moved && rsk_upg_declined(s, u)) {
		rsk_upg_give_up(s, u, "the server declined the offer");
		return 0;
	}
	if (!moved)
		return 0;
	rc = rsk_upg_follow(s, u, fd, end_us);
	if (rc == 0 || rc == -EAGAIN)
		return rc;
	/* The server moved and we cannot follow: only a reset is honest now. */
	(void)rsk_sys_shutdown(fd, SHUT_RDWR);
	rsk_upg_give_up(s, u, "cannot follow the server");
	return 0;
}

static void rsk_upg_client_look(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	(void)rsk_upg_client_look_by(s, u, fd, -1);
}

/* Client, offer out: the application ends its writing side before the server moved. The
 * offer stays (the server may be moving right now): our FIN goes into the stream first, so
 * whichever way the server goes, it sees the end of our data in order. */
static void rsk_upg_end_offered(struct rsk_upg *u)
{
	rsk_conn_lock(u->c);
	(void)rsk_stream_shutdown_wr(&u->c->st);
	if (u->c->tx_moved == RSK_CONN_TX_TCP) /* ended: other holders have nothing to move */
		u->c->tx_moved = RSK_CONN_TX_MOVED;
	rsk_conn_unlock(u->c);
	(void)rsk_conn_flush_sends(u->c, RSK_UPG_FLUSH_MS);
	u->shut_wr = 1;
}

/* Server: build the stream from the claim in u->cl. 0 or -errno (the claim is undone). */
static int rsk_upg_server_build(struct rsk_upg *u, int fd)
{
	const struct rsk_cm_ops *cm = u->cl_cm;
	struct rsk_claim *cl = &u->cl;
	int rc;

	u->c = rsk_conn_alloc(cl->nbuf, cm->ep_size != NULL ? cm->ep_size() : 0);
	if (u->c == NULL)
		return -ENOMEM;
	cl->ep_mem = rsk_conn_ep_mem(u->c);
	rc = cm->claim_open(cl);
	u->c->ep = cl->ep;
	if (rc == 0)
		rc = rsk_conn_prepare(u->c, fd, &u->app, &u->ctl, NULL);
	if (rc == 0 && cm->answer != NULL) /* first, as in accept.c */
		rc = cm->answer(cl, u->ctl);
	if (rc == 0)
		rsk_conn_show_initial(u->c, u->app, u->ctl);
	if (rc == 0 && !cm->keeps_ctl) { /* the answer handed it to the client, our waker */
		(void)rsk_sys_close(u->ctl);
		u->ctl = -1;
	}
	cm->unclaim(cl, rc == 0);
	u->have_claim = 0;
	if (rc < 0) {
		cl->ep = NULL; /* destroyed with the connection below */
		return rc;
	}
	rsk_conn_take_tcp(u->c, fd, NULL);
	rsk_opt_adopt_kernel(u->c, u->c->domain, fd); /* (a move is rare: always asked) */
	return 0;
}

/* Server: take the offer announced for us (or found at accept), build the stream, move. */
static void rsk_upg_server_take(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	int rc;

	__atomic_store_n(&u->offer, 0, __ATOMIC_RELEASE);
	if (!u->have_claim) {
		memset(&u->cl, 0, sizeof(u->cl));
		rc = rsk_listener_claim_id(u->lst_id, &u->peer, fd, &u->cl, &u->cl_cm);
		/* A sibling process held the rendezvous' entries (prefork: the knock came while
		 * one of them looked): ours may be among them, and no second knock comes. Look
		 * again at a later call, a few times. */
		if (rc == -ETIMEDOUT && ++u->claim_tries <= RSK_UPG_CLAIM_TRIES)
			__atomic_store_n(&u->offer, 1, __ATOMIC_RELEASE);
		if (rc <= 0)
			return; /* not (or no longer) there: another announcement may come */
		u->have_claim = 1;
	}
	if (!u->cl.upgrade || !rsk_upg_movable(s, u, fd, 0))
		return rsk_upg_give_up(s, u, "offer unusable here");
	if ((rc = rsk_upg_server_build(u, fd)) < 0)
		return rsk_upg_give_up(s, u, strerror(-rc));
	if ((rc = rsk_upg_move_tx(u, fd, -1)) < 0) {
		/* Our first message may have reached the client, which then moves: the connection
		 * cannot be kept consistent any more, so it ends visibly. */
		(void)rsk_sys_shutdown(fd, SHUT_RDWR);
		return rsk_upg_give_up(s, u, strerror(-rc));
	}
	rsk_dbg("fd %d: moving to %s", fd, rsk_transport_name(u->c->ep->ops->id));
}

/* Moving now? The client's threshold: bytes moved, or its age at this call once it has made
 * a few calls (rsk_hist_is_short). */
static int rsk_upg_due(const struct rsk_upg *u)
{
	return rsk_upg_due_s(u->s);
}

/* Both directions ended on TCP: the application's fd becomes the stream's app end. */
static int rsk_upg_finish(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	struct rsk_conn *c = u->c;
	int rc;

	int app = u->app;

	/* Sends into the stream still using its app end by number (another thread's, waiting for
	 * credits perhaps): that number stays open until the last of them is out. The app's fd
	 * gets a copy. Never waited for: their credits may need our reader. */
	if (s->upg_scalls > 0) {
		app = rsk_sys_fcntl(u->app, F_DUPFD_CLOEXEC, 0);
		if (app < 0)
			return app;
	}
	/* Registrations made while unrecorded, to be replayed. Unreadable: the move fails (the
	 * connection is reset, visibly) rather than lose them silently. */
	rc = __atomic_load_n(&rsk_upg_epregs_fn, __ATOMIC_ACQUIRE)(s, fd);
	if (rc < 0) {
		if (app != u->app)
			(void)rsk_sys_close(app);
		return rc;
	}
	rsk_sock_account_tcp(s, fd); /* the TCP part's bytes, before the socket goes */
	rsk_stats_moved(s->fb_reason);
	rc = rsk_sock_become(s, fd, c, app, u->ctl, -1, u->server ? NULL : u->d.dest);
	if (rc < 0) {
		rsk_stats_unmoved(s->fb_reason);
		if (app != u->app)
			(void)rsk_sys_close(app);
		return rc;
	}
	if (app != u->app)
		s->upg_spare = u->app + 1;
	if (!u->server)
		rsk_hist_note(u->d.dest, 0); /* it lived long enough to move */
	u->c = NULL;
	u->app = u->ctl = -1;
	rsk_upg_count_moving(u, 0);
	rsk_upg_unmap(u);
	rsk_upg_fast_off(s); /* (off since it left TCP already) */
	s->upg = NULL;
	rsk_upg_free(u);
	return 0;
}

/* The peer's FIN came while switched: was it the peer's move? */
static int rsk_upg_at_eof(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	int started, err, rc;

	rsk_conn_lock(u->c);
	(void)rsk_stream_progress(&u->c->st);
	started = u->c->st.msgs_rcvd > 0;
	err = u->c->st.err;
	rsk_conn_unlock(u->c);
	/* The client answers our move with its first message (or its FIN, or a reset, when
	 * its application ended first), delivered before its TCP FIN. Without any it ended on
	 * TCP for real (it never saw our move: it went away). */
	if (u->server && !started && !err) {
		rsk_upg_give_up(s, u, "the client ended on TCP");
		return 0;
	}
	/* A call still in the kernel on the TCP side would read the stream's end once the fd
	 * is swapped: the last one out finishes (it too finds the FIN). */
	if (rsk_upg_kcalls(s) > 0 && !u->force)
		return 0;
	rc = rsk_upg_finish(s, u, fd);
	if (rc < 0) {
		/* The peer moved and we cannot: the connection ends visibly, never silently. */
		rsk_warn("fd %d: the move did not finish (%s); resetting", fd, strerror(-rc));
		rsk_upg_give_up(s, u, "move failed");
		return -ECONNRESET;
	}
	return 1;
}

/* Switched, sending: is all that is left on TCP the peer's FIN? Then the move ends now. At
 * most once a millisecond (a syscall), and only in the moment between the two moves. */

static int rsk_upg_peek_fin(struct rsk_sock *s, struct rsk_upg *u, int fd)
{
	int64_t now = rsk_now_us();
	char b;

	if (now - u->peeked_us < RSK_UPG_PEEK_US)
		return 0;
	u->peeked_us = now;
	if (rsk_sys_recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
		return 0; /* data still to read (or not even the FIN yet) */
	return rsk_upg_at_eof(s, u, fd);
}

/* ---- the data path ---- */

int rsk_upg_route(struct rsk_sock *s, int fd, int rx, struct rsk_upg_route *r)
{
	struct rsk_upg *u;
	int rc = RSK_UPG_TCP;

	if (rsk_upg_fast(s))
		return RSK_UPG_TCP;
	pthread_mutex_lock(&s->lock);
	rsk_upg_fast_off(s); /* before any look at the calls inside */
	u = s->upg;
	if (u == NULL) { /* moved meanwhile (another call finished it) */
		pthread_mutex_unlock(&s->lock);
		return s->conn != NULL ? RSK_UPG_MOVED : -EBADF;
	}
	/*
	 * Calls of several threads at once: a move swaps the fd and ends the TCP side under
	 * them, which a blocked reader and a writer racing with it do not survive in every
	 * order (a full-duplex program saw EOF mid-stream). Such a socket stays on TCP, and a
	 * server socket that two threads use at all (its reader may be about to block). (A
	 * client that offered already cannot withdraw: the server may be moving right now; it
	 * follows if the server moves, which a server used this way never does.)
	 */
	if (rsk_upg_kcalls(s) > 0 || s->upg_scalls > 0)
		u->threads = 1;
	if (u->server && u->state == RSK_UPGS_TCP && !rsk_upg_ours(s))
		u->threads = 1; /* a server moves from one thread only */
	if (u->threads && u->state == RSK_UPGS_TCP)
		rsk_upg_give_up(s, u, "used by several threads at once");
	switch (u->state) {
	case RSK_UPGS_TCP:
		if (u->server) {
			/* Only while no other call of the application is inside on this socket:
			 * the move swaps the fd under it. A later call takes the offer. */
			if (__atomic_load_n(&u->offer, __ATOMIC_ACQUIRE) &&
			    rsk_upg_kcalls(s) == 0)
				rsk_upg_server_take(s, u, fd);
		} else if (rsk_upg_due(u)) {
			if (rsk_upg_movable(s, u, fd, 0))
				rsk_upg_dial(s, u, fd);
			else
				rsk_upg_give_up(s, u, "shared, forked or shut");
		}
		break;
	case RSK_UPGS_DIALED:
		rsk_upg_client_look(s, u, fd);
		break;
	default:
		break;
	}
	if (u->state == RSK_UPGS_SWITCHED && !rx && rsk_upg_peek_fin(s, u, fd) > 0) {
		pthread_mutex_unlock(&s->lock);
		return RSK_UPG_MOVED; /* a program that only writes never reads that FIN */
	}
	if (u->state == RSK_UPGS_SWITCHED && !rx) {
		r->c = u->c;
		r->app_fd = u->app;
		r->pending = 1;
		rc = RSK_UPG_STREAM;
	}
	if (rc == RSK_UPG_TCP)
		__atomic_add_fetch(&s->upg_kcalls, 1, __ATOMIC_SEQ_CST); /* until rsk_upg_after */
	else if (rc == RSK_UPG_STREAM)
		s->upg_scalls++; /* until rsk_upg_stream_done */
	rsk_upg_fast_on(s, u);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int rsk_upg_route_tcp(struct rsk_sock *s)
{
	return rsk_upg_fast(s);
}

/* A read found the FIN while switched: wait (briefly: they find the FIN too, or were cut
 * short by our shutdown) until no other call is in the kernel on the TCP side. Locked. */
static void rsk_upg_wait_kcalls(struct rsk_sock *s)
{
	int64_t end = rsk_now_ms() + RSK_UPG_FLUSH_MS;
	struct rsk_upg *u;

	while ((u = s->upg) != NULL && rsk_upg_kcalls(s) > 0 && rsk_now_ms() < end) {
		pthread_mutex_unlock(&s->lock);
		(void)rsk_sys_poll(NULL, 0, 1); /* (a 1 ms sleep) */
		pthread_mutex_lock(&s->lock);
	}
	if ((u = s->upg) != NULL && rsk_upg_kcalls(s) > 0)
		u->force = 1; /* the move ends anyway: they return from the TCP file they hold */
}

int rsk_upg_after(struct rsk_sock *s, int fd, int rx, ssize_t n)
{
	struct rsk_upg *u;
	int rc = 0;
	int was = RSK_SOCK_CONNECTING;

	if (n > 0) { /* (counted also after a move meanwhile: nothing reads them then) */
		__atomic_add_fetch(&s->upg_bytes, (uint64_t)n, __ATOMIC_RELAXED);
		if (!s->accepted) /* (a client's: its move threshold and its history) */
			rsk_hist_called(&s->data_calls, &s->aged_ms);
		__atomic_add_fetch(rx ? &s->own_rcvd : &s->own_sent, (uint64_t)n, __ATOMIC_RELAXED);
	}
	/* Data moved (or the peer's FIN came): a connect that SO_ERROR left unconfirmed is done
	 * (rsk_connect_so_error asks the kernel nothing for a socket whose calls come here);
	 * counted once, by whoever settles it. */
	if ((n > 0 || (rx && n == 0)) &&
	    __atomic_compare_exchange_n(&s->state, &was, RSK_SOCK_CONNECTED, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		rsk_sock_count(s, s->port);
	/*
	 * Nothing to learn: data moved, a send failed otherwise than by a shutdown's EPIPE, or
	 * either came on a connection still on TCP with no move begun (the lock-free route is
	 * open only then, and closes before any move: a FIN or an EPIPE is the peer's own).
	 * The call counts itself out without the lock (no move starts while it is counted in,
	 * rsk_upg_route; it was one of two lock round trips of every data call).
	 */
	if ((rx ? n != 0 : n != -EPIPE) || __atomic_load_n(&s->upg_fast, __ATOMIC_SEQ_CST)) {
		__atomic_sub_fetch(&s->upg_kcalls, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	__atomic_sub_fetch(&s->upg_kcalls, 1, __ATOMIC_SEQ_CST);
	u = s->upg;
	/*
	 * Another thread moved the socket while this call waited in the kernel on the TCP side
	 * (which it still holds): the FIN it read, or the EPIPE of a send cut short by our own
	 * shutdown, is the move's, and the call goes on with the stream.
	 */
	if (u == NULL || (!rx && u->state == RSK_UPGS_SWITCHED && !u->shut_wr)) {
		rc = u != NULL || s->conn != NULL;
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	if (!rx && u->state == RSK_UPGS_DIALED) {
		/* A holder in another process (a fork while the offer was out) followed the
		 * server's move: the EPIPE is its TCP shutdown's; we follow, and the call goes on
		 * with the stream. */
		rsk_upg_client_look(s, u, fd);
		rc = u->state == RSK_UPGS_SWITCHED && !u->shut_wr;
	}
	if (!rx) {
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	if (u->state == RSK_UPGS_DIALED) {
		/* The server's FIN: if it moved, its first message came before it (and we follow,
		 * which cuts short a send of ours waiting in the kernel). */
		rsk_upg_client_look(s, u, fd);
	}
	if (u->state == RSK_UPGS_SWITCHED) {
		rsk_upg_wait_kcalls(s);
		u = s->upg; /* NULL: another call finished the move meanwhile */
		if (u == NULL)
			rc = s->conn != NULL;
		else if (u->state == RSK_UPGS_SWITCHED)
			rc = rsk_upg_at_eof(s, u, fd);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void rsk_upg_stream_done(struct rsk_sock *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->upg_scalls > 0 && --s->upg_scalls == 0 && s->upg_spare > 0) {
		(void)rsk_sys_close(s->upg_spare - 1); /* the last of them is out */
		s->upg_spare = 0;
	}
	pthread_mutex_unlock(&s->lock);
}

int rsk_upg_try_finish(struct rsk_sock *s, int fd)
{
	struct rsk_upg *u;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	u = s->upg;
	if (u != NULL && u->state == RSK_UPGS_SWITCHED) {
		u->peeked_us = 0; /* the stream is full: look now */
		rc = rsk_upg_peek_fin(s, u, fd) > 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/*
 * A wait (poll, select, epoll) found the fd readable or hung up while the socket moves: the
 * fd still names the TCP side, which shows the peer's move (its FIN, and our own FIN once
 * our side moved: POLLIN|POLLHUP) as the end of the connection, before the peer has sent or
 * ended anything in the stream. A read after that answer took the FIN, finished the move
 * and found the stream empty: EAGAIN on a non-blocking fd, where TCP returns data or 0 (a
 * forked server child took that for a lost EOF). So the move is taken as far as a read
 * would take it -- a client follows the server's, and a FIN that is all TCP has left ends
 * the move -- and the wait asks again, now of the stream. Never under another call in the
 * kernel on the TCP side (rsk_upg_at_eof leaves the end to it), and never past the wait's
 * own end @end_us: a client whose first stream message is not delivered by then (a verbs
 * completion) leaves its move half done, and the report, only the server's FIN, is not the
 * stream's (RSK_UPG_SETTLE_HIDE).
 */
int rsk_upg_settle(struct rsk_sock *s, int fd, int64_t end_us)
{
	struct rsk_upg *u;
	int rc = RSK_UPG_SETTLE_KEEP, pending = 0;
	char b;

	pthread_mutex_lock(&s->lock);
	u = s->upg;
	if (u != NULL && rsk_upg_kcalls(s) == 0 && s->upg_scalls == 0) {
		if (u->state == RSK_UPGS_DIALED) /* the server moved: we follow */
			pending = rsk_upg_client_look_by(s, u, fd, end_us) == -EAGAIN;
		if (u->state == RSK_UPGS_SWITCHED) {
			u->peeked_us = 0;
			rc = rsk_upg_peek_fin(s, u, fd) > 0 ? RSK_UPG_SETTLE_MOVED : rc;
		} else if (pending && rsk_sys_recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
			rc = RSK_UPG_SETTLE_HIDE; /* all TCP has is the server's FIN */
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int rsk_upg_settle_fd(int fd, int64_t end_us)
{
	uintptr_t v = rsk_fdtab_load(fd);
	struct rsk_sock *s;
	int rc = RSK_UPG_SETTLE_KEEP;

	if (!(v & RSK_FDTAB_TAG_DIVERT) || (s = rsk_sock_get(fd)) == NULL)
		return rc; /* (every call of a TCP-first socket comes to us: it is diverted) */
	if (s->conn == NULL && s->upg != NULL)
		rc = rsk_upg_settle(s, fd, end_us);
	rsk_sock_put(s);
	return rc;
}

int rsk_upg_shutdown(struct rsk_sock *s, int fd, int how)
{
	struct rsk_upg *u;
	int rc = 0;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	u = s->upg;
	if (u != NULL && u->state == RSK_UPGS_DIALED)
		rsk_upg_client_look(s, u, fd); /* the server may have moved: then we follow */
	if (u != NULL && u->state == RSK_UPGS_DIALED && how != SHUT_RD && !u->shut_wr)
		rsk_upg_end_offered(u);
	if (u != NULL && u->state == RSK_UPGS_SWITCHED) {
		/* Our TCP side ended with the move: the application's end goes into the stream. */
		rsk_conn_lock(u->c);
		if (how != SHUT_WR)
			u->c->st.shut_rd = 1;
		if (how != SHUT_RD && !u->shut_wr)
			rc = rsk_stream_shutdown_wr(&u->c->st);
		rsk_conn_unlock(u->c);
		if (how != SHUT_RD)
			u->shut_wr = 1;
		if (how != SHUT_WR)
			(void)rsk_sys_shutdown(fd, SHUT_RD);
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	if (u != NULL && how != SHUT_RD)
		u->shut_wr = 1;
	pthread_mutex_unlock(&s->lock);
	return rsk_sys_shutdown(fd, how);
}

void rsk_upg_never(struct rsk_sock *s, int fd)
{
	struct rsk_upg *u;

	pthread_mutex_lock(&s->lock);
	u = s->upg;
	if (u != NULL && u->state == RSK_UPGS_TCP)
		rsk_upg_give_up(s, u, "used where the library cannot see");
	(void)fd;
	pthread_mutex_unlock(&s->lock);
}

void rsk_upg_prefork(struct rsk_sock *s, int fd)
{
	struct rsk_upg *u;

	pthread_mutex_lock(&s->lock);
	u = s->upg;
	/* (once per fork: dups of the socket are walked each) */
	if (u != NULL && u->c != NULL && u->held_fork != rsk_proc_forks()) {
		rsk_conn_prefork(u->c, u->app >= 0 ? u->app : fd);
		u->held_fork = rsk_proc_forks();
		s->held_fork = u->held_fork; /* counted, if the move ends before the walk is done */
	}
	pthread_mutex_unlock(&s->lock);
}

void rsk_upg_fork_failed(struct rsk_sock *s)
{
	struct rsk_upg *u;

	pthread_mutex_lock(&s->lock);
	u = s->upg;
	if (u != NULL && u->c != NULL && u->held_fork == rsk_proc_forks()) {
		rsk_conn_prefork_undo(u->c);
		u->held_fork = 0;
	}
	pthread_mutex_unlock(&s->lock);
}

void rsk_upg_release(struct rsk_sock *s, int fd)
{
	struct rsk_upg *u;
	int last = 1;

	pthread_mutex_lock(&s->lock);
	rsk_upg_fast_off(s);
	u = s->upg;
	s->upg = NULL;
	/* A child forked while the move was under way holds the stream too (rsk_upg_prefork):
	 * only the last holder's close ends it. Otherwise the parent of a fork-per-connection
	 * server, closing its copy, put a FIN in the stream before its child's response. A
	 * holder that is not the last lets go of its share here, and of nothing else: the
	 * region is the child's from now on (no pool of ours may hand it out). */
	if (u != NULL && u->c != NULL && !rsk_conn_unshare(u->c, u->app, u->ctl)) {
		u->c = NULL;
		u->app = u->ctl = -1;
		last = 0;
	}
	/* A client that never reached its threshold was short: the next ones to there start on
	 * TCP too (history.h). */
	if (u != NULL && !u->server)
		rsk_hist_note(u->d.dest, u->state == RSK_UPGS_TCP && !rsk_upg_due(u));
	if (u != NULL && u->state == RSK_UPGS_DIALED && last)
		rsk_upg_client_look(s, u, fd); /* the server moved: end through the stream */
	/* Still only offered (the server has not moved): every byte we sent went into TCP, and
	 * TCP's own FIN ends it in order whichever way the server goes (a server that moves
	 * meanwhile reads our FIN with no stream message of ours before it: the client ended on
	 * TCP). Nothing to flush: waiting for a stream the server never set up cost a short
	 * connection its whole flush bound (redis-benchmark -k 0 over verbs stalled). */
	if (u != NULL && u->state == RSK_UPGS_SWITCHED && last) {
		/* End the stream as a close does: FIN after what we sent, or a reset over unread
		 * data in the stream (the kernel resets the TCP side over data left there). A FIN
		 * of an earlier shutdown is in the stream already. */
		rsk_conn_lock(u->c);
		rsk_conn_end_ours(u->c);
		rsk_conn_unlock(u->c);
		(void)rsk_conn_flush_sends(u->c, RSK_UPG_FLUSH_MS);
	}
	if (u != NULL)
		rsk_upg_give_up(s, u, "closed");
	pthread_mutex_unlock(&s->lock);
	rsk_upg_free(u);
}

void rsk_upg_init(void)
{
	rsk_transport_set_upgrade_hook(rsk_upg_announced);
}
