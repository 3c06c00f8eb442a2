/*
 * mondelay: widens the race window of issue "a close event for an old connection still
 * queued when the next connection is mapped at the same address" (core/monitor.c) without
 * changing the library. Preload it AFTER the library:
 *     LD_PRELOAD="build/librdmasock.so build/mondelay.so"
 * The library resolves its real epoll_wait with dlsym(RTLD_NEXT), which then finds this
 * one. When a thread other than the main thread (the library's monitor thread, in a
 * single-threaded program) gets an event whose epoll data is a connection pointer
 * (kind tag 0 in the low 3 bits, non-NULL: a TCP placeholder that hung up), this sleeps
 * MONDELAY_US (default 20000) microseconds *after* epoll_wait returned and before the
 * library dispatches the event: exactly the window in which the application may release
 * that connection and map the next one at the same address. It writes one line per delay
 * to stderr (or $MONDELAY_FILE).
 *   cc -O2 -shared -fPIC -o build/mondelay.so bench/mondelay.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	static __typeof__(epoll_wait) *next;
	static int delay_us = -1, logfd = -1;
	int n, i;

	if (next == NULL)
		next = (__typeof__(epoll_wait) *)dlsym(RTLD_NEXT, "epoll_wait");
	n = next(epfd, ev, max, timeout);
	if (n <= 0 || syscall(SYS_gettid) == getpid())
		return n;
	for (i = 0; i < n; i++) {
		uint64_t d = ev[i].data.u64;

		if ((d & 7) == 0 && d != 0)
			break;
	}
	if (i == n)
		return n;
	if (delay_us < 0) {
		const char *s = getenv("MONDELAY_US"), *f = getenv("MONDELAY_FILE");

		delay_us = s ? atoi(s) : 20000;
		logfd = f ? open(f, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
	}
	{
		char line[160];
		struct timespec t;
		int k;

		clock_gettime(CLOCK_REALTIME, &t);
		k = snprintf(line, sizeof(line),
			     "mondelay[%d] %ld.%06ld: monitor got a hangup for conn 0x%llx; holding it %d us\n",
			     getpid(), (long)t.tv_sec, t.tv_nsec / 1000,
			     (unsigned long long)ev[i].data.u64, delay_us);
		(void)!write(logfd, line, (size_t)k);
	}
	usleep((useconds_t)delay_us);
	return n;
}
