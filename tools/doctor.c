/*
 * rdmasock doctor [HOST:PORT]: one line per check (library, configuration, live stats,
 * RDMA devices, memlock) and for a service: is something listening, is a same-host
 * listener preloaded (its rendezvous name, as core/transport/shm_rdv.c builds it), does
 * rdma_cm reach it.
 * Exit status: 0 all OK, 3 warnings only, 1 a check failed, 2 usage (cli.h).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/config.h"
#include "base/rules.h"
#include "cli.h"
#include "doctor.h"
#include "statseg_read.h"
#include "transport/shm_rdv.h"

#define RSK_RINGS_PER_CHUNK 16 /* the verbs pool registers rings in chunks of 16 */

void rsk_help_doctor(void)
{
	printf("Usage: rdmasock doctor [-c CONNECTIONS] [HOST:PORT]\n"
	       "Check this host for librdmasock: one line per check, OK, WARN or FAIL, each\n"
	       "WARN and FAIL with its fix. With HOST:PORT also check that service.\n"
	       "\n"
	       "  -c, --connections N  connections the memlock check plans for (default 64)\n"
	       "  -h, --help           show this help and exit\n"
	       "\n"
	       "Exit status: 0 every check OK; 3 some warned, none failed; 1 a check failed;\n"
	       "2 usage error.\n");
}

void rsk_report(struct rsk_doctor *d, enum rsk_verdict v, const char *check, const char *fix,
		const char *fmt, ...)
{
	static const char *const tag[] = {"OK", "WARN", "FAIL"};
	va_list ap;

	printf("%-4s %s: ", tag[v], check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (v != RSK_OK && fix != NULL)
		printf("; fix: %s", fix);
	printf("\n");
	d->warn += v == RSK_WARN;
	d->fail += v == RSK_FAIL;
}

static void rsk_doctor_library(struct rsk_doctor *d)
{
	char lib[PATH_MAX];

	if (rsk_cli_library(lib, sizeof(lib)) == 0)
		rsk_report(d, RSK_OK, "library", NULL, "%s", lib);
	else
		rsk_report(d, RSK_FAIL, "library", "set RDMASOCK_LIBRARY to librdmasock.so",
			   "not found (tried %s)", lib);
}

static void rsk_doctor_env_error(const char *msg, void *arg)
{
	rsk_report(arg, RSK_FAIL, "environment", "correct or unset the variable", "%s", msg);
}

static const char *rsk_getenv(const char *name)
{
	return getenv(name);
}

static void rsk_doctor_env(struct rsk_doctor *d, struct rsk_config *c)
{
	if (rsk_config_parse(c, rsk_getenv, rsk_doctor_env_error, d) == 0)
		rsk_report(d, RSK_OK, "environment", NULL,
			   "transport %s, %u buffers of %u bytes per direction", rsk_mode_name(c->mode),
			   c->buf_count, c->buf_size);
}

static void rsk_doctor_statdir(struct rsk_doctor *d)
{
	const char *dir = rsk_seg_dir();

	if (access(dir, W_OK | X_OK) == 0)
		rsk_report(d, RSK_OK, "live-stats", NULL, "segments in %s (rdmasock stat)", dir);
	else
		rsk_report(d, RSK_WARN, "live-stats",
			   "mount a tmpfs on /dev/shm or set RDMASOCK_STAT_DIR to a writable directory",
			   "%s not writable (%s): rdmasock stat sees nothing", dir, strerror(errno));
}

static void rsk_mib(char *out, size_t size, unsigned long long bytes)
{
	snprintf(out, size, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
}

/* Every verbs connection: 2 rings (rx, tx) of buf_count x buf_size, pooled by 16 rings. */
static void rsk_doctor_memlock(struct rsk_doctor *d, const struct rsk_config *c, long want)
{
	unsigned long long ring = (unsigned long long)c->buf_count * c->buf_size;
	unsigned long long chunk = RSK_RINGS_PER_CHUNK * ring, need, fits;
	char lim[32], needs[32], per[32];
	struct rlimit rl;

	need = ((unsigned long long)(2 * want + RSK_RINGS_PER_CHUNK - 1) / RSK_RINGS_PER_CHUNK) * chunk;
	rsk_mib(needs, sizeof(needs), need);
	rsk_mib(per, sizeof(per), 2 * ring);
	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
		rsk_report(d, RSK_OK, "memlock", NULL, "unlimited; %ld verbs connections need %s (%s each)",
			   want, needs, per);
		return;
	}
	fits = (rl.rlim_cur / chunk) * (RSK_RINGS_PER_CHUNK / 2);
	rsk_mib(lim, sizeof(lim), rl.rlim_cur);
	if (fits >= (unsigned long long)want)
		rsk_report(d, RSK_OK, "memlock", NULL, "%s: room for %llu verbs connections (%ld need %s)",
			   lim, fits, want, needs);
	else
		rsk_report(d, RSK_WARN, "memlock",
			   "raise it: ulimit -l, LimitMEMLOCK= in systemd units, memlock in "
			   "/etc/security/limits.conf",
			   "%s: room for %llu verbs connections, %ld need %s (%s each, in chunks of 16 "
			   "rings); the others fall back (memlock)", lim, fits, want, needs, per);
}

/* "host:port" or "[v6]:port" into a socket address. 0 or -1 (message printed). */
static int rsk_doctor_target(const char *arg, struct sockaddr_storage *ss)
{
	char host[256];
	const char *colon = strrchr(arg, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
	size_t hl;
	int rc;

	if (colon == NULL || colon[1] == '\0' || (hl = (size_t)(colon - arg)) == 0 || hl >= sizeof(host))
		return -1;
	if (arg[0] == '[' && hl >= 2 && arg[hl - 1] == ']')
		memcpy(host, arg + 1, hl -= 2);
	else
		memcpy(host, arg, hl);
	host[hl] = '\0';
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0) {
		rsk_cli_error("%s: %s", arg, gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

/* Some socket listens on TCP @port (/proc/net/tcp{,6}: no connection made). */
static int rsk_tcp_listening(unsigned int port)
{
	static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	char line[512], local[128];
	unsigned int p, st, i;
	int found = 0;
	FILE *f;

	for (i = 0; i < 2 && !found; i++) {
		if ((f = fopen(files[i], "re")) == NULL)
			continue;
		while (!found && fgets(line, sizeof(line), f) != NULL)
			found = sscanf(line, " %*d: %127s %*s %x", local, &st) == 2 && st == 0x0A &&
				strchr(local, ':') && sscanf(strchr(local, ':') + 1, "%x", &p) == 1 &&
				p == port;
		fclose(f);
	}
	return found;
}

/* Is the abstract unix name @un (length @len) bound in this namespace (/proc/net/unix)? */
static int rsk_unix_bound(const struct sockaddr_un *un, socklen_t len)
{
	size_t n = len - offsetof(struct sockaddr_un, sun_path) - 1;
	char line[512], *path;
	int found = 0;
	FILE *f = fopen("/proc/net/unix", "re");

	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		path = strrchr(line, ' ');
		found = path != NULL && path[1] == '@' && strlen(path + 2) == n &&
			memcmp(path + 2, un->sun_path + 1, n) == 0;
	}
	fclose(f);
	return found;
}

/* The same-host listener's rendezvous: by its address, or the any4/any6 wildcard's. */
static int rsk_rdv_present(const struct sockaddr *dst, char *name, size_t size)
{
	struct sockaddr_un un[2];
	socklen_t len[2];
	int i, n = rsk_rdv_names(dst, un, len);

	for (i = 0; i < n; i++) {
		snprintf(name, size, "@%.*s",
			 (int)(len[i] - offsetof(struct sockaddr_un, sun_path) - 1), un[i].sun_path + 1);
		if (rsk_unix_bound(&un[i], len[i]))
			return 1;
	}
	return 0;
}

static void rsk_doctor_local(struct rsk_doctor *d, const struct sockaddr *dst, const char *arg)
{
	char name[128];

	if (!rsk_tcp_listening(rsk_sa_port(dst))) {
		rsk_report(d, RSK_FAIL, "service", "start the server, or check the port",
			   "%s: nothing listens on this host's TCP port %u", arg, rsk_sa_port(dst));
		return;
	}
	if (rsk_rdv_present(dst, name, sizeof(name)))
		rsk_report(d, RSK_OK, "service", NULL, "%s: listener is preloaded (rendezvous %s)", arg,
			   name);
	else
		rsk_report(d, RSK_WARN, "service", "start the server with: rdmasock run -- SERVER ...",
			   "%s: listener is not preloaded (no rendezvous %s): clients stay on TCP "
			   "(no_peer)", arg, name);
}

static int rsk_doctor_parse(int argc, char **argv, long *conns)
{
	static const struct option longs[] = {{"connections", required_argument, NULL, 'c'},
					      {"help", no_argument, NULL, 'h'},
					      {NULL, 0, NULL, 0}};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "c:h", longs, NULL)) != -1) {
		if (c == 'c' && ((*conns = strtol(optarg, &end, 10)) <= 0 || *end || *conns > 1000000))
			return -rsk_cli_usage("doctor", "invalid number of connections '%s'", optarg);
		if (c == 'h') {
			rsk_help_doctor();
			return 1;
		}
		if (c == '?')
			return -rsk_cli_usage("doctor", "invalid option");
	}
	if (argc - optind > 1)
		return -rsk_cli_usage("doctor", "at most one HOST:PORT");
	return 0;
}

int rsk_cmd_doctor(int argc, char **argv)
{
	struct rsk_doctor d = {0};
	struct sockaddr_storage dst;
	struct rsk_config c;
	long conns = 64;
	int rc = rsk_doctor_parse(argc, argv, &conns);

	if (rc != 0)
		return rc > 0 ? RSK_EXIT_OK : -rc;
	if (optind < argc && rsk_doctor_target(argv[optind], &dst) < 0)
		return rsk_cli_usage("doctor", "'%s' is not HOST:PORT", argv[optind]);
	rsk_doctor_library(&d);
	rsk_doctor_env(&d, &c);
	rsk_doctor_rules(&d);
	rsk_doctor_statdir(&d);
	rsk_doctor_devices(&d);
	rsk_doctor_memlock(&d, &c, conns);
	if (optind < argc) {
		if (rsk_addr_is_local((struct sockaddr *)&dst))
			rsk_doctor_local(&d, (struct sockaddr *)&dst, argv[optind]);
		rsk_doctor_rdma_cm(&d, (struct sockaddr *)&dst, argv[optind]);
	}
	fflush(stdout);
	return d.fail ? RSK_EXIT_ERROR : d.warn ? RSK_EXIT_WARN : RSK_EXIT_OK;
}

static void rsk_doctor_rule_error(const char *msg, void *arg)
{
	rsk_report(arg, RSK_FAIL, "rules", "correct the line (see rdmasock.conf(5))", "%s", msg);
}

/* The rules file the library will read: absent is fine unless named explicitly. */
void rsk_doctor_rules(struct rsk_doctor *d)
{
	static struct rsk_rules rs;
	const char *env = getenv(RDMASOCK_ENV_CONFIG);
	const char *path = env != NULL ? env : RSK_RULES_DEFAULT_PATH;
	int rc = rsk_rules_load(&rs, path, rsk_doctor_rule_error, d);

	if (rc == -ENOENT && env == NULL)
		rsk_report(d, RSK_OK, "rules", NULL, "no %s: the environment and defaults apply", path);
	else if (rc < 0)
		rsk_report(d, RSK_FAIL, "rules", "fix RDMASOCK_CONFIG or the file's permissions",
			   "cannot read %s: %s", path, strerror(-rc));
	else if (rc == 0)
		rsk_report(d, RSK_OK, "rules", NULL, "%s: %u rules", path, rs.n);
}
