/*
 * The transport ops table. Every transport (shm today, verbs next) implements the semantics
 * of an RDMA reliable-connected queue pair, so one stream engine (core/stream.c) serves
 * them all: receive buffers are posted in advance, every SEND fills the peer's next posted
 * buffer in order and carries a 32-bit immediate, completions are harvested by polling,
 * and a peer that waits can be woken (arm on our side, kick on the sender's).
 */
#ifndef RSK_TRANSPORT_H
#define RSK_TRANSPORT_H

#include <stdint.h>
#include <sys/socket.h>

#include "rdmasock.h"

struct rsk_ep;

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

/* arm/kick/disarm: what a sleeping side waits for */
#define RSK_WAIT_RX 0x1u /* a new message in my receive ring */
#define RSK_WAIT_TX 0x2u /* credits came back (the message carried some) */
#define RSK_KICK_FIN 0x4u /* kick only: we sent FIN; show EOF/RDHUP on the peer at once */
#define RSK_KICK_DATA 0x8u /* kick only: the message carried data (edge for a busy reader) */

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

	/* Ask to be woken for @what (RSK_WAIT_*). The caller re-polls afterwards. */
	void (*arm)(struct rsk_ep *ep, unsigned int what);
	/* Withdraw the request; returns the bits that were still armed (nobody kicked us). */
	unsigned int (*disarm)(struct rsk_ep *ep, unsigned int what);
	/* The bits still armed (a kick clears them). */
	unsigned int (*armed)(struct rsk_ep *ep);
	/* After posting: wake the peer for @what if it armed for it. */
	void (*kick)(struct rsk_ep *ep, unsigned int what);
	/*
	 * Wakes delivered to us so far for @what (RSK_WAIT_RX: tokens committed to our app end;
	 * RSK_WAIT_TX: unblocks done). A waker counts before its token is written and after its
	 * unblock is done, so readiness can be kept exact (see conn.c).
	 */
	uint32_t (*wakes)(struct rsk_ep *ep, unsigned int what);
	/* Wake ourselves for @what (we found the event before anyone kicked us). */
	void (*wake_self)(struct rsk_ep *ep, unsigned int what);

	/* We closed the connection for good: the peer's further sends fail (EPIPE). */
	void (*shutdown)(struct rsk_ep *ep);
	/* Did the peer close the connection (not just shut down its sending side)? */
	int (*peer_closed)(struct rsk_ep *ep);
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

static inline void rsk_ep_arm(struct rsk_ep *ep, unsigned int what)
{
	ep->ops->arm(ep, what);
}

static inline unsigned int rsk_ep_disarm(struct rsk_ep *ep, unsigned int what)
{
	return ep->ops->disarm(ep, what);
}

static inline unsigned int rsk_ep_armed(struct rsk_ep *ep)
{
	return ep->ops->armed(ep);
}

static inline void rsk_ep_kick(struct rsk_ep *ep, unsigned int what)
{
	ep->ops->kick(ep, what);
}

static inline uint32_t rsk_ep_wakes(struct rsk_ep *ep, unsigned int what)
{
	return ep->ops->wakes(ep, what);
}

static inline void rsk_ep_wake_self(struct rsk_ep *ep, unsigned int what)
{
	ep->ops->wake_self(ep, what);
}

static inline void rsk_ep_destroy(struct rsk_ep *ep)
{
	ep->ops->destroy(ep);
}

extern const struct rsk_transport_ops rsk_shm_ops;

#endif
