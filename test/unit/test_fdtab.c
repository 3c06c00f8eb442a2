/*
 * Unit tests for core/fdtab (the sparse fd -> socket map): store/load/exchange/replace at the
 * edges of the fd range, rejection of out-of-range fds, sparse chunk allocation, ordered and
 * bounded walks, concurrent first stores into one chunk, and the dup bookkeeping that
 * core/sock builds on the table (track, dup, release on real kernel sockets).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fdtab.h"
#include "sock/sock.h"

/* A recognisable non-zero slot value per fd (fdtab never dereferences it). */
static uintptr_t val_for(int fd)
{
	return ((uintptr_t)(unsigned int)fd << 4) | 0x8;
}

static int setup_clear(void **state)
{
	(void)state;
	rsk_fdtab_clear();
	return 0;
}

static int teardown_clear(void **state)
{
	(void)state;
	rsk_fdtab_clear();
	return 0;
}

static const int edge_fds[] = {
	0, 4095, 4096, 65535, 65536, 1 << 20, (int)RSK_FDTAB_MAX - 1,
};

static int is_edge_fd(long fd)
{
	unsigned int i;

	for (i = 0; i < RSK_ARRAY_SIZE(edge_fds); i++)
		if (edge_fds[i] == fd)
			return 1;
	return 0;
}

static void test_store_load_edges(void **state)
{
	unsigned int i;
	long nb;
	int fd;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(edge_fds); i++) {
		fd = edge_fds[i];
		assert_int_equal(rsk_fdtab_load(fd), 0);
		assert_int_equal(rsk_fdtab_store(fd, val_for(fd)), 0);
		assert_int_equal(rsk_fdtab_load(fd), val_for(fd));
	}
	/* Every value landed in its own slot: neighbours are still empty. */
	for (i = 0; i < RSK_ARRAY_SIZE(edge_fds); i++) {
		fd = edge_fds[i];
		assert_int_equal(rsk_fdtab_load(fd), val_for(fd));
		for (nb = (long)fd - 1; nb <= (long)fd + 1; nb += 2) {
			if (nb < 0 || nb >= (long)RSK_FDTAB_MAX || is_edge_fd(nb))
				continue;
			assert_int_equal(rsk_fdtab_load((int)nb), 0);
		}
	}
	/* Storing 0 untracks. */
	for (i = 0; i < RSK_ARRAY_SIZE(edge_fds); i++) {
		fd = edge_fds[i];
		assert_int_equal(rsk_fdtab_store(fd, 0), 0);
		assert_int_equal(rsk_fdtab_load(fd), 0);
	}
}

static void test_out_of_range_rejected(void **state)
{
	static const int bad[] = {(int)RSK_FDTAB_MAX, (int)RSK_FDTAB_MAX + 1, INT_MAX, -1, -2,
				  -4096, INT_MIN};
	unsigned int i;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(bad); i++) {
		assert_int_equal(rsk_fdtab_store(bad[i], 0x1230), -EBADF);
		assert_int_equal(rsk_fdtab_load(bad[i]), 0);
		assert_int_equal(rsk_fdtab_exchange(bad[i], 0x1230), 0);
		assert_int_equal(rsk_fdtab_load(bad[i]), 0);
		assert_int_equal(rsk_fdtab_replace(bad[i], 0, 0x1230), 0);
		assert_int_equal(rsk_fdtab_load(bad[i]), 0);
	}
	/* A rejected fd must not have aliased onto a valid slot (e.g. by masking). */
	assert_int_equal(rsk_fdtab_chunks(), 0);
	assert_int_equal(rsk_fdtab_load(0), 0);
	assert_int_equal(rsk_fdtab_load((int)RSK_FDTAB_MAX - 1), 0);
}

static void test_exchange(void **state)
{
	const int fd = 70000;

	(void)state;
	assert_int_equal(rsk_fdtab_exchange(fd, 0x100), 0);
	assert_int_equal(rsk_fdtab_load(fd), 0x100);
	assert_int_equal(rsk_fdtab_exchange(fd, 0x200), 0x100);
	assert_int_equal(rsk_fdtab_load(fd), 0x200);
	assert_int_equal(rsk_fdtab_exchange(fd, 0), 0x200);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_int_equal(rsk_fdtab_chunks(), 1);
	/* Exchanging 0 into an fd whose chunk does not exist allocates nothing. */
	assert_int_equal(rsk_fdtab_exchange(1 << 24, 0), 0);
	assert_int_equal(rsk_fdtab_chunks(), 1);
}

static void test_replace(void **state)
{
	const int fd = 4100;

	(void)state;
	/* 0 -> a on an empty slot (chunk created on demand). */
	assert_int_equal(rsk_fdtab_replace(fd, 0, 0xa0), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0xa0);
	/* Wrong expected value: fails and leaves the slot alone. */
	assert_int_equal(rsk_fdtab_replace(fd, 0xb0, 0xc0), 0);
	assert_int_equal(rsk_fdtab_load(fd), 0xa0);
	assert_int_equal(rsk_fdtab_replace(fd, 0, 0xc0), 0);
	assert_int_equal(rsk_fdtab_load(fd), 0xa0);
	/* Right expected value: swaps. */
	assert_int_equal(rsk_fdtab_replace(fd, 0xa0, 0xb0), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0xb0);
	assert_int_equal(rsk_fdtab_replace(fd, 0xb0, 0), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_int_equal(rsk_fdtab_chunks(), 1);
	/* Where no chunk exists the slot reads as 0: x -> 0 fails, 0 -> 0 succeeds, no alloc. */
	assert_int_equal(rsk_fdtab_replace(1 << 25, 0xa0, 0), 0);
	assert_int_equal(rsk_fdtab_replace(1 << 25, 0, 0), 1);
	assert_int_equal(rsk_fdtab_chunks(), 1);
}

static void test_sparse_chunks(void **state)
{
	const int a = 1 << 20, b = (1 << 30) - 1;

	(void)state;
	assert_int_equal(rsk_fdtab_chunks(), 0);
	assert_int_equal(rsk_fdtab_store(a, val_for(a)), 0);
	assert_int_equal(rsk_fdtab_store(b, val_for(b)), 0);
	assert_int_equal(rsk_fdtab_chunks(), 2);
	/* More fds in the same chunks, reads and zero stores elsewhere: still two chunks. */
	assert_int_equal(rsk_fdtab_store(a + 1, val_for(a + 1)), 0);
	assert_int_equal(rsk_fdtab_store(a + (int)RSK_FDTAB_CHUNK - 1, 0x18), 0);
	assert_int_equal(rsk_fdtab_store(b - 1, val_for(b - 1)), 0);
	assert_int_equal(rsk_fdtab_load(a + (int)RSK_FDTAB_CHUNK), 0);
	assert_int_equal(rsk_fdtab_load(12345), 0);
	assert_int_equal(rsk_fdtab_store(12345, 0), 0);
	assert_int_equal(rsk_fdtab_chunks(), 2);
	assert_int_equal(rsk_fdtab_load(a), val_for(a));
	assert_int_equal(rsk_fdtab_load(b), val_for(b));
	/* The next fd after a chunk's last one needs a new chunk. */
	assert_int_equal(rsk_fdtab_store(a + (int)RSK_FDTAB_CHUNK, 0x28), 0);
	assert_int_equal(rsk_fdtab_chunks(), 3);
	rsk_fdtab_clear();
	assert_int_equal(rsk_fdtab_chunks(), 0);
	assert_int_equal(rsk_fdtab_load(a), 0);
	assert_int_equal(rsk_fdtab_load(b), 0);
}

struct walk_log {
	int fds[64];
	uintptr_t vals[64];
	int n;
	int stop_after; /* return stop_rc on this visit (1-based); 0 = never */
	int stop_rc;
};

static int walk_record(int fd, uintptr_t v, void *arg)
{
	struct walk_log *log = arg;

	if (log->n < (int)RSK_ARRAY_SIZE(log->fds)) {
		log->fds[log->n] = fd;
		log->vals[log->n] = v;
	}
	log->n++;
	return log->n == log->stop_after ? log->stop_rc : 0;
}

/* Sorted, as the walk must report them. */
static const int walk_fds[] = {
	0, 3, 5, 4095, 4096, 8191, 70000, 1 << 20, (1 << 20) + 1, (int)RSK_FDTAB_MAX - 1,
};

static void store_walk_fds(void)
{
	unsigned int i;

	/* Store out of order so ascending output is the walk's doing, not insertion order. */
	for (i = RSK_ARRAY_SIZE(walk_fds); i-- > 0;)
		assert_int_equal(rsk_fdtab_store(walk_fds[i], val_for(walk_fds[i])), 0);
}

static void check_walk(unsigned int first, unsigned int last)
{
	struct walk_log log = {.n = 0};
	unsigned int i;
	int n = 0;

	assert_int_equal(rsk_fdtab_walk(first, last, walk_record, &log), 0);
	for (i = 0; i < RSK_ARRAY_SIZE(walk_fds); i++) {
		if ((unsigned int)walk_fds[i] < first || (unsigned int)walk_fds[i] > last)
			continue;
		assert_true(n < log.n);
		assert_int_equal(log.fds[n], walk_fds[i]);
		assert_int_equal(log.vals[n], val_for(walk_fds[i]));
		n++;
	}
	assert_int_equal(log.n, n);
}

static void test_walk_order_and_range(void **state)
{
	(void)state;
	store_walk_fds();
	check_walk(0, RSK_FDTAB_MAX - 1);
	check_walk(0, UINT_MAX); /* last beyond the table is clamped */
	check_walk(4095, 70000);
	check_walk(4096, 4096);
	check_walk(4, 4094);
	check_walk(4097, 8190); /* inside an allocated chunk, nothing stored */
	check_walk(8192, 69999); /* chunks not allocated */
	check_walk(5, 5);
	check_walk(6, 6);
	check_walk(70001, 1 << 20);
	check_walk(RSK_FDTAB_MAX - 1, RSK_FDTAB_MAX - 1);
	check_walk(RSK_FDTAB_MAX, UINT_MAX);
	check_walk(70000, 5); /* first > last: empty */
	/* Removing a slot removes it from the walk. */
	assert_int_equal(rsk_fdtab_store(4096, 0), 0);
	{
		struct walk_log log = {.n = 0};

		assert_int_equal(rsk_fdtab_walk(4095, 4097, walk_record, &log), 0);
		assert_int_equal(log.n, 1);
		assert_int_equal(log.fds[0], 4095);
	}
}

static void test_walk_early_stop(void **state)
{
	struct walk_log log = {.n = 0, .stop_after = 3, .stop_rc = 42};

	(void)state;
	store_walk_fds();
	assert_int_equal(rsk_fdtab_walk(0, UINT_MAX, walk_record, &log), 42);
	assert_int_equal(log.n, 3);
	assert_int_equal(log.fds[0], 0);
	assert_int_equal(log.fds[1], 3);
	assert_int_equal(log.fds[2], 5);
	/* A negative stop value is returned as is, and the stop honours the range start. */
	log = (struct walk_log){.n = 0, .stop_after = 2, .stop_rc = -7};
	assert_int_equal(rsk_fdtab_walk(4000, UINT_MAX, walk_record, &log), -7);
	assert_int_equal(log.n, 2);
	assert_int_equal(log.fds[0], 4095);
	assert_int_equal(log.fds[1], 4096);
}

#define NTHREADS 4
#define CONC_CHUNKS 4
#define CONC_ROUNDS 8

struct conc_arg {
	pthread_barrier_t *barrier;
	int base, count, tid;
	int failures;
};

static void *conc_store(void *p)
{
	struct conc_arg *a = p;
	int i;

	pthread_barrier_wait(a->barrier);
	/* Interleaved fds: all threads hit every fresh chunk at the same time. */
	for (i = a->tid; i < a->count; i += NTHREADS)
		if (rsk_fdtab_store(a->base + i, val_for(a->base + i)) != 0)
			a->failures++;
	return NULL;
}

static void test_concurrent_stores(void **state)
{
	const int count = CONC_CHUNKS * (int)RSK_FDTAB_CHUNK;
	struct conc_arg args[NTHREADS];
	pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	int round, t, i, base, missing;

	(void)state;
	for (round = 0; round < CONC_ROUNDS; round++) {
		base = (round + 1) << 22; /* a fresh chunk range every round */
		assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
		for (t = 0; t < NTHREADS; t++) {
			args[t] = (struct conc_arg){.barrier = &barrier, .base = base,
						    .count = count, .tid = t};
			assert_int_equal(pthread_create(&th[t], NULL, conc_store, &args[t]), 0);
		}
		for (t = 0; t < NTHREADS; t++) {
			assert_int_equal(pthread_join(th[t], NULL), 0);
			assert_int_equal(args[t].failures, 0);
		}
		pthread_barrier_destroy(&barrier);
		missing = 0;
		for (i = 0; i < count; i++)
			if (rsk_fdtab_load(base + i) != val_for(base + i))
				missing++;
		assert_int_equal(missing, 0);
		/* The chunk-creation race has one winner per chunk: no double count. */
		assert_int_equal(rsk_fdtab_chunks(), (unsigned int)(round + 1) * CONC_CHUNKS);
	}
}

/* ---- socket objects on top of the table (core/sock) ---- */

static int tcp_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	return fd;
}

static void test_sock_track_kernel_tag(void **state)
{
	struct rsk_sock *s;
	uintptr_t v;
	int fd = tcp_socket();

	(void)state;
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	v = rsk_fdtab_load(fd);
	assert_true(v != 0);
	assert_int_equal(v & RSK_FDTAB_TAG_KERNEL, RSK_FDTAB_TAG_KERNEL);
	assert_false(rsk_fdtab_is_accel(v));
	s = rsk_sock_get(fd);
	assert_non_null(s);
	assert_ptr_equal(s, rsk_fdtab_ptr(v));
	assert_int_equal(s->domain, AF_INET);
	assert_int_equal(s->state, RSK_SOCK_NEW);
	assert_int_equal(s->transport, RDMASOCK_TRANSPORT_KERNEL);
	assert_int_equal(s->nfds, 1);
	assert_int_equal(s->refs, 2); /* the slot's + ours */
	rsk_sock_put(s);
	assert_int_equal(s->refs, 1);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_null(rsk_sock_get(fd));
	assert_int_equal(rsk_sock_release_fd(fd), 0); /* already released */
	assert_int_equal(close(fd), 0);
}

static void test_sock_get_untracked(void **state)
{
	int fd = tcp_socket();

	(void)state;
	assert_null(rsk_sock_get(fd));
	assert_null(rsk_sock_get(-1));
	assert_null(rsk_sock_get((int)RSK_FDTAB_MAX));
	assert_null(rsk_sock_get(1 << 29)); /* chunk never allocated */
	assert_int_equal(rsk_sock_release_fd(fd), 0);
	/* dup of an untracked fd tracks nothing. */
	assert_int_equal(rsk_sock_dup(fd, 1000), 0);
	assert_int_equal(rsk_fdtab_load(1000), 0);
	assert_int_equal(close(fd), 0);
}

static void test_sock_dup_release(void **state)
{
	struct rsk_sock *s, *s2;
	uintptr_t v;
	int fd = tcp_socket(), fd2;

	(void)state;
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	fd2 = dup(fd);
	assert_true(fd2 >= 0);
	assert_int_equal(rsk_sock_dup(fd, fd2), 0);
	v = rsk_fdtab_load(fd2);
	assert_true(v != 0);
	assert_ptr_equal(rsk_fdtab_ptr(rsk_fdtab_load(fd)), rsk_fdtab_ptr(v));
	assert_int_equal(v & RSK_FDTAB_TAG_KERNEL, RSK_FDTAB_TAG_KERNEL);
	s = rsk_fdtab_ptr(v);
	assert_int_equal(s->nfds, 2);
	assert_int_equal(s->refs, 2); /* one per slot */

	/* Releasing the original keeps the dup and the object. */
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_int_equal(rsk_fdtab_load(fd2), v);
	s2 = rsk_sock_get(fd2);
	assert_non_null(s2);
	assert_ptr_equal(s2, s);
	assert_int_equal(s->nfds, 1);
	assert_int_equal(s->refs, 2);
	rsk_sock_put(s2);
	assert_int_equal(close(fd), 0);

	/* Releasing the last fd frees the slot and the object (back to the pool, refs 0). */
	assert_int_equal(rsk_sock_release_fd(fd2), 1);
	assert_int_equal(rsk_fdtab_load(fd2), 0);
	assert_null(rsk_sock_get(fd2));
	assert_int_equal(s->nfds, 0);
	assert_int_equal(s->refs, 0);
	assert_int_equal(close(fd2), 0);

	/* The freed object is what the pool hands out next, fully re-initialised. */
	fd = tcp_socket();
	assert_int_equal(rsk_sock_track(fd, AF_INET6, RSK_SOCK_LISTENING), 0);
	s2 = rsk_fdtab_ptr(rsk_fdtab_load(fd));
	assert_ptr_equal(s2, s);
	assert_int_equal(s2->refs, 1);
	assert_int_equal(s2->nfds, 1);
	assert_int_equal(s2->domain, AF_INET6);
	assert_int_equal(s2->state, RSK_SOCK_LISTENING);
	assert_int_equal(s2->counted, 0);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(close(fd), 0);
}

static void test_sock_dup_bad_target(void **state)
{
	struct rsk_sock *s;
	int fd = tcp_socket();

	(void)state;
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_NEW), 0);
	s = rsk_fdtab_ptr(rsk_fdtab_load(fd));
	assert_int_equal(rsk_sock_dup(fd, (int)RSK_FDTAB_MAX), -EBADF);
	assert_int_equal(rsk_sock_dup(fd, -1), -EBADF);
	/* A failed dup leaves the counts as they were. */
	assert_int_equal(s->nfds, 1);
	assert_int_equal(s->refs, 1);
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	assert_int_equal(s->refs, 0);
	assert_int_equal(close(fd), 0);
}

static void test_sock_track_bad_fd(void **state)
{
	(void)state;
	assert_int_equal(rsk_sock_track(-1, AF_INET, RSK_SOCK_NEW), -EBADF);
	assert_int_equal(rsk_sock_track((int)RSK_FDTAB_MAX, AF_INET, RSK_SOCK_NEW), -EBADF);
	assert_int_equal(rsk_fdtab_chunks(), 0);
}

/* A walk reads the directory only up to its highest chunk: a chunk made later, higher up
 * (a hidden fd near the limit) or after a clear, is walked too. */
static void test_walk_grows_with_chunks(void **state)
{
	struct walk_log log = {.n = 0};

	(void)state;
	assert_int_equal(rsk_fdtab_store(5, val_for(5)), 0);
	assert_int_equal(rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, walk_record, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(rsk_fdtab_store(1 << 20, val_for(1 << 20)), 0);
	log.n = 0;
	assert_int_equal(rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, walk_record, &log), 0);
	assert_int_equal(log.n, 2);
	assert_int_equal(log.fds[1], 1 << 20);
	rsk_fdtab_clear();
	assert_int_equal(rsk_fdtab_store(70000, val_for(70000)), 0);
	log.n = 0;
	assert_int_equal(rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, walk_record, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.fds[0], 70000);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_clear, teardown_clear)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_store_load_edges),
		T(test_out_of_range_rejected),
		T(test_exchange),
		T(test_replace),
		T(test_sparse_chunks),
		T(test_walk_order_and_range),
		T(test_walk_early_stop),
		T(test_walk_grows_with_chunks),
		T(test_concurrent_stores),
		T(test_sock_track_kernel_tag),
		T(test_sock_get_untracked),
		T(test_sock_dup_release),
		T(test_sock_dup_bad_target),
		T(test_sock_track_bad_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
