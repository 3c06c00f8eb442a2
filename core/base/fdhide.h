/*
 * The library's own fds (see fdhide.c): hidden from the application's numbering and guarded
 * against its close().
 */
#ifndef RSK_BASE_FDHIDE_H
#define RSK_BASE_FDHIDE_H

#include <stdint.h>

#include "compiler.h"
#include "fdtab.h"

/*
 * Move a library-internal fd out of the application's way (high numbers, allocated downwards
 * from the fd limit so the application's lowest-free numbering is unchanged, close-on-exec)
 * and mark it internal in the fd table so the application cannot close it by accident.
 * Returns the new fd or -errno (the old fd is closed either way; with no high number free it
 * keeps its number rather than fail).
 */
int rsk_fd_hide(int fd);

/* Like rsk_fd_hide() but keeps @fd open: returns a hidden duplicate or -errno. */
int rsk_fd_hide_dup(int fd);

/*
 * Move @fd onto @hidden, a hidden fd of ours that is done with (its file closes): one dup3
 * instead of closing @hidden and finding a hidden number anew. Returns @hidden or -errno (as
 * rsk_fd_hide; @fd is closed either way). @hidden that is not ours is left alone (@fd is
 * hidden as by rsk_fd_hide then).
 */
int rsk_fd_hide_at(int fd, int hidden);

/* Release an fd obtained from rsk_fd_hide(). */
void rsk_fd_unhide_close(int fd);

/* Internal fds carry this marker's address in the fd table, tagged kernel (so data calls
 * pass through). */
extern RSK_HIDDEN char rsk_internal_marker;

/* True when the fd-table slot value @v marks one of the library's own fds. Inline: every
 * tracked call asks, most with the slot loaded already. */
static inline int rsk_fd_slot_internal(uintptr_t v)
{
	return v == ((uintptr_t)&rsk_internal_marker | RSK_FDTAB_TAG_KERNEL);
}

/* True when @fd is one of the library's own fds. */
static inline int rsk_fd_is_internal(int fd)
{
	return rsk_fd_slot_internal(rsk_fdtab_load(fd));
}

/* Free numbers between the application's fd @fd (its newest, say) and our hidden ones: how
 * close the process is to running out if each new connection takes one more of ours. */
int rsk_fd_headroom(int fd);

/* Free numbers to keep for the application: with fewer, new connections stay on TCP (each
 * accelerated one would take one more fd). An eighth of the fd limit, at least 64. */
int rsk_fd_reserve(void);

/* Free fd numbers in the process now, counted up to @want (at most 16) by taking and
 * giving back each: two system calls per number, so ask only when short of fds is likely.
 * @any_fd is any open fd (the numbers are its copies). */
int rsk_fd_room_now(int any_fd, int want);

#endif
