/*
 * Same-host transport: one memfd per connection holds both directions' descriptor rings
 * and buffer slots, laid out so that it behaves like an RC queue pair (see transport.h).
 * Either process may write garbage into it; every index and length read from it is
 * validated and a violation fails only this connection (-EPROTO).
 */
#ifndef RSK_SHM_H
#define RSK_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define RSK_SHM_MAGIC 0x4b53524du /* "MRSK" */
#ifndef RSK_TEST_PROTO_NEXT /* a test build's next version (shm_rdv.h) */
#define RSK_SHM_VERSION 4u
#else
#define RSK_SHM_VERSION 5u
#endif
#define RSK_SHM_MAX_NBUF 1024u
#define RSK_SHM_MAX_BUF (4u << 20)

enum rsk_shm_side {
	RSK_SHM_CLIENT = 0,
	RSK_SHM_SERVER = 1,
};

/* Size of the memfd for @nbuf buffers of @buf_size bytes per direction (0 if invalid). */
size_t rsk_shm_size(uint32_t nbuf, uint32_t buf_size);

/*
 * Create a connection's memfd, initialised with every receive buffer of both sides posted
 * (each side starts with @nbuf credits). Returns the fd (close-on-exec) or -errno.
 */
int rsk_shm_create(uint32_t nbuf, uint32_t buf_size);

/*
 * A client's memfd (as rsk_shm_create) and its endpoint (as rsk_shm_open of it) at once, on
 * one mapping: the file is ours, so nothing needs checking. Returns the fd or -errno.
 */
int rsk_shm_create_open(uint32_t nbuf, uint32_t buf_size, void *mem, struct rsk_ep **out);
/* The same for an fd that is only sent (the offer): a reused segment's is the fd the endpoint
 * keeps (rsk_shm_fd_kept), lent rather than copied, which the caller must not close; any
 * other is the caller's to close. */
int rsk_shm_create_lend(uint32_t nbuf, uint32_t buf_size, void *mem, struct rsk_ep **out);

/*
 * Segments kept for reuse after their connection ended (rsk_shm_create_open takes them once
 * the old peer let go; at most 4 memfds kept per process). For tests and stats.
 */
int rsk_shm_pool_count(void);
/* Server: mappings of ended connections' segments kept for their next use (at most 4). */
int rsk_shm_mapcache_count(void);
/* Does endpoint @ep keep a copy of its memfd for the pool (one hidden fd)? 1 or 0. */
int rsk_shm_keeps_memfd(struct rsk_ep *ep);
/* Is @fd the memfd endpoint @ep keeps (not the caller's to close)? 1 or 0. */
int rsk_shm_fd_kept(struct rsk_ep *ep, int fd);
/* A forked child: drop the inherited pool (the parent hands those segments out). */
void rsk_shm_atfork_child(void);

/* Bytes an endpoint needs when the caller provides its memory (rsk_shm_open's @mem). */
size_t rsk_shm_ep_size(void);

/*
 * Map memfd @fd as @side and build the endpoint in @mem (rsk_shm_ep_size() zeroed bytes,
 * e.g. inside memory shared across fork) or, with @mem NULL, in memory of its own. The
 * header is validated against the file size, its seals and the limits above: a malformed
 * file gives -EPROTO. @peer_ctl is the ctl end of the peer's readiness pair, which makes
 * us its waker (-1 for a client: the server's answer brings it, see rsk_shm_set_answer).
 * Returns 0 or -errno.
 */
int rsk_shm_open(int fd, enum rsk_shm_side side, int peer_ctl, void *mem, struct rsk_ep **out);

/* Provide the peer's kick fd once it is known (the endpoint owns it from then on). */
void rsk_shm_set_peer_ctl(struct rsk_ep *ep, int peer_ctl);

/* The peer's kick fd, or -1. */
int rsk_shm_peer_ctl(struct rsk_ep *ep);

/* cm->ep_fds: the fds the endpoint holds (the peer's readiness end, a pending answer). */
int rsk_shm_ep_fds(struct rsk_ep *ep, int *out, int max);

/* Is a kick fd known? (A client learns the server's only when the server accepted.) */
int rsk_shm_has_peer_ctl(struct rsk_ep *ep);

/*
 * Client: the server's answer (accept with its ctl end, or decline) will come on @fd, which
 * the endpoint owns from now on; @read_answer reads it (the ctl end, -EAGAIN: not yet, or
 * another -errno) when the endpoint first needs it, which is when a wake is owed.
 */
void rsk_shm_set_answer(struct rsk_ep *ep, int fd, int (*read_answer)(int fd, int wait_ms));
/* That fd while its answer is unread, else -1. */
int rsk_shm_answer_fd(struct rsk_ep *ep);

/* Connection-management hooks of the endpoint (rsk_shm_cm_ops, shm_cm.c): */
/* Before a fork: a child must be able to wake the peer, so learn its fd now if we can. */
void rsk_shm_prefork(struct rsk_ep *ep, int app_fd);
/* We showed our initial readiness: the peer may now send us extra arrival edges. */
void rsk_shm_attached(struct rsk_ep *ep);
/* Did the peer announce an orderly end (FIN posted, or closed) before its process died? */
int rsk_shm_peer_ended(struct rsk_ep *ep);
/* The peer's process went without an orderly end: post what it had staged, and say (1)
 * whether data of ours was left unread there (cm->peer_died). */
int rsk_shm_peer_died(struct rsk_ep *ep);
/* We posted our FIN: a later peer-death check then means "closed", not "crashed". */
void rsk_shm_fin_sent(struct rsk_ep *ep);

/* For tests: the raw shared words, so hostile peers can be simulated. */
struct rsk_shm_debug {
	volatile uint32_t *rx_filled, *rx_posted, *tx_filled, *tx_posted;
	volatile uint32_t *rx_desc_len; /* desc[0].len of our rx ring */
	volatile uint32_t *hdr_nbuf;
};
void rsk_shm_debug(struct rsk_ep *ep, struct rsk_shm_debug *d);

extern const struct rsk_transport_ops rsk_shm_ops;

#endif
