/*
 * Unit tests for core/calls/sockopt: options, names and ioctls of an accelerated socket,
 * whose TCP socket is gone. Every answer is compared with what a real loopback TCP socket
 * of the kernel says for the same call: values checked and normalised the kernel's way
 * (SO_RCVBUF doubled, EINVAL and EDOM as the kernel gives them), kept per connection for
 * getsockopt, applied where the engine honours them (timeouts, linger, NODELAY, CORK);
 * the connection's own answers (type, domain, protocol, error once, TCP_INFO with our
 * counts and states); names as set up, truncated as the kernel truncates; FIONREAD,
 * SIOCOUTQ, SIOCATMARK, FIONBIO, and the generic requests of any TCP socket. A relay's
 * stand-in (a unix socket bound to stand-in names) answers for its TCP socket through the
 * plain calls, and every other socket gets the kernel's answer from them.
 *
 * The accelerated socket is built by hand, as rsk_sock_become leaves it: a tracked fd
 * (one end of a socketpair standing for the app end) whose object names a connection on a
 * shared-memory endpoint, with a peer endpoint and stream driven by the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/standin.h"
#include "calls/sockopt.h"
#include "conn/conn.h"
#include "sock/bearer.h"
#include "sock/sock.h"
#include "stream/stream.h"
#include "transport/shm.h"
#include "unit_cm.h"
#include "unit_count.h"

#define NBUF 8
#define BSIZE 4096

struct accel {
	int fd, other;          /* the application's fd (an app end) and its partner */
	struct rsk_conn *c;
	struct rsk_sock *s;
	int memfd;
	struct rsk_ep *peer;    /* the other side */
	struct rsk_stream pst;
	int kfd;                /* a kernel TCP socket of the same family, to compare with */
};

static struct accel A;

static int setup(void **state)
{
	struct accel *a = &A;
	struct sockaddr_in local = ucm_in4("127.0.0.1", 40001), peer = ucm_in4("127.0.0.2", 5000);
	int sv[2];

	(void)state;
	memset(a, 0, sizeof(*a));
	rsk_config_defaults(&rsk_config);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	a->fd = sv[0];
	a->other = sv[1];
	a->c = rsk_conn_alloc(NBUF, rsk_shm_ep_size());
	assert_non_null(a->c);
	a->memfd = rsk_shm_create_open(NBUF, BSIZE, rsk_conn_ep_mem(a->c), &a->c->ep);
	assert_true(a->memfd >= 0);
	assert_int_equal(rsk_shm_open(a->memfd, RSK_SHM_SERVER, -1, NULL, &a->peer), 0);
	assert_int_equal(rsk_stream_init(&a->c->st, a->c->ep, rsk_conn_rxq(a->c)), 0);
	assert_int_equal(rsk_stream_init(&a->pst, a->peer, NULL), 0);
	a->pst.nodelay = 1;
	a->c->transport = RDMASOCK_TRANSPORT_SHM;
	a->c->domain = AF_INET;
	memcpy(&a->c->local, &local, sizeof(local));
	a->c->local_len = sizeof(local);
	memcpy(&a->c->peer, &peer, sizeof(peer));
	a->c->peer_len = sizeof(peer);
	/* what rsk_sock_become leaves: an untagged slot naming an object with the connection */
	assert_int_equal(rsk_sock_track(a->fd, AF_INET, RSK_SOCK_CONNECTED), 0);
	a->s = rsk_sock_get(a->fd);
	a->s->conn = a->c;
	a->s->transport = RDMASOCK_TRANSPORT_SHM;
	assert_int_equal(rsk_fdtab_store(a->fd, (uintptr_t)a->s), 0);
	a->kfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(a->kfd >= 0);
	return 0;
}

static int teardown(void **state)
{
	struct accel *a = &A;

	(void)state;
	a->s->conn = NULL;
	rsk_sock_put(a->s);
	(void)rsk_sock_release_fd(a->fd);
	rsk_stream_fini(&a->c->st);
	rsk_stream_fini(&a->pst);
	rsk_ep_destroy(a->peer);
	rsk_conn_discard(a->c, -1, -1, -1); /* the endpoint and the region */
	close(a->memfd);
	close(a->fd);
	close(a->other);
	close(a->kfd);
	return 0;
}

static int get_int(int fd, int level, int name, int *v)
{
	socklen_t len = sizeof(*v);

	return fd == A.fd ? rsk_opt_get(fd, level, name, v, &len)
			  : (getsockopt(fd, level, name, v, &len) < 0 ? -errno : 0);
}

static int set_int(int fd, int level, int name, int v)
{
	return fd == A.fd ? rsk_opt_set(fd, level, name, &v, sizeof(v))
			  : (setsockopt(fd, level, name, &v, sizeof(v)) < 0 ? -errno : 0);
}

/* ---- not accelerated ---- */

static void test_not_accelerated(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int v = 0, k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	(void)state;
	/* untracked, and tracked but still a kernel socket: the caller asks libc */
	assert_int_equal(rsk_opt_get(k, SOL_SOCKET, SO_TYPE, &v, &len), -EBADF);
	assert_int_equal(rsk_sock_track(k, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(rsk_opt_get(k, SOL_SOCKET, SO_TYPE, &v, &len), -EBADF);
	assert_int_equal(rsk_opt_set(k, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)), -EBADF);
	assert_int_equal(rsk_opt_sockname(k, (struct sockaddr *)&ss, &len), -EBADF);
	assert_int_equal(rsk_opt_peername(k, (struct sockaddr *)&ss, &len), -EBADF);
	assert_int_equal(rsk_opt_ioctl(k, FIONREAD, (unsigned long)&v), -EBADF);
	assert_int_equal(rsk_sock_release_fd(k), 1);
	close(k);
}

/* ---- the connection's own answers ---- */

static void test_own_answers(void **state)
{
	int v;

	(void)state;
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_TYPE, &v), 0);
	assert_int_equal(v, SOCK_STREAM);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_DOMAIN, &v), 0);
	assert_int_equal(v, AF_INET);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_PROTOCOL, &v), 0);
	assert_int_equal(v, IPPROTO_TCP);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_ACCEPTCONN, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_ERROR, &v), 0);
	assert_int_equal(v, 0);
	/* NULL buffers: EFAULT, as the kernel's copy to user space fails */
	assert_int_equal(rsk_opt_get(A.fd, SOL_SOCKET, SO_TYPE, NULL, NULL), -EFAULT);
}

/* A short buffer gets the value truncated, as the kernel does for int options. */
static void test_short_length(void **state)
{
	unsigned char b[4] = {0xee, 0xee, 0xee, 0xee}, kb[4] = {0xee, 0xee, 0xee, 0xee};
	socklen_t len = 1, klen = 1;

	(void)state;
	assert_int_equal(getsockopt(A.kfd, SOL_SOCKET, SO_TYPE, kb, &klen), 0);
	assert_int_equal(rsk_opt_get(A.fd, SOL_SOCKET, SO_TYPE, b, &len), 0);
	assert_int_equal(len, klen);
	assert_memory_equal(b, kb, sizeof(b));
	len = klen = 2;
	assert_int_equal(getsockopt(A.kfd, IPPROTO_TCP, TCP_NODELAY, kb, &klen), 0);
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_NODELAY, b, &len), 0);
	assert_int_equal(len, klen);
	assert_memory_equal(b, kb, sizeof(b));
	/* a negative length is what the kernel refuses */
	len = klen = (socklen_t)-1;
	assert_int_equal(getsockopt(A.kfd, SOL_SOCKET, SO_TYPE, kb, &klen), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rsk_opt_get(A.fd, SOL_SOCKET, SO_TYPE, b, &len), -EINVAL);
}

/*
 * The stream was reset: SO_ERROR reports it once and consumes it, as TCP's does; a later
 * recv then sees EOF and a send EPIPE (TCP: the pending error is reported by whichever
 * asks first).
 */
static void test_so_error_once(void **state)
{
	struct iovec iov;
	char b[8];
	int v;

	(void)state;
	rsk_stream_set_error(&A.c->st, -ECONNRESET);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_ERROR, &v), 0);
	assert_int_equal(v, ECONNRESET);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_ERROR, &v), 0);
	assert_int_equal(v, 0);
	iov.iov_base = b;
	iov.iov_len = sizeof(b);
	assert_int_equal(rsk_stream_recv(&A.c->st, &iov, 1, 0), 0);
	assert_int_equal(rsk_stream_send(&A.c->st, &iov, 1, 0), -EPIPE);
}

/* Until something consumes it, the error stays pending for SO_ERROR. */
static void test_so_error_after_recv(void **state)
{
	struct iovec iov;
	char b[8];
	int v;

	(void)state;
	rsk_stream_set_error(&A.c->st, -ECONNRESET);
	iov.iov_base = b;
	iov.iov_len = sizeof(b);
	assert_int_equal(rsk_stream_recv(&A.c->st, &iov, 1, 0), -ECONNRESET);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_ERROR, &v), 0);
	assert_int_equal(v, 0); /* recv took it */
}

static void test_tcp_info(void **state)
{
	struct tcp_info ti, kti;
	socklen_t len = sizeof(ti), klen = sizeof(kti);
	struct iovec iov;
	char buf[100] = {0};

	(void)state;
	/* our counts: 100 bytes each way, one message each */
	iov.iov_base = buf;
	iov.iov_len = sizeof(buf);
	A.c->st.nodelay = 1;
	assert_int_equal(rsk_stream_send(&A.c->st, &iov, 1, 0), 100);
	assert_int_equal(rsk_stream_progress(&A.pst), 1);
	assert_int_equal(rsk_stream_recv(&A.pst, &iov, 1, 0), 100);
	assert_int_equal(rsk_stream_send(&A.pst, &iov, 1, 0), 100);
	assert_int_equal(rsk_stream_progress(&A.c->st), 1);
	assert_int_equal(rsk_stream_recv(&A.c->st, &iov, 1, 0), 100);
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(getsockopt(A.kfd, IPPROTO_TCP, TCP_INFO, &kti, &klen), 0);
	assert_int_equal(len, klen); /* the kernel's size of the structure */
	assert_int_equal(ti.tcpi_state, 1); /* ESTABLISHED */
	assert_int_equal(ti.tcpi_bytes_sent, 100);
	assert_int_equal(ti.tcpi_bytes_acked, 100);
	assert_int_equal(ti.tcpi_bytes_received, 100);
	assert_int_equal(ti.tcpi_segs_out, 1);
	assert_int_equal(ti.tcpi_segs_in, 1);
	assert_int_equal(ti.tcpi_snd_mss, BSIZE);
	assert_int_equal(ti.tcpi_snd_cwnd, NBUF);
	/* a short buffer: the first bytes only, and the length says so */
	len = 8;
	memset(&ti, 0, sizeof(ti));
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(len, 8);
	assert_int_equal(ti.tcpi_state, 1);
	assert_int_equal(ti.tcpi_rto, 0); /* not written */
	/* the states TCP would be in */
	len = sizeof(ti);
	A.c->st.shut_wr = 1;
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(ti.tcpi_state, 5); /* FIN_WAIT2 */
	A.c->st.shut_wr = 0;
	A.c->st.fin_rcvd = 1;
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(ti.tcpi_state, 8); /* CLOSE_WAIT */
	A.c->st.shut_wr = 1; /* our FIN not gone yet */
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(ti.tcpi_state, 11); /* CLOSING */
	A.c->st.fin_sent = 1; /* both FINs: the kernel's socket is CLOSE, its peer name gone */
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(ti.tcpi_state, 7); /* CLOSE */
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		assert_int_equal(rsk_opt_peername(A.fd, (struct sockaddr *)&ss, &sl), -ENOTCONN);
		sl = sizeof(ss);
		assert_int_equal(rsk_opt_sockname(A.fd, (struct sockaddr *)&ss, &sl), 0);
	}
	A.c->st.fin_sent = A.c->st.shut_wr = A.c->st.fin_rcvd = 0;
	A.c->st.err = -ECONNRESET;
	assert_int_equal(rsk_opt_get(A.fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	assert_int_equal(ti.tcpi_state, 7); /* CLOSE */
}

/* ---- options the application sets ---- */

/* Checked and normalised as the kernel does, kept, read back the kernel's way. */
static void test_set_get_like_kernel(void **state)
{
	static const struct {
		int level, name, value;
	} cases[] = {
		{SOL_SOCKET, SO_RCVBUF, 65536},   /* doubled */
		{SOL_SOCKET, SO_SNDBUF, 1},       /* raised to the minimum */
		{SOL_SOCKET, SO_KEEPALIVE, 1},
		{SOL_SOCKET, SO_KEEPALIVE, 7},    /* any nonzero reads back as 1 */
		{SOL_SOCKET, SO_REUSEADDR, 1},
		{SOL_SOCKET, SO_PRIORITY, 3},
		{IPPROTO_TCP, TCP_KEEPIDLE, 77},
		{IPPROTO_TCP, TCP_KEEPINTVL, 5},
		{IPPROTO_TCP, TCP_KEEPCNT, 4},
		{IPPROTO_TCP, TCP_USER_TIMEOUT, 1234},
		{IPPROTO_IP, IP_TOS, 0x10},
		{IPPROTO_IP, IP_TTL, 33},
	};
	size_t i;
	int v, kv, rc, krc;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		krc = set_int(A.kfd, cases[i].level, cases[i].name, cases[i].value);
		rc = set_int(A.fd, cases[i].level, cases[i].name, cases[i].value);
		assert_int_equal(rc, krc);
		assert_int_equal(get_int(A.kfd, cases[i].level, cases[i].name, &kv), 0);
		assert_int_equal(get_int(A.fd, cases[i].level, cases[i].name, &v), 0);
		if (v != kv)
			fail_msg("option %d/%d: %d, the kernel says %d", cases[i].level,
				 cases[i].name, v, kv);
	}
	/* refused as the kernel refuses: out of range, too short, unknown */
	assert_int_equal(set_int(A.fd, IPPROTO_TCP, TCP_KEEPIDLE, 0),
			 set_int(A.kfd, IPPROTO_TCP, TCP_KEEPIDLE, 0));
	assert_int_equal(set_int(A.fd, IPPROTO_TCP, TCP_KEEPIDLE, 0), -EINVAL);
	{
		char one = 1;

		assert_int_equal(rsk_opt_set(A.fd, IPPROTO_TCP, TCP_KEEPCNT, &one, 1), -EINVAL);
	}
	assert_int_equal(set_int(A.fd, SOL_SOCKET, 0x7fff, 1), -ENOPROTOOPT);
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_KEEPALIVE, NULL, 4), -EFAULT);
	/* a refused value leaves the kept one alone */
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_KEEPIDLE, &v), 0);
	assert_int_equal(v, 77);
	/* never set: the default of a TCP socket */
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_MAXSEG, &v), 0);
	assert_int_equal(get_int(A.kfd, IPPROTO_TCP, TCP_MAXSEG, &kv), 0);
	assert_int_equal(v, kv);
}

/* What the engine itself honours. */
static void test_applied(void **state)
{
	struct timeval tv = {2, 500000}, got;
	struct linger lg = {1, 0};
	socklen_t len = sizeof(got);
	int v;

	(void)state;
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(A.c->rcvtimeo_us, 2500000);
	tv.tv_sec = 0;
	tv.tv_usec = 1000;
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(A.c->sndtimeo_us, 1000);
	assert_int_equal(rsk_opt_get(A.fd, SOL_SOCKET, SO_SNDTIMEO, &got, &len), 0);
	{
		struct timeval kgot;
		socklen_t klen = sizeof(kgot);

		/* read back as the kernel rounds it (to its clock tick) */
		assert_int_equal(setsockopt(A.kfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
		assert_int_equal(getsockopt(A.kfd, SOL_SOCKET, SO_SNDTIMEO, &kgot, &klen), 0);
		assert_int_equal(len, klen);
		assert_int_equal(got.tv_sec, kgot.tv_sec);
		assert_int_equal(got.tv_usec, kgot.tv_usec);
	}
	/* a bad timeval is refused (EDOM) and changes nothing */
	tv.tv_usec = 2000000;
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), -EDOM);
	assert_int_equal(A.c->sndtimeo_us, 1000);
	/* SO_LINGER {1, 0}: close resets */
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	assert_int_equal(A.c->linger0, 1);
	lg.l_linger = 5;
	assert_int_equal(rsk_opt_set(A.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	assert_int_equal(A.c->linger0, 0);
	/* NODELAY and CORK are the stream's, and read back from it */
	assert_int_equal(set_int(A.fd, IPPROTO_TCP, TCP_NODELAY, 1), 0);
	assert_int_equal(A.c->st.nodelay, 1);
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_NODELAY, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(set_int(A.fd, IPPROTO_TCP, TCP_NODELAY, 0), 0);
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_NODELAY, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(set_int(A.fd, IPPROTO_TCP, TCP_CORK, 1), 0);
	assert_int_equal(A.c->st.cork, 1);
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_CORK, &v), 0);
	assert_int_equal(v, 1);
}

/* What a TCP socket was given before it became a connection (before connect, by its
 * listener, before a move) is the connection's: applied, and read back as the kernel reads
 * it; defaults take no slot of the table. */
static void test_adopt_kernel(void **state)
{
	struct timeval tv = {1, 500000};
	struct linger lg = {1, 0}, lgot;
	socklen_t len = sizeof(lgot);
	int v, k;

	(void)state;
	assert_int_equal(setsockopt(A.kfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(A.kfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	assert_int_equal(set_int(A.kfd, SOL_SOCKET, SO_KEEPALIVE, 1), 0);
	assert_int_equal(set_int(A.kfd, IPPROTO_TCP, TCP_KEEPIDLE, 55), 0);
	assert_int_equal(set_int(A.kfd, SOL_SOCKET, SO_RCVBUF, 12345), 0);
	rsk_opt_adopt_kernel(A.c, AF_INET, A.kfd);
	assert_int_equal(A.c->rcvtimeo_us, 1500000);
	assert_int_equal(A.c->linger0, 1);
	assert_int_equal(A.c->sndtimeo_us, 0);
	assert_int_equal(A.c->nopts, 5); /* the five set; every default left out */
	assert_int_equal(rsk_opt_get(A.fd, SOL_SOCKET, SO_LINGER, &lgot, &len), 0);
	assert_int_equal(lgot.l_onoff, 1);
	assert_int_equal(lgot.l_linger, 0);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_KEEPALIVE, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_KEEPIDLE, &v), 0);
	assert_int_equal(v, 55);
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_RCVBUF, &v), 0);
	assert_int_equal(get_int(A.kfd, SOL_SOCKET, SO_RCVBUF, &k), 0);
	assert_int_equal(v, k); /* (doubled, as the kernel keeps it) */
	/* an unknown family: nothing read */
	rsk_opt_adopt_kernel(A.c, AF_UNIX, A.kfd);
	assert_int_equal(A.c->nopts, 5);
}

/* Trying a value on the template leaves its default as it was: SO_SNDBUF read back doubled
 * and set again so doubled it at every try, and an unset socket read that. */
static void test_template_default_kept(void **state)
{
	int v, k, i;

	(void)state;
	for (i = 0; i < 3; i++)
		assert_int_equal(set_int(A.fd, SOL_SOCKET, SO_SNDBUF, 20000 + i), 0);
	A.c->nopts = 0; /* unset again: the template's default answers */
	assert_int_equal(get_int(A.fd, SOL_SOCKET, SO_SNDBUF, &v), 0);
	assert_int_equal(get_int(A.kfd, SOL_SOCKET, SO_SNDBUF, &k), 0);
	assert_int_equal(v, k);
}

/* A new or listening socket notes an option a connection carries, and only such a one: a
 * listener's SO_REUSEADDR costs its connections no look at the kernel's socket. */
static void test_carried_noted(void **state)
{
	struct timeval tv = {0, 300000};
	int one = 1, k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct rsk_sock *s;

	(void)state;
	assert_int_equal(rsk_sock_track(k, AF_INET, RSK_SOCK_NEW), 0);
	s = rsk_sock_get(k);
	assert_int_equal(rsk_opt_plain_set(k, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(rsk_opt_plain_set(k, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	assert_int_equal(s->opts_set, 0);
	assert_int_equal(rsk_opt_plain_set(k, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(s->opts_set, 1);
	/* listening: noted too (its connections inherit it) */
	s->opts_set = 0;
	s->state = RSK_SOCK_LISTENING;
	assert_int_equal(rsk_opt_plain_set(k, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), 0);
	assert_int_equal(s->opts_set, 1);
	/* a connection's own setsockopt: not a note for anyone */
	s->opts_set = 0;
	s->state = RSK_SOCK_CONNECTED;
	assert_int_equal(rsk_opt_plain_set(k, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), 0);
	assert_int_equal(s->opts_set, 0);
	rsk_sock_put(s);
	assert_int_equal(rsk_sock_release_fd(k), 1);
	close(k);
}

/* The per-connection table is bounded: beyond it a set still works (applied, checked) and
 * reads give the default again, not an error. Refused values are never kept. */
static void test_kept_table_bounded(void **state)
{
	static const struct {
		int level, name, value;
	} fill[RSK_CONN_OPTS] = {
		{SOL_SOCKET, SO_KEEPALIVE, 1},      {SOL_SOCKET, SO_REUSEADDR, 1},
		{SOL_SOCKET, SO_PRIORITY, 2},       {SOL_SOCKET, SO_RCVBUF, 50000},
		{SOL_SOCKET, SO_SNDBUF, 50000},     {SOL_SOCKET, SO_OOBINLINE, 1},
		{SOL_SOCKET, SO_RCVLOWAT, 2},       {SOL_SOCKET, SO_DONTROUTE, 1},
		{IPPROTO_TCP, TCP_KEEPIDLE, 50},    {IPPROTO_TCP, TCP_KEEPINTVL, 6},
		{IPPROTO_TCP, TCP_KEEPCNT, 3},      {IPPROTO_TCP, TCP_USER_TIMEOUT, 999},
		{IPPROTO_TCP, TCP_SYNCNT, 3},       {IPPROTO_TCP, TCP_LINGER2, 10},
		{IPPROTO_TCP, TCP_NOTSENT_LOWAT, 9999}, {IPPROTO_IP, IP_TOS, 0x08},
	};
	int v, kv, i;

	(void)state;
	assert_int_equal(set_int(A.fd, IPPROTO_IP, 0x7fff, 1), -ENOPROTOOPT);
	assert_int_equal(A.c->nopts, 0); /* refused: not kept */
	assert_int_equal(set_int(A.fd, IPPROTO_IP, IP_TTL, 44), 0);
	assert_int_equal(set_int(A.fd, IPPROTO_IP, IP_TTL, 45), 0); /* the same slot */
	assert_int_equal(A.c->nopts, 1);
	assert_int_equal(get_int(A.fd, IPPROTO_IP, IP_TTL, &v), 0);
	assert_int_equal(v, 45);
	for (i = 0; i < RSK_CONN_OPTS - 1; i++)
		assert_int_equal(set_int(A.fd, fill[i].level, fill[i].name, fill[i].value), 0);
	assert_int_equal(A.c->nopts, RSK_CONN_OPTS);
	/* full: the next one is accepted, and reads as a fresh socket's */
	assert_int_equal(set_int(A.fd, fill[RSK_CONN_OPTS - 1].level, fill[RSK_CONN_OPTS - 1].name,
				 fill[RSK_CONN_OPTS - 1].value), 0);
	assert_int_equal(get_int(A.fd, IPPROTO_IP, IP_TOS, &v), 0);
	assert_int_equal(get_int(A.kfd, IPPROTO_IP, IP_TOS, &kv), 0);
	assert_int_equal(v, kv);
	/* the kept ones still read back */
	assert_int_equal(get_int(A.fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v), 0);
	assert_int_equal(v, 999);
}

/* ---- names ---- */

static void test_names(void **state)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;
	socklen_t len = sizeof(ss);

	(void)state;
	assert_int_equal(rsk_opt_sockname(A.fd, (struct sockaddr *)&ss, &len), 0);
	assert_int_equal(len, sizeof(struct sockaddr_in));
	assert_int_equal(in->sin_family, AF_INET);
	assert_int_equal(ntohs(in->sin_port), 40001);
	len = sizeof(ss);
	assert_int_equal(rsk_opt_peername(A.fd, (struct sockaddr *)&ss, &len), 0);
	assert_int_equal(ntohs(in->sin_port), 5000);
	assert_int_equal(ntohl(in->sin_addr.s_addr), 0x7f000002);
	/* a short buffer: truncated, and the length says how long the name is */
	memset(&ss, 0xee, sizeof(ss));
	len = 4;
	assert_int_equal(rsk_opt_peername(A.fd, (struct sockaddr *)&ss, &len), 0);
	assert_int_equal(len, sizeof(struct sockaddr_in));
	assert_int_equal(in->sin_family, AF_INET);
	assert_int_equal(((unsigned char *)&ss)[4], 0xee);
	assert_int_equal(rsk_opt_peername(A.fd, NULL, &len), -EFAULT);
	/* no peer known: not connected */
	A.c->peer_len = 0;
	len = sizeof(ss);
	assert_int_equal(rsk_opt_peername(A.fd, (struct sockaddr *)&ss, &len), -ENOTCONN);
}

/* ---- ioctls ---- */

static void test_ioctls(void **state)
{
	char buf[3000] = {0};
	struct iovec iov = {buf, sizeof(buf)};
	int v = -1, on = 1, kv = -1;

	(void)state;
	assert_int_equal(rsk_opt_ioctl(A.fd, FIONREAD, (unsigned long)&v), 0);
	assert_int_equal(v, 0);
	/* the peer sends: FIONREAD counts it (harvested by the call itself) */
	assert_int_equal(rsk_stream_send(&A.pst, &iov, 1, 0), (ssize_t)sizeof(buf));
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCINQ, (unsigned long)&v), 0);
	assert_int_equal(v, (int)sizeof(buf));
	/* a staged (corked) message is still ours: SIOCOUTQ; posted ones are not */
	A.c->st.cork = 1;
	iov.iov_len = 10;
	assert_int_equal(rsk_stream_send(&A.c->st, &iov, 1, 0), 10);
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCOUTQ, (unsigned long)&v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCOUTQNSD, (unsigned long)&v), 0);
	assert_int_equal(v, 10);
	rsk_stream_set_cork(&A.c->st, 0);
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCOUTQ, (unsigned long)&v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCATMARK, (unsigned long)&v), 0);
	assert_int_equal(v, 0);
	/* FIONBIO: the connection's mode and the open file's */
	assert_int_equal(rsk_opt_ioctl(A.fd, FIONBIO, (unsigned long)&on), 0);
	assert_int_equal(A.c->nonblock, 1);
	assert_true(fcntl(A.fd, F_GETFL) & O_NONBLOCK);
	on = 0;
	assert_int_equal(rsk_opt_ioctl(A.fd, FIONBIO, (unsigned long)&on), 0);
	assert_int_equal(A.c->nonblock, 0);
	assert_false(fcntl(A.fd, F_GETFL) & O_NONBLOCK);
	assert_int_equal(rsk_opt_ioctl(A.fd, FIOCLEX, 0), 0);
	assert_true(fcntl(A.fd, F_GETFD) & FD_CLOEXEC);
	/* anything else: as an unconnected TCP socket answers it */
	assert_int_equal(rsk_opt_ioctl(A.fd, SIOCGSTAMP, (unsigned long)buf),
			 ioctl(A.kfd, SIOCGSTAMP, buf) < 0 ? -errno : 0);
	assert_int_equal(rsk_opt_ioctl(A.fd, 0x89ff, (unsigned long)&v),
			 ioctl(A.kfd, 0x89ff, &kv) < 0 ? -errno : 0);
}

/* ---- a relay's stand-in: a plain unix socket answering for its TCP socket ---- */

/* A socketpair whose ends carry stand-in names (as conn/relay.c binds them): @st[0] has
 * @local, @st[1] @peer. */
static void standin_pair(int st[2], struct sockaddr_in *local, struct sockaddr_in *peer)
{
	*local = ucm_in4("127.0.0.1", 40001);
	*peer = ucm_in4("127.0.0.2", 5000);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st), 0);
	assert_int_equal(rsk_addr_name_bind(st[0], (struct sockaddr *)local, sizeof(*local), NULL), 0);
	assert_int_equal(rsk_addr_name_bind(st[1], (struct sockaddr *)peer, sizeof(*peer), NULL), 0);
}

static void test_standin_names(void **state)
{
	struct sockaddr_in local, peer;
	struct sockaddr_storage got;
	socklen_t len;
	int st[2];

	(void)state;
	standin_pair(st, &local, &peer);
	len = sizeof(got);
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(len, sizeof(local));
	assert_memory_equal(&got, &local, sizeof(local));
	len = sizeof(got);
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 1), 0);
	assert_int_equal(len, sizeof(peer));
	assert_memory_equal(&got, &peer, sizeof(peer));
	/* a buffer of 8 bytes: truncated, the full length reported, as the kernel does; and
	 * the unix name the kernel wrote first is gone from the caller's buffer */
	memset(&got, 0x5a, sizeof(got));
	len = 8;
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(len, sizeof(local));
	assert_memory_equal(&got, &local, 8);
	assert_int_equal(((unsigned char *)&got)[8], 0x5a);
	close(st[0]);
	close(st[1]);
}

/*
 * A connect again on a stand-in (a bearer connection's number; the kernel says EINVAL, as the
 * address is TCP's) says EISCONN, as the TCP socket it stands for would. Its own name decides:
 * one system call, where the full stand-in check made three on every such connection. An
 * unnamed pair keeps EINVAL, and other errors pass.
 */
static void test_standin_connect_again(void **state)
{
	struct sockaddr_in local, peer;
	int st[2], sv[2];

	(void)state;
	standin_pair(st, &local, &peer);
	assert_int_equal(rsk_opt_plain_connect_err(st[0], -EINVAL), -EISCONN);
	assert_int_equal(rsk_opt_plain_connect_err(st[1], -EINVAL), -EISCONN);
	assert_int_equal(rsk_opt_plain_connect_err(st[0], -ECONNREFUSED), -ECONNREFUSED);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(rsk_opt_plain_connect_err(sv[0], -EINVAL), -EINVAL);
	close(sv[0]);
	close(sv[1]);
	close(st[0]);
	close(st[1]);
}

/* Any other socket gets the kernel's answer unchanged: an unnamed pair, a named one. */
static void test_plain_names_unchanged(void **state)
{
	struct sockaddr_storage got;
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	socklen_t len = sizeof(got);
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(rsk_opt_plain_name(sv[0], (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(got.ss_family, AF_UNIX);
	assert_int_equal(len, sizeof(sa_family_t));
	memcpy(un.sun_path, "\0rdmasock-tcp/1/zz", 19); /* our tag, not our form */
	assert_int_equal(bind(sv[1], (struct sockaddr *)&un,
			      offsetof(struct sockaddr_un, sun_path) + 19), 0);
	len = sizeof(got);
	assert_int_equal(rsk_opt_plain_name(sv[1], (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(got.ss_family, AF_UNIX);
	assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 19);
	assert_int_equal(rsk_opt_plain_name(sv[1], NULL, &len, 0), -EFAULT);
	assert_int_equal(rsk_opt_plain_name(-1, (struct sockaddr *)&got, &len, 1), -EBADF);
	close(sv[0]);
	close(sv[1]);
}

/* A client that binds a name of our form and connects to a program's unix listener claims
 * nothing: the accepted socket's own name is the listener's, no stand-in. */
static void test_standin_forged_peer(void **state)
{
	struct sockaddr_un ln = {.sun_family = AF_UNIX};
	struct sockaddr_in fake = ucm_in4("10.1.2.3", 22);
	struct sockaddr_storage got;
	socklen_t len = sizeof(got), ll = offsetof(struct sockaddr_un, sun_path) + 12;
	int l, cl, a;

	(void)state;
	memcpy(ln.sun_path, "\0rsk-test-ln", 12);
	l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cl = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l >= 0 && cl >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&ln, ll), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(rsk_addr_name_bind(cl, (struct sockaddr *)&fake, sizeof(fake), NULL), 0);
	assert_int_equal(connect(cl, (struct sockaddr *)&ln, ll), 0);
	a = accept(l, NULL, NULL);
	assert_true(a >= 0);
	assert_int_equal(rsk_opt_plain_name(a, (struct sockaddr *)&got, &len, 1), 0);
	assert_int_equal(got.ss_family, AF_UNIX);
	close(a);
	close(cl);
	close(l);
}

/* A pair of ours made by another user (not root) is no stand-in here: it could be forged. */
static void test_standin_other_user(void **state)
{
	struct sockaddr_in local, peer;
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);
	int ch[2], st[2], fd = -1, status;
	char b = 0;
	struct iovec iov = {&b, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cb;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.buf,
			    .msg_controllen = sizeof(cb.buf)};
	struct cmsghdr *cm;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		skip(); /* needs another user to switch to */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* the other user makes a pair of our form and sends one end */
		if (setuid(65534) < 0)
			_exit(2);
		standin_pair(st, &local, &peer);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &st[0], sizeof(int));
		_exit(sendmsg(ch[1], &mh, 0) == 1 ? 0 : 3);
	}
	assert_int_equal(recvmsg(ch[0], &mh, 0), 1);
	cm = CMSG_FIRSTHDR(&mh);
	assert_non_null(cm);
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(status, 0);
	assert_int_equal(rsk_opt_plain_name(fd, (struct sockaddr *)&got, &len, 1), 0);
	assert_int_equal(got.ss_family, AF_UNIX);
	close(fd);
	close(ch[0]);
	close(ch[1]);
}

/* Options: SO_DOMAIN and SO_PROTOCOL as TCP's; TCP and IP options accepted or refused as
 * a TCP socket refuses them, and read back as set (or as TCP's defaults); a plain unix
 * socket keeps refusing them. */
static void test_standin_options(void **state)
{
	struct sockaddr_in local, peer;
	socklen_t len = sizeof(int);
	int st[2], sv[2], v = -1, one = 1;

	(void)state;
	standin_pair(st, &local, &peer);
	assert_int_equal(rsk_opt_plain_get(st[0], SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
	assert_int_equal(v, AF_INET);
	len = sizeof(int);
	assert_int_equal(rsk_opt_plain_get(st[0], SOL_SOCKET, SO_PROTOCOL, &v, &len), 0);
	assert_int_equal(v, IPPROTO_TCP);
	len = sizeof(int);
	assert_int_equal(rsk_opt_plain_get(st[0], IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 0);
	assert_int_equal(rsk_opt_plain_set(st[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	len = sizeof(int);
	assert_int_equal(rsk_opt_plain_get(st[0], IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 1);
	/* the other end is a stand-in of its own: nothing set there */
	len = sizeof(int);
	assert_int_equal(rsk_opt_plain_get(st[1], IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	assert_int_equal(v, 0);
	/* what TCP refuses (a short value, an unknown option) */
	assert_int_equal(rsk_opt_plain_set(st[0], IPPROTO_TCP, TCP_MAXSEG, &one, 2), -EINVAL);
	assert_int_equal(rsk_opt_plain_set(st[0], IPPROTO_TCP, 9999, &one, sizeof(one)),
			 -ENOPROTOOPT);
	/* SOL_SOCKET options are the unix socket's own, set for real */
	assert_int_equal(rsk_opt_plain_set(st[0], SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(rsk_opt_plain_set(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)),
			 -EOPNOTSUPP);
	len = sizeof(int);
	assert_int_equal(rsk_opt_plain_get(sv[0], SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
	assert_int_equal(v, AF_UNIX);
	close(sv[0]);
	close(sv[1]);
	close(st[0]);
	close(st[1]);
}

/* getpeername on stand-in @fd, whose partner stands for @peer, the system calls counted. */
static struct ucn_counts peer_name_counted(int fd, const struct sockaddr_in *peer)
{
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);
	struct ucn_counts c;

	ucn_count(1);
	assert_int_equal(rsk_opt_plain_name(fd, (struct sockaddr *)&got, &len, 1), 0);
	c = ucn;
	ucn_count(0);
	assert_int_equal(len, sizeof(*peer));
	assert_memory_equal(&got, peer, sizeof(*peer));
	return c;
}

/* Two TCP options set on stand-in @fd and one read back as set, the system calls counted. */
static struct ucn_counts options_counted(int fd)
{
	struct ucn_counts c;
	socklen_t len = sizeof(int);
	int v = 0, one = 1;

	ucn_count(1);
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){30}, sizeof(int)), 0);
	assert_int_equal(rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	assert_int_equal(rsk_opt_plain_get(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
	c = ucn;
	ucn_count(0);
	assert_int_equal(v, 30);
	return c;
}

/* A TCP option on a stand-in (a server setting TCP_NODELAY and keep-alive times on each
 * bearer connection, as redis-server does) asks its own name once: no look at the partner or
 * its creator (getpeername, SO_PEERCRED), which guard only a peer's claimed address. */
static void test_standin_option_cost(void **state)
{
	struct sockaddr_in local, peer;
	struct ucn_counts c;
	int st[2], one = 1;

	(void)state;
	standin_pair(st, &local, &peer);
	/* (the kernel's verdict on each value, asked of a TCP socket once per process) */
	assert_int_equal(rsk_opt_plain_set(st[1], IPPROTO_TCP, TCP_KEEPIDLE, &(int){30}, sizeof(int)), 0);
	assert_int_equal(rsk_opt_plain_set(st[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
	c = options_counted(st[0]);
	assert_int_equal(c.getsockname, 3);
	assert_int_equal(c.getpeername, 0);
	assert_int_equal(c.getsockopt, 1); /* (the get itself, which a unix socket refuses) */
	close(st[0]);
	close(st[1]);
}

/* getpeername on a stand-in asks the kernel for each name once, and for the partner's
 * creator: 3 system calls (it was 4, the answer's own side asked twice). */
static void test_standin_name_cost(void **state)
{
	struct sockaddr_in local, peer;
	struct sockaddr_storage got;
	struct ucn_counts c;
	socklen_t len;
	int st[2];

	(void)state;
	standin_pair(st, &local, &peer);
	c = peer_name_counted(st[0], &peer);
	assert_int_equal(c.getpeername, 1);
	assert_int_equal(c.getsockname, 1);
	assert_int_equal(c.getsockopt, 1);
	/* a room too small for the unix name: the name is asked again whole */
	len = 4;
	ucn_count(1);
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 1), 0);
	assert_int_equal(ucn.getpeername, 2);
	ucn_count(0);
	assert_int_equal(len, sizeof(peer));
	assert_memory_equal(&got, &peer, 4);
	close(st[0]);
	close(st[1]);
}

/* standin_pair, the unique parts of the names in @uniq, and @st[0] noted as a stand-in this
 * process made (as a bearer's connect notes its end, base/standin.h). */
static void standin_pair_noted(int st[2], struct sockaddr_in *local, struct sockaddr_in *peer)
{
	struct rsk_standin si = {.family = AF_INET};

	*local = ucm_in4("127.0.0.1", 40001);
	*peer = ucm_in4("127.0.0.2", 5000);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st), 0);
	assert_int_equal(rsk_addr_name_bind(st[0], (struct sockaddr *)local, sizeof(*local), &si.own), 0);
	assert_int_equal(rsk_addr_name_bind(st[1], (struct sockaddr *)peer, sizeof(*peer), &si.peer), 0);
	rsk_standin_note(st[0], &si);
}

/* A stand-in this process noted needs no proof: a TCP option costs the kernel's refusal
 * alone (as TCP's costs its one call), and a name the kernel's answer alone (TCP's: 1). */
static void test_standin_noted_cost(void **state)
{
	struct sockaddr_in local, peer;
	struct sockaddr_storage got;
	struct ucn_counts c;
	socklen_t len;
	int st[2];

	(void)state;
	rsk_standin_clear();
	standin_pair_noted(st, &local, &peer);
	c = options_counted(st[0]);
	assert_int_equal(c.getsockname, 0);
	assert_int_equal(c.getpeername, 0);
	assert_int_equal(c.getsockopt, 1);
	c = peer_name_counted(st[0], &peer);
	assert_int_equal(c.getpeername, 1);
	assert_int_equal(c.getsockname, 0);
	assert_int_equal(c.getsockopt, 0);
	len = sizeof(got);
	ucn_count(1);
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(ucn.getsockname + ucn.getpeername + ucn.getsockopt, 1);
	ucn_count(0);
	assert_memory_equal(&got, &local, sizeof(local));
	rsk_standin_drop(st[0]);
	close(st[0]);
	close(st[1]);
}

/* A note whose names are not the socket's (its number reused behind the library's back)
 * answers nothing: the name is proven the old way, and a plain socket keeps its own. */
static void test_standin_noted_stale(void **state)
{
	struct sockaddr_in local, peer;
	struct sockaddr_storage got;
	struct rsk_standin si = {.own = 1, .peer = 2, .family = AF_INET6};
	socklen_t len = sizeof(got);
	int st[2], sv[2];

	(void)state;
	rsk_standin_clear();
	standin_pair(st, &local, &peer);
	rsk_standin_note(st[0], &si);
	ucn_count(1);
	assert_int_equal(rsk_opt_plain_name(st[0], (struct sockaddr *)&got, &len, 1), 0);
	assert_int_equal(ucn.getsockopt, 1); /* the partner's creator: the full check */
	ucn_count(0);
	assert_int_equal(len, sizeof(peer));
	assert_memory_equal(&got, &peer, sizeof(peer));
	rsk_standin_drop(st[0]);
	close(st[0]);
	close(st[1]);
	/* a dropped note: a plain pair on the number refuses TCP options as the kernel does */
	standin_pair_noted(st, &local, &peer);
	rsk_standin_drop(st[0]);
	close(st[0]);
	close(st[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(sv[0], st[0]);
	assert_int_equal(rsk_opt_plain_set(sv[0], IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int)),
			 -EOPNOTSUPP);
	close(sv[0]);
	close(sv[1]);
}

/*
 * Sockets a rendezvous accepted all carry its name: an option set on one is not another's.
 * Each is told apart by its client's name, noted or (a number not noted) asked for.
 */
static void test_standin_rdv_siblings(void **state)
{
	struct sockaddr_in dest = ucm_in4("127.0.0.1", 40123), c1 = ucm_in4("127.0.0.1", 2001);
	struct sockaddr_un rdv;
	socklen_t n = rsk_bearer_name((struct sockaddr *)&dest, &rdv), len;
	struct rsk_standin si = {.family = AF_INET};
	int l, c[2], a[2], i, noted, v, one = 1;

	(void)state;
	assert_true(n > 0);
	for (noted = 0; noted < 2; noted++) {
		rsk_standin_clear();
		l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(l, (struct sockaddr *)&rdv, n), 0);
		assert_int_equal(listen(l, 2), 0);
		for (i = 0; i < 2; i++) {
			c[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			assert_int_equal(rsk_addr_name_bind(c[i], (struct sockaddr *)&c1, sizeof(c1), &si.peer), 0);
			assert_int_equal(connect(c[i], (struct sockaddr *)&rdv, n), 0);
			a[i] = accept(l, NULL, NULL);
			assert_true(a[i] >= 0);
			si.own = 0xbea0000000000000ull | geteuid();
			if (noted)
				rsk_standin_note(a[i], &si);
		}
		assert_int_equal(rsk_opt_plain_set(a[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
		v = -1;
		len = sizeof(v);
		assert_int_equal(rsk_opt_plain_get(a[1], IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
		assert_int_equal(v, 0);
		len = sizeof(v);
		assert_int_equal(rsk_opt_plain_get(a[0], IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
		assert_int_equal(v, 1);
		for (i = 0; i < 2; i++) {
			rsk_standin_drop(a[i]);
			close(a[i]);
			close(c[i]);
		}
		close(l);
	}
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_not_accelerated),
		cmocka_unit_test(test_standin_names),
		cmocka_unit_test(test_standin_option_cost),
		cmocka_unit_test(test_standin_name_cost),
		cmocka_unit_test(test_standin_noted_cost),
		cmocka_unit_test(test_standin_noted_stale),
		cmocka_unit_test(test_standin_rdv_siblings),
		cmocka_unit_test(test_standin_connect_again),
		cmocka_unit_test(test_plain_names_unchanged),
		cmocka_unit_test(test_standin_options),
		cmocka_unit_test(test_standin_forged_peer),
		cmocka_unit_test(test_standin_other_user),
		T(test_own_answers),
		T(test_short_length),
		T(test_so_error_once),
		T(test_so_error_after_recv),
		T(test_tcp_info),
		T(test_set_get_like_kernel),
		T(test_applied),
		T(test_adopt_kernel),
		T(test_template_default_kept),
		cmocka_unit_test(test_carried_noted),
		T(test_kept_table_bounded),
		T(test_names),
		T(test_ioctls),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
