/*
 * Unit tests of the live stats segment's writer (core/base/statseg.c), driven the way
 * `rdmasock stat` drives it (add one to `readers`, FUTEX_WAKE, wait for `generation`):
 * stale segments are swept (dead pids' removed, live ones' kept or put back, other names
 * untouched, a bounded number per sweep, and once by a new publisher; a reader's removal
 * takes only the file it judged); a previous image's file is swept at start, a leftover
 * file of our pid is replaced, the file is 0600 with a complete header and is never
 * published before a reader asks; a bump publishes the registered rows and the process
 * totals (open kernel rows' bytes added) under the seqlock; a full segment counts what it
 * dropped; a forked child makes its own segment and leaves the parent's alone; stop removes
 * the file. The tests share one segment and run in order.
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
#include "unit_files.h"

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

/* ---- the sweep of stale segments ---- */

/* A pid no process can have (above pid_max), so "gone" for sure. */
static pid_t dead_pid(int k)
{
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
	long max = 0;

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld", &max), 1);
	fclose(f);
	return (pid_t)(max + k);
}

/* A child that lives until we write its pipe (then reaped by reap_live). */
static pid_t live_child(int *wr)
{
	int p[2];
	char b;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[1]);
		_exit(read(p[0], &b, 1) < 0);
	}
	close(p[0]);
	*wr = p[1];
	return pid;
}

static void reap_live(pid_t pid, int wr)
{
	close(wr);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
}

static uint64_t start_of(pid_t pid)
{
	char p[64], line[1024];
	size_t n;
	FILE *f;

	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	f = fopen(p, "r");
	assert_non_null(f);
	n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = '\0';
	return rsk_statseg_starttime(line);
}

/* A file @name in the test directory: a complete header for @pid, @start (or junk if !pid). */
static void put_seg(const char *name, pid_t pid, uint64_t start)
{
	struct rsk_statseg_hdr h;

	memset(&h, 0, sizeof(h));
	if (pid != 0) {
		h.magic = RSK_STATSEG_MAGIC;
		h.version = RSK_STATSEG_VERSION;
		h.pid = pid;
		h.start_time = start;
	}
	unit_file_put(dir, name, &h, sizeof(h));
}

static int there(const char *name)
{
	return unit_file_there(dir, name);
}

static void gone(const char *name)
{
	unit_file_gone(dir, name);
}

#define NAME(buf, ...) snprintf(buf, sizeof(buf), __VA_ARGS__)

/*
 * A dead pid's segment is removed (a reaped child's pid, and a pid above pid_max); a live
 * pid's is kept, with or without a header; names that are not segments are never touched
 * (letters, a leading zero, a suffix, another prefix, a symlink, the bare prefix).
 */
static void test_sweep_dead_and_live(void **state)
{
	char dead1[64], dead2[64], live[64], own[64], g[8][64], lnk[64], tgt[PATH_MAX], lpath[PATH_MAX];
	pid_t child, lpid;
	int wr, i;

	(void)state;
	child = fork();
	assert_true(child >= 0);
	if (child == 0)
		_exit(0);
	assert_int_equal(waitpid(child, NULL, 0), child); /* now gone */
	lpid = live_child(&wr);
	NAME(dead1, RSK_STATSEG_PREFIX "%d", (int)child);
	NAME(dead2, RSK_STATSEG_PREFIX "%d", (int)dead_pid(1));
	NAME(live, RSK_STATSEG_PREFIX "%d", (int)lpid);
	NAME(own, RSK_STATSEG_PREFIX "%d", (int)getpid());
	put_seg(dead1, child, 12345);
	put_seg(dead2, 0, 0); /* junk content: the pid alone decides */
	put_seg(live, lpid, start_of(lpid));
	put_seg(own, 0, 0);
	NAME(g[0], RSK_STATSEG_PREFIX "abc");
	NAME(g[1], RSK_STATSEG_PREFIX "0%d", (int)dead_pid(2));
	NAME(g[2], RSK_STATSEG_PREFIX "%dx", (int)dead_pid(3));
	NAME(g[3], "other.%d", (int)dead_pid(4));
	NAME(g[4], RSK_STATSEG_PREFIX);
	NAME(g[5], RSK_STATSEG_PREFIX "%d.sweep-", (int)dead_pid(5));
	NAME(g[6], RSK_STATSEG_PREFIX "99999999999999");
	NAME(g[7], RSK_STATSEG_PREFIX "-%d", (int)dead_pid(6));
	for (i = 0; i < 8; i++)
		put_seg(g[i], 0, 0);
	NAME(lnk, RSK_STATSEG_PREFIX "%d", (int)dead_pid(7));
	snprintf(tgt, sizeof(tgt), "%s/%s", dir, g[0]);
	NAME(lpath, "%s/%s", dir, lnk);
	assert_int_equal(symlink(tgt, lpath), 0);

	assert_int_equal(rsk_statseg_sweep(), 2);
	assert_false(there(dead1));
	assert_false(there(dead2));
	assert_true(there(live));
	assert_true(there(own));
	for (i = 0; i < 8; i++)
		assert_true(there(g[i]));
	assert_true(there(lnk));
	assert_int_equal(rsk_statseg_sweep(), 0); /* nothing left to do */
	reap_live(lpid, wr);
	assert_int_equal(rsk_statseg_sweep(), 1); /* the live one died without removing it */
	assert_false(there(live));

	for (i = 0; i < 8; i++)
		gone(g[i]);
	gone(lnk);
	gone(own);
}

/*
 * A file claimed by a sweeper that died while judging it ("PID.sweep-Q", Q gone): put back
 * under its name when its writer lives (complete header with its start time, or no header
 * yet: a writer creating it), removed when the writer is dead or its pid was reused (another
 * start time), or when its name holds a newer file (never replaced). A claim whose sweeper
 * lives is its business.
 */
static void test_sweep_claims(void **state)
{
	char c1[128], c2[128], c3[128], c4[128], c5[128], orig[48];
	pid_t lpid;
	int wr;

	(void)state;
	lpid = live_child(&wr);
	NAME(orig, RSK_STATSEG_PREFIX "%d", (int)lpid);
	NAME(c1, "%s.sweep-%d", orig, (int)dead_pid(1));
	put_seg(c1, lpid, start_of(lpid));
	assert_int_equal(rsk_statseg_sweep(), 0);
	assert_false(there(c1));
	assert_true(there(orig)); /* back where its writer and readers look for it */
	gone(orig);

	NAME(c2, "%s.sweep-%d", orig, (int)dead_pid(2));
	put_seg(c2, 0, 0); /* no header yet */
	assert_int_equal(rsk_statseg_sweep(), 0);
	assert_true(there(orig));
	gone(orig);

	NAME(c3, "%s.sweep-%d", orig, (int)dead_pid(3));
	put_seg(c3, lpid, start_of(lpid) + 1); /* an earlier process with that pid */
	assert_int_equal(rsk_statseg_sweep(), 1);
	assert_false(there(c3));
	assert_false(there(orig));

	NAME(c4, RSK_STATSEG_PREFIX "%d.sweep-%d", (int)dead_pid(4), (int)dead_pid(5));
	put_seg(c4, dead_pid(4), 1);
	assert_int_equal(rsk_statseg_sweep(), 1);
	assert_false(there(c4));

	/* live and its own, but the name holds a newer file (the owner exec'd and made one):
	 * the claimed one is the old image's; the newer one stays as it is */
	put_seg(orig, 0, 0);
	NAME(c1, "%s.sweep-%d", orig, (int)dead_pid(7));
	put_seg(c1, lpid, start_of(lpid));
	assert_int_equal(rsk_statseg_sweep(), 1);
	assert_false(there(c1));
	assert_true(there(orig));
	{
		struct rsk_statseg_hdr h;
		char p[PATH_MAX];
		FILE *f;

		snprintf(p, sizeof(p), "%s/%s", dir, orig);
		f = fopen(p, "r");
		assert_non_null(f);
		assert_int_equal(fread(&h, sizeof(h), 1, f), 1);
		fclose(f);
		assert_int_equal(h.magic, 0); /* the newer (junk) one, not the claimed one */
	}
	gone(orig);

	NAME(c5, RSK_STATSEG_PREFIX "%d.sweep-%d", (int)dead_pid(6), (int)lpid);
	put_seg(c5, dead_pid(6), 1); /* its sweeper (lpid here) is at work */
	assert_int_equal(rsk_statseg_sweep(), 0);
	assert_true(there(c5));
	gone(c5);
	reap_live(lpid, wr);
}

/* A reader's removal of a file it judged stale (rsk_statseg_remove): that file goes, but a
 * newer one made under the name since (the pid's new image) stays. */
static void test_remove_judged_file_only(void **state)
{
	char name[64], p[PATH_MAX];
	struct stat judged, st;
	pid_t lpid;
	int wr;

	(void)state;
	lpid = live_child(&wr);
	NAME(name, RSK_STATSEG_PREFIX "%d", (int)lpid);
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	put_seg(name, lpid, start_of(lpid));
	assert_int_equal(stat(p, &judged), 0);
	assert_int_equal(rsk_statseg_remove(lpid, &judged), 1);
	assert_false(there(name));

	put_seg(name, lpid, start_of(lpid));
	assert_int_equal(stat(p, &judged), 0);
	put_seg("newer", 0, 0); /* a newer file under the name (made while the old one exists,
				 * so another inode) */
	{
		char q[PATH_MAX];

		snprintf(q, sizeof(q), "%s/newer", dir);
		assert_int_equal(rename(q, p), 0);
	}
	assert_int_equal(stat(p, &st), 0);
	assert_true(st.st_ino != judged.st_ino);
	assert_int_equal(rsk_statseg_remove(lpid, &judged), 0);
	assert_true(there(name));
	gone(name);
	assert_int_equal(rsk_statseg_remove(lpid, &judged), 0); /* nothing there */
	reap_live(lpid, wr);
}

/* One sweep removes a bounded number; the next ones go on. */
static void test_sweep_bounded(void **state)
{
	char n[64];
	int i, total = 0, k;

	(void)state;
	for (i = 0; i < 300; i++) {
		NAME(n, RSK_STATSEG_PREFIX "%d", (int)dead_pid(10 + i));
		put_seg(n, 0, 0);
	}
	k = rsk_statseg_sweep();
	assert_true(k > 0 && k < 300);
	for (total = k, i = 0; i < 5 && total < 300; i++)
		total += rsk_statseg_sweep();
	assert_int_equal(total, 300);
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

/* The lowest free fd number, as socket() or open() would get it. */
static int lowest_free_fd(void)
{
	int fd = fcntl(0, F_DUPFD, 0);

	assert_true(fd >= 0);
	close(fd);
	return fd;
}

/* A leftover of a dead process that had our pid is replaced; ours is 0600, unpublished; the
 * new publisher sweeps a dead process's segment once, as it starts, and while it sweeps (200
 * stale files here, to make it last) the application's lowest free fd never moves: the
 * sweep runs inside the start call, and every fd it opens is closed before that returns
 * (before, the publisher thread swept, and the directory's fd took the application's lowest
 * free number from a thread it does not know of). */
static void test_start_replaces_leftover(void **state)
{
	struct rsk_statseg_hdr *h;
	struct stat st;
	char stale[64], more[64];
	size_t len;
	int fd, i, base, moved = 0;

	(void)state;
	for (i = 0; i < 200; i++) { /* under one sweep's bound of 256 removals */
		NAME(more, RSK_STATSEG_PREFIX "%d", (int)dead_pid(1000 + i));
		put_seg(more, 0, 0);
	}
	snprintf(path, sizeof(path), "%s/" RSK_STATSEG_PREFIX "%d", dir, (int)getpid());
	fd = open(path, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "junk", 4), 4);
	close(fd);
	assert_string_equal(rsk_statseg_path(), "");
	NAME(stale, RSK_STATSEG_PREFIX "%d", (int)dead_pid(42));
	put_seg(stale, 0, 0); /* a dead process's: the new publisher sweeps it */

	rsk_statseg_register(fill);
	base = lowest_free_fd();
	assert_int_equal(rsk_statseg_start(), 0);
	for (i = 0; i < 200000 && (there(stale) || there(more)); i++)
		moved += lowest_free_fd() != base;
	assert_int_equal(moved, 0);
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
	for (i = 0; i < 2000 && there(stale); i++)
		usleep(1000);
	assert_false(there(stale));
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
		cmocka_unit_test(test_sweep_dead_and_live),
		cmocka_unit_test(test_sweep_claims),
		cmocka_unit_test(test_sweep_bounded),
		cmocka_unit_test(test_remove_judged_file_only),
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
