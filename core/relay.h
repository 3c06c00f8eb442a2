/*
 * Verbs connections a forked child may serve: relayed by the parent's monitor thread between
 * the QP and the readiness socketpair, which then carries the data itself (relay.c).
 */
#ifndef RSK_RELAY_H
#define RSK_RELAY_H

struct rsk_conn;

/*
 * Turn @c into a relayed connection; @app_fd is an fd of its app end (tokens are taken out
 * of it). The caller then treats the app end as a plain kernel socket. 0 or -errno (-EBUSY:
 * the stream already ended or failed; leave it as it is).
 */
int rsk_relay_start(struct rsk_conn *c, int app_fd);

/* Move what can move both ways (lock held). Returns 1 once the relay is over. */
int rsk_relay_pump(struct rsk_conn *c);

void rsk_relay_free(struct rsk_conn *c);

#endif
