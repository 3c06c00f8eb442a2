/*
 * An accelerated connection: the stream engine, its transport endpoint, and the fds that
 * make the application's fd behave (readiness pair, hidden TCP placeholder). It lives in
 * an anonymous MAP_SHARED region so that, exactly like a kernel socket, a forked child and
 * its parent share one connection; `holders` counts the processes that still have it and
 * the last one to close it ends the stream. Each process also keeps its own record of the
 * connections it holds (their event-loop watches), see conn.c.
 */
#ifndef RSK_CONN_H
#define RSK_CONN_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/compiler.h"
#include "base/evloop.h"
#include "base/ready.h"
#include "stream/stream.h"

/* A socket option the application set, kept for getsockopt (the TCP socket is gone). */
struct rsk_conn_opt {
	int level, name;
	socklen_t len;
	unsigned char val[32];
};
#define RSK_CONN_OPTS 16

enum rsk_conn_tx_moved {
	RSK_CONN_TX_TCP = 0, /* our sending side is on TCP */
	RSK_CONN_TX_MOVING,  /* a holder is moving it (its first message, then its TCP FIN) */
	RSK_CONN_TX_MOVED,   /* in the stream: its first message (or FIN) before our TCP FIN */
	RSK_CONN_TX_FAILED,  /* the holder's move failed: the connection ends visibly */
};

struct rsk_conn {
	pthread_mutex_t lock; /* process-shared, robust: guards everything below */
	int holders;          /* processes holding the connection (atomic) */
	size_t map_len;       /* size of this shared region */
	size_t rxq_off;       /* where the rx queue starts in mem[] (after the endpoint) */
	enum rdmasock_transport transport;
	int domain;
	int ctl_fd;   /* our app end's ctl end, if our own event loop is its waker (verbs) */
	int tcp_fd;   /* the TCP socket as a hidden placeholder (cm->keeps_tcp), else -1 */
	int nonblock; /* O_NONBLOCK of the application's open file description */
	int64_t rcvtimeo_us, sndtimeo_us; /* SO_RCVTIMEO / SO_SNDTIMEO, 0 = forever */
	struct rsk_ready_owner ro; /* our side of the readiness protocol (base/ready.h) */
	int eof_shown, hup_shown;
	int peer_hup; /* the app end's partner went (the peer closed or died) */
	int linger0;  /* SO_LINGER {1, 0}: close resets, as TCP does */
	int relayed;  /* the app end carries data (relay.c): no token or fill may enter it */
	/* Lazy readiness (calls/fastwait.c): every wait on the app end is one of ours that looks
	 * at the stream first, so a drained app end keeps its token ("stale SHOWN") and the
	 * peer, finding it SHOWN, writes none. Data still always means a token; only "token
	 * means data" is given up: the kernel holds the app end edge-triggered in the mirrored
	 * sets, and a thread about to sleep there counts itself (rsk_conn_sleep) so the peer
	 * writes it one token, an edge; a blocking recv makes it exact before it sleeps. */
	int lazy;
	int lazy_never; /* a wait we cannot see may look at the app end: eager for good */
	/* 1: made lazy by a poll/select or a data call of ours (calls/pollfast.c), not by an
	 * epoll mirror; -1: never made lazy so (its transport, or an epoll set that registered
	 * it while it was TCP: sock.c); 0: not decided */
	int lazy_poll;
	/* A client's move (calls/upgrade.c), seen by every process holding the connection (a
	 * fork while its offer was out): which holder moves our sending side, once for all. */
	uint32_t tx_moved; /* enum rsk_conn_tx_moved; a shared futex word while MOVING */
	/* what getsockname/getpeername report, and the options set since */
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	/* Known before the TCP socket is taken (rsk_conn_know): names the setup learnt anyway
	 * (RSK_CONN_KNOW_LOCAL/PEER), and the application fd's flags (-1 unknown: asked). */
	int known;
	int app_fl, app_fdfl; /* O_NONBLOCK and FD_CLOEXEC of the application's fd */
	int pair_nonblock;    /* the readiness pair was made non-blocking (rsk_conn_prepare) */
	struct rsk_conn_opt opts[RSK_CONN_OPTS];
	int nopts;
	struct rsk_stream st;
	struct rsk_ep *ep;
	unsigned char mem[] __attribute__((aligned(64))); /* endpoint, then the rx queue */
};

/* Accelerated connections held by this process (readers may spin instead of sleeping). */
extern RSK_HIDDEN int rsk_conn_live;

/*
 * A zeroed connection able to hold an endpoint of @ep_size bytes (see rsk_conn_ep_mem) with
 * @nbuf buffers. NULL on ENOMEM.
 */
struct rsk_conn *rsk_conn_alloc(uint32_t nbuf, size_t ep_size);

/*
 * Regions kept mapped for reuse after their connection ended here (at most 16; a forked
 * child starts with none). For tests and stats.
 */
int rsk_conn_pool_count(void);

/* Memory for the transport endpoint inside the region, and for the stream's rx queue. */
void *rsk_conn_ep_mem(struct rsk_conn *c);
struct rsk_rxmsg *rsk_conn_rxq(struct rsk_conn *c);

/*
 * The local parts of a new connection on endpoint c->ep for TCP socket @fd: the stream and
 * the readiness pair (*app for the application, *ctl its partner), plus the hidden TCP
 * placeholder (*tcp) where the transport keeps one (else -1; @tcp NULL: none wanted, an
 * upgrade ends its TCP connection in order). 0 or -errno; on error the
 * caller undoes with rsk_conn_discard (fds < 0 skipped).
 */
int rsk_conn_prepare(struct rsk_conn *c, int fd, int *app, int *ctl, int *tcp);

/*
 * What the caller knows already of the TCP socket the connection takes over, so that neither
 * rsk_conn_prepare nor rsk_sock_become asks the kernel again: its own and its peer's address
 * (NULL: not known), and the application fd's O_NONBLOCK (@fl) and FD_CLOEXEC (@fdfl)
 * flags (-1: not known). With O_NONBLOCK known, the readiness pair is made with it.
 */
#define RSK_CONN_KNOW_LOCAL 1
#define RSK_CONN_KNOW_PEER 2
#define RSK_CONN_KNOW_OPTS 4
/* The TCP socket's TCP_NODELAY (@nodelay) and TCP_CORK (@cork), known: not asked. */
void rsk_conn_know_opts(struct rsk_conn *c, int nodelay, int cork);
void rsk_conn_know(struct rsk_conn *c, const struct sockaddr *local, const struct sockaddr *peer,
		   int fl, int fdfl);
void rsk_conn_discard(struct rsk_conn *c, int app, int ctl, int tcp);

/*
 * Show the connection's initial readiness on app end @app while we still hold its partner
 * @ctl (data may be waiting already: a server's client can send before accept() returns).
 * Then the ctl end is handed to the waker (or kept, cm->keeps_ctl).
 */
void rsk_conn_show_initial(struct rsk_conn *c, int app, int ctl);

/*
 * Before the application's fd @fd stops naming its TCP socket: take what getsockname,
 * getpeername (@dest when the connect is still under way) and the engine need from it
 * (TCP_NODELAY and TCP_CORK as set before connect, or inherited from the listener).
 */
void rsk_conn_take_tcp(struct rsk_conn *c, int fd, const struct sockaddr *dest);

/*
 * The connection now serves the application's fd @app_fd: adopt the hidden fds (@ctl kept
 * if our own loop wakes us, else -1; @tcp or -1) and watch what the transport needs
 * watched. 0, or -errno when it cannot be watched (it still works then).
 */
int rsk_conn_attach(struct rsk_conn *c, int app_fd, int ctl, int tcp, int nonblock);

void rsk_conn_lock(struct rsk_conn *c);
void rsk_conn_unlock(struct rsk_conn *c);

/*
 * Bring the app end's kernel readiness in line with the stream's state (raise/lower,
 * block/unblock, EOF, HUP). Called with the lock held after every engine operation;
 * @app_fd is the fd the application used (any dup of the app end will do).
 */
void rsk_conn_sync(struct rsk_conn *c, int app_fd);

/* Can this connection's readiness be lazy (its arrivals visible in user space)? */
int rsk_conn_can_lazy(const struct rsk_conn *c);

/* Tokens in the app end now (no lock: a hint, e.g. how much a sleep would cost to prepare). */
uint32_t rsk_conn_tokens(struct rsk_conn *c);

/* Lazy readiness on or off (lock held). Off makes the app end exact at once. */
void rsk_conn_set_lazy(struct rsk_conn *c, int app_fd, int on);

/*
 * Before a wait that may sleep in the kernel on app end @app_fd: make a lazy connection's
 * app end exact (take a stale token back). Lock held. Returns 1 if the stream is readable
 * (then nothing was taken: the caller need not sleep).
 */
int rsk_conn_exact(struct rsk_conn *c, int app_fd);

/*
 * A thread is about to sleep in the kernel on an edge-triggered registration of a lazy
 * connection's app end (@on 1, before it rechecks the stream), or is done (@on 0): the peer
 * then writes one token, an edge, for data that comes meanwhile (base/ready.h, `sleep`). No
 * lock needed.
 */
void rsk_conn_sleep(struct rsk_conn *c, int on);
/* The kernel reported the app end: before the stream is looked at (no lock needed). */
void rsk_conn_edge_seen(struct rsk_conn *c);
/* Stale tokens piled up in a lazy app end (one per such edge): take all but one back, in one
 * read, once there are RSK_CONN_TRIM_AT of them. Lock held. */
#define RSK_CONN_TRIM_AT 16u
void rsk_conn_trim(struct rsk_conn *c, int app_fd);

/*
 * The readiness a lazy connection's app end would show if it were exact, as EPOLL* bits
 * (IN/RDNORM, OUT/WRNORM/WRBAND), from user-space state after harvesting; lock held. -1 when
 * the connection is past its plain state (EOF, hang-up, error, shut down, relayed): only the
 * kernel object says that exactly.
 */
int rsk_conn_fast_events(struct rsk_conn *c, int app_fd);

/* Peer gone (its TCP end, the app end's partner, or the transport said so): fail the stream
 * unless the peer ended it in order, and show it. Lock held. */
void rsk_conn_peer_gone(struct rsk_conn *c);

/* The app end (fd @app_fd) reported @revents (poll bits): a hang-up means the peer went. */
void rsk_conn_saw_events(struct rsk_conn *c, int app_fd, short revents);

/*
 * Transports whose peer cannot wake us (verbs): something arrived (the completion channel
 * fired). Harvest, show EOF/HUP, and wake what is armed and now due. Lock held.
 */
void rsk_conn_remote_wake(struct rsk_conn *c);

/*
 * Client of a transport whose server must claim the endpoint before it is used
 * (cm->dial_sync): wait until @deadline_ms for the server's first message. 0, -ECONNREFUSED
 * (the server dropped the endpoint instead), -ETIMEDOUT, or the stream's error.
 */
int rsk_conn_await_first(struct rsk_conn *c, int64_t deadline_ms);

/* Wait (up to @ms) until everything posted reached the peer, where the transport can say
 * (cm->sends_sync); at once otherwise. 0, the stream's error, or -ETIMEDOUT. */
int rsk_conn_flush_sends(struct rsk_conn *c, int ms);

/* Server of such a transport: tell the client we took it (an empty message). 0/-errno. */
int rsk_conn_hello(struct rsk_conn *c, int app_fd);

/* Our end of @c's stream as a close ends it: a FIN after everything sent, or a reset when
 * received data is left unread (or SO_LINGER {1, 0}), as TCP's close does. Lock held. */
void rsk_conn_end_ours(struct rsk_conn *c);

/* This process is done with @c (its last fd closed): the last holder ends the stream. */
void rsk_conn_release(struct rsk_conn *c);

/* The same at process exit, where other threads may still be inside calls on @c: the stream
 * ends, and nothing they use is freed or closed (the process's end takes it). */
void rsk_conn_release_exiting(struct rsk_conn *c);

/*
 * A holder of @c that no record of this process names (a move under way, calls/upgrade.c)
 * lets go, @app and @ctl being its app end and ctl end (or -1). rsk_conn_unshare: if another
 * process still holds @c, this one's share goes now (its copies closed, @c unmapped here and
 * never reused: it is still the other's) and 0; if this is the last holder, nothing changes
 * and 1 (the caller ends the stream, then rsk_conn_let_go). rsk_conn_let_go: this share
 * goes; the last holder's stream ends as after a close (the peer's sends fail) and its
 * endpoint retires.
 */
int rsk_conn_unshare(struct rsk_conn *c, int app, int ctl);
void rsk_conn_let_go(struct rsk_conn *c, int app, int ctl);

/* fork(): a child will hold @c too; count it before the child exists (and undo). @app_fd
 * is an fd of its app end. */
void rsk_conn_prefork(struct rsk_conn *c, int app_fd);
void rsk_conn_prefork_undo(struct rsk_conn *c);

/*
 * In a forked child: keep watching the connections this process shares with its parent,
 * forget the others (endpoints a child cannot share stay the parent's, cm->fork_share).
 */
void rsk_conn_atfork_child(void);

/* In a helper that takes a process's relays over (calls/lifecycle.c): keep the relayed
 * connections whose hook's @keep(ext) says so, forget the others. */
void rsk_conn_atexec_helper(int (*keep)(void *ext));

/* Stop (@on 0) or resume (1) this process's watches of @c (a relay being handed over). */
void rsk_conn_watching(struct rsk_conn *c, int on);

/*
 * Another process serves @c from now on (a relay's helper holds its share): forget it here
 * without touching the stream or the holders: no callback, our copies of its fds closed,
 * unmapped. No lock held.
 */
void rsk_conn_forget(struct rsk_conn *c);

/* A connection of ours holds a staged (coalesced) message: make sure it is posted soon (the
 * loop's next round; a sender that stopped writing waits for it, Nagle's timer). */
void rsk_conn_staged(void);

/* A connection of ours owes credits for data it consumed (rsk_stream_credits_due): make sure
 * they go back, at the application's next wait in the library or within ~1-2 ms
 * (rsk_evloop_request_settle), so that an answer sent meanwhile carries them: no
 * credit-only message, and no wake of the loop thread per request. */
void rsk_conn_settle_soon(void);

/* Post every staged message of this process, and the credits due, now (the application is
 * about to wait: every request is taken, a settle request too).
 * Inline while nothing is staged (one load): push_taken does the pass once the request
 * was taken. */
void rsk_conn_push_taken(void);
static inline void rsk_conn_push_all(void)
{
	if (rsk_evloop_take_tick())
		rsk_conn_push_taken();
}

/*
 * Quiet endpoints (conn.c, transport.h ops->arm): while no thread of ours sleeps in the kernel,
 * an endpoint whose every wait is ours raises no completion events; waits look in user space.
 * harvest_quiet: before asking the kernel about app ends without sleeping (a zero-timeout
 * poll), harvest the quiet ones so their app ends show what came; 1 if anything did.
 * sleep_begin/sleep_end: around every sleep in the kernel on app ends (epoll/poll/select, a
 * blocking recv or send): arms and harvests every quiet endpoint, and keeps others from going
 * quiet until sleep_end. arm_locked (lock held): @c raises events again from now on (its
 * waits may no longer all be ours: lazy_never, a relay).
 */
extern RSK_HIDDEN int rsk_conn_sleepers, rsk_conn_nquiet; /* threads asleep; quiet endpoints (conn.c) */
/* Set for good (before its count) once an endpoint of this process went quiet: until then
 * sleepers only matter to endpoints that could go quiet later (see rsk_io_kwait_none). */
extern RSK_HIDDEN int rsk_conn_quiet_seen;
int rsk_conn_harvest_some(void);
void rsk_conn_sleep_arm(void);

/* Inline: without quiet endpoints (shm only) a wait pays one load, and a sleep an atomic
 * add and a load, not a call into conn.c. */
static inline int rsk_conn_harvest_quiet(void)
{
	if (__atomic_load_n(&rsk_conn_nquiet, __ATOMIC_SEQ_CST) == 0)
		return 0;
	return rsk_conn_harvest_some();
}

static inline void rsk_conn_sleep_begin(void)
{
	__atomic_add_fetch(&rsk_conn_sleepers, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&rsk_conn_nquiet, __ATOMIC_SEQ_CST) != 0)
		rsk_conn_sleep_arm();
}

static inline void rsk_conn_sleep_end(void)
{
	__atomic_sub_fetch(&rsk_conn_sleepers, 1, __ATOMIC_SEQ_CST);
}
void rsk_conn_arm_locked(struct rsk_conn *c);

/* A hint for a spinning wait: may a message have come on any connection of this process
 * that its kernel readiness does not show yet? 1 when it cannot tell cheaply. */
int rsk_conn_any_arrival(void);

/*
 * Hand @c's events to @fn (called on the event loop, no lock held) instead of the readiness
 * wake-ups: a relayed connection (relay.c) pumps data then. @ext is for the hook's owner.
 * Returns 0, or -ENOENT if @c is not a connection of this process.
 */
int rsk_conn_set_hook(struct rsk_conn *c, void (*fn)(struct rsk_conn *c, void *ext), void *ext,
		      void (*on_release)(struct rsk_conn *c, void *ext));

/* Live stats hook (sock/sockstat.c): call @fn(@c, @arg) under the registry lock if @c is still
 * a connection of this process. A connection leaves the registry before it is unmapped, so
 * @fn may read it even while another thread closes it. @fn must not call into this module.
 * Returns 1 if @fn ran, 0 if not. */
int rsk_conn_visit(struct rsk_conn *c, void (*fn)(const struct rsk_conn *c, void *arg), void *arg);

#endif
