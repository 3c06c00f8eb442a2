/*
 * TCP first: a connection starts as an ordinary kernel TCP connection and moves onto a
 * transport (shm, verbs) once it proves busy or long-lived, in band and byte-exact for the
 * application (docs/design.md, "TCP first"). A short connection never pays for a setup it
 * cannot earn back, and never depends on it.
 *
 * The move: the client dials the transport and offers it for its existing connection; the
 * server takes the offer at its next call on that socket, sends its first stream message,
 * and ends its TCP sending side (its FIN marks where its TCP bytes end); the client sees
 * that message, sends its own and ends its TCP side. Each side reads TCP until the peer's
 * FIN, then the stream. All return >= 0 or -errno.
 */
#ifndef RSK_CALLS_UPGRADE_H
#define RSK_CALLS_UPGRADE_H

#include <stdint.h>
#include <sys/socket.h>

#include "sock/sock.h"
#include "transport/transport.h"

/* Once, at start: the hook the transports call (offers announced). */
void rsk_upg_init(void);

/* Client: @s (at @fd) connects to @dest over TCP and may move to @cm later. */
int rsk_upg_client(struct rsk_sock *s, int fd, const struct sockaddr *dest, socklen_t len,
		   const struct rsk_cm_ops *cm);

struct rsk_listener;

/* Server: @s (at @fd), accepted from listener @lst from @peer (the address accept()
 * read already), may move when its client offers. @cl (may be NULL) is an upgrade offer
 * accept() already found for it (taken over). @unheard: rsk_upg_unheard_mark() read before
 * accept()'s claim. */
int rsk_upg_server(struct rsk_sock *s, int fd, struct rsk_listener *lst,
		   const struct sockaddr_storage *peer, struct rsk_claim *cl,
		   const struct rsk_cm_ops *cm, uint32_t unheard);

/* The count of announced offers no socket was found for (read before an accept's claim). */
uint32_t rsk_upg_unheard_mark(void);

/* Where a data-path call on an upgradable socket goes. */
struct rsk_upg_route {
	struct rsk_conn *c; /* the stream to use (RSK_UPG_STREAM) */
	int app_fd;         /* its app end: @fd once the fd moved, else the one still aside */
	int pending;        /* the app end is not at @fd yet: waits must not sleep on it */
};

#define RSK_UPG_TCP 0    /* do the kernel call on the fd itself */
#define RSK_UPG_STREAM 1 /* serve it from r->c */
#define RSK_UPG_MOVED 2  /* the fd names the stream now: the accelerated path serves it */

/* Before a call of direction @rx: do what the state allows (dial, take an offer, switch,
 * move the fd) and say where the call goes. Or -errno. */
int rsk_upg_route(struct rsk_sock *s, int fd, int rx, struct rsk_upg_route *r);

/* The lock-free part of rsk_upg_route alone: 1 when the call goes to the kernel, counted in
 * (rsk_upg_after follows), 0 when rsk_upg_route must decide. */
int rsk_upg_route_tcp(struct rsk_sock *s);

/*
 * After a kernel call on the fd returned @n: count it, and learn from a read's EOF whether it
 * was the peer's move (1: route the call again) or the real end (0: return it).
 */
int rsk_upg_after(struct rsk_sock *s, int fd, int rx, ssize_t n);

/* fork(): a move under way (its stream set up) is shared with the child, which is counted
 * as one more holder of the stream; undone if the fork failed. */
void rsk_upg_prefork(struct rsk_sock *s, int fd);
void rsk_upg_fork_failed(struct rsk_sock *s);

/* The last fd naming @s (with s->upg) closes; its real close follows. The stream of a move
 * under way ends only with its last holder. */
void rsk_upg_release(struct rsk_sock *s, int fd);

/* shutdown() on an upgradable socket: 0/-errno (the kernel's, or the stream's). */
int rsk_upg_shutdown(struct rsk_sock *s, int fd, int how);

/* The socket is used where the library cannot see its calls (stdio, a fork): it stays TCP. */
void rsk_upg_never(struct rsk_sock *s, int fd);

/* A send found the stream full while switched: if all that is left on TCP is the peer's FIN,
 * finish the move now (a program that only writes never reads it). 1 if it did. */
/* A send that rsk_upg_route sent to the stream (RSK_UPG_STREAM) is done with its app end. */
void rsk_upg_stream_done(struct rsk_sock *s);
int rsk_upg_try_finish(struct rsk_sock *s, int fd);

/*
 * Sockets of this process in the middle of a move (offered, or switched): only while there
 * are some can a wait's answer be a move's FIN (rsk_upg_settle). Relaxed reads: a hint.
 */
extern int rsk_upg_moving;

static inline int rsk_upg_any_moving(void)
{
	return __atomic_load_n(&rsk_upg_moving, __ATOMIC_RELAXED) > 0;
}

/*
 * A wait reported @fd (@s moving) readable or hung up: take the move as far as a read would
 * (the peer's FIN that is only its move ends ours), by @end_us at the latest (the wait's
 * end on rsk_now_us's clock; -1: none). What the report is worth then:
 */
#define RSK_UPG_SETTLE_KEEP 0  /* the TCP side's own: it stands */
#define RSK_UPG_SETTLE_MOVED 1 /* the fd moved: void, ask the wait again (now of the stream) */
#define RSK_UPG_SETTLE_HIDE 2  /* only the move's FIN, the move not done by @end_us: not
				* readable yet (a later wait or call goes on with it) */
int rsk_upg_settle(struct rsk_sock *s, int fd, int64_t end_us);

/* Registers who reads @s's epoll registrations that no ctl recorded, before a move of @fd
 * replays them (rsk_fw_epregs): 0 or -errno, which fails the move. */
void rsk_upg_set_epregs(int (*fn)(struct rsk_sock *s, int fd));

/* rsk_upg_settle for whatever @fd names: RSK_UPG_SETTLE_KEEP unless a moving socket. */
int rsk_upg_settle_fd(int fd, int64_t end_us);

#endif
