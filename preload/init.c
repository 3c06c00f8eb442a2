/*
 * Library start and end: the constructor resolves libc and reads the configuration (any
 * wrapper may get there first: both steps are idempotent), the destructor ends our streams
 * and writes the RDMASOCK_STATS line; _exit ends the streams too. Also the rdmasock_* entry
 * points of include/rdmasock.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/config.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/policy.h"
#include "preload.h"
#include "base/ready.h"
#include "base/statseg.h"
#include "calls/calls.h"
#include "sock/sock.h"
#include "sock/sockstat.h"
#include "base/stats.h"

__thread int rsk_guard;
int rsk_initialised;
static pthread_once_t rsk_init_once = PTHREAD_ONCE_INIT;

static const char *rsk_getenv(const char *name)
{
	return getenv(name);
}

static void rsk_config_complaint(const char *msg, void *arg)
{
	(void)arg;
	rsk_err("%s", msg); /* level error: printed whatever RDMASOCK_LOG says */
}

static void rsk_init_body(void)
{
	int rc;

	rsk_real_resolve();
	rsk_stats_set_program(program_invocation_short_name);
	rsk_log_level_now = RSK_LOG_ERROR;
	rsk_config_parse(&rsk_config, rsk_getenv, rsk_config_complaint, NULL);
	rc = rsk_policy_init(&rsk_config, rsk_getenv, rsk_stats_program(), rsk_config_complaint,
			     NULL); /* the rules file: tunables now, transports per connection */
	if (rc < 0)
		rsk_err("cannot read RDMASOCK_CONFIG \"%s\": %s; no rules apply",
			getenv(RDMASOCK_ENV_CONFIG), strerror(-rc));
	rsk_statseg_sweep_own(); /* a previous image's segment (we exec'd), if any */
	rsk_sockstat_register(); /* rows for rdmasock stat, published only while it reads */
	rc = rsk_log_open(&rsk_config);
	if (rc < 0)
		rsk_err("cannot open RDMASOCK_LOG_FILE \"%s\": %s; logging to stderr",
			rsk_config.log_file, strerror(-rc));
	rsk_life_init();
	rc = rsk_ready_sweep_stale();
	if (rc > 0)
		rsk_info("%d accelerated socket(s) inherited across exec: they now read EOF", rc);
	rsk_dbg("librdmasock %s, transport %s", rdmasock_version(),
		rsk_mode_name(rsk_config.mode));
	__atomic_store_n(&rsk_initialised, 1, __ATOMIC_RELEASE);
}

void rsk_init(void)
{
	pthread_once(&rsk_init_once, rsk_init_body);
}

__attribute__((constructor)) static void rsk_constructor(void)
{
	rsk_init();
}

__attribute__((destructor)) static void rsk_destructor(void)
{
	struct rdmasock_stats s;
	int rc;

	if (!__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE))
		return;
	rsk_life_exit(); /* orderly FIN for our accelerated streams, as the kernel does for TCP */
	if (rsk_config.stats_file[0] == 0)
		return;
	rsk_sock_account_open();
	rsk_stats_snapshot(&s);
	rc = rsk_stats_append(rsk_config.stats_file, &s);
	if (rc < 0)
		rsk_err("cannot write RDMASOCK_STATS \"%s\": %s", rsk_config.stats_file,
			strerror(-rc));
}

/*
 * _exit skips the destructor above, but the kernel still ends a dying process's TCP sockets
 * in order: ours too (rsk_life_quick_exit), then the process goes as glibc's _exit does. No
 * stats line: _exit runs nothing of the program's either.
 */
RSK_EXPORT void _exit(int status)
{
	if (__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE))
		rsk_life_quick_exit();
	for (;;) {
		(void)RSK_REAL(syscall)(SYS_exit_group, status);
		(void)RSK_REAL(syscall)(SYS_exit, status);
	}
}

RSK_EXPORT void _Exit(int status)
{
	_exit(status);
}

RSK_EXPORT const char *rdmasock_version(void)
{
	return "0.1.0";
}

RSK_EXPORT int rdmasock_get_stats(struct rdmasock_stats *out, size_t size)
{
	struct rdmasock_stats s;

	rsk_stats_snapshot(&s);
	return (int)rsk_ret(rsk_stats_copy_out(&s, out, size));
}

RSK_EXPORT int rdmasock_stats_json(char *buf, size_t size)
{
	struct rdmasock_stats s;

	rsk_stats_snapshot(&s);
	return (int)rsk_ret(rsk_stats_format(&s, (int)getpid(), rsk_stats_program(), buf, size));
}

RSK_EXPORT int rdmasock_fd_transport(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int t;

	if (s == NULL) {
		errno = EBADF;
		return -1;
	}
	t = (int)s->transport;
	rsk_sock_put(s);
	return t;
}
