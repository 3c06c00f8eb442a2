/*
 * Writer of the live stats segment (statseg.h). The segment is a 0600 file created with
 * O_EXCL and mapped shared; a publisher thread with every signal blocked sleeps untimed on
 * the segment's `readers` futex word, so a process that nobody watches never wakes, and
 * publishes every 500 ms for 10 s after each reader bump. The file is unlinked at exit; the
 * files of processes that could not (SIGKILL, _exit) are swept by the next process that
 * makes one, on its publisher thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "compiler.h"
#include "log.h"
#include "stats.h"
#include "statseg.h"
#include "sweep.h"
#include "sys.h"
#include "thread.h"

struct rsk_statseg_writer {
	struct rsk_statseg_hdr *h;
	uint32_t n, dropped;
	struct rdmasock_stats totals;
};

/* 0 = not started, 1 = running, -errno = creation failed (not retried). */
static int rsk_seg_state;
static pthread_mutex_t rsk_seg_lock = PTHREAD_MUTEX_INITIALIZER; /* start, publish, stop */
static struct rsk_statseg_hdr *rsk_seg;
static size_t rsk_seg_len;
static pid_t rsk_seg_owner; /* the process that created it: only it may unlink it */
static int rsk_seg_stopping;
static char rsk_seg_file[512];
static rsk_statseg_fill_fn rsk_seg_fill;

/* Publications come no closer than this, however often readers bump. */
#define RSK_SEG_MIN_GAP_MS 100

void rsk_statseg_register(rsk_statseg_fill_fn fill)
{
	__atomic_store_n(&rsk_seg_fill, fill, __ATOMIC_RELEASE);
}

const char *rsk_statseg_path(void)
{
	return __atomic_load_n(&rsk_seg_state, __ATOMIC_ACQUIRE) == 1 ? rsk_seg_file : "";
}

/* Shared (not private) futex: the waker is another process mapping the same file. */
static void rsk_seg_wait(uint32_t *word, uint32_t seen, int timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};

	(void)rsk_sys_futex(word, FUTEX_WAIT, seen, timeout_ms < 0 ? NULL : &ts);
}

static uint64_t rsk_seg_realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One publication under the seqlock: readers retry while `seq` is odd or has moved. */
static void rsk_seg_publish(void)
{
	rsk_statseg_fill_fn fill = __atomic_load_n(&rsk_seg_fill, __ATOMIC_ACQUIRE);
	struct rsk_statseg_writer w = {0};
	uint32_t seq;

	pthread_mutex_lock(&rsk_seg_lock);
	if (rsk_seg_stopping || rsk_seg == NULL) {
		pthread_mutex_unlock(&rsk_seg_lock);
		return;
	}
	w.h = rsk_seg;
	seq = __atomic_load_n(&rsk_seg->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&rsk_seg->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	rsk_stats_snapshot(&w.totals);
	if (fill != NULL)
		fill(&w);
	rsk_seg->nrec = w.n;
	rsk_seg->dropped = w.dropped;
	rsk_seg->totals = w.totals;
	rsk_seg->published_ms = rsk_seg_realtime_ms();
	__atomic_store_n(&rsk_seg->generation, rsk_seg->generation + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rsk_seg->seq, seq + 2, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&rsk_seg_lock);
}

int rsk_statseg_put_socket(struct rsk_statseg_writer *w, const struct rsk_statseg_sock *rec)
{
	if (w->n >= RSK_STATSEG_CAPACITY) {
		w->dropped++;
		return -ENOSPC;
	}
	w->h->rec[w->n++] = *rec;
	/* rsk_stats has kernel bytes of closed sockets only; the open ones are in the rows. */
	if (rec->transport == RDMASOCK_TRANSPORT_KERNEL) {
		w->totals.bytes_sent[RDMASOCK_TRANSPORT_KERNEL] += rec->bytes_sent;
		w->totals.bytes_received[RDMASOCK_TRANSPORT_KERNEL] += rec->bytes_received;
	}
	return 0;
}

static void rsk_seg_addr(const struct sockaddr_storage *ss, uint16_t *port, uint8_t addr[16])
{
	if (ss->ss_family == AF_INET) {
		*port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
		memcpy(addr, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		*port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
		memcpy(addr, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	}
}

void rsk_statseg_set_addrs(struct rsk_statseg_sock *rec, const struct sockaddr_storage *local,
			   const struct sockaddr_storage *peer)
{
	if (local == NULL || (local->ss_family != AF_INET && local->ss_family != AF_INET6))
		return;
	rec->family = local->ss_family;
	rsk_seg_addr(local, &rec->local_port, rec->local_addr);
	if (peer != NULL && peer->ss_family == local->ss_family)
		rsk_seg_addr(peer, &rec->peer_port, rec->peer_addr);
}

/*
 * The publisher. Idle (no bump for LINGER_MS) it sleeps on the futex with no timeout: that
 * is the point of the design, a process nobody watches is never woken. A reader's bump
 * changes the word and wakes it; it then publishes every PERIOD_MS until the linger ends.
 * The loop ends when the segment is stopped (exit) and the thread is woken once more.
 */
static void *rsk_seg_main(void *arg)
{
	/* From 0, the fresh segment's count: a reader that bumped before we ran is seen. */
	uint32_t *word = &rsk_seg->readers, seen = 0, now_r;
	int64_t until = 0, last = 0, now;

	(void)arg;
	while (!__atomic_load_n(&rsk_seg_stopping, __ATOMIC_ACQUIRE)) {
		now_r = __atomic_load_n(word, __ATOMIC_ACQUIRE);
		now = rsk_now_ms();
		if (now_r != seen) {
			seen = now_r;
			until = now + RSK_STATSEG_LINGER_MS;
		}
		if (now >= until) {
			rsk_seg_wait(word, seen, -1);
			continue;
		}
		if (now - last < RSK_SEG_MIN_GAP_MS) {
			rsk_seg_wait(word, seen, (int)(RSK_SEG_MIN_GAP_MS - (now - last)));
			continue;
		}
		rsk_thread_work_begin(); /* a fork waits for this (thread.h) */
		rsk_seg_publish();
		rsk_thread_work_end();
		last = rsk_now_ms();
		rsk_seg_wait(word, seen, RSK_STATSEG_PERIOD_MS);
	}
	return NULL;
}

/* /proc/PID/stat's starttime (@pid 0: ours), 0 if unknown: tells a reused pid from a writer. */
static uint64_t rsk_seg_proc_start(pid_t pid)
{
	char line[1024];
	ssize_t n;
	int fd;

	snprintf(line, sizeof(line), "/proc/%d/stat", pid != 0 ? (int)pid : (int)getpid());
	fd = open(line, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = rsk_sys_read(fd, line, sizeof(line) - 1);
	(void)rsk_sys_close(fd);
	if (n <= 0)
		return 0;
	line[n] = '\0';
	return rsk_statseg_starttime(line);
}

static const char *rsk_seg_dir(void)
{
	const char *dir = getenv(RDMASOCK_ENV_STAT_DIR);

	return dir == NULL || dir[0] == '\0' ? RSK_STATSEG_DIR : dir;
}

/* This process's segment name into @out. 0 or -ENAMETOOLONG. */
static int rsk_seg_name(char *out, size_t size)
{
	int n;

	n = snprintf(out, size, "%s/" RSK_STATSEG_PREFIX "%d", rsk_seg_dir(), (int)getpid());
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

void rsk_statseg_sweep_own(void)
{
	char name[sizeof(rsk_seg_file)];

	if (rsk_seg_name(name, sizeof(name)) == 0)
		(void)unlink(name); /* ENOENT but after an exec; never another user's (sticky) */
}

/* ---- stale segments: those of processes that ended without removing theirs ---- */

/* One sweep reads at most SCAN directory entries and removes at most REMOVE files, so its
 * cost is bounded however many leftovers a machine collected; later processes go on. */
#define RSK_SEG_SWEEP_SCAN 4096
#define RSK_SEG_SWEEP_REMOVE 256

static int rsk_seg_swept; /* this image swept already (a forked child inherits the 1) */

/* The pid in "rdmasock-stat.PID", else 0 (garbage names are left alone). */
static pid_t rsk_seg_name_pid(const char *name)
{
	const char *end;
	pid_t pid = rsk_sweep_parse_pid(name + strlen(RSK_STATSEG_PREFIX), &end);

	return *end == '\0' ? pid : 0;
}

/* Worth claiming: a segment whose process looks gone (live pids are not touched). */
static int rsk_seg_candidate(const char *name, void *arg)
{
	pid_t pid = rsk_seg_name_pid(name);

	(void)arg;
	return pid != 0 && rsk_sweep_pid_gone(pid);
}

/* Is the claimed file @fd, named @name, a dead writer's? Its pid is gone, or alive with
 * another start time than the complete header's (reused). Otherwise (alive and the same, or
 * a header not written yet: a writer creating it) it is live. */
static int rsk_seg_is_stale(int fd, const char *name, void *arg)
{
	struct rsk_statseg_hdr h;
	pid_t pid = rsk_seg_name_pid(name);
	uint64_t start;

	(void)arg;
	if (pid == 0)
		return 0;
	if (rsk_sweep_pid_gone(pid))
		return 1;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != RSK_STATSEG_MAGIC ||
	    h.pid != pid)
		return 0;
	start = rsk_seg_proc_start(pid);
	return start != 0 && start != h.start_time;
}

static const struct rsk_sweep rsk_seg_sweep_ops = {
	.prefix = RSK_STATSEG_PREFIX,
	.scan = RSK_SEG_SWEEP_SCAN,
	.remove = RSK_SEG_SWEEP_REMOVE,
	.stop = &rsk_seg_stopping,
	.candidate = rsk_seg_candidate,
	.stale = rsk_seg_is_stale,
};

int rsk_statseg_sweep(void)
{
	return rsk_sweep_dir(rsk_seg_dir(), &rsk_seg_sweep_ops, NULL);
}

/* The claimed file is the one the caller judged (same device and inode)? */
static int rsk_seg_same_file(int fd, const char *name, void *arg)
{
	const struct stat *judged = arg;
	struct stat st;

	(void)name;
	return fstat(fd, &st) == 0 && st.st_dev == judged->st_dev && st.st_ino == judged->st_ino;
}

int rsk_statseg_remove(pid_t pid, const struct stat *judged)
{
	static const struct rsk_sweep same = {.prefix = RSK_STATSEG_PREFIX,
					      .stale = rsk_seg_same_file};
	char name[64];
	int dfd = open(rsk_seg_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), n;

	if (dfd < 0)
		return 0;
	snprintf(name, sizeof(name), RSK_STATSEG_PREFIX "%d", (int)pid);
	n = rsk_sweep_reap(dfd, name, &same, (void *)judged);
	(void)rsk_sys_close(dfd);
	return n;
}

/*
 * Once per image (not in a forked child, which inherits the flag), as the segment is made: on
 * the application's thread, inside its first socket call, and not on the publisher thread. The
 * sweep opens a directory and files; from a thread of ours each open would take the
 * application's lowest free fd number for a moment, while its own calls run, so a
 * single-threaded program's next socket() or open() could get another number than the kernel
 * alone gives it (int_semantics lowest_fd caught one). Inside the call every fd it opened is
 * closed again before the call returns, as the segment file's is. The price is one bounded
 * directory read in that first call (at most SCAN entries read, REMOVE files removed).
 * (A thread with a private fd table, unshare(CLONE_FILES), was tried: ASan's leak checker and
 * TSan's fd tracking both break on it.)
 */
static void rsk_seg_sweep_once(void)
{
	int n;

	if (rsk_seg_swept)
		return;
	rsk_seg_swept = 1;
	n = rsk_statseg_sweep();
	if (n > 0)
		rsk_dbg("removed %d stale stats segment(s)", n);
}

/* The file, 0600 and ours alone. A leftover with our pid is a dead process's: replace it
 * (in a sticky directory only its owner, we, can). Returns the fd or -errno. */
static int rsk_seg_create_file(void)
{
	int fd, n, tries;

	if ((n = rsk_seg_name(rsk_seg_file, sizeof(rsk_seg_file))) < 0)
		return n;
	for (tries = 0; tries < 2; tries++) {
		fd = open(rsk_seg_file, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST || unlink(rsk_seg_file) < 0)
			break;
	}
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)rsk_statseg_size(RSK_STATSEG_CAPACITY)) < 0) {
		n = -errno;
		unlink(rsk_seg_file);
		(void)rsk_sys_close(fd);
		return n;
	}
	return fd;
}

static void rsk_seg_init_header(struct rsk_statseg_hdr *h)
{
	h->version = RSK_STATSEG_VERSION;
	h->hdr_size = sizeof(*h);
	h->rec_size = sizeof(struct rsk_statseg_sock);
	h->capacity = RSK_STATSEG_CAPACITY;
	h->pid = (int32_t)getpid();
	h->start_time = rsk_seg_proc_start(0);
	snprintf(h->program, sizeof(h->program), "%s", rsk_stats_program());
	__atomic_store_n(&h->magic, RSK_STATSEG_MAGIC, __ATOMIC_RELEASE); /* complete now */
}

static int rsk_seg_map(void)
{
	int fd = rsk_seg_create_file();
	void *p;

	if (fd < 0)
		return fd;
	rsk_seg_len = (size_t)rsk_statseg_size(RSK_STATSEG_CAPACITY);
	p = mmap(NULL, rsk_seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	(void)rsk_sys_close(fd); /* the mapping keeps the file; no fd of ours stays open */
	if (p == MAP_FAILED) {
		unlink(rsk_seg_file);
		return -ENOMEM;
	}
	rsk_seg = p;
	rsk_seg_owner = getpid();
	rsk_seg_init_header(rsk_seg);
	return 0;
}

static void rsk_seg_unmap(void)
{
	if (rsk_seg != NULL)
		munmap(rsk_seg, rsk_seg_len);
	rsk_seg = NULL;
}

int rsk_statseg_start(void)
{
	int rc = __atomic_load_n(&rsk_seg_state, __ATOMIC_ACQUIRE);

	if (rsk_likely(rc != 0))
		return rc > 0 ? 0 : rc;
	pthread_mutex_lock(&rsk_seg_lock);
	rc = rsk_seg_state;
	if (rc == 0) {
		rc = rsk_seg_map();
		if (rc == 0)
			rsk_seg_sweep_once();
		if (rc == 0 && (rc = rsk_thread_spawn(rsk_seg_main, NULL, NULL)) < 0) {
			unlink(rsk_seg_file);
			rsk_seg_unmap();
		}
		if (rc < 0)
			rsk_dbg("no live stats segment: %s", strerror(-rc));
		__atomic_store_n(&rsk_seg_state, rc == 0 ? 1 : rc, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&rsk_seg_lock);
	return rc > 0 ? 0 : rc;
}

void rsk_statseg_stop(void)
{
	pthread_mutex_lock(&rsk_seg_lock);
	if (rsk_seg != NULL && !rsk_seg_stopping && rsk_seg_owner == getpid()) {
		__atomic_store_n(&rsk_seg_stopping, 1, __ATOMIC_RELEASE);
		unlink(rsk_seg_file);
		/* Let the thread see the flag and end; the mapping stays (it may still read). */
		__atomic_add_fetch(&rsk_seg->readers, 1, __ATOMIC_RELEASE);
		(void)rsk_sys_futex(&rsk_seg->readers, FUTEX_WAKE, 1, NULL);
	}
	pthread_mutex_unlock(&rsk_seg_lock);
}

void rsk_statseg_atfork_child(void)
{
	if (__atomic_load_n(&rsk_seg_state, __ATOMIC_ACQUIRE) != 1)
		return;
	/* Another thread may have held the lock at fork; only this thread exists now. */
	pthread_mutex_init(&rsk_seg_lock, NULL);
	rsk_seg_unmap(); /* the parent's: never write or unlink it */
	rsk_seg_stopping = 0;
	__atomic_store_n(&rsk_seg_state, 0, __ATOMIC_RELEASE);
	(void)rsk_statseg_start(); /* the child holds tracked sockets: show it too */
}

__attribute__((destructor)) static void rsk_statseg_exit(void)
{
	rsk_statseg_stop();
}
