/*
 * Live per-socket stats for `rdmasock stat`: the writer side of the segment described in
 * statseg_layout.h. Nothing here runs on the data path: a publisher thread, started with
 * the process's first tracked socket, sleeps on a futex in the segment until a reader bumps
 * it, then copies counters in every 500 ms through a callback an upper layer registered
 * (this module knows no socket).
 */
#ifndef RSK_BASE_STATSEG_H
#define RSK_BASE_STATSEG_H

#include <sys/socket.h>
#include <sys/stat.h>

#include "statseg_layout.h"

struct rsk_statseg_writer; /* one publication in progress (opaque) */

/*
 * The rows' source: called by the publisher thread (never concurrently with itself), it
 * calls rsk_statseg_put_socket() once per socket it knows. It must take only locks that are
 * never held while calling into this module, and must not allocate (a fork may come
 * meanwhile).
 */
typedef void (*rsk_statseg_fill_fn)(struct rsk_statseg_writer *w);

/* Register the fill callback (one; a later call replaces it). Any time, any thread. */
void rsk_statseg_register(rsk_statseg_fill_fn fill);

/*
 * Make this process visible to readers: create its segment and the sleeping publisher.
 * Idempotent and cheap after the first call (one load), so the socket layer calls it for
 * every socket it tracks. Returns 0, or -errno once creation failed (never retried; the
 * library works on without live stats).
 */
int rsk_statseg_start(void);

/* Add one socket to publication @w. 0, or -ENOSPC when the segment is full (counted). */
int rsk_statseg_put_socket(struct rsk_statseg_writer *w, const struct rsk_statseg_sock *rec);

/* Record @local and @peer (either NULL or not AF_INET/AF_INET6: left 0) in @rec. */
void rsk_statseg_set_addrs(struct rsk_statseg_sock *rec, const struct sockaddr_storage *local,
			   const struct sockaddr_storage *peer);

/*
 * At library start: a segment named for our pid is never ours yet. It is the image's we
 * replaced by exec (same pid, and no destructor ran) or a dead process's: remove it, so
 * fork+exec of programs that never track a socket leaves nothing behind. One unlink().
 */
void rsk_statseg_sweep_own(void);

/*
 * Remove the stale segments in the directory: those whose process is gone (SIGKILL, _exit,
 * a crash: no destructor ran), or whose pid now belongs to a process started later; never a
 * live writer's, other users' or names that are not segments. Bounded (a few thousand
 * entries, a few hundred removals). The publisher runs it once per image as it starts;
 * `rdmasock stat` too. Returns the number removed.
 */
int rsk_statseg_sweep(void);

/*
 * Remove the segment named for @pid if it still is the file @judged (device and inode) that
 * the caller found stale (a reader: an exec'd image's, a reused pid's). Claimed first, as
 * the sweep does, so a newer file a process made under that name meanwhile stays. 1 if
 * removed.
 */
int rsk_statseg_remove(pid_t pid, const struct stat *judged);

/* A forked child: the parent's segment and thread are not ours; start the child's own. */
void rsk_statseg_atfork_child(void);

/* Remove this process's segment now (it is also removed by a destructor at exit). */
void rsk_statseg_stop(void);

/* Path of this process's segment, "" when it has none (tests, logs). */
const char *rsk_statseg_path(void);

#endif
