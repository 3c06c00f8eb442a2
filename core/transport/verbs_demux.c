/*
 * The verbs demultiplexer (see verbs_demux.h): a generation-tagged table (base/gentab.h)
 * under one mutex, whose tokens are the table's, so a token outlives its endpoint
 * harmlessly. Events are rare next to the data path (one per CQ arm, one per connection
 * teardown), so one lock is enough.
 */
#include <pthread.h>

#include "base/gentab.h"
#include "verbs_demux.h"

/* An endpoint: the table's entry. */
struct rsk_vdemux_slot {
	void *obj;
	uint64_t w[RSK_VDEMUX_KINDS]; /* bound watches */
};

static pthread_mutex_t rsk_vdemux_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_gentab rsk_vdemux_tab = RSK_GENTAB_INIT(sizeof(struct rsk_vdemux_slot));

/* The slot @tok names if it is still that one, else NULL. Lock held. */
static struct rsk_vdemux_slot *rsk_vdemux_of(uint64_t tok)
{
	return rsk_gentab_of(&rsk_vdemux_tab, tok);
}

uint64_t rsk_vdemux_add(void *obj)
{
	struct rsk_vdemux_slot *s;
	uint64_t tok = 0;

	if (obj == NULL)
		return 0;
	pthread_mutex_lock(&rsk_vdemux_lock);
	s = rsk_gentab_add(&rsk_vdemux_tab, &tok);
	if (s != NULL)
		s->obj = obj; /* no watch bound yet: the entry comes zeroed */
	pthread_mutex_unlock(&rsk_vdemux_lock);
	return s != NULL ? tok : 0;
}

void rsk_vdemux_del(uint64_t tok)
{
	pthread_mutex_lock(&rsk_vdemux_lock);
	(void)rsk_gentab_del(&rsk_vdemux_tab, tok);
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
	n = rsk_gentab_count(&rsk_vdemux_tab);
	pthread_mutex_unlock(&rsk_vdemux_lock);
	return n;
}
