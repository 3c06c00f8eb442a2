/*
 * The RDMA verbs transport: the ops table of transport.h on an RC queue pair created
 * through rdma_cm (RDMA_PS_TCP), two-sided SEND with immediate into pre-posted receive
 * buffers. Receive buffers are registered with IBV_ACCESS_LOCAL_WRITE only: no remote key
 * ever leaves the process. Credits travel in immediates (no out-of-band view of the peer's
 * posted buffers exists without one), and because a verbs receive queue takes buffers in any
 * order, empty control messages give their buffer back at once (ep->repost_any).
 *
 * Wake-ups: a verbs peer cannot write into our readiness socket, so `kick` does nothing; the
 * completion channel of our CQ (always armed) is watched by the monitor thread, which
 * harvests under the connection lock and wakes what is armed (rsk_conn_remote_wake).
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
#define RSK_VERBS_VERSION 1
struct rsk_verbs_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t tcp_port; /* client: the port its TCP placeholder is bound to */
	uint32_t nbuf;
	uint32_t buf_size;
} __attribute__((packed));

/* Usable now? 0, -ENODEV (no device, or none named RDMASOCK_DEVICE), -ENOSYS (no verbs). */
int rsk_verbs_probe(void);

/*
 * Build an endpoint on @id (address resolved, or a connection request): protection domain of
 * its device, CQ and completion channel, RC QP, registered buffers, receives posted.
 * Returns 0 or -errno (-ENOMEM with ulimit -l too low is reported as -EDQUOT).
 */
int rsk_verbs_ep_create(struct rdma_cm_id *id, struct rdma_event_channel *ch, uint32_t nbuf,
			uint32_t buf_size, struct rsk_ep **out);

/* The readiness socket our own wakes go to. */
void rsk_verbs_set_self_ctl(struct rsk_ep *ep, int ctl);

/* The completion channel's fd (non-blocking), and: take its event, re-arm the CQ. */
int rsk_verbs_cq_fd(struct rsk_ep *ep);
void rsk_verbs_cq_event(struct rsk_ep *ep);

/* The endpoint owns @ch (the id's own event channel) from now on. */
void rsk_verbs_adopt_channel(struct rsk_ep *ep, struct rdma_event_channel *ch);

/*
 * The connection's own rdma_cm event channel (non-blocking), or -1; and: take its events,
 * returning 1 when the peer disconnected (its QP is gone: reset unless its FIN came).
 */
int rsk_verbs_cm_fd(struct rsk_ep *ep);
int rsk_verbs_cm_event(struct rsk_ep *ep);

/* Has every posted send completed (or the QP broken)? Known after a signalled one. */
int rsk_verbs_sends_done(struct rsk_ep *ep);

/* The rdma_cm id the endpoint owns (for connect/accept). */
struct rdma_cm_id *rsk_verbs_id(struct rsk_ep *ep);

/* Fork: endpoints made by another process are not ours to use or destroy. */
int rsk_verbs_ep_foreign(struct rsk_ep *ep);

/*
 * Client: rdma_cm connect to @dest within @timeout_ms, hello carrying @tcp_port. On success
 * *src is the local address rdma_cm chose (bind the TCP placeholder to it) and *out the
 * connected endpoint. Errors: -ENODEV, -ENETUNREACH (no route), -ECONNREFUSED (no listener,
 * rejected), -ETIMEDOUT, -EDQUOT (memlock), -ENOMEM/-EAGAIN (resources), -EPROTO.
 */
int rsk_verbs_connect(const struct sockaddr *dest, socklen_t dlen, int timeout_ms,
		      struct sockaddr_storage *src, int (*bind_tcp)(const struct sockaddr *src,
								    void *arg),
		      void *arg, struct rsk_ep **out);

/* Server: an rdma_cm listener beside the kernel one (same address and port). */
struct rsk_verbs_listener;
int rsk_verbs_listen(const struct sockaddr *addr, socklen_t len,
		     struct rsk_verbs_listener **out);
int rsk_verbs_listener_fd(struct rsk_verbs_listener *l);
/*
 * This process accepts on the listener (accept() called, or its fd added to an epoll set),
 * and: it forked with the listener open. A process that forked before it ever showed it
 * accepts (nginx' master, whose children accept) could not claim the connections, so its
 * requests are rejected: those clients continue on TCP at once (reason refused), not after
 * waiting for a hello that cannot come.
 */
void rsk_verbs_listener_interest(struct rsk_verbs_listener *l);
void rsk_verbs_listener_forked(struct rsk_verbs_listener *l);
/* Reject every request from now on (the process serves connections in forked children). */
void rsk_verbs_listener_refuse(struct rsk_verbs_listener *l);
/* Monitor thread: handle the listener's pending rdma_cm events (accept or reject requests). */
void rsk_verbs_listener_event(struct rsk_verbs_listener *l);
/*
 * Is there an accelerated connection for the client whose TCP address is @peer? Returns its
 * endpoint (now the caller's), NULL if none (a plain client), or RSK_VERBS_CLAIM_FAILED if
 * there was one we cannot use (the client is committed to it: drop the TCP connection).
 */
#define RSK_VERBS_CLAIM_FAILED ((struct rsk_ep *)(uintptr_t)8)
struct rsk_ep *rsk_verbs_listener_claim(struct rsk_verbs_listener *l,
					const struct sockaddr *peer, int wait_ms);
void rsk_verbs_listener_close(struct rsk_verbs_listener *l);

extern const struct rsk_transport_ops rsk_verbs_ops;

#endif
