/*
 * Role: the hostile and the honest peers of the security tests (test_crossuid.sh,
 * test_offerrace.sh). Unlike the other test programs, it links rsk_core: it plays a library
 * instance that skips the library's own checks (another user's process, or a forger), and
 * speaks the rendezvous protocol of core/transport/shm_rdv.h directly.
 *
 *   sec_peer offer PORT own
 *       A client that offers shm whatever the listener's owner: offer with its own TCP
 *       socket, TCP connect, wait for the server's answer.
 *   sec_peer offer PORT steal BINDPORT [CONNECT_ADDR]
 *       A forger: a TCP socket bound (SO_REUSEADDR) to 127.0.0.1:BINDPORT, the port a victim
 *       will connect from, goes with an offer; with CONNECT_ADDR it is connected to
 *       CONNECT_ADDR:PORT once the file $SEC_PEER_GO exists (another address of a wildcard
 *       listener, so the victim's 4-tuple stays free). Never sends a byte.
 *       Both offer modes print "offered", then "answer: accept|decline|closed|none" (none:
 *       no answer within $SEC_PEER_WAIT seconds, default 3); exit 0. "refused" instead of
 *       "offered" when the listener closed the connection before the offer went out.
 *   sec_peer squat PORT SECONDS
 *       Take the rendezvous name of 127.0.0.1:PORT before the server does (prints
 *       "squatting"); for SECONDS, print "squat: offer" for each offer that comes.
 */
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include "progs.h"

#include "base/clock.h"
#include "transport/shm.h"
#include "transport/shm_rdv.h"

const char *prog_name = "sec_peer";

#define NBUF 8
#define BSIZE 4096

static void wait_go(void)
{
	const char *go = getenv("SEC_PEER_GO");
	struct stat st;
	int i;

	for (i = 0; go != NULL && i < 200 && stat(go, &st) != 0; i++)
		usleep(50000);
}

static const char *answer_name(int rc)
{
	if (rc >= 0)
		return "accept";
	if (rc == -ECONNREFUSED)
		return "decline";
	if (rc == -EAGAIN)
		return "none";
	return "closed";
}

static int offer(int port, const char *mode, int bindport, const char *connect_addr)
{
	struct sockaddr_in dest = loopback(port), me = loopback(bindport);
	const char *w = getenv("SEC_PEER_WAIT");
	int fds[RSK_RDV_NFDS], sv[2], tcp, rdv, memfd, one = 1, rc, own = strcmp(mode, "own") == 0;
	int64_t end = rsk_now_ms() + 1000 * (w != NULL ? atoi(w) : 3);
	struct rsk_rdv_offer o;
	struct rsk_ep *ep;

	tcp = socket(AF_INET, SOCK_STREAM, 0);
	if (tcp < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		die("socket: %s", strerror(errno));
	if (!own && (setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		     bind(tcp, (struct sockaddr *)&me, sizeof(me)) < 0))
		die("bind 127.0.0.1:%d: %s", bindport, strerror(errno));
	rdv = rsk_rdv_find((struct sockaddr *)&dest, NULL, NULL, NULL);
	if (rdv < 0)
		die("no rendezvous for port %d: %s", port, strerror(-rdv));
	memfd = rsk_shm_create_open(NBUF, BSIZE, NULL, &ep);
	if (memfd < 0)
		die("memfd: %s", strerror(-memfd));
	memset(&o, 0, sizeof(o));
	o.magic = RSK_RDV_MAGIC;
	o.version = RSK_RDV_VERSION;
	o.nbuf = NBUF;
	o.buf_size = BSIZE;
	memcpy(&o.server, &dest, sizeof(dest));
	fds[RSK_RDV_MEMFD] = memfd;
	fds[RSK_RDV_CTL] = sv[1];
	fds[RSK_RDV_TCP] = tcp;
	rc = rsk_rdv_offer(rdv, &o, fds);
	/* the listener may close the connection before reading it (a loop that watches the
	 * rendezvous checks the sender as it connects): refused, nothing delivered; the TCP
	 * connection is made all the same */
	if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
		die("offer: %s", strerror(-rc));
	printf(rc < 0 ? "refused\n" : "offered\n");
	fflush(stdout);
	if (own && connect(tcp, (struct sockaddr *)&dest, sizeof(dest)) < 0)
		die("connect: %s", strerror(errno));
	if (connect_addr != NULL) {
		wait_go();
		if (inet_pton(AF_INET, connect_addr, &dest.sin_addr) != 1 ||
		    connect(tcp, (struct sockaddr *)&dest, sizeof(dest)) < 0)
			die("connect %s:%d: %s", connect_addr, port, strerror(errno));
	}
	do
		rc = rsk_rdv_read_answer(rdv, 100);
	while (rc == -EAGAIN && rsk_now_ms() < end);
	printf("answer: %s\n", answer_name(rc));
	if (rc >= 0)
		close(rc);
	rsk_ep_destroy(ep);
	return 0;
}

static int squat(int port, int secs)
{
	struct sockaddr_in sa = loopback(port);
	struct rsk_rdv_offer o;
	int fds[2], n, conn, got[RSK_RDV_NFDS], offers = 0, i;
	int64_t end = rsk_now_ms() + 1000 * secs;
	struct pollfd p;

	n = rsk_rdv_listen((struct sockaddr *)&sa, 0, 64, fds);
	if (n < 1)
		die("rendezvous of port %d: %s", port, strerror(-n));
	printf("squatting\n");
	fflush(stdout);
	while (rsk_now_ms() < end) {
		p = (struct pollfd){.fd = fds[0], .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		conn = accept4(fds[0], NULL, NULL, SOCK_NONBLOCK);
		if (conn < 0)
			continue;
		p = (struct pollfd){.fd = conn, .events = POLLIN};
		(void)poll(&p, 1, 500);
		if (rsk_rdv_read_offer(conn, &o, got) == 0) {
			printf("squat: offer\n");
			fflush(stdout);
			offers++;
			for (i = 0; i < RSK_RDV_REPLY; i++)
				close(got[i]);
		}
		close(conn);
	}
	printf("squat: %d offers\n", offers);
	return 0;
}

int main(int argc, char **argv)
{
	alarm(CLIENT_TIME_LIMIT);
	if (argc >= 4 && strcmp(argv[1], "offer") == 0 && strcmp(argv[3], "own") == 0)
		return offer(port_arg(argv[2]), "own", 0, NULL);
	if (argc >= 5 && strcmp(argv[1], "offer") == 0 && strcmp(argv[3], "steal") == 0)
		return offer(port_arg(argv[2]), "steal", port_arg(argv[4]),
			     argc > 5 ? argv[5] : NULL);
	if (argc == 4 && strcmp(argv[1], "squat") == 0)
		return squat(port_arg(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: see test/progs/sec_peer.c\n");
	return 2;
}
