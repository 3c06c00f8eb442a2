/*
 * io_uring: a process that sets up a ring may accept, read and write sockets there, where no
 * preload sees it (an accelerated socket's fd names our readiness pair, whose bytes are not
 * the stream). From its first setup on, the process's new connections stay on the kernel
 * (calls/lifecycle.c). Seen: io_uring_setup through libc's syscall() (preload/syscall.c),
 * and the setup functions liburing exports. Not seen, and documented: the raw system call
 * issued by other code (a statically linked liburing, Go, Rust's io-uring crate);
 * connections that were accelerated before the ring stay so, and a program that then drives
 * them through the ring reads our readiness bytes.
 */
#include <dlfcn.h>
#include <errno.h>

#include "preload.h"
#include "calls/calls.h"

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
