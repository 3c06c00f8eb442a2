/*
 * Socket options, addresses and ioctls of accelerated sockets (sockopt.c): answered from
 * what the connection kept, checked the way the kernel checks them. All return >= 0 or -errno.
 */
#ifndef RSK_CALLS_SOCKOPT_H
#define RSK_CALLS_SOCKOPT_H

#include <sys/socket.h>

int rsk_opt_get(int fd, int level, int name, void *val, socklen_t *len);
int rsk_opt_set(int fd, int level, int name, const void *val, socklen_t len);
/* The options kernel TCP socket @tcp_fd (of @family) was given, made @c's own: its engine
 * honours them and getsockopt reads them back (set before connect, on the listener, before a
 * move). */
struct rsk_conn;
void rsk_opt_adopt_kernel(struct rsk_conn *c, int family, int tcp_fd);
int rsk_opt_sockname(int fd, struct sockaddr *addr, socklen_t *len);
int rsk_opt_peername(int fd, struct sockaddr *addr, socklen_t *len);

/* The same calls on an fd that is not accelerated: the kernel's answer, except on a relay's
 * stand-in unix socket (conn/relay.c), which answers as its TCP socket: names, SO_DOMAIN,
 * SO_PROTOCOL, and TCP/IP options (accepted as TCP would, read as TCP's defaults). */
int rsk_opt_plain_name(int fd, struct sockaddr *addr, socklen_t *len, int peer);
/* A connect() on untracked @fd failed with @err: the error the kernel gives a TCP socket
 * when @fd stands in for one (a bearer's or a relay's, already connected: EISCONN where a
 * unix socket says EINVAL for the TCP address); @err otherwise. */
int rsk_opt_plain_connect_err(int fd, int err);
/* Does @fd's own name make it a stand-in (a bearer connection's unix socket)? For a send with
 * an address that the kernel refused with EISCONN: a connected TCP socket ignores it. */
int rsk_opt_plain_is_standin(int fd);
/* Options @o, set on a new socket whose number @fd now names our own stand-in (a bearer's
 * unix socket, just connected): set again on it, the TCP and IP ones in the stand-in's
 * table (one getsockname for all). */
struct rsk_sock_newopts;
void rsk_opt_standin_adopt(int fd, const struct rsk_sock_newopts *o);
/* Stand-in @fd (a bearer's accepted socket) takes what TCP listener @lfd gives its
 * connections: the carried options that differ from the default. (SO_LINGER {1, 0} reads
 * back, but a unix socket's close never resets.) */
void rsk_opt_standin_inherit(int fd, int lfd);
/* Stand-in @fd takes TCP listener @lfd's TCP_NODELAY (where not known: set while listening). */
void rsk_opt_standin_nodelay(int fd, int lfd);
int rsk_opt_plain_get(int fd, int level, int name, void *val, socklen_t *len);
int rsk_opt_plain_set(int fd, int level, int name, const void *val, socklen_t len);

/* FIONREAD/SIOCINQ, SIOCOUTQ(NSD), SIOCATMARK, FIONBIO here; generic socket requests as an
 * unconnected TCP socket of the family answers them. */
int rsk_opt_ioctl(int fd, unsigned long req, unsigned long arg);

#endif
