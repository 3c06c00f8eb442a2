/*
 * An accelerated connection: the stream engine, its transport endpoint, and the fds that
 * make the application's fd behave (readiness pair, hidden TCP placeholder). It lives in
 * an anonymous MAP_SHARED region so that, exactly like a kernel socket, a forked child and
 * its parent share one connection; `holders` counts the processes that still have it and
 * the last one to close it ends the stream.
 */
#ifndef RSK_CONN_H
#define RSK_CONN_H

#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>

#include "stream.h"

struct rsk_conn {
	pthread_mutex_t lock; /* process-shared, robust: guards everything below */
	int holders;          /* processes holding the connection (atomic) */
	size_t map_len;       /* size of this shared region */
	enum rdmasock_transport transport;
	int ctl_fd;   /* our end of the readiness pair */
	int tcp_fd;   /* the real TCP socket: addresses, options, and peer liveness */
	int offer_fd; /* client: offer connection until the server's answer was read */
	int nonblock; /* O_NONBLOCK of the application's open file description */
	int64_t rcvtimeo_us, sndtimeo_us; /* SO_RCVTIMEO / SO_SNDTIMEO, 0 = forever */
	int tx_blocked; /* app end filled (unwritable) */
	uint32_t rx_drained; /* tokens taken out of the app end (compare: wakes RX) */
	/* Arm ledger, per RSK_WAIT_* bit: an arm is pending until we take it back or see that
	 * a kick consumed it; wakes are expected to reach `expect` once every consumed arm
	 * and every wake of our own has been counted. */
	int rx_pending, tx_pending;
	uint32_t rx_expect, tx_expect;
	int eof_shown, hup_shown;
	int answer_pending; /* client: server answer not read yet */
	/* verbs, forked while fresh: relayed by this process's monitor (relay.c); process-local
	 * memory, meaningful only in the process that started it */
	struct rsk_relay *relay;
	int relay_done;
	struct rsk_stream st;
	struct rsk_ep *ep;
	unsigned char mem[] __attribute__((aligned(64))); /* endpoint, then the rx queue */
};

/* Accelerated connections held by this process (readers may spin instead of sleeping). */
extern int rsk_conn_live;

/* A zeroed connection able to hold an endpoint with @nbuf buffers. NULL on ENOMEM. */
struct rsk_conn *rsk_conn_alloc(uint32_t nbuf);

/* Memory for the transport endpoint inside the region, and for the stream's rx queue. */
void *rsk_conn_ep_mem(struct rsk_conn *c);
struct rsk_rxmsg *rsk_conn_rxq(struct rsk_conn *c);

/*
 * The local parts of a new connection on endpoint c->ep for TCP socket @fd: the stream, the
 * readiness pair (*app for the application, *ctl hidden) and the hidden TCP placeholder
 * (*tcp). 0 or -errno; on error the caller undoes with rsk_conn_discard (fds < 0 skipped).
 */
int rsk_conn_prepare(struct rsk_conn *c, int fd, int *app, int *ctl, int *tcp);
void rsk_conn_discard(struct rsk_conn *c, int app, int ctl, int tcp);

void rsk_conn_lock(struct rsk_conn *c);
void rsk_conn_unlock(struct rsk_conn *c);

/*
 * Bring the app end's kernel readiness in line with the stream's state (raise/lower,
 * block/unblock, EOF, HUP). Called with the lock held after every engine operation;
 * @app_fd is the fd the application used (any dup of the app end will do).
 */
void rsk_conn_sync(struct rsk_conn *c, int app_fd);

/* Client: read the server's answer if it has come (@wait_ms > 0: wait that long). */
int rsk_conn_resolve(struct rsk_conn *c, int wait_ms);

/* Peer gone (monitor): fail the stream unless the peer ended it in order. Lock held. */
void rsk_conn_peer_gone(struct rsk_conn *c);

/*
 * Transports whose peer cannot wake us (verbs): something arrived (the completion channel
 * fired). Harvest, show EOF/HUP, and wake what is armed and now due. Lock held.
 */
void rsk_conn_remote_wake(struct rsk_conn *c);

/* This process is done with @c (its last fd closed): the last holder ends the stream. */
void rsk_conn_release(struct rsk_conn *c);

/* fork(): every process that will hold @c must be counted before the child exists. */
void rsk_conn_hold(struct rsk_conn *c);

#endif
