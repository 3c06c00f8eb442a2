/*
 * Unit tests for core/sock/face.c, a listener's face (RDMASOCK_BEARER=face): listen() with
 * the bearer on puts an epoll set on the listener's number, the TCP listener hidden behind
 * it, blocking and close-on-exec as the number was, and counted; the number's waits wake for
 * a connection through the set, and its calls reach the TCP listener (rsk_face_kfd); the
 * last close takes the hidden listener too; an exec's restore puts the TCP listener back on
 * the numbers the new image inherits only, io_uring's on every number for good, with the
 * application's epoll registrations following; fds passed with SCM_RIGHTS name the TCP
 * listener; and with the bearer off nothing changes.
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
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/stats.h"
#include "calls/sockopt.h"
#include "sock/face.h"
#include "unit.h"
#include "unit_cm.h"
#include "unit_calls.h"

static int setup(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.bearer = RSK_BEARER_FACE;
	return 0;
}

/* What the number @fd names: 1 an epoll set, 0 a socket, -1 anything else. */
static int what(int fd)
{
	char path[64], link[128];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	assert_true(n > 0);
	link[n] = 0;
	if (strstr(link, "eventpoll") != NULL)
		return 1;
	return strncmp(link, "socket:", 7) == 0 ? 0 : -1;
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static int client_of(const struct sockaddr_in *a)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(c >= 0);
	assert_int_equal(connect(c, (const struct sockaddr *)a, sizeof(*a)), 0);
	return c;
}

static void test_listen_makes_face(void **state)
{
	struct sockaddr_in a, got;
	socklen_t len = sizeof(got);
	uint64_t faces = rsk_stats.listener_faces;
	int l = ucl_listen(&a), k, v = 0;

	(void)state;
	k = rsk_face_kfd(l);
	assert_int_not_equal(k, l);
	assert_true(rsk_face_is(l));
	assert_int_equal(what(l), 1);
	assert_int_equal(what(k), 0);
	assert_true(rsk_fd_is_internal(k)); /* hidden: the application cannot close it */
	assert_int_equal(rsk_stats.listener_faces, faces + 1);
	/* the calls of the number reach the TCP listener */
	assert_int_equal(rsk_opt_plain_name(l, (struct sockaddr *)&got, &len, 0), 0);
	assert_int_equal(got.sin_port, a.sin_port);
	len = sizeof(v);
	assert_int_equal(rsk_opt_plain_get(l, SOL_SOCKET, SO_ACCEPTCONN, &v, &len), 0);
	assert_int_equal(v, 1);
	/* blocking and close-on-exec as the listener was, and so is the listener still */
	assert_false(fcntl(l, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(l, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(k, F_GETFL) & O_NONBLOCK);
	/* the companions were opened on the TCP listener before the face took its number */
	assert_non_null(ucl_sock(l)->lst);
	ucl_close(l);
	assert_int_equal(fcntl(k, F_GETFD), -1); /* the hidden listener went with the number */
	assert_false(rsk_face_is(l));
}

static void test_waits_wake_through_face(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), k = rsk_face_kfd(l), ep = epoll_create1(EPOLL_CLOEXEC), c, n;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 7}, out;

	(void)state;
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), 0);
	assert_false(readable(l, 0));
	assert_int_equal(epoll_wait(ep, &out, 1, 0), 0);
	c = client_of(&a);
	assert_true(readable(l, 1000)); /* poll on the number */
	assert_int_equal(epoll_wait(ep, &out, 1, 1000), 1); /* an edge-triggered set of the app */
	assert_int_equal(out.data.u64, 7);
	n = accept4(k, NULL, NULL, SOCK_CLOEXEC);
	assert_true(n >= 0);
	assert_false(readable(l, 0)); /* nothing queued: the set is quiet again */
	close(n);
	close(c);
	/* a shutdown of the TCP listener wakes the number's waits (a blocked accept ends) */
	assert_int_equal(shutdown(k, SHUT_RDWR), 0);
	assert_true(readable(l, 1000));
	close(ep);
	ucl_close(l);
}

static void test_nonblocking_listener(void **state)
{
	uint16_t port;
	int fd = ucm_tcp_bound(0, &port), fl;

	(void)state;
	fl = fcntl(fd, F_GETFL);
	assert_int_equal(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
	assert_int_equal(fcntl(fd, F_SETFD, 0), 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	assert_int_equal(listen(fd, 8), 0);
	rsk_accept_listen_done(fd, 8);
	assert_true(rsk_face_is(fd));
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_false(fcntl(fd, F_GETFD) & FD_CLOEXEC); /* inherited by an exec, as it was */
	/* before an exec: the socket itself, still non-blocking */
	assert_int_equal(rsk_face_restore_all(0), 1);
	assert_int_equal(what(fd), 0);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	ucl_close(fd);
}

static void test_bearer_off_no_face(void **state)
{
	struct sockaddr_in a;
	uint64_t faces = rsk_stats.listener_faces;
	int l;

	(void)state;
	rsk_config.bearer = RSK_BEARER_NONE;
	assert_false(rsk_face_allowed());
	l = ucl_listen(&a);
	assert_false(rsk_face_is(l));
	assert_int_equal(what(l), 0);
	assert_int_equal(rsk_face_open(ucl_sock(l), l), -EPERM);
	assert_int_equal(rsk_stats.listener_faces, faces);
	ucl_close(l);
	/* kernel mode leaves listeners alone too */
	rsk_config.bearer = RSK_BEARER_FACE;
	rsk_config.mode = RSK_MODE_KERNEL;
	l = ucl_listen(&a);
	assert_false(rsk_face_is(l));
	ucl_close(l);
	rsk_config.mode = RSK_MODE_SHM;
}

/* A second number for the same socket (dup), as preload/dup.c makes one. */
static int dup_of(int fd, int cloexec)
{
	int d = fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, 0);

	assert_true(d >= 0);
	assert_int_equal(rsk_sock_dup(fd, d), 0);
	return d;
}

static void test_exec_restore_inherited_only(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), k = rsk_face_kfd(l), d = dup_of(l, 0);

	(void)state;
	assert_int_equal(rsk_face_kfd(d), k);
	assert_int_equal(rsk_face_restore_all(0), 1); /* d only: l is close-on-exec */
	assert_int_equal(what(l), 1);
	assert_int_equal(what(d), 0);
	assert_false(fcntl(d, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(d, F_GETFL) & O_NONBLOCK); /* blocking, as the number is */
	/* (a failed exec: d is the TCP listener itself, which the face routes to anyway) */
	assert_int_equal(rsk_face_kfd(d), k);
	assert_true(rsk_face_allowed());
	ucl_close(d);
	assert_true(fcntl(k, F_GETFD) >= 0); /* l still names the socket */
	ucl_close(l);
	assert_int_equal(fcntl(k, F_GETFD), -1);
}

static void test_uring_restore_for_good(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), k = rsk_face_kfd(l), ep = epoll_create1(EPOLL_CLOEXEC), c, l2;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 9}, out;

	(void)state;
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev), 0);
	rsk_life_epoll_note(ep, EPOLL_CTL_ADD, l, &ev); /* as preload/epoll.c records it */
	assert_int_equal(rsk_face_restore_all(1), 1);
	assert_int_equal(what(l), 0);
	assert_true(fcntl(l, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(l, F_GETFL) & O_NONBLOCK); /* blocking, as it was */
	assert_false(rsk_face_is(l));
	assert_false(rsk_face_allowed());
	/* the application's set now holds the socket itself, and reports a connection */
	c = client_of(&a);
	assert_int_equal(epoll_wait(ep, &out, 1, 1000), 1);
	assert_int_equal(out.data.u64, 9);
	close(c);
	/* no new face after io_uring */
	l2 = ucl_listen(&a);
	assert_false(rsk_face_is(l2));
	ucl_close(l2);
	close(ep);
	ucl_close(l);
	assert_int_equal(fcntl(k, F_GETFD), -1); /* the hidden fd still closes with the socket */
}

static void test_msg_passes_tcp_listener(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), k = rsk_face_kfd(l), fds[3] = {0, l, 1}, got[3];
	union {
		char b[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} u;
	char buf[256], small[8];
	struct msghdr m = {.msg_control = u.b, .msg_controllen = sizeof(u.b)}, out;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	(void)state;
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	assert_int_equal(rsk_face_msg(&m, &out, buf, sizeof(buf)), 1);
	memcpy(got, CMSG_DATA(CMSG_FIRSTHDR(&out)), sizeof(got));
	assert_int_equal(got[0], 0);
	assert_int_equal(got[1], k);
	assert_int_equal(got[2], 1);
	memcpy(got, CMSG_DATA(cm), sizeof(got)); /* the caller's own message is untouched */
	assert_int_equal(got[1], l);
	/* control data that does not fit is sent as it is; so is one without a face */
	assert_int_equal(rsk_face_msg(&m, &out, small, sizeof(small)), 0);
	fds[1] = 2;
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	assert_int_equal(rsk_face_msg(&m, &out, buf, sizeof(buf)), 0);
	ucl_close(l);
}

static void test_routes(void **state)
{
	(void)state;
	assert_int_equal(rsk_face_fcntl_to(F_SETFL), RSK_FACE_TO_BOTH);
	assert_int_equal(rsk_face_fcntl_to(F_GETFL), RSK_FACE_TO_NUMBER);
	assert_int_equal(rsk_face_fcntl_to(F_SETFD), RSK_FACE_TO_NUMBER);
	assert_int_equal(rsk_face_fcntl_to(F_DUPFD_CLOEXEC), RSK_FACE_TO_NUMBER);
	assert_int_equal(rsk_face_fcntl_to(F_SETOWN), RSK_FACE_TO_LISTENER);
	assert_int_equal(rsk_face_fcntl_to(F_SETSIG), RSK_FACE_TO_LISTENER);
	assert_int_equal(rsk_face_ioctl_to(FIONBIO), RSK_FACE_TO_BOTH);
	assert_int_equal(rsk_face_ioctl_to(FIOASYNC), RSK_FACE_TO_BOTH);
	assert_int_equal(rsk_face_ioctl_to(FIOCLEX), RSK_FACE_TO_NUMBER);
	assert_int_equal(rsk_face_ioctl_to(FIONCLEX), RSK_FACE_TO_NUMBER);
	assert_int_equal(rsk_face_ioctl_to(FIONREAD), RSK_FACE_TO_LISTENER);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_listen_makes_face, setup),
		cmocka_unit_test_setup(test_waits_wake_through_face, setup),
		cmocka_unit_test_setup(test_nonblocking_listener, setup),
		cmocka_unit_test_setup(test_bearer_off_no_face, setup),
		cmocka_unit_test_setup(test_exec_restore_inherited_only, setup),
		cmocka_unit_test_setup(test_msg_passes_tcp_listener, setup),
		cmocka_unit_test_setup(test_routes, setup),
		/* last: io_uring gives faces up for the rest of the process */
		cmocka_unit_test_setup(test_uring_restore_for_good, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
