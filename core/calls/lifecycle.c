/*
 * The process's life-cycle hooks: epoll registrations of sockets still being set up, fork
 * (what a child gets: shared connections where the transport allows, relays or detached
 * copies where it does not), and exit (an orderly end for our streams, as the kernel gives
 * TCP).
 */
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/evloop.h"
#include "base/log.h"
#include "base/policy.h"
#include "base/proc.h"
#include "base/statseg.h"
#include "base/sys.h"
#include "base/tcpstate.h"
#include "calls.h"
#include "fastwait.h"
#include "history.h"
#include "upgrade.h"
#include "conn/conn.h"
#include "conn/relay.h"
#include "sock/listener.h"
#include "sock/sock.h"
#include "transport/registry.h"

void rsk_life_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int i;

	if (s == NULL)
		return;
	if (op != EPOLL_CTL_DEL && s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listener_note(s->lst, RSK_LISTEN_INTEREST); /* an event loop will accept */
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->nepregs && s->epregs[i].epfd != epfd; i++)
		;
	if (op == EPOLL_CTL_DEL && i < s->nepregs)
		s->epregs[i] = s->epregs[--s->nepregs];
	else if (op != EPOLL_CTL_DEL && ev != NULL && i < RSK_SOCK_EPREGS) {
		s->epregs[i].epfd = epfd;
		s->epregs[i].ev = *ev;
		if (i == s->nepregs)
			s->nepregs++;
	}
	pthread_mutex_unlock(&s->lock);
	rsk_sock_put(s);
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
		rsk_conn_prefork(c, fd);
		return;
	}
	if ((cm->foreign == NULL || !cm->foreign(c->ep)) && c->st.bytes_sent == 0 &&
	    c->st.bytes_rcvd == 0 && rsk_relay_start(c, fd) == 0)
		rsk_sock_retag_kernel(s);
}

static void rsk_life_prefork_listener(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)fd;
	(void)v;
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listener_note(s->lst, RSK_LISTEN_FORKED);
}

void rsk_life_stdio(int fd)
{
	struct rsk_sock *s;
	struct rsk_conn *c;

	if (rsk_fw_active)
		rsk_fw_fd_shared(fd); /* stdio's reads are glibc's own: no lazy token for them */
	s = rsk_sock_get(fd);

	if (s == NULL)
		return;
	c = s->conn;
	if (c == NULL && s->upg != NULL) {
		rsk_upg_never(s, fd); /* decided before a byte moved: stdio sees a kernel socket */
	} else if (c != NULL && c->st.bytes_sent == 0 && c->st.bytes_rcvd == 0 &&
		   rsk_relay_start(c, fd) == 0) {
		rsk_sock_retag_kernel(s); /* the app end carries the data now */
		rsk_info("fd %d: used through stdio: relayed", fd);
	} else if (c != NULL) {
		rsk_warn("fd %d: used through stdio, which the library cannot see, on an "
			 "accelerated connection; RDMASOCK_TCP_FIRST=on keeps connections on TCP "
			 "until stdio would be safe",
			 fd);
	}
	rsk_sock_put(s);
}

static void rsk_life_pause_listener(struct rsk_sock *s, int fd, uintptr_t v)
{
	(void)fd;
	(void)v;
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listener_note(s->lst, RSK_LISTEN_PAUSE);
}

void rsk_life_io_uring(void)
{
	rsk_fw_all_eager(); /* the ring polls fds where no preload sees it */
	if (!rsk_policy_kernel_only())
		return;
	rsk_info("io_uring set up: new connections of this process stay on the kernel");
	rsk_sock_walk(rsk_life_pause_listener); /* accept()s through the ring never claim */
}

void rsk_life_fork_prepare(void)
{
	rsk_fw_all_eager(); /* the child may wait on any fd or epoll set we share */
	rsk_proc_forking();
	rsk_sock_walk_accel(rsk_life_prefork_one);
	rsk_sock_walk(rsk_life_prefork_listener);
}

static void rsk_life_unhold_one(struct rsk_sock *s, int fd)
{
	(void)fd;
	if (rsk_transport_cm(s->conn->ep)->fork_share)
		rsk_conn_prefork_undo(s->conn);
}

void rsk_life_fork_failed(void)
{
	rsk_sock_walk_accel(rsk_life_unhold_one);
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
	if (s->state == RSK_SOCK_LISTENING && s->lst != NULL)
		rsk_listener_forget(s->lst);
	if (!rsk_fdtab_is_accel(v))
		rsk_sock_baseline(s, fd);
}

void rsk_life_fork_child(void)
{
	rsk_proc_forked_child();
	rsk_evloop_atfork_child();
	rsk_conn_atfork_child();
	rsk_sock_walk(rsk_life_child_one);
	rsk_statseg_atfork_child(); /* the child's own live stats segment */
}

static void rsk_life_exit_one(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;

	(void)fd;
	s->conn = NULL;
	rsk_conn_release(c);
}

void rsk_life_exit(void)
{
	rsk_sock_walk_accel(rsk_life_exit_one);
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
 * still under way ends, and a client's connection tells the destination history how long
 * it lived. */
static void rsk_life_closed(struct rsk_sock *s, int fd)
{
	struct rsk_conn *c = s->conn;

	rsk_life_end_lent(s, fd);
	if (s->upg != NULL) {
		rsk_upg_release(s, fd);
		return;
	}
	if (c == NULL || s->from_lst != 0 || c->peer_len == 0)
		return;
	rsk_hist_note((const struct sockaddr *)&c->peer,
		      rsk_hist_is_short(rsk_now_ms() - c->born_ms, c->st.bytes_sent + c->st.bytes_rcvd,
					c->st.msgs_sent + c->st.msgs_rcvd));
}

void rsk_life_init(void)
{
	rsk_upg_init();
	rsk_sock_set_close_hook(rsk_life_closed);
}
