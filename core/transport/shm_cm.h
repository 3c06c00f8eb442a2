/*
 * Connection management of the shared-memory transport: the client's offer through the
 * listener's rendezvous (shm_rdv.h), the server's claim by client address, and the
 * endpoint's setup and teardown hooks.
 */
#ifndef RSK_SHM_CM_H
#define RSK_SHM_CM_H

#include "transport.h"

extern const struct rsk_cm_ops rsk_shm_cm_ops;

#endif
