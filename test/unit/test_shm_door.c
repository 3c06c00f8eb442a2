/*
 * Unit tests for core/transport/shm_door (a process's door) and the knocks of shm_rdv that
 * reach it: a client's knock reaches the door of each process its listener's bell names
 * (here a forked child recorded as kin, which opened its own door; and 24 of them, more than
 * the page's first 16 places) and none when the bell names no other process; the door hands the client's address to its opener; a knock of
 * another user, a malformed one and one that carries fds are ignored, the fds closed; a
 * forked child's door is its own, and its copy of its parent's goes at the fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/evloop.h"
#include "base/proc.h"
#include "transport/shm_door.h"
#include "transport/shm_rdv.h"
#include "unit_cm.h"

/* What the door handed over: the ports of the knocks, through a pipe (the loop's thread, or
 * a child's). */
static int got_pipe[2] = {-1, -1};

static void got_knock(const struct sockaddr_storage *peer)
{
	uint16_t port = ntohs(((const struct sockaddr_in *)peer)->sin_port);
	ssize_t n = write(got_pipe[1], &port, sizeof(port)); /* (after a teardown: EBADF) */

	(void)n;
}

/* The next port handed over within @ms, or 0. */
static uint16_t got_wait(int ms)
{
	struct pollfd p = {.fd = got_pipe[0], .events = POLLIN};
	uint16_t port = 0;

	if (poll(&p, 1, ms) == 1 && read(got_pipe[0], &port, sizeof(port)) != sizeof(port))
		port = 0;
	return port;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(pipe2(got_pipe, O_CLOEXEC), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(got_pipe[0]);
	close(got_pipe[1]);
	return 0;
}

/* A datagram to the door of @pid: @n bytes of @buf, with fd @pass (-1: none). */
static ssize_t door_send(pid_t pid, const void *buf, size_t n, int pass)
{
	struct sockaddr_un un;
	socklen_t len = rsk_rdv_door_name(&un, pid);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ssize_t rc = -1;

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&un, len) == 0)
		rc = ucm_send_fds(fd, buf, n, &pass, pass >= 0 ? 1 : 0);
	close(fd);
	return rc;
}

/* A well-formed knock for 127.0.0.1:@port; its length in *@n. */
static struct rsk_rdv_knock knock_for(uint16_t port, size_t *n)
{
	struct rsk_rdv_knock k = {.magic = RSK_RDV_KNOCK_MAGIC, .len = sizeof(struct sockaddr_in)};
	struct sockaddr_in a = ucm_lo4(port);

	memcpy(&k.client, &a, sizeof(a));
	*n = offsetof(struct rsk_rdv_knock, client) + sizeof(a);
	return k;
}

/* What a door reads as a knock, and what it does not. */
static void test_knock_parse(void **state)
{
	struct rsk_rdv_knock k;
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(7)};
	struct sockaddr_storage out;
	size_t n;

	(void)state;
	k = knock_for(4242, &n);
	assert_int_equal(rsk_rdv_knock_parse(&k, n, &out), 0);
	assert_int_equal(ntohs(((struct sockaddr_in *)&out)->sin_port), 4242);
	memcpy(&k.client, &a6, sizeof(a6));
	k.len = sizeof(a6);
	assert_int_equal(
	    rsk_rdv_knock_parse(&k, offsetof(struct rsk_rdv_knock, client) + sizeof(a6), &out), 0);
	assert_int_equal(out.ss_family, AF_INET6);
	k = knock_for(1, &n);
	assert_int_equal(rsk_rdv_knock_parse(&k, n - 1, &out), -EPROTO); /* len says more */
	assert_int_equal(rsk_rdv_knock_parse(&k, 4, &out), -EPROTO);	 /* no header */
	assert_int_equal(rsk_rdv_knock_parse(&k, sizeof(k) + 1, &out), -EPROTO);
	k.magic ^= 1;
	assert_int_equal(rsk_rdv_knock_parse(&k, n, &out), -EPROTO);
	k = knock_for(1, &n);
	k.client.ss_family = AF_UNIX;
	assert_int_equal(rsk_rdv_knock_parse(&k, n, &out), -EPROTO);
	k = knock_for(1, &n);
	k.len = 8; /* an AF_INET address cut short */
	assert_int_equal(rsk_rdv_knock_parse(&k, offsetof(struct rsk_rdv_knock, client) + 8, &out),
			 -EPROTO);
}

/* Our door hands a knock over; a malformed one and one with an fd are not handed over, and
 * the fd is closed (the pipe's writing end it was goes: its reader sees EOF). */
static void test_door_reads_knocks(void **state)
{
	struct rsk_rdv_knock k;
	int pp[2], before;
	size_t n;
	char b;

	(void)state;
	k = knock_for(5151, &n);
	assert_int_equal(rsk_door_open(got_knock), 0);
	assert_true(rsk_door_fd() >= 0);
	before = ucm_fd_count();
	assert_int_equal(rsk_door_open(got_knock), 0); /* once per process */
	assert_int_equal(ucm_fd_count(), before);
	assert_int_equal(door_send(getpid(), &k, n, -1), (ssize_t)n);
	assert_int_equal(got_wait(2000), 5151);
	assert_int_equal(door_send(getpid(), "garbage", 7, -1), 7);
	assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
	assert_int_equal(door_send(getpid(), &k, n, pp[1]), (ssize_t)n);
	close(pp[1]);
	assert_int_equal(got_wait(200), 0);	 /* neither was handed over */
	assert_int_equal(read(pp[0], &b, 1), 0); /* (blocks while the door kept the fd) */
	close(pp[0]);
	assert_int_equal(ucm_fd_count(), before);
}

/* A knock from another user is not ours to act on (root only: the test changes its uid). */
static void test_door_other_user(void **state)
{
	struct rsk_rdv_knock k;
	int status = -1;
	size_t n;
	pid_t me = getpid(), kid;

	(void)state;
	if (geteuid() != 0)
		skip();
	k = knock_for(6161, &n);
	assert_int_equal(rsk_door_open(got_knock), 0);
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0)
		_exit(setresuid(65534, 65534, 65534) == 0 && door_send(me, &k, n, -1) == (ssize_t)n
			  ? 0
			  : 1);
	assert_int_equal(waitpid(kid, &status, 0), kid);
	assert_int_equal(WEXITSTATUS(status), 0); /* it was sent */
	assert_int_equal(got_wait(300), 0);
	assert_int_equal(door_send(me, &k, n, -1), (ssize_t)n); /* ours is taken */
	assert_int_equal(got_wait(2000), 6161);
}

/* A forked child that opens its own door, says so on @go, and exits 0 once its door hands
 * over a knock for @port (within 5 s), leaving the kin as its exit would. */
__attribute__((noreturn)) static void kid_at_door(int go, uint16_t port)
{
	char c = 'r';

	rsk_proc_forked_child(); /* as the library's fork() does in the child */
	rsk_evloop_atfork_child();
	close(got_pipe[0]); /* (a pipe of its own: the parent's door writes the other) */
	close(got_pipe[1]);
	if (pipe2(got_pipe, O_CLOEXEC) != 0)
		_exit(3);
	if (rsk_door_open(got_knock) != 0 || write(go, &c, 1) != 1)
		_exit(1);
	c = got_wait(5000) == port ? 0 : 2;
	rsk_rdv_bells_end_all();
	_exit(c);
}

/*
 * A client's knock goes to the processes the bell names: none while its listener was never
 * forked (the maker's loop looks), a forked child's door once the child is kin, and the
 * maker's still after the child left. The child opens a
 * door of its own (the parent's copy it inherited is not watched there) and hands the knock
 * over; the maker (this process) has a door too, which takes its copy.
 */
static void test_knock_reaches_kin(void **state)
{
	struct rsk_rdv_bell *b[2] = {NULL, NULL};
	struct sockaddr_in dest, me;
	socklen_t len = sizeof(me);
	int hold, l[2] = {-1, -1}, rdv, tcp, go[2], status = -1;
	struct rsk_rdv_where w;
	uint16_t p;
	pid_t kid;

	(void)state;
	hold = ucm_tcp_bound(0, &p);
	dest = ucm_lo4(p);
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&dest, 0, 16, l, b), 1);
	tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	me = ucm_lo4(0);
	assert_int_equal(bind(tcp, (struct sockaddr *)&me, sizeof(me)), 0);
	assert_int_equal(getsockname(tcp, (struct sockaddr *)&me, &len), 0);
	rdv = rsk_rdv_find((struct sockaddr *)&dest, NULL, NULL, &w);
	assert_true(rdv >= 0);
	assert_int_equal(rsk_door_open(got_knock), 0);
	assert_int_equal(rsk_rdv_knock(&w, (struct sockaddr *)&me, len), 0); /* no kin */
	assert_int_equal(got_wait(200), 0);

	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) { /* its own door, then it says so and hands one knock over */
		close(go[0]);
		kid_at_door(go[1], ntohs(me.sin_port));
	}
	close(go[1]);
	assert_int_equal(read(go[0], &(char){0}, 1), 1);
	close(go[0]);
	rsk_rdv_bells_forked(kid); /* what the library's fork() does in the parent */
	assert_int_equal(rsk_rdv_knock(&w, (struct sockaddr *)&me, len), 2); /* maker and kid */
	assert_int_equal(got_wait(2000), ntohs(me.sin_port)); /* the maker's own copy */
	assert_int_equal(waitpid(kid, &status, 0), kid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* kin empty again: the rendezvous stays shared (no loop of ours looks), so knocks go on */
	assert_int_equal(rsk_rdv_knock(&w, (struct sockaddr *)&me, len), 1);
	assert_int_equal(got_wait(2000), ntohs(me.sin_port));
	close(rdv);
	close(tcp);
	rsk_rdv_bell_close(b[0]);
	close(l[0]);
	close(hold);
}

#define MANY_KIN 24

/*
 * More processes forked with the listener than the page's first 16 kin places (nginx's
 * `worker_processes auto` on a larger host): every one is recorded and hears the knock. With
 * 16 places the knock reached the maker and 16 of them, and the other 8 never moved.
 */
static void test_knock_reaches_many_kin(void **state)
{
	struct rsk_rdv_bell *b[2] = {NULL, NULL};
	struct sockaddr_in dest, me;
	socklen_t len = sizeof(me);
	int hold, l[2] = {-1, -1}, rdv, tcp, go[2], status, i;
	struct rsk_rdv_where w;
	pid_t kids[MANY_KIN];
	uint16_t p;

	(void)state;
	hold = ucm_tcp_bound(0, &p);
	dest = ucm_lo4(p);
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&dest, 0, 16, l, b), 1);
	tcp = ucm_tcp_bound(0, &p);
	assert_int_equal(getsockname(tcp, (struct sockaddr *)&me, &len), 0);
	rdv = rsk_rdv_find((struct sockaddr *)&dest, NULL, NULL, &w);
	assert_true(rdv >= 0);
	assert_int_equal(rsk_door_open(got_knock), 0);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	for (i = 0; i < MANY_KIN; i++) {
		kids[i] = fork();
		assert_true(kids[i] >= 0);
		if (kids[i] == 0) {
			close(go[0]);
			kid_at_door(go[1], p);
		}
	}
	close(go[1]);
	for (i = 0; i < MANY_KIN; i++) {
		assert_int_equal(read(go[0], &(char){0}, 1), 1);
		rsk_rdv_bells_forked(kids[i]); /* what the library's fork() does in the parent */
	}
	close(go[0]);
	assert_int_equal(rsk_rdv_knock(&w, (struct sockaddr *)&me, len), MANY_KIN + 1);
	assert_int_equal(got_wait(2000), p); /* the maker's own copy */
	for (i = 0; i < MANY_KIN; i++) {
		assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	close(rdv);
	close(tcp);
	rsk_rdv_bell_close(b[0]);
	close(l[0]);
	close(hold);
}

/*
 * A forked child drops its copy of its parent's door (rsk_door_atfork_child, as the
 * library's fork() runs it): once the parent exits, its door's name is free again even while
 * the child lives, so a new process given that pid can open its own. Here C opens a door,
 * forks G and exits; with G alive, the name of C's door can be bound again. Kept, the copy
 * held the name (EADDRINUSE) for as long as G lived.
 */
static void test_forked_copy_goes(void **state)
{
	int go[2], hold[2], fd, status;
	struct sockaddr_un un;
	socklen_t len;
	pid_t c;
	char b;

	(void)state;
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	c = fork();
	assert_true(c >= 0);
	if (c == 0) {
		rsk_proc_forked_child();
		rsk_evloop_atfork_child();
		rsk_door_atfork_child();
		if (rsk_door_open(got_knock) != 0)
			_exit(1);
		if (fork() == 0) { /* G: the library's child steps, then waits for the test */
			rsk_proc_forked_child();
			rsk_evloop_atfork_child();
			rsk_door_atfork_child();
			close(hold[1]);
			if (write(go[1], "g", 1) != 1)
				_exit(1);
			(void)read(hold[0], &b, 1); /* EOF: the test is done */
			_exit(0);
		}
		_exit(0);
	}
	close(go[1]);
	close(hold[0]);
	assert_int_equal(waitpid(c, &status, 0), c);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(read(go[0], &b, 1), 1); /* G lives, past its fork steps */
	len = rsk_rdv_door_name(&un, c);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&un, len), 0);
	close(fd);
	close(hold[1]);
	close(go[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_knock_parse),
	    cmocka_unit_test_setup_teardown(test_door_reads_knocks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_door_other_user, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_knock_reaches_kin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_knock_reaches_many_kin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_forked_copy_goes, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
