/*
 * The stream engine: a TCP-like byte stream over any transport with RC queue-pair
 * semantics (transport.h). It never blocks and never knows which transport it runs on;
 * blocking, readiness and locking belong to the socket layer (core/sock, core/io).
 */
#ifndef RSK_STREAM_H
#define RSK_STREAM_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "transport/transport.h"

/* Fewest buffers a stream runs with (why: see RSK_EP_MIN_NBUF in transport.h). */
#define RSK_STREAM_MIN_NBUF RSK_EP_MIN_NBUF

struct rsk_rxmsg {
	uint32_t slot;
	uint32_t len;
	uint32_t off; /* bytes of this message already consumed */
};

struct rsk_stream {
	struct rsk_ep *ep;
	uint32_t nbuf, bsize;
	/* credit state (credit.h) */
	uint32_t credits; /* peer buffers we may still fill */
	uint32_t owed;    /* our reposted buffers not yet announced to the peer */
	/* harvested messages not yet consumed, a ring of nbuf in arrival (= slot) order */
	struct rsk_rxmsg *rxq;
	int rxq_owned;
	uint32_t rx_head, rx_count;
	uint64_t rx_bytes; /* unread payload bytes in rxq (FIONREAD) */
	unsigned int fin_rcvd : 1, fin_sent : 1, fin_pending : 1, rst_rcvd : 1, shut_rd : 1,
		shut_wr : 1, err_seen_rx : 1, err_seen_tx : 1, peer_quit : 1;
	/* A data message of ours may still be unread at the peer: set at every data post,
	 * cleared once the peer has given back every buffer (rsk_stream_peer_unread). */
	unsigned int data_out : 1;
	/* Some of what we owe is for data we consumed (rsk_stream_credits_due). */
	unsigned int owed_data : 1;
	/*
	 * Coalescing (Nagle): with TCP_NODELAY off, a write shorter than a buffer while an
	 * earlier message is still unconsumed is staged in the next send buffer (send_buf()
	 * memory, not posted) and later writes join it. It is posted when it fills, when the
	 * peer has consumed everything (our "ACK"), when TCP_NODELAY/TCP_CORK change, before any
	 * control message, and whenever this process waits (rsk_stream_push) -- never later.
	 */
	uint32_t stage_len;                     /* bytes staged, 0 = no stage */
	unsigned int nodelay : 1, cork : 1; /* TCP_NODELAY, TCP_CORK as the application set them */
	/* Stage even where the stage dies with the process (RDMASOCK_COALESCE=always): the
	 * operator chose small-write throughput over a SIGKILLed sender's last bytes. */
	unsigned int stage_volatile : 1;
	int err; /* sticky: -ECONNRESET (peer reset or broke the protocol) */
	/* counters for stats */
	uint64_t bytes_sent, bytes_rcvd, msgs_sent, msgs_rcvd, credit_stalls;
	uint64_t writes_coalesced; /* writes (or pieces) that joined a staged message */
};

/*
 * Bind @st to endpoint @ep (both sides start with ep->nbuf credits). @rxq is room for
 * ep->nbuf queue entries (e.g. in memory shared across fork) or NULL to allocate it.
 * Returns 0 or -ENOMEM.
 */
int rsk_stream_init(struct rsk_stream *st, struct rsk_ep *ep, struct rsk_rxmsg *rxq);
void rsk_stream_fini(struct rsk_stream *st);

/*
 * Harvest completions: queue data, take credits and flags, return credits if half the
 * window is owed. Returns the number of messages harvested, or -errno once the stream is
 * broken (st->err is then set).
 */
int rsk_stream_progress(struct rsk_stream *st);

/*
 * Copy up to the iovec's size into it (MSG_PEEK: without consuming). Returns bytes, 0 at
 * EOF (FIN received and everything read, or SHUT_RD), -EAGAIN when nothing is there yet,
 * -ECONNRESET once reset.
 */
ssize_t rsk_stream_recv(struct rsk_stream *st, const struct iovec *iov, int iovcnt, int flags);

/* rsk_stream_send flags */
#define RSK_STREAM_MORE 0x1u /* MSG_MORE: more data follows at once, stage even if idle */

/*
 * Send as much of the iovec as credits allow (staging a short tail under Nagle, see
 * stage_len). Returns bytes accepted (> 0), -EAGAIN when no credit is free, -EPIPE after
 * shutdown(SHUT_WR), -ECONNRESET after a reset.
 */
ssize_t rsk_stream_send(struct rsk_stream *st, const struct iovec *iov, int iovcnt,
			unsigned int flags);

/* Post the staged message now, if there is one (the caller is about to wait). 0 or -errno. */
int rsk_stream_push(struct rsk_stream *st);

/* TCP_NODELAY / TCP_CORK changed: setting NODELAY or clearing CORK pushes, as in TCP. */
void rsk_stream_set_nodelay(struct rsk_stream *st, int on);
void rsk_stream_set_cork(struct rsk_stream *st, int on);

/* Queue our FIN (sent now if a credit is free, else as soon as one returns). */
int rsk_stream_shutdown_wr(struct rsk_stream *st);

/* An empty message (credits only, maybe none): the server's "I took this connection". */
int rsk_stream_hello(struct rsk_stream *st);

/* Abortive close: tell the peer to reset (best effort). */
void rsk_stream_reset(struct rsk_stream *st);

/* A send or recv returned the stream's error but the caller reports a short count instead:
 * the error is still owed to the next call, as TCP's pending error is. */
void rsk_stream_error_unreported(struct rsk_stream *st);

/* Readiness as TCP defines it. */
int rsk_stream_readable(const struct rsk_stream *st); /* data, EOF or error */
/* A reset, or both FINs gone: TCP's socket is CLOSE (no peer name, no shutdown). */
int rsk_stream_ended(const struct rsk_stream *st);
int rsk_stream_writable(const struct rsk_stream *st); /* a data credit, or error */

/* The peer went without a FIN and left nothing of ours unread: as its kernel would have
 * sent one, the stream ends after what arrived, and our sends fail (EPIPE). */
void rsk_stream_peer_quit(struct rsk_stream *st);

/*
 * Do we owe the peer credits for data we consumed? They are its only proof that we left
 * nothing unread, should we die (rsk_stream_peer_unread), so a reader that found nothing
 * more (recv -> -EAGAIN) has them sent by rsk_stream_settle at its next wait in the library
 * or the monitor's tick, like a stage; an answer sent meanwhile carries them for free.
 * Credits owed for empty messages alone never count: two idle ends would trade
 * credit-only messages for ever.
 */
int rsk_stream_credits_due(const struct rsk_stream *st);

/* Post the stage (rsk_stream_push) and the credits due (rsk_stream_credits_due). */
void rsk_stream_settle(struct rsk_stream *st);

/*
 * The peer went without ending in order, and its transport cannot look at what it left
 * (cm->peer_died NULL): may data of ours still have been unread there? Its kernel would have
 * sent RST then, FIN if not. 0 only when no data message of ours went since the peer last
 * had given back every buffer: a buffer comes back only once its bytes were consumed. Call
 * after harvesting (rsk_stream_progress). A reader returns the credits of data it consumed
 * when it waits (rsk_stream_credits_due); credits a dead reader owed but had not returned
 * yet (killed after its read and before its next wait or tick) count as unread: a reset
 * where the kernel would have sent FIN, never the reverse.
 */
int rsk_stream_peer_unread(const struct rsk_stream *st);

/* Mark the stream reset by the world (peer process died, transport error). */
void rsk_stream_set_error(struct rsk_stream *st, int err);

#endif
