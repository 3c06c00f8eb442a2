/*
 * Unit tests for core/real: after rsk_real_reset() the table is empty and RSK_REAL(name)
 * resolves it lazily to the real libc functions (checked by using them on pipes and sockets),
 * rsk_real_resolve() leaves no member NULL and matches dlsym(RTLD_NEXT), resolution is
 * idempotent and safe from several threads, and rsk_real_available() knows this glibc (2.36).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/real.h"

/* Count the table's members that are NULL. */
static int null_members(void)
{
	int n = 0;

#define COUNT_NULL(ret, name, params) n += rsk_real.name == NULL;
	RSK_REAL_SYMBOLS(COUNT_NULL)
#undef COUNT_NULL
	return n;
}

static int total_members(void)
{
	int n = 0;

#define COUNT(ret, name, params) n++;
	RSK_REAL_SYMBOLS(COUNT)
#undef COUNT
	return n;
}

static int setup_reset(void **state)
{
	(void)state;
	rsk_real_reset();
	return 0;
}

static void test_reset_empties_table(void **state)
{
	(void)state;
	rsk_real_resolve();
	assert_int_equal(null_members(), 0);
	rsk_real_reset();
	assert_int_equal(null_members(), total_members());
}

static void test_lazy_pipe_round_trip(void **state)
{
	char buf[16] = {0};
	int p[2];

	(void)state;
	assert_null(rsk_real.write);
	assert_null(rsk_real.read);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(RSK_REAL(write)(p[1], "hello", 5), 5);
	assert_non_null(rsk_real.write); /* filled by the first RSK_REAL use */
	assert_int_equal(RSK_REAL(read)(p[0], buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(RSK_REAL(close)(p[1]), 0);
	assert_int_equal(RSK_REAL(read)(p[0], buf, sizeof(buf)), 0); /* EOF: it was really closed */
	assert_int_equal(RSK_REAL(close)(p[0]), 0);
	errno = 0;
	assert_int_equal(RSK_REAL(close)(p[0]), -1);
	assert_int_equal(errno, EBADF);
}

static void test_lazy_socket_calls(void **state)
{
	struct iovec iov[2];
	struct pollfd pfd;
	char buf[32] = {0};
	int sv[2], fd2, fl;

	(void)state;
	assert_null(rsk_real.socketpair);
	assert_int_equal(RSK_REAL(socketpair)(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(RSK_REAL(send)(sv[0], "abc", 3, 0), 3);
	pfd = (struct pollfd){.fd = sv[1], .events = POLLIN};
	assert_int_equal(RSK_REAL(poll)(&pfd, 1, 1000), 1);
	assert_true(pfd.revents & POLLIN);
	assert_int_equal(RSK_REAL(recv)(sv[1], buf, sizeof(buf), 0), 3);
	assert_memory_equal(buf, "abc", 3);

	/* Variadic fcntl through the table: set and read back O_NONBLOCK. */
	fl = RSK_REAL(fcntl)(sv[1], F_GETFL);
	assert_true(fl >= 0);
	assert_false(fl & O_NONBLOCK);
	assert_int_equal(RSK_REAL(fcntl)(sv[1], F_SETFL, fl | O_NONBLOCK), 0);
	assert_true(RSK_REAL(fcntl)(sv[1], F_GETFL) & O_NONBLOCK);
	errno = 0;
	assert_int_equal(RSK_REAL(recv)(sv[1], buf, sizeof(buf), 0), -1);
	assert_int_equal(errno, EAGAIN);

	/* dup and writev: the duplicate writes into the same socket. */
	fd2 = RSK_REAL(dup)(sv[0]);
	assert_true(fd2 >= 0 && fd2 != sv[0]);
	iov[0] = (struct iovec){.iov_base = "xy", .iov_len = 2};
	iov[1] = (struct iovec){.iov_base = "zzy", .iov_len = 3};
	assert_int_equal(RSK_REAL(writev)(fd2, iov, 2), 5);
	assert_int_equal(RSK_REAL(read)(sv[1], buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "xyzzy", 5);
	assert_int_equal(RSK_REAL(close)(fd2), 0);
	assert_int_equal(RSK_REAL(close)(sv[0]), 0);
	assert_int_equal(RSK_REAL(close)(sv[1]), 0);
}

static void test_resolve_fills_everything(void **state)
{
	void *p;

	(void)state;
	rsk_real_resolve();
	assert_int_equal(null_members(), 0);
	/* Each member is what dlsym(RTLD_NEXT) gives this executable (libc, or a sanitizer's
	 * interceptor in front of it), i.e. the symbol was found, not the ENOSYS stub. */
#define SAME_AS_DLSYM(ret, name, params)                                                           \
	p = dlsym(RTLD_NEXT, #name);                                                               \
	if (p == NULL || p != (void *)rsk_real.name)                                               \
		fail_msg("rsk_real." #name " = %p, dlsym says %p", (void *)rsk_real.name, p);
	RSK_REAL_SYMBOLS(SAME_AS_DLSYM)
#undef SAME_AS_DLSYM
}

static void test_resolve_idempotent(void **state)
{
	struct rsk_real_table first;

	(void)state;
	rsk_real_resolve();
	first = rsk_real;
	rsk_real_resolve();
	assert_memory_equal(&first, &rsk_real, sizeof(first));
	/* Resolving again after a reset finds the same functions. */
	rsk_real_reset();
	rsk_real_resolve();
	assert_memory_equal(&first, &rsk_real, sizeof(first));
}

static void test_available(void **state)
{
	static const char *const recent[] = {
		"epoll_pwait2", /* glibc 2.35 */
		"close_range",  /* glibc 2.34 */
		"fcntl64",      /* glibc 2.28 */
		"sendfile64", "recvmmsg", "sendmmsg", "accept4", "dup3", "ppoll",
		"__read_chk", "__recv_chk", "__recvfrom_chk", "__poll_chk", "__ppoll_chk",
	};
	unsigned int i;

	(void)state;
	/* No resolve first: rsk_real_available must resolve on its own. */
	assert_null(rsk_real.close);
	for (i = 0; i < RSK_ARRAY_SIZE(recent); i++)
		if (!rsk_real_available(recent[i]))
			fail_msg("%s reported missing on this glibc", recent[i]);
	assert_non_null(rsk_real.close);
	/* Every name in the table exists in glibc 2.36. */
#define AVAILABLE(ret, name, params)                                                               \
	if (!rsk_real_available(#name))                                                            \
		fail_msg(#name " reported missing");
	RSK_REAL_SYMBOLS(AVAILABLE)
#undef AVAILABLE
	assert_false(rsk_real_available("no_such"));
	assert_false(rsk_real_available(""));
	assert_false(rsk_real_available("epoll_pwait3"));
	assert_false(rsk_real_available("Read"));
	assert_false(rsk_real_available("printf")); /* in libc, but not one of ours */
}

#define NTHREADS 4

struct lazy_arg {
	pthread_barrier_t *barrier;
	int wfd, rfd;
	int ok;
};

static void *lazy_thread(void *p)
{
	struct lazy_arg *a = p;
	char c = 'x', d = 0;

	pthread_barrier_wait(a->barrier);
	a->ok = RSK_REAL(write)(a->wfd, &c, 1) == 1 && RSK_REAL(read)(a->rfd, &d, 1) == 1 &&
		d == 'x';
	return NULL;
}

static void test_concurrent_lazy_resolution(void **state)
{
	struct lazy_arg args[NTHREADS];
	pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	int pipes[NTHREADS][2], t, round;

	(void)state;
	for (round = 0; round < 20; round++) {
		rsk_real_reset();
		assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
		for (t = 0; t < NTHREADS; t++) {
			assert_int_equal(pipe(pipes[t]), 0);
			args[t] = (struct lazy_arg){.barrier = &barrier, .wfd = pipes[t][1],
						    .rfd = pipes[t][0]};
			assert_int_equal(pthread_create(&th[t], NULL, lazy_thread, &args[t]), 0);
		}
		for (t = 0; t < NTHREADS; t++) {
			assert_int_equal(pthread_join(th[t], NULL), 0);
			assert_true(args[t].ok);
			close(pipes[t][0]);
			close(pipes[t][1]);
		}
		pthread_barrier_destroy(&barrier);
		assert_int_equal(null_members(), 0);
	}
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_reset, NULL)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_reset_empties_table),
		T(test_lazy_pipe_round_trip),
		T(test_lazy_socket_calls),
		T(test_resolve_fills_everything),
		T(test_resolve_idempotent),
		T(test_available),
		T(test_concurrent_lazy_resolution),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
