/*
 * Shared helpers of the libc-named wrappers: errno conversion at the libc boundary, the
 * re-entry guard and lazy initialisation. Wrappers hold no protocol logic.
 */
#ifndef RSK_PRELOAD_H
#define RSK_PRELOAD_H

#include <errno.h>

#include "base/compiler.h"
#include "base/fdtab.h"
#include "base/real.h"

/* Non-zero while the library itself (or rdma-core under it) is calling libc. */
extern __thread int rsk_guard;

/* Set once the constructor (or the first wrapper that needed it) has run rsk_init(). */
extern int rsk_initialised;

/* Parse config, open the log: idempotent, safe from any wrapper before the constructor. */
void rsk_init(void);

static inline void rsk_init_ensure(void)
{
	if (rsk_unlikely(!__atomic_load_n(&rsk_initialised, __ATOMIC_ACQUIRE)))
		rsk_init();
}

/* Core returns >= 0 or -errno; libc callers want -1 and errno. */
static inline long rsk_ret(long rc)
{
	if (rsk_unlikely(rc < 0)) {
		errno = (int)-rc;
		return -1;
	}
	return rc;
}

/* An exec returned (it failed) with @rc: relays it handed over come back when @handed
 * (rsk_life_exec_prepare said so), errno as the call left it (preload/exec.c; syscall.c). */
long rsk_exec_done(long rc, int handed);

/* Real call result as core's convention (for hooks that want the errno value). */
static inline int rsk_rc(long rc)
{
	return rc < 0 ? -errno : 0;
}

/*
 * The pass-through test every data-path wrapper starts with: one bounds check, one table
 * load. Kernel sockets, files, pipes and everything else take the tail call to libc.
 */
#define RSK_PASS_UNLESS_ACCEL(fd, name, ...)                                                       \
	do {                                                                                       \
		if (rsk_likely(!rsk_fdtab_is_data(rsk_fdtab_load(fd))))                            \
			return RSK_REAL(name)(__VA_ARGS__);                                        \
	} while (0)

#endif
