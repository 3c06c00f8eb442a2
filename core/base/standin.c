/*
 * The stand-in notes (see standin.h): a sparse array by fd, chunks allocated on first note
 * and kept while the process runs (a lock-free reader never touches freed memory). Each
 * entry is guarded by a sequence number, odd while it is written: a reader that sees it odd
 * or changed takes the entry as absent, which only costs it the proof by system calls.
 */
#include <stdlib.h>

#include "standin.h"

#define RSK_SI_SHIFT 12
#define RSK_SI_CHUNK (1u << RSK_SI_SHIFT)
#define RSK_SI_DIR (1u << 18) /* fds up to 2^30, the kernel's largest nr_open */

struct rsk_si_entry {
	unsigned int seq;
	int family; /* 0: no note */
	uint64_t own, peer;
};

unsigned int rsk_standin_live;
static struct rsk_si_entry *rsk_si_dir[RSK_SI_DIR];
static unsigned int rsk_si_top; /* one past the highest directory entry with a chunk */
static int rsk_si_off;

static struct rsk_si_entry *rsk_si_entry(unsigned int fd, int create)
{
	struct rsk_si_entry **d = &rsk_si_dir[fd >> RSK_SI_SHIFT], *c = rsk_consume(d);
	struct rsk_si_entry *none = NULL;
	unsigned int top;

	if (c == NULL && create) {
		c = calloc(RSK_SI_CHUNK, sizeof(*c));
		if (c == NULL)
			return NULL;
		/* Two threads may race to make one chunk: the loser frees its copy. */
		if (!__atomic_compare_exchange_n(d, &none, c, 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			free(c);
			c = none;
		}
		top = __atomic_load_n(&rsk_si_top, __ATOMIC_ACQUIRE);
		while (top <= (fd >> RSK_SI_SHIFT) &&
		       !__atomic_compare_exchange_n(&rsk_si_top, &top, (fd >> RSK_SI_SHIFT) + 1, 0,
						    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			;
	}
	return c == NULL ? NULL : &c[fd & (RSK_SI_CHUNK - 1)];
}

/* Make @e's sequence odd (ours to write): the even value it had. */
static unsigned int rsk_si_begin(struct rsk_si_entry *e)
{
	unsigned int s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);

	for (;;) {
		/* (another writer's odd value: wait for it to end, by failing the swap) */
		s &= ~1u;
		if (__atomic_compare_exchange_n(&e->seq, &s, s + 1, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			break;
	}
	__atomic_thread_fence(__ATOMIC_RELEASE); /* the odd value before the new fields */
	return s;
}

/* Write @family/@own/@peer into @e; 1 if it held a note before. */
static int rsk_si_write(struct rsk_si_entry *e, int family, uint64_t own, uint64_t peer)
{
	unsigned int s = rsk_si_begin(e);
	int had = __atomic_load_n(&e->family, __ATOMIC_RELAXED) != 0;

	__atomic_store_n(&e->family, family, __ATOMIC_RELAXED);
	__atomic_store_n(&e->own, own, __ATOMIC_RELAXED);
	__atomic_store_n(&e->peer, peer, __ATOMIC_RELAXED);
	__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
	return had;
}

void rsk_standin_note(int fd, const struct rsk_standin *si)
{
	struct rsk_si_entry *e;

	if ((unsigned int)fd >= RSK_SI_DIR * RSK_SI_CHUNK || si->family == 0 ||
	    __atomic_load_n(&rsk_si_off, __ATOMIC_ACQUIRE))
		return;
	e = rsk_si_entry((unsigned int)fd, 1);
	if (e != NULL && !rsk_si_write(e, si->family, si->own, si->peer))
		rsk_counter_add(&rsk_standin_live, 1);
}

int rsk_standin_get(int fd, struct rsk_standin *out)
{
	struct rsk_si_entry *e;
	unsigned int s;

	if ((unsigned int)fd >= RSK_SI_DIR * RSK_SI_CHUNK ||
	    __atomic_load_n(&rsk_standin_live, __ATOMIC_RELAXED) == 0 ||
	    __atomic_load_n(&rsk_si_off, __ATOMIC_ACQUIRE) ||
	    (e = rsk_si_entry((unsigned int)fd, 0)) == NULL)
		return 0;
	s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	out->family = __atomic_load_n(&e->family, __ATOMIC_RELAXED);
	out->own = __atomic_load_n(&e->own, __ATOMIC_RELAXED);
	out->peer = __atomic_load_n(&e->peer, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE); /* the fields before the second look */
	return !(s & 1) && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s && out->family != 0;
}

static void rsk_si_forget(struct rsk_si_entry *e)
{
	if (__atomic_load_n(&e->family, __ATOMIC_RELAXED) != 0 && rsk_si_write(e, 0, 0, 0))
		rsk_counter_add(&rsk_standin_live, -1u);
}

void rsk_standin_drop_slow(int fd)
{
	struct rsk_si_entry *e;

	if ((unsigned int)fd < RSK_SI_DIR * RSK_SI_CHUNK &&
	    (e = rsk_si_entry((unsigned int)fd, 0)) != NULL)
		rsk_si_forget(e);
}

void rsk_standin_drop_range(unsigned int first, unsigned int last)
{
	unsigned int top = __atomic_load_n(&rsk_si_top, __ATOMIC_ACQUIRE), fd;
	struct rsk_si_entry *e;

	if (__atomic_load_n(&rsk_standin_live, __ATOMIC_RELAXED) == 0 || top == 0)
		return;
	if (last >= top * RSK_SI_CHUNK)
		last = top * RSK_SI_CHUNK - 1;
	for (fd = first; fd <= last; fd++) {
		if ((e = rsk_si_entry(fd, 0)) == NULL) { /* a chunk never made: skip it */
			fd |= RSK_SI_CHUNK - 1;
			continue;
		}
		rsk_si_forget(e);
	}
}

void rsk_standin_off(void)
{
	__atomic_store_n(&rsk_si_off, 1, __ATOMIC_RELEASE);
}

unsigned int rsk_standin_count(void)
{
	return __atomic_load_n(&rsk_standin_live, __ATOMIC_RELAXED);
}

void rsk_standin_clear(void)
{
	unsigned int i;

	for (i = 0; i < RSK_SI_DIR; i++) {
		free(rsk_si_dir[i]);
		rsk_si_dir[i] = NULL;
	}
	rsk_si_top = 0;
	rsk_standin_live = 0;
	rsk_si_off = 0;
}
