/*
 * (Historical: the "phases" mode replays the set-up sequence of the library before TCP first
 * and the rendezvous bell; bench/phases.sh counts today's per connection. The "tw" mode, the
 * bind cost against TIME_WAIT, still stands.)
 * phasecost: the CPU cost of each phase of librdmasock's same-host connection setup and
 * teardown, by replaying the exact system-call sequence the library makes (taken from
 * `strace -f -tt -T` of build/connrate under LD_PRELOAD, core/connect.c, core/listen.c,
 * core/hs.c, core/conn.c) in one process and timing each phase (median of N iterations),
 * against the kernel TCP connection's own calls. No library code runs: this isolates the
 * cost of the sequence itself (the library's user-space work between the calls is small),
 * without tracer overhead and without cross-process wake-ups (those are in connrate seq).
 *
 *   phasecost phases N        per-phase medians (us), client and server sides
 *   phasecost tw N1,N2,... bind|connect
 *                             bind(127.0.0.1:0) and bind+connect cost after creating
 *                             N1, N2, ... client-side TIME_WAIT sockets (cumulative) whose
 *                             ports were chosen by bind(addr:0) (as the library's clients
 *                             do) or by connect() (plain kernel clients);
 *                             run it in a private network namespace (unshare -n) so the
 *                             TIME_WAIT sockets disturb nobody: bench/phasecost.sh does.
 * Loopback only (127.0.0.1, abstract unix names with a pid suffix); bounded by N.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RING 528384 /* rsk_shm_size(8, 32768) as the library's ftruncate shows */
#define HIDE 19744

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double med(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

static int hide_base;

/* rsk_fd_hide: getrlimit, F_DUPFD_CLOEXEC above the base, close, F_SETFD */
static int hide(int fd)
{
	struct rlimit rl;
	int nfd;

	getrlimit(RLIMIT_NOFILE, &rl);
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, hide_base);
	if (nfd < 0)
		return fd;
	close(fd);
	fcntl(nfd, F_SETFD, FD_CLOEXEC);
	return nfd;
}

static int hide_dup(int fd)
{
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	return fcntl(fd, F_DUPFD_CLOEXEC, hide_base);
}

static socklen_t uname_(struct sockaddr_un *un, const char *fmt, int a, int b)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, fmt, a, b);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int send_fds(int s, const void *d, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 3)];
	} cb;
	struct iovec iov = {(void *)d, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;

	memset(&cb, 0, sizeof(cb));
	m.msg_control = cb.space;
	m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	return (int)sendmsg(s, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int recv_fds(int s, void *d, size_t len, int *fds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * 3)];
	} cb;
	struct iovec iov = {d, len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;
	int n = 0;

	m.msg_control = cb.space;
	m.msg_controllen = sizeof(cb.space);
	if (recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) < 0)
		return -1;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)), i;

		for (i = 0; i < k; i++)
			memcpy(&fds[n++], CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
	}
	return n;
}

enum {
	C_SOCKET, C_BIND, C_RDV, C_MEMFD, C_PAIR, C_OFFER, C_CONNECT, C_SWITCH, C_IO, C_CLOSE,
	S_ACCEPT, S_RDV, S_CLAIM, S_MMAP, S_PAIR, S_ANSWER, S_SWITCH, S_IO, S_CLOSE,
	K_C_SOCKET, K_C_CONNECT, K_C_IO, K_C_CLOSE, K_S_ACCEPT, K_S_IO, K_S_CLOSE, NPH
};
static const char *pname[NPH] = {
	"client: socket()", "client: policy + bind (route UDP socket, bind, getsockname)",
	"client: rendezvous find (presence bind, unix connect)",
	"client: memfd + seals + mmap (ring, conn region)",
	"client: readiness pair + hide ctl + dup TCP placeholder",
	"client: offer send (sendmsg 2 fds, close memfd)", "client: TCP connect()",
	"client: switch (hide offer fd, dup3, opts, monitor epoll_ctl)",
	"client: first send/recv extras (read answer, hide peer ctl, kick, tokens)",
	"client: close (monitor del, FIN wake, 3 closes, 2 munmaps, close)",
	"server: TCP accept4 + getpeername", "server: rendezvous accept + read offer (2 fds, hides)",
	"server: claim (offer liveness poll)", "server: mmap ring + conn region, check seals",
	"server: readiness pair + hide ctl + dup TCP placeholder", "server: answer (sendmsg 1 fd)",
	"server: switch (dup3, opts, token, monitor epoll_ctl, close memfd + rdv)",
	"server: request/response extras (tokens, kick)",
	"server: close (FIN wake, monitor del, 3 closes, 2 munmaps, close)",
	"kernel client: socket()", "kernel client: connect()",
	"kernel client: write 64 + read 64", "kernel client: close()",
	"kernel server: accept4 (+ epoll_ctl ADD)", "kernel server: read 64 + write 64",
	"kernel server: close (+ epoll_ctl DEL)"};

static int phases(int n)
{
	struct sockaddr_in la = {.sin_family = AF_INET}, dest;
	struct sockaddr_un run, pun, aun;
	socklen_t rlen, plen, alen, sl;
	double *t[NPH], t0, t1;
	int lfd, rdv, mon_ep, app_ep, one = 1, i, k;
	char msg[64], buf[280];

	memset(msg, 'q', sizeof(msg));
	memset(buf, 0, sizeof(buf));
	for (k = 0; k < NPH; k++)
		t[k] = calloc((size_t)n, sizeof(double));
	la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	bind(lfd, (void *)&la, sizeof(la));
	listen(lfd, 4096);
	sl = sizeof(la);
	getsockname(lfd, (void *)&la, &sl);
	dest = la;
	rdv = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	rlen = uname_(&run, "phasecost/l/%d/%d", getpid(), ntohs(la.sin_port));
	bind(rdv, (void *)&run, rlen);
	listen(rdv, 4096);
	rdv = hide(rdv);
	mon_ep = hide(epoll_create1(EPOLL_CLOEXEC));
	app_ep = epoll_create1(0);

	for (i = 0; i < n; i++) {
		struct sockaddr_in me, src, peer;
		struct stat st;
		int fd, udp, u, memfd, app, ctl, tcp, sfd, sconn, sfds[3], smemfd, sctl, sapp, sctl2,
		    stcp, peer_ctl, ans_fds[3], x;
		void *p, *conn, *ring, *sconnm, *sring;
		struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR};
		struct pollfd pf;
		char b = 'r', tok;

		/* ---- library client ---- */
		t0 = now_us();
		fd = socket(AF_INET, SOCK_STREAM, 0);
		t1 = now_us(); t[C_SOCKET][i] = t1 - t0; t0 = t1;
		sl = sizeof(me);
		getsockname(fd, (void *)&me, &sl);
		udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		connect(udp, (void *)&dest, sizeof(dest));
		sl = sizeof(src);
		getsockname(udp, (void *)&src, &sl);
		close(udp);
		src.sin_port = 0;
		bind(fd, (void *)&src, sizeof(src));
		sl = sizeof(me);
		getsockname(fd, (void *)&me, &sl);
		t1 = now_us(); t[C_BIND][i] = t1 - t0; t0 = t1;
		stat("/proc/self/ns/net", &st);
		u = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		plen = uname_(&pun, "phasecost/c/%d/%d", getpid(), ntohs(me.sin_port));
		bind(u, (void *)&pun, plen);
		stat("/proc/self/ns/net", &st);
		connect(u, (void *)&run, rlen);
		t1 = now_us(); t[C_RDV][i] = t1 - t0; t0 = t1;
		memfd = memfd_create("rdmasock", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		ftruncate(memfd, RING);
		p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		memcpy(p, "MRSK", 4);
		munmap(p, 4096);
		fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
		conn = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		fstat(memfd, &st);
		fcntl(memfd, F_GET_SEALS);
		pread(memfd, buf, 16, 0);
		ring = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		t1 = now_us(); t[C_MEMFD][i] = t1 - t0; t0 = t1;
		{
			int sv[2], small = 1;

			socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
			alen = uname_(&aun, "phasecost/a/%d/%d", getpid(), i);
			(void)getpid();
			bind(sv[0], (void *)&aun, alen);
			setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
			app = sv[0];
			ctl = hide(sv[1]);
			tcp = hide_dup(fd);
		}
		t1 = now_us(); t[C_PAIR][i] = t1 - t0; t0 = t1;
		{
			int f2[2] = {memfd, ctl};

			send_fds(u, buf, sizeof(buf), f2, 2);
			close(memfd);
		}
		t1 = now_us(); t[C_OFFER][i] = t1 - t0; t0 = t1;
		connect(fd, (void *)&dest, sizeof(dest));
		t1 = now_us(); t[C_CONNECT][i] = t1 - t0; t0 = t1;
		u = hide(u);
		x = fcntl(fd, F_GETFD);
		x = fcntl(tcp, F_GETFL);
		dup3(app, fd, 0);
		close(app);
		sl = sizeof(x);
		getsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &x, &sl);
		getsockopt(tcp, IPPROTO_TCP, TCP_CORK, &x, &sl);
		ev.data.ptr = conn;
		epoll_ctl(mon_ep, EPOLL_CTL_ADD, tcp, &ev);
		t1 = now_us(); t[C_SWITCH][i] = t1 - t0;

		/* ---- library server ---- */
		t0 = now_us();
		sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
		sl = sizeof(peer);
		getpeername(sfd, (void *)&peer, &sl);
		t1 = now_us(); t[S_ACCEPT][i] = t1 - t0; t0 = t1;
		sconn = hide(accept4(rdv, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK));
		(void)accept4(rdv, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK); /* EAGAIN */
		pf.fd = sconn; pf.events = POLLIN;
		poll(&pf, 1, 200);
		recv_fds(sconn, buf, sizeof(buf), sfds);
		smemfd = hide(sfds[0]);
		sctl = hide(sfds[1]);
		t1 = now_us(); t[S_RDV][i] = t1 - t0; t0 = t1;
		pf.events = POLLIN | POLLRDHUP;
		poll(&pf, 1, 0);
		t1 = now_us(); t[S_CLAIM][i] = t1 - t0; t0 = t1;
		sconnm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		fstat(smemfd, &st);
		fcntl(smemfd, F_GET_SEALS);
		pread(smemfd, buf, 16, 0);
		sring = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_SHARED, smemfd, 0);
		t1 = now_us(); t[S_MMAP][i] = t1 - t0; t0 = t1;
		{
			int sv[2], small = 1;

			socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
			alen = uname_(&aun, "phasecost/s/%d/%d", getpid(), i);
			(void)getpid();
			bind(sv[0], (void *)&aun, alen);
			setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
			sapp = sv[0];
			sctl2 = hide(sv[1]);
			stcp = hide_dup(sfd);
		}
		t1 = now_us(); t[S_PAIR][i] = t1 - t0; t0 = t1;
		b = 1;
		send_fds(sconn, &b, 1, &sctl2, 1);
		t1 = now_us(); t[S_ANSWER][i] = t1 - t0; t0 = t1;
		x = fcntl(sfd, F_GETFD);
		x = fcntl(stcp, F_GETFL);
		dup3(sapp, sfd, 0);
		close(sapp);
		fcntl(sfd, F_SETFL, O_NONBLOCK);
		sl = sizeof(x);
		getsockopt(stcp, IPPROTO_TCP, TCP_NODELAY, &x, &sl);
		getsockopt(stcp, IPPROTO_TCP, TCP_CORK, &x, &sl);
		b = 'r';
		send(sctl2, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL); /* wake self: writable token */
		ev.data.ptr = sconnm;
		epoll_ctl(mon_ep, EPOLL_CTL_ADD, stcp, &ev);
		close(smemfd);
		close(sconn);
		sl = sizeof(aun);
		getsockname(sfd, (void *)&aun, &sl);
		ev.events = EPOLLIN;
		epoll_ctl(app_ep, EPOLL_CTL_ADD, sfd, &ev);
		t1 = now_us(); t[S_SWITCH][i] = t1 - t0;

		/* ---- first send/recv: client resolves the answer, kicks; server drains/kicks ---- */
		t0 = now_us();
		pf.fd = u; pf.events = POLLIN;
		poll(&pf, 1, 1000);
		recv_fds(u, &b, 1, ans_fds);
		peer_ctl = hide(ans_fds[0]);
		close(u);
		b = 'r';
		send(sctl, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL); /* (into the server's app end via its ctl copy) */
		t1 = now_us(); t[C_IO][i] = t1 - t0; t0 = t1;
		recv(sfd, &tok, 1, MSG_DONTWAIT);
		send(peer_ctl, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		t1 = now_us(); t[S_IO][i] = t1 - t0; t0 = t1;
		recv(fd, &tok, 1, MSG_DONTWAIT);
		send(ctl, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		recv(fd, &tok, 1, MSG_DONTWAIT);
		t[C_IO][i] += now_us() - t0;

		/* ---- close: client first, then the server ---- */
		t0 = now_us();
		epoll_ctl(mon_ep, EPOLL_CTL_DEL, tcp, NULL);
		shutdown(peer_ctl, SHUT_WR);
		send(peer_ctl, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		close(tcp);
		close(ctl);
		close(peer_ctl);
		munmap(ring, RING);
		munmap(conn, 4096);
		close(fd);
		t1 = now_us(); t[C_CLOSE][i] = t1 - t0; t0 = t1;
		shutdown(sctl2, SHUT_WR);
		epoll_ctl(app_ep, EPOLL_CTL_DEL, sfd, NULL);
		epoll_ctl(mon_ep, EPOLL_CTL_DEL, stcp, NULL);
		shutdown(sctl, SHUT_WR);
		send(sctl, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		close(stcp);
		close(sctl2);
		close(sctl);
		munmap(sring, RING);
		munmap(sconnm, 4096);
		close(sfd);
		t1 = now_us(); t[S_CLOSE][i] = t1 - t0;

		/* ---- kernel TCP, same shape ---- */
		t0 = now_us();
		fd = socket(AF_INET, SOCK_STREAM, 0);
		t1 = now_us(); t[K_C_SOCKET][i] = t1 - t0; t0 = t1;
		connect(fd, (void *)&dest, sizeof(dest));
		t1 = now_us(); t[K_C_CONNECT][i] = t1 - t0; t0 = t1;
		sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
		ev.events = EPOLLIN;
		epoll_ctl(app_ep, EPOLL_CTL_ADD, sfd, &ev);
		t1 = now_us(); t[K_S_ACCEPT][i] = t1 - t0; t0 = t1;
		write(fd, msg, sizeof(msg));
		t1 = now_us(); t[K_C_IO][i] = t1 - t0; t0 = t1;
		read(sfd, buf, sizeof(msg));
		write(sfd, msg, sizeof(msg));
		t1 = now_us(); t[K_S_IO][i] = t1 - t0; t0 = t1;
		read(fd, buf, sizeof(msg));
		t1 = now_us(); t[K_C_IO][i] += t1 - t0; t0 = t1;
		close(fd);
		t1 = now_us(); t[K_C_CLOSE][i] = t1 - t0; t0 = t1;
		epoll_ctl(app_ep, EPOLL_CTL_DEL, sfd, NULL);
		close(sfd);
		t1 = now_us(); t[K_S_CLOSE][i] = t1 - t0;
	}
	{
		double lc = 0, ls = 0, kc = 0, ks = 0, m;

		printf("%-78s %9s\n", "phase (median of N iterations, one process, no wake-ups)", "us");
		for (k = 0; k < NPH; k++) {
			m = med(t[k], n);
			printf("%-78s %9.2f\n", pname[k], m);
			if (k <= C_CLOSE) lc += m;
			else if (k <= S_CLOSE) ls += m;
			else if (k <= K_C_CLOSE) kc += m;
			else ks += m;
		}
		printf("%-78s %9.2f\n", "SUM library client", lc);
		printf("%-78s %9.2f\n", "SUM library server", ls);
		printf("%-78s %9.2f\n", "SUM kernel client", kc);
		printf("%-78s %9.2f\n", "SUM kernel server", ks);
	}
	return 0;
}

/* ---- TIME_WAIT: cost of the bind-before-connect ---- */

static int tw(const char *list, int by_bind)
{
	struct sockaddr_in la = {.sin_family = AF_INET}, any = {.sin_family = AF_INET};
	int lfd, one = 1, made = 0, target, i;
	socklen_t sl = sizeof(la);
	char *s = strdup(list), *tok;

	la.sin_addr.s_addr = any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	bind(lfd, (void *)&la, sizeof(la));
	listen(lfd, 4096);
	getsockname(lfd, (void *)&la, &sl);
	printf("%-10s %-10s %-14s %-14s %-16s %-16s %s\n", "TIME_WAIT", "(ss)", "bind_p50_us", "bind_p99_us",
	       "bind+conn_p50", "plain_conn_p50", "bind_failures");
	for (tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		double b[200], bc[200], pc[200], t0;
		int fails = 0;

		target = atoi(tok);
		for (; made < target; made++) { /* client closes first: TIME_WAIT on its port */
			int c = socket(AF_INET, SOCK_STREAM, 0), a;
			struct linger lg = {0, 0};

			/* by_bind: the port chosen by bind(addr:0), as the library's clients do;
			 * otherwise by connect() (kernel TCP clients) */
			if (by_bind && bind(c, (void *)&any, sizeof(any)) < 0) {
				perror("bind (making TIME_WAIT)");
				close(c);
				break;
			}
			if (connect(c, (void *)&la, sizeof(la)) < 0) {
				perror("connect");
				close(c);
				break;
			}
			a = accept(lfd, NULL, NULL);
			close(c);
			setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)); /* orderly: client TIME_WAIT */
			close(a);
		}
		for (i = 0; i < 200; i++) {
			int c = socket(AF_INET, SOCK_STREAM, 0), a;
			struct linger lg = {1, 0};

			t0 = now_us();
			if (bind(c, (void *)&any, sizeof(any)) < 0)
				fails++;
			b[i] = now_us() - t0;
			close(c);
			/* the library's sequence: bind(addr:0) then connect */
			c = socket(AF_INET, SOCK_STREAM, 0);
			t0 = now_us();
			if (bind(c, (void *)&any, sizeof(any)) < 0)
				fails++;
			connect(c, (void *)&la, sizeof(la));
			bc[i] = now_us() - t0;
			a = accept(lfd, NULL, NULL);
			setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)); /* RST: no new TIME_WAIT */
			close(c);
			close(a);
			/* kernel: connect() picks the port itself */
			c = socket(AF_INET, SOCK_STREAM, 0);
			t0 = now_us();
			connect(c, (void *)&la, sizeof(la));
			pc[i] = now_us() - t0;
			a = accept(lfd, NULL, NULL);
			setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(c);
			close(a);
		}
		{
			FILE *f = popen("ss -Htan state time-wait | wc -l", "r");
			int nss = -1;

			if (f) { if (fscanf(f, "%d", &nss) != 1) nss = -1; pclose(f); }
			qsort(b, 200, sizeof(double), cmp_d);
			printf("%-10d %-10d %-14.1f %-14.1f %-16.1f %-16.1f %d\n", made, nss, b[100], b[198],
			       med(bc, 200), med(pc, 200), fails);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct rlimit rl;

	getrlimit(RLIMIT_NOFILE, &rl);
	hide_base = rl.rlim_cur >= 512 && rl.rlim_cur <= 65536 ? (int)rl.rlim_cur - 256 : HIDE;
	if (argc == 3 && !strcmp(argv[1], "phases"))
		return phases(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "tw"))
		return tw(argv[2], !strcmp(argv[3], "bind"));
	fprintf(stderr, "usage: phasecost phases N | phasecost tw N1,N2,... bind|connect\n");
	return 2;
}
