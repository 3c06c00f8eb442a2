/*
 * The accelerated calls' orchestration, as preload/ invokes it: connect (a faster path, or
 * the kernel connect's bookkeeping), listen/accept (the transports' listeners and the claim
 * of accepted connections), and the process's life-cycle hooks (epoll registrations, fork,
 * exit). All return >= 0 or -errno.
 */
#ifndef RSK_CALLS_H
#define RSK_CALLS_H

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>

/*
 * connect() on tracked socket @fd: try to accelerate it. Returns 1 when the connect was
 * handled here (its result, 0 or -errno, in *rc), 0 when the caller must do the kernel
 * connect (the fallback reason is recorded for the stats).
 */
int rsk_connect(int fd, const struct sockaddr *addr, socklen_t len, int *rc);

struct rsk_sock;

/* connect() again on accelerated @fd (it reports EISCONN): as rsk_hist_setup_seen. */
void rsk_connect_again(int fd);

/* Client side: the kernel connect() on @fd returned @rc (0 or -errno). */
void rsk_connect_done(int fd, int rc);

/* getsockopt(SO_ERROR) on @fd reported @err: settles a pending non-blocking connect. */
void rsk_connect_so_error(int fd, int err);

/* listen() succeeded on @fd: also listen with the transports where allowed. */
void rsk_accept_listen_done(int fd, int backlog);

/*
 * accept() is about to run on tracked @fd: this process accepts on it. 0, or -EMFILE when
 * the process is too short of fds to take a client that committed to a faster path (it
 * stays in the backlog, as over TCP with a full fd table, rather than be reset).
 */
int rsk_accept_begin(int fd);

/*
 * accept() on listener @fd: a client queued at its same-host bearer rendezvous (sock/
 * bearer.h), as accept4 with @flags would return it, its TCP address in @addr; -EAGAIN when
 * there is none (the listener has no rendezvous, or nobody waits there): accept from TCP.
 * A non-blocking listener whose last connection came over TCP looks there first: *@later
 * set, the rendezvous is looked at only if TCP says EAGAIN (rsk_accept_bearer_later), so a
 * listener whose clients come over TCP (from other hosts) pays no empty look per connection.
 */
int rsk_accept_bearer(int fd, struct sockaddr *addr, socklen_t *len, int flags, int *later);
/* The look rsk_accept_bearer left for later, after TCP's accept said EAGAIN. */
int rsk_accept_bearer_later(int fd, struct sockaddr *addr, socklen_t *len, int flags);

/*
 * accept() on @lfd returned kernel socket @fd (accept4 @flags) and its peer's address (@len
 * bytes at @addr, as accept() reported it; NULL if not asked for or truncated): track it
 * and, if a preloaded client offered a faster path, switch it over. Returns @fd, or -errno
 * when the connection had to be dropped (-ECONNABORTED, as the kernel reports a connection
 * lost before accept).
 */
int rsk_accept_done(int lfd, int fd, int flags, const struct sockaddr *addr, socklen_t len);

/* epoll_ctl on tracked @fd: remembered while the socket may still change its file. */
void rsk_life_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev);

/* fork(): before (every process that will hold a connection is counted), and after. */
void rsk_life_fork_prepare(void);
void rsk_life_fork_failed(void);
void rsk_life_forked(pid_t child); /* in the parent, once the child exists */
void rsk_life_fork_child(void);

/*
 * The process set up an io_uring: what it does there (accept, recv, send on any fd) no
 * preload sees. New connections stay on the kernel from now on, and the transports'
 * listeners take no new clients.
 */
void rsk_life_io_uring(void);

/*
 * @fd is about to be used through stdio (fdopen, or dup'ed onto 0-2): glibc's stdio reads
 * and writes through its internal calls, which no preload sees. A connection still on TCP
 * stays there; one already accelerated is relayed (its fd then carries the data) where the
 * transport allows it.
 */
void rsk_life_stdio(int fd);

/*
 * sendmsg: @msg passes fds (SCM_RIGHTS). Another process may wait on each of them (the fast
 * waits stop answering for them), and a listening socket of ours among them may be accepted
 * on by a process whose accepts no library sees (docs/design.md, "A listener another program
 * accepts on"): its transports' listeners take no new clients from now on.
 */
void rsk_life_fds_passed(const struct msghdr *msg);

/* A relay that another process can run (shm) goes on in a helper process of its own from
 * its start, so that it outlives this one (1, the default). 0 keeps relays in this process
 * (unit tests of the in-process paths: the exit flush, the exec hand-off). */
extern int rsk_life_relay_helper;

/* The program an exec or a spawn starts: its arguments (system() and popen() give one, the
 * shell's command line), its environment, and its pid (0: not known yet, a spawn). */
struct rsk_newprog {
	char *const *argv;
	char *const *envp;
	pid_t pid;
};

/* exec: before the real call, hand this image's relays that still run here (stdio sockets
 * whose helper could not be forked) to a helper process that outlives it; 1 if one was
 * started. exec_failed: the call returned: they come back. */
int rsk_life_exec_prepare(char *const argv[], char *const envp[]);

/*
 * Will program @p be handed listening socket @fd (and accept on it where no library of ours
 * sees it)? Only the conventions that hand a listener over count (docs/design.md, "A
 * listener another program accepts on"): 0-2, LISTEN_FDS (with a LISTEN_PID that names @p,
 * or, before its pid is known, does not name this process), the fd lists of nginx's binary
 * upgrade and of a few hot-restart tools, and an argument that names @fd as a descriptor
 * ("--fd=3", "fd://3", "ACCEPT-FD:3", "--fds 3,4", "/dev/fd/3").
 */
int rsk_life_hands(int fd, const struct rsk_newprog *p);
void rsk_life_exec_failed(void);

/*
 * Spawns (calls/spawn.c): programs started by posix_spawn, system() or popen(), whose exec
 * runs inside libc where no wrapper sees it. spawn_dup2: action object @fa will dup2 @fd onto
 * @newfd in the new program (recorded when @fd is a listener); spawn_forget: @fa was
 * initialised or destroyed. spawn_prepare: before the real call, with @fa (NULL: none) and
 * the new program's arguments @argv and environment @envp: the listeners it is handed by a
 * convention take no new clients from now on, as at an exec.
 */
void rsk_spawn_dup2(const void *fa, int fd, int newfd);
void rsk_spawn_forget(const void *fa);
void rsk_spawn_prepare(const void *fa, char *const argv[], char *const envp[]);

/* Library start: the hooks the lower layers call (after the configuration is read). */
void rsk_life_init(void);

/* Process exit: end every accelerated stream this process is the last holder of. */
void rsk_life_exit(void);
/* _exit/_Exit: the same, bounded in time, unless this is a vfork child (see lifecycle.c). */
void rsk_life_quick_exit(void);

#endif
