/* Upgrade-offer announcements (see announce.h): one registered hook, read without a lock. */
#include <stddef.h>

#include "announce.h"

static int (*rsk_upgrade_hook)(const struct sockaddr_storage *peer);

void rsk_transport_set_upgrade_hook(int (*fn)(const struct sockaddr_storage *peer))
{
	__atomic_store_n(&rsk_upgrade_hook, fn, __ATOMIC_RELEASE);
}

int rsk_transport_upgrade_offer(const struct sockaddr_storage *peer)
{
	int (*fn)(const struct sockaddr_storage *) =
		__atomic_load_n(&rsk_upgrade_hook, __ATOMIC_ACQUIRE);

	return fn != NULL ? fn(peer) : 0;
}
