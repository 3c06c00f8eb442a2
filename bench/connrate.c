/*
 * connrate: short-connection rate (connect + 64-byte request + 64-byte response + close),
 * for comparing kernel TCP with the library (a measurement aid, bounded by counts and time).
 *
 *   connrate server PORT SECONDS
 *       single-threaded epoll server on 127.0.0.1:PORT (like redis/nginx): accept4 until
 *       EAGAIN, read the 64-byte request, write 64 bytes back, close on EOF. Exits after
 *       SECONDS or on SIGTERM/SIGINT; prints accepted/failed counts.
 *   connrate client PORT CONC TOTAL SECONDS
 *       single-threaded epoll client keeping CONC connections in flight (non-blocking
 *       connect, write 64, read 64, close, next) until TOTAL connections completed or SECONDS
 *       passed. Prints connections/s, per-connection latency p50/p99 and errors by step.
 *   connrate seq PORT TOTAL SECONDS
 *       one blocking connection at a time; also times each call the application makes
 *       (socket, connect, write, read, close) and prints medians, in microseconds.
 * Env RSK_CONNRATE_BEARER (no library; bench/bearer.sh) measures what a same-host connection
 * carried by an AF_UNIX stream socket instead of loopback TCP would cost the kernel:
 *   unix   both ends plain abstract unix sockets ("@connrate/l/PORT/0"): the kernel's floor;
 *   setup  what a preload would have to do on top: the server listens on TCP and on the
 *          unix name, both in its epoll set under the listener's key, and accepts from the
 *          unix one (with the peer's name, which would carry its TCP address) while a bell in
 *          shared memory says something is queued there, from TCP otherwise; the client makes
 *          its TCP socket as the application does, then a unix socket, binds it to a name of
 *          its own (its "address"), rings the bell, connects it and dup3()s it onto the TCP one.
 *   nested as setup, but the server's epoll set holds one inner epoll fd that holds the TCP
 *          listener and the unix one (what a preload could dup3() onto the listener's number,
 *          so that every wait on it, seen or not -- poll, select, nested epoll, io_uring --
 *          wakes for either); the accept is setup's.
 * Every number is printed on one line "key=value ..." for scripts;
 * seq is TCP only. Env RSK_TEST_ADDR (IPv4
 * dotted, as test/progs) replaces 127.0.0.1 on both ends: the Soft-RoCE guest's second rxe
 * device, so that the connections cross the veth pair (bench/connrate_vm_guest.sh).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MSG 64

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s; stop = 1; }

static struct sockaddr_in addr_of(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	const char *s = getenv("RSK_TEST_ADDR");

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s != NULL && *s != '\0' && inet_pton(AF_INET, s, &a.sin_addr) != 1) {
		fprintf(stderr, "connrate: bad RSK_TEST_ADDR \"%s\" (want IPv4 dotted)\n", s);
		exit(2);
	}
	return a;
}

enum { B_TCP, B_UNIX, B_SETUP, B_NESTED };
static int bearer = B_TCP;
static unsigned long *bell;

static void bearer_from_env(void)
{
	const char *s = getenv("RSK_CONNRATE_BEARER");

	if (s == NULL || *s == '\0' || !strcmp(s, "tcp"))
		return;
	if (!strcmp(s, "unix"))
		bearer = B_UNIX;
	else if (!strcmp(s, "setup"))
		bearer = B_SETUP;
	else if (!strcmp(s, "nested"))
		bearer = B_NESTED;
	else {
		fprintf(stderr, "connrate: RSK_CONNRATE_BEARER must be tcp, unix, setup or nested\n");
		exit(2);
	}
}

/* an abstract name, its length as bind/connect take it */
static socklen_t unix_name(struct sockaddr_un *u, const char *kind, int port, long n)
{
	int len;

	memset(u, 0, sizeof(*u));
	u->sun_family = AF_UNIX;
	len = snprintf(u->sun_path + 1, sizeof(u->sun_path) - 1, "connrate/%s/%d/%ld", kind, port, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

static int unix_listener(int port)
{
	struct sockaddr_un u;
	socklen_t l = unix_name(&u, "l", port, 0);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (fd < 0 || bind(fd, (void *)&u, l) < 0 || listen(fd, 4096) < 0) {
		perror("connrate server: unix bind/listen");
		exit(1);
	}
	return fd;
}

/* The bell: a count in shared memory that clients ring before their unix connect, so that an
 * accept looks into the rendezvous only when something is queued there (as the library's). */
static void bell_name(char *name, size_t len, int port)
{
	snprintf(name, len, "/connrate-bell-%d", port);
}

static unsigned long *bell_map(int port)
{
	char name[64];
	int fd;
	void *p;

	bell_name(name, sizeof(name), port);
	fd = shm_open(name, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, 4096) < 0)
		return NULL;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* the client's socket() for the bearer: a unix socket where a TCP one would be */
static int bearer_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (bearer == B_UNIX) {
		if (fd >= 0)
			close(fd);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	}
	return fd;
}

/* the client's connect for the bearer; -1 with errno as connect's */
static int bearer_connect(int fd, int port)
{
	static long seq_no;
	struct sockaddr_un u;
	socklen_t l;
	int ufd;

	if (bearer == B_UNIX) {
		l = unix_name(&u, "l", port, 0);
		return connect(fd, (void *)&u, l);
	}
	ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ufd < 0)
		return -1;
	l = unix_name(&u, "c", port, (long)getpid() * 100000 + seq_no++ % 100000);
	if (bind(ufd, (void *)&u, l) < 0)
		goto fail;
	l = unix_name(&u, "l", port, 0);
	/* rung before the connect: an accept woken by it must find the bell moved, or the
	 * listener would stay readable with nothing it looks at (a server that spins) */
	if (bell == NULL)
		bell = bell_map(port);
	if (bell != NULL)
		__atomic_add_fetch(bell, 1, __ATOMIC_RELEASE);
	if (connect(ufd, (void *)&u, l) < 0 || dup3(ufd, fd, 0) < 0)
		goto fail;
	close(ufd);
	return 0;
fail:
	close(ufd);
	return -1;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[(int)(p * (n - 1))];
}

/* ---- server ---- */

struct sconn {
	int fd, got;
};

static int server(int port, int seconds)
{
	struct sockaddr_in a = addr_of(port);
	struct epoll_event ev, evs[256];
	double end = now_us() + seconds * 1e6;
	long accepted = 0, aerr = 0, rerr = 0, werr = 0;
	int lfd, ufd = -1, ep, one = 1, n, i;
	unsigned long taken = 0;
	char buf[MSG * 4];

	if (bearer == B_UNIX) {
		lfd = unix_listener(port);
	} else {
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (void *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
			perror("connrate server: bind/listen");
			return 1;
		}
	}
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	if (bearer == B_SETUP || bearer == B_NESTED)
		ufd = unix_listener(port); /* the rendezvous, under the listener's key */
	if (bearer == B_NESTED) { /* one epoll fd holding both, in the listener's place */
		int iep = epoll_create1(0);

		epoll_ctl(iep, EPOLL_CTL_ADD, lfd, &ev);
		epoll_ctl(iep, EPOLL_CTL_ADD, ufd, &ev);
		epoll_ctl(ep, EPOLL_CTL_ADD, iep, &ev);
	} else {
		epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
		if (ufd >= 0)
			epoll_ctl(ep, EPOLL_CTL_ADD, ufd, &ev);
	}
	if (ufd >= 0) {
		bell = bell_map(port);
		if (bell != NULL)
			*bell = 0;
	}
	printf("server: listening port=%d\n", port);
	fflush(stdout);
	while (!stop && now_us() < end) {
		n = epoll_wait(ep, evs, 256, 100);
		for (i = 0; i < n; i++) {
			struct sconn *c = evs[i].data.ptr;

			if (c == NULL) {
				for (;;) {
					struct sockaddr_un peer;
					socklen_t pl = sizeof(peer);
					int fd = -1;

					/* the preload's accept: the rendezvous first, then TCP */
					if (ufd >= 0 && (bell == NULL || taken != __atomic_load_n(bell, __ATOMIC_ACQUIRE))) {
						fd = accept4(ufd, (void *)&peer, &pl, SOCK_NONBLOCK);
						taken += fd >= 0;
					}
					if (fd < 0)
						fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);

					if (fd < 0) {
						if (errno != EAGAIN)
							aerr++;
						break;
					}
					accepted++;
					c = calloc(1, sizeof(*c));
					c->fd = fd;
					ev.events = EPOLLIN;
					ev.data.ptr = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				}
				continue;
			}
			ssize_t r = read(c->fd, buf, sizeof(buf));

			if (r > 0) {
				c->got += (int)r;
				if (c->got >= MSG && c->got - (int)r < MSG &&
				    write(c->fd, buf, MSG) != MSG)
					werr++;
				continue;
			}
			if (r < 0 && errno == EAGAIN)
				continue;
			if (r < 0)
				rerr++;
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
			close(c->fd);
			free(c);
		}
	}
	if (ufd >= 0) {
		char name[64];

		bell_name(name, sizeof(name), port);
		shm_unlink(name);
	}
	printf("server: accepted=%ld accept_errors=%ld read_errors=%ld write_errors=%ld\n", accepted,
	       aerr, rerr, werr);
	return 0;
}

/* ---- event-loop client ---- */

enum { C_CONNECTING, C_READING };

struct cconn {
	int fd, state, got;
	double t0;
};

static long errs[4][140]; /* step (0 connect, 1 write, 2 read, 3 eof) x errno */

static int client_start(int ep, struct cconn *c, struct sockaddr_in *a)
{
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};

	c->t0 = now_us();
	c->got = 0;
	c->fd = bearer_socket();
	if (c->fd < 0)
		return -1;
	if ((bearer == B_TCP ? connect(c->fd, (void *)a, sizeof(*a))
			     : bearer_connect(c->fd, ntohs(a->sin_port))) < 0 &&
	    errno != EINPROGRESS) {
		errs[0][errno < 140 ? errno : 0]++;
		close(c->fd);
		return -1;
	}
	c->state = C_CONNECTING;
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
	return 0;
}

static void print_errs(void)
{
	static const char *step[] = {"connect", "write", "read", "early_eof"};
	int s, e;

	for (s = 0; s < 4; s++)
		for (e = 0; e < 140; e++)
			if (errs[s][e])
				printf("error: step=%s errno=%d (%s) count=%ld\n", step[s], e,
				       s == 3 ? "EOF before the response" : strerror(e), errs[s][e]);
}

static int client(int port, int conc, long total, int seconds)
{
	struct sockaddr_in a = addr_of(port);
	struct cconn *cs = calloc((size_t)conc, sizeof(*cs));
	double *lat = calloc((size_t)total + 1, sizeof(double));
	double start = now_us(), end = start + seconds * 1e6, el;
	long started = 0, done = 0, failed = 0;
	struct epoll_event evs[256];
	char req[MSG], buf[MSG * 2];
	int ep = epoll_create1(0), n, i, inflight = 0;

	memset(req, 'q', sizeof(req));
	for (i = 0; i < conc && started < total; i++, started++)
		if (client_start(ep, &cs[i], &a) == 0)
			inflight++;
		else
			failed++;
	while (inflight > 0 && !stop) {
		if (now_us() > end)
			break;
		n = epoll_wait(ep, evs, 256, 100);
		for (i = 0; i < n; i++) {
			struct cconn *c = evs[i].data.ptr;
			int ok = 0, fin = 0;

			if (c->state == C_CONNECTING) {
				int err = 0;
				socklen_t l = sizeof(err);

				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
				if (err) {
					errs[0][err < 140 ? err : 0]++;
					fin = 1;
				} else if (write(c->fd, req, MSG) != MSG) {
					errs[1][errno < 140 ? errno : 0]++;
					fin = 1;
				} else {
					struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

					c->state = C_READING;
					epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				}
			} else {
				ssize_t r = read(c->fd, buf, sizeof(buf));

				if (r > 0) {
					c->got += (int)r;
					if (c->got >= MSG)
						ok = fin = 1;
				} else if (r == 0) {
					errs[3][0]++;
					fin = 1;
				} else if (errno != EAGAIN) {
					errs[2][errno < 140 ? errno : 0]++;
					fin = 1;
				}
			}
			if (!fin)
				continue;
			close(c->fd); /* also takes it out of the epoll set */
			inflight--;
			if (ok)
				lat[done++] = now_us() - c->t0;
			else
				failed++;
			if (started < total && now_us() < end) {
				started++;
				if (client_start(ep, c, &a) == 0)
					inflight++;
				else
					failed++;
			}
		}
	}
	el = (now_us() - start) / 1e6;
	printf("client: conc=%d done=%ld failed=%ld seconds=%.3f conn_per_s=%.0f lat_p50_us=%.1f "
	       "lat_p99_us=%.1f%s\n",
	       conc, done, failed, el, done / el, pct(lat, (int)done, 0.5), pct(lat, (int)done, 0.99),
	       inflight > 0 ? " (stopped by time)" : "");
	print_errs();
	return failed > 0;
}

/* ---- sequential blocking client, per call timing ---- */

static int seq(int port, long total, int seconds)
{
	struct sockaddr_in a = addr_of(port);
	double *t[6], start = now_us(), end = start + seconds * 1e6, t0, t1, el;
	static const char *name[] = {"socket", "connect", "write", "read", "close", "total"};
	char req[MSG], buf[MSG];
	long n = 0, failed = 0;
	int k, fd;

	memset(req, 'q', sizeof(req));
	for (k = 0; k < 6; k++)
		t[k] = calloc((size_t)total + 1, sizeof(double));
	while (n < total && now_us() < end && !stop) {
		double s = now_us();

		t0 = s;
		fd = socket(AF_INET, SOCK_STREAM, 0);
		t1 = now_us(); t[0][n] = t1 - t0; t0 = t1;
		if (fd < 0 || connect(fd, (void *)&a, sizeof(a)) < 0) {
			errs[0][errno < 140 ? errno : 0]++;
			failed++;
			if (fd >= 0)
				close(fd);
			continue;
		}
		t1 = now_us(); t[1][n] = t1 - t0; t0 = t1;
		if (write(fd, req, MSG) != MSG) {
			errs[1][errno < 140 ? errno : 0]++;
			failed++;
			close(fd);
			continue;
		}
		t1 = now_us(); t[2][n] = t1 - t0; t0 = t1;
		int got = 0;
		while (got < MSG) {
			ssize_t r = read(fd, buf, sizeof(buf));

			if (r <= 0) {
				errs[r == 0 ? 3 : 2][r == 0 ? 0 : (errno < 140 ? errno : 0)]++;
				break;
			}
			got += (int)r;
		}
		t1 = now_us(); t[3][n] = t1 - t0; t0 = t1;
		close(fd);
		t1 = now_us(); t[4][n] = t1 - t0;
		t[5][n] = t1 - s;
		if (got < MSG) {
			failed++;
			continue;
		}
		n++;
	}
	el = (now_us() - start) / 1e6;
	printf("seq: done=%ld failed=%ld seconds=%.3f conn_per_s=%.0f", n, failed, el, n / el);
	for (k = 0; k < 6; k++)
		printf(" %s_p50_us=%.1f", name[k], pct(t[k], (int)n, 0.5));
	printf("\n");
	print_errs();
	return failed > 0;
}

int main(int argc, char **argv)
{
	signal(SIGTERM, on_sig);
	signal(SIGINT, on_sig);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	bearer_from_env();
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), atoi(argv[3]));
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client(atoi(argv[2]), atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
	if (argc == 5 && !strcmp(argv[1], "seq"))
		return seq(atoi(argv[2]), atol(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: connrate server PORT SECONDS | client PORT CONC TOTAL SECONDS | "
			"seq PORT TOTAL SECONDS\n");
	return 2;
}
