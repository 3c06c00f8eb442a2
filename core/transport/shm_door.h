/*
 * A process's door (see shm_rdv.h, knocks): where the clients of a rendezvous this process
 * shares with siblings say that an upgrade offer of theirs is queued, so that the process
 * whose connection it is takes it. The door knows no listener: it hands each knock to the
 * function its opener registered.
 */
#ifndef RSK_SHM_DOOR_H
#define RSK_SHM_DOOR_H

#include <sys/socket.h>

/* Called from the event loop for each knock of our own user's: the client at @peer. */
typedef void (*rsk_knock_fn)(const struct sockaddr_storage *peer);

/*
 * Open this process's door and have the event loop watch it, once per process (a forked
 * child opens its own; it never watches its parent's); its knocks go to @fn (the last one
 * given). Cheap once open: one load. 0, or -errno (tried again a second later at the
 * earliest).
 */
int rsk_door_open(rsk_knock_fn fn);

/* A forked child: its copy of the parent's door goes. Kept, it would hold the door's name
 * (the parent's pid) while the child lived: after the parent's exit, a new process given
 * that pid could not open its door, and its connections would never hear a knock. */
void rsk_door_atfork_child(void);

/* The open door's fd in this process, or -1 (tests). */
int rsk_door_fd(void);

#endif
