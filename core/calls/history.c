/*
 * Destination history (see history.h): a small direct-mapped table; a collision replaces
 * the older destination, which costs nothing worse than the default choice for it.
 *
 * Each slot is one 64-bit word, read and changed atomically: no lock (a client's short
 * connection took the table's lock twice, at its connect's verdict and at its close's note,
 * and hashed its destination's 18 bytes byte by byte each time). The word holds a 52-bit
 * fingerprint of the destination in place of its key: two destinations whose fingerprints
 * agree in one slot share a history, which, like a collision, only costs one of them the
 * default choice.
 */
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "base/clock.h"
#include "base/config.h"
#include "sock/sock.h"
#include "history.h"

#define RSK_HIST_SLOTS 256
#define RSK_HIST_DEPTH 8 /* connections remembered per destination */

/* A slot: fingerprint << RSK_HIST_FP_SHIFT | RSK_HIST_NO_BEARER | n << RSK_HIST_N_SHIFT |
 * bits; n connections remembered (<= RSK_HIST_DEPTH), bits 1 = short, newest in bit 0. 0:
 * empty. */
#define RSK_HIST_N_SHIFT 8
#define RSK_HIST_NO_BEARER (1ull << 12) /* a bearer connect there found no rendezvous */
#define RSK_HIST_FP_SHIFT 13

static uint64_t rsk_hist[RSK_HIST_SLOTS];
static int rsk_hist_nsetups; /* direct setups in progress (atomic) */

/* A hash of port and address (IPv4-mapped IPv6 folded to IPv4): slot in the low bits, the
 * fingerprint above them. -1 for another family. */
static int rsk_hist_hash(const struct sockaddr *a, uint64_t *h)
{
	static const uint8_t v4m[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)a;
	uint64_t k[3] = {0, 0, 0}, x;

	if (a->sa_family == AF_INET) {
		memcpy(&k[0], &s4->sin_addr, 4);
		memcpy((char *)&k[0] + 4, &s4->sin_port, 2);
	} else if (a->sa_family == AF_INET6) {
		if (memcmp(s6->sin6_addr.s6_addr, v4m, 12) == 0) {
			memcpy(&k[0], s6->sin6_addr.s6_addr + 12, 4);
			memcpy((char *)&k[0] + 4, &s6->sin6_port, 2);
		} else {
			memcpy(k, s6->sin6_addr.s6_addr, 16);
			memcpy(&k[2], &s6->sin6_port, 2);
			k[2] |= 1ull << 16; /* (never the same as a folded IPv4 one) */
		}
	} else {
		return -1;
	}
	/* multiply-xorshift mixing (splitmix64's finaliser) of the three words */
	x = k[0] * 0x9e3779b97f4a7c15ull ^ k[1] * 0xc2b2ae3d27d4eb4full ^ k[2] * 0x165667b19e3779f9ull;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	*h = x ^ (x >> 31);
	return 0;
}

static uint64_t *rsk_hist_slot(uint64_t h)
{
	return &rsk_hist[h % RSK_HIST_SLOTS];
}

int rsk_hist_is_short(int64_t age_ms, uint64_t bytes, uint64_t calls)
{
	if (bytes >= rsk_config.upgrade_bytes || rsk_config.upgrade_ms == 0)
		return 0; /* 0: every connection is worth it, at its first call */
	return age_ms < (int64_t)rsk_config.upgrade_ms || calls < RSK_HIST_AGE_CALLS;
}

void rsk_hist_called(uint64_t *calls, int64_t *mark)
{
	int64_t none = 0;

	if (__atomic_load_n(calls, __ATOMIC_RELAXED) < RSK_HIST_AGE_CALLS) {
		__atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
		return;
	}
	if (__atomic_load_n(mark, __ATOMIC_RELAXED) == 0) /* (the first thread's moment) */
		(void)__atomic_compare_exchange_n(mark, &none, rsk_now_ms(), 0, __ATOMIC_RELAXED,
						  __ATOMIC_RELAXED);
}

int64_t rsk_hist_age(const int64_t *mark)
{
	int64_t m = __atomic_load_n(mark, __ATOMIC_RELAXED);

	return m != 0 ? rsk_now_ms() - m : 0;
}

int rsk_hist_verdict(const struct sockaddr *dest)
{
	uint64_t h, v;
	unsigned int n, shorts;

	if (rsk_hist_hash(dest, &h) < 0)
		return -1;
	v = __atomic_load_n(rsk_hist_slot(h), __ATOMIC_RELAXED);
	n = (unsigned int)(v >> RSK_HIST_N_SHIFT) & 0xf;
	if (v >> RSK_HIST_FP_SHIFT != h >> RSK_HIST_FP_SHIFT || n < RSK_HIST_DEPTH / 2)
		return -1;
	shorts = (unsigned int)__builtin_popcount((unsigned int)v & 0xffu & ((1u << n) - 1));
	return 2 * shorts > n;
}

int rsk_hist_short(const struct sockaddr *dest)
{
	return rsk_hist_verdict(dest) == 1;
}

void rsk_hist_note(const struct sockaddr *dest, int short_lived)
{
	uint64_t h, *sl, v, nv, fp, nb;
	unsigned int n, bits;

	if (rsk_hist_hash(dest, &h) < 0)
		return;
	sl = rsk_hist_slot(h);
	fp = h >> RSK_HIST_FP_SHIFT;
	v = __atomic_load_n(sl, __ATOMIC_RELAXED);
	do {
		n = 0;
		bits = 0;
		nb = 0;
		if (v >> RSK_HIST_FP_SHIFT == fp) {
			n = (unsigned int)(v >> RSK_HIST_N_SHIFT) & 0xf;
			bits = (unsigned int)v & 0xffu;
			nb = v & RSK_HIST_NO_BEARER;
		}
		bits = ((bits << 1) | (short_lived ? 1u : 0u)) & 0xffu;
		if (n < RSK_HIST_DEPTH)
			n++;
		nv = fp << RSK_HIST_FP_SHIFT | nb | (uint64_t)n << RSK_HIST_N_SHIFT | bits;
	} while (!__atomic_compare_exchange_n(sl, &v, nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

int rsk_hist_no_bearer(const struct sockaddr *dest)
{
	uint64_t h, v;

	if (rsk_hist_hash(dest, &h) < 0)
		return 0;
	v = __atomic_load_n(rsk_hist_slot(h), __ATOMIC_RELAXED);
	return v >> RSK_HIST_FP_SHIFT == h >> RSK_HIST_FP_SHIFT && (v & RSK_HIST_NO_BEARER);
}

void rsk_hist_set_no_bearer(const struct sockaddr *dest, int none)
{
	uint64_t h, *sl, v, nv;

	if (rsk_hist_hash(dest, &h) < 0)
		return;
	sl = rsk_hist_slot(h);
	v = __atomic_load_n(sl, __ATOMIC_RELAXED);
	do { /* (only a destination with a history: the bearer is asked after a verdict) */
		if (v >> RSK_HIST_FP_SHIFT != h >> RSK_HIST_FP_SHIFT)
			return;
		nv = none ? v | RSK_HIST_NO_BEARER : v & ~RSK_HIST_NO_BEARER;
		if (nv == v)
			return;
	} while (!__atomic_compare_exchange_n(sl, &v, nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
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

void rsk_hist_setup_seen(struct rsk_sock *s)
{
	if (__atomic_load_n(&s->setup_held, __ATOMIC_RELAXED) &&
	    __atomic_exchange_n(&s->setup_held, 0, __ATOMIC_ACQ_REL))
		rsk_hist_setup_end();
}

int rsk_hist_setups(void)
{
	return __atomic_load_n(&rsk_hist_nsetups, __ATOMIC_ACQUIRE);
}

void rsk_hist_clear(void)
{
	int i;

	for (i = 0; i < RSK_HIST_SLOTS; i++)
		__atomic_store_n(&rsk_hist[i], 0, __ATOMIC_RELAXED);
}
