/*
 * Unit tests for core/transport/shm_cm (rsk_shm_cm_ops) end to end without the socket
 * layer: a client dials, offers (memfd, its ctl end, its TCP socket) and makes a real
 * loopback TCP connect as core/calls/connect.c does; the server accepts and claims the offer
 * whose socket is the accepted connection's peer (getsockname of the passed socket) as
 * core/calls/accept.c does, answers on the client's kept rendezvous connection, and data
 * moves over the two endpoints. Also both address families and their mixes (a dual-stack
 * listener and IPv4 clients, an IPv6 socket towards a v4-mapped address), the fallbacks (no
 * listener, a plain client), hostile rendezvous peers, declines, the fd-budget pause and
 * resume, a forked sibling claiming an offer handed back to it, and the late set (offers
 * that come after the look: announced by the loop, also after EINTR or a failed set).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/fdhide.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/ready.h"
#include "stream/stream.h"
#include "transport/announce.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/shm_door.h"
#include "transport/shm_rdv.h"
#include "transport/shm_rdv.h"
#include "unit_cm.h"
#include "unit_clocks.h"
#include "unit_count.h"

static const struct rsk_cm_ops *cm = &rsk_shm_cm_ops;

/* ---- the server: a kernel listener and the shm listener beside it ---- */

struct fix {
	int kfd;
	struct sockaddr_storage addr;  /* what the kernel listener is bound to */
	struct sockaddr_storage dest;  /* where clients connect */
	void *lh;
};

/* A kernel listener of @family on @bind_txt (port 0), clients going to @dest_txt. */
static int fix_open(struct fix *f, int family, const char *bind_txt, int v6only,
		    const char *dest_txt)
{
	socklen_t len;
	uint16_t port;

	memset(f, 0, sizeof(*f));
	f->kfd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->kfd < 0)
		return -errno;
	if (family == AF_INET6) {
		struct sockaddr_in6 a = ucm_in6(bind_txt, 0);

		assert_int_equal(setsockopt(f->kfd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only,
					    sizeof(v6only)), 0);
		memcpy(&f->addr, &a, sizeof(a));
	} else {
		struct sockaddr_in a = ucm_in4(bind_txt, 0);

		memcpy(&f->addr, &a, sizeof(a));
	}
	if (bind(f->kfd, (struct sockaddr *)&f->addr, ucm_sa_len((struct sockaddr *)&f->addr))) {
		close(f->kfd); /* no IPv6 here */
		return -errno;
	}
	assert_int_equal(listen(f->kfd, 64), 0);
	len = sizeof(f->addr);
	assert_int_equal(getsockname(f->kfd, (struct sockaddr *)&f->addr, &len), 0);
	port = ucm_port_of(f->kfd);
	if (strchr(dest_txt, ':') != NULL) {
		struct sockaddr_in6 d = ucm_in6(dest_txt, port);

		memcpy(&f->dest, &d, sizeof(d));
	} else {
		struct sockaddr_in d = ucm_in4(dest_txt, port);

		memcpy(&f->dest, &d, sizeof(d));
	}
	return 0;
}

static int fix_listen(struct fix *f, int v6only)
{
	return cm->listen((struct sockaddr *)&f->addr, v6only, &f->lh);
}

static void fix_close(struct fix *f)
{
	if (f->lh != NULL)
		cm->unlisten(f->lh);
	f->lh = NULL;
	close(f->kfd);
}

static int setup4(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(fix_open(f, AF_INET, "127.0.0.1", 0, "127.0.0.1"), 0);
	assert_int_equal(fix_listen(f, 0), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	fix_close(f);
	free(f);
	return 0;
}

/* ---- the client, step by step as core/calls/connect.c drives a cm ---- */

struct cli {
	int fd;
	struct sockaddr_storage dest;
	struct rsk_dial d;
	void *mem;   /* the endpoint's bytes, as the connection's shared region gives them */
	int app;     /* our app end; its ctl end went to the server with the offer */
	int undial;  /* dial succeeded and dialed() has not taken its resources yet */
};

/* A client's socket and dial arguments, before its dial. */
static void cli_prep(struct cli *c, const struct sockaddr_storage *dest, int family)
{
	memset(c, 0, sizeof(*c));
	c->app = -1;
	c->dest = *dest;
	c->fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c->fd >= 0);
	c->mem = calloc(1, cm->ep_size());
	assert_non_null(c->mem);
	c->d.fd = c->fd;
	c->d.dest = (const struct sockaddr *)&c->dest;
	c->d.dest_len = ucm_sa_len((struct sockaddr *)&c->dest);
	c->d.nbuf = RSK_DEFAULT_BUF_COUNT;
	c->d.buf_size = RSK_DEFAULT_BUF_SIZE;
	c->d.ep_mem = c->mem;
	c->d.why = RDMASOCK_FB_COUNT; /* no reason yet */
}

static int cli_dial_family(struct cli *c, const struct sockaddr_storage *dest, int family)
{
	int rc;

	cli_prep(c, dest, family);
	rc = cm->dial(&c->d);
	c->undial = rc == 0;
	return rc;
}

static int cli_dial(struct cli *c, const struct sockaddr_storage *dest)
{
	return cli_dial_family(c, dest, dest->ss_family);
}

/* The local parts and the offer; the ctl end is the server's from now on (!keeps_ctl). */
static void cli_offer(struct cli *c)
{
	int ctl;

	assert_int_equal(rsk_ready_pair(&c->app, &ctl), 0);
	assert_int_equal(cm->offer(&c->d, ctl), 0);
	assert_false(cm->keeps_ctl);
	close(ctl);
}

/* The kernel connect, then dialed(). */
static void cli_connect(struct cli *c)
{
	assert_int_equal(connect(c->fd, (struct sockaddr *)&c->dest,
				 ucm_sa_len((struct sockaddr *)&c->dest)), 0);
	cm->dialed(&c->d);
	c->undial = 0;
}

static void cli_full_family(struct cli *c, const struct fix *f, int family)
{
	assert_int_equal(cli_dial_family(c, &f->dest, family), 0);
	assert_non_null(c->d.ep);
	cli_offer(c);
	cli_connect(c);
}

static void cli_full(struct cli *c, const struct fix *f)
{
	cli_full_family(c, f, f->dest.ss_family);
}

/* What a fork or a wake owed would do: read the server's answer now (bounded). */
static void cli_resolve(struct cli *c)
{
	cm->prefork(c->d.ep, c->app);
}

static void cli_close(struct cli *c)
{
	if (c->undial)
		cm->undial(&c->d);
	if (c->d.ep != NULL)
		rsk_ep_destroy(c->d.ep); /* the server's ctl end and the answer connection too */
	c->d.ep = NULL;
	free(c->mem);
	c->mem = NULL;
	if (c->app >= 0)
		close(c->app);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = c->app = -1;
}

/* ---- the server, as core/calls/accept.c drives a cm ---- */

struct srv {
	int fd;
	struct sockaddr_storage peer;
	struct rsk_claim cl;
	void *mem;
	int app;
};

static void srv_accept(struct srv *s, int kfd)
{
	struct pollfd p = {.fd = kfd, .events = POLLIN};
	socklen_t len = sizeof(s->peer);

	memset(s, 0, sizeof(*s));
	s->app = -1;
	assert_int_equal(poll(&p, 1, 2000), 1);
	s->fd = accept4(kfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(s->fd >= 0);
	assert_int_equal(getpeername(s->fd, (struct sockaddr *)&s->peer, &len), 0);
	s->cl.peer = &s->peer;
	s->cl.fd = s->fd;
	s->cl.why = RDMASOCK_FB_COUNT;
}

/* claim with its duration in *ms; the clock reads it made in clock_reads */
static int srv_claim(struct srv *s, void *lh, int64_t *ms)
{
	int64_t t0 = ucm_now_ms();
	int rc;

	clock_reads = 0;
	clock_counting = 1;
	rc = cm->claim(lh, &s->cl, 1000);
	clock_counting = 0;

	if (ms != NULL)
		*ms = ucm_now_ms() - t0;
	return rc;
}

/* claim_open, the local parts, answer, unclaim(accepted): the server's half is up. */
static void srv_open(struct srv *s)
{
	int ctl;

	s->mem = calloc(1, cm->ep_size());
	assert_non_null(s->mem);
	s->cl.ep_mem = s->mem;
	assert_int_equal(cm->claim_open(&s->cl), 0);
	assert_non_null(s->cl.ep);
	assert_int_equal(rsk_ready_pair(&s->app, &ctl), 0);
	assert_int_equal(cm->answer(&s->cl, ctl), 0);
	close(ctl); /* the answer handed it to the client, our waker */
	cm->unclaim(&s->cl, 1);
}

static void srv_close(struct srv *s)
{
	if (s->cl.ep != NULL)
		rsk_ep_destroy(s->cl.ep);
	s->cl.ep = NULL;
	free(s->mem);
	s->mem = NULL;
	if (s->app >= 0)
		close(s->app);
	close(s->fd);
}

/* ---- checks on endpoints ---- */

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* A byte into @ctl shows in @app: @ctl is the partner of @app. */
static void assert_wakes(int ctl, int app)
{
	char b;

	assert_false(readable(app, 0));
	assert_int_equal(send(ctl, "t", 1, MSG_NOSIGNAL | MSG_DONTWAIT), 1);
	assert_true(readable(app, 1000));
	assert_int_equal(recv(app, &b, 1, MSG_DONTWAIT), 1);
}

/* One message from @tx reaches @rx (and @rx's buffer goes back): they share a memfd. */
static void assert_paired(struct rsk_ep *tx, struct rsk_ep *rx, uint32_t imm)
{
	struct rsk_wc wc[4];

	assert_int_equal(rsk_ep_post_send(tx, &imm, sizeof(imm), imm, RSK_SEND_INLINE), 0);
	assert_int_equal(rsk_ep_poll(rx, wc, 4), 1);
	assert_int_equal(wc[0].op, RSK_WC_RECV);
	assert_int_equal(wc[0].imm, imm);
	assert_int_equal(wc[0].len, sizeof(imm));
	assert_memory_equal(rsk_ep_recv_buf(rx, wc[0].slot), &imm, sizeof(imm));
	assert_int_equal(rsk_ep_post_recv(rx, wc[0].slot), 0);
}

static void assert_quiet(struct rsk_ep *ep)
{
	struct rsk_wc wc[4];

	assert_int_equal(rsk_ep_poll(ep, wc, 4), 0);
}

static uint8_t pat(uint32_t seed, size_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 9));
}

/* @total bytes from @tx to @rx through the stream engine, bounded in steps and time. */
static void xfer(struct rsk_stream *tx, struct rsk_stream *rx, size_t total, uint32_t seed)
{
	uint8_t out[6000], in[5000];
	size_t sent = 0, got = 0, n, i;
	int64_t deadline = ucm_now_ms() + 5000;
	struct iovec iov;
	ssize_t r;

	while (got < total) {
		assert_true(ucm_now_ms() < deadline);
		if (sent < total) {
			n = total - sent < sizeof(out) ? total - sent : sizeof(out);
			for (i = 0; i < n; i++)
				out[i] = pat(seed, sent + i);
			iov.iov_base = out;
			iov.iov_len = n;
			r = rsk_stream_send(tx, &iov, 1, 0);
			assert_true(r > 0 || r == -EAGAIN);
			if (r > 0)
				sent += (size_t)r;
		}
		iov.iov_base = in;
		iov.iov_len = sizeof(in);
		r = rsk_stream_recv(rx, &iov, 1, 0);
		assert_true(r > 0 || r == -EAGAIN);
		for (i = 0; r > 0 && i < (size_t)r; i++)
			if (in[i] != pat(seed, got + i))
				fail_msg("byte %zu differs", got + i);
		if (r > 0)
			got += (size_t)r;
	}
	assert_int_equal(sent, total);
}

/* ---- the whole setup, and data ---- */

static void dial_claim_data_family(struct fix *f, int family)
{
	struct rsk_stream a, b;
	struct cli c;
	struct srv s;
	int64_t ms;
	int before = ucm_fd_count(), app_fds;

	assert_int_equal(cli_dial_family(&c, &f->dest, family), 0);
	assert_int_equal(c.d.ep->nbuf, RSK_DEFAULT_BUF_COUNT);
	assert_int_equal(c.d.ep->buf_size, RSK_DEFAULT_BUF_SIZE);
	assert_ptr_equal(c.d.ep, c.mem); /* built in the memory it was given */
	app_fds = 1; /* the application's socket */
	/* the rendezvous connection and the memfd (and its copy kept for reuse) */
	assert_int_equal(ucm_fd_count(), before + app_fds + 2 + rsk_shm_keeps_memfd(c.d.ep));
	cli_offer(&c);
	app_fds++; /* the app end */
	/* the server has its copy of the memfd now: ours is closed, the mapping stays */
	assert_int_equal(ucm_fd_count(), before + app_fds + 1 + rsk_shm_keeps_memfd(c.d.ep));
	cli_connect(&c);
	assert_false(rsk_shm_has_peer_ctl(c.d.ep)); /* the server has not answered */

	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, &ms), 1);
	assert_true(ms < 500); /* the offer came before the SYN: nothing to wait for */
	assert_int_equal(s.cl.nbuf, RSK_DEFAULT_BUF_COUNT);
	/* not answered yet: asking times out, and the answer connection is kept */
	cli_resolve(&c);
	assert_false(rsk_shm_has_peer_ctl(c.d.ep));
	srv_open(&s);
	assert_int_equal(s.cl.ep->nbuf, RSK_DEFAULT_BUF_COUNT);
	assert_int_equal(s.cl.ep->buf_size, RSK_DEFAULT_BUF_SIZE);
	assert_ptr_equal(s.cl.ep, s.mem);

	/* the offer carried the client's ctl end: the server's waker reaches the client's app end */
	assert_true(rsk_shm_has_peer_ctl(s.cl.ep));
	assert_wakes(rsk_shm_peer_ctl(s.cl.ep), c.app);
	/* the answer carries the server's: read once, and the client wakes the server */
	cli_resolve(&c);
	assert_true(rsk_shm_has_peer_ctl(c.d.ep));
	assert_wakes(rsk_shm_peer_ctl(c.d.ep), s.app);

	/* one shared memfd: messages both ways, then streams beyond a window each way */
	assert_paired(c.d.ep, s.cl.ep, 0xc1);
	assert_paired(s.cl.ep, c.d.ep, 0x5e);
	assert_int_equal(rsk_stream_init(&a, c.d.ep, NULL), 0);
	assert_int_equal(rsk_stream_init(&b, s.cl.ep, NULL), 0);
	a.nodelay = b.nodelay = 1;
	xfer(&a, &b, 3 * RSK_DEFAULT_BUF_COUNT * RSK_DEFAULT_BUF_SIZE + 123, 1);
	xfer(&b, &a, 3 * RSK_DEFAULT_BUF_COUNT * RSK_DEFAULT_BUF_SIZE + 321, 2);
	rsk_stream_fini(&a);
	rsk_stream_fini(&b);

	cli_close(&c);
	srv_close(&s);
	assert_int_equal(ucm_fd_count(), before);
}

static void dial_claim_data(struct fix *f)
{
	dial_claim_data_family(f, f->dest.ss_family);
}

static void test_dial_claim_data(void **state)
{
	dial_claim_data(*state);
}

/* A listener on the IPv4 wildcard serves 127.0.0.1 (the kernel listener stays on loopback). */
static void test_wildcard_listener(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in any = ucm_in4("0.0.0.0", ucm_port_of(f->kfd));

	cm->unlisten(f->lh);
	assert_int_equal(cm->listen((struct sockaddr *)&any, 0, &f->lh), 0);
	dial_claim_data(f);
}

static void test_ipv6(void **state)
{
	struct fix f;

	(void)state;
	if (!ucm_have_ipv6() || fix_open(&f, AF_INET6, "::1", 1, "::1") < 0)
		skip(); /* no ::1 on this machine */
	assert_int_equal(fix_listen(&f, 1), 0);
	dial_claim_data(&f);
	fix_close(&f);
}

/*
 * A dual-stack listener on [::] (the default of many servers) accepting an IPv4 client: the
 * accepted peer is ::ffff:127.0.0.1, the client's socket says 127.0.0.1. Still the same
 * connection, and the claim must find it (else the client, committed to shm, is left with
 * nobody on the other side).
 */
static void test_dual_stack_listener_ipv4_client(void **state)
{
	struct fix f;

	(void)state;
	if (!ucm_have_ipv6() || fix_open(&f, AF_INET6, "::", 0, "127.0.0.1") < 0)
		skip();
	assert_int_equal(fix_listen(&f, 0), 0);
	dial_claim_data(&f);
	fix_close(&f);
}

/* The other way round: an IPv6 socket connecting to ::ffff:127.0.0.1 of an IPv4 listener. */
static void test_mapped_client_ipv4_listener(void **state)
{
	struct fix f;

	(void)state;
	if (!ucm_have_ipv6() || fix_open(&f, AF_INET, "127.0.0.1", 0, "::ffff:127.0.0.1") < 0)
		skip();
	assert_int_equal(fix_listen(&f, 0), 0);
	dial_claim_data_family(&f, AF_INET6);
	fix_close(&f);
}

/* ---- fallbacks ---- */

/* No preloaded listener: no_peer, nothing left open, and the kernel connect still works. */
static void test_dial_no_peer(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int before;

	cm->unlisten(f->lh); /* the kernel listener stays */
	f->lh = NULL;
	before = ucm_fd_count();
	assert_int_equal(cli_dial(&c, &f->dest), -ENOENT);
	assert_int_equal(c.d.why, RDMASOCK_FB_NO_PEER);
	c.undial = 0; /* a failed dial owes nothing back */
	assert_int_equal(ucm_fd_count(), before + 1); /* the application's socket alone */
	assert_int_equal(connect(c.fd, (struct sockaddr *)&c.dest,
				 ucm_sa_len((struct sockaddr *)&c.dest)), 0);
	c.d.ep = NULL;
	cli_close(&c);
	assert_int_equal(ucm_fd_count(), before);
}

/* undial after dial (a later local step failed): everything the dial took goes back. */
static void test_undial(void **state)
{
	struct fix *f = *state;
	struct cli c;
	struct srv s;
	int before = ucm_fd_count();

	assert_int_equal(cli_dial(&c, &f->dest), 0);
	cm->undial(&c.d); /* the endpoint stays the caller's to destroy (cli_close) */
	c.undial = 0;
	assert_int_equal(ucm_fd_count(), before + 1 + rsk_shm_keeps_memfd(c.d.ep));
	/* its rendezvous connection went without an offer: a plain client to the server */
	assert_int_equal(connect(c.fd, (struct sockaddr *)&c.dest,
				 ucm_sa_len((struct sockaddr *)&c.dest)), 0);
	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, NULL), 0);
	assert_int_equal(s.cl.why, RDMASOCK_FB_NO_PEER);
	srv_close(&s);
	cli_close(&c);
	assert_int_equal(ucm_fd_count(), before);
}

/* A plain TCP client (no offer) connects; the server accepts it into @s and claims it:
 * plain (no_peer), in *ms. Returns the client's fd. */
static int plain_claimed(const struct fix *f, struct srv *s, int64_t *ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_int_equal(connect(fd, (struct sockaddr *)&f->dest, sizeof(struct sockaddr_in)), 0);
	srv_accept(s, f->kfd);
	assert_int_equal(srv_claim(s, f->lh, ms), 0);
	assert_int_equal(s->cl.why, RDMASOCK_FB_NO_PEER);
	return fd;
}

/* A plain TCP client (no offer): no_peer at once, not after the claim wait. */
static void test_claim_plain_client(void **state)
{
	struct fix *f = *state;
	struct srv s;
	int64_t ms;
	int before = ucm_fd_count(), fd = plain_claimed(f, &s, &ms);

	assert_true(ms < 200);
	/* nothing to wait for, so no deadline: a clock read is a system call without a vDSO */
	assert_int_equal(clock_reads, 0);
	/* the TCP connection is untouched: bytes still flow on it */
	assert_int_equal(send(fd, "x", 1, MSG_NOSIGNAL), 1);
	assert_true(readable(s.fd, 1000));
	srv_close(&s);
	close(fd);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * The rendezvous' bell: once the listener found its rendezvous empty, an accept whose bell
 * has not rung since does not look (a connection queued without a ring is left where it
 * is: no fd taken), and one that rang is found.
 */
static void test_bell_quiet(void **state)
{
	struct fix *f = *state;
	struct sockaddr_un un[2];
	socklen_t ulen[2];
	struct srv s, s2, s3;
	struct cli c;
	int64_t ms;
	int fd, raw, n;

	fd = plain_claimed(f, &s, &ms); /* looks, finds it empty */
	srv_close(&s);
	close(fd);
	/* a connection that rang no bell, as a client of an older build would make */
	assert_true(rsk_rdv_names((struct sockaddr *)&f->dest, un, ulen) > 0);
	raw = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(raw, (struct sockaddr *)&un[0], ulen[0]), 0);
	n = ucm_fd_count();
	fd = plain_claimed(f, &s2, &ms);
	assert_int_equal(ucm_fd_count(), n + 2); /* its TCP ends only: nothing taken */
	srv_close(&s2);
	close(fd);
	/* a client that rings is found */
	cli_full(&c, f);
	srv_accept(&s3, f->kfd);
	assert_int_equal(srv_claim(&s3, f->lh, &ms), 1);
	srv_open(&s3);
	cli_resolve(&c);
	cli_close(&c);
	srv_close(&s3);
	close(raw);
}

/*
 * Shared with siblings (prefork), the bell is read as for a listener of one process: a
 * claim for a plain client after an empty look makes no accept4 on the rendezvous (it made
 * two: every TCP client of nginx's workers paid them, from other hosts too), and one that
 * rang is found. A sibling that hands an entry back rings (rsk_listen_give_back): the
 * prefork tests below claim such entries.
 */
static void test_bell_quiet_shared(void **state)
{
	struct fix *f = *state;
	struct srv s, s2;
	struct cli c;
	int64_t ms;
	int fd;

	cm->listen_note(f->lh, RSK_LISTEN_FORKED);
	fd = plain_claimed(f, &s, &ms); /* looks, finds it empty */
	srv_close(&s);
	close(fd);
	ucn_count(1);
	fd = plain_claimed(f, &s, &ms);
	assert_int_equal(ucn.accept4, 0);
	ucn_count(0);
	srv_close(&s);
	close(fd);
	cli_full(&c, f);
	srv_accept(&s2, f->kfd);
	ucn_count(1);
	assert_int_equal(srv_claim(&s2, f->lh, &ms), 1);
	assert_true(ucn.accept4 >= 1);
	ucn_count(0);
	srv_open(&s2);
	cli_resolve(&c);
	assert_paired(c.d.ep, s2.cl.ep, 6);
	cli_close(&c);
	srv_close(&s2);
}

/*
 * The client process went (killed) after it offered and connected: the server holds its TCP
 * socket, so the claim still finds the offer, and the answer fails (nobody reads it). Every
 * fd of the offer is released; the accepted connection is the caller's to drop.
 */
static void test_dead_client(void **state)
{
	struct fix *f = *state;
	struct cli c;
	struct srv s;
	int ctl, before = ucm_fd_count();

	cli_full(&c, f);
	cli_close(&c); /* answer connection, memfd mapping, TCP socket: all gone here */
	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, NULL), 1);
	s.mem = calloc(1, cm->ep_size());
	s.cl.ep_mem = s.mem;
	assert_int_equal(cm->claim_open(&s.cl), 0);
	assert_int_equal(rsk_ready_pair(&s.app, &ctl), 0);
	assert_true(cm->answer(&s.cl, ctl) < 0);
	close(ctl);
	cm->unclaim(&s.cl, 0);
	srv_close(&s);
	assert_int_equal(ucm_fd_count(), before);
}

/* unclaim(cl, 0): the client hears no; its endpoint reports the reset. */
static void test_unclaim_declines(void **state)
{
	struct fix *f = *state;
	struct rsk_wc wc[2];
	struct cli c;
	struct srv s;
	int before = ucm_fd_count();

	cli_full(&c, f);
	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, NULL), 1);
	cm->unclaim(&s.cl, 0);
	cli_resolve(&c); /* the client reads the decline */
	assert_false(rsk_shm_has_peer_ctl(c.d.ep));
	assert_int_equal(rsk_ep_poll(c.d.ep, wc, 2), -ECONNRESET); /* the stream resets */
	cli_close(&c);
	srv_close(&s);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * Claims are keyed by address and port: three clients of 127.0.0.1, each claim made while
 * another client's offer is in the list (before and after it there), each gets its own.
 */
static void test_claim_by_port(void **state)
{
	struct fix *f = *state;
	struct cli c[3];
	struct srv s[3];
	int i, before = ucm_fd_count();

	cli_full(&c[0], f);
	cli_full(&c[1], f);
	srv_accept(&s[0], f->kfd);
	assert_int_equal(srv_claim(&s[0], f->lh, NULL), 1); /* 1 stays pending */
	cli_full(&c[2], f);
	srv_accept(&s[1], f->kfd);
	assert_int_equal(srv_claim(&s[1], f->lh, NULL), 1);
	srv_accept(&s[2], f->kfd);
	assert_int_equal(srv_claim(&s[2], f->lh, NULL), 1);
	for (i = 0; i < 3; i++)
		srv_open(&s[i]);
	for (i = 0; i < 3; i++) {
		assert_paired(s[i].cl.ep, c[i].d.ep, 0x100u + (uint32_t)i);
		assert_quiet(c[(i + 1) % 3].d.ep);
		assert_quiet(c[(i + 2) % 3].d.ep);
		assert_paired(c[i].d.ep, s[i].cl.ep, 0x200u + (uint32_t)i);
	}
	for (i = 0; i < 3; i++) {
		cli_close(&c[i]);
		srv_close(&s[i]);
	}
	assert_int_equal(ucm_fd_count(), before);
}

/* ---- hostile rendezvous peers ---- */

/* A bare connection to the listener's rendezvous (design.md's name). */
static int rdv_raw(const struct fix *f)
{
	int fd = rsk_rdv_find((const struct sockaddr *)&f->dest, NULL, NULL, NULL);

	assert_true(fd >= 0);
	return fd;
}

enum { H_GARBAGE, H_SHORT, H_ONE_FD, H_TWO_FDS, H_MAGIC, H_SILENT, H_OTHER, H_N };

static void test_hostile_rendezvous(void **state)
{
	struct fix *f = *state;
	uint8_t garbage[64];
	struct rsk_rdv_offer o;
	struct sockaddr_storage other_ss;
	struct cli c;
	struct srv s, so;
	int h[H_N], fds[3], sp[2], i, before = ucm_fd_count();
	uint16_t other_port;
	int64_t ms;

	/* what hostile peers attach: a real connection memfd, a socket end, and a TCP socket
	 * bound to an address nobody else uses */
	fds[0] = rsk_shm_create(RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE);
	assert_true(fds[0] >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	fds[1] = sp[0];
	fds[2] = ucm_tcp_bound(0, &other_port);
	for (i = 0; i < H_N; i++)
		h[i] = rdv_raw(f);
	memset(garbage, 0xa5, sizeof(garbage));
	assert_int_equal(ucm_send_fds(h[H_GARBAGE], garbage, sizeof(garbage), NULL, 0), 64);
	o = ucm_offer((struct sockaddr *)&f->dest, RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE);
	assert_int_equal(ucm_send_fds(h[H_SHORT], &o, sizeof(o) / 2, fds, 3),
			 (ssize_t)sizeof(o) / 2);
	assert_int_equal(ucm_send_fds(h[H_ONE_FD], &o, sizeof(o), fds, 1), (ssize_t)sizeof(o));
	assert_int_equal(ucm_send_fds(h[H_TWO_FDS], &o, sizeof(o), fds, 2), (ssize_t)sizeof(o));
	o.magic = ~RSK_RDV_MAGIC;
	assert_int_equal(ucm_send_fds(h[H_MAGIC], &o, sizeof(o), fds, 3), (ssize_t)sizeof(o));
	o.magic = RSK_RDV_MAGIC; /* well formed, for a connection that is not this one */
	assert_int_equal(ucm_send_fds(h[H_OTHER], &o, sizeof(o), fds, 3), (ssize_t)sizeof(o));

	/* the genuine client, behind all of them in the rendezvous queue */
	cli_full(&c, f);
	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, &ms), 1);
	assert_true(ms < 500); /* the silent one costs nothing (no sibling to wait for) */
	srv_open(&s);
	cli_resolve(&c);
	assert_true(rsk_shm_has_peer_ctl(c.d.ep));
	assert_paired(c.d.ep, s.cl.ep, 1);
	assert_paired(s.cl.ep, c.d.ep, 2);

	/* the malformed ones were declined, then dropped: a client that offered from TCP
	 * reads the decline and stays there (not a connection closed without a word) */
	for (i = 0; i < H_N; i++) {
		if (i == H_OTHER || i == H_SILENT)
			continue;
		assert_true(readable(h[i], 1000));
		assert_int_equal(recv(h[i], garbage, 1, MSG_DONTWAIT), 1);
		assert_int_equal(garbage[0], RSK_RDV_DECLINE_VERSION);
		assert_int_equal(recv(h[i], garbage, 1, MSG_DONTWAIT), 0);
	}
	/* the silent one and the foreign one wait for their connections */
	assert_false(readable(h[H_SILENT], 0));
	assert_false(readable(h[H_OTHER], 0));
	/* the well-formed foreign offer was kept, but its TCP socket is connected to nothing:
	 * holding it proves no connection, so no claim takes it (docs/SECURITY.md) */
	memset(&so, 0, sizeof(so));
	{
		struct sockaddr_in other = ucm_lo4(other_port);

		memset(&other_ss, 0, sizeof(other_ss));
		memcpy(&other_ss, &other, sizeof(other));
	}
	so.cl.peer = &other_ss;
	assert_int_equal(cm->claim(f->lh, &so.cl, 100), 0);
	assert_false(readable(h[H_OTHER], 0)); /* no answer either way: it is not ours */
	/* a silent client that goes away is dropped at the next look */
	close(h[H_SILENT]);
	h[H_SILENT] = -1;
	assert_int_equal(cm->claim(f->lh, &so.cl, 1000), 0);

	cli_close(&c);
	srv_close(&s);
	for (i = 0; i < H_N; i++)
		if (h[i] >= 0)
			close(h[i]);
	close(fds[0]);
	close(fds[2]);
	close(sp[0]);
	close(sp[1]);
	/* KNOWN GAP: the foreign offer can never be claimed (its socket proves no connection of
	 * ours) and its client has gone, yet it holds its four fds (memfd, ctl, TCP socket,
	 * connection) until the listener closes: a client's close is not told apart from the
	 * shut writing side every client leaves (issue notes). One more is the listener's late
	 * set, made when an accept's look took the silent client's connection (its offer would
	 * have woken the loop there), kept for the listener's life. */
	assert_int_equal(ucm_fd_count(), before + 5);
}

/* ---- one owner per name; the fd budget's pause ---- */

/* A second listener on the same address and port is refused: the name has one owner. */
/*
 * Another build's offer (a version we do not read, longer than ours, its fds attached) is
 * declined with RSK_RDV_DECLINE_VERSION before the connection closes: a client that offered
 * from TCP stays there at once, never reset. (An older build closed it without a word.)
 */
static void test_other_version_declined(void **state)
{
	struct fix *f = *state;
	uint8_t msg[sizeof(struct rsk_rdv_offer) + 32], b;
	struct rsk_rdv_offer o;
	struct cli c;
	struct srv s;
	int h, fds[3], sp[2], before;

	fds[0] = rsk_shm_create(RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE);
	assert_true(fds[0] >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	fds[1] = sp[0];
	fds[2] = sp[1];
	before = ucm_fd_count();
	h = rdv_raw(f);
	o = ucm_offer((struct sockaddr *)&f->dest, RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE);
	o.version = RSK_RDV_VERSION + 1;
	memset(msg, 0x5a, sizeof(msg));
	memcpy(msg, &o, sizeof(o));
	assert_int_equal(ucm_send_fds(h, msg, sizeof(msg), fds, 3), (ssize_t)sizeof(msg));
	/* a genuine client behind it: the look reads both */
	cli_full(&c, f);
	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, NULL), 1);
	srv_open(&s);
	assert_true(readable(h, 1000));
	assert_int_equal(recv(h, &b, 1, MSG_DONTWAIT), 1);
	assert_int_equal(b, RSK_RDV_DECLINE_VERSION);
	/* then closed (with the longer message's rest unread there: a reset, after the answer) */
	assert_true(recv(h, &b, 1, MSG_DONTWAIT) == 0 || errno == ECONNRESET);
	cli_close(&c);
	srv_close(&s);
	close(h);
	/* none of the declined offer's fds is kept */
	assert_int_equal(ucm_fd_count(), before);
	close(fds[0]);
	close(sp[0]);
	close(sp[1]);
}

/* The client of an upgrade reads a decline without taking it (cm->declined): why, or -1 while
 * no answer is there or it is an acceptance. */
static void test_declined_answer(void **state)
{
	static const struct {
		char b;
		int why;
	} cases[] = {
		{RSK_RDV_DECLINE_VERSION, RDMASOCK_FB_VERSION},
		{RSK_RDV_DECLINE, RDMASOCK_FB_COUNT}, /* not taken; it keeps its reason */
		{'?', RDMASOCK_FB_COUNT}, /* an answer we cannot read: not taken */
		{RSK_RDV_ACCEPT, -1},
	};
	struct rsk_ep *ep;
	size_t k;
	int sp[2], mfd;

	(void)state;
	assert_non_null(cm->declined);
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]) + 1; k++) {
		mfd = rsk_shm_create_open(RSK_DEFAULT_BUF_COUNT, RSK_DEFAULT_BUF_SIZE, NULL, &ep);
		assert_true(mfd >= 0);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
		rsk_shm_set_answer(ep, sp[0], rsk_rdv_read_answer);
		assert_int_equal(cm->declined(ep), -1); /* nothing yet */
		if (k < sizeof(cases) / sizeof(cases[0])) {
			assert_int_equal(send(sp[1], &cases[k].b, 1, 0), 1);
			assert_int_equal(cm->declined(ep), cases[k].why);
			assert_int_equal(cm->declined(ep), cases[k].why); /* peeked, not taken */
		} else {
			close(sp[1]); /* gone without a word (an older build): not taken */
			sp[1] = -1;
			assert_int_equal(cm->declined(ep), RDMASOCK_FB_COUNT);
		}
		if (sp[1] >= 0)
			close(sp[1]);
		rsk_ep_destroy(ep); /* closes the answer fd */
		close(mfd);
	}
}

static void test_second_listen_refused(void **state)
{
	struct fix *f = *state;
	void *lh2 = NULL;
	int before = ucm_fd_count();

	assert_int_equal(cm->listen((struct sockaddr *)&f->addr, 0, &lh2), -EADDRINUSE);
	assert_null(lh2);
	assert_int_equal(ucm_fd_count(), before);
	dial_claim_data(f); /* the first one is unharmed */
}

/* A new client finds no rendezvous: it stays on TCP (no_peer), decided before it commits. */
static void assert_no_rendezvous(const struct fix *f)
{
	struct cli late;

	assert_false(rsk_rdv_exists((struct sockaddr *)&f->dest));
	assert_int_equal(cli_dial(&late, &f->dest), -ENOENT);
	assert_int_equal(late.d.why, RDMASOCK_FB_NO_PEER);
	late.undial = 0;
	late.d.ep = NULL;
	cli_close(&late);
}

/* @c offered before its listener stopped taking clients: the accept still claims it. */
static void claim_queued(struct fix *f, struct cli *c, uint32_t tag)
{
	struct srv s;

	srv_accept(&s, f->kfd);
	assert_int_equal(srv_claim(&s, f->lh, NULL), 1);
	srv_open(&s);
	cli_resolve(c);
	assert_paired(c->d.ep, s.cl.ep, tag);
	cli_close(c);
	srv_close(&s);
}

/*
 * Short of fds, the listener pauses: new clients find no rendezvous (they stay on TCP,
 * decided before they commit), a client that offered before the pause is still served, and
 * after resume new clients are accelerated again.
 */
static void test_pause_resume(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int before = ucm_fd_count();

	cli_full(&c, f);
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_PAUSE), 1); /* its fds went */
	assert_no_rendezvous(f);
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_PAUSE), 0); /* twice: no change */
	claim_queued(f, &c, 0x77); /* the offer queued before the pause */
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_RESUME), 1); /* new sockets */
	assert_true(rsk_rdv_exists((struct sockaddr *)&f->dest));
	/* the probe of exists left a connection without an offer: it costs nothing */
	dial_claim_data(f);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * Leaked (RSK_LISTEN_LEAKED: the TCP listener went to a program whose accepts no library
 * sees), told in a forked child, as an exec there tells it: in the parent too, new clients
 * find no rendezvous (they stay on TCP, decided before they commit), the client that offered
 * before is still served, and neither a resume nor a pause brings the rendezvous back.
 */
static void test_leaked_for_good(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int before = ucm_fd_count(), status = -1;
	pid_t pid;

	cli_full(&c, f);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(cm->listen_note(f->lh, RSK_LISTEN_LEAKED) == 0 ? 0 : 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(status, 0);
	assert_no_rendezvous(f);
	claim_queued(f, &c, 0x78); /* the offer queued before the leak */
	/* short of fds and back: still shut */
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_PAUSE), 1);
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_RESUME), 0);
	assert_false(rsk_rdv_exists((struct sockaddr *)&f->dest));
	assert_int_equal(cm->listen_fd(f->lh, 0), -1); /* no loop looks at it */
	assert_int_equal(ucm_fd_count(), before);
}

/* ---- two processes on one rendezvous (prefork) ---- */

/* The forked sibling: accept the next TCP connection, claim it, answer, post a message. */
static int child_claims(const struct fix *f, int go)
{
	struct srv s;
	struct pollfd p = {.fd = go, .events = POLLIN};
	socklen_t len = sizeof(s.peer);
	uint32_t imm = 0xc417d;
	int ctl;

	memset(&s, 0, sizeof(s));
	if (poll(&p, 1, 5000) != 1)
		return 10;
	p.fd = f->kfd;
	if (poll(&p, 1, 2000) != 1 || (s.fd = accept4(f->kfd, NULL, NULL, 0)) < 0)
		return 11;
	if (getpeername(s.fd, (struct sockaddr *)&s.peer, &len) < 0)
		return 12;
	s.cl.peer = &s.peer;
	if (cm->claim(f->lh, &s.cl, 1000) != 1)
		return 13;
	s.mem = calloc(1, cm->ep_size());
	s.cl.ep_mem = s.mem;
	if (s.mem == NULL || cm->claim_open(&s.cl) != 0 || rsk_ready_pair(&s.app, &ctl) != 0)
		return 14;
	if (cm->answer(&s.cl, ctl) != 0)
		return 15;
	cm->unclaim(&s.cl, 1);
	if (rsk_ep_post_send(s.cl.ep, &imm, sizeof(imm), imm, RSK_SEND_INLINE) != 0)
		return 16;
	return 0;
}

/* The forked child @pid ends within 5 s (killed otherwise) with status 0. */
static void assert_child_ok(pid_t pid)
{
	int status = -1, i;
	pid_t w = 0;

	for (i = 0; i < 500 && (w = waitpid(pid, &status, WNOHANG)) == 0; i++)
		usleep(10000);
	if (w == 0) {
		kill(pid, SIGKILL);
		(void)waitpid(pid, &status, 0);
		fail_msg("the child did not finish in 5 s");
	}
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/*
 * Prefork: parent and child share the listener (the same rendezvous fds, the held count in
 * shared memory). The parent's claim takes both queued offers, keeps its own and hands the
 * other back; the child, which accepted that client's TCP connection, claims the handed-back
 * offer (forwarded: reply fd attached) and answers on the client's own connection.
 */
static void test_prefork_sibling_claims(void **state)
{
	struct fix *f = *state;
	struct rsk_wc wc[2];
	struct cli c1, c2;
	struct srv s1;
	int go[2], before;
	pid_t pid;

	/* (a shared listener's claim opens this process's door, for good: not a leak) */
	assert_int_equal(rsk_door_open(NULL), 0);
	before = ucm_fd_count();
	cm->listen_note(f->lh, RSK_LISTEN_FORKED); /* what the fork hook tells it */
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		_exit(child_claims(f, go[0]));
	}
	close(go[0]);
	cli_full(&c1, f);
	cli_full(&c2, f);
	srv_accept(&s1, f->kfd);
	assert_int_equal(srv_claim(&s1, f->lh, NULL), 1);
	srv_open(&s1);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_child_ok(pid);
	close(go[1]);

	cli_resolve(&c1);
	assert_true(rsk_shm_has_peer_ctl(c1.d.ep));
	assert_paired(s1.cl.ep, c1.d.ep, 7);
	/* the child answered client 2 (on its own rendezvous connection) and sent one message */
	cli_resolve(&c2);
	assert_true(rsk_shm_has_peer_ctl(c2.d.ep));
	assert_int_equal(rsk_ep_poll(c2.d.ep, wc, 2), 1);
	assert_int_equal(wc[0].imm, 0xc417d);
	cli_close(&c1);
	cli_close(&c2);
	srv_close(&s1);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * Shared with siblings, a claim that meets a client still between its rendezvous connect and
 * its offer hands that connection back as it is, without waiting for the offer (siblings'
 * claims wait for the look lock meanwhile). The client's offer then reaches whoever accepts
 * its TCP connection: here a second claim, which finds the connection handed back.
 */
static void test_shared_hands_back_unread(void **state)
{
	struct fix *f = *state;
	struct cli slow, c2;
	struct srv s2, s1;
	int64_t ms;
	int before = ucm_fd_count();

	cm->listen_note(f->lh, RSK_LISTEN_FORKED);
	assert_int_equal(cli_dial(&slow, &f->dest), 0); /* connected to the rendezvous only */
	cli_full(&c2, f);
	srv_accept(&s2, f->kfd);
	assert_int_equal(srv_claim(&s2, f->lh, &ms), 1);
	assert_true(ms < 40); /* was: a 50 ms wait for the slow client's offer */
	srv_open(&s2);
	cli_resolve(&c2);
	assert_paired(c2.d.ep, s2.cl.ep, 3);

	cli_offer(&slow); /* on the connection a sibling now holds in the rendezvous queue */
	cli_connect(&slow);
	srv_accept(&s1, f->kfd);
	assert_int_equal(srv_claim(&s1, f->lh, NULL), 1);
	srv_open(&s1);
	cli_resolve(&slow);
	assert_true(rsk_shm_has_peer_ctl(slow.d.ep));
	assert_paired(slow.d.ep, s1.cl.ep, 4);
	assert_paired(s1.cl.ep, slow.d.ep, 5);
	cli_close(&slow);
	cli_close(&c2);
	srv_close(&s1);
	srv_close(&s2);
	assert_int_equal(ucm_fd_count(), before);
}

/*
 * A sibling that dies holding rendezvous entries (a worker killed mid-look) leaves its share
 * in the held count. The others must not wait for it: a plain client accepted afterwards is
 * plain at once, not dropped after the claim's whole bound (-ETIMEDOUT, ECONNABORTED for the
 * application) as with a count that never comes down.
 */
static void test_dead_sibling_holds_nothing(void **state)
{
	struct fix *f = *state;
	struct srv s;
	int64_t ms;
	int silent = rdv_raw(f), fd, status = -1;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) /* not shared yet: its loop takes what is queued and keeps it, then dies */
		_exit((cm->listen_event(f->lh, 0), 0));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	cm->listen_note(f->lh, RSK_LISTEN_FORKED);
	fd = plain_claimed(f, &s, &ms);
	assert_true(ms < 500);
	srv_close(&s);
	close(fd);
	close(silent);
}

/* The lowest free fd number (what the next fd of the application would get). */
static int lowest_free(int any_fd)
{
	int fd = fcntl(any_fd, F_DUPFD, 0);

	assert_true(fd >= 0);
	close(fd);
	return fd;
}

/*
 * The event loop's look for upgrade offers runs beside the application's accepts: it must
 * never take the numbers kept for the application (rsk_fd_reserve): an accept that finds
 * them gone cannot switch a client that has committed and drops it (ECONNABORTED, the
 * client sees a reset). Here 8 clients are queued and the table
 * is filled to 5-10 numbers above the reserve; the old loop took 2 entries (5 fds each) at
 * every event while it counted 16 free numbers anywhere, and 8 events ate into it.
 */
static void test_collect_keeps_reserve(void **state)
{
	struct fix *f = *state;
	struct cli c[8];
	int i, n, *fill, nfill;

	for (i = 0; i < 8; i++)
		cli_full(&c[i], f);
	nfill = rsk_fd_headroom(lowest_free(f->kfd)) - rsk_fd_reserve() - 10;
	assert_true(nfill > 0);
	fill = calloc((size_t)nfill, sizeof(int));
	assert_non_null(fill);
	for (n = 0; n < nfill; n++) {
		fill[n] = fcntl(f->kfd, F_DUPFD, 0);
		assert_true(fill[n] >= 0);
	}
	n = rsk_fd_headroom(lowest_free(f->kfd)) - rsk_fd_reserve(); /* (holes filled too) */
	assert_true(n >= 5 && n <= 10);
	n = nfill;
	for (i = 0; i < 8; i++)
		cm->listen_event(f->lh, 0);
	assert_true(rsk_fd_headroom(lowest_free(f->kfd)) >= rsk_fd_reserve());
	for (n = 0; n < nfill; n++)
		close(fill[n]);
	free(fill);
	for (i = 0; i < 8; i++)
		cli_close(&c[i]);
}

static int announced_n;

/* A TCP-first client, long connected on TCP (*@srv: the server's end), dialed for its move:
 * connected to the rendezvous, its offer not sent yet (upg_offer sends it). */
static void upg_dial(struct cli *c, const struct fix *f, int *srv)
{
	cli_prep(c, &f->dest, f->dest.ss_family);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&c->dest,
				 ucm_sa_len((struct sockaddr *)&c->dest)), 0);
	*srv = accept4(f->kfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(*srv >= 0);
	c->d.upgrade = 1;
	assert_int_equal(cm->dial(&c->d), 0);
}

static void upg_offer(struct cli *c)
{
	int ctl;

	assert_int_equal(rsk_ready_pair(&c->app, &ctl), 0);
	assert_int_equal(cm->offer(&c->d, ctl), 0);
	close(ctl);
	cm->dialed(&c->d);
}

/* Waits (bounded: 5 s) until @n moves were announced; returns how many were. */
static int announced_wait(int n)
{
	int i;

	for (i = 0; i < 500 && __atomic_load_n(&announced_n, __ATOMIC_SEQ_CST) < n; i++)
		usleep(10000);
	return __atomic_load_n(&announced_n, __ATOMIC_SEQ_CST);
}

static int count_announce(const struct sockaddr_storage *peer)
{
	(void)peer;
	__atomic_add_fetch(&announced_n, 1, __ATOMIC_SEQ_CST); /* (from the loop thread too) */
	return 1;
}

/*
 * A burst of upgrade offers bigger than one batch of the loop's look is announced at one
 * event: the look takes the entries off the rendezvous, so no further event comes for the
 * rest. The old look announced 32 and left the others until the next client knocked
 * (redis-benchmark -c 200's last clients never moved, and ended on TCP).
 */
static void test_offer_burst_announced(void **state)
{
	enum { N = 40 };
	struct fix *f = *state;
	struct cli c[N];
	int srv[N], i;

	for (i = 0; i < N; i++) {
		upg_dial(&c[i], f, &srv[i]);
		upg_offer(&c[i]);
	}
	announced_n = 0;
	rsk_transport_set_upgrade_hook(count_announce);
	cm->listen_event(f->lh, 0);
	assert_int_equal(announced_n, N);
	cm->listen_event(f->lh, 0); /* each is announced once */
	assert_int_equal(announced_n, N);
	rsk_transport_set_upgrade_hook(NULL);
	for (i = 0; i < N; i++) {
		cli_close(&c[i]);
		close(srv[i]);
	}
}

/*
 * An upgrade offer that comes after the loop's look gave up waiting for it (its client was
 * slow between its rendezvous connect and its offer) is announced when it comes, by the
 * event loop on its own: the look had taken its connection off the rendezvous, so no
 * rendezvous event would come for it, and the old look announced it only at the next
 * client's knock (none may come: the client then stayed on TCP).
 */
static void test_late_offer_announced(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int srv;

	upg_dial(&c, f, &srv); /* connected to the rendezvous, nothing sent */
	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	cm->listen_event(f->lh, 0); /* takes the connection, waits its while, gives up */
	assert_int_equal(__atomic_load_n(&announced_n, __ATOMIC_SEQ_CST), 0);
	upg_offer(&c); /* now the offer; no rendezvous event */
	assert_int_equal(announced_wait(1), 1);
	cm->listen_event(f->lh, 0);
	assert_int_equal(__atomic_load_n(&announced_n, __ATOMIC_SEQ_CST), 1); /* once */
	rsk_transport_set_upgrade_hook(NULL);
	cli_close(&c);
	close(srv);
}

/*
 * A listener paused (short of fds) does not look, so a late offer's event while paused
 * used its one shot up; and a client queued in the rendezvous before the pause is taken
 * off it at the resume, never waited for. After the resume both offers are announced, with
 * no client knocking. Before, neither was (the late entry's one shot was gone, the other
 * was in no late set): both clients stayed on TCP.
 */
static void test_resume_announces(void **state)
{
	struct fix *f = *state;
	struct cli late, queued;
	int srv[2];

	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	upg_dial(&late, f, &srv[0]);
	cm->listen_event(f->lh, 0); /* takes it, waits its while, gives up: a late entry */
	upg_dial(&queued, f, &srv[1]);
	upg_offer(&queued); /* queued in the rendezvous: no look took it */
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_PAUSE), 1);
	upg_offer(&late); /* its late event comes while paused: no look */
	usleep(100000);
	assert_int_equal(__atomic_load_n(&announced_n, __ATOMIC_SEQ_CST), 0);
	assert_int_equal(cm->listen_note(f->lh, RSK_LISTEN_RESUME), 1);
	assert_int_equal(announced_wait(2), 2);
	rsk_transport_set_upgrade_hook(NULL);
	cli_close(&late);
	cli_close(&queued);
	close(srv[0]);
	close(srv[1]);
}

/* epoll_create1 as the library calls it (rsk_real), failing with EMFILE while create_fail
 * is set; create_calls counts the attempts. */
static int create_fail, create_calls;
static int (*libc_epoll_create1)(int);

static int failing_epoll_create1(int flags)
{
	__atomic_add_fetch(&create_calls, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&create_fail, __ATOMIC_SEQ_CST)) {
		errno = EMFILE;
		return -1;
	}
	return libc_epoll_create1(flags);
}

/*
 * The late set could not be made (EMFILE for a moment): the look does not try again at every
 * knock, but it does once RSK_LATE_RETRY_MS (1 s) passed, and an offer that comes after that
 * is announced by the loop with no client knocking. Made once and never again, one moment
 * short of fds would have left late offers to knocks for the listener's life.
 */
static void test_late_set_retried(void **state)
{
	struct fix *f = *state;
	struct cli c[3];
	int srv[3], i;

	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	libc_epoll_create1 = rsk_real.epoll_create1;
	create_calls = 0;
	create_fail = 1;
	__atomic_store_n(&rsk_real.epoll_create1, failing_epoll_create1, __ATOMIC_RELEASE);
	upg_dial(&c[0], f, &srv[0]);
	cm->listen_event(f->lh, 0); /* a late entry: the set is tried, and fails */
	assert_int_equal(__atomic_load_n(&create_calls, __ATOMIC_SEQ_CST), 1);
	upg_dial(&c[1], f, &srv[1]);
	cm->listen_event(f->lh, 0); /* within the second: not tried again */
	assert_int_equal(__atomic_load_n(&create_calls, __ATOMIC_SEQ_CST), 1);
	__atomic_store_n(&create_fail, 0, __ATOMIC_SEQ_CST);
	usleep(1100000);
	upg_dial(&c[2], f, &srv[2]);
	cm->listen_event(f->lh, 0); /* tried again, made: the three entries go into it */
	assert_int_equal(__atomic_load_n(&create_calls, __ATOMIC_SEQ_CST), 2);
	__atomic_store_n(&rsk_real.epoll_create1, libc_epoll_create1, __ATOMIC_RELEASE);
	upg_offer(&c[0]); /* no knock after it: only the late set can announce it */
	assert_int_equal(announced_wait(1), 1);
	rsk_transport_set_upgrade_hook(NULL);
	for (i = 0; i < 3; i++) {
		cli_close(&c[i]);
		close(srv[i]);
	}
}

/* poll as the library calls it, failing with EINTR on the test's thread while poll_eintr
 * is set (the loop thread's polls go on). */
static int poll_eintr;
static pthread_t eintr_thread;
static int (*libc_poll)(struct pollfd *, nfds_t, int);

static int eintr_poll(struct pollfd *p, nfds_t n, int ms)
{
	if (__atomic_load_n(&poll_eintr, __ATOMIC_SEQ_CST) && pthread_self() == eintr_thread) {
		errno = EINTR;
		return -1;
	}
	return libc_poll(p, n, ms);
}

/*
 * A look whose wait for an offer is interrupted by a signal (poll: EINTR) stops waiting for
 * that entry and leaves it to the late set, as when its deadline passes: the offer that comes
 * later is announced by the loop, with no client knocking.
 */
static void test_look_eintr_leaves_entry_late(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int srv;

	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	upg_dial(&c, f, &srv); /* connected to the rendezvous, nothing sent */
	libc_poll = rsk_real.poll;
	eintr_thread = pthread_self();
	__atomic_store_n(&poll_eintr, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&rsk_real.poll, eintr_poll, __ATOMIC_RELEASE);
	cm->listen_event(f->lh, 0); /* its wait fails at once */
	__atomic_store_n(&rsk_real.poll, libc_poll, __ATOMIC_RELEASE);
	__atomic_store_n(&poll_eintr, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(__atomic_load_n(&announced_n, __ATOMIC_SEQ_CST), 0);
	upg_offer(&c);
	assert_int_equal(announced_wait(1), 1);
	rsk_transport_set_upgrade_hook(NULL);
	cli_close(&c);
	close(srv);
}

/* How many of this process's fds are epoll files. */
static int epoll_fd_count(void)
{
	char path[64], link[64];
	ssize_t n;
	int fd, count = 0;

	for (fd = 0; fd < 65536; fd++) {
		if (fcntl(fd, F_GETFD) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = 0;
			count += strcmp(link, "anon_inode:[eventpoll]") == 0;
		}
	}
	return count;
}

/* The forked child's part: its first accept (a plain client's claim) drops its copy of the
 * parent's late set. 0 when it did. */
static int child_drops_late(struct fix *f)
{
	struct sockaddr_storage peer;
	struct rsk_claim cl;
	int before;

	rsk_proc_forked_child(); /* (what the library's fork hook does first) */
	memset(&cl, 0, sizeof(cl));
	peer = f->dest; /* (no offer names it: a plain client) */
	cl.peer = &peer;
	cl.fd = -1;
	before = epoll_fd_count();
	if (before < 1)
		return 20;
	if (cm->claim(f->lh, &cl, 100) != 0)
		return 21;
	return epoll_fd_count() == before - 1 ? 0 : 22;
}

/*
 * A forked child drops its copy of its parent's late set at its first accept: the parent's
 * epoll file, which the child never uses (the rendezvous is shared from the fork on, and no
 * loop looks), held a hidden fd of the child's for the listener's life. The parent keeps its
 * own.
 */
static void test_child_drops_inherited_late_set(void **state)
{
	struct fix *f = *state;
	struct cli c;
	int srv, before;
	pid_t pid;

	upg_dial(&c, f, &srv);
	cm->listen_event(f->lh, 0); /* a late entry: the late set is made */
	before = epoll_fd_count();
	cm->listen_note(f->lh, RSK_LISTEN_FORKED); /* what the fork hook tells it */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_drops_late(f));
	assert_child_ok(pid);
	assert_int_equal(epoll_fd_count(), before); /* the parent's stays */
	cli_close(&c);
	close(srv);
}

/*
 * An accept's look on the way to its own offer passes a mover's rendezvous connection: with
 * its upgrade offer queued already (@offered; the look reads it) or before its offer came
 * (the client writes it a moment after connecting). Either way the look took it off the
 * rendezvous, so if the loop had not seen the rendezvous readable, no rendezvous event comes
 * for it. The loop announces it all the same, once: the offer read is armed to fire at once,
 * the connection without one waits in late_ep. Before, the first waited for the next client
 * to knock, and the second sat unread (CI's int_version_mix_shm: a TCP-first connection,
 * all three of one run, stayed on TCP).
 */
static void accept_passes_mover(const struct fix *f, int offered)
{
	struct cli c;
	struct srv s;
	int srv, fd;

	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	upg_dial(&c, f, &srv);
	if (offered)
		upg_offer(&c); /* queued: the fixture's loop does not watch the rendezvous */
	fd = plain_claimed(f, &s, NULL); /* its look takes the mover's, not its own */
	if (!offered)
		upg_offer(&c); /* now: no rendezvous event, and no look calls */
	assert_int_equal(announced_wait(1), 1);
	cm->listen_event(f->lh, 0);
	assert_int_equal(__atomic_load_n(&announced_n, __ATOMIC_SEQ_CST), 1); /* once */
	rsk_transport_set_upgrade_hook(NULL);
	srv_close(&s);
	close(fd);
	cli_close(&c);
	close(srv);
}

static void test_accept_read_offer_announced(void **state)
{
	accept_passes_mover(*state, 1);
}

static void test_accept_took_unoffered_announced(void **state)
{
	accept_passes_mover(*state, 0);
}

/* A knock at this process's own door for client @c's move, as the client sends one to each
 * process its listener's bell names (a bell of this test names no other process). */
static void knock_self(const struct cli *c)
{
	struct rsk_rdv_knock k = {.magic = RSK_RDV_KNOCK_MAGIC};
	struct sockaddr_un un;
	socklen_t len = sizeof(k.client), ul = rsk_rdv_door_name(&un, getpid());
	size_t n;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(getsockname(c->fd, (struct sockaddr *)&k.client, &len), 0);
	k.len = len;
	n = offsetof(struct rsk_rdv_knock, client) + len;
	assert_int_equal(sendto(fd, &k, n, 0, (struct sockaddr *)&un, ul), (ssize_t)n);
	close(fd);
}

/*
 * Shared with siblings (prefork), the rendezvous has no loop of ours looking at it: a knock at
 * this process's door for a connection of ours takes that upgrade offer in at once
 * (rsk_shm_pull), and the connection's own claim finds it. Until some process reads it, the
 * queued offer holds the client's TCP socket: a client that closes right after its offer
 * had its FIN held back, and a server waiting to read waited (before the knocks nothing
 * read it until the next accept of any sibling).
 */
static void test_knock_pulls_offer(void **state)
{
	struct fix *f = *state;
	struct sockaddr_storage peer;
	struct rsk_claim cl;
	struct cli c;
	struct srv s;
	socklen_t len = sizeof(peer);
	int srv, fd;
	char b;

	cm->listen_note(f->lh, RSK_LISTEN_FORKED); /* what the fork hook tells it */
	__atomic_store_n(&announced_n, 0, __ATOMIC_SEQ_CST);
	rsk_transport_set_upgrade_hook(count_announce);
	fd = plain_claimed(f, &s, NULL); /* a shared listener's accept opens the door */
	srv_close(&s);
	close(fd);
	assert_true(rsk_door_fd() >= 0);
	upg_dial(&c, f, &srv);
	upg_offer(&c);
	knock_self(&c);
	assert_int_equal(announced_wait(1), 1);
	/* the client goes: its FIN reaches the server now that nobody else holds its socket */
	close(c.fd);
	c.fd = -1;
	assert_true(readable(srv, 2000));
	assert_int_equal(recv(srv, &b, 1, MSG_DONTWAIT), 0);
	/* and the entry waits here for its connection's claim */
	assert_int_equal(getpeername(srv, (struct sockaddr *)&peer, &len), 0);
	memset(&cl, 0, sizeof(cl));
	cl.peer = &peer;
	cl.fd = srv;
	assert_int_equal(cm->claim(f->lh, &cl, 0), 1);
	assert_true(cl.upgrade);
	cm->unclaim(&cl, 0);
	rsk_transport_set_upgrade_hook(NULL);
	cli_close(&c);
	close(srv);
}

#define T4(f) cmocka_unit_test_setup_teardown(f, setup4, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T4(test_dial_claim_data),
		T4(test_wildcard_listener),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_dual_stack_listener_ipv4_client),
		cmocka_unit_test(test_mapped_client_ipv4_listener),
		T4(test_dial_no_peer),
		T4(test_undial),
		T4(test_bell_quiet),
		T4(test_bell_quiet_shared),
		T4(test_claim_plain_client),
		T4(test_dead_client),
		T4(test_unclaim_declines),
		T4(test_claim_by_port),
		T4(test_hostile_rendezvous),
		T4(test_other_version_declined),
		cmocka_unit_test(test_declined_answer),
		T4(test_second_listen_refused),
		T4(test_pause_resume),
		T4(test_leaked_for_good),
		T4(test_prefork_sibling_claims),
		T4(test_shared_hands_back_unread),
		T4(test_dead_sibling_holds_nothing),
		T4(test_collect_keeps_reserve),
		T4(test_offer_burst_announced),
		T4(test_late_offer_announced),
		T4(test_resume_announces),
		T4(test_late_set_retried),
		T4(test_look_eintr_leaves_entry_late),
		T4(test_child_drops_inherited_late_set),
		T4(test_accept_read_offer_announced),
		T4(test_accept_took_unoffered_announced),
		T4(test_knock_pulls_offer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
