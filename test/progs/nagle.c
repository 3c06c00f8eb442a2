/*
 * Coalescing of small writes as the application sees it (test_nagle.sh). One process forks:
 * the parent serves, the child is the client; both run under the library when preloaded.
 *
 *   nagle coalesce   64 writes of 16 B while the server is slow to read: Nagle is on (TCP's
 *                    default), so they may be merged; the bytes must arrive intact.
 *   nagle nodelay    the same with TCP_NODELAY set: nothing may be merged.
 *   nagle tick       write "x", write "y" (held back behind the unread "x"), then sleep
 *                    where the library cannot see (nanosleep): "y" must still reach the
 *                    server within 50 ms of it starting to read. Nothing waits on the
 *                    client's side; only the library's own timer can post it.
 *   nagle cork       TCP_CORK on, three writes, a send(MSG_MORE), TCP_CORK off: all arrive.
 *   nagle waitpush   200 rounds of write(8 B) write(8 B) read(1 B): the client waits in
 *                    read(), so what it staged must go at once; bounded at 5 s in all.
 *                    The kernel's own TCP stalls ~40 ms per round here (Nagle against
 *                    delayed ACK), so on a kernel connection only 20 rounds are run.
 *
 * The client prints the library's writes_coalesced and messages_sent counters (asked
 * through rdmasock_get_stats when the library is loaded); the script asserts them from the
 * RDMASOCK_STATS lines as well.
 */
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>

#include "../../include/rdmasock.h"
#include "progs.h"

const char *prog_name = "nagle";

#define NWRITES 64
#define WSIZE 16
#define ROUNDS 200

static void lib_counters(uint64_t *coalesced, uint64_t *messages)
{
	int (*get)(struct rdmasock_stats *, size_t) =
		(int (*)(struct rdmasock_stats *, size_t))dlsym(RTLD_DEFAULT, "rdmasock_get_stats");
	struct rdmasock_stats s;
	int t;

	*coalesced = *messages = 0;
	if (get == NULL || get(&s, sizeof(s)) < 0)
		return;
	*coalesced = s.writes_coalesced;
	for (t = 0; t < RDMASOCK_TRANSPORT_COUNT; t++)
		*messages += s.messages_sent[t];
}

static void set_opt(int fd, int name, int v)
{
	if (setsockopt(fd, IPPROTO_TCP, name, &v, sizeof(v)) < 0)
		die("setsockopt(%d, %d): %s", name, v, strerror(errno));
}

static void read_reply(int fd)
{
	char k;

	if (read_full(fd, &k, 1, 0) != 1 || k != 'k')
		die("no reply from the server");
}

static void client(int port, const char *mode)
{
	uint8_t buf[NWRITES * WSIZE];
	struct timespec nap = {0, 400 * 1000 * 1000};
	uint64_t coalesced, messages;
	double t0;
	int fd, i;

	fd = tcp_connect(port);
	if (fd < 0)
		die("connect: %s", strerror(errno));
	pat_fill(buf, sizeof(buf), 7, 0);
	if (strcmp(mode, "nodelay") == 0)
		set_opt(fd, TCP_NODELAY, 1);
	if (strcmp(mode, "coalesce") == 0 || strcmp(mode, "nodelay") == 0) {
		for (i = 0; i < NWRITES; i++)
			if (write_all(fd, buf + i * WSIZE, WSIZE) < 0)
				die("write: %s", strerror(errno));
		read_reply(fd);
	} else if (strcmp(mode, "tick") == 0) {
		if (write_all(fd, "x", 1) < 0 || write_all(fd, "y", 1) < 0)
			die("write: %s", strerror(errno));
		nanosleep(&nap, NULL); /* the library sees nothing of this wait */
		read_reply(fd);
	} else if (strcmp(mode, "cork") == 0) {
		set_opt(fd, TCP_CORK, 1);
		for (i = 0; i < 3; i++)
			if (write_all(fd, buf + i * WSIZE, WSIZE) < 0)
				die("write: %s", strerror(errno));
		if (send(fd, buf + 3 * WSIZE, WSIZE, MSG_MORE) != WSIZE)
			die("send(MSG_MORE): %s", strerror(errno));
		set_opt(fd, TCP_CORK, 0);
		read_reply(fd);
	} else if (strcmp(mode, "waitpush") == 0) {
		int (*transport)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");
		uint8_t rounds = ROUNDS;

		if (transport == NULL || transport(fd) == RDMASOCK_TRANSPORT_KERNEL)
			rounds = ROUNDS / 10;
		set_opt(fd, TCP_NODELAY, 0);
		if (write_all(fd, &rounds, 1) < 0)
			die("write: %s", strerror(errno));
		read_reply(fd);
		t0 = now_sec();
		for (i = 0; i < rounds; i++) {
			if (write_all(fd, buf, 8) < 0 || write_all(fd, buf + 8, 8) < 0)
				die("write: %s", strerror(errno));
			read_reply(fd);
			if (now_sec() - t0 > 5)
				die("FAIL: waitpush: only %d rounds in 5 s", i);
		}
		prog_msg("waitpush: %d rounds in %.3f s", rounds, now_sec() - t0);
	} else {
		die("unknown mode %s", mode);
	}
	lib_counters(&coalesced, &messages);
	printf("nagle: %s: coalesced=%llu messages=%llu\n", mode, (unsigned long long)coalesced,
	       (unsigned long long)messages);
	fflush(stdout);
	close(fd);
}

static void serve_pattern(int fd, size_t n, int delay_ms)
{
	uint8_t buf[NWRITES * WSIZE];
	ssize_t bad;

	usleep((useconds_t)delay_ms * 1000);
	if (read_full(fd, buf, n, 0) != (ssize_t)n)
		die("server: short read");
	if ((bad = pat_check(buf, n, 7, 0)) >= 0)
		die("FAIL: server: byte %zd corrupt", bad);
	if (write_all(fd, "k", 1) < 0)
		die("server: write: %s", strerror(errno));
}

static void server(int lfd, const char *mode)
{
	char b[2];
	double t0, dt;
	int fd, i;

	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	if (strcmp(mode, "coalesce") == 0 || strcmp(mode, "nodelay") == 0) {
		serve_pattern(fd, NWRITES * WSIZE, 50);
	} else if (strcmp(mode, "cork") == 0) {
		serve_pattern(fd, 4 * WSIZE, 0);
	} else if (strcmp(mode, "tick") == 0) {
		usleep(100 * 1000); /* "x" stays unread: the client's "y" is held back */
		t0 = now_sec();
		if (read_full(fd, b, 2, 0) != 2 || memcmp(b, "xy", 2) != 0)
			die("FAIL: tick: did not read \"xy\"");
		dt = now_sec() - t0;
		if (dt > 0.05)
			die("FAIL: tick: the held-back byte took %.1f ms", dt * 1000);
		prog_msg("tick: held-back byte after %.3f ms", dt * 1000);
		if (write_all(fd, "k", 1) < 0)
			die("server: write: %s", strerror(errno));
	} else if (strcmp(mode, "waitpush") == 0) {
		uint8_t rounds;

		if (read_full(fd, &rounds, 1, 0) != 1 || write_all(fd, "k", 1) < 0)
			die("server: no round count");
		for (i = 0; i < rounds; i++) {
			uint8_t r[16];

			if (read_full(fd, r, 16, 0) != 16 || write_all(fd, "k", 1) < 0)
				die("server: round %d failed", i);
		}
	}
	if (read(fd, b, 1) != 0)
		die("server: expected EOF");
	close(fd);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);
	int lfd, status = 0;
	pid_t pid;

	if (argc != 2)
		die("usage: nagle coalesce|nodelay|tick|cork|waitpush");
	alarm(CLIENT_TIME_LIMIT);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		die("listen: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(lfd);
		client(ntohs(sa.sin_port), argv[1]);
		exit(0);
	}
	server(lfd, argv[1]);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("FAIL: client failed (status %d)", status);
	printf("nagle: %s: ok\n", argv[1]);
	return 0;
}
