/*
 * Logging to stderr or RDMASOCK_LOG_FILE, never stdout (stdout belongs to the application).
 * Writes go through the real write(), one line per call, so lines from threads and
 * processes sharing the target do not interleave mid-line.
 */
#ifndef RSK_LOG_H
#define RSK_LOG_H

#include "compiler.h"
#include "config.h"

extern int rsk_log_level_now;

/* Open the log target named by @c (stderr when none). Returns 0 or -errno (stderr is kept). */
int rsk_log_open(const struct rsk_config *c);

void rsk_log_write(enum rsk_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define rsk_log(level, ...)                                                                        \
	do {                                                                                       \
		if (rsk_unlikely((int)(level) <= rsk_log_level_now))                               \
			rsk_log_write((level), __VA_ARGS__);                                       \
	} while (0)

#define rsk_err(...) rsk_log(RSK_LOG_ERROR, __VA_ARGS__)
#define rsk_warn(...) rsk_log(RSK_LOG_WARN, __VA_ARGS__)
#define rsk_info(...) rsk_log(RSK_LOG_INFO, __VA_ARGS__)
#define rsk_dbg(...) rsk_log(RSK_LOG_DEBUG, __VA_ARGS__)

#endif
