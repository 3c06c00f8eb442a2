/*
 * Unit tests for core/sock/listener: the transports' listeners beside a kernel listening
 * socket, as the mode allows (shm here; verbs needs a device and is left to the guest): one
 * per transport, bound like the kernel's (address, port, IPV6_V6ONLY), none for SO_REUSEPORT
 * sockets or in kernel mode, each with the fallback reason the socket then records; the
 * claim of an accepted connection (a plain client, a preloaded one) with the transport that
 * found it; notes reaching every transport (the fd budget's pause and resume), by id only
 * while the listener is open; ids unique; and a forked child keeping what can follow a fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/ready.h"
#include "sock/listener.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/shm_rdv.h"
#include "base/evloop.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_locks.h"

/* A kernel listener on 127.0.0.1 (port 0) and where clients connect to it. */
struct fix {
	int kfd;
	struct sockaddr_in addr;
};

/* The event loop's own fds (it watches the transports' listen fds) live as long as the
 * process: started first, so the fd counts below see only the listeners'. */
static int start_loop(void **state)
{
	(void)state;
	return rsk_evloop_start() < 0 ? -1 : 0;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	uint16_t port;

	assert_non_null(f);
	rsk_config_defaults(&rsk_config);
	rsk_config.mode = RSK_MODE_SHM;
	f->kfd = ucm_tcp_bound(1, &port);
	f->addr = ucm_lo4(port);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	close(f->kfd);
	free(f);
	rsk_config_defaults(&rsk_config);
	return 0;
}

static int exists(const struct sockaddr_in *a)
{
	return rsk_rdv_exists((const struct sockaddr *)a);
}

static void test_open_close(void **state)
{
	struct fix *f = *state;
	enum rdmasock_fallback why = RDMASOCK_FB_COUNT;
	struct rsk_listener *l = NULL, *l2 = NULL;
	int before = ucm_fd_count();

	assert_false(exists(&f->addr));
	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	assert_non_null(l);
	assert_int_equal(why, RDMASOCK_FB_COUNT); /* untouched on success */
	assert_true(exists(&f->addr)); /* a preloaded client finds it */
	assert_true(ucm_fd_count() > before);
	/* a second one on the same socket has no transport left (the name has one owner) */
	assert_int_equal(rsk_listener_open(f->kfd, &l2, &why), -ENODEV);
	assert_int_equal(why, RDMASOCK_FB_RESOURCES);
	assert_null(l2);
	rsk_listener_close(l);
	assert_false(exists(&f->addr));
	assert_int_equal(ucm_fd_count(), before);
}

static void test_refusals(void **state)
{
	struct fix *f = *state;
	enum rdmasock_fallback why;
	struct rsk_listener *l = NULL;
	int one = 1, fd, before = ucm_fd_count();
	uint16_t port;
	struct sockaddr_in a;

	/* kernel mode: the policy says no transport listens (and so for what it accepts) */
	rsk_config.mode = RSK_MODE_KERNEL;
	why = RDMASOCK_FB_COUNT;
	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), -EPERM);
	assert_int_equal(why, RDMASOCK_FB_POLICY);
	assert_false(exists(&f->addr));
	rsk_config.mode = RSK_MODE_SHM;

	/* SO_REUSEPORT: several processes' listeners share the port, offers could reach the
	 * wrong one */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	a = ucm_lo4(0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	port = ucm_port_of(fd);
	why = RDMASOCK_FB_COUNT;
	assert_int_equal(rsk_listener_open(fd, &l, &why), -EOPNOTSUPP);
	assert_int_equal(why, RDMASOCK_FB_UNSUPPORTED);
	a = ucm_lo4(port);
	assert_false(exists(&a));
	close(fd);

	/* not a socket we can ask */
	why = RDMASOCK_FB_COUNT;
	assert_true(rsk_listener_open(unit_lowest_free_fd(), &l, &why) < 0);
	assert_int_equal(why, RDMASOCK_FB_RESOURCES);
	assert_int_equal(ucm_fd_count(), before);
}

/* Bound like the kernel's: an IPv6 wildcard listener answers IPv4 clients unless V6ONLY. */
static void test_v6only_follows_socket(void **state)
{
	struct rsk_listener *l;
	enum rdmasock_fallback why;
	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	int fd, v6only;
	uint16_t port;

	(void)state;
	if (!ucm_have_ipv6())
		skip();
	for (v6only = 0; v6only < 2; v6only++) {
		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(fd >= 0);
		assert_int_equal(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)),
				 0);
		a6 = ucm_in6("::", 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&a6, sizeof(a6)), 0);
		assert_int_equal(listen(fd, 8), 0);
		port = ucm_port_of(fd);
		assert_int_equal(rsk_listener_open(fd, &l, &why), 0);
		a4 = ucm_lo4(port);
		a6 = ucm_in6("::1", port);
		assert_true(rsk_rdv_exists((struct sockaddr *)&a6));
		assert_int_equal(exists(&a4), !v6only);
		rsk_listener_close(l);
		close(fd);
	}
}

/* ---- claims ---- */

struct srv {
	int fd;
	struct sockaddr_storage peer;
};

static void srv_accept(struct srv *s, int kfd)
{
	struct pollfd p = {.fd = kfd, .events = POLLIN};
	socklen_t len = sizeof(s->peer);

	assert_int_equal(poll(&p, 1, 2000), 1);
	s->fd = accept4(kfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(s->fd >= 0);
	assert_int_equal(getpeername(s->fd, (struct sockaddr *)&s->peer, &len), 0);
}

/* A preloaded client's part, as connect.c drives the shm cm (test_shm_cm has the details). */
struct cli {
	int fd, app;
	struct rsk_dial d;
	void *mem;
};

static void cli_connect(struct cli *c, const struct sockaddr_in *dest)
{
	const struct rsk_cm_ops *cm = &rsk_shm_cm_ops;
	int ctl;

	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	c->mem = calloc(1, cm->ep_size());
	c->d.fd = c->fd;
	c->d.dest = (const struct sockaddr *)dest;
	c->d.dest_len = sizeof(*dest);
	c->d.nbuf = RSK_DEFAULT_BUF_COUNT;
	c->d.buf_size = RSK_DEFAULT_BUF_SIZE;
	c->d.ep_mem = c->mem;
	assert_int_equal(cm->dial(&c->d), 0);
	assert_int_equal(rsk_ready_pair(&c->app, &ctl), 0);
	assert_int_equal(cm->offer(&c->d, ctl), 0);
	close(ctl);
	assert_int_equal(connect(c->fd, (const struct sockaddr *)dest, sizeof(*dest)), 0);
	cm->dialed(&c->d);
}

static void cli_close(struct cli *c)
{
	rsk_ep_destroy(c->d.ep);
	free(c->mem);
	close(c->app);
	close(c->fd);
}

static void test_claim(void **state)
{
	struct fix *f = *state;
	const struct rsk_cm_ops *cm = NULL;
	enum rdmasock_fallback why;
	struct rsk_listener *l;
	struct rsk_claim cl;
	struct srv s;
	struct cli c;
	int fd, before = ucm_fd_count();

	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	/* a plain TCP client: 0, why no_peer, and no transport named */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&f->addr, sizeof(f->addr)), 0);
	srv_accept(&s, f->kfd);
	memset(&cl, 0xee, sizeof(cl)); /* the claim starts from a clean one */
	assert_int_equal(rsk_listener_claim(l, &s.peer, -1, &cl, &cm), 0);
	assert_int_equal(cl.why, RDMASOCK_FB_NO_PEER);
	assert_ptr_equal(cl.peer, &s.peer);
	assert_null(cm);
	close(s.fd);
	close(fd);

	/* a preloaded client: 1, the shm transport, the offer's geometry */
	cli_connect(&c, &f->addr);
	srv_accept(&s, f->kfd);
	assert_int_equal(rsk_listener_claim(l, &s.peer, -1, &cl, &cm), 1);
	assert_ptr_equal(cm, &rsk_shm_cm_ops);
	assert_int_equal(cl.nbuf, RSK_DEFAULT_BUF_COUNT);
	/* the claim is the transport's: declining it reaches the client, as a reset */
	cm->unclaim(&cl, 0);
	rsk_shm_cm_ops.prefork(c.d.ep, c.app);
	{
		struct rsk_wc wc[1];

		assert_int_equal(rsk_ep_poll(c.d.ep, wc, 1), -ECONNRESET);
	}
	close(s.fd);
	cli_close(&c);
	rsk_listener_close(l);
	assert_int_equal(ucm_fd_count(), before);
}

/* ---- notes and ids ---- */

static void test_notes_and_ids(void **state)
{
	struct fix *f = *state;
	struct rsk_listener *l, *m;
	enum rdmasock_fallback why;
	uint64_t id, id2;
	uint16_t port;
	struct sockaddr_in a2;
	int k2;

	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	id = rsk_listener_id(l);
	assert_true(id != 0);
	/* every transport hears it: short of fds, the rendezvous goes, then comes back */
	rsk_listener_note(l, RSK_LISTEN_PAUSE);
	assert_false(exists(&f->addr));
	rsk_listener_note(l, RSK_LISTEN_RESUME);
	assert_true(exists(&f->addr));
	/* by id, to the one transport named */
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_PAUSE);
	assert_false(exists(&f->addr));
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_RESUME);
	assert_true(exists(&f->addr));
	/* ... and not to a transport it does not have */
	rsk_listener_note_id(id, (const struct rsk_cm_ops *)&f->addr, RSK_LISTEN_PAUSE);
	assert_true(exists(&f->addr));

	/* a second listener: another id; a note for the first does not reach it */
	k2 = ucm_tcp_bound(1, &port);
	a2 = ucm_lo4(port);
	assert_int_equal(rsk_listener_open(k2, &m, &why), 0);
	id2 = rsk_listener_id(m);
	assert_true(id2 != id);
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_PAUSE);
	assert_false(exists(&f->addr));
	assert_true(exists(&a2));
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_RESUME);
	/* closed: a late note (a connection accepted long ago) reaches nobody */
	rsk_listener_close(l);
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_RESUME);
	assert_false(exists(&f->addr));
	rsk_listener_note_id(id2, &rsk_shm_cm_ops, RSK_LISTEN_PAUSE);
	assert_false(exists(&a2));
	rsk_listener_close(m);
	close(k2);
	/* ids are never reused */
	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	assert_true(rsk_listener_id(l) > id2);
	rsk_listener_close(l);
}

/*
 * Holds (each TCP-first connection accepted): a closed listener with holds stays, found by
 * its id, until the last drop; once closing it takes no new hold; without holds the close
 * ends it. A hold and its drop take no lock (each took the list's lock and walked the list).
 */
static void test_holds(void **state)
{
	struct fix *f = *state;
	struct rsk_listener *l;
	enum rdmasock_fallback why;
	uint64_t id;
	int n, before = ucm_fd_count();

	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	id = rsk_listener_id(l);
	if (LOCKS_COUNTED) {
		locks = 0;
		lock_counting = 1;
	}
	assert_int_equal(rsk_listener_hold(l), 0);
	assert_int_equal(rsk_listener_hold(l), 0);
	rsk_listener_drop(l);
	lock_counting = 0;
	n = locks;
	rsk_listener_close(l); /* one hold left: it stays */
	assert_true(exists(&f->addr));
	assert_int_equal(rsk_listener_hold(l), -ENOENT); /* closing: no new hold */
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_PAUSE); /* found by id still */
	assert_false(exists(&f->addr));
	rsk_listener_note_id(id, &rsk_shm_cm_ops, RSK_LISTEN_RESUME);
	assert_true(exists(&f->addr));
	rsk_listener_drop(l); /* the last: it goes */
	assert_false(exists(&f->addr));
	assert_int_equal(ucm_fd_count(), before);
	if (LOCKS_COUNTED)
		assert_int_equal(n, 0);
}

/*
 * An interest (each accept, an epoll registration) changes no fds a transport listens on, so
 * it costs no lock: the loop's watches are looked over again only after a note that changed
 * them. Before, every interest asked shm for each of its two listen fds under its lock.
 */
static void test_interest_takes_no_lock(void **state)
{
	struct fix *f = *state;
	struct rsk_listener *l;
	enum rdmasock_fallback why;
	int n;

	if (!LOCKS_COUNTED)
		skip();
	assert_int_equal(rsk_listener_open(f->kfd, &l, &why), 0);
	locks = 0;
	lock_counting = 1;
	rsk_listener_note(l, RSK_LISTEN_INTEREST);
	rsk_listener_note(l, RSK_LISTEN_INTEREST);
	lock_counting = 0;
	n = locks;
	/* a pause and a resume still remake the rendezvous, and the watches with it */
	rsk_listener_note(l, RSK_LISTEN_PAUSE);
	assert_false(exists(&f->addr));
	rsk_listener_note(l, RSK_LISTEN_RESUME);
	assert_true(exists(&f->addr));
	rsk_listener_close(l);
	assert_int_equal(n, 0);
}

/* ---- fork ---- */

struct forked {
	struct fix *f;
	struct rsk_listener *l;
};

/* The child forgets what cannot follow a fork; shm can: it still claims a client. */
static int child_forget(void *arg)
{
	struct forked *k = arg;
	const struct rsk_cm_ops *cm = NULL;
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	struct rsk_claim cl;
	struct cli c;
	int fd;

	rsk_listener_forget(k->l);
	if (!exists(&k->f->addr))
		return 10;
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	/* no cmocka here: the client's steps, checked by hand */
	{
		int ctl;

		c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		c.mem = calloc(1, rsk_shm_cm_ops.ep_size());
		c.d.fd = c.fd;
		c.d.dest = (const struct sockaddr *)&k->f->addr;
		c.d.dest_len = sizeof(k->f->addr);
		c.d.nbuf = RSK_DEFAULT_BUF_COUNT;
		c.d.buf_size = RSK_DEFAULT_BUF_SIZE;
		c.d.ep_mem = c.mem;
		if (rsk_shm_cm_ops.dial(&c.d) != 0 || rsk_ready_pair(&c.app, &ctl) != 0 ||
		    rsk_shm_cm_ops.offer(&c.d, ctl) != 0)
			return 11;
		if (connect(c.fd, (struct sockaddr *)&k->f->addr, sizeof(k->f->addr)) != 0)
			return 12;
		rsk_shm_cm_ops.dialed(&c.d);
	}
	fd = accept4(k->f->kfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0 || getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
		return 13;
	if (rsk_listener_claim(k->l, &peer, -1, &cl, &cm) != 1 || cm != &rsk_shm_cm_ops)
		return 14;
	cm->unclaim(&cl, 0);
	return 0;
}

static void test_forked_child_forgets(void **state)
{
	struct fix *f = *state;
	enum rdmasock_fallback why;
	struct forked k = {f, NULL};

	assert_int_equal(rsk_listener_open(f->kfd, &k.l, &why), 0);
	rsk_listener_note(k.l, RSK_LISTEN_FORKED);
	assert_int_equal(unit_in_child(child_forget, &k, 5000), 0);
	/* the parent's listener is unharmed */
	assert_true(exists(&f->addr));
	rsk_listener_close(k.l);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_close),
		T(test_refusals),
		T(test_v6only_follows_socket),
		T(test_claim),
		T(test_notes_and_ids),
		T(test_holds),
		T(test_interest_takes_no_lock),
		T(test_forked_child_forgets),
	};

	return cmocka_run_group_tests(tests, start_loop, NULL);
}
