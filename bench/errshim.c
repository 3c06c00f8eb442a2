/*
 * errshim: a measurement aid, not part of the library. Preloaded in front of
 * librdmasock (LD_PRELOAD="errshim.so librdmasock.so"), it records every socket call
 * that returns an error the application sees, with errno, so the errors the library
 * returns from its own data path (no system call, invisible to strace) can be compared
 * with what kernel TCP would return. EAGAIN/EINPROGRESS are counted, not logged.
 * Output: one line per call to $ERRSHIM_FILE (default stderr).
 *   cc -O2 -shared -fPIC -o errshim.so bench/errshim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static int shim_fd = -1;
static unsigned long shim_again;

static void shim_log(const char *call, int fd, long rc, int err)
{
	char line[256];
	int n;

	if (err == EAGAIN || err == EINPROGRESS) {
		__atomic_add_fetch(&shim_again, 1, __ATOMIC_RELAXED);
		return;
	}
	if (shim_fd < 0) {
		const char *p = getenv("ERRSHIM_FILE");
		shim_fd = p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
		if (shim_fd < 0)
			shim_fd = 2;
	}
	n = snprintf(line, sizeof(line), "errshim[%d]: %s(fd %d) = %ld errno %d %s\n", getpid(), call,
		     fd, rc, err, strerror(err));
	(void)!write(shim_fd, line, (size_t)n);
}

#define NEXT(name) static __typeof__(name) *next; if (!next) next = dlsym(RTLD_NEXT, #name)
#define CHECK(call, fd, rc)                                                                 \
	do {                                                                                \
		if ((rc) < 0) {                                                             \
			int e_ = errno;                                                     \
			shim_log(call, fd, (long)(rc), e_);                                 \
			errno = e_;                                                         \
		}                                                                           \
	} while (0)

ssize_t send(int fd, const void *b, size_t n, int f) { NEXT(send); ssize_t r = next(fd, b, n, f); CHECK("send", fd, r); return r; }
ssize_t write(int fd, const void *b, size_t n) { NEXT(write); ssize_t r = next(fd, b, n); CHECK("write", fd, r); return r; }
ssize_t writev(int fd, const struct iovec *v, int c) { NEXT(writev); ssize_t r = next(fd, v, c); CHECK("writev", fd, r); return r; }
ssize_t sendmsg(int fd, const struct msghdr *m, int f) { NEXT(sendmsg); ssize_t r = next(fd, m, f); CHECK("sendmsg", fd, r); return r; }
ssize_t recv(int fd, void *b, size_t n, int f) { NEXT(recv); ssize_t r = next(fd, b, n, f); CHECK("recv", fd, r); return r; }
ssize_t read(int fd, void *b, size_t n) { NEXT(read); ssize_t r = next(fd, b, n); CHECK("read", fd, r); return r; }
ssize_t readv(int fd, const struct iovec *v, int c) { NEXT(readv); ssize_t r = next(fd, v, c); CHECK("readv", fd, r); return r; }
ssize_t recvmsg(int fd, struct msghdr *m, int f) { NEXT(recvmsg); ssize_t r = next(fd, m, f); CHECK("recvmsg", fd, r); return r; }
int connect(int fd, const struct sockaddr *a, socklen_t l) { NEXT(connect); int r = next(fd, a, l); CHECK("connect", fd, r); return r; }
int accept(int fd, struct sockaddr *a, socklen_t *l) { NEXT(accept); int r = next(fd, a, l); CHECK("accept", fd, r); return r; }
int accept4(int fd, struct sockaddr *a, socklen_t *l, int f) { NEXT(accept4); int r = next(fd, a, l, f); CHECK("accept4", fd, r); return r; }
int getsockopt(int fd, int lv, int nm, void *v, socklen_t *l)
{
	NEXT(getsockopt);
	int r = next(fd, lv, nm, v, l);
	CHECK("getsockopt", fd, r);
	if (r == 0 && lv == SOL_SOCKET && nm == SO_ERROR && *(int *)v != 0)
		shim_log("getsockopt(SO_ERROR) value", fd, *(int *)v, *(int *)v);
	return r;
}
