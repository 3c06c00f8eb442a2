/*
 * The liveness thread (see monitor.h). It blocks in epoll_wait on the hidden TCP sockets;
 * an event means the peer's TCP end closed or failed. Connections are looked up in a small
 * registry under a mutex so a connection being released is never touched afterwards.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conn.h"
#include "log.h"
#include "monitor.h"
#include "real.h"

static pthread_mutex_t rsk_mon_lock = PTHREAD_MUTEX_INITIALIZER;
static int rsk_mon_epfd = -1;
static int rsk_mon_started;

/* Registry: which connections are live here (the thread only touches registered ones). */
static struct rsk_conn **rsk_mon_conns;
static size_t rsk_mon_n, rsk_mon_cap;

static int rsk_mon_find(struct rsk_conn *c)
{
	size_t i;

	for (i = 0; i < rsk_mon_n; i++)
		if (rsk_mon_conns[i] == c)
			return (int)i;
	return -1;
}

static void rsk_mon_event(struct rsk_conn *c)
{
	pthread_mutex_lock(&rsk_mon_lock);
	if (rsk_mon_find(c) < 0) { /* released meanwhile */
		pthread_mutex_unlock(&rsk_mon_lock);
		return;
	}
	rsk_conn_lock(c);
	rsk_conn_peer_gone(c);
	/* Stop listening: the event is level-triggered and will not go away. */
	(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->tcp_fd, NULL);
	rsk_conn_unlock(c);
	pthread_mutex_unlock(&rsk_mon_lock);
}

static void *rsk_mon_main(void *arg)
{
	struct epoll_event ev[32];
	int n, i;

	(void)arg;
	for (;;) {
		n = RSK_REAL(epoll_wait)(rsk_mon_epfd, ev, 32, -1);
		if (n < 0 && errno != EINTR)
			break;
		for (i = 0; i < n; i++)
			rsk_mon_event(ev[i].data.ptr);
	}
	return NULL;
}

static int rsk_mon_start(void)
{
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t t;
	int fd, rc;

	fd = RSK_REAL(epoll_create1)(EPOLL_CLOEXEC);
	if (fd < 0)
		return -errno;
	fd = rsk_fd_hide(fd);
	if (fd < 0)
		return fd;
	rsk_mon_epfd = fd;
	/* The thread takes no signals: they belong to the application's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	rc = pthread_create(&t, &a, rsk_mon_main, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		rsk_fd_unhide_close(fd);
		rsk_mon_epfd = -1;
		return -rc;
	}
	rsk_mon_started = 1;
	return 0;
}

int rsk_monitor_add(struct rsk_conn *c)
{
	struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR, .data.ptr = c};
	struct rsk_conn **n;
	int rc = 0;

	pthread_mutex_lock(&rsk_mon_lock);
	if (!rsk_mon_started)
		rc = rsk_mon_start();
	if (rc == 0 && rsk_mon_n == rsk_mon_cap) {
		n = realloc(rsk_mon_conns, (rsk_mon_cap ? rsk_mon_cap * 2 : 64) * sizeof(*n));
		if (n == NULL)
			rc = -ENOMEM;
		else {
			rsk_mon_conns = n;
			rsk_mon_cap = rsk_mon_cap ? rsk_mon_cap * 2 : 64;
		}
	}
	if (rc == 0 && RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_ADD, c->tcp_fd, &ev) < 0)
		rc = -errno;
	if (rc == 0)
		rsk_mon_conns[rsk_mon_n++] = c;
	pthread_mutex_unlock(&rsk_mon_lock);
	return rc;
}

void rsk_monitor_del(struct rsk_conn *c)
{
	int i;

	pthread_mutex_lock(&rsk_mon_lock);
	i = rsk_mon_find(c);
	if (i >= 0) {
		rsk_mon_conns[i] = rsk_mon_conns[--rsk_mon_n];
		if (rsk_mon_epfd >= 0)
			(void)RSK_REAL(epoll_ctl)(rsk_mon_epfd, EPOLL_CTL_DEL, c->tcp_fd, NULL);
	}
	pthread_mutex_unlock(&rsk_mon_lock);
}

void rsk_monitor_atfork_child(void)
{
	size_t i, n;
	struct rsk_conn **old;

	/* The lock may have been held by another thread at fork: start from a fresh one. */
	pthread_mutex_init(&rsk_mon_lock, NULL);
	if (rsk_mon_epfd >= 0)
		rsk_fd_unhide_close(rsk_mon_epfd); /* shared with the parent's thread: not ours */
	rsk_mon_epfd = -1;
	rsk_mon_started = 0;
	old = rsk_mon_conns;
	n = rsk_mon_n;
	rsk_mon_conns = NULL;
	rsk_mon_n = rsk_mon_cap = 0;
	for (i = 0; i < n; i++)
		(void)rsk_monitor_add(old[i]);
	free(old);
}
