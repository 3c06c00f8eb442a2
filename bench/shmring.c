/*
 * Role: the floor under bench/shm_vs_kernel.sh's ping-pong rows: a raw shared-memory ping-pong
 * between two processes (each pinned by the caller with taskset), no library, no syscalls in
 * the loop. A 64-byte message is copied into a shared slot, then a sequence number in the next
 * cache line is stored with release order; the peer busy-polls that line (acquire), copies the
 * 64 bytes out and answers the same way. One round trip = one such exchange each way, so this is
 * the cost of moving two cache lines to the other core and back with nothing else in the way.
 *
 *   shmring pong FILE SECS        answers until ping says stop, or SECS have passed
 *   shmring ping FILE N SECS      10000 warm-up round trips, N timed as a block (average),
 *                                 then min(N, 200000) timed one by one (p50/p99); prints one
 *                                 line "rtt_avg_ns=... oneway_avg_ns=... rtt_p50_ns=..."
 * FILE must exist with at least 4096 bytes (zeroed) before either starts (the script makes it).
 * Both loops look at the clock every 4096 polls, so a missing peer ends them after SECS.
 * Exit status 0 on success, 1 on timeout or error (message on stderr).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define STOP UINT64_MAX
#define WARMUP 10000
#define MAX_SAMPLES 200000

/* One direction: the message line, then the line whose sequence number publishes it. */
struct slot {
	_Alignas(64) unsigned char msg[MSG];
	_Alignas(64) uint64_t seq;
	unsigned char pad[64 - sizeof(uint64_t)];
};
struct ring {
	struct slot req; /* ping -> pong */
	struct slot resp; /* pong -> ping */
};

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* wait_seq: spin until *seq is want (or STOP when stop_ok); 0, or -1 past the deadline. */
static int wait_seq(const uint64_t *seq, uint64_t want, int stop_ok, uint64_t deadline)
{
	unsigned n = 0;

	for (;;) {
		uint64_t v = __atomic_load_n(seq, __ATOMIC_ACQUIRE);

		if (v == want || (stop_ok && v == STOP))
			return 0;
		relax();
		if ((++n & 4095) == 0 && now_ns() > deadline)
			return -1;
	}
}

static void post(struct slot *s, const unsigned char *msg, uint64_t seq)
{
	memcpy(s->msg, msg, MSG);
	__atomic_store_n(&s->seq, seq, __ATOMIC_RELEASE);
}

static struct ring *map_ring(const char *path)
{
	int fd = open(path, O_RDWR);
	void *p;

	if (fd < 0) {
		perror(path);
		return NULL;
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		perror("mmap");
		return NULL;
	}
	return p;
}

static int pong(struct ring *r, uint64_t deadline)
{
	unsigned char buf[MSG];
	uint64_t want;

	for (want = 1;; want++) {
		if (wait_seq(&r->req.seq, want, 1, deadline)) {
			fprintf(stderr, "shmring pong: no request %llu before the deadline\n",
				(unsigned long long)want);
			return 1;
		}
		if (__atomic_load_n(&r->req.seq, __ATOMIC_ACQUIRE) == STOP)
			return 0;
		memcpy(buf, r->req.msg, MSG);
		post(&r->resp, buf, want);
	}
}

/* round_trip: send seq, wait for its answer; 0 or -1 (deadline). */
static int round_trip(struct ring *r, unsigned char *buf, uint64_t seq, uint64_t deadline)
{
	post(&r->req, buf, seq);
	if (wait_seq(&r->resp.seq, seq, 0, deadline))
		return -1;
	memcpy(buf, r->resp.msg, MSG);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int ping(struct ring *r, uint64_t n, uint64_t deadline)
{
	unsigned char buf[MSG];
	uint64_t seq = 0, i, t0, t1, ns = n < MAX_SAMPLES ? n : MAX_SAMPLES;
	uint64_t *lat = malloc(ns * sizeof(*lat));
	int rc = 1;

	if (!lat)
		return 1;
	memset(buf, 0xa5, sizeof(buf));
	for (i = 0; i < WARMUP; i++)
		if (round_trip(r, buf, ++seq, deadline))
			goto out;
	t0 = now_ns();
	for (i = 0; i < n; i++)
		if (round_trip(r, buf, ++seq, deadline))
			goto out;
	t1 = now_ns();
	for (i = 0; i < ns; i++) {
		uint64_t a = now_ns();

		if (round_trip(r, buf, ++seq, deadline))
			goto out;
		lat[i] = now_ns() - a;
	}
	qsort(lat, ns, sizeof(*lat), cmp_u64);
	printf("rtt_avg_ns=%.1f oneway_avg_ns=%.1f rtt_p50_ns=%llu rtt_p99_ns=%llu n=%llu samples=%llu\n",
	       (double)(t1 - t0) / (double)n, (double)(t1 - t0) / (double)n / 2,
	       (unsigned long long)lat[ns / 2], (unsigned long long)lat[ns * 99 / 100],
	       (unsigned long long)n, (unsigned long long)ns);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "shmring ping: no answer to %llu before the deadline\n",
			(unsigned long long)seq);
	__atomic_store_n(&r->req.seq, STOP, __ATOMIC_RELEASE);
	free(lat);
	return rc;
}

int main(int argc, char **argv)
{
	struct ring *r;
	double secs;

	if (argc == 4 && strcmp(argv[1], "pong") == 0) {
		secs = atof(argv[3]);
	} else if (argc == 5 && strcmp(argv[1], "ping") == 0 && atoll(argv[3]) > 0) {
		secs = atof(argv[4]);
	} else {
		fprintf(stderr, "usage: shmring pong FILE SECS | shmring ping FILE N SECS\n");
		return 2;
	}
	if (secs <= 0)
		secs = 10;
	r = map_ring(argv[2]);
	if (!r)
		return 1;
	uint64_t deadline = now_ns() + (uint64_t)(secs * 1e9);

	if (argv[1][1] == 'o')
		return pong(r, deadline);
	return ping(r, (uint64_t)atoll(argv[3]), deadline);
}
