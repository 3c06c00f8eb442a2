/*
 * Role: TCP stream semantics, checked one by one against the program's own server.
 *
 *   semantics [CHECK...]        (default: every check, in order)
 *
 * Each check runs in its own forked child (so a hang or crash is reported as that check's
 * failure, after at most CHECK_SECS) which opens a listener on 127.0.0.1 (kernel-chosen
 * port) and makes its connections to it: client and server ends live in the same preloaded
 * process, so with RDMASOCK_TRANSPORT=shm both are accelerated. When SEMANTICS_EXPECT names
 * a transport (kernel, shm) and the library is loaded, every connection is also checked to
 * be carried by it (rdmasock_fd_transport, looked up with dlsym: nothing is linked).
 *
 * Prints one line per check, "semantics: check NAME: ok" or "semantics: check NAME: FAIL:
 * detail", then "semantics: N checks, F failed", and exits 1 if any failed.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "checks.h"
#include "progs.h"

const char *prog_name = "semantics";

#define CHECK_SECS 6

static const char *ename(int e)
{
	static char b[64];

	switch (e) {
	case 0:
		return "0";
	case EAGAIN:
		return "EAGAIN";
	case EPIPE:
		return "EPIPE";
	case ECONNRESET:
		return "ECONNRESET";
	case EINPROGRESS:
		return "EINPROGRESS";
	case EBADF:
		return "EBADF";
	case EINVAL:
		return "EINVAL";
	case ENOTCONN:
		return "ENOTCONN";
	case EISCONN:
		return "EISCONN";
	case ECONNREFUSED:
		return "ECONNREFUSED";
	case EINTR:
		return "EINTR";
	default:
		snprintf(b, sizeof(b), "errno %d (%s)", e, strerror(e));
		return b;
	}
}

/* ---- connections ---------------------------------------------------------------------- */

/* A connected pair: client socket(@ctype) connected (waiting if non-blocking), server end
 * accept4(@aflags). Both checked to be on the expected transport. */
static int pair_flags(int *c, int *s, int ctype, int aflags)
{
	struct sockaddr_in sa = loopback(lport);
	int err = 0;
	socklen_t el = sizeof(err);

	*c = socket(AF_INET, SOCK_STREAM | ctype, 0);
	REQ(*c >= 0, "socket: %s", strerror(errno));
	if (connect(*c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		REQ(errno == EINPROGRESS && (ctype & SOCK_NONBLOCK), "connect: %s", ename(errno));
		REQ(poll1(*c, POLLOUT, 2000) & POLLOUT, "non-blocking connect not writable in 2 s");
		REQ(getsockopt(*c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0,
		    "SO_ERROR after connect: %s", ename(err));
	}
	*s = accept4(lfd, NULL, NULL, aflags);
	REQ(*s >= 0, "accept4: %s", strerror(errno));
	TRY(on_transport(*c, "client end"));
	TRY(on_transport(*s, "server end"));
	return 0;
}

static int pair(int *c, int *s)
{
	return pair_flags(c, s, 0, 0);
}

static int wait_fionread(int fd, int want, int ms)
{
	double end = now_sec() + ms / 1000.0;
	int n = -1;

	while (now_sec() < end) {
		if (ioctl(fd, FIONREAD, &n) < 0)
			FAILF("ioctl(FIONREAD): %s", strerror(errno));
		if (n >= want)
			break;
		usleep(1000);
	}
	REQ(n == want, "FIONREAD is %d, expected %d (after waiting up to %d ms)", n, want, ms);
	return 0;
}

static int expect_eof(int fd, const char *what)
{
	char b[16];
	ssize_t r;

	REQ(poll1(fd, POLLIN, 2000) & (POLLIN | POLLHUP), "%s: no EOF readable within 2 s", what);
	r = read(fd, b, sizeof(b));
	REQ(r == 0, "%s: read returned %zd (%s), expected EOF", what, r,
	    r < 0 ? ename(errno) : "data");
	return 0;
}

/* ---- checks --------------------------------------------------------------------------- */

struct bulk {
	int fd;
	size_t n;
	uint64_t seed;
	int close_after;
	int rc;
	int err;
};

static void *bulk_writer(void *arg)
{
	struct bulk *b = arg;
	size_t chunk = 65536, off = 0, len;
	char *buf = malloc(chunk);

	b->rc = 0;
	while (buf != NULL && off < b->n) {
		len = b->n - off < chunk ? b->n - off : chunk;
		pat_fill(buf, len, b->seed, off);
		if (write_all(b->fd, buf, len) < 0) {
			b->rc = -1;
			b->err = errno;
			break;
		}
		off += len;
	}
	if (b->close_after && close(b->fd) < 0) {
		b->rc = -1;
		b->err = errno;
	}
	free(buf);
	return NULL;
}

/* Read @n pattern bytes (in pieces up to @chunk) and check them, then expect EOF if asked. */
static int read_pattern(int fd, size_t n, uint64_t seed, size_t chunk, int then_eof)
{
	char *buf = malloc(chunk);
	size_t got = 0;
	ssize_t r, bad;

	REQ(buf != NULL, "out of memory");
	while (got < n) {
		r = read(fd, buf, n - got < chunk ? n - got : chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(buf);
			FAILF("read after %zu of %zu bytes: %s", got, n,
			      r < 0 ? ename(errno) : "EOF");
		}
		bad = pat_check(buf, (size_t)r, seed, got);
		if (bad >= 0) {
			free(buf);
			FAILF("byte %zu of the stream is wrong", got + (size_t)bad);
		}
		got += (size_t)r;
	}
	free(buf);
	if (then_eof)
		TRY(expect_eof(fd, "after the data"));
	return 0;
}

static int chk_blocking_io(void)
{
	char b[64];
	struct bulk w;
	pthread_t t;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_all(c, "hello", 5));
	TRY(recv_exact(s, b, 5));
	REQ(memcmp(b, "hello", 5) == 0, "server read the wrong bytes");
	TRY(send_all(s, "goodbye", 7));
	TRY(recv_exact(c, b, 7));
	REQ(memcmp(b, "goodbye", 7) == 0, "client read the wrong bytes");
	/* 8 MiB through blocking writes far larger than any window, read back concurrently. */
	w = (struct bulk){.fd = c, .n = 8u << 20, .seed = 11};
	pthread_create(&t, NULL, bulk_writer, &w);
	if (read_pattern(s, w.n, 11, 100000, 0) < 0) {
		pthread_join(t, NULL);
		return -1;
	}
	pthread_join(t, NULL);
	REQ(w.rc == 0, "blocking writer: %s", ename(w.err));
	close(c);
	TRY(expect_eof(s, "server"));
	close(s);
	return 0;
}

static int set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	REQ(fl >= 0 && fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) == 0,
	    "fcntl(F_SETFL): %s", strerror(errno));
	return 0;
}

static int chk_nonblocking_io(void)
{
	const size_t total = 8u << 20, chunk = 1u << 20;
	char *out = malloc(chunk), *in = malloc(chunk);
	size_t sent = 0, rcvd = 0, len;
	int c, s, eagain_w = 0, eagain_r = 0;
	double end = now_sec() + 4;
	char b;
	ssize_t r;

	REQ(out != NULL && in != NULL, "out of memory");
	TRY(pair(&c, &s));
	TRY(set_nonblock(c, 1));
	TRY(set_nonblock(s, 1));
	r = read(s, &b, 1);
	REQ(r < 0 && errno == EAGAIN, "read on an empty non-blocking socket: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	while (rcvd < total) {
		REQ(now_sec() < end, "stuck after sending %zu and receiving %zu bytes", sent, rcvd);
		if (sent < total) {
			len = total - sent < chunk ? total - sent : chunk;
			pat_fill(out, len, 22, sent);
			r = write(c, out, len);
			if (r < 0) {
				REQ(errno == EAGAIN, "non-blocking write: %s", ename(errno));
				eagain_w++;
			} else {
				REQ(r > 0 && (size_t)r <= len, "write returned %zd", r);
				sent += (size_t)r;
			}
		}
		/* Read only every other round so the window does fill up. */
		if (sent < total && eagain_w == 0)
			continue;
		r = read(s, in, chunk);
		if (r < 0) {
			REQ(errno == EAGAIN, "non-blocking read: %s", ename(errno));
			eagain_r++;
			poll1(s, POLLIN, 100);
			continue;
		}
		REQ(r > 0, "read returned EOF");
		REQ(pat_check(in, (size_t)r, 22, rcvd) < 0, "wrong bytes at %zu", rcvd);
		rcvd += (size_t)r;
	}
	REQ(eagain_w > 0, "the writer never saw EAGAIN: the window never filled");
	r = read(s, &b, 1);
	REQ(r < 0 && errno == EAGAIN, "read after draining: %zd %s", r, r < 0 ? ename(errno) : "");
	close(c);
	REQ(poll1(s, POLLIN, 2000) & POLLIN, "EOF not readable");
	r = read(s, &b, 1);
	REQ(r == 0, "read at EOF: %zd %s", r, r < 0 ? ename(errno) : "");
	close(s);
	free(out);
	free(in);
	return 0;
}

static int chk_partial_reads(void)
{
	char out[1000], in[4096];
	ssize_t r;
	int c, s, i;

	TRY(pair(&c, &s));
	pat_fill(out, 100, 3, 0);
	TRY(send_all(c, out, 100));
	TRY(wait_fionread(s, 100, 2000));
	r = read(s, in, sizeof(in));
	REQ(r == 100, "read(4096) with 100 bytes queued returned %zd (%s)", r,
	    r < 0 ? ename(errno) : "");
	REQ(memcmp(in, out, 100) == 0, "wrong bytes");
	pat_fill(out, 1000, 4, 0);
	TRY(send_all(c, out, 1000));
	TRY(wait_fionread(s, 1000, 2000));
	for (i = 0; i < 100; i++) {
		r = read(s, in, 10);
		REQ(r == 10, "read #%d of 10 bytes returned %zd", i, r);
		REQ(memcmp(in, out + i * 10, 10) == 0, "read #%d: wrong bytes", i);
	}
	close(c);
	close(s);
	return 0;
}

static int chk_readv_writev(void)
{
	char a[3] = {'a', 'b', 'c'}, big[1000], z[5] = {'v', 'w', 'x', 'y', 'z'}, all[1008];
	char r1[1], r2[7], r3[500], r4[2000];
	struct iovec wv[4] = {{a, 3}, {NULL, 0}, {big, 1000}, {z, 5}};
	struct iovec rv[4] = {{r1, 1}, {r2, 7}, {r3, 500}, {r4, 2000}};
	ssize_t r;
	int c, s;

	pat_fill(big, sizeof(big), 5, 0);
	memcpy(all, a, 3);
	memcpy(all + 3, big, 1000);
	memcpy(all + 1003, z, 5);
	TRY(pair(&c, &s));
	r = writev(c, wv, 4);
	REQ(r == 1008, "writev returned %zd (%s)", r, r < 0 ? ename(errno) : "");
	TRY(wait_fionread(s, 1008, 2000));
	r = readv(s, rv, 4);
	REQ(r == 1008, "readv returned %zd (%s)", r, r < 0 ? ename(errno) : "");
	REQ(memcmp(r1, all, 1) == 0 && memcmp(r2, all + 1, 7) == 0 &&
		memcmp(r3, all + 8, 500) == 0 && memcmp(r4, all + 508, 500) == 0,
	    "readv scattered the bytes wrongly");
	/* readv with a zero-length first entry and a short total. */
	TRY(send_all(s, "0123456789", 10));
	rv[0].iov_len = 0;
	rv[1].iov_len = 4;
	rv[2].iov_len = 3;
	TRY(wait_fionread(c, 10, 2000));
	r = readv(c, rv, 3);
	REQ(r == 7 && memcmp(r2, "0123", 4) == 0 && memcmp(r3, "456", 3) == 0,
	    "readv {0,4,3} returned %zd", r);
	TRY(recv_exact(c, r4, 3));
	REQ(memcmp(r4, "789", 3) == 0, "rest after readv wrong");
	close(c);
	close(s);
	return 0;
}

static int chk_sendmsg_recvmsg(void)
{
	char p1[] = "first-", p2[] = "second-", p3[] = "third", in1[4], in2[10], in3[100];
	struct iovec wv[3] = {{p1, 6}, {p2, 7}, {p3, 5}}, rv[3] = {{in1, 4}, {in2, 10}, {in3, 100}};
	struct sockaddr_storage from;
	struct msghdr m;
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	memset(&m, 0, sizeof(m));
	m.msg_iov = wv;
	m.msg_iovlen = 3;
	r = sendmsg(c, &m, 0);
	REQ(r == 18, "sendmsg returned %zd (%s)", r, r < 0 ? ename(errno) : "");
	TRY(wait_fionread(s, 18, 2000));
	memset(&m, 0, sizeof(m));
	m.msg_iov = rv;
	m.msg_iovlen = 3;
	m.msg_name = &from;
	m.msg_namelen = sizeof(from);
	m.msg_flags = -1;
	r = recvmsg(s, &m, 0);
	REQ(r == 18, "recvmsg returned %zd (%s)", r, r < 0 ? ename(errno) : "");
	REQ(memcmp(in1, "firs", 4) == 0 && memcmp(in2, "t-second-t", 10) == 0 &&
		memcmp(in3, "hird", 4) == 0,
	    "recvmsg scattered the bytes wrongly");
	REQ(m.msg_flags == 0, "msg_flags 0x%x, expected 0", m.msg_flags);
	REQ(m.msg_namelen == 0, "msg_namelen %u, TCP reports no source address (0)",
	    (unsigned)m.msg_namelen);
	/* sendto on a connected stream ignores nothing and sends; recvfrom fills no address */
	r = sendto(s, "xy", 2, 0, NULL, 0);
	REQ(r == 2, "sendto returned %zd", r);
	close(c);
	close(s);
	return 0;
}

static int chk_msg_peek(void)
{
	char b[100];
	ssize_t r;
	int c, s, n;

	TRY(pair(&c, &s));
	TRY(send_all(c, "abcdefghij", 10));
	TRY(wait_fionread(s, 10, 2000));
	TRY(recv_exact(s, b, 2));
	r = recv(s, b, 4, MSG_PEEK);
	REQ(r == 4 && memcmp(b, "cdef", 4) == 0, "peek 4 after reading 2: %zd '%.*s'", r,
	    r > 0 ? (int)r : 0, b);
	r = recv(s, b, sizeof(b), MSG_PEEK);
	REQ(r == 8 && memcmp(b, "cdefghij", 8) == 0, "peek all: %zd '%.*s'", r, r > 0 ? (int)r : 0,
	    b);
	REQ(ioctl(s, FIONREAD, &n) == 0 && n == 8, "FIONREAD after peeking %d, expected 8", n);
	r = recv(s, b, sizeof(b), 0);
	REQ(r == 8 && memcmp(b, "cdefghij", 8) == 0, "read after peek: %zd", r);
	r = recv(s, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	REQ(r < 0 && errno == EAGAIN, "peek on an empty socket: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	/* peek across two separate writes */
	TRY(send_all(c, "123", 3));
	TRY(send_all(c, "456", 3));
	TRY(wait_fionread(s, 6, 2000));
	r = recv(s, b, sizeof(b), MSG_PEEK);
	REQ(r == 6 && memcmp(b, "123456", 6) == 0, "peek across two writes: %zd '%.*s'", r,
	    r > 0 ? (int)r : 0, b);
	r = recv(s, b, sizeof(b), 0);
	REQ(r == 6 && memcmp(b, "123456", 6) == 0, "read across two writes: %zd", r);
	close(c);
	close(s);
	return 0;
}

struct dribble {
	int fd;
	int shut; /* shutdown(SHUT_WR) after the pieces */
	int pieces, size, gap_ms;
};

static void *dribbler(void *arg)
{
	struct dribble *d = arg;
	char b[256];
	int i;

	for (i = 0; i < d->pieces; i++) {
		usleep((useconds_t)d->gap_ms * 1000);
		pat_fill(b, (size_t)d->size, 7, (uint64_t)i * (uint64_t)d->size);
		if (write_all(d->fd, b, (size_t)d->size) < 0)
			break;
	}
	if (d->shut)
		shutdown(d->fd, SHUT_WR);
	return NULL;
}

static int chk_msg_waitall(void)
{
	struct dribble d;
	pthread_t t;
	char b[200];
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	d = (struct dribble){.fd = c, .pieces = 4, .size = 25, .gap_ms = 30};
	pthread_create(&t, NULL, dribbler, &d);
	r = recv(s, b, 100, MSG_WAITALL);
	pthread_join(t, NULL);
	REQ(r == 100, "recv(100, MSG_WAITALL) over 4 writes of 25 returned %zd (%s)", r,
	    r < 0 ? ename(errno) : "");
	REQ(pat_check(b, 100, 7, 0) < 0, "wrong bytes");
	/* The peer ends the stream early: MSG_WAITALL returns what there was. */
	d = (struct dribble){.fd = c, .pieces = 2, .size = 25, .gap_ms = 30, .shut = 1};
	pthread_create(&t, NULL, dribbler, &d);
	r = recv(s, b, 200, MSG_WAITALL);
	pthread_join(t, NULL);
	REQ(r == 50, "recv(200, MSG_WAITALL) with 50 bytes then EOF returned %zd (%s)", r,
	    r < 0 ? ename(errno) : "");
	close(c);
	close(s);
	return 0;
}

/* Fill the send window of @fd (not read by the peer) with MSG_DONTWAIT sends. */
static int fill_window(int fd, size_t *filled)
{
	static char junk[65536];
	size_t total = 0;
	ssize_t r;

	for (;;) {
		r = send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0) {
			REQ(errno == EAGAIN, "send(MSG_DONTWAIT) while filling: %s", ename(errno));
			break;
		}
		total += (size_t)r;
		REQ(total < (512u << 20), "512 MiB went out and the window never filled");
	}
	*filled = total;
	return 0;
}

static int chk_msg_dontwait(void)
{
	double t0;
	size_t filled;
	ssize_t r;
	char b;
	int c, s;

	TRY(pair(&c, &s));
	t0 = now_sec();
	r = recv(s, &b, 1, MSG_DONTWAIT);
	REQ(r < 0 && errno == EAGAIN, "recv(MSG_DONTWAIT) on an empty blocking socket: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	REQ(now_sec() - t0 < 0.1, "recv(MSG_DONTWAIT) took %.3f s", now_sec() - t0);
	TRY(fill_window(c, &filled));
	REQ(filled > 0, "nothing could be sent");
	REQ(!(fcntl(c, F_GETFL) & O_NONBLOCK) && !(fcntl(s, F_GETFL) & O_NONBLOCK),
	    "MSG_DONTWAIT left O_NONBLOCK set");
	/* The socket is still blocking: once the peer drains, a blocking send goes through. */
	{
		static char drain[65536];
		size_t left = filled;
		ssize_t n;

		while (left > 0) {
			n = read(s, drain, left < sizeof(drain) ? left : sizeof(drain));
			REQ(n > 0, "draining the peer: %zd %s", n, n < 0 ? ename(errno) : "EOF");
			left -= (size_t)n;
		}
		TRY(send_all(c, drain, 100));
		TRY(recv_exact(s, drain, 100));
	}
	close(c);
	close(s);
	return 0;
}

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void catch_sigpipe(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigpipe;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPIPE, &sa, NULL);
	sigpipes = 0;
}

/*
 * The peer closed; write with @flags until the stream reports it broken. TCP: the first write
 * succeeds and draws a reset, the next returns ECONNRESET (the pending error, no signal),
 * then EPIPE. Returns the errno of the first failed write after that (EPIPE expected).
 */
static int write_until_broken(int c, int flags, int *first_err, int *final_err, int *ok_writes,
			      int *sigs_before_epipe)
{
	struct timeval tv = {1, 0};
	char b[1000];
	ssize_t r;
	int i;

	memset(b, 'p', sizeof(b));
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* a safety net, not the test */
	*first_err = *final_err = 0;
	*ok_writes = 0;
	*sigs_before_epipe = 0;
	for (i = 0; i < 100; i++) {
		r = send(c, b, sizeof(b), flags);
		if (r >= 0) {
			(*ok_writes)++;
			usleep(10000); /* let the reset come back */
			continue;
		}
		if (*first_err == 0)
			*first_err = errno;
		if (errno == EPIPE) {
			*final_err = EPIPE;
			return 0;
		}
		if (errno != ECONNRESET) {
			*final_err = errno;
			return 0;
		}
		*sigs_before_epipe = sigpipes;
	}
	*final_err = -1;
	return 0;
}

static int chk_msg_nosignal(void)
{
	int c, s, first, final, oks, sigs;

	catch_sigpipe();
	TRY(pair(&c, &s));
	TRY(send_all(c, "x", 1));
	TRY(recv_exact(s, (char[1]){0}, 1));
	close(s);
	write_until_broken(c, MSG_NOSIGNAL, &first, &final, &oks, &sigs);
	REQ(final == EPIPE,
	    "after the peer closed, send(MSG_NOSIGNAL) never returned EPIPE "
	    "(%d writes succeeded, first error %s, last %s)",
	    oks, ename(first), final < 0 ? "none in 100 writes" : ename(final));
	REQ(oks <= 3, "%d writes succeeded after the peer closed (TCP: 1, the reset comes back)",
	    oks);
	REQ(sigpipes == 0, "SIGPIPE delivered %d times despite MSG_NOSIGNAL", (int)sigpipes);
	close(c);
	return 0;
}

static int chk_sigpipe(void)
{
	int c, s, first, final, oks, sigs;

	catch_sigpipe();
	TRY(pair(&c, &s));
	close(s);
	write_until_broken(c, 0, &first, &final, &oks, &sigs);
	REQ(final == EPIPE,
	    "after the peer closed, send() never returned EPIPE (%d writes "
	    "succeeded, first error %s, last %s)",
	    oks, ename(first), final < 0 ? "none in 100 writes" : ename(final));
	REQ(sigs == 0, "SIGPIPE came with ECONNRESET (TCP raises it only with EPIPE)");
	REQ(sigpipes == 1, "SIGPIPE delivered %d times for one EPIPE, expected 1", (int)sigpipes);
	/* And once more: every EPIPE write raises it. */
	REQ(write(c, "y", 1) < 0 && errno == EPIPE, "write after EPIPE: %s", ename(errno));
	REQ(sigpipes == 2, "SIGPIPE count %d after the second EPIPE, expected 2", (int)sigpipes);
	close(c);
	return 0;
}

static int chk_shut_wr(void)
{
	char b[100];
	short ev;
	ssize_t r;
	int c, s;

	catch_sigpipe();
	TRY(pair(&c, &s));
	TRY(send_all(c, "before", 6));
	REQ(shutdown(c, SHUT_WR) == 0, "shutdown(SHUT_WR): %s", ename(errno));
	TRY(recv_exact(s, b, 6));
	ev = poll1(s, POLLIN | POLLRDHUP, 2000);
	REQ((ev & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP),
	    "server poll after the client's SHUT_WR: revents 0x%x, expected POLLIN|POLLRDHUP", ev);
	TRY(expect_eof(s, "server after SHUT_WR"));
	/* The other direction still works. */
	pat_fill(b, 100, 9, 0);
	TRY(send_all(s, b, 100));
	memset(b, 0, sizeof(b));
	TRY(recv_exact(c, b, 100));
	REQ(pat_check(b, 100, 9, 0) < 0, "half-closed client read wrong bytes");
	r = send(c, "z", 1, MSG_NOSIGNAL);
	REQ(r < 0 && errno == EPIPE, "send after SHUT_WR: %zd %s, expected EPIPE", r,
	    r < 0 ? ename(errno) : "");
	REQ(sigpipes == 0, "SIGPIPE with MSG_NOSIGNAL");
	close(s);
	TRY(expect_eof(c, "client after the server closed"));
	close(c);
	return 0;
}

static int chk_shut_rd(void)
{
	char b[16];
	double t0;
	short ev;
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	REQ(shutdown(c, SHUT_RD) == 0, "shutdown(SHUT_RD): %s", ename(errno));
	t0 = now_sec();
	r = recv(c, b, sizeof(b), 0);
	REQ(r == 0, "recv after SHUT_RD: %zd %s, expected 0", r, r < 0 ? ename(errno) : "");
	REQ(now_sec() - t0 < 0.5, "recv after SHUT_RD blocked %.2f s", now_sec() - t0);
	ev = poll1(c, POLLIN, 0);
	REQ(ev & POLLIN, "poll after SHUT_RD: revents 0x%x, expected POLLIN", ev);
	/* Our sending side is untouched. */
	TRY(send_all(c, "still", 5));
	TRY(recv_exact(s, b, 5));
	REQ(memcmp(b, "still", 5) == 0, "wrong bytes after SHUT_RD");
	/* Linux's SHUT_RD only ends the wait: bytes that come are still read (the library
	 * said 0 over them: lost). */
	TRY(send_all(s, "late", 4));
	TRY(wait_fionread(c, 4, 2000));
	r = recv(c, b, sizeof(b), 0);
	REQ(r == 4 && memcmp(b, "late", 4) == 0, "recv of bytes sent after SHUT_RD: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	close(c);
	TRY(expect_eof(s, "server"));
	close(s);
	return 0;
}

static int chk_shut_rdwr(void)
{
	char b[16];
	ssize_t r;
	int c, s;

	catch_sigpipe();
	TRY(pair(&c, &s));
	TRY(send_all(c, "last", 4));
	REQ(shutdown(c, SHUT_RDWR) == 0, "shutdown(SHUT_RDWR): %s", ename(errno));
	r = recv(c, b, sizeof(b), 0);
	REQ(r == 0, "recv after SHUT_RDWR: %zd %s, expected 0", r, r < 0 ? ename(errno) : "");
	r = send(c, "z", 1, MSG_NOSIGNAL);
	REQ(r < 0 && errno == EPIPE, "send after SHUT_RDWR: %zd %s, expected EPIPE", r,
	    r < 0 ? ename(errno) : "");
	TRY(recv_exact(s, b, 4));
	REQ(memcmp(b, "last", 4) == 0, "bytes before SHUT_RDWR lost");
	TRY(expect_eof(s, "server after SHUT_RDWR"));
	REQ(poll1(c, POLLIN | POLLOUT, 0) & POLLIN, "SHUT_RDWR socket not readable (EOF)");
	close(c);
	close(s);
	return 0;
}

static int chk_close_in_flight(void)
{
	struct bulk w;
	pthread_t t;
	char b[1000];
	int c, s;

	/* 1000 bytes (within any window) written and closed before the reader even starts. */
	TRY(pair(&c, &s));
	pat_fill(b, sizeof(b), 31, 0);
	TRY(send_all(c, b, sizeof(b)));
	REQ(close(c) == 0, "close: %s", ename(errno));
	TRY(read_pattern(s, sizeof(b), 31, 77, 1));
	close(s);
	/* 1 MB (more than the window) written by a thread that closes right after its last
	 * write returns, while the reader starts late and reads in odd pieces. */
	TRY(pair(&c, &s));
	w = (struct bulk){.fd = c, .n = 1000000, .seed = 32, .close_after = 1};
	pthread_create(&t, NULL, bulk_writer, &w);
	usleep(50000);
	if (read_pattern(s, w.n, 32, 3001, 1) < 0) {
		pthread_join(t, NULL);
		return -1;
	}
	pthread_join(t, NULL);
	REQ(w.rc == 0, "writer: %s", ename(w.err));
	close(s);
	return 0;
}

/* TCP: closing with unread received data aborts: the peer gets ECONNRESET, then EOF. */
static int chk_close_unread_resets(void)
{
	char b[8];
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_all(c, "unread", 6));
	TRY(wait_fionread(s, 6, 2000));
	close(s);
	REQ(poll1(c, POLLIN, 2000) & (POLLIN | POLLERR | POLLHUP), "nothing reported in 2 s");
	r = recv(c, b, sizeof(b), 0);
	REQ(r < 0 && errno == ECONNRESET,
	    "recv after the peer closed with unread data: %zd %s, "
	    "expected ECONNRESET",
	    r,
	    r < 0    ? ename(errno)
	    : r == 0 ? "EOF"
		     : "data");
	r = recv(c, b, sizeof(b), 0);
	REQ(r == 0, "recv after ECONNRESET: %zd %s, expected 0", r, r < 0 ? ename(errno) : "");
	close(c);
	return 0;
}

static int chk_eof_repeated(void)
{
	struct iovec v;
	char b[8];
	ssize_t r;
	int c, s, i;

	TRY(pair(&c, &s));
	TRY(send_all(c, "bye", 3));
	close(c);
	TRY(recv_exact(s, b, 3));
	for (i = 0; i < 3; i++) {
		r = read(s, b, sizeof(b));
		REQ(r == 0, "read #%d at EOF: %zd %s", i, r, r < 0 ? ename(errno) : "");
	}
	r = recv(s, b, sizeof(b), 0);
	REQ(r == 0, "recv at EOF: %zd", r);
	r = recv(s, b, sizeof(b), MSG_DONTWAIT);
	REQ(r == 0, "recv(MSG_DONTWAIT) at EOF: %zd %s", r, r < 0 ? ename(errno) : "");
	v = (struct iovec){b, sizeof(b)};
	r = readv(s, &v, 1);
	REQ(r == 0, "readv at EOF: %zd", r);
	REQ(poll1(s, POLLIN, 0) & POLLIN, "EOF socket not readable");
	close(s);
	return 0;
}

static int so_error(int fd, int *err)
{
	socklen_t len = sizeof(*err);

	*err = -1;
	REQ(getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) == 0, "getsockopt(SO_ERROR): %s",
	    ename(errno));
	REQ(len == sizeof(int), "SO_ERROR length %u", (unsigned)len);
	return 0;
}

static int chk_so_error(void)
{
	char b[4];
	int c, s, e;

	TRY(pair(&c, &s));
	TRY(send_all(c, "ping", 4));
	TRY(recv_exact(s, b, 4));
	TRY(send_all(s, "pong", 4));
	TRY(recv_exact(c, b, 4));
	TRY(so_error(c, &e));
	REQ(e == 0, "client SO_ERROR %s", ename(e));
	TRY(so_error(s, &e));
	REQ(e == 0, "server SO_ERROR %s", ename(e));
	close(c);
	close(s);
	return 0;
}

static int chk_fionread(void)
{
	char b[1234];
	int c, s, n = -1;

	TRY(pair(&c, &s));
	REQ(ioctl(s, FIONREAD, &n) == 0 && n == 0, "FIONREAD on a new connection %d", n);
	pat_fill(b, sizeof(b), 8, 0);
	TRY(send_all(c, b, sizeof(b)));
	TRY(wait_fionread(s, 1234, 2000));
	TRY(recv_exact(s, b, 234));
	REQ(ioctl(s, FIONREAD, &n) == 0 && n == 1000, "FIONREAD after reading 234: %d", n);
	REQ(ioctl(s, SIOCINQ, &n) == 0 && n == 1000, "SIOCINQ: %d", n);
	TRY(recv_exact(s, b, 1000));
	REQ(ioctl(s, FIONREAD, &n) == 0 && n == 0, "FIONREAD after draining: %d", n);
	close(c);
	close(s);
	return 0;
}

static int chk_so_rcvtimeo(void)
{
	struct timeval tv = {0, 200000}, got;
	socklen_t len = sizeof(got);
	double t0, dt;
	ssize_t r;
	char b;
	int c, s;

	TRY(pair(&c, &s));
	REQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "setsockopt: %s",
	    ename(errno));
	REQ(getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got, &len) == 0 && got.tv_sec == 0 &&
		got.tv_usec >= 190000 && got.tv_usec <= 210000,
	    "SO_RCVTIMEO reads back %ld.%06ld", (long)got.tv_sec, (long)got.tv_usec);
	t0 = now_sec();
	r = recv(s, &b, 1, 0);
	dt = now_sec() - t0;
	REQ(r < 0 && errno == EAGAIN, "recv with SO_RCVTIMEO and no data: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	REQ(dt >= 0.15 && dt < 1.0, "recv timed out after %.3f s, expected ~0.2", dt);
	/* Data before the timeout is returned. */
	TRY(send_all(c, "q", 1));
	r = recv(s, &b, 1, 0);
	REQ(r == 1 && b == 'q', "recv with data: %zd", r);
	close(c);
	close(s);
	return 0;
}

/* ---- options a connection carries from before it was one -------------------------------- */

/* @fd's options as the kernel gave them: SO_RCVTIMEO 200 ms, keepalive on with TCP_KEEPIDLE
 * @idle, SO_LINGER {1, 0}. */
static int opts_read_back(int fd, int idle, const char *who)
{
	struct timeval tv;
	struct linger lg;
	int ka = 0, ki = 0;
	socklen_t l1 = sizeof(tv), l2 = sizeof(lg), l3 = sizeof(ka), l4 = sizeof(ki);

	REQ(getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l1) == 0 && tv.tv_sec == 0 &&
		tv.tv_usec >= 190000 && tv.tv_usec <= 210000,
	    "%s: SO_RCVTIMEO reads %ld.%06ld, expected 0.2", who, (long)tv.tv_sec,
	    (long)tv.tv_usec);
	REQ(getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l2) == 0 && lg.l_onoff && !lg.l_linger,
	    "%s: SO_LINGER reads {%d, %d}, expected {1, 0}", who, lg.l_onoff, lg.l_linger);
	REQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &ka, &l3) == 0 && ka == 1,
	    "%s: SO_KEEPALIVE reads %d", who, ka);
	REQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &ki, &l4) == 0 && ki == idle,
	    "%s: TCP_KEEPIDLE reads %d, expected %d", who, ki, idle);
	return 0;
}

static int opts_set(int fd, int idle)
{
	struct timeval tv = {0, 200000};
	struct linger lg = {1, 0};
	int one = 1;

	REQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0 &&
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0 &&
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) == 0,
	    "setsockopt: %s", ename(errno));
	return 0;
}

/* @fd (with SO_RCVTIMEO 200 ms and SO_LINGER {1, 0}) times out in recv, then its close resets
 * @peer, as the kernel's would. */
static int opts_honoured(int fd, int peer, const char *who)
{
	double t0 = now_sec(), dt;
	ssize_t r;
	char b;

	r = recv(fd, &b, 1, 0);
	dt = now_sec() - t0;
	REQ(r < 0 && errno == EAGAIN && dt >= 0.15 && dt < 1.0,
	    "%s: recv with no data: %zd %s after %.3f s, expected EAGAIN after 0.2 s", who, r,
	    r < 0 ? ename(errno) : "", dt);
	close(fd);
	REQ(poll1(peer, POLLIN, 2000) & (POLLIN | POLLERR | POLLHUP), "%s: peer saw nothing in 2 s",
	    who);
	r = recv(peer, &b, 1, 0);
	REQ(r < 0 && errno == ECONNRESET,
	    "%s: the peer's recv after a close with SO_LINGER {1, 0}: %zd %s, expected ECONNRESET",
	    who, r, r < 0 ? ename(errno) : "EOF");
	close(peer);
	return 0;
}

/* Options set before connect() are the connection's: honoured and read back. */
static int chk_opts_before_connect(void)
{
	struct sockaddr_in sa = loopback(lport);
	int c, s;

	c = socket(AF_INET, SOCK_STREAM, 0);
	REQ(c >= 0, "socket: %s", strerror(errno));
	TRY(opts_set(c, 44));
	REQ(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", ename(errno));
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	TRY(on_transport(c, "client end"));
	TRY(on_transport(s, "server end"));
	TRY(opts_read_back(c, 44, "client"));
	return opts_honoured(c, s, "client");
}

/* An accepted connection inherits its listener's options, set before listen() or after. */
static int chk_listener_opts_inherited(void)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	int l, c, s, idle = 33;

	l = socket(AF_INET, SOCK_STREAM, 0);
	REQ(l >= 0, "socket: %s", strerror(errno));
	TRY(opts_set(l, 5));
	REQ(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 8) == 0 &&
		getsockname(l, (struct sockaddr *)&sa, &len) == 0,
	    "listener: %s", strerror(errno));
	REQ(setsockopt(l, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) == 0,
	    "setsockopt on the listener: %s", ename(errno));
	c = socket(AF_INET, SOCK_STREAM, 0);
	REQ(c >= 0 && connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s",
	    ename(errno));
	s = accept(l, NULL, NULL);
	REQ(s >= 0, "accept: %s", strerror(errno));
	close(l);
	TRY(on_transport(c, "client end"));
	TRY(on_transport(s, "server end"));
	TRY(opts_read_back(s, 33, "accepted"));
	return opts_honoured(s, c, "accepted");
}

/* ---- EINTR per signal: what TCP does is decided by the handler of the signal that came */

static pthread_t eintr_target;
static volatile sig_atomic_t eintr_hits;

static void on_eintr_sig(int sig)
{
	(void)sig;
	eintr_hits++;
}

struct eintr_job {
	int sig, data_fd; /* send @sig to the reader after 150 ms; then a byte on @data_fd (>= 0) */
};

static void *eintr_poker(void *arg)
{
	struct eintr_job *j = arg;

	usleep(150000); /* the reader sleeps in the kernel by now, past any spin */
	pthread_kill(eintr_target, j->sig);
	if (j->data_fd >= 0) {
		usleep(150000);
		(void)!write(j->data_fd, "x", 1);
	}
	return NULL;
}

/* A blocking read on @fd while @sig comes (and data after it when @data). */
static ssize_t eintr_read(int fd, int sig, int data_fd, int *err)
{
	struct eintr_job j = {sig, data_fd};
	pthread_t t;
	ssize_t r;
	char b;

	eintr_target = pthread_self();
	eintr_hits = 0;
	if (pthread_create(&t, NULL, eintr_poker, &j) != 0)
		return -2;
	r = read(fd, &b, 1);
	*err = errno;
	pthread_join(t, NULL);
	return r;
}

static int chk_eintr_per_signal(void)
{
	struct sigaction sa, old1, old2;
	struct timeval tv = {5, 0};
	ssize_t r;
	int c, s, e, rc = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_eintr_sig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, &old1);
	sa.sa_flags = 0;
	sigaction(SIGUSR2, &sa, &old2);
	TRY(pair(&c, &s));
	/* SIGUSR1 has SA_RESTART: the read goes on and returns the byte that comes after it. */
	r = eintr_read(s, SIGUSR1, c, &e);
	if (!(r == 1 && eintr_hits == 1)) {
		prog_msg("read across an SA_RESTART signal: %zd %s (handler ran %d times)", r,
			 r < 0 ? ename(e) : "", (int)eintr_hits);
		rc = -1;
	}
	/* SIGUSR2 has not: EINTR, though another handler has SA_RESTART. */
	r = eintr_read(s, SIGUSR2, -1, &e);
	if (rc == 0 && !(r < 0 && e == EINTR && eintr_hits == 1)) {
		prog_msg("read across a signal without SA_RESTART: %zd %s", r, r < 0 ? ename(e) : "");
		rc = -1;
	}
	/* With SO_RCVTIMEO set, TCP never restarts: EINTR even for SIGUSR1. */
	REQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "setsockopt: %s",
	    ename(errno));
	r = eintr_read(s, SIGUSR1, -1, &e);
	if (rc == 0 && !(r < 0 && e == EINTR)) {
		prog_msg("read with SO_RCVTIMEO across an SA_RESTART signal: %zd %s", r,
			 r < 0 ? ename(e) : "");
		rc = -1;
	}
	sigaction(SIGUSR1, &old1, NULL);
	sigaction(SIGUSR2, &old2, NULL);
	close(c);
	close(s);
	REQ(rc == 0, "EINTR differs from TCP's (above)");
	return 0;
}

/* Flags TCP answers without touching the stream: an empty error queue (EAGAIN), no urgent
 * byte (EINVAL), MSG_FASTOPEN on a connected socket (EISCONN). The bytes stay for the next
 * read. Before, the library read the stream for the first two (and waited when empty), and
 * sent for the third. */
static int chk_flags_answered(void)
{
	char b[8];
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_all(c, "abc", 3));
	TRY(wait_fionread(s, 3, 2000));
	r = recv(s, b, sizeof(b), MSG_ERRQUEUE);
	REQ(r < 0 && errno == EAGAIN, "recv(MSG_ERRQUEUE): %zd %s, expected EAGAIN", r,
	    r < 0 ? ename(errno) : "");
	r = recv(s, b, sizeof(b), MSG_OOB);
	REQ(r < 0 && errno == EINVAL, "recv(MSG_OOB) with no urgent byte: %zd %s, expected EINVAL",
	    r, r < 0 ? ename(errno) : "");
	r = send(c, "x", 1, MSG_FASTOPEN | MSG_NOSIGNAL);
	REQ(r < 0 && errno == EISCONN, "send(MSG_FASTOPEN) connected: %zd %s, expected EISCONN", r,
	    r < 0 ? ename(errno) : "");
	TRY(wait_fionread(s, 3, 200));
	REQ(recv(s, b, sizeof(b), 0) == 3 && memcmp(b, "abc", 3) == 0, "the bytes did not stay");
	close(c);
	close(s);
	return 0;
}

/* A read of 0 bytes: EAGAIN when nothing is there (non-blocking), 0 once something is; a
 * blocking one waits, and says 0 at SO_RCVTIMEO's end. Before, the library said 0 at once. */
static int chk_recv_zero(void)
{
	struct timeval tv = {0, 200000};
	double t0, dt;
	char b;
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	r = recv(s, &b, 0, MSG_DONTWAIT);
	REQ(r < 0 && errno == EAGAIN, "recv of 0, nothing there: %zd %s, expected EAGAIN", r,
	    r < 0 ? ename(errno) : "");
	REQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "setsockopt: %s",
	    ename(errno));
	t0 = now_sec();
	r = recv(s, &b, 0, 0);
	dt = now_sec() - t0;
	REQ(r == 0 && dt >= 0.15 && dt < 1.0,
	    "blocking recv of 0 with SO_RCVTIMEO 0.2 s: %zd %s after %.3f s, expected 0 after it", r,
	    r < 0 ? ename(errno) : "", dt);
	TRY(send_all(c, "z", 1));
	TRY(wait_fionread(s, 1, 2000));
	r = recv(s, &b, 0, MSG_DONTWAIT);
	REQ(r == 0, "recv of 0 with a byte there: %zd %s", r, r < 0 ? ename(errno) : "");
	TRY(wait_fionread(s, 1, 200)); /* (and the byte stays) */
	close(c);
	close(s);
	return 0;
}

/* splice() from a pipe into the socket moves what the pipe holds (not a wait for @n); with
 * SPLICE_F_NONBLOCK an empty pipe says EAGAIN; from anything but a pipe, EINVAL. Before, the
 * library read the pipe until @n and so waited forever for bytes nobody wrote. */
static int chk_splice_in(void)
{
	char b[16], path[] = "/tmp/semantics.XXXXXX";
	int c, s, p[2], f;
	ssize_t r;

	TRY(pair(&c, &s));
	REQ(pipe(p) == 0, "pipe: %s", strerror(errno));
	REQ(write(p[1], "piped", 5) == 5, "write to the pipe: %s", strerror(errno));
	r = splice(p[0], NULL, c, NULL, 100, 0);
	REQ(r == 5, "splice of 100 from a pipe holding 5: %zd %s", r, r < 0 ? ename(errno) : "");
	TRY(recv_exact(s, b, 5));
	REQ(memcmp(b, "piped", 5) == 0, "the peer read other bytes");
	r = splice(p[0], NULL, c, NULL, 100, SPLICE_F_NONBLOCK);
	REQ(r < 0 && errno == EAGAIN, "splice from an empty pipe, SPLICE_F_NONBLOCK: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	f = mkstemp(path);
	REQ(f >= 0 && write(f, "file", 4) == 4 && lseek(f, 0, SEEK_SET) == 0, "temp file: %s",
	    strerror(errno));
	unlink(path);
	r = splice(f, NULL, c, NULL, 4, 0);
	REQ(r < 0 && errno == EINVAL, "splice from a file: %zd %s, expected EINVAL", r,
	    r < 0 ? ename(errno) : "");
	close(f);
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
	return 0;
}

/* Close @fd with SO_LINGER {1, 0} (a reset) after 150 ms. */
static void *reset_later(void *arg)
{
	struct linger lg = {1, 0};
	int fd = *(int *)arg;

	usleep(150000);
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
	return NULL;
}

/* A reset that ends a recv(MSG_WAITALL) which had bytes: the bytes now, ECONNRESET at the
 * next recv, then EOF. Before, the library reported the reset to nobody (the next recv
 * said EOF): the peer's abort looked like a clean end. */
static int chk_waitall_reset(void)
{
	pthread_t t;
	char b[10];
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	TRY(send_all(c, "abc", 3));
	REQ(pthread_create(&t, NULL, reset_later, &c) == 0, "pthread_create failed");
	r = recv(s, b, sizeof(b), MSG_WAITALL);
	pthread_join(t, NULL);
	REQ(r == 3, "recv(MSG_WAITALL) of 10 ended by a reset after 3: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	r = recv(s, b, sizeof(b), 0);
	REQ(r < 0 && errno == ECONNRESET, "the recv after it: %zd %s, expected ECONNRESET", r,
	    r < 0 ? ename(errno) : "");
	r = recv(s, b, sizeof(b), 0);
	REQ(r == 0, "the recv after ECONNRESET: %zd %s, expected 0", r, r < 0 ? ename(errno) : "");
	close(s);
	return 0;
}

/* getpeername() of @fd fails with ENOTCONN within 1 s (TCP's state becomes CLOSE once the
 * last ACK is in). */
static int peer_gone(int fd, const char *who)
{
	struct sockaddr_storage ss;
	socklen_t len;
	double end = now_sec() + 1;
	int r;

	do {
		len = sizeof(ss);
		r = getpeername(fd, (struct sockaddr *)&ss, &len);
		if (r < 0)
			break;
		usleep(1000);
	} while (now_sec() < end);
	REQ(r < 0 && errno == ENOTCONN, "%s: getpeername once the connection ended: %d %s", who, r,
	    r < 0 ? ename(errno) : "");
	REQ(shutdown(fd, SHUT_RDWR) < 0 && errno == ENOTCONN,
	    "%s: shutdown once the connection ended: %s, expected ENOTCONN", who, ename(errno));
	return 0;
}

/* A pair whose server end closed with SO_LINGER {1, 0}, the reset seen by the client. */
static int reset_pair(int *c)
{
	struct linger lg = {1, 0};
	int s;

	TRY(pair(c, &s));
	REQ(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "setsockopt: %s",
	    ename(errno));
	close(s);
	REQ(poll1(*c, POLLIN, 2000) & (POLLIN | POLLERR | POLLHUP), "the reset not seen in 2 s");
	return 0;
}

/* Once both FINs went, or a reset came, TCP's socket is CLOSE: no peer name, nothing to
 * shut down (ENOTCONN). The library answered both as for a live connection. */
static int chk_names_after_end(void)
{
	char b[4];
	ssize_t r;
	int c, s;

	TRY(pair(&c, &s));
	REQ(shutdown(c, SHUT_WR) == 0, "shutdown: %s", ename(errno));
	TRY(expect_eof(s, "server"));
	REQ(shutdown(s, SHUT_WR) == 0, "shutdown: %s", ename(errno));
	TRY(expect_eof(c, "client"));
	TRY(peer_gone(c, "client after both FINs"));
	TRY(peer_gone(s, "server after both FINs"));
	close(c);
	close(s);
	TRY(reset_pair(&c));
	r = recv(c, b, sizeof(b), 0);
	REQ(r < 0 && errno == ECONNRESET, "recv after the reset: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	TRY(peer_gone(c, "client after a reset"));
	close(c);
	return 0;
}

/* TCP keeps one pending error: the first call of any kind reports the reset, and then a
 * recv says EOF and a send EPIPE; SO_ERROR reads 0 once it was reported. The library
 * reported it once per direction (recv ECONNRESET, then send ECONNRESET again). */
static int chk_reset_reported_once(void)
{
	char b[4];
	ssize_t r;
	int c, e = -1;
	socklen_t el = sizeof(e);

	TRY(reset_pair(&c));
	r = recv(c, b, sizeof(b), 0);
	REQ(r < 0 && errno == ECONNRESET, "recv after the reset: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	r = send(c, "x", 1, MSG_NOSIGNAL);
	REQ(r < 0 && errno == EPIPE, "send after recv reported the reset: %zd %s, expected EPIPE", r,
	    r < 0 ? ename(errno) : "");
	close(c);
	TRY(reset_pair(&c));
	r = send(c, "x", 1, MSG_NOSIGNAL);
	REQ(r < 0 && errno == ECONNRESET, "send after the reset: %zd %s", r,
	    r < 0 ? ename(errno) : "");
	REQ(getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0,
	    "SO_ERROR after send reported the reset: %s, expected 0", ename(e));
	r = recv(c, b, sizeof(b), 0);
	REQ(r == 0, "recv after send reported the reset: %zd %s, expected 0", r,
	    r < 0 ? ename(errno) : "");
	close(c);
	return 0;
}

/* A signal to this thread after 150 ms (eintr_poker without data). */
static int eintr_arm(pthread_t *t, struct eintr_job *j)
{
	eintr_target = pthread_self();
	eintr_hits = 0;
	return pthread_create(t, NULL, eintr_poker, j) == 0 ? 0 : -1;
}

/*
 * A blocking call that moved bytes already returns them at a signal, SA_RESTART or not: TCP
 * restarts only a call that moved nothing. A recv(MSG_WAITALL) of 10 with 3 there returns 3;
 * a blocking send larger than the window returns what it sent. Before, the library restarted
 * both: the recv then waited for 7 more bytes that never came, the send for a reader.
 */
static int chk_eintr_after_progress(void)
{
	static char big[16 << 20];
	struct eintr_job j = {SIGUSR1, -1};
	struct sigaction sa, old;
	pthread_t t;
	ssize_t r;
	char b[10];
	int c, s, e;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_eintr_sig;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, &old);
	TRY(pair(&c, &s));
	TRY(send_all(c, "abc", 3));
	REQ(eintr_arm(&t, &j) == 0, "pthread_create failed");
	r = recv(s, b, sizeof(b), MSG_WAITALL);
	e = errno;
	pthread_join(t, NULL);
	REQ(r == 3 && eintr_hits == 1, "recv(MSG_WAITALL) of 10 with 3 there across an SA_RESTART "
	    "signal: %zd %s, expected 3", r, r < 0 ? ename(e) : "");
	REQ(eintr_arm(&t, &j) == 0, "pthread_create failed");
	r = send(c, big, sizeof(big), MSG_NOSIGNAL);
	e = errno;
	pthread_join(t, NULL);
	REQ(r > 0 && (size_t)r < sizeof(big) && eintr_hits == 1,
	    "a blocking send of 16 MiB nobody reads across an SA_RESTART signal: %zd %s, expected "
	    "what it sent",
	    r, r < 0 ? ename(e) : "");
	sigaction(SIGUSR1, &old, NULL);
	close(c);
	close(s);
	return 0;
}

static int chk_so_sndtimeo(void)
{
	static char big[262144];
	struct timeval tv = {0, 200000};
	double t0, dt, end = now_sec() + 2;
	size_t total = 0;
	ssize_t r;
	int c, s, short_sends;

	TRY(pair(&c, &s));
	REQ(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0, "setsockopt: %s",
	    ename(errno));
	/* Blocking sends until one comes back short (the timeout hit with the window full). */
	for (;;) {
		REQ(now_sec() < end, "still sending after %zu bytes and 4 s", total);
		r = send(c, big, sizeof(big), MSG_NOSIGNAL);
		if (r < 0) {
			REQ(errno == EAGAIN, "send while filling: %s", ename(errno));
			break;
		}
		total += (size_t)r;
		if ((size_t)r < sizeof(big))
			break;
		REQ(total < (512u << 20), "512 MiB sent and the window never filled");
	}
	/* Then blocking sends return short (the timeout hit after some bytes went) until one
	 * finds no room at all: -1 EAGAIN after waiting the timeout. Kernel TCP may still grow
	 * its buffers meanwhile (autotuning: a send can then take a whole buffer again), so
	 * only the count of sends that got anything is bounded. */
	for (short_sends = 0;; short_sends++) {
		REQ(short_sends < 64, "64 sends after the window filled all returned some bytes");
		REQ(now_sec() < end + 2.5, "still sending after the window filled, %zu bytes", total);
		t0 = now_sec();
		r = send(c, big, sizeof(big), MSG_NOSIGNAL);
		dt = now_sec() - t0;
		if (r < 0)
			break;
		REQ(r > 0, "send on a full window returned %zd", r);
		total += (size_t)r;
	}
	REQ(errno == EAGAIN, "send on a full window with SO_SNDTIMEO: %s, expected EAGAIN",
	    ename(errno));
	REQ(dt >= 0.15 && dt < 1.5, "send timed out after %.3f s, expected ~0.2", dt);
	close(c);
	close(s);
	return 0;
}

static int getint(int fd, int level, int name, int *v)
{
	socklen_t len = sizeof(*v);

	REQ(getsockopt(fd, level, name, v, &len) == 0, "getsockopt(%d, %d): %s", level, name,
	    ename(errno));
	return 0;
}

static int chk_tcp_nodelay(void)
{
	int c, s, one = 1, zero = 0, v;

	TRY(pair(&c, &s));
	REQ(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0, "set: %s",
	    ename(errno));
	TRY(getint(c, IPPROTO_TCP, TCP_NODELAY, &v));
	REQ(v != 0, "TCP_NODELAY reads back 0 after setting 1");
	REQ(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof(zero)) == 0, "unset: %s",
	    ename(errno));
	TRY(getint(c, IPPROTO_TCP, TCP_NODELAY, &v));
	REQ(v == 0, "TCP_NODELAY reads back %d after setting 0", v);
	REQ(setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0, "set (server): %s",
	    ename(errno));
	TRY(getint(s, IPPROTO_TCP, TCP_NODELAY, &v));
	REQ(v != 0, "server TCP_NODELAY reads back 0");
	close(c);
	close(s);
	return 0;
}

static int chk_so_bufs(void)
{
	int c, s, want = 65536, v;

	TRY(pair(&c, &s));
	REQ(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want)) == 0, "set SO_RCVBUF: %s",
	    ename(errno));
	TRY(getint(c, SOL_SOCKET, SO_RCVBUF, &v));
	REQ(v >= want && v <= 4 * want, "SO_RCVBUF reads back %d after setting %d", v, want);
	REQ(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)) == 0, "set SO_SNDBUF: %s",
	    ename(errno));
	TRY(getint(c, SOL_SOCKET, SO_SNDBUF, &v));
	REQ(v >= want && v <= 4 * want, "SO_SNDBUF reads back %d after setting %d", v, want);
	TRY(getint(s, SOL_SOCKET, SO_TYPE, &v));
	REQ(v == SOCK_STREAM, "SO_TYPE %d", v);
	TRY(getint(s, SOL_SOCKET, SO_DOMAIN, &v));
	REQ(v == AF_INET, "SO_DOMAIN %d", v);
	TRY(getint(s, SOL_SOCKET, SO_PROTOCOL, &v));
	REQ(v == IPPROTO_TCP, "SO_PROTOCOL %d", v);
	TRY(getint(s, SOL_SOCKET, SO_ACCEPTCONN, &v));
	REQ(v == 0, "SO_ACCEPTCONN %d on a connected socket", v);
	close(c);
	close(s);
	return 0;
}

static int name_of(int fd, int peer, struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int r;

	memset(sa, 0, sizeof(*sa));
	r = peer ? getpeername(fd, (struct sockaddr *)sa, &len)
		 : getsockname(fd, (struct sockaddr *)sa, &len);
	REQ(r == 0, "%s: %s", peer ? "getpeername" : "getsockname", ename(errno));
	REQ(len == sizeof(*sa) && sa->sin_family == AF_INET, "%s: length %u family %d",
	    peer ? "getpeername" : "getsockname", (unsigned)len, sa->sin_family);
	return 0;
}

static const char *sastr(const struct sockaddr_in *sa)
{
	static char b[4][48];
	static int i;
	char a[INET_ADDRSTRLEN];

	i = (i + 1) % 4;
	inet_ntop(AF_INET, &sa->sin_addr, a, sizeof(a));
	snprintf(b[i], sizeof(b[i]), "%s:%d", a, ntohs(sa->sin_port));
	return b[i];
}

static int chk_names(void)
{
	struct sockaddr_in cs, cp, ss, sp;
	int c, s;

	TRY(pair(&c, &s));
	TRY(name_of(c, 0, &cs));
	TRY(name_of(c, 1, &cp));
	TRY(name_of(s, 0, &ss));
	TRY(name_of(s, 1, &sp));
	REQ(cs.sin_port != 0 && ss.sin_port != 0, "a port is zero: client %s server %s", sastr(&cs),
	    sastr(&ss));
	REQ(ntohs(cp.sin_port) == lport && ntohs(ss.sin_port) == lport,
	    "client's peer %s / server's name %s, listener port %d", sastr(&cp), sastr(&ss), lport);
	REQ(cs.sin_port == sp.sin_port && cs.sin_addr.s_addr == sp.sin_addr.s_addr,
	    "client getsockname %s != server getpeername %s", sastr(&cs), sastr(&sp));
	REQ(cp.sin_port == ss.sin_port && cp.sin_addr.s_addr == ss.sin_addr.s_addr,
	    "client getpeername %s != server getsockname %s", sastr(&cp), sastr(&ss));
	REQ(cs.sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
		ss.sin_addr.s_addr == htonl(INADDR_LOOPBACK),
	    "addresses not 127.0.0.1: %s %s", sastr(&cs), sastr(&ss));
	close(c);
	close(s);
	return 0;
}

static int free_fd_above(int from)
{
	int fd;

	for (fd = from; fd < from + 1000; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
			return fd;
	return -1;
}

static int chk_dup(void)
{
	char b[16];
	int c, s, d1, d2, d3, t2, t3, ds, fl;

	TRY(pair(&c, &s));
	d1 = dup(c);
	REQ(d1 >= 0, "dup: %s", ename(errno));
	t2 = free_fd_above(40);
	d2 = dup2(c, t2);
	REQ(d2 == t2, "dup2 onto %d returned %d (%s)", t2, d2, ename(errno));
	t3 = free_fd_above(t2 + 1);
	d3 = dup3(c, t3, O_CLOEXEC);
	REQ(d3 == t3, "dup3 onto %d returned %d (%s)", t3, d3, ename(errno));
	fl = fcntl(d3, F_GETFD);
	REQ(fl >= 0 && (fl & FD_CLOEXEC), "dup3(O_CLOEXEC) target has F_GETFD 0x%x", fl);
	fl = fcntl(d2, F_GETFD);
	REQ(fl == 0, "dup2 target has F_GETFD 0x%x, expected 0", fl);
	TRY(on_transport(d1, "dup"));
	TRY(send_all(d1, "A", 1));
	TRY(recv_exact(s, b, 1));
	REQ(b[0] == 'A', "byte written on the dup not read by the peer");
	REQ(close(c) == 0, "close original: %s", ename(errno));
	TRY(send_all(d2, "B", 1));
	TRY(send_all(d3, "C", 1));
	TRY(recv_exact(s, b, 2));
	REQ(memcmp(b, "BC", 2) == 0, "writes on dup2/dup3 after closing the original: '%.2s'", b);
	TRY(send_all(s, "xyz", 3));
	TRY(recv_exact(d1, b, 1));
	TRY(recv_exact(d2, b + 1, 1));
	TRY(recv_exact(d3, b + 2, 1));
	REQ(memcmp(b, "xyz", 3) == 0, "reads through the dups: '%.3s'", b);
	close(d1);
	close(d2);
	if (poll1(s, POLLIN, 200) & POLLIN) {
		ssize_t r = recv(s, b, sizeof(b), MSG_DONTWAIT);

		FAILF("the peer polled readable while a dup was still open (recv(MSG_DONTWAIT) "
		      "then gave %zd %s)",
		      r,
		      r < 0    ? ename(errno)
		      : r == 0 ? "EOF"
			       : "bytes");
	}
	TRY(send_all(d3, "D", 1));
	TRY(recv_exact(s, b, 1));
	REQ(b[0] == 'D', "last dup's byte wrong");
	/* Server side: the dup keeps working after the original is closed. */
	ds = dup(s);
	REQ(ds >= 0, "dup (server): %s", ename(errno));
	close(s);
	TRY(send_all(d3, "E", 1));
	TRY(recv_exact(ds, b, 1));
	REQ(b[0] == 'E', "server dup read wrong byte");
	close(d3);
	TRY(expect_eof(ds, "peer after the last dup closed"));
	close(ds);
	return 0;
}

static int recv_would_block(int fd, const char *how)
{
	double t0 = now_sec();
	ssize_t r;
	char b;

	r = recv(fd, &b, 1, 0);
	REQ(r < 0 && errno == EAGAIN, "recv after %s: %zd %s, expected EAGAIN", how, r,
	    r < 0 ? ename(errno) : "");
	REQ(now_sec() - t0 < 0.1, "recv after %s took %.3f s", how, now_sec() - t0);
	return 0;
}

/* recv blocks again: with a 100 ms SO_RCVTIMEO it returns EAGAIN only after waiting. */
static int recv_blocks(int fd, const char *how)
{
	struct timeval tv = {0, 100000}, off = {0, 0};
	double t0, dt;
	ssize_t r;
	char b;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	t0 = now_sec();
	r = recv(fd, &b, 1, 0);
	dt = now_sec() - t0;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &off, sizeof(off));
	REQ(r < 0 && errno == EAGAIN && dt >= 0.08,
	    "after %s recv returned %zd %s in %.3f s "
	    "(expected to block until SO_RCVTIMEO)",
	    how, r, r < 0 ? ename(errno) : "", dt);
	return 0;
}

static int chk_nonblock_flags(void)
{
	int c, s, d, on = 1, off = 0;

	TRY(pair(&c, &s));
	TRY(set_nonblock(s, 1));
	REQ(fcntl(s, F_GETFL) & O_NONBLOCK, "F_GETFL lacks O_NONBLOCK after F_SETFL");
	TRY(recv_would_block(s, "fcntl(O_NONBLOCK)"));
	TRY(set_nonblock(s, 0));
	TRY(recv_blocks(s, "clearing O_NONBLOCK"));
	REQ(ioctl(s, FIONBIO, &on) == 0, "ioctl(FIONBIO, 1): %s", ename(errno));
	REQ(fcntl(s, F_GETFL) & O_NONBLOCK, "F_GETFL lacks O_NONBLOCK after FIONBIO");
	TRY(recv_would_block(s, "ioctl(FIONBIO, 1)"));
	REQ(ioctl(s, FIONBIO, &off) == 0, "ioctl(FIONBIO, 0): %s", ename(errno));
	REQ(!(fcntl(s, F_GETFL) & O_NONBLOCK), "O_NONBLOCK still set after FIONBIO 0");
	TRY(recv_blocks(s, "ioctl(FIONBIO, 0)"));
	/* O_NONBLOCK belongs to the open file description: a dup shares it. */
	d = dup(s);
	REQ(d >= 0, "dup: %s", ename(errno));
	TRY(set_nonblock(d, 1));
	TRY(recv_would_block(s, "fcntl(O_NONBLOCK) on a dup"));
	TRY(set_nonblock(s, 0));
	TRY(recv_blocks(d, "clearing O_NONBLOCK through the original"));
	/* Data still flows. */
	TRY(send_all(c, "k", 1));
	TRY(recv_exact(d, (char[1]){0}, 1));
	close(d);
	close(c);
	close(s);
	return 0;
}

static int fd_flags(int fd, const char *what, int nonblock, int cloexec)
{
	int fl = fcntl(fd, F_GETFL), fd_fl = fcntl(fd, F_GETFD);

	REQ(fl >= 0 && fd_fl >= 0, "%s: fcntl: %s", what, ename(errno));
	REQ(!!(fl & O_NONBLOCK) == nonblock, "%s: O_NONBLOCK is %s, expected %s", what,
	    (fl & O_NONBLOCK) ? "set" : "clear", nonblock ? "set" : "clear");
	REQ(!!(fd_fl & FD_CLOEXEC) == cloexec, "%s: FD_CLOEXEC is %s, expected %s", what,
	    (fd_fl & FD_CLOEXEC) ? "set" : "clear", cloexec ? "set" : "clear");
	return 0;
}

static int chk_type_flags(void)
{
	char b;
	int c, s;

	TRY(pair_flags(&c, &s, SOCK_NONBLOCK | SOCK_CLOEXEC, SOCK_NONBLOCK | SOCK_CLOEXEC));
	TRY(fd_flags(c, "socket(SOCK_NONBLOCK|SOCK_CLOEXEC), connected", 1, 1));
	TRY(fd_flags(s, "accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)", 1, 1));
	TRY(recv_would_block(c, "SOCK_NONBLOCK (client)"));
	TRY(recv_would_block(s, "SOCK_NONBLOCK (server)"));
	TRY(send_all(c, "f", 1));
	REQ(poll1(s, POLLIN, 2000) & POLLIN, "not readable");
	REQ(read(s, &b, 1) == 1 && b == 'f', "read");
	close(c);
	close(s);
	TRY(pair_flags(&c, &s, SOCK_CLOEXEC, SOCK_NONBLOCK));
	TRY(fd_flags(c, "socket(SOCK_CLOEXEC), connected", 0, 1));
	TRY(fd_flags(s, "accept4(SOCK_NONBLOCK)", 1, 0));
	close(c);
	close(s);
	TRY(pair_flags(&c, &s, SOCK_NONBLOCK, SOCK_CLOEXEC));
	TRY(fd_flags(c, "socket(SOCK_NONBLOCK), connected", 1, 0));
	TRY(fd_flags(s, "accept4(SOCK_CLOEXEC)", 0, 1));
	close(c);
	close(s);
	TRY(pair_flags(&c, &s, 0, 0));
	TRY(fd_flags(c, "socket(0), connected", 0, 0));
	TRY(fd_flags(s, "accept4(0)", 0, 0));
	close(c);
	close(s);
	return 0;
}

static int lowest_free(void)
{
	int fd = open("/dev/null", O_RDONLY);

	if (fd >= 0)
		close(fd);
	return fd;
}

static int lowest_fd_round(int round)
{
	struct sockaddr_in sa = loopback(lport);
	int base = lowest_free(), c, s, n;
	char b[4];

	REQ(base >= 0, "open /dev/null: %s", strerror(errno));
	c = socket(AF_INET, SOCK_STREAM, 0);
	REQ(c == base, "round %d: socket() got fd %d, lowest free was %d", round, c, base);
	REQ(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", ename(errno));
	n = lowest_free();
	REQ(n == base + 1,
	    "round %d: after connect the lowest free fd is %d, expected %d (the "
	    "library holds a low number)",
	    round, n, base + 1);
	s = accept(lfd, NULL, NULL);
	REQ(s == base + 1, "round %d: accept() got fd %d, expected %d", round, s, base + 1);
	TRY(on_transport(c, "client end"));
	TRY(on_transport(s, "server end"));
	TRY(send_all(c, "ab", 2));
	TRY(recv_exact(s, b, 2));
	TRY(send_all(s, "cd", 2));
	TRY(recv_exact(c, b, 2));
	n = lowest_free();
	REQ(n == base + 2, "round %d: after data the lowest free fd is %d, expected %d", round, n,
	    base + 2);
	close(c);
	n = lowest_free();
	REQ(n == base, "round %d: after closing the client fd %d the lowest free fd is %d", round,
	    base, n);
	close(s);
	n = lowest_free();
	REQ(n == base, "round %d: after closing both the lowest free fd is %d, expected %d", round,
	    n, base);
	return 0;
}

static int chk_lowest_fd(void)
{
	int c[3], s[3], i;

	/* First connection of the process (lazily created library state), then after others. */
	TRY(lowest_fd_round(1));
	for (i = 0; i < 3; i++)
		TRY(pair(&c[i], &s[i]));
	for (i = 0; i < 3; i++) {
		close(c[i]);
		close(s[i]);
	}
	TRY(lowest_fd_round(2));
	return 0;
}

static int chk_nonblocking_connect(void)
{
	struct sockaddr_in sa = loopback(lport);
	char b[8];
	short ev;
	int c, s, r, e;

	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	REQ(c >= 0, "socket: %s", ename(errno));
	r = connect(c, (struct sockaddr *)&sa, sizeof(sa));
	e = errno;
	REQ(r == 0 || e == EINPROGRESS, "non-blocking connect: %s", ename(e));
	ev = poll1(c, POLLOUT, 2000);
	REQ((ev & POLLOUT) && !(ev & (POLLERR | POLLHUP)),
	    "poll after non-blocking connect: revents 0x%x, expected POLLOUT", ev);
	TRY(so_error(c, &e));
	REQ(e == 0, "SO_ERROR after connecting: %s", ename(e));
	/* Linux: the next connect() reports the completion (0) or EISCONN, then EISCONN. */
	r = connect(c, (struct sockaddr *)&sa, sizeof(sa));
	REQ(r == 0 || errno == EISCONN, "second connect: %d %s, expected 0 or EISCONN", r,
	    ename(errno));
	r = connect(c, (struct sockaddr *)&sa, sizeof(sa));
	REQ(r < 0 && errno == EISCONN, "third connect: %d %s, expected EISCONN", r, ename(errno));
	s = accept(lfd, NULL, NULL);
	REQ(s >= 0, "accept: %s", ename(errno));
	TRY(on_transport(c, "client end"));
	TRY(on_transport(s, "server end"));
	TRY(send_all(c, "hi", 2));
	TRY(recv_exact(s, b, 2));
	REQ(memcmp(b, "hi", 2) == 0, "server read wrong bytes");
	TRY(send_all(s, "there", 5));
	REQ(poll1(c, POLLIN, 2000) & POLLIN, "client not readable");
	TRY(wait_fionread(c, 5, 2000));
	REQ(read(c, b, sizeof(b)) == 5 && memcmp(b, "there", 5) == 0, "client read wrong bytes");
	close(c);
	close(s);
	return 0;
}

static int chk_connect_refused(void)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	int hold, c, r, e;

	/* A bound, not listening socket holds a port nobody accepts on. */
	hold = socket(AF_INET, SOCK_STREAM, 0);
	REQ(hold >= 0 && bind(hold, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		getsockname(hold, (struct sockaddr *)&sa, &len) == 0,
	    "bind: %s", ename(errno));
	c = socket(AF_INET, SOCK_STREAM, 0);
	r = connect(c, (struct sockaddr *)&sa, sizeof(sa));
	e = errno;
	REQ(r < 0 && e == ECONNREFUSED, "connect to a closed port: %d %s", r, ename(e));
	close(c);
	close(hold);
	return 0;
}

static const struct check checks[] = {
    {"lowest_fd", chk_lowest_fd},
    {"blocking_io", chk_blocking_io},
    {"nonblocking_io", chk_nonblocking_io},
    {"partial_reads", chk_partial_reads},
    {"readv_writev", chk_readv_writev},
    {"sendmsg_recvmsg", chk_sendmsg_recvmsg},
    {"msg_peek", chk_msg_peek},
    {"msg_waitall", chk_msg_waitall},
    {"msg_dontwait", chk_msg_dontwait},
    {"msg_nosignal_epipe", chk_msg_nosignal},
    {"sigpipe_without_nosignal", chk_sigpipe},
    {"shut_wr", chk_shut_wr},
    {"shut_rd", chk_shut_rd},
    {"shut_rdwr", chk_shut_rdwr},
    {"close_in_flight", chk_close_in_flight},
    {"close_unread_resets", chk_close_unread_resets},
    {"eof_repeated", chk_eof_repeated},
    {"so_error", chk_so_error},
    {"fionread", chk_fionread},
    {"so_rcvtimeo", chk_so_rcvtimeo},
    {"so_sndtimeo", chk_so_sndtimeo},
    {"opts_before_connect", chk_opts_before_connect},
    {"listener_opts_inherited", chk_listener_opts_inherited},
    {"eintr_per_signal", chk_eintr_per_signal},
    {"eintr_after_progress", chk_eintr_after_progress},
    {"flags_answered", chk_flags_answered},
    {"recv_zero", chk_recv_zero},
    {"splice_in", chk_splice_in},
    {"waitall_reset", chk_waitall_reset},
    {"names_after_end", chk_names_after_end},
    {"reset_reported_once", chk_reset_reported_once},
    {"tcp_nodelay", chk_tcp_nodelay},
    {"so_rcvbuf_sndbuf", chk_so_bufs},
    {"sockname_peername", chk_names},
    {"dup_dup2_dup3", chk_dup},
    {"nonblock_fcntl_ioctl", chk_nonblock_flags},
    {"sock_type_flags", chk_type_flags},
    {"nonblocking_connect", chk_nonblocking_connect},
    {"connect_refused", chk_connect_refused},
};

#define NCHECKS ((int)(sizeof(checks) / sizeof(checks[0])))

/* Run one check in a child; 0 = ok. The child prints its own line. */
int main(int argc, char **argv)
{
	/* SIGPIPE stays default: checks assert that it is delivered (and not with NOSIGNAL). */
	return run_checks(argc, argv, checks, NCHECKS, CHECK_SECS, 0);
}
