/*
 * Role: a shim that widens the window between "the library's event thread learnt of an event"
 * and "it acted on it" (test_scale_stale.sh), with no change to the library. Preloaded after
 * it (LD_PRELOAD="librdmasock.so evdelay.so"): the library looks up the real epoll_wait with
 * dlsym(RTLD_NEXT), which finds this one. When a thread other than the main thread (the
 * programs of the test are single-threaded, so that is the library's) gets events, this
 * sleeps EVDELAY_US microseconds (default 5000) before returning them. An event for a
 * connection the application closes and replaces meanwhile is then delivered late, exactly
 * the stale-event race: the library must recognise it as no longer the new connection's.
 * It prints nothing; EVDELAY_COUNT_FILE, if set, gets the number of delays at exit.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long delays;

static void __attribute__((destructor)) evdelay_report(void)
{
	const char *f = getenv("EVDELAY_COUNT_FILE");
	char line[64];
	int fd, n;

	if (f == NULL || delays == 0)
		return;
	fd = open(f, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%d %lu\n", (int)getpid(), delays);
	if (write(fd, line, (size_t)n) < 0) {
		/* nothing to do: the count is informational */
	}
	close(fd);
}

int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	static __typeof__(epoll_wait) *next;
	static long delay_us = -1;
	int n;

	if (next == NULL)
		next = (__typeof__(epoll_wait) *)dlsym(RTLD_NEXT, "epoll_wait");
	n = next(epfd, ev, max, timeout);
	if (n <= 0 || syscall(SYS_gettid) == getpid())
		return n;
	if (delay_us < 0) {
		const char *s = getenv("EVDELAY_US");

		delay_us = s != NULL ? atol(s) : 5000;
	}
	__atomic_add_fetch(&delays, 1, __ATOMIC_RELAXED);
	usleep((useconds_t)delay_us);
	return n;
}
