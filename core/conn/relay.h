/*
 * Connections a forked child may serve while their endpoint stays the parent's (verbs):
 * relayed by the parent's event loop between the endpoint and the readiness socketpair,
 * which then carries the data itself (relay.c).
 */
#ifndef RSK_RELAY_H
#define RSK_RELAY_H

struct rsk_conn;

/*
 * Turn @c into a relayed connection; @app_fd is an fd of its app end (tokens are taken out
 * of it). The caller then treats the app end as a plain kernel socket and no longer
 * releases @c: the relay does, once every holder closed it or it failed. 0 or -errno
 * (-EBUSY: the stream already ended or failed; leave it as it is).
 */
int rsk_relay_start(struct rsk_conn *c, int app_fd);

#endif
