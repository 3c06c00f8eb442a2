/*
 * Fuzz target: the verbs hello, the rdma_cm private data a client sends with its connect
 * request and a server with its accept (rsk_hello_parse, core/transport/verbs_cm.c), which
 * any host that reaches the rdma_cm port controls. No device needed.
 * Checked: it never reads past the bytes given (ASan), accepts only our magic and version and
 * a geometry inside the engine's limits, and reads back what an encoder would have written.
 */
#include <arpa/inet.h>
#include <errno.h>

#include "fuzz.h"
#include "transport/transport.h"
#include "transport/verbs.h"
#include "transport/verbs_cm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t len = size > 255 ? 255 : (uint8_t)size; /* private_data_len is a byte */
	struct rsk_verbs_hello h, wire;
	uint8_t *copy = malloc(len ? len : 1); /* exactly @len bytes: an overread is caught */
	int rc;

	if (copy == NULL)
		return 0;
	memcpy(copy, data, len);
	rc = rsk_hello_parse(len ? copy : NULL, len, &h);
	FZ_CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
	if (rc == 0) {
		FZ_CHECK(len >= sizeof(h));
		memcpy(&wire, copy, sizeof(wire));
		FZ_CHECK(ntohl(wire.magic) == RSK_VERBS_MAGIC);
		FZ_CHECK(ntohs(wire.version) == RSK_VERBS_VERSION);
		FZ_CHECK(h.nbuf == ntohl(wire.nbuf) && h.buf_size == ntohl(wire.buf_size));
		FZ_CHECK(h.tcp_port == ntohs(wire.tcp_port));
		FZ_CHECK(h.nbuf >= RSK_EP_MIN_NBUF && h.nbuf <= 4096);
		FZ_CHECK(h.buf_size >= 1024 && h.buf_size <= (4u << 20));
	}
	free(copy);
	return 0;
}
