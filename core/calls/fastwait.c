/*
 * The user-space epoll fast path (see fastwait.h). Each epoll set this process creates gets
 * a mirror of the registrations made through our epoll_ctl. An accelerated connection
 * registered level-triggered, with data no other registration uses, is a lazy candidate:
 * its app end may keep a stale token (conn.h, `lazy`), so the set's waits must answer it
 * from user space, and a real wait's report of it is replaced by the user-space answer.
 * The kernel holds a candidate edge-triggered (the application's events | EPOLLET), so its
 * stale token stays through a sleep; the sleeper is counted in the connection's readiness
 * state and the peer writes one token, an edge, for it (base/ready.h, `sleep`). Everything
 * else in the set is the kernel's, asked by the fairness rule below. A candidate's MOD, DEL
 * and re-ADD are answered here too (rsk_fw_ctl_user), each held back from the kernel until
 * its view can matter; a close takes the number out of the kernel's set before the file can
 * outlive it in a hidden copy of ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/fdtab.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/sys.h"
#include "conn/conn.h"
#include "fastwait.h"
#include "spin.h"
#include "sock/sock.h"
#include "upgrade.h"

int rsk_fw_active;
int rsk_fw_mirrors;
static int rsk_fw_nheld; /* entries whose DEL is held back, in every mirror (atomic) */

/*
 * Fairness: a look asks the kernel (a zero-timeout real wait) once RSK_FW_FAIR_RETURNS
 * answers from user space (at a wait's first look) or RSK_FW_FAIR_US have passed since the
 * set's last real look, whether it is a wait's first look or one of its spin; so while the
 * process is awake (answering lazy connections, or spinning for them) the set's kernel fds (a
 * listener, a pipe, a TCP socket) are reported at most that long past their event. A wait
 * that sleeps needs no look first: its sleep is the kernel's answer. A zero-timeout wait that
 * finds nothing in user space asks the kernel at once (its "nothing" must hold for every fd).
 * RSK_FW_FAIR_US is the bound the busy case always had: spinning between answers is the
 * same busy state, and asking every 10 us of it made more system calls than the messages.
 */
#define RSK_FW_FAIR_RETURNS 16
#define RSK_FW_FAIR_US 1000
#define RSK_FW_CLOCK_EVERY 8
/* Past this many candidates a user-space scan costs more than the system call it saves. */
#define RSK_FW_MAX_CANDIDATES 256

#define RSK_FW_NOT_LT (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)
/* What only the kernel object can report exactly (the connection is past its plain state). */
#define RSK_FW_KERNEL_BITS (EPOLLERR | EPOLLHUP | EPOLLRDHUP | EPOLLPRI)

struct rsk_fw_ent {
	int fd;
	uint32_t events;
	uint64_t data;
	struct rsk_sock *s; /* a lazy candidate (reference held), else NULL */
	unsigned int gen;   /* the look that reported it last */
	int et;             /* the kernel holds it as events | EPOLLET (we set that) */
	uint32_t kev;       /* the events the kernel holds (a MOD answered here leaves them) */
	int held;           /* deleted by the application; the kernel's DEL is held back */
	int joined;         /* its connection counts this set's sleepers (rsk_conn_sleep) */
	int later;          /* not accelerated when added: it may be once its socket moves */
};

struct rsk_fw {
	pthread_mutex_t lock; /* entries and counters; taken before any connection's lock */
	int epfd, dead;
	int users; /* references (atomic): the table's and each caller's */
	struct rsk_fw_ent *ent;
	int n, cap, ncand;
	int sleeping; /* threads between the count of their sleep and its end */
	unsigned int rot, gen, fast_returns;
	unsigned int becomes; /* rsk_sock_becomes() when entries marked later were last tried */
	int64_t real_us; /* the last real look */
	unsigned int spin_hist; /* whether the set's waits' spins pay (rsk_spin_pays) */
	struct rsk_fw *next; /* on the spare list, once its set ended and its last user left */
	/*
	 * Following (atomic; changed under the lock): the entries mirror the set, every ctl is
	 * followed. Else the set holds no candidate and the mirror no entry: a ctl of an fd that
	 * is not accelerated goes by without a lock (rsk_fw_ctl_begin), counted in quiet_ctls
	 * around its real call so that the mirror, to follow again, can wait for those and then
	 * read the set from the kernel (rsk_fw_follow).
	 */
	int follow;
	int quiet_ctls;
	/* Following, and every TCP-first socket's registration in the set recorded in its socket
	 * for a move to replay (rsk_fw_follow records those its quiet ctls left; atomic): a move
	 * need not read this set (rsk_fw_epregs). */
	int recorded;
	unsigned int idle; /* ctls followed since the set last held a candidate */
};

/* A set that held no candidate for this many ctls goes back to not following: re-reading it
 * costs a pass over its registrations, which following costs per ctl anyway (the lookups). */
#define RSK_FW_SPARSE_AFTER 64

/*
 * The mirrors by epoll fd, looked up without a lock: every epoll_ctl, epoll_wait and close of
 * the process looks here, and the lock (twice per lookup, for the reference) was 3 of the 4
 * mutex round trips of each epoll_ctl of a TCP-first socket, the 2 of each epoll_wait that
 * found no candidate and the 1 of each close. Writers (a set made or ended, the table grown)
 * hold rsk_fw_tab_lock. A grown table's old array is kept, chained and never freed: a reader
 * may still be reading it. A mirror whose last user left goes to a spare list for the next
 * set, never to free(): a reader that found it in a slot just before its set ended may still
 * try to take a reference (only while users is not 0; then it checks the slot again).
 */
struct rsk_fw_tab {
	struct rsk_fw_tab *old; /* the array this one replaced */
	int cap;
	struct rsk_fw *m[];
};

static pthread_mutex_t rsk_fw_tab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk_fw_tab *rsk_fw_tab;
static struct rsk_fw *rsk_fw_spares; /* under the table lock */

/* ---- connections going eager ---- */

/*
 * The connection of @s goes eager for good (its app end exact at once). Returns 1 if it was
 * lazy: a mirror may hold it as a candidate, registered edge-triggered (rsk_fw_walk_fd gives
 * the kernel its own events back; without it, that mirror's next look does).
 */
static int rsk_fw_taint_sock(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;
	int was;

	if (c == NULL)
		return 0;
	rsk_conn_lock(c);
	was = c->lazy;
	__atomic_store_n(&c->lazy_never, 1, __ATOMIC_RELAXED);
	rsk_conn_set_lazy(c, fd, 0);
	rsk_conn_unlock(c);
	return was;
}

static int rsk_fw_taint_fd(int fd)
{
	struct rsk_sock *s;
	int was;

	if (!rsk_fdtab_is_accel(rsk_fdtab_load(fd)) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	was = rsk_fw_taint_sock(s, fd);
	rsk_sock_put(s);
	return was;
}

/*
 * The kernel registration of @e: the application's events, | EPOLLET when @et (a candidate:
 * its stale token must not report level-triggered). 0 or -errno. m locked.
 */
static int rsk_fw_rereg(struct rsk_fw *m, struct rsk_fw_ent *e, int et)
{
	struct epoll_event ev = {.events = e->events | (et ? EPOLLET : 0), .data.u64 = e->data};
	int rc;

	if (e->et == et && (!et || e->kev == e->events))
		return 0;
	rc = rsk_sys_epoll_ctl(m->epfd, EPOLL_CTL_MOD, e->fd, &ev);
	if (rc == 0 || !et) {
		e->et = et; /* a MOD back that fails: the registration is gone (a raw DEL/close) */
		e->kev = e->events;
	}
	return rc;
}

/* This set's sleepers count on @e's connection (@on), or no more. m locked. */
static void rsk_fw_join(struct rsk_fw_ent *e, int on)
{
	if (e->s == NULL || e->s->conn == NULL || e->joined == on)
		return;
	rsk_conn_sleep(e->s->conn, on);
	e->joined = on;
}

/*
 * Entry @e stops being a candidate (@taint: and its connection goes eager); @rereg: it stays
 * registered, so the kernel gets the application's own events back (level-triggered), as it
 * answers the fd from now on. m locked.
 */
static void rsk_fw_uncand(struct rsk_fw *m, struct rsk_fw_ent *e, int taint, int rereg)
{
	int fd = e->fd;

	if (e->s == NULL)
		return;
	if (e->held) { /* deleted by the application: the kernel's view matters now */
		(void)rsk_sys_epoll_ctl(m->epfd, EPOLL_CTL_DEL, fd, NULL);
		e->held = 0;
		__atomic_sub_fetch(&rsk_fw_nheld, 1, __ATOMIC_RELAXED);
		e->fd = -1; /* no entry any more: compacted by rsk_fw_compact */
		rereg = 0;
	}
	rsk_fw_join(e, 0);
	if (taint)
		rsk_fw_taint_sock(e->s, fd); /* first: no stale token when the kernel is LT */
	if (rereg)
		(void)rsk_fw_rereg(m, e, 0);
	e->et = 0;
	rsk_sock_put_kept(e->s);
	e->s = NULL;
	m->ncand--;
}

static void rsk_fw_flush_held(struct rsk_fw *m);
static void rsk_fw_compact(struct rsk_fw *m);
static void rsk_fw_close_quiet(struct rsk_fw *m);
int rsk_fw_each_reg(int epfd, int (*fn)(void *arg, int fd, uint32_t ev, uint64_t data),
		    void *arg);
static int rsk_fw_record_one(void *arg, int fd, uint32_t events, uint64_t data);

/* ---- the table of mirrors, by epoll fd ---- */

/* The table's slot for @epfd now, without a lock (NULL: no mirror). */
static struct rsk_fw *rsk_fw_slot(int epfd)
{
	struct rsk_fw_tab *t = __atomic_load_n(&rsk_fw_tab, __ATOMIC_ACQUIRE);

	if (t == NULL || epfd < 0 || epfd >= t->cap)
		return NULL;
	return __atomic_load_n(&t->m[epfd], __ATOMIC_ACQUIRE);
}

/* One past the largest epoll fd the table has room for. */
static int rsk_fw_cap(void)
{
	struct rsk_fw_tab *t = __atomic_load_n(&rsk_fw_tab, __ATOMIC_ACQUIRE);

	return t != NULL ? t->cap : 0;
}

static void rsk_fw_put(struct rsk_fw *m);

/* The lookup under the table lock: the slot's mirror holds the table's reference, so users
 * is not 0 and one more may be taken plainly. */
static struct rsk_fw *rsk_fw_get_locked(int epfd)
{
	struct rsk_fw *m;

	pthread_mutex_lock(&rsk_fw_tab_lock);
	if ((m = rsk_fw_slot(epfd)) != NULL)
		__atomic_add_fetch(&m->users, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&rsk_fw_tab_lock);
	return m;
}

/*
 * @epfd's mirror with a reference, or NULL. Lock-free: a reference is taken only while users
 * is not 0 (a spare's is 0, and spares are never freed, so the memory is a mirror's), and the
 * slot still naming it afterwards proves it is @epfd's and was in the table when taken, as a
 * lookup under the lock would have found it. Else (its set ended, or the number's new set
 * took the slot meanwhile) the lookup under the lock decides.
 */
static struct rsk_fw *rsk_fw_get(int epfd)
{
	struct rsk_fw *m;
	int u;

	if (epfd < 0 || __atomic_load_n(&rsk_fw_mirrors, __ATOMIC_RELAXED) == 0 ||
	    (m = rsk_fw_slot(epfd)) == NULL)
		return NULL;
	u = __atomic_load_n(&m->users, __ATOMIC_RELAXED);
	while (u > 0 && !__atomic_compare_exchange_n(&m->users, &u, u + 1, 1, __ATOMIC_SEQ_CST,
						     __ATOMIC_RELAXED))
		;
	if (u > 0 && rsk_fw_slot(epfd) == m)
		return m;
	if (u > 0)
		rsk_fw_put(m);
	return rsk_fw_get_locked(epfd);
}

/* The next mirror from number *@i on, with a reference (*@i moves past it), or NULL: the
 * walks over every mirror skip the empty slots with a load each. */
static struct rsk_fw *rsk_fw_next(int *i)
{
	struct rsk_fw_tab *t = __atomic_load_n(&rsk_fw_tab, __ATOMIC_ACQUIRE);
	struct rsk_fw *m;

	for (; t != NULL && *i < t->cap; (*i)++) {
		if (__atomic_load_n(&t->m[*i], __ATOMIC_RELAXED) != NULL &&
		    (m = rsk_fw_get(*i)) != NULL) {
			(*i)++;
			return m;
		}
	}
	return NULL;
}

/* The set's last user left: its candidates' references go, and the mirror waits as a spare. */
static void rsk_fw_free(struct rsk_fw *m)
{
	int i;

	for (i = 0; i < m->n; i++)
		rsk_fw_uncand(m, &m->ent[i], 0, 0); /* the set is gone */
	free(m->ent);
	m->ent = NULL;
	m->n = m->cap = 0;
	pthread_mutex_lock(&rsk_fw_tab_lock);
	m->next = rsk_fw_spares;
	rsk_fw_spares = m;
	pthread_mutex_unlock(&rsk_fw_tab_lock);
}

static void rsk_fw_put(struct rsk_fw *m)
{
	if (__atomic_sub_fetch(&m->users, 1, __ATOMIC_ACQ_REL) == 0)
		rsk_fw_free(m);
}

/* Take @epfd's mirror out of the table (@taint: its candidates go eager for good, and the set
 * lives on, so the kernel gets their own events back; else the set is being closed). */
static void rsk_fw_kill(int epfd, int taint)
{
	struct rsk_fw_tab *t;
	struct rsk_fw *m = NULL;
	int i;

	if (__atomic_load_n(&rsk_fw_mirrors, __ATOMIC_RELAXED) == 0 || rsk_fw_slot(epfd) == NULL)
		return; /* not a mirrored set: no lock per fd of every poll, ctl and close */
	pthread_mutex_lock(&rsk_fw_tab_lock);
	t = rsk_fw_tab;
	if ((m = rsk_fw_slot(epfd)) != NULL) {
		__atomic_store_n(&t->m[epfd], NULL, __ATOMIC_RELEASE);
		__atomic_sub_fetch(&rsk_fw_mirrors, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&rsk_fw_tab_lock);
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->dead = 1;
	rsk_fw_close_quiet(m);
	for (i = 0; i < m->n; i++)
		rsk_fw_uncand(m, &m->ent[i], taint, taint);
	m->n = 0;
	pthread_mutex_unlock(&m->lock);
	/* The set lives on unmirrored: what its TCP-first sockets' ctls left unrecorded while it
	 * followed nothing is recorded now, for a move to replay (no mirror lock held: a socket's
	 * lock is taken) */
	if (taint)
		(void)rsk_fw_each_reg(epfd, rsk_fw_record_one, &epfd);
	rsk_fw_put(m); /* the table's reference */
}

/* Room in the table for @epfd (a new array, the old one kept for its readers). 0 or -ENOMEM.
 * Table lock held. */
static int rsk_fw_grow(int epfd)
{
	struct rsk_fw_tab *t, *old = rsk_fw_tab;
	int cap, i;

	if (old != NULL && epfd < old->cap)
		return 0;
	cap = epfd < 64 ? 64 : epfd * 2;
	if ((t = calloc(1, sizeof(*t) + sizeof(t->m[0]) * (size_t)cap)) == NULL)
		return -ENOMEM;
	t->cap = cap;
	t->old = old;
	for (i = 0; old != NULL && i < old->cap; i++)
		t->m[i] = old->m[i];
	__atomic_store_n(&rsk_fw_tab, t, __ATOMIC_RELEASE);
	return 0;
}

/* A mirror for a new set: a spare, or a new one. NULL when out of memory. */
static struct rsk_fw *rsk_fw_new(void)
{
	struct rsk_fw *m;

	pthread_mutex_lock(&rsk_fw_tab_lock);
	if ((m = rsk_fw_spares) != NULL)
		rsk_fw_spares = m->next;
	pthread_mutex_unlock(&rsk_fw_tab_lock);
	if (m == NULL && (m = calloc(1, sizeof(*m))) != NULL)
		pthread_mutex_init(&m->lock, NULL);
	return m;
}

void rsk_fw_created(int epfd)
{
	struct rsk_fw *m;

	if (!rsk_config.fastwait || epfd < 0)
		return;
	rsk_fw_kill(epfd, 1); /* a number reused behind our back (a raw close) */
	if ((m = rsk_fw_new()) == NULL)
		return;
	rsk_upg_set_epregs(rsk_fw_epregs); /* before the first mirror can skip a record */
	/* users is 0 until the mirror is ready: no lock-free reader takes a reference before */
	m->epfd = epfd;
	m->dead = 0;
	m->ncand = m->sleeping = 0;
	m->rot = m->gen = m->fast_returns = 0;
	m->real_us = 0;
	m->spin_hist = 0;
	m->next = NULL;
	m->follow = m->quiet_ctls = m->recorded = 0; /* empty: nothing to follow yet */
	m->idle = 0;
	m->becomes = rsk_sock_becomes();
	__atomic_store_n(&m->users, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&rsk_fw_tab_lock);
	if (rsk_fw_grow(epfd) < 0) {
		pthread_mutex_unlock(&rsk_fw_tab_lock);
		rsk_fw_put(m); /* back to the spares */
		return; /* no mirror: the set's waits are today's, with eager tokens */
	}
	__atomic_store_n(&rsk_fw_tab->m[epfd], m, __ATOMIC_RELEASE);
	__atomic_add_fetch(&rsk_fw_mirrors, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&rsk_fw_active, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&rsk_fw_tab_lock);
}

/* ---- following epoll_ctl ---- */

static struct rsk_fw_ent *rsk_fw_find(struct rsk_fw *m, int fd)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (m->ent[i].fd == fd)
			return &m->ent[i];
	return NULL;
}

/* Another entry with @data: a real report with it could not be told apart. m locked. */
static int rsk_fw_data_clash(struct rsk_fw *m, struct rsk_fw_ent *self, uint64_t data)
{
	int i, clash = 0;

	for (i = 0; i < m->n; i++) {
		if (&m->ent[i] == self || m->ent[i].fd < 0 || m->ent[i].data != data)
			continue;
		if (m->ent[i].held) { /* deleted: no clash, but its DEL must go first */
			rsk_fw_uncand(m, &m->ent[i], 0, 0);
			continue;
		}
		rsk_fw_uncand(m, &m->ent[i], 1, 1);
		clash = 1;
	}
	return clash;
}

static void rsk_fw_remove(struct rsk_fw *m, struct rsk_fw_ent *e)
{
	rsk_fw_uncand(m, e, 0, 0); /* it stays lazy: every wait left on it is still ours */
	*e = m->ent[--m->n];
}

/* A new candidate's kernel registration goes edge-triggered; one that cannot goes eager. */
static int rsk_fw_cand_et(struct rsk_fw *m, struct rsk_fw_ent *e)
{
	if (rsk_fw_rereg(m, e, 1) == 0) {
		if (m->sleeping)
			rsk_fw_join(e, 1); /* a thread of this set sleeps already */
		return 1;
	}
	rsk_fw_uncand(m, e, 1, 0); /* the MOD failed: the kernel still holds its own events */
	return 0;
}

/*
 * Make @e a lazy candidate if its fd, events and data allow. An accelerated fd that cannot be
 * one goes eager for good: this set's waits would take its stale token for readiness. The
 * application's real epoll_ctl just set its registration (level-triggered). m locked.
 */
static int rsk_fw_try_cand(struct rsk_fw *m, struct rsk_fw_ent *e, int kernel_et)
{
	struct rsk_sock *s;
	struct rsk_conn *c;
	int ok, kept, was = 0;

	e->et = kernel_et; /* what the real call registered */
	e->kev = e->events;
	e->later = 0;
	if (rsk_fw_data_clash(m, e, e->data) || (e->events & RSK_FW_NOT_LT)) {
		was = e->s != NULL;
		rsk_fw_uncand(m, e, 1, 1); /* a candidate: the kernel gets its own events back */
		(void)rsk_fw_rereg(m, e, 0); /* none yet: a guess of rsk_fw_ctl_et that was wrong */
		return rsk_fw_taint_fd(e->fd) || was;
	}
	if (e->s != NULL)
		return !rsk_fw_cand_et(m, e); /* new events of a candidate */
	if (!rsk_fdtab_is_accel(rsk_fdtab_load(e->fd)) || (s = rsk_sock_get(e->fd)) == NULL) {
		(void)rsk_fw_rereg(m, e, 0);
		e->later = 1; /* a TCP-first socket: tried again when one moves (rsk_fw_moved) */
		return 0;
	}
	c = s->conn;
	/* (a candidate's reference is kept for long: no call of the application's) */
	kept = c != NULL && s->nfds == 1 && m->ncand < RSK_FW_MAX_CANDIDATES && rsk_sock_keep(s);
	ok = kept;
	if (c != NULL) {
		rsk_conn_lock(c);
		ok = ok && !c->lazy_never && rsk_conn_can_lazy(c);
		if (!ok)
			__atomic_store_n(&c->lazy_never, 1, __ATOMIC_RELAXED);
		was = c->lazy && !ok;
		rsk_conn_set_lazy(c, e->fd, ok);
		rsk_conn_unlock(c);
	}
	if (!ok) {
		if (kept)
			rsk_sock_put_kept(s);
		else
			rsk_sock_put(s);
		(void)rsk_fw_rereg(m, e, 0);
		return was;
	}
	e->s = s;
	m->ncand++;
	return !rsk_fw_cand_et(m, e);
}

/* A new entry for @fd (zeroed), or NULL: out of memory, so the mirror cannot follow and the
 * set ends eager (rsk_fw_wait, rsk_fw_ctl). m locked. */
static struct rsk_fw_ent *rsk_fw_append(struct rsk_fw *m, int fd)
{
	struct rsk_fw_ent *e, *t;

	if (m->n == m->cap) {
		int cap = m->cap ? m->cap * 2 : 16;

		if ((t = realloc(m->ent, sizeof(*t) * (size_t)cap)) == NULL) {
			m->dead = 1;
			rsk_fw_flush_held(m);
			return NULL;
		}
		m->ent = t;
		m->cap = cap;
	}
	e = &m->ent[m->n++];
	memset(e, 0, sizeof(*e));
	e->fd = fd;
	return e;
}

/* The registrations epoll set @epfd holds (the kernel's view: /proc/self/fdinfo, read whole,
 * line by line), each to @fn with its number, events (without EPOLLERR and EPOLLHUP, which
 * the kernel adds to every one) and data, until @fn returns non-zero. 0, -errno, or @fn's. */
int rsk_fw_each_reg(int epfd, int (*fn)(void *arg, int fd, uint32_t ev, uint64_t data),
		    void *arg)
{
	char path[48], buf[4096], *p, *nl;
	unsigned long long data;
	unsigned int events;
	size_t have = 0;
	ssize_t k;
	int f, tfd, rc = 0;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	if ((f = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	do {
		k = rsk_sys_read(f, buf + have, sizeof(buf) - 1 - have);
		if (k < 0) {
			rc = (int)k;
			break;
		}
		have += (size_t)k;
		buf[have] = '\0';
		for (p = buf; rc == 0 && ((nl = strchr(p, '\n')) != NULL || (k == 0 && *p)); p = nl + 1) {
			if (nl == NULL)
				nl = p + strlen(p) - 1; /* the last line, without its newline */
			else
				*nl = '\0';
			if (sscanf(p, "tfd: %d events: %x data: %llx", &tfd, &events, &data) == 3)
				rc = fn(arg, tfd, events & ~(uint32_t)(EPOLLERR | EPOLLHUP), data);
		}
		have = rc == 0 && p < buf + have ? strlen(p) : 0;
		memmove(buf, p, have);
		if (have == sizeof(buf) - 1)
			rc = -EIO; /* a line longer than the buffer: not an fdinfo we know */
	} while (rc == 0 && k > 0);
	(void)rsk_sys_close(f);
	return rc;
}

struct rsk_fw_read {
	struct rsk_fw *m;
	int skip;
};

/* One registration of the set, as an entry (but @skip's). m locked. */
static int rsk_fw_read_one(void *arg, int fd, uint32_t events, uint64_t data)
{
	struct rsk_fw_read *r = arg;
	struct rsk_fw_ent *e;

	if (fd == r->skip)
		return 0;
	if ((e = rsk_fw_append(r->m, fd)) == NULL)
		return -ENOMEM;
	e->events = events;
	e->kev = events;
	e->data = data;
	e->later = 1; /* tried below when accelerated, or when its socket moves */
	return 0;
}

/* The set's registrations as entries. 0 or -errno. m locked. */
static int rsk_fw_read_set(struct rsk_fw *m, int skip)
{
	struct rsk_fw_read r = {m, skip};

	return rsk_fw_each_reg(m->epfd, rsk_fw_read_one, &r);
}

/* The socket a ctl of @fd may have left unrecorded (rsk_fw_ctl_begin): a TCP-first one. */
static struct rsk_sock *rsk_fw_unrecorded(int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);

	if ((v & RSK_FDTAB_TAGS) != RSK_FDTAB_TAGS)
		return NULL;
	return rsk_sock_get(fd);
}

/* One registration of a set whose mirror ends while the set lives on: a TCP-first socket's
 * is recorded now (its ctls record it themselves from here on). */
static int rsk_fw_record_one(void *arg, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = {.events = events, .data.u64 = data};
	struct rsk_sock *s = rsk_fw_unrecorded(fd);

	if (s != NULL) {
		pthread_mutex_lock(&s->lock);
		rsk_sock_epreg(s, *(int *)arg, EPOLL_CTL_ADD, &ev);
		pthread_mutex_unlock(&s->lock);
		rsk_sock_put(s);
	}
	return 0;
}

struct rsk_fw_regs {
	struct rsk_sock *s;
	int epfd, fd;
};

static int rsk_fw_regs_one(void *arg, int fd, uint32_t events, uint64_t data)
{
	struct rsk_fw_regs *r = arg;
	struct epoll_event ev = {.events = events, .data.u64 = data};

	if (fd == r->fd)
		rsk_sock_epreg(r->s, r->epfd, EPOLL_CTL_ADD, &ev);
	return fd == r->fd;
}

int rsk_fw_epregs(struct rsk_sock *s, int fd)
{
	struct rsk_fw_regs r = {s, -1, fd};
	struct rsk_fw *m;
	int i, rc, err = 0;

	if (!rsk_fw_on())
		return 0;
	for (i = 0; (m = rsk_fw_next(&i)) != NULL;) {
		if (__atomic_load_n(&m->recorded, __ATOMIC_SEQ_CST)) {
			rsk_fw_put(m); /* every registration there is recorded already */
			continue;
		}
		r.epfd = m->epfd;
		rc = rsk_fw_each_reg(m->epfd, rsk_fw_regs_one, &r);
		if (rc == 0) /* the kernel holds none: a record of one is stale (a MOD's leftover) */
			rsk_sock_epreg(s, m->epfd, EPOLL_CTL_DEL, NULL);
		if (rc < 0 && rc != -ENOENT) /* (ENOENT: the number is no set's now, raw-closed) */
			err = rc;
		rsk_fw_put(m);
	}
	return err;
}

/* No more ctls go by @m unfollowed, and those under way have ended. m locked. */
static void rsk_fw_close_quiet(struct rsk_fw *m)
{
	__atomic_store_n(&m->follow, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&m->quiet_ctls, __ATOMIC_SEQ_CST) != 0)
		sched_yield(); /* a ctl between its count and the end of its real call: brief */
}

/*
 * The mirror follows the set again (it is to hold a candidate: an accelerated fd's ctl, or a
 * socket of it moved): no more ctls go by unfollowed, those under way end, and the set's
 * registrations are read from the kernel (@skip's, which the caller follows itself, left
 * out); accelerated ones are tried as candidates. Then every ctl is followed under the lock
 * as before, until the set has held no candidate for RSK_FW_SPARSE_AFTER ctls. 0, or -errno
 * (the mirror is dead: its set eager). m locked.
 */
static int rsk_fw_follow(struct rsk_fw *m, int skip)
{
	int i, rc;

	if (__atomic_load_n(&m->follow, __ATOMIC_RELAXED))
		return 0;
	rsk_fw_close_quiet(m);
	__atomic_store_n(&m->becomes, rsk_sock_becomes(), __ATOMIC_RELAXED);
	m->n = 0;
	m->idle = 0;
	if ((rc = rsk_fw_read_set(m, skip)) < 0) {
		/* (no /proc, or no fd free) It stays as it was, following nothing, so that its
		 * TCP-first sockets' registrations can still be read when one moves; what was to be
		 * a candidate goes eager (the caller). Not dead: a dead mirror's set goes
		 * unmirrored, and those registrations would be read by nobody. */
		m->n = 0;
		__atomic_store_n(&m->follow, 0, __ATOMIC_SEQ_CST);
		return rc;
	}
	for (i = 0; i < m->n; i++) {
		if (m->ent[i].s == NULL && rsk_fdtab_is_accel(rsk_fdtab_load(m->ent[i].fd)))
			(void)rsk_fw_try_cand(m, &m->ent[i], 0);
		else if (m->ent[i].s == NULL) /* (the socket's lock, after the mirror's) */
			(void)rsk_fw_record_one(&m->epfd, m->ent[i].fd, m->ent[i].events,
						m->ent[i].data);
	}
	rsk_fw_compact(m);
	__atomic_store_n(&m->recorded, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* A ctl was followed: a set without a candidate for RSK_FW_SPARSE_AFTER ctls stops
 * following (no entry holds a socket then: only candidates do, held ones too). m locked. */
static void rsk_fw_idle(struct rsk_fw *m)
{
	if (m->ncand > 0 || m->sleeping > 0 || m->dead) {
		m->idle = 0;
		return;
	}
	if (++m->idle < RSK_FW_SPARSE_AFTER)
		return;
	m->n = 0;
	m->idle = 0;
	__atomic_store_n(&m->recorded, 0, __ATOMIC_SEQ_CST); /* (before any ctl goes unrecorded) */
	__atomic_store_n(&m->follow, 0, __ATOMIC_SEQ_CST);
}

struct rsk_fw *rsk_fw_ctl_begin(int epfd)
{
	struct rsk_fw *m = rsk_fw_get(epfd);

	if (m == NULL)
		return NULL;
	__atomic_add_fetch(&m->quiet_ctls, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&m->follow, __ATOMIC_SEQ_CST) == 0)
		return m;
	__atomic_sub_fetch(&m->quiet_ctls, 1, __ATOMIC_RELEASE);
	rsk_fw_put(m);
	return NULL;
}

void rsk_fw_ctl_end(struct rsk_fw *m, int fd, int done)
{
	__atomic_sub_fetch(&m->quiet_ctls, 1, __ATOMIC_RELEASE);
	rsk_fw_put(m);
	if (done)
		rsk_fw_kill(fd, 1); /* an epoll set nested in another: the outer wait is the kernel's */
}

/* rsk_fw_ctl_et guessed a candidate and no mirror took it: the application's events back. */
static void rsk_fw_unguess(int epfd, int fd, const struct epoll_event *ev, int kernel_et)
{
	struct epoll_event kev;

	if (!kernel_et || ev == NULL)
		return;
	kev = *ev;
	(void)rsk_sys_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &kev);
}

/* Follow one epoll_ctl. Returns 1 when @fd's connection went eager and other mirrors may
 * hold it (rsk_fw_walk_fd, once m is unlocked). m locked. */
static int rsk_fw_ctl_locked(struct rsk_fw *m, int op, int fd, const struct epoll_event *ev,
			     int kernel_et)
{
	struct rsk_fw_ent *e;

	rsk_fw_compact(m);
	e = rsk_fw_find(m, fd);
	if (op == EPOLL_CTL_DEL) {
		if (e != NULL)
			rsk_fw_remove(m, e);
		return 0;
	}
	if (op == EPOLL_CTL_ADD && e != NULL)
		rsk_fw_remove(m, e); /* the number's earlier file was closed without a DEL */
	if ((op == EPOLL_CTL_ADD || (e = rsk_fw_find(m, fd)) == NULL) &&
	    (e = rsk_fw_append(m, fd)) == NULL) {
		rsk_fw_unguess(m->epfd, fd, ev, kernel_et);
		return 0;
	}
	e->events = ev->events;
	e->data = ev->data.u64;
	return rsk_fw_try_cand(m, e, kernel_et);
}

/*
 * Every mirror that holds @fd as a candidate lets it go, its connection eager, and gives the
 * kernel the application's own events back (no EPOLLET), now rather than at that set's next
 * look. No mirror lock held.
 */
static void rsk_fw_walk_fd(int fd)
{
	struct rsk_fw *m;
	int epfd, i;

	for (epfd = 0; (m = rsk_fw_next(&epfd)) != NULL;) {
		pthread_mutex_lock(&m->lock);
		for (i = 0; i < m->n; i++)
			if (m->ent[i].fd == fd)
				rsk_fw_uncand(m, &m->ent[i], 1, 1);
		pthread_mutex_unlock(&m->lock);
		rsk_fw_put(m);
	}
}

/* @fd's connection goes eager for good, and no mirror keeps it edge-triggered. */
static void rsk_fw_taint_all(int fd)
{
	if (rsk_fw_taint_fd(fd))
		rsk_fw_walk_fd(fd);
}

int rsk_fw_ctl_et(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct rsk_fw *m;
	struct rsk_sock *s;
	struct rsk_conn *c;
	int et;

	if (op == EPOLL_CTL_DEL || ev == NULL || (ev->events & RSK_FW_NOT_LT))
		return 0;
	if ((m = rsk_fw_get(epfd)) == NULL)
		return 0;
	et = !m->dead && m->ncand < RSK_FW_MAX_CANDIDATES; /* a hint: no lock */
	rsk_fw_put(m);
	if (!et || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	c = s->conn;
	et = c != NULL && s->nfds == 1 && !c->lazy_never && rsk_conn_can_lazy(c);
	rsk_sock_put(s);
	return et;
}

/* ---- epoll_ctl answered from the mirror ---- */

/* Every DEL held back in @m goes to the kernel (its entries go). m locked. */
static void rsk_fw_flush_held(struct rsk_fw *m)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (m->ent[i].held)
			rsk_fw_uncand(m, &m->ent[i], 0, 0);
}

/* Entries that stopped being entries (a held DEL sent: fd -1) go. m locked. */
static void rsk_fw_compact(struct rsk_fw *m)
{
	int i = 0;

	while (i < m->n) {
		if (m->ent[i].fd < 0)
			m->ent[i] = m->ent[--m->n];
		else
			i++;
	}
}

/* Does another live entry than @self use @data? m locked. */
static int rsk_fw_data_used(struct rsk_fw *m, struct rsk_fw_ent *self, uint64_t data)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (&m->ent[i] != self && m->ent[i].fd >= 0 && !m->ent[i].held &&
		    m->ent[i].data == data)
			return 1;
	return 0;
}

/*
 * A re-ADD of held entry @e: answered here when the number still names the candidate's socket
 * (a close or a dup onto it sent the DEL and dropped the entry) and the registration stays a
 * candidate's (level-triggered, data no other entry uses). New data goes to the kernel at
 * once (a MOD for the application's ADD): a real report is matched by its data. Else the held
 * DEL goes to the kernel and the ADD is the kernel's. m locked.
 */
static int rsk_fw_readd(struct rsk_fw *m, struct rsk_fw_ent *e, const struct epoll_event *ev,
			int *res)
{
	struct epoll_event kev = {.events = ev->events | EPOLLET, .data = ev->data};

	if (m->sleeping || (ev->events & RSK_FW_NOT_LT) ||
	    rsk_fdtab_ptr(rsk_fdtab_load(e->fd)) != e->s ||
	    !rsk_fdtab_is_accel(rsk_fdtab_load(e->fd)) ||
	    rsk_fw_data_used(m, e, ev->data.u64) ||
	    (ev->data.u64 != e->data &&
	     rsk_sys_epoll_ctl(m->epfd, EPOLL_CTL_MOD, e->fd, &kev) < 0)) {
		rsk_fw_uncand(m, e, 0, 0); /* sends the DEL */
		return 0;
	}
	if (ev->data.u64 != e->data)
		e->kev = ev->events;
	e->held = 0;
	__atomic_sub_fetch(&rsk_fw_nheld, 1, __ATOMIC_RELAXED);
	e->events = ev->events;
	e->data = ev->data.u64;
	*res = 0;
	return 1;
}

/* @op on candidate @e, held back or answered here when it can be (see rsk_fw_ctl_user);
 * 0: the kernel's call. m locked. */
static int rsk_fw_user_op(struct rsk_fw *m, struct rsk_fw_ent *e, int op,
			  const struct epoll_event *ev, int *res)
{
	if (e->held && op != EPOLL_CTL_ADD) {
		*res = -ENOENT; /* as the kernel: deleted */
		return 1;
	}
	if (e->held)
		return rsk_fw_readd(m, e, ev, res);
	if (m->sleeping) { /* a thread sleeps in the kernel: a real ctl is what may wake it */
		if (op == EPOLL_CTL_MOD && !(ev->events & RSK_FW_NOT_LT) && ev->data.u64 == e->data)
			e->events = ev->events; /* now: the woken sleeper's filter masks by them */
		return 0;
	}
	if (op == EPOLL_CTL_DEL) {
		rsk_fw_join(e, 0);
		e->held = 1;
		__atomic_add_fetch(&rsk_fw_nheld, 1, __ATOMIC_RELAXED);
		*res = 0;
		return 1;
	}
	if (op != EPOLL_CTL_MOD || (ev->events & RSK_FW_NOT_LT) || ev->data.u64 != e->data)
		return 0; /* an ADD (EEXIST), edge-triggered, or new data: the kernel's */
	e->events = ev->events; /* the kernel gets them before a sleep (rsk_fw_prepare) */
	*res = 0;
	return 1;
}

/* A ctl found @m dead (its set went eager meanwhile): the fd is the kernel's there, and any
 * set we do not mirror sees its app end. Unlocks and puts m. */
static void rsk_fw_ctl_dead(struct rsk_fw *m, int epfd, int fd, const struct epoll_event *ev,
			    int kernel_et)
{
	pthread_mutex_unlock(&m->lock);
	rsk_fw_put(m);
	rsk_fw_unguess(epfd, fd, ev, kernel_et);
	rsk_fw_kill(epfd, 1);
	rsk_fw_taint_all(fd);
}

/*
 * epoll_ctl of a lazy candidate answered from the mirror: user-space waits answer it, so the
 * kernel's registration (events | EPOLLET) matters only to a sleep and to whoever else may see
 * the set or the file. A DEL is held back (the entry stays, marked held; nothing reports it),
 * a re-ADD of the same socket takes it back, a MOD of its events only is noted. Every held-back
 * op reaches the kernel before its view can matter: a sleep (rsk_fw_prepare), a close or dup
 * onto the number (rsk_fw_fd_gone), the connection going eager, moving or relayed
 * (rsk_fw_uncand), the set shared, nested, closed or its mirror ended (rsk_fw_kill), fork and
 * exec (rsk_fw_all_eager, rsk_fw_flush_all), and another entry taking the held one's data.
 */
int rsk_fw_ctl_user(int epfd, int op, int fd, const struct epoll_event *ev, int *res)
{
	struct rsk_fw *m;
	struct rsk_fw_ent *e;
	int done = 0;

	if ((op != EPOLL_CTL_DEL && ev == NULL) || (m = rsk_fw_get(epfd)) == NULL)
		return 0;
	pthread_mutex_lock(&m->lock);
	if (!m->dead && (e = rsk_fw_find(m, fd)) != NULL && e->s != NULL && e->et)
		done = rsk_fw_user_op(m, e, op, ev, res);
	rsk_fw_compact(m);
	pthread_mutex_unlock(&m->lock);
	rsk_fw_put(m);
	return done;
}

void rsk_fw_ctl(int epfd, int op, int fd, const struct epoll_event *ev, int kernel_et)
{
	struct rsk_fw *m;
	int walk, unread;

	rsk_fw_kill(fd, 1); /* an epoll set nested in another: the outer wait is the kernel's */
	if ((m = rsk_fw_get(epfd)) == NULL) {
		rsk_fw_unguess(epfd, fd, ev, kernel_et);
		if (op != EPOLL_CTL_DEL)
			rsk_fw_taint_all(fd); /* a set we do not mirror sees the app end */
		return;
	}
	pthread_mutex_lock(&m->lock);
	if (op != EPOLL_CTL_DEL && ev == NULL)
		op = EPOLL_CTL_DEL; /* cannot happen: the real call succeeded */
	if (m->dead) {
		rsk_fw_ctl_dead(m, epfd, fd, ev, kernel_et);
		return;
	}
	walk = 0;
	unread = 0;
	if (__atomic_load_n(&m->follow, __ATOMIC_RELAXED) ||
	    (op != EPOLL_CTL_DEL && rsk_fdtab_is_accel(rsk_fdtab_load(fd)) &&
	     !(unread = rsk_fw_follow(m, fd) < 0))) {
		walk = rsk_fw_ctl_locked(m, op, fd, ev, kernel_et);
		rsk_fw_idle(m);
	} /* else not following (nothing to: a kernel fd, a DEL), or could not read the set */
	if (unread) { /* no candidate without the set's data: the fd goes eager */
		pthread_mutex_unlock(&m->lock);
		rsk_fw_put(m);
		rsk_fw_unguess(epfd, fd, ev, kernel_et);
		rsk_fw_taint_all(fd);
		return;
	}
	if (m->dead) {
		rsk_fw_ctl_dead(m, epfd, fd, ev, kernel_et);
		return;
	}
	pthread_mutex_unlock(&m->lock);
	rsk_fw_put(m);
	if (walk)
		rsk_fw_walk_fd(fd);
}

/* ---- looking ---- */

static int rsk_fw_real_due(struct rsk_fw *m, int64_t now)
{
	return m->fast_returns >= RSK_FW_FAIR_RETURNS || now - m->real_us >= RSK_FW_FAIR_US;
}

/*
 * The user-space answer for candidate @e, or -1 when only the kernel can say (its connection
 * went eager, or is ending: EOF, hang-up, shutdown). Then it is a candidate no more: its app
 * end is exact for good, and the kernel answers it. m locked.
 */
static int rsk_fw_ent_events(struct rsk_fw *m, struct rsk_fw_ent *e)
{
	struct rsk_conn *c = e->s->conn;
	int ev = -1;

	if (c == NULL) { /* the socket left its connection (a relay's pipe): the kernel's now */
		rsk_fw_uncand(m, e, 0, 1);
		return -1;
	}
	rsk_conn_lock(c);
	if (c->lazy)
		ev = rsk_conn_fast_events(c, e->fd);
	if (ev < 0) {
		__atomic_store_n(&c->lazy_never, 1, __ATOMIC_RELAXED);
		rsk_conn_set_lazy(c, e->fd, 0);
	}
	rsk_conn_unlock(c);
	if (ev < 0) {
		rsk_fw_uncand(m, e, 0, 1);
		return -1;
	}
	return ev & (int)(e->events | EPOLLERR | EPOLLHUP);
}

/*
 * Sockets moved from TCP onto a stream since this set last looked (rsk_sock_become replayed
 * the application's registrations on the new app end, level-triggered): entries added
 * before, while they were TCP, may be candidates now. Without this a moved connection
 * stayed eager for good, a token written and drained per message (redis-benchmark with the
 * default TCP-first policy: 0.83 token reads per GET on the server). One atomic load per
 * look otherwise. m locked.
 */
static void rsk_fw_moved(struct rsk_fw *m)
{
	unsigned int now = rsk_sock_becomes();
	int i;

	if (now == m->becomes)
		return;
	if (!__atomic_load_n(&m->follow, __ATOMIC_RELAXED)) {
		(void)rsk_fw_follow(m, -1); /* entries added while TCP were not kept: read them */
		return;
	}
	__atomic_store_n(&m->becomes, now, __ATOMIC_RELAXED);
	for (i = 0; i < m->n; i++)
		if (m->ent[i].later && m->ent[i].s == NULL &&
		    rsk_fdtab_is_accel(rsk_fdtab_load(m->ent[i].fd)))
			(void)rsk_fw_try_cand(m, &m->ent[i], 0); /* replayed level-triggered */
}

/* Candidates' answers after the @n events in @ev (up to @max), starting at the rotor so that
 * none starves when more are ready than fit; the rotor moves past the last one reported for
 * the next scan only (moved inside the loop, each report skipped further ahead, and some
 * ready candidates were never visited). *@kernel: a candidate only the kernel can answer
 * now. m locked. */
static int rsk_fw_scan(struct rsk_fw *m, struct epoll_event *ev, int n, int max, int *kernel)
{
	unsigned int start;
	int i, k, got;

	rsk_fw_moved(m);
	start = m->rot;
	for (k = 0; k < m->n && n < max; k++) {
		i = (int)((start + (unsigned int)k) % (unsigned int)m->n);
		if (m->ent[i].s == NULL || m->ent[i].held || m->ent[i].gen == m->gen)
			continue;
		got = rsk_fw_ent_events(m, &m->ent[i]);
		if (got < 0) {
			*kernel = 1;
			continue;
		}
		if (got == 0)
			continue;
		m->ent[i].gen = m->gen;
		ev[n].events = (uint32_t)got;
		ev[n].data.u64 = m->ent[i].data;
		n++;
		m->rot = (unsigned int)i + 1;
	}
	return n;
}

/* The candidate a real report with @data is about, or NULL. m locked. */
static struct rsk_fw_ent *rsk_fw_by_data(struct rsk_fw *m, uint64_t data)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (m->ent[i].s != NULL && m->ent[i].fd >= 0 && m->ent[i].data == data)
			return &m->ent[i];
	return NULL;
}

/*
 * A real wait reported @n events in @ev: a candidate's report is replaced by the user-space
 * answer (its token may be stale), unless it carries what only the kernel knows (a hang-up:
 * the peer went). The kernel's other reports go first (a candidate's can be dropped for room:
 * it is answered from user space anyway). Returns how many are left, *@nk of them not
 * candidates'. m locked.
 */
static int rsk_fw_filter(struct rsk_fw *m, struct epoll_event *ev, int n, int *nk)
{
	struct epoll_event tmp;
	struct rsk_fw_ent *e;
	int i, out = 0, got;

	*nk = 0;
	for (i = 0; i < n; i++) {
		e = rsk_fw_by_data(m, ev[i].data.u64);
		if (e != NULL && e->s->conn != NULL)
			rsk_conn_edge_seen(e->s->conn); /* before its stream is looked at */
		if (e != NULL && e->held)
			continue; /* the application deleted it: its DEL is only held back */
		if (e != NULL)
			ev[i].events &= e->events | EPOLLERR | EPOLLHUP; /* a MOD answered here */
		if (e != NULL && !(ev[i].events & RSK_FW_KERNEL_BITS)) {
			got = rsk_fw_ent_events(m, e);
			if (got <= 0)
				continue; /* a stale token, or just made exact (the next look has it) */
			ev[i].events = (uint32_t)got;
		}
		if (e != NULL)
			e->gen = m->gen;
		ev[out] = ev[i];
		if (e == NULL || e->s == NULL || (ev[out].events & RSK_FW_KERNEL_BITS)) {
			tmp = ev[*nk]; /* the kernel's own report: to the front */
			ev[*nk] = ev[out];
			ev[out] = tmp;
			(*nk)++;
		}
		out++;
	}
	return out;
}

/*
 * The real part of a look: a zero-timeout real wait. When every slot came back filled by
 * lazy candidates (answered from user space anyway), the kernel may hold other fds behind
 * them in its ready list, which it rotates: ask again, a bounded number of times. m locked.
 */
#define RSK_FW_REAL_TRIES 4

static int rsk_fw_real(struct rsk_fw *m, struct epoll_event *ev, int max, int64_t now)
{
	int n, nk, tries, full;

	for (tries = 0;; tries++) {
		m->gen++;
		n = rsk_sys_epoll_wait(m->epfd, ev, max, 0);
		if (n < 0)
			return n;
		full = n == max;
		n = rsk_fw_filter(m, ev, n, &nk);
		if (nk > 0 || !full || tries + 1 >= RSK_FW_REAL_TRIES)
			break;
	}
	m->real_us = now;
	m->fast_returns = 0;
	return n;
}

/*
 * One look at the set: the kernel (zero timeout) when @real, then user space for the rest.
 * @defer: when user space has nothing, leave the kernel to the caller (a spin asks it by the
 * fairness rule, a sleep is its answer). Returns a count or -errno. m locked.
 */
static int rsk_fw_look(struct rsk_fw *m, struct epoll_event *ev, int max, int real, int defer,
		       int64_t now)
{
	int n = 0, kernel = 0;

	m->gen++;
	if (real && (n = rsk_fw_real(m, ev, max, now)) < 0)
		return n;
	n = rsk_fw_scan(m, ev, n, max, &kernel);
	if (!real && n == 0 && !kernel && defer)
		return 0; /* the spin or the sleep asks the kernel */
	if (!real && (n == 0 || kernel))
		return rsk_fw_look(m, ev, max, 1, 0, now); /* nothing here: the kernel's fds, at once */
	if (!real)
		m->fast_returns++;
	return n;
}

/* A look under m's lock at @now (0: read the clock now). */
static int rsk_fw_look_locked(struct rsk_fw *m, struct epoll_event *ev, int max, int defer,
			      int64_t now)
{
	int n;

	if (now == 0)
		now = rsk_now_us();

	pthread_mutex_lock(&m->lock);
	n = rsk_fw_look(m, ev, max, rsk_fw_real_due(m, now), defer, now);
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* ---- waiting ---- */

/*
 * Before sleeping in the kernel: this thread counts as a sleeper of every candidate's
 * connection (the set's first sleeper makes the count), then one more look at the rings, so
 * nothing that came before the count is slept through; whatever comes after it, the peer
 * writes a token for, an edge the kernel reports. The kernel's fds need no look here: the
 * sleep reports them at once. Stale tokens stay (a few are trimmed in one read once they pile
 * up). No system call per connection. m locked; the caller ends the sleep with
 * rsk_fw_sleep_end.
 */
static int rsk_fw_prepare(struct rsk_fw *m, struct epoll_event *ev, int max)
{
	struct rsk_conn *c;
	int i;

	m->sleeping++;
	for (i = 0; i < m->n; i++) {
		if (m->ent[i].held) /* the sleep must not be woken for it: the DEL goes now */
			rsk_fw_uncand(m, &m->ent[i], 0, 0);
		if (m->ent[i].s == NULL || (c = m->ent[i].s->conn) == NULL)
			continue;
		if (rsk_fw_rereg(m, &m->ent[i], 1) < 0) { /* a MOD answered here: its events */
			rsk_fw_uncand(m, &m->ent[i], 1, 0);
			continue;
		}
		rsk_fw_join(&m->ent[i], 1);
		if (rsk_conn_tokens(c) >= RSK_CONN_TRIM_AT) {
			rsk_conn_lock(c);
			rsk_conn_trim(c, m->ent[i].fd);
			rsk_conn_unlock(c);
		}
	}
	return rsk_fw_look(m, ev, max, 0, 1, rsk_now_us());
}

/* A sleep (or its prepare) is over; the set's last sleeper ends the counts. m locked. */
static void rsk_fw_sleep_end(struct rsk_fw *m)
{
	int i;

	if (--m->sleeping > 0)
		return;
	for (i = 0; i < m->n; i++)
		rsk_fw_join(&m->ent[i], 0);
}

/*
 * Spin like rsk_io_wait_spin: user-space looks every round; the kernel's by the fairness
 * rule (RSK_FW_FAIR_US since the set's last real look), at once when a candidate became the
 * kernel's (it ends: EOF, hang-up) or a quiet endpoint showed an arrival; a yield when it
 * helps (rsk_spin_yield). The wait began at @start; it spins no longer than its @timeout.
 * Returns a count or -errno.
 */
static int rsk_fw_spin(struct rsk_fw *m, struct epoll_event *ev, int max, int timeout,
		       int64_t start, int64_t *spent_us, int *crowded)
{
	int64_t now = start, budget;
	unsigned int rounds = 0;
	int n, kernel;

	budget = (int64_t)rsk_config.spin_us;
	if (timeout > 0 && (int64_t)timeout * 1000 < budget)
		budget = (int64_t)timeout * 1000;
	*spent_us = 0;
	while (now - start < budget) {
		rsk_cpu_relax();
		if ((++rounds % RSK_FW_CLOCK_EVERY) == 0) /* a yield is timed from this read */
			now = rsk_spin_yield(rsk_now_us(), start, crowded);
		pthread_mutex_lock(&m->lock);
		m->gen++;
		kernel = 0;
		n = rsk_fw_scan(m, ev, 0, max, &kernel);
		if (n == 0 && (kernel || now - m->real_us >= RSK_FW_FAIR_US ||
			       rsk_conn_harvest_quiet()))
			n = rsk_fw_look(m, ev, max, 1, 0, now);
		pthread_mutex_unlock(&m->lock);
		if (n != 0)
			return n;
		if (*crowded)
			break; /* others wanted this core, and what they did brought nothing: sleep */
	}
	*spent_us = now - start;
	return 0;
}

/* Sleep in the kernel until an event survives the filter, the timeout, or a signal. */
static int rsk_fw_sleep(struct rsk_fw *m, struct epoll_event *ev, int max, int timeout,
			const sigset_t *mask)
{
	int64_t end = timeout > 0 ? rsk_now_us() + (int64_t)timeout * 1000 : 0;
	int n, got, ms = timeout;

	for (;;) {
		pthread_mutex_lock(&m->lock);
		n = rsk_fw_prepare(m, ev, max);
		if (n != 0)
			rsk_fw_sleep_end(m);
		pthread_mutex_unlock(&m->lock);
		if (n != 0)
			return n;
		got = mask != NULL ? (int)rsk_sys_ret(RSK_REAL(epoll_pwait)(m->epfd, ev, max, ms, mask))
				   : rsk_sys_epoll_wait(m->epfd, ev, max, ms);
		pthread_mutex_lock(&m->lock);
		rsk_fw_sleep_end(m);
		m->gen++;
		n = got > 0 ? rsk_fw_filter(m, ev, got, &(int){0}) : got;
		if (got >= 0 && got < max) { /* a real look with room for all: the rule starts over */
			m->real_us = rsk_now_us();
			m->fast_returns = 0;
		}
		pthread_mutex_unlock(&m->lock);
		if (got <= 0 || n > 0)
			return n; /* events; the timeout; an error (EINTR) the application must see */
		if (timeout > 0) { /* only stale tokens woke us: sleep on for what is left */
			int64_t left = end - rsk_now_us();

			if (left <= 0)
				return 0;
			ms = (int)((left + 999) / 1000);
		}
	}
}

/*
 * A wait that found nothing at its first look: spin (when the set's spins pay,
 * rsk_spin_pays), then sleep; learn whether the spin paid (a spin's answer, or a sleep that
 * ended within RSK_SPIN_FAR windows, rsk_spin_hit: a hit; the timeout: a miss). The wait
 * began at @start (the first look's clock). A count or -errno.
 */
static int rsk_fw_block(struct rsk_fw *m, struct epoll_event *ev, int max, int timeout,
			const sigset_t *mask, int64_t start)
{
	int64_t spent = 0, window = (int64_t)rsk_config.spin_us;
	int n = 0, crowded = 0, spun = window != 0 && rsk_spin_pays(&m->spin_hist);

	if (spun && (n = rsk_fw_spin(m, ev, max, timeout, start, &spent, &crowded)) != 0) {
		if (n > 0)
			rsk_spin_outcome(&m->spin_hist, 1);
		return n;
	}
	if (timeout > 0)
		timeout = timeout > (int)(spent / 1000) ? timeout - (int)(spent / 1000) : 0;
	if (timeout != 0) {
		rsk_conn_sleep_begin(); /* before prepare's last look: quiet ones armed */
		n = rsk_fw_sleep(m, ev, max, timeout, mask);
		rsk_conn_sleep_end();
	} else { /* spun out the timeout: its "nothing" must hold for the kernel's fds too */
		n = rsk_fw_look_locked(m, ev, max, 0, 0);
	}
	if (window != 0 && n >= 0) /* a crowded spin missed, whatever came after it */
		rsk_spin_outcome(&m->spin_hist,
				 !crowded && n > 0 && rsk_spin_hit(rsk_now_us() - start));
	return n;
}

int rsk_fw_wait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask,
		int *res)
{
	struct rsk_fw *m = rsk_fw_get(epfd);
	int64_t now;
	int n;

	if (m == NULL)
		return 0;
	if (__atomic_load_n(&m->becomes, __ATOMIC_RELAXED) != rsk_sock_becomes()) {
		pthread_mutex_lock(&m->lock); /* a socket moved: it may be the set's first candidate */
		rsk_fw_moved(m);
		pthread_mutex_unlock(&m->lock);
	}
	if (m->ncand == 0 || m->dead || max <= 0 || ev == NULL) {
		rsk_fw_put(m); /* nothing lazy in it: the kernel's answer is exact */
		return 0;
	}
	rsk_conn_push_all(); /* the application waits: nothing of ours may stay staged */
	(void)rsk_conn_harvest_quiet(); /* quiet endpoints' arrivals show in the kernel's look */
	/* The first look's clock read also starts the block: one read fewer per wait, a
	 * system call where the clock has no vDSO (qemu's hpet in the Soft-RoCE guest). */
	now = rsk_now_us();
	n = rsk_fw_look_locked(m, ev, max, timeout != 0, now); /* a spin or a sleep follows */
	if (n == 0 && timeout != 0)
		n = rsk_fw_block(m, ev, max, timeout, mask, now);
	rsk_fw_put(m);
	*res = n;
	return 1;
}

/* ---- a TCP-first socket in the middle of its move ---- */

/* What a move's FIN shows on the TCP side (the peer's FIN; with ours, the hang-up). */
#define RSK_FW_MOVE_BITS (EPOLLIN | EPOLLRDNORM | EPOLLHUP | EPOLLRDHUP)

/* The fd of @m's only live registration with @data, or -1 (none, or several: a report with
 * it cannot be told apart, and is left as it is). m locked. */
static int rsk_fw_fd_of(struct rsk_fw *m, uint64_t data)
{
	int i, fd = -1;

	for (i = 0; i < m->n; i++) {
		if (m->ent[i].fd < 0 || m->ent[i].held || m->ent[i].data != data)
			continue;
		if (fd >= 0)
			return -1;
		fd = m->ent[i].fd;
	}
	return fd;
}

/*
 * A report of @fd about to be hidden (its move's FIN only) from an edge-triggered or one-shot
 * registration: the kernel would not report the FIN again, and the program, told nothing,
 * might never wait on past it. A MOD with the same events re-arms it (the kernel queues a
 * registration that is ready at a MOD), so the next wait goes on with the move. 0, or -errno
 * when it cannot be re-armed (EPOLLEXCLUSIVE: no MOD). m locked.
 */
static int rsk_fw_rearm(struct rsk_fw *m, int fd)
{
	struct rsk_fw_ent *e = rsk_fw_find(m, fd);
	struct epoll_event ev;

	if (e == NULL || e->held || !((e->events | (e->et ? EPOLLET : 0)) & (EPOLLET | EPOLLONESHOT)))
		return 0;
	ev.events = e->et ? e->kev | EPOLLET : e->events;
	ev.data.u64 = e->data;
	return rsk_sys_epoll_ctl(m->epfd, EPOLL_CTL_MOD, fd, &ev);
}

/*
 * @fd, a moving socket whose registration is the only one with @ev's data: settle it (see
 * rsk_fw_settle). 0 drops @ev. Before its FIN is hidden, @rearm(@arg, @fd) re-arms an
 * edge-triggered or one-shot registration (rsk_fw_rearm); when it cannot, the FIN stands.
 */
static int rsk_fw_settle_fd(int fd, struct epoll_event *ev, int64_t end_us, int *moved,
			    int (*rearm)(void *arg, int fd), void *arg)
{
	int rc = rsk_upg_settle_fd(fd, end_us);

	if (rc == RSK_UPG_SETTLE_MOVED) {
		rsk_dbg("epoll: fd %d's report (0x%x) was its move's end: dropped", fd, ev->events);
		*moved = 1;
		return 0; /* the stream's app end is in the set now and reports for itself */
	}
	if (rc != RSK_UPG_SETTLE_HIDE)
		return 1;
	rc = rearm(arg, fd);
	rsk_dbg("epoll: fd %d's move cannot end within the wait: its FIN %s", fd,
		rc < 0 ? "stands" : "hidden");
	if (rc < 0)
		return 1; /* it would never be reported again: the FIN stands, as before */
	ev->events &= ~(uint32_t)RSK_FW_MOVE_BITS;
	return ev->events != 0;
}

static int rsk_fw_rearm_mirrored(void *arg, int fd)
{
	struct rsk_fw *m = arg;
	int rc;

	pthread_mutex_lock(&m->lock);
	rc = rsk_fw_rearm(m, fd);
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int rsk_fw_settle_bare(int epfd, struct epoll_event *ev, int64_t end_us, int *moved);

/* One reported event @ev of a mirrored set. 0 drops it. */
static int rsk_fw_settle_one(struct rsk_fw *m, struct epoll_event *ev, int64_t end_us,
			     int *moved)
{
	int fd;

	pthread_mutex_lock(&m->lock);
	fd = m->dead ? -1 : rsk_fw_fd_of(m, ev->data.u64);
	pthread_mutex_unlock(&m->lock);
	if (fd < 0) /* a quiet set keeps no entries (rsk_fw_follow): ask the kernel's view */
		return rsk_fw_settle_bare(m->epfd, ev, end_us, moved);
	/* (a socket's move never takes the set's lock: no lock across it) */
	return rsk_fw_settle_fd(fd, ev, end_us, moved, rsk_fw_rearm_mirrored, m);
}

/* The registration of an epoll set with an event's data (rsk_fw_each_reg): how many hold it,
 * the last one's number and events. */
struct rsk_fw_bare {
	int epfd, fd, count;
	struct epoll_event reg;
};

static int rsk_fw_bare_one(void *arg, int fd, uint32_t events, uint64_t data)
{
	struct rsk_fw_bare *b = arg;

	if (data == b->reg.data.u64) {
		b->count++;
		b->fd = fd;
		b->reg.events = events;
	}
	return 0;
}

static int rsk_fw_rearm_bare(void *arg, int fd)
{
	struct rsk_fw_bare *b = arg;

	if (!(b->reg.events & (EPOLLET | EPOLLONESHOT)))
		return 0;
	if (b->reg.events & EPOLLONESHOT)
		return -EINVAL; /* fired: the kernel's view lost its events, a MOD could not name them */
	return rsk_sys_epoll_ctl(b->epfd, EPOLL_CTL_MOD, fd, &b->reg);
}

/*
 * One reported event @ev of a set whose mirror holds no entry for it (not mirrored, or quiet:
 * TCP-first sockets' registrations are recorded nowhere, rsk_fw_follow): the set's fdinfo in
 * /proc names the registration with @ev's data, read whole (a costly look, made only for a
 * report with a FIN's bits while a move is under way). Settled when that data is one
 * registration's alone and its fd is moving (rsk_upg_settle_fd tells). 0 drops it.
 */
static int rsk_fw_settle_bare(int epfd, struct epoll_event *ev, int64_t end_us, int *moved)
{
	struct rsk_fw_bare b = {.epfd = epfd, .fd = -1, .reg.data.u64 = ev->data.u64};

	if (rsk_fw_each_reg(epfd, rsk_fw_bare_one, &b) < 0 || b.count != 1)
		return 1;
	return rsk_fw_settle_fd(b.fd, ev, end_us, moved, rsk_fw_rearm_bare, &b);
}

int rsk_fw_settle(int epfd, struct epoll_event *ev, int n, int64_t end_us, int *moved)
{
	struct rsk_fw *m;
	int i, out = 0, keep;

	if (n <= 0 || !rsk_upg_any_moving())
		return n;
	m = rsk_fw_get(epfd);
	for (i = 0; i < n; i++) {
		keep = !(ev[i].events & RSK_FW_MOVE_BITS) ||
		       (m != NULL ? rsk_fw_settle_one(m, &ev[i], end_us, moved)
				  : rsk_fw_settle_bare(epfd, &ev[i], end_us, moved));
		if (keep)
			ev[out++] = ev[i];
	}
	if (m != NULL)
		rsk_fw_put(m);
	return out;
}

/* ---- what other waits may see ---- */

/*
 * Does closing @fd need a real DEL in the sets that mirror it? An accelerated socket that
 * no other number of the application names: with another one, the kernel keeps the
 * registration while that number lives (epoll(7)), and so do we.
 */
static int rsk_fw_close_dels(int fd)
{
	struct rsk_sock *s;
	int del;

	if (!rsk_fdtab_is_accel(rsk_fdtab_load(fd)) || (s = rsk_sock_get(fd)) == NULL)
		return 0;
	del = __atomic_load_n(&s->nfds, __ATOMIC_RELAXED) == 1;
	rsk_sock_put(s);
	return del;
}

void rsk_fw_fd_gone(int fd)
{
	struct rsk_fw *m;
	struct rsk_fw_ent *e;
	int i, del = rsk_fw_close_dels(fd);

	rsk_fw_kill(fd, 0); /* an epoll set closed: its registrations went with it */
	if (!rsk_fdtab_is_accel(rsk_fdtab_load(fd)) &&
	    __atomic_load_n(&rsk_fw_nheld, __ATOMIC_RELAXED) == 0)
		return;
	/*
	 * The number leaves every mirror before its connection can be released, and the kernel
	 * drops its registration first: the kernel would only with the file's last reference,
	 * and the library may hold one a while longer (a moved connection's spare app end while
	 * a send still uses it, calls/upgrade.c), so a close without a DEL (or with the DEL held
	 * back here) went on reporting the application's data for a number it closed.
	 */
	for (i = 0; (m = rsk_fw_next(&i)) != NULL;) {
		pthread_mutex_lock(&m->lock);
		if ((e = rsk_fw_find(m, fd)) != NULL && !e->held && del)
			(void)rsk_sys_epoll_ctl(m->epfd, EPOLL_CTL_DEL, fd, NULL);
		if (e != NULL)
			rsk_fw_remove(m, e); /* (a held DEL is sent by it) */
		pthread_mutex_unlock(&m->lock);
		rsk_fw_put(m);
	}
}

void rsk_fw_flush_all(void)
{
	struct rsk_fw *m;
	int i;

	/* (not from a vfork child: the mirrors are its parent's, who goes on with them, and a
	 * lock a parent's thread holds would never be let go) */
	if (__atomic_load_n(&rsk_fw_nheld, __ATOMIC_RELAXED) == 0 || rsk_proc_pid() != getpid())
		return;
	for (i = 0; (m = rsk_fw_next(&i)) != NULL;) {
		pthread_mutex_lock(&m->lock);
		rsk_fw_flush_held(m);
		rsk_fw_compact(m);
		pthread_mutex_unlock(&m->lock);
		rsk_fw_put(m);
	}
}

void rsk_fw_range_gone(unsigned int first, unsigned int last)
{
	unsigned int i;

	for (i = first; i <= last && i < (unsigned int)rsk_fw_cap(); i++)
		rsk_fw_kill((int)i, 0);
}

void rsk_fw_fd_shared(int fd)
{
	rsk_fw_kill(fd, 1);
	rsk_fw_taint_all(fd);
}

void rsk_fw_fd_relayed(int fd)
{
	rsk_fw_walk_fd(fd);
}

void rsk_fw_poll_shared(void *pollfds, unsigned long n)
{
	const struct pollfd *p = pollfds;
	unsigned long i;

	for (i = 0; i < n; i++)
		rsk_fw_fd_shared(p[i].fd);
}

static void rsk_fw_set_shared(int n, const fd_set *set)
{
	int fd;

	for (fd = 0; set != NULL && fd < n && fd < FD_SETSIZE; fd++)
		if (FD_ISSET(fd, set))
			rsk_fw_fd_shared(fd);
}

void rsk_fw_select_shared(int n, const void *r, const void *w, const void *e)
{
	rsk_fw_set_shared(n, r);
	rsk_fw_set_shared(n, w);
	rsk_fw_set_shared(n, e);
}

static void rsk_fw_taint_walk(struct rsk_sock *s, int fd)
{
	rsk_fw_taint_sock(s, fd);
}

void rsk_fw_all_eager(void)
{
	int i;

	if (!__atomic_load_n(&rsk_fw_active, __ATOMIC_RELAXED))
		return;
	for (i = 0; i < rsk_fw_cap(); i++)
		rsk_fw_kill(i, 1);
	rsk_sock_walk_accel(rsk_fw_taint_walk); /* lazy ones no mirror holds any more, too */
}
