/*
 * Connection handshake for same-host peers. A preloaded listener owns a rendezvous: an
 * abstract unix listener named after network namespace + address + port. A preloaded client
 * connecting to a local address finds it, sends an offer (protocol version, buffer geometry,
 * its TCP address) with the connection's memfd and its readiness fd, and only then makes the
 * real TCP connect. Whichever process accepts that TCP connection claims the offer by the
 * client's address and answers with its own readiness fd on the offer connection.
 */
#ifndef RSK_SHM_RDV_H
#define RSK_SHM_RDV_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#define RSK_RDV_MAGIC 0x31534b52u /* "RKS1" */
#define RSK_RDV_VERSION 1u

struct rsk_rdv_offer {
	uint32_t magic;
	uint32_t version;
	uint32_t nbuf;
	uint32_t buf_size;
	struct sockaddr_storage client; /* the client's TCP address (key of the claim) */
	struct sockaddr_storage server; /* where it connected */
	uint32_t forwarded;             /* a sibling passed it on: a third fd is the reply fd */
};

enum rsk_rdv_status {
	RSK_RDV_ACCEPT = 1,
	RSK_RDV_DECLINE = 2,
};

/*
 * Create the rendezvous of a listener bound to @bound (one or two hidden unix listeners:
 * a dual-stack wildcard answers IPv4 and IPv6 clients). Fills @fds (up to 2), returns the
 * count or -errno (-EADDRINUSE: another listener on this port owns the name).
 */
int rsk_rdv_listen(const struct sockaddr *bound, int v6only, int backlog, int fds[2]);

/*
 * Client: connect to the rendezvous for @dest from a socket bound to the presence name of
 * @client (a server can then tell that this client's offer exists even while a sibling
 * process holds it). Returns the connected fd, -ENOENT (no preloaded listener), or -errno.
 */
int rsk_rdv_find(const struct sockaddr *dest, const struct sockaddr *client);

/* Client: send the offer with @memfd and @ctl on @conn. 0 or -errno. */
int rsk_rdv_offer(int conn, const struct rsk_rdv_offer *o, int memfd, int ctl);

/* Server: is there a preloaded client at @client whose offer is somewhere? */
int rsk_rdv_client_present(const struct sockaddr *client);

/*
 * Server: read one offer from accepted rendezvous connection @conn. On success *memfd and
 * *ctl are fds we own, and *reply is the fd to answer on (@conn itself, or the original
 * connection when a sibling process forwarded the offer). 0 or -errno (-EPROTO: malformed).
 */
int rsk_rdv_read_offer(int conn, struct rsk_rdv_offer *o, int *memfd, int *ctl, int *reply);

/* Server: hand an offer we cannot use to the rendezvous named for @o->server again. */
int rsk_rdv_forward(const struct rsk_rdv_offer *o, int memfd, int ctl, int reply);

/* Server: answer on @reply: accepted (with our readiness fd @ctl) or declined. */
int rsk_rdv_answer(int reply, enum rsk_rdv_status status, int ctl);

/* Client: wait up to @timeout_ms for the answer; on accept *ctl is the server's fd. */
int rsk_rdv_read_answer(int conn, int timeout_ms, int *ctl);

#endif
