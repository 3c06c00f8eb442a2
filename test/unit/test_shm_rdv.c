/*
 * Unit tests for core/transport/shm_rdv, the same-host rendezvous wire: listener names (one
 * per address and port, wildcards, dual stack), finding a listener and asking whether one
 * exists, the offer with its three fds (memfd, the client's ctl end, the client's TCP
 * socket), forwarding to a sibling (a fourth fd: where to answer), the answer on the
 * client's kept rendezvous connection, and a hostile peer's malformed offers and answers:
 * each is refused (-EPROTO, or -ECONNRESET at EOF) without leaking one fd.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "transport/shm.h"
#include "transport/shm_rdv.h"
#include "unit_cm.h"
#include "unit_files.h"

#define NBUF 8
#define BSIZE 4096

/* Per test: a port P for the listener, held for the test (no other binary meets it). */
struct fix {
	int hold_p;
	uint16_t p;
	struct sockaddr_in dest;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->hold_p = ucm_tcp_bound(0, &f->p);
	f->dest = ucm_lo4(f->p);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	close(f->hold_p);
	free(f);
	return 0;
}

static void close_all(int *fds, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Accept the rendezvous connection a find just made (it is queued already: no wait). */
static int rdv_accept(int lfd)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	int fd;

	assert_int_equal(poll(&p, 1, 1000), 1);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static struct rsk_rdv_offer good_offer(const struct fix *f)
{
	return ucm_offer((const struct sockaddr *)&f->dest, NBUF, BSIZE);
}

/* A byte written into @wr comes out of @rd: the two are ends of one working socket pair. */
static void assert_linked(int wr, int rd)
{
	struct pollfd p = {.fd = rd, .events = POLLIN};
	char b = 0;

	assert_int_equal(send(wr, "k", 1, MSG_NOSIGNAL), 1);
	assert_int_equal(poll(&p, 1, 1000), 1);
	assert_int_equal(recv(rd, &b, 1, MSG_DONTWAIT), 1);
	assert_int_equal(b, 'k');
}

/* The find reached rendezvous @what/@port of this process: the names its bell goes by, which
 * a move's knock is handed instead of asking the connection again. */
static void assert_where(const struct rsk_rdv_where *w, const char *what, uint16_t port)
{
	assert_string_equal(w->what, what);
	assert_int_equal(w->port, port);
	assert_int_equal(w->pid, getpid());
}

static ino_t ino(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

/* ---- names ---- */

static void test_listen_names(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in any4 = ucm_in4("0.0.0.0", f->p);
	struct sockaddr_in6 any6 = ucm_in6("::", f->p), mapped = ucm_in6("::ffff:127.0.0.1", f->p);
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	int a[2], b[2], c[2], before = ucm_fd_count();

	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, a), 1);
	assert_true(fcntl(a[0], F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(a[0], F_GETFD) & FD_CLOEXEC);
	/* one owner per name: a second listener on the same address and port is refused */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, b), -EADDRINUSE);
	/* a v4-mapped address is named as IPv4: the same name */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&mapped, 0, 16, b), -EADDRINUSE);
	/* the wildcard has a name of its own */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any4, 0, 16, b), 1);
	/* a dual-stack wildcard also takes any4, which is owned: it fails whole, leaking none */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any6, 0, 16, c), -EADDRINUSE);
	assert_int_equal(ucm_fd_count(), before + 2);
	/* v6only answers IPv6 clients only: any6 alone */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any6, 1, 16, c), 1);
	close_all(c, 1);
	close_all(b, 1);
	/* with any4 free again, the dual-stack wildcard registers both names */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any6, 0, 16, c), 2);
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any4, 0, 16, b), -EADDRINUSE);
	close_all(c, 2);
	close_all(a, 1);
	/* closing frees the names */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, a), 1);
	close_all(a, 1);
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&un, 0, 16, a), -EAFNOSUPPORT);
	assert_int_equal(ucm_fd_count(), before);
}

static void test_find(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in other = ucm_in4("127.0.0.2", f->p), any4 = ucm_in4("0.0.0.0", f->p);
	struct sockaddr_in6 any6 = ucm_in6("::", f->p), lo6 = ucm_in6("::1", f->p);
	struct sockaddr_in6 mapped = ucm_in6("::ffff:127.0.0.1", f->p);
	int l[2], fd, a, before = ucm_fd_count();
	struct rsk_rdv_where w;

	/* nobody listens: -ENOENT, nothing left open */
	assert_int_equal(rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, NULL), -ENOENT);
	assert_false(rsk_rdv_exists((struct sockaddr *)&f->dest));
	assert_int_equal(ucm_fd_count(), before);

	/* a listener on another address of the same port is not ours */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&other, 0, 16, l), 1);
	assert_int_equal(rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, NULL), -ENOENT);
	close_all(l, 1);

	/* the exact address: a connection both ways, non-blocking, close-on-exec */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, l), 1);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, &w);
	assert_true(fd >= 0);
	assert_where(&w, "127.0.0.1", f->p);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	a = rdv_accept(l[0]);
	assert_linked(fd, a);
	assert_linked(a, fd);
	close(a);
	close(fd);
	/* a v4-mapped destination finds the IPv4 name */
	fd = rsk_rdv_find((struct sockaddr *)&mapped, NULL, NULL, &w);
	assert_true(fd >= 0);
	assert_where(&w, "127.0.0.1", f->p);
	close(rdv_accept(l[0]));
	close(fd);
	/* exists: yes while it listens (its probe connection closes again at once) */
	assert_true(rsk_rdv_exists((struct sockaddr *)&f->dest));
	close(rdv_accept(l[0]));
	close_all(l, 1);
	assert_false(rsk_rdv_exists((struct sockaddr *)&f->dest));

	/* the IPv4 wildcard answers for 127.0.0.1 */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any4, 0, 16, l), 1);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, &w);
	assert_true(fd >= 0);
	assert_where(&w, "any4", f->p);
	close(rdv_accept(l[0]));
	close(fd);
	/* ... but not for IPv6 clients */
	assert_int_equal(rsk_rdv_find((struct sockaddr *)&lo6, NULL, NULL, NULL), -ENOENT);
	close_all(l, 1);

	/* a dual-stack wildcard answers both families, each on its own name */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&any6, 0, 16, l), 2);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, &w);
	assert_true(fd >= 0);
	assert_where(&w, "any4", f->p);
	close(rdv_accept(l[1])); /* any4 */
	close(fd);
	fd = rsk_rdv_find((struct sockaddr *)&lo6, NULL, NULL, &w);
	assert_true(fd >= 0);
	assert_where(&w, "any6", f->p);
	close(rdv_accept(l[0])); /* any6 */
	close(fd);
	close_all(l, 2);
	assert_int_equal(ucm_fd_count(), before);
}

/* ---- offer, forward, answer ---- */

struct conn {
	int l, cli, srv;            /* rendezvous listener, client's find, server's accepted end */
	int fds[RSK_RDV_NFDS];      /* what the client offers: memfd, ctl end, TCP socket */
	int peer_ctl;               /* the other end of the offered ctl */
};

static void conn_open(struct fix *f, struct conn *k)
{
	int l[2], sp[2];

	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, l), 1);
	k->l = l[0];
	k->cli = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, NULL);
	assert_true(k->cli >= 0);
	k->srv = rdv_accept(k->l);
	k->fds[RSK_RDV_MEMFD] = rsk_shm_create(NBUF, BSIZE);
	assert_true(k->fds[RSK_RDV_MEMFD] >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	k->fds[RSK_RDV_CTL] = sp[0];
	k->peer_ctl = sp[1];
	k->fds[RSK_RDV_TCP] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(k->fds[RSK_RDV_TCP] >= 0);
	k->fds[RSK_RDV_REPLY] = -1;
}

static void conn_close(struct conn *k)
{
	close(k->cli);
	close(k->srv);
	close(k->l);
	close_all(k->fds, RSK_RDV_NFDS);
	close(k->peer_ctl);
}

/* The memfd that arrived is the connection's: it maps, with the client's geometry. */
static void assert_memfd_usable(int memfd)
{
	struct rsk_ep *ep = NULL;
	struct stat st;

	assert_int_equal(fstat(memfd, &st), 0);
	assert_int_equal((size_t)st.st_size, rsk_shm_size(NBUF, BSIZE));
	assert_int_equal(rsk_shm_open(memfd, RSK_SHM_SERVER, -1, NULL, &ep), 0);
	assert_int_equal(ep->nbuf, NBUF);
	assert_int_equal(ep->buf_size, BSIZE);
	rsk_ep_destroy(ep);
}

/* What arrived is what was sent: the same files, close-on-exec, new numbers. */
static void assert_same_files(const int *got, const int *sent, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		assert_true(got[i] >= 0 && got[i] != sent[i]);
		assert_int_equal(ino(got[i]), ino(sent[i]));
		assert_true(fcntl(got[i], F_GETFD) & FD_CLOEXEC);
	}
}

/*
 * The doorbell: a find rings the bell of the rendezvous it reached (the dual-stack one's
 * any4 name for an IPv4 client), never without one; a bell its listener closed is dead and
 * the client maps the next one; a look (exists) does not ring.
 */
static void test_bell(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in6 any6 = ucm_in6("::", f->p);
	struct rsk_rdv_bell *b[2];
	int l[2], fd, rung = 0;
	uid_t owner = (uid_t)-1;

	/* no bell: the find works, it cannot ring */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, l), 1);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, &owner, &rung, NULL);
	assert_true(fd >= 0);
	assert_int_equal(rung, 0);
	assert_int_equal(owner, geteuid());
	close(rdv_accept(l[0]));
	close(fd);
	close_all(l, 1);
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b), 1);
	assert_non_null(b[0]);
	assert_null(b[1]); /* one name only */
	assert_int_equal(rsk_rdv_bell_rings(b[0]), 0);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_true(fd >= 0);
	assert_int_equal(rung, 1);
	assert_int_equal(rsk_rdv_bell_rings(b[0]), 1);
	close(rdv_accept(l[0]));
	close(fd);
	assert_true(rsk_rdv_exists((struct sockaddr *)&f->dest));
	close(rdv_accept(l[0]));
	assert_int_equal(rsk_rdv_bell_rings(b[0]), 1);
	/* a new listener of the same name (same process): the client's cached mapping is
	 * dead, and the new bell rings */
	rsk_rdv_bell_close(b[0]);
	close_all(l, 1);
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b), 1);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_int_equal(rung, 1);
	assert_int_equal(rsk_rdv_bell_rings(b[0]), 1);
	close(rdv_accept(l[0]));
	close(fd);
	/* closed: no bell to ring, and its file is gone */
	rsk_rdv_bell_close(b[0]);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_int_equal(rung, 0);
	close(rdv_accept(l[0]));
	close(fd);
	close_all(l, 1);

	/* dual stack: an IPv4 client rings the any4 name's bell */
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&any6, 0, 16, l, b), 2);
	assert_non_null(b[0]);
	assert_non_null(b[1]);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_int_equal(rung, 1);
	assert_int_equal(rsk_rdv_bell_rings(b[0]), 0);
	assert_int_equal(rsk_rdv_bell_rings(b[1]), 1);
	close(rdv_accept(l[1]));
	close(fd);
	rsk_rdv_bell_close(b[0]);
	rsk_rdv_bell_close(b[1]);
	close_all(l, 2);
}

/* A process that exits with a listener it never closed takes its bell file with it (the
 * library's destructor); a kill leaves it, for the next listener of that name to replace. */
/*
 * The bell says which offer versions its listener reads (a frozen page: magic, pid, rings,
 * ver_min, ver_max): a client commits at connect only to one that reads its own
 * (RSK_RDV_RUNG); another build's says RSK_RDV_RUNG_OTHER (nothing to offer); an older
 * build's page ("BELL", no versions) is rung but commits nothing (0: start on TCP).
 */
static void test_bell_versions(void **state)
{
	struct fix *f = *state;
	static const struct {
		uint32_t lo, hi;
		int rung;
	} ranges[] = {
		{RSK_RDV_VERSION, RSK_RDV_VERSION, RSK_RDV_RUNG},
		{RSK_RDV_VERSION + 1, RSK_RDV_VERSION + 1, RSK_RDV_RUNG_OTHER},
		{RSK_RDV_VERSION - 1, RSK_RDV_VERSION - 1, RSK_RDV_RUNG_OTHER},
		{RSK_RDV_VERSION - 1, RSK_RDV_VERSION + 3, RSK_RDV_RUNG},
		{0, 0, RSK_RDV_RUNG_OTHER},
	};
	struct rsk_rdv_bell *b[2];
	const uint32_t v1 = 0x4c4c4542u; /* "BELL" */
	uint32_t range[2];
	int l[2], fd, bf, rung;
	char path[160];
	struct stat ns;
	size_t k;

	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/rdmasock-rdv.%lu.127.0.0.1.%u",
		 (unsigned long)ns.st_ino, (unsigned int)f->p);
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b), 1);
	assert_non_null(b[0]);
	bf = open(path, O_RDWR | O_CLOEXEC);
	assert_true(bf >= 0);
	for (k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		range[0] = ranges[k].lo;
		range[1] = ranges[k].hi;
		assert_int_equal(pwrite(bf, range, sizeof(range), 16), (ssize_t)sizeof(range));
		rung = -1;
		fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
		assert_true(fd >= 0);
		assert_int_equal(rung, ranges[k].rung);
		assert_int_equal(rsk_rdv_bell_rings(b[0]), k + 1); /* rung all the same */
		close(rdv_accept(l[0]));
		close(fd);
	}
	/* an older build's page: rung (its accept looks), but it says nothing of versions */
	assert_int_equal(pwrite(bf, &v1, sizeof(v1), 0), (ssize_t)sizeof(v1));
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_true(fd >= 0);
	assert_int_equal(rung, 0);
	assert_int_equal(rsk_rdv_bell_rings(b[0]), k + 1);
	close(rdv_accept(l[0]));
	close(fd);
	close(bf);
	rsk_rdv_bell_close(b[0]);
	close_all(l, 1);
}

static void test_bell_gone_at_exit(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_bell *b[2];
	int l[2], st, rung = 1, fd;
	char path[160];
	struct stat ns;
	pid_t pid;

	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/rdmasock-rdv.%lu.127.0.0.1.%u",
		 (unsigned long)ns.st_ino, (unsigned int)f->p);
	/* (the file is where design.md says, while its listener lives) */
	assert_int_equal(rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b), 1);
	assert_int_equal(access(path, F_OK), 0);
	rsk_rdv_bell_close(b[0]);
	close_all(l, 1);
	assert_int_not_equal(access(path, F_OK), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* makes a listener with a bell, rings it, exits without closing */
		if (rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b) != 1 ||
		    b[0] == NULL)
			_exit(2);
		fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
		exit(fd >= 0 && rung == 1 ? 0 : 3); /* exit(): the destructors run */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_not_equal(access(path, F_OK), 0); /* gone with its process */
	/* the name is free again, and no bell of the dead listener answers a ring */
	assert_int_equal(rsk_rdv_listen((struct sockaddr *)&f->dest, 0, 16, l), 1);
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_true(fd >= 0);
	assert_int_equal(rung, 0);
	close(rdv_accept(l[0]));
	close(fd);
	close_all(l, 1);
}

/*
 * A listener forked away (a daemon's parent listens, forks and exits; nginx's default): the
 * bell stays with the child, which holds the rendezvous, so clients still ring it, and the
 * sweep keeps it while the child lives; the child's exit takes it. Before, the maker's exit
 * took it and every client of such a server started on TCP.
 */
static void test_bell_heir(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_bell *b[2];
	int l[2], st, rung = 0, fd, go[2], i;
	char path[160], c = 1;
	struct stat ns;
	pid_t maker, kid;

	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/rdmasock-rdv.%lu.127.0.0.1.%u",
		 (unsigned long)ns.st_ino, (unsigned int)f->p);
	assert_int_equal(pipe(go), 0);
	maker = fork();
	assert_true(maker >= 0);
	if (maker == 0) {
		if (rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b) != 1)
			_exit(2);
		if ((kid = fork()) < 0)
			_exit(3);
		if (kid == 0) { /* holds the rendezvous until told, then exits (destructors run) */
			close(go[1]);
			exit(read(go[0], &c, 1) == 1 ? 0 : 4);
		}
		rsk_rdv_bells_forked(kid); /* what the library's fork() does in the parent */
		exit(0);
	}
	close(go[0]);
	assert_int_equal(waitpid(maker, &st, 0), maker);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(access(path, F_OK), 0); /* the maker left it to the child */
	fd = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, &rung, NULL);
	assert_true(fd >= 0);
	assert_int_equal(rung, RSK_RDV_RUNG);
	close(fd);
	(void)rsk_rdv_bells_sweep(NULL);
	assert_int_equal(access(path, F_OK), 0); /* its maker is gone, its heir is not */
	assert_int_equal(write(go[1], &c, 1), 1);
	close(go[1]);
	for (i = 0; i < 500 && access(path, F_OK) == 0; i++)
		usleep(10000);
	assert_int_not_equal(access(path, F_OK), 0); /* gone with the heir */
}

/* _exit runs no destructor: rsk_rdv_bells_end_all (what the library's _exit calls) takes
 * the bell files of the listeners still open with it. */
static void test_bell_gone_at_quick_exit(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_bell *b[2];
	char path[160];
	struct stat ns;
	int l[2], st;
	pid_t pid;

	assert_int_equal(stat("/proc/self/ns/net", &ns), 0);
	snprintf(path, sizeof(path), "/dev/shm/rdmasock-rdv.%lu.127.0.0.1.%u",
		 (unsigned long)ns.st_ino, (unsigned int)f->p);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (rsk_rdv_listen_bells((struct sockaddr *)&f->dest, 0, 16, l, b) != 1 ||
		    access(path, F_OK) != 0)
			_exit(2);
		rsk_rdv_bells_end_all();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_not_equal(access(path, F_OK), 0);
}

/* A bell file with @pid and @magic in @dir, or a short one (@pid < 0). */
static void bell_file(const char *dir, const char *name, int32_t pid, uint32_t magic)
{
	uint32_t page[4] = {magic, (uint32_t)pid, 0, 0};
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, page, pid < 0 ? 4 : sizeof(page)), pid < 0 ? 4 : sizeof(page));
	close(fd);
}

static int exists_in(const char *dir, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/*
 * The sweep a process's first bell makes: a killed listener's file (its pid gone) and a
 * closed one left behind go; a live listener's, one being made (pid 0), a short file, a
 * link, and files of other names stay.
 */
static void test_bells_sweep(void **state)
{
	char dir[] = "/tmp/rsk-bells.XXXXXX", path[256];
	const uint32_t magic = 0x4c4c4542u; /* "BELL", shm_rdv.c */
	pid_t dead;
	int st, ifd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	dead = fork();
	assert_true(dead >= 0);
	if (dead == 0)
		_exit(0);
	assert_int_equal(waitpid(dead, &st, 0), dead); /* reaped: its pid is gone */
	bell_file(dir, "rdmasock-rdv.1.127.0.0.1.1", dead, magic);
	bell_file(dir, "rdmasock-rdv.1.127.0.0.1.2", getpid(), 0); /* closed, not unlinked */
	bell_file(dir, "rdmasock-rdv.1.127.0.0.1.3", getpid(), magic);
	bell_file(dir, "rdmasock-rdv.1.127.0.0.1.4", 0, 0);
	bell_file(dir, "rdmasock-rdv.1.127.0.0.1.5", -1, 0);
	bell_file(dir, "rdmasock-stat.1", dead, magic);
	snprintf(path, sizeof(path), "%s/rdmasock-rdv.1.127.0.0.1.6", dir);
	assert_int_equal(symlink("rdmasock-rdv.1.127.0.0.1.1", path), 0);
	ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(ifd >= 0);
	assert_true(inotify_add_watch(ifd, dir, IN_MOVED_FROM) >= 0);
	assert_int_equal(rsk_rdv_bells_sweep(dir), 2);
	/* The live bell was never renamed away (a client ringing it then found none) */
	assert_int_equal(unit_files_renamed(ifd, "rdmasock-rdv.1.127.0.0.1.3"), 0);
	close(ifd);
	assert_false(exists_in(dir, "rdmasock-rdv.1.127.0.0.1.1"));
	assert_false(exists_in(dir, "rdmasock-rdv.1.127.0.0.1.2"));
	assert_true(exists_in(dir, "rdmasock-rdv.1.127.0.0.1.3"));
	assert_true(exists_in(dir, "rdmasock-rdv.1.127.0.0.1.4"));
	assert_true(exists_in(dir, "rdmasock-rdv.1.127.0.0.1.5"));
	assert_true(exists_in(dir, "rdmasock-stat.1"));
	assert_int_equal(unlink(path), 0); /* (the link was dangling: not followed) */
	assert_int_equal(rsk_rdv_bells_sweep(dir), 0);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

static void test_offer_round_trip(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o = good_offer(f), got;
	int fds[RSK_RDV_NFDS], before;
	struct conn k;

	conn_open(f, &k);
	before = ucm_fd_count();
	assert_int_equal(rsk_rdv_offer(k.cli, &o, k.fds), 0);
	memset(&got, 0xee, sizeof(got));
	memset(fds, 0xff, sizeof(fds));
	assert_int_equal(rsk_rdv_read_offer(k.srv, &got, fds), 0);
	assert_memory_equal(&got, &o, sizeof(o));
	assert_int_equal(fds[RSK_RDV_REPLY], k.srv); /* not forwarded: answer on it */
	assert_int_equal(ucm_fd_count(), before + 3);
	assert_same_files(fds, k.fds, 3);
	assert_memfd_usable(fds[RSK_RDV_MEMFD]);
	assert_linked(fds[RSK_RDV_CTL], k.peer_ctl); /* ctl is the client's socket end */
	close_all(fds, 3);
	assert_int_equal(ucm_fd_count(), before);
	/* nothing more was sent: the next read finds nothing, and consumes nothing */
	assert_int_equal(rsk_rdv_read_offer(k.srv, &got, fds), -EAGAIN);
	conn_close(&k);
}

static void test_forward(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o = good_offer(f), got, fwd;
	int fds[RSK_RDV_NFDS], fds2[RSK_RDV_NFDS], srv2, sctl[2], answer, before;
	struct conn k;

	conn_open(f, &k);
	before = ucm_fd_count();
	assert_int_equal(rsk_rdv_offer(k.cli, &o, k.fds), 0);
	assert_int_equal(rsk_rdv_read_offer(k.srv, &got, fds), 0);
	/* not ours: back into the rendezvous named for got.server, with the reply fd */
	assert_int_equal(rsk_rdv_forward(&got, fds), 0);
	assert_int_equal(got.forwarded, 0); /* the caller's copy is left alone */
	/* the forwarder still owns what it passed on (the receiver got duplicates) */
	close_all(fds, 3);
	assert_int_equal(ucm_fd_count(), before);

	srv2 = rdv_accept(k.l);
	assert_int_equal(rsk_rdv_read_offer(srv2, &fwd, fds2), 0);
	assert_int_equal(fwd.forwarded, 1);
	fwd.forwarded = 0;
	assert_memory_equal(&fwd, &o, sizeof(o));
	assert_same_files(fds2, k.fds, 3);
	/* the reply fd is the client's original connection (the server's end of it) */
	assert_true(fds2[RSK_RDV_REPLY] != srv2 && fds2[RSK_RDV_REPLY] != k.srv);
	assert_int_equal(ino(fds2[RSK_RDV_REPLY]), ino(k.srv));
	assert_memfd_usable(fds2[RSK_RDV_MEMFD]);
	/* a forwarded offer forwards again (a third sibling), still with the reply fd */
	assert_int_equal(rsk_rdv_forward(&fwd, fds2), 0);
	close(rdv_accept(k.l));

	/* the answer on the reply fd reaches the client on its kept rendezvous connection */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sctl), 0);
	assert_int_equal(rsk_rdv_answer(fds2[RSK_RDV_REPLY], 1, sctl[0]), 0);
	answer = rsk_rdv_read_answer(k.cli, 1000);
	assert_true(answer >= 0);
	assert_true(fcntl(answer, F_GETFD) & FD_CLOEXEC);
	assert_linked(answer, sctl[1]);
	close(answer);
	close_all(sctl, 2);
	close_all(fds2, RSK_RDV_NFDS);
	close(srv2);
	conn_close(&k);
}

/*
 * A client's connection passed on before its offer came: the receiver gets that very
 * connection (one fd, 1 from read_offer) and reads the client's offer from it, answering on
 * it like on its own.
 */
static void test_forward_unread(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o = good_offer(f), got;
	int fds[RSK_RDV_NFDS], srv2, inner, before;
	struct conn k;

	conn_open(f, &k);
	before = ucm_fd_count();
	assert_int_equal(rsk_rdv_read_offer(k.srv, &got, fds), -EAGAIN); /* nothing sent yet */
	assert_int_equal(rsk_rdv_forward_unread((struct sockaddr *)&f->dest, k.srv), 0);
	assert_int_equal(ucm_fd_count(), before); /* the passer still owns its copy */
	srv2 = rdv_accept(k.l);
	fds[0] = fds[1] = -1;
	assert_int_equal(rsk_rdv_read_offer(srv2, &got, fds), 1);
	assert_int_equal(got.forwarded, RSK_RDV_FWD_UNREAD);
	inner = fds[0];
	assert_true(inner >= 0 && fds[1] == -1);
	assert_true(fcntl(inner, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(ino(inner), ino(k.srv));
	close(srv2);
	close(k.srv); /* the passer lets go: the receiver's copy carries on */
	k.srv = inner;
	/* the client's offer arrives now, on the connection the receiver holds */
	assert_int_equal(rsk_rdv_offer(k.cli, &o, k.fds), 0);
	assert_int_equal(rsk_rdv_read_offer(inner, &got, fds), 0);
	assert_memory_equal(&got, &o, sizeof(o));
	assert_int_equal(fds[RSK_RDV_REPLY], inner);
	assert_same_files(fds, k.fds, 3);
	close_all(fds, 3);
	/* a forged unread forward with the wrong fd count is malformed, its fds closed */
	{
		struct rsk_rdv_offer bad = {.magic = RSK_RDV_MAGIC, .version = RSK_RDV_VERSION,
					    .forwarded = RSK_RDV_FWD_UNREAD};
		int two[2] = {k.cli, k.cli},
		    c = rsk_rdv_find((struct sockaddr *)&f->dest, NULL, NULL, NULL), s2;

		assert_true(c >= 0);
		s2 = rdv_accept(k.l);
		before = ucm_fd_count();
		assert_int_equal(ucm_send_fds(c, &bad, sizeof(bad), two, 2), (int)sizeof(bad));
		assert_int_equal(rsk_rdv_read_offer(s2, &got, fds), -EPROTO);
		assert_int_equal(ucm_fd_count(), before);
		close(c);
		close(s2);
	}
	conn_close(&k);
}

/* Forwarding to a rendezvous that is gone fails and consumes none of the caller's fds. */
static void test_forward_no_listener(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o = good_offer(f);
	int sp[2], fds[RSK_RDV_NFDS], before;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	fds[RSK_RDV_MEMFD] = rsk_shm_create(NBUF, BSIZE);
	fds[RSK_RDV_CTL] = sp[0];
	fds[RSK_RDV_TCP] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	fds[RSK_RDV_REPLY] = sp[1];
	before = ucm_fd_count();
	assert_int_equal(rsk_rdv_forward(&o, fds), -ENOENT);
	assert_int_equal(ucm_fd_count(), before);
	assert_true(fcntl(fds[RSK_RDV_MEMFD], F_GETFD) >= 0 && fcntl(sp[0], F_GETFD) >= 0);
	close_all(fds, RSK_RDV_NFDS);
}

static void test_answer(void **state)
{
	struct fix *f = *state;
	struct conn k;
	int ctl, before;

	conn_open(f, &k);
	before = ucm_fd_count();
	/* nothing yet: -EAGAIN at once, or after the wait it was given */
	assert_int_equal(rsk_rdv_read_answer(k.cli, 0), -EAGAIN);
	assert_int_equal(rsk_rdv_answer(k.srv, 1, k.fds[RSK_RDV_CTL]), 0);
	ctl = rsk_rdv_read_answer(k.cli, 1000);
	assert_true(ctl >= 0);
	assert_int_equal(ucm_fd_count(), before + 1);
	assert_linked(ctl, k.peer_ctl);
	close(ctl);
	assert_int_equal(rsk_rdv_answer(k.srv, 0, -1), 0);
	assert_int_equal(rsk_rdv_read_answer(k.cli, 1000), -ECONNREFUSED);
	assert_int_equal(ucm_fd_count(), before);
	conn_close(&k);
}

/* ---- hostile peers ---- */

/* A unix stream pair stands for a rendezvous connection: [0] the peer, [1] ours. */
static void wire(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void test_read_answer_hostile(void **state)
{
	static const uint8_t accept_b = RSK_RDV_ACCEPT, decline_b = RSK_RDV_DECLINE, odd_b = 7,
			     version_b = RSK_RDV_DECLINE_VERSION;
	int sv[2], sp[2], before;
	int64_t t0, dt;

	(void)state;
	wire(sv);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	before = ucm_fd_count();

	/* no answer yet: a bounded wait, then -EAGAIN (the caller asks again later) */
	t0 = ucm_now_ms();
	assert_int_equal(rsk_rdv_read_answer(sv[1], 100), -EAGAIN);
	dt = ucm_now_ms() - t0;
	assert_true(dt >= 90 && dt < 1000);
	/* ACCEPT must carry exactly the server's fd */
	assert_int_equal(ucm_send_fds(sv[0], &accept_b, 1, NULL, 0), 1);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTO);
	assert_int_equal(ucm_send_fds(sv[0], &accept_b, 1, sp, 2), 1);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTO);
	assert_int_equal(ucm_fd_count(), before);
	/* more fds than any answer carries: the ones that arrived are closed too */
	{
		int many[6] = {sp[0], sp[1], sp[0], sp[1], sp[0], sp[1]};

		assert_int_equal(ucm_send_fds(sv[0], &accept_b, 1, many, 6), 1);
		assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTO);
		assert_int_equal(ucm_fd_count(), before);
	}
	/* a status nobody defined, with an fd */
	assert_int_equal(ucm_send_fds(sv[0], &odd_b, 1, sp, 1), 1);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTO);
	assert_int_equal(ucm_fd_count(), before);
	/* a decline is a decline even with an fd attached (which is closed) */
	assert_int_equal(ucm_send_fds(sv[0], &decline_b, 1, sp, 1), 1);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -ECONNREFUSED);
	assert_int_equal(ucm_fd_count(), before);
	/* declined as another build's offer: told apart, the fd closed too */
	assert_int_equal(ucm_send_fds(sv[0], &version_b, 1, sp, 1), 1);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTONOSUPPORT);
	assert_int_equal(ucm_fd_count(), before);
	assert_int_equal(rsk_rdv_decline_version(sv[0]), 0); /* what a listener sends */
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -EPROTONOSUPPORT);
	/* the server went away without answering: EOF */
	close(sv[0]);
	assert_int_equal(rsk_rdv_read_answer(sv[1], 1000), -ECONNRESET);
	assert_int_equal(ucm_fd_count(), before - 1);
	close(sv[1]);
	close_all(sp, 2);
}

enum { M_NONE, M_MAGIC, M_MAGIC0, M_VER0, M_VER_NEXT, M_NBUF0, M_NBUF1, M_NBUF_MAX,
       M_NBUF_HUGE, M_BSIZE0, M_BSIZE_MIN, M_BSIZE_MAX, M_BSIZE_HUGE, M_FAM_UNIX, M_FAM_NONE,
       M_FAM6, M_FWD1, M_FWD2, M_FWD_ALL };

static void mutate(struct rsk_rdv_offer *o, int m)
{
	struct sockaddr_in6 s6 = ucm_in6("::1", 1);

	switch (m) {
	case M_MAGIC: o->magic ^= 1; break;
	case M_MAGIC0: o->magic = 0; break;
	case M_VER0: o->version = 0; break;
	case M_VER_NEXT: o->version = RSK_RDV_VERSION + 1; break;
	case M_NBUF0: o->nbuf = 0; break;
	case M_NBUF1: o->nbuf = 1; break;
	case M_NBUF_MAX: o->nbuf = RSK_SHM_MAX_NBUF + 1; break;
	case M_NBUF_HUGE: o->nbuf = UINT32_MAX; break;
	case M_BSIZE0: o->buf_size = 0; break;
	case M_BSIZE_MIN: o->buf_size = 63; break;
	case M_BSIZE_MAX: o->buf_size = RSK_SHM_MAX_BUF + 1; break;
	case M_BSIZE_HUGE: o->buf_size = UINT32_MAX; break;
	case M_FAM_UNIX: o->server.ss_family = AF_UNIX; break;
	case M_FAM_NONE: o->server.ss_family = AF_UNSPEC; break;
	case M_FAM6: memcpy(&o->server, &s6, sizeof(s6)); break;
	case M_FWD1: o->forwarded = 1; break;
	case M_FWD2: o->forwarded = 2; break;
	case M_FWD_ALL: o->forwarded = UINT32_MAX; break;
	}
}

struct hostile {
	const char *what;
	int mut;      /* M_* */
	ssize_t dlen; /* bytes short of the offer's size */
	int nfds;     /* fds attached */
	int rc;       /* what read_offer must say */
};

static const struct hostile hostile_cases[] = {
	/* controls: the same construction is accepted when it is right */
	{"good offer", M_NONE, 0, 3, 0},
	{"good IPv6 offer", M_FAM6, 0, 3, 0},
	{"good forwarded offer", M_FWD1, 0, 4, 0},
	{"wrong magic", M_MAGIC, 0, 3, -EPROTO},
	{"zero magic", M_MAGIC0, 0, 3, -EPROTO},
	/* another version's offer: told apart from a malformed one (it is declined so) */
	{"version 0", M_VER0, 0, 3, -EPROTONOSUPPORT},
	{"next version", M_VER_NEXT, 0, 3, -EPROTONOSUPPORT},
	{"next version, shorter", M_VER_NEXT, 16, 3, -EPROTONOSUPPORT},
	{"next version, no fds", M_VER_NEXT, 0, 0, -EPROTONOSUPPORT},
	{"the version header only", M_VER_NEXT,
	 (ssize_t)(sizeof(struct rsk_rdv_offer) - sizeof(struct rsk_rdv_hdr)), 0,
	 -EPROTONOSUPPORT},
	{"short of the version header", M_NONE, (ssize_t)sizeof(struct rsk_rdv_offer) - 7, 3,
	 -EPROTO},
	{"nbuf 0", M_NBUF0, 0, 3, -EPROTO},
	{"nbuf 1", M_NBUF1, 0, 3, -EPROTO},
	{"nbuf above the limit", M_NBUF_MAX, 0, 3, -EPROTO},
	{"nbuf 2^32-1", M_NBUF_HUGE, 0, 3, -EPROTO},
	{"buf_size 0", M_BSIZE0, 0, 3, -EPROTO},
	{"buf_size 63", M_BSIZE_MIN, 0, 3, -EPROTO},
	{"buf_size above the limit", M_BSIZE_MAX, 0, 3, -EPROTO},
	{"buf_size 2^32-1", M_BSIZE_HUGE, 0, 3, -EPROTO},
	{"unix server address", M_FAM_UNIX, 0, 3, -EPROTO},
	{"no address family", M_FAM_NONE, 0, 3, -EPROTO},
	{"forwarded 2", M_FWD2, 0, 4, -EPROTO},
	{"forwarded 2^32-1", M_FWD_ALL, 0, 4, -EPROTO},
	{"short by one byte", M_NONE, 1, 3, -EPROTO},
	{"half an offer", M_NONE, (ssize_t)sizeof(struct rsk_rdv_offer) / 2, 3, -EPROTO},
	{"one byte", M_NONE, (ssize_t)sizeof(struct rsk_rdv_offer) - 1, 3, -EPROTO},
	{"no fds", M_NONE, 0, 0, -EPROTO},
	{"one fd", M_NONE, 0, 1, -EPROTO},
	{"two fds (no TCP socket)", M_NONE, 0, 2, -EPROTO},
	{"four fds, not forwarded", M_NONE, 0, 4, -EPROTO},
	{"forwarded without the reply fd", M_FWD1, 0, 3, -EPROTO},
	{"five fds", M_FWD1, 0, 5, -EPROTO},
	{"eight fds", M_NONE, 0, 8, -EPROTO},
};

static void test_read_offer_hostile(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o, got;
	int pool[8], sp[2], sv[2], fds[RSK_RDV_NFDS], before, rc, i, bad = 0;
	size_t n, k;

	/* fds worth stealing: a connection's memfd, a socket end, a TCP socket, more ends */
	pool[0] = rsk_shm_create(NBUF, BSIZE);
	assert_true(pool[0] >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pool[1] = sp[0];
	pool[2] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(pool[2] >= 0);
	pool[3] = sp[1];
	for (i = 4; i < 8; i++)
		pool[i] = dup(sp[0]);
	for (k = 0; k < sizeof(hostile_cases) / sizeof(hostile_cases[0]); k++) {
		const struct hostile *h = &hostile_cases[k];

		wire(sv);
		o = good_offer(f);
		mutate(&o, h->mut);
		n = (size_t)((ssize_t)sizeof(o) - h->dlen);
		before = ucm_fd_count();
		assert_int_equal(ucm_send_fds(sv[0], &o, n, pool, h->nfds), (ssize_t)n);
		for (i = 0; i < RSK_RDV_NFDS; i++)
			fds[i] = -7;
		rc = rsk_rdv_read_offer(sv[1], &got, fds);
		if (rc != h->rc) { /* report every case that is wrong, then fail */
			print_error("%s: read_offer gave %d, not %d\n", h->what, rc, h->rc);
			bad++;
		}
		if (rc == 0) {
			assert_int_equal(ucm_fd_count(), before + h->nfds);
			close_all(fds, h->nfds);
		} else {
			/* refused: the outputs are not touched and nothing stays open */
			for (i = 0; i < RSK_RDV_NFDS; i++)
				assert_int_equal(fds[i], -7);
		}
		if (ucm_fd_count() != before) {
			print_error("%s: %d fds before, %d after\n", h->what, before,
				    ucm_fd_count());
			bad++;
		}
		close_all(sv, 2);
	}
	close_all(pool, 8);
	assert_int_equal(bad, 0);
}

/* At EOF an empty read is a reset, not a malformed offer; nothing queued is -EAGAIN. */
static void test_read_offer_eof(void **state)
{
	struct rsk_rdv_offer got;
	int sv[2], fds[RSK_RDV_NFDS];

	(void)state;
	wire(sv);
	assert_int_equal(rsk_rdv_read_offer(sv[1], &got, fds), -EAGAIN);
	close(sv[0]);
	assert_int_equal(rsk_rdv_read_offer(sv[1], &got, fds), -ECONNRESET);
	close(sv[1]);
}

/*
 * Control data other than SCM_RIGHTS. With SO_PASSCRED on our end, the kernel attaches the
 * sender's credentials to every message: alone they are no fds; beside fds they leave no
 * room for them (MSG_CTRUNC). Both are refused, and the fds the kernel dropped or installed
 * are all gone.
 */
static void test_read_offer_credentials(void **state)
{
	struct fix *f = *state;
	struct rsk_rdv_offer o = good_offer(f), got;
	int sv[2], sp[2], three[3], one = 1, fds[RSK_RDV_NFDS], before;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	three[0] = sp[0];
	three[1] = sp[1];
	three[2] = sp[0];
	wire(sv);
	assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	before = ucm_fd_count();
	/* no fds, only the kernel's credentials */
	assert_int_equal(ucm_send_fds(sv[0], &o, sizeof(o), NULL, 0), (ssize_t)sizeof(o));
	assert_int_equal(rsk_rdv_read_offer(sv[1], &got, fds), -EPROTO);
	assert_int_equal(ucm_fd_count(), before);
	/* credentials beside the three fds */
	assert_int_equal(ucm_send_fds(sv[0], &o, sizeof(o), three, 3), (ssize_t)sizeof(o));
	assert_int_equal(rsk_rdv_read_offer(sv[1], &got, fds), -EPROTO);
	assert_int_equal(ucm_fd_count(), before);
	close_all(sv, 2);
	close_all(sp, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_listen_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_find, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bell, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bell_gone_at_exit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bell_heir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_offer_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forward, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forward_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forward_no_listener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answer, setup, teardown),
		cmocka_unit_test(test_read_answer_hostile),
		cmocka_unit_test_setup_teardown(test_read_offer_hostile, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bell_versions, setup, teardown),
		cmocka_unit_test(test_read_offer_eof),
		cmocka_unit_test_setup_teardown(test_bell_gone_at_quick_exit, setup, teardown),
		cmocka_unit_test(test_bells_sweep),
		cmocka_unit_test_setup_teardown(test_read_offer_credentials, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
