/*
 * Unit tests for core/base/sys.h and core/base/clock.h, the header-only layer under core/:
 * every rsk_sys_* returns >= 0 or -errno (never -1 with errno), leaves errno to tell
 * nothing new on success, and does what the libc call does; rsk_sys_set_fl adds status
 * flags without dropping the others; the int setsockopt helper; the monotonic clock counts
 * forward in microseconds and milliseconds alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "unit_cm.h"

static void test_ret_convention(void **state)
{
	(void)state;
	errno = EIO;
	assert_int_equal(rsk_sys_ret(-1), -EIO);
	assert_int_equal(rsk_sys_ret(0), 0);
	assert_int_equal(rsk_sys_ret(12345), 12345);
}

static void test_errors_are_negative_errno(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char b;
	int sv[2];

	(void)state;
	assert_int_equal(rsk_sys_close(-1), -EBADF);
	assert_int_equal(rsk_sys_read(-1, &b, 1), -EBADF);
	assert_int_equal(rsk_sys_fcntl(-1, F_GETFL, 0), -EBADF);
	assert_int_equal(rsk_sys_socket(AF_INET, 0x7ff, 0), -EINVAL);
	assert_int_equal(rsk_sys_getsockname(0x7fff, (struct sockaddr *)&ss, &len), -EBADF);
	assert_int_equal(rsk_sys_socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(rsk_sys_recv(sv[0], &b, 1, MSG_DONTWAIT), -EAGAIN);
	assert_int_equal(rsk_sys_getpeername(sv[0], (struct sockaddr *)&ss, &len), 0);
	assert_int_equal(rsk_sys_send(sv[1], "q", 1, 0), 1);
	assert_int_equal(rsk_sys_recv(sv[0], &b, 1, 0), 1);
	assert_int_equal(b, 'q');
	assert_int_equal(rsk_sys_shutdown(sv[1], SHUT_WR), 0);
	assert_int_equal(rsk_sys_recv(sv[0], &b, 1, 0), 0);
	assert_int_equal(rsk_sys_close(sv[0]), 0);
	assert_int_equal(rsk_sys_close(sv[1]), 0);
	assert_int_equal(rsk_sys_close(sv[1]), -EBADF);
}

static void test_set_fl_adds(void **state)
{
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_APPEND), 0);
	assert_int_equal(rsk_sys_set_fl(sv[0], O_NONBLOCK), 0);
	assert_true(rsk_sys_fcntl(sv[0], F_GETFL, 0) & O_NONBLOCK);
	assert_true(fcntl(sv[0], F_GETFL) & O_APPEND); /* kept */
	assert_false(fcntl(sv[1], F_GETFL) & O_NONBLOCK);
	assert_int_equal(rsk_sys_set_fl(-1, O_NONBLOCK), -EBADF);
	close(sv[0]);
	close(sv[1]);
}

static void test_setsockopt_int(void **state)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), v = 0;
	socklen_t len = sizeof(v);

	(void)state;
	assert_int_equal(rsk_sys_setsockopt_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1), 0);
	assert_int_equal(rsk_sys_getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
	assert_int_equal(v, 1);
	assert_int_equal(rsk_sys_setsockopt_int(fd, SOL_SOCKET, 0x7fff, 1), -ENOPROTOOPT);
	close(fd);
}

static void test_poll_and_dup3(void **state)
{
	struct pollfd p;
	int sv[2], d;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	p = (struct pollfd){.fd = sv[0], .events = POLLIN};
	assert_int_equal(rsk_sys_poll(&p, 1, 0), 0);
	assert_int_equal(write(sv[1], "x", 1), 1);
	assert_int_equal(rsk_sys_poll(&p, 1, 1000), 1);
	d = dup(sv[0]);
	assert_int_equal(rsk_sys_dup3(sv[1], d, O_CLOEXEC), d);
	assert_true(fcntl(d, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(rsk_sys_dup3(d, d, 0), -EINVAL); /* as dup3 says */
	close(d);
	close(sv[0]);
	close(sv[1]);
}

/* rsk_sys_tcp_state: the states core decides by, read from the first byte of TCP_INFO. */
static void test_tcp_state(void **state)
{
	uint16_t port;
	int l = ucm_tcp_bound(1, &port), c = socket(AF_INET, SOCK_STREAM, 0), sv, p[2];
	struct sockaddr_in a = ucm_lo4(port);

	(void)state;
	assert_int_equal(rsk_sys_tcp_state(c), RSK_TCPS_CLOSE);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(rsk_sys_tcp_state(c), RSK_TCPS_ESTABLISHED);
	sv = accept(l, NULL, NULL);
	assert_true(sv >= 0);
	assert_int_equal(shutdown(sv, SHUT_WR), 0);
	for (int i = 0; i < 200 && (rsk_sys_tcp_state(c) != RSK_TCPS_CLOSE_WAIT ||
				    rsk_sys_tcp_state(sv) != RSK_TCPS_FIN_WAIT2); i++)
		usleep(1000); /* (the FIN and its ACK cross loopback) */
	assert_int_equal(rsk_sys_tcp_state(c), RSK_TCPS_CLOSE_WAIT);
	assert_int_equal(rsk_sys_tcp_state(sv), RSK_TCPS_FIN_WAIT2);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p), 0);
	assert_true(rsk_sys_tcp_state(p[0]) < 0); /* not TCP: -errno */
	close(p[0]);
	close(p[1]);
	close(sv);
	close(c);
	close(l);
}

static void test_clock(void **state)
{
	struct timespec ts = {0, 20 * 1000 * 1000};
	int64_t us0 = rsk_now_us(), ms0 = rsk_now_ms(), us1, ms1;

	(void)state;
	assert_true(us0 > 0);
	assert_true(ms0 >= us0 / 1000 - 1 && ms0 <= us0 / 1000 + 1000);
	nanosleep(&ts, NULL);
	us1 = rsk_now_us();
	ms1 = rsk_now_ms();
	assert_true(us1 - us0 >= 20000);
	assert_true(us1 - us0 < 2000000);
	assert_true(ms1 - ms0 >= 19 && ms1 - ms0 < 2000);
	/* monotonic: never backwards over many reads */
	for (int i = 0; i < 10000; i++) {
		int64_t t = rsk_now_us();

		assert_true(t >= us1);
		us1 = t;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ret_convention),
		cmocka_unit_test(test_errors_are_negative_errno),
		cmocka_unit_test(test_set_fl_adds),
		cmocka_unit_test(test_setsockopt_int),
		cmocka_unit_test(test_poll_and_dup3),
		cmocka_unit_test(test_tcp_state),
		cmocka_unit_test(test_clock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
