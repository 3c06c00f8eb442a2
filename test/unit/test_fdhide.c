/*
 * Unit tests for core/base/fdhide (the library's own fds): to the API contract only, since
 * the allocation strategy is free to change: a hidden fd is out of the application's way
 * (its lowest-free-fd numbering is unchanged), close-on-exec, marked internal until
 * released; hide moves (the old number is free again), hide_dup copies.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fdhide.h"
#include "base/fdtab.h"
#include "unit.h"

static ino_t ino(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

static int is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* A socket without close-on-exec, at the lowest free number as the application's are. */
static int app_socket(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_false(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	return fd;
}

static void test_hide_moves(void **state)
{
	int low = unit_lowest_free_fd(), fd = app_socket(), next = unit_lowest_free_fd(), h;
	ino_t i = ino(fd);

	(void)state;
	assert_int_equal(fd, low);
	assert_false(rsk_fd_is_internal(fd));
	h = rsk_fd_hide(fd);
	assert_true(h >= 0);
	/* Not where the application's next fd goes, and not the number it had. */
	assert_true(h != fd && h != next);
	assert_int_equal(ino(h), i); /* the same file */
	assert_false(is_open(fd));   /* the old number is closed ... */
	assert_int_equal(unit_lowest_free_fd(), low); /* ... and the application's again */
	assert_true(fcntl(h, F_GETFD) & FD_CLOEXEC);
	assert_true(rsk_fd_is_internal(h));
	assert_false(rsk_fd_is_internal(fd));
	rsk_fd_unhide_close(h);
	assert_false(is_open(h));
	assert_false(rsk_fd_is_internal(h));
}

static void test_hide_dup_copies(void **state)
{
	int fd = app_socket(), low = unit_lowest_free_fd(), h;

	(void)state;
	h = rsk_fd_hide_dup(fd);
	assert_true(h >= 0 && h != fd);
	assert_int_equal(ino(h), ino(fd));
	assert_int_equal(unit_lowest_free_fd(), low); /* the copy took no low number */
	/* The original is untouched: still open, still the application's, no close-on-exec. */
	assert_true(is_open(fd));
	assert_false(rsk_fd_is_internal(fd));
	assert_false(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(h, F_GETFD) & FD_CLOEXEC);
	assert_true(rsk_fd_is_internal(h));
	rsk_fd_unhide_close(h);
	assert_false(is_open(h));
	assert_false(rsk_fd_is_internal(h));
	assert_true(is_open(fd));
	close(fd);
}

#define MANY 64

/* The application opens after we hid many fds and gets the numbers it would have had. */
static void test_numbering_unchanged(void **state)
{
	int hidden[MANY], mine[MANY], want[MANY], low = unit_lowest_free_fd(), i, j, fd;

	(void)state;
	/* The numbers the application's next opens get now (it may have inherited fds above
	 * the lowest free one, so they need not be consecutive). */
	for (i = 0, fd = low; i < MANY; fd++)
		if (!is_open(fd))
			want[i++] = fd;
	for (i = 0; i < MANY; i++) {
		hidden[i] = i % 2 ? rsk_fd_hide(app_socket()) : rsk_fd_hide_dup(0);
		assert_true(hidden[i] >= 0);
		assert_true(rsk_fd_is_internal(hidden[i]));
		for (j = 0; j < i; j++)
			assert_true(hidden[j] != hidden[i]);
	}
	assert_int_equal(unit_lowest_free_fd(), low);
	/* The very same numbers: no hidden fd sits in the way. */
	for (i = 0; i < MANY; i++) {
		mine[i] = open("/dev/null", O_RDONLY);
		assert_int_equal(mine[i], want[i]);
		assert_false(rsk_fd_is_internal(mine[i]));
	}
	for (i = 0; i < MANY; i++) {
		close(mine[i]);
		rsk_fd_unhide_close(hidden[i]);
		assert_false(rsk_fd_is_internal(hidden[i]));
	}
}

static void test_only_our_mark_is_internal(void **state)
{
	int fd = app_socket(), h = rsk_fd_hide_dup(fd);

	(void)state;
	assert_true(h >= 0);
	/* Another value in the table (a tracked kernel socket) is not "internal". */
	assert_int_equal(rsk_fdtab_store(fd, (uintptr_t)0x1230 | RSK_FDTAB_TAG_KERNEL), 0);
	assert_false(rsk_fd_is_internal(fd));
	assert_int_equal(rsk_fdtab_store(fd, 0), 0);
	/* The mark is a tagged-kernel value: the data path passes an internal fd through. */
	assert_false(rsk_fdtab_is_accel(rsk_fdtab_load(h)));
	assert_false(rsk_fd_is_internal(-1));
	assert_false(rsk_fd_is_internal((int)RSK_FDTAB_MAX));
	rsk_fd_unhide_close(h);
	close(fd);
}

static void test_bad_fd(void **state)
{
	int low = unit_lowest_free_fd();

	(void)state;
	assert_true(rsk_fd_hide(-1) < 0);
	assert_true(rsk_fd_hide_dup(-1) < 0);
	assert_int_equal(rsk_fd_hide_dup(low), -EBADF); /* not open */
	assert_false(rsk_fd_is_internal(low));
	assert_int_equal(unit_lowest_free_fd(), low);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hide_moves),
		cmocka_unit_test(test_hide_dup_copies),
		cmocka_unit_test(test_numbering_unchanged),
		cmocka_unit_test(test_only_our_mark_is_internal),
		cmocka_unit_test(test_bad_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
