/*
 * rdmasock run: set the library's environment, append librdmasock.so to LD_PRELOAD (after
 * whatever is preloaded already, so both stay preloaded in order) and exec the command.
 * Values are checked here so a typo fails now with exit 2, not silently in the program.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rdmasock.h"

void rsk_help_run(void)
{
	printf("Usage: rdmasock run [OPTION]... [--] CMD [ARG]...\n"
	       "Run CMD with librdmasock.so appended to LD_PRELOAD.\n"
	       "\n"
	       "  -t, --transport T  auto, kernel, shm or verbs (RDMASOCK_TRANSPORT)\n"
	       "  -s, --stats FILE   append a JSON line per process at exit (RDMASOCK_STATS)\n"
	       "  -l, --log LEVEL    error, warn, info or debug (RDMASOCK_LOG)\n"
	       "  -c, --config FILE  rules file (RDMASOCK_CONFIG; default /etc/rdmasock.conf)\n"
	       "  -h, --help         show this help and exit\n"
	       "\n"
	       "Exit status: CMD's own; 126 if CMD cannot be executed, 127 if it is not found,\n"
	       "2 for a usage error, 1 if the library cannot be found.\n");
}

static int rsk_one_of(const char *v, const char *const *names)
{
	for (; *names != NULL; names++)
		if (strcmp(v, *names) == 0)
			return 1;
	return 0;
}

/* Is @lib already one of the words of LD_PRELOAD @list (colon or space separated)? */
static int rsk_preload_has(const char *list, const char *lib)
{
	size_t n = strlen(lib);
	const char *p = list;

	while ((p = strstr(p, lib)) != NULL) {
		if ((p == list || p[-1] == ':' || p[-1] == ' ') &&
		    (p[n] == '\0' || p[n] == ':' || p[n] == ' '))
			return 1;
		p += n;
	}
	return 0;
}

static int rsk_run_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *val;
	int rc;

	if (old == NULL || old[0] == '\0')
		return setenv("LD_PRELOAD", lib, 1);
	if (rsk_preload_has(old, lib))
		return 0;
	if (asprintf(&val, "%s:%s", old, lib) < 0)
		return -1;
	rc = setenv("LD_PRELOAD", val, 1);
	free(val);
	return rc;
}

/* A relative path would be resolved in whatever directory the program moves to. */
static int rsk_setenv_path(const char *name, const char *path)
{
	char cwd[PATH_MAX], *abs;
	int rc;

	if (path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
		return setenv(name, path, 1);
	if (asprintf(&abs, "%s/%s", cwd, path) < 0)
		return -1;
	rc = setenv(name, abs, 1);
	free(abs);
	return rc;
}

struct rsk_run_opts {
	const char *transport, *stats, *log, *config;
};

static int rsk_run_parse(int argc, char **argv, struct rsk_run_opts *o)
{
	static const struct option longs[] = {{"transport", required_argument, NULL, 't'},
					      {"stats", required_argument, NULL, 's'},
					      {"log", required_argument, NULL, 'l'},
					      {"config", required_argument, NULL, 'c'},
					      {"help", no_argument, NULL, 'h'},
					      {NULL, 0, NULL, 0}};
	static const char *const transports[] = {"auto", "kernel", "shm", "verbs", NULL};
	static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
	int c;

	while ((c = getopt_long(argc, argv, "+t:s:l:c:h", longs, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!rsk_one_of(optarg, transports))
				return -rsk_cli_usage("run", "invalid transport '%s' (auto, kernel, "
							     "shm or verbs)", optarg);
			o->transport = optarg;
			break;
		case 's':
			o->stats = optarg;
			break;
		case 'l':
			if (!rsk_one_of(optarg, levels))
				return -rsk_cli_usage("run", "invalid log level '%s' (error, warn, "
							     "info or debug)", optarg);
			o->log = optarg;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 'h':
			rsk_help_run();
			return 1;
		default:
			return -rsk_cli_usage("run", "invalid option");
		}
	}
	if (optind >= argc)
		return -rsk_cli_usage("run", "missing command to run");
	return 0;
}

static int rsk_run_env(const struct rsk_run_opts *o, const char *lib)
{
	int rc = rsk_run_preload(lib);

	if (rc == 0 && o->transport != NULL)
		rc = setenv(RDMASOCK_ENV_TRANSPORT, o->transport, 1);
	if (rc == 0 && o->log != NULL)
		rc = setenv(RDMASOCK_ENV_LOG, o->log, 1);
	if (rc == 0 && o->stats != NULL)
		rc = rsk_setenv_path(RDMASOCK_ENV_STATS, o->stats);
	if (rc == 0 && o->config != NULL)
		rc = rsk_setenv_path(RDMASOCK_ENV_CONFIG, o->config);
	return rc;
}

int rsk_cmd_run(int argc, char **argv)
{
	struct rsk_run_opts o = {0};
	char lib[PATH_MAX];
	int rc = rsk_run_parse(argc, argv, &o);

	if (rc != 0)
		return rc > 0 ? RSK_EXIT_OK : -rc;
	if (o.config != NULL && access(o.config, R_OK) != 0) {
		rsk_cli_error("cannot read rules file '%s': %s", o.config, strerror(errno));
		return RSK_EXIT_ERROR;
	}
	if (rsk_cli_library(lib, sizeof(lib)) < 0) {
		rsk_cli_error("cannot find the library (tried %s); set RDMASOCK_LIBRARY", lib);
		return RSK_EXIT_ERROR;
	}
	if (rsk_run_env(&o, lib) < 0) {
		rsk_cli_error("cannot set the environment: %s", strerror(errno));
		return RSK_EXIT_ERROR;
	}
	execvp(argv[optind], argv + optind);
	rc = errno;
	rsk_cli_error("%s: %s", argv[optind], strerror(rc));
	return rc == ENOENT ? RSK_EXIT_NOTFOUND : RSK_EXIT_NOEXEC;
}
