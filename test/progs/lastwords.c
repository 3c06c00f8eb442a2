/*
 * Role: every byte a peer's send() returned for reaches us, in order, however the peer ends.
 *
 *   lastwords MODE [BYTES]        run one case, print one result line
 *   lastwords sender PORT MODE BYTES   (internal: the peer, exec'd, so a second process
 *                                       image and, under LD_PRELOAD, a second library)
 *
 * The sender connects to us and writes BYTES (default 100000) of a pattern in writes of
 * varied sizes (1 byte to 20 KB, so Nagle stages and full buffers both occur), and then ends
 * by MODE:
 *   close       close(), then exit(0)
 *   exit        exit(0) without close
 *   _exit       _exit(0) without close (no atexit, no destructors)
 *   kill        SIGKILL to itself
 *   segv        a crash: SIGSEGV (core dumps off)
 *   linger0     100 ms later, SO_LINGER {1, 0} and close(): an abortive close
 *   unread      we send it 20 bytes, it reads 10, and 100 ms later closes: its kernel resets
 *   shutrdwr    shutdown(SHUT_RDWR) and no close: it keeps the fd open 2 s, then exit(0). The
 *               stream must end at the shutdown (a FIN), while it lives: the result line
 *               then says ", after the peer exited" when the end came only with its exit
 *   stdio_kill  the roles turn: it reads, through stdio (fdopen before its first byte, so an
 *               accelerated connection is relayed), BYTES that we write, checks them, waits
 *               300 ms and is SIGKILLed. It left nothing unread, so its kernel would FIN: we
 *               read 0 bytes, then EOF (a verbs relay whose consumed credits had not gone
 *               back made it a reset)
 * We read from the start, concurrently with its writes, and check each byte. Prints
 *   lastwords: MODE: BYTES bytes, then END
 * where END is EOF or the errno name of the read that ended the stream. The integration test
 * runs each mode without the library and preloaded and compares the lines: the kernel's
 * outcome is the expectation. Exits 0 when the bytes were right and the stream ended within
 * 10 s, 1 otherwise.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "lastwords";

#define SEED 0x1a57b0d5u

static const size_t sizes[] = {1, 700, 20000, 3, 1460, 9000, 64, 12345, 2, 5000};

/* stdio_kill's peer: read @total pattern bytes through stdio, wait, die by SIGKILL. */
static int stdio_reader(int fd, size_t total)
{
	char *buf = malloc(total);
	FILE *f = fdopen(fd, "r");

	if (buf == NULL || f == NULL)
		die("stdio reader: %s", strerror(errno));
	if (fread(buf, 1, total, f) != total)
		die("stdio reader: fread: %s", feof(f) ? "EOF" : strerror(errno));
	if (pat_check(buf, total, SEED, 0) >= 0)
		die("stdio reader: wrong bytes");
	usleep(300000); /* everything read; no call of ours on the socket from here */
	raise(SIGKILL);
	return 1;
}

static int sender(int port, const char *mode, size_t total)
{
	struct linger lg = {1, 0};
	struct rlimit no_core = {0, 0};
	char *buf = malloc(20000);
	size_t off = 0, n, i = 0;
	int fd = tcp_connect(port);

	if (fd < 0 || buf == NULL)
		die("sender connect: %s", strerror(errno));
	if (strcmp(mode, "stdio_kill") == 0)
		return stdio_reader(fd, total);
	/* unread: we send 20 bytes; it reads the first 10 (so it knows they came) and never
	 * the other 10 */
	if (strcmp(mode, "unread") == 0 && read_full(fd, buf, 10, 10) != 10)
		die("sender: the bytes it must leave unread did not come");
	while (off < total) {
		n = sizes[i++ % (sizeof(sizes) / sizeof(sizes[0]))];
		if (n > total - off)
			n = total - off;
		pat_fill(buf, n, SEED, off);
		if (write_all(fd, buf, n) < 0)
			die("sender write at %zu: %s", off, strerror(errno));
		off += n;
	}
	if (strcmp(mode, "close") == 0 || strcmp(mode, "unread") == 0) {
		if (strcmp(mode, "unread") == 0)
			usleep(100000); /* the second 10 bytes have arrived, unread */
		close(fd);
		exit(0);
	}
	if (strcmp(mode, "shutrdwr") == 0) {
		if (shutdown(fd, SHUT_RDWR) < 0)
			die("shutdown: %s", strerror(errno));
		sleep(2); /* the fd stays open */
		exit(0);
	}
	if (strcmp(mode, "exit") == 0)
		exit(0);
	if (strcmp(mode, "_exit") == 0)
		_exit(0);
	if (strcmp(mode, "kill") == 0)
		raise(SIGKILL);
	if (strcmp(mode, "segv") == 0) {
		setrlimit(RLIMIT_CORE, &no_core);
		raise(SIGSEGV);
	}
	if (strcmp(mode, "linger0") == 0) {
		/* A reset discards what has not left yet: give the kernel the time to send it
		 * all, so what the reader sees does not depend on timing. */
		usleep(100000);
		if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
			die("SO_LINGER: %s", strerror(errno));
		close(fd);
		_exit(0);
	}
	die("unknown mode %s", mode);
	return 1;
}

static const char *end_name(ssize_t r, int e)
{
	static char b[48];

	if (r == 0)
		return "EOF";
	if (e == ECONNRESET)
		return "ECONNRESET";
	snprintf(b, sizeof(b), "errno %d (%s)", e, strerror(e));
	return b;
}

static void on_alarm(int sig)
{
	static const char msg[] = "lastwords: HUNG: the stream did not end within 10 s\n";

	(void)sig;
	(void)!write(1, msg, sizeof(msg) - 1);
	_exit(3);
}

/* Spawn the sender (fork + exec of ourselves) against our listener; accept its connection. */
static int spawn(const char *mode, size_t total, pid_t *pid)
{
	struct sockaddr_in a = loopback(0);
	socklen_t al = sizeof(a);
	char port[16], bytes[32];
	int l = socket(AF_INET, SOCK_STREAM, 0), fd;

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		die("listen: %s", strerror(errno));
	snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
	snprintf(bytes, sizeof(bytes), "%zu", total);
	*pid = fork();
	if (*pid < 0)
		die("fork: %s", strerror(errno));
	if (*pid == 0) {
		close(l);
		execl("/proc/self/exe", "lastwords", "sender", port, mode, bytes, (char *)NULL);
		_exit(127);
	}
	fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(l);
	return fd;
}

int main(int argc, char **argv)
{
	size_t total = argc > 2 ? strtoul(argv[2], NULL, 10) : 100000, got = 0;
	char buf[16384];
	const char *mode;
	ssize_t r, bad;
	int fd, e = 0, st, gone;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && strcmp(argv[1], "sender") == 0)
		return sender(port_arg(argv[2]), argv[3], strtoul(argv[4], NULL, 10));
	if (argc < 2 || argc > 3)
		die("usage: lastwords MODE [BYTES]");
	mode = argv[1];
	signal(SIGALRM, on_alarm);
	alarm(10);
	fd = spawn(mode, total, &pid);
	if (strcmp(mode, "unread") == 0) {
		if (write_all(fd, "0123456789", 10) < 0 || write_all(fd, "abcdefghij", 10) < 0)
			die("write to the sender: %s", strerror(errno));
	}
	if (strcmp(mode, "stdio_kill") == 0) {
		char *out = malloc(total);

		if (out == NULL)
			die("malloc");
		pat_fill(out, total, SEED, 0);
		if (write_all(fd, out, total) < 0)
			die("write to the stdio reader: %s", strerror(errno));
		free(out);
	}
	for (;;) {
		r = read(fd, buf, sizeof(buf));
		if (r <= 0) {
			e = errno;
			break;
		}
		bad = pat_check(buf, (size_t)r, SEED, got);
		if (bad >= 0) {
			printf("lastwords: %s: wrong byte at %zu: FAIL\n", mode, got + (size_t)bad);
			return 1;
		}
		got += (size_t)r;
	}
	/* shutrdwr: did the end come while the sender still held its fd? */
	gone = waitpid(pid, &st, WNOHANG) == pid;
	if (!gone)
		waitpid(pid, &st, 0);
	printf("lastwords: %s: %zu bytes, then %s%s\n", mode, got, end_name(r, e),
	       gone && strcmp(mode, "shutrdwr") == 0 ? ", after the peer exited" : "");
	return r < 0 && e != ECONNRESET ? 1 : 0;
}
