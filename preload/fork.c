/*
 * fork: the child gets a copy of every kernel socket, as always, and shares every
 * accelerated connection with the parent exactly as it would share a kernel socket (their
 * state lives in MAP_SHARED memory). The child starts its own counters: its RDMASOCK_STATS
 * line reports what the child did, not the parent's history.
 */
#include <unistd.h>

#include "preload.h"
#include "calls/calls.h"
#include "sock/sock.h"
#include "base/stats.h"

RSK_EXPORT pid_t fork(void)
{
	pid_t pid;

	rsk_life_fork_prepare(); /* the child holds every accelerated connection too */
	pid = RSK_REAL(fork)();
	if (pid == 0) {
		rsk_stats_reset();
		rsk_life_fork_child();
	} else if (pid < 0) {
		rsk_life_fork_failed();
	}
	return pid;
}
