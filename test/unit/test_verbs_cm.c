/*
 * Unit tests for core/transport/verbs_cm (rsk_verbs_cm_ops). Anywhere: the hello parser (the
 * rdma_cm private data both sides trust only after it: ours, a geometry the engine runs with,
 * no unknown flag), the table's flags and entries (how connect.c, accept.c and conn.c must
 * drive it), claim_open. Without an RDMA device (this machine): the probe's answer, dialing
 * and listening failing at once with no_device without touching the application's socket or
 * leaving an fd, never remembered in the negative cache (the missing device is no fault of
 * the destination, even after dial_failed), and a connect() in verbs mode staying on the
 * kernel with reason no_device. With a device these tests cannot run: the binary then runs the
 * device-independent ones and exits 77 (skipped, visibly). The QP paths themselves (connect,
 * listen, claim, the negative cache after a refused or timed-out dial) need a device and run
 * in the Soft-RoCE guest (test/unit/test_verbs.c, ctest -L vm).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/stats.h"
#include "transport/verbs.h"
#include "transport/verbs_cm.h"
#include "unit_cm.h"
#include "unit_calls.h"

static const struct rsk_cm_ops *cm = &rsk_verbs_cm_ops;
static int g_probe; /* what the probe says here */

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_stats_reset();
	return 0;
}

/* ---- anywhere ---- */

static struct rsk_verbs_hello hello(uint32_t nbuf, uint32_t bsize, uint16_t port, uint16_t flags)
{
	struct rsk_verbs_hello h;

	memset(&h, 0, sizeof(h));
	h.magic = htonl(RSK_VERBS_MAGIC);
	h.version = htons(RSK_VERBS_VERSION);
	h.tcp_port = htons(port);
	h.nbuf = htonl(nbuf);
	h.buf_size = htonl(bsize);
	h.flags = htons(flags);
	return h;
}

static int parse(const struct rsk_verbs_hello *in, uint8_t len)
{
	struct rsk_verbs_hello out;

	return rsk_hello_parse(in, len, &out);
}

static void test_hello_parse(void **state)
{
	struct rsk_verbs_hello h = hello(64, 8192, 40000, 0), out, bad;
	uint8_t wire[sizeof(h) + 8];

	(void)state;
	/* a good one, read into host order */
	assert_int_equal(rsk_hello_parse(&h, sizeof(h), &out), 0);
	assert_int_equal(out.nbuf, 64);
	assert_int_equal(out.buf_size, 8192);
	assert_int_equal(out.tcp_port, 40000);
	assert_int_equal(out.flags, 0);
	/* longer private data (rdma_cm pads it): the hello is its start */
	memset(wire, 0xee, sizeof(wire));
	memcpy(wire, &h, sizeof(h));
	assert_int_equal(rsk_hello_parse(wire, sizeof(wire), &out), 0);
	/* the upgrade flag is known */
	h = hello(64, 8192, 1, RSK_VERBS_HELLO_UPGRADE);
	assert_int_equal(rsk_hello_parse(&h, sizeof(h), &out), 0);
	assert_int_equal(out.flags, RSK_VERBS_HELLO_UPGRADE);
	/* the geometry's bounds, inclusive */
	h = hello(RSK_EP_MIN_NBUF, 1024, 1, 0);
	assert_int_equal(parse(&h, sizeof(h)), 0);
	h = hello(4096, 4u << 20, 1, 0);
	assert_int_equal(parse(&h, sizeof(h)), 0);
	/* everything else is refused */
	h = hello(64, 8192, 1, 0);
	assert_int_equal(rsk_hello_parse(NULL, sizeof(h), &out), -EPROTO);
	assert_int_equal(parse(&h, sizeof(h) - 1), -EPROTO);
	assert_int_equal(parse(&h, 0), -EPROTO);
	bad = h;
	bad.magic = htonl(RSK_VERBS_MAGIC ^ 1);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	/* another build's hello: told apart by its frozen start alone (its client is told
	 * so in the reject, and stays on TCP with reason "version") */
	bad = h;
	bad.version = htons(RSK_VERBS_VERSION + 1);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTONOSUPPORT);
	assert_int_equal(parse(&bad, sizeof(struct rsk_verbs_hdr)), -EPROTONOSUPPORT);
	assert_int_equal(parse(&bad, sizeof(struct rsk_verbs_hdr) - 1), -EPROTO);
	bad.version = 0;
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTONOSUPPORT);
	bad.nbuf = 0; /* what follows another version's start is not judged by ours */
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTONOSUPPORT);
	bad.magic = htonl(RSK_VERBS_MAGIC ^ 1);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(64, 8192, 1, 2); /* an unknown flag */
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(RSK_EP_MIN_NBUF - 1, 8192, 1, 0);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(4097, 8192, 1, 0);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(64, 1023, 1, 0);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(64, (4u << 20) + 1, 1, 0);
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
	bad = hello(64, 8192, 1, 0);
	bad.nbuf = 64; /* host order by mistake: a huge count on the wire */
	assert_int_equal(parse(&bad, sizeof(bad)), -EPROTO);
}

/*
 * The flags the socket layer obeys: connect() finishes the TCP connect and waits for the
 * server's first message (accept_hello), our own loop wakes our app end (keeps_ctl), the TCP
 * connection goes once set up (keeps_tcp 0: one hidden fd per connection, the ctl end), and
 * events come from the shared channels (event_bind/event_wait, no fd of its own), a QP never
 * follows a fork (fork_share 0), a dial is slow (TCP first by default). Entries it lacks are
 * NULL and the callers do without.
 */
static void test_ops_table(void **state)
{
	struct rsk_claim cl;
	struct rsk_ep fake;

	(void)state;
	assert_int_equal(cm->dial_sync, 1);
	assert_int_equal(cm->accept_hello, 1);
	assert_int_equal(cm->fork_share, 0);
	assert_int_equal(cm->keeps_ctl, 1);
	assert_int_equal(cm->keeps_tcp, 0);
	assert_non_null(cm->event_bind);
	assert_non_null(cm->event_wait);
	assert_int_equal(cm->sends_sync, 1);
	assert_int_equal(cm->slow_setup, 1);
	assert_int_equal(rsk_config_start(&rsk_config, cm->slow_setup), RSK_START_TCP);
	assert_null(cm->ep_size); /* the transport allocates its endpoint */
	assert_null(cm->offer);   /* the hello travels in the rdma_cm connect itself */
	assert_null(cm->dialed);
	assert_null(cm->undial);
	assert_null(cm->answer);
	assert_null(cm->prefork);
	assert_null(cm->shown);
	assert_null(cm->peer_died); /* a verbs peer's going is a reset */
	assert_non_null(cm->dial);
	assert_non_null(cm->dial_failed);
	assert_non_null(cm->listen);
	assert_non_null(cm->listen_fd);
	assert_non_null(cm->listen_event);
	assert_non_null(cm->listen_note);
	assert_non_null(cm->unlisten);
	assert_non_null(cm->claim);
	assert_non_null(cm->claim_open);
	assert_non_null(cm->unclaim);
	assert_non_null(cm->event_fd);
	assert_non_null(cm->on_event);
	assert_non_null(cm->sends_done);
	assert_non_null(cm->foreign);
	/* one listen fd only (the listener's event channel) */
	assert_int_equal(cm->listen_fd(NULL, 1), -1);
	/* the endpoint is made at the request: claim_open only checks that claim found one */
	memset(&cl, 0, sizeof(cl));
	assert_int_equal(cm->claim_open(&cl), -EINVAL);
	cl.ep = &fake;
	assert_int_equal(cm->claim_open(&cl), 0);
	cm->unclaim(&cl, 0); /* nothing to send back: the endpoint goes with its connection */
	assert_ptr_equal(cl.ep, &fake);
}

/* ---- without a device ---- */

static void test_probe(void **state)
{
	(void)state;
	assert_true(g_probe == -ENODEV || g_probe == -ENOSYS);
	assert_int_equal(rsk_verbs_probe(), g_probe); /* a device does not come later */
}

static void dial_once(int fd, const struct sockaddr_in *dest, int upgrade)
{
	struct rsk_dial d;
	int before = ucm_fd_count();

	memset(&d, 0, sizeof(d));
	d.fd = fd;
	d.dest = (const struct sockaddr *)dest;
	d.dest_len = sizeof(*dest);
	d.nbuf = RSK_DEFAULT_BUF_COUNT;
	d.buf_size = RSK_DEFAULT_BUF_SIZE;
	d.upgrade = upgrade;
	d.why = RDMASOCK_FB_COUNT;
	assert_int_equal(cm->dial(&d), g_probe);
	assert_int_equal(d.why, RDMASOCK_FB_NO_DEVICE);
	assert_null(d.ep);
	assert_int_equal(ucm_fd_count(), before);
}

static void test_dial_no_device(void **state)
{
	struct sockaddr_in remote = ucm_in4("192.0.2.1", 0), local;
	struct rsk_dial d;
	uint16_t port;
	int kfd, fd;

	(void)state;
	kfd = ucm_tcp_bound(1, &port);
	local = ucm_lo4(port);
	remote.sin_port = htons(port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	dial_once(fd, &local, 0);
	dial_once(fd, &local, 1); /* a TCP-first move: the same */
	/* again, and towards another host: still no_device, never the negative cache */
	dial_once(fd, &remote, 0);
	dial_once(fd, &remote, 0);
	/* even a destination dial_failed put in the negative cache: the device is asked first */
	memset(&d, 0, sizeof(d));
	d.dest = (const struct sockaddr *)&remote;
	d.dest_len = sizeof(remote);
	cm->dial_failed(&d);
	dial_once(fd, &remote, 0);
	/* the application's socket is as it was: unbound, and its kernel connect works */
	assert_int_equal(ucm_port_of(fd), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&local, sizeof(local)), 0);
	close(fd);
	close(kfd);
}

static int bind_calls;

static int bind_tcp_spy(const struct sockaddr *src, void *arg)
{
	(void)src;
	(void)arg;
	bind_calls++;
	return -EINVAL;
}

static void test_connect_no_device(void **state)
{
	struct sockaddr_in dest = ucm_lo4(9);
	struct sockaddr_storage src;
	struct rsk_ep *ep = (struct rsk_ep *)&src; /* must stay untouched */
	int before = ucm_fd_count();

	(void)state;
	assert_int_equal(rsk_verbs_connect((struct sockaddr *)&dest, sizeof(dest), 100,
					   RSK_VERBS_HELLO_UPGRADE, &src, bind_tcp_spy, NULL, &ep),
			 g_probe);
	assert_int_equal(bind_calls, 0);
	assert_ptr_equal(ep, (struct rsk_ep *)&src);
	assert_int_equal(ucm_fd_count(), before);
}

static void test_listen_no_device(void **state)
{
	struct sockaddr_in a;
	struct rsk_verbs_listener *l = NULL;
	void *lh = NULL;
	uint16_t port;
	int kfd, before;

	(void)state;
	kfd = ucm_tcp_bound(1, &port);
	a = ucm_lo4(port);
	before = ucm_fd_count();
	assert_int_equal(cm->listen((struct sockaddr *)&a, 0, &lh), g_probe);
	assert_null(lh);
	assert_int_equal(rsk_verbs_listen((struct sockaddr *)&a, sizeof(a), &l), g_probe);
	assert_null(l);
	assert_int_equal(ucm_fd_count(), before);
	close(kfd);
}

/* connect() in verbs mode (as preload/ drives it): the kernel connect, reason no_device. */
static void test_socket_layer_no_device(void **state)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port), fd, sv;
	struct sockaddr_in a = ucm_lo4(port);
	int accel = 1;

	(void)state;
	rsk_config.mode = RSK_MODE_VERBS;
	rsk_config.tcp_first = RSK_TCP_FIRST_OFF;
	fd = ucl_socket(0);
	assert_int_equal(ucl_connect(fd, &a, &accel), 0);
	assert_int_equal(accel, 0);
	assert_null(ucl_sock(fd)->conn);
	assert_int_equal(ucl_sock(fd)->fb_reason, RDMASOCK_FB_NO_DEVICE);
	assert_int_equal(rsk_stats.fallbacks[RDMASOCK_FB_NO_DEVICE], 1);
	assert_int_equal(rsk_stats.connections[RDMASOCK_TRANSPORT_KERNEL], 1);
	sv = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(sv >= 0);
	close(sv);
	ucl_close(fd);
	close(l);
}

#define T(f) cmocka_unit_test_setup(f, setup)

int main(void)
{
	const struct CMUnitTest anywhere[] = {
		T(test_hello_parse),
		T(test_ops_table),
	};
	const struct CMUnitTest no_device[] = {
		T(test_probe),
		T(test_dial_no_device),
		T(test_connect_no_device),
		T(test_listen_no_device),
		T(test_socket_layer_no_device),
	};
	int rc = cmocka_run_group_tests(anywhere, NULL, NULL);

	g_probe = rsk_verbs_probe();
	if (g_probe == 0) {
		fprintf(stderr, "test_verbs_cm: an RDMA device is present; the no-device tests "
				"cannot run here (skipped)\n");
		return rc != 0 ? rc : 77;
	}
	return rc + cmocka_run_group_tests(no_device, NULL, NULL);
}
