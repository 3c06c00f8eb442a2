/*
 * Role: a TCP-first connection moving onto the transport while the application uses it
 * (core/calls/upgrade.c). Run preloaded with RDMASOCK_TCP_FIRST=on RDMASOCK_UPGRADE_MS=0:
 * every connection starts on TCP and moves at its first call, so each check's traffic
 * crosses the move.
 *
 *   move [CHECK...]        (default: all; env SEMANTICS_EXPECT=shm|kernel as in checks.h)
 *
 * Each check runs in a forked child (checks.h) with both ends in that one process (a
 * listener shared by a fork would not move its connections). Every byte is checked against
 * a position-addressed pattern. With SEMANTICS_EXPECT=shm both fds must end on shm and the
 * child's own counters must show bytes on kernel TCP and on shm: the move happened mid-use.
 */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>

#include "checks.h"
#include "rdmasock.h"

const char *prog_name = "move";

#define SEED 0x6d6f7665u

/* Bytes counted on @t (sent + received) in this process, or -1 without the library. */
static long long bytes_on(int t)
{
	static int (*fn)(struct rdmasock_stats *, size_t);
	struct rdmasock_stats st;

	if (fn == NULL)
		fn = (int (*)(struct rdmasock_stats *, size_t))dlsym(RTLD_DEFAULT,
								      "rdmasock_get_stats");
	if (fn == NULL || fn(&st, sizeof(st)) != 0)
		return -1;
	return (long long)(st.bytes_sent[t] + st.bytes_received[t]);
}

/* The end of a moving check: both ends where expected, and the bytes on both sides of it. */
static int moved(int c, int s)
{
	TRY(on_transport(c, "client end"));
	TRY(on_transport(s, "server end"));
	if (expect_tr == 1) {
		REQ(bytes_on(0) > 0 && bytes_on(1) > 0,
		    "no move mid-use: %lld bytes on TCP, %lld on shm", bytes_on(0), bytes_on(1));
	}
	return 0;
}

/* Both ends already where expected? (Keep the traffic going until they are: the listener
 * announces an offer from its own thread, a little later.) */
static int both_moved(int c, int s)
{
	return expect_tr < 0 || (transport_of(c) == expect_tr && transport_of(s) == expect_tr);
}

static int pair(int *c, int *s)
{
	*c = tcp_connect(lport);
	REQ(*c >= 0, "connect: %s", strerror(errno));
	*s = accept(lfd, NULL, NULL);
	REQ(*s >= 0, "accept: %s", strerror(errno));
	return 0;
}

/* Send @n pattern bytes from offset @off in pieces of @piece. */
static int send_pat(int fd, uint64_t seed, uint64_t off, size_t n, size_t piece)
{
	char buf[65536];
	size_t k;

	while (n > 0) {
		k = n < piece ? n : piece;
		k = k < sizeof(buf) ? k : sizeof(buf);
		pat_fill(buf, k, seed, off);
		TRY(send_all(fd, buf, k));
		off += k;
		n -= k;
	}
	return 0;
}

/* Receive exactly @n pattern bytes from offset @off, checking every one. */
static int recv_pat(int fd, uint64_t seed, uint64_t off, size_t n)
{
	char buf[65536];
	ssize_t r, bad;
	size_t k;

	while (n > 0) {
		k = n < sizeof(buf) ? n : sizeof(buf);
		r = read(fd, buf, k);
		REQ(r > 0, "read at offset %llu: %s", (unsigned long long)off,
		    r < 0 ? strerror(errno) : "EOF");
		bad = pat_check(buf, (size_t)r, seed, off);
		REQ(bad < 0, "wrong byte at offset %llu", (unsigned long long)(off + (uint64_t)bad));
		off += (uint64_t)r;
		n -= (size_t)r;
	}
	return 0;
}

static int expect_eof(int fd)
{
	char b;
	ssize_t r = read(fd, &b, 1);

	REQ(r == 0, "expected EOF, read returned %zd (%s)", r, r < 0 ? strerror(errno) : "data");
	return 0;
}

/* Request/response turns: the move happens between two of them. */
static int check_pingpong(void)
{
	double end = now_sec() + 3;
	int c, s, i, more = 200;

	TRY(pair(&c, &s));
	for (i = 0; more > 0; i++) {
		if (both_moved(c, s) || now_sec() > end)
			more--;
		TRY(send_pat(c, SEED, (uint64_t)i * 8, 8, 8));
		TRY(recv_pat(s, SEED, (uint64_t)i * 8, 8));
		TRY(send_pat(s, SEED + 1, (uint64_t)i * 16, 16, 16));
		TRY(recv_pat(c, SEED + 1, (uint64_t)i * 16, 16));
	}
	TRY(moved(c, s));
	close(c);
	TRY(expect_eof(s));
	close(s);
	return 0;
}

struct job {
	int fd;
	size_t n;
	int rc;
	char why[sizeof(why)];
	size_t got; /* reader_to_eof: the pattern bytes read before EOF */
};

static void *recv_waitall(void *arg)
{
	struct job *j = arg;
	char *buf = malloc(j->n);
	ssize_t r;

	r = buf != NULL ? recv(j->fd, buf, j->n, MSG_WAITALL) : -1;
	if (r != (ssize_t)j->n)
		snprintf(j->why, sizeof(j->why), "MSG_WAITALL returned %zd of %zu (%s)", r, j->n,
			 r < 0 ? strerror(errno) : "short");
	else if (pat_check(buf, j->n, SEED, 1) >= 0)
		snprintf(j->why, sizeof(j->why), "MSG_WAITALL data wrong at %zd",
			 pat_check(buf, j->n, SEED, 1));
	j->rc = j->why[0] ? -1 : 0;
	free(buf);
	return NULL;
}

/* Make calls on the server end @s until it has moved (the listener announces the client's
 * offer from its own thread, and on a busy machine that can take a while): at most 5 s. */
static int server_moves(int s)
{
	double end = now_sec() + 5;
	char b;

	while (expect_tr >= 0 && transport_of(s) != expect_tr && now_sec() < end) {
		REQ(recv(s, &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN,
		    "server end: nothing to read expected: %s", strerror(errno));
		usleep(1000);
	}
	return 0;
}

/* One MSG_WAITALL read whose bytes come partly over TCP and partly over the stream. */
static int check_waitall(void)
{
	struct job j = {.n = 200000};
	pthread_t t;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_pat(c, SEED, 0, 1, 1)); /* the client's first call: it offers */
	TRY(recv_pat(s, SEED, 0, 1));
	j.fd = c;
	REQ(pthread_create(&t, NULL, recv_waitall, &j) == 0, "pthread_create");
	TRY(send_pat(s, SEED, 1, 1000, 1000)); /* (the server's first call: it may move here) */
	TRY(server_moves(s));
	usleep(20000); /* the reader waits in the kernel meanwhile */
	TRY(send_pat(s, SEED, 1001, j.n - 1000, 7000));
	pthread_join(t, NULL);
	REQ(j.rc == 0, "%s", j.why);
	TRY(moved(c, s));
	close(c);
	close(s);
	return 0;
}

/* The client ends its writing side right after its offer: the server reads all, then EOF,
 * and still answers; the client reads the answer, then EOF. */
static int check_halfclose(void)
{
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_pat(c, SEED, 0, 3000, 1000));
	REQ(shutdown(c, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
	TRY(recv_pat(s, SEED, 0, 3000));
	TRY(expect_eof(s));
	TRY(send_pat(s, SEED + 1, 0, 50000, 5000));
	REQ(shutdown(s, SHUT_WR) == 0, "server shutdown: %s", strerror(errno));
	TRY(recv_pat(c, SEED + 1, 0, 50000));
	TRY(expect_eof(c));
	close(c);
	close(s);
	return 0;
}

/* The client closes right after its offer went out: everything it sent arrives, then EOF. */
static int check_close_early(void)
{
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_pat(c, SEED, 0, 20000, 4000));
	close(c);
	TRY(recv_pat(s, SEED, 0, 20000));
	TRY(expect_eof(s));
	close(s);
	return 0;
}

static void *reader(void *arg)
{
	struct job *j = arg;

	if (recv_pat(j->fd, SEED + 1, 0, j->n) < 0 || expect_eof(j->fd) < 0) {
		memcpy(j->why, why, sizeof(j->why));
		j->rc = -1;
	}
	return NULL;
}

/* Pattern bytes until EOF, however many (the writer decides when it has written enough). */
static void *reader_to_eof(void *arg)
{
	struct job *j = arg;
	char buf[65536];
	ssize_t r, bad;

	while ((r = read(j->fd, buf, sizeof(buf))) > 0) {
		bad = pat_check(buf, (size_t)r, SEED + 1, j->got);
		if (bad >= 0) {
			snprintf(j->why, sizeof(j->why), "wrong byte at offset %zu",
				 j->got + (size_t)bad);
			j->rc = -1;
			return NULL;
		}
		j->got += (size_t)r;
	}
	if (r < 0) {
		snprintf(j->why, sizeof(j->why), "read at offset %zu: %s", j->got, strerror(errno));
		j->rc = -1;
	}
	return NULL;
}

/* After one request the server only writes (non-blocking, waiting in poll for POLLOUT): it
 * never reads the client's FIN of the move, and must move anyway. At least 4 MiB, and on
 * until the server end has moved (at most 5 s more): the listener announces the client's
 * offer from its own thread, and on a busy machine (ctest -j) all 4 MiB once went over TCP
 * before it did, and the check found the client still on TCP. */
static int check_writer_only(void)
{
	struct job j = {.n = 4u << 20};
	char buf[16384];
	pthread_t t;
	size_t off = 0, k;
	double end = 0;
	ssize_t w;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_pat(c, SEED, 0, 1, 1));
	TRY(recv_pat(s, SEED, 0, 1));
	j.fd = c;
	REQ(pthread_create(&t, NULL, reader_to_eof, &j) == 0, "pthread_create");
	REQ(fcntl(s, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	while (off < j.n) {
		if (off + sizeof(buf) >= j.n && expect_tr >= 0 && transport_of(s) != expect_tr) {
			if (end == 0)
				end = now_sec() + 5;
			if (now_sec() < end)
				j.n += sizeof(buf); /* not moved yet: more, so it moves mid-use */
		}
		k = j.n - off < sizeof(buf) ? j.n - off : sizeof(buf);
		pat_fill(buf, k, SEED + 1, off);
		w = write(s, buf, k);
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		REQ(w < 0 && errno == EAGAIN, "write: %s", w < 0 ? strerror(errno) : "0");
		REQ(poll1(s, POLLOUT, 5000) & POLLOUT, "no POLLOUT for 5 s at offset %zu", off);
	}
	close(s);
	pthread_join(t, NULL);
	REQ(j.rc == 0, "%s", j.why);
	REQ(j.got == off, "the client read %zu bytes of %zu, then EOF", j.got, off);
	TRY(on_transport(c, "client end"));
	close(c);
	return 0;
}

/* A client thread blocked in read() on TCP when the server moves: the server's FIN of the
 * move wakes it and its read goes on from the stream. */
static int check_blocked_reader(void)
{
	struct job j = {.n = 100000};
	pthread_t t;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_pat(c, SEED, 0, 10, 10));
	j.fd = c;
	REQ(pthread_create(&t, NULL, reader, &j) == 0, "pthread_create");
	usleep(20000); /* the reader sits in the kernel */
	TRY(recv_pat(s, SEED, 0, 10));
	TRY(send_pat(s, SEED + 1, 0, j.n, 10000));
	close(s);
	pthread_join(t, NULL);
	REQ(j.rc == 0, "%s", j.why);
	close(c);
	return 0;
}

/* An edge-triggered reader draining to EAGAIN at every edge sees every byte, across it. */
static int check_epoll_et(void)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET}, out;
	char buf[4096];
	size_t got = 0, want = 300000, sent = 0;
	double end = now_sec() + 3;
	ssize_t r, bad;
	int c, s, ep, n;

	TRY(pair(&c, &s));
	REQ(fcntl(c, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	ep = epoll_create1(0);
	REQ(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll: %s", strerror(errno));
	TRY(send_pat(c, SEED, 0, 1, 1));
	TRY(recv_pat(s, SEED, 0, 1));
	while (got < want) {
		if (sent + 3000 >= want && !both_moved(c, s) && now_sec() < end)
			want += 30000; /* not moved yet: more traffic, so it happens mid-use */
		if (sent < want) {
			TRY(send_pat(s, SEED + 1, sent, 3000, 3000));
			sent += 3000;
		}
		n = epoll_wait(ep, &out, 1, sent < want ? 0 : 5000);
		REQ(n >= 0, "epoll_wait: %s", strerror(errno));
		REQ(n > 0 || sent < want, "no edge for 5 s with %zu of %zu bytes read", got, want);
		while (n > 0 && (r = read(c, buf, sizeof(buf))) > 0) {
			bad = pat_check(buf, (size_t)r, SEED + 1, got);
			REQ(bad < 0, "wrong byte at %zu", got + (size_t)bad);
			got += (size_t)r;
		}
		REQ(n == 0 || r < 0, "EOF at %zu", got);
		REQ(n == 0 || errno == EAGAIN, "read: %s", strerror(errno));
	}
	TRY(moved(c, s));
	close(ep);
	close(c);
	close(s);
	return 0;
}

/* MSG_PEEK sees the bytes before the move and after it, and the reads then take them. */
static int check_peek(void)
{
	char a[64], b[64];
	double end = now_sec() + 3;
	int c, s, i, more = 20;

	TRY(pair(&c, &s));
	for (i = 0; more > 0; i++) {
		if (both_moved(c, s) || now_sec() > end)
			more--;
		TRY(send_pat(c, SEED, (uint64_t)i * 32, 32, 32));
		REQ(poll1(s, POLLIN, 5000) & POLLIN, "round %d: not readable", i);
		REQ(recv(s, a, 32, MSG_PEEK | MSG_WAITALL) == 32, "round %d: peek: %s", i,
		    strerror(errno));
		REQ(recv(s, b, 32, MSG_WAITALL) == 32, "round %d: read: %s", i, strerror(errno));
		REQ(memcmp(a, b, 32) == 0 && pat_check(b, 32, SEED, (uint64_t)i * 32) < 0,
		    "round %d: peeked and read bytes differ", i);
		TRY(send_pat(s, SEED + 1, (uint64_t)i, 1, 1));
		TRY(recv_pat(c, SEED + 1, (uint64_t)i, 1));
	}
	TRY(moved(c, s));
	close(c);
	close(s);
	return 0;
}

/* Options set on the TCP connection are the moved connection's: SO_RCVTIMEO (a recv with
 * nothing to read times out, never waits forever), SO_LINGER {1, 0} (the close resets the
 * peer) and TCP_KEEPIDLE read back as set. Before, the move left them on the TCP socket. */
static int check_options(void)
{
	struct timeval tv = {0, 200000};
	struct linger lg = {1, 0}, lgot;
	socklen_t l1 = sizeof(lgot), l2 = sizeof(int);
	double end = now_sec() + 3, t0, dt;
	int c, s, i, idle = 77, got = 0, more = 20;
	ssize_t r;
	char b;

	TRY(pair(&c, &s));
	REQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
		setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0 &&
		setsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) == 0,
	    "setsockopt: %s", strerror(errno));
	for (i = 0; more > 0; i++) {
		if (both_moved(c, s) || now_sec() > end)
			more--;
		TRY(send_pat(c, SEED, (uint64_t)i, 1, 1));
		TRY(recv_pat(s, SEED, (uint64_t)i, 1));
	}
	TRY(moved(c, s));
	REQ(getsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &got, &l2) == 0 && got == idle,
	    "TCP_KEEPIDLE reads %d after the move, set %d", got, idle);
	REQ(getsockopt(s, SOL_SOCKET, SO_LINGER, &lgot, &l1) == 0 && lgot.l_onoff &&
		!lgot.l_linger,
	    "SO_LINGER reads {%d, %d} after the move", lgot.l_onoff, lgot.l_linger);
	t0 = now_sec();
	r = recv(s, &b, 1, 0);
	dt = now_sec() - t0;
	REQ(r < 0 && errno == EAGAIN && dt >= 0.15 && dt < 1.0,
	    "recv with nothing to read: %zd (%s) after %.3f s, expected EAGAIN after 0.2 s", r,
	    r < 0 ? strerror(errno) : "", dt);
	close(s);
	REQ(poll1(c, POLLIN, 2000) & (POLLIN | POLLERR | POLLHUP), "the peer saw nothing in 2 s");
	r = recv(c, &b, 1, 0);
	REQ(r < 0 && errno == ECONNRESET, "the peer's recv after a linger-0 close: %zd (%s)", r,
	    r < 0 ? strerror(errno) : "EOF");
	close(c);
	return 0;
}

/*
 * A socket in more epoll sets than the socket keeps in itself (RSK_SOCK_EPREGS, 4): every set
 * must follow it onto the accelerated file. Before, a fifth set's registration stayed on the
 * TCP file the move closed, and a wait there never woke again.
 */
#define MANY_SETS 7

static int wake_in_every(const int *ep, const char *end, int round)
{
	struct epoll_event out;
	int k;

	for (k = 0; k < MANY_SETS; k++) {
		REQ(epoll_wait(ep[k], &out, 1, 5000) == 1 && out.data.u32 == (uint32_t)k,
		    "round %d: the %s not readable in set %d of %d", round, end, k + 1, MANY_SETS);
	}
	return 0;
}

static int check_many_sets(void)
{
	int c, s, k, i, more = 5, ec[MANY_SETS], es[MANY_SETS];
	double end = now_sec() + 3;

	TRY(pair(&c, &s));
	for (k = 0; k < MANY_SETS; k++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)k};

		ec[k] = epoll_create1(0);
		es[k] = epoll_create1(0);
		REQ(ec[k] >= 0 && epoll_ctl(ec[k], EPOLL_CTL_ADD, c, &ev) == 0 && es[k] >= 0 &&
			    epoll_ctl(es[k], EPOLL_CTL_ADD, s, &ev) == 0,
		    "epoll set %d: %s", k, strerror(errno));
	}
	for (i = 0; more > 0; i++) {
		if (both_moved(c, s) || now_sec() > end)
			more--; /* a few rounds past the move */
		TRY(send_pat(c, SEED, (uint64_t)i, 1, 1));
		TRY(wake_in_every(es, "server end", i));
		TRY(recv_pat(s, SEED, (uint64_t)i, 1));
		TRY(send_pat(s, SEED + 1, (uint64_t)i, 1, 1));
		TRY(wake_in_every(ec, "client end", i));
		TRY(recv_pat(c, SEED + 1, (uint64_t)i, 1));
	}
	TRY(moved(c, s));
	for (k = 0; k < MANY_SETS; k++) {
		close(ec[k]);
		close(es[k]);
	}
	close(c);
	close(s);
	return 0;
}

static const struct check checks[] = {
	{"pingpong", check_pingpong},
	{"waitall", check_waitall},
	{"halfclose", check_halfclose},
	{"close_early", check_close_early},
	{"writer_only", check_writer_only},
	{"blocked_reader", check_blocked_reader},
	{"epoll_et", check_epoll_et},
	{"peek", check_peek},
	{"options", check_options},
	{"many_sets", check_many_sets},
};

int main(int argc, char **argv)
{
	return run_checks(argc, argv, checks, (int)(sizeof(checks) / sizeof(checks[0])), 20, 1);
}
