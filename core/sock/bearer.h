/*
 * A same-host bearer for short connections (RDMASOCK_BEARER=unix; docs/design.md, "A
 * same-host bearer"). A listener with a face (face.h) also listens on a unix stream socket,
 * its rendezvous, bound to the stand-in name of its TCP address (base/addr.h) and held in
 * the face's epoll set, so every wait on the listener's number wakes for its clients too. A
 * client of such a listener connects a unix socket, bound to a stand-in name of its own,
 * to that rendezvous instead of making a TCP connection, and dup3()s it onto its number.
 * Both ends then carry stand-in names, so names and TCP options answer as for TCP
 * (calls/sockopt.c), and the data path is the kernel's own unix socket: the library tracks
 * neither end. The kernel makes a unix connection more cheaply than a TCP one (no handshake,
 * no port search, no TIME_WAIT).
 */
#ifndef RSK_BEARER_H
#define RSK_BEARER_H

#include <sys/socket.h>
#include <sys/un.h>

#include "sock.h"

/* Bearer connections may be made (configured: unix, or auto where calls/connect.c says). */
int rsk_bearer_allowed(void);

/*
 * Can a bearer connection carry option @level/@name, set on its socket before the connect?
 * The socket options a unix socket keeps as a TCP socket does (SO_KEEPALIVE, buffer sizes,
 * timeouts, SO_REUSEADDR, SO_PRIORITY, SO_RCVLOWAT), set again on it; and the TCP and IP
 * levels, which the stand-in keeps and reads back (calls/sockopt.c). Not SO_LINGER (a unix
 * socket's close never resets its peer) nor any other.
 */
int rsk_bearer_carries(int level, int name);

/* The name of the rendezvous a client of TCP address @sa looks for (this process's user):
 * its length in *@un, 0 for another family. */
socklen_t rsk_bearer_name(const struct sockaddr *sa, struct sockaddr_un *un);

/*
 * Listener @s, whose number @fd names its face, gets its rendezvous (the caller holds
 * s->lock). 0, or -errno: it has none (another listener holds the name, say) and takes TCP
 * clients only.
 */
int rsk_bearer_listen(struct rsk_sock *s, int fd);

/*
 * Take a bearer client queued at listener @s's rendezvous: its socket (accept4's @flags),
 * with its TCP address in @addr as accept() reports it; -EAGAIN when none is queued. A
 * blocking accept (@set: the face's number it was called on; -1 for one that does not
 * block) that finds none shuts the rendezvous for good first and takes it out of the face's
 * set: such an accept then waits in the TCP listener's accept, where a bearer client would
 * never be seen (it takes one that came meanwhile instead).
 */
int rsk_bearer_accept(struct rsk_sock *s, int set, struct sockaddr *addr, socklen_t *len,
		      int flags);

/* No new clients at @s's rendezvous (its face is gone for good: io_uring, a spawn handed
 * the listener). Queued ones are still taken by accept. */
void rsk_bearer_shut(struct rsk_sock *s);

/* The first of @s's epoll registrations from index @i on that holds its listeners
 * themselves (direct: sock/face.c, EPOLLEXCLUSIVE), or -1. Safe without s->lock. */
int rsk_bearer_direct_next(const struct rsk_sock *s, int i);

/* Is @uniq the unique part of a rendezvous's name (every accepted bearer socket's own)? Such
 * a socket is told apart from its siblings by its client's name. */
int rsk_bearer_rdv_uniq(uint64_t uniq);

/* The rendezvous goes with the listener's last number (sock.c). */
void rsk_bearer_close(struct rsk_sock *s);

/*
 * Client: connect socket @fd to @dest (@len bytes) through a listener's rendezvous, if one
 * of this user's listens there: @fd's number then names the unix connection, with its file
 * flags and close-on-exec kept (@fl and @fdfl: its F_GETFL and F_GETFD, or -errno). 0 (1:
 * the socket is non-blocking), or -errno with nothing changed (no rendezvous, a full
 * backlog, another user's listener): the caller connects over TCP.
 */
int rsk_bearer_connect(int fd, const struct sockaddr *dest, socklen_t len, int fl, int fdfl);

#endif
