/*
 * Unit tests for core/base/addr (sockaddr helpers): lengths and ports in network byte order,
 * exact comparison against the v4-mapped-aware one (rdma_cm reports dual-stack peers either
 * way, and offers are claimed by address), "is this address one of this host's" (loopback,
 * v4-mapped loopback, interface addresses, a documentation address that is not ours), the
 * routing source address, the ports of real loopback sockets, and stand-in names (a relay's
 * unix socket named after its TCP addresses: round trip, and every malformed name refused).
 */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/addr.h"
#include "base/compiler.h"

/* @text as a sockaddr with @port: IPv6 when it has a colon, else IPv4. */
static struct sockaddr_storage sa(const char *text, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(text, ':') != NULL) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port); /* not rsk_sa_set_port: that is under test */
		assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
	} else {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
	}
	return ss;
}

#define SA(ss) ((struct sockaddr *)&(ss))

/* ---- lengths and ports ---- */

static void test_len_and_ports(void **state)
{
	struct sockaddr_storage a = sa("10.1.2.3", 80), b = sa("2001:db8::1", 443), u;

	(void)state;
	assert_int_equal(rsk_sa_len(SA(a)), sizeof(struct sockaddr_in));
	assert_int_equal(rsk_sa_len(SA(b)), sizeof(struct sockaddr_in6));
	assert_int_equal(rsk_sa_port(SA(a)), 80);
	assert_int_equal(rsk_sa_port(SA(b)), 443);

	/* set_port writes network byte order where the kernel reads it. */
	rsk_sa_set_port(&a, 0x1234);
	rsk_sa_set_port(&b, 0xfe01);
	assert_int_equal(((struct sockaddr_in *)&a)->sin_port, htons(0x1234));
	assert_int_equal(((struct sockaddr_in6 *)&b)->sin6_port, htons(0xfe01));
	assert_int_equal(rsk_sa_port(SA(a)), 0x1234);
	assert_int_equal(rsk_sa_port(SA(b)), 0xfe01);
	/* ... and nothing else: the addresses are untouched. */
	assert_int_equal(((struct sockaddr_in *)&a)->sin_addr.s_addr, htonl(0x0a010203));
	assert_int_equal(((struct sockaddr_in6 *)&b)->sin6_addr.s6_addr[15], 1);
	rsk_sa_set_port(&a, 0);
	assert_int_equal(rsk_sa_port(SA(a)), 0);

	/* A family without ports has port 0. */
	memset(&u, 0, sizeof(u));
	u.ss_family = AF_UNIX;
	assert_int_equal(rsk_sa_port(SA(u)), 0);
}

/* ---- comparisons ---- */

static void test_addr_same(void **state)
{
	struct sockaddr_storage a = sa("127.0.0.1", 5000), b = sa("127.0.0.1", 5000);
	struct sockaddr_storage a6 = sa("2001:db8::7", 5000), b6 = sa("2001:db8::7", 5000);
	struct sockaddr_storage m = sa("::ffff:127.0.0.1", 5000);

	(void)state;
	assert_true(rsk_addr_same(&a, &b));
	assert_true(rsk_addr_same(&a6, &b6));
	/* Only family, address and port count: padding and flow label do not. */
	memset(((struct sockaddr_in *)&b)->sin_zero, 0xa5, 8);
	((struct sockaddr_in6 *)&b6)->sin6_flowinfo = htonl(0x12345);
	assert_true(rsk_addr_same(&a, &b));
	assert_true(rsk_addr_same(&a6, &b6));

	b = sa("127.0.0.1", 5001);
	assert_false(rsk_addr_same(&a, &b)); /* port */
	b = sa("127.0.0.2", 5000);
	assert_false(rsk_addr_same(&a, &b)); /* address */
	b6 = sa("2001:db8::7", 5001);
	assert_false(rsk_addr_same(&a6, &b6));
	b6 = sa("2001:db8::8", 5000);
	assert_false(rsk_addr_same(&a6, &b6));
	b6 = sa("3001:db8::7", 5000); /* differs in the first byte only */
	assert_false(rsk_addr_same(&a6, &b6));
	/* An IPv4 address and its v4-mapped form are different sockaddrs, also the wildcards
	 * (whose bytes an IPv4 reading of the IPv6 sockaddr would find equal). */
	assert_false(rsk_addr_same(&a, &m));
	assert_false(rsk_addr_same(&m, &a));
	a = sa("0.0.0.0", 5000);
	m = sa("::ffff:0.0.0.0", 5000);
	assert_false(rsk_addr_same(&a, &m));
	m = sa("::", 5000);
	assert_false(rsk_addr_same(&a, &m));
}

static void test_addr_same_v4m(void **state)
{
	struct sockaddr_storage a = sa("192.0.2.9", 7000), m = sa("::ffff:192.0.2.9", 7000);
	struct sockaddr_storage x, a6 = sa("2001:db8::9", 7000), b6 = sa("2001:db8::9", 7000);

	(void)state;
	assert_true(rsk_addr_same_v4m(SA(a), SA(m)));
	assert_true(rsk_addr_same_v4m(SA(m), SA(a)));
	assert_true(rsk_addr_same_v4m(SA(a), SA(a)));
	assert_true(rsk_addr_same_v4m(SA(m), SA(m)));
	x = sa("::ffff:192.0.2.9", 7001);
	assert_false(rsk_addr_same_v4m(SA(a), SA(x))); /* port */
	x = sa("::ffff:192.0.2.10", 7000);
	assert_false(rsk_addr_same_v4m(SA(a), SA(x))); /* address */
	x = sa("192.0.2.9", 7001);
	assert_false(rsk_addr_same_v4m(SA(a), SA(x)));
	/* Not mapped: the same low 32 bits in an ordinary IPv6 address are another host. */
	x = sa("::c000:209", 7000);
	assert_false(rsk_addr_same_v4m(SA(a), SA(x)));
	x = sa("2001:db8::c000:209", 7000);
	assert_false(rsk_addr_same_v4m(SA(a), SA(x)));
	/* Plain IPv6 compares address and port. */
	assert_true(rsk_addr_same_v4m(SA(a6), SA(b6)));
	b6 = sa("2001:db8::9", 7001);
	assert_false(rsk_addr_same_v4m(SA(a6), SA(b6)));
	b6 = sa("2001:db8::a", 7000);
	assert_false(rsk_addr_same_v4m(SA(a6), SA(b6)));
	assert_false(rsk_addr_same_v4m(SA(a6), SA(a)));
}

/* ---- is it ours ---- */

/* The first address of @family on an interface that is not loopback, or 0 if none. */
static int find_if_addr(int family, struct sockaddr_storage *out)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa) < 0)
		return 0;
	for (i = ifa; i != NULL && !found; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family ||
		    (i->ifa_flags & IFF_LOOPBACK))
			continue;
		memset(out, 0, sizeof(*out));
		memcpy(out, i->ifa_addr, family == AF_INET ? sizeof(struct sockaddr_in)
							   : sizeof(struct sockaddr_in6));
		found = 1;
	}
	freeifaddrs(ifa);
	return found;
}

/* Is @ss (same family) the address of some interface? Independent of the code under test. */
static int on_an_interface(const struct sockaddr_storage *ss)
{
	struct ifaddrs *ifa, *i;
	int found = 0;

	if (getifaddrs(&ifa) < 0)
		return 0;
	for (i = ifa; i != NULL; i = i->ifa_next)
		if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
			    ((const struct sockaddr_in *)ss)->sin_addr.s_addr)
			found = 1;
	freeifaddrs(ifa);
	return found;
}

static void test_is_local_loopback(void **state)
{
	static const char *const local4[] = {"127.0.0.1", "127.0.0.2", "127.255.255.254",
					     "127.1.2.3"};
	static const char *const local6[] = {"::1", "::ffff:127.0.0.1", "::ffff:127.9.8.7"};
	struct sockaddr_storage ss;
	unsigned int i;

	(void)state;
	for (i = 0; i < RSK_ARRAY_SIZE(local4); i++) {
		ss = sa(local4[i], 0);
		assert_true(rsk_addr_is_local(SA(ss)));
	}
	for (i = 0; i < RSK_ARRAY_SIZE(local6); i++) {
		ss = sa(local6[i], 0);
		assert_true(rsk_addr_is_local(SA(ss)));
	}
	/* Neighbours of 127/8 and ::1 are not loopback. */
	ss = sa("128.0.0.1", 0);
	assert_false(rsk_addr_is_local(SA(ss)));
	ss = sa("126.255.255.255", 0);
	assert_false(rsk_addr_is_local(SA(ss)));
	ss = sa("::2", 0);
	assert_false(rsk_addr_is_local(SA(ss)));
	ss = sa("::ffff:128.0.0.1", 0);
	assert_false(rsk_addr_is_local(SA(ss)));
	ss = sa("::7f00:1", 0); /* 127.0.0.1's bits, not mapped */
	assert_false(rsk_addr_is_local(SA(ss)));
}

static void test_is_local_interfaces(void **state)
{
	static const char *const doc[] = {"192.0.2.1", "198.51.100.1", "203.0.113.1"};
	struct sockaddr_storage ss;
	unsigned int i;
	int have4, have6;

	(void)state;
	have4 = find_if_addr(AF_INET, &ss);
	if (have4) {
		assert_true(rsk_addr_is_local(SA(ss)));
		rsk_sa_set_port(&ss, 8080); /* the port plays no part */
		assert_true(rsk_addr_is_local(SA(ss)));
	}
	have6 = find_if_addr(AF_INET6, &ss);
	if (have6) {
		assert_true(rsk_addr_is_local(SA(ss)));
	}
	if (!have4 && !have6)
		print_message("no non-loopback interface address: only the negative case runs\n");
	/* A documentation address that this host does not have (this one's eth0 may hold one of
	 * the TEST-NETs: pick one it does not). */
	for (i = 0; i < RSK_ARRAY_SIZE(doc); i++) {
		ss = sa(doc[i], 0);
		if (!on_an_interface(&ss))
			break;
	}
	assert_true(i < RSK_ARRAY_SIZE(doc));
	assert_false(rsk_addr_is_local(SA(ss)));
	ss = sa("2001:db8::dead:beef", 0);
	assert_false(rsk_addr_is_local(SA(ss)));
}

/* ---- routing ---- */

static int have_ipv6_loopback(void)
{
	struct sockaddr_storage ss = sa("::1", 0);
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	ok = bind(fd, SA(ss), sizeof(struct sockaddr_in6)) == 0;
	close(fd);
	return ok;
}

static void test_route_src_v4(void **state)
{
	struct sockaddr_storage dst = sa("127.0.0.1", 9999), src, want = sa("127.0.0.1", 0), ifa;

	(void)state;
	memset(&src, 0xa5, sizeof(src));
	assert_int_equal(rsk_addr_route_src(SA(dst), &src), 0);
	assert_int_equal(src.ss_family, AF_INET);
	/* Port 0 (the lookup's own UDP socket got an ephemeral one: it is not ours to report). */
	assert_int_equal(rsk_sa_port(SA(src)), 0);
	assert_true(rsk_addr_same(&src, &want));
	/* Towards another loopback address the source is that address's route (127/8 is lo). */
	dst = sa("127.0.0.5", 1);
	assert_int_equal(rsk_addr_route_src(SA(dst), &src), 0);
	assert_true(rsk_addr_is_local(SA(src)));
	assert_int_equal(rsk_sa_port(SA(src)), 0);
	/* Towards an interface address of ours, the source is that address. */
	if (find_if_addr(AF_INET, &ifa)) {
		rsk_sa_set_port(&ifa, 7);
		assert_int_equal(rsk_addr_route_src(SA(ifa), &src), 0);
		rsk_sa_set_port(&ifa, 0);
		assert_true(rsk_addr_same(&src, &ifa));
	}
}

static void test_route_src_v6(void **state)
{
	struct sockaddr_storage dst = sa("::1", 9999), src, want = sa("::1", 0);

	(void)state;
	if (!have_ipv6_loopback())
		skip(); /* no ::1 in this network namespace */
	memset(&src, 0xa5, sizeof(src));
	assert_int_equal(rsk_addr_route_src(SA(dst), &src), 0);
	assert_int_equal(src.ss_family, AF_INET6);
	assert_int_equal(rsk_sa_port(SA(src)), 0);
	assert_true(rsk_addr_same(&src, &want));
}

/* ---- ports of real sockets ---- */

static void test_local_and_peer_ports(void **state)
{
	struct sockaddr_storage any = sa("127.0.0.1", 0), got;
	socklen_t len = sizeof(got);
	uint16_t lport, cport;
	int l, c, s, u;

	(void)state;
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l >= 0);
	assert_int_equal(bind(l, SA(any), sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(l, 1), 0);
	lport = rsk_addr_local_port(l);
	assert_true(lport != 0);
	assert_int_equal(getsockname(l, SA(got), &len), 0);
	assert_int_equal(lport, ntohs(((struct sockaddr_in *)&got)->sin_port));
	assert_int_equal(rsk_addr_peer_port(l), 0); /* a listener has no peer */

	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c >= 0);
	assert_int_equal(rsk_addr_local_port(c), 0); /* unbound */
	assert_int_equal(rsk_addr_peer_port(c), 0);  /* unconnected */
	rsk_sa_set_port(&any, lport);
	assert_int_equal(connect(c, SA(any), sizeof(struct sockaddr_in)), 0);
	s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(s >= 0);
	cport = rsk_addr_local_port(c);
	assert_true(cport != 0 && cport != lport);
	assert_int_equal(rsk_addr_peer_port(c), lport);
	assert_int_equal(rsk_addr_local_port(s), lport);
	assert_int_equal(rsk_addr_peer_port(s), cport);

	/* Not an inet socket, or not a socket at all: 0. */
	u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(u >= 0);
	assert_int_equal(rsk_addr_local_port(u), 0);
	assert_int_equal(rsk_addr_local_port(-1), 0);
	assert_int_equal(rsk_addr_peer_port(-1), 0);
	close(u);
	close(s);
	close(c);
	close(l);
	assert_int_equal(rsk_addr_local_port(c), 0); /* closed */
}

/* Stand-in names: bound to a unix socket, read back by getsockname and parsed to the same
 * TCP address, for both families; two sockets of one address get distinct names. */
static void test_name_roundtrip(void **state)
{
	const char *text[] = {"127.0.0.1", "::1", "fe80::1"};
	struct sockaddr_storage a, got, un;
	socklen_t n, len;
	uint64_t u1 = 0, u2 = 0;
	int i, sv[2];

	(void)state;
	for (i = 0; i < 3; i++) {
		a = sa(text[i], (uint16_t)(1000 + i));
		if (a.ss_family == AF_INET6)
			((struct sockaddr_in6 *)&a)->sin6_scope_id = 7;
		len = rsk_sa_len((struct sockaddr *)&a);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		assert_int_equal(rsk_addr_name_bind(sv[0], (struct sockaddr *)&a, len, NULL), 0);
		assert_int_equal(rsk_addr_name_bind(sv[1], (struct sockaddr *)&a, len, NULL), 0);
		/* bound already: the kernel's EINVAL */
		assert_int_equal(rsk_addr_name_bind(sv[1], (struct sockaddr *)&a, len, NULL), -EINVAL);
		n = sizeof(un);
		assert_int_equal(getsockname(sv[0], (struct sockaddr *)&un, &n), 0);
		assert_int_equal(rsk_addr_name_parse((struct sockaddr *)&un, n, &got, &u1), len);
		assert_memory_equal(&got, &a, len);
		n = sizeof(un);
		assert_int_equal(getpeername(sv[0], (struct sockaddr *)&un, &n), 0);
		assert_int_equal(rsk_addr_name_parse((struct sockaddr *)&un, n, &got, &u2), len);
		assert_memory_equal(&got, &a, len);
		assert_true(u1 != u2);
		close(sv[0]);
		close(sv[1]);
	}
	/* only TCP addresses have stand-ins */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	n = sizeof(un);
	assert_int_equal(getsockname(sv[0], (struct sockaddr *)&un, &n), 0);
	assert_int_equal(rsk_addr_name_bind(sv[0], (struct sockaddr *)&un, n, NULL), -EINVAL);
	a = sa("127.0.0.1", 1);
	assert_int_equal(rsk_addr_name_bind(sv[0], (struct sockaddr *)&a, 8, NULL), -EINVAL);
	close(sv[0]);
	close(sv[1]);
}

/* Parse @name (abstract: @name[0] is the NUL) of @n bytes; what it returns. */
static socklen_t parse_text(const char *name, size_t n)
{
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	struct sockaddr_storage out;

	assert_true(n <= sizeof(un.sun_path));
	memcpy(un.sun_path, name, n);
	return rsk_addr_name_parse((struct sockaddr *)&un,
				   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n), &out,
				   NULL);
}

#define V4HEX "02000064" "7f000001" "0000000000000000" /* 127.0.0.1:100, sin_zero */
#define UNIQ "0000000100000002"

/* A name that is not exactly ours is no stand-in (a hostile or foreign abstract name). */
static void test_name_parse_rejects(void **state)
{
	static const char good[] = "\0rdmasock-tcp/1/" V4HEX "/" UNIQ;
	struct sockaddr_storage out;
	struct sockaddr_in in;

	(void)state;
	assert_int_equal(parse_text(good, sizeof(good) - 1), sizeof(struct sockaddr_in));
	assert_int_equal(parse_text("\0rdmasock-tcp/2/" V4HEX "/" UNIQ, sizeof(good) - 1), 0);
	assert_int_equal(parse_text("rdmasock-tcp/1/" V4HEX "/" UNIQ "x", sizeof(good) - 1), 0);
	assert_int_equal(parse_text("\0rdmasock-tcp/1/" V4HEX "/" UNIQ, sizeof(good) - 2), 0);
	assert_int_equal(parse_text("\0rdmasock-tcp/1/" V4HEX, sizeof(good) - 18), 0);
	assert_int_equal(parse_text("\0rdmasock-tcp/1/0200006" "7f000001" "0000000000000000/" UNIQ,
				    sizeof(good) - 2), 0); /* odd digits */
	assert_int_equal(parse_text("\0rdmasock-tcp/1/02000064" "7f0000g1" "0000000000000000/" UNIQ,
				    sizeof(good) - 1), 0); /* not hex */
	assert_int_equal(parse_text("\0rdmasock-tcp/1/0a000064" "7f000001" "0000000000000000/" UNIQ,
				    sizeof(good) - 1), 0); /* AF_INET6 with an AF_INET length */
	assert_int_equal(parse_text("\0rdmasock-tcp/1//" UNIQ, 16 + 1 + 16), 0);
	assert_int_equal(parse_text("\0rdmasock-tcp/1", 16), 0);
	/* a non-unix address, and lengths beyond a sockaddr_un */
	in = (struct sockaddr_in){.sin_family = AF_INET};
	assert_int_equal(rsk_addr_name_parse((struct sockaddr *)&in, sizeof(in), &out, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_len_and_ports),
		cmocka_unit_test(test_addr_same),
		cmocka_unit_test(test_addr_same_v4m),
		cmocka_unit_test(test_is_local_loopback),
		cmocka_unit_test(test_is_local_interfaces),
		cmocka_unit_test(test_route_src_v4),
		cmocka_unit_test(test_route_src_v6),
		cmocka_unit_test(test_local_and_peer_ports),
		cmocka_unit_test(test_name_roundtrip),
		cmocka_unit_test(test_name_parse_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
