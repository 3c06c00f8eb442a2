/*
 * Process identity (see proc.h). The pid is cached in a plain global: it only changes in a
 * forked child, where rsk_proc_forked_child() runs before the child uses the library.
 */
#include <unistd.h>

#include "proc.h"

static pid_t rsk_proc_cached;
static unsigned int rsk_proc_nforks;

pid_t rsk_proc_pid(void)
{
	pid_t p = __atomic_load_n(&rsk_proc_cached, __ATOMIC_RELAXED);

	if (p == 0) {
		p = getpid();
		__atomic_store_n(&rsk_proc_cached, p, __ATOMIC_RELAXED);
	}
	return p;
}

unsigned int rsk_proc_forks(void)
{
	return __atomic_load_n(&rsk_proc_nforks, __ATOMIC_RELAXED);
}

void rsk_proc_forking(void)
{
	__atomic_add_fetch(&rsk_proc_nforks, 1, __ATOMIC_RELAXED);
}

void rsk_proc_forked_child(void)
{
	__atomic_store_n(&rsk_proc_cached, getpid(), __ATOMIC_RELAXED);
}
