/*
 * The library's own fds (see fdhide.c): hidden from the application's numbering and guarded
 * against its close().
 */
#ifndef RSK_BASE_FDHIDE_H
#define RSK_BASE_FDHIDE_H

/*
 * Move a library-internal fd out of the application's way (above the numbers it is likely
 * to use, close-on-exec) and mark it internal in the fd table so the application cannot
 * close it by accident. Returns the new fd or -errno (the old fd is closed either way).
 */
int rsk_fd_hide(int fd);

/* Like rsk_fd_hide() but keeps @fd open: returns a hidden duplicate or -errno. */
int rsk_fd_hide_dup(int fd);

/* Release an fd obtained from rsk_fd_hide(). */
void rsk_fd_unhide_close(int fd);

/* True when @fd is one of the library's own fds. */
int rsk_fd_is_internal(int fd);

#endif
