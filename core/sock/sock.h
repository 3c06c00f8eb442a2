/*
 * The socket object: one per AF_INET/AF_INET6 SOCK_STREAM socket the application creates or
 * accepts. It records what the library must know across calls (state, whether a connection
 * was counted, the transport carrying it) and how many fds point at it; and it is where an
 * fd is switched onto an accelerated connection.
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

#include "base/fdhide.h"
#include "base/fdtab.h"
#include "rdmasock.h"

enum rsk_sock_state {
	RSK_SOCK_NEW = 0,   /* created, not connected nor listening */
	RSK_SOCK_CONNECTING, /* non-blocking kernel connect in progress */
	RSK_SOCK_CONNECTED,
	RSK_SOCK_LISTENING,
};

struct rsk_conn;
struct rsk_listener;

/* An epoll registration made while the socket was still a plain TCP socket (see epoll.c). */
struct rsk_epreg {
	int epfd;
	struct epoll_event ev;
	/* a face's registration with EPOLLEXCLUSIVE: its TCP listener and rendezvous are in
	 * the set themselves (face.c, rsk_face_ctl), the face's number is not */
	int direct;
};
/* Registrations kept in the socket itself; more sets go to a heap array (epregs_more). A
 * face's direct ones are always among these (face.c adds one only below this many), so that
 * rsk_bearer_direct_next reads them without the lock. */
#define RSK_SOCK_EPREGS 4

struct rsk_sock {
	int refs;   /* one per fd slot naming us, per call in progress, per long_refs; 0 = free */
	/* Of refs, the ones held for long and no call's: an epoll mirror's candidate
	 * (calls/fastwait.c, rsk_sock_keep). Atomic. */
	int long_refs;
	int nfds;   /* fd slots naming us: the last close accounts the connection */
	/* Closed by the application while another of its threads was inside a call on it: the
	 * kernel keeps such a socket until the call returns (the call holds its file), so the
	 * connection's release waits for the last call in progress (rsk_sock_put). late_fd is
	 * a hidden dup of the app end + 1 for those calls, the number being the application's
	 * again (rsk_sock_call_fd). Atomic; late_next/late_prev: the list of such sockets,
	 * which the exit ends too (rsk_sock_walk_late). */
	int release_late, late_fd;
	struct rsk_sock *late_next, *late_prev;
	int domain; /* AF_INET or AF_INET6 */
	int state;  /* enum rsk_sock_state; atomic stores (a connect's result needs no lock) */
	int counted; /* the connection has been counted in the stats */
	int accounted; /* kernel byte counts have been taken (at last close or exit) */
	/* a forked child's copy of a connection that stays the parent's: calls fail ENOTCONN */
	int detached;
	/* its connection is served by a relay (conn/relay.c): its fds name a plain unix socket */
	int relayed;
	enum rdmasock_transport transport;
	enum rdmasock_fallback fb_reason; /* why a kernel connection is not accelerated */
	pthread_mutex_t lock;
	struct rsk_conn *conn;      /* accelerated: the shared connection */
	/* accepted: the listener's id, and how many forks this process had made by then (a
	 * fork-per-connection server, see rsk_sock_release_fd) */
	uint64_t from_lst;
	unsigned int forks_at_accept;
	/* made by an accept (any listener's, accelerated or not): its age is never asked, so its
	 * data calls are not counted for it (calls/history.h rsk_hist_called) */
	int accepted;
	/* connected here: a withdrawn offer lent our TCP socket to a server that may not have
	 * read it yet, as of this many forks (calls/lifecycle.c, at the last close) */
	int tcp_lent;
	unsigned int forks_at_lend;
	/* connected here: a direct setup the application has not seen finish yet holds one of
	 * the process's setups in progress (calls/connect.c, rsk_hist_setup_seen; atomic) */
	int setup_held;
	struct rsk_listener *lst;   /* listening, with the transports' listeners beside it */
	/* listening with a face (sock/face.c): its hidden TCP listener + 1 (0: none), and the
	 * same while its numbers name the face's epoll set (0 once put back: exec, io_uring) */
	int face_fd, face_on;
	/* listening with a face: its bearer rendezvous + 1 (0: none; sock/bearer.c), whether
	 * it takes no new clients, whether it left the face's set, and whether the last
	 * connection accepted came over TCP (calls/accept.c looks there first then; atomic) */
	int bearer_fd, bearer_shut, bearer_unset, bearer_tcp_last;
	/* listening with a face: its number's O_NONBLOCK as last seen, 1 set, 2 clear, 0 not
	 * known (asked at the next accept that needs it; face.c forgets it at F_SETFL) */
	int face_nb;
	int app_bound; /* the application bound it (atomic): a bearer would not keep its address */
	/* It set a socket option while new that a bearer's unix socket cannot carry, or more
	 * than newopts holds (atomic): it connects over TCP (calls/connect.c). */
	int app_opts;
	/* It set an option a connection carries while new or listening (atomic): its
	 * connection, or one accepted from it, reads the kernel socket's values at the switch
	 * (calls/sockopt.c rsk_opt_adopt_kernel). */
	int opts_set;
	/* The options it set while new that a bearer carries (sock/bearer.h), for it to set
	 * again on its unix socket; NULL: none (under lock, made at the first). */
	struct rsk_sock_newopts *newopts;
	int fd_pressed; /* listening: the process is short of fds (calls/accept.c) */
	int fd_paused;  /* listening: its listener was paused for fds once (calls/accept.c) */
	/* listening: its port (every connection it accepts has it locally); connecting: the
	 * destination's. Kept so that counting a connection asks the kernel nothing. */
	uint16_t port;
	/* Every epoll set holding it while it was a plain TCP socket: each must follow it onto
	 * the accelerated file (rsk_sock_become), or a wait there never wakes again. Entries
	 * 0..RSK_SOCK_EPREGS-1 here, the rest in epregs_more (s->lock). */
	struct rsk_epreg epregs[RSK_SOCK_EPREGS];
	struct rsk_epreg *epregs_more;
	int epregs_more_cap;
	int nepregs;
	unsigned int walk_gen;
	unsigned int held_fork; /* the fork (rsk_proc_forks()) that counted a child as a holder */
	int64_t hup_checked_us; /* when a call that found nothing last asked (calls/io.c) */
	unsigned int spin_hist; /* whether blocking calls' spins pay (calls/io.c, rsk_spin_pays) */
	uint64_t base_sent, base_rcvd; /* kernel counts already owned by a parent process */
	/* Bytes the application moved on the kernel socket through our calls (a TCP-first one,
	 * calls/upgrade.c), and whether they are all it moved (its every data call came to us,
	 * through its one fd): then its account asks the kernel for no TCP_INFO. */
	uint64_t own_sent, own_rcvd;
	int own_exact;
	/* TCP first: the state of a kernel connection that may still move (calls/upgrade.c,
	 * which owns it; its data path is diverted while set) */
	void *upg;
	/* Sends of the move's stream still using its app end by number as the move ended
	 * (calls/upgrade.c), and that number + 1 kept open for them (0: none). Under lock. */
	int upg_scalls, upg_spare;
	/* TCP first: calls of the application inside the kernel on the TCP side (no move ends
	 * under them), and the bytes that moved there (the client's threshold). Here, not in
	 * upg: a call leaving the kernel counts itself out without the lock, and the socket
	 * (unlike upg) outlives the reference the call holds. Atomic; raised under the lock only
	 * (calls/upgrade.c). */
	int upg_kcalls;
	uint64_t upg_bytes;
	/* A client's data calls that moved bytes (on TCP first's kernel side, and on the stream)
	 * and the moment its age counts from (calls/history.h rsk_hist_called; 0: not yet): TCP
	 * first's move threshold, and the destination history's verdict at close. Atomic. */
	uint64_t data_calls;
	int64_t aged_ms;
	/* TCP first: a data call may go to the kernel without the lock (rsk_upg_route): 0 no,
	 * 1 any thread's (a client), 2 only upg_tid's (a server). Atomic; set under the lock. */
	int upg_fast;
	/* TCP first, a server: the thread of its first data call (upg_named 2), being named (1)
	 * or not yet (0). Atomic (calls/upgrade.c, rsk_upg_ours). */
	int upg_named;
	pthread_t upg_tid;
	/* TCP_NODELAY and TCP_CORK as the kernel has them, while every change went through us
	 * (RSK_SOCK_OPT_*; rsk_sock_tcp_opts): a setup then asks the kernel neither. Valid only
	 * in the process that learnt them, before it forked (a child's setsockopt is unseen). */
	int tcpopt;
	pid_t tcpopt_pid;
	unsigned int tcpopt_forks;
	/* What F_GETFL and F_GETFD say for its number, while every change went through us since
	 * socket() made it (-1: not known, ask the kernel; rsk_sock_getfl). Valid as tcpopt is:
	 * in the process that learnt them, before it forked (O_NONBLOCK belongs to the open
	 * file, which a child shares). Atomic. */
	int known_fl, known_fdfl;
	struct rsk_sock *next_free;
};

/* A socket option set on a new socket, kept for a bearer to set again (newopts). */
#define RSK_SOCK_NEWOPTS 8
struct rsk_sock_newopt {
	int level, name;
	socklen_t len;
	unsigned char val[16]; /* (a struct timeval: SO_RCVTIMEO) */
};
struct rsk_sock_newopts {
	int n;
	struct rsk_sock_newopt o[RSK_SOCK_NEWOPTS];
};

#define RSK_SOCK_OPT_KNOWN 1
#define RSK_SOCK_OPT_NODELAY 2
#define RSK_SOCK_OPT_CORK 4

/* The options of a socket made now with @bits (RSK_SOCK_OPT_*: a new socket's are the
 * kernel's defaults, KNOWN alone; an accepted one's its listener's, rsk_sock_tcp_opts). */
void rsk_sock_opts_set(struct rsk_sock *s, int bits);
/* The application set TCP_NODELAY or TCP_CORK (@name) on tracked @fd to @on, successfully. */
void rsk_sock_opt_seen(int fd, int name, int on);
/* RSK_SOCK_OPT_* bits of @s if known (KNOWN set), else 0: ask the kernel. */
int rsk_sock_tcp_opts(const struct rsk_sock *s);
/* F_GETFL (@cmd F_GETFL) or F_GETFD (F_GETFD) of @s's number @fd: as known, or asked of
 * the kernel (-errno on failure). A connect asks both; most sockets told us at socket(). */
int rsk_sock_getfl(struct rsk_sock *s, int fd, int cmd);
/* The application changed tracked @fd's flags: fcntl @cmd (F_SETFL, F_SETFD) with @arg
 * succeeded. Any other @cmd (a dup's, FIONBIO's: 0) makes them unknown. */
void rsk_sock_fl_seen(int fd, int cmd, unsigned long arg);
/* The application set option @level/@name to @val (@len bytes) on tracked @fd,
 * successfully: kept in newopts while the socket is new, if a bearer carries it (else
 * app_opts). */
void rsk_sock_opt_new(int fd, int level, int name, const void *val, socklen_t len);
/* ... and it is one a connection carries (calls/sockopt.c rsk_opt_adopt_kernel): while new
 * or listening, the socket's opts_set. */
void rsk_sock_opt_carried(int fd);
/* @s's newopts, taken (the caller frees them; NULL: none): only its connect needs them. */
struct rsk_sock_newopts *rsk_sock_newopts_take(struct rsk_sock *s);
/* The application bound tracked socket @fd (bind() succeeded). */
void rsk_sock_bind_seen(int fd);

/* Is this (domain, type) a socket the library manages? (AF_INET/AF_INET6 stream only.) */
int rsk_sock_wanted(int domain, int type);

/*
 * Start tracking kernel socket @fd. Returns 0 or -errno (-ENOMEM, -EBADF); on error the fd
 * simply stays untracked and works as a plain kernel socket.
 */
int rsk_sock_track(int fd, int domain, int state);
/* rsk_sock_track(@fd, @domain, RSK_SOCK_NEW) for a socket socket() just made with @type
 * (its SOCK_NONBLOCK and SOCK_CLOEXEC: the flags a connect will not have to ask). */
int rsk_sock_track_made(int fd, int domain, int type);

/* Take a reference on the socket in @fd's slot, or NULL if none. Pair with rsk_sock_put(). */
struct rsk_sock *rsk_sock_get(int fd);

/* Drop a reference; the last one returns the object to the pool. The last call in progress
 * on a socket closed under it releases its connection (release_late). */
void rsk_sock_put(struct rsk_sock *s);

/*
 * The reference taken by rsk_sock_get becomes one held for long, and no call's (an epoll
 * mirror's candidate): a close then releases the connection without waiting for it. 0 when
 * @s is closed already: the reference stays a call's, to drop with rsk_sock_put.
 */
int rsk_sock_keep(struct rsk_sock *s);
/* Drop a reference rsk_sock_keep made. */
void rsk_sock_put_kept(struct rsk_sock *s);

/* The fd a call on @s that began at the application's @fd names the app end by: @fd, or, once
 * the application closed it under the call, the hidden dup the close made (release_late).
 * Read under the connection's lock it stays valid until the lock is dropped. */
static inline int rsk_sock_call_fd(const struct rsk_sock *s, int fd)
{
	int late = __atomic_load_n(&s->late_fd, __ATOMIC_ACQUIRE);

	return __builtin_expect(late != 0, 0) ? late - 1 : fd;
}

/* @newfd now names the same socket as @oldfd (dup family). Returns 0 or -errno. */
int rsk_sock_dup(int oldfd, int newfd);

/*
 * @fd is about to be closed by the application (the real close follows). Detaches the slot
 * and, when it was the last fd of its socket, accounts the connection's bytes and releases
 * its connection or listener. Returns 1 when @fd was tracked, 0 if not.
 */
int rsk_sock_release_fd(int fd);

/* Count @s's connection once (a kernel one with its fallback reason, policy by @port). */
void rsk_sock_count(struct rsk_sock *s, uint16_t port);

/*
 * Make tracked socket @s (at @fd) an accelerated one on connection @c: the application's
 * number names the app end @app from now on (registrations it made on the TCP file follow),
 * @ctl is the app end's partner if we keep it (else -1), @tcp the TCP placeholder or -1;
 * @dest the connect's destination (a client) or NULL. 0 or -errno (nothing changed then;
 * the caller still owns @app and @tcp).
 */
int rsk_sock_become(struct rsk_sock *s, int fd, struct rsk_conn *c, int app, int ctl, int tcp,
		    const struct sockaddr *dest);

/* Registration of @s in epoll set @epfd by @op (@ev: its events and data) noted, for
 * rsk_sock_become to replay (every set; past RSK_SOCK_EPREGS on the heap). The caller holds
 * s->lock. */
void rsk_sock_epreg(struct rsk_sock *s, int epfd, int op, const struct epoll_event *ev);

/* @s's noted registration number @i (< s->nepregs). s->lock held, or @i < RSK_SOCK_EPREGS. */
static inline struct rsk_epreg *rsk_sock_epreg_at(struct rsk_sock *s, int i)
{
	return i < RSK_SOCK_EPREGS ? &s->epregs[i] : &s->epregs_more[i - RSK_SOCK_EPREGS];
}

/* The registrations noted for @s (rsk_sock_epreg) made again for the file now at @fd: the
 * new file behind the number (rsk_sock_become; a listener's face put back, face.c). */
void rsk_sock_epreg_replay(struct rsk_sock *s, int fd);

/* How many sockets became accelerated in place so far (rsk_sock_become): a waiter that judged
 * fds before (an epoll mirror) looks at them again when it changes. Counted once the fd is
 * accelerated and its registrations replayed. */
unsigned int rsk_sock_becomes(void);
/* Count one (rsk_sock_become does, last; tests stand in for a move with it). */
void rsk_sock_count_become(void);

/* The bytes kernel socket @s (at @fd) carried so far that are this process's to report (its
 * TCP_INFO counts less what a parent owned, rsk_sock_baseline). 0 or -errno. */
int rsk_sock_kernel_bytes(const struct rsk_sock *s, int fd, uint64_t *sent, uint64_t *rcvd);

/* Account every socket still open (at exit): their kernel byte counts enter the stats. */
void rsk_sock_account_open(void);

/* Walk every accelerated socket once (dups share one object): @fn(s, fd) for each. */
void rsk_sock_walk_accel(void (*fn)(struct rsk_sock *s, int fd));

/* The exit: @fn(s, -1) for every socket closed under a call whose release still waits for
 * it (release_late), which @fn then owns: a call's return releases it no more. */
void rsk_sock_walk_late(void (*fn)(struct rsk_sock *s, int fd));

/* A forked child: the sockets closed under a call of the parent's are not its own (it holds
 * none of their connections, and has none of those threads): forget them. */
void rsk_sock_late_forget(void);

/* Walk every tracked fd: @fn(s, fd, v) with a reference held (v: the raw slot value). */
void rsk_sock_walk(void (*fn)(struct rsk_sock *s, int fd, uintptr_t v));

/* The socket object of fd-table slot @v if it is a tracked kernel socket (a listener, say),
 * else NULL: untracked, accelerated, or one of the library's own. Reads the slot only. */
/* @s listens through a transport's listener (not only the kernel's): what the listener
 * notes (fork, leak, pause) are for. */
static inline int rsk_sock_listens(const struct rsk_sock *s)
{
	return s->state == RSK_SOCK_LISTENING && s->lst != NULL;
}

static inline struct rsk_sock *rsk_sock_kernel_of(uintptr_t v)
{
	if (!(v & RSK_FDTAB_TAG_KERNEL) || rsk_fd_slot_internal(v))
		return NULL;
	return rsk_fdtab_ptr(v);
}

/*
 * exec or spawn: the listening sockets the new program is handed (@handed(fd, cloexec,
 * @arg) says so; @cloexec: the number has FD_CLOEXEC) will be accepted on where no library
 * sees it; their transports' listeners take no new clients from now on (RSK_LISTEN_LEAKED).
 * Reads the fd table and writes no memory of the process: a vfork child runs it with its
 * parent's.
 */
void rsk_sock_exec_listeners(int (*handed)(int fd, int cloexec, void *arg), void *arg);

/* The fds naming @s stop being served by us: their slots become kernel-watched. */
void rsk_sock_retag_kernel(struct rsk_sock *s);

/* The same, and each of those numbers now names @file (dup3, keeping its close-on-exec):
 * a connection relayed through a pipe of its own (conn/relay.c). Returns how many numbers
 * were switched, or -errno when none was. */
int rsk_sock_swap_file(struct rsk_sock *s, int file);

/* TCP first (calls/upgrade.c): @fd's data-path calls come to the library (@on) or go to the
 * kernel again. */
void rsk_sock_divert(struct rsk_sock *s, int fd, int on);
/* The hook run when the last fd naming @s closes, before its connection is released and
 * accounted (the calls layer: TCP-first state, destination history). */
void rsk_sock_set_close_hook(void (*fn)(struct rsk_sock *s, int fd));
/* Its TCP part's byte counts into the stats now (the TCP socket is about to go). */
void rsk_sock_account_tcp(struct rsk_sock *s, int fd);

/* A forked child's view of @s when its connection stays the parent's. */
void rsk_sock_detach(struct rsk_sock *s);

/* The kernel byte counts @s's TCP socket @fd carried so far are not ours (a forked child). */
void rsk_sock_baseline(struct rsk_sock *s, int fd);

#endif
