/*
 * Registered memory for verbs rings, pooled per device: one registration serves many
 * connections (see verbs_pool.c). A ring is nbuf * buf_size bytes, page aligned.
 */
#ifndef RSK_TRANSPORT_VERBS_POOL_H
#define RSK_TRANSPORT_VERBS_POOL_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct rsk_vpool_chunk;

struct rsk_vring {
	char *mem;
	uint32_t lkey;
	struct rsk_vpool_chunk *chunk; /* NULL: not allocated */
	unsigned int idx;
};

/* A ring of at least @len bytes registered with @pd. 0, -ENOMEM, or -EDQUOT (memlock). */
int rsk_vpool_get(struct ibv_pd *pd, size_t len, struct rsk_vring *out);

/* Give the ring back (no-op for an unallocated one). */
void rsk_vpool_put(struct rsk_vring *r);

#endif
