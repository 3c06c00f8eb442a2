/*
 * The RDMA verbs transport: the ops table of transport.h on an RC queue pair created
 * through rdma_cm (RDMA_PS_TCP), two-sided SEND with immediate into pre-posted receive
 * buffers. Receive buffers are registered with IBV_ACCESS_LOCAL_WRITE only: no remote key
 * ever leaves the process. Credits travel in immediates (no out-of-band view of the peer's
 * posted buffers exists without one), and because a verbs receive queue takes buffers in any
 * order, empty control messages give their buffer back at once (ep->repost_any).
 *
 * Wake-ups: a verbs peer cannot write into our readiness socket, so `kick` does nothing; the
 * completion channel of our CQ (always armed) is watched by the event loop, whose callback
 * harvests under the connection lock and wakes what is armed (rsk_conn_remote_wake).
 * Setup (rdma_cm) is in verbs_cm.c, its ops table in verbs_cm.h.
 */
#ifndef RSK_TRANSPORT_VERBS_H
#define RSK_TRANSPORT_VERBS_H

#include <stdint.h>
#include <sys/socket.h>

#include "transport.h"

struct rdma_cm_id;
struct rdma_event_channel;

/* The client's hello and the server's answer, in rdma_cm private data (network order). */
#define RSK_VERBS_MAGIC 0x52534b31u /* "RSK1" */
/* 2: neither end keeps the TCP connection once set up (a version-1 peer still watched its
 * own as the sign of our death, and would take our close for it). */
#ifndef RSK_TEST_PROTO_NEXT /* a test build's next version (shm_rdv.h) */
#define RSK_VERBS_VERSION 2
#else
#define RSK_VERBS_VERSION 3
#endif
/* FROZEN: the start of every hello and of a version reject's private data, whatever the
 * version; a reader of any version reads this much and knows whether the rest is for it. */
struct rsk_verbs_hdr {
	uint32_t magic;   /* RSK_VERBS_MAGIC */
	uint16_t version; /* the sender's RSK_VERBS_VERSION */
} __attribute__((packed));

/* Version 2's hello (its layout may change with the version; its start may not). */
struct rsk_verbs_hello {
	uint32_t magic; /* = struct rsk_verbs_hdr */
	uint16_t version;
	uint16_t tcp_port; /* client: the port its TCP connection is bound to (the claim key) */
	uint32_t nbuf;
	uint32_t buf_size;
	uint16_t flags;    /* RSK_VERBS_HELLO_* */
} __attribute__((packed));

/* The client's TCP connection exists and carries on until it moves (calls/upgrade.c). */
#define RSK_VERBS_HELLO_UPGRADE 1u

/* Usable now? 0, -ENODEV (no device, or none named RDMASOCK_DEVICE), -ENOSYS (no verbs). */
int rsk_verbs_probe(void);

/*
 * Build an endpoint on @id (address resolved, or a connection request): protection domain of
 * its device, CQ on the device's shared completion channel, RC QP, registered buffers,
 * receives posted. Returns 0 or -errno (-ENOMEM with ulimit -l too low is reported as -EDQUOT).
 */
int rsk_verbs_ep_create(struct rdma_cm_id *id, uint32_t nbuf, uint32_t buf_size,
			struct rsk_ep **out);

/* The process's rdma_cm event channel for connected ids (made and watched by the event loop
 * at first use; a forked child makes its own), or NULL. */
struct rdma_event_channel *rsk_verbs_cm_channel(void);

/* The endpoint's connected @id moves to that channel, its events bound to the endpoint
 * (id->context is the endpoint's demux token). 0 or -errno. */
int rsk_verbs_ep_attach_cm(struct rsk_ep *ep, struct rdma_cm_id *id);

/* Take a completion event the loop handed the endpoint: re-arm the CQ, unless
 * ep->quiet_ok: then leave it unarmed ("quiet", until ops->arm) and return 1. */
int rsk_verbs_cq_event(struct rsk_ep *ep);

/* Take an rdma_cm event the loop handed it: 1 when the peer disconnected (its QP is gone:
 * reset unless its FIN came). */
int rsk_verbs_cm_event(struct rsk_ep *ep);

/* The cm ops' events (transport.h): no fd of our own (-1); event 0 completions, event 1 the
 * rdma_cm channel's, bound to the owner's virtual watches and waited for without the loop. */
int rsk_verbs_event_fd(struct rsk_ep *ep, int i);
unsigned int rsk_verbs_on_event(struct rsk_ep *ep, int i);
void rsk_verbs_event_bind(struct rsk_ep *ep, int i, uint64_t w);
unsigned int rsk_verbs_event_wait(struct rsk_ep *ep, int ms);

/* Events handed to the endpoint and not taken yet (1 << RSK_VDEMUX_*; tests). */
unsigned int rsk_verbs_pending(struct rsk_ep *ep);

/* Has every posted send completed (or the QP broken)? Known after a signalled one. */
int rsk_verbs_sends_done(struct rsk_ep *ep);

/* The rdma_cm id the endpoint owns (for connect/accept). */
struct rdma_cm_id *rsk_verbs_id(struct rsk_ep *ep);

/* Fork: endpoints made by another process are not ours to use or destroy. */
int rsk_verbs_ep_foreign(struct rsk_ep *ep);

extern const struct rsk_transport_ops rsk_verbs_ops;

#endif
