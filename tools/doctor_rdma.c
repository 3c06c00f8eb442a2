/*
 * rdmasock doctor, the RDMA part: devices, ports, GIDs and netdev addresses through
 * libibverbs, and an rdma_cm probe of a service (address and route resolution, then a
 * connect request without a QP whose rejection tells who answered). Every wait is bounded.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>

#include "doctor.h"

#define RSK_CM_TIMEOUT_MS 2000
#define RSK_CM_RETRY_MS 500
/* IB CM reject reasons (IBTA table 112): nobody listens / the listener said no. */
#define RSK_REJ_INVALID_SERVICE_ID 8
#define RSK_REJ_CONSUMER_DEFINED 28

static const char *const rsk_fix_device =
	"load your NIC's driver and install ibverbs-providers (for Soft-RoCE: modprobe rdma_rxe; "
	"rdma link add rxe0 type rxe netdev IFACE); same-host shm needs no device";

/* The netdev behind GID index 0 of @port, and its addresses, into @out. */
static void rsk_port_netdev(const char *dev, int port, char *out, size_t size)
{
	char path[256], ndev[64] = "", host[NI_MAXHOST];
	struct ifaddrs *ifa, *i;
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/0", dev, port);
	f = fopen(path, "re");
	if (f != NULL && fgets(ndev, sizeof(ndev), f) != NULL)
		ndev[strcspn(ndev, "\n")] = '\0';
	if (f != NULL)
		fclose(f);
	if (ndev[0] == '\0') {
		snprintf(out, size, "no netdev (InfiniBand, or GID table empty)");
		return;
	}
	len = (size_t)snprintf(out, size, "netdev %s", ndev);
	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i != NULL && len < size; i = i->ifa_next)
		if (i->ifa_addr != NULL && strcmp(i->ifa_name, ndev) == 0 &&
		    (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6) &&
		    getnameinfo(i->ifa_addr, sizeof(struct sockaddr_storage), host, sizeof(host), NULL,
				0, NI_NUMERICHOST) == 0)
			len += (size_t)snprintf(out + len, size - len, " %s", host);
	freeifaddrs(ifa);
}

static int rsk_port_gids(struct ibv_context *ctx, int port, int tbl_len)
{
	union ibv_gid gid, zero;
	int i, n = 0;

	memset(&zero, 0, sizeof(zero));
	for (i = 0; i < tbl_len && i < 256; i++)
		if (ibv_query_gid(ctx, (uint8_t)port, i, &gid) == 0 && memcmp(&gid, &zero, sizeof(gid)))
			n++;
	return n;
}

static void rsk_doctor_port(struct rsk_doctor *d, struct ibv_context *ctx, const char *dev, int p)
{
	struct ibv_port_attr pa;
	char what[64], net[512];
	int gids;

	snprintf(what, sizeof(what), "port %s/%d", dev, p);
	if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
		rsk_report(d, RSK_FAIL, what, "check the driver (dmesg)", "cannot query the port");
		return;
	}
	gids = rsk_port_gids(ctx, p, pa.gid_tbl_len);
	rsk_port_netdev(dev, p, net, sizeof(net));
	if (pa.state != IBV_PORT_ACTIVE)
		rsk_report(d, RSK_WARN, what, "bring the link up (ip link set IFACE up; cable/switch)",
			   "%s, %d GIDs, %s", ibv_port_state_str(pa.state), gids, net);
	else if (gids == 0)
		rsk_report(d, RSK_WARN, what, "give the netdev an IP address (RoCE GIDs come from it)",
			   "PORT_ACTIVE but no GID, %s", net);
	else
		rsk_report(d, RSK_OK, what, NULL, "PORT_ACTIVE, %d GIDs, %s", gids, net);
}

static void rsk_doctor_device(struct rsk_doctor *d, struct ibv_device *dev)
{
	struct ibv_device_attr da;
	struct ibv_context *ctx = ibv_open_device(dev);
	const char *name = ibv_get_device_name(dev);
	int p;

	if (ctx == NULL) {
		rsk_report(d, RSK_FAIL, "device", "check permissions of /dev/infiniband/uverbs*",
			   "%s: cannot open (%s)", name, strerror(errno));
		return;
	}
	if (ibv_query_device(ctx, &da) == 0)
		for (p = 1; p <= da.phys_port_cnt; p++)
			rsk_doctor_port(d, ctx, name, p);
	ibv_close_device(ctx);
}

void rsk_doctor_devices(struct rsk_doctor *d)
{
	struct ibv_device **list = ibv_get_device_list(&d->ndev);
	char names[512] = "";
	size_t len = 0;
	int i;

	if (list == NULL || d->ndev == 0) {
		d->ndev = 0;
		rsk_report(d, RSK_WARN, "rdma-devices", rsk_fix_device,
			   "no RDMA device: connections to other hosts stay on TCP (no_device)");
		if (list != NULL)
			ibv_free_device_list(list);
		return;
	}
	for (i = 0; i < d->ndev && len < sizeof(names); i++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", i ? " " : "",
					ibv_get_device_name(list[i]));
	rsk_report(d, RSK_OK, "rdma-devices", NULL, "%d: %s", d->ndev, names);
	for (i = 0; i < d->ndev; i++)
		rsk_doctor_device(d, list[i]);
	ibv_free_device_list(list);
}

/* Wait up to @ms for the next event on @ch, ack it; returns its type or -ETIMEDOUT. */
static int rsk_cm_next(struct rdma_event_channel *ch, int *status, int ms)
{
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	int type;

	if (poll(&pfd, 1, ms) <= 0 || rdma_get_cm_event(ch, &ev) != 0)
		return -ETIMEDOUT;
	type = (int)ev->event;
	*status = ev->status;
	rdma_ack_cm_event(ev);
	return type;
}

/*
 * Resolve address and route: 0, or -1 with *why. rxe never finishes the first resolution
 * towards a neighbour missing from the ARP cache, so the address step is retried on a fresh
 * id (as the library does) within RSK_CM_TIMEOUT_MS.
 */
static int rsk_cm_resolve(struct rdma_event_channel *ch, struct rdma_cm_id **id,
			  const struct sockaddr *dst, const char **why)
{
	int st = 0, try, ok = 0;

	for (try = 0; try < RSK_CM_TIMEOUT_MS / RSK_CM_RETRY_MS && !ok; try++) {
		if (try > 0) {
			rdma_destroy_id(*id);
			*id = NULL;
			if (rdma_create_id(ch, id, NULL, RDMA_PS_TCP) != 0) {
				*id = NULL;
				break;
			}
		}
		ok = rdma_resolve_addr(*id, NULL, (struct sockaddr *)dst, RSK_CM_RETRY_MS) == 0 &&
		     rsk_cm_next(ch, &st, RSK_CM_RETRY_MS + 100) == RDMA_CM_EVENT_ADDR_RESOLVED;
	}
	if (!ok) {
		*why = "address not resolved: no RDMA path to it";
		return -1;
	}
	if (rdma_resolve_route(*id, RSK_CM_TIMEOUT_MS) != 0 ||
	    rsk_cm_next(ch, &st, RSK_CM_TIMEOUT_MS) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		*why = "route not resolved";
		return -1;
	}
	return 0;
}

static void rsk_cm_verdict(struct rsk_doctor *d, const char *name, int type, int status)
{
	if (type == RDMA_CM_EVENT_REJECTED && status == RSK_REJ_CONSUMER_DEFINED)
		rsk_report(d, RSK_OK, "rdma_cm", NULL,
			   "%s: reachable; an rdma_cm listener answered (librdmasock rejects probes)",
			   name);
	else if (type == RDMA_CM_EVENT_ESTABLISHED)
		rsk_report(d, RSK_OK, "rdma_cm", NULL, "%s: reachable; a listener accepted", name);
	else if (type == RDMA_CM_EVENT_REJECTED)
		rsk_report(d, RSK_WARN, "rdma_cm",
			   "preload the server with transport auto or verbs (rdmasock run -- SERVER)",
			   "%s: reachable over RDMA, but no rdma_cm listener on that port (reason %d):"
			   " clients stay on TCP (refused)", name, status);
	else
		rsk_report(d, RSK_WARN, "rdma_cm", "check the peer's device, GIDs and firewall",
			   "%s: no answer within %d ms (event %d): clients fall back (timeout)", name,
			   RSK_CM_TIMEOUT_MS, type);
}

void rsk_doctor_rdma_cm(struct rsk_doctor *d, const struct sockaddr *dst, const char *name)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp;
	struct rdma_cm_id *id = NULL;
	const char *why = NULL;
	int type, st = 0;

	if (d->ndev == 0) {
		rsk_report(d, RSK_WARN, "rdma_cm", rsk_fix_device, "%s: not checked: no RDMA device",
			   name);
		return;
	}
	ch = rdma_create_event_channel();
	if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
		rsk_report(d, RSK_FAIL, "rdma_cm", "load rdma_ucm (modprobe rdma_ucm)",
			   "%s: cannot use rdma_cm: %s", name, strerror(errno));
		if (ch != NULL)
			rdma_destroy_event_channel(ch);
		return;
	}
	if (rsk_cm_resolve(ch, &id, dst, &why) < 0) {
		rsk_report(d, RSK_WARN, "rdma_cm", "check routes and the netdev's address",
			   "%s: %s: clients fall back (no_route)", name, why);
	} else {
		memset(&cp, 0, sizeof(cp)); /* no QP, no hello: a probe any listener refuses */
		type = rdma_connect(id, &cp) != 0 ? -errno : rsk_cm_next(ch, &st, RSK_CM_TIMEOUT_MS);
		rsk_cm_verdict(d, name, type, st);
	}
	if (id != NULL)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}
