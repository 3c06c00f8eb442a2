/*
 * Same-host rendezvous and handshake messages (see shm_rdv.h). Names live in the abstract
 * unix namespace of the caller's network namespace, so peers in other namespaces never meet,
 * and the namespace's inode is part of the name as well (sockets can outlive a setns()).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/sweep.h"
#include "base/sys.h"
#include "shm.h"
#include "shm_rdv.h"

/* The network namespace's inode, looked up once per process image: a process that moves
 * to another namespace (setns) after its first connection keeps the first one's names. */
static unsigned long rsk_rdv_netns(void)
{
	static unsigned long ino;
	struct stat st;

	if (__atomic_load_n(&ino, __ATOMIC_RELAXED) == 0 && stat("/proc/self/ns/net", &st) == 0)
		__atomic_store_n(&ino, (unsigned long)st.st_ino, __ATOMIC_RELAXED);
	return __atomic_load_n(&ino, __ATOMIC_RELAXED);
}

/* The address of @sa as text; IPv4-mapped IPv6 addresses are written as IPv4. */
static int rsk_rdv_addr_str(const struct sockaddr *sa, char *out, size_t size, int *v4, int *any,
			   unsigned int *port)
{
	const struct sockaddr_in *s4 = (const void *)sa;
	const struct sockaddr_in6 *s6 = (const void *)sa;
	struct in_addr a4;

	if (sa->sa_family == AF_INET) {
		*v4 = 1;
		*port = ntohs(s4->sin_port);
		*any = s4->sin_addr.s_addr == htonl(INADDR_ANY);
		return inet_ntop(AF_INET, &s4->sin_addr, out, (socklen_t)size) ? 0 : -EINVAL;
	}
	if (sa->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	*port = ntohs(s6->sin6_port);
	if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		*v4 = 1;
		memcpy(&a4, &s6->sin6_addr.s6_addr[12], 4);
		*any = a4.s_addr == htonl(INADDR_ANY);
		return inet_ntop(AF_INET, &a4, out, (socklen_t)size) ? 0 : -EINVAL;
	}
	*v4 = 0;
	*any = IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr);
	return inet_ntop(AF_INET6, &s6->sin6_addr, out, (socklen_t)size) ? 0 : -EINVAL;
}

/* Abstract name "\0rsk1/<kind>/<netns>/<what>/<port>"; returns the sockaddr length. */
static socklen_t rsk_rdv_name(struct sockaddr_un *un, const char *kind, const char *what,
			     unsigned int port)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "rsk1/%s/%lu/%s/%u", kind,
		     rsk_rdv_netns(), what, port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int rsk_rdv_unix_socket(void)
{
	return rsk_sys_socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static struct rsk_rdv_bell *rsk_rdv_bell_create(const char *what, unsigned int port);

/* One rendezvous name: bound (ours from here), then its bell (@bell, may be NULL), then
 * listening. */
static int rsk_rdv_listen_one(const char *what, unsigned int port, int backlog,
			      struct rsk_rdv_bell **bell)
{
	struct sockaddr_un un;
	socklen_t len = rsk_rdv_name(&un, "l", what, port);
	int fd = rsk_rdv_unix_socket(), rc;

	if (fd < 0)
		return fd;
	rc = rsk_sys_bind(fd, (struct sockaddr *)&un, len);
	if (rc == 0 && bell != NULL)
		*bell = rsk_rdv_bell_create(what, port);
	if (rc == 0)
		rc = rsk_sys_listen(fd, backlog);
	if (rc < 0) {
		if (bell != NULL) {
			rsk_rdv_bell_close(*bell);
			*bell = NULL;
		}
		(void)rsk_sys_close(fd);
		return rc;
	}
	return fd;
}

int rsk_rdv_listen_bells(const struct sockaddr *bound, int v6only, int backlog, int fds[2],
			 struct rsk_rdv_bell *bells[2])
{
	char addr[INET6_ADDRSTRLEN];
	unsigned int port;
	int v4, any, rc, n = 0;

	if (bells != NULL)
		bells[0] = bells[1] = NULL;
	rc = rsk_rdv_addr_str(bound, addr, sizeof(addr), &v4, &any, &port);
	if (rc < 0)
		return rc;
	if (!any)
		rc = rsk_rdv_listen_one(addr, port, backlog, bells != NULL ? &bells[0] : NULL);
	else
		rc = rsk_rdv_listen_one(v4 ? "any4" : "any6", port, backlog,
					bells != NULL ? &bells[0] : NULL);
	if (rc < 0)
		return rc;
	fds[n++] = rc;
	if (any && !v4 && !v6only) { /* dual-stack wildcard: IPv4 clients find it too */
		rc = rsk_rdv_listen_one("any4", port, backlog, bells != NULL ? &bells[1] : NULL);
		if (rc < 0) {
			(void)rsk_sys_close(fds[0]);
			if (bells != NULL) {
				rsk_rdv_bell_close(bells[0]);
				bells[0] = NULL;
			}
			return rc;
		}
		fds[n++] = rc;
	}
	return n;
}

int rsk_rdv_listen(const struct sockaddr *bound, int v6only, int backlog, int fds[2])
{
	return rsk_rdv_listen_bells(bound, v6only, backlog, fds, NULL);
}

/* Connect @fd to listener name (kind "l", @what, @port): 0, -ENOENT, or -errno. */
static int rsk_rdv_connect_name(int fd, const char *what, unsigned int port)
{
	struct sockaddr_un un;
	socklen_t len = rsk_rdv_name(&un, "l", what, port);

	int rc = rsk_sys_connect(fd, (struct sockaddr *)&un, len);

	if (rc == -ECONNREFUSED || rc == -ENOENT)
		return -ENOENT;
	return rc == -EINPROGRESS ? 0 : rc;
}

/* Connect @fd to @dest's rendezvous: its own address's name, else its wildcard's; the one
 * that answered in @what (may be NULL), with the port. 0 or -errno. */
static int rsk_rdv_connect_rdv_at(int fd, const struct sockaddr *dest, char *what,
				  unsigned int *port_out)
{
	char addr[INET6_ADDRSTRLEN];
	unsigned int port;
	int v4, any, rc;

	rc = rsk_rdv_addr_str(dest, addr, sizeof(addr), &v4, &any, &port);
	if (rc < 0)
		return rc;
	rc = rsk_rdv_connect_name(fd, addr, port);
	if (rc == -ENOENT) {
		strcpy(addr, v4 ? "any4" : "any6");
		rc = rsk_rdv_connect_name(fd, addr, port);
	}
	if (rc == 0 && what != NULL) {
		strcpy(what, addr);
		*port_out = port;
	}
	return rc;
}

static int rsk_rdv_connect_rdv(int fd, const struct sockaddr *dest)
{
	return rsk_rdv_connect_rdv_at(fd, dest, NULL, NULL);
}

static int rsk_rdv_peer_cred(int conn, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);

	return rsk_sys_getsockopt(conn, SOL_SOCKET, SO_PEERCRED, cr, &len);
}

int rsk_rdv_find(const struct sockaddr *dest, uid_t *owner, int *rung, struct rsk_rdv_where *where)
{
	struct rsk_rdv_where w = {.port = 0};
	struct ucred cr;
	int fd = rsk_rdv_unix_socket(), rc;

	if (rung != NULL)
		*rung = 0;
	if (fd < 0)
		return fd;
	rc = rsk_rdv_connect_rdv_at(fd, dest, w.what, &w.port);
	if (rc == 0 && (rc = rsk_rdv_peer_cred(fd, &cr)) == 0 && owner != NULL)
		*owner = cr.uid;
	if (rc < 0) {
		(void)rsk_sys_close(fd);
		return rc;
	}
	w.pid = cr.pid;
	if (where != NULL)
		*where = w;
	/* Our connection is queued: the bell says so (only a listener of our own user's), and
	 * whether that listener reads our offers. */
	if (cr.uid == geteuid() && (rc = rsk_rdv_ring(w.what, w.port, w.pid)) > 0 && rung != NULL)
		*rung = rc;
	return fd;
}

int rsk_rdv_peer_uid(int conn, uid_t *uid)
{
	struct ucred cr;
	int rc = rsk_rdv_peer_cred(conn, &cr);

	if (rc < 0)
		return rc;
	*uid = cr.uid;
	return 0;
}

int rsk_rdv_exists(const struct sockaddr *bound)
{
	int fd = rsk_rdv_unix_socket(), rc;

	if (fd < 0)
		return 0;
	rc = rsk_rdv_connect_rdv(fd, bound); /* a look, no offer: no ring */
	(void)rsk_sys_close(fd);
	return rc == 0;
}

static void rsk_rdv_close_fds(const int *fds, int nfds)
{
	int i;

	for (i = 0; i < nfds; i++)
		(void)rsk_sys_close(fds[i]);
}

static int rsk_rdv_send(int conn, const void *data, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	struct iovec iov = {(void *)data, len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;
	ssize_t n;

	memset(&cbuf, 0, sizeof(cbuf));
	if (nfds > 0) {
		msg.msg_control = cbuf.space;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	n = rsk_sys_sendmsg(conn, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return (int)n;
	return n == (ssize_t)len ? 0 : -EMSGSIZE;
}

/* Receive a message of up to @len bytes (its length in *@got) with up to 4 fds; returns the
 * fd count or -errno (-EPROTO: more fds than that, none kept). */
static int rsk_rdv_recv_msg(int conn, void *data, size_t len, int fds[4], size_t *got_len)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	struct iovec iov = {data, len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;
	int nfds = 0, i, got;
	ssize_t n;

	msg.msg_control = cbuf.space;
	msg.msg_controllen = sizeof(cbuf.space);
	n = rsk_sys_recvmsg(conn, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return (int)n;
	for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		got = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (i = 0; i < got; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
			/* On the lowest free numbers for now: the caller moves what it keeps out of
			 * the application's way (most of them are closed before it returns). */
			if (nfds < 4)
				fds[nfds++] = fd;
			else
				(void)rsk_sys_close(fd);
		}
	}
	*got_len = (size_t)n;
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		rsk_rdv_close_fds(fds, nfds);
		return -EPROTO;
	}
	return nfds;
}

/* Receive a message of exactly @len bytes with up to 4 fds; returns the fd count or -errno. */
static int rsk_rdv_recv(int conn, void *data, size_t len, int fds[4])
{
	size_t n = 0;
	int nfds = rsk_rdv_recv_msg(conn, data, len, fds, &n);

	if (nfds >= 0 && n != len) {
		rsk_rdv_close_fds(fds, nfds);
		return n == 0 ? -ECONNRESET : -EPROTO;
	}
	return nfds;
}

int rsk_rdv_offer(int conn, const struct rsk_rdv_offer *o, const int fds[RSK_RDV_NFDS])
{
	return rsk_rdv_send(conn, o, sizeof(*o), fds, RSK_RDV_NFDS - 1);
}

_Static_assert(offsetof(struct rsk_rdv_offer, magic) == offsetof(struct rsk_rdv_hdr, magic) &&
		       offsetof(struct rsk_rdv_offer, version) ==
			       offsetof(struct rsk_rdv_hdr, version) &&
		       sizeof(struct rsk_rdv_hdr) == 8,
	       "an offer starts with the frozen header");

/*
 * Is the @n bytes read into @o (with @nfds fds) an offer we can take? 0; -EPROTONOSUPPORT
 * when its frozen header (struct rsk_rdv_hdr) names a version we do not read (what follows
 * it is that version's, whatever its length); -EPROTO when it is not a rendezvous message
 * or not a well-formed one of our version.
 */
static int rsk_rdv_offer_check(const struct rsk_rdv_offer *o, size_t n, int nfds)
{
	int fam = o->server.ss_family;

	if (n < sizeof(struct rsk_rdv_hdr) || o->magic != RSK_RDV_MAGIC)
		return -EPROTO;
	if (o->version < RSK_RDV_VERSION_MIN || o->version > RSK_RDV_VERSION)
		return -EPROTONOSUPPORT;
	if (n != sizeof(*o))
		return -EPROTO;
	if (o->forwarded == RSK_RDV_FWD_UNREAD)
		return nfds == 1 ? 0 : -EPROTO;
	return rsk_shm_size(o->nbuf, o->buf_size) != 0 && (fam == AF_INET || fam == AF_INET6) &&
			       (o->forwarded == RSK_RDV_FWD_NONE ||
				o->forwarded == RSK_RDV_FWD_OFFER) &&
			       o->upgrade <= RSK_RDV_UPGRADE_HOPS + 1 &&
			       nfds == (o->forwarded ? RSK_RDV_NFDS : RSK_RDV_NFDS - 1)
		       ? 0
		       : -EPROTO;
}

int rsk_rdv_read_offer(int conn, struct rsk_rdv_offer *o, int fds[RSK_RDV_NFDS])
{
	int got[RSK_RDV_NFDS], nfds, i, rc;
	size_t n = 0;

	memset(o, 0, sizeof(*o));
	nfds = rsk_rdv_recv_msg(conn, o, sizeof(*o), got, &n);
	if (nfds < 0)
		return nfds;
	if (n == 0 && nfds == 0)
		return -ECONNRESET;
	/* (a longer message of another version leaves its rest unread: the connection is
	 * answered and closed) */
	if ((rc = rsk_rdv_offer_check(o, n, nfds)) < 0) {
		rsk_rdv_close_fds(got, nfds);
		return rc;
	}
	for (i = 0; i < nfds; i++)
		fds[i] = got[i];
	if (o->forwarded == RSK_RDV_FWD_UNREAD)
		return 1;
	if (!o->forwarded)
		fds[RSK_RDV_REPLY] = conn;
	return 0;
}

/* Pass message @f with @nfds fds to the rendezvous named for @server, on a connection of
 * its own. */
static int rsk_rdv_pass(const struct sockaddr *server, const struct rsk_rdv_offer *f,
			const int *fds, int nfds)
{
	int fd = rsk_rdv_unix_socket(), rc;

	if (fd < 0)
		return fd;
	rc = rsk_rdv_connect_rdv(fd, server);
	if (rc == 0)
		rc = rsk_rdv_send(fd, f, sizeof(*f), fds, nfds);
	(void)rsk_sys_close(fd); /* queued data and fds stay with the receiver */
	return rc;
}

int rsk_rdv_forward(const struct rsk_rdv_offer *o, const int fds[RSK_RDV_NFDS])
{
	struct rsk_rdv_offer f = *o;

	f.forwarded = RSK_RDV_FWD_OFFER;
	if (f.upgrade > 0 && f.upgrade <= RSK_RDV_UPGRADE_HOPS)
		f.upgrade++;
	return rsk_rdv_pass((const struct sockaddr *)&o->server, &f, fds, RSK_RDV_NFDS);
}

int rsk_rdv_forward_unread(const struct sockaddr *server, int conn)
{
	struct rsk_rdv_offer f;

	memset(&f, 0, sizeof(f));
	f.magic = RSK_RDV_MAGIC;
	f.version = RSK_RDV_VERSION;
	f.forwarded = RSK_RDV_FWD_UNREAD;
	return rsk_rdv_pass(server, &f, &conn, 1);
}

int rsk_rdv_answer(int reply, int accept, int ctl)
{
	char b = accept ? RSK_RDV_ACCEPT : RSK_RDV_DECLINE;

	return rsk_rdv_send(reply, &b, 1, &ctl, accept ? 1 : 0);
}

int rsk_rdv_decline_version(int reply)
{
	char b = RSK_RDV_DECLINE_VERSION;

	return rsk_rdv_send(reply, &b, 1, NULL, 0);
}

int rsk_rdv_read_answer(int conn, int wait_ms)
{
	struct pollfd p = {.fd = conn, .events = POLLIN};
	char b = 0;
	int fds[4], nfds, i;

	if (wait_ms > 0)
		(void)rsk_sys_poll(&p, 1, wait_ms);
	nfds = rsk_rdv_recv(conn, &b, 1, fds);
	if (nfds < 0)
		return nfds == -EAGAIN || nfds == -ECONNRESET ? nfds : -EPROTO;
	if (b == RSK_RDV_ACCEPT && nfds == 1)
		return fds[0];
	for (i = 0; i < nfds; i++)
		(void)rsk_sys_close(fds[i]);
	if (b == RSK_RDV_DECLINE_VERSION)
		return -EPROTONOSUPPORT;
	return b == RSK_RDV_DECLINE ? -ECONNREFUSED : -EPROTO;
}

/* ---- names for rdmasock doctor (tools/doctor.c) ---- */

int rsk_rdv_names(const struct sockaddr *dest, struct sockaddr_un *un, socklen_t len[2])
{
	char addr[INET6_ADDRSTRLEN];
	unsigned int port;
	int v4, any, rc = rsk_rdv_addr_str(dest, addr, sizeof(addr), &v4, &any, &port);

	if (rc < 0)
		return rc;
	len[0] = rsk_rdv_name(&un[0], "l", addr, port); /* as rsk_rdv_connect_rdv tries them */
	len[1] = rsk_rdv_name(&un[1], "l", v4 ? "any4" : "any6", port);
	return 2;
}

/* ---- the doorbell ---- */

/*
 * A listener's accept would look into its rendezvous for a queued offer (an accept4 that
 * nearly always finds nothing: most clients start on TCP and offer later). Instead every
 * client rings the rendezvous' bell, a counter in a small file of the listener's user, once
 * its rendezvous connection is queued and before its SYN; a listener that saw the queue
 * empty at ring count N, and reads N still, knows that nothing was queued since. A client
 * keeps its mapping, and maps the file again when the bell in it is dead (its listener
 * closed it) or names another process than the one that listens now (its listener died).
 */
/*
 * The page says which offer versions its listener reads, so a client commits at connect only
 * to one that reads its own (any other starts on TCP or stays there: rsk_rdv_ring). Builds
 * before that wrote RSK_BELL_MAGIC_V1 and no versions: their clients do not take ours for a
 * live bell (they start on TCP and offer in band, where a decline costs nothing), and ours
 * ring theirs without committing to them.
 */
#define RSK_BELL_MAGIC_V1 0x4c4c4542u /* "BELL" */
#define RSK_BELL_MAGIC 0x324c4542u    /* "BEL2" */
/* Forked holders recorded: 16 places in the frozen page, 240 more appended after `forked`
 * (2026-12-05: nginx's `worker_processes auto` on a larger host forks more than 16, and a
 * worker not recorded never heard a knock, so its connections never moved). More than that
 * go unrecorded: no heir among them, no knock. */
#define RSK_BELL_KIN 16
#define RSK_BELL_KIN_MORE 240
#define RSK_BELL_KIN_ALL (RSK_BELL_KIN + RSK_BELL_KIN_MORE)

/* The shared file's contents. FROZEN layout, whatever the version: a listener of any
 * version writes it so, a client of any version reads it so (append only, never reorder). */
struct rsk_bell_page {
	uint32_t magic;   /* RSK_BELL_MAGIC; 0 once its listener closed it */
	int32_t pid;      /* the process that listens (SO_PEERCRED of a connection to it) */
	uint64_t rings;   /* connections rung for */
	uint32_t ver_min; /* offers of versions ver_min..ver_max its listener reads */
	uint32_t ver_max;
	/* A listener its maker forked away (a daemon's listen() before its fork, nginx's
	 * default) outlives the maker: the bell stays with a process still holding it. heir:
	 * the one that keeps it since the maker (or the heir before) left, 0 none; kin: the
	 * processes forked with it open (0: a free place). pid stays the maker's: clients
	 * match it with the rendezvous' SO_PEERCRED. */
	int32_t heir;
	int32_t kin[RSK_BELL_KIN];
	/* Forked with the listener open, ever (kin may be empty again): its rendezvous is shared
	 * for good, no loop of its watches it, and a move's client knocks (shm_rdv.h). 0 in a
	 * page of a build before knocks (the mapping's tail past a shorter file reads 0). */
	uint32_t forked;
	int32_t kin_more[RSK_BELL_KIN_MORE]; /* kin's places past the first 16 (0 in an older
					      * build's page, which records none there) */
};
/* One page: a client maps a shorter (older) file at this size, and reads past its end as 0
 * only within the page that holds the end. */
_Static_assert(sizeof(struct rsk_bell_page) <= 4096, "the bell page must stay one page");
#define RSK_BELL_PAGE_V1 16u /* a RSK_BELL_MAGIC_V1 page's size: magic, pid, rings */

struct rsk_rdv_bell { /* the listener's handle */
	struct rsk_bell_page *pg;
	char path[128];
	struct rsk_rdv_bell *next; /* in rsk_bells_made */
};

/* The bells this process made and has not closed: at exit their files go (a listener the
 * application never closed would leave its file in /dev/shm for good). */
static struct rsk_rdv_bell *rsk_bells_made;
static pthread_mutex_t rsk_bells_made_lock = PTHREAD_MUTEX_INITIALIZER;

/* The process that keeps bell @pg alive: its maker, or the heir it left it to. */
static int32_t rsk_bell_keeper(const struct rsk_bell_page *pg)
{
	int32_t heir = __atomic_load_n(&pg->heir, __ATOMIC_ACQUIRE);

	return heir > 0 ? heir : pg->pid;
}

/* Place @i (0 .. RSK_BELL_KIN_ALL - 1) of @pg's kin. */
static int32_t *rsk_bell_kin_at(struct rsk_bell_page *pg, int i)
{
	return i < RSK_BELL_KIN ? &pg->kin[i] : &pg->kin_more[i - RSK_BELL_KIN];
}

/* @pid gone from @pg's kin (it leaves, or it is found dead). */
static void rsk_bell_kin_drop(struct rsk_bell_page *pg, int32_t pid)
{
	int i;
	int32_t k;

	for (i = 0; i < RSK_BELL_KIN_ALL; i++) {
		k = pid;
		(void)__atomic_compare_exchange_n(rsk_bell_kin_at(pg, i), &k, 0, 0,
						  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
}

/* A live process of @pg's kin other than @me (dead ones found on the way are dropped), or 0. */
static int32_t rsk_bell_heir_find(struct rsk_bell_page *pg, int32_t me)
{
	int i;
	int32_t k;

	for (i = 0; i < RSK_BELL_KIN_ALL; i++) {
		k = __atomic_load_n(rsk_bell_kin_at(pg, i), __ATOMIC_ACQUIRE);
		if (k <= 0 || k == me)
			continue;
		if (!rsk_sweep_pid_gone(k))
			return k;
		rsk_bell_kin_drop(pg, k);
	}
	return 0;
}

/*
 * This process leaves bell @b (its listener closed here, or its exit). Its keeper hands it to
 * a live process forked with the listener open, which holds the rendezvous too (a daemon's
 * parent exits right after the fork); with none left the bell is dead, then unlinked. Any
 * other process only leaves the kin.
 */
static void rsk_rdv_bell_end(struct rsk_rdv_bell *b)
{
	int32_t me = (int32_t)getpid(), next;

	rsk_bell_kin_drop(b->pg, me);
	if (rsk_bell_keeper(b->pg) != me)
		return;
	if ((next = rsk_bell_heir_find(b->pg, me)) > 0) {
		__atomic_store_n(&b->pg->heir, next, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&b->pg->magic, 0, __ATOMIC_SEQ_CST);
	(void)unlink(b->path);
}

/* Record @child in @pg's kin: a free place, else one of a dead process. */
static void rsk_bell_kin_add(struct rsk_bell_page *pg, int32_t child)
{
	int i, pass;
	int32_t k;

	__atomic_store_n(&pg->forked, 1, __ATOMIC_RELEASE);
	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < RSK_BELL_KIN_ALL; i++) {
			k = __atomic_load_n(rsk_bell_kin_at(pg, i), __ATOMIC_ACQUIRE);
			if ((k == 0 || (pass == 1 && rsk_sweep_pid_gone(k))) &&
			    __atomic_compare_exchange_n(rsk_bell_kin_at(pg, i), &k, child, 0,
							__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				return;
		}
}

void rsk_rdv_bells_forked(pid_t child)
{
	struct rsk_rdv_bell *b;

	pthread_mutex_lock(&rsk_bells_made_lock);
	for (b = rsk_bells_made; b != NULL; b = b->next)
		rsk_bell_kin_add(b->pg, (int32_t)child);
	pthread_mutex_unlock(&rsk_bells_made_lock);
}

void rsk_rdv_bells_end_all(void)
{
	struct rsk_rdv_bell *b;

	/* (a thread stopped inside the lock by the exit: its files stay, as after a kill, for
	 * the next process's sweep) */
	if (pthread_mutex_trylock(&rsk_bells_made_lock) != 0)
		return;
	for (b = rsk_bells_made; b != NULL; b = b->next)
		rsk_rdv_bell_end(b);
	pthread_mutex_unlock(&rsk_bells_made_lock);
}

__attribute__((destructor)) static void rsk_rdv_bells_exit(void)
{
	rsk_rdv_bells_end_all();
}

#define RSK_BELL_DIR "/dev/shm"
#define RSK_BELL_PREFIX "rdmasock-rdv."

static int rsk_rdv_bell_path(char *out, size_t size, const char *what, unsigned int port)
{
	int n = snprintf(out, size, RSK_BELL_DIR "/" RSK_BELL_PREFIX "%lu.%s.%u", rsk_rdv_netns(),
			 what, port);

	return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

/*
 * Is the claimed bell file @fd a dead listener's? Closed (magic 0, a pid written: its
 * listener only had the unlink left), or its pid is gone. A page not written yet (pid 0: a
 * listener making it right now) and a live pid are kept; so is a dead listener's whose pid
 * was reused, until that process ends too. The claim (base/sweep.h) makes the file judged
 * the one removed: a new listener's bell made under the name meanwhile stays.
 */
static int rsk_rdv_bell_stale(int fd, const char *name, void *arg)
{
	struct rsk_bell_page pg;

	(void)name;
	(void)arg;
	memset(&pg, 0, sizeof(pg));
	if (pread(fd, &pg, sizeof(pg), 0) < (ssize_t)RSK_BELL_PAGE_V1 || pg.pid <= 0)
		return 0;
	/* One pread reads the magic before the pid: a bell being made (magic, then pid stored)
	 * can read as no magic and a pid. The magic read again after the pid was seen is the
	 * one stored before it. */
	if (pg.magic == 0 && pread(fd, &pg.magic, sizeof(pg.magic),
				   offsetof(struct rsk_bell_page, magic)) != sizeof(pg.magic))
		return 0;
	if (pg.magic == 0)
		return 1;
	/* (a V1 page, or one of a build before heirs, reads heir 0) */
	return (pg.magic == RSK_BELL_MAGIC || pg.magic == RSK_BELL_MAGIC_V1) &&
	       rsk_sweep_pid_gone(pg.pid) && (pg.heir <= 0 || rsk_sweep_pid_gone(pg.heir));
}

static const struct rsk_sweep rsk_rdv_bell_sweep = {
	.prefix = RSK_BELL_PREFIX,
	.scan = RSK_BELL_SWEEP_SCAN,
	.remove = RSK_BELL_SWEEP_REMOVE,
	.stale = rsk_rdv_bell_stale,
	/* A live listener's bell is never renamed away: a client that opened it by name in that
	 * moment found no bell, started on TCP, and int_readiness_auto failed once in CI. */
	.judge_first = 1,
};

int rsk_rdv_bells_sweep(const char *dir)
{
	return rsk_sweep_dir(dir != NULL ? dir : RSK_BELL_DIR, &rsk_rdv_bell_sweep, NULL);
}

/* Once per process image, inside the application's listen(): every fd the sweep opens is
 * closed before that call returns, so no number the application counts on moves. */
static void rsk_rdv_bells_sweep_once(void)
{
	static int swept;

	if (__atomic_exchange_n(&swept, 1, __ATOMIC_ACQ_REL))
		return;
	(void)rsk_rdv_bells_sweep(NULL);
}

/* The bell of rendezvous @what/@port, whose name we hold (bound, not listening yet: no
 * client can have queued). NULL if it cannot be made (the rendezvous works without). */
static struct rsk_rdv_bell *rsk_rdv_bell_create(const char *what, unsigned int port)
{
	struct rsk_rdv_bell *b = calloc(1, sizeof(*b));
	void *pg = MAP_FAILED;
	int fd = -1;

	if (b == NULL || rsk_rdv_bell_path(b->path, sizeof(b->path), what, port) < 0)
		goto fail;
	rsk_rdv_bells_sweep_once();
	/* A file left by a listener that died is replaced, never reused (a client may still
	 * map it: it checks the pid). Another user's (sticky /dev/shm) stays: no bell then. */
	(void)unlink(b->path);
	fd = open(b->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, sizeof(struct rsk_bell_page)) == 0)
		pg = mmap(NULL, sizeof(struct rsk_bell_page), PROT_READ | PROT_WRITE, MAP_SHARED,
			  fd, 0);
	(void)rsk_sys_close(fd);
	if (pg == MAP_FAILED) {
		(void)unlink(b->path);
		goto fail;
	}
	b->pg = pg;
	b->pg->ver_min = RSK_RDV_VERSION_MIN;
	b->pg->ver_max = RSK_RDV_VERSION;
	/* The magic before the pid: a sweep takes a page with a pid and no magic for a closed
	 * one (rsk_rdv_bell_stale), and one between the two stores removed a bell being made. A
	 * page with no pid yet is kept, and rung by nobody (no client names pid 0). */
	__atomic_store_n(&b->pg->magic, RSK_BELL_MAGIC, __ATOMIC_RELEASE);
	__atomic_store_n(&b->pg->pid, (int32_t)getpid(), __ATOMIC_RELEASE);
	pthread_mutex_lock(&rsk_bells_made_lock);
	b->next = rsk_bells_made;
	rsk_bells_made = b;
	pthread_mutex_unlock(&rsk_bells_made_lock);
	return b;
fail:
	free(b);
	return NULL;
}

void rsk_rdv_bell_close(struct rsk_rdv_bell *b)
{
	struct rsk_rdv_bell **pp;

	if (b == NULL)
		return;
	/* Dead first: a client that still maps it must not ring it for a listener that comes
	 * next. */
	rsk_rdv_bell_end(b);
	pthread_mutex_lock(&rsk_bells_made_lock);
	for (pp = &rsk_bells_made; *pp != NULL; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&rsk_bells_made_lock);
	munmap(b->pg, sizeof(*b->pg));
	free(b);
}

uint64_t rsk_rdv_bell_rings(const struct rsk_rdv_bell *b)
{
	return __atomic_load_n(&b->pg->rings, __ATOMIC_ACQUIRE);
}

void rsk_rdv_bell_ring_own(struct rsk_rdv_bell *b)
{
	__atomic_add_fetch(&b->pg->rings, 1, __ATOMIC_SEQ_CST);
}

/* The client's bells, one per rendezvous name it rang last (a small cache: a process talks
 * to few listeners; the oldest goes). */
#define RSK_BELL_CACHE 16

static struct rsk_bell_ent {
	char path[128];
	struct rsk_bell_page *b;
	uint64_t used;
} rsk_bells[RSK_BELL_CACHE];
static uint64_t rsk_bell_clock;
static pthread_mutex_t rsk_bell_lock = PTHREAD_MUTEX_INITIALIZER;

/* Is @b alive (its listener has not closed it) and of the process @pid that listens? (Of a
 * build of any version: every one counts the rings.) */
static int rsk_rdv_bell_names(const struct rsk_bell_page *b, pid_t pid)
{
	uint32_t m = __atomic_load_n(&b->magic, __ATOMIC_ACQUIRE);

	return (m == RSK_BELL_MAGIC || m == RSK_BELL_MAGIC_V1) && b->pid == pid;
}

/* What ringing @b tells a client: RSK_RDV_RUNG (its listener reads our offers),
 * RSK_RDV_RUNG_OTHER (it reads none of our version), or 0 (a bell of a build that does not
 * say: start on TCP). */
static int rsk_rdv_bell_speaks(const struct rsk_bell_page *b)
{
	if (__atomic_load_n(&b->magic, __ATOMIC_ACQUIRE) != RSK_BELL_MAGIC)
		return 0;
	return b->ver_min <= RSK_RDV_VERSION && RSK_RDV_VERSION <= b->ver_max ? RSK_RDV_RUNG
									       : RSK_RDV_RUNG_OTHER;
}

static struct rsk_bell_page *rsk_rdv_bell_map(const char *path, pid_t pid)
{
	struct rsk_bell_page *b;
	struct stat st;
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	/* (a V1 page is shorter: the mapping's tail past its end reads 0, within one page) */
	b = fstat(fd, &st) == 0 && st.st_uid == geteuid() && S_ISREG(st.st_mode) &&
		    st.st_size >= (off_t)RSK_BELL_PAGE_V1
		    ? mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
		    : MAP_FAILED;
	(void)rsk_sys_close(fd);
	if (b == MAP_FAILED)
		return NULL;
	if (!rsk_rdv_bell_names(b, pid)) {
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
}

/* The cache entry for @path whose bell names @pid, mapped anew if it must be. Locked. */
static struct rsk_bell_page *rsk_rdv_bell_get(const char *path, pid_t pid)
{
	struct rsk_bell_ent *e, *old = &rsk_bells[0];
	int i;

	for (i = 0; i < RSK_BELL_CACHE; i++) {
		e = &rsk_bells[i];
		if (e->b != NULL && strcmp(e->path, path) == 0) {
			if (rsk_rdv_bell_names(e->b, pid)) {
				e->used = ++rsk_bell_clock;
				return e->b;
			}
			old = e; /* the listener changed: this entry is replaced */
			break;
		}
		if (e->used < old->used)
			old = e;
	}
	if (old->b != NULL)
		munmap(old->b, sizeof(*old->b));
	old->b = rsk_rdv_bell_map(path, pid);
	old->used = ++rsk_bell_clock;
	snprintf(old->path, sizeof(old->path), "%s", path);
	return old->b;
}

int rsk_rdv_ring(const char *what, unsigned int port, pid_t pid)
{
	struct rsk_bell_page *b;
	char path[128];
	int rc = -ENOENT;

	if (rsk_rdv_bell_path(path, sizeof(path), what, port) < 0)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&rsk_bell_lock);
	b = rsk_rdv_bell_get(path, pid);
	if (b != NULL) {
		__atomic_add_fetch(&b->rings, 1, __ATOMIC_SEQ_CST);
		rc = rsk_rdv_bell_speaks(b);
	}
	pthread_mutex_unlock(&rsk_bell_lock);
	return rc;
}

/* ---- knocks (see shm_rdv.h) ---- */

socklen_t rsk_rdv_door_name(struct sockaddr_un *un, pid_t pid)
{
	char what[16];

	snprintf(what, sizeof(what), "%d", (int)pid);
	return rsk_rdv_name(un, "d", what, 0);
}

/* The processes to knock at for bell @b: its maker, heir and kin, each once; none when its
 * listener was never forked (its maker's own loop looks). Locked (the bell cache). */
static int rsk_rdv_knock_pids(struct rsk_bell_page *b, int32_t *pids)
{
	int32_t p;
	int i, j, n = 0;

	for (i = -2; i < RSK_BELL_KIN_ALL; i++) {
		p = i == -2 ? b->pid
		    : i == -1 ? __atomic_load_n(&b->heir, __ATOMIC_ACQUIRE)
			      : __atomic_load_n(rsk_bell_kin_at(b, i), __ATOMIC_ACQUIRE);
		if (p <= 0)
			continue;
		for (j = 0; j < n && pids[j] != p; j++)
			;
		if (j == n)
			pids[n++] = p;
	}
	return __atomic_load_n(&b->forked, __ATOMIC_ACQUIRE) || n > 1 ? n : 0;
}

int rsk_rdv_knock(const struct rsk_rdv_where *where, const struct sockaddr *client, socklen_t clen)
{
	struct sockaddr_un un;
	struct rsk_rdv_knock k = {.magic = RSK_RDV_KNOCK_MAGIC, .len = clen};
	struct iovec iov = {&k, offsetof(struct rsk_rdv_knock, client) + clen};
	struct msghdr msg = {.msg_name = &un, .msg_iov = &iov, .msg_iovlen = 1};
	int32_t pids[RSK_BELL_KIN_ALL + 2];
	char path[128];
	struct rsk_bell_page *b;
	int n = 0, i, fd, took = 0;

	if (clen > sizeof(k.client))
		return -EINVAL;
	memcpy(&k.client, client, clen);
	if (rsk_rdv_bell_path(path, sizeof(path), where->what, where->port) < 0)
		return -EINVAL;
	pthread_mutex_lock(&rsk_bell_lock);
	b = rsk_rdv_bell_get(path, where->pid);
	if (b != NULL)
		n = rsk_rdv_knock_pids(b, pids);
	pthread_mutex_unlock(&rsk_bell_lock);
	if (n == 0)
		return 0;
	if ((fd = rsk_sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return fd;
	for (i = 0; i < n; i++) {
		msg.msg_namelen = rsk_rdv_door_name(&un, pids[i]);
		/* (no door: that process accepted no TCP-first connection, or is not ours) */
		took += rsk_sys_sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) ==
			(ssize_t)iov.iov_len;
	}
	(void)rsk_sys_close(fd);
	return took;
}

int rsk_rdv_knock_parse(const void *buf, size_t n, struct sockaddr_storage *client)
{
	const size_t head = offsetof(struct rsk_rdv_knock, client);
	struct rsk_rdv_knock k;

	if (n < head || n > sizeof(k))
		return -EPROTO;
	memset(&k, 0, sizeof(k));
	memcpy(&k, buf, n);
	if (k.magic != RSK_RDV_KNOCK_MAGIC || k.len != n - head)
		return -EPROTO;
	if (!(k.client.ss_family == AF_INET && k.len >= sizeof(struct sockaddr_in)) &&
	    !(k.client.ss_family == AF_INET6 && k.len >= sizeof(struct sockaddr_in6)))
		return -EPROTO;
	*client = k.client;
	return 0;
}
