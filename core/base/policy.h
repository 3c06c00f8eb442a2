/*
 * The rules file applied to this process: loaded once at start, filtered by program name,
 * then asked per connection which transport to use. The environment always wins: a set
 * RDMASOCK_TRANSPORT makes rules' transport= moot, a set RDMASOCK_BUF_SIZE their buf_size=.
 */
#ifndef RSK_BASE_POLICY_H
#define RSK_BASE_POLICY_H

#include <sys/socket.h>

#include "config.h"
#include "rules.h"

/*
 * Load the rules file named by @get("RDMASOCK_CONFIG") (default /etc/rdmasock.conf, which
 * may be missing), keep the rules for @program and apply the tunables of the first
 * process-wide one to @c where the environment (@get) did not set them. Problems go to
 * @err, one per bad line. Returns the number of rules kept, or -errno when a file named
 * in RDMASOCK_CONFIG cannot be read.
 */
int rsk_policy_init(struct rsk_config *c, const char *(*get)(const char *name),
		    const char *program, rsk_rules_err_fn err, void *arg);

/*
 * The transport for a connection in @role (RSK_ROLE_CLIENT: to @addr; RSK_ROLE_SERVER: a
 * listener bound at @addr), ports included: the first matching rule's transport=, else
 * rsk_config.mode. Lock-free: the rules do not change after init.
 */
enum rsk_mode rsk_policy_mode(int role, const struct sockaddr *addr);

/*
 * From now on every new connection stays on the kernel, whatever the rules say (the process
 * set up io_uring, whose socket I/O no preload sees). Returns 1 the first time, 0 after.
 */
int rsk_policy_kernel_only(void);
int rsk_policy_is_kernel_only(void);

/* Forget the loaded rules (tests). */
void rsk_policy_reset(void);

#endif
