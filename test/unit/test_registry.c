/*
 * Unit tests for core/transport/registry: which transport a client dials for each mode and
 * destination (this host's addresses: shared memory; another host: verbs, or a not_local
 * fallback in shm mode), which transports a listener listens with and in what claim order
 * (verbs first: its claims are ready when accept() returns), and an endpoint's cm table.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/addr.h"
#include "transport/registry.h"
#include "transport/shm.h"
#include "transport/shm_cm.h"
#include "transport/verbs.h"
#include "transport/verbs_cm.h"

#define REMOTE4 "192.0.2.1" /* TEST-NET-1: never routed, and not this host's (checked) */

static struct sockaddr_storage addr_of(const char *txt)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, txt, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(6379);
	} else {
		assert_int_equal(inet_pton(AF_INET6, txt, &s6->sin6_addr), 1);
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(6379);
	}
	return ss;
}

/* The transport chosen towards @txt in @mode; *why is left RDMASOCK_FB_COUNT unless set. */
static const struct rsk_cm_ops *route(enum rsk_mode mode, const char *txt,
				      enum rdmasock_fallback *why)
{
	struct sockaddr_storage ss = addr_of(txt);

	*why = RDMASOCK_FB_COUNT;
	return rsk_transport_route(mode, (struct sockaddr *)&ss, why);
}

static int setup(void **state)
{
	struct sockaddr_storage ss = addr_of(REMOTE4);

	(void)state;
	if (rsk_addr_is_local((struct sockaddr *)&ss)) {
		print_message("registry: %s is an address of this host; the remote cases would "
			      "not be remote\n", REMOTE4);
		return -1;
	}
	return 0;
}

static const char *const local_addrs[] = {"127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1"};

static void test_route_auto(void **state)
{
	enum rdmasock_fallback why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(local_addrs) / sizeof(local_addrs[0]); i++)
		assert_ptr_equal(route(RSK_MODE_AUTO, local_addrs[i], &why), &rsk_shm_cm_ops);
	assert_ptr_equal(route(RSK_MODE_AUTO, REMOTE4, &why), &rsk_verbs_cm_ops);
	assert_ptr_equal(route(RSK_MODE_AUTO, "2001:db8::1", &why), &rsk_verbs_cm_ops);
}

static void test_route_shm(void **state)
{
	enum rdmasock_fallback why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(local_addrs) / sizeof(local_addrs[0]); i++)
		assert_ptr_equal(route(RSK_MODE_SHM, local_addrs[i], &why), &rsk_shm_cm_ops);
	/* another host and no verbs in this mode: the connection stays kernel, and says why */
	assert_null(route(RSK_MODE_SHM, REMOTE4, &why));
	assert_int_equal(why, RDMASOCK_FB_NOT_LOCAL);
	assert_null(route(RSK_MODE_SHM, "2001:db8::1", &why));
	assert_int_equal(why, RDMASOCK_FB_NOT_LOCAL);
}

/* verbs mode: every destination, this host's too (how the Soft-RoCE guest tests verbs). */
static void test_route_verbs(void **state)
{
	enum rdmasock_fallback why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(local_addrs) / sizeof(local_addrs[0]); i++)
		assert_ptr_equal(route(RSK_MODE_VERBS, local_addrs[i], &why), &rsk_verbs_cm_ops);
	assert_ptr_equal(route(RSK_MODE_VERBS, REMOTE4, &why), &rsk_verbs_cm_ops);
}

/* An address of one of this host's interfaces (not loopback) is local: shared memory. */
static void test_route_interface_address(void **state)
{
	struct ifaddrs *ifa, *i;
	enum rdmasock_fallback why;
	const struct sockaddr *a = NULL;
	char txt[INET6_ADDRSTRLEN];

	(void)state;
	assert_int_equal(getifaddrs(&ifa), 0);
	for (i = ifa; i != NULL && a == NULL; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
			continue;
		if ((ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) >> 24) != 127)
			a = i->ifa_addr;
	}
	if (a == NULL) {
		freeifaddrs(ifa);
		skip(); /* loopback only here */
	}
	assert_non_null(inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, txt,
				  sizeof(txt)));
	freeifaddrs(ifa);
	assert_ptr_equal(route(RSK_MODE_AUTO, txt, &why), &rsk_shm_cm_ops);
	assert_ptr_equal(route(RSK_MODE_SHM, txt, &why), &rsk_shm_cm_ops);
	assert_ptr_equal(route(RSK_MODE_VERBS, txt, &why), &rsk_verbs_cm_ops);
}

static void test_listening(void **state)
{
	const struct rsk_cm_ops *out[RSK_TRANSPORT_MAX];

	(void)state;
	memset(out, 0, sizeof(out));
	assert_int_equal(rsk_transport_listening(RSK_MODE_KERNEL, out), 0);
	assert_null(out[0]); /* nothing written */

	assert_int_equal(rsk_transport_listening(RSK_MODE_SHM, out), 1);
	assert_ptr_equal(out[0], &rsk_shm_cm_ops);

	/* auto and verbs: both, verbs claims first */
	memset(out, 0, sizeof(out));
	assert_int_equal(rsk_transport_listening(RSK_MODE_AUTO, out), 2);
	assert_ptr_equal(out[0], &rsk_verbs_cm_ops);
	assert_ptr_equal(out[1], &rsk_shm_cm_ops);
	memset(out, 0, sizeof(out));
	assert_int_equal(rsk_transport_listening(RSK_MODE_VERBS, out), 2);
	assert_ptr_equal(out[0], &rsk_verbs_cm_ops);
	assert_ptr_equal(out[1], &rsk_shm_cm_ops);
	assert_null(out[2]);
}

static void test_transport_cm(void **state)
{
	struct rsk_ep *ep = NULL, fake;
	int fd = rsk_shm_create(8, 1024);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(rsk_shm_open(fd, RSK_SHM_CLIENT, -1, NULL, &ep), 0);
	assert_ptr_equal(rsk_transport_cm(ep), &rsk_shm_cm_ops);
	rsk_ep_destroy(ep);
	close(fd);
	/* no device to build a verbs endpoint here: the table is chosen by the ops alone */
	memset(&fake, 0, sizeof(fake));
	fake.ops = &rsk_verbs_ops;
	assert_ptr_equal(rsk_transport_cm(&fake), &rsk_verbs_cm_ops);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_route_auto),
		cmocka_unit_test(test_route_shm),
		cmocka_unit_test(test_route_verbs),
		cmocka_unit_test(test_route_interface_address),
		cmocka_unit_test(test_listening),
		cmocka_unit_test(test_transport_cm),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
