/*
 * fork: the child gets a copy of every kernel socket, as always, and shares every
 * accelerated connection with the parent exactly as it would share a kernel socket (their
 * state lives in MAP_SHARED memory). The child starts its own counters: its RDMASOCK_STATS
 * line reports what the child did, not the parent's history. No thread of the library works
 * while the process is copied (the fork gate, base/thread.h), so the child inherits none of
 * their locks held, the allocator's included.
 */
#include <unistd.h>

#include "preload.h"
#include "calls/calls.h"
#include "sock/sock.h"
#include "base/stats.h"
#include "base/thread.h"

RSK_EXPORT pid_t fork(void)
{
	pid_t pid;

	rsk_life_fork_prepare(); /* the child holds every accelerated connection too */
	rsk_thread_fork_prepare(); /* none of our threads is inside malloc or a lock */
	pid = RSK_REAL(fork)();
	if (pid == 0) {
		rsk_thread_fork_child();
		rsk_stats_reset();
		rsk_life_fork_child();
		return 0;
	}
	rsk_thread_fork_parent();
	if (pid < 0)
		rsk_life_fork_failed();
	else
		rsk_life_forked(pid);
	return pid;
}
