/*
 * The verbs demultiplexer (see verbs_demux.h): a growable table of slots under one mutex. A
 * token is (generation << 32) | index; the generation is bumped whenever a slot is freed, so
 * a token outlives its endpoint harmlessly. Events are rare next to the data path (one per
 * CQ arm, one per connection teardown), so one lock is enough.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "verbs_demux.h"

struct rsk_vdemux_slot {
	void *obj;                      /* NULL: free */
	uint64_t w[RSK_VDEMUX_KINDS];   /* bound watches */
	uint32_t gen;                   /* never 0 */
	uint32_t next;                  /* free list */
};

#define RSK_VDEMUX_NONE UINT32_MAX

static pthread_mutex_t rsk_vdemux_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_vdemux_slot *rsk_vdemux_slots;
static uint32_t rsk_vdemux_n, rsk_vdemux_free = RSK_VDEMUX_NONE, rsk_vdemux_used;

/* The slot @tok names if it is still that one, else NULL. Lock held. */
static struct rsk_vdemux_slot *rsk_vdemux_of(uint64_t tok)
{
	uint32_t idx = (uint32_t)tok, gen = (uint32_t)(tok >> 32);

	if (idx >= rsk_vdemux_n || rsk_vdemux_slots[idx].obj == NULL ||
	    rsk_vdemux_slots[idx].gen != gen)
		return NULL;
	return &rsk_vdemux_slots[idx];
}

static int rsk_vdemux_grow(void)
{
	uint32_t cap = rsk_vdemux_n ? rsk_vdemux_n * 2 : 64, i;
	struct rsk_vdemux_slot *n = realloc(rsk_vdemux_slots, cap * sizeof(*n));

	if (n == NULL)
		return -ENOMEM;
	for (i = rsk_vdemux_n; i < cap; i++)
		n[i] = (struct rsk_vdemux_slot){.gen = 1, .next = i + 1 < cap ? i + 1 : RSK_VDEMUX_NONE};
	rsk_vdemux_free = rsk_vdemux_n;
	rsk_vdemux_slots = n;
	rsk_vdemux_n = cap;
	return 0;
}

uint64_t rsk_vdemux_add(void *obj)
{
	struct rsk_vdemux_slot *s;
	uint64_t tok = 0;
	uint32_t idx;

	if (obj == NULL)
		return 0;
	pthread_mutex_lock(&rsk_vdemux_lock);
	if (rsk_vdemux_free != RSK_VDEMUX_NONE || rsk_vdemux_grow() == 0) {
		idx = rsk_vdemux_free;
		s = &rsk_vdemux_slots[idx];
		rsk_vdemux_free = s->next;
		s->obj = obj;
		s->w[RSK_VDEMUX_CQ] = s->w[RSK_VDEMUX_CM] = 0;
		rsk_vdemux_used++;
		tok = ((uint64_t)s->gen << 32) | idx;
	}
	pthread_mutex_unlock(&rsk_vdemux_lock);
	return tok;
}

void rsk_vdemux_del(uint64_t tok)
{
	struct rsk_vdemux_slot *s;

	pthread_mutex_lock(&rsk_vdemux_lock);
	s = rsk_vdemux_of(tok);
	if (s != NULL) {
		s->obj = NULL;
		if (++s->gen == 0)
			s->gen = 1;
		s->next = rsk_vdemux_free;
		rsk_vdemux_free = (uint32_t)tok;
		rsk_vdemux_used--;
	}
	pthread_mutex_unlock(&rsk_vdemux_lock);
}

void rsk_vdemux_bind(uint64_t tok, int kind, uint64_t w)
{
	struct rsk_vdemux_slot *s;

	if (kind < 0 || kind >= RSK_VDEMUX_KINDS)
		return;
	pthread_mutex_lock(&rsk_vdemux_lock);
	s = rsk_vdemux_of(tok);
	if (s != NULL)
		s->w[kind] = w;
	pthread_mutex_unlock(&rsk_vdemux_lock);
}

uint64_t rsk_vdemux_note(uint64_t tok, int kind, void (*fn)(void *obj, int kind), int *live)
{
	struct rsk_vdemux_slot *s;
	uint64_t w = 0;

	*live = 0;
	if (kind < 0 || kind >= RSK_VDEMUX_KINDS)
		return 0;
	pthread_mutex_lock(&rsk_vdemux_lock);
	s = rsk_vdemux_of(tok);
	if (s != NULL) {
		*live = 1;
		if (fn != NULL)
			fn(s->obj, kind);
		w = s->w[kind];
	}
	pthread_mutex_unlock(&rsk_vdemux_lock);
	return w;
}

uint32_t rsk_vdemux_count(void)
{
	uint32_t n;

	pthread_mutex_lock(&rsk_vdemux_lock);
	n = rsk_vdemux_used;
	pthread_mutex_unlock(&rsk_vdemux_lock);
	return n;
}
