/*
 * Rules applied to the process (policy.h). The program filter runs once at start, so a
 * connect pays a short loop over this program's rules and nothing when there are none.
 * Precedence, highest first: environment variable, first matching rule, built-in default.
 */
#include <errno.h>
#include <string.h>

#include "policy.h"
#include "rdmasock.h"

static struct rsk_rules rsk_policy_rules;
static int rsk_policy_env_mode; /* RDMASOCK_TRANSPORT set: rules choose no transport */
static int rsk_policy_kernel; /* rsk_policy_kernel_only: every new connection stays TCP */

/* The environment variable behind each tunable a rule can set. */
static const char *const rsk_policy_env[RSK_RK_COUNT] = {
	[RSK_RK_TRANSPORT] = RDMASOCK_ENV_TRANSPORT,
	[RSK_RK_SPIN_US] = RDMASOCK_ENV_SPIN_US,
	[RSK_RK_BUF_SIZE] = RDMASOCK_ENV_BUF_SIZE,
	[RSK_RK_BUF_COUNT] = RDMASOCK_ENV_BUF_COUNT,
	[RSK_RK_INLINE] = RDMASOCK_ENV_INLINE,
	[RSK_RK_CONNECT_TIMEOUT_MS] = RDMASOCK_ENV_CONNECT_TIMEOUT_MS,
};

static unsigned int *rsk_policy_slot(struct rsk_config *c, int key)
{
	switch (key) {
	case RSK_RK_SPIN_US:
		return &c->spin_us;
	case RSK_RK_BUF_SIZE:
		return &c->buf_size;
	case RSK_RK_BUF_COUNT:
		return &c->buf_count;
	case RSK_RK_INLINE:
		return &c->inline_size;
	case RSK_RK_CONNECT_TIMEOUT_MS:
		return &c->connect_timeout_ms;
	default:
		return NULL;
	}
}

/* Tunables are per process: the first process-wide rule of this program gives them. */
static void rsk_policy_tunables(struct rsk_config *c, const char *(*get)(const char *name))
{
	const struct rsk_rule *r = NULL;
	unsigned int i, *slot;
	int k;

	for (i = 0; i < rsk_policy_rules.n && r == NULL; i++)
		if (rsk_rule_process_wide(&rsk_policy_rules.r[i]))
			r = &rsk_policy_rules.r[i];
	for (k = 0; r != NULL && k < RSK_RK_COUNT; k++)
		if ((r->set & (1u << k)) && get(rsk_policy_env[k]) == NULL &&
		    (slot = rsk_policy_slot(c, k)) != NULL)
			*slot = r->val[k];
}

int rsk_policy_init(struct rsk_config *c, const char *(*get)(const char *name),
		    const char *program, rsk_rules_err_fn err, void *arg)
{
	const char *path = get(RDMASOCK_ENV_CONFIG);
	int rc;

	rsk_policy_reset();
	rsk_policy_env_mode = get(RDMASOCK_ENV_TRANSPORT) != NULL;
	rc = rsk_rules_load(&rsk_policy_rules, path ? path : RSK_RULES_DEFAULT_PATH, err, arg);
	if (rc < 0) {
		rsk_policy_rules.n = 0;
		return path == NULL && rc == -ENOENT ? 0 : rc;
	}
	rsk_rules_filter(&rsk_policy_rules, program);
	rsk_policy_tunables(c, get);
	return (int)rsk_policy_rules.n;
}

enum rsk_mode rsk_policy_mode(int role, const struct sockaddr *addr)
{
	const struct rsk_rule *r;

	if (__atomic_load_n(&rsk_policy_kernel, __ATOMIC_RELAXED))
		return RSK_MODE_KERNEL;
	if (rsk_policy_env_mode || rsk_policy_rules.n == 0)
		return rsk_config.mode;
	r = rsk_rules_match(&rsk_policy_rules, NULL, role, addr);
	if (r == NULL || !(r->set & (1u << RSK_RK_TRANSPORT)))
		return rsk_config.mode;
	return (enum rsk_mode)r->val[RSK_RK_TRANSPORT];
}

int rsk_policy_kernel_only(void)
{
	return !__atomic_exchange_n(&rsk_policy_kernel, 1, __ATOMIC_RELAXED);
}

int rsk_policy_is_kernel_only(void)
{
	return __atomic_load_n(&rsk_policy_kernel, __ATOMIC_RELAXED);
}

void rsk_policy_reset(void)
{
	memset(&rsk_policy_rules, 0, sizeof(rsk_policy_rules));
	rsk_policy_env_mode = 0;
	rsk_policy_kernel = 0;
}
