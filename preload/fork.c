/*
 * fork: the child gets a copy of every kernel socket, as always, and starts its own
 * counters (its RDMASOCK_STATS line reports what the child did, not the parent's history).
 */
#include <unistd.h>

#include "preload.h"
#include "stats.h"

RSK_EXPORT pid_t fork(void)
{
	pid_t pid = RSK_REAL(fork)();

	if (pid == 0)
		rsk_stats_reset();
	return pid;
}
