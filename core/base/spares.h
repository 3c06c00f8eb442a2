/*
 * A few spare objects kept for reuse without a lock: a fixed array of slots, each taken and
 * given only by exchanging its whole pointer (so no ABA). Used where a per-connection object
 * would otherwise cost a lock or a trip through malloc's arena on every short connection
 * (the socket objects, sock/sock.c; the TCP-first state, calls/upgrade.c). The caller keeps
 * the slots (`void *slots[N]`, zeroed) and decides what to do with an object that found no
 * slot.
 */
#ifndef RSK_BASE_SPARES_H
#define RSK_BASE_SPARES_H

#include <stddef.h>

/* An object from @slots (@n of them), or NULL when every slot is empty. */
static inline void *rsk_spares_take(void **slots, int n)
{
	void *p;
	int i;

	for (i = 0; i < n; i++) {
		if (__atomic_load_n(&slots[i], __ATOMIC_RELAXED) == NULL)
			continue;
		if ((p = __atomic_exchange_n(&slots[i], NULL, __ATOMIC_ACQUIRE)) != NULL)
			return p;
	}
	return NULL;
}

/* @p into an empty slot. What comes back from an exchange (NULL, or another thread's object
 * that filled the slot first) goes on looking. Returns the object no slot took, or NULL. */
static inline void *rsk_spares_give(void **slots, int n, void *p)
{
	int i;

	for (i = 0; i < n && p != NULL; i++)
		if (__atomic_load_n(&slots[i], __ATOMIC_RELAXED) == NULL)
			p = __atomic_exchange_n(&slots[i], p, __ATOMIC_ACQ_REL);
	return p;
}

#endif
