/*
 * posix_spawn, posix_spawnp, system, popen: programs started by a clone of this process that
 * runs libc's own execve, which no exec wrapper of ours sees (glibc's system and popen spawn
 * inside libc). Before the real call, the listeners the new program is handed take no new
 * clients (calls/spawn.c). posix_spawn_file_actions_init, _destroy and _adddup2 are seen
 * only to learn which listener a spawn's actions hand over. Each returns what libc returns,
 * with errno as libc left it.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload.h"
#include "calls/calls.h"

static void rsk_spawn_note(const void *fa, char *const argv[], char *const envp[])
{
	int err = errno;

	rsk_spawn_prepare(fa, argv, envp);
	errno = err;
}

RSK_EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
	rsk_spawn_forget(fa); /* an object at this address before was never destroyed */
	return RSK_REAL(posix_spawn_file_actions_init)(fa);
}

RSK_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	rsk_spawn_forget(fa);
	return RSK_REAL(posix_spawn_file_actions_destroy)(fa);
}

RSK_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int fd2)
{
	int rc = RSK_REAL(posix_spawn_file_actions_adddup2)(fa, fd, fd2);

	if (rc == 0)
		rsk_spawn_dup2(fa, fd, fd2);
	return rc;
}

RSK_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	rsk_spawn_note(fa, argv, envp);
	return RSK_REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}

RSK_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			    const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	rsk_spawn_note(fa, argv, envp);
	return RSK_REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}

/* The shell gets this process's environment, every number without close-on-exec, and the
 * command line as its argument. */
RSK_EXPORT int system(const char *cmd)
{
	if (cmd != NULL) /* (NULL only asks whether a shell exists) */
		rsk_spawn_note(NULL, (char *const[]){(char *)cmd, NULL}, environ);
	return RSK_REAL(system)(cmd);
}

RSK_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	rsk_spawn_note(NULL, (char *const[]){(char *)cmd, NULL}, environ);
	return RSK_REAL(popen)(cmd, mode);
}
