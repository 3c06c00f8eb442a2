/*
 * TCP states as TCP_INFO reports them (tcpi_state, from the kernel's include/net/tcp_states.h,
 * which neither <linux/tcp.h> nor <netinet/tcp.h> exports), in one spelling for all of core,
 * and a kernel socket's state in one call.
 */
#ifndef RSK_TCPSTATE_H
#define RSK_TCPSTATE_H

#include <netinet/in.h>
#include <stdint.h>

#include "sys.h"

enum rsk_tcp_state {
	RSK_TCPS_ESTABLISHED = 1,
	RSK_TCPS_SYN_SENT = 2,
	RSK_TCPS_FIN_WAIT2 = 5,
	RSK_TCPS_CLOSE = 7,
	RSK_TCPS_CLOSE_WAIT = 8,
	RSK_TCPS_CLOSING = 11,
};

/* TCP_INFO's option number, here so that this header needs neither TCP header (they clash). */
#define RSK_TCP_INFO_OPT 11

/* The state of kernel TCP socket @fd (enum rsk_tcp_state), or -errno. tcpi_state is the
 * first byte of struct tcp_info: the kernel copies no more than asked. */
static inline int rsk_sys_tcp_state(int fd)
{
	uint8_t ti[8] = {0};
	socklen_t len = sizeof(ti);
	int rc = rsk_sys_getsockopt(fd, IPPROTO_TCP, RSK_TCP_INFO_OPT, ti, &len);

	return rc < 0 ? rc : ti[0];
}

#endif
