/*
 * Process-wide counters: connections, bytes and messages per transport, credit stalls and
 * fallbacks by reason. Incremented by the engine and transports (relaxed atomics: they
 * only ever go up and are read as a snapshot), read by rdmasock_get_stats() and the JSON
 * line written at exit to RDMASOCK_STATS.
 */
#ifndef RSK_STATS_H
#define RSK_STATS_H

#include <stddef.h>

#include "compiler.h"
#include "rdmasock.h"

extern struct rdmasock_stats rsk_stats;

static inline void rsk_stats_conn(enum rdmasock_transport t)
{
	rsk_counter_add(&rsk_stats.connections[t], 1);
}

static inline void rsk_stats_sent(enum rdmasock_transport t, size_t bytes)
{
	rsk_counter_add(&rsk_stats.bytes_sent[t], bytes);
	rsk_counter_add(&rsk_stats.messages_sent[t], 1);
}

static inline void rsk_stats_received(enum rdmasock_transport t, size_t bytes)
{
	rsk_counter_add(&rsk_stats.bytes_received[t], bytes);
	rsk_counter_add(&rsk_stats.messages_received[t], 1);
}

void rsk_stats_fallback(enum rdmasock_fallback why);

/* A kernel connection counted with reason @was moved onto a transport (calls/upgrade.c):
 * it is no longer counted as the kernel's (the transport counts it as it switches). */
static inline void rsk_stats_moved(enum rdmasock_fallback was)
{
	rsk_counter_add(&rsk_stats.connections[RDMASOCK_TRANSPORT_KERNEL], (uint64_t)-1);
	rsk_counter_add(&rsk_stats.fallbacks[was], (uint64_t)-1);
}

static inline void rsk_stats_unmoved(enum rdmasock_fallback was)
{
	rsk_counter_add(&rsk_stats.connections[RDMASOCK_TRANSPORT_KERNEL], 1);
	rsk_counter_add(&rsk_stats.fallbacks[was], 1);
}

/* A kernel connection counted with reason @was turned out to stay for reason @now. */
static inline void rsk_stats_refallback(enum rdmasock_fallback was, enum rdmasock_fallback now)
{
	rsk_counter_add(&rsk_stats.fallbacks[was], (uint64_t)-1);
	rsk_counter_add(&rsk_stats.fallbacks[now], 1);
}

const char *rsk_transport_name(enum rdmasock_transport t);
const char *rsk_fallback_name(enum rdmasock_fallback why);

/* Remember the program name now (the JSON "program"); later argv rewrites do not matter. */
void rsk_stats_set_program(const char *name);
const char *rsk_stats_program(void);

/* Snapshot of the counters. */
void rsk_stats_snapshot(struct rdmasock_stats *out);

/* Copy @s into a caller's struct of @size bytes (rdmasock_get_stats, see rdmasock.h for
 * which sizes mean what). Returns 0 or -EINVAL. */
int rsk_stats_copy_out(const struct rdmasock_stats *s, void *out, size_t size);

/* Render @s as the one-line JSON object (no newline). Returns the length, or -ENOSPC. */
int rsk_stats_format(const struct rdmasock_stats *s, int pid, const char *program, char *buf,
		     size_t size);

/* Append one JSON line for this process to @path (O_APPEND, one write). Returns 0 or -errno. */
int rsk_stats_append(const char *path, const struct rdmasock_stats *s);

/* Zero every counter: a forked child starts its own account. */
void rsk_stats_reset(void);

#endif
