/*
 * The user-space fast path of poll, ppoll, select and pselect (see pollfast.h). A shm
 * connection in the set that only our waits see (one fd number, one process, no relay, not
 * eager for good, not an epoll mirror's candidate) is made lazy (conn.h) and answered from
 * its ring: readable -> POLLIN|POLLRDNORM, writable -> POLLOUT|POLLWRNORM|POLLWRBAND. A
 * connection past its plain state (EOF, reset, shutdown, hang-up) goes eager for good and the
 * kernel answers it, as in the epoll fast path. Kernel fds in the set are asked by a
 * zero-timeout real poll by the fairness rule below; before any real poll that may sleep,
 * every lazy connection waiting for input is made exact (its stale token taken back), so the
 * kernel object is exact exactly when someone sleeps on it. select and pselect run as a poll
 * of the same fds.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/fdtab.h"
#include "base/policy.h"
#include "base/real.h"
#include "base/sys.h"
#include "conn/conn.h"
#include "fastwait.h"
#include "pollfast.h"
#include "sock/sock.h"
#include "upgrade.h"

/*
 * Fairness, as the epoll fast path's: a first look asks the kernel (a zero-timeout real
 * poll of the whole set) once RSK_PF_FAIR_RETURNS answers from user space or RSK_PF_FAIR_US
 * have passed since the set's last real look; a spin asks it every RSK_PF_FAIR_US (or at once
 * when an eager connection of ours may have news); a look that finds nothing in user space
 * asks it at once when the set holds kernel fds. A set is known by its array and length,
 * per thread (the last RSK_PF_FAIR_SETS of them): an unknown set starts with a real look.
 */
#define RSK_PF_FAIR_RETURNS 16
#define RSK_PF_FAIR_US 1000
#define RSK_PF_FAIR_SETS 4
#define RSK_PF_SPIN_YIELD_US 20
#define RSK_PF_CLOCK_EVERY 8
/* Lazy fds kept on the stack; past RSK_PF_MAX_LAZY a scan costs more than the call saved. */
#define RSK_PF_STACK 16
#define RSK_PF_MAX_LAZY 256
#define RSK_PF_SEL_STACK 64
/* What only the kernel object reports exactly (the peer went, the fd is bad). */
#define RSK_PF_KERNEL_BITS (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)

struct rsk_pf_fair {
	const void *key;
	nfds_t n;
	unsigned int fast; /* user-space answers since the last real look */
	int64_t real_us;   /* the last real look */
};

static __thread struct rsk_pf_fair rsk_pf_fairs[RSK_PF_FAIR_SETS];
static __thread unsigned int rsk_pf_fair_next;

struct rsk_pf_slot {
	nfds_t i;           /* its index in the set */
	struct rsk_sock *s; /* reference held for the wait; NULL once the kernel answers it */
};

struct rsk_pf {
	struct pollfd *fds;
	nfds_t n;
	struct rsk_pf_slot *lz; /* the lazy fds */
	int nlz, cap;
	int nkernel; /* fds (>= 0) the kernel answers */
	int eager;   /* some of them are connections of ours: a spin asks when they may have news */
	struct rsk_pf_fair *fair;
	int64_t end_us; /* the deadline (0: none) */
	const sigset_t *mask;
};

static struct rsk_pf_fair *rsk_pf_fair_of(const void *key, nfds_t n)
{
	struct rsk_pf_fair *f;
	int i;

	for (i = 0; i < RSK_PF_FAIR_SETS; i++)
		if (rsk_pf_fairs[i].key == key && rsk_pf_fairs[i].n == n)
			return &rsk_pf_fairs[i];
	f = &rsk_pf_fairs[rsk_pf_fair_next++ % RSK_PF_FAIR_SETS];
	memset(f, 0, sizeof(*f)); /* real_us 0: the first look is real */
	f->key = key;
	f->n = n;
	return f;
}

/* ---- which fds are answered from user space ---- */

/*
 * May a wait on @fd answer @s's connection from user space? Then it is lazy from now on
 * (turned so here if it was not). An epoll mirror's candidate (lazy, not by us) keeps today's
 * rule: a poll makes it eager (the caller's rsk_fw_fd_shared).
 */
static int rsk_pf_lazy(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;
	int ok;

	/* io_uring was set up (the ring polls fds where no preload sees it): never */
	if (c == NULL || s->nfds != 1 || __atomic_load_n(&c->holders, __ATOMIC_ACQUIRE) != 1 ||
	    rsk_policy_is_kernel_only())
		return 0;
	if (__atomic_load_n(&c->lazy, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&c->lazy_poll, __ATOMIC_RELAXED) > 0)
		return 1; /* decided (a look rechecks `lazy` under the lock): no lock per wait */
	rsk_conn_lock(c);
	if (!rsk_conn_can_lazy(c))
		__atomic_store_n(&c->lazy_poll, -1, __ATOMIC_RELAXED); /* for good (the transport, or a relay): never asked again */
	ok = !c->lazy_never && rsk_conn_can_lazy(c) && c->lazy_poll >= 0 &&
	     (!c->lazy || c->lazy_poll > 0);
	if (ok && !c->lazy) {
		/* first: the taint hooks (dup, fork, SCM_RIGHTS, stdio, io_uring) run from now */
		__atomic_store_n(&rsk_fw_active, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&c->lazy_poll, 1, __ATOMIC_RELAXED);
		rsk_conn_set_lazy(c, fd, 1);
		ok = c->lazy;
	}
	rsk_conn_unlock(c);
	return ok;
}

void rsk_pf_adopt(struct rsk_sock *s, int fd)
{
	if (rsk_config.fastwait)
		(void)rsk_pf_lazy(s, fd);
}

/* Room for one more lazy fd (the stack first, then one allocation for the set). */
static int rsk_pf_room(struct rsk_pf *p)
{
	struct rsk_pf_slot *t;
	int cap;

	if (p->nlz < p->cap)
		return 1;
	cap = p->n < RSK_PF_MAX_LAZY ? (int)p->n : RSK_PF_MAX_LAZY;
	if (p->cap != RSK_PF_STACK || cap <= p->cap) /* allocated once already, and full */
		return 0;
	if ((t = malloc(sizeof(*t) * (size_t)cap)) == NULL)
		return 0;
	memcpy(t, p->lz, sizeof(*t) * (size_t)p->nlz);
	p->lz = t;
	p->cap = cap;
	return 1;
}

static void rsk_pf_release(struct rsk_pf *p, struct rsk_pf_slot *stack)
{
	int k;

	for (k = 0; k < p->nlz; k++)
		if (p->lz[k].s != NULL)
			rsk_sock_put(p->lz[k].s);
	if (p->lz != stack)
		free(p->lz);
}

/* Sort the set's fds into lazy ones (references taken) and the kernel's. */
static void rsk_pf_classify(struct rsk_pf *p, struct rsk_pf_slot *stack)
{
	struct rsk_sock *s;
	nfds_t i;
	int fd;

	p->lz = stack;
	p->cap = RSK_PF_STACK;
	for (i = 0; i < p->n; i++) {
		fd = p->fds[i].fd;
		if (fd < 0)
			continue;
		s = NULL;
		if (rsk_fdtab_is_accel(rsk_fdtab_load(fd)) && (s = rsk_sock_get(fd)) != NULL &&
		    rsk_pf_room(p) && rsk_pf_lazy(s, fd)) {
			p->lz[p->nlz].i = i;
			p->lz[p->nlz++].s = s;
			continue;
		}
		if (s != NULL) {
			rsk_sock_put(s);
			p->eager = 1;
		}
		p->nkernel++;
		if (__atomic_load_n(&rsk_fw_active, __ATOMIC_RELAXED))
			rsk_fw_fd_shared(fd); /* the kernel answers it: nothing lazy behind it */
	}
}

/* ---- looking ---- */

/*
 * The user-space answer for lazy fd @z, or -1 when only the kernel can say from now on (its
 * connection went eager, or is ending): then its app end is exact for good, and it is one
 * of the kernel's fds.
 */
static int rsk_pf_user_one(struct rsk_pf *p, struct rsk_pf_slot *z)
{
	struct pollfd *pf = &p->fds[z->i];
	struct rsk_conn *c = z->s->conn;
	int ev = -1, fd;

	if (c != NULL) {
		rsk_conn_lock(c);
		fd = rsk_sock_call_fd(z->s, pf->fd);
		/* (closed under the poll: the kernel answers its number from now on, as it would) */
		if (c->lazy && fd == pf->fd)
			ev = rsk_conn_fast_events(c, fd);
		if (ev < 0) {
			__atomic_store_n(&c->lazy_never, 1, __ATOMIC_RELAXED);
			rsk_conn_set_lazy(c, fd, 0);
		}
		rsk_conn_unlock(c);
	}
	if (ev >= 0)
		return ev & (pf->events | POLLERR | POLLHUP);
	rsk_sock_put(z->s);
	z->s = NULL;
	p->nkernel++;
	return -1;
}

/* Every lazy fd from user space, the kernel's fds reported as nothing; *@became: one became
 * the kernel's. Returns how many fds are ready. */
static int rsk_pf_look_user(struct rsk_pf *p, int *became)
{
	struct rsk_pf_slot *z;
	int k, got, ready = 0;
	nfds_t i;

	for (i = 0; i < p->n; i++)
		p->fds[i].revents = 0;
	for (k = 0; k < p->nlz; k++) {
		z = &p->lz[k];
		if (z->s == NULL)
			continue;
		got = rsk_pf_user_one(p, z);
		if (got < 0) {
			*became = 1;
			continue;
		}
		p->fds[z->i].revents = (short)got;
		ready += got != 0;
	}
	return ready;
}

/*
 * After a real poll filled the revents: a lazy fd's report is replaced by the user-space
 * answer (its token may be stale), unless it carries what only the kernel knows (the peer
 * went). Returns how many fds are ready; *@became as above (its report is from before its
 * app end was made exact: ask again).
 */
static int rsk_pf_merge(struct rsk_pf *p, int *became)
{
	struct rsk_pf_slot *z;
	struct pollfd *pf;
	int k, got, ready = 0;
	nfds_t i;

	for (k = 0; k < p->nlz; k++) {
		z = &p->lz[k];
		pf = &p->fds[z->i];
		if (z->s == NULL)
			continue;
		if (pf->revents & RSK_PF_KERNEL_BITS) {
			if (z->s->conn != NULL)
				rsk_conn_saw_events(z->s->conn, pf->fd, pf->revents);
			continue;
		}
		got = rsk_pf_user_one(p, z);
		if (got < 0)
			*became = 1;
		else
			pf->revents = (short)got;
	}
	for (i = 0; i < p->n; i++)
		ready += p->fds[i].revents != 0;
	return ready;
}

static void rsk_pf_was_real(struct rsk_pf *p)
{
	p->fair->real_us = rsk_now_us();
	p->fair->fast = 0;
}

/* A zero-timeout real poll of the whole set, merged. A count or -errno. */
static int rsk_pf_look_real(struct rsk_pf *p)
{
	int rc, tries, became;

	for (tries = 0; tries < 2; tries++) { /* a second only for an fd that just became exact */
		rc = rsk_sys_poll(p->fds, p->n, 0);
		if (rc < 0)
			return rc;
		became = 0;
		rc = rsk_pf_merge(p, &became);
		if (!became)
			break;
	}
	rsk_pf_was_real(p);
	return rc;
}

/*
 * A wait's first look: the kernel when the fairness rule says so, else user space, and the
 * kernel after all when user space found nothing and no spin or sleep follows (@defer 0)
 * while kernel fds are in the set (or it is RSK_PF_FAIR_US since the last real look: a lazy
 * fd's peer may have gone, which only the kernel says), or a lazy fd just became the
 * kernel's.
 */
static int rsk_pf_first(struct rsk_pf *p, int defer)
{
	int64_t now = rsk_now_us();
	int n, became = 0, due = now - p->fair->real_us >= RSK_PF_FAIR_US;

	if (p->nkernel > 0 && (due || p->fair->fast >= RSK_PF_FAIR_RETURNS))
		return rsk_pf_look_real(p);
	n = rsk_pf_look_user(p, &became);
	if (became || (n == 0 && !defer && (p->nkernel > 0 || due)))
		return rsk_pf_look_real(p);
	if (n > 0)
		p->fair->fast++;
	return n;
}

/* Spin up to RDMASOCK_SPIN_US (and the deadline) with user-space looks, the kernel's by the
 * fairness rule, a yield every RSK_PF_SPIN_YIELD_US. A count or -errno; 0 when it ran out. */
static int rsk_pf_spin(struct rsk_pf *p)
{
	int64_t start = rsk_now_us(), now = start, yielded = start, budget = rsk_config.spin_us;
	unsigned int rounds = 0;
	int n, became;

	if (p->end_us != 0 && p->end_us - start < budget)
		budget = p->end_us - start;
	while (now - start < budget) {
		rsk_cpu_relax();
		if ((++rounds % RSK_PF_CLOCK_EVERY) == 0)
			now = rsk_now_us();
		became = 0;
		n = rsk_pf_look_user(p, &became);
		if (n == 0 &&
		    (became || now - p->fair->real_us >= RSK_PF_FAIR_US ||
		     (p->nkernel > 0 && rsk_conn_harvest_quiet()) ||
		     (p->eager && rsk_conn_any_arrival())))
			n = rsk_pf_look_real(p);
		if (n != 0)
			return n;
		if (now - yielded >= RSK_PF_SPIN_YIELD_US) {
			sched_yield(); /* the peer may be waiting for our core */
			yielded = now;
		}
	}
	return 0;
}

/*
 * Before a sleep: every lazy fd that waits for input gets an exact app end (a stale token
 * would end the sleep at once), as a blocking recv does before its sleep. 1 when one is
 * readable after all (nothing taken then: look instead of sleeping).
 */
static int rsk_pf_exact(struct rsk_pf *p)
{
	struct rsk_pf_slot *z;
	struct rsk_conn *c;
	int k, rc;

	for (k = 0; k < p->nlz; k++) {
		z = &p->lz[k];
		if (z->s == NULL || !(p->fds[z->i].events & (POLLIN | POLLRDNORM)) ||
		    (c = z->s->conn) == NULL)
			continue;
		rsk_conn_lock(c);
		rc = rsk_conn_exact(c, rsk_sock_call_fd(z->s, p->fds[z->i].fd));
		rsk_conn_unlock(c);
		if (rc)
			return 1;
	}
	return 0;
}

/*
 * Sleep in the kernel on the whole set (under the caller's mask) until a report survives the
 * merge, the deadline, or a signal. Data that comes after the app ends were made exact finds
 * them EMPTY, so its sender writes a token, which the level-triggered sleep sees.
 */
static int rsk_pf_sleep(struct rsk_pf *p)
{
	struct timespec ts, *tp;
	int64_t left;
	int rc, n, became;

	for (;;) {
		became = 0;
		if (rsk_pf_exact(p) && (n = rsk_pf_look_user(p, &became)) > 0 && !became)
			return n;
		if (became)
			return rsk_pf_look_real(p);
		tp = NULL;
		if (p->end_us != 0) {
			left = p->end_us - rsk_now_us();
			left = left > 0 ? left : 0;
			ts.tv_sec = (time_t)(left / 1000000);
			ts.tv_nsec = (long)(left % 1000000) * 1000;
			tp = &ts;
		}
		rsk_conn_sleep_begin(); /* quiet endpoints armed and harvested */
		rc = (int)rsk_sys_ret(RSK_REAL(ppoll)(p->fds, p->n, tp, p->mask));
		rsk_conn_sleep_end();
		if (rc <= 0)
			return rc; /* the timeout, or an error (EINTR) the application must see */
		n = rsk_pf_merge(p, &became);
		rsk_pf_was_real(p);
		if (became)
			return rsk_pf_look_real(p);
		if (n > 0)
			return n;
		if (p->end_us != 0 && rsk_now_us() >= p->end_us)
			return 0; /* only stale tokens woke us, and the time is up */
	}
}

int rsk_pf_poll(struct pollfd *fds, nfds_t n, int64_t timeout_us, const sigset_t *mask,
		int *res)
{
	struct rsk_pf_slot stack[RSK_PF_STACK];
	struct rsk_pf p;
	int r;

	if (!rsk_config.fastwait || __atomic_load_n(&rsk_conn_live, __ATOMIC_RELAXED) == 0 ||
	    fds == NULL || n == 0)
		return 0;
	memset(&p, 0, sizeof(p));
	p.fds = fds;
	p.n = n;
	p.mask = mask;
	rsk_pf_classify(&p, stack);
	if (p.nlz == 0) {
		rsk_pf_release(&p, stack);
		return 0; /* the kernel answers every fd: the wait as before */
	}
	rsk_conn_push_all(); /* the application waits: nothing of ours may stay staged */
	(void)rsk_conn_harvest_quiet();
	p.fair = rsk_pf_fair_of(fds, n);
	p.end_us = timeout_us > 0 ? rsk_now_us() + timeout_us : 0;
	r = rsk_pf_first(&p, timeout_us != 0);
	if (r == 0 && timeout_us != 0 && rsk_config.spin_us != 0)
		r = rsk_pf_spin(&p);
	if (r == 0 && timeout_us != 0) {
		if (p.end_us == 0 || rsk_now_us() < p.end_us)
			r = rsk_pf_sleep(&p);
		else /* spun out the timeout: its "nothing" must hold for the kernel's fds too */
			r = rsk_pf_look_real(&p);
	}
	rsk_pf_release(&p, stack);
	*res = r;
	return 1;
}

/* ---- a TCP-first socket in the middle of its move ---- */

/* What a move's FIN shows on the TCP side (the peer's FIN; with ours, the hang-up). */
#define RSK_PF_MOVE_BITS (POLLIN | POLLRDNORM | POLLHUP | POLLRDHUP)

int rsk_pf_settle(struct pollfd *fds, nfds_t n, int64_t end_us, int *count)
{
	int moved = 0, rc;
	nfds_t i;

	if (!rsk_upg_any_moving())
		return 0;
	for (i = 0; i < n; i++) {
		if (fds[i].fd < 0 || !(fds[i].revents & RSK_PF_MOVE_BITS))
			continue;
		rc = rsk_upg_settle_fd(fds[i].fd, end_us);
		moved |= rc == RSK_UPG_SETTLE_MOVED;
		if (rc != RSK_UPG_SETTLE_HIDE)
			continue;
		fds[i].revents &= (short)~RSK_PF_MOVE_BITS; /* not readable yet */
		if (fds[i].revents == 0)
			(*count)--;
	}
	return moved;
}

int rsk_pf_sel_settle(int n, fd_set *r, int64_t end_us, int *count)
{
	int fd, moved = 0, rc;

	if (r == NULL || !rsk_upg_any_moving())
		return 0;
	if (n > FD_SETSIZE)
		n = FD_SETSIZE;
	for (fd = 0; fd < n; fd++) { /* (select reports a hang-up as readable) */
		if (!FD_ISSET(fd, r))
			continue;
		rc = rsk_upg_settle_fd(fd, end_us);
		moved |= rc == RSK_UPG_SETTLE_MOVED;
		if (rc == RSK_UPG_SETTLE_HIDE) {
			FD_CLR(fd, r); /* not readable yet */
			(*count)--;
		}
	}
	return moved;
}

/* ---- select as a poll ---- */

#define RSK_PF_SEL_IN (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define RSK_PF_SEL_OUT (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)

static int rsk_pf_in(const fd_set *set, int fd)
{
	return set != NULL && FD_ISSET(fd, set);
}

/* The fds of the sets as a poll set (NULL: none is a connection of ours, or no memory). */
static struct pollfd *rsk_pf_sel_fds(int n, fd_set *r, fd_set *w, fd_set *e,
				     struct pollfd *stack, nfds_t *cnt)
{
	struct pollfd *fds = stack;
	int fd, any = 0;
	nfds_t k = 0;

	for (fd = 0; fd < n; fd++)
		if (rsk_pf_in(r, fd) || rsk_pf_in(w, fd) || rsk_pf_in(e, fd)) {
			k++;
			any |= rsk_fdtab_is_accel(rsk_fdtab_load(fd));
		}
	if (!any)
		return NULL;
	if (k > RSK_PF_SEL_STACK && (fds = malloc(sizeof(*fds) * k)) == NULL)
		return NULL;
	*cnt = k;
	for (fd = 0, k = 0; fd < n; fd++) {
		short ev = (short)((rsk_pf_in(r, fd) ? POLLIN : 0) | (rsk_pf_in(w, fd) ? POLLOUT : 0) |
				   (rsk_pf_in(e, fd) ? POLLPRI : 0));

		if (ev != 0)
			fds[k++] = (struct pollfd){.fd = fd, .events = ev};
	}
	return fds;
}

/* The bits of fds [@base, @base + 64) of @set (glibc's layout: fd / 64 -> word, fd % 64
 * -> bit), 0 for no set. */
static uint64_t rsk_pf_word(const fd_set *set, int base)
{
	uint64_t v = 0;

	if (set != NULL)
		memcpy(&v, (const char *)set + base / 8, sizeof(v));
	return v;
}

/* A word at a time, so that a select of a few kernel fds costs a few table loads. */
int rsk_pf_sel_has_ours(int n, const fd_set *r, const fd_set *w, const fd_set *e)
{
	uint64_t bits;
	int base;

	if (rsk_fw_any_mirror())
		return 1;
	if (n > FD_SETSIZE)
		n = FD_SETSIZE;
	for (base = 0; base < n; base += 64) {
		bits = rsk_pf_word(r, base) | rsk_pf_word(w, base) | rsk_pf_word(e, base);
		if (n - base < 64)
			bits &= ((uint64_t)1 << (n - base)) - 1; /* only fds below n */
		for (; bits != 0; bits &= bits - 1)
			if (rsk_fdtab_is_accel(rsk_fdtab_load(base + __builtin_ctzll(bits))))
				return 1;
	}
	return 0;
}

/* The poll's answer written back into the sets as select does; a count, or -EBADF. */
static int rsk_pf_sel_sets(const struct pollfd *fds, nfds_t cnt, fd_set *r, fd_set *w,
			   fd_set *e)
{
	int ready = 0;
	nfds_t k;

	for (k = 0; k < cnt; k++)
		if (fds[k].revents & POLLNVAL)
			return -EBADF;
	for (k = 0; k < cnt; k++) {
		const struct pollfd *pf = &fds[k];

		if (r != NULL)
			FD_CLR(pf->fd, r);
		if (w != NULL)
			FD_CLR(pf->fd, w);
		if (e != NULL)
			FD_CLR(pf->fd, e);
		if ((pf->events & POLLIN) && (pf->revents & RSK_PF_SEL_IN)) {
			FD_SET(pf->fd, r);
			ready++;
		}
		if ((pf->events & POLLOUT) && (pf->revents & RSK_PF_SEL_OUT)) {
			FD_SET(pf->fd, w);
			ready++;
		}
		if ((pf->events & POLLPRI) && (pf->revents & POLLPRI)) {
			FD_SET(pf->fd, e);
			ready++;
		}
	}
	return ready;
}

int rsk_pf_select(int n, fd_set *r, fd_set *w, fd_set *e, int64_t timeout_us,
		  const sigset_t *mask, int *res, int64_t *left_us)
{
	struct pollfd stack[RSK_PF_SEL_STACK], *fds;
	int64_t start;
	nfds_t cnt = 0;
	int rc, handled;

	if (!rsk_config.fastwait || __atomic_load_n(&rsk_conn_live, __ATOMIC_RELAXED) == 0 || n <= 0)
		return 0;
	if (n > FD_SETSIZE)
		n = FD_SETSIZE;
	if ((fds = rsk_pf_sel_fds(n, r, w, e, stack, &cnt)) == NULL)
		return 0;
	start = rsk_now_us();
	handled = rsk_pf_poll(fds, cnt, timeout_us, mask, &rc);
	if (handled) {
		if (rc >= 0)
			rc = rsk_pf_sel_sets(fds, cnt, r, w, e);
		if (left_us != NULL && timeout_us >= 0) {
			*left_us = timeout_us - (rsk_now_us() - start);
			*left_us = *left_us > 0 ? *left_us : 0;
		}
		*res = rc;
	}
	if (fds != stack)
		free(fds);
	return handled;
}
