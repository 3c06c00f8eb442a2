/*
 * Stand-ins this process made, by fd: a unix socket standing in for a TCP one (a same-host
 * bearer's ends, sock/bearer.c) noted with the unique parts of its two names and the TCP
 * family it speaks for. Knowing it saves the proof by system calls (getsockname, the
 * partner's name, SO_PEERCRED) that a socket found later must give (calls/sockopt.c): a
 * server sets several TCP options on every connection and asks for its peer's name.
 *
 * A note lives until the application's close, close_range, dup2/dup3 onto the number,
 * fdopen (whose fclose no preload sees) or syscall() doing one of these; the preload drops it
 * before the kernel frees the number. An io_uring (which closes where no preload sees) turns
 * the table off for the process. A number not noted (a dup, an exec'd program) is proven the
 * old way. Readers take no lock: a note being rewritten reads as none.
 */
#ifndef RSK_BASE_STANDIN_H
#define RSK_BASE_STANDIN_H

#include <stdint.h>

#include "compiler.h"

struct rsk_standin {
	uint64_t own;  /* unique part of its own unix name (base/addr.h) */
	uint64_t peer; /* and of its partner's */
	int family;    /* AF_INET or AF_INET6: the TCP socket it stands in for */
};

extern RSK_HIDDEN unsigned int rsk_standin_live;

/* Note stand-in @fd (a number the kernel just gave this process). */
void rsk_standin_note(int fd, const struct rsk_standin *si);

/* @fd's note in *@out: 1, or 0 when there is none. */
int rsk_standin_get(int fd, struct rsk_standin *out);

void rsk_standin_drop_slow(int fd);

/* Forget @fd's note (before the number is freed or reused). One load when there is none. */
static inline void rsk_standin_drop(int fd)
{
	if (rsk_unlikely(__atomic_load_n(&rsk_standin_live, __ATOMIC_RELAXED) != 0))
		rsk_standin_drop_slow(fd);
}

/* Forget the notes of fds @first..@last. */
void rsk_standin_drop_range(unsigned int first, unsigned int last);

/* No notes from now on, and none read (io_uring: the ring closes fds unseen). */
void rsk_standin_off(void);

/* Fds noted now (tests). */
unsigned int rsk_standin_count(void);

/* Drop every note and chunk, and turn the table on again. Tests only: no concurrent use. */
void rsk_standin_clear(void);

#endif
