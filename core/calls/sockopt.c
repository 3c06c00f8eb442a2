/*
 * Socket options, addresses and ioctls of accelerated sockets. The TCP socket is gone once a
 * connection is set up, so its answers are kept: addresses from the setup, options as the
 * application set them. A value is checked (and normalised, e.g. SO_RCVBUF doubled) the way
 * the kernel would, on a template TCP socket of the same family, and the verdict is cached,
 * so a server setting the same options on every connection costs no system call. A relayed
 * connection's fd names a unix socket standing in for the TCP one (conn/relay.c): the plain
 * calls below answer for TCP there, also in a program exec'd with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <unistd.h>
#include <uthash.h>

#include "base/addr.h"
#include "base/fdhide.h"
#include "base/standin.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "conn/conn.h"
#include "sock/bearer.h"
#include "sock/face.h"
#include "sock/sock.h"
#include "calls.h"
#include "history.h"
#include "sockopt.h"

/* ---- the template sockets and the verdict cache (per process) ---- */

struct rsk_opt_key {
	int family, level, name;
	socklen_t len;
	unsigned char val[32];
};

struct rsk_opt_verdict {
	struct rsk_opt_key key;
	int rc;                 /* what setsockopt returned (0 or -errno) */
	socklen_t elen;         /* what getsockopt reads back afterwards */
	unsigned char eff[32];
	UT_hash_handle hh;
};

#define RSK_OPT_CACHE_MAX 256

static pthread_mutex_t rsk_opt_lock = PTHREAD_MUTEX_INITIALIZER;
static int rsk_opt_tpl[2] = {-1, -1}; /* AF_INET, AF_INET6 */
static struct rsk_opt_verdict *rsk_opt_cache;
static unsigned int rsk_opt_ncache;

/* A TCP socket of @family that stands in for the connection's (lock held). */
static int rsk_opt_template(int family)
{
	int *t = &rsk_opt_tpl[family == AF_INET6], fd;

	if (*t >= 0)
		return *t;
	fd = rsk_sys_socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && (fd = rsk_fd_hide(fd)) >= 0)
		*t = fd;
	return fd;
}

/* The kernel keeps twice what SO_RCVBUF and SO_SNDBUF are given, and reads that back: @val,
 * read so, becomes what to set for the same value again (its half). */
static void rsk_opt_buf_as_set(int level, int name, void *val, socklen_t len)
{
	int half;

	if (level != SOL_SOCKET || (name != SO_RCVBUF && name != SO_SNDBUF) || len != sizeof(int))
		return;
	memcpy(&half, val, sizeof(half));
	half /= 2;
	memcpy(val, &half, sizeof(half));
}

/* Set @key on the template, read back the effective value, and restore the old one. */
static void rsk_opt_try(int tpl, struct rsk_opt_verdict *v)
{
	unsigned char old[64];
	socklen_t olen = sizeof(old);
	int had = rsk_sys_getsockopt(tpl, v->key.level, v->key.name, old, &olen) == 0;

	v->rc = rsk_sys_setsockopt(tpl, v->key.level, v->key.name, v->key.val, v->key.len);
	v->elen = 0;
	if (v->rc == 0) {
		v->elen = sizeof(v->eff);
		if (rsk_sys_getsockopt(tpl, v->key.level, v->key.name, v->eff, &v->elen) < 0)
			v->elen = 0;
	}
	/* (a buffer size restored from what it read, the template's default doubled with each
	 * try, and every unset socket read that) */
	if (had) {
		rsk_opt_buf_as_set(v->key.level, v->key.name, old, olen);
		(void)rsk_sys_setsockopt(tpl, v->key.level, v->key.name, old, olen);
	}
}

/* The kernel's verdict on setting @val (cached). 0 or -errno; *@out holds what it reads
 * back as (elen 0: nothing to keep). */
static int rsk_opt_verdict(int family, int level, int name, const void *val, socklen_t len,
			   struct rsk_opt_verdict *out)
{
	struct rsk_opt_verdict key, *v;
	int tpl;

	memset(&key, 0, sizeof(key));
	key.key.family = family;
	key.key.level = level;
	key.key.name = name;
	key.key.len = len;
	memcpy(key.key.val, val, len);
	pthread_mutex_lock(&rsk_opt_lock);
	HASH_FIND(hh, rsk_opt_cache, &key.key, sizeof(key.key), v);
	if (v == NULL && (tpl = rsk_opt_template(family)) >= 0) {
		rsk_opt_try(tpl, &key);
		v = rsk_opt_ncache < RSK_OPT_CACHE_MAX ? malloc(sizeof(*v)) : NULL;
		if (v != NULL) {
			*v = key;
			HASH_ADD(hh, rsk_opt_cache, key, sizeof(v->key), v);
			rsk_opt_ncache++;
		} else {
			v = &key;
		}
	}
	if (v != NULL)
		*out = *v;
	pthread_mutex_unlock(&rsk_opt_lock);
	return v != NULL ? out->rc : -ENOBUFS;
}

/* A default as the template reads it. 0 or -errno. */
static int rsk_opt_default(int family, int level, int name, void *val, socklen_t *len)
{
	int tpl, rc;

	pthread_mutex_lock(&rsk_opt_lock);
	tpl = rsk_opt_template(family);
	rc = tpl < 0 ? tpl : rsk_sys_getsockopt(tpl, level, name, val, len);
	pthread_mutex_unlock(&rsk_opt_lock);
	return rc;
}

/* ---- per connection ---- */

static struct rsk_conn *rsk_opt_conn(int fd, struct rsk_sock **s)
{
	*s = rsk_sock_get(fd);
	if (*s != NULL && (*s)->conn != NULL)
		return (*s)->conn;
	if (*s != NULL)
		rsk_sock_put(*s);
	return NULL;
}

static struct rsk_conn_opt *rsk_opt_find(struct rsk_conn *c, int level, int name)
{
	int i;

	for (i = 0; i < c->nopts; i++)
		if (c->opts[i].level == level && c->opts[i].name == name)
			return &c->opts[i];
	return NULL;
}

/* Keep what getsockopt reads back after a successful set. Lock held. */
static void rsk_opt_keep(struct rsk_conn *c, int level, int name, const void *val, socklen_t len)
{
	struct rsk_conn_opt *o = rsk_opt_find(c, level, name);

	if (o == NULL && c->nopts < RSK_CONN_OPTS)
		o = &c->opts[c->nopts++];
	if (o == NULL || len > sizeof(o->val))
		return; /* full: reads give the default again (a bounded table, not an error) */
	o->level = level;
	o->name = name;
	o->len = len;
	memcpy(o->val, val, len);
}

static int64_t rsk_tv_us(const struct timeval *tv)
{
	return (int64_t)tv->tv_sec * 1000000 + tv->tv_usec;
}

/* What the engine honours itself. Lock held. */
static void rsk_opt_apply(struct rsk_conn *c, int level, int name, const void *val,
			  socklen_t len)
{
	if (level == SOL_SOCKET && name == SO_RCVTIMEO && len >= (socklen_t)sizeof(struct timeval))
		c->rcvtimeo_us = rsk_tv_us(val);
	else if (level == SOL_SOCKET && name == SO_SNDTIMEO &&
		 len >= (socklen_t)sizeof(struct timeval))
		c->sndtimeo_us = rsk_tv_us(val);
	else if (level == SOL_SOCKET && name == SO_LINGER && len >= (socklen_t)sizeof(struct linger))
		c->linger0 = ((const struct linger *)val)->l_onoff &&
			     ((const struct linger *)val)->l_linger == 0;
	else if (level == IPPROTO_TCP && name == TCP_NODELAY && len >= (socklen_t)sizeof(int))
		rsk_stream_set_nodelay(&c->st, *(const int *)val);
	else if (level == IPPROTO_TCP && name == TCP_CORK && len >= (socklen_t)sizeof(int))
		rsk_stream_set_cork(&c->st, *(const int *)val);
}

int rsk_opt_set(int fd, int level, int name, const void *val, socklen_t len)
{
	struct rsk_opt_verdict v;
	struct rsk_sock *s;
	struct rsk_conn *c = rsk_opt_conn(fd, &s);
	int rc;

	if (c == NULL)
		return -EBADF;
	if (val == NULL && len > 0)
		rc = -EFAULT;
	else if (len > sizeof(v.key.val))
		rc = -EINVAL; /* no TCP option we could carry takes more */
	else
		rc = rsk_opt_verdict(c->domain, level, name, val, len, &v);
	if (rc == 0) {
		rsk_conn_lock(c);
		rsk_opt_apply(c, level, name, val, len);
		if (v.elen > 0)
			rsk_opt_keep(c, level, name, v.eff, v.elen);
		rsk_conn_unlock(c);
	}
	rsk_sock_put(s);
	return rc;
}

/*
 * Options a TCP socket carries into its connection: set before connect, inherited from the
 * listener, or set before a move. The engine honours the timeouts and the linger; the rest
 * read back as set. Read from the kernel's socket at the switch, and only when the
 * application set an option there (rsk_sock's opts_set) or for a move: a connection whose
 * owner set none pays no system call.
 */
static const struct {
	int level, name;
} rsk_opt_carried[] = {
    {SOL_SOCKET, SO_RCVTIMEO},   {SOL_SOCKET, SO_SNDTIMEO},      {SOL_SOCKET, SO_LINGER},
    {SOL_SOCKET, SO_KEEPALIVE},  {SOL_SOCKET, SO_RCVBUF},        {SOL_SOCKET, SO_SNDBUF},
    {SOL_SOCKET, SO_OOBINLINE},  {SOL_SOCKET, SO_RCVLOWAT},      {SOL_SOCKET, SO_PRIORITY},
    {IPPROTO_TCP, TCP_KEEPIDLE}, {IPPROTO_TCP, TCP_KEEPINTVL},   {IPPROTO_TCP, TCP_KEEPCNT},
    {IPPROTO_TCP, TCP_USER_TIMEOUT},
};
#define RSK_OPT_CARRIED (sizeof(rsk_opt_carried) / sizeof(rsk_opt_carried[0]))

/* Their defaults per family, read from the template once (under rsk_opt_lock). */
static struct {
	int have; /* 1 read, -1 unreadable */
	socklen_t len;
	unsigned char val[32];
} rsk_opt_carried_def[2][RSK_OPT_CARRIED];

/* Is @val the default of carried option @i for @family? */
static int rsk_opt_is_default(int family, size_t i, const void *val, socklen_t len)
{
	typeof(rsk_opt_carried_def[0][0]) *d = &rsk_opt_carried_def[family == AF_INET6][i];
	int tpl, same;

	pthread_mutex_lock(&rsk_opt_lock);
	if (d->have == 0) {
		d->len = sizeof(d->val);
		tpl = rsk_opt_template(family);
		d->have = tpl >= 0 && rsk_sys_getsockopt(tpl, rsk_opt_carried[i].level,
							  rsk_opt_carried[i].name, d->val,
							  &d->len) == 0
			      ? 1
			      : -1;
	}
	same = d->have == 1 && d->len == len && memcmp(d->val, val, len) == 0;
	pthread_mutex_unlock(&rsk_opt_lock);
	return same;
}

/* Carried option @i of socket @fd (of @family) into @val: 1 when read and not the default. */
static int rsk_opt_carried_read(int fd, int family, size_t i, void *val, socklen_t *len)
{
	return rsk_sys_getsockopt(fd, rsk_opt_carried[i].level, rsk_opt_carried[i].name, val,
				  len) == 0 &&
	       !rsk_opt_is_default(family, i, val, *len);
}

/* @level/@name's index in rsk_opt_carried, or -1. */
static int rsk_opt_carried_index(int level, int name)
{
	size_t i;

	for (i = 0; i < RSK_OPT_CARRIED; i++)
		if (rsk_opt_carried[i].level == level && rsk_opt_carried[i].name == name)
			return (int)i;
	return -1;
}

void rsk_opt_adopt_kernel(struct rsk_conn *c, int family, int tcp_fd)
{
	unsigned char val[32];
	socklen_t len;
	size_t i;

	if (family != AF_INET && family != AF_INET6)
		return;
	for (i = 0; i < RSK_OPT_CARRIED; i++) {
		int level = rsk_opt_carried[i].level, name = rsk_opt_carried[i].name;

		len = sizeof(val);
		if (!rsk_opt_carried_read(tcp_fd, family, i, val, &len))
			continue; /* (a default needs no slot of the bounded table) */
		rsk_conn_lock(c);
		rsk_opt_apply(c, level, name, val, len);
		rsk_opt_keep(c, level, name, val, len);
		rsk_conn_unlock(c);
	}
}

/* The answer, truncated to the caller's buffer as getsockopt does (an int option too: the
 * kernel copies min(len, sizeof(int)) bytes; only a negative length is invalid). */
static int rsk_opt_out(void *val, socklen_t *len, const void *v, socklen_t n)
{
	if (len == NULL)
		return -EFAULT;
	if ((int)*len < 0)
		return -EINVAL;
	if (*len < n)
		n = *len;
	if (val == NULL && n > 0)
		return -EFAULT;
	if (n > 0)
		memcpy(val, v, n);
	*len = n;
	return 0;
}

static int rsk_opt_int(void *val, socklen_t *len, int v)
{
	return rsk_opt_out(val, len, &v, sizeof(v));
}

/* TCP_INFO of a connection the kernel does not see: what a loopback TCP connection would
 * say, with our own counts. Lock held. */
static void rsk_opt_tcp_info(struct rsk_conn *c, struct tcp_info *ti)
{
	const struct rsk_stream *st = &c->st;

	(void)rsk_stream_progress(&c->st); /* a FIN or reset that arrived counts */
	memset(ti, 0, sizeof(*ti));
	ti->tcpi_state = RSK_TCPS_ESTABLISHED;
	if (rsk_stream_ended(st))
		ti->tcpi_state = RSK_TCPS_CLOSE;
	else if (st->fin_rcvd && st->shut_wr) /* (our FIN not gone yet) */
		ti->tcpi_state = RSK_TCPS_CLOSING;
	else if (st->fin_rcvd)
		ti->tcpi_state = RSK_TCPS_CLOSE_WAIT;
	else if (st->shut_wr || st->fin_sent)
		ti->tcpi_state = RSK_TCPS_FIN_WAIT2;
	ti->tcpi_rto = 200000;
	ti->tcpi_ato = 40000;
	ti->tcpi_snd_mss = ti->tcpi_rcv_mss = st->bsize < 65483 ? st->bsize : 65483;
	ti->tcpi_advmss = ti->tcpi_snd_mss;
	ti->tcpi_pmtu = 65536;
	ti->tcpi_rtt = 10; /* microseconds: a same-host round trip */
	ti->tcpi_rttvar = 5;
	ti->tcpi_snd_ssthresh = 0x7fffffff;
	ti->tcpi_snd_cwnd = st->nbuf;
	ti->tcpi_rcv_space = st->nbuf * st->bsize;
	ti->tcpi_bytes_sent = ti->tcpi_bytes_acked = st->bytes_sent;
	ti->tcpi_bytes_received = st->bytes_rcvd;
	ti->tcpi_segs_out = ti->tcpi_data_segs_out = (uint32_t)st->msgs_sent;
	ti->tcpi_segs_in = ti->tcpi_data_segs_in = (uint32_t)st->msgs_rcvd;
}

/* Options whose answer is the connection's own. 1 when answered (*rc set). Lock held. */
static int rsk_opt_own(struct rsk_conn *c, int level, int name, void *val, socklen_t *len,
		       int *rc)
{
	struct tcp_info ti;
	int err;

	if (level == SOL_SOCKET && name == SO_ERROR) {
		err = c->st.err && !c->st.err_seen_rx ? -c->st.err : 0;
		/* TCP has one pending error, and SO_ERROR consumes it: then recv sees EOF and
		 * send EPIPE, and the next SO_ERROR reads 0. */
		*rc = rsk_opt_int(val, len, err);
		if (*rc == 0 && err != 0)
			c->st.err_seen_rx = c->st.err_seen_tx = 1;
	} else if (level == SOL_SOCKET && name == SO_TYPE) {
		*rc = rsk_opt_int(val, len, SOCK_STREAM);
	} else if (level == SOL_SOCKET && name == SO_DOMAIN) {
		*rc = rsk_opt_int(val, len, c->domain);
	} else if (level == SOL_SOCKET && name == SO_PROTOCOL) {
		*rc = rsk_opt_int(val, len, IPPROTO_TCP);
	} else if (level == SOL_SOCKET && name == SO_ACCEPTCONN) {
		*rc = rsk_opt_int(val, len, 0);
	} else if (level == IPPROTO_TCP && name == TCP_NODELAY) {
		*rc = rsk_opt_int(val, len, c->st.nodelay);
	} else if (level == IPPROTO_TCP && name == TCP_CORK) {
		*rc = rsk_opt_int(val, len, c->st.cork);
	} else if (level == IPPROTO_TCP && name == TCP_INFO) {
		rsk_opt_tcp_info(c, &ti);
		*rc = rsk_opt_out(val, len, &ti, sizeof(ti));
	} else {
		return 0;
	}
	return 1;
}

int rsk_opt_get(int fd, int level, int name, void *val, socklen_t *len)
{
	struct rsk_conn_opt o, *k;
	struct rsk_sock *s;
	struct rsk_conn *c = rsk_opt_conn(fd, &s);
	int rc = 0, own, kept;

	if (c == NULL)
		return -EBADF;
	if (level == SOL_SOCKET && name == SO_ERROR)
		rsk_hist_setup_seen(s); /* a non-blocking connect's result: its setup is over */
	rsk_conn_lock(c);
	own = rsk_opt_own(c, level, name, val, len, &rc);
	k = own ? NULL : rsk_opt_find(c, level, name);
	kept = k != NULL;
	if (kept)
		o = *k;
	rsk_conn_unlock(c);
	if (!own && kept)
		rc = rsk_opt_out(val, len, o.val, o.len);
	else if (!own)
		rc = rsk_opt_default(c->domain, level, name, val, len);
	rsk_sock_put(s);
	return rc;
}

static int rsk_opt_name(int fd, struct sockaddr *addr, socklen_t *len, int peer)
{
	struct rsk_sock *s;
	struct rsk_conn *c = rsk_opt_conn(fd, &s);
	socklen_t n;
	int rc = 0;

	if (c == NULL)
		return -EBADF;
	n = peer ? c->peer_len : c->local_len;
	if (peer) { /* (what arrived counts: a FIN or a reset waiting in the ring) */
		rsk_conn_lock(c);
		(void)rsk_stream_progress(&c->st);
		if (rsk_stream_ended(&c->st))
			n = 0;
		rsk_conn_unlock(c);
	}
	if (addr == NULL || len == NULL)
		rc = -EFAULT;
	else if (n == 0)
		rc = peer ? -ENOTCONN : -EINVAL;
	else {
		memcpy(addr, peer ? (void *)&c->peer : (void *)&c->local, *len < n ? *len : n);
		*len = n;
	}
	rsk_sock_put(s);
	return rc;
}

int rsk_opt_sockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	return rsk_opt_name(fd, addr, len, 0);
}

int rsk_opt_peername(int fd, struct sockaddr *addr, socklen_t *len)
{
	return rsk_opt_name(fd, addr, len, 1);
}

static int rsk_opt_put_int(unsigned long arg, int v)
{
	memcpy((void *)arg, &v, sizeof(v));
	return 0;
}

int rsk_opt_ioctl(int fd, unsigned long req, unsigned long arg)
{
	struct rsk_sock *s;
	struct rsk_conn *c = rsk_opt_conn(fd, &s);
	int rc, v;

	if (c == NULL)
		return -EBADF;
	rsk_conn_lock(c);
	if (req == FIONREAD) { /* = SIOCINQ */
		(void)rsk_stream_progress(&c->st);
		rc = rsk_opt_put_int(arg, c->st.rx_bytes > INT32_MAX ? INT32_MAX
								   : (int)c->st.rx_bytes);
	} else if (req == SIOCOUTQ || req == SIOCOUTQNSD) {
		/* A posted SEND is in the peer's memory; only a staged one is still ours. */
		rc = rsk_opt_put_int(arg, (int)c->st.stage_len);
	} else if (req == SIOCATMARK) {
		rc = rsk_opt_put_int(arg, 0); /* no urgent data is carried */
	} else if (req == FIONBIO) {
		memcpy(&v, (void *)arg, sizeof(v));
		c->nonblock = v != 0;
		rc = rsk_sys_ioctl(fd, req, arg);
	} else if (req == FIOASYNC || req == FIOCLEX || req == FIONCLEX) {
		rc = rsk_sys_ioctl(fd, req, arg); /* the open file's business */
	} else {
		rc = -ENOTTY; /* checked below, outside our lock */
	}
	rsk_conn_unlock(c);
	if (rc == -ENOTTY) { /* interface and socket-generic requests: as any TCP socket */
		pthread_mutex_lock(&rsk_opt_lock);
		v = rsk_opt_template(c->domain);
		rc = v < 0 ? v : rsk_sys_ioctl(v, req, arg);
		pthread_mutex_unlock(&rsk_opt_lock);
	}
	rsk_sock_put(s);
	return rc;
}

/* ---- fds that are not accelerated: a relay's stand-in answers for its TCP socket ---- */

/* The TCP address stand-in unix socket @fd carries (its own name, or with @peer its
 * partner's) in *@out: its length, or 0 when @fd is no stand-in (base/addr.h). @known
 * (@klen bytes; NULL: none) is that side's name as the caller already read it. */
static socklen_t rsk_opt_standin(int fd, int peer, const struct sockaddr *known, socklen_t klen,
				 struct sockaddr_storage *out)
{
	struct sockaddr_storage name[2], tcp[2];
	socklen_t len[2] = {sizeof(name[0]), sizeof(name[1])}, tl[2], cl = sizeof(struct ucred);
	struct ucred cr;
	int i, rc;

	/* Anyone may bind a unix socket to a name of our form and connect to a program's unix
	 * listener, whose getpeername would then claim any TCP address. Ours are pairs: both
	 * ends carry such names, and their creator is this user or root (an exec'd inetd job
	 * may have dropped root's privileges). */
	for (i = 0; i < 2; i++) {
		if (known != NULL && i == (peer != 0) && klen <= sizeof(name[i])) {
			memcpy(&name[i], known, klen);
			len[i] = klen;
			continue;
		}
		rc = i ? rsk_sys_getpeername(fd, (struct sockaddr *)&name[i], &len[i])
		       : rsk_sys_getsockname(fd, (struct sockaddr *)&name[i], &len[i]);
		if (rc < 0)
			return 0;
	}
	for (i = 0; i < 2; i++)
		if ((tl[i] = rsk_addr_name_parse((struct sockaddr *)&name[i], len[i], &tcp[i],
						 NULL)) == 0)
			return 0;
	if (rsk_sys_getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
	    (cr.uid != 0 && cr.uid != geteuid()))
		return 0;
	*out = tcp[peer != 0];
	return tl[peer != 0];
}

/*
 * TCP options set on stand-ins, so that they read back as set: a small table per process,
 * keyed by the stand-in's unique name (which no other socket has while it lives), the
 * oldest entry reused when it is full. An exec'd program starts with none.
 */
#define RSK_OPT_STANDIN_MAX 64

struct rsk_opt_standin_set {
	uint64_t uniq;
	int level, name;
	socklen_t len;
	unsigned char val[32];
};

static struct rsk_opt_standin_set rsk_opt_sset[RSK_OPT_STANDIN_MAX];
static unsigned int rsk_opt_nsset;

/* Lock held. */
static struct rsk_opt_standin_set *rsk_opt_sset_find(uint64_t uniq, int level, int name)
{
	unsigned int i, n = rsk_opt_nsset < RSK_OPT_STANDIN_MAX ? rsk_opt_nsset
								 : RSK_OPT_STANDIN_MAX;

	for (i = 0; i < n; i++)
		if (rsk_opt_sset[i].uniq == uniq && rsk_opt_sset[i].level == level &&
		    rsk_opt_sset[i].name == name)
			return &rsk_opt_sset[i];
	return NULL;
}

static void rsk_opt_sset_keep(uint64_t uniq, int level, int name, const void *val,
			      socklen_t len)
{
	struct rsk_opt_standin_set *e;

	if (len > sizeof(e->val))
		return;
	pthread_mutex_lock(&rsk_opt_lock);
	e = rsk_opt_sset_find(uniq, level, name);
	if (e == NULL)
		e = &rsk_opt_sset[rsk_opt_nsset++ % RSK_OPT_STANDIN_MAX];
	e->uniq = uniq;
	e->level = level;
	e->name = name;
	e->len = len;
	memcpy(e->val, val, len);
	pthread_mutex_unlock(&rsk_opt_lock);
}

/* What was set on stand-in @uniq, answered into @val: 1, or 0 when nothing was. */
static int rsk_opt_sset_get(uint64_t uniq, int level, int name, void *val, socklen_t *len,
			    int *rc)
{
	struct rsk_opt_standin_set e, *k;

	pthread_mutex_lock(&rsk_opt_lock);
	k = rsk_opt_sset_find(uniq, level, name);
	if (k != NULL)
		e = *k;
	pthread_mutex_unlock(&rsk_opt_lock);
	if (k == NULL)
		return 0;
	*rc = rsk_opt_out(val, len, e.val, e.len);
	return 1;
}

/* Only an abstract unix name can be a stand-in's: the kernel's answer @a (@room bytes of
 * buffer, @n reported) tells, so other sockets cost no second call. */
static int rsk_opt_maybe_standin(const struct sockaddr *a, socklen_t room, socklen_t n)
{
	const socklen_t first = offsetof(struct sockaddr_un, sun_path) + 1;

	return room >= first && n > first && a->sa_family == AF_UNIX &&
	       ((const struct sockaddr_un *)a)->sun_path[0] == 0;
}

/*
 * The TCP address in the kernel's answer @a (@n bytes, whole) for side @peer of stand-in
 * @fd that this process noted (base/standin.h), in *@out: its length, or 0 when @fd has no
 * note or the name is not the one noted (a number reused behind our back). The note stands
 * for the checks rsk_opt_standin makes: they were made when the socket was.
 */
static socklen_t rsk_opt_standin_noted(int fd, int peer, const struct sockaddr *a, socklen_t n,
				       struct sockaddr_storage *out)
{
	struct rsk_standin si;
	socklen_t tl;
	uint64_t uniq;

	if (!rsk_standin_get(fd, &si) ||
	    (tl = rsk_addr_name_parse(a, n, out, &uniq)) == 0 ||
	    uniq != (peer ? si.peer : si.own) || out->ss_family != si.family)
		return 0;
	return tl;
}

int rsk_opt_plain_name(int fd, struct sockaddr *addr, socklen_t *len, int peer)
{
	struct sockaddr_storage tcp;
	socklen_t room, n, shown;
	int kfd = rsk_face_kfd(fd), rc; /* a listener's face: its TCP listener answers */

	if (addr == NULL || len == NULL) /* the kernel's EFAULT */
		return peer ? rsk_sys_getpeername(kfd, addr, len)
			    : rsk_sys_getsockname(kfd, addr, len);
	room = *len;
	rc = peer ? rsk_sys_getpeername(kfd, addr, len) : rsk_sys_getsockname(kfd, addr, len);
	if (rc < 0 || !rsk_opt_maybe_standin(addr, room, *len))
		return rc;
	/* (the kernel's whole answer, unless the room cut it: that side is not asked again) */
	n = room >= *len ? rsk_opt_standin_noted(fd, peer, addr, *len, &tcp) : 0;
	if (n == 0)
		n = rsk_opt_standin(fd, peer, room >= *len ? addr : NULL, *len, &tcp);
	if (n == 0)
		return rc;
	/* The unix name the kernel wrote is longer than any TCP address: clear its tail. */
	shown = room < *len ? room : *len;
	memcpy(addr, &tcp, room < n ? room : n);
	if (shown > n)
		memset((char *)addr + n, 0, shown - n);
	*len = n;
	return 0;
}

/* Levels a unix socket refuses (EOPNOTSUPP) and a TCP socket has. */
static int rsk_opt_tcp_level(int level)
{
	return level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6;
}

/* The unique part of @fd's partner's stand-in name in *@uniq: 0, or -1 when it has none. */
static int rsk_opt_standin_peer_uniq(int fd, uint64_t *uniq)
{
	struct sockaddr_storage name, tcp;
	socklen_t len = sizeof(name);

	if (rsk_sys_getpeername(fd, (struct sockaddr *)&name, &len) < 0 ||
	    rsk_addr_name_parse((struct sockaddr *)&name, len, &tcp, uniq) == 0)
		return -1;
	return 0;
}

/*
 * The family stand-in @fd speaks for by its own name, 0 if it is none; in *@key (if not
 * NULL) what tells its connection apart: its own name's unique part, or its client's for a
 * socket a rendezvous accepted (whose own name all its siblings share). Enough for the
 * answers that claim no address (a connect again's EISCONN, TCP options, SO_DOMAIN): a
 * socket's own name is given by its process, and only ours (a bearer's or relay's end, or a
 * rendezvous's accepted socket) carry names of our form. rsk_opt_standin's checks of the
 * partner and its creator guard a peer's claimed address, and cost two more system calls:
 * on every TCP option a server sets on a bearer connection (redis-server: four per
 * connection, 16 system calls where TCP makes 4). A stand-in this process noted needs none
 * (base/standin.h).
 */
static int rsk_opt_standin_family(int fd, uint64_t *key)
{
	struct sockaddr_storage name, tcp;
	socklen_t len = sizeof(name);
	struct rsk_standin si;
	uint64_t own;

	if (rsk_standin_get(fd, &si)) {
		if (key != NULL)
			*key = rsk_bearer_rdv_uniq(si.own) ? si.peer : si.own;
		return si.family;
	}
	if (rsk_sys_getsockname(fd, (struct sockaddr *)&name, &len) < 0 ||
	    rsk_addr_name_parse((struct sockaddr *)&name, len, &tcp, &own) == 0)
		return 0;
	if (key != NULL && rsk_bearer_rdv_uniq(own) && rsk_opt_standin_peer_uniq(fd, &own) < 0)
		return 0;
	if (key != NULL)
		*key = own;
	return tcp.ss_family;
}

int rsk_opt_plain_is_standin(int fd)
{
	return rsk_opt_standin_family(fd, NULL) != 0;
}

int rsk_opt_plain_connect_err(int fd, int err)
{
	return err == -EINVAL && rsk_opt_plain_is_standin(fd) ? -EISCONN : err;
}

void rsk_opt_standin_adopt(int fd, const struct rsk_sock_newopts *o)
{
	struct rsk_opt_verdict v;
	uint64_t uniq;
	int i, fam;

	if (o == NULL || (fam = rsk_opt_standin_family(fd, &uniq)) == 0)
		return;
	for (i = 0; i < o->n; i++) {
		if (!rsk_opt_tcp_level(o->o[i].level))
			(void)rsk_sys_setsockopt(fd, o->o[i].level, o->o[i].name, o->o[i].val,
						 o->o[i].len);
		else if (rsk_opt_verdict(fam, o->o[i].level, o->o[i].name, o->o[i].val, o->o[i].len,
					 &v) == 0 && v.elen > 0)
			rsk_opt_sset_keep(uniq, o->o[i].level, o->o[i].name, v.eff, v.elen);
	}
}

void rsk_opt_standin_inherit(int fd, int lfd)
{
	unsigned char val[32];
	socklen_t len;
	int fam;
	size_t i;

	if ((fam = rsk_opt_standin_family(fd, NULL)) == 0)
		return;
	for (i = 0; i < RSK_OPT_CARRIED; i++) {
		int level = rsk_opt_carried[i].level, name = rsk_opt_carried[i].name;

		len = sizeof(val);
		if (!rsk_opt_carried_read(lfd, fam, i, val, &len))
			continue;
		rsk_opt_buf_as_set(level, name, val, len); /* (read back doubled) */
		(void)rsk_opt_plain_set(fd, level, name, val, len);
	}
}

void rsk_opt_standin_nodelay(int fd, int lfd)
{
	socklen_t len = sizeof(int);
	int v = 0;

	if (rsk_sys_getsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v)
		(void)rsk_opt_plain_set(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v));
}

int rsk_opt_plain_get(int fd, int level, int name, void *val, socklen_t *len)
{
	int rc = rsk_sys_getsockopt(rsk_face_kfd(fd), level, name, val, len), fam;
	uint64_t uniq;

	if (level == SOL_SOCKET && (name == SO_DOMAIN || name == SO_PROTOCOL)) {
		if (rc < 0 || (fam = rsk_opt_standin_family(fd, NULL)) == 0)
			return rc;
		return rsk_opt_int(val, len, name == SO_DOMAIN ? fam : IPPROTO_TCP);
	}
	if (rc != -EOPNOTSUPP || !rsk_opt_tcp_level(level) ||
	    (fam = rsk_opt_standin_family(fd, &uniq)) == 0)
		return rc;
	if (rsk_opt_sset_get(uniq, level, name, val, len, &rc))
		return rc;
	/* Nothing set on it: what a TCP socket of the family says. */
	return rsk_opt_default(fam, level, name, val, len);
}

int rsk_opt_plain_set(int fd, int level, int name, const void *val, socklen_t len)
{
	struct rsk_opt_verdict v;
	int rc = rsk_sys_setsockopt(rsk_face_kfd(fd), level, name, val, len), fam, on;
	uint64_t uniq;

	/* Kept on the socket, so that its setup need not ask (the kernel read an int). */
	if (rc == 0 && rsk_opt_tcp_level(level) && (name == TCP_NODELAY || name == TCP_CORK) &&
	    val != NULL && len >= sizeof(int)) {
		memcpy(&on, val, sizeof(on));
		rsk_sock_opt_seen(fd, name, on != 0);
	}
	/* (on a new socket: a bearer sets it again, or connects over TCP; see sock.h) */
	if (rc == 0)
		rsk_sock_opt_new(fd, level, name, val, len);
	if (rc == 0 && rsk_opt_carried_index(level, name) >= 0)
		rsk_sock_opt_carried(fd);
	if (rc != -EOPNOTSUPP || !rsk_opt_tcp_level(level) ||
	    (fam = rsk_opt_standin_family(fd, &uniq)) == 0)
		return rc;
	/* The relay's stream carries the bytes: a TCP option has nothing to act on, and is
	 * accepted or refused as a TCP socket of the family would, and reads back so. */
	if (val == NULL && len > 0)
		return -EFAULT;
	if (len > sizeof(v.key.val))
		return -EINVAL;
	rc = rsk_opt_verdict(fam, level, name, val, len, &v);
	if (rc == 0 && v.elen > 0)
		rsk_opt_sset_keep(uniq, level, name, v.eff, v.elen);
	return rc;
}
