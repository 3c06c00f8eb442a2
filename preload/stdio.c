/*
 * fdopen: a FILE on a socket reads and writes through glibc's internal calls, which no
 * preload sees (dup2 onto 0-2, the other way into stdio, is in dup.c). The socket is handed
 * to calls/lifecycle.c first, which keeps it on the kernel or relays it.
 */
#include <stdio.h>

#include "base/standin.h"
#include "preload.h"
#include "calls/calls.h"

RSK_EXPORT FILE *fdopen(int fd, const char *mode)
{
	rsk_standin_drop(fd); /* its fclose is glibc's internal close, which no preload sees */
	if (rsk_fdtab_load(fd) != 0)
		rsk_life_stdio(fd);
	return RSK_REAL(fdopen)(fd, mode);
}
