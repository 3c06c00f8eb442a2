/*
 * fstat and fstat64 (glibc 2.33 on). Only a listener's face needs them: its number names an
 * epoll set, and a program that asks what the number is (S_ISSOCK, as systemd's sd_is_socket
 * and libuv's handle guess do) must see its TCP listener. Everything else passes straight
 * through. Not interposed: the __fxstat forms of binaries built against an older glibc,
 * which it keeps only as compat symbols dlsym() cannot find (our wrapper could not reach
 * the real one).
 */
#include <sys/stat.h>

#include "preload.h"
#include "sock/face.h"

RSK_EXPORT int fstat(int fd, struct stat *st)
{
	return RSK_REAL(fstat)(rsk_face_kfd(fd), st);
}

RSK_EXPORT int fstat64(int fd, struct stat64 *st)
{
	return RSK_REAL(fstat64)(rsk_face_kfd(fd), st);
}
