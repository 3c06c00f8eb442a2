/*
 * The socket object: one per AF_INET/AF_INET6 SOCK_STREAM socket the application creates or
 * accepts. It records what the library must know across calls (state, whether a connection
 * was counted, the transport carrying it) and how many fds point at it.
 *
 * Lifetime: objects come from a type-stable pool and are never returned to malloc, so a
 * lock-free reader that loaded a pointer from the fd table may safely try to take a
 * reference and then re-check the slot (the SLAB_TYPESAFE_BY_RCU pattern).
 */
#ifndef RSK_SOCK_H
#define RSK_SOCK_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fdtab.h"
#include "rdmasock.h"

enum rsk_sock_state {
	RSK_SOCK_NEW = 0,   /* created, not connected nor listening */
	RSK_SOCK_CONNECTING, /* non-blocking kernel connect in progress */
	RSK_SOCK_CONNECTED,
	RSK_SOCK_LISTENING,
};

struct rsk_sock {
	int refs;   /* one per fd slot naming us + one per call in progress; 0 = free */
	int nfds;   /* fd slots naming us: the last close accounts the connection */
	int domain; /* AF_INET or AF_INET6 */
	int state;  /* enum rsk_sock_state, written under lock */
	int counted; /* the connection has been counted in the stats */
	int accounted; /* kernel byte counts have been taken (at last close or exit) */
	enum rdmasock_transport transport;
	pthread_mutex_t lock;
	struct rsk_sock *next_free;
};

/* Is this (domain, type) a socket the library manages? (AF_INET/AF_INET6 stream only.) */
int rsk_sock_wanted(int domain, int type);

/*
 * Start tracking kernel socket @fd. Returns 0 or -errno (-ENOMEM, -EBADF); on error the fd
 * simply stays untracked and works as a plain kernel socket.
 */
int rsk_sock_track(int fd, int domain, int state);

/* Take a reference on the socket in @fd's slot, or NULL if none. Pair with rsk_sock_put(). */
struct rsk_sock *rsk_sock_get(int fd);

/* Drop a reference; the last one returns the object to the pool. */
void rsk_sock_put(struct rsk_sock *s);

/* @newfd now names the same socket as @oldfd (dup family). Returns 0 or -errno. */
int rsk_sock_dup(int oldfd, int newfd);

/*
 * @fd is about to be closed by the application (the real close follows). Detaches the slot
 * and, when it was the last fd of its socket, accounts the connection's bytes. Returns 1
 * when @fd was tracked, 0 if not.
 */
int rsk_sock_release_fd(int fd);

/* Client side: the kernel connect() on @fd returned @rc (0 or -errno). */
void rsk_sock_connect_done(int fd, int rc);

/* getsockopt(SO_ERROR) on @fd reported @err: settles a pending non-blocking connect. */
void rsk_sock_so_error_seen(int fd, int err);

/* listen() succeeded on @fd. */
void rsk_sock_listen_done(int fd);

/* accept() on @lfd returned kernel socket @fd: track and count it. */
void rsk_sock_accept_done(int lfd, int fd);

/* Account every socket still open (at exit): their kernel byte counts enter the stats. */
void rsk_sock_account_open(void);

/* The reason a connection on @port stays on the kernel (no transport is implemented yet). */
enum rdmasock_fallback rsk_sock_fallback_reason(uint16_t port);

#endif
