/*
 * Log output and the library's own fds. Both live here because the log file is the first
 * internal fd the library opens and the reason the hiding rules exist.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fdtab.h"
#include "log.h"
#include "real.h"

int rsk_log_level_now = RSK_LOG_WARN;
static int rsk_log_fd = STDERR_FILENO;

static const char *const rsk_level_tags[] = {"error", "warn", "info", "debug"};

/* Internal fds carry this marker in the fd table; tagged kernel, so data calls pass through. */
static char rsk_internal_marker __attribute__((aligned(8)));
#define RSK_INTERNAL_SLOT ((uintptr_t)&rsk_internal_marker | RSK_FDTAB_TAG_KERNEL)

int rsk_log_open(const struct rsk_config *c)
{
	int fd;

	rsk_log_level_now = (int)c->log_level;
	if (c->log_file[0] == '\0')
		return 0;
	fd = open(c->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	fd = rsk_fd_hide(fd);
	if (fd < 0)
		return fd;
	rsk_log_fd = fd;
	return 0;
}

void rsk_log_write(enum rsk_log_level level, const char *fmt, ...)
{
	char line[1024];
	int n, saved = errno;
	va_list ap;

	n = snprintf(line, sizeof(line), "rdmasock[%d]: %s: ", (int)getpid(),
		     rsk_level_tags[(unsigned int)level & 3]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (RSK_REAL(write)(rsk_log_fd, line, (size_t)n) < 0 && rsk_log_fd != STDERR_FILENO)
		(void)RSK_REAL(write)(STDERR_FILENO, line, (size_t)n);
	errno = saved;
}

static int rsk_fd_hide_base(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > 65536)
		return 32768;
	if (rl.rlim_cur >= 512)
		return (int)rl.rlim_cur - 256;
	return (int)rl.rlim_cur / 2;
}

int rsk_fd_hide(int fd)
{
	int nfd = RSK_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, rsk_fd_hide_base());

	if (nfd < 0) /* No room up there: keep the original number rather than fail. */
		nfd = fd;
	else
		RSK_REAL(close)(fd);
	(void)RSK_REAL(fcntl)(nfd, F_SETFD, FD_CLOEXEC);
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		RSK_REAL(close)(nfd);
		return -EMFILE;
	}
	return nfd;
}

int rsk_fd_hide_dup(int fd)
{
	int nfd = RSK_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, rsk_fd_hide_base());

	if (nfd < 0)
		return -errno;
	if (rsk_fdtab_store(nfd, RSK_INTERNAL_SLOT) < 0) {
		RSK_REAL(close)(nfd);
		return -EMFILE;
	}
	return nfd;
}

void rsk_fd_unhide_close(int fd)
{
	rsk_fdtab_replace(fd, RSK_INTERNAL_SLOT, 0);
	RSK_REAL(close)(fd);
}

int rsk_fd_is_internal(int fd)
{
	return rsk_fdtab_load(fd) == RSK_INTERNAL_SLOT;
}
