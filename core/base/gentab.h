/*
 * A table of fixed-size entries named by generation-tagged tokens: a growable array of
 * slots, a free list, and a token (generation << 32) | index. A slot's generation is bumped
 * whenever the slot is freed, so a token that outlives its entry names nothing, even once
 * the slot serves a new entry: an event harvested before its owner went (an epoll event, a
 * verbs completion) is recognised as stale instead of reaching the new owner. Generations
 * are never 0, so no token is 0 and no value below 2^32 is a token (the event loop gives its
 * eventfd such a value). Users: the event loop's watch handles (evloop.c) and the verbs
 * demultiplexer's tokens (transport/verbs_demux.c).
 *
 * No lock: the caller serialises every call on one table with its own lock (both users
 * already hold one around a lookup and what they do with the entry). Growth reallocates, so
 * an entry's address is good only until the next rsk_gentab_add() on its table: a caller
 * must not keep an entry pointer across an add (a callback that may add must be read out of
 * its entry before it is called).
 */
#ifndef RSK_BASE_GENTAB_H
#define RSK_BASE_GENTAB_H

#include <stddef.h>
#include <stdint.h>

struct rsk_gentab {
	unsigned char *mem; /* cap slots: each a bookkeeping header, then the caller's entry */
	size_t entry_size;  /* the caller's part of a slot */
	uint32_t cap;       /* slots allocated */
	uint32_t free;      /* first free slot's index + 1, 0: none (so a zeroed table is empty) */
	uint32_t used;      /* slots in use */
};

/* A static initializer: an empty table of entries of @size bytes (nothing allocated yet). */
#define RSK_GENTAB_INIT(size) {.entry_size = (size)}

/* A free slot's entry (zeroed: nothing of its previous owner survives), its token in *@tok;
 * NULL when the table cannot grow (out of memory, or 2^31 slots). */
void *rsk_gentab_add(struct rsk_gentab *t, uint64_t *tok);

/* The entry @tok names if it is still that one, else NULL (0, a freed or reused slot's
 * token, an index never allocated). */
void *rsk_gentab_of(const struct rsk_gentab *t, uint64_t tok);

/* Free @tok's slot: 1, or 0 when @tok names nothing (a stale token is harmless). */
int rsk_gentab_del(struct rsk_gentab *t, uint64_t tok);

/* Free every slot in use, generations bumped so tokens held anywhere stay stale (a forked
 * child forgetting the parent's watches). */
void rsk_gentab_clear(struct rsk_gentab *t);

/* Slots in use. */
uint32_t rsk_gentab_count(const struct rsk_gentab *t);

/* Release the memory; the table is empty and usable again. Only when no token of it can be
 * looked up any more (generations start over, so an old token could name a new entry). */
void rsk_gentab_destroy(struct rsk_gentab *t);

/* For tests: give the live slot @tok names generation @gen (not 0), so the wrap past
 * UINT32_MAX is reached without 2^32 frees. The slot's new token, or 0. */
uint64_t rsk_gentab_set_gen(struct rsk_gentab *t, uint64_t tok, uint32_t gen);

#endif
