/*
 * The frame shared by the one-check-at-a-time programs (semantics.c, readiness.c): failure
 * reporting (FAILF/REQ/TRY into `why`), the per-check listener, the transport each connection
 * must be on (SEMANTICS_EXPECT, asked of the library with dlsym), and the runner that puts
 * each check in a forked child with a time limit, so a hang fails that check only.
 * Include after progs.h; the program defines prog_name and its table of checks.
 */
#ifndef RSK_CHECKS_H
#define RSK_CHECKS_H

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "progs.h"

static char why[768];
static int lfd = -1;	   /* this check's listener */
static int lport;	   /* its port */
static int expect_tr = -1; /* transport every connection must be on, -1 = do not check */

#define FAILF(...)                                                                                 \
	do {                                                                                       \
		snprintf(why, sizeof(why), __VA_ARGS__);                                           \
		return -1;                                                                         \
	} while (0)
#define REQ(cond, ...)                                                                             \
	do {                                                                                       \
		if (!(cond))                                                                       \
			FAILF(__VA_ARGS__);                                                        \
	} while (0)
#define TRY(expr)                                                                                  \
	do {                                                                                       \
		if ((expr) < 0)                                                                    \
			return -1;                                                                 \
	} while (0)

/* rdmasock_fd_transport(@fd), or -2 when the library is not loaded. */
static inline int transport_of(int fd)
{
	static int (*fn)(int);
	static int looked;

	if (!looked) {
		fn = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");
		looked = 1;
	}
	return fn != NULL ? fn(fd) : -2;
}

static inline const char *trname(int t)
{
	return t == 0 ? "kernel" : t == 1 ? "shm" : t == 2 ? "verbs" : t == -2 ? "no library" : "?";
}

static inline int on_transport(int fd, const char *what)
{
	int t;

	if (expect_tr < 0)
		return 0;
	t = transport_of(fd);
	REQ(t == expect_tr, "%s (fd %d) is carried by %s, expected %s", what, fd, trname(t),
	    trname(expect_tr));
	return 0;
}

static inline int make_listener(void)
{
	struct sockaddr_in sa = loopback(0);
	socklen_t len = sizeof(sa);

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		FAILF("listener: %s", strerror(errno));
	lport = ntohs(sa.sin_port);
	return 0;
}

/* poll one fd for @events up to @ms; returns revents (0 on timeout). */
static inline short poll1(int fd, short events, int ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n;

	do
		n = poll(&p, 1, ms);
	while (n < 0 && errno == EINTR);
	return n > 0 ? p.revents : 0;
}

static inline int send_all(int fd, const void *b, size_t n)
{
	REQ(write_all(fd, b, n) == 0, "write of %zu bytes: %s", n, strerror(errno));
	return 0;
}

static inline int recv_exact(int fd, void *b, size_t n)
{
	ssize_t r = read_full(fd, b, n, 0);

	REQ(r == (ssize_t)n, "read %zd of %zu bytes (%s)", r, n, r < 0 ? strerror(errno) : "EOF");
	return 0;
}

struct check {
	const char *name;
	int (*fn)(void);
};

/* Run @k in a forked child limited to @secs; 0 if it printed ok. */
static inline int run_check(const struct check *k, int secs, int ignore_sigpipe)
{
	int status, rc;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		alarm((unsigned int)secs);
		if (ignore_sigpipe)
			signal(SIGPIPE, SIG_IGN);
		why[0] = '\0';
		rc = make_listener();
		if (rc == 0)
			rc = k->fn();
		if (rc == 0)
			printf("%s: check %s: ok\n", prog_name, k->name);
		else
			printf("%s: check %s: FAIL: %s\n", prog_name, k->name, why);
		fflush(NULL);
		exit(rc == 0 ? 0 : 1); /* exit(): the child writes its stats line */
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status))
		return WEXITSTATUS(status) == 0 ? 0 : -1;
	printf("%s: check %s: FAIL: killed by signal %d%s\n", prog_name, k->name, WTERMSIG(status),
	       WTERMSIG(status) == SIGALRM ? " (SIGALRM: still running after the time limit)" : "");
	return -1;
}

/* main(): the checks named in argv (default: all, in order); exit 1 if any failed. */
static inline int run_checks(int argc, char **argv, const struct check *checks, int n, int secs,
			     int ignore_sigpipe)
{
	const char *ex = getenv("SEMANTICS_EXPECT");
	int i, j, ran = 0, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (ex != NULL && strcmp(ex, "kernel") == 0)
		expect_tr = 0;
	else if (ex != NULL && strcmp(ex, "shm") == 0)
		expect_tr = 1;
	else if (ex != NULL && *ex)
		die("SEMANTICS_EXPECT must be kernel or shm");
	if (expect_tr >= 0 && transport_of(-1) == -2)
		die("SEMANTICS_EXPECT is set but the library is not loaded");
	for (i = 0; i < n; i++) {
		if (argc > 1) {
			for (j = 1; j < argc && strcmp(argv[j], checks[i].name) != 0; j++)
				;
			if (j == argc)
				continue;
		}
		ran++;
		if (run_check(&checks[i], secs, ignore_sigpipe) < 0)
			failed++;
	}
	printf("%s: %d checks, %d failed\n", prog_name, ran, failed);
	return failed ? 1 : 0;
}

#endif
