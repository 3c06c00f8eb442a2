/*
 * Readiness objects. The fd an application holds for an accelerated socket is one end of a
 * unix socketpair (the "app end"); the library keeps the other (the "ctl end") and a peer
 * process may hold a dup of it. The app end's kernel readiness is driven to match the
 * socket's true state, so epoll/poll/select work unchanged:
 *   readable  <=> a token byte waits in the app end (written into the ctl end)
 *   writable  <=> the app end's send buffer is not full (we fill it to say "no credits")
 *   EOF/RDHUP <=> the ctl end shut down its write side; HUP <=> both sides
 */
#ifndef RSK_READY_H
#define RSK_READY_H

/* Create a pair: *app (blocking flags left to the caller) and *ctl (non-blocking). 0/-errno. */
int rsk_ready_pair(int *app, int *ctl);

/* Make the app end readable (idempotent: a full token queue already means readable). */
void rsk_ready_raise(int ctl);

/*
 * Drain tokens from the app end @app: it stops being readable. Any fd passed along with a
 * token (the peer's kick fd, see hs) is handed to @on_fd, which takes ownership.
 */
void rsk_ready_lower(int app, void (*on_fd)(int fd, void *arg), void *arg);

/* Take exactly @n tokens from the app end, waiting up to ~20 ms for late ones. Returns the
 * number taken. */
int rsk_ready_take(int app, int n);

/* Make the app end unwritable by filling its send buffer. */
void rsk_ready_block(int app);

/* Make the app end writable again (drain what rsk_ready_block() wrote). */
void rsk_ready_unblock(int ctl);

/* Permanent states: EOF (readable + RDHUP forever) and hang-up (also HUP). */
void rsk_ready_eof(int ctl);
void rsk_ready_hup(int ctl);

/*
 * At start of a program image: app ends inherited across exec belong to a library instance
 * that no longer exists. Turn each into a socket whose peer is gone, so the program sees EOF
 * and EPIPE rather than our token bytes. Returns how many were found.
 */
int rsk_ready_sweep_stale(void);

#endif
