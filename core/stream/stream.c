/*
 * The stream engine (see stream.h): receive path (harvest, queue, copy out, repost), send
 * path (segment into buffer-sized SENDs, spend credits, piggyback returned credits), and
 * the protocol's control messages (credit-only, FIN, RST). Everything from the peer is
 * validated: a malformed message resets this stream and nothing else.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/compiler.h"
#include "base/stats.h"
#include "credit.h"
#include "stream.h"

#define RSK_POLL_BATCH 16

int rsk_stream_init(struct rsk_stream *st, struct rsk_ep *ep, struct rsk_rxmsg *rxq)
{
	if (ep->nbuf < RSK_STREAM_MIN_NBUF)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->rxq_owned = rxq == NULL;
	st->rxq = rxq != NULL ? rxq : calloc(ep->nbuf, sizeof(*st->rxq));
	if (st->rxq == NULL)
		return -ENOMEM;
	st->ep = ep;
	st->nbuf = ep->nbuf;
	st->bsize = ep->buf_size;
	st->credits = ep->nbuf; /* both sides start with every buffer posted */
	return 0;
}

void rsk_stream_fini(struct rsk_stream *st)
{
	if (st->rxq_owned)
		free(st->rxq);
	st->rxq = NULL;
}

/* Peer buffers we may fill now: the transport's count, or our credit ledger. */
static uint32_t rsk_stream_room(const struct rsk_stream *st)
{
	int room;

	if (!st->ep->oob_credits)
		return st->credits;
	room = st->ep->ops->tx_room(st->ep);
	return room > 0 ? (uint32_t)room : 0;
}

/* Peer buffers free for a new message: the room less the one a stage holds. */
static uint32_t rsk_stream_free(const struct rsk_stream *st)
{
	uint32_t room = rsk_stream_room(st);

	if (st->stage_len == 0)
		return room;
	return room > 0 ? room - 1 : 0;
}

/*
 * Peer buffers always kept back from data: for a FIN or RST (close() with data in flight
 * must still end the stream in order), and, with credits in immediates, for credit updates.
 */
#define RSK_STREAM_RESERVED 1

/* May a new data message go? */
static int rsk_stream_can_send_data(const struct rsk_stream *st)
{
	return rsk_stream_free(st) > RSK_STREAM_RESERVED;
}

/* Would one more message (a credit update) take the last buffer data may use? */
static int rsk_stream_takes_last_data_buffer(const struct rsk_stream *st)
{
	return rsk_stream_free(st) == RSK_STREAM_RESERVED + 1;
}

/* Has the peer still to consume (and repost) a message of ours? Nagle's unACKed data. */
static int rsk_stream_in_flight(const struct rsk_stream *st)
{
	return rsk_stream_room(st) < st->nbuf;
}

/* Should a short message wait in the stage rather than go now? Never where a stage would
 * die with us (rsk_ep_stage_survives): a SIGKILL must not take bytes send() returned for,
 * unless the operator chose otherwise (stage_volatile). */
static int rsk_stream_hold(const struct rsk_stream *st, unsigned int flags)
{
	if (!st->stage_volatile && !rsk_ep_stage_survives(st->ep))
		return 0;
	return st->cork || (flags & RSK_STREAM_MORE) || (!st->nodelay && rsk_stream_in_flight(st));
}

void rsk_stream_set_error(struct rsk_stream *st, int err)
{
	if (st->err == 0)
		st->err = err;
}

/* A message carrying @owed credits went: account for it (counted here, whoever posted it:
 * a stage may be posted by a wait or by the monitor's tick). */
static void rsk_stream_posted(struct rsk_stream *st, uint32_t owed)
{
	st->owed -= owed;
	if (st->owed == 0)
		st->owed_data = 0;
	if (!st->ep->oob_credits)
		st->credits--;
	st->msgs_sent++;
	rsk_counter_add(&rsk_stats.messages_sent[st->ep->ops->id], 1);
}

/* Send a message without payload carrying what we owe and @flags (FIN/RST/credit-only);
 * @signaled asks for its completion also without flags (a hello whose delivery a move
 * waits for). */
static int rsk_stream_control_sig(struct rsk_stream *st, uint32_t flags, int signaled)
{
	uint32_t owed;
	int rc;

	/* A staged message holds the next buffer and its data goes before any control. */
	if ((rc = rsk_stream_push(st)) < 0)
		return rc;
	owed = st->ep->oob_credits ? 0 : st->owed;
	if (rsk_stream_room(st) == 0)
		return -EAGAIN;
	/* FIN and RST ask for a completion: it tells a lingering close that all went. */
	rc = rsk_ep_post_send(st->ep, NULL, 0, rsk_imm_make(owed, flags),
			      RSK_SEND_INLINE | (flags || signaled ? RSK_SEND_SIGNALED : 0));
	if (rc < 0)
		return rc;
	rsk_stream_posted(st, owed);
	if (!flags && !signaled)
		rsk_counter_add(&rsk_stats.credit_messages, 1);
	/* FIN and RST make the peer readable; a credit-only message only unblocks a sender (a
	 * reader woken for no data would see "readable" and then block in recv). */
	rsk_ep_kick(st->ep, (flags ? RSK_WAIT_RX : 0) | (owed ? RSK_WAIT_TX : 0) |
				    ((flags & RSK_IMM_FIN) ? RSK_KICK_FIN : 0));
	return 0;
}

static int rsk_stream_control(struct rsk_stream *st, uint32_t flags)
{
	return rsk_stream_control_sig(st, flags, 0);
}

/* Pending FIN first (it also returns credits), then a credit-only message if due. */
static void rsk_stream_flush(struct rsk_stream *st)
{
	if (st->err)
		return;
	if (st->fin_pending && rsk_stream_room(st) > 0 && rsk_stream_control(st, RSK_IMM_FIN) == 0) {
		st->fin_pending = 0;
		st->fin_sent = 1;
		return;
	}
	if (!st->ep->oob_credits && rsk_credit_should_return(st->owed, st->nbuf, st->credits))
		(void)rsk_stream_control(st, 0);
}

/* Repost the head buffer: its bytes are consumed (RC order: heads go back first). */
static int rsk_stream_pop(struct rsk_stream *st)
{
	struct rsk_rxmsg *m = &st->rxq[st->rx_head];
	/* A reset or gone peer takes no buffers back, but what arrived is still read. */
	int gone = st->err || st->peer_quit, rc;

	if (!gone && (rc = rsk_ep_post_recv(st->ep, m->slot)) < 0)
		return rc;
	st->rx_head = (st->rx_head + 1) % st->nbuf;
	st->rx_count--;
	if (gone)
		return 0;
	if (st->ep->oob_credits) {
		rsk_ep_kick(st->ep, RSK_WAIT_TX); /* the repost is the credit: wake a blocked writer */
		return 0;
	}
	st->owed++;
	if (m->len > 0)
		st->owed_data = 1;
	return 0;
}

/* Messages without payload (credit-only, FIN) are done as soon as they reach the head. */
static int rsk_stream_pop_empty(struct rsk_stream *st)
{
	int rc;

	while (st->rx_count > 0 && st->rxq[st->rx_head].len == st->rxq[st->rx_head].off)
		if ((rc = rsk_stream_pop(st)) < 0)
			return rc;
	return 0;
}

/* An empty message on a transport that reposts in any order: its buffer goes back now. */
static int rsk_stream_take_empty(struct rsk_stream *st, uint32_t slot, uint32_t flags)
{
	int rc = rsk_ep_post_recv(st->ep, slot);

	if (rc < 0)
		return rc;
	st->msgs_rcvd++;
	rsk_counter_add(&rsk_stats.messages_received[st->ep->ops->id], 1);
	if (st->ep->oob_credits)
		rsk_ep_kick(st->ep, RSK_WAIT_TX);
	else
		st->owed++;
	if (flags & RSK_IMM_FIN)
		st->fin_rcvd = 1;
	return 0;
}

static int rsk_stream_take(struct rsk_stream *st, const struct rsk_wc *wc)
{
	uint32_t credits, flags, tail;

	if (wc->status != 0)
		return -ECONNRESET;
	if (wc->op != RSK_WC_RECV)
		return 0;
	/* Slot and length come from the transport, which checks them (shm) or has the device
	 * bound them (verbs); checked again here because the copy out trusts them. */
	if (!rsk_imm_valid(wc->imm) || st->rx_count >= st->nbuf ||
	    (st->fin_rcvd && wc->len > 0) || wc->slot >= st->nbuf || wc->len > st->bsize)
		return -EPROTO;
	credits = rsk_imm_credits(wc->imm);
	flags = rsk_imm_flags(wc->imm);
	if (st->ep->oob_credits ? credits != 0 : credits > st->nbuf - st->credits)
		return -EPROTO; /* more credits than buffers exist (or any, out of band): a lie */
	st->credits += credits;
	if (wc->len == 0 && st->ep->repost_any && !(flags & RSK_IMM_RST))
		return rsk_stream_take_empty(st, wc->slot, flags);
	tail = (st->rx_head + st->rx_count) % st->nbuf;
	st->rxq[tail].slot = wc->slot;
	st->rxq[tail].len = wc->len;
	st->rxq[tail].off = 0;
	st->rx_count++;
	st->rx_bytes += wc->len;
	st->msgs_rcvd++;
	rsk_counter_add(&rsk_stats.messages_received[st->ep->ops->id], 1);
	if (flags & RSK_IMM_FIN)
		st->fin_rcvd = 1;
	if (flags & RSK_IMM_RST) {
		st->rst_rcvd = 1;
		return -ECONNRESET;
	}
	return 0;
}

int rsk_stream_progress(struct rsk_stream *st)
{
	struct rsk_wc wc[RSK_POLL_BATCH];
	int n, i, rc, total = 0;

	if (st->err)
		return st->err;
	do {
		n = rsk_ep_poll(st->ep, wc, RSK_POLL_BATCH);
		if (n < 0) {
			rsk_stream_set_error(st, -ECONNRESET);
			return st->err;
		}
		for (i = 0; i < n; i++) {
			rc = rsk_stream_take(st, &wc[i]);
			if (rc < 0) {
				rsk_stream_set_error(st, -ECONNRESET);
				return st->err;
			}
		}
		total += n;
	} while (n == RSK_POLL_BATCH);
	if (rsk_stream_pop_empty(st) < 0) {
		rsk_stream_set_error(st, -ECONNRESET);
		return st->err;
	}
	if (!rsk_stream_in_flight(st))
		st->data_out = 0; /* every buffer back: all our data was consumed */
	if (st->stage_len && !rsk_stream_hold(st, 0))
		(void)rsk_stream_push(st); /* the peer consumed everything: Nagle's ACK came */
	rsk_stream_flush(st);
	return total;
}

/* Copy from the queued messages into @iov; with @consume, repost drained buffers. */
static size_t rsk_stream_copy_out(struct rsk_stream *st, const struct iovec *iov, int iovcnt,
				  int consume)
{
	uint32_t idx = st->rx_head, left = st->rx_count, n;
	uint32_t off = left ? st->rxq[idx].off : 0;
	size_t done = 0, ioff = 0;
	struct rsk_rxmsg *m;
	int v = 0;

	while (left > 0 && v < iovcnt) {
		m = &st->rxq[idx];
		n = m->len - off;
		if ((size_t)n > iov[v].iov_len - ioff)
			n = (uint32_t)(iov[v].iov_len - ioff);
		if (n > 0)
			memcpy((char *)iov[v].iov_base + ioff,
			       (const char *)rsk_ep_recv_buf(st->ep, m->slot) + off, n);
		done += n;
		ioff += n;
		off += n;
		if (consume)
			m->off = off;
		if (ioff == iov[v].iov_len) {
			v++;
			ioff = 0;
		}
		if (off < m->len)
			continue;
		idx = (idx + 1) % st->nbuf;
		left--;
		off = left ? st->rxq[idx].off : 0;
		if (consume && rsk_stream_pop(st) < 0)
			break;
	}
	if (consume)
		st->rx_bytes -= done;
	return done;
}

ssize_t rsk_stream_recv(struct rsk_stream *st, const struct iovec *iov, int iovcnt, int flags)
{
	size_t n;
	int err;

	(void)rsk_stream_progress(st);
	/* What arrived before a reset is read first, as from TCP's receive queue; after our
	 * shutdown(SHUT_RD) too: Linux's only ends the wait for more (0 once none is there). */
	n = rsk_stream_copy_out(st, iov, iovcnt, !(flags & MSG_PEEK));
	if (n > 0) {
		st->bytes_rcvd += (flags & MSG_PEEK) ? 0 : n;
		(void)rsk_stream_pop_empty(st);
		rsk_stream_flush(st);
		return (ssize_t)n;
	}
	if (st->err && !st->err_seen_rx) {
		/* TCP's one pending error, reported once to whichever call comes: then EOF here
		 * and EPIPE for a send */
		st->err_seen_rx = st->err_seen_tx = 1;
		err = st->err;
		return err;
	}
	if (st->err || st->shut_rd)
		return 0;
	if (st->fin_rcvd && st->rx_bytes == 0)
		return 0;
	(void)rsk_stream_push(st); /* a reader about to wait must not sit on our own data */
	return -EAGAIN;
}

/* Gather @len bytes starting at (*v, *voff) of @iov into @dst, advancing the cursor. */
static void rsk_iov_gather(char *dst, const struct iovec *iov, int *v, size_t *voff, size_t len)
{
	size_t n;

	while (len > 0) {
		n = iov[*v].iov_len - *voff;
		if (n > len)
			n = len;
		if (n > 0) /* an empty piece may have iov_base NULL */
			memcpy(dst, (const char *)iov[*v].iov_base + *voff, n);
		dst += n;
		len -= n;
		*voff += n;
		if (*voff == iov[*v].iov_len) {
			(*v)++;
			*voff = 0;
		}
	}
}

static size_t rsk_iov_total(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;
	int i;

	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

/* Tell the transport what the stage holds: send() returned for it, so it must outlive us. */
static void rsk_stream_note_stage(struct rsk_stream *st)
{
	rsk_ep_stage(st->ep, st->stage_len, rsk_imm_make(st->ep->oob_credits ? 0 : st->owed, 0));
}

/* Post @len bytes of send_buf() memory @buf as one data message. 0 or -errno. */
static int rsk_stream_post_data(struct rsk_stream *st, void *buf, uint32_t len)
{
	uint32_t owed = st->ep->oob_credits ? 0 : st->owed;
	int rc = rsk_ep_post_send(st->ep, buf, len, rsk_imm_make(owed, 0), 0);

	if (rc < 0) {
		rsk_stream_set_error(st, -ECONNRESET);
		return rc;
	}
	rsk_stream_posted(st, owed);
	st->data_out = 1;
	rsk_ep_kick(st->ep, RSK_WAIT_RX | RSK_KICK_DATA | (owed ? RSK_WAIT_TX : 0));
	return 0;
}

int rsk_stream_push(struct rsk_stream *st)
{
	uint32_t len = st->stage_len;
	void *buf;

	if (len == 0)
		return 0;
	st->stage_len = 0;
	if (st->err)
		return st->err; /* a reset stream drops what it had not sent, as TCP does */
	buf = rsk_ep_send_buf(st->ep); /* the same memory as when staged: nothing posted since */
	if (buf == NULL) {
		rsk_stream_set_error(st, -ECONNRESET);
		return -ECONNRESET;
	}
	return rsk_stream_post_data(st, buf, len);
}

/* Append to the staged message; post it once full. Returns the bytes taken. */
static size_t rsk_stream_append(struct rsk_stream *st, const struct iovec *iov, int *v,
				size_t *voff, size_t left)
{
	size_t chunk = st->bsize - st->stage_len;
	char *buf = rsk_ep_send_buf(st->ep);

	if (buf == NULL)
		return 0;
	if (chunk > left)
		chunk = left;
	rsk_iov_gather(buf + st->stage_len, iov, v, voff, chunk);
	st->stage_len += (uint32_t)chunk;
	st->writes_coalesced++;
	rsk_counter_add(&rsk_stats.writes_coalesced, 1);
	if (st->stage_len == st->bsize)
		(void)rsk_stream_push(st);
	else
		rsk_stream_note_stage(st);
	return chunk;
}

/* Fill one new message from the iovec: post it, or stage it if short and Nagle holds it. */
static ssize_t rsk_stream_fill(struct rsk_stream *st, const struct iovec *iov, int *v,
			       size_t *voff, size_t left, unsigned int flags)
{
	size_t chunk = left < st->bsize ? left : st->bsize;
	int hold = chunk < st->bsize && rsk_stream_hold(st, flags);
	void *buf;
	int rc;

	buf = rsk_ep_send_buf(st->ep);
	if (buf == NULL) {
		/* A full send queue, or a transport that caught the peer lying: poll says. */
		(void)rsk_stream_progress(st);
		return 0;
	}
	rsk_iov_gather(buf, iov, v, voff, chunk);
	if (hold) {
		st->stage_len = (uint32_t)chunk;
		rsk_stream_note_stage(st);
		return (ssize_t)chunk;
	}
	rc = rsk_stream_post_data(st, buf, (uint32_t)chunk);
	return rc < 0 ? rc : (ssize_t)chunk;
}

ssize_t rsk_stream_send(struct rsk_stream *st, const struct iovec *iov, int iovcnt,
			unsigned int flags)
{
	size_t left = rsk_iov_total(iov, iovcnt), sent = 0, voff = 0, n;
	ssize_t k;
	int v = 0;

	if (st->shut_wr || st->fin_sent || st->fin_pending)
		return -EPIPE;
	(void)rsk_stream_progress(st);
	if (st->err) {
		if (st->err_seen_tx)
			return -EPIPE; /* TCP: the reset once, then EPIPE */
		st->err_seen_tx = st->err_seen_rx = 1; /* (then a recv's EOF) */
		return st->err;
	}
	if (st->peer_quit || st->ep->ops->peer_closed(st->ep))
		return -EPIPE; /* TCP would answer our data with RST */
	while (v < iovcnt && iov[v].iov_len == 0)
		v++;
	while (left > 0 && !st->err) {
		if (st->stage_len) {
			n = rsk_stream_append(st, iov, &v, &voff, left);
			if (n == 0)
				break;
			sent += n;
			left -= n;
			continue;
		}
		if (!rsk_stream_can_send_data(st)) {
			st->credit_stalls++;
			break;
		}
		k = rsk_stream_fill(st, iov, &v, &voff, left, flags);
		if (k <= 0)
			break;
		sent += (size_t)k;
		left -= (size_t)k;
	}
	if (left > 0)
		(void)rsk_stream_push(st); /* a writer that must wait shows the peer what it has */
	st->bytes_sent += sent;
	if (sent > 0)
		return (ssize_t)sent;
	return st->err ? st->err : -EAGAIN;
}

void rsk_stream_set_nodelay(struct rsk_stream *st, int on)
{
	st->nodelay = on != 0;
	if (on)
		(void)rsk_stream_push(st);
}

void rsk_stream_set_cork(struct rsk_stream *st, int on)
{
	st->cork = on != 0;
	if (!on && !rsk_stream_hold(st, 0))
		(void)rsk_stream_push(st);
}

int rsk_stream_shutdown_wr(struct rsk_stream *st)
{
	if (st->fin_sent || st->fin_pending)
		return 0;
	st->shut_wr = 1;
	st->fin_pending = 1;
	(void)rsk_stream_progress(st);
	rsk_stream_flush(st);
	return 0;
}

int rsk_stream_hello(struct rsk_stream *st)
{
	return rsk_stream_control_sig(st, 0, 1); /* its completion says it arrived */
}

void rsk_stream_reset(struct rsk_stream *st)
{
	st->stage_len = 0; /* abortive: what was not sent is discarded */
	if (!st->err)
		(void)rsk_stream_control(st, RSK_IMM_RST);
	rsk_stream_set_error(st, -ECONNRESET);
}

void rsk_stream_peer_quit(struct rsk_stream *st)
{
	st->fin_rcvd = 1;
	st->peer_quit = 1;
	st->stage_len = 0; /* nobody will read it */
}

int rsk_stream_credits_due(const struct rsk_stream *st)
{
	return !st->ep->oob_credits && st->owed_data && st->owed > 0 && !st->err;
}

void rsk_stream_settle(struct rsk_stream *st)
{
	(void)rsk_stream_push(st);
	/* Not when the message would take our last data credit: callers (the monitor's tick)
	 * sync no readiness, and writable() would turn false unseen. */
	if (rsk_stream_credits_due(st) && !rsk_stream_takes_last_data_buffer(st))
		(void)rsk_stream_control(st, 0);
}

int rsk_stream_peer_unread(const struct rsk_stream *st)
{
	return st->data_out && rsk_stream_in_flight(st);
}

void rsk_stream_error_unreported(struct rsk_stream *st)
{
	st->err_seen_rx = st->err_seen_tx = 0;
}

int rsk_stream_ended(const struct rsk_stream *st)
{
	return st->err || (st->fin_rcvd && st->fin_sent);
}

int rsk_stream_readable(const struct rsk_stream *st)
{
	return st->rx_bytes > 0 || st->fin_rcvd || st->err || st->shut_rd;
}

int rsk_stream_writable(const struct rsk_stream *st)
{
	return rsk_stream_can_send_data(st) || st->err || st->shut_wr;
}
