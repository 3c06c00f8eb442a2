/*
 * The real libc functions behind every name preload/ interposes. core/ calls libc only
 * through this table (or raw syscalls), never through an interposed name, so the library
 * never re-enters itself and unit tests can link core/ without LD_PRELOAD.
 */
#ifndef RSK_REAL_H
#define RSK_REAL_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "compiler.h"

/* X(return type, name, parameter list). Every interposed libc name appears here once. */
#define RSK_REAL_SYMBOLS(X)                                                                        \
	X(int, socket, (int domain, int type, int protocol))                                       \
	X(int, socketpair, (int domain, int type, int protocol, int sv[2]))                        \
	X(int, bind, (int fd, const struct sockaddr *addr, socklen_t len))                         \
	X(int, listen, (int fd, int backlog))                                                      \
	X(int, accept, (int fd, struct sockaddr *addr, socklen_t *len))                            \
	X(int, accept4, (int fd, struct sockaddr *addr, socklen_t *len, int flags))                \
	X(int, connect, (int fd, const struct sockaddr *addr, socklen_t len))                      \
	X(int, close, (int fd))                                                                    \
	X(int, close_range, (unsigned int first, unsigned int last, int flags))                    \
	X(int, shutdown, (int fd, int how))                                                        \
	X(ssize_t, read, (int fd, void *buf, size_t n))                                            \
	X(ssize_t, readv, (int fd, const struct iovec *iov, int cnt))                              \
	X(ssize_t, write, (int fd, const void *buf, size_t n))                                     \
	X(ssize_t, writev, (int fd, const struct iovec *iov, int cnt))                             \
	X(ssize_t, recv, (int fd, void *buf, size_t n, int flags))                                 \
	X(ssize_t, recvfrom,                                                                       \
	  (int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len))         \
	X(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags))                               \
	X(int, recvmmsg,                                                                           \
	  (int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *tmo))       \
	X(ssize_t, send, (int fd, const void *buf, size_t n, int flags))                           \
	X(ssize_t, sendto,                                                                         \
	  (int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,              \
	   socklen_t len))                                                                         \
	X(ssize_t, sendmsg, (int fd, const struct msghdr *msg, int flags))                         \
	X(int, sendmmsg, (int fd, struct mmsghdr *vec, unsigned int vlen, int flags))              \
	X(ssize_t, sendfile, (int out, int in, off_t *off, size_t n))                              \
	X(ssize_t, sendfile64, (int out, int in, off64_t *off, size_t n))                          \
	X(ssize_t, splice,                                                                         \
	  (int in, loff_t *off_in, int out, loff_t *off_out, size_t n, unsigned int flags))        \
	X(int, poll, (struct pollfd *fds, nfds_t n, int timeout))                                  \
	X(int, ppoll,                                                                              \
	  (struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask))        \
	X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo))              \
	X(int, pselect,                                                                            \
	  (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,                     \
	   const sigset_t *mask))                                                                  \
	X(int, epoll_create, (int size))                                                           \
	X(int, epoll_create1, (int flags))                                                         \
	X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev))                      \
	X(int, epoll_wait, (int epfd, struct epoll_event *ev, int max, int timeout))               \
	X(int, epoll_pwait,                                                                        \
	  (int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask))          \
	X(int, epoll_pwait2,                                                                       \
	  (int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,                  \
	   const sigset_t *mask))                                                                  \
	X(int, fcntl, (int fd, int cmd, ...))                                                      \
	X(int, fcntl64, (int fd, int cmd, ...))                                                    \
	X(int, ioctl, (int fd, unsigned long req, ...))                                            \
	X(int, fstat, (int fd, struct stat *st))                                                   \
	X(int, fstat64, (int fd, struct stat64 *st))                                               \
	X(int, dup, (int fd))                                                                      \
	X(int, dup2, (int fd, int fd2))                                                            \
	X(int, dup3, (int fd, int fd2, int flags))                                                 \
	X(int, getsockopt, (int fd, int level, int name, void *val, socklen_t *len))               \
	X(int, setsockopt, (int fd, int level, int name, const void *val, socklen_t len))          \
	X(int, getsockname, (int fd, struct sockaddr *addr, socklen_t *len))                       \
	X(int, getpeername, (int fd, struct sockaddr *addr, socklen_t *len))                       \
	X(pid_t, fork, (void))                                                                     \
	X(long, syscall, (long number, ...))                                                       \
	X(FILE *, fdopen, (int fd, const char *mode))                                              \
	X(int, execve, (const char *path, char *const argv[], char *const envp[]))                 \
	X(int, execv, (const char *path, char *const argv[]))                                      \
	X(int, execvp, (const char *file, char *const argv[]))                                     \
	X(int, execvpe, (const char *file, char *const argv[], char *const envp[]))                \
	X(int, fexecve, (int fd, char *const argv[], char *const envp[]))                          \
	X(int, posix_spawn,                                                                        \
	  (pid_t * pid, const char *path, const posix_spawn_file_actions_t *fa,                    \
	   const posix_spawnattr_t *attr, char *const argv[], char *const envp[]))                 \
	X(int, posix_spawnp,                                                                       \
	  (pid_t * pid, const char *file, const posix_spawn_file_actions_t *fa,                    \
	   const posix_spawnattr_t *attr, char *const argv[], char *const envp[]))                 \
	X(int, posix_spawn_file_actions_init, (posix_spawn_file_actions_t * fa))                   \
	X(int, posix_spawn_file_actions_destroy, (posix_spawn_file_actions_t * fa))                \
	X(int, posix_spawn_file_actions_adddup2,                                                   \
	  (posix_spawn_file_actions_t * fa, int fd, int fd2))                                      \
	X(int, system, (const char *cmd))                                                          \
	X(FILE *, popen, (const char *cmd, const char *mode))                                      \
	X(ssize_t, __read_chk, (int fd, void *buf, size_t n, size_t buflen))                       \
	X(ssize_t, __recv_chk, (int fd, void *buf, size_t n, size_t buflen, int flags))            \
	X(ssize_t, __recvfrom_chk,                                                                 \
	  (int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *addr,           \
	   socklen_t *len))                                                                        \
	X(int, __poll_chk, (struct pollfd *fds, nfds_t n, int timeout, size_t fdslen))             \
	X(int, __ppoll_chk,                                                                        \
	  (struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask,         \
	   size_t fdslen))

#define RSK_REAL_MEMBER(ret, name, params) ret(*name) params;
struct rsk_real_table {
	RSK_REAL_SYMBOLS(RSK_REAL_MEMBER)
};
#undef RSK_REAL_MEMBER

extern RSK_HIDDEN struct rsk_real_table rsk_real;

/*
 * Resolve every symbol with dlsym(RTLD_NEXT). Idempotent and thread-safe (concurrent
 * resolvers store the same values). A symbol libc lacks resolves to a stub that fails with
 * ENOSYS, so the table never holds NULL after this returns.
 */
void rsk_real_resolve(void);

/* Forget every resolved symbol: lets tests exercise lazy resolution. */
void rsk_real_reset(void);

/* True when @name was found in libc (false: it is the ENOSYS stub). */
int rsk_real_available(const char *name);

/*
 * RSK_REAL(name): the real function, resolved lazily. A wrapper can run before our
 * constructor (another library's constructor may call read() first), so every call site
 * goes through this and never trusts the constructor to have run. The slot is loaded once
 * (atomically): a second plain read would race with a concurrent resolver.
 */
#define RSK_REAL(name)                                                                             \
	({                                                                                         \
		__typeof__(rsk_real.name) rsk_fn_ = __atomic_load_n(&rsk_real.name,                \
								    __ATOMIC_ACQUIRE);             \
		if (rsk_unlikely(rsk_fn_ == NULL)) {                                               \
			rsk_real_resolve();                                                        \
			rsk_fn_ = __atomic_load_n(&rsk_real.name, __ATOMIC_ACQUIRE);               \
		}                                                                                  \
		rsk_fn_;                                                                           \
	})

#endif
