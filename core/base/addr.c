/*
 * Socket address helpers (see addr.h). The route lookup uses a connected UDP socket: the
 * kernel fills in the source address of the route without a packet being sent. Stand-in
 * names spell the TCP address in hex after a fixed tag, so a parser can check every byte.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <stddef.h>
#include <string.h>
#include <sys/un.h>

#include "addr.h"
#include "proc.h"
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

/* ---- stand-in names (see addr.h) ---- */

#define RSK_NAME_TAG "rdmasock-tcp/1/"
#define RSK_NAME_TRIES 8 /* another socket of ours may hold a name after an exec */

static const char rsk_hex[] = "0123456789abcdef";

static int rsk_addr_unhex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* "\0" tag, hex of the address, "/", hex of @uniq: at most 1 + 15 + 56 + 1 + 16 bytes. */
static socklen_t rsk_addr_name_make(struct sockaddr_un *un, const struct sockaddr *sa,
				    socklen_t len, uint64_t uniq)
{
	const unsigned char *b = (const unsigned char *)sa;
	char *p = un->sun_path;
	socklen_t i;
	int k;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	*p++ = 0; /* abstract: no file, gone with the socket */
	memcpy(p, RSK_NAME_TAG, sizeof(RSK_NAME_TAG) - 1);
	p += sizeof(RSK_NAME_TAG) - 1;
	for (i = 0; i < len; i++) {
		*p++ = rsk_hex[b[i] >> 4];
		*p++ = rsk_hex[b[i] & 15];
	}
	*p++ = '/';
	for (k = 60; k >= 0; k -= 4)
		*p++ = rsk_hex[(uniq >> k) & 15];
	return (socklen_t)(p - (char *)un);
}

static int rsk_addr_name_ok(const struct sockaddr *sa, socklen_t len)
{
	return (sa->sa_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
	       (sa->sa_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
}

socklen_t rsk_addr_name_of(struct sockaddr_un *un, const struct sockaddr *sa, socklen_t len,
			   uint64_t uniq)
{
	return rsk_addr_name_ok(sa, len) ? rsk_addr_name_make(un, sa, len, uniq) : 0;
}

int rsk_addr_name_bind(int fd, const struct sockaddr *sa, socklen_t len, uint64_t *out)
{
	static uint32_t seq;
	struct sockaddr_un un;
	uint64_t uniq;
	int i, rc = -EADDRINUSE;

	if (!rsk_addr_name_ok(sa, len))
		return -EINVAL;
	for (i = 0; i < RSK_NAME_TRIES && rc == -EADDRINUSE; i++) {
		uniq = (uint64_t)(uint32_t)rsk_proc_pid() << 32 | __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
		rc = rsk_sys_bind(fd, (struct sockaddr *)&un, rsk_addr_name_make(&un, sa, len, uniq));
	}
	if (rc == 0 && out != NULL)
		*out = uniq;
	return rc;
}

/* The hex number in [@p, @end): exactly 16 digits. */
static int rsk_addr_name_uniq(const char *p, const char *end, uint64_t *uniq)
{
	uint64_t u = 0;
	int d;

	if (end - p != 16)
		return -1;
	for (; p < end; p++) {
		if ((d = rsk_addr_unhex(*p)) < 0)
			return -1;
		u = u << 4 | (uint64_t)d;
	}
	if (uniq != NULL)
		*uniq = u;
	return 0;
}

socklen_t rsk_addr_name_parse(const struct sockaddr *un, socklen_t unlen,
			      struct sockaddr_storage *out, uint64_t *uniq)
{
	const char *p = ((const struct sockaddr_un *)un)->sun_path;
	const char *end = (const char *)un + unlen;
	unsigned char *b = (unsigned char *)out;
	socklen_t n = 0;
	int hi, lo;

	if (unlen < offsetof(struct sockaddr_un, sun_path) + sizeof(RSK_NAME_TAG) ||
	    unlen > sizeof(struct sockaddr_un) || un->sa_family != AF_UNIX || p[0] != 0 ||
	    memcmp(p + 1, RSK_NAME_TAG, sizeof(RSK_NAME_TAG) - 1) != 0)
		return 0;
	memset(out, 0, sizeof(*out));
	for (p += sizeof(RSK_NAME_TAG); p + 1 < end && *p != '/'; p += 2) {
		hi = rsk_addr_unhex(p[0]);
		lo = rsk_addr_unhex(p[1]);
		if (hi < 0 || lo < 0 || n >= sizeof(*out))
			return 0;
		b[n++] = (unsigned char)(hi << 4 | lo);
	}
	if (p >= end || *p != '/' || n < sizeof(sa_family_t) ||
	    !rsk_addr_name_ok((const struct sockaddr *)out, n) ||
	    rsk_addr_name_uniq(p + 1, end, uniq) < 0)
		return 0;
	return n;
}
