/*
 * The sparse fd table (see fdtab.h). Chunks are allocated on first store and never freed
 * while the process runs, so a lock-free reader can never touch freed chunk memory.
 */
#include <errno.h>
#include <stdlib.h>

#include "fdtab.h"

uintptr_t *rsk_fdtab_dir[RSK_FDTAB_DIR];
static unsigned int rsk_fdtab_nchunks;
/* One past the highest directory entry that has a chunk: a walk (fork, exit, a stats
 * request) stops there instead of reading all 2^18 entries, 2 MiB of pointers. */
static unsigned int rsk_fdtab_top;

static void rsk_fdtab_raise_top(unsigned int d)
{
	unsigned int top = __atomic_load_n(&rsk_fdtab_top, __ATOMIC_ACQUIRE);

	while (top < d + 1 && !__atomic_compare_exchange_n(&rsk_fdtab_top, &top, d + 1, 0,
							  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

static uintptr_t *rsk_fdtab_chunk(unsigned int fd, int create)
{
	uintptr_t **dslot = &rsk_fdtab_dir[fd >> RSK_FDTAB_CHUNK_SHIFT];
	uintptr_t *chunk = rsk_consume(dslot);
	uintptr_t *expected = NULL;

	if (chunk != NULL || !create)
		return chunk;
	chunk = calloc(RSK_FDTAB_CHUNK, sizeof(*chunk));
	if (chunk == NULL)
		return NULL;
	/* Two threads may race to create the same chunk: the loser frees its copy. */
	if (!__atomic_compare_exchange_n(dslot, &expected, chunk, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		free(chunk);
		return expected;
	}
	rsk_counter_add(&rsk_fdtab_nchunks, 1);
	rsk_fdtab_raise_top(fd >> RSK_FDTAB_CHUNK_SHIFT); /* after the chunk is there to see */
	return chunk;
}

int rsk_fdtab_store(int fd, uintptr_t v)
{
	uintptr_t *chunk;

	if ((unsigned int)fd >= RSK_FDTAB_MAX)
		return -EBADF;
	chunk = rsk_fdtab_chunk((unsigned int)fd, v != 0);
	if (chunk == NULL)
		return v != 0 ? -ENOMEM : 0;
	rsk_publish(&chunk[(unsigned int)fd & (RSK_FDTAB_CHUNK - 1)], v);
	return 0;
}

uintptr_t rsk_fdtab_exchange(int fd, uintptr_t v)
{
	uintptr_t *chunk;

	if ((unsigned int)fd >= RSK_FDTAB_MAX)
		return 0;
	chunk = rsk_fdtab_chunk((unsigned int)fd, v != 0);
	if (chunk == NULL)
		return 0;
	return __atomic_exchange_n(&chunk[(unsigned int)fd & (RSK_FDTAB_CHUNK - 1)], v,
				   __ATOMIC_ACQ_REL);
}

int rsk_fdtab_replace(int fd, uintptr_t old, uintptr_t v)
{
	uintptr_t *chunk;

	if ((unsigned int)fd >= RSK_FDTAB_MAX)
		return 0;
	chunk = rsk_fdtab_chunk((unsigned int)fd, v != 0);
	if (chunk == NULL)
		return old == 0;
	return __atomic_compare_exchange_n(&chunk[(unsigned int)fd & (RSK_FDTAB_CHUNK - 1)], &old,
					   v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int rsk_fdtab_walk(unsigned int first, unsigned int last, int (*fn)(int fd, uintptr_t v, void *arg),
		   void *arg)
{
	unsigned int d, i, fd, top = __atomic_load_n(&rsk_fdtab_top, __ATOMIC_ACQUIRE);
	uintptr_t *chunk, v;
	int rc;

	if (last >= RSK_FDTAB_MAX)
		last = RSK_FDTAB_MAX - 1;
	for (d = first >> RSK_FDTAB_CHUNK_SHIFT; d <= last >> RSK_FDTAB_CHUNK_SHIFT && d < top; d++) {
		chunk = rsk_consume(&rsk_fdtab_dir[d]);
		if (chunk == NULL)
			continue;
		for (i = 0; i < RSK_FDTAB_CHUNK; i++) {
			fd = (d << RSK_FDTAB_CHUNK_SHIFT) | i;
			if (fd < first || fd > last)
				continue;
			v = rsk_consume(&chunk[i]);
			if (v != 0 && (rc = fn((int)fd, v, arg)) != 0)
				return rc;
		}
	}
	return 0;
}

unsigned int rsk_fdtab_chunks(void)
{
	return rsk_counter_read(&rsk_fdtab_nchunks);
}

void rsk_fdtab_clear(void)
{
	unsigned int d;

	for (d = 0; d < RSK_FDTAB_DIR; d++) {
		free(rsk_fdtab_dir[d]);
		rsk_fdtab_dir[d] = NULL;
	}
	rsk_fdtab_nchunks = 0;
	rsk_fdtab_top = 0;
}
