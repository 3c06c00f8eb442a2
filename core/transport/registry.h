/*
 * The transports of this build and the choice among them: which one a client dials towards
 * a destination, which ones a listener listens with (in the order accepted connections are
 * claimed), and the connection-management table of an endpoint.
 */
#ifndef RSK_TRANSPORT_REGISTRY_H
#define RSK_TRANSPORT_REGISTRY_H

#include <sys/socket.h>
#include <sys/types.h>

#include "base/config.h"
#include "transport.h"

#define RSK_TRANSPORT_MAX 4

/* The table of the transport endpoint @ep belongs to. */
const struct rsk_cm_ops *rsk_transport_cm(const struct rsk_ep *ep);

/*
 * The transport to dial towards @dest in @mode (not RSK_MODE_KERNEL): shared memory for this
 * host's addresses (auto, shm), verbs for other hosts (auto) or every destination (verbs:
 * also this host, which is how the Soft-RoCE guest tests it). NULL with *why when none.
 */
const struct rsk_cm_ops *rsk_transport_route(enum rsk_mode mode, const struct sockaddr *dest,
					     enum rdmasock_fallback *why);

/* A forked child: each transport drops what only its parent may hand out. */
void rsk_transport_atfork_child(void);
/* fork() made @child (in the parent): the child holds our listeners too. */
void rsk_transport_forked(pid_t child);

/* _exit: each transport removes what its destructors would have (names in /dev/shm). Safe
 * in a signal handler. */
void rsk_transport_quick_exit(void);

/* The transports a listener listens with in @mode, in claim order. Returns the count. */
int rsk_transport_listening(enum rsk_mode mode, const struct rsk_cm_ops *out[RSK_TRANSPORT_MAX]);

#endif
