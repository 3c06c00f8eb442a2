/*
 * Fuzz target: the stream engine (core/stream/) over a fake transport whose completions the
 * input writes, i.e. a hostile peer: lengths, immediates (credits, FIN/RST flags, garbage),
 * completion errors, credits returned out of band or in immediates, interleaved with the
 * application's recv/send/shutdown/Nagle calls.
 *
 * The fake transport keeps the promises a real one makes (a completion fills a posted buffer,
 * in ring order when buffers are reposted in order; no more than the buffer size), unless the
 * input asks for "raw" completions, where slot and length are arbitrary too (then only memory
 * safety and the engine's own checks are asserted). Checked otherwise, after every step:
 * - the application reads exactly the bytes the peer sent, in order, once (MSG_PEEK included),
 *   and EOF comes only after all of them, unless the stream was reset;
 * - every byte the engine posts is the application's next unsent byte (nothing lost, doubled
 *   or reordered), and it never posts beyond the peer's posted buffers or the buffer size;
 * - the engine reposts only buffers it holds, in ring order where the transport needs it, and
 *   reads only buffers it holds; its credit and queue counters stay within their bounds.
 */
#include <errno.h>
#include <sys/socket.h>

#include "base/ready.h"
#include "fuzz.h"
#include "stream/credit.h"
#include "stream/stream.h"

#define MAX_NBUF 16
#define MAX_BSIZE 4096
#define MAX_WC 64

struct fake {
	struct rsk_ep base;
	int raw;
	uint8_t *rx[MAX_NBUF]; /* buf_size bytes each, allocated apart: overruns are caught */
	uint8_t tx[MAX_BSIZE];
	int posted[MAX_NBUF];      /* the buffer is the peer's to fill (not the engine's) */
	uint32_t fill_pos, post_pos; /* ring order (repost_any 0) */
	struct rsk_wc q[MAX_WC];
	int nq, poll_err, sq_full, peer_closed;
	uint32_t room;      /* oob credits: peer buffers we may fill */
	uint32_t held;      /* our messages the peer holds (it reposts them later) */
	uint64_t rx_seq;    /* bytes the peer has sent */
	uint64_t tx_seen;   /* bytes the engine posted */
	struct rsk_ready_state rs;
};

static uint8_t seq_rx(uint64_t i)
{
	return (uint8_t)((i ^ (i >> 8) ^ (i >> 17)) * 0x9du + 1);
}

static uint8_t seq_tx(uint64_t i)
{
	return (uint8_t)((i ^ (i >> 9) ^ (i >> 19)) * 0x3bu + 7);
}

#define FAKE(ep) ((struct fake *)(ep))

static int fake_post_recv(struct rsk_ep *ep, uint32_t slot)
{
	struct fake *f = FAKE(ep);

	if (slot >= ep->nbuf || f->posted[slot]) {
		FZ_CHECK(f->raw); /* the engine reposts only buffers it holds */
		return -EINVAL;
	}
	if (!ep->repost_any) {
		FZ_CHECK(f->raw || slot == f->post_pos); /* RC order: heads go back first */
		f->post_pos = (f->post_pos + 1) % ep->nbuf;
	}
	f->posted[slot] = 1;
	return 0;
}

static const void *fake_recv_buf(struct rsk_ep *ep, uint32_t slot)
{
	struct fake *f = FAKE(ep);

	FZ_CHECK(f->raw || (slot < ep->nbuf && !f->posted[slot])); /* only what it holds */
	return f->rx[slot % ep->nbuf];
}

static void *fake_send_buf(struct rsk_ep *ep)
{
	struct fake *f = FAKE(ep);

	if (f->sq_full)
		return NULL;
	if (ep->oob_credits && f->room == 0)
		return NULL; /* as shm: no posted buffer of the peer to write into */
	return f->tx;
}

static int fake_post_send(struct rsk_ep *ep, const void *buf, uint32_t len, uint32_t imm,
			  unsigned int flags)
{
	struct fake *f = FAKE(ep);
	uint32_t i;

	FZ_CHECK(len <= ep->buf_size);
	FZ_CHECK(rsk_imm_valid(imm));
	FZ_CHECK(len == 0 || buf != NULL);
	(void)flags;
	if (f->sq_full)
		return -ENOBUFS;
	if (ep->oob_credits) {
		FZ_CHECK(f->room > 0); /* an RC QP would RNR: the engine broke the credit rule */
		FZ_CHECK(rsk_imm_credits(imm) == 0);
		f->room--;
		f->held++;
	}
	for (i = 0; i < len; i++)
		FZ_CHECK(((const uint8_t *)buf)[i] == seq_tx(f->tx_seen + i));
	f->tx_seen += len;
	return 0;
}

static int fake_tx_room(struct rsk_ep *ep)
{
	return (int)FAKE(ep)->room;
}

static int fake_poll(struct rsk_ep *ep, struct rsk_wc *wc, int n)
{
	struct fake *f = FAKE(ep);
	int k = f->nq < n ? f->nq : n;

	if (f->poll_err)
		return -EPROTO;
	memcpy(wc, f->q, (size_t)k * sizeof(*wc));
	memmove(f->q, f->q + k, (size_t)(f->nq - k) * sizeof(*wc));
	f->nq -= k;
	return k;
}

static void fake_kick(struct rsk_ep *ep, unsigned int what)
{
	(void)ep;
	(void)what;
}

static struct rsk_ready_state *fake_ready(struct rsk_ep *ep)
{
	return &FAKE(ep)->rs;
}

static void fake_nop(struct rsk_ep *ep)
{
	(void)ep;
}

static int fake_peer_closed(struct rsk_ep *ep)
{
	return FAKE(ep)->peer_closed;
}

static const struct rsk_transport_ops fake_ops = {
	.name = "fake",
	.id = RDMASOCK_TRANSPORT_SHM,
	.post_recv = fake_post_recv,
	.recv_buf = fake_recv_buf,
	.send_buf = fake_send_buf,
	.post_send = fake_post_send,
	.tx_room = fake_tx_room,
	.poll = fake_poll,
	.kick = fake_kick,
	.ready = fake_ready,
	.shutdown = fake_nop,
	.peer_closed = fake_peer_closed,
	.destroy = fake_nop,
};

/* The application's side of the check. */
struct app {
	uint64_t rcvd, sent;
	int saw_err, saw_eof;
};

/* A posted buffer the peer may fill next, or -1 (none: a real peer would wait). */
static int peer_slot(struct fake *f, struct fz *in)
{
	uint32_t k, s, start;

	if (!f->base.repost_any)
		return f->posted[f->fill_pos] ? (int)f->fill_pos : -1;
	start = fz_u8(in) % f->base.nbuf;
	for (k = 0; k < f->base.nbuf; k++) {
		s = (start + k) % f->base.nbuf;
		if (f->posted[s])
			return (int)s;
	}
	return -1;
}

static void peer_send(struct fake *f, struct fz *in)
{
	uint8_t how = fz_u8(in);
	uint32_t len = fz_u16(in), imm, i;
	struct rsk_wc wc = {.op = RSK_WC_RECV};
	int slot;

	if (f->nq == MAX_WC)
		return;
	imm = (how & 3) == 0 ? fz_u32(in) : rsk_imm_make(fz_u8(in) % 4, (how >> 2) & 3);
	if (f->raw) {
		wc.slot = fz_u32(in) % (f->base.nbuf + 2);
		wc.len = len % (f->base.buf_size + 2);
	} else {
		slot = peer_slot(f, in);
		if (slot < 0)
			return;
		wc.slot = (uint32_t)slot;
		wc.len = len % (f->base.buf_size + 1);
		f->posted[slot] = 0;
		if (!f->base.repost_any)
			f->fill_pos = (f->fill_pos + 1) % f->base.nbuf;
	}
	wc.imm = imm;
	for (i = 0; i < wc.len && i < f->base.buf_size && wc.slot < f->base.nbuf; i++)
		f->rx[wc.slot][i] = seq_rx(f->rx_seq + i);
	f->rx_seq += wc.len;
	f->q[f->nq++] = wc;
}

static void app_recv(struct rsk_stream *st, struct fake *f, struct app *a, struct fz *in)
{
	static uint8_t buf[3 * MAX_BSIZE];
	uint8_t how = fz_u8(in);
	size_t want = fz_u16(in) % sizeof(buf), split = want / 3, i;
	struct iovec iov[3] = {{buf, split}, {buf + split, 0}, {buf + split, want - split}};
	int peek = how & 1;
	ssize_t n = rsk_stream_recv(st, iov, 3, peek ? MSG_PEEK : 0);

	if (n < 0 && n != -EAGAIN) {
		FZ_CHECK(n == -ECONNRESET);
		a->saw_err = 1;
	}
	if (n == 0 && want > 0) {
		/* EOF only once everything the peer sent was read (or after a reset) */
		FZ_CHECK(f->raw || a->saw_err || st->err || a->rcvd == f->rx_seq);
		a->saw_eof = 1;
	}
	if (n <= 0)
		return;
	FZ_CHECK((size_t)n <= want);
	for (i = 0; !f->raw && i < (size_t)n; i++)
		FZ_CHECK(buf[i] == seq_rx(a->rcvd + i));
	if (!peek)
		a->rcvd += (uint64_t)n;
	FZ_CHECK(f->raw || a->rcvd <= f->rx_seq);
}

static void app_send(struct rsk_stream *st, struct app *a, struct fz *in)
{
	static uint8_t buf[3 * MAX_BSIZE];
	uint8_t how = fz_u8(in);
	size_t len = fz_u16(in) % sizeof(buf), i;
	struct iovec iov[2] = {{buf, len / 2}, {buf + len / 2, len - len / 2}};
	ssize_t n;

	for (i = 0; i < len; i++)
		buf[i] = seq_tx(a->sent + i);
	n = rsk_stream_send(st, iov, 2, (how & 1) ? RSK_STREAM_MORE : 0);
	if (n > 0) {
		FZ_CHECK((size_t)n <= len);
		a->sent += (uint64_t)n;
	} else {
		FZ_CHECK(n == -EAGAIN || n == -EPIPE || n == -ECONNRESET || (n == 0 && len == 0));
	}
}

static void check(const struct rsk_stream *st, const struct fake *f, const struct app *a)
{
	uint64_t bytes = 0;
	uint32_t i, m;

	FZ_CHECK(st->rx_count <= st->nbuf);
	FZ_CHECK(st->credits <= st->nbuf);
	FZ_CHECK(st->stage_len <= st->bsize);
	for (i = 0; i < st->rx_count; i++) {
		m = (st->rx_head + i) % st->nbuf;
		FZ_CHECK(st->rxq[m].off <= st->rxq[m].len);
		FZ_CHECK(f->raw || st->rxq[m].len <= st->bsize);
		bytes += st->rxq[m].len - st->rxq[m].off;
	}
	FZ_CHECK(bytes == st->rx_bytes);
	/* posted bytes are sent bytes; the rest (at most a stage) is still ours */
	FZ_CHECK(f->tx_seen <= a->sent);
	FZ_CHECK(st->err || a->sent - f->tx_seen <= st->stage_len);
}

static void step(struct rsk_stream *st, struct fake *f, struct app *a, struct fz *in)
{
	uint8_t op = fz_u8(in);
	struct rsk_wc wc;
	uint32_t k;

	switch (op % 16) {
	case 0:
	case 1:
	case 2:
		peer_send(f, in);
		break;
	case 3:
	case 4:
		app_recv(st, f, a, in);
		break;
	case 5:
	case 6:
		app_send(st, a, in);
		break;
	case 7:
		(void)rsk_stream_progress(st);
		break;
	case 8: /* the peer reposts some of our messages (out-of-band credits) */
		k = fz_u8(in) % (f->held + 1);
		f->room += f->raw ? fz_u8(in) % 3 : k;
		f->held -= k;
		break;
	case 9:
		if (f->nq < MAX_WC) {
			wc = (struct rsk_wc){.op = (uint8_t)(fz_u8(in) % 3), .status = 0};
			if (fz_u8(in) & 1)
				wc.status = -ECONNRESET;
			f->q[f->nq++] = wc;
		}
		break;
	case 10:
		(void)rsk_stream_shutdown_wr(st);
		break;
	case 11:
		(void)rsk_stream_push(st);
		break;
	case 12:
		k = fz_u8(in);
		if (k & 1)
			rsk_stream_set_nodelay(st, (k >> 1) & 1);
		else
			rsk_stream_set_cork(st, (k >> 1) & 1);
		break;
	case 13:
		k = fz_u8(in);
		f->sq_full = k & 1;
		f->peer_closed |= (k >> 1) & (k >> 2) & 1;
		f->poll_err |= (k >> 3) & (k >> 4) & (k >> 5) & 1;
		break;
	case 14:
		(void)rsk_stream_readable(st);
		(void)rsk_stream_writable(st);
		if (fz_u8(in) == 0xff)
			rsk_stream_reset(st);
		break;
	default:
		(void)rsk_stream_hello(st);
		break;
	}
	check(st, f, a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fake f;
	struct fz in = {data, size};
	int ok = 1;
	uint8_t mode = fz_u8(&in);
	struct rsk_stream st;
	struct app a = {0};
	uint32_t i;
	int steps;

	memset(&f, 0, sizeof(f));
	f.base.ops = &fake_ops;
	f.base.nbuf = RSK_STREAM_MIN_NBUF + fz_u8(&in) % (MAX_NBUF - RSK_STREAM_MIN_NBUF + 1);
	f.base.buf_size = 64u << (fz_u8(&in) % 7); /* 64 .. 4096 */
	f.base.max_inline = f.base.buf_size;
	f.base.oob_credits = mode & 1;
	f.base.repost_any = (mode >> 1) & 1;
	f.raw = (mode & 0xf0) == 0xf0;
	f.room = f.base.nbuf;
	for (i = 0; i < f.base.nbuf; i++) {
		f.posted[i] = 1;
		ok &= (f.rx[i] = malloc(f.base.buf_size)) != NULL;
	}
	if (ok && rsk_stream_init(&st, &f.base, NULL) == 0) {
		st.nodelay = (mode >> 2) & 1;
		for (steps = 0; steps < 4096 && !fz_done(&in); steps++)
			step(&st, &f, &a, &in);
		rsk_stream_fini(&st);
	}
	for (i = 0; i < f.base.nbuf; i++)
		free(f.rx[i]);
	return 0;
}
