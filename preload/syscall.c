/*
 * syscall(): libc's door to any system call by number. The calls behind it that the library
 * must see go the way their named wrappers do: io_uring_setup marks the process
 * (preload/iouring.c), and execve and execveat apply the exec rules first (preload/exec.c:
 * relays handed to a helper, faces put back, a listener the new program is handed by a
 * convention noted). close, dup2, dup3 and close_range drop the stand-in notes of the numbers
 * they free (base/standin.h; what else close() does for a tracked socket is not done, as
 * before). Everything else goes straight through. A raw system call made without
 * libc (inline assembly, Go) is not seen.
 */
#include <errno.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <sys/syscall.h>

#include "base/standin.h"
#include "preload.h"
#include "calls/calls.h"

/* An exec through syscall(): @argv and @envp are the kernel's arguments. */
static long rsk_syscall_exec(long number, const long *a, char *const *argv, char *const *envp)
{
	int h = rsk_life_exec_prepare(argv, envp);

	return rsk_exec_done(RSK_REAL(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]), h);
}

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
	switch (number) {
	case __NR_close: /* (the rest of what close() does is not done here: see above) */
		rsk_standin_drop((int)a[0]);
		break;
	case __NR_dup2:
	case __NR_dup3:
		if (a[0] != a[1])
			rsk_standin_drop((int)a[1]);
		break;
#ifdef __NR_close_range
	case __NR_close_range:
		if (!((unsigned long)a[2] & CLOSE_RANGE_CLOEXEC))
			rsk_standin_drop_range((unsigned int)a[0], (unsigned int)a[1]);
		break;
#endif
#ifdef __NR_io_uring_setup
	case __NR_io_uring_setup:
		rsk_life_io_uring();
		break;
#endif
	case __NR_execve:
		return rsk_syscall_exec(number, a, (char *const *)a[1], (char *const *)a[2]);
#ifdef __NR_execveat
	case __NR_execveat:
		return rsk_syscall_exec(number, a, (char *const *)a[2], (char *const *)a[3]);
#endif
	default:
		break;
	}
	return RSK_REAL(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
