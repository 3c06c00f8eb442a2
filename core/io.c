/*
 * Accelerated data-path entry points (see io.h). Until a transport accelerates a socket,
 * no fd slot names an accelerated socket and these are never reached: they answer EBADF,
 * which is what a stale slot would deserve.
 */
#include <errno.h>

#include "io.h"

ssize_t rsk_io_recvmsg(int fd, struct msghdr *msg, int flags)
{
	(void)fd;
	(void)msg;
	(void)flags;
	return -EBADF;
}

ssize_t rsk_io_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	(void)fd;
	(void)msg;
	(void)flags;
	return -EBADF;
}

ssize_t rsk_io_sendfile(int out_fd, int in_fd, off_t *off_in, size_t n)
{
	(void)out_fd;
	(void)in_fd;
	(void)off_in;
	(void)n;
	return -EBADF;
}

ssize_t rsk_io_splice_from(int in_fd, int out_fd, loff_t *off_out, size_t n)
{
	(void)in_fd;
	(void)out_fd;
	(void)off_out;
	(void)n;
	return -EBADF;
}
