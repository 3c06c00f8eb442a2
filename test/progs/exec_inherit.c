/*
 * exec() with accelerated sockets: a connected pair is made inside this (preloaded) process,
 * the data side keeps its socket open across exec (no FD_CLOEXEC) and the new image reads it.
 * The new image must see EOF (0) and writes must fail (EPIPE): never the library's readiness
 * token bytes, never a hang. Usage: exec_inherit   (re-execs itself with the fd number)
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int after_exec(int fd)
{
	char buf[64];
	ssize_t n;

	alarm(10);
	signal(SIGPIPE, SIG_IGN);
	n = read(fd, buf, sizeof(buf));
	if (n != 0) {
		printf("exec_inherit: FAIL: read after exec returned %zd (%s)\n", n,
		       n < 0 ? strerror(errno) : "bytes");
		return 1;
	}
	n = write(fd, "x", 1);
	if (n >= 0) {
		printf("exec_inherit: FAIL: write after exec succeeded\n");
		return 1;
	}
	printf("exec_inherit: read 0 (EOF), write %s: ok\n", strerror(errno));
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int (*tr)(int);
	char num[16];
	int l, c, s;

	if (argc > 1)
		return after_exec(atoi(argv[1]));
	alarm(10);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return 2;
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return 2;
	s = accept(l, NULL, NULL);
	if (s < 0 || write(s, "before-exec", 11) != 11)
		return 2;
	/* Which path carries it: exec replaces the image before any stats line is written, so
	 * the library is asked directly (no link: dlsym finds it only when preloaded). */
	tr = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");
	printf("exec_inherit: transport %d\n", tr ? tr(c) : -1);
	fflush(stdout);
	snprintf(num, sizeof(num), "%d", c);
	execl("/proc/self/exe", argv[0], num, (char *)NULL);
	return 3;
}
