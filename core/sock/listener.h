/*
 * A listening socket's companions: one listener per transport beside the kernel listener
 * (shm's rendezvous, an rdma_cm listener on the same address and port), their event-loop
 * watches, and the claim of an accepted TCP connection's accelerated half.
 */
#ifndef RSK_LISTENER_H
#define RSK_LISTENER_H

#include <stdint.h>
#include <sys/socket.h>

#include "rdmasock.h"
#include "transport/transport.h"

struct rsk_listener;

/*
 * The transports' listeners for kernel listening socket @fd (already listening), as the
 * configured mode allows. 0, or -errno with *why (the socket then stays kernel-only).
 */
int rsk_listener_open(int fd, struct rsk_listener **out, enum rdmasock_fallback *why);

void rsk_listener_close(struct rsk_listener *l);

/* Tell every transport's listener something about this process (enum rsk_listen_note). */
void rsk_listener_note(struct rsk_listener *l, enum rsk_listen_note note);

/* A process-unique id of @l, and: tell @cm's listener of the one with @id, if it is still
 * open here. */
uint64_t rsk_listener_id(const struct rsk_listener *l);
void rsk_listener_note_id(uint64_t id, const struct rsk_cm_ops *cm, enum rsk_listen_note note);

/* An accepted connection that may move later keeps listener @l's companions open past the
 * application's close (0, or -ENOENT when it is closing); drop lets go (the last hold of a
 * closed one ends it). No lock. */
int rsk_listener_hold(struct rsk_listener *l);
void rsk_listener_drop(struct rsk_listener *l);

/* A forked child: drop the listeners of transports whose objects cannot follow a fork. */
void rsk_listener_forget(struct rsk_listener *l);

/*
 * Claim the accelerated half of TCP connection @fd (-1: unknown), accepted from @peer: asks
 * each transport in claim order and fills all of @cl. 1 with *cm and @cl filled, 0 for a
 * plain TCP client (cl->why), or -errno when a client committed to a faster path cannot be
 * served (drop the TCP connection).
 */
int rsk_listener_claim(struct rsk_listener *l, const struct sockaddr_storage *peer, int fd,
		       struct rsk_claim *cl, const struct rsk_cm_ops **cm);

/* The same without waiting, on the listener with id @id if it is still open (0 if not): an
 * upgrade offer announced for a connection accepted earlier (calls/upgrade.c). */
int rsk_listener_claim_id(uint64_t id, const struct sockaddr_storage *peer, int fd,
			  struct rsk_claim *cl, const struct rsk_cm_ops **cm);

#endif
