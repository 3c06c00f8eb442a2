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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

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

/* ---- EPOLLEXCLUSIVE: the face's listeners in the application's set ---- */

static int setup_bearer(void **state)
{
	(void)state;
	ucl_config_shm();
	rsk_config.bearer = RSK_BEARER_UNIX; /* a face and a rendezvous */
	return 0;
}

/* A TCP client of face @l taken from its hidden TCP listener: the fd. */
static int tcp_take(int l)
{
	int n = accept4(rsk_face_kfd(l), NULL, NULL, SOCK_CLOEXEC);

	assert_true(n >= 0);
	return n;
}

/* A bearer client of @a (its number: a unix socket connected to the rendezvous). */
static int bearer_client_of(const struct sockaddr_in *a)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(c >= 0);
	assert_int_equal(rsk_bearer_connect(c, (const struct sockaddr *)a, sizeof(*a),
					    fcntl(c, F_GETFL), fcntl(c, F_GETFD)),
			 0);
	return c;
}

/* An exclusive ADD puts the listeners in the set with the application's data; a second ADD
 * says EEXIST and a MOD EINVAL, as the kernel says on an exclusive registration; a DEL takes
 * them out; and what the kernel refuses for a socket is refused (EPOLLONESHOT with it). */
static void test_exclusive_ctl(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), ep = epoll_create1(EPOLL_CLOEXEC), c, rc = 1;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 11}, out;

	(void)state;
	assert_true(rsk_face_is(l));
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, 0);
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, -EEXIST);
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_MOD, l, &ev, &rc), 1);
	assert_int_equal(rc, -EINVAL);
	/* a TCP client and a bearer client each report the application's data */
	c = client_of(&a);
	assert_int_equal(epoll_wait(ep, &out, 1, 1000), 1);
	assert_int_equal(out.data.u64, 11);
	close(tcp_take(l));
	close(c);
	c = bearer_client_of(&a);
	assert_int_equal(epoll_wait(ep, &out, 1, 1000), 1);
	assert_int_equal(out.data.u64, 11);
	rc = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(rc >= 0);
	close(rc);
	close(c);
	assert_int_equal(epoll_wait(ep, &out, 1, 0), 0);
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_DEL, l, NULL, &rc), 1);
	assert_int_equal(rc, 0);
	c = client_of(&a);
	assert_int_equal(epoll_wait(ep, &out, 1, 200), 0); /* out of the set */
	close(tcp_take(l));
	close(c);
	/* no exclusive registration: the kernel's call on the number, as for any fd */
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_DEL, l, NULL, &rc), 0);
	ev.events = EPOLLIN;
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 0);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT;
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, -EINVAL);
	/* a set closed without a DEL, a new one at its number: the old note answers nothing */
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, 0);
	close(ep);
	assert_int_equal(epoll_create1(EPOLL_CLOEXEC), ep);
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, 0);
	c = bearer_client_of(&a);
	assert_int_equal(epoll_wait(ep, &out, 1, 1000), 1);
	rc = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(rc >= 0);
	close(rc);
	close(c);
	close(ep);
	assert_int_equal(epoll_create1(EPOLL_CLOEXEC), ep);
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_DEL, l, NULL, &rc), 0); /* the kernel's */
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_MOD, l, &ev, &rc), 0);
	close(ep);
	ucl_close(l);
}

/* Wait in @ep until it reports @want events at once (a TCP client's handshake ends in the
 * kernel a moment after its connect); how many it reported last. */
static int wait_for_events(int ep, struct epoll_event *out, int room, int want)
{
	int i, n = 0;

	for (i = 0; i < 100 && n < want; i++) {
		n = epoll_wait(ep, out, room, 1000);
		if (n < want)
			unit_sleep_ms(10);
	}
	return n;
}

/* Both ends of pipe @p (one byte in it) into @ep with one data: what a wait reports of them
 * (2), and then what rsk_face_reported makes of that. */
static int pipe_pair_reported(int ep, const int p[2])
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = 11}, out[4];
	int n;

	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), 0);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, p[1], &ev), 0);
	n = epoll_wait(ep, out, 4, 1000);
	assert_int_equal(n, 2);
	return rsk_face_reported(ep, out, n);
}

/* A client at each of a face's listeners: the set reports both, and the wait's merge makes
 * them the one event the kernel would give for one registration; not in another set, nor
 * after the DEL. */
static void test_exclusive_reports_once(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), ep = epoll_create1(EPOLL_CLOEXEC), ep2 = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 11}, out[4];
	int c1, c2, p[2], rc = 1, n;

	(void)state;
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, 0);
	c1 = client_of(&a);
	c2 = bearer_client_of(&a);
	n = wait_for_events(ep, out, 4, 2);
	assert_int_equal(n, 2); /* what the kernel gives: both listeners, one data */
	assert_int_equal(out[0].data.u64, 11);
	assert_int_equal(out[1].data.u64, 11);
	assert_int_equal(rsk_face_reported(ep, out, n), 1);
	assert_int_equal(out[0].data.u64, 11);
	assert_true(out[0].events & EPOLLIN);
	/* another set's two fds of one data are its own business */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(pipe_pair_reported(ep2, p), 2);
	/* after the DEL, no merge */
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_DEL, l, NULL, &rc), 1);
	assert_int_equal(pipe_pair_reported(ep, p), 2);
	/* nor in a new set at the number of one closed without a DEL */
	close(ep);
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	assert_int_equal(rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc), 1);
	assert_int_equal(rc, 0);
	close(ep);
	assert_int_equal(epoll_create1(EPOLL_CLOEXEC), ep);
	assert_int_equal(pipe_pair_reported(ep, p), 2);
	close(tcp_take(l));
	rc = rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0});
	assert_true(rc >= 0);
	close(rc);
	close(c1);
	close(c2);
	close(p[0]);
	close(p[1]);
	close(ep2);
	close(ep);
	ucl_close(l);
}

/* Children each waiting in a set of their own; how many woke for one client. */
static int wakes_for_one(int l, const struct sockaddr_in *a, int exclusive, int bearer)
{
	struct epoll_event ev = {.events = EPOLLIN | (exclusive ? EPOLLEXCLUSIVE : 0)}, out;
	int ready[2], res[2], i, ep, rc, woke = 0, c;
	pid_t pid[2];
	char b;

	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(res), 0);
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			ep = epoll_create1(EPOLL_CLOEXEC);
			if (exclusive)
				rc = rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc) == 1 ? rc : -1;
			else
				rc = epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
			b = rc == 0 ? 'r' : 'x';
			if (write(ready[1], &b, 1) != 1)
				_exit(3);
			b = epoll_wait(ep, &out, 1, 1500) == 1 ? '1' : '0';
			_exit(write(res[1], &b, 1) == 1 ? 0 : 3);
		}
	}
	for (i = 0; i < 2; i++) {
		assert_int_equal(read(ready[0], &b, 1), 1);
		assert_int_equal(b, 'r');
	}
	usleep(200 * 1000); /* (both in their wait: a set nobody waits on passes the wake on) */
	c = bearer ? bearer_client_of(a) : client_of(a);
	for (i = 0; i < 2; i++) {
		assert_int_equal(read(res[0], &b, 1), 1);
		woke += b == '1';
		assert_int_equal(waitpid(pid[i], &rc, 0), pid[i]);
		assert_int_equal(rc, 0);
	}
	rc = bearer ? rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0})
		    : tcp_take(l);
	assert_true(rc >= 0);
	close(rc);
	close(c);
	close(ready[0]);
	close(ready[1]);
	close(res[0]);
	close(res[1]);
	return woke;
}

/* Two processes waiting on one face (nginx's workers): added without EPOLLEXCLUSIVE (all the
 * kernel allows for the face itself) both wake for one client; through rsk_face_ctl one
 * does, for a TCP client and a bearer client alike, as for a kernel listener. */
static void test_exclusive_wakes_one(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a);

	(void)state;
	assert_int_equal(wakes_for_one(l, &a, 0, 1), 2);
	assert_int_equal(wakes_for_one(l, &a, 1, 1), 1);
	assert_int_equal(wakes_for_one(l, &a, 1, 0), 1);
	ucl_close(l);
}

/* The rendezvous shut by another process (it then polls readable for ever): a process whose
 * set holds it itself wakes, its accept finds nothing, and the rendezvous leaves its set,
 * instead of waking it for ever. Its TCP clients still come. */
static void test_exclusive_shut_elsewhere(void **state)
{
	struct sockaddr_in a;
	int l = ucl_listen(&a), ep, rc = 1, up[2], down[2], wakes = 0, i, c;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 5}, out;
	pid_t pid;
	char b;

	(void)state;
	/* (non-blocking, as an event loop's: a blocking accept shuts the rendezvous itself) */
	assert_int_equal(fcntl(l, F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(rsk_face_kfd(l), F_SETFL, O_NONBLOCK), 0);
	rsk_face_flags_changed(l);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		ep = epoll_create1(EPOLL_CLOEXEC);
		if (rsk_face_ctl(ep, EPOLL_CTL_ADD, l, &ev, &rc) != 1 || rc != 0 ||
		    write(up[1], "r", 1) != 1 || read(down[0], &b, 1) != 1)
			_exit(3);
		/* the parent shut it: at most a wake or two, then quiet */
		for (i = 0; i < 1000 && epoll_wait(ep, &out, 1, 300) == 1; i++) {
			wakes++;
			if (rsk_accept_bearer(l, NULL, NULL, SOCK_CLOEXEC, &(int){0}) != -EAGAIN)
				_exit(4);
		}
		_exit(wakes <= 2 ? 0 : 5);
	}
	assert_int_equal(read(up[0], &b, 1), 1);
	rsk_bearer_shut(ucl_sock(l));
	assert_int_equal(write(down[1], "s", 1), 1);
	assert_int_equal(waitpid(pid, &rc, 0), pid);
	assert_true(WIFEXITED(rc));
	assert_int_equal(WEXITSTATUS(rc), 0);
	c = client_of(&a);
	close(tcp_take(l));
	close(c);
	for (i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
	}
	ucl_close(l);
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
		cmocka_unit_test_setup(test_exclusive_ctl, setup_bearer),
		cmocka_unit_test_setup(test_exclusive_wakes_one, setup_bearer),
		cmocka_unit_test_setup(test_exclusive_shut_elsewhere, setup_bearer),
		cmocka_unit_test_setup(test_exclusive_reports_once, setup_bearer),
		/* last: io_uring gives faces up for the rest of the process */
		cmocka_unit_test_setup(test_uring_restore_for_good, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
