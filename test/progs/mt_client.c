/*
 * Role: multi-threaded echo client.
 *
 *   mt_client PORT conn [THREADS [MESSAGES]]    (defaults 8, 200)
 *   mt_client PORT shared [MESSAGES]            (default 2000)
 *
 * conn:   every thread opens its own connection and sends MESSAGES messages of 1 B..64 KiB
 *         (patterned by thread id and stream offset), reading each echo back through many
 *         partial reads and checking every byte; at the end shutdown(SHUT_WR) and EOF.
 * shared: two threads share one socket: one writes MESSAGES messages then shuts down its
 *         side, the other reads concurrently until EOF, checking every byte and the total.
 *
 * Prints "mt_client: MODE threads T connections C messages M bytes B: ok" and exits 0 only
 * when everything was verified.
 */
#include <pthread.h>

#include "progs.h"

const char *prog_name = "mt_client";

#define MAX_MSG 65536
#define MAX_THREADS 64

static int port;
static int nmsgs;

struct worker {
	pthread_t tid;
	int id;
	int fd;
	uint64_t bytes; /* bytes sent (conn) or received (shared reader) */
	uint64_t msgs;
	const char *err; /* NULL = verified */
	char detail[160];
};

/* Message sizes: mostly small, some up to 64 KiB, always including both extremes. */
static size_t msg_size(uint64_t *rng, int seq)
{
	uint64_t r = rng_next(rng);

	if (seq == 0)
		return 1;
	if (seq == 1)
		return MAX_MSG;
	switch (r & 3) {
	case 0:
		return 1 + (size_t)((r >> 8) % 64);
	case 1:
		return 1 + (size_t)((r >> 8) % 1500);
	default:
		return 1 + (size_t)((r >> 8) % MAX_MSG);
	}
}

static void *conn_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = 1000 + (uint64_t)w->id, seed = 100 + (uint64_t)w->id, off = 0;
	char *out = malloc(MAX_MSG), *in = malloc(MAX_MSG), c;
	size_t len, chunk;
	ssize_t r, bad;
	int s;

	if (out == NULL || in == NULL) {
		w->err = "out of memory";
		goto done;
	}
	w->fd = tcp_connect(port);
	if (w->fd < 0) {
		w->err = errno == ECONNREFUSED ? "connect failed: ECONNREFUSED"
			 : errno == ECONNRESET ? "connect failed: ECONNRESET"
			 : errno == ETIMEDOUT ? "connect failed: ETIMEDOUT"
			 : errno == EMFILE ? "connect failed: EMFILE"
					   : "connect failed (other errno)";
		goto done;
	}
	for (s = 0; s < nmsgs; s++) {
		len = msg_size(&rng, s);
		pat_fill(out, len, seed, off);
		if (write_all(w->fd, out, len) < 0) {
			w->err = "write failed";
			goto done;
		}
		chunk = 1 + (size_t)(rng_next(&rng) % (s % 4 == 0 ? 512 : MAX_MSG));
		memset(in, 0, len);
		r = read_full(w->fd, in, len, chunk);
		if (r != (ssize_t)len) {
			snprintf(w->detail, sizeof(w->detail), "message %d: %zd of %zu bytes (%s)",
				 s, r, len, r < 0 ? strerror(errno) : "EOF");
			w->err = "short echo";
			goto done;
		}
		bad = pat_check(in, len, seed, off);
		if (bad >= 0) {
			snprintf(w->detail, sizeof(w->detail), "message %d (%zu bytes): byte %zd",
				 s, len, bad);
			w->err = "echo differs";
			goto done;
		}
		off += len;
		w->bytes += len;
		w->msgs++;
	}
	if (shutdown(w->fd, SHUT_WR) < 0) {
		w->err = "shutdown failed";
		goto done;
	}
	r = read(w->fd, &c, 1);
	if (r != 0)
		w->err = "no EOF after shutdown";
done:
	if (w->fd >= 0)
		close(w->fd);
	free(out);
	free(in);
	return NULL;
}

static void *shared_writer(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = 7, off = 0;
	char *out = malloc(MAX_MSG);
	size_t len;
	int s;

	if (out == NULL) {
		w->err = "out of memory";
		return NULL;
	}
	for (s = 0; s < nmsgs; s++) {
		len = msg_size(&rng, s);
		pat_fill(out, len, 77, off);
		if (write_all(w->fd, out, len) < 0) {
			w->err = "write failed";
			break;
		}
		off += len;
		w->msgs++;
	}
	w->bytes = off;
	if (shutdown(w->fd, SHUT_WR) < 0 && w->err == NULL)
		w->err = "shutdown failed";
	free(out);
	return NULL;
}

static void *shared_reader(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = 8, off = 0;
	char *in = malloc(MAX_MSG);
	size_t chunk;
	ssize_t r, bad;

	if (in == NULL) {
		w->err = "out of memory";
		return NULL;
	}
	for (;;) {
		chunk = 1 + (size_t)(rng_next(&rng) % MAX_MSG);
		r = read(w->fd, in, chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(w->detail, sizeof(w->detail), "%s", strerror(errno));
			w->err = "read failed";
			break;
		}
		if (r == 0)
			break;
		bad = pat_check(in, (size_t)r, 77, off);
		if (bad >= 0) {
			snprintf(w->detail, sizeof(w->detail), "stream byte %llu",
				 (unsigned long long)(off + (uint64_t)bad));
			w->err = "echo differs";
			break;
		}
		off += (uint64_t)r;
		w->msgs++;
	}
	w->bytes = off;
	free(in);
	return NULL;
}

static int report(struct worker *w, int n)
{
	int i, bad = 0;

	for (i = 0; i < n; i++) {
		if (w[i].err != NULL) {
			prog_msg("thread %d: %s %s", w[i].id, w[i].err, w[i].detail);
			bad++;
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	static struct worker w[MAX_THREADS];
	const char *mode;
	int i, nthreads, bad;
	uint64_t bytes = 0, msgs = 0;

	alarm(CLIENT_TIME_LIMIT); /* a hang ends in SIGALRM, not in the test timeout */
	if (argc < 3)
		die("usage: mt_client PORT conn [THREADS [MESSAGES]] | PORT shared [MESSAGES]");
	port = port_arg(argv[1]);
	mode = argv[2];
	if (strcmp(mode, "conn") == 0) {
		nthreads = argc > 3 ? atoi(argv[3]) : 8;
		nmsgs = argc > 4 ? atoi(argv[4]) : 200;
		if (nthreads < 1 || nthreads > MAX_THREADS || nmsgs < 2)
			die("THREADS must be 1..%d, MESSAGES >= 2", MAX_THREADS);
		for (i = 0; i < nthreads; i++) {
			w[i].id = i;
			w[i].fd = -1;
			if (pthread_create(&w[i].tid, NULL, conn_worker, &w[i]) != 0)
				die("pthread_create failed");
		}
		for (i = 0; i < nthreads; i++) {
			pthread_join(w[i].tid, NULL);
			bytes += w[i].bytes;
			msgs += w[i].msgs;
		}
		bad = report(w, nthreads);
		if (bad == 0 && msgs != (uint64_t)nthreads * (uint64_t)nmsgs)
			die("only %llu of %d messages verified", (unsigned long long)msgs,
			    nthreads * nmsgs);
		if (bad)
			die("%d of %d threads failed", bad, nthreads);
		printf("mt_client: conn threads %d connections %d messages %llu bytes %llu: ok\n",
		       nthreads, nthreads, (unsigned long long)msgs, (unsigned long long)bytes);
	} else if (strcmp(mode, "shared") == 0) {
		nmsgs = argc > 3 ? atoi(argv[3]) : 2000;
		if (nmsgs < 2)
			die("MESSAGES must be >= 2");
		w[0].id = 0;
		w[1].id = 1;
		w[0].fd = w[1].fd = tcp_connect(port);
		if (w[0].fd < 0)
			die("connect: %s", strerror(errno));
		if (pthread_create(&w[1].tid, NULL, shared_reader, &w[1]) != 0 ||
		    pthread_create(&w[0].tid, NULL, shared_writer, &w[0]) != 0)
			die("pthread_create failed");
		pthread_join(w[0].tid, NULL);
		pthread_join(w[1].tid, NULL);
		close(w[0].fd);
		bad = report(w, 2);
		if (bad)
			die("%d of 2 threads failed", bad);
		if (w[1].bytes != w[0].bytes || w[0].msgs != (uint64_t)nmsgs)
			die("wrote %llu bytes in %llu messages, read back %llu before EOF",
			    (unsigned long long)w[0].bytes, (unsigned long long)w[0].msgs,
			    (unsigned long long)w[1].bytes);
		printf("mt_client: shared threads 2 connections 1 messages %llu bytes %llu: ok "
		       "(%llu reads)\n",
		       (unsigned long long)w[0].msgs, (unsigned long long)w[0].bytes,
		       (unsigned long long)w[1].msgs);
	} else {
		die("unknown mode \"%s\"", mode);
	}
	return 0;
}
