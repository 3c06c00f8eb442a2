/*
 * The transport registry (see registry.h): the one place outside each transport that names
 * them. Verbs claims go first on a listener: a verbs client's QP is connected before its
 * TCP connection, so its claim is ready when accept() returns.
 */
#include "base/addr.h"
#include "registry.h"
#include "shm.h"
#include "shm_door.h"
#include "shm_cm.h"
#include "shm_rdv.h"
#include "verbs.h"
#include "verbs_cm.h"

const struct rsk_cm_ops *rsk_transport_cm(const struct rsk_ep *ep)
{
	return ep->ops == &rsk_verbs_ops ? &rsk_verbs_cm_ops : &rsk_shm_cm_ops;
}

const struct rsk_cm_ops *rsk_transport_route(enum rsk_mode mode, const struct sockaddr *dest,
					     enum rdmasock_fallback *why)
{
	if (mode == RSK_MODE_VERBS)
		return &rsk_verbs_cm_ops;
	if (rsk_addr_is_local(dest))
		return &rsk_shm_cm_ops;
	if (mode == RSK_MODE_SHM) {
		*why = RDMASOCK_FB_NOT_LOCAL;
		return NULL;
	}
	return &rsk_verbs_cm_ops;
}

void rsk_transport_atfork_child(void)
{
	rsk_shm_atfork_child(); /* its segment pool is the parent's */
	rsk_door_atfork_child(); /* and so is the door it inherited */
}

void rsk_transport_forked(pid_t child)
{
	rsk_rdv_bells_forked(child); /* a bell can outlive us with the child */
}

void rsk_transport_quick_exit(void)
{
	rsk_rdv_bells_end_all(); /* listeners' doorbell files */
}

int rsk_transport_listening(enum rsk_mode mode, const struct rsk_cm_ops *out[RSK_TRANSPORT_MAX])
{
	int n = 0;

	if (mode == RSK_MODE_KERNEL)
		return 0;
	if (mode == RSK_MODE_AUTO || mode == RSK_MODE_VERBS)
		out[n++] = &rsk_verbs_cm_ops;
	out[n++] = &rsk_shm_cm_ops;
	return n;
}

