/*
 * Socket address helpers for AF_INET/AF_INET6 stream sockets: lengths, ports, comparisons,
 * "is this address one of this host's", and the source address the kernel's routing would
 * choose. Shared by every transport's setup and by the socket layer.
 */
#ifndef RSK_BASE_ADDR_H
#define RSK_BASE_ADDR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

static inline socklen_t rsk_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static inline uint16_t rsk_sa_port(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)a)->sin_port);
	if (a->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
	return 0;
}

static inline void rsk_sa_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* Same family, address and port (an IPv4 and a v4-mapped IPv6 address differ). */
int rsk_addr_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* Same address and port, an IPv4 address equal to its v4-mapped IPv6 form (rdma_cm reports
 * peers of a dual-stack listener either way). */
int rsk_addr_same_v4m(const struct sockaddr *a, const struct sockaddr *b);

/* Is @addr an address of this host (loopback, or one of its interfaces)? */
int rsk_addr_is_local(const struct sockaddr *addr);

/*
 * The source address (port 0) the kernel's routing picks towards @dest, as TCP would use it.
 * 0 or -errno (-ENETUNREACH without a route).
 */
int rsk_addr_route_src(const struct sockaddr *dest, struct sockaddr_storage *src);

/* The port @fd is bound to (its local address), 0 if none or on error. */
uint16_t rsk_addr_local_port(int fd);

/* The peer's port of connected socket @fd, 0 if none or on error. */
uint16_t rsk_addr_peer_port(int fd);

/*
 * Stand-in names. A relayed connection's app end is a unix socket standing in for a TCP
 * socket (conn/relay.c). Its ends are bound to abstract unix names that carry the TCP
 * addresses, so getsockname/getpeername can answer as the kernel would for the TCP socket:
 * in this process, in a forked child, and in a program exec'd with it on stdin, which has no
 * other way to know (calls/sockopt.c). A name is unique per process (@uniq) and goes away
 * with the socket.
 */
#define RSK_ADDR_NAME_MAX 108 /* sizeof(sun_path) */

/* Bind unix socket @fd to the stand-in name of @sa (@len bytes, AF_INET or AF_INET6), its
 * unique part in *@uniq (if not NULL). 0 or -errno (-EINVAL for another family or length,
 * or a socket already bound). */
int rsk_addr_name_bind(int fd, const struct sockaddr *sa, socklen_t len, uint64_t *uniq);

/* The stand-in name of @sa with unique part @uniq, made in *@un: its length, or 0 for
 * another family or length. A name anyone can compute (a same-host bearer's rendezvous,
 * sock/bearer.c). */
socklen_t rsk_addr_name_of(struct sockaddr_un *un, const struct sockaddr *sa, socklen_t len,
			   uint64_t uniq);

/* The TCP address carried by unix address @un (@unlen bytes, as getsockname reported it):
 * its length, copied into *@out, and the name's unique part in *@uniq (if not NULL); or 0
 * when @un is not a stand-in name. */
socklen_t rsk_addr_name_parse(const struct sockaddr *un, socklen_t unlen,
			      struct sockaddr_storage *out, uint64_t *uniq);

#endif
