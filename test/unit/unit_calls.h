/*
 * Helpers for the unit tests of core/calls (test_connect, test_accept, test_io, test_upgrade):
 * the socket calls driven in-process exactly as preload/socket.c and preload/close.c drive
 * them (track at socket(), rsk_connect before the kernel connect and rsk_connect_done after
 * it, rsk_accept_begin/accept4/rsk_accept_done, release before the real close), so a
 * loopback client and server in one process get a real shm (or TCP-first) connection.
 * Include after <cmocka.h> and unit_cm.h.
 */
#ifndef RSK_TEST_UNIT_CALLS_H
#define RSK_TEST_UNIT_CALLS_H

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"
#include "base/evloop.h"
#include "base/ready.h"
#include "base/stats.h"
#include "calls/calls.h"
#include "calls/fastwait.h"
#include "calls/io.h"
#include "conn/conn.h"
#include "sock/sock.h"
#include "transport/transport.h"

/* socket() of a tracked TCP socket (@flags: SOCK_NONBLOCK or 0). */
static inline int ucl_socket(int flags)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);

	assert_true(fd >= 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	return fd;
}

/* A tracked listening socket on 127.0.0.1 (listen() and its hook), its address in *a. */
static inline int ucl_listen(struct sockaddr_in *a)
{
	uint16_t port;
	int fd = ucm_tcp_bound(0, &port);

	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(fd, 64), 0);
	rsk_accept_listen_done(fd, 64);
	*a = ucm_lo4(port);
	return fd;
}

/* connect() as preload/socket.c: 0 or -errno; *accel (may be NULL): rsk_connect took it. */
static inline int ucl_connect(int fd, const struct sockaddr_in *a, int *accel)
{
	int rc = 0, handled = rsk_connect(fd, (const struct sockaddr *)a, sizeof(*a), &rc);

	if (accel != NULL)
		*accel = handled;
	if (handled)
		return rc;
	rc = connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0 ? -errno : 0;
	rsk_connect_done(fd, rc);
	return rc;
}

/* accept4() as preload/socket.c: the fd or -errno. */
static inline int ucl_accept(int lfd, int flags)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	int fd;

	rsk_accept_begin(lfd);
	fd = accept4(lfd, (struct sockaddr *)&peer, &len, SOCK_CLOEXEC | flags);
	if (fd < 0)
		return -errno;
	return rsk_accept_done(lfd, fd, SOCK_CLOEXEC | flags, (struct sockaddr *)&peer, len);
}

/* close() as preload/close.c. */
static inline void ucl_close(int fd)
{
	if (rsk_fw_on())
		rsk_fw_fd_gone(fd);
	(void)rsk_sock_release_fd(fd);
	close(fd);
}

static inline struct rsk_sock *ucl_sock(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	assert_non_null(s);
	rsk_sock_put(s); /* the slot's reference keeps it while the fd is open */
	return s;
}

/* The connection of accelerated fd @fd, and its readiness state (ready.h). */
static inline struct rsk_conn *ucl_conn(int fd)
{
	return ucl_sock(fd)->conn;
}

static inline struct rsk_ready_state *ucl_rs(int fd)
{
	return rsk_ep_ready(ucl_conn(fd)->ep);
}

/* Tokens raised on @fd's app end so far. */
static inline uint32_t ucl_raised(int fd)
{
	return __atomic_load_n(&ucl_rs(fd)->rx, __ATOMIC_SEQ_CST) >> 1;
}

static inline ssize_t ucl_send(int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = {(void *)buf, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return rsk_io_sendmsg(fd, &m, flags | MSG_NOSIGNAL);
}

static inline ssize_t ucl_recv(int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = {buf, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	return rsk_io_recvmsg(fd, &m, flags);
}

/* Group setup: the library's hooks and its event loop, as the constructor starts them. */
static inline int ucl_group_setup(void **state)
{
	(void)state;
	rsk_life_init(); /* rsk_upg_init among them: the listeners' announcements reach us */
	return rsk_evloop_start() < 0 ? -1 : 0;
}

/* Each test: default configuration, shm set up at connect (no TCP first), counters zero,
 * and no listener's face: ucl_accept accepts on the number itself, which a face makes an
 * epoll set (test_face and test_bearer turn it on, and accept through it). */
static inline void ucl_config_shm(void)
{
	rsk_config_defaults(&rsk_config);
	rsk_config.mode = RSK_MODE_SHM;
	rsk_config.tcp_first = RSK_TCP_FIRST_OFF;
	rsk_config.bearer = RSK_BEARER_NONE;
	rsk_stats_reset();
}

#endif
