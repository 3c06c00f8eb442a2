/*
 * Upgrade offers: a TCP connection that moves onto a transport later, in band (see
 * calls/upgrade.c). A transport's listener that received one for the client at @peer
 * announces it here, from its event loop; the hook registered from above (the layer that
 * knows the process's connections) returns 1 if one of them is that client's, 0 if none is
 * (yet: it may still be in the accept queue, where accept() claims it).
 */
#ifndef RSK_TRANSPORT_ANNOUNCE_H
#define RSK_TRANSPORT_ANNOUNCE_H

#include <sys/socket.h>

void rsk_transport_set_upgrade_hook(int (*fn)(const struct sockaddr_storage *peer));
int rsk_transport_upgrade_offer(const struct sockaddr_storage *peer);

#endif
