/*
 * Connection handshake for same-host peers. A preloaded listener owns a rendezvous: an
 * abstract unix listener named after network namespace + address + port. A preloaded client
 * connecting to a local address finds it, sends an offer (protocol version, buffer geometry,
 * its TCP address) with the connection's memfd and its readiness fd, and only then makes the
 * real TCP connect. Whichever process accepts that TCP connection claims the offer by the
 * client's address and answers with its own readiness fd on the offer connection.
 */
#ifndef RSK_HS_H
#define RSK_HS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

/* Address helpers for AF_INET/AF_INET6 socket addresses (shm and verbs setup alike). */
static inline socklen_t rsk_sa_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static inline uint16_t rsk_sa_port(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)a)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
}

static inline void rsk_sa_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

#define RSK_HS_MAGIC 0x31534b52u /* "RKS1" */
#define RSK_HS_VERSION 1u

struct rsk_hs_offer {
	uint32_t magic;
	uint32_t version;
	uint32_t nbuf;
	uint32_t buf_size;
	struct sockaddr_storage client; /* the client's TCP address (key of the claim) */
	struct sockaddr_storage server; /* where it connected */
	uint32_t forwarded;             /* a sibling passed it on: a third fd is the reply fd */
};

enum rsk_hs_status {
	RSK_HS_ACCEPT = 1,
	RSK_HS_DECLINE = 2,
};

/* Is @addr an address of this host (loopback, or one of its interfaces)? */
int rsk_hs_is_local(const struct sockaddr *addr);

/*
 * Create the rendezvous of a listener bound to @bound (one or two hidden unix listeners:
 * a dual-stack wildcard answers IPv4 and IPv6 clients). Fills @fds (up to 2), returns the
 * count or -errno (-EADDRINUSE: another listener on this port owns the name).
 */
int rsk_hs_listen(const struct sockaddr *bound, int v6only, int backlog, int fds[2]);

/*
 * Client: connect to the rendezvous for @dest from a socket bound to the presence name of
 * @client (a server can then tell that this client's offer exists even while a sibling
 * process holds it). Returns the connected fd, -ENOENT (no preloaded listener), or -errno.
 */
int rsk_hs_find(const struct sockaddr *dest, const struct sockaddr *client);

/* Client: send the offer with @memfd and @ctl on @conn. 0 or -errno. */
int rsk_hs_offer(int conn, const struct rsk_hs_offer *o, int memfd, int ctl);

/* Server: is there a preloaded client at @client whose offer is somewhere? */
int rsk_hs_client_present(const struct sockaddr *client);

/*
 * Server: read one offer from accepted rendezvous connection @conn. On success *memfd and
 * *ctl are fds we own, and *reply is the fd to answer on (@conn itself, or the original
 * connection when a sibling process forwarded the offer). 0 or -errno (-EPROTO: malformed).
 */
int rsk_hs_read_offer(int conn, struct rsk_hs_offer *o, int *memfd, int *ctl, int *reply);

/* Server: hand an offer we cannot use to the rendezvous named for @o->server again. */
int rsk_hs_forward(const struct rsk_hs_offer *o, int memfd, int ctl, int reply);

/* Server: answer on @reply: accepted (with our readiness fd @ctl) or declined. */
int rsk_hs_answer(int reply, enum rsk_hs_status status, int ctl);

/* Client: wait up to @timeout_ms for the answer; on accept *ctl is the server's fd. */
int rsk_hs_read_answer(int conn, int timeout_ms, int *ctl);

/* Same socket address (family, address, port)? */
int rsk_hs_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/*
 * The source address (port 0) the kernel's routing picks towards @dest, as TCP would use it:
 * a client binds there before its connect so that its address is known in advance and is
 * the one it would have had without the library. 0 or -errno.
 */
int rsk_hs_route_src(const struct sockaddr *dest, struct sockaddr_storage *src);

#endif
