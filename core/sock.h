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
#include <sys/epoll.h>
#include <sys/socket.h>

#include "fdtab.h"
#include "rdmasock.h"

enum rsk_sock_state {
	RSK_SOCK_NEW = 0,   /* created, not connected nor listening */
	RSK_SOCK_CONNECTING, /* non-blocking kernel connect in progress */
	RSK_SOCK_CONNECTED,
	RSK_SOCK_LISTENING,
};

struct rsk_conn;
struct rsk_listener;
struct rsk_verbs_listener;

/* An epoll registration made while the socket was still a plain TCP socket (see epoll.c). */
struct rsk_epreg {
	int epfd;
	struct epoll_event ev;
};
#define RSK_SOCK_EPREGS 4

struct rsk_sock {
	int refs;   /* one per fd slot naming us + one per call in progress; 0 = free */
	int nfds;   /* fd slots naming us: the last close accounts the connection */
	int domain; /* AF_INET or AF_INET6 */
	int state;  /* enum rsk_sock_state, written under lock */
	int counted; /* the connection has been counted in the stats */
	int accounted; /* kernel byte counts have been taken (at last close or exit) */
	enum rdmasock_transport transport;
	enum rdmasock_fallback fb_reason; /* why a kernel connection is not accelerated */
	pthread_mutex_t lock;
	struct rsk_conn *conn;      /* accelerated: the shared connection */
	/* accepted over verbs: from which listener, and how many forks this process had made
	 * by then (see rsk_sock_release_fd: fork-per-connection servers) */
	struct rsk_verbs_listener *from_vl;
	unsigned int forks_at_accept;
	struct rsk_listener *lst;   /* listening with a rendezvous */
	struct rsk_epreg epregs[RSK_SOCK_EPREGS];
	int nepregs;
	unsigned int fork_gen;
	uint64_t base_sent, base_rcvd; /* kernel counts already owned by a parent process */
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

/*
 * connect() on tracked socket @fd: try to accelerate it. Returns 1 when the connect was
 * handled here (its result, 0 or -errno, in *rc), 0 when the caller must do the kernel
 * connect (the fallback reason is recorded for the stats).
 */
int rsk_sock_connect(int fd, const struct sockaddr *addr, socklen_t len, int *rc);

/* Client side: the kernel connect() on @fd returned @rc (0 or -errno). */
void rsk_sock_connect_done(int fd, int rc);

/* getsockopt(SO_ERROR) on @fd reported @err: settles a pending non-blocking connect. */
void rsk_sock_so_error_seen(int fd, int err);

/* listen() succeeded on @fd: also listen on the same-host rendezvous where allowed. */
void rsk_sock_listen_done(int fd, int backlog);

/*
 * accept() on @lfd returned kernel socket @fd (accept4 @flags): track it and, if a preloaded
 * client offered a faster path, switch it over. Returns @fd, or -errno when the connection
 * had to be dropped (-ECONNABORTED, as the kernel reports a connection lost before accept).
 */
int rsk_sock_accept_done(int lfd, int fd, int flags);

/*
 * accept() is about to run on tracked @fd: this process accepts on it (a verbs listener
 * takes rdma_cm requests only from then on, see listen.c).
 */
void rsk_sock_accept_begin(int fd);

/* epoll_ctl on tracked @fd: remembered while the socket may still change its file. */
void rsk_sock_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev);

/* fork(): count the child as a holder of every accelerated connection, then undo/adjust. */
void rsk_sock_fork_prepare(void);
void rsk_sock_fork_parent_failed(void);
void rsk_sock_fork_child(void);

/* Process exit: end every accelerated stream this process is the last holder of. */
void rsk_sock_exit(void);

/* Account every socket still open (at exit): their kernel byte counts enter the stats. */
void rsk_sock_account_open(void);

/* Internal to core: make tracked socket @s (at @fd) an accelerated one (connect.c). */
int rsk_sock_become(struct rsk_sock *s, int fd, struct rsk_conn *c, int app, int ctl, int tcp);

/* fork() calls this process has made (the parent's side). */
extern unsigned int rsk_sock_forks;

/* Internal to core: listener rendezvous (listen.c). */
int rsk_listen_setup(struct rsk_sock *s, int fd, int backlog);
int rsk_listen_accept(struct rsk_sock *ls, struct rsk_sock *s, int fd);
void rsk_listen_close(struct rsk_listener *l);
/* A forked child: the verbs listener is the parent's; never use or destroy it here. */
void rsk_listen_forget_verbs(struct rsk_listener *l);
/* This process shows it accepts on the listener (accept, or epoll registration). */
void rsk_listen_interest(struct rsk_listener *l);
/* This process forks with the listener open (the parent's side). */
void rsk_listen_forked(struct rsk_listener *l);

#endif
