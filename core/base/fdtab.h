/*
 * fd -> socket object map. Sparse and growable: a fixed directory of lazily allocated chunks,
 * so fds up to 2^30 (the kernel's largest nr_open) work, and a process with
 * RLIMIT_NOFILE = 1,048,576 pays only for the chunks its fds actually touch.
 *
 * A slot holds 0 (not ours: pass straight through to libc) or a tagged pointer to a struct
 * rsk_sock. Tag bit 0 set = a kernel socket we only watch (its data path is libc's); tag clear
 * = an accelerated socket whose calls the engine serves. Readers take no lock.
 */
#ifndef RSK_FDTAB_H
#define RSK_FDTAB_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

#define RSK_FDTAB_CHUNK_SHIFT 12
#define RSK_FDTAB_CHUNK (1u << RSK_FDTAB_CHUNK_SHIFT)
#define RSK_FDTAB_DIR (1u << 18)
#define RSK_FDTAB_MAX (RSK_FDTAB_DIR * RSK_FDTAB_CHUNK) /* 2^30 */

#define RSK_FDTAB_TAG_KERNEL ((uintptr_t)1)
/* With TAG_KERNEL: a kernel socket whose data path we still see (a TCP-first connection
 * that may move, calls/upgrade.c). Its control calls stay the kernel's. */
#define RSK_FDTAB_TAG_DIVERT ((uintptr_t)2)
#define RSK_FDTAB_TAGS (RSK_FDTAB_TAG_KERNEL | RSK_FDTAB_TAG_DIVERT)

extern RSK_HIDDEN uintptr_t *rsk_fdtab_dir[RSK_FDTAB_DIR];

/* The raw slot value for @fd, 0 when untracked or out of range. Lock-free, no allocation. */
static inline uintptr_t rsk_fdtab_load(int fd)
{
	uintptr_t *chunk;

	if (rsk_unlikely((unsigned int)fd >= RSK_FDTAB_MAX))
		return 0;
	chunk = rsk_consume(&rsk_fdtab_dir[(unsigned int)fd >> RSK_FDTAB_CHUNK_SHIFT]);
	if (chunk == NULL)
		return 0;
	return rsk_consume(&chunk[(unsigned int)fd & (RSK_FDTAB_CHUNK - 1)]);
}

/* True when @v names an accelerated socket (the only case the data-path wrappers divert). */
static inline int rsk_fdtab_is_accel(uintptr_t v)
{
	return v != 0 && !(v & RSK_FDTAB_TAG_KERNEL);
}

/* True when the data-path wrappers divert @v's calls (accelerated, or a TCP-first socket). */
static inline int rsk_fdtab_is_data(uintptr_t v)
{
	return v != 0 && (v & RSK_FDTAB_TAGS) != RSK_FDTAB_TAG_KERNEL;
}

static inline void *rsk_fdtab_ptr(uintptr_t v)
{
	return (void *)(v & ~RSK_FDTAB_TAGS);
}

/*
 * Store @v in @fd's slot, allocating its chunk if needed. Returns 0, -EBADF for an fd out of
 * range, -ENOMEM when a chunk cannot be allocated.
 */
int rsk_fdtab_store(int fd, uintptr_t v);

/* Atomically replace @fd's slot with @v and return the old value (0 if none / out of range). */
uintptr_t rsk_fdtab_exchange(int fd, uintptr_t v);

/* Compare-and-swap @fd's slot from @old to @v. Returns 1 on success. */
int rsk_fdtab_replace(int fd, uintptr_t old, uintptr_t v);

/*
 * Call @fn for every non-zero slot with fd in [@first, @last]; stops early when @fn returns
 * non-zero and returns that value. Slots may change concurrently; @fn sees a snapshot value.
 */
int rsk_fdtab_walk(unsigned int first, unsigned int last, int (*fn)(int fd, uintptr_t v, void *arg),
		   void *arg);

/* Number of chunks allocated (tests check that sparse use stays sparse). */
unsigned int rsk_fdtab_chunks(void);

/* Drop every slot and chunk. Only for tests: not safe against concurrent readers. */
void rsk_fdtab_clear(void);

#endif
