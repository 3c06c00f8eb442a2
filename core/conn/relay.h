/*
 * Connections served through a plain byte pipe while their endpoint stays this process's
 * (relay.c): a verbs connection a forked child may serve, and any connection the application
 * uses through paths no preload sees (stdio). The event loop moves the bytes between the pipe
 * and the stream.
 */
#ifndef RSK_RELAY_H
#define RSK_RELAY_H

struct rsk_conn;

/*
 * Turn @c into a relayed connection; @app_fd is an fd of its app end. The caller then treats
 * the application's fd as a plain kernel socket and no longer releases @c: the relay does,
 * once every holder of the pipe closed it or it failed. 0 or -errno (-EBUSY: the stream
 * already ended or failed; leave it as it is).
 * - Our own loop wakes the app end (c->ctl_fd: verbs): the app end itself becomes the pipe
 *   (tokens are taken out of it); *@pipe_app is -1.
 * - The peer wakes it (shm): the peer's tokens keep coming into the app end, so the relay
 *   keeps a copy of it and reads it as the application did, and the pipe is a fresh
 *   socketpair: *@pipe_app is its application side, which the caller puts behind every fd
 *   number naming the connection, then closes.
 */
int rsk_relay_start(struct rsk_conn *c, int app_fd, int *pipe_app);

/*
 * At exit (the process's fds are still open): move what the application wrote into the
 * pipe on into the streams (waiting a bounded time for room), then end each stream as the
 * kernel ends a TCP connection whose process exits: FIN, or RST over unread data.
 */
void rsk_relay_exit_all(void);

/* In a forked child: the relays are the parent's; close the child's copies of their fds. */
void rsk_relay_atfork_child(void);

/* Relays running in this process (for tests and the exec hand-off). */
int rsk_relay_count(void);

/*
 * exec replaces the image whose loop runs the relays: they are handed to a helper process
 * (calls/lifecycle.c forks it). pause_all: stop the relays another process can take over
 * (their endpoint has cm->ep_fds); 1 if there are any. resume_all: they go on here (the exec
 * failed). fds: what they need, up to @max into @out (a helper closes everything else).
 * adopt_all: in the helper (a fork of the paused process), they run here now; returns how
 * many. wait_done: until @n relays were released.
 */
int rsk_relay_pause_all(void);
void rsk_relay_resume_all(void);
int rsk_relay_fds(int *out, int max);
int rsk_relay_adopt_all(void);
void rsk_relay_wait_done(int n);

/* In the helper, before it closes what is not its own: is the relay @ext (a connection
 * hook's) one it takes over? */
int rsk_relay_taken(void *ext);

/*
 * A relay must outlive the process that started it (the kernel goes on sending a TCP
 * socket's queue after its process died): the caller forks a helper to run it
 * (calls/lifecycle.c). hand_prepare: take the relays a helper can run (cm->ep_fds) and that
 * no helper runs yet; they stop here (no step, no watch, no release). Returns how many.
 * Then, in the helper, rsk_relay_fds and adopt_all as for an exec. In this process:
 * hand_done once the helper exists (our copies of their fds close and their records go,
 * on the loop; their streams go on in the helper), hand_failed if it could not be forked
 * (they go on here).
 */
int rsk_relay_hand_prepare(void);
void rsk_relay_hand_done(void);
void rsk_relay_hand_failed(void);

#endif
