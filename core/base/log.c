/*
 * Log output: one line per call through the real write(), to stderr or RDMASOCK_LOG_FILE
 * (opened once and hidden from the application like every fd of the library).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fdhide.h"
#include "log.h"
#include "sys.h"

int rsk_log_level_now = RSK_LOG_WARN;
static int rsk_log_fd = STDERR_FILENO;

static const char *const rsk_level_tags[] = {"error", "warn", "info", "debug"};

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
	if (rsk_sys_write(rsk_log_fd, line, (size_t)n) < 0 && rsk_log_fd != STDERR_FILENO)
		(void)rsk_sys_write(STDERR_FILENO, line, (size_t)n);
	errno = saved;
}

