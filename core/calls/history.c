/*
 * Destination history (see history.h): a small direct-mapped table; a collision replaces
 * the older destination, which costs nothing worse than the default choice for it.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/config.h"
#include "history.h"

#define RSK_HIST_SLOTS 256
#define RSK_HIST_DEPTH 8 /* connections remembered per destination */

struct rsk_hist_slot {
	uint8_t key[18]; /* port, then the address (IPv4-mapped IPv6 folded to IPv4) */
	uint8_t n;       /* connections remembered (<= RSK_HIST_DEPTH) */
	uint8_t bits;    /* 1 = short, newest in bit 0 */
};

static struct rsk_hist_slot rsk_hist[RSK_HIST_SLOTS];
static pthread_mutex_t rsk_hist_lock = PTHREAD_MUTEX_INITIALIZER;
static int rsk_hist_nsetups; /* direct setups in progress (atomic) */

static int rsk_hist_key(const struct sockaddr *a, uint8_t key[18])
{
	static const uint8_t v4m[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)a;

	memset(key, 0, 18);
	if (a->sa_family == AF_INET) {
		memcpy(key, &s4->sin_port, 2);
		memcpy(key + 2, &s4->sin_addr, 4);
	} else if (a->sa_family == AF_INET6) {
		memcpy(key, &s6->sin6_port, 2);
		if (memcmp(s6->sin6_addr.s6_addr, v4m, 12) == 0)
			memcpy(key + 2, s6->sin6_addr.s6_addr + 12, 4);
		else
			memcpy(key + 2, s6->sin6_addr.s6_addr, 16);
	} else {
		return -1;
	}
	return 0;
}

static struct rsk_hist_slot *rsk_hist_slot(const uint8_t key[18])
{
	uint32_t h = 2166136261u;
	int i;

	for (i = 0; i < 18; i++)
		h = (h ^ key[i]) * 16777619u;
	return &rsk_hist[h % RSK_HIST_SLOTS];
}

int rsk_hist_is_short(int64_t age_ms, uint64_t bytes, uint64_t calls)
{
	if (bytes >= rsk_config.upgrade_bytes || rsk_config.upgrade_ms == 0)
		return 0; /* 0: every connection is worth it, at its first call */
	return age_ms < (int64_t)rsk_config.upgrade_ms || calls < RSK_HIST_AGE_CALLS;
}

int rsk_hist_verdict(const struct sockaddr *dest)
{
	struct rsk_hist_slot *sl;
	uint8_t key[18];
	int shorts = 0, i, rc = -1;

	if (rsk_hist_key(dest, key) < 0)
		return -1;
	pthread_mutex_lock(&rsk_hist_lock);
	sl = rsk_hist_slot(key);
	if (memcmp(sl->key, key, 18) == 0 && sl->n >= RSK_HIST_DEPTH / 2) {
		for (i = 0; i < sl->n; i++)
			shorts += (sl->bits >> i) & 1;
		rc = 2 * shorts > sl->n;
	}
	pthread_mutex_unlock(&rsk_hist_lock);
	return rc;
}

int rsk_hist_short(const struct sockaddr *dest)
{
	return rsk_hist_verdict(dest) == 1;
}

void rsk_hist_note(const struct sockaddr *dest, int short_lived)
{
	struct rsk_hist_slot *sl;
	uint8_t key[18];

	if (rsk_hist_key(dest, key) < 0)
		return;
	pthread_mutex_lock(&rsk_hist_lock);
	sl = rsk_hist_slot(key);
	if (memcmp(sl->key, key, 18) != 0) {
		memcpy(sl->key, key, 18);
		sl->n = 0;
		sl->bits = 0;
	}
	sl->bits = (uint8_t)((sl->bits << 1) | (short_lived ? 1 : 0));
	if (sl->n < RSK_HIST_DEPTH)
		sl->n++;
	pthread_mutex_unlock(&rsk_hist_lock);
}

int rsk_hist_setup_begin(void)
{
	int n = __atomic_load_n(&rsk_hist_nsetups, __ATOMIC_RELAXED);

	do {
		if (n >= RSK_HIST_SETUPS)
			return 0;
	} while (!__atomic_compare_exchange_n(&rsk_hist_nsetups, &n, n + 1, 1, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	return 1;
}

void rsk_hist_setup_end(void)
{
	__atomic_sub_fetch(&rsk_hist_nsetups, 1, __ATOMIC_ACQ_REL);
}

int rsk_hist_setups(void)
{
	return __atomic_load_n(&rsk_hist_nsetups, __ATOMIC_ACQUIRE);
}

void rsk_hist_clear(void)
{
	pthread_mutex_lock(&rsk_hist_lock);
	memset(rsk_hist, 0, sizeof(rsk_hist));
	pthread_mutex_unlock(&rsk_hist_lock);
}
