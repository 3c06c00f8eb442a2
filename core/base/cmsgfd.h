/*
 * The file descriptors a message passes (SCM_RIGHTS), one by one: the library must know
 * when an fd of its own leaves the process (another process may then wait or accept on it).
 */
#ifndef RSK_CMSGFD_H
#define RSK_CMSGFD_H

#include <string.h>
#include <sys/socket.h>

/* Calls @fn(fd, @arg) for each fd @msg passes, in order. */
static inline void rsk_cmsg_fds_each(const struct msghdr *msg, void (*fn)(int fd, void *arg),
				     void *arg)
{
	struct cmsghdr *cm;
	size_t i, k;
	int fd;

	if (msg->msg_control == NULL || msg->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < k; i++) {
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd)); /* (unaligned) */
			fn(fd, arg);
		}
	}
}

#endif
