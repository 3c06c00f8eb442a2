/*
 * The verbs transport's demultiplexer: the endpoints of a process share one completion
 * channel per device context and one rdma_cm event channel (one fd each, not two per
 * connection, issue 9). Events name their endpoint by a token (a CQ's cq_context, an id's
 * context): a slot index and that slot's generation. Whoever drains a shared channel looks
 * the token up here; an endpoint removes its slot before it is destroyed, so an event still
 * queued for it (or harvested just before) finds a stale token and touches nothing, even
 * when the slot already serves a new endpoint.
 */
#ifndef RSK_TRANSPORT_VERBS_DEMUX_H
#define RSK_TRANSPORT_VERBS_DEMUX_H

#include <stdint.h>

/* Event kinds, one per watch an owner can bind (the cm ops' event index). */
#define RSK_VDEMUX_CQ 0
#define RSK_VDEMUX_CM 1
#define RSK_VDEMUX_KINDS 2

/* A slot for @obj: its token (never 0), or 0 when out of memory. */
uint64_t rsk_vdemux_add(void *obj);

/* Free @tok's slot: lookups of it fail from now on (a stale token is ignored). */
void rsk_vdemux_del(uint64_t tok);

/* Bind @w (an event loop watch, 0: none) to event kind @kind of @tok's slot. */
void rsk_vdemux_bind(uint64_t tok, int kind, uint64_t w);

/*
 * An event of @kind for @tok: if the slot is still that one, @fn(@obj, @kind) runs under the
 * table's lock (so the object cannot be removed meanwhile) and the bound watch is returned
 * (0 when none); a stale token returns 0 and calls nothing. *@live says which.
 */
uint64_t rsk_vdemux_note(uint64_t tok, int kind, void (*fn)(void *obj, int kind), int *live);

/* Slots in use (tests, leak checks). */
uint32_t rsk_vdemux_count(void);

#endif
