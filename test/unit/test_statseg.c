/*
 * Unit tests of the live stats segment's writer (core/base/statseg.c), driven the way
 * `rdmasock stat` drives it (add one to `readers`, FUTEX_WAKE, wait for `generation`):
 * a previous image's file is swept at start, a leftover file of our pid is replaced, the file is 0600 with a complete header and is
 * never published before a reader asks; a bump publishes the registered rows and the
 * process totals (open kernel rows' bytes added) under the seqlock; a full segment counts
 * what it dropped; a forked child makes its own segment and leaves the parent's alone; stop
 * removes the file. The tests share one segment and run in order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/stats.h"
#include "base/statseg.h"

static char dir[] = "/tmp/rsk-statseg-XXXXXX";
static char path[PATH_MAX];
static int rows_wanted;  /* rows the fill callback puts (atomic: the publisher reads it) */
static int fills;        /* times it was called (atomic: the publisher counts) */

static void fill(struct rsk_statseg_writer *w)
{
	struct rsk_statseg_sock r;
	int i;

	__atomic_add_fetch(&fills, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < __atomic_load_n(&rows_wanted, __ATOMIC_SEQ_CST); i++) {
		memset(&r, 0, sizeof(r));
		r.fd = 100 + i;
		r.state = RSK_STATSEG_ST_CONNECTED;
		r.transport = i == 0 ? RDMASOCK_TRANSPORT_KERNEL : RDMASOCK_TRANSPORT_SHM;
		r.bytes_sent = 1000 + (uint64_t)i;
		r.bytes_received = 2000;
		(void)rsk_statseg_put_socket(w, &r);
	}
}

static struct rsk_statseg_hdr *map_segment(const char *p, size_t *len)
{
	struct stat st;
	void *m;
	int fd = open(p, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(m != MAP_FAILED);
	return m;
}

/* The reader's side: bump, wake, and wait (bounded) for the generation to move. */
static int ask(struct rsk_statseg_hdr *h, int wait_ms)
{
	uint64_t g0 = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
	const struct timespec ms = {0, 1000000};
	int t;

	__atomic_add_fetch(&h->readers, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &h->readers, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	for (t = 0; t < wait_ms; t++, nanosleep(&ms, NULL))
		if (__atomic_load_n(&h->generation, __ATOMIC_ACQUIRE) != g0 &&
		    !(__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) & 1))
			return 1;
	return 0;
}

static void test_set_addrs(void **state)
{
	struct sockaddr_storage l, p;
	struct sockaddr_in *l4 = (struct sockaddr_in *)&l, *p4 = (struct sockaddr_in *)&p;
	struct sockaddr_in6 *l6 = (struct sockaddr_in6 *)&l;
	struct rsk_statseg_sock r;

	(void)state;
	memset(&l, 0, sizeof(l));
	memset(&p, 0, sizeof(p));
	l4->sin_family = p4->sin_family = AF_INET;
	l4->sin_port = htons(6379);
	p4->sin_port = htons(40000);
	inet_pton(AF_INET, "127.0.0.1", &l4->sin_addr);
	inet_pton(AF_INET, "127.0.0.2", &p4->sin_addr);
	memset(&r, 0, sizeof(r));
	rsk_statseg_set_addrs(&r, &l, &p);
	assert_int_equal(r.family, AF_INET);
	assert_int_equal(r.local_port, 6379);
	assert_int_equal(r.peer_port, 40000);
	assert_memory_equal(r.local_addr, "\x7f\0\0\x01", 4);
	assert_memory_equal(r.peer_addr, "\x7f\0\0\x02", 4);

	/* a listener: no peer (other family, or NULL) leaves it 0 */
	memset(&r, 0, sizeof(r));
	memset(&l, 0, sizeof(l));
	l6->sin6_family = AF_INET6;
	l6->sin6_port = htons(80);
	l6->sin6_addr = in6addr_loopback;
	p.ss_family = AF_UNSPEC;
	rsk_statseg_set_addrs(&r, &l, &p);
	assert_int_equal(r.family, AF_INET6);
	assert_int_equal(r.local_port, 80);
	assert_memory_equal(r.local_addr, &in6addr_loopback, 16);
	assert_int_equal(r.peer_port, 0);

	/* unknown: nothing at all */
	memset(&r, 0, sizeof(r));
	l.ss_family = AF_UNIX;
	rsk_statseg_set_addrs(&r, &l, NULL);
	rsk_statseg_set_addrs(&r, NULL, NULL);
	assert_int_equal(r.family, 0);
}

/* At start, a file named for our pid (a previous image's, before an exec) is removed. */
static void test_sweep_own(void **state)
{
	struct stat st;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/" RSK_STATSEG_PREFIX "%d", dir, (int)getpid());
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	rsk_statseg_sweep_own();
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	rsk_statseg_sweep_own(); /* nothing there: nothing happens */
}

/* A leftover of a dead process that had our pid is replaced; ours is 0600, unpublished. */
static void test_start_replaces_leftover(void **state)
{
	struct rsk_statseg_hdr *h;
	struct stat st;
	size_t len;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/" RSK_STATSEG_PREFIX "%d", dir, (int)getpid());
	fd = open(path, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "junk", 4), 4);
	close(fd);
	assert_string_equal(rsk_statseg_path(), "");

	rsk_statseg_register(fill);
	assert_int_equal(rsk_statseg_start(), 0);
	assert_int_equal(rsk_statseg_start(), 0); /* idempotent */
	assert_string_equal(rsk_statseg_path(), path);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal((uint64_t)st.st_size, rsk_statseg_size(RSK_STATSEG_CAPACITY));

	h = map_segment(path, &len);
	assert_int_equal(h->magic, RSK_STATSEG_MAGIC);
	assert_int_equal(h->version, RSK_STATSEG_VERSION);
	assert_int_equal(h->hdr_size, sizeof(*h));
	assert_int_equal(h->rec_size, sizeof(struct rsk_statseg_sock));
	assert_int_equal(h->capacity, RSK_STATSEG_CAPACITY);
	assert_int_equal(h->pid, getpid());
	assert_true(h->start_time > 0);
	assert_string_equal(h->program, rsk_stats_program());
	usleep(300 * 1000); /* the publisher runs: it must still not have published */
	assert_int_equal(h->generation, 0);
	assert_int_equal(__atomic_load_n(&fills, __ATOMIC_SEQ_CST), 0);
	munmap(h, len);
}

/* A bump publishes the rows and the totals (the open kernel row's bytes added). */
static void test_bump_publishes(void **state)
{
	struct rsk_statseg_hdr *h;
	size_t len;

	(void)state;
	h = map_segment(path, &len);
	rsk_stats_reset();
	rsk_counter_add(&rsk_stats.bytes_sent[RDMASOCK_TRANSPORT_KERNEL], 5);
	rsk_counter_add(&rsk_stats.connections[RDMASOCK_TRANSPORT_SHM], 2);
	__atomic_store_n(&rows_wanted, 3, __ATOMIC_SEQ_CST);
	assert_true(ask(h, 2000));
	assert_true(__atomic_load_n(&fills, __ATOMIC_SEQ_CST) >= 1);
	assert_int_equal(h->nrec, 3);
	assert_int_equal(h->dropped, 0);
	assert_int_equal(h->rec[0].fd, 100);
	assert_int_equal(h->rec[2].fd, 102);
	assert_int_equal(h->rec[2].transport, RDMASOCK_TRANSPORT_SHM);
	assert_int_equal(h->totals.connections[RDMASOCK_TRANSPORT_SHM], 2);
	/* 5 from closed sockets + 1000 of the open kernel row; shm rows are in rsk_stats */
	assert_int_equal(h->totals.bytes_sent[RDMASOCK_TRANSPORT_KERNEL], 1005);
	assert_int_equal(h->totals.bytes_received[RDMASOCK_TRANSPORT_KERNEL], 2000);
	assert_int_equal(h->totals.bytes_sent[RDMASOCK_TRANSPORT_SHM], 0);
	assert_true(h->published_ms > 0);

	/* the rows follow what the fill sees now */
	__atomic_store_n(&rows_wanted, 1, __ATOMIC_SEQ_CST);
	assert_true(ask(h, 2000));
	assert_int_equal(h->nrec, 1);
	munmap(h, len);
	rsk_stats_reset();
}

/* More sockets than the segment holds: the rest is counted, never written past the end. */
static void test_full_segment_counts_dropped(void **state)
{
	struct rsk_statseg_hdr *h;
	size_t len;

	(void)state;
	h = map_segment(path, &len);
	__atomic_store_n(&rows_wanted, RSK_STATSEG_CAPACITY + 7, __ATOMIC_SEQ_CST);
	assert_true(ask(h, 3000));
	assert_int_equal(h->nrec, RSK_STATSEG_CAPACITY);
	assert_int_equal(h->dropped, 7);
	assert_int_equal(h->rec[RSK_STATSEG_CAPACITY - 1].fd, 100 + RSK_STATSEG_CAPACITY - 1);
	__atomic_store_n(&rows_wanted, 0, __ATOMIC_SEQ_CST);
	assert_true(ask(h, 2000));
	assert_int_equal(h->nrec, 0);
	assert_int_equal(h->dropped, 0);
	munmap(h, len);
}

/* A forked child has its own segment (its pid), publishes there, removes it at exit, and
 * leaves the parent's file and publisher alone. */
static void test_fork_child_own_segment(void **state)
{
	char cpath[PATH_MAX];
	struct stat st;
	pid_t pid;
	int status;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rsk_statseg_hdr *h;
		size_t len;

		rsk_statseg_atfork_child();
		snprintf(cpath, sizeof(cpath), "%s/" RSK_STATSEG_PREFIX "%d", dir, (int)getpid());
		if (strcmp(rsk_statseg_path(), cpath) != 0 || access(cpath, F_OK) != 0)
			_exit(2);
		h = map_segment(cpath, &len);
		__atomic_store_n(&rows_wanted, 2, __ATOMIC_SEQ_CST);
		if (h->pid != getpid())
			_exit(3);
		if (!ask(h, 2000))
			_exit(4);
		if (h->nrec != 2)
			_exit(5);
		exit(0); /* the destructor removes the child's file */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	snprintf(cpath, sizeof(cpath), "%s/" RSK_STATSEG_PREFIX "%d", dir, (int)pid);
	assert_int_equal(stat(cpath, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(stat(path, &st), 0); /* the parent's is still there */
	{
		struct rsk_statseg_hdr *h;
		size_t len;

		h = map_segment(path, &len);
		assert_int_equal(h->pid, getpid());
		__atomic_store_n(&rows_wanted, 1, __ATOMIC_SEQ_CST);
		assert_true(ask(h, 2000)); /* and still published by the parent */
		assert_int_equal(h->nrec, 1);
		munmap(h, len);
	}
}

static void test_stop_removes(void **state)
{
	struct stat st;

	(void)state;
	rsk_statseg_stop();
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	rsk_statseg_stop(); /* twice is fine */
	assert_int_equal(rmdir(dir), 0); /* nothing else was left there */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_addrs),
		cmocka_unit_test(test_sweep_own),
		cmocka_unit_test(test_start_replaces_leftover),
		cmocka_unit_test(test_bump_publishes),
		cmocka_unit_test(test_full_segment_counts_dropped),
		cmocka_unit_test(test_fork_child_own_segment),
		cmocka_unit_test(test_stop_removes),
	};

	if (mkdtemp(dir) == NULL)
		return 1;
	setenv(RDMASOCK_ENV_STAT_DIR, dir, 1);
	rsk_stats_set_program("test_statseg");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
