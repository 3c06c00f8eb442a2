/*
 * Reader side of the live stats segment (core/base/statseg_layout.h) for rdmasock stat:
 * find the segments, drop those of dead processes, wake their publishers and take a
 * consistent copy of each. No output here; stat.c formats what this returns.
 */
#ifndef RSK_STATSEG_READ_H
#define RSK_STATSEG_READ_H

#include <sys/types.h>

#include "base/statseg_layout.h"

struct rsk_seg_proc {
	char path[512];
	struct rsk_statseg_hdr *map; /* the live mapping */
	size_t map_len;
	struct rsk_statseg_hdr hdr;  /* last consistent copy (header) */
	struct rsk_statseg_sock *rec; /* and its records (hdr.nrec) */
	uint64_t gen0;               /* generation when this sample was asked for */
	int fresh;                   /* a publication arrived for this sample */
};

/* The directory segments live in ($RDMASOCK_STAT_DIR or /dev/shm). */
const char *rsk_seg_dir(void);

/*
 * Open the segment of @pid. 0; -ESRCH when no live preloaded process has one (a stale one
 * is removed); -EACCES when it belongs to another user; -EPROTO when it is not a segment
 * of this version.
 */
int rsk_seg_open(pid_t pid, struct rsk_seg_proc *p);

/* Every pid with a segment file, stale ones cleaned first. Returns the count (<= max). */
int rsk_seg_list(pid_t *pids, int max);

/* Ask for a publication (bump + wake), then wait up to @wait_ms for all of @procs. */
void rsk_seg_sample(struct rsk_seg_proc *procs, int n, int wait_ms);

void rsk_seg_close(struct rsk_seg_proc *p);

#endif
