/*
 * Programs this process starts without an exec of its own: posix_spawn, and glibc's system()
 * and popen(), which spawn inside libc. Each runs libc's internal execve in a clone of this
 * process, so no exec wrapper of ours runs there, and the rule an exec applies to the
 * listeners it hands over (calls/lifecycle.c; docs/design.md, "A listener another program
 * accepts on") is applied here instead, in the parent, before the call. A posix_spawn file
 * actions object is opaque (its layout is glibc's own), so the dup2 actions that name a
 * listener are recorded as the program adds them, keyed by the object's address, and read
 * back at the spawn.
 */
#include <stdint.h>
#include <unistd.h>

#include "base/log.h"
#include "calls.h"
#include "fastwait.h"
#include "sock/face.h"
#include "sock/sock.h"

/*
 * Dup2 actions naming a listener, of action objects not yet destroyed. A program adds a few
 * actions to an object and spawns with it soon after, so a few places are plenty. One that
 * finds none marks the table lost: until the table empties, a spawn with actions counts every
 * listener as handed (acceleration lost on a listener beats a client stalled on it).
 * Lock-free, so a fork never inherits a held lock: a slot is taken by a compare-and-swap of
 * its key, and only the object's own user fills, reads or frees its slots, as it alone may
 * use the object itself.
 */
#define RSK_SPAWN_DUPS 32

struct rsk_spawn_dup {
	const void *fa; /* NULL: free */
	int fd, newfd;
};

static struct rsk_spawn_dup rsk_spawn_dups[RSK_SPAWN_DUPS];
static int rsk_spawn_lost;

static int rsk_spawn_is_listener(int fd)
{
	struct rsk_sock *s = rsk_sock_get(fd);
	int yes;

	if (s == NULL)
		return 0;
	yes = rsk_sock_listens(s);
	rsk_sock_put(s);
	return yes;
}

void rsk_spawn_dup2(const void *fa, int fd, int newfd)
{
	const void *none;
	int i;

	if (fa == NULL || !rsk_spawn_is_listener(fd))
		return;
	for (i = 0; i < RSK_SPAWN_DUPS; i++) {
		none = NULL;
		if (__atomic_compare_exchange_n(&rsk_spawn_dups[i].fa, &none, fa, 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			rsk_spawn_dups[i].fd = fd;
			rsk_spawn_dups[i].newfd = newfd;
			return;
		}
	}
	rsk_warn("fd %d: a spawn's dup2 of a listener not recorded (%d in use): spawns with file "
		 "actions count every listener as handed until they are destroyed",
		 fd, RSK_SPAWN_DUPS);
	__atomic_store_n(&rsk_spawn_lost, 1, __ATOMIC_RELEASE);
}

void rsk_spawn_forget(const void *fa)
{
	int i, used = 0;

	for (i = 0; i < RSK_SPAWN_DUPS; i++) {
		if (fa != NULL && __atomic_load_n(&rsk_spawn_dups[i].fa, __ATOMIC_ACQUIRE) == fa)
			__atomic_store_n(&rsk_spawn_dups[i].fa, NULL, __ATOMIC_RELEASE);
		used += __atomic_load_n(&rsk_spawn_dups[i].fa, __ATOMIC_ACQUIRE) != NULL;
	}
	if (used == 0)
		__atomic_store_n(&rsk_spawn_lost, 0, __ATOMIC_RELEASE);
}

struct rsk_spawn_walk {
	const void *fa;
	struct rsk_newprog prog;
};

/*
 * Has action object @fa a recorded dup2 of listener @fd onto a number that program @p is
 * handed (a dup2 also clears close-on-exec when the two are one number)? With @fd -1:
 * has it a dup2 of any listener, onto any number. Always yes while the table has lost one.
 */
static int rsk_spawn_dup_of(const void *fa, int fd, const struct rsk_newprog *p)
{
	int i;

	if (fa == NULL)
		return 0;
	if (__atomic_load_n(&rsk_spawn_lost, __ATOMIC_ACQUIRE))
		return 1;
	for (i = 0; i < RSK_SPAWN_DUPS; i++)
		if (__atomic_load_n(&rsk_spawn_dups[i].fa, __ATOMIC_ACQUIRE) == fa &&
		    (fd < 0 || (rsk_spawn_dups[i].fd == fd &&
				rsk_life_hands(rsk_spawn_dups[i].newfd, p))))
			return 1;
	return 0;
}

static int rsk_spawn_handed(int fd, int cloexec, void *arg)
{
	const struct rsk_spawn_walk *w = arg;

	if ((cloexec || !rsk_life_hands(fd, &w->prog)) && !rsk_spawn_dup_of(w->fa, fd, &w->prog))
		return 0;
	rsk_info("fd %d: listening socket handed to a spawned program: new clients of its stay "
		 "on TCP",
		 fd);
	return 1;
}

void rsk_spawn_prepare(const void *fa, char *const argv[], char *const envp[])
{
	struct rsk_spawn_walk w = {.fa = fa, .prog = {.argv = argv, .envp = envp}};

	/* The new program must get the TCP listener, not its face (sock/face.h), on every
	 * number it inherits, as at an exec. Here that is done in this process, so for good
	 * where a dup2 action copies a listener: that number keeps its close-on-exec, and only
	 * turning faces off covers it. */
	(void)rsk_face_restore_all(rsk_spawn_dup_of(fa, -1, NULL));
	rsk_sock_exec_listeners(rsk_spawn_handed, &w);
	/* An epoll set it inherits holds what the application asked at this moment, as at an
	 * exec. */
	rsk_fw_flush_all();
}
