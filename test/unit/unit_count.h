/*
 * Counting the system calls core/ makes during a setup: wrappers put in the slots of rsk_real
 * (the table every call of core/ into libc goes through), counting only the calls of the
 * test's own thread (the event loop's are not the setup's). Counts by call, fcntl by command,
 * and the name calls also for one watched fd (the accepted socket's own). Include after
 * <cmocka.h>.
 */
#ifndef RSK_TEST_UNIT_COUNT_H
#define RSK_TEST_UNIT_COUNT_H

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>

#include "base/real.h"

struct ucn_counts {
	int getfl, setfl, getfd, setfd, dupfd; /* fcntl by command */
	int getsockname, getpeername, getsockopt, poll, close, dup3, accept4;
	int watched_names; /* getsockname/getpeername on ucn_watch_fd */
};

static struct ucn_counts ucn;
static pthread_t ucn_thread;
static int ucn_watch_fd = -1;
static struct {
	int (*fcntl)(int, int, ...);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*close)(int);
	int (*dup3)(int, int, int);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
} ucn_libc;

static inline int ucn_mine(void)
{
	return pthread_equal(pthread_self(), ucn_thread);
}

static int ucn_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	if (ucn_mine()) {
		ucn.getfl += cmd == F_GETFL;
		ucn.setfl += cmd == F_SETFL;
		ucn.getfd += cmd == F_GETFD;
		ucn.setfd += cmd == F_SETFD;
		ucn.dupfd += cmd == F_DUPFD_CLOEXEC || cmd == F_DUPFD;
	}
	return ucn_libc.fcntl(fd, cmd, arg);
}

static int ucn_getsockname(int fd, struct sockaddr *a, socklen_t *l)
{
	if (ucn_mine()) {
		ucn.getsockname++;
		ucn.watched_names += fd == ucn_watch_fd;
	}
	return ucn_libc.getsockname(fd, a, l);
}

static int ucn_getpeername(int fd, struct sockaddr *a, socklen_t *l)
{
	if (ucn_mine()) {
		ucn.getpeername++;
		ucn.watched_names += fd == ucn_watch_fd;
	}
	return ucn_libc.getpeername(fd, a, l);
}

static int ucn_getsockopt(int fd, int level, int name, void *v, socklen_t *l)
{
	ucn.getsockopt += ucn_mine();
	return ucn_libc.getsockopt(fd, level, name, v, l);
}

static int ucn_poll(struct pollfd *p, nfds_t n, int ms)
{
	ucn.poll += ucn_mine();
	return ucn_libc.poll(p, n, ms);
}

static int ucn_close(int fd)
{
	ucn.close += ucn_mine();
	return ucn_libc.close(fd);
}

static int ucn_dup3(int fd, int fd2, int flags)
{
	ucn.dup3 += ucn_mine();
	return ucn_libc.dup3(fd, fd2, flags);
}

static int ucn_accept4(int fd, struct sockaddr *a, socklen_t *l, int flags)
{
	ucn.accept4 += ucn_mine();
	return ucn_libc.accept4(fd, a, l, flags);
}

#define UCN_SWAP(name)                                                                             \
	do {                                                                                       \
		ucn_libc.name = RSK_REAL(name);                                                    \
		__atomic_store_n(&rsk_real.name, ucn_##name, __ATOMIC_RELEASE);                    \
	} while (0)
#define UCN_BACK(name) __atomic_store_n(&rsk_real.name, ucn_libc.name, __ATOMIC_RELEASE)

/* Count from now on (zeroed), or (@on 0) stop counting. */
static inline void ucn_count(int on)
{
	if (on && ucn_libc.fcntl == NULL) {
		ucn_thread = pthread_self();
		UCN_SWAP(fcntl);
		UCN_SWAP(getsockname);
		UCN_SWAP(getpeername);
		UCN_SWAP(getsockopt);
		UCN_SWAP(poll);
		UCN_SWAP(close);
		UCN_SWAP(dup3);
		UCN_SWAP(accept4);
	} else if (!on && ucn_libc.fcntl != NULL) {
		UCN_BACK(fcntl);
		UCN_BACK(getsockname);
		UCN_BACK(getpeername);
		UCN_BACK(getsockopt);
		UCN_BACK(poll);
		UCN_BACK(close);
		UCN_BACK(dup3);
		UCN_BACK(accept4);
		memset(&ucn_libc, 0, sizeof(ucn_libc));
	}
	memset(&ucn, 0, sizeof(ucn));
}

#endif
