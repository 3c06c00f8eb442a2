/*
 * fdbudget: how many connections a process can hold, and how many fds each costs, with
 * and without the library (a measurement aid; bounded by counts and a deadline).
 *
 *   fdbudget server PORT SECONDS   accept (poll loop), echo 1-byte requests, hold every
 *                                  connection; prints accept errors, and every 25 accepted
 *                                  connections the process's fd count; exits after SECONDS
 *                                  or on SIGTERM/SIGINT.
 *   fdbudget client PORT N         open up to N connections one after another (blocking
 *                                  connect, send 1 byte, read the echo with a 2 s timeout),
 *                                  holding each; stops at the first failure and prints the
 *                                  step and errno; prints the fd count every 25 connections.
 * Both print "fds per connection" = (open fds - fds before the first connection) / n,
 * where open fds are the entries of /proc/self/fd (hidden library fds included).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int count_fds(int *maxfd)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0, fd;

	*maxfd = -1;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		fd = atoi(e->d_name);
		if (fd == dirfd(d))
			continue;
		n++;
		if (fd > *maxfd)
			*maxfd = fd;
	}
	closedir(d);
	return n;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s; stop = 1; }

static void report(const char *who, int n, int base)
{
	int maxfd, fds = count_fds(&maxfd);

	printf("%s: %d connections, %d fds open (max fd %d), %.2f fds per connection\n", who, n,
	       fds, maxfd, n ? (double)(fds - base) / n : 0.0);
	fflush(stdout);
}

static int server(int port, int seconds)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct pollfd *p;
	int lfd, one = 1, n = 1, i, base, maxfd, errs = 0, last_err = 0, held = 0;
	double end = now_s() + seconds;
	struct rlimit rl;
	char b;

	getrlimit(RLIMIT_NOFILE, &rl);
	p = calloc(rl.rlim_cur + 1, sizeof(*p));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (void *)&a, sizeof(a)) < 0 || listen(lfd, 1024) < 0) {
		perror("server: bind/listen");
		return 1;
	}
	base = count_fds(&maxfd);
	printf("server: listening on %d, RLIMIT_NOFILE %lu, %d fds open before any connection\n",
	       port, (unsigned long)rl.rlim_cur, base);
	fflush(stdout);
	p[0].fd = lfd;
	p[0].events = POLLIN;
	while (!stop && now_s() < end) {
		if (poll(p, (nfds_t)n, 100) <= 0)
			continue;
		if (p[0].revents & POLLIN) {
			int c = accept(lfd, NULL, NULL);

			if (c < 0) {
				if (errs++ < 5 || errno != last_err)
					printf("server: accept failed after %d held: %s (errno %d)\n",
					       held, strerror(errno), errno);
				last_err = errno;
				if (errno == EMFILE || errno == ENFILE)
					usleep(10000);
			} else {
				p[n].fd = c;
				p[n].events = POLLIN;
				n++;
				held++;
				if (held % 25 == 0)
					report("server", held, base);
			}
		}
		for (i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			if (read(p[i].fd, &b, 1) == 1) {
				(void)!write(p[i].fd, &b, 1);
			} else {
				close(p[i].fd);
				p[i] = p[--n];
				held--;
				i--;
			}
		}
	}
	report("server", held, base);
	printf("server: %d accept errors\n", errs);
	return 0;
}

static int client(int port, int want)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {2, 0};
	int n, fd, base, maxfd;
	char b = 'x';
	const char *step = NULL;
	int err = 0;
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	base = count_fds(&maxfd);
	printf("client: RLIMIT_NOFILE %lu, %d fds open before any connection\n",
	       (unsigned long)rl.rlim_cur, base);
	for (n = 0; n < want; n++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0) { step = "socket"; err = errno; break; }
		if (connect(fd, (void *)&a, sizeof(a)) < 0) { step = "connect"; err = errno; break; }
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (send(fd, &b, 1, MSG_NOSIGNAL) != 1) { step = "send"; err = errno; break; }
		ssize_t r = recv(fd, &b, 1, 0);
		if (r != 1) { step = r == 0 ? "recv (EOF)" : "recv"; err = r == 0 ? 0 : errno; break; }
		if ((n + 1) % 25 == 0)
			report("client", n + 1, base);
	}
	if (step != NULL)
		printf("client: connection %d failed at %s: %s (errno %d)\n", n + 1, step,
		       err ? strerror(err) : "-", err);
	report("client", n, base);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGTERM, on_sig);
	signal(SIGINT, on_sig);
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4 && strcmp(argv[1], "server") == 0)
		return server(atoi(argv[2]), atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "client") == 0)
		return client(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: fdbudget server PORT SECONDS | client PORT N\n");
	return 2;
}
