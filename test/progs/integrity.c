/*
 * Role: full-duplex integrity check of one TCP connection.
 *
 *   integrity server PORT
 *   integrity client PORT [BYTES [SEED]]
 *
 * BYTES (default 1 GiB; also env INTEGRITY_BYTES, suffixes K/M/G) move in EACH direction at
 * the same time over one connection: on each side a writer thread sends the stream while the
 * main thread reads the peer's. Write and read sizes are random from 1 B to 1 MiB (half
 * uniform, half log-uniform so that small sizes are frequent too), drawn from PRNGs seeded
 * by SEED (default: time and pid; env INTEGRITY_SEED; always logged). The content of each
 * direction is a position-addressable PRNG stream, so the reader checks every byte where it
 * lands and reports the offset of the first wrong one.
 *
 * Protocol: the client first sends a 24-byte header (magic, seed, bytes), then both sides stream.
 * Each writer ends its stream with an 8-byte trailer, the FNV-1a-64 (over 64-bit words) hash
 * of everything it sent, then shutdown(SHUT_WR). Each reader hashes what it received,
 * compares it with the trailer, and then requires EOF (read returns 0, twice).
 *
 * Before closing, each side waits (up to 2 s) until the peer acknowledged all it sent.
 * The whole run is bounded by alarm(): 55 s, or env INTEGRITY_TIME_LIMIT seconds (the qemu
 * TCG guest of test/vm needs minutes for 1 GiB).
 *
 * Prints "integrity: ROLE sent B hash H received B hash H seed S secs T MB/s R: ok" and
 * exits 0 only when everything matched.
 */
#include <linux/sockios.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/socket.h>

#include "progs.h"

const char *prog_name = "integrity";

#define MAX_IO (1u << 20)
#define HDR_MAGIC 0x7273696e74656731ull /* "rsintegr1" */
#define DEFAULT_BYTES (1ull << 30)

/* FNV-1a 64 over little-endian 64-bit words (a final partial word is zero-padded). */
struct hash {
	uint64_t h;
	uint64_t part; /* bytes of the current incomplete word */
	unsigned int npart;
	uint64_t len;
};

static void hash_init(struct hash *x)
{
	x->h = 0xcbf29ce484222325ull;
	x->part = 0;
	x->npart = 0;
	x->len = 0;
}

static inline void hash_word(struct hash *x, uint64_t w)
{
	x->h ^= w;
	x->h *= 0x100000001b3ull;
}

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t w = 0;
	int i;

	for (i = 7; i >= 0; i--)
		w = (w << 8) | p[i];
	return w;
}

static inline void store_le64(uint8_t *p, uint64_t w)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(w >> (8 * i));
}

static void hash_update(struct hash *x, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	x->len += n;
	while (n > 0 && x->npart > 0) {
		x->part |= (uint64_t)*p++ << (8 * x->npart);
		n--;
		if (++x->npart == 8) {
			hash_word(x, x->part);
			x->part = 0;
			x->npart = 0;
		}
	}
	while (n >= 8) {
		hash_word(x, load_le64(p));
		p += 8;
		n -= 8;
	}
	while (n > 0) {
		x->part |= (uint64_t)*p++ << (8 * x->npart);
		x->npart++;
		n--;
	}
}

static uint64_t hash_final(const struct hash *x)
{
	struct hash y = *x;

	if (y.npart > 0)
		hash_word(&y, y.part);
	hash_word(&y, y.len);
	return y.h;
}

/* The content stream @seed: word i is mix64(seed ^ i * K), bytes little-endian. */
static inline uint64_t stream_word(uint64_t seed, uint64_t i)
{
	return mix64(seed ^ (i * 0xd6e8feb86659fd93ull));
}

static void stream_fill(uint8_t *p, size_t n, uint64_t seed, uint64_t off)
{
	uint64_t w;

	while (n > 0 && (off & 7)) {
		*p++ = (uint8_t)(stream_word(seed, off >> 3) >> (8 * (off & 7)));
		off++;
		n--;
	}
	while (n >= 8) {
		store_le64(p, stream_word(seed, off >> 3));
		p += 8;
		off += 8;
		n -= 8;
	}
	if (n > 0) {
		w = stream_word(seed, off >> 3);
		while (n > 0) {
			*p++ = (uint8_t)w;
			w >>= 8;
			n--;
		}
	}
}

/* Random I/O size in [1, MAX_IO]. */
static size_t io_size(uint64_t *rng)
{
	uint64_t r = rng_next(rng);
	unsigned int bits;

	if (r & 1)
		return 1 + (size_t)((r >> 1) % MAX_IO);
	bits = (unsigned int)((r >> 1) % 21); /* 2^0 .. 2^20 */
	return 1 + (size_t)((r >> 8) % ((uint64_t)1 << bits));
}

struct side {
	int fd;
	const char *role;
	uint64_t seed;
	uint64_t nbytes;
	uint64_t tx_seed, rx_seed; /* content streams */
	uint64_t tx_rng, rx_rng;   /* size generators */
	/* writer results */
	uint64_t sent, sent_hash, writes;
	const char *werr;
	int werrno;
	/* reader results */
	uint64_t rcvd, rcvd_hash, reads;
	char rerr[256];
};

static void *writer(void *arg)
{
	struct side *s = arg;
	uint8_t *buf = malloc(MAX_IO), trailer[8];
	struct hash h;
	size_t len;

	if (buf == NULL) {
		s->werr = "out of memory";
		return NULL;
	}
	hash_init(&h);
	while (s->sent < s->nbytes) {
		len = io_size(&s->tx_rng);
		if (len > s->nbytes - s->sent)
			len = (size_t)(s->nbytes - s->sent);
		stream_fill(buf, len, s->tx_seed, s->sent);
		hash_update(&h, buf, len);
		if (write_all(s->fd, buf, len) < 0) {
			s->werr = "write failed";
			s->werrno = errno;
			free(buf);
			return NULL;
		}
		s->sent += len;
		s->writes++;
	}
	s->sent_hash = hash_final(&h);
	store_le64(trailer, s->sent_hash);
	if (write_all(s->fd, trailer, sizeof(trailer)) < 0) {
		s->werr = "trailer write failed";
		s->werrno = errno;
	} else if (shutdown(s->fd, SHUT_WR) < 0) {
		s->werr = "shutdown(SHUT_WR) failed";
		s->werrno = errno;
	}
	free(buf);
	return NULL;
}

/* Read the peer's stream until EOF; returns 0 when content, trailer hash and EOF are right. */
static int reader(struct side *s)
{
	uint8_t *buf = malloc(MAX_IO), *want = malloc(MAX_IO), trailer[8];
	uint64_t total = 0, end = s->nbytes + 8, expect;
	size_t len, data, i;
	struct hash h;
	ssize_t r;
	int eofs = 0;

	if (buf == NULL || want == NULL) {
		snprintf(s->rerr, sizeof(s->rerr), "out of memory");
		goto out;
	}
	hash_init(&h);
	for (;;) {
		len = io_size(&s->rx_rng);
		r = read(s->fd, buf, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(s->rerr, sizeof(s->rerr), "read at offset %llu: %s",
				 (unsigned long long)total, strerror(errno));
			goto out;
		}
		s->reads++;
		if (r == 0) {
			if (total < end) {
				snprintf(s->rerr, sizeof(s->rerr), "EOF after %llu of %llu bytes",
					 (unsigned long long)total, (unsigned long long)end);
				goto out;
			}
			if (++eofs == 2)
				break; /* EOF, and EOF again */
			continue;
		}
		if (total + (uint64_t)r > end) {
			snprintf(s->rerr, sizeof(s->rerr), "%llu bytes more than the %llu sent",
				 (unsigned long long)(total + (uint64_t)r - end),
				 (unsigned long long)end);
			goto out;
		}
		/* Payload part of this read, checked against the stream where it landed. */
		data = total < s->nbytes
			   ? (size_t)((s->nbytes - total) < (uint64_t)r ? s->nbytes - total
									: (uint64_t)r)
			   : 0;
		if (data > 0) {
			stream_fill(want, data, s->rx_seed, total);
			if (memcmp(want, buf, data) != 0) {
				for (i = 0; i < data && want[i] == buf[i]; i++)
					;
				snprintf(s->rerr, sizeof(s->rerr),
					 "byte %llu is 0x%02x, expected 0x%02x (read #%llu of %zd "
					 "bytes at offset %llu)",
					 (unsigned long long)(total + i), buf[i], want[i],
					 (unsigned long long)s->reads, r,
					 (unsigned long long)total);
				goto out;
			}
			hash_update(&h, buf, data);
		}
		for (i = data; i < (size_t)r; i++) /* trailer bytes */
			trailer[total + i - s->nbytes] = buf[i];
		total += (uint64_t)r;
	}
	s->rcvd = total - 8;
	s->rcvd_hash = hash_final(&h);
	expect = load_le64(trailer);
	if (expect != s->rcvd_hash) {
		snprintf(s->rerr, sizeof(s->rerr),
			 "hash of the received bytes %016llx, the sender's trailer says %016llx",
			 (unsigned long long)s->rcvd_hash, (unsigned long long)expect);
		goto out;
	}
	free(buf);
	free(want);
	return 0;
out:
	free(buf);
	free(want);
	return -1;
}

static uint64_t size_arg(const char *str)
{
	char *end;
	unsigned long long v = strtoull(str, &end, 10);

	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	}
	if (*end != '\0' || v == 0)
		die("bad size \"%s\"", str);
	return v;
}

int main(int argc, char **argv)
{
	struct side s;
	uint8_t hdr[24];
	pthread_t wt;
	double t0, secs;
	int port, lfd, rc, server, i;
	const char *env;

	if (argc < 3 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0))
		die("usage: integrity server PORT | integrity client PORT [BYTES [SEED]]");
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	env = getenv("INTEGRITY_TIME_LIMIT");
	alarm(env != NULL ? (unsigned int)atoi(env) : 55);
	server = strcmp(argv[1], "server") == 0;
	port = port_arg(argv[2]);
	memset(&s, 0, sizeof(s));
	s.role = argv[1];
	if (server) {
		lfd = tcp_listen(port, 8);
		s.fd = accept(lfd, NULL, NULL);
		if (s.fd < 0)
			die("accept: %s", strerror(errno));
		close(lfd);
		if (read_full(s.fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
			die("no header from the client");
		if (load_le64(hdr) != HDR_MAGIC)
			die("bad header magic");
		s.seed = load_le64(hdr + 8);
		s.nbytes = load_le64(hdr + 16);
	} else {
		env = getenv("INTEGRITY_BYTES");
		s.nbytes = argc > 3 ? size_arg(argv[3]) : env ? size_arg(env) : DEFAULT_BYTES;
		env = getenv("INTEGRITY_SEED");
		s.seed = argc > 4 ? strtoull(argv[4], NULL, 0)
			 : env	  ? strtoull(env, NULL, 0)
				  : mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
		s.fd = tcp_connect(port);
		if (s.fd < 0)
			die("connect to %d: %s", port, strerror(errno));
		store_le64(hdr, HDR_MAGIC);
		store_le64(hdr + 8, s.seed);
		store_le64(hdr + 16, s.nbytes);
		if (write_all(s.fd, hdr, sizeof(hdr)) < 0)
			die("header write: %s", strerror(errno));
	}
	prog_msg("%s: seed %llu bytes %llu each way", s.role, (unsigned long long)s.seed,
		 (unsigned long long)s.nbytes);
	/* Direction c2s uses stream seed*2+1, s2c seed*2+2; sizes come from other streams. */
	s.tx_seed = mix64(s.seed * 2 + (server ? 2 : 1));
	s.rx_seed = mix64(s.seed * 2 + (server ? 1 : 2));
	s.tx_rng = mix64(s.seed ^ (server ? 0x5353u : 0x4343u));
	s.rx_rng = mix64(s.seed ^ (server ? 0x7272u : 0x6262u));
	t0 = now_sec();
	rc = pthread_create(&wt, NULL, writer, &s);
	if (rc != 0)
		die("pthread_create: %s", strerror(rc));
	rc = reader(&s);
	pthread_join(wt, NULL);
	secs = now_sec() - t0;
	if (s.werr != NULL)
		die("%s: writer: %s after %llu bytes: %s", s.role, s.werr,
		    (unsigned long long)s.sent, strerror(s.werrno));
	if (rc < 0)
		die("%s: reader: %s (seed %llu)", s.role, s.rerr, (unsigned long long)s.seed);
	/* Linger until the peer acknowledged everything (bounded): the library counts a kernel
	 * socket's bytes from TCP_INFO (bytes acked) at close, and the test checks them. */
	for (i = 0; i < 2000; i++) {
		int q = 0;

		if (ioctl(s.fd, SIOCOUTQ, &q) < 0 || q == 0)
			break;
		usleep(1000);
	}
	if (close(s.fd) < 0)
		die("close: %s", strerror(errno));
	printf("integrity: %s sent %llu hash %016llx received %llu hash %016llx writes %llu "
	       "reads %llu seed %llu secs %.2f MB/s %.0f: ok\n",
	       s.role, (unsigned long long)s.sent, (unsigned long long)s.sent_hash,
	       (unsigned long long)s.rcvd, (unsigned long long)s.rcvd_hash,
	       (unsigned long long)s.writes, (unsigned long long)s.reads,
	       (unsigned long long)s.seed, secs, (double)(s.sent + s.rcvd) / secs / 1e6);
	return 0;
}
