/*
 * What connections to a destination have been like lately, so connect() can choose how to
 * set the next one up: a destination whose connections end before they would have paid for
 * a transport's setup gets TCP first (calls/upgrade.c), one whose connections live on gets
 * the transport at once (docs/design.md, "TCP first"). Per process, by address and port.
 */
#ifndef RSK_CALLS_HISTORY_H
#define RSK_CALLS_HISTORY_H

#include <stdint.h>
#include <sys/socket.h>

/*
 * Is a connection of @age_ms that moved @bytes in @calls data-carrying calls (sends and
 * reads, either way) short: not worth a transport's setup? Its age counts only from its
 * first data call after RSK_HIST_AGE_CALLS of them (rsk_hist_called, rsk_hist_age): under
 * load every connection waits in queues, and a request with its answer never earns a setup
 * back however long it waited for it. Counted from the connect, a setup that was itself slow
 * (ten set up at once, queued in the server's accept loop) made its connection look long,
 * so the next ones were set up at connect too, and were as slow (nginx + ab, 100 KiB
 * without keep-alive: 1,200 req/s against kernel TCP's 10,400). With RDMASOCK_UPGRADE_MS=0
 * no connection is short.
 */
#define RSK_HIST_AGE_CALLS 4
int rsk_hist_is_short(int64_t age_ms, uint64_t bytes, uint64_t calls);

/*
 * A data call of a connection moved bytes: *@calls counts them (up to RSK_HIST_AGE_CALLS;
 * above that nothing asks), and the first one after that many sets *@mark (ms, 0 before), the
 * moment its age counts from. No clock read before it: where the clock has no vDSO (the
 * Soft-RoCE guest's hpet) each is a system call, and most short connections make fewer calls.
 * Atomic: several threads may use one connection.
 */
void rsk_hist_called(uint64_t *calls, int64_t *mark);

/* Its age for rsk_hist_is_short: ms since *@mark, 0 while it is not set. */
int64_t rsk_hist_age(const int64_t *mark);

/* Connections to @dest ended short recently (most of the last few)? 0 without history. */
int rsk_hist_short(const struct sockaddr *dest);

/* The same as a verdict: 1 short, 0 they live on, -1 not enough history to tell. */
int rsk_hist_verdict(const struct sockaddr *dest);

/* A client connection to @dest ended; @short_lived: before it would have moved. */
void rsk_hist_note(const struct sockaddr *dest, int short_lived);

/*
 * A same-host bearer connect to @dest found no rendezvous lately (a server without the
 * library or its face, another user's, a blocking accept's shut one): @none set by the
 * connect that failed, cleared by one that got through. Kept with @dest's history, so only
 * for a destination that has one (the bearer is only asked after a verdict).
 */
int rsk_hist_no_bearer(const struct sockaddr *dest);
void rsk_hist_set_no_bearer(const struct sockaddr *dest, int none);

/*
 * Direct setups in progress: connections set up on a transport at connect whose connect the
 * application has not seen finish yet (calls/connect.c holds one per such socket, and
 * releases it when the application asks for the result, makes a data call, or closes, or
 * when the connect fails or stays on TCP). At RSK_HIST_SETUPS at once, the next connection
 * to a destination without a verdict starts on TCP (and moves later if it lives; one whose
 * connections live on earns its setup back and goes direct):
 * a burst of non-blocking connects would otherwise all pay a setup at once, serialised in
 * the server's accept loop (100 at a time ran at 500-800 conn/s where kernel TCP ran
 * 8,000-12,000), as SMC's limit_smc_hs keeps connections on TCP while handshakes queue. A
 * connect the application waits for (blocking) finishes inside the call and holds nothing:
 * connections made one after another all go direct, however many stay open.
 */
#define RSK_HIST_SETUPS 8
/* Take one: 1, or 0 when RSK_HIST_SETUPS are in progress (start on TCP). */
int rsk_hist_setup_begin(void);
/* One taken with rsk_hist_setup_begin ended. */
void rsk_hist_setup_end(void);
/*
 * The application saw @s's connect finish (asked SO_ERROR, connected again, made a data
 * call) or closed it: a direct setup it held (s->setup_held) is no longer in progress. Once
 * per setup however many threads get here.
 */
struct rsk_sock;
void rsk_hist_setup_seen(struct rsk_sock *s);
/* Setups in progress now (tests, rdmasock stat). */
int rsk_hist_setups(void);

/* Forget everything (tests; a forked child keeps its parent's, which is still true). */
void rsk_hist_clear(void);

#endif
