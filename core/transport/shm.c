/*
 * Shared-memory transport (see shm.h). Layout of a connection's memfd:
 *   page 0: header (magic, version, nbuf, buf_size), then per side its wait flags
 *   two rings (client->server, server->client): posted/filled counters on their own cache
 *   lines, then nbuf descriptors {len, imm}
 *   the slots of both directions, page aligned.
 * Slot of message n in a direction = n % nbuf: RC receive buffers are consumed in posting
 * order, and the engine posts them in order, so no slot numbers travel through memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/fdhide.h"
#include "base/ready.h"
#include "base/sys.h"
#include "shm.h"

#define RSK_CACHELINE 64

struct rsk_shm_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t nbuf;
	uint32_t buf_size;
};

/* One per side: its app end's readiness (its peer is the waker), and its end of the story. */
struct rsk_shm_flags {
	struct rsk_ready_state rs; /* written by the side and by its peer (ready.h protocol) */
	uint32_t attached; /* the side showed its initial readiness: extra edges may come */
	uint32_t fin;      /* I posted FIN: my going away is orderly */
	uint32_t closed;   /* I closed the connection: sends towards me fail */
	/* What I hold unposted in my next tx slot (ops->stage): message number << 32 | length,
	 * and its immediate. A peer that outlives me posts it in my stead (rsk_shm_peer_died). */
	uint32_t stage_imm;
	uint64_t stage;
	/* My last holder is done with the segment and unmaps it next: its creator may reuse it
	 * (the pool below). Set after every other access; an older peer never sets it. */
	uint32_t released;
} __attribute__((aligned(RSK_CACHELINE)));

struct rsk_shm_desc {
	uint32_t len;
	uint32_t imm;
};

struct rsk_shm_ring {
	uint32_t posted __attribute__((aligned(RSK_CACHELINE))); /* by the receiver */
	uint32_t filled __attribute__((aligned(RSK_CACHELINE))); /* by the sender */
	struct rsk_shm_desc desc[] __attribute__((aligned(RSK_CACHELINE)));
};

struct rsk_shm_ep {
	struct rsk_ep base;
	uint8_t *map;
	size_t map_len;
	struct rsk_shm_ring *rx, *tx;
	struct rsk_shm_flags *mine, *peer;
	uint8_t *rx_slots, *tx_slots;
	uint32_t rx_next;   /* next message number to harvest from rx */
	uint32_t rx_posted; /* our own count of rx buffers posted */
	uint32_t tx_filled; /* our own count of messages sent */
	int peer_ctl; /* the ctl end of the peer's readiness pair: we are its waker */
	/* client: the offer's connection, on which the server's answer (with peer_ctl) comes,
	 * and the setup's reader of it (shm_cm.c); wakes owed to the peer until it came */
	int answer_fd;
	int (*read_answer)(int fd, int wait_ms);
	uint32_t owe_tokens;
	unsigned int owe; /* RSK_SHM_OWE_* */
	int own_mem;
	/* Creator: our hidden copy of the memfd, kept to reuse the segment (-1: not kept), and
	 * whether our last holder retired it (only then may it go to the pool). */
	int keep_fd;
	dev_t seg_dev; /* the segment's file, for the server's cache of mappings (0: none) */
	ino_t seg_ino;
	ino_t keep_ino; /* its inode: an fd closed under us (an exec helper's sweep) is not ours */
	int retired;
	/* Ring positions (0..nbuf-1) kept apart from the counters, which wrap at 2^32: a slot
	 * number derived as counter % nbuf would jump there unless nbuf divides 2^32. */
	uint32_t rx_slot, post_slot, tx_slot;
	int broken; /* -EPROTO once the peer lied about its posted buffers */
};

#define RSK_SHM_EP(ep) ((struct rsk_shm_ep *)(ep))

#define RSK_SHM_OWE_EOF 0x1u
#define RSK_SHM_OWE_DRAIN 0x2u

static size_t rsk_align(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

struct rsk_shm_layout {
	size_t flags[2], ring[2], slots[2], total;
};

static int rsk_shm_layout(uint32_t nbuf, uint32_t buf_size, struct rsk_shm_layout *l)
{
	size_t ring_sz = sizeof(struct rsk_shm_ring) + (size_t)nbuf * sizeof(struct rsk_shm_desc);
	size_t off = rsk_align(sizeof(struct rsk_shm_hdr), RSK_CACHELINE);
	int d;

	if (nbuf < 2 || nbuf > RSK_SHM_MAX_NBUF || buf_size < 64 || buf_size > RSK_SHM_MAX_BUF)
		return -EINVAL;
	for (d = 0; d < 2; d++) {
		l->flags[d] = off;
		off += sizeof(struct rsk_shm_flags);
	}
	for (d = 0; d < 2; d++) {
		l->ring[d] = rsk_align(off, RSK_CACHELINE);
		off = l->ring[d] + ring_sz;
	}
	off = rsk_align(off, 4096);
	for (d = 0; d < 2; d++) {
		l->slots[d] = off;
		off += (size_t)nbuf * buf_size;
	}
	l->total = rsk_align(off, 4096);
	return 0;
}

size_t rsk_shm_size(uint32_t nbuf, uint32_t buf_size)
{
	struct rsk_shm_layout l;

	return rsk_shm_layout(nbuf, buf_size, &l) < 0 ? 0 : l.total;
}

/* A fresh memfd of @l.total bytes mapped whole: *@map, or -errno. */
static int rsk_shm_new_file(const struct rsk_shm_layout *l, uint8_t **map)
{
	int fd = memfd_create("rdmasock", MFD_CLOEXEC | MFD_ALLOW_SEALING), rc;

	if (fd < 0)
		return -errno;
	rc = ftruncate(fd, (off_t)l->total) < 0 ? -errno : 0;
	if (rc == 0) {
		*map = mmap(NULL, l->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		rc = *map == MAP_FAILED ? -errno : 0;
	}
	/* Sealed size: a peer cannot shrink the file under our mapping (that would SIGBUS us). */
	if (rc == 0 &&
	    (rc = rsk_sys_fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) < 0)
		munmap(*map, l->total);
	if (rc < 0) {
		(void)rsk_sys_close(fd);
		return rc;
	}
	return fd;
}

/* The initial contents: every receive buffer of both sides posted (nbuf credits each). */
static void rsk_shm_init(uint8_t *map, const struct rsk_shm_layout *l, uint32_t nbuf,
			 uint32_t buf_size)
{
	struct rsk_shm_hdr *h = (struct rsk_shm_hdr *)map;
	int d;

	h->magic = RSK_SHM_MAGIC;
	h->version = RSK_SHM_VERSION;
	h->nbuf = nbuf;
	h->buf_size = buf_size;
	for (d = 0; d < 2; d++)
		((struct rsk_shm_ring *)(map + l->ring[d]))->posted = nbuf;
	/* The server shows nothing until it exists: SHOWN (with no token) keeps the client from
	 * waking it; the server's own first look sets the truth (rsk_conn_show_initial). */
	((struct rsk_shm_flags *)(map + l->flags[RSK_SHM_SERVER]))->rs.rx = RSK_RX_SHOWN;
}

int rsk_shm_create(uint32_t nbuf, uint32_t buf_size)
{
	struct rsk_shm_layout l;
	uint8_t *map;
	int fd, rc = rsk_shm_layout(nbuf, buf_size, &l);

	if (rc < 0)
		return rc;
	fd = rsk_shm_new_file(&l, &map);
	if (fd < 0)
		return fd;
	rsk_shm_init(map, &l, nbuf, buf_size);
	munmap(map, l.total);
	return fd;
}

size_t rsk_shm_ep_size(void)
{
	return sizeof(struct rsk_shm_ep);
}

/* The endpoint of @side on mapping @map (validated geometry @nbuf/@buf_size, layout @l). */
static int rsk_shm_build(uint8_t *map, size_t map_len, const struct rsk_shm_layout *l,
			 uint32_t nbuf, uint32_t buf_size, enum rsk_shm_side side, int peer_ctl,
			 void *mem, struct rsk_ep **out)
{
	struct rsk_shm_ep *e = mem != NULL ? mem : calloc(1, sizeof(*e));
	int rx_dir = side == RSK_SHM_CLIENT ? 1 : 0; /* direction 0 = client -> server */

	if (e == NULL)
		return -ENOMEM;
	e->own_mem = mem == NULL;
	e->base.ops = &rsk_shm_ops;
	e->base.nbuf = nbuf; /* our validated copies: the shared header may change later */
	e->base.buf_size = buf_size;
	e->base.max_inline = buf_size;
	e->base.oob_credits = 1; /* the peer's posted counter is right here */
	e->map = map;
	e->map_len = map_len;
	e->rx = (struct rsk_shm_ring *)(map + l->ring[rx_dir]);
	e->tx = (struct rsk_shm_ring *)(map + l->ring[!rx_dir]);
	e->rx_slots = map + l->slots[rx_dir];
	e->tx_slots = map + l->slots[!rx_dir];
	e->mine = (struct rsk_shm_flags *)(map + l->flags[side]);
	e->peer = (struct rsk_shm_flags *)(map + l->flags[!side]);
	/* Both rings start with every buffer posted and nothing filled. */
	e->rx_posted = nbuf;
	e->rx_next = 0;
	e->tx_filled = 0;
	e->peer_ctl = peer_ctl;
	e->answer_fd = -1;
	e->keep_fd = -1;
	e->seg_dev = 0;
	e->seg_ino = 0;
	e->retired = 0;
	*out = &e->base;
	return 0;
}

/*
 * Segments of ended connections that this process created, kept (memfd and mapping) for the
 * next connection of the same geometry. A fresh segment cost memfd_create, ftruncate, two
 * fcntl, an mmap, page faults and at the end an munmap whose TLB shootdown interrupts every
 * core that ran one of our threads (docs/design.md, What a short connection costs).
 * - A segment is reused only once its old peer's last holder said it is done with it
 *   (flags.released) and our own last holder retired it: no old endpoint still maps it.
 * - The next peer sees nothing of the last connection: the header, flags and rings are
 *   zeroed, and so is every slot either side may have written (its ring's filled count, plus
 *   the one a side may have staged).
 * - Bounded: at most RSK_SHM_KEEP segments per process keep a memfd (live or pooled), so the
 *   pool costs at most that many hidden fds.
 * - A forked child drops what it inherited (rsk_shm_atfork_child): parent and child must
 *   never both hand out one segment.
 * Only peers of our own uid ever map our segments (shm_cm.c), which could read our memory
 * anyway.
 */
#define RSK_SHM_KEEP 4

struct rsk_shm_kept {
	int fd;
	ino_t ino;
	uint8_t *map;
	size_t len;
	uint32_t nbuf, buf_size;
};

static struct {
	struct rsk_shm_kept e[RSK_SHM_KEEP];
	int n;    /* pooled */
	int live; /* live endpoints of this process holding a kept memfd */
	/* Server: mappings of peers' segments whose connection ended here (no fd: the mapping
	 * holds the file). A client that reuses its segment sends the same file again; its
	 * mapping is then ours without mmap, page faults or munmap. Never touched while cached. */
	struct {
		uint8_t *map;
		size_t len;
		dev_t dev;
		ino_t ino;
	} m[RSK_SHM_KEEP];
	int nm;
} rsk_shm_pool;
static pthread_mutex_t rsk_shm_pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void rsk_shm_kept_free(struct rsk_shm_kept *k)
{
	munmap(k->map, k->len);
	if (k->fd >= 0)
		rsk_fd_unhide_close(k->fd);
}

/* Zero what a peer could read of the last connection: all but the slots nobody wrote. */
static void rsk_shm_scrub(uint8_t *map, const struct rsk_shm_layout *l, uint32_t nbuf,
			  uint32_t buf_size)
{
	uint32_t used;
	int d;

	for (d = 0; d < 2; d++) {
		used = __atomic_load_n(&((struct rsk_shm_ring *)(map + l->ring[d]))->filled,
				       __ATOMIC_ACQUIRE);
		used = used >= nbuf ? nbuf : used + 1; /* + the slot a side may have staged */
		memset(map + l->slots[d], 0, (size_t)used * buf_size);
	}
	memset(map, 0, l->slots[0]);
}

/* Is pooled segment @k free of its old peer? (Its fd was checked when it came back.) */
static int rsk_shm_kept_ready(const struct rsk_shm_kept *k, const struct rsk_shm_layout *l)
{
	struct rsk_shm_flags *peer = (struct rsk_shm_flags *)(k->map + l->flags[RSK_SHM_SERVER]);

	return __atomic_load_n(&peer->released, __ATOMIC_ACQUIRE) != 0;
}

/* A pooled segment of this geometry whose old peer is done: 1 (*@k filled) or 0. */
static int rsk_shm_pool_take(const struct rsk_shm_layout *l, uint32_t nbuf, uint32_t buf_size,
			     struct rsk_shm_kept *k)
{
	int i, found = 0;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	for (i = 0; i < rsk_shm_pool.n && !found; i++) {
		if (rsk_shm_pool.e[i].nbuf != nbuf || rsk_shm_pool.e[i].buf_size != buf_size ||
		    !rsk_shm_kept_ready(&rsk_shm_pool.e[i], l))
			continue;
		*k = rsk_shm_pool.e[i];
		rsk_shm_pool.e[i] = rsk_shm_pool.e[--rsk_shm_pool.n];
		rsk_shm_pool.live++;
		found = 1;
	}
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	return found;
}

/* May a new segment keep its memfd? (Counted as live if so.) */
static int rsk_shm_may_keep(void)
{
	int ok;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	ok = rsk_shm_pool.live + rsk_shm_pool.n < RSK_SHM_KEEP;
	if (!ok && rsk_shm_pool.n > 0) {
		/* Make room: the oldest pooled segment (its peer may never let go) goes. */
		rsk_shm_kept_free(&rsk_shm_pool.e[0]);
		rsk_shm_pool.e[0] = rsk_shm_pool.e[--rsk_shm_pool.n];
		ok = 1;
	}
	if (ok)
		rsk_shm_pool.live++;
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	return ok;
}

/* A live endpoint's kept segment ends here: pooled if @pool and there is room, else freed. */
static void rsk_shm_pool_put(struct rsk_shm_kept *k, int pool)
{
	pthread_mutex_lock(&rsk_shm_pool_lock);
	if (rsk_shm_pool.live > 0)
		rsk_shm_pool.live--;
	if (pool && rsk_shm_pool.n < RSK_SHM_KEEP) {
		rsk_shm_pool.e[rsk_shm_pool.n++] = *k;
		pool = 2;
	}
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	if (pool != 2)
		rsk_shm_kept_free(k);
}

int rsk_shm_pool_count(void)
{
	int n;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	n = rsk_shm_pool.n;
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	return n;
}

int rsk_shm_fd_kept(struct rsk_ep *ep, int fd)
{
	return fd >= 0 && RSK_SHM_EP(ep)->keep_fd == fd;
}

int rsk_shm_keeps_memfd(struct rsk_ep *ep)
{
	return RSK_SHM_EP(ep)->keep_fd >= 0;
}

void rsk_shm_atfork_child(void)
{
	int i;

	pthread_mutex_init(&rsk_shm_pool_lock, NULL);
	for (i = 0; i < rsk_shm_pool.n; i++)
		rsk_shm_kept_free(&rsk_shm_pool.e[i]);
	rsk_shm_pool.n = 0;
	for (i = 0; i < rsk_shm_pool.nm; i++)
		munmap(rsk_shm_pool.m[i].map, rsk_shm_pool.m[i].len);
	rsk_shm_pool.nm = 0;
}

int rsk_shm_mapcache_count(void)
{
	int n;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	n = rsk_shm_pool.nm;
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	return n;
}

/* Server: our cached mapping of the file @st, taken out of the cache, or MAP_FAILED. */
static uint8_t *rsk_shm_mapcache_take(const struct stat *st)
{
	uint8_t *map = MAP_FAILED;
	int i;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	for (i = 0; i < rsk_shm_pool.nm && map == MAP_FAILED; i++) {
		if (rsk_shm_pool.m[i].dev != st->st_dev || rsk_shm_pool.m[i].ino != st->st_ino ||
		    rsk_shm_pool.m[i].len != (size_t)st->st_size)
			continue;
		map = rsk_shm_pool.m[i].map;
		rsk_shm_pool.m[i] = rsk_shm_pool.m[--rsk_shm_pool.nm];
	}
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	return map;
}

/* Server: keep the mapping of an ended connection's segment; the oldest goes when full. */
static void rsk_shm_mapcache_put(struct rsk_shm_ep *e)
{
	uint8_t *old = NULL;
	size_t old_len = 0;

	pthread_mutex_lock(&rsk_shm_pool_lock);
	if (rsk_shm_pool.nm == RSK_SHM_KEEP) {
		old = rsk_shm_pool.m[0].map;
		old_len = rsk_shm_pool.m[0].len;
		rsk_shm_pool.m[0] = rsk_shm_pool.m[--rsk_shm_pool.nm];
	}
	rsk_shm_pool.m[rsk_shm_pool.nm].map = e->map;
	rsk_shm_pool.m[rsk_shm_pool.nm].len = e->map_len;
	rsk_shm_pool.m[rsk_shm_pool.nm].dev = e->seg_dev;
	rsk_shm_pool.m[rsk_shm_pool.nm++].ino = e->seg_ino;
	pthread_mutex_unlock(&rsk_shm_pool_lock);
	if (old != NULL)
		munmap(old, old_len);
}

/* A segment for a new connection: a pooled one made clean, or a fresh one. Its fd, or
 * -errno; *@keep the hidden copy we keep (-1: none). */
static int rsk_shm_segment(const struct rsk_shm_layout *l, uint32_t nbuf, uint32_t buf_size,
			   int lend, uint8_t **map, int *keep, ino_t *ino)
{
	struct rsk_shm_kept k;
	struct stat st;
	int fd;

	*keep = -1;
	if (rsk_shm_pool_take(l, nbuf, buf_size, &k)) {
		rsk_shm_scrub(k.map, l, nbuf, buf_size);
		/* Lent: the kept fd itself goes into the offer (SCM_RIGHTS sends a reference), no
		 * copy of it to make and close (rsk_shm_fd_kept). */
		fd = lend ? k.fd : rsk_sys_fcntl(k.fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			rsk_shm_pool_put(&k, 0);
			return fd;
		}
		*map = k.map;
		*keep = k.fd;
		*ino = k.ino;
		return fd;
	}
	fd = rsk_shm_new_file(l, map);
	if (fd < 0 || !rsk_shm_may_keep())
		return fd;
	if ((*keep = rsk_fd_hide_dup(fd)) < 0 || fstat(fd, &st) < 0) {
		if (*keep >= 0)
			rsk_fd_unhide_close(*keep);
		*keep = -1; /* the connection goes on without: its segment is unmapped at the end */
		pthread_mutex_lock(&rsk_shm_pool_lock);
		rsk_shm_pool.live--;
		pthread_mutex_unlock(&rsk_shm_pool_lock);
	} else {
		*ino = st.st_ino;
	}
	return fd;
}

static int rsk_shm_create_open_as(uint32_t nbuf, uint32_t buf_size, void *mem,
				  struct rsk_ep **out, int lend)
{
	struct rsk_shm_layout l;
	uint8_t *map;
	int fd, keep, rc = rsk_shm_layout(nbuf, buf_size, &l);
	ino_t ino = 0;

	if (rc < 0)
		return rc;
	fd = rsk_shm_segment(&l, nbuf, buf_size, lend, &map, &keep, &ino);
	if (fd < 0)
		return fd;
	rsk_shm_init(map, &l, nbuf, buf_size);
	rc = rsk_shm_build(map, l.total, &l, nbuf, buf_size, RSK_SHM_CLIENT, -1, mem, out);
	if (rc < 0) {
		struct rsk_shm_kept k = {.fd = keep, .map = map, .len = l.total};

		if (keep >= 0)
			rsk_shm_pool_put(&k, 0);
		else
			munmap(map, l.total);
		if (fd != keep)
			(void)rsk_sys_close(fd);
		return rc;
	}
	RSK_SHM_EP(*out)->keep_fd = keep;
	RSK_SHM_EP(*out)->keep_ino = ino;
	return fd;
}

int rsk_shm_create_open(uint32_t nbuf, uint32_t buf_size, void *mem, struct rsk_ep **out)
{
	return rsk_shm_create_open_as(nbuf, buf_size, mem, out, 0);
}

int rsk_shm_create_lend(uint32_t nbuf, uint32_t buf_size, void *mem, struct rsk_ep **out)
{
	return rsk_shm_create_open_as(nbuf, buf_size, mem, out, 1);
}

int rsk_shm_open(int fd, enum rsk_shm_side side, int peer_ctl, void *mem, struct rsk_ep **out)
{
	struct rsk_shm_hdr hdr;
	struct rsk_shm_layout l;
	struct stat st;
	uint8_t *map;
	int seals, rc;

	if (fstat(fd, &st) < 0)
		return -errno;
	seals = rsk_sys_fcntl(fd, F_GET_SEALS, 0);
	if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
		return -EPROTO; /* unsealed or unsealable: the creator could truncate it under us */
	if (st.st_size < (off_t)sizeof(hdr) ||
	    (size_t)st.st_size > rsk_shm_size(RSK_SHM_MAX_NBUF, RSK_SHM_MAX_BUF))
		return -EPROTO;
	map = rsk_shm_mapcache_take(&st);
	if (map == MAP_FAILED)
		map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	memcpy(&hdr, map, sizeof(hdr)); /* once: the peer may change the shared header later */
	rc = hdr.magic != RSK_SHM_MAGIC || hdr.version != RSK_SHM_VERSION ||
			     rsk_shm_layout(hdr.nbuf, hdr.buf_size, &l) < 0 ||
			     (size_t)st.st_size < l.total
		     ? -EPROTO
		     : rsk_shm_build(map, (size_t)st.st_size, &l, hdr.nbuf, hdr.buf_size, side,
				     peer_ctl, mem, out);
	if (rc < 0) {
		munmap(map, (size_t)st.st_size);
		return rc;
	}
	RSK_SHM_EP(*out)->seg_dev = st.st_dev;
	RSK_SHM_EP(*out)->seg_ino = st.st_ino;
	return 0;
}

void rsk_shm_set_peer_ctl(struct rsk_ep *ep, int peer_ctl)
{
	RSK_SHM_EP(ep)->peer_ctl = peer_ctl;
}

int rsk_shm_peer_ctl(struct rsk_ep *ep)
{
	return RSK_SHM_EP(ep)->peer_ctl;
}

int rsk_shm_has_peer_ctl(struct rsk_ep *ep)
{
	return RSK_SHM_EP(ep)->peer_ctl >= 0;
}

int rsk_shm_answer_fd(struct rsk_ep *ep)
{
	return RSK_SHM_EP(ep)->answer_fd;
}

void rsk_shm_set_answer(struct rsk_ep *ep, int fd, int (*read_answer)(int fd, int wait_ms))
{
	RSK_SHM_EP(ep)->answer_fd = fd;
	RSK_SHM_EP(ep)->read_answer = read_answer;
}

/* Pay what kicks owed the peer while its ctl end was not known. */
static void rsk_shm_pay(struct rsk_shm_ep *e)
{
	struct rsk_ready_state *rs = &e->peer->rs;

	if (e->peer_ctl < 0)
		return;
	for (; e->owe_tokens > 0; e->owe_tokens--)
		rsk_ready_token(rs, e->peer_ctl);
	if (e->owe & RSK_SHM_OWE_DRAIN)
		rsk_ready_drain_fill(rs, e->peer_ctl);
	if (e->owe & RSK_SHM_OWE_EOF)
		rsk_ready_eof(e->peer_ctl); /* RDHUP now, as TCP shows a FIN */
	e->owe = 0;
}

/* Client: learn the server's ctl end from its answer (waiting up to @wait_ms). */
static void rsk_shm_resolve(struct rsk_shm_ep *e, int wait_ms)
{
	int fd;

	if (e->answer_fd < 0 || e->read_answer == NULL)
		return;
	fd = e->read_answer(e->answer_fd, wait_ms);
	if (fd == -EAGAIN)
		return;
	/* The server's ctl end takes the answer connection's hidden number (done with it). */
	if (fd >= 0)
		fd = rsk_fd_hide_at(fd, e->answer_fd);
	else
		rsk_fd_unhide_close(e->answer_fd);
	e->answer_fd = -1;
	if (fd < 0) {
		e->broken = -ECONNRESET; /* the server declined after all: poll reports the reset */
		e->owe = 0;
		e->owe_tokens = 0;
		return;
	}
	e->peer_ctl = fd;
}

static void rsk_shm_settle(struct rsk_ep *ep, int app_fd, int need)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	(void)app_fd;
	(void)need;
	if (e->answer_fd < 0 || !(e->owe || e->owe_tokens))
		return;
	/* The server answers right before it can show EMPTY or block, so an owed token or drain
	 * means the answer is (nearly) here. An owed EOF alone is no reason to wait: a server
	 * that has not accepted yet sees our FIN in the ring when it does. */
	rsk_shm_resolve(e, (e->owe_tokens || (e->owe & RSK_SHM_OWE_DRAIN)) ? 1000 : 0);
	rsk_shm_pay(e);
}

void rsk_shm_prefork(struct rsk_ep *ep, int app_fd)
{
	(void)app_fd;
	/* A child must be able to wake the server: learn its fd now if it has answered. */
	rsk_shm_resolve(RSK_SHM_EP(ep), 100);
	rsk_shm_pay(RSK_SHM_EP(ep));
}

int rsk_shm_ep_fds(struct rsk_ep *ep, int *out, int max)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);
	int n = 0;

	/* The rings are mapped (no fd); the peer's readiness end and a pending answer are all. */
	if (e->peer_ctl >= 0 && n < max)
		out[n++] = e->peer_ctl;
	if (e->answer_fd >= 0 && n < max)
		out[n++] = e->answer_fd;
	return n;
}

int rsk_shm_peer_ended(struct rsk_ep *ep)
{
	return __atomic_load_n(&RSK_SHM_EP(ep)->peer->fin, __ATOMIC_ACQUIRE) != 0;
}

void rsk_shm_fin_sent(struct rsk_ep *ep)
{
	__atomic_store_n(&RSK_SHM_EP(ep)->mine->fin, 1, __ATOMIC_RELEASE);
}

static int rsk_shm_probe(void)
{
	return 0; /* memfd_create failing later is reported then, as -errno */
}

static int rsk_shm_post_recv(struct rsk_ep *ep, uint32_t slot)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	if (rsk_unlikely(slot != e->post_slot))
		return -EINVAL; /* RC order: buffers are reused in the order they were filled */
	e->post_slot = slot + 1 == ep->nbuf ? 0 : slot + 1;
	e->rx_posted++;
	/* Release: our reads of this slot's old contents finish before the sender reuses it. */
	__atomic_store_n(&e->rx->posted, e->rx_posted, __ATOMIC_RELEASE);
	return 0;
}

static const void *rsk_shm_recv_buf(struct rsk_ep *ep, uint32_t slot)
{
	return RSK_SHM_EP(ep)->rx_slots + (size_t)(slot < ep->nbuf ? slot : 0) * ep->buf_size;
}

/* Buffers the peer has posted that we have not filled; -EPROTO when the peer lies. */
static int rsk_shm_tx_room(struct rsk_shm_ep *e)
{
	uint32_t posted = __atomic_load_n(&e->tx->posted, __ATOMIC_ACQUIRE);
	uint32_t room = posted - e->tx_filled;

	if (rsk_unlikely(room > e->base.nbuf)) {
		e->broken = -EPROTO; /* poll reports it, and the engine resets the stream */
		return -EPROTO;
	}
	return (int)room;
}

static int rsk_shm_tx_room_op(struct rsk_ep *ep)
{
	return rsk_shm_tx_room(RSK_SHM_EP(ep));
}

static void *rsk_shm_send_buf(struct rsk_ep *ep)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	if (rsk_shm_tx_room(e) <= 0)
		return NULL;
	return e->tx_slots + (size_t)e->tx_slot * ep->buf_size;
}

static int rsk_shm_post_send(struct rsk_ep *ep, const void *buf, uint32_t len, uint32_t imm,
			     unsigned int flags)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);
	uint32_t slot = e->tx_slot;
	uint8_t *dst = e->tx_slots + (size_t)slot * ep->buf_size;
	int room = rsk_shm_tx_room(e);

	(void)flags; /* every shm send completes at once: no send completions to signal */
	if (rsk_unlikely(room <= 0))
		return room < 0 ? room : -ENOBUFS; /* an RC QP would RNR: the engine broke credit */
	if (rsk_unlikely(len > ep->buf_size))
		return -EMSGSIZE;
	if (buf != dst && len > 0)
		memcpy(dst, buf, len);
	e->tx->desc[slot].len = len;
	e->tx->desc[slot].imm = imm;
	e->tx_slot = slot + 1 == ep->nbuf ? 0 : slot + 1;
	e->tx_filled++;
	__atomic_store_n(&e->tx->filled, e->tx_filled, __ATOMIC_RELEASE);
	return 0;
}

static int rsk_shm_poll(struct rsk_ep *ep, struct rsk_wc *wc, int n)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);
	uint32_t filled = __atomic_load_n(&e->rx->filled, __ATOMIC_ACQUIRE);
	uint32_t avail = filled - e->rx_next, slot, len;
	int i;

	if (rsk_unlikely(e->broken))
		return e->broken;
	/* The peer may only fill buffers we posted. */
	if (rsk_unlikely(avail > e->rx_posted - e->rx_next))
		return -EPROTO;
	for (i = 0; i < n && avail > 0; i++, avail--) {
		slot = e->rx_slot;
		len = __atomic_load_n(&e->rx->desc[slot].len, __ATOMIC_RELAXED);
		if (rsk_unlikely(len > ep->buf_size))
			return -EPROTO;
		wc[i].op = RSK_WC_RECV;
		wc[i].status = 0;
		wc[i].slot = slot;
		wc[i].len = len;
		wc[i].imm = __atomic_load_n(&e->rx->desc[slot].imm, __ATOMIC_RELAXED);
		e->rx_slot = slot + 1 == ep->nbuf ? 0 : slot + 1;
		/* atomic: rsk_shm_rx_pending reads it without the owner's lock (TSan saw the race) */
		__atomic_store_n(&e->rx_next, e->rx_next + 1, __ATOMIC_RELAXED);
	}
	return i;
}

static int rsk_shm_rx_pending(struct rsk_ep *ep)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	/* rx_next is the owner's, read here unlocked: a stale value only means one more look */
	return __atomic_load_n(&e->rx->filled, __ATOMIC_ACQUIRE) !=
	       __atomic_load_n(&e->rx_next, __ATOMIC_RELAXED);
}

static void rsk_shm_stage(struct rsk_ep *ep, uint32_t len, uint32_t imm)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	/* Numbered, so a note the post has overtaken is never taken again: no store to undo. */
	__atomic_store_n(&e->mine->stage_imm, imm, __ATOMIC_RELAXED);
	__atomic_store_n(&e->mine->stage, ((uint64_t)e->tx_filled << 32) | len, __ATOMIC_RELEASE);
}

/*
 * The peer died holding a staged message (rsk_shm_stage): post it in its stead, into the
 * slot it had filled in our rx ring. It is dead, so nothing races; poll and the engine
 * check what it left as they check any message.
 */
static void rsk_shm_salvage(struct rsk_shm_ep *e)
{
	uint64_t w = __atomic_load_n(&e->peer->stage, __ATOMIC_ACQUIRE);
	uint32_t filled = __atomic_load_n(&e->rx->filled, __ATOMIC_ACQUIRE);
	uint32_t len = (uint32_t)w, ahead = filled - e->rx_next, slot;

	if (len == 0 || len > e->base.buf_size || (uint32_t)(w >> 32) != filled)
		return; /* nothing staged, or posted since */
	if (ahead >= e->base.nbuf || e->rx_posted - filled == 0 || e->rx_posted - filled > e->base.nbuf)
		return; /* it had no buffer of ours for it: a lie */
	slot = (uint32_t)((e->rx_slot + ahead) % e->base.nbuf);
	e->rx->desc[slot].len = len;
	e->rx->desc[slot].imm = __atomic_load_n(&e->peer->stage_imm, __ATOMIC_RELAXED);
	__atomic_store_n(&e->rx->filled, filled + 1, __ATOMIC_RELEASE);
}

/*
 * Does the peer still hold a message of ours that carries data (not posted back), counting
 * from our @from-th newest (1: the last sent)? -1 when the peer lies about what it posted.
 */
static int rsk_shm_peer_holds_data(struct rsk_shm_ep *e, uint32_t from)
{
	uint32_t nbuf = e->base.nbuf, posted = __atomic_load_n(&e->tx->posted, __ATOMIC_ACQUIRE);
	uint32_t held = e->tx_filled - (posted - nbuf), k, slot;

	if (held > nbuf)
		return -1;
	for (k = from; k <= held; k++) {
		slot = (e->tx_slot + nbuf - k % nbuf) % nbuf;
		if (__atomic_load_n(&e->tx->desc[slot].len, __ATOMIC_RELAXED) > 0)
			return 1;
	}
	return 0;
}

int rsk_shm_peer_died(struct rsk_ep *ep)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	rsk_shm_salvage(e);
	/* its unread bytes; a lying peer's end is a reset */
	return rsk_shm_peer_holds_data(e, 1) != 0;
}

/*
 * Does the reader still hold data from an earlier message of ours? (Not reposted, and not
 * empty: an unharvested credit-only message is no reason to look readable.) TCP wakes a
 * reader on every arrival, and an edge-triggered reader that has not drained yet expects that
 * edge; a reader that is armed gets its wake through the armed bit anyway.
 */
static int rsk_shm_reader_behind(struct rsk_shm_ep *e)
{
	/* from the 2nd newest: the newest is the message just sent. A lying peer (-1) gets no
	 * edge: the next send resets the stream. */
	return rsk_shm_peer_holds_data(e, 2) > 0;
}

/*
 * Our post is visible; now be the peer's waker: a token if it showed nothing (or an extra
 * arrival edge when it still holds earlier data of ours), its fill drained if it blocked on
 * credits, EOF after our FIN. What needs the peer's ctl end before its answer came is owed
 * (rsk_shm_settle pays it as soon as our side can read the answer).
 */
static void rsk_shm_kick(struct rsk_ep *ep, unsigned int what)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);
	struct rsk_ready_state *rs = &e->peer->rs;
	uint32_t word = 0;
	int edge, kind;

	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* our post is visible before we read theirs */
	if (what & RSK_WAIT_RX) {
		edge = (what & RSK_KICK_DATA) &&
		       __atomic_load_n(&e->peer->attached, __ATOMIC_ACQUIRE) &&
		       rsk_shm_reader_behind(e);
		kind = rsk_ready_claim_rx(rs, edge, &word);
		/* The reader may have taken every message of ours since it looked (it lowered,
		 * then our claim raised): a token now would show readable with nothing to
		 * read, and a select()-then-read() program would block in read. (A sleeping
		 * lazy owner's edge is always written: its token shows nothing new.) */
		if (kind && kind != RSK_CLAIM_WAKE && rsk_shm_tx_room(e) == (int)e->base.nbuf)
			rsk_ready_unclaim_rx(rs, word, kind);
		else if (kind)
			e->owe_tokens++;
	}
	if ((what & RSK_WAIT_TX) && rsk_ready_claim_tx(rs))
		e->owe |= RSK_SHM_OWE_DRAIN;
	if (rsk_unlikely(what & RSK_KICK_FIN))
		e->owe |= RSK_SHM_OWE_EOF;
	/* The server answers before it can show EMPTY (shm_cm.c), so a claim we won means its
	 * answer is in our queue already: read it now. A kick from the event loop's tick (a
	 * coalesced write posted there) has no later call of ours that would pay. */
	if ((e->owe_tokens || e->owe) && e->peer_ctl < 0)
		rsk_shm_resolve(e, 0);
	if (e->owe_tokens || e->owe)
		rsk_shm_pay(e); /* nothing to pay while the peer's ctl end is still unknown */
}

static struct rsk_ready_state *rsk_shm_ready(struct rsk_ep *ep)
{
	return &RSK_SHM_EP(ep)->mine->rs;
}

void rsk_shm_attached(struct rsk_ep *ep)
{
	__atomic_store_n(&RSK_SHM_EP(ep)->mine->attached, 1, __ATOMIC_RELEASE);
}

static void rsk_shm_shutdown(struct rsk_ep *ep)
{
	__atomic_store_n(&RSK_SHM_EP(ep)->mine->closed, 1, __ATOMIC_RELEASE);
}

static int rsk_shm_peer_closed(struct rsk_ep *ep)
{
	return __atomic_load_n(&RSK_SHM_EP(ep)->peer->closed, __ATOMIC_ACQUIRE) != 0;
}

/* Our last holder is done with the segment (it unmaps it next): our peer, if it created
 * the segment, may reuse it; if we did, we may (rsk_shm_destroy). */
static void rsk_shm_retire(struct rsk_ep *ep)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	e->retired = 1;
	__atomic_store_n(&e->mine->released, 1, __ATOMIC_RELEASE);
}

static void rsk_shm_destroy(struct rsk_ep *ep)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	if (e->peer_ctl >= 0)
		rsk_fd_unhide_close(e->peer_ctl);
	if (e->answer_fd >= 0)
		rsk_fd_unhide_close(e->answer_fd);
	if (e->keep_fd >= 0) {
		struct rsk_shm_kept k = {.fd = e->keep_fd, .ino = e->keep_ino, .map = e->map,
					 .len = e->map_len, .nbuf = e->base.nbuf,
					 .buf_size = e->base.buf_size};
		struct stat st;

		if (fstat(k.fd, &st) < 0 || st.st_ino != k.ino)
			k.fd = -1; /* no longer the file we kept: not ours to close */
		/* pooled only by our last holder */
		rsk_shm_pool_put(&k, e->retired && !e->broken && k.fd >= 0);
	} else if (e->retired && e->seg_ino != 0 && !e->broken) {
		rsk_shm_mapcache_put(e); /* our last holder's: no endpoint of ours uses it now */
	} else {
		munmap(e->map, e->map_len);
	}
	if (e->own_mem)
		free(e);
}

void rsk_shm_debug(struct rsk_ep *ep, struct rsk_shm_debug *d)
{
	struct rsk_shm_ep *e = RSK_SHM_EP(ep);

	d->rx_filled = &e->rx->filled;
	d->rx_posted = &e->rx->posted;
	d->tx_filled = &e->tx->filled;
	d->tx_posted = &e->tx->posted;
	d->rx_desc_len = &e->rx->desc[0].len;
	d->hdr_nbuf = &((struct rsk_shm_hdr *)e->map)->nbuf;
}

const struct rsk_transport_ops rsk_shm_ops = {
	.name = "shm",
	.id = RDMASOCK_TRANSPORT_SHM,
	.probe = rsk_shm_probe,
	.post_recv = rsk_shm_post_recv,
	.recv_buf = rsk_shm_recv_buf,
	.send_buf = rsk_shm_send_buf,
	.post_send = rsk_shm_post_send,
	.tx_room = rsk_shm_tx_room_op,
	.poll = rsk_shm_poll,
	.stage = rsk_shm_stage,
	.rx_pending = rsk_shm_rx_pending,
	.kick = rsk_shm_kick,
	.ready = rsk_shm_ready,
	.settle = rsk_shm_settle,
	.shutdown = rsk_shm_shutdown,
	.peer_closed = rsk_shm_peer_closed,
	.retire = rsk_shm_retire,
	.destroy = rsk_shm_destroy,
};
