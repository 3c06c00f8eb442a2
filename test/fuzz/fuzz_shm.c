/*
 * Fuzz target: the shared-memory ring consumer (core/transport/shm.c) against a hostile peer
 * that writes the shared segment. The input first builds the memfd -- a well-formed one
 * (rsk_shm_create), or a hand-made file with any header, size and seals -- and opens it as
 * either side (rsk_shm_open: header validation and rsk_shm_build). Then it interleaves the
 * peer's writes (any 32-bit word of the control page: counters, descriptors, readiness
 * words, flags, header; or honest-looking messages and reposts) with our side's work, either
 * through the stream engine (recv/send/progress/shutdown) or on the ops table directly
 * (poll, post_recv, tx_room, send_buf/post_send, kick).
 * Checked: a file rsk_shm_open accepts is one it can map whole with a valid geometry;
 * completions stay inside our validated geometry; tx_room never exceeds it; the stream's
 * counters stay consistent; nothing reads or writes outside the mapping (ASan, SIGBUS).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "stream/credit.h"
#include "stream/stream.h"
#include "transport/shm.h"

#define MAX_FILE (64u << 20)

/* A hand-made memfd: header fields, size and seals from the input. -1 if it cannot be made. */
static int hostile_file(struct fz *in)
{
	uint8_t how = fz_u8(in);
	uint32_t hdr[4], nbuf, bsize;
	int32_t delta = (int16_t)fz_u16(in);
	size_t size;
	int fd, seals = 0;

	nbuf = (how & 1) ? fz_u32(in) : 2u + fz_u8(in) % 31u;
	bsize = (how & 2) ? fz_u32(in) : 64u << (fz_u8(in) % 7);
	hdr[0] = (how & 4) ? fz_u32(in) : RSK_SHM_MAGIC;
	hdr[1] = (how & 8) ? fz_u32(in) : RSK_SHM_VERSION;
	hdr[2] = nbuf;
	hdr[3] = bsize;
	size = rsk_shm_size(nbuf, bsize);
	if (size == 0 || (how & 16))
		size = (size_t)fz_u32(in) % (MAX_FILE + 1);
	else if ((int64_t)size + delta >= 0)
		size = (size_t)((int64_t)size + delta);
	if (size > MAX_FILE)
		return -1;
	seals |= (how & 32) ? 0 : F_SEAL_SHRINK;
	seals |= (how & 64) ? F_SEAL_GROW | F_SEAL_SEAL : 0;
	seals |= (how & 128) && (fz_u8(in) & 1) ? F_SEAL_WRITE : 0;
	fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    (size >= sizeof(hdr) && pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) ||
	    (seals && fcntl(fd, F_ADD_SEALS, seals) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

struct peer {
	uint8_t *map; /* the peer's own view of the file */
	size_t len;
	struct rsk_shm_debug d; /* the shared words, through our mapping */
	uint32_t nbuf, bsize;
};

/* The peer writes a word anywhere in the control area (first pages of the file). */
static void peer_poke(struct peer *p, struct fz *in)
{
	size_t area = p->len < 32768 ? p->len : 32768, off = ((size_t)fz_u16(in) * 4) % area;
	uint32_t v = fz_u32(in);

	off &= ~(size_t)3;
	if (off + 4 <= p->len)
		memcpy(p->map + off, &v, 4);
}

/* An honest-looking message from the peer into our rx ring (or a lie in its counters). */
static void peer_send(struct peer *p, struct fz *in)
{
	uint8_t how = fz_u8(in);
	uint32_t filled = *p->d.rx_filled, slot = filled % p->nbuf, len = fz_u16(in);
	volatile uint32_t *desc = p->d.rx_desc_len + 2 * (size_t)slot;

	desc[0] = (how & 1) ? fz_u32(in) : len % (p->bsize + 1);
	desc[1] = (how & 2) ? fz_u32(in) : rsk_imm_make(fz_u8(in) % 2, (how >> 2) & 3);
	*p->d.rx_filled = (how & 0x10) ? fz_u32(in) : filled + 1;
}

static void peer_repost(struct peer *p, struct fz *in)
{
	uint8_t k = fz_u8(in);

	*p->d.tx_posted = (k & 0x80) ? fz_u32(in) : *p->d.tx_posted + k % 4;
}

static void check_wc(const struct rsk_ep *ep, const struct rsk_wc *wc, int n, int max)
{
	int i;

	FZ_CHECK(n <= max);
	for (i = 0; i < n; i++) {
		FZ_CHECK(wc[i].op == RSK_WC_RECV);
		FZ_CHECK(wc[i].slot < ep->nbuf);
		FZ_CHECK(wc[i].len <= ep->buf_size);
	}
}

static void ops_step(struct rsk_ep *ep, uint8_t op, struct fz *in)
{
	static uint8_t buf[4096];
	struct rsk_wc wc[8];
	uint32_t len;
	void *sb;
	int n, room;

	switch (op % 6) {
	case 0:
		n = rsk_ep_poll(ep, wc, 1 + fz_u8(in) % 8);
		if (n > 0)
			check_wc(ep, wc, n, 8);
		break;
	case 1:
		(void)rsk_ep_post_recv(ep, fz_u16(in) % (ep->nbuf + 1));
		break;
	case 2:
		room = ep->ops->tx_room(ep);
		FZ_CHECK(room == -EPROTO || (room >= 0 && (uint32_t)room <= ep->nbuf));
		break;
	case 3:
		sb = rsk_ep_send_buf(ep);
		len = fz_u16(in) % (ep->buf_size + 2);
		if (sb == NULL && len > sizeof(buf))
			len = sizeof(buf);
		if (sb != NULL && len <= ep->buf_size)
			memset(sb, 0x5a, len);
		(void)rsk_ep_post_send(ep, sb != NULL ? sb : buf, len, fz_u32(in),
				       sb != NULL ? 0 : RSK_SEND_INLINE);
		break;
	case 4:
		rsk_ep_kick(ep, fz_u8(in) & 0xf);
		break;
	default:
		(void)ep->ops->peer_closed(ep);
		break;
	}
}

static void stream_step(struct rsk_stream *st, uint8_t op, struct fz *in)
{
	static uint8_t buf[8192];
	struct iovec iov = {buf, 0};
	ssize_t n;

	switch (op % 6) {
	case 0:
		iov.iov_len = fz_u16(in) % sizeof(buf);
		n = rsk_stream_recv(st, &iov, 1, (fz_u8(in) & 1) ? MSG_PEEK : 0);
		FZ_CHECK(n <= (ssize_t)iov.iov_len);
		break;
	case 1:
		iov.iov_len = fz_u16(in) % sizeof(buf);
		memset(buf, 0xa5, iov.iov_len);
		n = rsk_stream_send(st, &iov, 1, 0);
		FZ_CHECK(n <= (ssize_t)iov.iov_len);
		break;
	case 2:
		(void)rsk_stream_progress(st);
		break;
	case 3:
		(void)rsk_stream_shutdown_wr(st);
		break;
	case 4:
		(void)rsk_stream_push(st);
		break;
	default:
		(void)rsk_stream_readable(st);
		(void)rsk_stream_writable(st);
		break;
	}
	FZ_CHECK(st->rx_count <= st->nbuf && st->credits <= st->nbuf);
}

static void run(struct rsk_ep *ep, struct peer *p, int use_stream, struct fz *in)
{
	struct rsk_stream st;
	uint8_t op;
	int steps, have_st = use_stream && rsk_stream_init(&st, ep, NULL) == 0;

	for (steps = 0; steps < 2048 && !fz_done(in); steps++) {
		op = fz_u8(in);
		if (op < 0x30)
			peer_poke(p, in);
		else if (op < 0x60)
			peer_send(p, in);
		else if (op < 0x70)
			peer_repost(p, in);
		else if (have_st)
			stream_step(&st, op, in);
		else
			ops_step(ep, op, in);
	}
	if (have_st)
		rsk_stream_fini(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz in = {data, size};
	uint8_t mode = fz_u8(&in);
	enum rsk_shm_side side = (mode & 2) ? RSK_SHM_SERVER : RSK_SHM_CLIENT;
	struct rsk_ep *ep = NULL;
	struct peer p = {0};
	struct stat st;
	int fd, sv[2], rc;

	if (mode & 1)
		fd = hostile_file(&in);
	else
		fd = rsk_shm_create(2 + fz_u8(&in) % 15, 64u << (fz_u8(&in) % 7));
	if (fd < 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
		close(fd);
		return 0;
	}
	rc = rsk_shm_open(fd, side, (mode & 4) ? sv[1] : -1, NULL, &ep);
	if (!(mode & 4) || rc < 0)
		close(sv[1]); /* else the endpoint owns it (its kicks write there) */
	if (rc == 0) {
		FZ_CHECK(ep->nbuf >= 2 && ep->nbuf <= RSK_SHM_MAX_NBUF);
		FZ_CHECK(ep->buf_size >= 64 && ep->buf_size <= RSK_SHM_MAX_BUF);
		FZ_CHECK(fstat(fd, &st) == 0 && (size_t)st.st_size >= rsk_shm_size(ep->nbuf, ep->buf_size));
		p.len = (size_t)st.st_size;
		p.map = mmap(NULL, p.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p.map != MAP_FAILED) {
			rsk_shm_debug(ep, &p.d);
			p.nbuf = ep->nbuf;
			p.bsize = ep->buf_size;
			run(ep, &p, (mode & 8) != 0, &in);
			munmap(p.map, p.len);
		}
		rsk_ep_destroy(ep);
	}
	close(sv[0]);
	close(fd);
	return 0;
}
