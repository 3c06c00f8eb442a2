/*
 * Unit tests for core/base/fdhide (the library's own fds): a hidden fd is out of the
 * application's way (its lowest-free-fd numbering is unchanged), close-on-exec, marked
 * internal until released; hide moves (the old number is free again), hide_dup copies. The
 * budget (fdhide.h): hidden fds go downwards from min(RLIMIT_NOFILE, 65536), each on the
 * highest free number, with no floor but the application's own fds; the numbers our closes
 * free are reused (a process that opens and closes connections for ever must not creep down
 * into the application's numbers), a full table keeps the low number rather than fail, and
 * headroom/reserve tell connect and accept when to stay on TCP. The budget tests run in forked children under a small limit of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* hide_at: a new fd takes over a hidden number we are done with, in one dup3 (no close of
 * ours and no search for a number): same number, the new file, close-on-exec, internal. A
 * number that is not ours is never replaced: the fd is hidden elsewhere. */
static void test_hide_at_reuses_number(void **state)
{
	int low = unit_lowest_free_fd(), old = rsk_fd_hide(app_socket()), fd = app_socket(), h;
	int other = app_socket(), keep;
	ino_t i = ino(fd);

	(void)state;
	assert_true(old >= 0);
	h = rsk_fd_hide_at(fd, old);
	assert_int_equal(h, old);
	assert_int_equal(ino(h), i);  /* the new file on the old number */
	assert_false(is_open(fd));    /* its low number is free again */
	assert_true(fcntl(h, F_GETFD) & FD_CLOEXEC);
	assert_true(rsk_fd_is_internal(h));
	/* not ours: left alone (still open, still the application's) */
	i = ino(other);
	keep = app_socket();
	h = rsk_fd_hide_at(keep, other);
	assert_true(h >= 0 && h != other && h != keep);
	assert_true(is_open(other));
	assert_false(rsk_fd_is_internal(other));
	assert_int_equal(ino(other), i);
	rsk_fd_unhide_close(h);
	rsk_fd_unhide_close(old);
	close(other);
	assert_int_equal(unit_lowest_free_fd(), low);
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
	/* a number that is not open is refused, not marked ours: the application's next open
	 * gets it, and must be able to close it */
	assert_int_equal(rsk_fd_hide(low), -EBADF);
	assert_false(rsk_fd_is_internal(low));
	assert_int_equal(unit_lowest_free_fd(), low);
}


/* ---- the budget, in a child with RLIMIT_NOFILE = LIMIT ---- */

#define LIMIT 256

/* In the child (no cmocka there): every check returns its own exit code. */
#define CHECK(cond, code)                                                                          \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return (code);                                                             \
	} while (0)

/*
 * Lower the soft limit to @limit (the library notices the change at its next hide). The
 * child first closes what it inherited above stderr (ctest's and the shell's fds, and the
 * parent's hidden ones), so that the numbers the checks expect are free.
 */
static int set_limit(int limit)
{
	struct rlimit rl;

	if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0)
		return -1;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -1;
	rl.rlim_cur = (rlim_t)limit;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

/* A hidden socket of ours, or -1. */
static int hide_one(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	return fd < 0 ? -1 : rsk_fd_hide(fd);
}

/* Top-down from the limit, one below the other; headroom and reserve follow. */
static int child_top_down(void *arg)
{
	int low, h[4], i;

	(void)arg;
	CHECK(set_limit(LIMIT) == 0, 2);
	low = unit_lowest_free_fd();
	CHECK(low == 3, 3);
	for (i = 0; i < 4; i++) {
		h[i] = hide_one();
		/* the parent's region was above this limit: the first hide notices */
		CHECK(h[i] == LIMIT - 1 - i, 10 + i);
		CHECK(rsk_fd_is_internal(h[i]), 20 + i);
	}
	CHECK(unit_lowest_free_fd() == low, 4);
	/* the free numbers between @fd and our lowest one */
	CHECK(rsk_fd_headroom(100) == LIMIT - 5 - 100, 5);
	CHECK(rsk_fd_headroom(low) == LIMIT - 5 - low, 6);
	/* an eighth of the limit, at least 64 */
	CHECK(rsk_fd_reserve() == 64, 7);
	CHECK(set_limit(4 * LIMIT) == 0, 8);
	for (i = 0; i < 4; i++)
		rsk_fd_unhide_close(h[i]);
	/* a higher limit is noticed once the lower region fails: not here, it still has room */
	i = hide_one();
	CHECK(i >= LIMIT / 2 && i < LIMIT, 9);
	rsk_fd_unhide_close(i);
	return 0;
}

static void test_budget_top_down(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_top_down, NULL, 5000), 0);
}

/*
 * A process that hides and closes a few fds per connection, for many more connections than
 * the region holds: the numbers its closes free must serve the next ones. Two patterns:
 * one at a time, and a window of WINDOW connections that close oldest first (the lowest
 * hidden fd is then always the newest one, which closes last).
 */
#define CYCLES (8 * LIMIT)
#define WINDOW 8

static int child_churn(void *arg)
{
	int fifo = *(int *)arg, ring[WINDOW], low, i, h, min = LIMIT;

	CHECK(set_limit(LIMIT) == 0, 2);
	low = unit_lowest_free_fd();
	for (i = 0; i < WINDOW; i++)
		ring[i] = -1;
	for (i = 0; i < CYCLES; i++) {
		h = hide_one();
		CHECK(h >= 0, 3);
		/* never down in the application's half, never on its next number */
		if (h < LIMIT / 2 || unit_lowest_free_fd() != low)
			return 10 + (i * 80) / CYCLES; /* 10..89: how far it got */
		if (h < min)
			min = h;
		if (!fifo) {
			rsk_fd_unhide_close(h);
			continue;
		}
		if (ring[i % WINDOW] >= 0)
			rsk_fd_unhide_close(ring[i % WINDOW]);
		ring[i % WINDOW] = h;
	}
	for (i = 0; i < WINDOW; i++)
		if (ring[i] >= 0)
			rsk_fd_unhide_close(ring[i]);
	/* the region stayed as small as what was open at once (plus the first hide) */
	CHECK(min >= LIMIT - 1 - WINDOW - 1, 4);
	CHECK(rsk_fd_headroom(low) >= LIMIT - 2 - WINDOW - 1 - low, 5);
	return 0;
}

static void test_churn_reuses_numbers(void **state)
{
	int fifo = 0;

	(void)state;
	assert_int_equal(unit_in_child(child_churn, &fifo, 5000), 0);
	fifo = 1;
	assert_int_equal(unit_in_child(child_churn, &fifo, 5000), 0);
}

/* Hidden fds are capped by the limit alone, not by a window of it: they take every free
 * number above the application's (the old region stopped at half the limit, and the next
 * hide kept a low number with half the table free). With none free at all, hide keeps the
 * low number and hide_dup fails (neither takes the application's lowest free number while
 * another is free); closing makes room again, where the close freed it. */
static int child_full(void *arg)
{
	static int h[LIMIT];
	int n = 0, fd, low, d, app, i;

	(void)arg;
	CHECK(set_limit(LIMIT) == 0, 2);
	low = unit_lowest_free_fd();
	while (n < LIMIT) {
		h[n] = hide_one();
		CHECK(h[n] >= 0, 3);
		if (h[n] == low)
			break; /* kept where socket() put it: nothing was free */
		CHECK(h[n] == LIMIT - 1 - n, 14); /* the highest free number, every time */
		n++;
	}
	/* every number above the application's was ours to take */
	CHECK(n == LIMIT - 1 - low, 4);
	CHECK(rsk_fd_is_internal(h[n]), 6);
	CHECK(fcntl(h[n], F_GETFD) & FD_CLOEXEC, 7);
	CHECK(open("/dev/null", O_RDONLY) < 0 && errno == EMFILE, 15); /* the table is full */
	CHECK(rsk_fd_hide_dup(0) == -EMFILE, 16);
	/* two numbers free again: the application gets the lowest, a hide the other */
	rsk_fd_unhide_close(h[n]);
	rsk_fd_unhide_close(h[n - 1]);
	app = open("/dev/null", O_RDONLY);
	CHECK(app == low, 8);
	CHECK(rsk_fd_headroom(app) == 1, 10);
	d = rsk_fd_hide_dup(app);
	CHECK(d == low + 1 && rsk_fd_is_internal(d), 9);
	rsk_fd_unhide_close(d);
	close(app);
	/* one of ours closed up there: the next hide goes back up, into that number */
	rsk_fd_unhide_close(h[10]);
	fd = hide_one();
	CHECK(fd == h[10], 11);
	h[10] = fd;
	for (i = 0; i < n - 1; i++)
		rsk_fd_unhide_close(h[i]);
	CHECK(unit_lowest_free_fd() == low, 12);
	CHECK(hide_one() == LIMIT - 1, 13); /* all free again: from the top */
	return 0;
}

/* The application holds numbers up there (dup2) with the region grown down to them: the next
 * hide finds the highest free number below them at once, not one number per system call. */
static int child_app_block(void *arg)
{
	int a, b, i;

	(void)arg;
	CHECK(set_limit(LIMIT) == 0, 2);
	a = hide_one();
	CHECK(a == LIMIT - 1, 3);
	for (i = LIMIT - 2; i >= LIMIT / 4; i--) /* the application's, down to a quarter */
		CHECK(dup2(0, i) == i, 4);
	b = hide_one();
	/* below half the limit: the old region stopped there and kept the low number */
	CHECK(b == LIMIT / 4 - 1 && rsk_fd_is_internal(b), 5);
	CHECK(unit_lowest_free_fd() == 3, 6);
	CHECK(rsk_fd_headroom(3) == LIMIT / 4 - 2 - 3, 7);
	rsk_fd_unhide_close(a);
	rsk_fd_unhide_close(b);
	for (i = LIMIT - 2; i >= LIMIT / 4; i--)
		CHECK(fcntl(i, F_GETFD) >= 0 && !rsk_fd_is_internal(i), 8);
	return 0;
}

static void test_application_block_in_region(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_app_block, NULL, 5000), 0);
}

static void test_full_region_keeps_low_number(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_full, NULL, 5000), 0);
}

/* The application took a number up there (dup2): hiding goes around it. */
static int child_app_above(void *arg)
{
	int a, b, c;

	(void)arg;
	CHECK(set_limit(LIMIT) == 0, 2); /* closes what was inherited: then ... */
	a = hide_one();
	CHECK(a == LIMIT - 1, 3);
	CHECK(dup2(0, LIMIT - 2) == LIMIT - 2, 4); /* the application's */
	b = hide_one();
	CHECK(b >= LIMIT / 2 && b != LIMIT - 2 && b != a, 5);
	CHECK(!rsk_fd_is_internal(LIMIT - 2), 6);
	c = hide_one();
	CHECK(c >= LIMIT / 2 && c != LIMIT - 2 && c != a && c != b, 7);
	rsk_fd_unhide_close(a);
	rsk_fd_unhide_close(b);
	rsk_fd_unhide_close(c);
	CHECK(fcntl(LIMIT - 2, F_GETFD) >= 0, 8); /* ours never closed the application's */
	return 0;
}

static void test_application_fd_in_region(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(child_app_above, NULL, 5000), 0);
}

/* ---- fork while another thread hides ---- */

static int churn_stop;

static void *churn_thread(void *arg)
{
	int h;

	(void)arg;
	while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
		h = hide_one();
		if (h >= 0)
			rsk_fd_unhide_close(h);
	}
	return NULL;
}

/* The child of a fork taken while the other thread was inside hide: it can still hide. */
static int child_hides(void *arg)
{
	int h;

	(void)arg;
	h = hide_one();
	if (h < 0 || !rsk_fd_is_internal(h))
		return 2;
	rsk_fd_unhide_close(h);
	return 0;
}

static void test_fork_while_hiding(void **state)
{
	pthread_t t;
	int i, rc = 0;

	(void)state;
	churn_stop = 0;
	assert_int_equal(pthread_create(&t, NULL, churn_thread, NULL), 0);
	for (i = 0; i < 200 && rc == 0; i++)
		rc = unit_in_child(child_hides, NULL, 1000); /* -1: killed (it hung) */
	__atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
	assert_int_equal(pthread_join(t, NULL), 0);
	if (rc != 0)
		fail_msg("fork %d: the child could not hide (%d)", i, rc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hide_moves),
		cmocka_unit_test(test_hide_dup_copies),
		cmocka_unit_test(test_hide_at_reuses_number),
		cmocka_unit_test(test_numbering_unchanged),
		cmocka_unit_test(test_only_our_mark_is_internal),
		cmocka_unit_test(test_bad_fd),
		cmocka_unit_test(test_budget_top_down),
		cmocka_unit_test(test_churn_reuses_numbers),
		cmocka_unit_test(test_full_region_keeps_low_number),
		cmocka_unit_test(test_application_fd_in_region),
		cmocka_unit_test(test_application_block_in_region),
		cmocka_unit_test(test_fork_while_hiding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
