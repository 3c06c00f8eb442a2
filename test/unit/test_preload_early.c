/*
 * Unit tests for the preload wrappers linked into this executable (rsk_preload_obj), so its
 * own socket/read/write/close/... calls go through them: I/O from a constructor that runs
 * before the library's, lazy resolution after the table is wiped, socket tracking across
 * close and the dup family, and the kernel connection counters for connect/accept.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/fdtab.h"
#include "base/log.h"
#include "base/fdhide.h"
#include "preload.h"
#include "base/real.h"
#include "sock/sock.h"
#include "base/stats.h"

/* ---- before the library constructor ---- */

static int early_ran;
static int early_table_was_empty;  /* rsk_real had nothing resolved yet */
static int early_uninitialised;    /* rsk_init had not run yet */
static int early_unix_io_ok;       /* socketpair + write + read + close through the wrappers */
static int early_unix_untracked;   /* the AF_UNIX pair was not put in the fd table */
static int early_table_filled;     /* the wrappers filled rsk_real on their own */
static int early_still_uninit;     /* the data calls did not need rsk_init */
static int early_tcp_tracked;      /* socket(AF_INET) tracked it (running rsk_init itself) */
static int early_tcp_untracked;    /* close() untracked it */

__attribute__((constructor(101))) static void early_constructor(void)
{
	char buf[8] = {0};
	int sv[2], fd, ok;
	uintptr_t v;

	early_ran = 1;
	early_table_was_empty = rsk_real.socketpair == NULL && rsk_real.read == NULL &&
				rsk_real.write == NULL && rsk_real.close == NULL;
	early_uninitialised = !__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE);

	ok = socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0;
	ok = ok && write(sv[0], "early", 5) == 5;
	ok = ok && read(sv[1], buf, sizeof(buf)) == 5 && memcmp(buf, "early", 5) == 0;
	if (ok)
		early_unix_untracked = rsk_fdtab_load(sv[0]) == 0 && rsk_fdtab_load(sv[1]) == 0;
	ok = ok && close(sv[0]) == 0;
	ok = ok && close(sv[1]) == 0;
	early_unix_io_ok = ok;
	early_table_filled = rsk_real.read != NULL && rsk_real.socketpair != NULL;
	early_still_uninit = !__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE);

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return;
	v = rsk_fdtab_load(fd);
	early_tcp_tracked = v != 0 && (v & RSK_FDTAB_TAG_KERNEL) &&
			    __atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE);
	early_tcp_untracked = close(fd) == 0 && rsk_fdtab_load(fd) == 0;
}

static void test_early_constructor(void **state)
{
	(void)state;
	assert_true(early_ran);
	assert_true(early_table_was_empty);
	assert_true(early_uninitialised);
	assert_true(early_unix_io_ok);
	assert_true(early_unix_untracked);
	assert_true(early_table_filled);
	assert_true(early_still_uninit);
	assert_true(early_tcp_tracked);
	assert_true(early_tcp_untracked);
	/* And the library's own constructor (or the early socket()) did initialise. */
	assert_int_equal(__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE), 1);
}

/* ---- helpers: loopback TCP through the wrappers ---- */

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A listener on 127.0.0.1:<ephemeral> created with @mk_socket; its port in @port. */
static int listen_with(int (*mk_socket)(int, int, int), uint16_t *port)
{
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	int fd = mk_socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	assert_true(*port != 0);
	return fd;
}

static int listen_loopback(uint16_t *port)
{
	return listen_with(socket, port);
}

static int connect_loopback(uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void read_full(int fd, char *buf, size_t n)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = read(fd, buf + got, n - got);
		assert_true(r > 0);
		got += (size_t)r;
	}
}

static void write_full(int fd, const char *buf, size_t n)
{
	size_t done = 0;
	ssize_t r;

	while (done < n) {
		r = write(fd, buf + done, n - done);
		assert_true(r > 0);
		done += (size_t)r;
	}
}

static struct rsk_sock *sock_of(int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);

	return v ? rsk_fdtab_ptr(v) : NULL;
}

static void assert_tracked_kernel(int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);

	if (v == 0)
		fail_msg("fd %d is not tracked", fd);
	assert_int_equal(v & RSK_FDTAB_TAG_KERNEL, RSK_FDTAB_TAG_KERNEL);
	assert_false(rsk_fdtab_is_accel(v));
}

static int null_members(void)
{
	int n = 0;

#define COUNT_NULL(ret, name, params) n += rsk_real.name == NULL;
	RSK_REAL_SYMBOLS(COUNT_NULL)
#undef COUNT_NULL
	return n;
}

/* ---- lazy resolution through the wrappers ---- */

static void test_lazy_round_trip(void **state)
{
	struct sockaddr_in a;
	struct pollfd pfd;
	struct iovec iov[2];
	char buf[64] = {0};
	uint16_t port;
	int lfd, cfd, afd, n;

	(void)state;
	rsk_real_reset();
	n = null_members();
	assert_true(n > 40);
	assert_null(rsk_real.socket);
	assert_null(rsk_real.read);

	/* No init call: the first wrapper resolves what it needs. */
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	assert_int_equal(null_members(), 0);
	/* The real functions are libc's (or a sanitizer's in front of it), never the wrappers
	 * this executable defines: that would recurse forever. */
	assert_true((void *)rsk_real.socket != (void *)socket);
	assert_true((void *)rsk_real.read != (void *)read);
	assert_true((void *)rsk_real.close != (void *)close);
	assert_ptr_equal((void *)rsk_real.read, dlsym(RTLD_NEXT, "read"));
	assert_ptr_equal((void *)rsk_real.connect, dlsym(RTLD_NEXT, "connect"));

	a = loopback(0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	{
		socklen_t len = sizeof(a);

		assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	}
	port = ntohs(a.sin_port);

	rsk_real_reset(); /* and again, now between connect and accept */
	cfd = connect_loopback(port);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);

	assert_int_equal(write(cfd, "ping", 4), 4);
	pfd = (struct pollfd){.fd = afd, .events = POLLIN};
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	assert_true(pfd.revents & POLLIN);
	assert_int_equal(read(afd, buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "ping", 4);

	assert_int_equal(send(afd, "pong!", 5, 0), 5);
	assert_int_equal(recv(cfd, buf, 5, MSG_WAITALL), 5);
	assert_memory_equal(buf, "pong!", 5);

	iov[0] = (struct iovec){.iov_base = "vec", .iov_len = 3};
	iov[1] = (struct iovec){.iov_base = "tor", .iov_len = 3};
	assert_int_equal(writev(cfd, iov, 2), 6);
	assert_int_equal(recv(afd, buf, 6, MSG_WAITALL), 6);
	assert_memory_equal(buf, "vector", 6);

	/* Nothing left to read: poll with a zero timeout says so. */
	pfd = (struct pollfd){.fd = cfd, .events = POLLIN};
	assert_int_equal(poll(&pfd, 1, 0), 0);

	assert_int_equal(close(cfd), 0);
	assert_int_equal(read(afd, buf, sizeof(buf)), 0); /* EOF after the peer's close */
	assert_int_equal(close(afd), 0);
	assert_int_equal(close(lfd), 0);
	errno = 0;
	assert_int_equal(close(lfd), -1);
	assert_int_equal(errno, EBADF);
}

/* ---- tracking ---- */

static void test_socket_tracking(void **state)
{
	int fd, ufd, dfd, nfd;

	(void)state;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_tracked_kernel(fd);
	assert_int_equal(sock_of(fd)->domain, AF_INET);
	assert_int_equal(sock_of(fd)->state, RSK_SOCK_NEW);
	assert_int_equal(rdmasock_fd_transport(fd), RDMASOCK_TRANSPORT_KERNEL);
	assert_int_equal(close(fd), 0);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	errno = 0;
	assert_int_equal(rdmasock_fd_transport(fd), -1);
	assert_int_equal(errno, EBADF);

	/* Flags in the type still make it a stream socket. */
	nfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(nfd >= 0);
	assert_tracked_kernel(nfd);
	assert_int_equal(close(nfd), 0);
	assert_int_equal(rsk_fdtab_load(nfd), 0);

	/* Not ours: AF_UNIX streams and UDP. */
	ufd = socket(AF_UNIX, SOCK_STREAM, 0);
	dfd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(ufd >= 0 && dfd >= 0);
	assert_int_equal(rsk_fdtab_load(ufd), 0);
	assert_int_equal(rsk_fdtab_load(dfd), 0);
	assert_int_equal(close(ufd), 0);
	assert_int_equal(close(dfd), 0);

	/* IPv6 when the host has it. */
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd >= 0) {
		assert_tracked_kernel(fd);
		assert_int_equal(sock_of(fd)->domain, AF_INET6);
		assert_int_equal(close(fd), 0);
		assert_int_equal(rsk_fdtab_load(fd), 0);
	}
}

static void test_dup_family(void **state)
{
	struct rsk_sock *s;
	int fd, d1, d2, d3, d4, d5, target, target3;

	(void)state;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	s = sock_of(fd);
	assert_non_null(s);

	d1 = dup(fd);
	assert_true(d1 >= 0);
	assert_tracked_kernel(d1);
	assert_ptr_equal(sock_of(d1), s);

	target = open("/dev/null", O_RDONLY); /* an open, untracked fd to dup2 onto */
	assert_true(target >= 0);
	assert_int_equal(rsk_fdtab_load(target), 0);
	d2 = dup2(fd, target);
	assert_int_equal(d2, target);
	assert_ptr_equal(sock_of(d2), s);

	d3 = fcntl(fd, F_DUPFD, 200);
	assert_true(d3 >= 200);
	assert_ptr_equal(sock_of(d3), s);

	d4 = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	assert_true(d4 >= 0);
	assert_ptr_equal(sock_of(d4), s);
	assert_true(fcntl(d4, F_GETFD) & FD_CLOEXEC);

	target3 = open("/dev/null", O_RDONLY);
	assert_true(target3 >= 0);
	d5 = dup3(fd, target3, O_CLOEXEC);
	assert_int_equal(d5, target3);
	assert_ptr_equal(sock_of(d5), s);
	assert_int_equal(s->nfds, 6);

	/* Closing the original keeps every duplicate tracked. */
	assert_int_equal(close(fd), 0);
	assert_int_equal(rsk_fdtab_load(fd), 0);
	assert_tracked_kernel(d1);
	assert_ptr_equal(sock_of(d1), s);
	assert_ptr_equal(sock_of(d2), s);
	assert_ptr_equal(sock_of(d3), s);
	assert_ptr_equal(sock_of(d4), s);
	assert_ptr_equal(sock_of(d5), s);
	assert_int_equal(s->nfds, 5);
	assert_int_equal(rdmasock_fd_transport(d3), RDMASOCK_TRANSPORT_KERNEL);

	/* dup2 onto itself changes nothing. */
	assert_int_equal(dup2(d1, d1), d1);
	assert_int_equal(s->nfds, 5);

	assert_int_equal(close(d1), 0);
	assert_int_equal(close(d2), 0);
	assert_int_equal(close(d3), 0);
	assert_int_equal(close(d4), 0);
	assert_int_equal(s->nfds, 1);
	assert_int_equal(s->refs, 1);
	assert_ptr_equal(sock_of(d5), s);
	assert_int_equal(close(d5), 0);
	assert_int_equal(rsk_fdtab_load(d5), 0);
	assert_int_equal(s->refs, 0); /* the last close freed it */
}

static void test_dup2_onto_tracked(void **state)
{
	struct rsk_sock *sa, *sb;
	int a, b, devnull;

	(void)state;
	a = socket(AF_INET, SOCK_STREAM, 0);
	b = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(a >= 0 && b >= 0);
	sa = sock_of(a);
	sb = sock_of(b);
	assert_true(sa != NULL && sb != NULL && sa != sb);

	/* dup2(a, b) silently closes b's socket: its object must be released, b names a's. */
	assert_int_equal(dup2(a, b), b);
	assert_ptr_equal(sock_of(b), sa);
	assert_int_equal(sa->nfds, 2);
	assert_int_equal(sb->refs, 0);

	/* dup2 of a plain file onto a tracked socket fd: the slot is released, not copied. */
	devnull = open("/dev/null", O_RDONLY);
	assert_true(devnull >= 0);
	assert_int_equal(dup2(devnull, b), b);
	assert_int_equal(rsk_fdtab_load(b), 0);
	assert_int_equal(sa->nfds, 1);
	assert_ptr_equal(sock_of(a), sa);

	/* A failing dup2 (bad source) must not release the target. */
	assert_int_equal(dup2(a, b), b);
	assert_int_equal(sa->nfds, 2);
	errno = 0;
	assert_int_equal(dup2(-1, b), -1);
	assert_int_equal(errno, EBADF);
	assert_ptr_equal(sock_of(b), sa);
	assert_int_equal(sa->nfds, 2);

	assert_int_equal(close(devnull), 0);
	assert_int_equal(close(b), 0);
	assert_int_equal(close(a), 0);
	assert_int_equal(sa->refs, 0);
}

static void test_internal_fd_protected(void **state)
{
	int fd, hidden, other;

	(void)state;
	fd = open("/dev/null", O_WRONLY);
	assert_true(fd >= 0);
	hidden = rsk_fd_hide(fd);
	assert_true(hidden >= 0);
	assert_true(rsk_fd_is_internal(hidden));
	/* The application cannot close or dup2 over the library's own fds... */
	errno = 0;
	assert_int_equal(close(hidden), -1);
	assert_int_equal(errno, EBADF);
	assert_true(RSK_REAL(fcntl)(hidden, F_GETFD) >= 0); /* still open */
	other = open("/dev/null", O_RDONLY);
	assert_true(other >= 0);
	errno = 0;
	assert_int_equal(dup2(other, hidden), -1);
	assert_int_equal(errno, EBUSY);
	assert_true(rsk_fd_is_internal(hidden));
	/* ...and data calls on them still work (tagged kernel: pass-through). */
	assert_int_equal(write(hidden, "x", 1), 1);
	assert_int_equal(close(other), 0);
	rsk_fd_unhide_close(hidden);
	assert_false(rsk_fd_is_internal(hidden));
	assert_int_equal(rsk_fdtab_load(hidden), 0);
	assert_int_equal(RSK_REAL(fcntl)(hidden, F_GETFD), -1);
}

/* ---- connection accounting ---- */

static void snap(struct rdmasock_stats *s)
{
	rsk_stats_snapshot(s);
}

#define K RDMASOCK_TRANSPORT_KERNEL

static void test_stats_connect_accept(void **state)
{
	struct rdmasock_stats s0, s1, s2, s3, s4;
	enum rdmasock_fallback why;
	char out[1000], in[1000];
	struct rsk_sock *as;
	uint16_t port;
	int lfd, cfd, afd, i;
	unsigned long long sent, recvd;

	(void)state;
	lfd = listen_loopback(&port);
	assert_int_equal(sock_of(lfd)->state, RSK_SOCK_LISTENING);
	why = RDMASOCK_FB_POLICY; /* RDMASOCK_TRANSPORT=kernel, set in main() */
	snap(&s0);

	cfd = connect_loopback(port);
	snap(&s1);
	assert_int_equal(s1.connections[K], s0.connections[K] + 1);
	assert_int_equal(s1.fallbacks[why], s0.fallbacks[why] + 1);
	assert_int_equal(sock_of(cfd)->state, RSK_SOCK_CONNECTED);

	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	snap(&s2);
	assert_int_equal(s2.connections[K], s0.connections[K] + 2);
	assert_int_equal(s2.fallbacks[why], s0.fallbacks[why] + 2);
	assert_int_equal(s2.connections[RDMASOCK_TRANSPORT_SHM],
			 s0.connections[RDMASOCK_TRANSPORT_SHM]);
	assert_int_equal(s2.connections[RDMASOCK_TRANSPORT_VERBS],
			 s0.connections[RDMASOCK_TRANSPORT_VERBS]);
	assert_tracked_kernel(afd);
	as = sock_of(afd);
	assert_int_equal(as->state, RSK_SOCK_CONNECTED);
	assert_int_equal(as->domain, AF_INET);
	assert_int_equal(as->counted, 1);

	/* Echo 1000 bytes: the client's data is acked once it has read the echo. */
	for (i = 0; i < (int)sizeof(out); i++)
		out[i] = (char)(i * 7);
	write_full(cfd, out, sizeof(out));
	read_full(afd, in, sizeof(in));
	write_full(afd, in, sizeof(in));
	read_full(cfd, in, sizeof(in));
	assert_memory_equal(in, out, sizeof(out));
	snap(&s3);
	assert_int_equal(s3.bytes_sent[K], s2.bytes_sent[K]); /* accounted at close only */

	assert_int_equal(close(cfd), 0);
	assert_int_equal(close(afd), 0);
	snap(&s4);
	/* Closing counts no new connection but brings the TCP_INFO byte counts in. */
	assert_int_equal(s4.connections[K], s2.connections[K]);
	sent = s4.bytes_sent[K] - s2.bytes_sent[K];
	recvd = s4.bytes_received[K] - s2.bytes_received[K];
	assert_in_range(sent, sizeof(out), 2 * sizeof(out) + 4);
	assert_in_range(recvd, 2 * sizeof(out), 2 * sizeof(out) + 4);

	/* The listener was never a connection. */
	assert_int_equal(close(lfd), 0);
	snap(&s1);
	assert_memory_equal(&s1, &s4, sizeof(s1));
}

static void test_stats_refused_not_counted(void **state)
{
	struct rdmasock_stats s0, s1;
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	uint16_t port;
	int fd, probe;

	(void)state;
	/* A port nobody listens on: bound then closed without listen(). */
	probe = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(probe, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(probe, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	assert_int_equal(close(probe), 0);

	snap(&s0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	a = loopback(port);
	errno = 0;
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(errno, ECONNREFUSED); /* the wrapper keeps the real errno */
	assert_int_equal(sock_of(fd)->state, RSK_SOCK_NEW);
	assert_int_equal(close(fd), 0);
	snap(&s1);
	assert_memory_equal(&s1, &s0, sizeof(s0));
}

static void test_stats_untracked_listener(void **state)
{
	struct rdmasock_stats s0, s1;
	uint16_t port;
	int lfd, cfd, afd;

	(void)state;
	/* A listener made behind the wrappers' back: what it accepts is not ours to count. */
	lfd = listen_with(RSK_REAL(socket), &port);
	assert_int_equal(rsk_fdtab_load(lfd), 0);
	snap(&s0);
	cfd = connect_loopback(port);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	assert_int_equal(rsk_fdtab_load(afd), 0);
	snap(&s1);
	assert_int_equal(s1.connections[K], s0.connections[K] + 1); /* the connect only */
	assert_int_equal(close(afd), 0);
	assert_int_equal(close(cfd), 0);
	assert_int_equal(close(lfd), 0);
}

/* Start a non-blocking connect; returns 1 if it is still in progress, 0 if it completed. */
static int connect_nonblocking(int fd, uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	int rc;

	errno = 0;
	rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (rc == 0)
		return 0;
	assert_int_equal(errno, EINPROGRESS);
	return 1;
}

static void wait_writable(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};

	assert_int_equal(poll(&pfd, 1, 2000), 1);
	assert_true(pfd.revents & POLLOUT);
}

static void test_stats_nonblocking_so_error(void **state)
{
	struct rdmasock_stats s0, s1, s2;
	socklen_t len;
	uint16_t port;
	int lfd, cfd, afd, err, pending;

	(void)state;
	lfd = listen_loopback(&port);
	snap(&s0);
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_true(cfd >= 0);
	pending = connect_nonblocking(cfd, port);
	snap(&s1);
	if (pending) {
		assert_int_equal(sock_of(cfd)->state, RSK_SOCK_CONNECTING);
		assert_int_equal(s1.connections[K], s0.connections[K]);
	}
	wait_writable(cfd);
	err = -1;
	len = sizeof(err);
	assert_int_equal(getsockopt(cfd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	assert_int_equal(err, 0);
	snap(&s1);
	assert_int_equal(s1.connections[K], s0.connections[K] + 1);
	assert_int_equal(sock_of(cfd)->state, RSK_SOCK_CONNECTED);
	/* Asking again does not count it twice. */
	assert_int_equal(getsockopt(cfd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	assert_int_equal(close(cfd), 0);
	assert_int_equal(close(afd), 0);
	assert_int_equal(close(lfd), 0);
	snap(&s2);
	assert_int_equal(s2.connections[K], s0.connections[K] + 2);
}

static void test_stats_nonblocking_counted_at_close(void **state)
{
	struct rdmasock_stats s0, s1;
	uint16_t port;
	int lfd, cfd, afd;

	(void)state;
	lfd = listen_loopback(&port);
	afd = -1;
	snap(&s0);
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_true(cfd >= 0);
	if (connect_nonblocking(cfd, port)) {
		/* Nobody asks SO_ERROR: the close must find out from TCP_INFO. */
		wait_writable(cfd);
		snap(&s1);
		assert_int_equal(s1.connections[K], s0.connections[K]);
	}
	assert_int_equal(close(cfd), 0);
	snap(&s1);
	assert_int_equal(s1.connections[K], s0.connections[K] + 1);
	afd = accept(lfd, NULL, NULL);
	assert_true(afd >= 0);
	assert_int_equal(close(afd), 0);
	assert_int_equal(close(lfd), 0);
}

int main(void)
{
	/* These tests are about the kernel path and its accounting: no same-host shortcut. */
	rsk_config.mode = RSK_MODE_KERNEL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_early_constructor),
		cmocka_unit_test(test_lazy_round_trip),
		cmocka_unit_test(test_socket_tracking),
		cmocka_unit_test(test_dup_family),
		cmocka_unit_test(test_dup2_onto_tracked),
		cmocka_unit_test(test_internal_fd_protected),
		cmocka_unit_test(test_stats_connect_accept),
		cmocka_unit_test(test_stats_refused_not_counted),
		cmocka_unit_test(test_stats_untracked_listener),
		cmocka_unit_test(test_stats_nonblocking_so_error),
		cmocka_unit_test(test_stats_nonblocking_counted_at_close),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
