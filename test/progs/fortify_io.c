/*
 * Role: echo client built with -O2 -D_FORTIFY_SOURCE=2, so its reads and polls go through
 * glibc's checked entry points (__read_chk, __recv_chk, __recvfrom_chk, __poll_chk), which
 * librdmasock interposes as well; the test script checks with nm that they are referenced.
 *
 *   fortify_io PORT [ROUNDS]
 *   fortify_io PORT overflow-read|overflow-recv|overflow-recvfrom|overflow-poll
 *
 * Two connections to the echo server. Each round sends a patterned block of random size on
 * both, then takes the echoes back as poll() reports them ready (fixed pollfd[2], runtime
 * nfds), cycling through read(), recv(), recvfrom() with an address, recv(MSG_PEEK) + read()
 * and recv(MSG_WAITALL), into fixed arrays with random lengths (many partial reads). Checks:
 * every byte, no readiness when nothing is due (poll timeout 0 returns 0), recvfrom reports
 * no source address on a stream, and EOF (0, repeatedly) after shutdown(SHUT_WR).
 * The overflow-* modes ask for more than the fixed array holds while echoed bytes are
 * waiting: the checked call must abort the process (glibc's "buffer overflow detected"),
 * with or without the library; if the call returns, they exit with status 3.
 */
#include <poll.h>

#include "progs.h"

const char *prog_name = "fortify_io";

#define NCONN 2

struct conn {
	int fd;
	uint64_t sent;	/* bytes sent so far (stream offset) */
	uint64_t recvd; /* bytes echoed back and verified */
};

/* Receive calls made, per method: read, recv, recvfrom, peek, waitall. */
static unsigned long calls[5];
/* The largest read; volatile, so the compiler cannot prove a length fits the array. */
static volatile unsigned int chunk_limit = 8192;

/*
 * @x, with its value range hidden from the optimiser: a length it could prove small enough
 * would make glibc's fortify inline pick the unchecked function.
 */
static inline size_t opaque(size_t x)
{
	__asm__("" : "+r"(x));
	return x;
}

static void check(const struct conn *c, int k, const void *buf, size_t n)
{
	ssize_t bad = pat_check(buf, n, (uint64_t)k + 1, c->recvd);

	if (bad >= 0)
		die("conn %d: byte %llu of the stream differs", k,
		    (unsigned long long)(c->recvd + (uint64_t)bad));
}

/* One receive call on @c of at most @want bytes, method chosen by @how. Returns bytes. */
static size_t receive_some(struct conn *c, int k, size_t want, unsigned int how)
{
	char buf[8192], peek[8192];
	struct sockaddr_storage from;
	socklen_t flen;
	ssize_t r, p;

	if (want > chunk_limit)
		want = chunk_limit;
	switch (how % 5) {
	case 0:
		r = read(c->fd, buf, want);
		break;
	case 1:
		r = recv(c->fd, buf, want, 0);
		break;
	case 2:
		flen = sizeof(from);
		memset(&from, 0xa5, sizeof(from));
		r = recvfrom(c->fd, buf, want, 0, (struct sockaddr *)&from, &flen);
		if (r > 0 && flen != 0)
			die("recvfrom on a stream reported a %u-byte source address",
			    (unsigned int)flen);
		break;
	case 3:
		p = recv(c->fd, peek, want, MSG_PEEK);
		if (p <= 0)
			die("recv(MSG_PEEK) after POLLIN returned %zd: %s", p, strerror(errno));
		r = read(c->fd, buf, (size_t)p);
		if (r != p || memcmp(peek, buf, (size_t)p) != 0)
			die("read after MSG_PEEK returned %zd of %zd or other bytes", r, p);
		break;
	default:
		/* Everything asked for is on its way: MSG_WAITALL must return all of it. */
		r = recv(c->fd, buf, want, MSG_WAITALL);
		if (r != (ssize_t)want)
			die("recv(MSG_WAITALL, %zu) returned %zd", want, r);
		break;
	}
	if (r < 0)
		die("receive (method %u): %s", how % 5, strerror(errno));
	if (r == 0)
		die("conn %d: EOF with %llu bytes still due", k,
		    (unsigned long long)(c->sent - c->recvd));
	calls[how % 5]++;
	check(c, k, buf, (size_t)r);
	c->recvd += (uint64_t)r;
	return (size_t)r;
}

/* poll() over the connections still owed data; the pollfd array has a fixed size. */
static int wait_ready(struct conn *cs, int *idx, int timeout)
{
	struct pollfd pfd[NCONN];
	nfds_t n = 0;
	int k, rc;

	for (k = 0; k < NCONN; k++) {
		if (timeout == 0 || cs[k].recvd < cs[k].sent) {
			pfd[n].fd = cs[k].fd;
			pfd[n].events = POLLIN;
			pfd[n].revents = 0;
			idx[n++] = k;
		}
	}
	do
		rc = poll(pfd, (nfds_t)opaque(n), timeout);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		die("poll: %s", strerror(errno));
	for (k = 0; k < (int)n; k++)
		if (!(pfd[k].revents & POLLIN))
			idx[k] = -1;
	return rc == 0 ? 0 : (int)n;
}

/* Ask one checked call for more than its array holds, with data waiting to be read. */
static int overflow(int port, const char *what)
{
	char small[16];
	struct pollfd pfd[1];
	int fd = tcp_connect(port);
	ssize_t r = 0;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	memset(small, 'x', sizeof(small));
	if (write_all(fd, small, sizeof(small)) < 0)
		die("write: %s", strerror(errno));
	pfd[0].fd = fd;
	pfd[0].events = POLLIN;
	if (poll(pfd, (nfds_t)opaque(1), 10000) != 1)
		die("no echo to read");
	fflush(NULL);
	if (strcmp(what, "overflow-read") == 0)
		r = read(fd, small, opaque(sizeof(small) + 1));
	else if (strcmp(what, "overflow-recv") == 0)
		r = recv(fd, small, opaque(sizeof(small) * 2), 0);
	else if (strcmp(what, "overflow-recvfrom") == 0)
		r = recvfrom(fd, small, opaque(sizeof(small) * 4), 0, NULL, NULL);
	else if (strcmp(what, "overflow-poll") == 0)
		r = poll(pfd, (nfds_t)opaque(2), 0);
	else
		die("unknown mode \"%s\"", what);
	prog_msg("%s was not caught: the call returned %zd", what, r);
	return 3;
}

int main(int argc, char **argv)
{
	static char out[65536];
	struct conn cs[NCONN];
	int k, i, n, idx[NCONN], rounds;
	uint64_t rng = 42, rng_rd = 43, total = 0; /* sizes sent, read lengths */
	unsigned int how = 0;
	size_t len;
	char eofbuf[16];
	ssize_t r;

	alarm(CLIENT_TIME_LIMIT); /* a hang ends in SIGALRM, not in the test timeout */
	if (argc < 2)
		die("usage: fortify_io PORT [ROUNDS]");
	if (argc > 2 && strncmp(argv[2], "overflow-", 9) == 0)
		return overflow(port_arg(argv[1]), argv[2]);
	rounds = argc > 2 ? atoi(argv[2]) : 200;
	for (k = 0; k < NCONN; k++) {
		cs[k].fd = tcp_connect(port_arg(argv[1]));
		if (cs[k].fd < 0)
			die("connect: %s", strerror(errno));
		cs[k].sent = cs[k].recvd = 0;
	}
	if (wait_ready(cs, idx, 0) != 0)
		die("poll reports a connection readable before anything was sent");
	for (i = 0; i < rounds; i++) {
		for (k = 0; k < NCONN; k++) {
			len = 1 + (size_t)(rng_next(&rng) % (i % 10 == 9 ? sizeof(out) : 4096));
			pat_fill(out, len, (uint64_t)k + 1, cs[k].sent);
			if (write_all(cs[k].fd, out, len) < 0)
				die("write: %s", strerror(errno));
			cs[k].sent += len;
			total += len;
		}
		while (cs[0].recvd < cs[0].sent || cs[1].recvd < cs[1].sent) {
			n = wait_ready(cs, idx, 10000);
			if (n == 0)
				die("no echo within 10 s (round %d)", i);
			for (k = 0; k < n; k++) {
				if (idx[k] < 0)
					continue;
				len = 1 + (size_t)(rng_next(&rng_rd) % 8192);
				if (len > cs[idx[k]].sent - cs[idx[k]].recvd)
					len = (size_t)(cs[idx[k]].sent - cs[idx[k]].recvd);
				receive_some(&cs[idx[k]], idx[k], len, how++);
			}
		}
		/* Everything echoed has been read: nothing may look readable now. */
		if (wait_ready(cs, idx, 0) != 0)
			die("round %d: poll reports readable with nothing due", i);
	}
	for (k = 0; k < NCONN; k++) {
		if (shutdown(cs[k].fd, SHUT_WR) < 0)
			die("shutdown: %s", strerror(errno));
	}
	for (k = 0; k < NCONN; k++) {
		struct pollfd one[1] = {{.fd = cs[k].fd, .events = POLLIN}};

		if (poll(one, (nfds_t)opaque(1), 10000) != 1 ||
		    !(one[0].revents & (POLLIN | POLLHUP)))
			die("conn %d: no EOF readiness after shutdown", k);
		r = read(cs[k].fd, eofbuf, opaque(sizeof(eofbuf)));
		if (r != 0)
			die("conn %d: read at EOF returned %zd", k, r);
		r = recv(cs[k].fd, eofbuf, opaque(sizeof(eofbuf)), 0);
		if (r != 0)
			die("conn %d: second read at EOF returned %zd", k, r);
		close(cs[k].fd);
	}
	printf("fortify_io: rounds %d bytes %llu calls read %lu recv %lu recvfrom %lu peek %lu "
	       "waitall %lu: ok\n",
	       rounds, (unsigned long long)total, calls[0], calls[1], calls[2], calls[3], calls[4]);
	return 0;
}
