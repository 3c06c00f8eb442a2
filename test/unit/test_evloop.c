/*
 * Unit tests for core/base/evloop (the per-process event-loop thread): delivery to the right
 * callback, level/edge/one-shot registration, the guarantee that an unwatched watch's callback
 * never runs again (also for an event already harvested, and for a slot recycled with the
 * same fd and arg: a stale close event must not reset a new connection), unwatch waiting for
 * a running callback, deferred work, the tick, calls from callbacks, many watches, fork (and
 * a fork through the fork gate never landing inside a round of the loop), the settle
 * request (one wake for many, never before its window),
 * rsk_evloop_start() with nothing watched (the tick alone needs the thread), and
 * rsk_evloop_run_async (asked from a signal handler while a callback holds the loop's lock).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/evloop.h"
#include "base/thread.h"
#include "unit.h"

/* Long enough for the loop thread to have reacted to a ready fd, even under ASan. */
#define QUIET_MS 40
#define WAIT_MS 2000

/* One pipe under watch, and what its callback saw. The callback never asserts (it runs on
 * the loop thread); it records, and the test checks. */
struct pw {
	int rfd, wfd;
	rsk_watch_t h;
	int calls;
	uint32_t events;
	int on_thread;
	int drain;         /* read what is there (level-triggered watches stop firing) */
	int unwatch_self;  /* unwatch h on the first call */
	int drain_after;   /* with drain == 0: start draining at this call (0: never) */
};

/*
 * Every pipe comes from this arena, and each test's teardown unwatches and closes what it
 * took: a test that fails half-way leaves no watch whose callback could run into memory the
 * next test reuses.
 */
#define ARENA 5400
static struct pw arena[ARENA];
static int arena_used;

static struct pw *pw_new(void)
{
	struct pw *p;
	int fds[2];

	assert_true(arena_used < ARENA);
	p = &arena[arena_used++];
	memset(p, 0, sizeof(*p));
	p->rfd = p->wfd = -1;
	assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
	p->rfd = fds[0];
	p->wfd = fds[1];
	return p;
}

static void pw_close(struct pw *p)
{
	rsk_evloop_unwatch(p->h);
	p->h = 0;
	if (p->rfd >= 0)
		close(p->rfd);
	if (p->wfd >= 0)
		close(p->wfd);
	p->rfd = p->wfd = -1;
}

static int arena_teardown(void **state)
{
	int i;

	(void)state;
	for (i = 0; i < arena_used; i++)
		pw_close(&arena[i]);
	arena_used = 0;
	return 0;
}

static void pw_poke(struct pw *p)
{
	assert_int_equal(write(p->wfd, "x", 1), 1);
}

static void pw_drain(int fd)
{
	char buf[256];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

static void on_pw(void *arg, uint32_t events)
{
	struct pw *p = arg;
	int n;

	p->events = events;
	p->on_thread = rsk_evloop_on_thread();
	n = __atomic_add_fetch(&p->calls, 1, __ATOMIC_SEQ_CST);
	if (p->drain || (p->drain_after > 0 && n >= p->drain_after))
		pw_drain(p->rfd);
	if (p->unwatch_self && n == 1)
		rsk_evloop_unwatch(p->h);
}

static void pw_watch(struct pw *p, uint32_t events)
{
	assert_int_equal(rsk_evloop_watch(p->rfd, events, on_pw, p, &p->h), 0);
	assert_true(p->h != 0);
}

/* A second callback, to tell which function an event reached. */
static int other_fn_calls;

static void on_other(void *arg, uint32_t events)
{
	(void)events;
	pw_drain(((struct pw *)arg)->rfd);
	UNIT_INC(&other_fn_calls);
}

/* ---- delivery ---- */

static void test_delivers_to_right_callback(void **state)
{
	struct pw *a = pw_new(), *b = pw_new(), *c = pw_new(), *out = pw_new(), *hup = pw_new();
	rsk_watch_t bad = 0;

	(void)state;
	a->drain = b->drain = 1;
	other_fn_calls = 0;
	pw_watch(a, EPOLLIN);
	pw_watch(b, EPOLLIN);
	assert_int_equal(rsk_evloop_watch(c->rfd, EPOLLIN, on_other, c, &c->h), 0);
	assert_true(a->h != b->h && b->h != c->h && a->h != c->h);

	pw_poke(b);
	assert_true(UNIT_WAIT(UNIT_LOAD(&b->calls) == 1, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&a->calls), 0);
	assert_int_equal(UNIT_LOAD(&b->calls), 1);
	assert_int_equal(UNIT_LOAD(&other_fn_calls), 0);
	assert_true(b->events & EPOLLIN);
	assert_int_equal(b->on_thread, 1);

	pw_poke(c);
	assert_true(UNIT_WAIT(UNIT_LOAD(&other_fn_calls) == 1, WAIT_MS));
	pw_poke(a);
	assert_true(UNIT_WAIT(UNIT_LOAD(&a->calls) == 1, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&b->calls), 1);
	assert_int_equal(UNIT_LOAD(&other_fn_calls), 1);

	/* The events word is epoll's: a pipe's write end reports EPOLLOUT, a closed writer HUP. */
	assert_int_equal(rsk_evloop_watch(out->wfd, EPOLLOUT | EPOLLONESHOT, on_pw, out, &out->h),
			 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&out->calls) >= 1, WAIT_MS));
	assert_true(out->events & EPOLLOUT);
	pw_watch(hup, EPOLLIN | EPOLLONESHOT);
	close(hup->wfd);
	hup->wfd = -1;
	assert_true(UNIT_WAIT(UNIT_LOAD(&hup->calls) >= 1, WAIT_MS));
	assert_true(hup->events & EPOLLHUP);

	/* A failed watch reports -errno and gives no handle. */
	assert_int_equal(rsk_evloop_watch(-1, EPOLLIN, on_pw, a, &bad), -EBADF);
	assert_int_equal(rsk_evloop_watch(a->rfd, EPOLLIN, on_pw, a, &bad), -EEXIST);
	assert_true(bad == 0);
}

static void test_stale_handles_ignored(void **state)
{
	struct pw *a = pw_new(), *b = pw_new();
	rsk_watch_t old;

	(void)state;
	b->drain = 1;
	pw_watch(a, EPOLLIN);
	old = a->h;
	rsk_evloop_unwatch(old);
	a->h = 0;
	rsk_evloop_unwatch(0);
	/* The next watch may reuse the freed slot; the old handle must not name it. */
	pw_watch(b, EPOLLIN);
	assert_true(b->h != old);
	rsk_evloop_unwatch(old);
	rsk_evloop_unwatch(((uint64_t)0xdeadbeef << 32) | 0xfffffff); /* never issued */
	pw_poke(b);
	assert_true(UNIT_WAIT(UNIT_LOAD(&b->calls) == 1, WAIT_MS));
	pw_poke(a);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&a->calls), 0);
}

/* ---- virtual watches (one shared fd, events handed out by its owner) ---- */

static struct {
	rsk_watch_t v[2];
	int calls[2], fired[2], on_thread;
	int target;
} vw;

static void on_virtual(void *arg, uint32_t events)
{
	int i = (int)(intptr_t)arg;

	(void)events;
	/* on_thread first: the test reads it as soon as it sees calls move */
	if (rsk_evloop_on_thread())
		UNIT_INC(&vw.on_thread);
	UNIT_INC(&vw.calls[i]);
}

/* The shared fd's own callback: what verbs' channel callbacks do with their tokens. */
static void on_shared(void *arg, uint32_t events)
{
	int t = UNIT_LOAD(&vw.target);

	(void)events;
	pw_drain(((struct pw *)arg)->rfd);
	if (rsk_evloop_fire(vw.v[t], EPOLLIN))
		UNIT_INC(&vw.fired[t]);
}

static void test_virtual_watch(void **state)
{
	struct pw *shared = pw_new();
	rsk_watch_t old, fresh;

	(void)state;
	memset(&vw, 0, sizeof(vw));
	assert_int_equal(rsk_evloop_watch_virtual(on_virtual, (void *)0, &vw.v[0]), 0);
	assert_int_equal(rsk_evloop_watch_virtual(on_virtual, (void *)1, &vw.v[1]), 0);
	assert_true(vw.v[0] != 0 && vw.v[1] != 0 && vw.v[0] != vw.v[1]);
	assert_int_equal(rsk_evloop_watch(shared->rfd, EPOLLIN, on_shared, shared, &shared->h), 0);
	__atomic_store_n(&vw.target, 1, __ATOMIC_SEQ_CST);
	pw_poke(shared);
	/* fired last: on_shared counts it once rsk_evloop_fire has returned, after on_virtual
	 * counted its call (waiting for calls[1] could read fired[1] before it moved) */
	assert_true(UNIT_WAIT(UNIT_LOAD(&vw.fired[1]) == 1, WAIT_MS));
	assert_int_equal(UNIT_LOAD(&vw.calls[1]), 1);
	assert_int_equal(UNIT_LOAD(&vw.calls[0]), 0);
	assert_int_equal(UNIT_LOAD(&vw.on_thread), 1);
	/* removed, and its slot reused: the old handle reaches nobody */
	old = vw.v[1];
	rsk_evloop_unwatch(old);
	assert_int_equal(rsk_evloop_watch_virtual(on_virtual, (void *)0, &fresh), 0);
	assert_true(fresh != old && (uint32_t)fresh == (uint32_t)old);
	pw_poke(shared); /* fires the old handle */
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&vw.calls[1]), 1);
	assert_int_equal(UNIT_LOAD(&vw.calls[0]), 0);
	assert_int_equal(UNIT_LOAD(&vw.fired[1]), 1);
	/* fired from outside a callback (deferred work, another thread): under the loop's lock */
	assert_int_equal(rsk_evloop_fire(vw.v[0], 0), 1);
	assert_int_equal(UNIT_LOAD(&vw.calls[0]), 1);
	assert_int_equal(rsk_evloop_fire(old, 0), 0);
	assert_int_equal(rsk_evloop_fire(0, 0), 0);
	/* an fd watch's handle is not fired (its events come from epoll) */
	assert_int_equal(rsk_evloop_fire(shared->h, 0), 0);
	rsk_evloop_unwatch(vw.v[0]);
	rsk_evloop_unwatch(fresh);
	rsk_evloop_unwatch(shared->h);
	shared->h = 0;
}

static void test_level_triggered_repeats(void **state)
{
	struct pw *p = pw_new();

	(void)state;
	p->drain_after = 3; /* readable until the third call drains it */
	pw_watch(p, EPOLLIN);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) >= 3, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&p->calls), 3);
}

static void test_edge_triggered(void **state)
{
	struct pw *p = pw_new(); /* never drained: only new data makes a new edge */

	(void)state;
	pw_watch(p, EPOLLIN | EPOLLET);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) >= 1, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&p->calls), 1);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) >= 2, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&p->calls), 2);
}

static void test_oneshot(void **state)
{
	struct pw *p = pw_new(); /* not drained: level-triggered, it would fire forever */

	(void)state;
	pw_watch(p, EPOLLIN | EPOLLONESHOT);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) >= 1, WAIT_MS));
	pw_poke(p);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&p->calls), 1);
	/* Unwatch takes the (disabled) registration out of epoll: the fd can be watched again
	 * (EEXIST otherwise) and, still readable, fires at once. */
	rsk_evloop_unwatch(p->h);
	p->drain = 1;
	pw_watch(p, EPOLLIN | EPOLLONESHOT);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) == 2, WAIT_MS));
}

/* ---- an event harvested for a watch that goes away in the same round ---- */

/*
 * The gate holds the loop inside its callback while the test makes both pipes of the pair
 * readable, so the next epoll_wait returns both events at once. Whichever callback runs
 * first then removes the other watch (and, with recycle, watches a new pipe at the same fd
 * number with the same callback and arg, which takes the freed slot): the other event of that
 * round is stale and must be dropped. A deferred function marks the end of the round.
 */
struct same_round {
	struct pw *gate, *pair[2];
	int gate_in, gate_go;
	struct pw *first, *other; /* the callback that ran first, the watch it removed */
	int recycle;
	int replaced;    /* the other watch was removed (and replaced) */
	rsk_watch_t old; /* the removed watch's handle */
	int rc;          /* of the replacement watch */
	int round_done;
	int stale_calls; /* calls for the removed watch's arg within that round */
};

static struct same_round sr;

static void on_gate(void *arg, uint32_t events)
{
	(void)arg;
	(void)events;
	UNIT_INC(&sr.gate_in);
	(void)UNIT_WAIT(UNIT_LOAD(&sr.gate_go), WAIT_MS);
	pw_drain(sr.gate->rfd);
}

static void on_round_done(void *arg)
{
	(void)arg;
	UNIT_INC(&sr.round_done);
}

static void on_pair(void *arg, uint32_t events)
{
	struct pw *me = arg, *other;
	int fds[2];

	(void)events;
	UNIT_INC(&me->calls);
	pw_drain(me->rfd);
	if (me == sr.other) {
		/* The replacement's own fd is written to only after the round. */
		if (!UNIT_LOAD(&sr.round_done))
			UNIT_INC(&sr.stale_calls);
		return;
	}
	if (sr.first != NULL)
		return;
	sr.first = me;
	other = sr.pair[me == sr.pair[0]];
	sr.old = other->h;
	rsk_evloop_unwatch(other->h);
	other->h = 0;
	if (sr.recycle) {
		/* Same fd number, same fn, same arg: only the handle can tell them apart. */
		if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
			dup2(fds[0], other->rfd);
			close(fds[0]);
			close(other->wfd);
			other->wfd = fds[1];
			sr.rc = rsk_evloop_watch(other->rfd, EPOLLIN, on_pair, other, &other->h);
		} else {
			sr.rc = -errno;
		}
	}
	__atomic_store_n(&sr.other, other, __ATOMIC_SEQ_CST);
	(void)rsk_evloop_defer(on_round_done, NULL);
}

static void same_round_run(int recycle)
{
	int i;

	memset(&sr, 0, sizeof(sr));
	sr.recycle = recycle;
	sr.gate = pw_new();
	sr.pair[0] = pw_new();
	sr.pair[1] = pw_new();
	assert_int_equal(rsk_evloop_watch(sr.gate->rfd, EPOLLIN | EPOLLONESHOT, on_gate, NULL,
					  &sr.gate->h), 0);
	for (i = 0; i < 2; i++)
		assert_int_equal(rsk_evloop_watch(sr.pair[i]->rfd, EPOLLIN, on_pair, sr.pair[i],
						  &sr.pair[i]->h), 0);
	pw_poke(sr.gate);
	assert_true(UNIT_WAIT(UNIT_LOAD(&sr.gate_in) == 1, WAIT_MS));
	pw_poke(sr.pair[0]);
	pw_poke(sr.pair[1]);
	__atomic_store_n(&sr.gate_go, 1, __ATOMIC_SEQ_CST);
	assert_true(UNIT_WAIT(UNIT_LOAD(&sr.round_done) == 1, WAIT_MS));
	assert_non_null(sr.first);
	assert_ptr_equal(sr.other, sr.pair[sr.first == sr.pair[0]]);
	assert_int_equal(UNIT_LOAD(&sr.first->calls), 1);
}

static void test_unwatch_drops_queued_event(void **state)
{
	(void)state;
	same_round_run(0);
	/* Its event was harvested with the first one's, yet its callback never ran. */
	assert_int_equal(UNIT_LOAD(&sr.stale_calls), 0);
	assert_int_equal(UNIT_LOAD(&sr.other->calls), 0);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&sr.other->calls), 0);
}

static void test_stale_event_never_reaches_recycled_slot(void **state)
{
	struct pw *other;

	(void)state;
	same_round_run(1);
	other = sr.other;
	assert_int_equal(sr.rc, 0);
	/* The scenario really is a recycled slot: a new handle, the same slot index (the
	 * handle's low half, base/gentab.c), fd and arg. */
	assert_true(other->h != 0 && other->h != sr.old);
	assert_int_equal((uint32_t)other->h, (uint32_t)sr.old);
	assert_int_equal(UNIT_LOAD(&sr.stale_calls), 0);
	assert_int_equal(UNIT_LOAD(&other->calls), 0);
	/* The replacement is live: its own events do arrive. */
	pw_poke(other);
	assert_true(UNIT_WAIT(UNIT_LOAD(&other->calls) == 1, WAIT_MS));
	assert_int_equal(UNIT_LOAD(&sr.stale_calls), 0);
}

/* ---- unwatch and a running callback ---- */

static int slow_started, slow_finished;
static int64_t slow_until; /* on_slow returns at this time (ms), once the test set it */

static void on_slow(void *arg, uint32_t events)
{
	int64_t until, end = rsk_now_ms() + WAIT_MS;

	(void)events;
	pw_drain(((struct pw *)arg)->rfd);
	UNIT_INC(&slow_started);
	/* 150 ms from the test's clock, not from this start: a test thread slowed down after
	 * it saw slow_started (a loaded host) found a callback of a fixed 150 ms already over */
	while (((until = __atomic_load_n(&slow_until, __ATOMIC_SEQ_CST)) == 0 ||
		rsk_now_ms() < until) && rsk_now_ms() < end)
		unit_sleep_ms(1);
	UNIT_INC(&slow_finished);
}

static void test_unwatch_waits_for_running_callback(void **state)
{
	struct pw *p = pw_new();
	int64_t t0;

	(void)state;
	slow_started = slow_finished = 0;
	__atomic_store_n(&slow_until, 0, __ATOMIC_SEQ_CST);
	assert_int_equal(rsk_evloop_watch(p->rfd, EPOLLIN, on_slow, p, &p->h), 0);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&slow_started) == 1, WAIT_MS));
	t0 = rsk_now_ms();
	__atomic_store_n(&slow_until, t0 + 150, __ATOMIC_SEQ_CST); /* it runs 150 ms from now */
	rsk_evloop_unwatch(p->h);
	/* Returned: the callback is over (the caller may now free what it uses). */
	assert_int_equal(UNIT_LOAD(&slow_finished), 1);
	assert_true(rsk_now_ms() - t0 >= 50);
	pw_poke(p);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&slow_started), 1);
}

static void test_unwatch_self_in_callback(void **state)
{
	struct pw *p = pw_new();

	(void)state;
	p->unwatch_self = 1; /* level-triggered and never drained: would fire forever */
	pw_watch(p, EPOLLIN);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) >= 1, WAIT_MS));
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&p->calls), 1);
}

/* ---- watch, unwatch and defer from inside a callback ---- */

#define NESTED 300 /* more than the table's first allocation: it grows inside a callback */

static struct {
	struct pw *trigger, *victim;
	struct pw *kids[NESTED];
	int watch_rc, defer_rc;
	int deferred, deferred_on_thread;
	int done;
} nest;

static void on_nested_deferred(void *arg)
{
	(void)arg;
	nest.deferred_on_thread = rsk_evloop_on_thread();
	UNIT_INC(&nest.deferred);
}

static void on_trigger(void *arg, uint32_t events)
{
	int i, rc = 0;

	(void)arg;
	(void)events;
	pw_drain(nest.trigger->rfd);
	for (i = 0; i < NESTED && rc == 0; i++) {
		nest.kids[i]->drain = 1;
		rc = rsk_evloop_watch(nest.kids[i]->rfd, EPOLLIN, on_pw, nest.kids[i],
				      &nest.kids[i]->h);
	}
	nest.watch_rc = rc;
	rsk_evloop_unwatch(nest.victim->h);
	nest.victim->h = 0;
	nest.defer_rc = rsk_evloop_defer(on_nested_deferred, NULL);
	UNIT_INC(&nest.done);
}

static int kids_fired(void)
{
	int i, n = 0;

	for (i = 0; i < NESTED; i++)
		n += UNIT_LOAD(&nest.kids[i]->calls) == 1;
	return n;
}

static void test_calls_from_callback(void **state)
{
	int i;

	(void)state;
	memset(&nest, 0, sizeof(nest));
	nest.trigger = pw_new();
	nest.victim = pw_new();
	for (i = 0; i < NESTED; i++) {
		nest.kids[i] = pw_new();
		pw_poke(nest.kids[i]); /* readable before it is watched */
	}
	assert_int_equal(rsk_evloop_watch(nest.trigger->rfd, EPOLLIN, on_trigger, NULL,
					  &nest.trigger->h), 0);
	pw_watch(nest.victim, EPOLLIN);
	pw_poke(nest.trigger);
	assert_true(UNIT_WAIT(UNIT_LOAD(&nest.done) == 1, WAIT_MS));
	assert_int_equal(nest.watch_rc, 0);
	assert_int_equal(nest.defer_rc, 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&nest.deferred) == 1, WAIT_MS));
	assert_int_equal(nest.deferred_on_thread, 1);
	assert_true(UNIT_WAIT(kids_fired() == NESTED, WAIT_MS));
	/* The victim was unwatched from the callback: its data goes unnoticed. */
	pw_poke(nest.victim);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&nest.victim->calls), 0);
	assert_int_equal(kids_fired(), NESTED);
}

/* ---- deferred work ---- */

static struct {
	struct pw *p;
	int cb_returned;    /* the callback that deferred has returned */
	int ran, order_ok, on_thread;
	int main_in_watch;  /* the test thread is about to call watch */
	int main_watched;   /* ... and that call returned */
	int lock_free;      /* the test thread's watch completed while the deferred fn ran */
	int own_rc;         /* watch/unwatch from the deferred fn itself */
} dc;

static void on_deferred(void *arg)
{
	rsk_watch_t h = 0;
	int fds[2];

	(void)arg;
	dc.order_ok = UNIT_LOAD(&dc.cb_returned);
	dc.on_thread = rsk_evloop_on_thread();
	/* If the loop's lock were held here, the test thread's watch could not finish. */
	__atomic_store_n(&dc.main_in_watch, 1, __ATOMIC_SEQ_CST);
	dc.lock_free = UNIT_WAIT(UNIT_LOAD(&dc.main_watched), 1000);
	dc.own_rc = -1;
	if (dc.lock_free && pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
		dc.own_rc = rsk_evloop_watch(fds[0], EPOLLIN, on_pw, NULL, &h);
		rsk_evloop_unwatch(h);
		close(fds[0]);
		close(fds[1]);
	}
	UNIT_INC(&dc.ran);
}

static void on_defer_cb(void *arg, uint32_t events)
{
	(void)events;
	pw_drain(((struct pw *)arg)->rfd);
	(void)rsk_evloop_defer(on_deferred, NULL);
	unit_sleep_ms(5); /* the deferred fn must not start before this returns */
	UNIT_INC(&dc.cb_returned);
}

static void test_defer_after_round_without_lock(void **state)
{
	struct pw *q = pw_new();

	(void)state;
	memset(&dc, 0, sizeof(dc));
	dc.p = pw_new();
	assert_int_equal(rsk_evloop_watch(dc.p->rfd, EPOLLIN, on_defer_cb, dc.p, &dc.p->h), 0);
	pw_poke(dc.p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&dc.main_in_watch), WAIT_MS));
	pw_watch(q, EPOLLIN);
	__atomic_store_n(&dc.main_watched, 1, __ATOMIC_SEQ_CST);
	assert_true(UNIT_WAIT(UNIT_LOAD(&dc.ran) == 1, WAIT_MS));
	assert_int_equal(dc.order_ok, 1);
	assert_int_equal(dc.on_thread, 1);
	assert_int_equal(dc.lock_free, 1);
	assert_int_equal(dc.own_rc, 0);
}

static int idle_deferred, idle_where;

static void on_idle_deferred(void *arg)
{
	(void)arg;
	if (!rsk_evloop_on_thread())
		idle_where = -1;
	/* The first one queues a second from outside any callback: it must run as well. */
	if (UNIT_LOAD(&idle_deferred) == 0 && rsk_evloop_defer(on_idle_deferred, NULL) < 0)
		idle_where = -2;
	UNIT_INC(&idle_deferred);
}

/* From another thread while the loop sleeps with nothing to do: it must still run. */
static void test_defer_from_other_thread(void **state)
{
	struct pw *p = pw_new();

	(void)state;
	pw_watch(p, EPOLLIN); /* the loop runs, idle */
	unit_sleep_ms(QUIET_MS);
	idle_deferred = idle_where = 0;
	assert_int_equal(rsk_evloop_defer(on_idle_deferred, NULL), 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&idle_deferred) == 2, WAIT_MS));
	assert_int_equal(idle_where, 0);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&idle_deferred), 2);
}

/* ---- the tick ---- */

static int tick_calls, tick_taken, tick_again, tick_off_thread;
static int64_t tick_first_us; /* when the first request was taken */

static void on_tick(void)
{
	UNIT_INC(&tick_calls);
	if (!rsk_evloop_on_thread())
		UNIT_INC(&tick_off_thread);
	if (rsk_evloop_take_tick()) {
		/* the time first, then the count: the test reads the time as soon as it sees
		 * tick_taken move (this thread alone writes both) */
		if (UNIT_LOAD(&tick_taken) == 0)
			__atomic_store_n(&tick_first_us, rsk_now_us(), __ATOMIC_SEQ_CST);
		UNIT_INC(&tick_taken);
		if (UNIT_LOAD(&tick_again) > 0) {
			__atomic_sub_fetch(&tick_again, 1, __ATOMIC_SEQ_CST);
			rsk_evloop_request_tick();
		}
	}
}

static int tick_teardown(void **state)
{
	rsk_evloop_set_tick(NULL);
	(void)rsk_evloop_take_tick();
	return arena_teardown(state);
}

static void test_tick(void **state)
{
	struct pw *p = pw_new();
	int64_t t0, lat;

	(void)state;
	/* the loop reads it in on_pw: set before the watch, not after (nothing is readable
	 * until the event round below pokes the pipe) */
	p->drain = 1;
	pw_watch(p, EPOLLIN); /* the loop runs */
	assert_int_equal(rsk_evloop_take_tick(), 0); /* nothing requested yet */
	rsk_evloop_set_tick(on_tick);
	unit_sleep_ms(QUIET_MS);
	/* atomic: the loop calls on_tick on every pass from here on */
	__atomic_store_n(&tick_calls, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&tick_taken, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&tick_again, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&tick_off_thread, 0, __ATOMIC_SEQ_CST);

	/* Requested while the loop sleeps untimed: it wakes and ticks promptly. */
	t0 = rsk_now_us();
	rsk_evloop_request_tick();
	assert_true(UNIT_WAIT(UNIT_LOAD(&tick_taken) == 1, WAIT_MS));
	lat = UNIT_LOAD(&tick_first_us) - t0;
	print_message("tick latency %lld us\n", (long long)lat);
	assert_true(lat < 50000);

	/* Taken and not requested again: the loop goes back to its untimed sleep. */
	unit_sleep_ms(10);
	__atomic_store_n(&tick_calls, 0, __ATOMIC_SEQ_CST);
	unit_sleep_ms(100);
	assert_int_equal(UNIT_LOAD(&tick_calls), 0);
	assert_int_equal(rsk_evloop_take_tick(), 0);

	/* A tick that requests again is called about every millisecond with no event at all. */
	__atomic_store_n(&tick_again, 20, __ATOMIC_SEQ_CST);
	t0 = rsk_now_ms();
	rsk_evloop_request_tick();
	assert_true(UNIT_WAIT(UNIT_LOAD(&tick_taken) == 22, WAIT_MS));
	assert_true(rsk_now_ms() - t0 < 1000);
	unit_sleep_ms(10);
	__atomic_store_n(&tick_calls, 0, __ATOMIC_SEQ_CST);
	unit_sleep_ms(50);
	assert_int_equal(UNIT_LOAD(&tick_calls), 0);

	/* An event round calls the tick function too; with no request it takes nothing. */
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) == 1, WAIT_MS));
	assert_true(UNIT_WAIT(UNIT_LOAD(&tick_calls) >= 1, WAIT_MS));
	assert_int_equal(UNIT_LOAD(&tick_taken), 22);
	assert_int_equal(UNIT_LOAD(&tick_off_thread), 0);

	/* take_tick clears a request made with no tick function to take it. */
	rsk_evloop_set_tick(NULL);
	rsk_evloop_request_tick();
	assert_int_equal(rsk_evloop_take_tick(), 1);
	assert_int_equal(rsk_evloop_take_tick(), 0);
}

/* ---- the settle request: credits a reader owes ---- */

static int settle_rounds, settle_taken;
static int64_t settle_first_us; /* when the first due request was taken */

static void on_settle_tick(void)
{
	UNIT_INC(&settle_rounds);
	if (!rsk_evloop_take_due())
		return;
	/* the time first, then the count: the test reads the time as soon as it sees
	 * settle_taken move (this thread alone writes both; counted first, it read 0 there
	 * once, under TSan on a loaded host: "settled -26406984218 us after the request") */
	if (UNIT_LOAD(&settle_taken) == 0)
		__atomic_store_n(&settle_first_us, rsk_now_us(), __ATOMIC_SEQ_CST);
	UNIT_INC(&settle_taken);
}

/* Until the loop has run no round for QUIET_MS (bounded): the settle windows that requests
 * opened are over and it sleeps untimed (a fixed QUIET_MS is no bound on a loaded host). */
static void settle_quiet(void)
{
	int64_t end = rsk_now_ms() + WAIT_MS;
	int before;

	do {
		before = UNIT_LOAD(&settle_rounds);
		unit_sleep_ms(QUIET_MS);
	} while (UNIT_LOAD(&settle_rounds) != before && rsk_now_ms() < end);
}

static void sleep_us(long us)
{
	struct timespec ts = {0, us * 1000};

	while (nanosleep(&ts, &ts) < 0)
		;
}

/*
 * rsk_evloop_request_settle, as a reader that read until EAGAIN asks it (io.c): it must not
 * cost a system call and a wake of the loop per request, nor let the loop settle before the
 * application's answer could carry the credits.
 * - a request/response server (request, then at once the answer and a wait that takes the
 *   request): 100 requests, ~100 us apart, starting with the loop in its untimed sleep, wake
 *   it (eventfd write) at most a few times, not once per request (was: every request);
 * - a reader that never waits again (killed after its read): settled by the loop, but no
 *   earlier than RSK_EV_TICK_MS (1 ms) after the request (was: at once) and within a bound;
 * - then, with no request, the loop goes back to its untimed sleep: no round at all.
 */
static void test_settle(void **state)
{
	struct pw *p = pw_new();
	uint64_t k0, kicks;
	int64_t t0, lat;
	int i;

	(void)state;
	p->drain = 1;
	pw_watch(p, EPOLLIN); /* the loop runs */
	rsk_evloop_set_tick(on_settle_tick);
	(void)rsk_evloop_take_tick();
	settle_quiet(); /* nothing requested: the loop sleeps untimed */
	__atomic_store_n(&settle_taken, 0, __ATOMIC_SEQ_CST);

	k0 = rsk_evloop_kicks();
	for (i = 0; i < 100; i++) {
		rsk_evloop_request_settle(); /* the read found nothing more */
		(void)rsk_evloop_take_tick(); /* answered, then waits in the library */
		sleep_us(100);
	}
	kicks = rsk_evloop_kicks() - k0;
	print_message("100 settle requests: %llu wakes, %d settled by the loop\n",
		      (unsigned long long)kicks, UNIT_LOAD(&settle_taken));
	assert_true(kicks >= 1); /* the first found the loop asleep */
	/* Ideally 1; a loaded host that stretches a 100 us gap past a window adds one each time.
	 * An immediate tick per request woke it 95-100 times. */
	assert_true(kicks <= 20);

	settle_quiet(); /* the windows end, the loop sleeps untimed again */
	__atomic_store_n(&settle_taken, 0, __ATOMIC_SEQ_CST);
	k0 = rsk_evloop_kicks();
	t0 = rsk_now_us();
	rsk_evloop_request_settle(); /* and no wait follows */
	assert_true(UNIT_WAIT(UNIT_LOAD(&settle_taken) == 1, WAIT_MS));
	lat = __atomic_load_n(&settle_first_us, __ATOMIC_SEQ_CST) - t0;
	print_message("settled %lld us after the request\n", (long long)lat);
	assert_true(lat >= 1000);
	assert_true(lat < 500000);
	assert_int_equal(rsk_evloop_kicks() - k0, 1);

	unit_sleep_ms(10);
	__atomic_store_n(&settle_rounds, 0, __ATOMIC_SEQ_CST);
	unit_sleep_ms(50);
	assert_int_equal(UNIT_LOAD(&settle_rounds), 0);
	assert_int_equal(UNIT_LOAD(&settle_taken), 1);
}

/* ---- many watches ---- */

#define MANY 5000

static int sum_calls(struct pw **p, int n)
{
	int i, total = 0;

	for (i = 0; i < n; i++)
		total += UNIT_LOAD(&p[i]->calls);
	return total;
}

static void test_many_watches(void **state)
{
	static struct pw *p[MANY];
	struct rlimit rl;
	int i, n = MANY;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2 * MANY + 512 && rl.rlim_max > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 2 * MANY + 512
				      ? 2 * MANY + 512 : rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < 2 * MANY + 512)
		n = ((int)rl.rlim_cur - 512) / 2;
	if (n < 1000)
		skip(); /* an RLIMIT_NOFILE this low cannot hold the test */
	if (n < MANY)
		print_message("RLIMIT_NOFILE %llu: %d watches\n", (unsigned long long)rl.rlim_cur, n);
	for (i = 0; i < n; i++) {
		p[i] = pw_new();
		p[i]->drain = 1;
		pw_watch(p[i], EPOLLIN);
	}
	for (i = 0; i < n; i++)
		pw_poke(p[i]);
	assert_true(UNIT_WAIT(sum_calls(p, n) == n, 5000));
	/* Every event reached its own watch's callback and arg, exactly once. */
	for (i = 0; i < n; i++)
		assert_int_equal(UNIT_LOAD(&p[i]->calls), 1);
	for (i = 0; i < n; i++) {
		rsk_evloop_unwatch(p[i]->h);
		p[i]->h = 0;
		pw_poke(p[i]);
	}
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(sum_calls(p, n), n);
	/* The freed slots serve new watches. */
	for (i = 0; i < n; i++)
		pw_watch(p[i], EPOLLIN);
	assert_true(UNIT_WAIT(sum_calls(p, n) == 2 * n, 5000));
	for (i = 0; i < n; i++)
		assert_int_equal(UNIT_LOAD(&p[i]->calls), 2);
}

/* ---- which thread ---- */

static void *ask_on_thread(void *arg)
{
	*(int *)arg = rsk_evloop_on_thread();
	return NULL;
}

static void test_on_thread(void **state)
{
	struct pw *p = pw_new();
	pthread_t t;
	int other = -1;

	(void)state;
	p->drain = 1;
	pw_watch(p, EPOLLIN);
	assert_int_equal(rsk_evloop_on_thread(), 0);
	assert_int_equal(pthread_create(&t, NULL, ask_on_thread, &other), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(other, 0);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&p->calls) == 1, WAIT_MS));
	assert_int_equal(p->on_thread, 1);
}

/* ---- fork ---- */

/* In the child: no cmocka (a failed assert would run the rest of the suite there). */
static int fork_child(void *arg)
{
	struct pw *parent = arg, mine = {.drain = 1};
	int fds[2];

	rsk_evloop_atfork_child();
	if (rsk_evloop_on_thread())
		return 10;
	/* The parent's handle is stale here: unwatching it touches nothing. */
	rsk_evloop_unwatch(parent->h);
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
		return 11;
	mine.rfd = fds[0];
	mine.wfd = fds[1];
	if (rsk_evloop_watch(mine.rfd, EPOLLIN, on_pw, &mine, &mine.h) != 0)
		return 12;
	if (write(mine.wfd, "c", 1) != 1)
		return 13;
	if (!UNIT_WAIT(UNIT_LOAD(&mine.calls) == 1, WAIT_MS))
		return 14; /* nobody in this process watches */
	if (mine.on_thread != 1)
		return 15;
	/* The parent's pipe is shared: this byte is the parent's loop's to see, not ours. */
	if (write(parent->wfd, "p", 1) != 1)
		return 16;
	unit_sleep_ms(QUIET_MS);
	if (UNIT_LOAD(&parent->calls) != 0)
		return 17;
	rsk_evloop_unwatch(mine.h);
	return 0;
}

static void test_atfork_child(void **state)
{
	struct pw *parent = pw_new();

	(void)state;
	parent->drain = 1;
	pw_watch(parent, EPOLLIN);
	assert_int_equal(unit_in_child(fork_child, parent, 5000), 0);
	/* The child's byte reached the parent's loop; the parent's loop still works. */
	assert_true(UNIT_WAIT(UNIT_LOAD(&parent->calls) == 1, WAIT_MS));
	pw_poke(parent);
	assert_true(UNIT_WAIT(UNIT_LOAD(&parent->calls) == 2, WAIT_MS));
}

/* ---- fork while the loop works ---- */

static int busy_in_round, busy_rounds, busy_stop;

/* A tick that works 1 ms per round and asks for the next: the loop is busy most of the time. */
static void on_busy_tick(void)
{
	if (!rsk_evloop_take_tick())
		return;
	__atomic_store_n(&busy_in_round, 1, __ATOMIC_SEQ_CST);
	free(malloc(256));
	unit_sleep_ms(1);
	__atomic_store_n(&busy_in_round, 0, __ATOMIC_SEQ_CST);
	UNIT_INC(&busy_rounds);
	if (!UNIT_LOAD(&busy_stop))
		rsk_evloop_request_tick();
}

/* The child's copy of the loop's state: a fork through the gate never lands in a round
 * (before the gate, one that landed while the loop was inside ASan's malloc hung). */
static int busy_child(void *arg)
{
	(void)arg;
	rsk_thread_fork_child();
	return UNIT_LOAD(&busy_in_round) ? 10 : 0;
}

static void test_fork_waits_for_round(void **state)
{
	int i, before;

	(void)state;
	__atomic_store_n(&busy_stop, 0, __ATOMIC_SEQ_CST);
	rsk_evloop_set_tick(on_busy_tick);
	assert_int_equal(rsk_evloop_start(), 0);
	rsk_evloop_request_tick();
	assert_true(UNIT_WAIT(UNIT_LOAD(&busy_rounds) >= 3, WAIT_MS));
	for (i = 0; i < 30; i++) {
		before = UNIT_LOAD(&busy_rounds);
		rsk_thread_fork_prepare(); /* as preload/fork.c does */
		assert_int_equal(unit_in_child(busy_child, NULL, WAIT_MS), 0);
		rsk_thread_fork_parent();
		assert_true(UNIT_WAIT(UNIT_LOAD(&busy_rounds) > before, WAIT_MS));
	}
	__atomic_store_n(&busy_stop, 1, __ATOMIC_SEQ_CST);
}

/* ---- start without a watch ---- */

static int start_ticks;

static void on_start_tick(void)
{
	if (rsk_evloop_take_tick() && rsk_evloop_on_thread())
		UNIT_INC(&start_ticks);
}

/* In a child whose loop is gone (atfork): start alone runs the thread, so the tick works
 * with nothing watched; a second start is a no-op, and no second thread ticks. */
static int start_child(void *arg)
{
	(void)arg;
	rsk_evloop_atfork_child();
	rsk_evloop_set_tick(on_start_tick);
	rsk_evloop_request_tick();
	unit_sleep_ms(QUIET_MS);
	if (UNIT_LOAD(&start_ticks) != 0)
		return 10; /* no thread yet: nobody can have ticked */
	if (rsk_evloop_start() != 0 || rsk_evloop_start() != 0)
		return 11;
	if (!UNIT_WAIT(UNIT_LOAD(&start_ticks) == 1, WAIT_MS))
		return 12; /* the request made before the start is served */
	rsk_evloop_request_tick();
	if (!UNIT_WAIT(UNIT_LOAD(&start_ticks) == 2, WAIT_MS))
		return 13;
	unit_sleep_ms(QUIET_MS);
	if (UNIT_LOAD(&start_ticks) != 2 || rsk_evloop_on_thread())
		return 14;
	return 0;
}

static void test_start_without_watch(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(start_child, NULL, 5000), 0);
}

/* ---- run_async: what an _exit from a signal handler uses ---- */

static struct {
	int hold;     /* the blocking callback waits while 1 */
	int in_cb;    /* it is running (holding the loop's lock) */
	int cb_done;  /* it has returned */
	int ran, on_thread, from_loop_rc;
	int sig_rc;
} ra;

static void on_async(void)
{
	/* on_thread first: the test reads it as soon as it sees ran move */
	if (rsk_evloop_on_thread())
		UNIT_INC(&ra.on_thread);
	UNIT_INC(&ra.ran);
}

static void on_blocking_cb(void *arg, uint32_t events)
{
	(void)events;
	pw_drain(((struct pw *)arg)->rfd);
	/* on the loop thread: it would wait for itself */
	__atomic_store_n(&ra.from_loop_rc, rsk_evloop_run_async(on_async), __ATOMIC_SEQ_CST);
	__atomic_store_n(&ra.in_cb, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 500 && UNIT_LOAD(&ra.hold); i++)
		unit_sleep_ms(10);
	__atomic_store_n(&ra.cb_done, 1, __ATOMIC_SEQ_CST);
}

static void on_sigusr1(int sig)
{
	(void)sig;
	ra.sig_rc = rsk_evloop_run_async(on_async);
}

/*
 * Asked from a signal handler while a callback holds the loop's lock, run_async returns at
 * once (rsk_evloop_defer would wait for the lock); the function runs on the loop thread once
 * the round ends, and only once; a second request while one is pending is refused.
 */
static void test_run_async(void **state)
{
	struct pw *p = pw_new();
	struct sigaction sa, old;
	int64_t end;
	int rc;

	(void)state;
	memset(&ra, 0, sizeof(ra));
	ra.hold = 1;
	assert_int_equal(rsk_evloop_watch(p->rfd, EPOLLIN, on_blocking_cb, p, &p->h), 0);
	pw_poke(p);
	assert_true(UNIT_WAIT(UNIT_LOAD(&ra.in_cb), WAIT_MS));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigusr1;
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	assert_int_equal(raise(SIGUSR1), 0); /* returns: it did not wait for the lock */
	assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
	assert_int_equal(ra.sig_rc, 0);
	assert_int_equal(UNIT_LOAD(&ra.cb_done), 0);
	assert_int_equal(UNIT_LOAD(&ra.ran), 0); /* not inside someone else's round */
	assert_int_equal(rsk_evloop_run_async(on_async), -EBUSY);
	assert_int_equal(UNIT_LOAD(&ra.from_loop_rc), -EDEADLK);
	__atomic_store_n(&ra.hold, 0, __ATOMIC_SEQ_CST);
	assert_true(UNIT_WAIT(UNIT_LOAD(&ra.ran) == 1, WAIT_MS));
	assert_int_equal(UNIT_LOAD(&ra.on_thread), 1);
	unit_sleep_ms(QUIET_MS);
	assert_int_equal(UNIT_LOAD(&ra.ran), 1);
	/* the request is taken: the next one is accepted and runs too. The loop takes it only
	 * once on_async has returned, after ran moved: a loop thread still between the two
	 * (QUIET_MS is no bound on a loaded machine) refuses it with -EBUSY, so ask until it
	 * is no longer pending (each refusal changes nothing; not UNIT_WAIT, which would ask
	 * once more after the accepted request). */
	end = rsk_now_ms() + WAIT_MS;
	while ((rc = rsk_evloop_run_async(on_async)) == -EBUSY && rsk_now_ms() < end)
		unit_sleep_ms(1);
	assert_int_equal(rc, 0);
	assert_true(UNIT_WAIT(UNIT_LOAD(&ra.ran) == 2, WAIT_MS));
}

static int async_child(void *arg)
{
	(void)arg;
	rsk_evloop_atfork_child(); /* as our fork handler does: the thread stayed in the parent */
	return rsk_evloop_run_async(on_async) == -ESRCH ? 0 : 1;
}

static void test_run_async_without_thread(void **state)
{
	(void)state;
	assert_int_equal(unit_in_child(async_child, NULL, 5000), 0);
}

#define T(f) cmocka_unit_test_teardown(f, arena_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_calls_from_callback), /* first: the slot table still grows */
		T(test_delivers_to_right_callback),
		T(test_stale_handles_ignored),
		T(test_virtual_watch),
		T(test_level_triggered_repeats),
		T(test_edge_triggered),
		T(test_oneshot),
		T(test_unwatch_drops_queued_event),
		T(test_stale_event_never_reaches_recycled_slot),
		T(test_unwatch_waits_for_running_callback),
		T(test_unwatch_self_in_callback),
		T(test_defer_after_round_without_lock),
		T(test_defer_from_other_thread),
		cmocka_unit_test_teardown(test_tick, tick_teardown),
		cmocka_unit_test_teardown(test_settle, tick_teardown),
		T(test_many_watches),
		T(test_on_thread),
		T(test_atfork_child),
		cmocka_unit_test_teardown(test_fork_waits_for_round, tick_teardown),
		T(test_start_without_watch),
		T(test_run_async),
		T(test_run_async_without_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
