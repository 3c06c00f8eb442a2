/*
 * Connection setup of the verbs transport (rdma_cm in RDMA_PS_TCP, verbs_cm.c): the client's
 * QP connect with its hello, the server's rdma_cm listener beside the kernel one, and the
 * claim of an accepted QP by the client's TCP address. rsk_verbs_cm_ops is its table.
 */
#ifndef RSK_TRANSPORT_VERBS_CM_H
#define RSK_TRANSPORT_VERBS_CM_H

#include <stdint.h>
#include <sys/socket.h>

#include "transport.h"

/*
 * Client: rdma_cm connect to @dest within @timeout_ms, hello carrying the port @bind_tcp
 * binds the TCP placeholder to (it gets the local address rdma_cm chose and returns the
 * port or -errno). On success *src is that address and *out the connected endpoint.
 * Errors: -ENODEV, -ENETUNREACH (no route), -ECONNREFUSED (no listener, rejected),
 * -ETIMEDOUT, -EDQUOT (memlock), -ENOMEM/-EAGAIN (resources), -EPROTO.
 */
int rsk_verbs_connect(const struct sockaddr *dest, socklen_t dlen, int timeout_ms,
		      unsigned int hello_flags, struct sockaddr_storage *src,
		      int (*bind_tcp)(const struct sockaddr *src, void *arg), void *arg,
		      struct rsk_ep **out);

/*
 * Read a hello (the client's, or the server's reply) from @len bytes of rdma_cm private data
 * at @data into @h, in host order: 0, -EPROTONOSUPPORT when its frozen start (struct
 * rsk_verbs_hdr) is another version's, or -EPROTO when it is not ours or asks for a geometry
 * the engine does not run with. Needs no device (the fuzz target test/fuzz/fuzz_hello.c).
 */
struct rsk_verbs_hello;
int rsk_hello_parse(const void *data, uint8_t len, struct rsk_verbs_hello *h);

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
/* Reject requests while @on (the process is short of fds). */
void rsk_verbs_listener_pause(struct rsk_verbs_listener *l, int on);
/* Event loop: handle the listener's pending rdma_cm events (accept or reject requests). */
void rsk_verbs_listener_event(struct rsk_verbs_listener *l);
/*
 * Is there an accelerated connection for the client whose TCP address is @peer? Returns its
 * endpoint (now the caller's), NULL if none (a plain client), or RSK_VERBS_CLAIM_FAILED if
 * there was one we cannot use (its QP is gone: the client stays on TCP). *@upgrade: the
 * client asked for an upgrade of its existing TCP connection.
 */
#define RSK_VERBS_CLAIM_FAILED ((struct rsk_ep *)(uintptr_t)8)
struct rsk_ep *rsk_verbs_listener_claim(struct rsk_verbs_listener *l,
					const struct sockaddr *peer, int wait_ms, int *upgrade);
void rsk_verbs_listener_close(struct rsk_verbs_listener *l);

extern const struct rsk_cm_ops rsk_verbs_cm_ops;

#endif
