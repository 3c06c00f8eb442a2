/*
 * The live stats segment's layout: a versioned file per preloaded process (mode 0600, owner
 * only) that the library fills and `rdmasock stat` reads. Shared by both, so this header
 * holds only fixed-size types and the protocol between them (reader bump + futex wake,
 * seqlock-protected records). Change the layout only together with RSK_STATSEG_VERSION.
 */
#ifndef RSK_STATSEG_LAYOUT_H
#define RSK_STATSEG_LAYOUT_H

#include <stdint.h>

#include "rdmasock.h"

#define RSK_STATSEG_MAGIC 0x54534b52u /* "RKST" */
/* 2: rdmasock_stats.fallbacks[] at fixed capacity; 3: listener_faces after credit_messages;
 * 4: bearer_connections after listener_faces */
#define RSK_STATSEG_VERSION 4u

/* Segments live in this directory (RDMASOCK_STAT_DIR overrides it), one per process. */
#define RSK_STATSEG_DIR "/dev/shm"
#define RSK_STATSEG_PREFIX "rdmasock-stat."   /* then the decimal pid */

/* Sockets one segment describes; more are counted in `dropped` (the file is sparse: pages
 * are touched only as far as records are written). */
#define RSK_STATSEG_CAPACITY 16384u

/* While readers keep bumping, the library publishes every PERIOD_MS, and for LINGER_MS
 * after the last bump; then its publisher sleeps untimed on the `readers` futex word. */
#define RSK_STATSEG_PERIOD_MS 500
#define RSK_STATSEG_LINGER_MS 10000

/* rsk_statseg_sock.state */
enum rsk_statseg_state {
	RSK_STATSEG_ST_NEW = 0,
	RSK_STATSEG_ST_CONNECTING,
	RSK_STATSEG_ST_CONNECTED,
	RSK_STATSEG_ST_LISTENING,
};

/* rsk_statseg_sock.flags */
#define RSK_STATSEG_F_RENDEZVOUS 0x1u /* a listener that accepts accelerated connections */
#define RSK_STATSEG_F_FALLBACK 0x2u   /* `fallback` holds why this kernel socket is one */

/* One socket (an fd; dups show as separate rows of the same counters). */
struct rsk_statseg_sock {
	int32_t fd;
	uint8_t state;     /* enum rsk_statseg_state */
	uint8_t transport; /* enum rdmasock_transport */
	uint8_t fallback;  /* enum rdmasock_fallback, valid with RSK_STATSEG_F_FALLBACK */
	uint8_t flags;
	uint16_t family; /* AF_INET or AF_INET6 (0: addresses unknown) */
	uint16_t local_port, peer_port;
	uint8_t local_addr[16], peer_addr[16]; /* IPv4 in the first 4 bytes */
	uint16_t pad;
	uint64_t bytes_sent, bytes_received;
	uint64_t messages_sent, messages_received; /* accelerated transports only */
	uint64_t credit_stalls;
};

struct rsk_statseg_hdr {
	uint32_t magic, version;
	uint32_t hdr_size, rec_size, capacity; /* what the writer built: readers check them */
	int32_t pid;
	uint64_t start_time; /* /proc/PID/stat field 22: tells a reused pid from the writer */
	char program[64];
	/* reader -> writer: readers add 1 and FUTEX_WAKE this word (shared futex) */
	uint32_t readers;
	/* writer -> readers, under the seqlock `seq` (odd while a publication is written) */
	uint32_t seq;
	uint32_t nrec, dropped;
	uint64_t generation;   /* publications so far: a reader waits for it to move */
	uint64_t published_ms; /* CLOCK_REALTIME, ms, of the last publication */
	struct rdmasock_stats totals; /* process totals (open kernel sockets' bytes included) */
	struct rsk_statseg_sock rec[];
};

/*
 * Field 22 (starttime) of a /proc/PID/stat line, 0 if it cannot be parsed. The program name
 * (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
 */
static inline uint64_t rsk_statseg_starttime(const char *line)
{
	const char *p = line, *close = 0;
	uint64_t v = 0;
	int field = 2;

	for (; *p; p++)
		if (*p == ')')
			close = p;
	if (close == 0)
		return 0;
	for (p = close + 1; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	for (; *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (uint64_t)(*p - '0');
	return v;
}

static inline uint64_t rsk_statseg_size(uint32_t capacity)
{
	return sizeof(struct rsk_statseg_hdr) + (uint64_t)capacity * sizeof(struct rsk_statseg_sock);
}

#endif
