/*
 * Role: one end of a byte-exact exchange between a preloaded and a plain program.
 *
 *   mixed_peer server PORT OUTFILE [BYTES]
 *   mixed_peer client PORT OUTFILE [BYTES]
 *   mixed_peer gen server|client OUTFILE [BYTES]
 *
 * server/client: one connection on 127.0.0.1:PORT (the server accepts exactly one). Each end
 * sends BYTES (default 8 MiB) of its own known sequence (the pattern stream of progs.h, seed
 * 201 for the server, 101 for the client) in writes of random size (1 B .. 256 KiB), then
 * shutdown(SHUT_WR); at the same time (one non-blocking poll loop) it reads everything the
 * peer sends until EOF and stores exactly those bytes in OUTFILE. Prints
 * "mixed_peer: ROLE sent S received R: ok". Before closing it waits (up to 2 s) until the
 * peer has acknowledged everything it sent (SIOCOUTQ 0).
 * gen: writes the sequence ROLE sends to OUTFILE, so the test compares checksums.
 */
#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>

#include "progs.h"

const char *prog_name = "mixed_peer";

#define DEFAULT_BYTES (8u << 20)
#define MAX_IO (256u << 10)

static uint64_t role_seed(const char *role)
{
	return strcmp(role, "server") == 0 ? 201 : 101;
}

static int gen(const char *role, const char *path, uint64_t n)
{
	char *buf = malloc(MAX_IO);
	uint64_t off = 0;
	size_t len;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || buf == NULL)
		die("open %s: %s", path, strerror(errno));
	while (off < n) {
		len = n - off < MAX_IO ? (size_t)(n - off) : MAX_IO;
		pat_fill(buf, len, role_seed(role), off);
		if (write_all(fd, buf, len) < 0)
			die("write %s: %s", path, strerror(errno));
		off += len;
	}
	close(fd);
	free(buf);
	return 0;
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	uint64_t n, sent = 0, rcvd = 0, rng = 77, seed;
	char *out, *in;
	size_t len = 0, off = 0;
	struct pollfd p;
	ssize_t r;
	int port, fd, ofd, lfd, one = 1, eof = 0, shut = 0;
	struct sockaddr_in sa;

	if (argc < 4)
		die("usage: mixed_peer server|client PORT OUTFILE [BYTES] | gen ROLE OUTFILE "
		    "[BYTES]");
	n = argc > 4 ? strtoull(argv[4], NULL, 10) : DEFAULT_BYTES;
	if (strcmp(argv[1], "gen") == 0)
		return gen(argv[2], argv[3], n);
	if (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)
		die("unknown role %s", argv[1]);
	alarm(CLIENT_TIME_LIMIT);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	port = port_arg(argv[2]);
	seed = role_seed(argv[1]);
	rng ^= seed;
	ofd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	out = malloc(MAX_IO);
	in = malloc(MAX_IO);
	if (ofd < 0 || out == NULL || in == NULL)
		die("open %s: %s", argv[3], strerror(errno));
	if (strcmp(argv[1], "server") == 0) {
		sa = loopback(port);
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(lfd, 4) < 0)
			die("listen on %d: %s", port, strerror(errno));
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept: %s", strerror(errno));
		close(lfd);
	} else {
		fd = tcp_connect(port);
		if (fd < 0)
			die("connect to %d: %s", port, strerror(errno));
	}
	set_nonblock(fd);
	while (!eof || !shut) {
		if (off == len && sent < n) { /* next write */
			len = 1 + (size_t)(rng_next(&rng) % MAX_IO);
			if (len > n - sent)
				len = (size_t)(n - sent);
			pat_fill(out, len, seed, sent);
			off = 0;
		}
		if (sent == n && !shut) {
			if (shutdown(fd, SHUT_WR) < 0)
				die("shutdown: %s", strerror(errno));
			shut = 1;
		}
		p.fd = fd;
		p.events = (eof ? 0 : POLLIN) | (off < len ? POLLOUT : 0);
		p.revents = 0;
		if (p.events == 0)
			break;
		if (poll(&p, 1, 5000) <= 0)
			die("poll: nothing for 5 s (sent %llu received %llu)",
			    (unsigned long long)sent, (unsigned long long)rcvd);
		if (off < len && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			r = write(fd, out + off, len - off);
			if (r < 0 && errno != EAGAIN)
				die("write after %llu bytes: %s", (unsigned long long)sent,
				    strerror(errno));
			if (r > 0) {
				off += (size_t)r;
				sent += (uint64_t)r;
			}
		}
		if (!eof && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
			r = read(fd, in, 1 + (size_t)(rng_next(&rng) % MAX_IO));
			if (r < 0 && errno != EAGAIN)
				die("read after %llu bytes: %s", (unsigned long long)rcvd,
				    strerror(errno));
			if (r == 0)
				eof = 1;
			if (r > 0) {
				if (write_all(ofd, in, (size_t)r) < 0)
					die("write %s: %s", argv[3], strerror(errno));
				rcvd += (uint64_t)r;
			}
		}
	}
	/* Linger until the peer acknowledged everything: the library counts a kernel socket's
	 * bytes from TCP_INFO (bytes acked) at close, and the test compares them with BYTES. */
	for (r = 0; r < 2000; r++) {
		int q = 0;

		if (ioctl(fd, SIOCOUTQ, &q) < 0 || q == 0)
			break;
		usleep(1000);
	}
	close(fd);
	close(ofd);
	free(out);
	free(in);
	printf("mixed_peer: %s sent %llu received %llu: ok\n", argv[1], (unsigned long long)sent,
	       (unsigned long long)rcvd);
	return 0;
}
