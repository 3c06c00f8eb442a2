/*
 * The transport boundary: two ops tables per transport (libfabric's ops per concern).
 * - Data (struct rsk_transport_ops): the semantics of an RDMA reliable-connected queue pair,
 *   so one stream engine (core/stream/) serves every transport: receive buffers are posted in
 *   advance, every SEND fills the peer's next posted buffer in order and carries a 32-bit
 *   immediate, completions are harvested by polling, and a peer that waits can be woken (arm
 *   on our side, kick on the sender's).
 * - Connection management (struct rsk_cm_ops): dial, listen/claim/answer, the endpoint's
 *   event fds, linger, fork and readiness hooks. An entry a transport lacks is NULL (or a
 *   flag is 0) and the caller does without, like libfabric's fi_no_* stubs.
 * Each transport declares its tables in its own header; registry.h picks among them.
 */
#ifndef RSK_TRANSPORT_H
#define RSK_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rdmasock.h"

struct rsk_ep;
struct rsk_cm_ops;

/*
 * Fewest buffers a stream runs with. A reader that sleeps leaves credit-only messages
 * unharvested (they do not wake it); at most two of them can pile up, and with six buffers
 * the writer still keeps a data credit beside the reserved one (see stream/credit.h).
 * Transports refuse peers that offer fewer.
 */
#define RSK_EP_MIN_NBUF 6

enum rsk_wc_op {
	RSK_WC_RECV = 1, /* a message filled rx slot @slot: @len bytes, immediate @imm */
	RSK_WC_SEND = 2, /* a send finished (only when RSK_SEND_SIGNALED was asked for) */
};

struct rsk_wc {
	uint32_t slot;
	uint32_t len;
	uint32_t imm;
	uint8_t op;     /* enum rsk_wc_op */
	int8_t status;  /* 0, or a negative errno: the endpoint is dead from then on */
};

/* post_send flags */
#define RSK_SEND_INLINE 0x1u   /* @buf may be any memory: the transport copies it now */
#define RSK_SEND_SIGNALED 0x2u /* ask for a RSK_WC_SEND completion */

/* kick: what the post that preceded it means for the peer */
#define RSK_WAIT_RX 0x1u   /* a message for the peer: wake it if it shows nothing yet */
#define RSK_WAIT_TX 0x2u   /* credits for the peer: unblock it if it blocked on them */
#define RSK_KICK_FIN 0x4u  /* we sent FIN; show EOF/RDHUP on the peer at once */
#define RSK_KICK_DATA 0x8u /* the message carried data (an edge for a busy reader) */

struct rsk_ready_state;

/* The part of every endpoint the engine may read; transports embed it first. */
struct rsk_ep {
	const struct rsk_transport_ops *ops;
	uint32_t nbuf;     /* receive buffers per direction (= initial credits) */
	uint32_t buf_size; /* bytes per buffer */
	uint32_t max_inline;
	/*
	 * Out-of-band credits: the transport itself shows how many buffers the peer has posted
	 * (tx_room), so returning credits takes no message and no ring slot. Shared memory can
	 * (the peer's posted counter is in the memfd); a transport that cannot leaves it 0 and
	 * the engine returns credits in immediates (credit.h).
	 */
	int oob_credits;
	/*
	 * Receive buffers may be posted back in any order (a verbs receive queue takes any
	 * buffer; a shm ring only in order). Then a message without payload (credit-only, FIN)
	 * returns its buffer at once instead of waiting behind unread data: a peer that never
	 * reads can then not starve our credit updates (the one-way-reader stall).
	 */
	int repost_any;
	/*
	 * Set (atomically) by the caller of cm->on_event only: the endpoint may go quiet, i.e.
	 * take this event and raise no more until ops->arm, because a thread of ours harvests it
	 * itself meanwhile (see ops->arm). Process-local in meaning; 0 everywhere else.
	 */
	int quiet_ok;
};

struct rsk_transport_ops {
	const char *name;
	enum rdmasock_transport id;

	/* Usable on this host now? 0 or -errno (the reason: -ENODEV, -ENOMEM, ...). */
	int (*probe)(void);

	/* Make rx slot @slot (0..nbuf-1, always in ring order) available to the peer. */
	int (*post_recv)(struct rsk_ep *ep, uint32_t slot);
	/* The memory of rx slot @slot (valid while it is not posted). */
	const void *(*recv_buf)(struct rsk_ep *ep, uint32_t slot);
	/*
	 * Where the payload of the next SEND should be written (zero-copy into the peer's slot
	 * for shm, a registered send buffer for verbs). NULL when the send queue is full. The
	 * caller must own a credit.
	 */
	void *(*send_buf)(struct rsk_ep *ep);
	/* SEND @len bytes from @buf (send_buf() memory, or anything with RSK_SEND_INLINE). */
	int (*post_send)(struct rsk_ep *ep, const void *buf, uint32_t len, uint32_t imm,
			 unsigned int flags);
	/* Buffers the peer has posted that we may fill now (oob_credits transports). */
	int (*tx_room)(struct rsk_ep *ep);
	/* Harvest up to @n completions in order. Returns the count or -errno (peer broke rules). */
	int (*poll)(struct rsk_ep *ep, struct rsk_wc *wc, int n);
	/*
	 * The engine holds @len bytes (immediate @imm) in send_buf() memory without posting
	 * them yet (Nagle, cork). A transport whose peer can reach that memory records it, so
	 * a peer that outlives us can still take what our send() already returned for
	 * (cm->peer_died). NULL: nothing would survive us, so the engine never holds bytes
	 * after send() returned for them (no Nagle, cork or MSG_MORE stage: rsk_ep_stage_survives).
	 */
	void (*stage)(struct rsk_ep *ep, uint32_t len, uint32_t imm);
	/* A hint, without a lock or a system call: has a message come that the engine has not
	 * harvested? (A spinning wait asks it before it asks the kernel.) NULL: cannot tell. */
	int (*rx_pending)(struct rsk_ep *ep);

	/*
	 * After posting: do what the post means for the peer's readiness (RSK_WAIT_*,
	 * RSK_KICK_*), i.e. act as the peer's waker. A transport whose peer is woken by its own
	 * side (verbs: the peer's event loop sees the completion) does nothing here.
	 */
	void (*kick)(struct rsk_ep *ep, unsigned int what);
	/*
	 * A transport whose completions raise a kernel event we take ourselves (verbs: the
	 * completion channel) can stop raising it while our own threads poll (cm->on_event
	 * with ep->quiet_ok: "quiet"). @sleep 1: a waiter is about to sleep in the kernel, raise
	 * events again; returns 1 when the endpoint was quiet, so completions may have come
	 * unannounced (the caller harvests them before sleeping), else 0. @sleep 0: is it quiet
	 * (no change)? NULL: events are always raised.
	 */
	int (*arm)(struct rsk_ep *ep, int sleep);
	/* Our own readiness state block, which our waker sees too (ready.h). */
	struct rsk_ready_state *(*ready)(struct rsk_ep *ep);
	/*
	 * Finish wakes the endpoint owes (a kick that needed something it did not have yet);
	 * @app_fd is an fd of our app end, @need says tokens are due there. NULL: never owes.
	 */
	void (*settle)(struct rsk_ep *ep, int app_fd, int need);

	/* We closed the connection for good: the peer's further sends fail (EPIPE). */
	void (*shutdown)(struct rsk_ep *ep);
	/* Did the peer close the connection (not just shut down its sending side)? */
	int (*peer_closed)(struct rsk_ep *ep);
	/*
	 * The last process holding the connection here destroys the endpoint next and touches
	 * nothing it shares with the peer before that: shared memory may be reused (shm's
	 * segment pool). NULL: nothing to do.
	 */
	void (*retire)(struct rsk_ep *ep);
	void (*destroy)(struct rsk_ep *ep);
};

static inline int rsk_ep_post_recv(struct rsk_ep *ep, uint32_t slot)
{
	return ep->ops->post_recv(ep, slot);
}

static inline const void *rsk_ep_recv_buf(struct rsk_ep *ep, uint32_t slot)
{
	return ep->ops->recv_buf(ep, slot);
}

static inline void *rsk_ep_send_buf(struct rsk_ep *ep)
{
	return ep->ops->send_buf(ep);
}

static inline int rsk_ep_post_send(struct rsk_ep *ep, const void *buf, uint32_t len, uint32_t imm,
				   unsigned int flags)
{
	return ep->ops->post_send(ep, buf, len, imm, flags);
}

static inline int rsk_ep_poll(struct rsk_ep *ep, struct rsk_wc *wc, int n)
{
	return ep->ops->poll(ep, wc, n);
}

static inline int rsk_ep_rx_pending(struct rsk_ep *ep)
{
	return ep->ops->rx_pending == NULL || ep->ops->rx_pending(ep);
}

static inline void rsk_ep_stage(struct rsk_ep *ep, uint32_t len, uint32_t imm)
{
	if (ep->ops->stage != NULL)
		ep->ops->stage(ep, len, imm);
}

/*
 * May the engine hold bytes in send_buf() memory after send() returned for them? Only when
 * they outlive our process (ops->stage): over TCP the kernel sends what it held (Nagle, cork)
 * even for a process killed by SIGKILL, so bytes no one could send after our death must not
 * wait in user memory.
 */
static inline int rsk_ep_stage_survives(const struct rsk_ep *ep)
{
	return ep->ops->stage != NULL;
}

static inline void rsk_ep_kick(struct rsk_ep *ep, unsigned int what)
{
	ep->ops->kick(ep, what);
}

/* See ops->arm: 1 when the endpoint was quiet. */
static inline int rsk_ep_arm(struct rsk_ep *ep, int sleep)
{
	return ep->ops->arm != NULL && ep->ops->arm(ep, sleep);
}

static inline struct rsk_ready_state *rsk_ep_ready(struct rsk_ep *ep)
{
	return ep->ops->ready(ep);
}

static inline void rsk_ep_retire(struct rsk_ep *ep)
{
	if (ep->ops->retire != NULL)
		ep->ops->retire(ep);
}

static inline void rsk_ep_destroy(struct rsk_ep *ep)
{
	ep->ops->destroy(ep);
}

/* ---- connection management ---- */

/* The endpoint's event fds (cm->event_fd) report, through cm->on_event: */
#define RSK_EPEV_DATA 0x1u /* completions to harvest (a peer's kick cannot reach us) */
#define RSK_EPEV_GONE 0x2u /* the peer's side of the connection is gone */
#define RSK_EPEV_QUIET 0x4u /* with DATA: the endpoint went quiet (ep->quiet_ok, ops->arm) */
#define RSK_EP_MAX_EVFDS 2

/* Private room a transport keeps in a dial or a claim between its steps. */
#define RSK_CM_PRIV 160

/*
 * A client's setup towards one destination, driven by core/calls/connect.c:
 * dial (make the endpoint) -> the connection's local parts -> offer (tell the peer) -> the
 * kernel connect -> dialed. Any failure before the kernel connect is a fallback (d->why).
 */
struct rsk_dial {
	int fd;                      /* the application's TCP socket, not connected yet */
	const struct sockaddr *dest;
	socklen_t dest_len;
	uint32_t nbuf, buf_size;     /* the geometry we ask for */
	void *ep_mem;                /* cm->ep_size bytes for the endpoint (in the connection) */
	struct rsk_ep *ep;           /* out */
	enum rdmasock_fallback why;  /* out, when a step fails */
	/* in: the TCP connection exists (it moves later, in band: see calls/upgrade.c) */
	int upgrade;
	/* out: this connection cannot be set up before its SYN, but may start on TCP and move */
	int start_tcp;
	/* out (cm->withdraw): the TCP socket's peer as the kernel reports it, read to see that
	 * the handshake is done (peer_len 0: not read) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	unsigned char priv[RSK_CM_PRIV] __attribute__((aligned(8)));
};

/* A server's claim of the accelerated half of an accepted TCP connection. */
struct rsk_claim {
	const struct sockaddr_storage *peer; /* the client's TCP address (the key) */
	/* the accepted connection's own address, when the caller knows it (NULL: the listener's
	 * bound address stands in, exact unless it is a wildcard, whose connections' own
	 * addresses are read from @fd) */
	const struct sockaddr_storage *local;
	/* the accepted connection's socket, -1 none: asked for its own address only once an
	 * offer names its peer (most accepted connections have no offer, and ask nothing) */
	int fd;
	uint32_t nbuf;               /* out: geometry of the offered connection */
	void *ep_mem;                /* in (claim_open): cm->ep_size bytes for the endpoint */
	struct rsk_ep *ep;           /* out */
	enum rdmasock_fallback why;  /* out, when claim finds nothing usable */
	int upgrade;                 /* out: the client's TCP connection carries on until it moves */
	/* out: the accepted connection's own address as the claim proved the offer by it (the
	 * listener's, or asked of @fd), when it knows it exactly; own_len 0 when not */
	struct sockaddr_storage own;
	socklen_t own_len;
	unsigned char priv[RSK_CM_PRIV] __attribute__((aligned(8)));
};

#define RSK_LISTEN_MAX_FDS 2

/* What a listener learns about the process that owns it (cm->listen_note). */
enum rsk_listen_note {
	RSK_LISTEN_INTEREST = 1, /* this process accepts here (accept, or an epoll registration) */
	RSK_LISTEN_FORKED,       /* it forked with the listener open (the parent's side) */
	RSK_LISTEN_REFUSE,       /* it serves its connections in forked children */
	RSK_LISTEN_FORGET,       /* a forked child: the listener is the parent's, do not touch */
	RSK_LISTEN_PAUSE,        /* this process is short of fds: take no new clients for now */
	RSK_LISTEN_RESUME,       /* it has fds again */
	/* Another program may accept here from now on where no library sees it (an exec with
	 * the listener inherited, or the listener passed with SCM_RIGHTS): its accepts would
	 * never claim an offer, so new clients must find no rendezvous, for good. May come
	 * from a vfork child about to exec: the transport writes no memory of the process
	 * (only what the listener's processes share) and takes no lock. */
	RSK_LISTEN_LEAKED,
};

struct rsk_cm_ops {
	/* Endpoint bytes the connection's shared region provides (NULL: the transport allocates). */
	size_t (*ep_size)(void);
	/* Flags. dial_sync: connect() finishes the kernel connect and waits for the peer's first
	 * message before returning (the peer must claim the endpoint before we may use it).
	 * accept_hello: the server sends an empty message once it took the connection.
	 * fork_share: a forked child may share the endpoint (else it stays the parent's).
	 * keeps_ctl: our own event loop wakes our app end, so we keep its ctl end (verbs); else
	 * the peer does (shm: offer and answer hand the ctl end over, and we close ours).
	 * keeps_tcp: the TCP connection stays as a hidden placeholder (its close tells us the
	 * peer died); else it goes once the connection is set up (shm resets it, verbs closes
	 * it: rdma_cm tells a dead peer). No transport keeps it now (one hidden fd each). */
	unsigned int dial_sync : 1, accept_hello : 1, fork_share : 1, keeps_ctl : 1, keeps_tcp : 1;
	/* sends_sync: sends_done() tells when a message reached the peer (verbs); without it a
	 * posted message is in the peer's memory at once (shm). slow_setup: a dial costs far
	 * more than a TCP handshake (rdma_cm round trips, QP and memory registration). */
	unsigned int sends_sync : 1, slow_setup : 1;

	/* Client. dial: 0 or -errno (d->why set). offer: after the local parts exist (@ctl is
	 * our readiness ctl end). dialed: the kernel connect is under way. undial: give up
	 * before the application saw the connection (after dial succeeded). dial_failed: a
	 * dial_sync connection stayed on TCP after all (remember the destination).
	 * withdraw: a non-blocking kernel connect (TCP socket @fd) did not finish at once (a
	 * full backlog, a slow server): take the offer back, so the connection stays TCP and
	 * reports its handshake as the kernel's does. 1: withdrawn (undial follows), 0: the
	 * server took the offer first (go on as dialed). NULL: the connect goes on accelerated.
	 * declined: an upgrade's offer is out (endpoint @ep, dialed) and the server has not
	 * moved: did it decline? A fallback reason (e.g. RDMASOCK_FB_VERSION: another build's
	 * listener; RDMASOCK_FB_COUNT: it did not say why), or -1 not (yet). NULL: it cannot tell (the offer expires instead). */
	int (*dial)(struct rsk_dial *d);
	int (*offer)(struct rsk_dial *d, int ctl);
	int (*withdraw)(struct rsk_dial *d, int fd);
	void (*dialed)(struct rsk_dial *d);
	void (*undial)(struct rsk_dial *d);
	void (*dial_failed)(struct rsk_dial *d);
	int (*declined)(struct rsk_ep *ep);

	/* Server. listen: a listener beside the kernel's, bound like it (*lh); listen_fd: its
	 * event fd @i (0..RSK_LISTEN_MAX_FDS-1) for the event loop (-1: none; it may change
	 * after a note), listen_event: handle what fd @i reported (an upgrade offer is announced
	 * with rsk_transport_upgrade_offer).
	 * claim: 1 found, 0 nothing for this client (cl->why), -errno the client is committed
	 * and cannot be served (drop the TCP connection). claim_open: the endpoint into
	 * cl->ep_mem. answer: after the local parts exist; -EPIPE when the client has gone
	 * already (it may have sent and exited before we accepted: the connection is taken all
	 * the same, as a peer's that died). unclaim: free the claim (@accepted 0: tell the
	 * client no). */
	int (*listen)(const struct sockaddr *bound, int v6only, void **lh);
	int (*listen_fd)(void *lh, int i);
	void (*listen_event)(void *lh, int i);
	int (*listen_note)(void *lh, enum rsk_listen_note note); /* 1: its listen fds changed */
	void (*unlisten)(void *lh);
	int (*claim)(void *lh, struct rsk_claim *cl, int wait_ms);
	int (*claim_open)(struct rsk_claim *cl);
	int (*answer)(struct rsk_claim *cl, int ctl);
	void (*unclaim)(struct rsk_claim *cl, int accepted);

	/* The owner showed its initial readiness (rsk_conn_show_initial): the peer may send it
	 * what only a shown side can take (shm: extra arrival edges). */
	void (*shown)(struct rsk_ep *ep);

	/* Events: fd @i (0..RSK_EP_MAX_EVFDS-1) to watch, or -1; on_event: take what fd @i
	 * reported, returns RSK_EPEV_* bits. */
	int (*event_fd)(struct rsk_ep *ep, int i);
	unsigned int (*on_event)(struct rsk_ep *ep, int i);
	/*
	 * Events from an fd the transport shares between endpoints (verbs: one completion
	 * channel per device, one rdma_cm channel per process) instead of event_fd: the owner
	 * binds event @i to a virtual watch @w (base/evloop.h, 0: none), which the transport
	 * fires from the loop thread, and then on_event(ep, @i) takes it as above. event_wait:
	 * wait up to @ms (outside the loop thread) for the endpoint's events, taking them as
	 * on_event would with quiet_ok 0; returns RSK_EPEV_* bits (GONE stays once seen).
	 */
	void (*event_bind)(struct rsk_ep *ep, int i, uint64_t w);
	unsigned int (*event_wait)(struct rsk_ep *ep, int ms);

	/* Teardown. sends_done: everything posted has left (NULL: nothing to linger for).
	 * fin_sent: our FIN is in the peer's memory (a later close of ours is orderly).
	 * peer_ended: did the peer end in order before it went? (NULL: its FIN tells.)
	 * peer_died: the peer's process went without ending in order (_exit, a signal, a
	 * crash). Its kernel would have closed a TCP socket: with a FIN, or with a RST when data
	 * of ours was left unread there. Hands over what the peer had staged (ops->stage) and
	 * returns 1 when data of ours was unread (a reset), 0 when not (the stream ends as after
	 * a FIN). NULL: the transport cannot look at the peer's side; the stream's credit
	 * ledger decides (rsk_stream_peer_unread: every buffer back, or no data since). */
	int (*sends_done)(struct rsk_ep *ep);
	void (*fin_sent)(struct rsk_ep *ep);
	int (*peer_ended)(struct rsk_ep *ep);
	int (*peer_died)(struct rsk_ep *ep);

	/* fork. prefork: before a child will share the endpoint (fork_share); @app_fd is an fd
	 * of our app end. foreign: the endpoint belongs to another process (fork: the parent's). */
	void (*prefork)(struct rsk_ep *ep, int app_fd);
	int (*foreign)(struct rsk_ep *ep);
	/* exec. ep_fds: the fds the endpoint holds (up to @max into @out), which a process taking
	 * the connection over keeps while it closes everything else (a relay's hand-off before an
	 * exec). Returns how many. NULL: the endpoint cannot be taken over by another process. */
	int (*ep_fds)(struct rsk_ep *ep, int *out, int max);
};

#endif
