/*
 * Peer liveness, off the data path. A sleeping thread per process waits (no timeout, no
 * periodic wake-up) on the hidden TCP placeholder of every accelerated connection. When the
 * peer process dies the kernel closes its end; we learn it at once and reset the stream
 * (or report EOF when the peer had ended it in order).
 */
#ifndef RSK_MONITOR_H
#define RSK_MONITOR_H

struct rsk_conn;

/* Watch @c's TCP placeholder. Starts the thread on first use (again after fork). 0/-errno. */
int rsk_monitor_add(struct rsk_conn *c);

/* Stop watching @c (before its fds close). */
void rsk_monitor_del(struct rsk_conn *c);

/* A connection now holds a staged message: make sure a tick will post it (cheap if known). */
void rsk_monitor_staged(void);

/* Post every staged message of this process now (the application is about to wait). */
void rsk_monitor_push_all(void);

/* Verbs listeners: the thread answers their rdma_cm connection requests. */
struct rsk_verbs_listener;
int rsk_monitor_add_listener(struct rsk_verbs_listener *l);
void rsk_monitor_del_listener(struct rsk_verbs_listener *l);
/* If @l is still a registered listener of this process, stop it taking requests (it serves
 * fork-per-connection, see sock.c). */
void rsk_monitor_listener_fpc(struct rsk_verbs_listener *l);

/* Start relaying @c (relay.c): watch its socketpair end too. 0 or -errno. */
int rsk_monitor_relay(struct rsk_conn *c);

/* In a forked child: the thread is gone; forget it so the next add starts a new one. */
void rsk_monitor_atfork_child(void);

#endif
