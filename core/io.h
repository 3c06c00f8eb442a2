/*
 * Data-path entry points for accelerated sockets. preload/ maps every libc read/write-family
 * call onto these two (plus the sendfile/splice adapters), so the stream engine has one
 * receive and one send path to get right.
 */
#ifndef RSK_IO_H
#define RSK_IO_H

#include <sys/socket.h>
#include <sys/types.h>

/* recvmsg() on accelerated socket @fd. Returns bytes, 0 at EOF, or -errno. */
ssize_t rsk_io_recvmsg(int fd, struct msghdr *msg, int flags);

/* sendmsg() on accelerated socket @fd. Returns bytes accepted or -errno. */
ssize_t rsk_io_sendmsg(int fd, const struct msghdr *msg, int flags);

/*
 * sendfile()/splice() where the accelerated socket is one end: data is bounced through a
 * bounded buffer. @off_in may be NULL (use and advance the file position). Returns bytes
 * moved or -errno.
 */
ssize_t rsk_io_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n);
ssize_t rsk_io_splice_from(int in_fd, int out_fd, loff_t *off_out, size_t n);

#endif
