/*
 * Fuzz target: the RDMASOCK_* environment parser (core/base/config.c). The input is a list
 * of variables, one per line: the first byte picks the name, the rest of the line is the
 * value (the last line for a name wins, as in an environment). Checked: the parser counts
 * every rejection it reports, and the configuration it leaves is always fully valid.
 */
#include <string.h>

#include "base/config.h"
#include "fuzz.h"
#include "rdmasock.h"

static const char *const names[] = {
	RDMASOCK_ENV_TRANSPORT,     RDMASOCK_ENV_LOG,       RDMASOCK_ENV_LOG_FILE,
	RDMASOCK_ENV_STATS,         RDMASOCK_ENV_INCLUDE_PORTS, RDMASOCK_ENV_EXCLUDE_PORTS,
	RDMASOCK_ENV_SPIN_US,       RDMASOCK_ENV_BUF_SIZE,  RDMASOCK_ENV_BUF_COUNT,
	RDMASOCK_ENV_INLINE,        RDMASOCK_ENV_CONNECT_TIMEOUT_MS, RDMASOCK_ENV_DEVICE,
	RDMASOCK_ENV_TCP_FIRST,     RDMASOCK_ENV_UPGRADE_BYTES, RDMASOCK_ENV_UPGRADE_MS,
	RDMASOCK_ENV_FASTWAIT,      RDMASOCK_ENV_ORPHAN_MS, RDMASOCK_ENV_COALESCE,
	RDMASOCK_ENV_BEARER,
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static char values[NNAMES][8192];
static int have[NNAMES];
static int reported;

static const char *get(const char *name)
{
	size_t i;

	for (i = 0; i < NNAMES; i++)
		if (strcmp(name, names[i]) == 0)
			return have[i] ? values[i] : NULL;
	FZ_CHECK(!"the parser asked for a variable this target does not know");
	return NULL;
}

static void err(const char *msg, void *arg)
{
	FZ_CHECK(arg == &reported);
	FZ_CHECK(strnlen(msg, 512) < 512);
	reported++;
}

static void check_ports(const struct rsk_port_range *r, unsigned int n)
{
	unsigned int i;

	FZ_CHECK(n <= RSK_CONFIG_MAX_RULES);
	for (i = 0; i < n; i++)
		FZ_CHECK(r[i].lo >= 1 && r[i].lo <= r[i].hi);
}

static void check(const struct rsk_config *c)
{
	FZ_CHECK((unsigned int)c->mode <= RSK_MODE_VERBS);
	FZ_CHECK((unsigned int)c->log_level <= RSK_LOG_DEBUG);
	FZ_CHECK(strnlen(c->log_file, sizeof(c->log_file)) < sizeof(c->log_file));
	FZ_CHECK(strnlen(c->stats_file, sizeof(c->stats_file)) < sizeof(c->stats_file));
	FZ_CHECK(strnlen(c->device, sizeof(c->device)) < sizeof(c->device));
	check_ports(c->include, c->n_include);
	check_ports(c->exclude, c->n_exclude);
	FZ_CHECK(c->spin_us <= 1000000);
	FZ_CHECK(c->buf_size >= 1024 && c->buf_size <= (4u << 20) &&
		 (c->buf_size & (c->buf_size - 1)) == 0);
	FZ_CHECK(c->buf_count >= 6 && c->buf_count <= 1024);
	FZ_CHECK(c->inline_size <= 1024);
	FZ_CHECK(c->connect_timeout_ms >= 1 && c->connect_timeout_ms <= 60000);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rsk_config c;
	size_t i = 0, k, len;
	const uint8_t *nl;
	int bad;

	memset(have, 0, sizeof(have));
	while (i < size) {
		k = data[i++] % NNAMES;
		nl = memchr(data + i, '\n', size - i);
		len = (nl != NULL ? (size_t)(nl - data) : size) - i;
		if (len >= sizeof(values[k]))
			len = sizeof(values[k]) - 1;
		memcpy(values[k], data + i, len);
		values[k][len] = '\0'; /* an environment string ends at its first NUL */
		have[k] = 1;
		i = nl != NULL ? (size_t)(nl - data) + 1 : size;
	}
	reported = 0;
	bad = rsk_config_parse(&c, get, err, &reported);
	FZ_CHECK(bad == reported);
	check(&c);
	/* and without an error callback: the same verdict */
	FZ_CHECK(rsk_config_parse(&c, get, NULL, NULL) == bad);
	check(&c);
	for (i = 0; i < 4; i++)
		(void)rsk_config_port_allowed(&c, (uint16_t)(size * 7919 + i));
	return 0;
}
