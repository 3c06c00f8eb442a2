/*
 * Role: close() of a socket while another thread of the process is inside a call on it. The
 * kernel keeps the socket until that call returns (the call holds its file): the peer sees
 * no FIN and no reset meanwhile, the call goes on (a reader gets the peer's later bytes or its
 * EOF, a writer blocked on a full window finishes), and only then does the socket end, in
 * order.
 *
 *   close_busy reader PORT      both ends in this process: a thread blocked in recv(4), the
 *                               main thread closes that socket; the peer, which must have
 *                               seen nothing, sends "late": the reader gets it, the peer EOF
 *   close_busy reader_eof PORT  the same, but the peer closes: the reader gets EOF
 *   close_busy writer PORT      a thread blocked in a 16 MiB write on a full window, the main
 *                               thread closes; the peer reads every byte in order, then EOF
 *   close_busy exit PORT        a server: a thread blocked in recv, the main thread sends
 *                               100,000 bytes, closes and returns from main (the process ends
 *                               with the thread still in recv)
 *   close_busy client PORT      exit's client, another process: 100,000 bytes, then EOF
 *
 * Prints "close_busy: MODE: ok" on stdout and exits 0, or says what differed and exits 1.
 * Both ends bind or connect to loopback(PORT) (RSK_TEST_ADDR in the Soft-RoCE guest).
 */
#include <pthread.h>
#include <sys/time.h>

#include "progs.h"

const char *prog_name = "close_busy";

#define SEED 0xc105eb5eu
#define BIG (16u << 20)
#define EXIT_BYTES 100000u
#define WAIT_MS 10000

/* A call another thread makes, and what it returned. */
struct call {
	int fd;
	size_t n;
	ssize_t res;
	int err;
	int done;
	char buf[8];
};

static void *reader_body(void *arg)
{
	struct call *c = arg;

	c->res = recv(c->fd, c->buf, 4, 0);
	c->err = errno;
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *writer_body(void *arg)
{
	struct call *c = arg;
	char *buf = malloc(c->n);

	if (buf == NULL)
		die("writer: no memory");
	pat_fill(buf, c->n, SEED, 0);
	c->res = write_all(c->fd, buf, c->n);
	c->err = errno;
	free(buf);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static pthread_t start(void *(*body)(void *), struct call *c)
{
	pthread_t t;

	if (pthread_create(&t, NULL, body, c) != 0)
		die("pthread_create failed");
	return t;
}

/* Wait for the call to return, at most WAIT_MS. */
static void join(pthread_t t, struct call *c, const char *what)
{
	int i;

	for (i = 0; i < WAIT_MS / 10 && !__atomic_load_n(&c->done, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	if (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE))
		die("%s: the blocked call never returned", what);
	pthread_join(t, NULL);
}

static void set_timeout(int fd)
{
	struct timeval tv = {WAIT_MS / 1000, 0};

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("SO_RCVTIMEO: %s", strerror(errno));
}

static void *accept_body(void *arg)
{
	struct call *c = arg;

	c->res = accept(c->fd, NULL, NULL);
	c->err = errno;
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Both ends in this process, past their first calls (a connection started on TCP moved). The
 * accept runs on a thread of its own while the connect waits, as a server's would: a verbs
 * connect set up at once waits for the server's accept to claim it.
 */
static void pair(int port, int *cl, int *sv)
{
	struct call a = {0};
	pthread_t t;
	char buf[100];
	int i;

	a.fd = tcp_listen(port, 4);
	t = start(accept_body, &a);
	*cl = tcp_connect(port);
	if (*cl < 0)
		die("connect: %s", strerror(errno));
	join(t, &a, "accept");
	if (a.res < 0)
		die("accept: %s", strerror(a.err));
	*sv = (int)a.res;
	close(a.fd);
	memset(buf, 'p', sizeof(buf));
	for (i = 0; i < 20; i++) {
		if (write_all(*cl, buf, sizeof(buf)) < 0 ||
		    read_full(*sv, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) ||
		    write_all(*sv, "q", 1) < 0 || read_full(*cl, buf, 1, 0) != 1 || buf[0] != 'q')
			die("pair: round %d failed: %s", i, strerror(errno));
		memset(buf, 'p', sizeof(buf));
	}
}

/* The peer sees neither EOF nor a reset while the call is in progress. */
static void no_end_yet(int cl, const char *what)
{
	char b;
	ssize_t r = recv(cl, &b, 1, MSG_DONTWAIT);

	if (r == 0)
		die("%s: the peer read EOF while the call was in progress", what);
	if (r > 0)
		die("%s: the peer read a byte while the call was in progress", what);
	if (errno != EAGAIN)
		die("%s: the peer got %s while the call was in progress", what, strerror(errno));
}

static void read_eof(int cl, const char *what)
{
	char b;
	ssize_t r;

	set_timeout(cl);
	r = recv(cl, &b, 1, 0);
	if (r < 0)
		die("%s: the peer got %s where EOF was due", what, strerror(errno));
	if (r > 0)
		die("%s: the peer read a byte where EOF was due", what);
}

static void reader(int port, int eof)
{
	const char *what = eof ? "reader_eof" : "reader";
	struct call c = {0};
	pthread_t t;
	int cl, sv;

	pair(port, &cl, &sv);
	c.fd = sv;
	t = start(reader_body, &c);
	usleep(200000); /* into its wait */
	close(sv);
	usleep(200000);
	no_end_yet(cl, what);
	if (eof)
		close(cl);
	else if (write_all(cl, "late", 4) < 0)
		die("%s: the peer's send failed: %s", what, strerror(errno));
	join(t, &c, what);
	if (eof && c.res != 0)
		die("%s: the blocked recv returned %zd (%s), not EOF", what, c.res,
		    c.res < 0 ? strerror(c.err) : "bytes");
	if (!eof && (c.res != 4 || memcmp(c.buf, "late", 4) != 0))
		die("%s: the blocked recv returned %zd (%s), not the 4 bytes", what, c.res,
		    c.res < 0 ? strerror(c.err) : "other bytes");
	if (!eof)
		read_eof(cl, what);
}

static void writer(int port)
{
	struct call c = {0};
	char *buf = malloc(BIG);
	pthread_t t;
	ssize_t n, bad;
	int cl, sv;

	if (buf == NULL)
		die("writer: no memory");
	pair(port, &cl, &sv);
	c.fd = sv;
	c.n = BIG;
	t = start(writer_body, &c);
	usleep(300000); /* the window fills; the thread waits for room */
	if (__atomic_load_n(&c.done, __ATOMIC_ACQUIRE))
		die("writer: 16 MiB went without the peer reading (no full window)");
	close(sv);
	usleep(200000);
	set_timeout(cl);
	n = read_full(cl, buf, BIG, 65536);
	if (n != (ssize_t)BIG)
		die("writer: the peer read %zd of %u bytes (%s)", n, BIG,
		    n < 0 ? strerror(errno) : "then EOF");
	if ((bad = pat_check(buf, BIG, SEED, 0)) >= 0)
		die("writer: byte %zd differs", bad);
	join(t, &c, "writer");
	if (c.res != 0)
		die("writer: the blocked write failed: %s", strerror(c.err));
	read_eof(cl, "writer");
	free(buf);
}

static void exit_server(int port)
{
	static struct call c;
	char *buf = malloc(EXIT_BYTES);
	int l = tcp_listen(port, 4), sv;

	if (buf == NULL)
		die("exit: no memory");
	sv = accept(l, NULL, NULL);
	if (sv < 0)
		die("exit: accept: %s", strerror(errno));
	close(l);
	c.fd = sv;
	(void)start(reader_body, &c); /* never joined: in recv when the process ends */
	usleep(100000);
	pat_fill(buf, EXIT_BYTES, SEED, 0);
	if (write_all(sv, buf, EXIT_BYTES) < 0)
		die("exit: write: %s", strerror(errno));
	close(sv);
	usleep(100000);
	free(buf);
}

static void exit_client(int port)
{
	char *buf = malloc(EXIT_BYTES + 1);
	ssize_t n, bad;
	int cl = tcp_connect(port);

	if (cl < 0 || buf == NULL)
		die("client: connect: %s", strerror(errno));
	set_timeout(cl);
	n = read_full(cl, buf, EXIT_BYTES + 1, 0);
	if (n != (ssize_t)EXIT_BYTES)
		die("client: %zd bytes read (%s), not the %u sent", n,
		    n < 0 ? strerror(errno) : "then EOF", EXIT_BYTES);
	if ((bad = pat_check(buf, EXIT_BYTES, SEED, 0)) >= 0)
		die("client: byte %zd differs", bad);
	free(buf);
}

int main(int argc, char **argv)
{
	int port;

	if (argc != 3)
		die("usage: close_busy reader|reader_eof|writer|exit|client PORT");
	port = port_arg(argv[2]);
	alarm(CLIENT_TIME_LIMIT);
	if (strcmp(argv[1], "reader") == 0)
		reader(port, 0);
	else if (strcmp(argv[1], "reader_eof") == 0)
		reader(port, 1);
	else if (strcmp(argv[1], "writer") == 0)
		writer(port);
	else if (strcmp(argv[1], "exit") == 0)
		exit_server(port);
	else if (strcmp(argv[1], "client") == 0)
		exit_client(port);
	else
		die("unknown mode %s", argv[1]);
	printf("close_busy: %s: ok\n", argv[1]);
	fflush(stdout);
	return 0;
}
