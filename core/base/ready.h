/*
 * Readiness objects. The fd an application holds for an accelerated socket is one end of a
 * unix socketpair (the "app end"); its partner (the "ctl end") is held by whoever wakes the
 * owner: the peer process for shared memory, our own event loop for verbs. The app end's
 * kernel readiness is driven to match the socket's true state, so epoll/poll/select work
 * unchanged:
 *   readable   <=> a token waits in the app end (only the waker writes tokens)
 *   unwritable <=> a fill sits in the partner's queue AND the app end's send buffer is at its
 *                  minimum: the owner toggles the send buffer itself; the waker removes the fill
 *   EOF/RDHUP  <=> the partner shut its write side (the waker), or the app end its read side
 *   HUP        <=> the app end shut both sides (the owner), or the partner is gone (the waker
 *                  died or closed: the owner then learns it from the HUP)
 * Who writes a token and who drains a fill is decided by compare-and-swap on a small state
 * block in memory both see (struct rsk_ready_state), so neither side ever needs the other's
 * fd to undo what it did, and no wake is lost or doubled.
 */
#ifndef RSK_BASE_READY_H
#define RSK_BASE_READY_H

#include <stdint.h>

/*
 * Per app end, in memory shared by its owner and its waker. rx: EMPTY = nothing is shown,
 * the waker must write a token with its next message; SHOWN = a token is (or is about to be)
 * in the app end; its upper bits count the tokens ever raised (counted before each write).
 * tx: OPEN, or BLOCKED = the owner made its app end unwritable and the waker must drain the
 * fill once it returns credits; its upper bits count the waker's takeovers, and `unblocked`
 * the drains done (counted after each drain).
 */
struct rsk_ready_state {
	uint32_t rx;        /* tokens raised << 1 | RSK_RX_SHOWN */
	uint32_t tx;        /* waker opens << 1 | RSK_TX_BLOCKED */
	uint32_t unblocked; /* fills the waker drained */
	uint32_t dropped;   /* raised tokens never written (the queue was full, or taken back) */
	uint32_t taken;     /* tokens the owner took out of the app end (the owner writes it) */
	/* The owner answers its waits from user space, level-triggered only (lazy readiness,
	 * conn.h): no extra arrival edge is wanted. Written by the owner. */
	uint32_t lazy;
	/* Owner's sleeps on an edge-triggered registration of a SHOWN app end (its stale token
	 * stays through them): sleeps << 1 | RSK_SLEEP_KICKED. The owner counts a sleep before
	 * it rechecks the ring; a waker that finds SHOWN reads it after its post, and one of them
	 * writes one token (an edge) and sets KICKED; whoever takes that edge's report from the
	 * kernel clears KICKED before it looks at the ring. */
	uint32_t sleep;
};

/* Invariant: raised - dropped - taken = tokens in the app end, or on their way. */
uint32_t rsk_ready_unread(const struct rsk_ready_state *st);

/* Extra arrival edges stop while this many tokens are unread. TCP gives an edge-triggered
 * reader an edge per arrival however much it left unread; one byte each, 64 keep well inside
 * the app end's queue (a flood of arrivals would fill it, and the owner's lower would then
 * take more than one read). */
#define RSK_READY_EDGE_MAX 64u

#define RSK_SLEEP_KICKED 1u

#define RSK_RX_EMPTY 0u
#define RSK_RX_SHOWN 1u
#define RSK_TX_OPEN 0u
#define RSK_TX_BLOCKED 1u

/* The owner's own bookkeeping (in memory its holders share, under their lock). */
struct rsk_ready_owner {
	uint32_t drains_seen; /* waker drains of our fill accounted for */
	uint32_t late;        /* unread tokens we stopped waiting for (a waker that stalled) */
	int fill;  /* a fill of ours sits in the partner's queue */
	int small; /* the app end's send buffer is at its minimum */
};

/* Create a pair: *app (send buffer at the kernel default) and *ctl (non-blocking). 0/-errno. */
int rsk_ready_pair(int *app, int *ctl);
/* The same with both ends non-blocking (@nonblock), for an application fd that is: one
 * system call fewer here, and none to make the app end non-blocking later. */
int rsk_ready_pair_flags(int *app, int *ctl, int nonblock);

/* ---- the waker's side (it holds @ctl) ---- */

/* After a message for the owner: nonzero if the caller must write a token now (already
 * counted): RSK_CLAIM_SHOW if the owner was EMPTY, RSK_CLAIM_EDGE if @edge asked for one more
 * arrival edge while SHOWN (and few tokens are unread). *@word (if not NULL) gets the state
 * word the claim left. */
#define RSK_CLAIM_SHOW 2
#define RSK_CLAIM_EDGE 1
/* RSK_CLAIM_WAKE: SHOWN, but the owner sleeps on an edge-triggered registration and no edge
 * was written for it since its report was last taken: this token is that edge, and must be
 * written (never unclaimed: the KICKED it set stops the other wakers). */
#define RSK_CLAIM_WAKE 3
int rsk_ready_claim_rx(struct rsk_ready_state *st, int edge, uint32_t *word);
/* A claimed token that is not needed after all (the owner consumed everything since): count
 * it dropped, and undo the SHOWN it made, so the owner shows nothing and no token is
 * written. */
void rsk_ready_unclaim_rx(struct rsk_ready_state *st, uint32_t word, int kind);
/* Write the token rsk_ready_claim_rx() asked for (or one the owner writes for itself while it
 * still holds its ctl end, counted with rsk_ready_count_raise); a write that fails is counted
 * as dropped, so the owner does not wait for it. */
void rsk_ready_token(struct rsk_ready_state *st, int ctl);
void rsk_ready_count_raise(struct rsk_ready_state *st);

/* After credits went back to the owner: 1 if the caller must drain the owner's fill now. */
int rsk_ready_claim_tx(struct rsk_ready_state *st);
/* Drain it (the owner's app end becomes writable), then count the drain. */
void rsk_ready_drain_fill(struct rsk_ready_state *st, int ctl);

/* The owner's peer ended its stream: EOF and RDHUP on the app end for good. */
void rsk_ready_eof(int ctl);

/* ---- the owner's side (it holds the app end @app) ---- */

/* How long an owner going EMPTY waits, in 1 ms polls, for a token counted and not yet
 * written (a waker preempted between its claim and its write). */
#define RSK_READY_LATE_MS 100

/*
 * Nothing is readable: go EMPTY and take exactly the tokens shown so far. @readable is asked
 * again after EMPTY is published; if data came meanwhile the state goes back to SHOWN with
 * the tokens left in place. Returns 1 if EMPTY now.
 */
int rsk_ready_lower(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		    int (*readable)(void *arg), void *arg);

/*
 * No credit is left: make the app end unwritable and publish BLOCKED; @writable is asked
 * again after that, and if credits came meanwhile the block is taken back at once.
 */
void rsk_ready_block(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		     int (*writable)(void *arg), void *arg);

/* Credits are back and the waker has not said so (yet): take BLOCKED back ourselves. */
void rsk_ready_open(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app);

/*
 * A thread of the owner is about to sleep in the kernel on an edge-triggered registration of
 * @st's app end (@on 1; before it rechecks the ring: the Dekker pair with the waker's post),
 * or is done sleeping (@on 0).
 */
void rsk_ready_sleep(struct rsk_ready_state *st, int on);
/* The kernel reported the app end (an edge was taken): before the ring is looked at, so that a
 * waker that came after the edge was written kicks again. */
void rsk_ready_edge_seen(struct rsk_ready_state *st);
/* Take back stale tokens (those present, without waiting) until @keep are left unread, in one
 * read. Only while SHOWN on a lazy app end, whose tokens mean nothing but the edges they made.
 * Returns how many were taken. */
uint32_t rsk_ready_trim(struct rsk_ready_state *st, int app, uint32_t keep);

/* The owner shows EOF (@how SHUT_RD) or hang-up (SHUT_RDWR) on its own app end, for good. */
void rsk_ready_shut(int app, int how);

/* Take the unread tokens out of the app end, waiting up to @wait_ms for ones counted and not
 * written yet (a waker between its two steps), and never again for ones it gave up on. Only
 * for an app end no waker raises any more (a relay taking over). */
void rsk_ready_collect(struct rsk_ready_state *st, struct rsk_ready_owner *o, int app,
		       int wait_ms);

/* Drain everything readable from @fd without blocking (tests, and relays taking over). */
void rsk_ready_flush(int fd);

/*
 * At start of a program image: app ends inherited across exec belong to a library instance
 * that no longer exists. Turn each into a socket whose peer is gone, so the program sees EOF
 * and EPIPE rather than our token bytes. Returns how many were found.
 */
int rsk_ready_sweep_stale(void);

#endif
