/*
 * io_uring: a process that sets up a ring may accept, read and write sockets there, where no
 * preload sees it (an accelerated socket's fd names our readiness pair, whose bytes are not
 * the stream). From its first setup on, the process's new connections stay on the kernel
 * (calls/lifecycle.c). Seen: io_uring_setup through libc's syscall(), and the setup
 * functions liburing exports. Not seen, and documented: the raw system call issued by other
 * code (a statically linked liburing, Go, Rust's io-uring crate); connections that were
 * accelerated before the ring stay so, and a program that then drives them through the ring
 * reads our readiness bytes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>

#include "preload.h"
#include "calls/calls.h"

RSK_EXPORT long syscall(long number, ...)
{
	long a[6];
	va_list ap;
	int i;

	/* The kernel takes six register arguments; read them all, as libc's own syscall() does. */
	va_start(ap, number);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
#ifdef __NR_io_uring_setup
	if (number == __NR_io_uring_setup)
		rsk_life_io_uring();
#endif
	return RSK_REAL(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* liburing's entry points, found after us in the lookup order: ours only mark the process. */
static void *rsk_uring_next(const char *name)
{
	rsk_life_io_uring();
	return dlsym(RTLD_NEXT, name);
}

RSK_EXPORT int io_uring_setup(unsigned int entries, void *p)
{
	int (*next)(unsigned int, void *) = (int (*)(unsigned int, void *))rsk_uring_next(
		"io_uring_setup");

	return next != NULL ? next(entries, p) : -ENOSYS;
}

RSK_EXPORT int io_uring_queue_init(unsigned int entries, void *ring, unsigned int flags)
{
	int (*next)(unsigned int, void *, unsigned int) =
		(int (*)(unsigned int, void *, unsigned int))rsk_uring_next("io_uring_queue_init");

	return next != NULL ? next(entries, ring, flags) : -ENOSYS;
}

RSK_EXPORT int io_uring_queue_init_params(unsigned int entries, void *ring, void *p)
{
	int (*next)(unsigned int, void *, void *) = (int (*)(unsigned int, void *, void *))
		rsk_uring_next("io_uring_queue_init_params");

	return next != NULL ? next(entries, ring, p) : -ENOSYS;
}

RSK_EXPORT int io_uring_queue_init_mem(unsigned int entries, void *ring, void *p, void *buf,
				       size_t len)
{
	int (*next)(unsigned int, void *, void *, void *, size_t) =
		(int (*)(unsigned int, void *, void *, void *, size_t))rsk_uring_next(
			"io_uring_queue_init_mem");

	return next != NULL ? next(entries, ring, p, buf, len) : -ENOSYS;
}
