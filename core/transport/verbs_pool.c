/*
 * Registered buffer pool of the verbs transport (see verbs_pool.h): rings of one size come
 * from chunks of RSK_VPOOL_RINGS rings, each chunk registered once with its device's PD, so
 * a connection costs no memory registration of its own (registration pins pages and is the
 * slowest verbs call) and the number of MRs stays small. One empty chunk per size and PD is
 * kept for the next connection; further empty ones are given back.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_pool.h"

#define RSK_VPOOL_RINGS 16u

struct rsk_vpool_chunk {
	struct rsk_vpool_chunk *next;
	struct ibv_pd *pd;
	size_t ring_len;
	char *mem;
	struct ibv_mr *mr;
	uint32_t used; /* bitmap of the chunk's rings */
};

static struct rsk_vpool_chunk *rsk_vpool_chunks;
static pthread_mutex_t rsk_vpool_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t rsk_vpool_round(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (len + page - 1) & ~(page - 1);
}

/* A new registered chunk, or NULL with *err (-EDQUOT when pinning was refused). */
static struct rsk_vpool_chunk *rsk_vpool_grow(struct ibv_pd *pd, size_t ring_len, int *err)
{
	struct rsk_vpool_chunk *k = calloc(1, sizeof(*k));
	size_t len = ring_len * RSK_VPOOL_RINGS;
	void *mem;

	if (k == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		free(k);
		*err = -ENOMEM;
		return NULL;
	}
	/* Local access only: a peer can SEND into posted receive buffers, nothing else. */
	k->mr = ibv_reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
	if (k->mr == NULL) {
		*err = (errno == ENOMEM || errno == EPERM || errno == EAGAIN) ? -EDQUOT : -errno;
		munmap(mem, len);
		free(k);
		return NULL;
	}
	k->pd = pd;
	k->ring_len = ring_len;
	k->mem = mem;
	k->next = rsk_vpool_chunks;
	rsk_vpool_chunks = k;
	return k;
}

int rsk_vpool_get(struct ibv_pd *pd, size_t len, struct rsk_vring *out)
{
	size_t ring_len = rsk_vpool_round(len);
	struct rsk_vpool_chunk *k;
	unsigned int i;
	int err = 0;

	pthread_mutex_lock(&rsk_vpool_lock);
	for (k = rsk_vpool_chunks; k != NULL; k = k->next)
		if (k->pd == pd && k->ring_len == ring_len && k->used != (1u << RSK_VPOOL_RINGS) - 1)
			break;
	if (k == NULL)
		k = rsk_vpool_grow(pd, ring_len, &err);
	if (k != NULL) {
		for (i = 0; k->used & (1u << i); i++)
			;
		k->used |= 1u << i;
		out->chunk = k;
		out->idx = i;
		out->mem = k->mem + (size_t)i * ring_len;
		out->lkey = k->mr->lkey;
	}
	pthread_mutex_unlock(&rsk_vpool_lock);
	return k != NULL ? 0 : err;
}

/* Is there another chunk of @k's kind with room? (then an empty @k may go) */
static int rsk_vpool_spare(const struct rsk_vpool_chunk *k)
{
	const struct rsk_vpool_chunk *o;

	for (o = rsk_vpool_chunks; o != NULL; o = o->next)
		if (o != k && o->pd == k->pd && o->ring_len == k->ring_len &&
		    o->used != (1u << RSK_VPOOL_RINGS) - 1)
			return 1;
	return 0;
}

void rsk_vpool_put(struct rsk_vring *r)
{
	struct rsk_vpool_chunk *k = r->chunk, **pp;

	if (k == NULL)
		return;
	pthread_mutex_lock(&rsk_vpool_lock);
	k->used &= ~(1u << r->idx);
	if (k->used == 0 && rsk_vpool_spare(k)) {
		for (pp = &rsk_vpool_chunks; *pp != k; pp = &(*pp)->next)
			;
		*pp = k->next;
		ibv_dereg_mr(k->mr);
		munmap(k->mem, k->ring_len * RSK_VPOOL_RINGS);
		free(k);
	}
	pthread_mutex_unlock(&rsk_vpool_lock);
	r->chunk = NULL;
}
