/*
 * rdmasock(1): run a program with librdmasock preloaded, watch preloaded processes' sockets
 * live, and check a host's RDMA setup. This file holds the dispatch, --help/--version and
 * the library lookup that every subcommand uses; see cli.h for the exit codes.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rdmasock.h"

#ifndef RSK_CLI_LIBDIR_REL
#define RSK_CLI_LIBDIR_REL "../lib"
#endif

void rsk_cli_error(const char *fmt, ...)
{
	va_list ap;

	fputs("rdmasock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int rsk_cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("rdmasock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'rdmasock %s%s--help' for more information.\n", cmd ? cmd : "",
		cmd ? " " : "");
	return RSK_EXIT_USAGE;
}

/* Candidates relative to the command: installed layout first, then the build tree. */
int rsk_cli_library(char *out, size_t size)
{
	static const char *const rel[] = {RSK_CLI_LIBDIR_REL "/librdmasock.so", "../librdmasock.so",
					  "librdmasock.so"};
	const char *env = getenv("RDMASOCK_LIBRARY");
	char exe[PATH_MAX], *dir;
	ssize_t n;
	size_t i;

	if (env != NULL && env[0] != '\0') {
		snprintf(out, size, "%s", env);
		return access(out, R_OK) == 0 ? 0 : -1;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(out, size, "librdmasock.so");
		return -1;
	}
	exe[n] = '\0';
	dir = dirname(exe);
	for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(out, size, "%s/%s", dir, rel[i]);
		if (access(out, R_OK) == 0) {
			char real[PATH_MAX];

			if (realpath(out, real) != NULL)
				snprintf(out, size, "%s", real);
			return 0;
		}
	}
	return -1;
}

static void rsk_help(void)
{
	printf("Usage: rdmasock COMMAND [OPTION]...\n"
	       "Carry the TCP streams of unmodified programs over shared memory (same host)\n"
	       "or RDMA verbs (other hosts) with the preloaded library librdmasock.so.\n"
	       "\n"
	       "Commands:\n"
	       "  run [OPTION]... -- CMD [ARG]...  run CMD with librdmasock preloaded\n"
	       "  stat [-p PID | -n NAME] [-i SECONDS] [-c COUNT] [--json]\n"
	       "                                   show the sockets of preloaded processes live\n"
	       "  doctor [HOST:PORT]               check RDMA devices, limits and a service\n"
	       "  help [COMMAND]                   show help for COMMAND\n"
	       "\n"
	       "Options:\n"
	       "  -h, --help     show this help and exit\n"
	       "  -V, --version  show the version and exit\n"
	       "\n"
	       "Environment: RDMASOCK_LIBRARY names the library to preload (default: the one\n"
	       "installed beside this command). See rdmasock(1), librdmasock(7), rdmasock.conf(5).\n");
}

static int rsk_help_for(const char *cmd)
{
	if (cmd == NULL)
		rsk_help();
	else if (strcmp(cmd, "run") == 0)
		rsk_help_run();
	else if (strcmp(cmd, "stat") == 0)
		rsk_help_stat();
	else if (strcmp(cmd, "doctor") == 0)
		rsk_help_doctor();
	else
		return rsk_cli_usage(NULL, "unknown command '%s'", cmd);
	return RSK_EXIT_OK;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (cmd == NULL)
		return rsk_cli_usage(NULL, "missing command");
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0)
		return rsk_help_for(NULL);
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		printf("rdmasock %d.%d.%d\n", RDMASOCK_VERSION_MAJOR, RDMASOCK_VERSION_MINOR,
		       RDMASOCK_VERSION_PATCH);
		return RSK_EXIT_OK;
	}
	if (strcmp(cmd, "help") == 0)
		return rsk_help_for(argc > 2 ? argv[2] : NULL);
	if (strcmp(cmd, "run") == 0)
		return rsk_cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "stat") == 0)
		return rsk_cmd_stat(argc - 1, argv + 1);
	if (strcmp(cmd, "doctor") == 0)
		return rsk_cmd_doctor(argc - 1, argv + 1);
	return rsk_cli_usage(NULL, "unknown command '%s'", cmd);
}
