/*
 * Connection handshake for same-host peers. A preloaded listener owns a rendezvous: an
 * abstract unix listener named after network namespace + address + port. A preloaded client
 * connecting to a local address finds it and sends an offer (protocol version, buffer
 * geometry) with the connection's memfd, the ctl end of its readiness pair and its own TCP
 * socket, then makes the real TCP connect. Whichever process accepts that TCP connection
 * claims the offer whose socket is the accepted connection's peer (holding the socket is the
 * proof), and answers on the offer's connection with the ctl end of its own pair.
 */
#ifndef RSK_SHM_RDV_H
#define RSK_SHM_RDV_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/*
 * Versions. RSK_RDV_VERSION covers everything the handshake hands over: the offer, the
 * answer and the segment's layout (RSK_SHM_VERSION, shm.h); bump it with any of them. A
 * build takes offers of versions RSK_RDV_VERSION_MIN..RSK_RDV_VERSION and says so in its
 * rendezvous' bell (below), so a client commits at connect only to a listener that reads
 * its offer; any other offer is declined (RSK_RDV_DECLINE_VERSION) and both ends stay on
 * TCP. RSK_TEST_PROTO_NEXT is a test build's only (test/integration: test_version_mix.sh).
 */
#define RSK_RDV_MAGIC 0x31534b52u /* "RKS1" */
#ifndef RSK_TEST_PROTO_NEXT
#define RSK_RDV_VERSION 2u
#else
#define RSK_RDV_VERSION 3u
#endif
#define RSK_RDV_VERSION_MIN RSK_RDV_VERSION

/*
 * FROZEN: the first 8 bytes of every rendezvous message of every version, and nothing else
 * any version may assume of another's. A reader of any version reads this much and knows
 * whether the rest is for it; never change it, whatever the version.
 */
struct rsk_rdv_hdr {
	uint32_t magic;   /* RSK_RDV_MAGIC */
	uint32_t version; /* the sender's RSK_RDV_VERSION */
};

/* Version 2's offer (its layout may change with the version; its start may not). */
struct rsk_rdv_offer {
	uint32_t magic;   /* = struct rsk_rdv_hdr */
	uint32_t version;
	uint32_t nbuf;
	uint32_t buf_size;
	struct sockaddr_storage server; /* where the client connects (the rendezvous' name) */
	uint32_t forwarded;             /* RSK_RDV_FWD_*: a sibling passed it on */
	/* 0: the client's TCP connect follows the offer; else an upgrade of its existing TCP
	 * connection (calls/upgrade.c), 1 + the times siblings passed it on */
	uint32_t upgrade;
};

#define RSK_RDV_UPGRADE_HOPS 8

/* forwarded: */
#define RSK_RDV_FWD_NONE 0u   /* the client's own message */
#define RSK_RDV_FWD_OFFER 1u  /* an offer a sibling read: a 4th fd is the reply fd */
/* A client's connection passed on before its offer came: its only fd is that connection,
 * from which the offer is still to be read (no field but magic and version counts). */
#define RSK_RDV_FWD_UNREAD 2u

/* The fds of an offer, in message order (the reply fd only in a forwarded one). */
enum { RSK_RDV_MEMFD = 0, RSK_RDV_CTL, RSK_RDV_TCP, RSK_RDV_REPLY, RSK_RDV_NFDS };

/* Answer bytes, on the offer's connection (FROZEN as well: one byte, any version; a
 * client that reads anything but RSK_RDV_ACCEPT with one fd was not taken). */
#define RSK_RDV_ACCEPT 'A' /* with the server's ctl end */
#define RSK_RDV_DECLINE 'D'
/* Declined: an offer of a version this build does not read, or one it could not parse. */
#define RSK_RDV_DECLINE_VERSION 'V'
/* From the client, after its offer: it takes the offer back (a connect that did not finish
 * at once stays TCP). A server that finds it declines. */
#define RSK_RDV_WITHDRAW 'W'

/*
 * Create the rendezvous of a listener bound to @bound (one or two unix listeners: a
 * dual-stack wildcard answers IPv4 and IPv6 clients). Fills @fds (up to 2), returns the
 * count or -errno (-EADDRINUSE: another listener on this port owns the name).
 */
int rsk_rdv_listen(const struct sockaddr *bound, int v6only, int backlog, int fds[2]);

/*
 * The effective uid of the process at the other end of unix socket @conn as the kernel
 * recorded it (SO_PEERCRED): of the connecting process on an accepted connection, of the
 * listener's owner when it called listen() on a connecting one and on the listener itself.
 * 0 or -errno.
 */
int rsk_rdv_peer_uid(int conn, uid_t *uid);

/* Is the listener bound to @bound preloaded (does its rendezvous exist)? */
int rsk_rdv_exists(const struct sockaddr *bound);

/* Which rendezvous a find reached: its name's address part (a wildcard's: "any4", "any6"),
 * its port, and the process that listens there (SO_PEERCRED). They name its bell; a move's
 * knock (below) comes after the offer and needs that bell again, so the dial keeps them
 * rather than asking the connection and parsing its name back. */
struct rsk_rdv_where {
	char what[INET6_ADDRSTRLEN];
	unsigned int port;
	pid_t pid;
};

/* Client: connect to the rendezvous for @dest and ring its bell (below). The fd, -ENOENT (no
 * preloaded listener), or -errno; the listener's owner in *@owner, which rendezvous answered
 * in *@where and whether the bell rang in *@rung (each may be NULL): RSK_RDV_RUNG,
 * RSK_RDV_RUNG_OTHER (it rang, and says its listener reads no offer of our version: offer
 * nothing) or 0. A client that could not ring must not offer before its SYN: the listener's
 * accept may not look (it offers once connected, as TCP first does); nor may one whose bell
 * does not say that its listener reads our version (a bell of an older build), since a
 * decline would come after it committed. Only a listener of our own effective user is rung:
 * a bell that rang says its owner is us. */
#define RSK_RDV_RUNG 1
#define RSK_RDV_RUNG_OTHER 2
int rsk_rdv_find(const struct sockaddr *dest, uid_t *owner, int *rung, struct rsk_rdv_where *where);

/* Client: send the offer with its fds (RSK_RDV_*) on @conn. 0 or -errno. */
int rsk_rdv_offer(int conn, const struct rsk_rdv_offer *o, const int fds[RSK_RDV_NFDS]);

/*
 * Server: read one offer from accepted rendezvous connection @conn. On success @fds are
 * ours (close-on-exec), fds[RSK_RDV_REPLY] is what to answer on (@conn itself unless a
 * sibling forwarded the offer). 0, 1 (a client's connection forwarded unread: it is
 * fds[0], read its offer from it), -EAGAIN (nothing there yet), -ECONNRESET (the client
 * closed without an offer), -EPROTONOSUPPORT (an offer of a version we do not read) or
 * -EPROTO (malformed: wrong magic, length, geometry or fds). On an error no fd of the
 * message is kept; @conn is the caller's to answer on (rsk_rdv_decline_version) and close.
 */
int rsk_rdv_read_offer(int conn, struct rsk_rdv_offer *o, int fds[RSK_RDV_NFDS]);

/* Server: hand an offer we cannot use to the rendezvous named for @o->server again. */
int rsk_rdv_forward(const struct rsk_rdv_offer *o, const int fds[RSK_RDV_NFDS]);

/* Server: hand client connection @conn, whose offer has not come yet, to the rendezvous of
 * listener address @server again (RSK_RDV_FWD_UNREAD). 0 or -errno. */
int rsk_rdv_forward_unread(const struct sockaddr *server, int conn);

/* Server: answer on @reply: accept (with our ctl end @ctl) or decline (@ctl -1). 0/-errno. */
int rsk_rdv_answer(int reply, int accept, int ctl);
/* Server: decline an offer rsk_rdv_read_offer could not take (-EPROTONOSUPPORT, -EPROTO). */
int rsk_rdv_decline_version(int reply);

/*
 * Client: the answer on @conn, waiting up to @wait_ms: the server's ctl end (>= 0, ours,
 * close-on-exec), -EAGAIN (not yet), -ECONNREFUSED (declined), -EPROTONOSUPPORT (declined:
 * it does not read our offer), -ECONNRESET (the server went without a word) or -EPROTO.
 */
int rsk_rdv_read_answer(int conn, int wait_ms);

/*
 * The rendezvous' doorbell (shm_rdv.c): a count of the connections queued on it, rung by
 * each client after its connect, so a listener's accept knows without a system call whether
 * anything was queued since it last found the rendezvous empty. rsk_rdv_listen_bells is
 * rsk_rdv_listen with a bell per rendezvous, made before it listens (@bells[i] NULL: none,
 * so always look). Client: ring rendezvous @what/@port of listening process @pid
 * (rsk_rdv_find does).
 */
struct rsk_rdv_bell;
int rsk_rdv_listen_bells(const struct sockaddr *bound, int v6only, int backlog, int fds[2],
			 struct rsk_rdv_bell *bells[2]);
uint64_t rsk_rdv_bell_rings(const struct rsk_rdv_bell *b);
/* Listener: ring our own bell @b (an entry handed back into the rendezvous by a sibling). */
void rsk_rdv_bell_ring_own(struct rsk_rdv_bell *b);
void rsk_rdv_bell_close(struct rsk_rdv_bell *b);
int rsk_rdv_ring(const char *what, unsigned int port, pid_t pid);

/*
 * Bell files outlive a listener that dies without its destructors (SIGKILL, a crash): the
 * first bell a process makes first removes up to RSK_BELL_SWEEP_REMOVE dead listeners' files
 * from @dir (rsk_rdv_bells_sweep; NULL: /dev/shm), judged by the pid inside on a claimed file
 * (base/sweep.h). Returns how many went. rsk_rdv_bells_end_all ends this process's bells now, as its exit would (_exit: no
 * destructor runs); safe in a signal handler.
 */
#define RSK_BELL_SWEEP_SCAN 4096
#define RSK_BELL_SWEEP_REMOVE 256
int rsk_rdv_bells_sweep(const char *dir);
void rsk_rdv_bells_end_all(void);

/* fork() returned @child in the parent: the child holds every listener whose bell this
 * process keeps or shares, and may be the one to keep the bell once we leave it. */
void rsk_rdv_bells_forked(pid_t child);

/*
 * Knocks: how a move reaches a listener that siblings share (prefork: nginx's workers). No
 * process's event loop looks at a shared rendezvous (the loops would take each other's
 * offers), and the accepts that read an upgrade offer there hand it back: the offer of a
 * connection that starts on TCP and moves later was never announced. So a client whose
 * upgrade offer is queued knocks at the door of each process its listener's bell names (its
 * maker, its heir and the kin forked with it open; none when the listener was never forked:
 * its maker's own loop looks): a datagram on the abstract unix name
 * "rsk1/d/<netns>/<pid>/0" holding the client's TCP address. The process whose connection it
 * is takes the offer at that connection's next call (core/transport/shm_door.c, announce.h).
 * FROZEN (any build knocks any other's door): magic, then the address's length, then the
 * address; a door reads no other message.
 */
#define RSK_RDV_KNOCK_MAGIC 0x314b4e4bu /* "KNK1" */
struct rsk_rdv_knock {
	uint32_t magic;
	uint32_t len; /* of client, as getsockname gave it */
	struct sockaddr_storage client;
};

struct sockaddr_un;
/* Client: knock for the upgrade offer just sent to rendezvous @where (as rsk_rdv_find
 * reached it), from the TCP socket at @client. Returns how many doors took it (0: no bell of
 * ours, a listener never forked, or no door) or -errno. */
int rsk_rdv_knock(const struct rsk_rdv_where *where, const struct sockaddr *client, socklen_t len);
/* The door of process @pid (a bound or a destination address); its length. */
socklen_t rsk_rdv_door_name(struct sockaddr_un *un, pid_t pid);
/* A knock's client address from datagram @buf of @n bytes: 0, or -EPROTO (not a knock). */
int rsk_rdv_knock_parse(const void *buf, size_t n, struct sockaddr_storage *client);

/*
 * For `rdmasock doctor` (tools/), which looks a listener's rendezvous up in /proc/net/unix
 * without connecting to it: the abstract names a client of @dest tries, in order (the
 * address's own, then the wildcard's) into @un[0..1], their sockaddr lengths in @len.
 * Returns 2 or -errno.
 */
int rsk_rdv_names(const struct sockaddr *dest, struct sockaddr_un *un, socklen_t len[2]);

#endif
