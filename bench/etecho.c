/*
 * etecho: a request/response pair whose server reads until EAGAIN (epoll edge-triggered, as
 * memcached or nginx), for counting what the library's credit settling costs per request
 * (bench/settle_vm_guest.sh; docs/design.md "The stream protocol"). Not a test by itself.
 *
 *   etecho server ADDR PORT SECS        serve one client, at most SECS seconds; edge-
 *                                       triggered, or level-triggered with ETECHO_LT=1
 *                                       (still reading until EAGAIN, as memcached); with
 *                                       ETECHO_NOLISTEN=1 a new epoll set with only the
 *                                       client replaces the listener's once it is accepted
 *                                       (all the library's: its waits can stay in user space)
 *   etecho client ADDR PORT N WARM SECS WARM round trips of 64 bytes, a pause while the
 *                                       file /tmp/etecho.go is awaited (at most 10 s: the
 *                                       script attaches its counters), then N more
 *
 * The server snapshots, after WARM requests and when the client closes, its threads' context
 * switches (/proc/self/task/TID/status) and, when the library is preloaded, its counters
 * (rdmasock_get_stats: credit_messages, messages_sent), and prints the differences per
 * request of the measured part: one "ETECHO-SERVER" line, one "ETECHO-THREAD" per thread.
 * The client prints "ETECHO-CLIENT rounds=N". Every loop is bounded in time.
 *   cc -O2 -o build/etecho bench/etecho.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../include/rdmasock.h"

#define MSG 64
#define MAXT 16

struct snap {
	int n;
	int tid[MAXT];
	long vol[MAXT], invol[MAXT];
	uint64_t credit_msgs, msgs_sent;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void take(struct snap *s)
{
	int (*get)(struct rdmasock_stats *, size_t) =
		(int (*)(struct rdmasock_stats *, size_t))dlsym(RTLD_DEFAULT, "rdmasock_get_stats");
	struct rdmasock_stats st;
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");
	char path[300], line[128];
	FILE *f;

	memset(s, 0, sizeof(*s));
	while (dir != NULL && (d = readdir(dir)) != NULL && s->n < MAXT) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", d->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		s->tid[s->n] = atoi(d->d_name);
		while (fgets(line, sizeof(line), f) != NULL) {
			sscanf(line, "voluntary_ctxt_switches: %ld", &s->vol[s->n]);
			sscanf(line, "nonvoluntary_ctxt_switches: %ld", &s->invol[s->n]);
		}
		fclose(f);
		s->n++;
	}
	if (dir != NULL)
		closedir(dir);
	memset(&st, 0, sizeof(st));
	if (get != NULL && get(&st, sizeof(st)) == 0) {
		s->credit_msgs = st.credit_messages;
		s->msgs_sent = st.messages_sent[RDMASOCK_TRANSPORT_VERBS];
	}
}

static void report(const struct snap *a, const struct snap *b, long reqs)
{
	int i, j;

	printf("ETECHO-SERVER requests=%ld credit_messages=%.3f messages_sent=%.3f (per request)\n",
	       reqs, (double)(b->credit_msgs - a->credit_msgs) / (reqs ? reqs : 1),
	       (double)(b->msgs_sent - a->msgs_sent) / (reqs ? reqs : 1));
	for (i = 0; i < b->n; i++)
		for (j = 0; j < a->n; j++)
			if (a->tid[j] == b->tid[i])
				printf("ETECHO-THREAD tid=%d%s voluntary=%.3f involuntary=%.3f "
				       "(per request)\n",
				       b->tid[i], b->tid[i] == getpid() ? " (main)" : "",
				       (double)(b->vol[i] - a->vol[j]) / (reqs ? reqs : 1),
				       (double)(b->invol[i] - a->invol[j]) / (reqs ? reqs : 1));
	fflush(stdout);
}

static int addr_of(const char *ip, const char *port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(port));
	return inet_pton(AF_INET, ip, &sa->sin_addr) == 1 ? 0 : -1;
}

/* Read until EAGAIN, then answer (echo) all of it, as memcached or nginx: the reads end with
 * EAGAIN before the answer goes. -1 at EOF or error, else the whole messages served. */
static long serve(int fd, size_t *have)
{
	static char buf[65536];
	size_t len = 0, off;
	ssize_t n, w;
	long reqs;

	for (;;) {
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return -1;
		len += (size_t)n;
		if (len == sizeof(buf))
			break; /* full: answer, the edge comes again (the rest is unread) */
	}
	for (off = 0; off < len; off += (size_t)w) {
		w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EAGAIN)
			w = 0; /* 64-byte answers: only a short stall */
		else if (w < 0)
			return -1;
	}
	*have += len;
	reqs = (long)(*have / MSG);
	*have %= MSG;
	return reqs;
}

/* A new epoll set holding only @fd (the old one, with the listener, is closed): a set the
 * library mirrors from its creation with nothing of the kernel's in it. */
static int fresh_set(int old, int fd, uint32_t et)
{
	struct epoll_event ev = {.events = EPOLLIN | et, .data.fd = fd};
	int ep = epoll_create1(0);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		return old;
	close(old);
	return ep;
}

static int server(char **av)
{
	struct sockaddr_in sa;
	struct epoll_event ev, got[8];
	struct snap a, b;
	double end = now() + atoi(av[2]);
	long reqs = 0, warm = -1, r;
	size_t have = 0;
	int one = 1, ls, ep, fd = -1, n, i, on = 1;
	uint32_t et = getenv("ETECHO_LT") != NULL && atoi(getenv("ETECHO_LT")) ? 0 : EPOLLET;

	if (addr_of(av[0], av[1], &sa) < 0)
		return 2;
	ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 4) < 0) {
		perror("etecho server");
		return 2;
	}
	ep = epoll_create1(0);
	ev = (struct epoll_event){.events = EPOLLIN, .data.fd = ls};
	epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
	while (now() < end) {
		n = epoll_wait(ep, got, 8, 200);
		for (i = 0; i < n; i++) {
			if (got[i].data.fd == ls) {
				fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
				if (fd < 0)
					continue;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
				ev = (struct epoll_event){.events = EPOLLIN | et, .data.fd = fd};
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				if (getenv("ETECHO_NOLISTEN") != NULL && atoi(getenv("ETECHO_NOLISTEN")))
					ep = fresh_set(ep, fd, et);
				continue;
			}
			r = serve(got[i].data.fd, &have);
			if (r < 0) {
				take(&b);
				if (warm >= 0)
					report(&a, &b, reqs - warm);
				close(got[i].data.fd);
				return 0;
			}
			reqs += r;
			if (warm < 0 && reqs >= 1) { /* the client's warm-up is done when it pauses */
				warm = -2;
			}
		}
		if (n == 0 && warm == -2) { /* the client paused: snapshot now */
			take(&a);
			warm = reqs;
		}
	}
	fprintf(stderr, "etecho server: time ran out\n");
	return 1;
}

static int roundtrip(int fd)
{
	char buf[MSG];
	size_t got = 0;
	ssize_t n;

	memset(buf, 'x', sizeof(buf));
	if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
		return -1;
	while (got < sizeof(buf)) {
		n = read(fd, buf, sizeof(buf) - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static int client(char **av)
{
	struct sockaddr_in sa;
	long want = atol(av[2]), warm = atol(av[3]), done = 0;
	double end = now() + atoi(av[4]);
	struct stat stt;
	int fd, on = 1, i;

	if (addr_of(av[0], av[1], &sa) < 0)
		return 2;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	for (i = 0; i < 100 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0; i++) {
		close(fd);
		usleep(100000);
		fd = socket(AF_INET, SOCK_STREAM, 0);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	for (i = 0; i < warm; i++)
		if (roundtrip(fd) < 0)
			return 1;
	printf("ETECHO-CLIENT warm\n");
	fflush(stdout);
	usleep(500000); /* the server snapshots when it sees no request for 200 ms */
	for (i = 0; i < 100 && stat("/tmp/etecho.go", &stt) < 0; i++)
		usleep(100000);
	while (done < want && now() < end && roundtrip(fd) == 0)
		done++;
	printf("ETECHO-CLIENT rounds=%ld\n", done);
	close(fd);
	return done == want ? 0 : 1;
}

int main(int ac, char **av)
{
	if (ac == 5 && strcmp(av[1], "server") == 0)
		return server(av + 2);
	if (ac == 7 && strcmp(av[1], "client") == 0)
		return client(av + 2);
	fprintf(stderr, "usage: etecho server ADDR PORT SECS | client ADDR PORT N WARM SECS\n");
	return 2;
}
