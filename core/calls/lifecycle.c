/*
 * The process's life-cycle hooks: epoll registrations of sockets still being set up, fork
 * (what a child gets: shared connections where the transport allows, relays or detached
 * copies where it does not), and exit and _exit (an orderly end for our streams, as the
 * kernel gives TCP).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/cmsgfd.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/proc.h"
#include "base/standin.h"
#include "base/stats.h"
#include "base/statseg.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "base/thread.h"
#include "calls.h"
#include "fastwait.h"
#include "history.h"
#include "upgrade.h"
#include "conn/conn.h"
#include "conn/relay.h"
#include "sock/face.h"
#include "sock/listener.h"
#include "sock/sock.h"
#include "transport/registry.h"

void rsk_life_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct rsk_sock *s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	if (op != EPOLL_CTL_DEL && rsk_sock_listens(s))
		rsk_listener_note(s->lst, RSK_LISTEN_INTEREST); /* an event loop will accept */
	if (op == EPOLL_CTL_DEL && __atomic_load_n(&s->nepregs, __ATOMIC_RELAXED) == 0) {
		rsk_sock_put(s); /* nothing recorded to take back (a TCP-first socket's, mostly) */
		return;
	}
	pthread_mutex_lock(&s->lock);
	rsk_sock_epreg(s, epfd, op, ev);
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
}

/* ---- epoll registrations that must follow a relay's pipe ---- */

#define RSK_LIFE_EPREGS 16

struct rsk_life_epreg {
	int epfd, fd;
	struct epoll_event ev;
};

/* Is epoll set @epfd's registration of @fd one of @s's numbers? (Its fdinfo line.) */
static int rsk_life_names(struct rsk_sock *s, int fd)
{
	uintptr_t v = rsk_fdtab_load(fd);

	return rsk_fdtab_is_accel(v) && rsk_fdtab_ptr(v) == s;
}

struct rsk_life_regs {
	struct rsk_sock *s;
	struct rsk_life_epreg *out;
	int epfd, n, max;
};

static int rsk_life_reg_one(void *arg, int fd, uint32_t events, uint64_t data)
{
	struct rsk_life_regs *r = arg;

	if (!rsk_life_names(r->s, fd))
		return 0;
	r->out[r->n].epfd = r->epfd;
	r->out[r->n].fd = fd;
	r->out[r->n].ev.events = events;
	r->out[r->n].ev.data.u64 = data;
	return ++r->n == r->max; /* full: the rest are not taken */
}

/* The registrations epoll set @epfd holds for @s's numbers, from the kernel (the whole set). */
static int rsk_life_epoll_regs(struct rsk_sock *s, int epfd, struct rsk_life_epreg *out,
			       int max)
{
	struct rsk_life_regs r = {s, out, epfd, 0, max};

	if (max > 0)
		(void)rsk_fw_each_reg(epfd, rsk_life_reg_one, &r);
	return r.n;
}

/*
 * Registrations of @s's numbers in the process's epoll sets: taken off the app end (epoll
 * keys them by file, and our copy of it would keep them alive and reporting the app end's
 * tokens), to be put on the pipe once it is behind the numbers. Found from /proc (the fast
 * path records no registration of an accelerated socket); only at the switch.
 */
struct rsk_life_take {
	struct rsk_sock *s;
	struct rsk_life_epreg *regs;
	int n, max;
};

/* One fd of the process: if it is an epoll set, take its registrations of the socket. */
static int rsk_life_take_one(int fd, void *arg)
{
	struct rsk_life_take *t = arg;
	char link[32], path[32];
	ssize_t len;
	int i, k;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	len = readlink(path, link, sizeof(link) - 1);
	if (len <= 0)
		return 0;
	link[len] = '\0';
	if (strcmp(link, "anon_inode:[eventpoll]") != 0)
		return 0;
	k = rsk_life_epoll_regs(t->s, fd, t->regs + t->n, t->max - t->n);
	for (i = t->n; i < t->n + k; i++)
		(void)rsk_sys_epoll_ctl(t->regs[i].epfd, EPOLL_CTL_DEL, t->regs[i].fd, NULL);
	t->n += k;
	return t->n >= t->max;
}

static int rsk_life_epoll_take(struct rsk_sock *s, struct rsk_life_epreg *regs, int max)
{
	struct rsk_life_take t = {.s = s, .regs = regs, .max = max};

	(void)rsk_proc_each_fd(rsk_life_take_one, &t);
	return t.n;
}

static void rsk_life_epoll_put(struct rsk_life_epreg *regs, int n)
{
	int i;

	for (i = 0; i < n; i++)
		(void)rsk_sys_epoll_ctl(regs[i].epfd, EPOLL_CTL_ADD, regs[i].fd, &regs[i].ev);
}

/*
 * Serve @s's connection (at @fd) through a pipe from now on (conn/relay.c): the relay holds
 * the connection, and the application's numbers name a plain kernel socket, the app end
 * itself or a fresh pipe's end put behind each of them. 0 or -errno (nothing changed).
 */
static void rsk_life_hand_relays(void);

static int rsk_life_relay(struct rsk_sock *s, int fd)
{
	struct rsk_life_epreg regs[RSK_LIFE_EPREGS];
	int pipe_app, nregs, rc;

	if (rsk_fw_on()) /* no epoll mirror may answer the fd from the connection any more */
		rsk_fw_fd_relayed(fd);
	rc = rsk_relay_start(s->conn, fd, &pipe_app);
	if (rc < 0)
		return rc;
	if (pipe_app < 0) {
		rsk_sock_retag_kernel(s);
		return 0;
	}
	nregs = rsk_life_epoll_take(s, regs, RSK_LIFE_EPREGS);
	rc = rsk_sock_swap_file(s, pipe_app);
	rsk_life_epoll_put(regs, nregs);
	(void)rsk_sys_close(pipe_app);
	if (rc < 0) /* no number could be switched: nothing of the application's names it */
		rsk_warn("fd %d: relay started but not put behind the fd (%s)", fd, strerror(-rc));
	rsk_life_hand_relays(); /* the pipe's bytes must outlive this process */
	return 0;
}

/*
 * Before a fork, per accelerated socket: a child shares a connection whose endpoint can be
 * shared (counted as a holder now). One that cannot (verbs: a QP belongs to its process)
 * and has not moved a byte yet is most likely a fork-per-connection server handing it to
 * its child: it is relayed from now on (relay.c), its app end carrying the data itself for
 * the child and for us alike. Others stay ours: the child gets a detached copy.
 */
static void rsk_life_prefork_one(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;
	const struct rsk_cm_ops *cm = rsk_transport_cm(c->ep);

	if (cm->fork_share) {
		if (s->held_fork != rsk_proc_forks()) /* not counted while it was moving */
			rsk_conn_prefork(c, fd);
		return;
	}
	if ((cm->foreign == NULL || !cm->foreign(c->ep)) && c->st.bytes_sent == 0 &&
	    c->st.bytes_rcvd == 0)
		(void)rsk_life_relay(s, fd);
}

static void rsk_life_prefork_fd(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)v;
	if (rsk_sock_listens(s))
		rsk_listener_note(s->lst, RSK_LISTEN_FORKED);
	if (s->conn == NULL && s->upg != NULL)
		rsk_upg_prefork(s, fd); /* a move under way: the child holds its stream too */
}

static void rsk_life_unhold_upg(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)fd;
	(void)v;
	if (s->conn == NULL && s->upg != NULL)
		rsk_upg_fork_failed(s);
}

/*
 * Can stdio's bytes be relayed in order with what the library already moved? A connection
 * whose peer wakes its app end (shm) gets a fresh pipe, at any point of its life. One whose
 * app end becomes the pipe itself (verbs) only before its first byte: tokens the application
 * already took and the stream's state then need no reconciling.
 */
static int rsk_life_stdio_relayable(const struct rsk_conn *c)
{
	return c->ctl_fd < 0 || (c->st.bytes_sent == 0 && c->st.bytes_rcvd == 0);
}

void rsk_life_stdio(int fd)
{
	struct rsk_sock *s;
	struct rsk_conn *c;

	if (rsk_fw_on() || rsk_config.fastwait) /* before any is lazy too: a poll may make it so */
		rsk_fw_fd_shared(fd); /* stdio's reads are glibc's own: no lazy token for them */
	s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	c = s->conn;
	if (c == NULL && s->upg != NULL) {
		rsk_upg_never(s, fd); /* decided before a byte moved: stdio sees a kernel socket */
	} else if (c != NULL && rsk_life_stdio_relayable(c) && rsk_life_relay(s, fd) == 0) {
		rsk_info("fd %d: used through stdio: relayed", fd); /* the pipe carries the data */
	} else if (c != NULL) {
		rsk_warn("fd %d: used through stdio, which the library cannot see, on an "
			 "accelerated connection that cannot be relayed; RDMASOCK_TCP_FIRST=on keeps "
			 "connections on TCP until stdio would be safe",
			 fd);
	}
	rsk_sock_put(s);
}

static void rsk_life_passed_one(int fd, void *arg)
{
	struct rsk_sock *s;

	(void)arg;
	if (rsk_config.fastwait) /* another process may wait on it (also before any connection
				  * is lazy: a poll or a recv may make it lazy later) */
		rsk_fw_fd_shared(fd);
	if ((s = rsk_sock_get(fd)) == NULL)
		return;
	if (rsk_sock_listens(s)) {
		rsk_info("fd %d: listening socket passed to another process: new clients of its "
			 "stay on TCP",
			 fd);
		rsk_listener_note(s->lst, RSK_LISTEN_LEAKED);
	}
	rsk_sock_put(s);
}

void rsk_life_fds_passed(const struct msghdr *msg)
{
	rsk_cmsg_fds_each(msg, rsk_life_passed_one, NULL);
}

static void rsk_life_pause_listener(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)fd;
	(void)v;
	if (rsk_sock_listens(s))
		rsk_listener_note(s->lst, RSK_LISTEN_PAUSE);
}

void rsk_life_io_uring(void)
{
	rsk_fw_all_eager(); /* the ring polls fds where no preload sees it */
	rsk_standin_off();  /* and may close them */
	/* The ring may accept on a listener's number, which must be the socket then. */
	if (rsk_face_restore_all(1) > 0)
		rsk_info("io_uring set up: listeners are plain sockets again (no bearer)");
	if (!rsk_policy_kernel_only())
		return;
	rsk_info("io_uring set up: new connections of this process stay on the kernel");
	rsk_sock_walk(rsk_life_pause_listener); /* accept()s through the ring never claim */
}

void rsk_life_fork_prepare(void)
{
	rsk_fw_all_eager(); /* the child may wait on any fd or epoll set we share */
	rsk_proc_forking();
	/*
	 * Moving sockets first, then accelerated ones. A move can still end meanwhile (in
	 * another thread: a side that switched only reads up to the peer's FIN), but none can
	 * start (rsk_upg_movable: the fork is counted already). The other order missed one
	 * that ended between the walks: not accelerated yet in the first, no longer moving in
	 * the second, so the child held its stream uncounted and one "last" close came early.
	 * Now one counted while moving is marked (s->held_fork) and not counted again.
	 */
	rsk_sock_walk(rsk_life_prefork_fd);
	rsk_sock_walk_accel(rsk_life_prefork_one);
}

static void rsk_life_unhold_one(struct rsk_sock *s, int fd)
{
	(void)fd;
	if (rsk_transport_cm(s->conn->ep)->fork_share)
		rsk_conn_prefork_undo(s->conn);
}

void rsk_life_forked(pid_t child)
{
	rsk_transport_forked(child);
}

void rsk_life_fork_failed(void)
{
	rsk_sock_walk_accel(rsk_life_unhold_one);
	rsk_sock_walk(rsk_life_unhold_upg);
}

/*
 * In the child, per tracked fd: a connection the child cannot share is the parent's alone
 * (data calls fail with ENOTCONN, close and exit touch nothing, and the parent's connection
 * goes on intact: redis' BGSAVE child); listeners keep only what can follow a fork; kernel
 * sockets start a fresh account (what they carried so far is the parent's to report).
 */
static void rsk_life_child_one(struct rsk_sock *s, int fd, uintptr_t v)
{
	if (rsk_fdtab_is_accel(v) && s->conn != NULL &&
	    !rsk_transport_cm(s->conn->ep)->fork_share)
		rsk_sock_detach(s);
	if (rsk_sock_listens(s))
		rsk_listener_forget(s->lst);
	if (!rsk_fdtab_is_accel(v))
		rsk_sock_baseline(s, fd);
}

void rsk_life_fork_child(void)
{
	rsk_proc_forked_child();
	rsk_evloop_atfork_child();
	rsk_conn_atfork_child();
	rsk_transport_atfork_child();
	rsk_relay_atfork_child(); /* relays stay the parent's work */
	rsk_face_atfork_child();
	rsk_sock_walk(rsk_life_child_one);
	rsk_sock_late_forget(); /* closed under a call of the parent's: the parent's alone */
	rsk_statseg_atfork_child(); /* the child's own live stats segment */
}

static void rsk_life_exit_one(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;

	(void)fd;
	__atomic_store_n(&s->conn, NULL, __ATOMIC_RELEASE);
	rsk_conn_release_exiting(c); /* (a call of another thread may still be inside it) */
}

void rsk_life_exit(void)
{
	rsk_relay_exit_all(); /* what the application wrote into relay pipes goes out first */
	rsk_sock_walk_accel(rsk_life_exit_one);
	rsk_sock_walk_late(rsk_life_exit_one); /* closed while a call of another thread runs */
}

/*
 * _exit (and _Exit): no destructor runs, yet the kernel closes a dying process's TCP sockets
 * in order, FIN after every byte its send() returned for (verbs cannot leave them behind as
 * shm does: rsk_ep_stage). So our streams get exit()'s end here too, on another thread:
 * _exit may come from a signal handler that interrupted this thread inside the library or
 * libc, holding a lock the flush needs (a connection's, malloc's); then the wait ends at its
 * bound (each linger is bounded by RSK_LINGER_MS) and the process goes as it would have
 * without us. The event loop's thread does it when it runs: asking it takes an atomic and a
 * write, both safe in a signal handler. Only a process without one (a forked child that has
 * not needed it yet) starts a thread for it, which allocates: the one case where an _exit
 * from a handler that interrupted malloc could wait on malloc's lock, as before any of this
 * an exit() from such a handler could.
 */
#define RSK_LIFE_QUICK_EXIT_MS 2500

static sem_t rsk_life_quick_done;

static void rsk_life_quick_run(void)
{
	rsk_life_exit();
	sem_post(&rsk_life_quick_done);
}

static void *rsk_life_quick_body(void *arg)
{
	(void)arg;
	rsk_life_quick_run();
	return NULL;
}

/* Start the flush elsewhere: 0, or -errno when it cannot run (then nothing is waited for). */
static int rsk_life_quick_start(void)
{
	int rc = rsk_evloop_run_async(rsk_life_quick_run);

	if (rc == -ESRCH)
		rc = rsk_thread_spawn(rsk_life_quick_body, NULL, NULL) < 0 ? -EAGAIN : 0;
	return rc;
}

void rsk_life_quick_exit(void)
{
	struct timespec end;

	/* A vfork child: its listeners and connections are its parent's. */
	if (rsk_proc_pid() != getpid())
		return;
	rsk_transport_quick_exit();
	/* Nothing of ours to end (most _exit calls: a forked child of a shell, say). */
	if (__atomic_load_n(&rsk_conn_live, __ATOMIC_RELAXED) == 0 && rsk_relay_count() == 0)
		return;
	if (sem_init(&rsk_life_quick_done, 0, 0) < 0 ||
	    clock_gettime(CLOCK_REALTIME, &end) < 0)
		return;
	end.tv_sec += RSK_LIFE_QUICK_EXIT_MS / 1000;
	end.tv_nsec += (RSK_LIFE_QUICK_EXIT_MS % 1000) * 1000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	if (rsk_life_quick_start() < 0)
		return;
	while (sem_timedwait(&rsk_life_quick_done, &end) < 0 && errno == EINTR)
		;
}

/* Is kernel socket @fd still sending its SYN? */
static int rsk_life_syn_sent(int fd)
{
	return rsk_sys_tcp_state(fd) == RSK_TCPS_SYN_SENT;
}

/*
 * A connect still under way when the application closes: the kernel's close ends it. Ours
 * would not while the server's rendezvous queue holds the socket a withdrawn offer lent it:
 * its SYN would go on, and the server accept a connection nobody owns (a full backlog's
 * timed-out clients). shutdown() ends a connect as close does. Only while no fork since the
 * offer can hold the socket too: a child's copy would keep it alive under the kernel.
 */
static void rsk_life_end_lent(struct rsk_sock *s, int fd)
{
	if (s->tcp_lent && rsk_proc_forks() == s->forks_at_lend && rsk_life_syn_sent(fd))
		(void)rsk_sys_shutdown(fd, SHUT_RDWR);
}

/* The last fd of a tracked socket closes: its TCP-first state goes, a lent connect that is
 * still under way ends, a setup it held is over, and a client's connection tells the destination history how long
 * it lived. */
static void rsk_life_closed(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;
	uint64_t bytes;

	rsk_hist_setup_seen(s); /* closed before the application saw its connect finish */
	rsk_life_end_lent(s, fd);
	if (s->upg != NULL) {
		rsk_upg_release(s, fd);
		return;
	}
	if (c == NULL || s->accepted || c->peer_len == 0)
		return; /* (only a client's connections tell its destination's history) */
	/* Another thread may still be inside a send on this connection (TSan saw one): its
	 * counters are read under the connection lock, as the stream writes them. */
	rsk_conn_lock(c);
	bytes = c->st.bytes_sent + c->st.bytes_rcvd;
	rsk_conn_unlock(c);
	rsk_hist_note((const struct sockaddr *)&c->peer,
		      rsk_hist_is_short(rsk_hist_age(&s->aged_ms), bytes,
					__atomic_load_n(&s->data_calls, __ATOMIC_RELAXED)));
}

/* ---- exec: this image's relays go on in a helper process ---- */

#define RSK_LIFE_KEEP_FDS 256

static int rsk_life_go_wr = -1; /* the hand-off's go pipe: closed by the exec, or a "no" */
int rsk_life_relay_helper = 1;

static int rsk_life_kept(const int *keep, int n, int fd)
{
	int i;

	for (i = 0; i < n; i++)
		if (keep[i] == fd)
			return 1;
	return 0;
}

struct rsk_life_keep {
	int fds[RSK_LIFE_KEEP_FDS];
	int n;
};

static int rsk_life_close_unkept(int fd, void *arg)
{
	const struct rsk_life_keep *k = arg;

	if (!rsk_life_kept(k->fds, k->n, fd))
		(void)rsk_sys_close(fd);
	return 0;
}

/* The helper holds nothing of the program's: an fd it kept would hold a pipe or a
 * listener open behind the program's back. 0-2 become /dev/null. */
static void rsk_life_helper_close(int go_rd)
{
	struct rsk_life_keep keep;
	int fd, nul;

	keep.n = rsk_relay_fds(keep.fds, RSK_LIFE_KEEP_FDS - 1);
	if (go_rd >= 0)
		keep.fds[keep.n++] = go_rd;
	(void)rsk_proc_each_fd(rsk_life_close_unkept, &keep);
	nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (fd = 0; nul >= 0 && fd <= 2; fd++)
		if (fd != nul)
			(void)rsk_sys_dup3(nul, fd, 0);
	if (nul > 2)
		(void)rsk_sys_close(nul);
}

/* The program's signal handlers are not the helper's (it runs none of its code). */
static void rsk_life_helper_signals(void)
{
	struct sigaction sa;
	sigset_t none;
	int sig;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL);
	sigemptyset(&none);
	(void)pthread_sigmask(SIG_SETMASK, &none, NULL);
}

/* The exec'd-away image never writes its stats line: the helper writes it, relays included. */
static void rsk_life_helper_stats(void)
{
	struct rdmasock_stats st;

	if (rsk_config.stats_file[0] == 0)
		return;
	rsk_stats_snapshot(&st);
	(void)rsk_stats_append(rsk_config.stats_file, &st);
}

/* The helper (a grandchild, adopted by init) runs the relays taken for it until every one
 * is over. For an exec (@arg: the go pipe; the helper keeps its reading end), only once the
 * exec happened; if it failed, it leaves them to their process. Returns its exit status. */
static int rsk_life_helper(void *arg)
{
	const int *go = arg;
	int go_rd = go != NULL ? go[0] : -1;
	ssize_t k = 0;
	char b;
	int n;

	rsk_thread_fork_child(); /* the gate we were forked through is the program's */
	if (go != NULL)
		(void)rsk_sys_close(go[1]);
	rsk_proc_forked_child();
	rsk_life_helper_signals();
	/* Out of the program's session and process group: a Ctrl-C, a terminal's hang-up or a
	 * killpg aimed at the program would end the helper with the program's last bytes still
	 * in its pipes, which the kernel goes on sending for a TCP socket whose process died. */
	(void)setsid();
	rsk_evloop_atfork_child();
	rsk_transport_atfork_child();
	rsk_conn_atexec_helper(rsk_relay_taken);
	rsk_life_helper_close(go_rd);
	while (go_rd >= 0 && (k = rsk_sys_read(go_rd, &b, 1)) == -EINTR)
		;
	if (k != 0)
		return 0; /* the exec failed (a byte), or we cannot tell: the relays stay there */
	if (go_rd >= 0)
		(void)rsk_sys_close(go_rd);
	else /* the program's own line reports its history; ours, what the relays move */
		rsk_stats_reset();
	rsk_dbg("relays of pid %d taken over by pid %d", (int)getppid(), (int)getpid());
	n = rsk_relay_adopt_all();
	rsk_relay_wait_done(n);
	rsk_life_helper_stats();
	return 0;
}

/*
 * Start the helper for the relays taken for it, as a process the program never sees as a
 * child (base/proc.h: no SIGCHLD, nothing for its waitpid(-1)), adopted by init. @go: the
 * exec hand-off's go pipe, or NULL: it starts now. With the fork gate (base/thread.h): no
 * thread of ours holds a lock the helper needs. 0 once the helper exists, or -errno.
 */
static int rsk_life_spawn(int *go)
{
	int rc;

	rsk_thread_fork_prepare();
	rc = rsk_proc_spawn_orphan(rsk_life_helper, go);
	rsk_thread_fork_parent();
	return rc;
}

/*
 * A relay started: it goes on in a helper of its own at once, so that it outlives this
 * process however it ends (_exit, a signal, a crash), as the kernel goes on sending a dead
 * process's TCP queue and then ends it. One helper per relay: the connection lives in an
 * anonymous shared region that only a fork can share, so a helper forked earlier could not
 * take a later connection over. Relays no other process can run (verbs) stay here, as do
 * all of them if the helper cannot be forked. Not in a vfork child (its parent's memory).
 */
static void rsk_life_hand_relays(void)
{
	int rc;

	if (!rsk_life_relay_helper || rsk_proc_pid() != getpid() || !rsk_relay_hand_prepare())
		return;
	rc = rsk_life_spawn(NULL);
	if (rc < 0) {
		rsk_warn("relay helper not forked (%s): the relay ends with this process",
			 strerror(-rc));
		rsk_relay_hand_failed();
		return;
	}
	rsk_relay_hand_done();
}

/*
 * The library cannot see whether the new program will accept on a listener it inherits, and
 * a server that never set FD_CLOEXEC and execs a helper (a CGI; a test's peer) is common: to
 * stop its listener taking clients would cost all its acceleration for nothing. So only the
 * conventions that hand a listener over count: stdin/stdout/stderr (inetd's wait services,
 * systemd's StandardInput=socket), LISTEN_FDS (sd_listen_fds: 3 .. 3+n-1, for LISTEN_PID if
 * set), and an fd list in the variables of nginx's binary upgrade, Server::Starter, einhorn,
 * unicorn and gunicorn. Reads @envp only (a vfork child's exec).
 */
static const char *const rsk_handoff_vars[] = {"NGINX=", "SERVER_STARTER_PORT=",
					       "EINHORN_FDS=", "UNICORN_FD=", "GUNICORN_FD="};

/* Does @list name @fd as one of its integers (any other character separates)? */
static int rsk_life_list_names(const char *list, int fd)
{
	long v;
	char *end;

	while (*list != '\0') {
		if (*list < '0' || *list > '9') {
			list++;
			continue;
		}
		v = strtol(list, &end, 10);
		if (v == fd)
			return 1;
		list = end;
	}
	return 0;
}

/* The integer after "@name=" in @e, or -1 when @e is not that variable. */
static long rsk_life_env_long(const char *e, const char *name)
{
	size_t n = strlen(name);

	return strncmp(e, name, n) == 0 && e[n] == '=' ? strtol(e + n + 1, NULL, 10) : -1;
}

/* @s at @p, past the letters "fd" (an "s" after them allowed): separators, then a list of
 * integers naming @fd. The next word @next carries the list when @s ends at the separators
 * (an argument vector's "--fd", "3"). */
static int rsk_life_fd_tail(const char *p, const char *next, int fd)
{
	const char *q;

	if (*p == 's' || *p == 'S')
		p++;
	for (q = p; *q != '\0' && strchr(":=/ _-", *q) != NULL; q++)
		;
	if (*q == '\0' && next != NULL)
		q = next; /* "--fd" "3" */
	else if (q == p)
		return 0; /* "fdx", "fd3": another word */
	while (*q >= '0' && *q <= '9') {
		char *end;

		if (strtol(q, &end, 10) == fd)
			return 1;
		q = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* Does argument @s (followed by @next, or NULL) name @fd as a file descriptor: "fd" in any
 * case, then separators and a list of integers ("fd://3", "--listen-fd=3", "ACCEPT-FD:3",
 * "--fds 3,4", "/dev/fd/3", a shell command line's "--fd 3")? */
static int rsk_life_arg_names(const char *s, const char *next, int fd)
{
	const char *p;

	for (p = s; (p = strcasestr(p, "fd")) != NULL;) {
		p += 2;
		if (rsk_life_fd_tail(p, next, fd))
			return 1;
	}
	return 0;
}

static int rsk_life_argv_names(char *const argv[], int fd)
{
	for (; argv != NULL && *argv != NULL; argv++)
		if (rsk_life_arg_names(argv[0], argv[1], fd))
			return 1;
	return 0;
}

int rsk_life_hands(int fd, const struct rsk_newprog *p)
{
	long nfds = 0, pid = -1, v;
	char *const *envp;
	size_t i;

	if (fd <= 2 || rsk_life_argv_names(p->argv, fd))
		return 1;
	for (envp = p->envp; envp != NULL && *envp != NULL; envp++) {
		if ((v = rsk_life_env_long(*envp, "LISTEN_FDS")) >= 0)
			nfds = v;
		else if ((v = rsk_life_env_long(*envp, "LISTEN_PID")) >= 0)
			pid = v;
		for (i = 0; i < sizeof(rsk_handoff_vars) / sizeof(rsk_handoff_vars[0]); i++)
			if (strncmp(*envp, rsk_handoff_vars[i], strlen(rsk_handoff_vars[i])) == 0 &&
			    rsk_life_list_names(*envp + strlen(rsk_handoff_vars[i]), fd))
				return 1;
	}
	if (fd >= 3 + nfds)
		return 0;
	/* A spawned program's pid is not known before the call, so no caller can have named
	 * it: a LISTEN_PID there is for it unless it names the spawning process. */
	return pid < 0 || (p->pid > 0 ? pid == (long)p->pid : pid != (long)getpid());
}

static int rsk_life_exec_handed(int fd, int cloexec, void *arg)
{
	return !cloexec && rsk_life_hands(fd, arg);
}

int rsk_life_exec_prepare(char *const argv[], char *const envp[])
{
	struct rsk_newprog p = {.argv = argv, .envp = envp, .pid = getpid()};
	int go[2];

	/* The new image gets the TCP listener on each number it inherits (no memory written:
	 * a vfork child shares ours with its parent). */
	(void)rsk_face_restore_all(0);
	/* ... and may be handed one to accept on where no library sees it: no new clients for
	 * such a listener */
	rsk_sock_exec_listeners(rsk_life_exec_handed, &p);
	rsk_fw_flush_all(); /* a set that outlives the image holds what was asked */
	/* Nothing to hand over; or a vfork child, whose relays are its parent's and stay. */
	if (rsk_relay_count() == 0 || rsk_proc_pid() != getpid() || !rsk_relay_pause_all())
		return 0;
	if (pipe2(go, O_CLOEXEC) < 0)
		goto resume;
	if (rsk_life_spawn(go) < 0) {
		(void)rsk_sys_close(go[0]);
		(void)rsk_sys_close(go[1]);
		goto resume;
	}
	(void)rsk_sys_close(go[0]);
	rsk_life_go_wr = go[1];
	return 1;
resume:
	rsk_relay_resume_all();
	return 0;
}

void rsk_life_exec_failed(void)
{
	char no = 1;

	if (rsk_life_go_wr < 0)
		return;
	(void)rsk_sys_write(rsk_life_go_wr, &no, 1); /* the helper leaves */
	(void)rsk_sys_close(rsk_life_go_wr);
	rsk_life_go_wr = -1;
	rsk_relay_resume_all();
}

void rsk_life_init(void)
{
	rsk_upg_init();
	rsk_sock_set_close_hook(rsk_life_closed);
}
