/*
 * Connection management of the shared-memory transport (rsk_shm_cm_ops). A client sends its
 * offer (memfd, the ctl end of its readiness pair, its TCP socket) to the listener's
 * rendezvous before its TCP SYN; the process that accepts the TCP connection claims the offer
 * whose socket is the accepted connection's other end, answers on the offer's connection, and
 * resets the TCP connection (neither end keeps it). In a prefork server, offers a process
 * took for other connections go back into the rendezvous, and a process that misses its
 * offer waits while a sibling holds some (a counter in memory they share). Only processes of
 * the rendezvous owner's user meet (docs/SECURITY.md): each end checks the other's uid as
 * the kernel recorded it (SO_PEERCRED).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/addr.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/fdhide.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/sys.h"
#include "shm.h"
#include "shm_cm.h"
#include "shm_door.h"
#include "shm_rdv.h"
#include "announce.h"

/* How long a process waits for its offer while a sibling process holds some. */
#define RSK_CLAIM_WAIT_MS 1000
/* The rendezvous queue is not the application's: sized for bursts of connects (a full one
 * sends clients to the kernel path, and offers handed back need room). */
#define RSK_RDV_BACKLOG 4096

/* ---- client ---- */

struct rsk_shm_dial {
	int rdv, memfd;
	struct rsk_rdv_where where; /* for a move's knock, after the offer */
};

_Static_assert(sizeof(struct rsk_shm_dial) <= RSK_CM_PRIV, "rsk_dial.priv too small");

static struct rsk_shm_dial *rsk_shm_dial_of(struct rsk_dial *d)
{
	return (struct rsk_shm_dial *)d->priv;
}

/* Our copy of the memfd, once the offer no longer needs it: a reused segment's is the fd
 * its endpoint keeps (sent as it is, never copied), any other is ours to close. */
static void rsk_shm_dial_drop_memfd(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);

	if (p->memfd >= 0 && !(d->ep != NULL && rsk_shm_fd_kept(d->ep, p->memfd)))
		(void)rsk_sys_close(p->memfd);
	p->memfd = -1;
}

static void rsk_shm_dial_close(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);

	if (p->rdv >= 0)
		rsk_fd_unhide_close(p->rdv);
	p->rdv = -1;
	rsk_shm_dial_drop_memfd(d);
}

/*
 * Does the rendezvous on @rdv belong to our user? Anyone in the network namespace can bind
 * an abstract name, and an offer hands over our memory, our readiness fd and our TCP socket:
 * only a listener of our own user may have them. 0, or -EPERM with d->why.
 */
static int rsk_shm_dial_owner(struct rsk_dial *d, uid_t uid)
{
	if (uid != geteuid()) {
		rsk_dbg("shm: the listener runs as uid %u, we as %u: staying on TCP",
			(unsigned int)uid, (unsigned int)geteuid());
		d->why = RDMASOCK_FB_OTHER_USER;
		return -EPERM;
	}
	return 0;
}

/* Find the listener's rendezvous and build our endpoint; every failure is a fallback. */
static int rsk_shm_dial(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	int rc, rung;
	uid_t owner;

	p->memfd = -1;
	p->rdv = rc = rsk_rdv_find(d->dest, &owner, &rung, &p->where);
	if (rc < 0) {
		d->why = rc == -ENOENT ? RDMASOCK_FB_NO_PEER : RDMASOCK_FB_RESOURCES;
		return rc;
	}
	/* A bell rung is our user's listener's (rsk_rdv_find rings no other): no need to ask
	 * who we are again. One that says its listener reads no offer of our version (another
	 * build of the library): nothing to offer, now or later. */
	if (rung == RSK_RDV_RUNG_OTHER) {
		rsk_dbg("shm: the listener's library reads no offer of version %u: staying on TCP",
			RSK_RDV_VERSION);
		d->why = RDMASOCK_FB_VERSION;
		rc = -EPROTONOSUPPORT;
	} else if ((rc = rung ? 0 : rsk_shm_dial_owner(d, owner)) == 0 && !rung && !d->upgrade) {
		/* The listener's accept may not look for an offer it was not told of: start on
		 * TCP, whose offer comes once connected (its event loop watches for those). */
		rsk_dbg("shm: the rendezvous' bell did not ring: starting on TCP");
		d->why = RDMASOCK_FB_TCP_FIRST;
		d->start_tcp = 1;
		rc = -EAGAIN;
	}
	if (rc < 0) {
		(void)rsk_sys_close(p->rdv);
		p->rdv = -1;
		return rc;
	}
	/* Kept (out of the application's way) until the server's answer is read. */
	d->why = RDMASOCK_FB_RESOURCES;
	p->rdv = rc = rsk_fd_hide(p->rdv);
	if (rc < 0)
		return rc;
	p->memfd = rc = rsk_shm_create_lend(d->nbuf, d->buf_size, d->ep_mem, &d->ep);
	if (rc < 0)
		rsk_shm_dial_close(d);
	return rc < 0 ? rc : 0;
}

/*
 * A move's offer is queued: where the listener's processes share the rendezvous (prefork),
 * none of their loops looks at it, so knock at each one's door; the one whose connection it
 * is takes it at its next call (shm_rdv.h, knocks). After the offer, so that a claim the
 * knock sets off finds it. A knock that reaches nobody costs only the move.
 */
static void rsk_shm_knock(const struct rsk_rdv_where *where, int tcp)
{
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);
	int rc;

	if (rsk_sys_getsockname(tcp, (struct sockaddr *)&me, &len) < 0)
		return;
	rc = rsk_rdv_knock(where, (struct sockaddr *)&me, len);
	rsk_dbg("shm: knocked for our move: %d door(s) took it", rc);
}

/*
 * The offer goes before our SYN, so whoever accepts the TCP connection finds it queued. It
 * carries our TCP socket: the server matches it against the connection it accepted, and it
 * keeps the socket alive after our fd is replaced by the app end (we keep no placeholder).
 */
static int rsk_shm_offer(struct rsk_dial *d, int ctl)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	int fds[RSK_RDV_NFDS] = {p->memfd, ctl, d->fd, -1};
	struct rsk_rdv_offer o;
	int rc;

	memset(&o, 0, sizeof(o));
	o.magic = RSK_RDV_MAGIC;
	o.version = RSK_RDV_VERSION;
	o.nbuf = d->ep->nbuf;
	o.buf_size = d->ep->buf_size;
	o.upgrade = d->upgrade ? 1 : 0;
	memcpy(&o.server, d->dest, rsk_sa_len(d->dest));
	rc = rsk_rdv_offer(p->rdv, &o, fds);
	if (rc < 0) {
		d->why = RDMASOCK_FB_RESOURCES;
		return rc;
	}
	rsk_shm_dial_drop_memfd(d); /* the server got its copy; our mapping stays */
	if (d->upgrade)
		rsk_shm_knock(&p->where, d->fd);
	return 0;
}

/* The kernel connect went out: the answer comes on the offer's connection, which the
 * endpoint keeps (out of the application's way) until it is read. */
static void rsk_shm_dialed(struct rsk_dial *d)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);

	rsk_shm_set_answer(d->ep, p->rdv, rsk_rdv_read_answer);
	p->rdv = -1;
}

/*
 * Kernel socket @fd's handshake after waiting up to @ms for it: 1 done, 0 under way, -1
 * failed (refused, reset).
 */
static int rsk_shm_tcp_state(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};

	if (rsk_sys_poll(&p, 1, ms) <= 0)
		return 0;
	if ((p.revents & POLLERR) || ((p.revents & POLLHUP) && !(p.revents & POLLOUT)))
		return -1;
	return (p.revents & POLLOUT) != 0;
}

#define RSK_HANDSHAKE_GRACE_MS 2

/*
 * The mark goes first, then we look at the handshake again. Still not done: the server can
 * accept only later, and it reads the mark before it takes the offer -- withdrawn. Done
 * meanwhile: the server may have taken the offer before the mark reached it, and its answer
 * (left in place for the endpoint) says which happened. A handshake that failed is withdrawn
 * too: the application must see the kernel's error, not our endpoint.
 */
static int rsk_shm_withdraw(struct rsk_dial *d, int fd)
{
	struct rsk_shm_dial *p = rsk_shm_dial_of(d);
	struct pollfd q = {.fd = p->rdv, .events = POLLIN};
	char b = RSK_RDV_WITHDRAW;
	socklen_t len = sizeof(d->peer);
	int st;

	/* A TCP socket has a peer name once its handshake is done (before: ENOTCONN): the
	 * usual answer in one call, whose name the connection keeps (d->peer). */
	if (rsk_sys_getpeername(fd, (struct sockaddr *)&d->peer, &len) == 0) {
		d->peer_len = len;
		return 0;
	}
	/* A loopback handshake is done when connect() returns, unless a busy host left the
	 * packets to ksoftirqd: give it a moment (a full backlog pays it per connect). */
	st = rsk_shm_tcp_state(fd, RSK_HANDSHAKE_GRACE_MS);
	if (st > 0)
		return 0;
	if (rsk_sys_send(p->rdv, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
		return st < 0; /* the server gone or the queue full: the connect goes on as it is */
	if ((st = rsk_shm_tcp_state(fd, 0)) <= 0)
		return 1;
	if (rsk_sys_poll(&q, 1, (int)rsk_config.connect_timeout_ms) <= 0 ||
	    rsk_sys_recv(p->rdv, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
		return 0; /* no answer: the endpoint finds out (a reset), as before */
	return b == RSK_RDV_DECLINE;
}

/*
 * Client of an upgrade, offer out: has the server declined it? The answer is only peeked at
 * (the endpoint reads an acceptance when it needs the server's ctl end). Why it was
 * declined (a fallback reason; RDMASOCK_FB_COUNT: not said), or -1: not (yet).
 */
static int rsk_shm_declined(struct rsk_ep *ep)
{
	int fd = rsk_shm_answer_fd(ep);
	ssize_t n;
	char b;

	if (fd < 0)
		return -1; /* read already: an acceptance (a broken one shows in the stream) */
	n = rsk_sys_recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == -EAGAIN || n == -EINTR || (n == 1 && b == RSK_RDV_ACCEPT))
		return -1;
	if (n == 1 && b == RSK_RDV_DECLINE_VERSION)
		return RDMASOCK_FB_VERSION;
	/* A plain decline (the server cannot move this connection: it keeps the reason it was
	 * counted with), gone without a word (an older build drops what it cannot read; a
	 * listener that closed), or an answer we cannot read: not taken, no reason told. */
	return RDMASOCK_FB_COUNT;
}

static void rsk_shm_undial(struct rsk_dial *d)
{
	rsk_shm_dial_close(d);
}

/* ---- server ---- */

/*
 * One process's share of the held count, so that a sibling that dies holding entries (a
 * worker killed mid-look) can be told apart: its share no longer counts. Without that, every
 * sibling would wait its whole claim bound for each plain or TCP-first client from then on,
 * and drop it.
 */
struct rsk_lslot {
	int32_t pid; /* 0 free, -1 being emptied */
	int32_t n;   /* what it holds (a fork's inherited copies can take it below 0) */
};

#define RSK_LSHARED_SLOTS 64

/* Shared by the processes that inherited the listener (MAP_SHARED, created at listen). */
struct rsk_shm_lshared {
	pthread_mutex_t looking; /* one process looks at a time (robust: a sibling may die) */
	uint32_t held;     /* rendezvous entries taken out (or being taken: counted before the
			    * accept) and not yet claimed, given back or dropped */
	uint32_t shared;   /* the listener is open in more than one process (it forked) */
	uint32_t waiters;  /* processes asleep on held: only they need a wake-up */
	int32_t unslotted; /* held by processes that found no free slot (never verified) */
	uint32_t leaked;   /* a program we do not see may accept on the listener: no new
			    * clients, for good (RSK_LISTEN_LEAKED) */
	struct rsk_lslot slot[RSK_LSHARED_SLOTS];
};

struct rsk_offer {
	struct rsk_offer *next;
	struct rsk_rdv_offer o;
	int conn;                 /* the accepted rendezvous connection */
	uid_t uid, owner;         /* of its sender, and of the rendezvous it came through */
	int bad;                  /* an offer its sender may not make: dropped */
	int fds[RSK_RDV_NFDS];    /* once read (the reply fd is conn unless forwarded) */
	int have;                 /* offer read */
	int hidden;               /* its fds were moved out of the application's way */
	struct sockaddr_storage client; /* the offer's TCP socket's address, once connected */
	int client_known;
	int announced;            /* an upgrade offer we told the process about */
	int waited;               /* a look waited for its offer and gave up */
	int late;                 /* conn is in the listener's late_ep: not waited for again */
	uint32_t looked;          /* the look (l->look) that last read it */
	struct sockaddr_storage to; /* an upgrade's: its TCP socket's peer, before we let it go */
	int to_known;
	/* taken off a rendezvous shared with siblings: its TCP socket stays with it, to be
	 * passed on to the sibling it may be for (the proof that sibling checks) */
	int pass_on;
	/* an upgrade offer a knock said is for a connection of ours (rsk_shm_pull): kept here
	 * for its claim, neither counted as held nor passed on */
	int kept;
};

struct rsk_shm_listener {
	pthread_mutex_t lock;
	int rdv[2];
	uid_t owner[2]; /* of each rendezvous, as the kernel recorded it at listen() */
	int nrdv;
	struct sockaddr_storage bound; /* to listen again after a pause */
	int v6only, paused;
	struct rsk_offer *pending;
	uint32_t nlocal; /* entries in pending (our share of sh->held) */
	struct rsk_shm_lshared *sh;
	int slot;        /* ours in sh->slot, -1 none */
	pid_t slot_pid;  /* the process it was found for (a forked child finds its own) */
	/* each rendezvous' bell (NULL: none, always look), and its count when we last found
	 * that rendezvous empty (rsk_listen_quiet) */
	struct rsk_rdv_bell *bell[2];
	uint64_t bell_seen[2];
	/* Connections taken off the rendezvous whose offer had not come within the loop's wait:
	 * each sits here (one-shot) until it has something to read, and the event loop watches
	 * it (late_w) for the process late_pid. Made at the first such connection (most
	 * listeners never have one, and a listener's fds count against the application's
	 * limit); -1: none yet, or it could not be made (such an offer then waits for the next
	 * rendezvous event). */
	int late_ep;
	pid_t late_pid;
	rsk_watch_t late_w;
	int64_t late_failed_ms; /* when making it failed in late_pid (tried again a while on) */
	uint32_t look;          /* counts looks: a look's later passes skip what it read */
	struct rsk_shm_listener *all_next; /* in rsk_shm_all (the knocks' search) */
};

/* This process's listeners, for the knocks at its door (rsk_shm_knocked). */
static struct rsk_shm_listener *rsk_shm_all;
static pthread_mutex_t rsk_shm_all_lock = PTHREAD_MUTEX_INITIALIZER;

/* How long after late_ep could not be made (EMFILE, ENOMEM) it is tried again. */
#define RSK_LATE_RETRY_MS 1000

static void rsk_lshared_init(struct rsk_shm_lshared *sh)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&sh->looking, &a);
	pthread_mutexattr_destroy(&a);
}

/* Is slot @s, of process @pid, a dead process's? Then its share leaves the total and the
 * slot is free again (one sibling empties it: the one that marks it). Returns 1 if dead. */
static int rsk_lslot_reap(struct rsk_shm_lshared *sh, struct rsk_lslot *s, int32_t pid)
{
	int32_t n;

	if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
		return 0;
	if (!__atomic_compare_exchange_n(&s->pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return 1;
	n = __atomic_exchange_n(&s->n, 0, __ATOMIC_SEQ_CST);
	if (n > 0)
		__atomic_sub_fetch(&sh->held, (uint32_t)n, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->pid, 0, __ATOMIC_SEQ_CST);
	return 1;
}

/* This process's slot, found once per process. NULL when every slot is a live process's:
 * our share then counts in sh->unslotted. */
static struct rsk_lslot *rsk_lslot_mine(struct rsk_shm_listener *l)
{
	pid_t me = rsk_proc_pid();
	int32_t free_pid;
	int i;

	if (l->slot_pid != me) {
		l->slot_pid = me;
		l->slot = -1;
		for (i = 0; i < RSK_LSHARED_SLOTS && l->slot < 0; i++) {
			free_pid = __atomic_load_n(&l->sh->slot[i].pid, __ATOMIC_SEQ_CST);
			(void)rsk_lslot_reap(l->sh, &l->sh->slot[i], free_pid); /* an exited one's */
			free_pid = 0;
			if (__atomic_compare_exchange_n(&l->sh->slot[i].pid, &free_pid, (int32_t)me, 0,
							__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				l->slot = i;
		}
	}
	return l->slot >= 0 ? &l->sh->slot[l->slot] : NULL;
}

/* Our share of the held count moves by @d (the shared total with it). */
static void rsk_lshared_add(struct rsk_shm_listener *l, int32_t d)
{
	struct rsk_lslot *m = rsk_lslot_mine(l);

	__atomic_add_fetch(m != NULL ? &m->n : &l->sh->unslotted, d, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&l->sh->held, (uint32_t)d, __ATOMIC_SEQ_CST);
}

/* What live siblings hold: their slots (a dead one's is emptied on the way) and the
 * unslotted share. Asked only when the total says something is held elsewhere. */
static int32_t rsk_lshared_live_elsewhere(struct rsk_shm_listener *l)
{
	struct rsk_shm_lshared *sh = l->sh;
	int32_t sum = __atomic_load_n(&sh->unslotted, __ATOMIC_SEQ_CST), pid, n;
	pid_t me = rsk_proc_pid();
	int i;

	for (i = 0; i < RSK_LSHARED_SLOTS; i++) {
		pid = __atomic_load_n(&sh->slot[i].pid, __ATOMIC_SEQ_CST);
		n = __atomic_load_n(&sh->slot[i].n, __ATOMIC_SEQ_CST);
		if (pid > 0 && pid != (int32_t)me && n > 0 && !rsk_lslot_reap(sh, &sh->slot[i], pid))
			sum += n;
	}
	return sum;
}

/* The owners of the rendezvous just created (the clients check the same uid); their bells
 * came with them, not seen empty yet (our first accept looks). */
static void rsk_shm_owners(struct rsk_shm_listener *l)
{
	int i;

	for (i = 0; i < l->nrdv; i++) {
		if (rsk_rdv_peer_uid(l->rdv[i], &l->owner[i]) < 0)
			l->owner[i] = geteuid(); /* what the kernel recorded a moment ago */
		l->bell_seen[i] = l->bell[i] != NULL ? rsk_rdv_bell_rings(l->bell[i]) - 1 : 0;
	}
}

static void rsk_shm_bells_close(struct rsk_shm_listener *l)
{
	int i;

	for (i = 0; i < 2; i++) {
		rsk_rdv_bell_close(l->bell[i]);
		l->bell[i] = NULL;
	}
}

static int rsk_shm_listen(const struct sockaddr *bound, int v6only, void **lh)
{
	struct rsk_shm_listener *l = calloc(1, sizeof(*l));
	int n, i;

	if (l == NULL)
		return -ENOMEM;
	l->slot = -1;
	l->sh = mmap(NULL, sizeof(*l->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
		     0);
	n = l->sh == MAP_FAILED
		    ? -ENOMEM
		    : rsk_rdv_listen_bells(bound, v6only, RSK_RDV_BACKLOG, l->rdv, l->bell);
	if (n < 0) {
		if (l->sh != MAP_FAILED)
			munmap(l->sh, sizeof(*l->sh));
		free(l);
		return n;
	}
	rsk_lshared_init(l->sh);
	for (i = 0; i < n; i++)
		l->rdv[i] = rsk_fd_hide(l->rdv[i]);
	l->nrdv = n;
	l->late_ep = -1;
	memcpy(&l->bound, bound, rsk_sa_len(bound));
	l->v6only = v6only;
	rsk_shm_owners(l);
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_lock(&rsk_shm_all_lock);
	l->all_next = rsk_shm_all;
	rsk_shm_all = l;
	pthread_mutex_unlock(&rsk_shm_all_lock);
	*lh = l;
	return 0;
}

static void rsk_offer_close_fd(struct rsk_offer *e, int *fd)
{
	if (*fd < 0)
		return;
	if (e->hidden)
		rsk_fd_unhide_close(*fd);
	else
		(void)rsk_sys_close(*fd);
	*fd = -1;
}

static void rsk_offer_free(struct rsk_offer *e)
{
	int i;

	if (e->fds[RSK_RDV_REPLY] == e->conn)
		e->fds[RSK_RDV_REPLY] = -1; /* one fd, closed once */
	for (i = 0; i < RSK_RDV_NFDS; i++)
		rsk_offer_close_fd(e, &e->fds[i]);
	rsk_offer_close_fd(e, &e->conn);
	free(e);
}

static int rsk_listen_leaked(const struct rsk_shm_listener *l)
{
	return __atomic_load_n(&l->sh->leaked, __ATOMIC_ACQUIRE) != 0;
}

/* Does this process's loop look at the rendezvous (announce upgrade offers, arm late ones)?
 * Not while paused or leaked (the rendezvous is shut), nor once a fork shares it: the loops
 * of several processes would take each other's offers. Under l->lock. */
static int rsk_listen_looks(struct rsk_shm_listener *l)
{
	return !l->paused && !rsk_listen_leaked(l) &&
	       !__atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE);
}

/*
 * A forked child's copy of its parent's late_ep goes: it is the parent's epoll file, which the
 * child never uses (from the fork on the rendezvous is shared, and no process's loop looks,
 * rsk_listen_looks), and it would hold a hidden fd of the child's for the listener's life.
 * Closed at the child's first accept. Locked.
 */
static void rsk_late_drop_inherited(struct rsk_shm_listener *l)
{
	if (l->late_ep < 0 || l->late_pid == rsk_proc_pid())
		return;
	rsk_fd_unhide_close(l->late_ep);
	l->late_ep = -1;
}

/* @e out of this process's late_ep, if it is there (an inherited set is the parent's). */
static void rsk_offer_unlate(struct rsk_shm_listener *l, struct rsk_offer *e)
{
	if (e->late && e->conn >= 0 && l->late_pid == rsk_proc_pid() && l->late_ep >= 0)
		(void)rsk_sys_epoll_ctl(l->late_ep, EPOLL_CTL_DEL, e->conn, NULL);
	e->late = 0;
}

/* Take @e out of the pending list (@pp points at it) and out of the held count. */
static struct rsk_offer *rsk_offer_unlink(struct rsk_shm_listener *l, struct rsk_offer **pp)
{
	struct rsk_offer *e = *pp;

	rsk_offer_unlate(l, e); /* (an accept's look took it: its answer is no late event) */
	*pp = e->next;
	if (!e->kept) { /* (a kept one left the count when it was kept) */
		l->nlocal--;
		rsk_lshared_add(l, -1);
	}
	return e;
}

/* 1 with the look lock held. A sibling that died holding it left its entries half handed
 * back: those clients see their connection close (a reset), the lock is ours. 0 when it is
 * beyond repair: look without it. */
static int rsk_lshared_lock(struct rsk_shm_lshared *sh)
{
	int rc = pthread_mutex_lock(&sh->looking);

	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(&sh->looking);
	return rc == 0;
}

/* Sleep until the held count moves from @seen (or @ms pass). */
static void rsk_lshared_wait(struct rsk_shm_lshared *sh, uint32_t seen, int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	/* Counted before the futex compares held with @seen: a process that moves held after
	 * our count sees us and wakes us, one that moved it before makes the wait return. */
	__atomic_add_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
	(void)rsk_sys_futex(&sh->held, FUTEX_WAIT, seen, &ts);
	__atomic_sub_fetch(&sh->waiters, 1, __ATOMIC_SEQ_CST);
}

static void rsk_lshared_wake(struct rsk_shm_lshared *sh)
{
	if (__atomic_load_n(&sh->shared, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&sh->waiters, __ATOMIC_SEQ_CST) != 0)
		(void)rsk_sys_futex(&sh->held, FUTEX_WAKE, INT32_MAX, NULL);
}

/* Our slot goes back (what we held went with our pending list). */
static void rsk_lslot_release(struct rsk_shm_listener *l)
{
	int32_t me = (int32_t)rsk_proc_pid();

	if (l->slot < 0 || l->slot_pid != (pid_t)me)
		return;
	__atomic_store_n(&l->sh->slot[l->slot].n, 0, __ATOMIC_SEQ_CST);
	(void)__atomic_compare_exchange_n(&l->sh->slot[l->slot].pid, &me, 0, 0, __ATOMIC_SEQ_CST,
					  __ATOMIC_SEQ_CST);
	l->slot = -1;
}

static void rsk_shm_unlisten(void *lh)
{
	struct rsk_shm_listener *l = lh, **pp;
	int i;

	pthread_mutex_lock(&rsk_shm_all_lock); /* (a knock being handled may be looking at it) */
	for (pp = &rsk_shm_all; *pp != NULL && *pp != l; pp = &(*pp)->all_next)
		;
	if (*pp != NULL)
		*pp = l->all_next;
	pthread_mutex_unlock(&rsk_shm_all_lock);

	if (l->late_pid == rsk_proc_pid())
		rsk_evloop_unwatch(l->late_w); /* no late event runs for @l after this */
	while (l->pending != NULL)
		rsk_offer_free(rsk_offer_unlink(l, &l->pending));
	rsk_lshared_wake(l->sh);
	rsk_lslot_release(l);
	for (i = 0; i < l->nrdv; i++)
		rsk_fd_unhide_close(l->rdv[i]);
	if (l->late_ep >= 0)
		rsk_fd_unhide_close(l->late_ep);
	rsk_shm_bells_close(l); /* the names went: no client rings them any more */
	munmap(l->sh, sizeof(*l->sh));
	pthread_mutex_destroy(&l->lock);
	free(l);
}

static int rsk_listen_take(struct rsk_shm_listener *l, int max);
static void rsk_listen_give_back(struct rsk_shm_listener *l);
static void rsk_offer_hide(struct rsk_offer *e);
static void rsk_pending_hide(struct rsk_shm_listener *l);
static int rsk_shm_arm_late(struct rsk_shm_listener *l, int only_due);
static void rsk_shm_late_open(struct rsk_shm_listener *l);

/*
 * Short of fds (or io_uring): new clients must find no rendezvous (they stay on TCP, decided
 * before they commit). Its listening sockets refuse new connections from now on (a shut
 * reading side) but keep what is queued: those clients have committed, and each is taken,
 * one fd at a time, as its TCP connection is accepted. Taking them all now would cost the
 * fds we are short of. (A listener shared with siblings keeps its name while any of them
 * listens.)
 */
static int rsk_shm_pause(struct rsk_shm_listener *l)
{
	int i, changed = 0;

	pthread_mutex_lock(&l->lock);
	if (!l->paused) {
		changed = 1; /* the loop stops watching: a shut listener always polls readable */
		for (i = 0; i < l->nrdv; i++)
			(void)rsk_sys_shutdown(l->rdv[i], SHUT_RD);
		l->paused = 1;
	}
	pthread_mutex_unlock(&l->lock);
	return changed;
}

/*
 * Another program may accept on the TCP listener where no library sees it: a client it
 * accepts would offer here and wait for an answer nobody gives, while that program reads
 * its TCP connection. So the rendezvous refuses new clients from now on (they stay on TCP,
 * decided before they commit), in every process sharing it (the shut reading side and the
 * flag are the listener's, not the process's); what is queued is still taken by our
 * accepts. No lock and no write to the process's memory: this may run in a vfork child
 * about to exec. Returns 0: the loop's edge-triggered watch has seen its last event, and
 * rsk_listen_looks says no to it.
 */
static int rsk_shm_leak(struct rsk_shm_listener *l)
{
	int i, n = l->nrdv;

	__atomic_store_n(&l->sh->leaked, 1, __ATOMIC_RELEASE);
	for (i = 0; i < n && i < 2; i++)
		(void)rsk_sys_shutdown(l->rdv[i], SHUT_RD);
	return 0;
}

/* Paused: is nothing left queued in the shut rendezvous? What is found is taken (a few at
 * most: the process has just got some room back, and dead clients' entries are dropped at
 * the next look). */
#define RSK_RESUME_TAKE 32
static int rsk_listen_drained(struct rsk_shm_listener *l)
{
	return l->nrdv == 0 || rsk_listen_take(l, RSK_RESUME_TAKE) < RSK_RESUME_TAKE;
}

/*
 * Resumed: the entries still without their offer go into late_ep. A paused listener's loop
 * does not look (rsk_shm_listen_event), so a late event while paused used its one shot up,
 * and the entries the resume took off the shut rendezvous were never waited for: with no
 * client knocking, an offer among them would be announced by nobody. Locked; 1: late_ep must
 * be made first (outside the lock).
 */
static int rsk_shm_resume_late(struct rsk_shm_listener *l)
{
	struct rsk_offer *e;

	for (e = l->pending; e != NULL; e = e->next) {
		rsk_offer_hide(e); /* (numbers final before they go into late_ep) */
		e->waited |= !e->have;
	}
	return rsk_shm_arm_late(l, 0);
}

static int rsk_shm_resume(struct rsk_shm_listener *l)
{
	int n, i, changed = 0, late = 0;

	pthread_mutex_lock(&l->lock);
	/* Only once the queue is empty: closing the shut sockets resets what they hold. A
	 * leaked listener stays shut. */
	if (l->paused && !rsk_listen_leaked(l) && rsk_listen_drained(l)) {
		changed = 1;
		for (i = 0; i < l->nrdv; i++)
			rsk_fd_unhide_close(l->rdv[i]);
		l->nrdv = 0;
		rsk_shm_bells_close(l); /* dead before the names go to whoever binds next */
		n = rsk_rdv_listen_bells((struct sockaddr *)&l->bound, l->v6only, RSK_RDV_BACKLOG,
					 l->rdv, l->bell);
		for (i = 0; i < n; i++)
			l->rdv[i] = rsk_fd_hide(l->rdv[i]);
		l->nrdv = n > 0 ? n : 0;
		rsk_shm_owners(l);
		l->paused = n <= 0; /* the name was taken meanwhile: try again later */
		if (rsk_listen_leaked(l)) /* meanwhile, from another thread's exec or send */
			for (i = 0; i < l->nrdv; i++)
				(void)rsk_sys_shutdown(l->rdv[i], SHUT_RD);
		if (rsk_listen_looks(l))
			late = rsk_shm_resume_late(l);
	}
	pthread_mutex_unlock(&l->lock);
	if (late)
		rsk_shm_late_open(l);
	return changed;
}

/* 1 when the rendezvous sockets were closed or made anew (a new socket may get the number of
 * the one closed, so the loop's watch must be made again: epoll dropped the old file's). */
static int rsk_shm_listen_note(void *lh, enum rsk_listen_note note)
{
	struct rsk_shm_listener *l = lh;

	/* Its rendezvous is shared with children from now on: hand offers back (prefork). */
	if (note == RSK_LISTEN_FORKED) {
		__atomic_store_n(&l->sh->shared, 1, __ATOMIC_RELEASE);
		return 1;
	}
	if (note == RSK_LISTEN_LEAKED)
		return rsk_shm_leak(l);
	if (note == RSK_LISTEN_PAUSE)
		return rsk_shm_pause(l);
	if (note == RSK_LISTEN_RESUME)
		return rsk_shm_resume(l);
	return 0;
}

/*
 * May a process of @uid send offers through a rendezvous of @owner? A client must be of the
 * owner's user (it checked the owner, rsk_shm_dial_owner); a sibling process of ours hands
 * back offers it checked (@forwarded) and may run as our user instead (a server that
 * dropped privileges after listen()).
 */
static int rsk_offer_sender_ok(uid_t uid, uid_t owner, int forwarded)
{
	return uid == owner || (forwarded && uid == geteuid());
}

/* A count made for an accept that took nothing goes; a sibling may be waiting on it. */
static void rsk_listen_unreserve(struct rsk_shm_listener *l)
{
	rsk_lshared_add(l, -1);
	rsk_lshared_wake(l->sh);
}

/* Accept up to @max waiting rendezvous connections into the pending list (counted as
 * held), oldest last: FIFO, the order their TCP connections are accepted in. Connections of
 * other users are closed at once: they would hold our fds for nothing. Returns how many.
 * Each is counted as held before its accept: between a sibling's accept and its count, a
 * process that found the rendezvous empty would see nothing held anywhere and call a client
 * of ours plain (it then waits for an answer that never comes). */
static int rsk_listen_take(struct rsk_shm_listener *l, int max)
{
	struct rsk_offer *e, **tail;
	int i, fd, n = 0;
	uint64_t rings;
	uid_t uid;

	for (tail = &l->pending; *tail != NULL;)
		tail = &(*tail)->next;
	for (i = 0; i < l->nrdv; i++) {
		/* (read before: a client rings after its connection is queued) */
		rings = l->bell[i] != NULL ? rsk_rdv_bell_rings(l->bell[i]) : 0;
		while (n < max) {
			rsk_lshared_add(l, 1);
			fd = rsk_sys_accept4(l->rdv[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd == -EAGAIN)
				l->bell_seen[i] = rings; /* empty, with every ring up to here taken */
			e = fd >= 0 ? calloc(1, sizeof(*e)) : NULL;
			if (e == NULL || rsk_rdv_peer_uid(fd, &uid) < 0 ||
			    !rsk_offer_sender_ok(uid, l->owner[i], 1)) {
				rsk_listen_unreserve(l);
				if (fd >= 0)
					(void)rsk_sys_close(fd);
				if (e == NULL)
					break; /* nothing queued, or out of memory */
				free(e);
				continue;
			}
			e->conn = fd;
			e->uid = uid;
			e->owner = l->owner[i];
			e->pass_on = __atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE) != 0;
			e->fds[0] = e->fds[1] = e->fds[2] = e->fds[3] = -1;
			*tail = e;
			tail = &e->next;
			l->nlocal++;
			n++;
		}
	}
	return n;
}

/* Is the client behind offer @e gone (it closed the offer's connection)? */
static int rsk_offer_dead(struct rsk_offer *e)
{
	struct pollfd p = {.fd = e->fds[RSK_RDV_REPLY], .events = POLLIN | POLLRDHUP};

	if (rsk_sys_poll(&p, 1, 0) <= 0)
		return 0;
	return (p.revents & (POLLHUP | POLLERR)) || (p.revents & POLLRDHUP);
}

/* Has the client of an upgrade offer closed the offer's connection (given its move up)? Not
 * a mere RDHUP: a client may shut its writing side after the offer. */
static int rsk_offer_gone(struct rsk_offer *e)
{
	struct pollfd p = {.fd = e->fds[RSK_RDV_REPLY], .events = POLLIN};

	return rsk_sys_poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

/*
 * Entry @e came from a sibling with the connection of a client whose offer had not come
 * (in fds[0]): that connection becomes the entry's own, checked as if accepted here.
 */
static int rsk_offer_unwrap(struct rsk_offer *e)
{
	int conn = e->fds[0];

	e->fds[0] = -1;
	if (e->uid != geteuid() || (e->hidden && (conn = rsk_fd_hide(conn)) < 0)) {
		(void)rsk_sys_close(conn); /* only a sibling of ours passes connections on */
		e->bad = 1;
		return -1;
	}
	rsk_offer_close_fd(e, &e->conn);
	e->conn = conn;
	e->late = 0; /* (a new connection: not in late_ep) */
	if (rsk_rdv_peer_uid(conn, &e->uid) < 0 || !rsk_offer_sender_ok(e->uid, e->owner, 1)) {
		e->bad = 1;
		return -1;
	}
	return 0;
}

/* Read @e's offer if it has come; learn its socket's address once it is connected. Returns
 * -1 when the entry is of no use any more (malformed, abandoned), else 0. */
static int rsk_offer_update(struct rsk_offer *e)
{
	socklen_t len = sizeof(e->client);
	int rc;

	if (e->bad)
		return -1;
	while (!e->have) {
		rc = rsk_rdv_read_offer(e->conn, &e->o, e->fds);
		if (rc == -EAGAIN)
			return 0; /* a client still before its SYN: not the connection we accepted */
		if (rc == -EPROTONOSUPPORT || rc == -EPROTO) {
			/* Another build's offer, or one we cannot parse: declined, so a client that
			 * offered from TCP stays there at once (a client commits before its SYN only
			 * to a listener whose bell says it reads its version). */
			rsk_dbg("shm: declining an offer we cannot read (%s)", strerror(-rc));
			(void)rsk_rdv_decline_version(e->conn);
			e->bad = 1;
			return -1;
		}
		if (rc < 0)
			return -1;
		if (rc == 1) { /* a sibling's: the client's connection itself, still unread */
			if (rsk_offer_unwrap(e) < 0)
				return -1;
			continue;
		}
		if (!rsk_offer_sender_ok(e->uid, e->owner, e->o.forwarded)) {
			e->bad = 1; /* its fds are closed with the entry */
			return -1;
		}
		e->have = 1;
	}
	if (!e->client_known &&
	    rsk_sys_getsockname(e->fds[RSK_RDV_TCP], (struct sockaddr *)&e->client, &len) == 0)
		e->client_known = rsk_sa_port((struct sockaddr *)&e->client) != 0;
	/* An upgrade's TCP connection is the application's and carries on: our reference to
	 * its socket would keep it open after the client closes (no FIN). The address is all
	 * we needed it for. */
	if (e->client_known && e->o.upgrade && e->fds[RSK_RDV_TCP] >= 0 && !e->pass_on) {
		len = sizeof(e->to); /* what rsk_offer_connected_here proves it by, kept */
		e->to_known = rsk_sys_getpeername(e->fds[RSK_RDV_TCP], (struct sockaddr *)&e->to,
						  &len) == 0;
		rsk_offer_close_fd(e, &e->fds[RSK_RDV_TCP]);
	}
	/* A client that gave its upgrade up closed the offer's connection (for good: every
	 * client shuts its writing side after the offer, so RDHUP says nothing). */
	if (e->o.upgrade && rsk_offer_gone(e))
		return -1;
	return e->client_known || !rsk_offer_dead(e) ? 0 : -1;
}

/* Move the fds of an entry we keep past this call out of the application's way. */
static void rsk_offer_hide(struct rsk_offer *e)
{
	int i;

	if (e->hidden)
		return;
	for (i = 0; i < RSK_RDV_NFDS; i++)
		if (e->fds[i] >= 0 && e->fds[i] != e->conn)
			e->fds[i] = rsk_fd_hide(e->fds[i]);
	if (e->conn >= 0) {
		int same = e->fds[RSK_RDV_REPLY] == e->conn;

		e->conn = rsk_fd_hide(e->conn);
		if (same)
			e->fds[RSK_RDV_REPLY] = e->conn;
	}
	e->hidden = 1;
}

static int rsk_sa_is_any(const struct sockaddr_storage *a)
{
	const struct sockaddr_in6 *a6 = (const void *)a;

	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
}

/*
 * Is @e's TCP socket connected to the accepted connection's own address (@cl->local; else
 * the listener's address, or for a wildcard listener @cl->fd's own, asked only now that an
 * offer names its peer; else the listener's port)? The source address alone proves nothing:
 * a forger can bind the client's port too when both set SO_REUSEADDR. The four addresses of
 * a connection belong to one socket on the host, so with the source matched as well, holding
 * it proves the offer comes from the process that owns the client's end.
 */
static int rsk_offer_connected_here(const struct rsk_shm_listener *l, struct rsk_offer *e,
				    struct rsk_claim *cl)
{
	const struct sockaddr_storage *local = cl->local;
	struct sockaddr_storage to;
	socklen_t len = sizeof(to), olen = sizeof(cl->own);

	if (e->fds[RSK_RDV_TCP] < 0 && e->to_known) /* an upgrade's, read while we held it */
		to = e->to;
	else if (rsk_sys_getpeername(e->fds[RSK_RDV_TCP], (struct sockaddr *)&to, &len) < 0)
		return 0; /* not connected (or reset): not the end of an accepted connection */
	/* Either way the accepted connection's own address, exactly as getsockname would
	 * report it: kept for it (cl->own), so the switch does not ask again. */
	if (local == NULL && cl->own_len != 0) {
		local = &cl->own; /* learnt for an earlier entry of this claim */
	} else if (local == NULL && !rsk_sa_is_any(&l->bound)) {
		local = &l->bound; /* every connection it accepts has exactly this address */
		cl->own = l->bound;
		cl->own_len = rsk_sa_len((const struct sockaddr *)&l->bound);
	} else if (local == NULL && cl->fd >= 0 &&
		   rsk_sys_getsockname(cl->fd, (struct sockaddr *)&cl->own, &olen) == 0) {
		local = &cl->own;
		cl->own_len = olen;
	}
	if (local != NULL)
		return rsk_addr_same_v4m((struct sockaddr *)&to, (const struct sockaddr *)local);
	return rsk_sa_port((struct sockaddr *)&to) == rsk_sa_port((const struct sockaddr *)&l->bound);
}

/* Look at every pending entry; take the one whose socket is the other end of the connection
 * accepted from @cl->peer out of the list. */
static struct rsk_offer *rsk_listen_scan(struct rsk_shm_listener *l, struct rsk_claim *cl)
{
	struct rsk_offer *e, **pp, *mine = NULL;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (rsk_offer_update(e) < 0 || (e->have && !e->client_known && rsk_offer_dead(e))) {
			rsk_offer_free(rsk_offer_unlink(l, pp));
			continue;
		}
		/* v4m: a dual-stack listener reports an IPv4 client as ::ffff:a.b.c.d, and an
		 * IPv6 socket connected to ::ffff:a.b.c.d reaches an IPv4 listener as a.b.c.d */
		if (e->client_known &&
		    rsk_addr_same_v4m((struct sockaddr *)&e->client,
				      (const struct sockaddr *)cl->peer) &&
		    rsk_offer_connected_here(l, e, cl)) {
			mine = rsk_offer_unlink(l, pp);
			break; /* the later ones' offers are read when their turn comes */
		}
		pp = &e->next;
	}
	return mine;
}

/* Pass entry @e on to the rendezvous: its offer, or (not come yet) its connection. 0 when
 * it went or is of no use, -errno (the rendezvous is full) when we must keep it. */
static int rsk_offer_pass_on(struct rsk_shm_listener *l, struct rsk_offer *e)
{
	if (rsk_offer_update(e) < 0)
		return 0; /* malformed, or the client went */
	if (e->have && e->fds[RSK_RDV_TCP] < 0)
		return 0; /* (its TCP socket let go: no sibling could prove it; dropped) */
	if (e->have)
		return rsk_rdv_forward(&e->o, e->fds);
	return rsk_rdv_forward_unread((const struct sockaddr *)&l->bound, e->conn);
}

/*
 * A listener shared with sibling processes hands every entry that is not its own back into
 * the rendezvous: the process that accepted their TCP connection may be waiting for them.
 * An entry whose offer has not come yet goes back as it is (never a wait here: siblings'
 * accepts wait for the look lock meanwhile).
 */
static void rsk_listen_give_back(struct rsk_shm_listener *l)
{
	struct rsk_offer *e, **pp;
	int moved = 0, i;

	for (pp = &l->pending; (e = *pp) != NULL;) {
		if (e->kept || rsk_offer_pass_on(l, e) < 0) {
			pp = &e->next; /* rendezvous full: keep it, our next accept looks again */
			continue;
		}
		/* Queued again: rung before it leaves the held count, so a sibling that sees the
		 * count fall sees the ring too and looks (rsk_listen_quiet). */
		for (i = 0; i < l->nrdv; i++)
			if (l->bell[i] != NULL)
				rsk_rdv_bell_ring_own(l->bell[i]);
		rsk_offer_free(rsk_offer_unlink(l, pp));
		moved = 1;
	}
	if (moved)
		rsk_lshared_wake(l->sh);
}

/* Entries held by live sibling processes right now (the shared count less our own, checked
 * against their shares when it is not 0). */
static int32_t rsk_listen_held_elsewhere(struct rsk_shm_listener *l, uint32_t *held)
{
	*held = __atomic_load_n(&l->sh->held, __ATOMIC_SEQ_CST);
	if ((int32_t)(*held - l->nlocal) <= 0)
		return 0;
	return rsk_lshared_live_elsewhere(l);
}

/*
 * Has nothing been queued on our rendezvous since we last found each empty? Then an accept
 * need not look (no accept4 that finds nothing). Only for a rendezvous whose every client
 * rings its bell. Siblings that share it (prefork) ring it too when they hand entries back
 * (rsk_listen_give_back), and share its page (forked with it): until 2026-12-06 a shared
 * rendezvous was always looked at, twice per accept from TCP (the second look below), for
 * clients from other hosts too: two empty accept4 per connection in nginx's workers.
 */
static int rsk_listen_quiet(struct rsk_shm_listener *l)
{
	int i;

	for (i = 0; i < l->nrdv; i++)
		if (l->bell[i] == NULL || rsk_rdv_bell_rings(l->bell[i]) != l->bell_seen[i])
			return 0;
	return 1;
}

/*
 * Find ours, taking queued entries one at a time, oldest first, only as far as the search
 * needs: each costs an fd, and its offer four more once read (a server near its fd limit
 * with hundreds of clients queued). Then (shared with siblings) hand the rest back. Lock
 * held. Siblings look one at a time (the look lock): two that each took the other's offer
 * and handed it back at once could miss both again, and again, until one called its client
 * plain -- a client that then waits for an answer that never comes.
 */
static struct rsk_offer *rsk_listen_look(struct rsk_shm_listener *l, struct rsk_claim *cl)
{
	int locked = rsk_lshared_lock(l->sh);
	struct rsk_offer *e = rsk_listen_scan(l, cl);
	int k;

	for (k = 0; e == NULL && k < 4096 && !rsk_listen_quiet(l) && rsk_listen_take(l, 1) == 1;
	     k++)
		e = rsk_listen_scan(l, cl);
	if (__atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE))
		rsk_listen_give_back(l);
	if (locked)
		pthread_mutex_unlock(&l->sh->looking);
	return e;
}

static struct rsk_offer *rsk_listen_find(struct rsk_shm_listener *l, struct rsk_claim *cl,
					 int wait_ms, int *held_elsewhere)
{
	int64_t end = -1, left; /* the clock only to wait: most accepts find nothing held */
	struct rsk_offer *e;
	uint32_t held;
	int late = 0;

	pthread_mutex_lock(&l->lock);
	rsk_late_drop_inherited(l);
	for (;;) {
		e = rsk_listen_look(l, cl);
		*held_elsewhere = rsk_listen_held_elsewhere(l, &held) > 0;
		if (e == NULL && !*held_elsewhere &&
		    __atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE)) {
			/* A sibling hands back before it stops counting: what it gave back is in
			 * the rendezvous by now. One more look before calling the client plain
			 * (with no sibling, the first look saw all there is). */
			e = rsk_listen_look(l, cl);
			if (e == NULL)
				*held_elsewhere = rsk_listen_held_elsewhere(l, &held) > 0;
		}
		if (e != NULL || !*held_elsewhere)
			break;
		if (end < 0)
			end = rsk_now_ms() + wait_ms;
		if ((left = end - rsk_now_ms()) <= 0)
			break;
		/* A sibling holds entries: ours may be among them. Wait until it lets go. */
		pthread_mutex_unlock(&l->lock);
		rsk_lshared_wait(l->sh, held, (int)left);
		pthread_mutex_lock(&l->lock);
	}
	rsk_pending_hide(l);
	/* The upgrade offers this look read for other connections are the loop's to announce
	 * (armed to fire at once), and the offers of entries it took are the loop's to read
	 * when they come. Not paused or shared: no look would announce them then (a resume
	 * arms what is left). */
	if (rsk_listen_looks(l))
		late = rsk_shm_arm_late(l, 1);
	pthread_mutex_unlock(&l->lock);
	if (late)
		rsk_shm_late_open(l);
	return e;
}

/* ---- moves into a rendezvous shared with siblings (knocks, shm_rdv.h) ---- */

static int rsk_shm_collect_budget(struct rsk_shm_listener *l);

/* Does entry @e hold the upgrade offer of the client at @peer (its offer read if it came)? */
static int rsk_offer_is_for(struct rsk_offer *e, const struct sockaddr_storage *peer)
{
	return rsk_offer_update(e) == 0 && e->have && e->client_known && e->o.upgrade &&
	       rsk_addr_same_v4m((struct sockaddr *)&e->client, (const struct sockaddr *)peer);
}

/* Keep @e for the claim of a connection of ours: out of the held count (siblings must not
 * wait for it), never passed on, and its TCP socket let go now (held by us it would keep the
 * client's end open after the client closes: no FIN). Locked. */
static void rsk_offer_keep(struct rsk_shm_listener *l, struct rsk_offer *e)
{
	e->kept = 1;
	e->announced = 1;
	e->pass_on = 0;
	l->nlocal--;
	rsk_lshared_add(l, -1);
	(void)rsk_offer_update(e);
}

/*
 * A knock said the client at @peer offered its move, and a connection of this process is
 * that client's: take its entry off @l's shared rendezvous now rather than at that
 * connection's next call. Until some process reads it, the queued offer holds the client's
 * TCP socket, so a client that closes right after its offer sends no FIN, and a server
 * waiting to read would wait for ever. Entries of others go back as an accept's look hands
 * them back, under the same look lock. 1 when found.
 */
static int rsk_shm_pull(struct rsk_shm_listener *l, const struct sockaddr_storage *peer)
{
	struct rsk_offer *e, *found = NULL, **tail;
	int locked, k, budget;

	pthread_mutex_lock(&l->lock);
	/* (short of fds: the connection's own claim takes it, from the application's call) */
	if (l->paused || rsk_listen_leaked(l) || !__atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE) ||
	    (budget = rsk_shm_collect_budget(l)) == 0) {
		pthread_mutex_unlock(&l->lock);
		return 0;
	}
	locked = rsk_lshared_lock(l->sh);
	for (tail = &l->pending; (e = *tail) != NULL; tail = &e->next)
		if (found == NULL && !e->kept && rsk_offer_is_for(e, peer))
			found = e;
	for (k = 0; found == NULL && k < budget && rsk_listen_take(l, 1) == 1; k++) {
		e = *tail; /* (the one just taken: appended) */
		tail = &e->next;
		if (rsk_offer_is_for(e, peer))
			found = e;
	}
	if (found != NULL)
		rsk_offer_keep(l, found);
	rsk_listen_give_back(l);
	if (locked)
		pthread_mutex_unlock(&l->sh->looking);
	rsk_lshared_wake(l->sh); /* (the held count moved) */
	rsk_pending_hide(l);
	pthread_mutex_unlock(&l->lock);
	return found != NULL;
}

/* A knock at this process's door, from the event loop: announce it (announce.h); when it is
 * for a connection of ours, pull its entry in. */
static void rsk_shm_knocked(const struct sockaddr_storage *peer)
{
	struct rsk_shm_listener *l;

	if (rsk_transport_upgrade_offer(peer) <= 0)
		return; /* not ours (a sibling's), or not accepted yet: its accept claims it */
	pthread_mutex_lock(&rsk_shm_all_lock);
	for (l = rsk_shm_all; l != NULL && !rsk_shm_pull(l, peer); l = l->all_next)
		;
	pthread_mutex_unlock(&rsk_shm_all_lock);
}

struct rsk_shm_claim {
	struct rsk_offer *e;
};

/* Did the client take its offer back (RSK_RDV_WITHDRAW after it on its connection)? */
static int rsk_offer_withdrawn(struct rsk_offer *e)
{
	char b;

	return e->fds[RSK_RDV_REPLY] >= 0 &&
	       rsk_sys_recv(e->fds[RSK_RDV_REPLY], &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1 &&
	       b == RSK_RDV_WITHDRAW;
}

_Static_assert(sizeof(struct rsk_shm_claim) <= RSK_CM_PRIV, "rsk_claim.priv too small");

static struct rsk_shm_claim *rsk_shm_claim_of(struct rsk_claim *cl)
{
	return (struct rsk_shm_claim *)cl->priv;
}

/*
 * The offer of the client at @cl->peer. None, and no sibling holds any: a plain TCP client.
 * None after waiting for siblings: the client (if it is one of ours) cannot be served.
 */
static int rsk_shm_claim(void *lh, struct rsk_claim *cl, int wait_ms)
{
	struct rsk_shm_listener *l = lh;
	struct rsk_offer *e;
	int elsewhere;

	/* Shared with siblings: no loop looks at the rendezvous, so moves reach this process
	 * by its door (before the look: a knock after it must find the door open). */
	if (__atomic_load_n(&l->sh->shared, __ATOMIC_ACQUIRE) &&
	    rsk_config.tcp_first != RSK_TCP_FIRST_OFF && !rsk_listen_leaked(l))
		(void)rsk_door_open(rsk_shm_knocked);
	/* Offers come before the SYN: the wait is only for siblings holding some. */
	e = rsk_listen_find(lh, cl, wait_ms < RSK_CLAIM_WAIT_MS ? wait_ms : RSK_CLAIM_WAIT_MS,
			    &elsewhere);
	rsk_shm_claim_of(cl)->e = e;

	if (e != NULL && rsk_offer_withdrawn(e)) {
		(void)rsk_rdv_answer(e->fds[RSK_RDV_REPLY], 0, -1); /* one that raced us reads it */
		rsk_offer_free(e);
		rsk_shm_claim_of(cl)->e = e = NULL;
		elsewhere = 0;
	}
	if (e == NULL && !elsewhere) {
		cl->why = RDMASOCK_FB_NO_PEER; /* a plain TCP client */
		return 0;
	}
	if (e == NULL)
		return -ETIMEDOUT;
	cl->nbuf = e->o.nbuf;
	cl->upgrade = e->o.upgrade != 0;
	return 1;
}

static int rsk_shm_claim_open(struct rsk_claim *cl)
{
	struct rsk_offer *e = rsk_shm_claim_of(cl)->e;
	int ctl = e->fds[RSK_RDV_CTL], rc;

	/* The client's ctl end stays with the endpoint for the connection's life: hidden. */
	if (!e->hidden && (ctl = rsk_fd_hide(ctl)) < 0)
		return ctl;
	e->fds[RSK_RDV_CTL] = -1;
	rc = rsk_shm_open(e->fds[RSK_RDV_MEMFD], RSK_SHM_SERVER, ctl, cl->ep_mem, &cl->ep);
	if (rc < 0) {
		e->fds[RSK_RDV_CTL] = ctl;
		e->hidden = 1;
	}
	return rc;
}

static int rsk_shm_answer(struct rsk_claim *cl, int ctl)
{
	int rc = rsk_rdv_answer(rsk_shm_claim_of(cl)->e->fds[RSK_RDV_REPLY], 1, ctl);

	return rc == -ECONNRESET ? -EPIPE : rc; /* either way the client's end is closed */
}

/*
 * Neither end keeps the TCP connection. Ours closes in order: a reset from our side could
 * reach the client while its connect() still waits and fail it with ECONNRESET. The
 * client's socket (the offer's copy) closes with a reset once the client's own fd is gone,
 * after its connect(): that takes our FIN_WAIT socket away too, so neither end keeps
 * TIME_WAIT.
 */
static void rsk_shm_reset_tcp(int fd)
{
	struct linger lg = {1, 0};

	(void)rsk_sys_setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

static void rsk_shm_unclaim(struct rsk_claim *cl, int accepted)
{
	struct rsk_offer *e = rsk_shm_claim_of(cl)->e;

	if (e == NULL)
		return;
	if (!accepted)
		(void)rsk_rdv_answer(e->fds[RSK_RDV_REPLY], 0, -1); /* the client sees the reset */
	/* An upgraded connection ends its TCP part in order (calls/upgrade.c): no reset. */
	if (accepted && !e->o.upgrade && e->fds[RSK_RDV_TCP] >= 0)
		rsk_shm_reset_tcp(e->fds[RSK_RDV_TCP]);
	rsk_offer_free(e); /* memfd mapped, ctl taken by the endpoint */
	rsk_shm_claim_of(cl)->e = NULL;
}

/* ---- upgrade offers, seen from the event loop ---- */

/*
 * Watched only while no sibling shares the rendezvous: the loops of several processes would
 * take each other's offers (a prefork server upgrades only what accept() finds). Asked again
 * after every note (a pause closes the rendezvous, a fork shares it). Not watched at all
 * when this process sets every connection up at connect (RDMASOCK_TCP_FIRST=off): reading
 * an offer takes file descriptors, lowest numbers first, for a moment on the loop's thread,
 * and a program that counts on the lowest free number must not see them.
 */
static int rsk_shm_listen_fd(void *lh, int i)
{
	struct rsk_shm_listener *l = lh;
	int fd;

	if (rsk_config.tcp_first == RSK_TCP_FIRST_OFF)
		return -1;
	pthread_mutex_lock(&l->lock);
	fd = i < l->nrdv && rsk_listen_looks(l) ? l->rdv[i] : -1;
	pthread_mutex_unlock(&l->lock);
	return fd;
}

/* Longest the loop waits for the offers of connections it just took (a few syscalls late;
 * only a client that connects and never sends makes it wait this long). */
#define RSK_ANNOUNCE_WAIT_MS 50
#define RSK_ANNOUNCE_MAX 32
#define RSK_COLLECT_MAX 4096 /* bounded by the rendezvous backlog */

/*
 * How many queued entries the loop may take to look for upgrade offers: each costs an fd,
 * and five once its offer is read. Never from the application's reserve (rsk_fd_reserve):
 * the loop runs beside the application's accepts, and an accept that finds the numbers it
 * counted on gone fails a client that has committed (a reset). A process short of fds leaves
 * the entries queued for its accepts, which take them one at a time (rsk_listen_look).
 */
static int rsk_shm_collect_budget(struct rsk_shm_listener *l)
{
	int low, n, room;

	if (l->nrdv == 0)
		return 0;
	/* What lies above the reserve (the lowest free number against our hidden ones): a
	 * batch far from it; near it, what the free numbers counted now allow as well (the
	 * application's fds may leave fewer than the bounds say). */
	low = rsk_sys_fcntl(l->rdv[0], F_DUPFD_CLOEXEC, 0);
	if (low < 0)
		return 0;
	(void)rsk_sys_close(low);
	room = rsk_fd_headroom(low) - rsk_fd_reserve();
	if (room >= 5 * RSK_COLLECT_MAX)
		return RSK_COLLECT_MAX;
	if (room >= 5 * RSK_ANNOUNCE_MAX)
		return room / 5;
	if (room < 5)
		return 0;
	n = rsk_fd_room_now(l->rdv[0], 16);
	n = n >= 16 ? 2 : n > 5 ? 1 : 0;
	return n < room / 5 ? n : room / 5;
}

static void rsk_shm_late_event(void *lh, uint32_t events);

/* An upgrade offer read and not announced yet (an accept's look read it): the loop's look
 * must come to announce it, and no rendezvous event may be left to bring it. */
static int rsk_offer_due(const struct rsk_offer *e)
{
	return e->have && e->client_known && e->o.upgrade && !e->announced;
}

/*
 * An entry whose offer did not come while the look waited for it (e->waited; its fds hidden:
 * numbers final): into late_ep, armed for one event, so the offer is read when it comes and
 * not at the next client's knock (none may come: the offer of a move would then never be
 * announced, and its client would stay on TCP). Armed again at each look while it stays
 * unread; out again once read (an accept's look may read it). An offer read and not
 * announced is armed for writing: it fires at once, and the loop looks. Locked. Returns 1
 * when it needs a late_ep this process does not have yet (rsk_shm_late_open, outside the
 * lock).
 */
static int rsk_offer_late(struct rsk_shm_listener *l, struct rsk_offer *e)
{
	int due = rsk_offer_due(e);
	struct epoll_event ev = {.events = (due ? EPOLLOUT : EPOLLIN | EPOLLRDHUP) | EPOLLONESHOT};
	int ours = l->late_pid == rsk_proc_pid() && l->late_ep >= 0, rc;

	/* (in a parent's set, inherited, it is not ours to arm) */
	if (e->late && (!ours || (e->have && !due) || e->conn < 0))
		rsk_offer_unlate(l, e);
	if (e->conn < 0 || (!due && (e->have || !e->waited)))
		return 0;
	if (!ours) /* (failed here: such offers wait for a knock, and it is tried again later) */
		return l->late_pid != rsk_proc_pid() ||
		       rsk_now_ms() - l->late_failed_ms >= RSK_LATE_RETRY_MS;
	rc = rsk_sys_epoll_ctl(l->late_ep, e->late ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, e->conn, &ev);
	if (rc == -ENOENT || rc == -EEXIST) /* (our record of it was off: the kernel's wins) */
		rc = rsk_sys_epoll_ctl(l->late_ep, rc == -ENOENT ? EPOLL_CTL_ADD : EPOLL_CTL_MOD,
				       e->conn, &ev);
	e->late = rc == 0;
	return 0;
}

/*
 * This process's late_ep, made and watched at its first use, without the listener's lock (a
 * watch takes the loop's lock, which a loop callback holds while it takes ours), then its
 * entries armed. Made once per process (tried again RSK_LATE_RETRY_MS after a failure: one
 * short moment of EMFILE must not leave late offers to knocks for good); a forked child's
 * copy of its parent's is the parent's epoll file: the child makes its own.
 */
static void rsk_shm_late_open(struct rsk_shm_listener *l)
{
	rsk_watch_t w = 0;
	struct rsk_offer *e;
	int fd = rsk_sys_epoll_create1(EPOLL_CLOEXEC);

	if (fd >= 0)
		fd = rsk_fd_hide(fd);
	if (fd >= 0 && rsk_evloop_watch(fd, EPOLLIN | EPOLLET, rsk_shm_late_event, l, &w) < 0) {
		rsk_fd_unhide_close(fd);
		fd = -1;
	}
	pthread_mutex_lock(&l->lock);
	if (l->late_pid == rsk_proc_pid() && l->late_ep >= 0) { /* (made meanwhile: keep it) */
		pthread_mutex_unlock(&l->lock);
		rsk_evloop_unwatch(w);
		if (fd >= 0)
			rsk_fd_unhide_close(fd);
		return;
	}
	rsk_late_drop_inherited(l); /* (ours was checked above: any left is the parent's) */
	if (fd < 0)
		l->late_failed_ms = rsk_now_ms();
	l->late_ep = fd;
	l->late_w = w;
	l->late_pid = rsk_proc_pid();
	for (e = l->pending; e != NULL; e = e->next)
		(void)rsk_offer_late(l, e);
	pthread_mutex_unlock(&l->lock);
}

/* What late_ep reported is consumed (each entry is armed again by the look that follows). */
static void rsk_shm_late_drain(struct rsk_shm_listener *l)
{
	struct epoll_event ev[16];

	while (l->late_ep >= 0 && rsk_sys_epoll_wait(l->late_ep, ev, 16, 0) == 16)
		;
}

/* Take what is queued (@take: the look's first pass) and read the offers (waiting for them
 * until @end, in ms); collect up to RSK_ANNOUNCE_MAX upgrade offers not announced yet.
 * Entries this look read in an earlier pass are passed over: a burst of N offers costs N
 * reads, not N each pass (an offer that came since is read through late_ep). */
static int rsk_shm_collect(struct rsk_shm_listener *l,
			   struct sockaddr_storage peers[RSK_ANNOUNCE_MAX], int64_t end, int take)
{
	int64_t left;
	struct rsk_offer *e, **pp;
	struct pollfd p;
	int n = 0;

	if (take) {
		l->look++;
		rsk_listen_take(l, rsk_shm_collect_budget(l));
	}
	for (pp = &l->pending; (e = *pp) != NULL && n < RSK_ANNOUNCE_MAX;) {
		if (!take && e->looked == l->look) {
			pp = &e->next;
			continue;
		}
		e->looked = l->look;
		/* A client sends its offer right after it connects (a few syscalls later); one
		 * that was late before wakes us through late_ep instead */
		while (!e->have && !e->late && e->conn >= 0 && (left = end - rsk_now_ms()) > 0) {
			p = (struct pollfd){.fd = e->conn, .events = POLLIN};
			if (rsk_sys_poll(&p, 1, (int)left) <= 0 || rsk_offer_update(e) < 0)
				break;
		}
		e->waited |= !e->have; /* (its deadline passed, or the wait failed: EINTR) */
		if (rsk_offer_update(e) < 0) { /* malformed, or given up: its fds go now */
			rsk_offer_free(rsk_offer_unlink(l, pp));
			continue;
		}
		pp = &e->next;
		if (!e->have || !e->client_known || !e->o.upgrade || e->announced)
			continue;
		e->announced = 1;
		peers[n++] = e->client;
	}
	rsk_pending_hide(l);
	return n;
}

/* Every pending entry's fds above the application's numbers (what we keep must not take
 * them), final before they go into late_ep. Locked. */
static void rsk_pending_hide(struct rsk_shm_listener *l)
{
	struct rsk_offer *e;

	for (e = l->pending; e != NULL; e = e->next)
		rsk_offer_hide(e);
}

/*
 * Every entry still without its offer into late_ep (armed again: the late event that woke
 * this look used its one shot up). After an accept's look (@accepted), what no rendezvous
 * event will bring the loop to: the upgrade offers it read and did not announce, and the
 * entries it took whose offer has not come. The accept emptied the rendezvous before the
 * loop looked, so a client whose offer came a moment after its rendezvous connect waited for
 * a look that never came (a TCP-first connection of test_version_mix stayed on TCP so).
 * Locked. 1: this process needs its late_ep made first.
 */
static int rsk_shm_arm_late(struct rsk_shm_listener *l, int accepted)
{
	struct rsk_offer *e;
	int late = 0;

	for (e = l->pending; e != NULL; e = e->next) {
		if (accepted && !e->have)
			e->waited = 1; /* (no look waits for it: its offer wakes the loop) */
		if (!accepted || rsk_offer_due(e) || !e->have)
			late |= rsk_offer_late(l, e);
	}
	return late;
}

static void rsk_shm_listen_event(void *lh, int i)
{
	struct rsk_shm_listener *l = lh;
	struct sockaddr_storage peers[RSK_ANNOUNCE_MAX];
	int64_t end = rsk_now_ms() + RSK_ANNOUNCE_WAIT_MS;
	int n, k, pass = 0, late = 0, looks;

	(void)i;
	/* Until a batch comes back short: the entries were taken off the rendezvous, so nothing
	 * would wake us for offers left over (a burst of more than a batch once waited, never
	 * announced, for the next client to knock: redis-benchmark -c 200's last clients ended
	 * on TCP). Only the first pass takes from the rendezvous (later clients make an edge of
	 * their own), and each announces entries not announced before, so it ends. */
	do {
		pthread_mutex_lock(&l->lock);
		looks = rsk_listen_looks(l);
		n = looks ? rsk_shm_collect(l, peers, end, pass++ == 0) : 0;
		if (looks && n < RSK_ANNOUNCE_MAX) /* (the last pass: arm each entry once) */
			late = rsk_shm_arm_late(l, 0);
		pthread_mutex_unlock(&l->lock);
		/* Outside the lock: the connection that wants it claims it from its own call (one
		 * not accepted yet claims it at accept). */
		for (k = 0; k < n; k++)
			(void)rsk_transport_upgrade_offer(&peers[k]);
	} while (n == RSK_ANNOUNCE_MAX);
	if (late)
		rsk_shm_late_open(l);
}

/* A late entry has something to read (its offer, or its client went): look again. */
static void rsk_shm_late_event(void *lh, uint32_t events)
{
	struct rsk_shm_listener *l = lh;

	(void)events;
	pthread_mutex_lock(&l->lock);
	rsk_shm_late_drain(l);
	pthread_mutex_unlock(&l->lock);
	rsk_shm_listen_event(l, 0);
}

const struct rsk_cm_ops rsk_shm_cm_ops = {
	.ep_size = rsk_shm_ep_size,
	.fork_share = 1,
	.dial = rsk_shm_dial,
	.offer = rsk_shm_offer,
	.withdraw = rsk_shm_withdraw,
	.dialed = rsk_shm_dialed,
	.undial = rsk_shm_undial,
	.declined = rsk_shm_declined,
	.listen = rsk_shm_listen,
	.listen_fd = rsk_shm_listen_fd,
	.listen_event = rsk_shm_listen_event,
	.listen_note = rsk_shm_listen_note,
	.unlisten = rsk_shm_unlisten,
	.claim = rsk_shm_claim,
	.claim_open = rsk_shm_claim_open,
	.answer = rsk_shm_answer,
	.unclaim = rsk_shm_unclaim,
	.shown = rsk_shm_attached,
	.fin_sent = rsk_shm_fin_sent,
	.peer_ended = rsk_shm_peer_ended,
	.peer_died = rsk_shm_peer_died,
	.prefork = rsk_shm_prefork,
	.ep_fds = rsk_shm_ep_fds,
};
