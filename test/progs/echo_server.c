/*
 * Role: the TCP echo server the integration tests talk to (127.0.0.1 only).
 *
 *   echo_server PORT [poll|fork|prefork] [CHILDREN]
 *
 * poll    one thread, one poll() loop, non-blocking accept, many clients at once; a client's
 *         bytes are echoed in order, reading pauses while an echo is pending (back-pressure),
 *         and the connection is closed after the client's EOF once everything was echoed.
 * fork    fork per connection: the parent accepts and closes its copy, the child serves the
 *         connection with blocking read/write and leaves with exit(0).
 * prefork CHILDREN (default 4) processes run the poll loop on the inherited listener.
 *
 * SIGTERM sets a flag: the loops end, children are collected, main returns, so every process
 * writes its RDMASOCK_STATS line. Each serving process prints "served N connections, B bytes";
 * the parent of fork/prefork prints "children N ok M" (M = children that exited 0).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "progs.h"

const char *prog_name = "echo_server";

#define MAX_CLIENTS 1024
#define BUF_SIZE 65536
#define MAX_CHILDREN 64
#define MAX_LIVE 4096 /* fork mode: children alive at once */

static volatile sig_atomic_t stop;

struct client {
	int fd;
	int eof;    /* the client shut down its sending side */
	size_t len; /* bytes in buf */
	size_t off; /* of which already echoed */
	char *buf;
};

static unsigned long long served_conns, served_bytes;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void install_handlers(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term; /* no SA_RESTART: blocking calls return EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl O_NONBLOCK: %s", strerror(errno));
}

static void client_close(struct client *c)
{
	close(c->fd);
	c->fd = -1;
}

/* Non-blocking service of one client after poll() said @revents. */
static void client_serve(struct client *c, short revents)
{
	ssize_t n;

	if (c->off < c->len && (revents & (POLLOUT | POLLERR | POLLHUP))) {
		n = write(c->fd, c->buf + c->off, c->len - c->off);
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			client_close(c);
			return;
		}
		if (n > 0) {
			c->off += (size_t)n;
			served_bytes += (unsigned long long)n;
		}
		if (c->off == c->len)
			c->off = c->len = 0;
	}
	if (c->len == 0 && !c->eof && (revents & (POLLIN | POLLERR | POLLHUP))) {
		n = read(c->fd, c->buf, BUF_SIZE);
		if (n == 0) {
			c->eof = 1;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			client_close(c);
			return;
		} else if (n > 0) {
			c->len = (size_t)n;
			c->off = 0;
			/* Echo right away; poll() only when the socket would block. */
			n = write(c->fd, c->buf, c->len);
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				client_close(c);
				return;
			}
			if (n > 0) {
				c->off = (size_t)n;
				served_bytes += (unsigned long long)n;
			}
			if (c->off == c->len)
				c->off = c->len = 0;
		}
	}
	if (c->eof && c->len == 0)
		client_close(c);
}

static void poll_loop(int lfd)
{
	static struct client clients[MAX_CLIENTS];
	static struct pollfd pfd[MAX_CLIENTS + 1];
	static int slot_of[MAX_CLIENTS + 1];
	int nclients = 0, i, n, fd;

	set_nonblock(lfd);
	for (i = 0; i < MAX_CLIENTS; i++)
		clients[i].fd = -1;
	while (!stop) {
		n = 0;
		pfd[n].fd = lfd;
		pfd[n].events = nclients < MAX_CLIENTS ? POLLIN : 0;
		pfd[n].revents = 0;
		slot_of[n++] = -1;
		for (i = 0; i < MAX_CLIENTS; i++) {
			if (clients[i].fd < 0)
				continue;
			pfd[n].fd = clients[i].fd;
			pfd[n].events = clients[i].len > clients[i].off ? POLLOUT : POLLIN;
			pfd[n].revents = 0;
			slot_of[n++] = i;
		}
		if (poll(pfd, (nfds_t)n, 200) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		for (i = 1; i < n; i++) {
			if (pfd[i].revents == 0)
				continue;
			client_serve(&clients[slot_of[i]], pfd[i].revents);
			if (clients[slot_of[i]].fd < 0)
				nclients--;
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* Non-blocking accept until the backlog is empty (other processes may race us). */
		while (nclients < MAX_CLIENTS) {
			fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
			if (fd < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
					break;
				if (errno == ECONNABORTED)
					continue;
				die("accept4: %s", strerror(errno));
			}
			for (i = 0; i < MAX_CLIENTS && clients[i].fd >= 0; i++)
				;
			if (clients[i].buf == NULL && (clients[i].buf = malloc(BUF_SIZE)) == NULL)
				die("out of memory");
			clients[i].fd = fd;
			clients[i].eof = 0;
			clients[i].len = clients[i].off = 0;
			nclients++;
			served_conns++;
		}
	}
	for (i = 0; i < MAX_CLIENTS; i++) {
		if (clients[i].fd >= 0)
			client_close(&clients[i]);
		free(clients[i].buf);
	}
}

/* Blocking echo of one connection (fork mode child). Returns 0 after EOF. */
static int serve_blocking(int fd)
{
	static char buf[BUF_SIZE];
	ssize_t n;

	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR) {
			if (stop)
				return 1;
			continue;
		}
		if (n < 0)
			return errno == ECONNRESET ? 0 : 1;
		if (n == 0)
			return 0;
		if (write_all(fd, buf, (size_t)n) < 0)
			return 1;
		served_bytes += (unsigned long long)n;
	}
}

static pid_t live[MAX_LIVE]; /* children not yet collected, 0 = free slot */
static int nchildren_alive;
static unsigned int children_total, children_ok;

static void live_add(pid_t pid)
{
	int i;

	for (i = 0; i < MAX_LIVE; i++) {
		if (live[i] == 0) {
			live[i] = pid;
			nchildren_alive++;
			return;
		}
	}
	die("more than %d children alive", MAX_LIVE);
}

static void live_del(pid_t pid)
{
	int i;

	for (i = 0; i < MAX_LIVE; i++) {
		if (live[i] == pid) {
			live[i] = 0;
			nchildren_alive--;
			return;
		}
	}
}

static void kill_live(void)
{
	int i;

	for (i = 0; i < MAX_LIVE; i++)
		if (live[i] != 0)
			kill(live[i], SIGTERM);
}

static void reap(int block)
{
	int status;
	pid_t pid;

	while (nchildren_alive > 0 && (pid = waitpid(-1, &status, block ? 0 : WNOHANG)) != 0) {
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		live_del(pid);
		children_total++;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			children_ok++;
		else
			prog_msg("child %d ended with status 0x%x", (int)pid, status);
	}
}

/* Collect every child: wait up to 10 s, then SIGTERM the rest (they exit normally). */
static void collect_children(void)
{
	double end = now_sec() + 10;

	while (nchildren_alive > 0 && now_sec() < end) {
		reap(0);
		if (nchildren_alive > 0)
			usleep(10000);
	}
	if (nchildren_alive > 0) {
		prog_msg("%d children still running: SIGTERM", nchildren_alive);
		kill_live();
	}
	reap(1);
}

static void fork_loop(int lfd)
{
	int fd, rc;
	pid_t pid;

	while (!stop) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) {
				reap(0);
				continue;
			}
			die("accept: %s", strerror(errno));
		}
		served_conns++;
		fflush(NULL);
		pid = fork();
		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			close(lfd);
			rc = serve_blocking(fd);
			close(fd);
			prog_msg("child served 1 connection, %llu bytes", served_bytes);
			exit(rc);
		}
		live_add(pid);
		close(fd); /* the child's copy keeps the connection open */
		reap(0);
	}
}

static void prefork(int lfd, int n)
{
	sigset_t mask, old;
	pid_t pid;
	int i;

	/* Block SIGTERM around the fork so a child cannot miss it between fork and its loop. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, &old);
	fflush(NULL);
	for (i = 0; i < n; i++) {
		pid = fork();
		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			poll_loop(lfd);
			close(lfd);
			prog_msg("served %llu connections, %llu bytes", served_conns, served_bytes);
			exit(0);
		}
		live_add(pid);
	}
	while (!stop)
		sigsuspend(&old);
	sigprocmask(SIG_SETMASK, &old, NULL);
	kill_live();
	reap(1);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[2] : "poll";
	int port, lfd, nkids = argc > 3 ? atoi(argv[3]) : 4;

	if (argc < 2)
		die("usage: echo_server PORT [poll|fork|prefork] [CHILDREN]");
	port = port_arg(argv[1]);
	install_handlers();
	setvbuf(stdout, NULL, _IOLBF, 0);
	lfd = tcp_listen(port, 512);
	if (strcmp(mode, "poll") == 0) {
		poll_loop(lfd);
		prog_msg("served %llu connections, %llu bytes", served_conns, served_bytes);
	} else if (strcmp(mode, "fork") == 0) {
		fork_loop(lfd);
		close(lfd);
		collect_children();
		prog_msg("accepted %llu connections; children %u ok %u", served_conns,
			 children_total, children_ok);
	} else if (strcmp(mode, "prefork") == 0) {
		if (nkids < 1 || nkids > MAX_CHILDREN)
			die("CHILDREN must be 1..%d", MAX_CHILDREN);
		prefork(lfd, nkids);
		close(lfd);
		prog_msg("children %u ok %u", children_total, children_ok);
	} else {
		die("unknown mode \"%s\"", mode);
	}
	return children_total == children_ok ? 0 : 1;
}
