/*
 * Relay of a verbs connection through its readiness socketpair (see relay.h). A queue pair
 * belongs to the process that made it, so a connection that a forked child may serve
 * (fork-per-connection servers) is turned, at the fork, into a plain byte pipe: the app end
 * every holder keeps becomes an ordinary unix stream socket carrying the data itself, and
 * the parent's monitor thread moves bytes between its other end and the QP, with the
 * stream's flow control on the QP side and the socket buffers' on the pipe side. The relay
 * hooks itself into the connection's events (conn.c) and watches the pipe end itself.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/evloop.h"
#include "base/log.h"
#include "base/ready.h"
#include "base/stats.h"
#include "base/sys.h"
#include "conn.h"
#include "relay.h"

#define RSK_RELAY_BUF 65536

struct rsk_relay {
	struct rsk_conn *c;
	rsk_watch_t w; /* the pipe end (our ctl end of the readiness pair) */
	int over;      /* the release is on its way */
	char in[RSK_RELAY_BUF]; /* app -> QP, not sent yet */
	char out[RSK_RELAY_BUF]; /* QP -> app, not written yet */
	uint32_t in_off, in_len, out_off, out_len;
	int app_eof;  /* every holder closed or shut its writing side */
	int peer_eof; /* the peer's FIN reached the app */
	int dead;     /* error: nothing more moves */
	int unread;   /* the app went leaving data of the peer unread: TCP resets */
	uint64_t up, down; /* bytes moved each way */
};

/*
 * From here no token or fill may reach the app end: it carries data only. Lock held; the
 * flag is set under it, so an event the loop is handling right now (it found no hook yet,
 * and waits for the lock) writes no token after our collect.
 */
static void rsk_relay_quiet(struct rsk_conn *c, int app_fd)
{
	c->relayed = 1;
	c->lazy = 0; /* the collect below takes a stale token too */
	c->lazy_never = 1;
	rsk_ready_collect(rsk_ep_ready(c->ep), &c->ro, app_fd, 100);
	rsk_ready_flush(c->ctl_fd); /* a fill of ours must not be relayed as data */
	c->ro.fill = 0;
	/* The app end may have had its minimal send buffer (unwritable); as a data pipe it
	 * needs a normal one. */
	(void)rsk_sys_setsockopt_int(app_fd, SOL_SOCKET, SO_SNDBUF, RSK_RELAY_BUF * 4);
	c->ro.small = 0;
}

static int rsk_relay_pump(struct rsk_conn *c, struct rsk_relay *r);

static void rsk_relay_release(void *arg)
{
	rsk_conn_release(((struct rsk_relay *)arg)->c); /* frees the relay (on_release) */
}

/* Move what can move; once the relay is over, release the connection (deferred: releasing
 * takes locks a callback may not). On the event loop. */
static void rsk_relay_step(struct rsk_conn *c, void *ext)
{
	struct rsk_relay *r = ext;
	int over;

	rsk_conn_lock(c);
	over = rsk_relay_pump(c, r);
	rsk_conn_unlock(c);
	if (over && !r->over && rsk_evloop_defer(rsk_relay_release, r) == 0)
		r->over = 1;
}

static void rsk_relay_on_pipe(void *arg, uint32_t events)
{
	struct rsk_relay *r = arg;

	(void)events;
	rsk_relay_step(r->c, r);
}

static void rsk_relay_free(struct rsk_conn *c, void *ext)
{
	struct rsk_relay *r = ext;

	(void)c;
	rsk_evloop_unwatch(r->w);
	free(r);
}

int rsk_relay_start(struct rsk_conn *c, int app_fd)
{
	struct rsk_relay *r = calloc(1, sizeof(*r));
	int rc;

	if (r == NULL)
		return -ENOMEM;
	r->c = c;
	rsk_conn_lock(c);
	if (c->st.err || c->eof_shown || c->hup_shown || c->ctl_fd < 0) {
		rsk_conn_unlock(c);
		free(r);
		return -EBUSY;
	}
	rsk_relay_quiet(c, app_fd);
	rsk_conn_unlock(c);
	rc = rsk_conn_set_hook(c, rsk_relay_step, r, rsk_relay_free);
	if (rc < 0) {
		free(r);
		return rc;
	}
	rc = rsk_evloop_watch(c->ctl_fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			      rsk_relay_on_pipe, r, &r->w);
	if (rc < 0)
		rsk_warn("relay of %p not watched (%s); a forked child's connection stalls",
			 (void *)c, strerror(-rc));
	rsk_dbg("connection %p now relayed through its socketpair (fork)", (void *)c);
	rsk_relay_step(c, r); /* what is already there */
	return 0;
}

/* QP -> app. Returns 1 if something moved. */
static int rsk_relay_down(struct rsk_conn *c, struct rsk_relay *r)
{
	struct iovec iov = {r->out, sizeof(r->out)};
	ssize_t k;
	int moved = 0;

	if (r->out_len == 0 && !r->peer_eof) {
		k = rsk_stream_recv(&c->st, &iov, 1, 0);
		if (k > 0) {
			r->out_off = 0;
			r->out_len = (uint32_t)k;
			rsk_counter_add(&rsk_stats.bytes_received[c->transport], (uint64_t)k);
			moved = 1;
		} else if (k == 0) { /* the peer's FIN: the app sees EOF */
			(void)rsk_sys_shutdown(c->ctl_fd, SHUT_WR);
			r->peer_eof = 1;
			moved = 1;
		} else if (k != -EAGAIN) {
			r->dead = 1;
		}
	}
	if (r->out_len > 0) {
		k = rsk_sys_send(c->ctl_fd, r->out + r->out_off, r->out_len,
				  MSG_DONTWAIT | MSG_NOSIGNAL); /* the loop never waits */
		if (k > 0) {
			r->out_off += (uint32_t)k;
			r->out_len -= (uint32_t)k;
			r->down += (uint64_t)k;
			moved = 1;
		} else if (k < 0 && k != -EAGAIN && k != -EINTR) {
			r->dead = 1; /* nobody holds the app end any more */
			r->unread = 1; /* and our bytes for it were never read */
		}
	}
	return moved;
}

/* app -> QP. Returns 1 if something moved. */
static int rsk_relay_up(struct rsk_conn *c, struct rsk_relay *r)
{
	struct iovec iov;
	ssize_t k;
	int moved = 0;

	if (r->in_len == 0 && !r->app_eof) {
		k = rsk_sys_recv(c->ctl_fd, r->in, sizeof(r->in), MSG_DONTWAIT);
		if (k > 0) {
			r->in_off = 0;
			r->in_len = (uint32_t)k;
			moved = 1;
		} else if (k == 0) {
			r->app_eof = 1;
			moved = 1;
		} else if (k == -ECONNRESET) {
			r->dead = 1; /* the app closed over relayed bytes it had not read */
			r->unread = 1;
		} else if (k != -EAGAIN && k != -EINTR) {
			r->app_eof = 1;
		}
	}
	if (r->in_len > 0) {
		iov.iov_base = r->in + r->in_off;
		iov.iov_len = r->in_len;
		k = rsk_stream_send(&c->st, &iov, 1, 0);
		if (k > 0) {
			r->in_off += (uint32_t)k;
			r->in_len -= (uint32_t)k;
			r->up += (uint64_t)k;
			rsk_counter_add(&rsk_stats.bytes_sent[c->transport], (uint64_t)k);
			moved = 1;
		} else if (k != -EAGAIN) {
			r->dead = 1;
		}
	}
	if (r->app_eof && r->in_len == 0 && !c->st.fin_sent && !c->st.fin_pending)
		(void)rsk_stream_shutdown_wr(&c->st);
	return moved;
}

/* Move what can move both ways (lock held). Returns 1 once the relay is over. */
static int rsk_relay_pump(struct rsk_conn *c, struct rsk_relay *r)
{
	int rounds;

	for (rounds = 0; rounds < 256 && !r->dead && !c->st.err; rounds++)
		if (!(rsk_relay_down(c, r) | rsk_relay_up(c, r)))
			break;
	if (c->st.err || r->dead) { /* the app end learns it: EOF, then EPIPE on writes */
		rsk_dbg("relay of %p ends: %s (err %d rst %d fin %d)", (void *)c,
			c->st.err ? "stream reset" : "app end gone", c->st.err, c->st.rst_rcvd,
			c->st.fin_rcvd);
		if (r->unread && !c->st.err)
			rsk_stream_reset(&c->st);
		(void)rsk_sys_shutdown(c->ctl_fd, SHUT_RDWR);
		return 1;
	}
	if (r->app_eof && r->in_len == 0 && r->peer_eof && r->out_len == 0) {
		rsk_dbg("relay of %p is over: %llu bytes up, %llu down", (void *)c,
			(unsigned long long)r->up, (unsigned long long)r->down);
		return 1;
	}
	return 0;
}
