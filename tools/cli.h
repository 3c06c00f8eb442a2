/*
 * The rdmasock command: what its subcommands (run.c, stat.c, doctor.c) share. Exit codes
 * follow Debian habits: 0 success, 1 error, 2 usage error; doctor adds 3 (warnings only),
 * run returns the command's own status or 126/127 when it cannot be executed (as env(1)).
 */
#ifndef RSK_CLI_H
#define RSK_CLI_H

#include <stddef.h>

#define RSK_EXIT_OK 0
#define RSK_EXIT_ERROR 1
#define RSK_EXIT_USAGE 2
#define RSK_EXIT_WARN 3 /* doctor: some check warned, none failed */
#define RSK_EXIT_NOEXEC 126
#define RSK_EXIT_NOTFOUND 127

/* Print "rdmasock: <msg>" on stderr. */
void rsk_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Usage error: message, a pointer to --help, returns RSK_EXIT_USAGE. */
int rsk_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The library this command preloads: $RDMASOCK_LIBRARY, else librdmasock.so beside the
 * command as installed (BINDIR/../lib) or as built (build/tools/../). Fills @out; 0, or -1
 * when none is readable (@out then holds the last path tried).
 */
int rsk_cli_library(char *out, size_t size);

int rsk_cmd_run(int argc, char **argv);
int rsk_cmd_stat(int argc, char **argv);
int rsk_cmd_doctor(int argc, char **argv);

void rsk_help_run(void);
void rsk_help_stat(void);
void rsk_help_doctor(void);

#endif
