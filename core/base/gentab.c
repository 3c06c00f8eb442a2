/*
 * The generation-tagged slot table (see gentab.h). Each slot is a small header (generation,
 * free-list link, in-use flag) followed by the caller's entry, both rounded up to
 * max_align_t so an entry may hold anything; one allocation, so growth either moves the
 * whole table or leaves it as it was. Freed slots are reused last-in first-out, and the
 * table only grows once the free list is empty.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "gentab.h"

struct rsk_gentab_hdr {
	uint32_t gen;  /* never 0, so no token is 0 */
	uint32_t next; /* free list: the next free slot's index + 1, 0: end */
	uint32_t used;
};

#define RSK_GENTAB_ALIGN alignof(max_align_t)
#define RSK_GENTAB_ROUND(n) (((n) + RSK_GENTAB_ALIGN - 1) / RSK_GENTAB_ALIGN * RSK_GENTAB_ALIGN)
#define RSK_GENTAB_HDR RSK_GENTAB_ROUND(sizeof(struct rsk_gentab_hdr))
#define RSK_GENTAB_FIRST 64u
/* Indexes stay below 2^31: a free-list link (index + 1) and the doubling fit in 32 bits. */
#define RSK_GENTAB_MAX (1u << 31)

static size_t rsk_gentab_stride(const struct rsk_gentab *t)
{
	return RSK_GENTAB_HDR + RSK_GENTAB_ROUND(t->entry_size);
}

static struct rsk_gentab_hdr *rsk_gentab_hdr(const struct rsk_gentab *t, uint32_t idx)
{
	return (struct rsk_gentab_hdr *)(t->mem + (size_t)idx * rsk_gentab_stride(t));
}

static void *rsk_gentab_entry(struct rsk_gentab_hdr *h)
{
	return (unsigned char *)h + RSK_GENTAB_HDR;
}

static uint64_t rsk_gentab_tok(const struct rsk_gentab *t, uint32_t idx)
{
	return ((uint64_t)rsk_gentab_hdr(t, idx)->gen << 32) | idx;
}

/* Double the table (64 slots the first time); the new slots, generation 1, become the free
 * list. 0 or -ENOMEM, the table untouched then. */
static int rsk_gentab_grow(struct rsk_gentab *t)
{
	uint32_t cap = t->cap ? t->cap * 2 : RSK_GENTAB_FIRST, i;
	size_t stride = rsk_gentab_stride(t);
	unsigned char *mem;

	if (t->cap >= RSK_GENTAB_MAX || cap > SIZE_MAX / stride)
		return -ENOMEM;
	mem = realloc(t->mem, (size_t)cap * stride);
	if (mem == NULL)
		return -ENOMEM;
	t->mem = mem;
	for (i = t->cap; i < cap; i++)
		*rsk_gentab_hdr(t, i) = (struct rsk_gentab_hdr){.gen = 1, .next = i + 1 < cap ? i + 2 : 0};
	t->free = t->cap + 1;
	t->cap = cap;
	return 0;
}

void *rsk_gentab_add(struct rsk_gentab *t, uint64_t *tok)
{
	struct rsk_gentab_hdr *h;
	uint32_t idx;

	if (t->free == 0 && rsk_gentab_grow(t) < 0)
		return NULL;
	idx = t->free - 1;
	h = rsk_gentab_hdr(t, idx);
	t->free = h->next;
	h->used = 1;
	t->used++;
	memset(rsk_gentab_entry(h), 0, t->entry_size);
	*tok = rsk_gentab_tok(t, idx);
	return rsk_gentab_entry(h);
}

/* The header of the slot @tok names if it is still that one, else NULL. */
static struct rsk_gentab_hdr *rsk_gentab_live(const struct rsk_gentab *t, uint64_t tok)
{
	uint32_t idx = (uint32_t)tok, gen = (uint32_t)(tok >> 32);
	struct rsk_gentab_hdr *h;

	if (idx >= t->cap)
		return NULL;
	h = rsk_gentab_hdr(t, idx);
	return h->used && h->gen == gen ? h : NULL;
}

void *rsk_gentab_of(const struct rsk_gentab *t, uint64_t tok)
{
	struct rsk_gentab_hdr *h = rsk_gentab_live(t, tok);

	return h != NULL ? rsk_gentab_entry(h) : NULL;
}

/* Free slot @idx (in use): a new generation, so every token of it so far is stale. */
static void rsk_gentab_put(struct rsk_gentab *t, uint32_t idx)
{
	struct rsk_gentab_hdr *h = rsk_gentab_hdr(t, idx);

	h->used = 0;
	if (++h->gen == 0)
		h->gen = 1; /* 0 never names an entry */
	h->next = t->free;
	t->free = idx + 1;
	t->used--;
}

int rsk_gentab_del(struct rsk_gentab *t, uint64_t tok)
{
	if (rsk_gentab_live(t, tok) == NULL)
		return 0;
	rsk_gentab_put(t, (uint32_t)tok);
	return 1;
}

void rsk_gentab_clear(struct rsk_gentab *t)
{
	uint32_t i;

	for (i = 0; i < t->cap; i++)
		if (rsk_gentab_hdr(t, i)->used)
			rsk_gentab_put(t, i);
}

uint32_t rsk_gentab_count(const struct rsk_gentab *t)
{
	return t->used;
}

void rsk_gentab_destroy(struct rsk_gentab *t)
{
	size_t size = t->entry_size;

	free(t->mem);
	*t = (struct rsk_gentab)RSK_GENTAB_INIT(size);
}

uint64_t rsk_gentab_set_gen(struct rsk_gentab *t, uint64_t tok, uint32_t gen)
{
	struct rsk_gentab_hdr *h = rsk_gentab_live(t, tok);

	if (h == NULL || gen == 0)
		return 0;
	h->gen = gen;
	return rsk_gentab_tok(t, (uint32_t)tok);
}
