/*
 * Socket address helpers (see addr.h). The route lookup uses a connected UDP socket: the
 * kernel fills in the source address of the route without a packet being sent.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <string.h>

#include "addr.h"
#include "sys.h"

int rsk_addr_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const struct sockaddr_in *a4 = (const void *)a, *b4 = (const void *)b;
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;

	if (a->ss_family != b->ss_family)
		return 0;
	if (a->ss_family == AF_INET)
		return a4->sin_port == b4->sin_port && a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return a6->sin6_port == b6->sin6_port &&
	       memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
}

/* The IPv4 address and port of @a, for an IPv4 or v4-mapped IPv6 address. */
static int rsk_addr_v4(const struct sockaddr *a, uint32_t *ip, uint16_t *port)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;

	if (a->sa_family == AF_INET) {
		*ip = ((const struct sockaddr_in *)a)->sin_addr.s_addr;
		*port = ((const struct sockaddr_in *)a)->sin_port;
		return 1;
	}
	if (a->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		memcpy(ip, &s6->sin6_addr.s6_addr[12], 4);
		*port = s6->sin6_port;
		return 1;
	}
	return 0;
}

int rsk_addr_same_v4m(const struct sockaddr *a, const struct sockaddr *b)
{
	const struct sockaddr_in6 *a6 = (const void *)a, *b6 = (const void *)b;
	uint32_t ia, ib;
	uint16_t pa, pb;

	if (rsk_addr_v4(a, &ia, &pa) && rsk_addr_v4(b, &ib, &pb))
		return ia == ib && pa == pb;
	if (a->sa_family != AF_INET6 || b->sa_family != AF_INET6)
		return 0;
	return memcmp(&a6->sin6_addr, &b6->sin6_addr, 16) == 0 && a6->sin6_port == b6->sin6_port;
}

static int rsk_addr_is_loopback(const struct sockaddr *addr)
{
	const struct sockaddr_in6 *s6 = (const void *)addr;
	const struct sockaddr_in *s4 = (const void *)addr;

	if (addr->sa_family == AF_INET)
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	return addr->sa_family == AF_INET6 &&
	       (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) ||
		(IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127));
}

/* Does interface address @ia equal @addr (same family)? */
static int rsk_addr_is_if(const struct sockaddr *ia, const struct sockaddr *addr)
{
	if (ia == NULL || ia->sa_family != addr->sa_family)
		return 0;
	if (addr->sa_family == AF_INET)
		return ((const struct sockaddr_in *)ia)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)addr)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)ia)->sin6_addr,
		      &((const struct sockaddr_in6 *)addr)->sin6_addr, 16) == 0;
}

int rsk_addr_is_local(const struct sockaddr *addr)
{
	struct ifaddrs *ifa, *i;
	int local = 0;

	if (rsk_addr_is_loopback(addr))
		return 1;
	if (getifaddrs(&ifa) < 0)
		return 0;
	for (i = ifa; i != NULL && !local; i = i->ifa_next)
		local = rsk_addr_is_if(i->ifa_addr, addr);
	freeifaddrs(ifa);
	return local;
}

int rsk_addr_route_src(const struct sockaddr *dest, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);
	int fd = rsk_sys_socket(dest->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc;

	if (fd < 0)
		return fd;
	rc = rsk_sys_connect(fd, dest, rsk_sa_len(dest));
	if (rc == 0)
		rc = rsk_sys_getsockname(fd, (struct sockaddr *)src, &len);
	(void)rsk_sys_close(fd);
	if (rc < 0)
		return -ENETUNREACH;
	rsk_sa_set_port(src, 0);
	return 0;
}

uint16_t rsk_addr_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (rsk_sys_getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return rsk_sa_port((struct sockaddr *)&ss);
}

uint16_t rsk_addr_peer_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (rsk_sys_getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return rsk_sa_port((struct sockaddr *)&ss);
}
