/*
 * Unit tests for core/sock/bearer.c, the same-host bearer (RDMASOCK_BEARER=unix): a
 * listener with a face gets a rendezvous in the face's set, so a client that connects
 * through it wakes the listener's waits; the client's number then names a unix connection
 * with its flags kept, the accept gives it with the client's TCP address, and both ends
 * answer getsockname, getpeername and SO_DOMAIN as TCP sockets; a wildcard listener is found
 * at 127.0.0.1; a stranger's connection (no stand-in name) is turned away; a blocking accept
 * that finds nobody shuts the rendezvous for new clients, which then take TCP, and takes it
 * out of the face's set (not readable for ever); a non-blocking face whose last client came
 * over TCP looks there first and at the rendezvous after TCP's EAGAIN; a client
 * finds no rendezvous where the face alone is configured, or the listener is gone; and a
 * connect() again on a bearer connection says EISCONN, as TCP's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/standin.h"
#include "base/stats.h"
#include "calls/sockopt.h"
#include "sock/bearer.h"
#include "sock/face.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.bearer = RSK_BEARER_UNIX;
	rsk_standin_clear(); /* (this binary's close is libc's, which drops no note) */
	return 0;
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static int family_of(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
	return v;
}

/* A client socket (close-on-exec, @flags as socket() takes them) connected to @a through
 * the bearer: 0 blocking, 1 non-blocking. */
static int bearer_client(const struct sockaddr_in *a, int flags, int *rc)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);

	assert_true(c >= 0);
	*rc = rsk_bearer_connect(c, (const struct sockaddr *)a, sizeof(*a), fcntl(c, F_GETFL),
				 fcntl(c, F_GETFD));
	return c;
}

static void test_connect_accept_names(void **state)
{
	struct sockaddr_in a, peer, name, cname;
	socklen_t plen = sizeof(peer), len = sizeof(name);
	uint64_t before = rsk_stats.bearer_connections;
	int l = ucl_listen(&a), c, s, rc, v = 0;
	char b[4];

	(void)state;
	assert_true(rsk_face_is(l));
	assert_int_not_equal(ucl_sock(l)->bearer_fd, 0);
	assert_false(readable(l, 0));
	c = bearer_client(&a, 0, &rc);
	assert_int_equal(rc, 0); /* blocking: connected at once */
	assert_int_equal(family_of(c), AF_UNIX); /* the kernel's: a unix socket now */
	assert_true(fcntl(c, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(c, F_GETFL) & O_NONBLOCK);
	assert_true(readable(l, 1000)); /* the face wakes for it */
	s = rsk_accept_bearer(l, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC, &(int){0});
	assert_true(s >= 0);
	assert_int_equal(rsk_stats.bearer_connections, before + 2);
	/* the client's TCP address, as its own getsockname says it */
	assert_int_equal(plen, sizeof(peer));
	assert_int_equal(peer.sin_family, AF_INET);
	assert_int_equal(rsk_opt_plain_name(c, (struct sockaddr *)&cname, &len, 0), 0);
	assert_int_equal(len, sizeof(cname));
	assert_memory_equal(&peer, &cname, sizeof(peer));
	assert_int_equal(ntohl(peer.sin_addr.s_addr), INADDR_LOOPBACK);
	/* the server's end: the listener's address; the client's peer: the same */
	len = sizeof(name);
	assert_int_equal(rsk_opt_plain_name(s, (struct sockaddr *)&name, &len, 0), 0);
	assert_memory_equal(&name, &a, sizeof(a));
	len = sizeof(name);
	assert_int_equal(rsk_opt_plain_name(c, (struct sockaddr *)&name, &len, 1), 0);
	assert_memory_equal(&name, &a, sizeof(a));
	len = sizeof(v);
	assert_int_equal(rsk_opt_plain_get(s, SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
	assert_int_equal(v, AF_INET);
	/* bytes both ways, and connect() again says what TCP says */
	assert_int_equal(write(c, "ping", 4), 4);
	assert_int_equal(read(s, b, 4), 4);
	assert_memory_equal(b, "ping", 4);
	assert_int_equal(rsk_opt_plain_connect_err(c, -EINVAL), -EISCONN);
	assert_int_equal(rsk_accept_bearer(l, NULL, NULL, 0, &(int){0}), -EAGAIN); /* nobody else */
	close(s);
	close(c);
	ucl_close(l);
}

/*
 * Both ends are noted as stand-ins (base/standin.h): the client's under its own name, the
 * accepted socket under the rendezvous's and its client's, so their options and names need no
 * proof by system calls. The noted answers are the proven ones.
 */
static void test_ends_noted(void **state)
{
	struct sockaddr_in a, noted[4], proven[4];
	struct rsk_standin cs, ss;
	socklen_t len;
	int l = ucl_listen(&a), c, s, rc, i, fds[2];

	(void)state;
	rsk_standin_clear();
	c = bearer_client(&a, 0, &rc);
	assert_int_equal(rc, 0);
	s = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(s >= 0);
	assert_int_equal(rsk_standin_count(), 2);
	assert_int_equal(rsk_standin_get(c, &cs), 1);
	assert_int_equal(rsk_standin_get(s, &ss), 1);
	assert_true(cs.family == AF_INET && ss.family == AF_INET);
	assert_true(cs.own == ss.peer && cs.peer == ss.own); /* one connection, seen from each end */
	assert_true(rsk_bearer_rdv_uniq(ss.own));
	assert_false(rsk_bearer_rdv_uniq(cs.own));
	fds[0] = c;
	fds[1] = s;
	for (i = 0; i < 4; i++) {
		len = sizeof(noted[i]);
		assert_int_equal(rsk_opt_plain_name(fds[i / 2], (struct sockaddr *)&noted[i], &len, i & 1), 0);
		assert_int_equal(len, sizeof(noted[i]));
	}
	rsk_standin_drop(c);
	rsk_standin_drop(s);
	assert_int_equal(rsk_standin_count(), 0);
	for (i = 0; i < 4; i++) {
		len = sizeof(proven[i]);
		assert_int_equal(rsk_opt_plain_name(fds[i / 2], (struct sockaddr *)&proven[i], &len, i & 1), 0);
		assert_memory_equal(&noted[i], &proven[i], sizeof(proven[i]));
	}
	assert_memory_equal(&noted[1], &a, sizeof(a)); /* the client's peer: the listener */
	assert_memory_equal(&noted[0], &noted[3], sizeof(a)); /* each end's peer: the other */
	close(s);
	close(c);
	ucl_close(l);
}

static void test_nonblocking_client(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c, s, rc;

	(void)state;
	c = bearer_client(&a, SOCK_NONBLOCK, &rc);
	assert_int_equal(rc, 1); /* non-blocking (the caller says 0: test_connect) */
	assert_true(fcntl(c, F_GETFL) & O_NONBLOCK);
	s = rsk_accept_bearer(l, NULL, NULL, SOCK_NONBLOCK, &(int){0});
	assert_true(s >= 0);
	assert_true(fcntl(s, F_GETFL) & O_NONBLOCK);
	assert_false(fcntl(s, F_GETFD) & FD_CLOEXEC);
	close(s);
	close(c);
	ucl_close(l);
}

static void test_wildcard_listener(void **state)
{
	struct sockaddr_in any = {.sin_family = AF_INET}, a, name;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c, s, rc;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&any, sizeof(any)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(fd, 8), 0);
	rsk_accept_listen_done(fd, 8);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c = bearer_client(&a, 0, &rc);
	assert_int_equal(rc, 0);
	s = rsk_accept_bearer(fd, NULL, NULL, 0, &(int){0});
	assert_true(s >= 0);
	len = sizeof(name);
	assert_int_equal(rsk_opt_plain_name(s, (struct sockaddr *)&name, &len, 0), 0);
	assert_memory_equal(&name, &a, sizeof(a)); /* where the client went, not 0.0.0.0 */
	close(s);
	close(c);
	ucl_close(fd);
}

static void test_stranger_turned_away(void **state)
{
	struct sockaddr_in a;
	struct sockaddr_un un;
	socklen_t n;
	int l = ucl_listen(&a), u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c, s, rc;
	char b;

	(void)state;
	n = rsk_bearer_name((struct sockaddr *)&a, &un);
	assert_true(n > 0);
	assert_int_equal(connect(u, (struct sockaddr *)&un, n), 0); /* no stand-in name */
	c = bearer_client(&a, 0, &rc); /* a real client behind it */
	assert_int_equal(rc, 0);
	s = rsk_accept_bearer(l, NULL, NULL, 0, &(int){0});
	assert_true(s >= 0); /* the stranger was closed, the client taken */
	assert_int_equal(read(u, &b, 1), 0);
	assert_int_equal(write(c, "x", 1), 1);
	assert_int_equal(read(s, &b, 1), 1);
	close(s);
	close(c);
	close(u);
	ucl_close(l);
}

static void test_blocking_accept_shuts(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), c, s, rc, tcp;

	(void)state;
	assert_false(fcntl(l, F_GETFL) & O_NONBLOCK); /* a blocking listener */
	c = bearer_client(&a, 0, &rc);
	assert_int_equal(rc, 0);
	s = rsk_accept_bearer(l, NULL, NULL, 0, &(int){0}); /* one waits: taken, nothing shut */
	assert_true(s >= 0);
	assert_false(ucl_sock(l)->bearer_shut);
	close(s);
	close(c);
	/* nobody waits: this accept will wait in the TCP listener, so no new bearer client */
	assert_int_equal(rsk_accept_bearer(l, NULL, NULL, 0, &(int){0}), -EAGAIN);
	assert_true(ucl_sock(l)->bearer_shut);
	c = bearer_client(&a, 0, &rc);
	assert_true(rc < 0);
	assert_int_equal(family_of(c), AF_INET); /* untouched: the caller connects over TCP */
	close(c);
	tcp = ucl_socket(0);
	assert_int_equal(ucl_connect(tcp, &a, NULL), 0);
	ucl_close(tcp);
	ucl_close(l);
}

static void test_no_rendezvous(void **state)
{
	struct sockaddr_in a;
	int l, c, rc;

	(void)state;
	rsk_config.bearer = RSK_BEARER_FACE; /* the face alone */
	assert_false(rsk_bearer_allowed());
	l = ucl_listen(&a);
	assert_true(rsk_face_is(l));
	assert_int_equal(ucl_sock(l)->bearer_fd, 0);
	c = bearer_client(&a, 0, &rc);
	assert_true(rc < 0);
	assert_int_equal(family_of(c), AF_INET);
	close(c);
	ucl_close(l);
	rsk_config.bearer = RSK_BEARER_UNIX;
	l = ucl_listen(&a);
	ucl_close(l); /* gone with its listener */
	c = bearer_client(&a, 0, &rc);
	assert_true(rc < 0);
	close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_connect_accept_names, setup),
		cmocka_unit_test_setup(test_ends_noted, setup),
		cmocka_unit_test_setup(test_nonblocking_client, setup),
		cmocka_unit_test_setup(test_wildcard_listener, setup),
		cmocka_unit_test_setup(test_stranger_turned_away, setup),
		cmocka_unit_test_setup(test_blocking_accept_shuts, setup),
		cmocka_unit_test_setup(test_no_rendezvous, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
