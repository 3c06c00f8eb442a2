/*
 * exec family: the new image replaces this one, and with it the event loop that runs the
 * relays of sockets used through stdio (an inetd-style server: dup2 onto 0-1, then exec).
 * Before the real call they are handed to a helper process (calls/lifecycle.c); if the call
 * returns (it failed) they come back. The execl forms gather their arguments and take the
 * same path. glibc's own exec functions call its internal execve, so each call is seen once.
 */
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "preload.h"
#include "calls/calls.h"

/* How many arguments an execl call passes before its NULL (glibc declares @first nonnull;
 * a caller that passes NULL gets an empty argv, as from glibc). */
static int rsk_exec_count(const char *first, va_list ap)
{
	va_list c;
	int n;

	if (first == NULL)
		return 0;
	va_copy(c, ap);
	for (n = 1; va_arg(c, char *) != NULL; n++)
		;
	va_end(c);
	return n;
}

long rsk_exec_done(long rc, int handed)
{
	int err = errno;

	if (handed)
		rsk_life_exec_failed();
	errno = err;
	return rc;
}

RSK_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	int h = rsk_life_exec_prepare(argv, envp);

	return (int)rsk_exec_done(RSK_REAL(execve)(path, argv, envp), h);
}

RSK_EXPORT int execv(const char *path, char *const argv[])
{
	int h = rsk_life_exec_prepare(argv, environ);

	return (int)rsk_exec_done(RSK_REAL(execv)(path, argv), h);
}

RSK_EXPORT int execvp(const char *file, char *const argv[])
{
	int h = rsk_life_exec_prepare(argv, environ);

	return (int)rsk_exec_done(RSK_REAL(execvp)(file, argv), h);
}

RSK_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	int h = rsk_life_exec_prepare(argv, envp);

	return (int)rsk_exec_done(RSK_REAL(execvpe)(file, argv, envp), h);
}

RSK_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	int h = rsk_life_exec_prepare(argv, envp);

	return (int)rsk_exec_done(RSK_REAL(fexecve)(fd, argv, envp), h);
}

/* Fill @argv (n + 1 slots) from @first and the rest of @ap; execle's envp (after the NULL)
 * into *@envp when asked. */
static void rsk_exec_args(char **argv, int n, const char *first, va_list ap, char *const **envp)
{
	int i;

	if (n > 0)
		argv[0] = (char *)first;
	for (i = 1; i < n; i++)
		argv[i] = va_arg(ap, char *);
	argv[n] = NULL;
	if (envp == NULL)
		return;
	if (n > 0)
		(void)va_arg(ap, char *); /* the NULL (the first argument was it when n is 0) */
	*envp = va_arg(ap, char *const *);
}

/* An execl form: its arguments as an argv (on the stack, as glibc does), then @fn. */
#define RSK_EXECL(arg, call, envp)                                                                \
	do {                                                                                       \
		va_list ap_;                                                                       \
		int n_;                                                                            \
                                                                                                   \
		va_start(ap_, arg);                                                                \
		n_ = rsk_exec_count(arg, ap_);                                                     \
		va_end(ap_);                                                                       \
		char *argv[n_ + 1];                                                                \
                                                                                                   \
		va_start(ap_, arg);                                                                \
		rsk_exec_args(argv, n_, arg, ap_, envp);                                           \
		va_end(ap_);                                                                       \
		return call;                                                                       \
	} while (0)

RSK_EXPORT int execl(const char *path, const char *arg, ...)
{
	RSK_EXECL(arg, execv(path, argv), NULL);
}

RSK_EXPORT int execlp(const char *file, const char *arg, ...)
{
	RSK_EXECL(arg, execvp(file, argv), NULL);
}

RSK_EXPORT int execle(const char *path, const char *arg, ...)
{
	char *const *envp = NULL;

	RSK_EXECL(arg, execve(path, argv, envp), &envp);
}
