/*
 * Role: a small, unmodified-style program the Soft-RoCE guest runs to check what the
 * library will rely on there, and to carry a plain blocking TCP stream (which rsocket's
 * librspreload.so, or later librdmasock.so, can take over without the program knowing).
 *
 *   vm_probe env                         memfd, shm_open, abstract unix sockets, RLIMIT_MEMLOCK
 *   vm_probe serve ADDR PORT             accept one connection, echo it until EOF
 *   vm_probe client ADDR PORT BYTES [SRC] send BYTES in 4 KiB ping-pong chunks, verify the echo
 *
 * Only blocking socket/bind/listen/accept/connect/read/write/close: nothing rsocket's
 * preload library lacks. Exit 0 on success, 1 with a message on failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create; the CMake build defines it already */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CHUNK 4096

static int fail(const char *what)
{
	fprintf(stderr, "vm_probe: %s: %s\n", what, strerror(errno));
	return 1;
}

static int probe_memfd(void)
{
	int fd = memfd_create("rsk-probe", MFD_CLOEXEC);
	char *p;

	if (fd < 0)
		return fail("memfd_create");
	if (ftruncate(fd, 1 << 20) < 0)
		return fail("ftruncate memfd");
	p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return fail("mmap memfd");
	p[12345] = 42;
	munmap(p, 1 << 20);
	close(fd);
	printf("memfd ok\n");
	return 0;
}

static int probe_shm(void)
{
	char name[64];
	int fd;

	snprintf(name, sizeof(name), "/rsk-probe-%d", getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return fail("shm_open");
	shm_unlink(name);
	close(fd);
	printf("shm_open ok\n");
	return 0;
}

/* Abstract names: what a same-host rendezvous uses (no file, gone with the socket). */
static int probe_abstract_unix(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int l, c, a;
	char b = 0;

	len = offsetof(struct sockaddr_un, sun_path) + 1 +
	      snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rsk-probe-%d", getpid());
	l = socket(AF_UNIX, SOCK_STREAM, 0);
	c = socket(AF_UNIX, SOCK_STREAM, 0);
	if (l < 0 || c < 0)
		return fail("socket AF_UNIX");
	if (bind(l, (struct sockaddr *)&sa, len) < 0 || listen(l, 1) < 0)
		return fail("bind abstract");
	if (connect(c, (struct sockaddr *)&sa, len) < 0)
		return fail("connect abstract");
	a = accept(l, NULL, NULL);
	if (a < 0 || write(c, "x", 1) != 1 || read(a, &b, 1) != 1 || b != 'x')
		return fail("abstract unix round trip");
	close(a);
	close(c);
	close(l);
	printf("abstract-unix ok\n");
	return 0;
}

static int probe_env(void)
{
	struct rlimit rl;
	int bad = 0;

	bad |= probe_memfd();
	bad |= probe_shm();
	bad |= probe_abstract_unix();
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
		printf("memlock %s\n", rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "limited");
	return bad;
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
		fprintf(stderr, "vm_probe: bad address %s\n", ip);
		exit(1);
	}
	return sa;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

static int serve(const char *ip, int port)
{
	struct sockaddr_in sa = addr_of(ip, port);
	char buf[CHUNK];
	long total = 0;
	int l, c, one = 1;
	ssize_t n;

	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0)
		return fail("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 4) < 0)
		return fail("bind/listen");
	c = accept(l, NULL, NULL);
	if (c < 0)
		return fail("accept");
	while ((n = read(c, buf, sizeof(buf))) > 0) {
		if (write_all(c, buf, n) < 0)
			return fail("write");
		total += n;
	}
	if (n < 0)
		return fail("read");
	printf("served %ld bytes\n", total);
	close(c);
	close(l);
	return 0;
}

static int client(const char *ip, int port, long bytes, const char *src)
{
	struct sockaddr_in sa = addr_of(ip, port);
	char out[CHUNK], in[CHUNK];
	long done = 0;
	int fd;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail("socket");
	if (src) {
		struct sockaddr_in me = addr_of(src, 0);

		if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0)
			return fail("bind source");
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return fail("connect");
	while (done < bytes) {
		size_t n = bytes - done < CHUNK ? bytes - done : CHUNK, got = 0;

		for (size_t i = 0; i < n; i++)
			out[i] = (char)((done + i) * 7 + 3);
		if (write_all(fd, out, n) < 0)
			return fail("write");
		while (got < n) {
			ssize_t r = read(fd, in + got, n - got);

			if (r <= 0)
				return r ? fail("read") : (fprintf(stderr, "vm_probe: early EOF\n"), 1);
			got += r;
		}
		if (memcmp(in, out, n)) {
			fprintf(stderr, "vm_probe: echo differs at byte %ld\n", done);
			return 1;
		}
		done += n;
	}
	close(fd);
	printf("client %ld bytes echoed ok\n", done);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "env"))
		return probe_env();
	if (argc == 4 && !strcmp(argv[1], "serve"))
		return serve(argv[2], atoi(argv[3]));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atol(argv[4]), argc == 6 ? argv[5] : NULL);
	fprintf(stderr, "usage: vm_probe env | serve ADDR PORT | client ADDR PORT BYTES [SRC]\n");
	return 2;
}
