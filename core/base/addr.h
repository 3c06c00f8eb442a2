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

#endif
