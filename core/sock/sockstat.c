/*
 * Live stats rows (sockstat.h). Runs on the publisher thread: it takes a reference on each
 * tracked socket as any caller does, reads an accelerated connection only through
 * rsk_conn_visit (a concurrent close cannot unmap it meanwhile), and a kernel socket's bytes
 * from TCP_INFO, exactly as they would be accounted at close. A socket closed while its row
 * was being made gets no row.
 */
#include <string.h>

#include "base/statseg.h"
#include "base/sys.h"
#include "conn/conn.h"
#include "face.h"
#include "sock.h"
#include "sockstat.h"

_Static_assert((int)RSK_SOCK_NEW == (int)RSK_STATSEG_ST_NEW &&
		       (int)RSK_SOCK_CONNECTING == (int)RSK_STATSEG_ST_CONNECTING &&
		       (int)RSK_SOCK_CONNECTED == (int)RSK_STATSEG_ST_CONNECTED &&
		       (int)RSK_SOCK_LISTENING == (int)RSK_STATSEG_ST_LISTENING,
	       "the stats segment shows struct rsk_sock states as they are");

/* An accelerated connection's counters and addresses (under the registry lock). */
static void rsk_sockstat_conn(const struct rsk_conn *c, void *arg)
{
	struct rsk_statseg_sock *r = arg;

	r->transport = (uint8_t)c->transport;
	r->bytes_sent = rsk_counter_read(&c->st.bytes_sent);
	r->bytes_received = rsk_counter_read(&c->st.bytes_rcvd);
	r->messages_sent = rsk_counter_read(&c->st.msgs_sent);
	r->messages_received = rsk_counter_read(&c->st.msgs_rcvd);
	r->credit_stalls = rsk_counter_read(&c->st.credit_stalls);
	rsk_statseg_set_addrs(r, c->local_len ? &c->local : NULL, c->peer_len ? &c->peer : NULL);
}

/* A kernel socket (or one whose data now goes through a relay): addresses from the fd; for
 * a kernel one its bytes as at close and why it is one. */
static void rsk_sockstat_kernel(struct rsk_sock *s, int fd, struct rsk_statseg_sock *r)
{
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);
	int k = rsk_face_kfd(fd); /* (a listener's face: its TCP listener has the names) */

	memset(&local, 0, sizeof(local));
	memset(&peer, 0, sizeof(peer));
	if (rsk_sys_getsockname(k, (struct sockaddr *)&local, &llen) == 0) {
		if (rsk_sys_getpeername(k, (struct sockaddr *)&peer, &plen) < 0)
			peer.ss_family = AF_UNSPEC;
		rsk_statseg_set_addrs(r, &local, &peer);
	}
	if (s->transport != RDMASOCK_TRANSPORT_KERNEL)
		return;
	if (s->lst != NULL)
		r->flags |= RSK_STATSEG_F_RENDEZVOUS;
	else
		r->flags |= RSK_STATSEG_F_FALLBACK;
	r->fallback = (uint8_t)s->fb_reason;
	if (s->state == RSK_SOCK_CONNECTED && !s->accounted)
		(void)rsk_sock_kernel_bytes(s, fd, &r->bytes_sent, &r->bytes_received);
}

static int rsk_sockstat_one(int fd, uintptr_t v, void *arg)
{
	struct rsk_statseg_sock r;
	struct rsk_sock *s = rsk_sock_get(fd);
	struct rsk_conn *c;

	if (s == NULL)
		return 0;
	memset(&r, 0, sizeof(r));
	r.fd = fd;
	r.state = (uint8_t)s->state;
	r.transport = (uint8_t)s->transport;
	c = rsk_fdtab_is_accel(v) ? __atomic_load_n(&s->conn, __ATOMIC_ACQUIRE) : NULL;
	if (c != NULL)
		(void)rsk_conn_visit(c, rsk_sockstat_conn, &r); /* gone meanwhile: no counters */
	else if (!rsk_fdtab_is_accel(v))
		rsk_sockstat_kernel(s, fd, &r);
	/* (an accelerated socket without connection: a forked child's copy of one that stays
	 * its parent's; it carries nothing here) */
	if (rsk_fdtab_load(fd) == v) /* closed or switched meanwhile: no row this time */
		(void)rsk_statseg_put_socket(arg, &r);
	rsk_sock_put(s);
	return 0;
}

static void rsk_sockstat_fill(struct rsk_statseg_writer *w)
{
	rsk_fdtab_walk(0, RSK_FDTAB_MAX - 1, rsk_sockstat_one, w);
}

void rsk_sockstat_register(void)
{
	rsk_statseg_register(rsk_sockstat_fill);
}
