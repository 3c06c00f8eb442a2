/*
 * Fuzz target: the same-host handshake (core/transport/shm_rdv.c, shm_cm.c). The input plays
 * every client of a listener's rendezvous: up to four offers, each with bytes of its own
 * choosing (header, geometry, address, forwarded flag, any length) and up to five fds of any
 * kind (good and malformed memfds, the client's TCP socket, other sockets, pipes, files),
 * some connections closed early; then the listener claims the TCP connection it accepted,
 * opens the endpoint, answers and lets go, as accept() does. It also feeds the client's
 * answer parser (rsk_rdv_read_answer) with any bytes and fds.
 * Checked: a claim succeeds only for an offer that carried the accepted connection's other
 * end (holding it is the proof, docs/SECURITY.md); answers parse to an fd, a decline (an
 * offer the listener could not read is declined, RSK_RDV_DECLINE_VERSION), or an error; and (in the replay) every fd an input opens is closed again.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/evloop.h"
#include "fuzz.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/shm_rdv.h"

#define MAX_OFFERS 4
#define MAX_FDS 5
#define MAX_TMP 32

struct ctx {
	int tcp_c, tcp_a; /* the client's TCP socket and the listener's accepted connection */
	int tmp[MAX_TMP], ntmp; /* fds made for the messages (we close our copies) */
	int proof_sent;         /* some offer carried tcp_c as its TCP socket */
};

static int tmp_fd(struct ctx *c, int fd)
{
	if (fd < 0)
		return -1;
	if (c->ntmp == MAX_TMP) {
		close(fd);
		return -1;
	}
	c->tmp[c->ntmp++] = fd;
	return fd;
}

/* An fd of the kind the input picks, for a message (-1: none could be made). */
static int make_fd(struct ctx *c, struct fz *in)
{
	uint8_t kind = fz_u8(in);
	int sv[2], fd;

	switch (kind % 8) {
	case 0:
		return tmp_fd(c, rsk_shm_create(2 + fz_u8(in) % 15, 64u << (fz_u8(in) % 7)));
	case 1: /* a memfd with garbage in it, sealed or not */
		fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd >= 0 && ftruncate(fd, (off_t)(fz_u16(in) * 16)) == 0) {
			uint32_t w = fz_u32(in);

			(void)!pwrite(fd, &w, sizeof(w), 0);
			if (kind & 8)
				(void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
		}
		return tmp_fd(c, fd);
	case 2:
		return c->tcp_c;
	case 3:
		return tmp_fd(c, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	case 4:
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return -1;
		tmp_fd(c, sv[1]);
		return tmp_fd(c, sv[0]);
	case 5:
		if (pipe2(sv, O_CLOEXEC) < 0)
			return -1;
		tmp_fd(c, sv[1]);
		return tmp_fd(c, sv[0]);
	case 6:
		return tmp_fd(c, open("/dev/null", O_RDWR | O_CLOEXEC));
	default:
		return c->tcp_a;
	}
}

/* One client: connect to the rendezvous, send what the input says. The connection, or -1. */
static int send_offer(struct ctx *c, const struct sockaddr_in *dest, struct fz *in)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	} cbuf;
	uint8_t how = fz_u8(in), raw[sizeof(struct rsk_rdv_offer) + 16];
	struct rsk_rdv_offer o;
	struct iovec iov;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *cm;
	int fds[MAX_FDS], nfds = fz_u8(in) % (MAX_FDS + 1), i, conn, proof = 0;
	size_t len = sizeof(o);

	conn = rsk_rdv_find((const struct sockaddr *)dest, NULL, NULL, NULL);
	if (conn < 0)
		return -1;
	memset(&o, 0, sizeof(o));
	o.magic = (how & 1) ? fz_u32(in) : RSK_RDV_MAGIC;
	o.version = (how & 2) ? fz_u32(in) : RSK_RDV_VERSION;
	o.nbuf = (how & 4) ? fz_u32(in) : 2u + fz_u8(in) % 15u;
	o.buf_size = (how & 4) ? fz_u32(in) : 64u << (fz_u8(in) % 7);
	if (how & 8)
		fz_bytes(in, &o.server, sizeof(o.server));
	else
		memcpy(&o.server, dest, sizeof(*dest));
	o.forwarded = (how & 16) ? fz_u8(in) % 3 : 0;
	memcpy(raw, &o, sizeof(o));
	if (how & 32) { /* a message of another length, its tail from the input */
		len = fz_u8(in) % sizeof(raw);
		if (len > sizeof(o))
			fz_bytes(in, raw + sizeof(o), len - sizeof(o));
	}
	for (i = 0; i < nfds; i++) {
		fds[i] = make_fd(c, in);
		if (fds[i] < 0)
			fds[i] = c->tcp_c;
		proof |= i == RSK_RDV_TCP && fds[i] == c->tcp_c;
	}
	iov = (struct iovec){raw, len};
	if (nfds > 0) {
		memset(&cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf.space;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	if (!(how & 64) && sendmsg(conn, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
		c->proof_sent |= proof;
	if (how & 128) /* the client goes away (before or after its offer) */
		(void)shutdown(conn, (how & 64) ? SHUT_RDWR : SHUT_WR);
	return conn;
}

/* What accept() does with a claim: open, answer, let go; or decline. */
static void serve_claim(struct rsk_claim *cl, struct fz *in)
{
	const struct rsk_cm_ops *cm = &rsk_shm_cm_ops;
	void *mem = calloc(1, cm->ep_size());
	int sv[2] = {-1, -1}, rc, opened;

	if (mem == NULL) {
		cm->unclaim(cl, 0);
		return;
	}
	cl->ep_mem = mem;
	rc = cm->claim_open(cl);
	opened = rc == 0;
	if (rc == 0 && (fz_u8(in) & 1) && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0)
		rc = cm->answer(cl, sv[1]);
	cm->unclaim(cl, rc == 0);
	/* An opened endpoint is ours whether the answer went or not (accept.c discards it). */
	if (opened && cl->ep != NULL)
		rsk_ep_destroy(cl->ep);
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	free(mem);
}

/* The client's side: read whatever answer came on each connection. */
static void read_answers(const int *conns, int n)
{
	int i, fd;

	for (i = 0; i < n; i++) {
		fd = rsk_rdv_read_answer(conns[i], 0);
		FZ_CHECK(fd >= 0 || fd == -EAGAIN || fd == -ECONNREFUSED || fd == -ECONNRESET ||
			 fd == -EPROTO || fd == -EPROTONOSUPPORT);
		if (fd >= 0)
			close(fd);
	}
}

/* The client's answer parser on input bytes and fds. */
static void fuzz_answer(struct ctx *c, struct fz *in)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	} cbuf;
	uint8_t bytes[4];
	struct iovec iov = {bytes, 1 + fz_u8(in) % 3};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	int sv[2], nfds = fz_u8(in) % (MAX_FDS + 1), fds[MAX_FDS], i;
	struct cmsghdr *cm;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	fz_bytes(in, bytes, sizeof(bytes));
	if (fz_u8(in) & 1)
		bytes[0] = (fz_u8(in) & 1) ? RSK_RDV_ACCEPT : RSK_RDV_DECLINE;
	for (i = 0; i < nfds; i++)
		if ((fds[i] = make_fd(c, in)) < 0)
			fds[i] = sv[1];
	if (nfds > 0) {
		memset(&cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf.space;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	(void)sendmsg(sv[1], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (fz_u8(in) & 1)
		(void)shutdown(sv[1], SHUT_WR);
	read_answers(&sv[0], 1);
	read_answers(&sv[0], 1); /* and what a second look finds */
	close(sv[0]);
	close(sv[1]);
}

/* A kernel TCP listener of our own for the whole run: its port names the rendezvous. */
static int lfd = -1;
static struct sockaddr_in laddr;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	socklen_t len = sizeof(laddr);

	(void)argc;
	(void)argv;
	laddr.sin_family = AF_INET;
	laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&laddr, sizeof(laddr)) < 0 ||
	    listen(lfd, 64) < 0 || getsockname(lfd, (struct sockaddr *)&laddr, &len) < 0)
		abort(); /* no loopback TCP: the target cannot run at all */
	/* The process's event loop (its epoll set and wake-up fd) lives as long as the process:
	 * started here, not by the first input whose claim leaves an entry for the loop to watch
	 * (the replay counts each input's fds). */
	if (rsk_evloop_start() < 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz in = {data, size};
	struct ctx c = {.tcp_c = -1, .tcp_a = -1};
	struct sockaddr_storage peer, local;
	struct sockaddr_in addr = laddr;
	socklen_t len = sizeof(peer);
	struct rsk_claim cl;
	int conns[MAX_OFFERS], n = 0, rc, i;
	uint8_t mode = fz_u8(&in);
	void *lh = NULL;

	if (mode & 1) {
		fuzz_answer(&c, &in);
		goto out;
	}
	c.tcp_c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c.tcp_c < 0 || rsk_shm_cm_ops.listen((struct sockaddr *)&addr, 0, &lh) < 0)
		goto out;
	/* the offers go before the SYN, as a client sends them */
	for (i = 0; i < 1 + (mode >> 1) % MAX_OFFERS; i++)
		if ((rc = send_offer(&c, &addr, &in)) >= 0)
			conns[n++] = rc;
	if (connect(c.tcp_c, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    (c.tcp_a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0 ||
	    getpeername(c.tcp_a, (struct sockaddr *)&peer, &len) < 0 ||
	    (len = sizeof(local), getsockname(c.tcp_a, (struct sockaddr *)&local, &len)) < 0)
		goto out;
	memset(&cl, 0, sizeof(cl));
	cl.peer = &peer;
	cl.local = (mode & 8) ? &local : NULL;
	cl.fd = (mode & 16) ? c.tcp_a : -1; /* the wildcard case asks it for its address */
	rc = rsk_shm_cm_ops.claim(lh, &cl, 0);
	FZ_CHECK(rc == 0 || rc == 1 || rc == -ETIMEDOUT);
	FZ_CHECK(rc != 1 || c.proof_sent); /* no claim without the client's own socket */
	if (rc == 1)
		serve_claim(&cl, &in);
	read_answers(conns, n);
out:
	if (lh != NULL)
		rsk_shm_cm_ops.unlisten(lh);
	for (i = 0; i < n; i++)
		close(conns[i]);
	for (i = 0; i < c.ntmp; i++)
		close(c.tmp[i]);
	if (c.tcp_a >= 0)
		close(c.tcp_a);
	if (c.tcp_c >= 0)
		close(c.tcp_c);
	return 0;
}
