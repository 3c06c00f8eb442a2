/*
 * rdmasock doctor's checks: each prints one line, OK, WARN or FAIL, with the fix for
 * anything but OK, and counts into a tally that decides the exit status (cli.h). The RDMA
 * checks live in doctor_rdma.c, the others in doctor.c.
 */
#ifndef RSK_DOCTOR_H
#define RSK_DOCTOR_H

#include <sys/socket.h>

enum rsk_verdict { RSK_OK = 0, RSK_WARN, RSK_FAIL };

struct rsk_doctor {
	int warn, fail;
	int ndev; /* RDMA devices found (the rdma_cm check needs one) */
};

/* Print "<OK|WARN|FAIL> <check>: <what>[; fix: <fix>]" and count it. */
void rsk_report(struct rsk_doctor *d, enum rsk_verdict v, const char *check, const char *fix,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The rules file (RDMASOCK_CONFIG or /etc/rdmasock.conf): one FAIL per bad line. */
void rsk_doctor_rules(struct rsk_doctor *d);

/* RDMA devices, their ports' state, GIDs and the addresses of their netdevs. */
void rsk_doctor_devices(struct rsk_doctor *d);

/* Whether @dst (port included) answers over rdma_cm: a librdmasock listener rejects a
 * probe that carries no hello; a port without listener is rejected by the CM itself. */
void rsk_doctor_rdma_cm(struct rsk_doctor *d, const struct sockaddr *dst, const char *name);

#endif
