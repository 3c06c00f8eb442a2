/*
 * Unit tests for core/base/ready: the readiness protocol on struct rsk_ready_state, seen as an
 * application sees it (poll() on the app end) and as the accounting promises it (ready.h:
 * raised - dropped - taken = tokens in the app end or on their way). The waker's side: a
 * claim from EMPTY shows, a claim while SHOWN gives an extra arrival edge only when asked and
 * only up to RSK_READY_EDGE_MAX unread, a token whose write fails is dropped, an unclaim
 * after the reader consumed everything leaves nothing shown; a lazy owner asleep on an
 * edge-triggered registration gets one edge per sleep. The owner's side: lower takes
 * exactly the tokens of the state it leaves (not those a waker raised since), goes back to
 * SHOWN when data came meanwhile, waits once for a stalled waker and never again for the
 * same token ("late"), and collects that token once it comes; block/open/drain make the app
 * end unwritable and writable again, reusing one fill; EOF and hang-up are for good; the
 * exec-time sweep turns our app ends, and nothing else, into dead sockets.
 *
 * The waker is played by this thread (or a helper thread for the timing cases), with the
 * calls shm.c's kick makes, so every interleaving here is exact, not a race to win.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/ready.h"
#include "unit.h"
#include "unit_count.h"

/* One app end with its ctl end, the shared state block and the owner's bookkeeping. */
struct rp {
	int app, ctl;
	struct rsk_ready_state st;
	struct rsk_ready_owner o;
};

/* The fds of every pair not yet closed, by value: the teardown closes them when a test
 * failed half-way (the sweep test counts the app ends alive in this process). */
static int open_fds[16];
static int nopen;

static void fd_forget(int fd)
{
	int i;

	for (i = 0; i < nopen; i++)
		if (open_fds[i] == fd)
			open_fds[i] = open_fds[--nopen];
}

static void rp_open(struct rp *p)
{
	memset(p, 0, sizeof(*p));
	assert_int_equal(rsk_ready_pair(&p->app, &p->ctl), 0);
	assert_true(p->app >= 0 && p->ctl >= 0 && p->app != p->ctl);
	assert_true(nopen + 2 <= 16);
	open_fds[nopen++] = p->app;
	open_fds[nopen++] = p->ctl;
}

/* Close one end early (the test then sets it to -1). */
static void rp_close_fd(int *fd)
{
	fd_forget(*fd);
	close(*fd);
	*fd = -1;
}

static void rp_close(struct rp *p)
{
	if (p->app >= 0)
		rp_close_fd(&p->app);
	if (p->ctl >= 0)
		rp_close_fd(&p->ctl);
}

static int pairs_teardown(void **state)
{
	(void)state;
	while (nopen > 0)
		close(open_fds[--nopen]);
	return 0;
}

/* The app end's poll revents for @events, now (no wait). */
static short revents(int fd, short events)
{
	struct pollfd pfd = {.fd = fd, .events = events};

	assert_true(poll(&pfd, 1, 0) >= 0);
	return pfd.revents;
}

#define READABLE(fd) ((revents((fd), POLLIN) & POLLIN) != 0)
#define WRITABLE(fd) ((revents((fd), POLLOUT) & POLLOUT) != 0)

/* Bytes waiting in @fd's receive queue. */
static int queued(int fd)
{
	int n = -1;

	assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
	return n;
}

static uint32_t raised(const struct rp *p)
{
	return __atomic_load_n(&p->st.rx, __ATOMIC_SEQ_CST) >> 1;
}

static int shown(const struct rp *p)
{
	return (__atomic_load_n(&p->st.rx, __ATOMIC_SEQ_CST) & RSK_RX_SHOWN) != 0;
}

/* The invariant, checked against what the kernel holds: every token counted unread is in
 * the app end (nothing is on its way in these single-threaded steps). */
static void assert_exact(const struct rp *p)
{
	assert_int_equal(rsk_ready_unread(&p->st), (uint32_t)queued(p->app));
	assert_int_equal(raised(p) - p->st.dropped - p->st.taken, rsk_ready_unread(&p->st));
	assert_int_equal(READABLE(p->app), queued(p->app) > 0);
}

/* The waker's step after a message, as shm.c's kick makes it: claim, then write. */
static int wake(struct rp *p, int edge)
{
	int kind = rsk_ready_claim_rx(&p->st, edge, NULL);

	if (kind)
		rsk_ready_token(&p->st, p->ctl);
	return kind;
}

static int no(void *arg)
{
	(void)arg;
	return 0;
}

/* The owner's waits during one lower, counted and not timed: each is a 1 ms poll through the
 * library's libc table (unit_count.h), so a test thread descheduled for a while never reads
 * as a wait, and a wait is seen however fast the machine. The lower must say EMPTY. */
static int lower_waits(struct rp *p)
{
	int polls;

	ucn_count(1);
	assert_int_equal(rsk_ready_lower(&p->st, &p->o, p->app, no, NULL), 1);
	polls = ucn.poll;
	ucn_count(0);
	return polls;
}

/* ---- the pair ---- */

static void test_pair(void **state)
{
	struct sockaddr_un un;
	socklen_t len = sizeof(un);
	struct rp p;
	int type = 0;
	char name[32];

	(void)state;
	rp_open(&p);
	len = sizeof(type);
	assert_int_equal(getsockopt(p.app, SOL_SOCKET, SO_TYPE, &type, &len), 0);
	assert_int_equal(type, SOCK_STREAM);
	/* the app end is blocking until the caller says otherwise (a blocking application's
	 * fd); both ends are close-on-exec */
	assert_false(fcntl(p.app, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(p.app, F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(p.ctl, F_GETFD) & FD_CLOEXEC);
	/* named so that a later program image recognises it (rsk_ready_sweep_stale) */
	len = sizeof(un);
	assert_int_equal(getsockname(p.app, (struct sockaddr *)&un, &len), 0);
	snprintf(name, sizeof(name), "rsk1/a/%d/", (int)getpid());
	assert_int_equal(un.sun_path[0], '\0');
	assert_memory_equal(un.sun_path + 1, name, strlen(name));
	/* nothing to read and room to write at the start */
	assert_int_equal(revents(p.app, POLLIN | POLLOUT | POLLRDHUP), POLLOUT);
	assert_int_equal(rsk_ready_unread(&p.st), 0);
	rp_close(&p);
}

/*
 * ready.h: "*ctl (non-blocking)". relay.c writes the application's data into ctl: with the
 * app end's queue full (a forked child that does not read), a blocking ctl would stop the
 * event-loop thread, and every other connection's wake-ups with it.
 */
static void test_pair_ctl_nonblocking(void **state)
{
	struct rp p;
	char c;

	(void)state;
	rp_open(&p);
	assert_true(fcntl(p.ctl, F_GETFL) & O_NONBLOCK);
	assert_int_equal(recv(p.ctl, &c, 1, 0), -1); /* would wait for ever */
	assert_int_equal(errno, EAGAIN);
	rp_close(&p);
}

/* ---- the waker's side ---- */

static void test_claim_show_and_edges(void **state)
{
	uint32_t word = 0;
	struct rp p;
	int i;

	(void)state;
	rp_open(&p);
	/* EMPTY: the first message shows, counted before the write */
	assert_int_equal(rsk_ready_claim_rx(&p.st, 0, &word), RSK_CLAIM_SHOW);
	assert_int_equal(word, p.st.rx);
	assert_true(shown(&p));
	assert_int_equal(raised(&p), 1);
	assert_int_equal(rsk_ready_unread(&p.st), 1); /* on its way */
	assert_false(READABLE(p.app));
	rsk_ready_token(&p.st, p.ctl);
	assert_exact(&p);
	assert_true(READABLE(p.app));
	/* SHOWN: nothing more unless an edge is asked for */
	assert_int_equal(rsk_ready_claim_rx(&p.st, 0, NULL), 0);
	assert_int_equal(raised(&p), 1);
	/* an edge-triggered reader gets one edge per arrival, up to RSK_READY_EDGE_MAX unread */
	for (i = 1; i < (int)RSK_READY_EDGE_MAX; i++)
		assert_int_equal(wake(&p, 1), RSK_CLAIM_EDGE);
	assert_int_equal(rsk_ready_unread(&p.st), RSK_READY_EDGE_MAX);
	assert_exact(&p);
	assert_int_equal(wake(&p, 1), 0);
	assert_int_equal(wake(&p, 0), 0);
	assert_int_equal(raised(&p), RSK_READY_EDGE_MAX);
	assert_exact(&p);
	/* the owner read everything: lower takes them all, and the next message shows again */
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, no, NULL), 1);
	assert_false(shown(&p));
	assert_int_equal(p.st.taken, RSK_READY_EDGE_MAX);
	assert_exact(&p);
	assert_false(READABLE(p.app));
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_SHOW);
	rsk_ready_token(&p.st, p.ctl);
	assert_exact(&p);
	rp_close(&p);
}

/* A lazy owner (level-triggered waits answered from user space) wants no extra arrival
 * edge: a SHOWN app end gets no token however many messages come, EMPTY still shows. */
static void test_lazy_owner_no_edges(void **state)
{
	struct rp p;

	(void)state;
	rp_open(&p);
	p.st.lazy = 1;
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_SHOW);
	rsk_ready_token(&p.st, p.ctl);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), 0);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), 0);
	assert_int_equal(raised(&p), 1);
	assert_exact(&p);
	p.st.lazy = 0; /* eager again: the edges resume */
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE);
	rsk_ready_token(&p.st, p.ctl);
	assert_exact(&p);
	rp_close(&p);
}

/*
 * A lazy owner asleep on an edge-triggered registration (its stale token stays): the first
 * message after it counted its sleep gets one token, an edge (a kick), the next ones none
 * until that edge's report is taken (edge_seen), and none once the sleep ended. Two sleepers
 * still share one edge. EMPTY shows as always, and leaves no kick claimed behind it.
 */
static void test_lazy_sleeper_one_edge(void **state)
{
	struct rp p;

	(void)state;
	rp_open(&p);
	p.st.lazy = 1;
	assert_int_equal(wake(&p, 0), RSK_CLAIM_SHOW); /* the token that goes stale */
	assert_int_equal(wake(&p, 0), 0);             /* awake: nothing */
	rsk_ready_sleep(&p.st, 1);
	assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE);
	assert_true(shown(&p));
	assert_int_equal(wake(&p, 0), 0); /* one edge per sleep */
	assert_int_equal(wake(&p, 1), 0);
	assert_int_equal(raised(&p), 2);
	assert_exact(&p);
	assert_int_equal(queued(p.app), 2); /* both stay: nobody took one back */
	rsk_ready_edge_seen(&p.st);         /* a report taken: the sleeper looks at the ring */
	assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE);
	rsk_ready_sleep(&p.st, 1); /* a second sleeper: the pending edge is for both */
	assert_int_equal(wake(&p, 0), 0);
	rsk_ready_sleep(&p.st, 0);
	rsk_ready_sleep(&p.st, 0);
	rsk_ready_edge_seen(&p.st);
	assert_int_equal(wake(&p, 0), 0); /* nobody sleeps */
	assert_int_equal(raised(&p), 3);
	assert_exact(&p);
	/* EMPTY with a sleeper: a plain SHOW (its token is the edge), no kick claimed */
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, no, NULL), 1);
	rsk_ready_sleep(&p.st, 1);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 0, NULL), RSK_CLAIM_SHOW);
	assert_int_equal(p.st.sleep & RSK_SLEEP_KICKED, 0);
	rsk_ready_token(&p.st, p.ctl);
	assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE);
	rsk_ready_sleep(&p.st, 0);
	assert_exact(&p);
	rp_close(&p);
}

/*
 * The sleeper/waker ordering (ready.h, `sleep`), every interleaving of it. The owner (O)
 * counts its sleep, then looks at the ring once more, and sleeps in the kernel on an
 * edge-triggered registration (a real epoll set here) if that look found nothing new. Two
 * wakers post a message each, then claim; waker A writes its token in a later step (shm.c
 * may owe it), so waker B can find A's KICKED and write nothing. In every order of those
 * seven steps, from a SHOWN app end whose stale token's edge was taken and from an EMPTY
 * one: an owner whose look found nothing new while a message came gets an edge from the
 * kernel. Then it takes that report (edge_seen), looks, finds everything, and sleeps on
 * counted: one more message gets it one more edge (a KICKED left from the first round
 * would sleep through it).
 */
enum { SO_COUNT, SO_LOOK, SA_POST, SA_CLAIM, SA_TOKEN, SB_POST, SB_WAKE, SO_STEPS };

struct sleep_model {
	struct rp p;
	int ep, kind_a;
	unsigned int ring, looked; /* messages posted; the ring as the owner's look found it */
};

/* Edges the kernel reports for the app end now (0 or 1: one registration, no wait). */
static int edges(const struct sleep_model *m)
{
	struct epoll_event ev;
	int n = epoll_wait(m->ep, &ev, 1, 0);

	assert_true(n >= 0);
	return n;
}

static void sleep_model_open(struct sleep_model *m, int empty)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET};

	rp_open(&m->p);
	m->p.st.lazy = 1;
	m->ring = 0;
	if (!empty) { /* one message read long ago: its token stays, stale, its edge taken */
		assert_int_equal(wake(&m->p, 0), RSK_CLAIM_SHOW);
		m->ring = 1;
	}
	m->ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(m->ep >= 0);
	assert_int_equal(epoll_ctl(m->ep, EPOLL_CTL_ADD, m->p.app, &ev), 0);
	assert_int_equal(edges(m), !empty);
	rsk_ready_edge_seen(&m->p.st);
	assert_int_equal(edges(m), 0);
	m->looked = m->ring;
}

static void sleep_model_step(struct sleep_model *m, int step)
{
	switch (step) {
	case SO_COUNT:
		rsk_ready_sleep(&m->p.st, 1);
		break;
	case SO_LOOK:
		m->looked = __atomic_load_n(&m->ring, __ATOMIC_SEQ_CST);
		break;
	case SA_POST:
	case SB_POST:
		__atomic_add_fetch(&m->ring, 1, __ATOMIC_SEQ_CST);
		break;
	case SA_CLAIM:
		m->kind_a = rsk_ready_claim_rx(&m->p.st, 0, NULL);
		break;
	case SA_TOKEN:
		if (m->kind_a)
			rsk_ready_token(&m->p.st, m->p.ctl);
		break;
	default:
		(void)wake(&m->p, 0);
	}
}

/* Run one order of the seven steps (@order: a permutation keeping each actor's own order). */
static void sleep_model_run(const int *order, int empty)
{
	struct sleep_model m;
	unsigned int start;
	int i;

	sleep_model_open(&m, empty);
	start = m.ring;
	for (i = 0; i < SO_STEPS; i++)
		sleep_model_step(&m, order[i]);
	assert_exact(&m.p);
	if (m.looked == start) {
		/* asleep since its look: what came after it must have made an edge */
		if (edges(&m) != 1)
			fail_msg("lost wake: order %d%d%d%d%d%d%d, %s", order[0], order[1], order[2],
				 order[3], order[4], order[5], order[6], empty ? "EMPTY" : "SHOWN");
		rsk_ready_edge_seen(&m.p.st); /* the report taken, before the ring is looked at */
		m.looked = m.ring;
		assert_int_equal(edges(&m), 0); /* still counted: it sleeps again */
		sleep_model_step(&m, SB_POST);
		sleep_model_step(&m, SB_WAKE);
		assert_int_equal(edges(&m), 1);
	}
	rsk_ready_sleep(&m.p.st, 0);
	assert_exact(&m.p);
	close(m.ep);
	rp_close(&m.p);
}

/* Every interleaving of the owner's, A's and B's steps, each actor's in its own order. */
static int sleep_model_all(int *order, int depth, int *next, int empty)
{
	static const int last[3] = {SO_LOOK, SA_TOKEN, SB_WAKE};
	int a, runs = 0;

	if (depth == SO_STEPS) {
		sleep_model_run(order, empty);
		return 1;
	}
	for (a = 0; a < 3; a++) {
		if (next[a] > last[a])
			continue;
		order[depth] = next[a]++;
		runs += sleep_model_all(order, depth + 1, next, empty);
		next[a]--;
	}
	return runs;
}

static void test_sleeper_waker_every_order(void **state)
{
	int order[SO_STEPS], empty;

	(void)state;
	for (empty = 0; empty < 2; empty++) {
		int next[3] = {SO_COUNT, SA_POST, SB_POST};

		/* 7! / (2! 3! 2!) orders */
		assert_int_equal(sleep_model_all(order, 0, next, empty), 210);
	}
}

/* Stale tokens are trimmed in one read down to the number kept; nothing when at or below it. */
static void test_trim_keeps(void **state)
{
	struct rp p;
	int i;

	(void)state;
	rp_open(&p);
	p.st.lazy = 1;
	assert_int_equal(wake(&p, 0), RSK_CLAIM_SHOW);
	for (i = 0; i < 9; i++) {
		rsk_ready_sleep(&p.st, 1);
		assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE);
		rsk_ready_edge_seen(&p.st);
		rsk_ready_sleep(&p.st, 0);
	}
	assert_int_equal(queued(p.app), 10);
	assert_int_equal(rsk_ready_trim(&p.st, p.app, 1), 9);
	assert_int_equal(queued(p.app), 1);
	assert_int_equal(p.st.taken, 9);
	assert_true(shown(&p));
	assert_exact(&p);
	assert_int_equal(rsk_ready_trim(&p.st, p.app, 1), 0);
	assert_int_equal(queued(p.app), 1);
	/* one counted and not written yet: only what is there is taken */
	rsk_ready_count_raise(&p.st);
	assert_int_equal(rsk_ready_trim(&p.st, p.app, 0), 1);
	assert_int_equal(rsk_ready_unread(&p.st), 1);
	rsk_ready_token(&p.st, p.ctl);
	assert_exact(&p);
	rp_close(&p);
}

/* Edges resume as soon as the unread count drops below the bound (dropped ones count). */
static void test_edge_bound_counts_drops(void **state)
{
	struct rp p;
	int i;

	(void)state;
	rp_open(&p);
	for (i = 0; i < (int)RSK_READY_EDGE_MAX; i++)
		assert_true(wake(&p, 1) != 0);
	assert_int_equal(wake(&p, 1), 0);
	/* a token that could not be written frees its place in the bound */
	__atomic_add_fetch(&p.st.dropped, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), 0);
	rp_close(&p);
}

/*
 * A sleeper's edge (a kick) whose write fails, because the app end's queue is full: no edge
 * came, so KICKED must not stay, or every later waker would find it and write nothing while
 * the owner sleeps. The next message claims the kick again.
 */
static void test_failed_kick_is_claimed_again(void **state)
{
	struct rp p;
	int i;

	(void)state;
	rp_open(&p);
	for (i = 0; i < 100000 && p.st.dropped == 0; i++) { /* fill the app end */
		rsk_ready_count_raise(&p.st);
		rsk_ready_token(&p.st, p.ctl);
	}
	assert_int_equal(p.st.dropped, 1);
	p.st.lazy = 1;
	rsk_ready_sleep(&p.st, 1);
	assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE); /* its write fails: the queue is full */
	assert_int_equal(p.st.dropped, 2);
	assert_int_equal(p.st.sleep & RSK_SLEEP_KICKED, 0);
	for (i = 0; i < 100000 && rsk_ready_trim(&p.st, p.app, 0) > 0; i++)
		; /* the owner took its tokens: room again */
	assert_int_equal(queued(p.app), 0);
	assert_int_equal(wake(&p, 0), RSK_CLAIM_WAKE); /* the edge, this time */
	assert_int_equal(queued(p.app), 1);
	rsk_ready_sleep(&p.st, 0);
	rp_close(&p);
}

/* A token whose write fails is dropped: the owner must not wait for it. */
static void test_failed_token_is_dropped(void **state)
{
	struct rp p;
	int i, dropped_at = -1;

	(void)state;
	rp_open(&p);
	/* The app end's queue is bounded (every token is an skb charged to ctl): raise until a
	 * write fails, as a flood of arrivals would. */
	for (i = 0; i < 100000 && dropped_at < 0; i++) {
		rsk_ready_count_raise(&p.st);
		rsk_ready_token(&p.st, p.ctl);
		if (p.st.dropped > 0)
			dropped_at = i;
	}
	print_message("the app end held %d tokens\n", dropped_at);
	assert_true(dropped_at > 1);
	assert_int_equal(p.st.dropped, 1);
	assert_exact(&p);
	/* the owner goes EMPTY and takes exactly what is there, without waiting for the one
	 * that never came */
	assert_int_equal(lower_waits(&p), 0);
	assert_int_equal(p.o.late, 0);
	assert_exact(&p);
	assert_false(READABLE(p.app));

	/* the owner's app end is gone (the owner closed): the write fails, the count agrees */
	rp_close_fd(&p.app);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 0, NULL), RSK_CLAIM_SHOW);
	rsk_ready_token(&p.st, p.ctl);
	assert_int_equal(p.st.dropped, 2);
	assert_int_equal(rsk_ready_unread(&p.st), 0);
	rp_close(&p);
}

/* A waker that unclaims @delay_ms after its claim (it found the reader had taken it all). */
struct unclaim_later {
	struct rp *p;
	int delay_ms;
	uint32_t word;
	int kind;
};

static void *unclaim_later(void *arg)
{
	struct unclaim_later *u = arg;

	unit_sleep_ms(u->delay_ms);
	rsk_ready_unclaim_rx(&u->p->st, u->word, u->kind);
	return NULL;
}

/*
 * The reader consumed everything between the waker's claim and its write (shm.c's kick
 * checks that the reader took every message back): the claim is undone, so the app end
 * shows nothing and a select()-then-read() program does not block in read.
 */
static void test_unclaim_after_reader_consumed(void **state)
{
	uint32_t word = 0;
	struct rp p;
	int kind;

	(void)state;
	rp_open(&p);
	kind = rsk_ready_claim_rx(&p.st, 0, &word);
	assert_int_equal(kind, RSK_CLAIM_SHOW);
	rsk_ready_unclaim_rx(&p.st, word, kind);
	assert_false(shown(&p));
	assert_int_equal(p.st.dropped, 0); /* undone whole, count and state: nothing to drop */
	assert_exact(&p);
	assert_false(READABLE(p.app));
	/* EMPTY again: the next message shows */
	assert_int_equal(wake(&p, 0), RSK_CLAIM_SHOW);
	assert_exact(&p);
	assert_true(READABLE(p.app));

	/* An edge's unclaim: the SHOWN is the earlier token's, which stays in the app end. */
	kind = rsk_ready_claim_rx(&p.st, 1, &word);
	assert_int_equal(kind, RSK_CLAIM_EDGE);
	rsk_ready_unclaim_rx(&p.st, word, kind);
	assert_true(shown(&p));
	assert_exact(&p);
	assert_true(READABLE(p.app));

	/* The owner goes EMPTY between claim and unclaim (a waker checking what the reader
	 * took, in another thread): the owner waits only until the waker says it needs no
	 * token, and the unclaim finds nothing to undo. */
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, no, NULL), 1);
	{
		struct unclaim_later u = {&p, 10, 0, 0};
		pthread_t t;

		u.kind = rsk_ready_claim_rx(&p.st, 0, &u.word);
		assert_int_equal(u.kind, RSK_CLAIM_SHOW);
		assert_int_equal(pthread_create(&t, NULL, unclaim_later, &u), 0);
		/* it waited for the unclaim, not the whole while */
		assert_true(lower_waits(&p) < RSK_READY_LATE_MS);
		assert_int_equal(pthread_join(t, NULL), 0);
		assert_int_equal(p.o.late, 0);
		assert_false(shown(&p));
		assert_exact(&p);
	}
	/* A waker raised on top of our claim (its token is written): our unclaim leaves its
	 * SHOWN alone. */
	kind = rsk_ready_claim_rx(&p.st, 0, &word);
	assert_int_equal(kind, RSK_CLAIM_SHOW);
	assert_int_equal(wake(&p, 1), RSK_CLAIM_EDGE);
	rsk_ready_unclaim_rx(&p.st, word, kind);
	assert_true(shown(&p));
	assert_exact(&p);
	assert_true(READABLE(p.app));
	rp_close(&p);
}

/* ---- the owner's side: lower ---- */

struct racer {
	struct rp *p;
	int calls;
	int raise;   /* raise (claim + write) a new state from inside the re-check */
	int readable;
};

/* The owner's re-check, called after EMPTY is published: a waker may act right there. */
static int recheck(void *arg)
{
	struct racer *r = arg;

	r->calls++;
	if (r->raise)
		(void)wake(r->p, 0);
	return r->readable;
}

static void test_lower_takes_exactly_its_tokens(void **state)
{
	struct racer r = {0};
	struct rp p;

	(void)state;
	rp_open(&p);
	/* already EMPTY: nothing to do, and no re-check */
	r.p = &p;
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, recheck, &r), 1);
	assert_int_equal(r.calls, 0);
	/* three tokens of one state (a show and two edges) */
	(void)wake(&p, 0);
	(void)wake(&p, 1);
	(void)wake(&p, 1);
	assert_int_equal(queued(p.app), 3);
	/* A waker raises a new state right after we published EMPTY, and its message came
	 * after our re-check: its token is the new state's and must stay; ours go. */
	r.raise = 1;
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, recheck, &r), 1);
	assert_int_equal(r.calls, 1);
	assert_true(shown(&p));
	assert_int_equal(p.st.taken, 3);
	assert_int_equal(queued(p.app), 1);
	assert_exact(&p);
	assert_true(READABLE(p.app));
	/* data came meanwhile: back to SHOWN with the tokens in place */
	r.raise = 0;
	r.readable = 1;
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, recheck, &r), 0);
	assert_true(shown(&p));
	assert_int_equal(queued(p.app), 1);
	assert_exact(&p);
	/* data came and a waker raised too: its SHOWN stands, every token stays */
	r.raise = 1;
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, recheck, &r), 0);
	assert_true(shown(&p));
	assert_int_equal(queued(p.app), 2);
	assert_exact(&p);
	/* and a plain lower takes both */
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, no, NULL), 1);
	assert_false(shown(&p));
	assert_exact(&p);
	assert_false(READABLE(p.app));
	rp_close(&p);
}

/*
 * A claim made after the owner published EMPTY and then unclaimed while its SHOWN still
 * stands: the claim is undone whole (state and count), so no drop is counted that would hide
 * one of the old state's tokens from a later lower (readable, nothing to read).
 */
struct unclaimer {
	struct rp *p;
};

static int recheck_claim_unclaim(void *arg)
{
	struct unclaimer *u = arg;
	uint32_t word = 0;
	int kind = rsk_ready_claim_rx(&u->p->st, 0, &word);

	if (kind)
		rsk_ready_unclaim_rx(&u->p->st, word, kind); /* the reader took it all since */
	return 0;
}

static void test_lower_later_unclaim_keeps_old_token(void **state)
{
	struct unclaimer u;
	struct rp p;

	(void)state;
	rp_open(&p);
	u.p = &p;
	(void)wake(&p, 0);
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, recheck_claim_unclaim, &u), 1);
	assert_false(shown(&p));
	assert_false(READABLE(p.app)); /* the old token was taken */
	assert_exact(&p);
	rp_close(&p);
}

/* A waker between its claim and its write. */
struct staller {
	struct rp *p;
	int delay_ms;
	int wrote;
};

static void *write_later(void *arg)
{
	struct staller *s = arg;

	unit_sleep_ms(s->delay_ms);
	rsk_ready_token(&s->p->st, s->p->ctl);
	__atomic_store_n(&s->wrote, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_lower_waits_for_token_on_its_way(void **state)
{
	struct staller s;
	struct rp p;
	pthread_t t;

	(void)state;
	rp_open(&p);
	(void)wake(&p, 0);
	/* the second token is claimed; its write comes 10 ms later */
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE);
	s = (struct staller){&p, 10, 0};
	assert_int_equal(pthread_create(&t, NULL, write_later, &s), 0);
	/* it came: no need to wait the whole while */
	assert_true(lower_waits(&p) < RSK_READY_LATE_MS);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(s.wrote, 1);
	assert_int_equal(p.st.taken, 2);
	assert_int_equal(p.o.late, 0);
	assert_exact(&p);
	assert_false(READABLE(p.app));
	rp_close(&p);
}

/*
 * A waker that stalls (preempted for long, or stopped) between claim and write: the owner
 * waits for it once, then goes on ("late"); it never waits for that token again; when the
 * token finally comes, the next lower takes it at once, so the app end does not stay
 * readable with nothing to read.
 */
static void test_lower_late_token(void **state)
{
	int64_t t0, dt;
	struct rp p;

	(void)state;
	rp_open(&p);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 0, NULL), RSK_CLAIM_SHOW); /* stalls */
	t0 = rsk_now_ms();
	assert_int_equal(lower_waits(&p), RSK_READY_LATE_MS); /* the whole while, once */
	dt = rsk_now_ms() - t0;
	print_message("lower waited %lld ms for the stalled waker\n", (long long)dt);
	assert_true(dt >= RSK_READY_LATE_MS && dt < 10000);
	assert_int_equal(p.o.late, 1);
	assert_false(shown(&p));
	assert_int_equal(rsk_ready_unread(&p.st), 1); /* still counted: it is on its way */

	/* More data and a new state, the stalled one still out: no second wait. */
	(void)wake(&p, 0);
	assert_int_equal(lower_waits(&p), 0);
	assert_int_equal(p.o.late, 1);
	assert_int_equal(queued(p.app), 0);
	/* already EMPTY, still nothing: no wait either */
	assert_int_equal(lower_waits(&p), 0);

	/* The stalled waker wakes up and writes: readable with nothing behind it, until the
	 * owner looks again, which takes it without waiting. */
	rsk_ready_token(&p.st, p.ctl);
	assert_true(READABLE(p.app));
	assert_int_equal(lower_waits(&p), 0);
	assert_int_equal(p.o.late, 0);
	assert_exact(&p);
	assert_false(READABLE(p.app));
	rp_close(&p);
}

/* At EOF (the waker shut its side, or went) no token can come: no wait. */
static void test_lower_at_eof_does_not_wait(void **state)
{
	struct rp p;

	(void)state;
	rp_open(&p);
	(void)wake(&p, 0);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE); /* never written */
	rsk_ready_eof(p.ctl);
	assert_int_equal(lower_waits(&p), 0);
	assert_int_equal(p.st.taken, 1);
	rp_close(&p);
}

/* A peer that writes nonsense into the shared counts cannot make the owner wait or spin. */
static void test_lower_hostile_counts(void **state)
{
	struct rp p;

	(void)state;
	rp_open(&p);
	(void)wake(&p, 0);
	p.st.dropped = 5; /* more dropped than ever raised: "unread" wraps */
	assert_int_equal(lower_waits(&p), 0);
	p.st.dropped = 0;
	p.st.rx = (UINT32_MAX - 1) | RSK_RX_SHOWN; /* a huge count, nothing behind it */
	assert_int_equal(lower_waits(&p), 0);
	/* and edge claims stop there (unread >= the bound) */
	p.st.rx |= RSK_RX_SHOWN;
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), 0);
	rp_close(&p);
}

/* collect (a relay taking over): every unread token goes, including one on its way. */
static void test_collect(void **state)
{
	struct staller s;
	struct rp p;
	pthread_t t;
	int64_t t0;

	(void)state;
	rp_open(&p);
	(void)wake(&p, 0);
	(void)wake(&p, 1);
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE);
	s = (struct staller){&p, 10, 0};
	assert_int_equal(pthread_create(&t, NULL, write_later, &s), 0);
	rsk_ready_collect(&p.st, &p.o, p.app, 1000);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(p.st.taken, 3);
	assert_exact(&p);
	assert_false(READABLE(p.app));
	/* one that never comes: collect waits at most what it was given */
	assert_int_equal(rsk_ready_claim_rx(&p.st, 1, NULL), RSK_CLAIM_EDGE);
	t0 = rsk_now_ms();
	rsk_ready_collect(&p.st, &p.o, p.app, 20);
	assert_true(rsk_now_ms() - t0 < 500);
	assert_int_equal(p.o.late, 1);
	rp_close(&p);
}

/* ---- the owner's side: writability ---- */

struct opener {
	struct rp *p;
	int calls;
};

static int writable_once(void *arg)
{
	struct opener *w = arg;

	return ++w->calls == 1;
}

static void test_block_and_waker_drain(void **state)
{
	struct rp p;
	int round;

	(void)state;
	rp_open(&p);
	for (round = 0; round < 3; round++) {
		assert_true(WRITABLE(p.app));
		rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
		assert_false(WRITABLE(p.app));
		assert_true(p.st.tx & RSK_TX_BLOCKED);
		assert_true(queued(p.ctl) > 0); /* the fill */
		/* writability and readability are separate: no token appeared */
		assert_false(READABLE(p.app));
		rsk_ready_block(&p.st, &p.o, p.app, no, NULL); /* already blocked: nothing */
		assert_false(WRITABLE(p.app));
		/* credits back: the waker claims (once) and drains */
		assert_int_equal(rsk_ready_claim_tx(&p.st), 1);
		assert_int_equal(rsk_ready_claim_tx(&p.st), 0);
		assert_false(p.st.tx & RSK_TX_BLOCKED);
		rsk_ready_drain_fill(&p.st, p.ctl);
		assert_int_equal(p.st.unblocked, (uint32_t)round + 1);
		assert_int_equal(queued(p.ctl), 0);
		assert_true(WRITABLE(p.app));
	}
	/* nothing blocked: the waker has nothing to claim */
	assert_int_equal(rsk_ready_claim_tx(&p.st), 0);
	rp_close(&p);
}

static void test_block_self_open_reuses_fill(void **state)
{
	struct opener w = {0};
	struct rp p;
	int fill;

	(void)state;
	rp_open(&p);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	fill = queued(p.ctl);
	assert_true(fill > 0);
	/* credits came back before the waker saw BLOCKED: the owner opens itself, the fill
	 * stays where it is, and the waker finds nothing to do */
	rsk_ready_open(&p.st, &p.o, p.app);
	assert_true(WRITABLE(p.app));
	assert_false(p.st.tx & RSK_TX_BLOCKED);
	assert_int_equal(queued(p.ctl), fill);
	assert_int_equal(rsk_ready_claim_tx(&p.st), 0);
	/* the next block uses the same fill: no second one */
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	assert_false(WRITABLE(p.app));
	assert_int_equal(queued(p.ctl), fill);
	rsk_ready_open(&p.st, &p.o, p.app);
	/* credits came back between the block and its re-check: taken back at once */
	rsk_ready_block(&p.st, &p.o, p.app, writable_once, &w);
	assert_int_equal(w.calls, 1);
	assert_true(WRITABLE(p.app));
	assert_false(p.st.tx & RSK_TX_BLOCKED);
	assert_int_equal(queued(p.ctl), fill);
	/* open with nothing blocked changes nothing */
	rsk_ready_open(&p.st, &p.o, p.app);
	assert_true(WRITABLE(p.app));
	/* after a waker's drain the next block makes a new fill */
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	assert_int_equal(rsk_ready_claim_tx(&p.st), 1);
	rsk_ready_drain_fill(&p.st, p.ctl);
	assert_int_equal(queued(p.ctl), 0);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	assert_int_equal(queued(p.ctl), fill);
	assert_false(WRITABLE(p.app));
	rp_close(&p);
}

/* A waker between its claim and its drain: the owner's next block waits for the drain, or
 * the drain would take the new fill too (EPOLLOUT while BLOCKED, and no later edge). */
struct drainer {
	struct rp *p;
	int delay_ms;
};

static void *drain_later(void *arg)
{
	struct drainer *d = arg;

	unit_sleep_ms(d->delay_ms);
	rsk_ready_drain_fill(&d->p->st, d->p->ctl);
	return NULL;
}

static void block_during_drain(int delay_ms)
{
	struct drainer d;
	struct rp p;
	pthread_t t;

	rp_open(&p);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	assert_int_equal(rsk_ready_claim_tx(&p.st), 1);
	d = (struct drainer){&p, delay_ms};
	assert_int_equal(pthread_create(&t, NULL, drain_later, &d), 0);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL); /* out of credits again at once */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(p.st.tx & RSK_TX_BLOCKED);
	assert_false(WRITABLE(p.app)); /* the new fill survived the old drain */
	assert_true(queued(p.ctl) > 0);
	rp_close(&p);
}

static void test_block_waits_for_drain(void **state)
{
	(void)state;
	block_during_drain(1); /* a waker preempted for a moment */
}

/*
 * rsk_ready_settle waits for the waker's drain bounded by time, not by a spin count: a waker
 * preempted for 50 ms (two shared cores) must not drain the owner's new fill, or the app end
 * would show EPOLLOUT while BLOCKED.
 */
static void test_block_waits_for_slow_drain(void **state)
{
	(void)state;
	block_during_drain(50);
}

/* ---- permanent states ---- */

static void test_eof(void **state)
{
	struct rp p;
	char c;

	(void)state;
	rp_open(&p);
	rsk_ready_eof(p.ctl);
	assert_int_equal(revents(p.app, POLLIN | POLLRDHUP | POLLOUT), POLLIN | POLLRDHUP | POLLOUT);
	assert_int_equal(recv(p.app, &c, 1, MSG_DONTWAIT), 0);
	/* lowering cannot undo it */
	assert_int_equal(rsk_ready_lower(&p.st, &p.o, p.app, no, NULL), 1);
	assert_int_equal(revents(p.app, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
	assert_false(revents(p.app, POLLIN) & POLLHUP);
	/* the app end may still write (half-close): the ctl end reads it */
	assert_int_equal(send(p.app, "w", 1, MSG_NOSIGNAL), 1);
	assert_int_equal(recv(p.ctl, &c, 1, 0), 1);
	rp_close(&p);
}

static void test_shut(void **state)
{
	struct rp p;
	short r;

	(void)state;
	/* the owner's own EOF: readable and RDHUP for good, still writable */
	rp_open(&p);
	rsk_ready_shut(p.app, SHUT_RD);
	assert_int_equal(revents(p.app, POLLIN | POLLRDHUP | POLLOUT), POLLIN | POLLRDHUP | POLLOUT);
	rp_close(&p);
	/* hang-up: readable, HUP, RDHUP, and writable (a write reports the error) */
	rp_open(&p);
	rsk_ready_shut(p.app, SHUT_RDWR);
	r = revents(p.app, POLLIN | POLLOUT | POLLRDHUP);
	assert_int_equal(r, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	assert_int_equal(send(p.app, "w", 1, MSG_NOSIGNAL | MSG_DONTWAIT), -1);
	assert_int_equal(errno, EPIPE);
	rp_close(&p);
	/* the waker went while we were blocked: HUP, and the fill went with its queue */
	rp_open(&p);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	rp_close_fd(&p.ctl);
	r = revents(p.app, POLLIN | POLLOUT | POLLRDHUP);
	assert_true(r & POLLHUP);
	assert_true(r & POLLOUT);
	rp_close(&p);
	/* the waker went (its ctl end closed): the same HUP */
	rp_open(&p);
	rp_close_fd(&p.ctl);
	assert_true(revents(p.app, POLLIN) & POLLHUP);
	assert_int_equal(send(p.app, "w", 1, MSG_NOSIGNAL | MSG_DONTWAIT), -1);
	assert_int_equal(errno, EPIPE);
	rp_close(&p);
}

/*
 * A stream that failed while the app end was blocked: conn.c shows it with
 * rsk_ready_shut(SHUT_RDWR). A TCP socket after a reset or shutdown reports POLLOUT too (the
 * write then fails with the error): a program that waits for POLLOUT alone with select()
 * must learn of the error.
 */
static void test_shut_while_blocked(void **state)
{
	struct rp p;
	short r;

	(void)state;
	rp_open(&p);
	rsk_ready_block(&p.st, &p.o, p.app, no, NULL);
	assert_false(WRITABLE(p.app));
	rsk_ready_shut(p.app, SHUT_RDWR);
	r = revents(p.app, POLLIN | POLLOUT | POLLRDHUP);
	assert_true(r & POLLHUP);
	assert_true(r & POLLOUT);
	rp_close(&p);
}

/* ---- flush ---- */

static void test_flush(void **state)
{
	static const char big[16384];
	struct rp p;
	int i;

	(void)state;
	rp_open(&p);
	for (i = 0; i < 10; i++)
		assert_int_equal(send(p.ctl, big, sizeof(big), MSG_DONTWAIT), (ssize_t)sizeof(big));
	assert_int_equal(queued(p.app), 10 * (int)sizeof(big));
	rsk_ready_flush(p.app);
	assert_int_equal(queued(p.app), 0);
	rsk_ready_flush(p.app); /* nothing there: returns at once, never blocks */
	rp_close(&p);
}

/* ---- after exec ---- */

/* A unix socket bound to the abstract name @name. */
static int bound_unix(const char *name)
{
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(un.sun_path + 1, name, n);
	assert_int_equal(bind(fd, (struct sockaddr *)&un,
			      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)), 0);
	return fd;
}

static ino_t ino(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

static void test_sweep_stale(void **state)
{
	struct rp a, b;
	ino_t a_ino, b_ino, ctl_ino, other_ino, named_ino;
	int sv[2], named;
	char c;

	(void)state;
	rp_open(&a);
	rp_open(&b);
	a_ino = ino(a.app);
	b_ino = ino(b.app);
	ctl_ino = ino(a.ctl);
	(void)wake(&a, 0); /* a token the new program must never read */
	/* inherited across exec, so not close-on-exec: the sweep keeps the flag as it was */
	assert_int_equal(fcntl(b.app, F_SETFD, 0), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	other_ino = ino(sv[0]);
	named = bound_unix("rsk1/l/not-an-app-end");
	named_ino = ino(named);

	assert_int_equal(rsk_ready_sweep_stale(), 2);

	/* our app ends: same numbers, new sockets whose peer is gone */
	assert_true(ino(a.app) != a_ino);
	assert_true(ino(b.app) != b_ino);
	assert_int_equal(recv(a.app, &c, 1, MSG_DONTWAIT), 0);
	assert_int_equal(recv(b.app, &c, 1, MSG_DONTWAIT), 0);
	assert_int_equal(send(a.app, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT), -1);
	assert_int_equal(errno, EPIPE);
	assert_true(fcntl(a.app, F_GETFD) & FD_CLOEXEC);
	assert_false(fcntl(b.app, F_GETFD) & FD_CLOEXEC);
	/* everything else is untouched: ctl ends, another pair, another abstract name */
	assert_int_equal(ino(a.ctl), ctl_ino);
	assert_int_equal(ino(sv[0]), other_ino);
	assert_int_equal(ino(named), named_ino);
	assert_int_equal(send(sv[0], "y", 1, 0), 1);
	assert_int_equal(recv(sv[1], &c, 1, 0), 1);
	assert_int_equal(c, 'y');
	/* a second sweep finds nothing: the replacements are not app ends */
	assert_int_equal(rsk_ready_sweep_stale(), 0);
	close(named);
	close(sv[0]);
	close(sv[1]);
	rp_close(&a);
	rp_close(&b);
}

#define T(f) cmocka_unit_test_teardown(f, pairs_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_pair),
		T(test_claim_show_and_edges),
		T(test_lazy_owner_no_edges),
		T(test_lazy_sleeper_one_edge),
		T(test_sleeper_waker_every_order),
		T(test_trim_keeps),
		T(test_edge_bound_counts_drops),
		T(test_failed_token_is_dropped),
		T(test_failed_kick_is_claimed_again),
		T(test_unclaim_after_reader_consumed),
		T(test_lower_takes_exactly_its_tokens),
		T(test_lower_waits_for_token_on_its_way),
		T(test_lower_late_token),
		T(test_lower_at_eof_does_not_wait),
		T(test_lower_hostile_counts),
		T(test_collect),
		T(test_block_and_waker_drain),
		T(test_block_self_open_reuses_fill),
		T(test_block_waits_for_drain),
		T(test_eof),
		T(test_shut),
		T(test_flush),
		T(test_sweep_stale),
		T(test_pair_ctl_nonblocking),
		T(test_lower_later_unclaim_keeps_old_token),
		T(test_block_waits_for_slow_drain),
		T(test_shut_while_blocked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
