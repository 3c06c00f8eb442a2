/*
 * Helpers shared by the connection-management unit tests (test_shm_rdv, test_shm_cm,
 * test_listener): loopback addresses on free ports, fd accounting through /proc/self/fd
 * (every setup path must leave the process with the fds it had), a bounded clock, and a
 * well-formed offer and a raw sendmsg with any number of fds for playing a hostile peer, and
 * a tracked shm listener as listen() leaves it (test_lifecycle, test_spawn).
 * Include after <cmocka.h>.
 */
#ifndef RSK_TEST_UNIT_CM_H
#define RSK_TEST_UNIT_CM_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sock/listener.h"
#include "sock/sock.h"
#include "transport/shm_rdv.h"
#include "transport/shm.h"

/* Open fds of this process, as the kernel sees them (hidden library fds included). */
static inline int ucm_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	/* the directory's own fd, and the memfds of segments pooled for reuse (shm.c: at most 4,
	 * kept on purpose, not leaked) */
	return n - 1 - rsk_shm_pool_count();
}

static inline int64_t ucm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline struct sockaddr_in ucm_lo4(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	return a;
}

static inline uint16_t ucm_port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					     : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

/*
 * A TCP socket bound to 127.0.0.1:0, listening if @listening: the kernel picks a free port,
 * and holding the socket keeps it ours (parallel test binaries never meet on a name).
 */
static inline int ucm_tcp_bound(int listening, uint16_t *port)
{
	struct sockaddr_in a = ucm_lo4(0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (listening)
		assert_int_equal(listen(fd, 64), 0);
	*port = ucm_port_of(fd);
	return fd;
}

static inline socklen_t ucm_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* A well-formed rendezvous offer to @server, as a genuine client sends it. */
static inline struct rsk_rdv_offer ucm_offer(const struct sockaddr *server, uint32_t nbuf,
					     uint32_t buf_size)
{
	struct rsk_rdv_offer o;

	memset(&o, 0, sizeof(o));
	o.magic = RSK_RDV_MAGIC;
	o.version = RSK_RDV_VERSION;
	o.nbuf = nbuf;
	o.buf_size = buf_size;
	memcpy(&o.server, server, ucm_sa_len(server));
	return o;
}

/* An IPv6 address from text. */
static inline struct sockaddr_in6 ucm_in6(const char *txt, uint16_t port)
{
	struct sockaddr_in6 a;

	memset(&a, 0, sizeof(a));
	a.sin6_family = AF_INET6;
	a.sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, txt, &a.sin6_addr), 1);
	return a;
}

/* An IPv4 address from text. */
static inline struct sockaddr_in ucm_in4(const char *txt, uint16_t port)
{
	struct sockaddr_in a = ucm_lo4(port);

	assert_int_equal(inet_pton(AF_INET, txt, &a.sin_addr), 1);
	return a;
}

/* Is ::1 usable here (an IPv6 loopback to bind)? */
static inline int ucm_have_ipv6(void)
{
	struct sockaddr_in6 a = ucm_in6("::1", 0);
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* sendmsg of @len bytes with @nfds fds (SCM_RIGHTS), as any local process could. */
static inline ssize_t ucm_send_fds(int fd, const void *data, size_t len, const int *fds,
				   int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 8)];
	} cbuf;
	struct iovec iov = {(void *)data, len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;

	assert_true(nfds >= 0 && nfds <= 8);
	memset(&cbuf, 0, sizeof(cbuf));
	if (nfds > 0) {
		msg.msg_control = cbuf.space;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

/* A tracked shm listener on a loopback port, its rendezvous up; that address in @dest. */
static inline int ucm_listener_open(struct sockaddr_in *dest)
{
	enum rdmasock_fallback why;
	struct rsk_sock *s;
	uint16_t port;
	int fd = ucm_tcp_bound(1, &port);

	*dest = ucm_lo4(port);
	assert_int_equal(rsk_sock_track(fd, AF_INET, RSK_SOCK_LISTENING), 0);
	s = rsk_sock_get(fd);
	assert_non_null(s);
	assert_int_equal(rsk_listener_open(fd, &s->lst, &why), 0);
	rsk_sock_put(s); /* the slot's reference keeps it */
	assert_true(rsk_rdv_exists((struct sockaddr *)dest));
	return fd;
}

static inline void ucm_listener_close(int fd)
{
	assert_int_equal(rsk_sock_release_fd(fd), 1);
	close(fd);
}

#endif
