/*
 * Resolution of the real libc functions (see real.h). Runs from the preload constructor and,
 * lazily, from the first wrapper that needs a symbol, whichever comes first.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "real.h"

struct rsk_real_table rsk_real;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
/* Stand-ins for symbols this libc does not have: the call fails like a missing syscall
 * (-1, or NULL for a function that returns a pointer: fdopen, popen). */
#define RSK_REAL_STUB(ret, name, params)                                                           \
	static ret rsk_enosys_##name params                                                        \
	{                                                                                          \
		errno = ENOSYS;                                                                    \
		return (ret)(intptr_t)(__builtin_classify_type((ret)0) == 5 ? 0 : -1);             \
	}
RSK_REAL_SYMBOLS(RSK_REAL_STUB)
#undef RSK_REAL_STUB
#pragma GCC diagnostic pop

#define RSK_REAL_ONE(ret, name, params) +1
static int rsk_real_missing_mask[0 RSK_REAL_SYMBOLS(RSK_REAL_ONE)];
#undef RSK_REAL_ONE

void rsk_real_resolve(void)
{
	void *p;
	int i = 0;

#define RSK_REAL_RESOLVE(ret, name, params)                                                        \
	p = dlsym(RTLD_NEXT, #name);                                                               \
	__atomic_store_n(&rsk_real_missing_mask[i], p == NULL, __ATOMIC_RELAXED);                  \
	if (p == NULL)                                                                             \
		p = (void *)rsk_enosys_##name;                                                     \
	__atomic_store_n((void **)&rsk_real.name, p, __ATOMIC_RELEASE);                            \
	i++;
	RSK_REAL_SYMBOLS(RSK_REAL_RESOLVE)
#undef RSK_REAL_RESOLVE
}

void rsk_real_reset(void)
{
	memset(&rsk_real, 0, sizeof(rsk_real));
}

int rsk_real_available(const char *name)
{
	int i = 0;

	if (__atomic_load_n(&rsk_real.close, __ATOMIC_ACQUIRE) == NULL)
		rsk_real_resolve();
#define RSK_REAL_FIND(ret, sym, params)                                                            \
	if (strcmp(name, #sym) == 0)                                                               \
		return !rsk_real_missing_mask[i];                                                  \
	i++;
	RSK_REAL_SYMBOLS(RSK_REAL_FIND)
#undef RSK_REAL_FIND
	return 0;
}
