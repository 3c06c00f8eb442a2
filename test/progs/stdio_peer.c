/*
 * Role: a socket used through stdio, whose reads and writes glibc makes with its internal
 * calls (no preload sees them), carries every byte in order, also mixed with send().
 *
 *   stdio_peer lines PORT     fdopen(fd, "r+"), line-buffered: 2,000 lines by fprintf, each
 *                             read back by fgets from the echo server
 *   stdio_peer bulk PORT      fwrite 1 MiB + fflush, then fread the 1 MiB echo
 *   stdio_peer mix PORT       send(), fprintf + fflush, send(), write() in turn, 300 rounds,
 *                             the echo read with recv() and fgets() in turn, in order
 *   stdio_peer getc PORT      write() then getc() (the echo's first byte must be it)
 *   stdio_peer big PORT MIB   MIB MiB of a pattern by fwrite in odd-sized pieces from a
 *                             forked child (the socket was fdopen'd before the fork), read
 *                             back by fread in the parent and checked byte by byte
 *   stdio_peer epoll PORT     registered in an epoll set (EPOLLIN), then fdopen: 50 lines by
 *                             fprintf, each echo announced by epoll_wait before fgets reads
 *                             it; the registration is still there to delete at the end
 *   stdio_peer late PORT      200 rounds by send()/recv() first, then fdopen and 200 rounds
 *                             mixing fprintf, send() and write(), read by fgets and recv()
 *   stdio_peer inetd PORT     accept one connection, fork: the child puts the socket on
 *                             stdin and stdout and execs `sed -u s/^/re:/` (stdio both ways)
 *   stdio_peer inetd_client PORT   500 lines to it by write(), each answer "re:" + the
 *                             line read back by read()
 *   stdio_peer inetd_int PORT  as inetd, in a process group of its own (a shell's job),
 *                             exec of `sh -c 'head -c 4 MiB /dev/zero; kill -INT 0'`: the
 *                             job writes 4 MiB to stdout and is interrupted (Ctrl-C) at once
 *   stdio_peer zeros_client PORT   after a second, reads until EOF: exactly 4 MiB of zeros,
 *                             then EOF (not a reset), as from kernel TCP, whose queue
 *                             outlives the process
 *   stdio_peer exit_writer PORT   accept one connection, fdopen it, fwrite 4 MiB of zeros,
 *                             fflush, then _exit(0): no destructor runs (zeros_client reads)
 *   stdio_peer kill_writer PORT   the same, then SIGKILL to itself instead of _exit
 *   stdio_peer hold_client PORT   reads all 4 MiB and EOF, then holds the connection 20 s
 *                             (run against exit_writer with a short RDMASOCK_ORPHAN_MS: the
 *                             writer's relay must end while it holds)
 *   stdio_peer stall_client PORT  reads nothing for 6 s, then: fewer than 4 MiB and
 *                             ECONNRESET (the orphaned relay gave up on it)
 *   stdio_peer names PORT     as inetd; the child checks that getpeername(0) names a TCP
 *                             peer after its dup2, then execs `stdio_peer whoami`
 *   stdio_peer whoami -       on stdin/stdout: prints by stdio one line of what the socket
 *                             says it is (names, SO_DOMAIN, SO_PROTOCOL, TCP_NODELAY set
 *                             and read back), as a TCP socket's would say
 *   stdio_peer names_client PORT   reads that line and checks it against its own socket
 *   stdio_peer sigchld PORT   with a SIGCHLD handler, a child of its own and a thread in
 *                             waitpid(-1) for it, runs `lines`: no SIGCHLD, nothing reaped
 *                             but its child, no child left (the relay's helper is not its
 *                             child); sigchld_ign and sigchld_nocldwait: the same with
 *                             SIGCHLD ignored, or a handler with SA_NOCLDWAIT
 * Prints "stdio_peer: MODE: ok" and exits 0, or says what went wrong and exits 1.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "stdio_peer";

static FILE *open_file(int port)
{
	int fd = tcp_connect(port);
	FILE *f;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	f = fdopen(fd, "r+");
	if (f == NULL)
		die("fdopen: %s", strerror(errno));
	return f;
}

static void lines(int port)
{
	FILE *f = open_file(port);
	char want[128], got[128];
	int i;

	setvbuf(f, NULL, _IOLBF, 0);
	for (i = 0; i < 2000; i++) {
		snprintf(want, sizeof(want), "line %d of the stdio test %x\n", i, i * 2654435761u);
		if (fputs(want, f) == EOF)
			die("fputs %d: %s", i, strerror(errno));
		if (fgets(got, sizeof(got), f) == NULL)
			die("fgets %d: %s", i, feof(f) ? "EOF" : strerror(errno));
		if (strcmp(got, want) != 0)
			die("line %d came back as \"%.60s\"", i, got);
	}
	fclose(f);
}

static void bulk(int port)
{
	const size_t n = 1 << 20;
	char *out = malloc(n), *in = malloc(n);
	FILE *f = open_file(port);
	size_t got = 0, k;
	ssize_t bad;

	if (out == NULL || in == NULL)
		die("out of memory");
	pat_fill(out, n, 77, 0);
	if (fwrite(out, 1, n, f) != n || fflush(f) != 0)
		die("fwrite: %s", strerror(errno));
	while (got < n && (k = fread(in + got, 1, n - got, f)) > 0)
		got += k;
	if (got != n)
		die("fread: %zu of %zu bytes", got, n);
	if ((bad = pat_check(in, n, 77, 0)) >= 0)
		die("byte %zd of the echo is wrong", bad);
	fclose(f);
	free(out);
	free(in);
}

/* Each round's four pieces, by four paths, come back as one line in order. */
static void mix(int port)
{
	FILE *f = open_file(port);
	int fd = fileno(f), i;
	char want[160], got[160], piece[40];
	size_t len;

	for (i = 0; i < 300; i++) {
		snprintf(want, sizeof(want), "s%d.f%d.s%d.w%d\n", i, i, i, i);
		snprintf(piece, sizeof(piece), "s%d.", i);
		if (send(fd, piece, strlen(piece), 0) < 0)
			die("send: %s", strerror(errno));
		if (fprintf(f, "f%d.", i) < 0 || fflush(f) != 0)
			die("fprintf: %s", strerror(errno));
		if (send(fd, piece, strlen(piece), 0) < 0)
			die("send: %s", strerror(errno));
		snprintf(piece, sizeof(piece), "w%d\n", i);
		if (write_all(fd, piece, strlen(piece)) < 0)
			die("write: %s", strerror(errno));
		len = strlen(want);
		if (i % 2 == 0) {
			if (read_full(fd, got, len, len) != (ssize_t)len)
				die("recv round %d: %s", i, strerror(errno));
			got[len] = '\0';
		} else if (fgets(got, sizeof(got), f) == NULL) {
			die("fgets round %d: %s", i, feof(f) ? "EOF" : strerror(errno));
		}
		if (strcmp(got, want) != 0)
			die("round %d came back as \"%s\"", i, got);
	}
	fclose(f);
}

static void getc_mode(int port)
{
	FILE *f = open_file(port);
	int c;

	if (write_all(fileno(f), "Q", 1) < 0)
		die("write: %s", strerror(errno));
	c = getc(f);
	if (c != 'Q')
		die("getc gave %d, not 'Q'", c);
	fclose(f);
}

/* Writer and reader at once (a relay's buffers hold less than MiBs): the child writes. */
static void big(int port, long mib)
{
	const size_t n = (size_t)mib << 20, chunk_max = 70001;
	char *buf = malloc(chunk_max), *in = malloc(65536);
	FILE *w = open_file(port), *r;
	size_t off = 0, k, len;
	ssize_t bad;
	pid_t pid;
	int st;

	if (buf == NULL || in == NULL || (r = fdopen(dup(fileno(w)), "r")) == NULL)
		die("setup: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		for (len = 1000; off < n; off += len, len = len * 7 % chunk_max + 1) {
			if (len > n - off)
				len = n - off;
			pat_fill(buf, len, 91, off);
			if (fwrite(buf, 1, len, w) != len)
				die("fwrite at %zu: %s", off, strerror(errno));
		}
		if (fflush(w) != 0 || shutdown(fileno(w), SHUT_WR) != 0)
			die("fflush/shutdown: %s", strerror(errno));
		_exit(0);
	}
	while ((k = fread(in, 1, 65536, r)) > 0) {
		if ((bad = pat_check(in, k, 91, off)) >= 0)
			die("byte %zu of the echo is wrong", off + (size_t)bad);
		off += k;
	}
	if (off != n)
		die("fread: %zu of %zu bytes (%s)", off, n, ferror(r) ? strerror(errno) : "EOF");
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the writer child failed: status %d", st);
	fclose(r);
	fclose(w);
	free(buf);
	free(in);
}

/* The epoll registration made before fdopen follows the socket (not the file it had). */
static void epoll_mode(int port)
{
	int fd = tcp_connect(port), ep = epoll_create1(EPOLL_CLOEXEC), i, n;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x5eed0000u + 7}, got;
	char want[64], line[64];
	FILE *f;

	if (fd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		die("setup: %s", strerror(errno));
	if ((f = fdopen(fd, "r+")) == NULL)
		die("fdopen: %s", strerror(errno));
	for (i = 0; i < 50; i++) {
		snprintf(want, sizeof(want), "epoll line %d\n", i);
		if (fputs(want, f) == EOF || fflush(f) != 0)
			die("fputs: %s", strerror(errno));
		n = epoll_wait(ep, &got, 1, 5000);
		if (n != 1 || !(got.events & EPOLLIN) || got.data.u64 != ev.data.u64)
			die("round %d: epoll_wait gave %d (events %#x)", i, n, n == 1 ? got.events : 0);
		if (fgets(line, sizeof(line), f) == NULL || strcmp(line, want) != 0)
			die("round %d: fgets", i);
	}
	if (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) != 0)
		die("the registration did not follow the socket: DEL: %s", strerror(errno));
	close(ep);
	fclose(f);
}

/* The library carries the first half (accelerated calls), stdio joins mid-stream. */
static void late(int port)
{
	int fd = tcp_connect(port), i;
	char want[96], got[96];
	size_t len;
	FILE *f;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	for (i = 0; i < 200; i++) {
		len = (size_t)snprintf(want, sizeof(want), "early %d %x\n", i, i * 40503u);
		if (send(fd, want, len, 0) != (ssize_t)len || read_full(fd, got, len, len) != (ssize_t)len)
			die("early round %d: %s", i, strerror(errno));
		if (memcmp(got, want, len) != 0)
			die("early round %d came back as \"%.*s\"", i, (int)len, got);
	}
	if ((f = fdopen(fd, "r+")) == NULL)
		die("fdopen: %s", strerror(errno));
	for (i = 0; i < 200; i++) {
		snprintf(want, sizeof(want), "f%d.s%d.w%d\n", i, i, i);
		if (fprintf(f, "f%d.", i) < 0 || fflush(f) != 0)
			die("fprintf: %s", strerror(errno));
		snprintf(got, sizeof(got), "s%d.", i);
		if (send(fd, got, strlen(got), 0) < 0)
			die("send: %s", strerror(errno));
		snprintf(got, sizeof(got), "w%d\n", i);
		if (write_all(fd, got, strlen(got)) < 0)
			die("write: %s", strerror(errno));
		len = strlen(want);
		if (i % 2 == 0 && fgets(got, sizeof(got), f) == NULL)
			die("fgets round %d: %s", i, feof(f) ? "EOF" : strerror(errno));
		if (i % 2 == 1) {
			if (read_full(fd, got, len, len) != (ssize_t)len)
				die("recv round %d: %s", i, strerror(errno));
			got[len] = '\0';
		}
		if (strcmp(got, want) != 0)
			die("late round %d came back as \"%s\"", i, got);
	}
	fclose(f);
}

#define INT_BYTES (4L << 20)

/* Listen on @port (announced by "listening"), accept one connection, and close the
 * listener: the connection. */
static int accept_one(int port)
{
	struct sockaddr_in a = loopback(port);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, fd;

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0)
		die("listen: %s", strerror(errno));
	printf("listening\n");
	if ((fd = accept(l, NULL, NULL)) < 0)
		die("accept: %s", strerror(errno));
	close(l);
	return fd;
}

/* The socket behind fd 0, seen after the dup2 in this process, must name a TCP peer. */
static void names_child_check(void)
{
	struct sockaddr_storage b;
	socklen_t bl = sizeof(b);

	if (getpeername(0, (struct sockaddr *)&b, &bl) < 0 ||
	    (b.ss_family != AF_INET && b.ss_family != AF_INET6))
		_exit(125);
}

/* Accept one connection; a child puts it on stdin and stdout and execs @argv (in a process
 * group of its own if @own_group); the child's wait status. */
static int inetd_run(int port, char *const argv[], int own_group)
{
	int fd = accept_one(port), st;
	pid_t pid;

	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		if ((own_group && setpgid(0, 0) < 0) || dup2(fd, 0) < 0 || dup2(fd, 1) < 0)
			_exit(126);
		close(fd);
		if (strcmp(argv[1], "whoami") == 0)
			names_child_check();
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fd);
	if (waitpid(pid, &st, 0) < 0)
		die("waitpid: %s", strerror(errno));
	return st;
}

/* "IP:PORT" of @a. */
static void name_text(const struct sockaddr_storage *a, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (a->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in *)a)->sin_port);
	} else if (a->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
	}
	snprintf(out, n, "%d/%s:%d", a->ss_family, ip, port);
}

/* What socket @fd says it is: "sock=F/IP:PORT peer=F/IP:PORT domain=D proto=P nodelay=R/V". */
static void whoami_line(int fd, char *out, size_t n)
{
	struct sockaddr_storage a, b;
	socklen_t al = sizeof(a), bl = sizeof(b), il = sizeof(int);
	char sa[96], sb[96];
	int dom = -1, proto = -1, one = 1, v = -1, rc;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (getsockname(fd, (struct sockaddr *)&a, &al) < 0 ||
	    getpeername(fd, (struct sockaddr *)&b, &bl) < 0)
		die("names: %s", strerror(errno));
	(void)getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &il);
	il = sizeof(int);
	(void)getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &il);
	rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	il = sizeof(int);
	if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &il) < 0)
		v = -errno;
	name_text(&a, sa, sizeof(sa));
	name_text(&b, sb, sizeof(sb));
	snprintf(out, n, "sock=%s peer=%s domain=%d proto=%d nodelay=%d/%d", sa, sb, dom, proto,
		 rc < 0 ? -errno : rc, v != 0);
}

static void whoami(void)
{
	char line[400];

	whoami_line(0, line, sizeof(line));
	printf("%s\n", line);
	fflush(stdout);
}

/* inetd_run, whose child must exit 0. */
static void inetd_ok(int port, char *const argv[])
{
	int st = inetd_run(port, argv, 0);

	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the inetd child (%s) failed: status %d", argv[0], st);
}

static void names(int port)
{
	char *const argv[] = {"/proc/self/exe", "whoami", "-", NULL};

	inetd_ok(port, argv);
}

/* The server's line, against this end: its sock is our peer, its peer our sock. */
static void names_client(int port)
{
	int fd = tcp_connect(port);
	struct sockaddr_storage a, b;
	socklen_t al = sizeof(a), bl = sizeof(b);
	char got[400], want[400], sa[96], sb[96];
	ssize_t k, n = 0;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	if (getsockname(fd, (struct sockaddr *)&a, &al) < 0 ||
	    getpeername(fd, (struct sockaddr *)&b, &bl) < 0)
		die("own names: %s", strerror(errno));
	name_text(&b, sa, sizeof(sa));
	name_text(&a, sb, sizeof(sb));
	snprintf(want, sizeof(want), "sock=%s peer=%s domain=%d proto=%d nodelay=0/1", sa, sb,
		 a.ss_family, IPPROTO_TCP);
	while (n < (ssize_t)sizeof(got) - 1 && (k = read(fd, got + n, 1)) == 1 && got[n] != '\n')
		n++;
	got[n] = '\0';
	if (strcmp(got, want) != 0)
		die("the server's socket says \"%s\", want \"%s\"", got, want);
	printf("names: %s\n", got);
	close(fd);
}

static void inetd(int port)
{
	char *const argv[] = {"sed", "-u", "s/^/re:/", NULL};

	inetd_ok(port, argv);
}

static void inetd_int(int port)
{
	char *const argv[] = {"sh", "-c", "head -c 4194304 /dev/zero; kill -INT 0; sleep 5",
			      NULL};
	int st = inetd_run(port, argv, 1);

	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGINT)
		die("the job was not ended by its SIGINT: status %d", st);
}

/* Accept one connection, write INT_BYTES zeros to it through stdio and die at once without
 * any destructor: by _exit(0), or by SIGKILL (@kill_self). Over TCP the kernel goes on
 * sending the dead process's queue, then FIN: zeros_client must get all of it. */
static void die_writer(int port, int kill_self)
{
	int fd = accept_one(port);
	static char zeros[INT_BYTES];
	FILE *f;

	if ((f = fdopen(fd, "w")) == NULL)
		die("fdopen: %s", strerror(errno));
	if (fwrite(zeros, 1, sizeof(zeros), f) != sizeof(zeros) || fflush(f) != 0)
		die("fwrite: %s", strerror(errno));
	printf("written\n");
	if (kill_self)
		kill(getpid(), SIGKILL);
	_exit(0);
}

/* Everything until EOF: INT_BYTES zeros. */
static void zeros_client(int port)
{
	int fd = tcp_connect(port);
	char b[65536];
	long total = 0;
	ssize_t k, i;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	/* Read only after the job is gone: the stream's window holds far less than 4 MiB, so
	 * most of it is still in the relay's pipe then, for the relay alone to deliver. */
	sleep(1);
	while ((k = read(fd, b, sizeof(b))) > 0) {
		for (i = 0; i < k; i++)
			if (b[i] != 0)
				die("byte %ld is %d", total + i, b[i]);
		total += k;
	}
	if (k < 0)
		die("read after %ld bytes: %s", total, strerror(errno));
	if (total != INT_BYTES)
		die("EOF after %ld bytes of %ld", total, INT_BYTES);
	close(fd);
}

/* Connect, wait @secs, then read until EOF or an error: how many bytes, and the last
 * read's result (0 at EOF, -1 with errno). */
static ssize_t late_drain(int port, unsigned int secs, int *fdp, long *total)
{
	char b[65536];
	ssize_t k;

	if ((*fdp = tcp_connect(port)) < 0)
		die("connect: %s", strerror(errno));
	sleep(secs);
	*total = 0;
	while ((k = read(*fdp, b, sizeof(b))) > 0)
		*total += k;
	return k;
}

/* An exit_writer's peer that reads everything, then neither writes nor closes for @hold
 * seconds: the writer's relay, an orphan waiting for our FIN, must not wait that long. */
static void hold_client(int port, unsigned int hold)
{
	long total;
	int fd;
	ssize_t k = late_drain(port, 0, &fd, &total);

	if (k < 0 || total != INT_BYTES)
		die("%ld bytes, then %s", total, k < 0 ? strerror(errno) : "EOF");
	printf("all %ld bytes, then EOF; holding %u s\n", total, hold);
	sleep(hold);
	close(fd);
}

/* An exit_writer's peer that reads nothing for @stall seconds: the orphan gives up on it.
 * Then: what it buffered for us, and ECONNRESET, as from the kernel's aborted orphan. */
static void stall_client(int port, unsigned int stall)
{
	long total;
	int fd;
	ssize_t k = late_drain(port, stall, &fd, &total);

	if (k == 0)
		die("all %ld bytes, then EOF: the orphan waited %u s for a peer that read nothing",
		    total, stall);
	if (errno != ECONNRESET || total >= INT_BYTES)
		die("%ld bytes, then %s", total, strerror(errno));
	printf("%ld of %ld bytes, then ECONNRESET\n", total, INT_BYTES);
	close(fd);
}

/* The client of the inetd server reads with read(): only the server side uses stdio. */
static void inetd_client(int port)
{
	int fd = tcp_connect(port), i;
	char want[96], got[96], line[80];
	size_t len;

	if (fd < 0)
		die("connect: %s", strerror(errno));
	for (i = 0; i < 500; i++) {
		snprintf(line, sizeof(line), "request %d\n", i);
		snprintf(want, sizeof(want), "re:%s", line);
		len = strlen(want);
		if (write_all(fd, line, strlen(line)) < 0)
			die("write: %s", strerror(errno));
		if (read_full(fd, got, len, len) != (ssize_t)len)
			die("answer %d: %s", i, strerror(errno));
		got[len] = '\0';
		if (strcmp(got, want) != 0)
			die("answer %d was \"%s\"", i, got);
	}
	shutdown(fd, SHUT_WR);
	if (read(fd, got, 1) != 0)
		die("more after the last answer");
	close(fd);
}

/* ---- the relay's helper is no child of the program ---- */

static volatile sig_atomic_t chld_signals;

static void on_chld(int sig)
{
	(void)sig;
	chld_signals++;
}

struct reaper {
	pid_t own;    /* the program's own child, which the reaper waits for */
	pid_t other;  /* a pid it reaped that the program never made (0: none) */
};

/* A thread in a blocking waitpid(-1) while the relay starts, as a program that reaps every
 * child does: it must get its own child and nothing else. */
static void *reaper_main(void *arg)
{
	struct reaper *r = arg;
	pid_t p;
	int st;

	while ((p = waitpid(-1, &st, 0)) != r->own) {
		if (p > 0 && r->other == 0)
			r->other = p;
		if (p < 0 && errno != EINTR)
			break;
	}
	return NULL;
}

/*
 * sigchld PORT (a SIGCHLD handler), sigchld_ign (SIGCHLD ignored), sigchld_nocldwait (a
 * handler with SA_NOCLDWAIT): the program has a child of its own and a thread blocked in
 * waitpid(-1) for it, then relays a connection (fdopen, 2,000 lines). Over kernel TCP no
 * SIGCHLD comes and only its own child is reaped; so here: no SIGCHLD before its child ends,
 * the reaper gets that child only, and then no child at all is left (not even a clone
 * child, __WALL: the library reaps what it made).
 */
static void sigchld_mode(int port, const char *how)
{
	struct reaper r = {0, 0};
	struct sigaction sa;
	pthread_t t;
	int gate[2], st;
	char b;
	pid_t p;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = strcmp(how, "sigchld_ign") == 0 ? SIG_IGN : on_chld;
	sa.sa_flags = SA_RESTART | (strcmp(how, "sigchld_nocldwait") == 0 ? SA_NOCLDWAIT : 0);
	if (sigaction(SIGCHLD, &sa, NULL) < 0 || pipe(gate) < 0)
		die("sigaction/pipe: %s", strerror(errno));
	r.own = fork();
	if (r.own < 0)
		die("fork: %s", strerror(errno));
	if (r.own == 0) {
		close(gate[1]);
		_exit(read(gate[0], &b, 1) < 0);
	}
	close(gate[0]);
	if (sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_NOCLDWAIT) &&
	    pthread_create(&t, NULL, reaper_main, &r) != 0)
		die("pthread_create");
	lines(port); /* the relay starts: its helper is forked */
	if (chld_signals != 0)
		die("%d SIGCHLD before the program's own child ended", (int)chld_signals);
	close(gate[1]);
	if (sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_NOCLDWAIT)) {
		pthread_join(t, NULL);
		if (r.other != 0)
			die("waitpid(-1) reaped pid %d, which the program never made", (int)r.other);
	} else { /* its child is reaped by the kernel: wait until it is gone */
		while (waitpid(r.own, &st, 0) == r.own || errno == EINTR)
			;
	}
	p = waitpid(-1, &st, WNOHANG | __WALL);
	if (p != -1 || errno != ECHILD)
		die("a child is left to reap: waitpid(-1, __WALL) gave %d (%s)", (int)p,
		    p < 0 ? strerror(errno) : "a pid");
}

int main(int argc, char **argv)
{
	int port;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && strcmp(argv[1], "whoami") == 0) {
		whoami(); /* stdout is the socket: nothing more on it */
		return 0;
	}
	if (argc != 3 && !(argc == 4 && strcmp(argv[1], "big") == 0))
		die("usage: stdio_peer MODE PORT (big: MODE PORT MIB)");
	port = port_arg(argv[2]);
	if (strcmp(argv[1], "lines") == 0)
		lines(port);
	else if (strcmp(argv[1], "bulk") == 0)
		bulk(port);
	else if (strcmp(argv[1], "mix") == 0)
		mix(port);
	else if (strcmp(argv[1], "getc") == 0)
		getc_mode(port);
	else if (strcmp(argv[1], "big") == 0)
		big(port, argc == 4 ? atol(argv[3]) : 8);
	else if (strcmp(argv[1], "late") == 0)
		late(port);
	else if (strcmp(argv[1], "epoll") == 0)
		epoll_mode(port);
	else if (strcmp(argv[1], "inetd") == 0)
		inetd(port);
	else if (strcmp(argv[1], "inetd_client") == 0)
		inetd_client(port);
	else if (strcmp(argv[1], "inetd_int") == 0)
		inetd_int(port);
	else if (strcmp(argv[1], "names") == 0)
		names(port);
	else if (strcmp(argv[1], "names_client") == 0)
		names_client(port);
	else if (strcmp(argv[1], "hold_client") == 0)
		hold_client(port, 20);
	else if (strcmp(argv[1], "stall_client") == 0)
		stall_client(port, 6);
	else if (strcmp(argv[1], "zeros_client") == 0)
		zeros_client(port);
	else if (strcmp(argv[1], "exit_writer") == 0)
		die_writer(port, 0);
	else if (strcmp(argv[1], "kill_writer") == 0)
		die_writer(port, 1);
	else if (strncmp(argv[1], "sigchld", 7) == 0)
		sigchld_mode(port, argv[1]);
	else
		die("unknown mode %s", argv[1]);
	printf("stdio_peer: %s: ok\n", argv[1]);
	return 0;
}
