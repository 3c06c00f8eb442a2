/*
 * rdmasock stat: a live table of every preloaded process's sockets (fd, addresses, state,
 * transport, bytes and messages each way, credit stalls, fallback reason) with totals per
 * process, or one JSON object per process and sample with --json. Data comes from the
 * processes' stats segments (statseg_read.c); asking wakes their publishers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "cli.h"
#include "base/stats.h"
#include "statseg_read.h"

#define RSK_STAT_MAX_PROCS 1024
#define RSK_STAT_WAIT_MS 2000 /* a publisher answers within ~100 ms unless stopped */

void rsk_help_stat(void)
{
	printf("Usage: rdmasock stat [-p PID | -n NAME] [-i SECONDS] [-c COUNT] [--json]\n"
	       "Show the sockets of running preloaded processes of this user, live.\n"
	       "\n"
	       "  -p, --pid PID        only process PID\n"
	       "  -n, --name NAME      only programs named NAME (a glob, e.g. 'redis-*')\n"
	       "  -i, --interval SECS  repeat every SECS seconds (until interrupted)\n"
	       "  -c, --count COUNT    stop after COUNT samples\n"
	       "  -j, --json           one JSON object per process and sample\n"
	       "  -h, --help           show this help and exit\n"
	       "\n"
	       "Columns: TRANSPORT is kernel, shm or verbs (accel: a listener that accepts\n"
	       "accelerated connections); FALLBACK says why a kernel connection is one.\n"
	       "Exit status: 0; 1 if -p/-n matched no readable preloaded process; 2 usage.\n");
}

struct rsk_stat_opts {
	long pid;
	const char *name;
	double interval;
	long count;
	int json;
};

static const char *const rsk_state_names[] = {"new", "connecting", "established", "listen"};

static const char *rsk_stat_state(const struct rsk_statseg_sock *r)
{
	return r->state < 4 ? rsk_state_names[r->state] : "?";
}

static const char *rsk_stat_transport(const struct rsk_statseg_sock *r)
{
	return (r->flags & RSK_STATSEG_F_RENDEZVOUS) ? "accel"
						       : rsk_transport_name((enum rdmasock_transport)r->transport);
}

static const char *rsk_stat_fallback(const struct rsk_statseg_sock *r)
{
	if (!(r->flags & RSK_STATSEG_F_FALLBACK) ||
	    (r->state != RSK_STATSEG_ST_CONNECTED && r->state != RSK_STATSEG_ST_LISTENING))
		return "-";
	return rsk_fallback_name((enum rdmasock_fallback)r->fallback);
}

/* "addr:port" ("[v6]:port"), or "-" when unknown / unconnected. */
static void rsk_stat_addr(const struct rsk_statseg_sock *r, const uint8_t *a, uint16_t port,
			  char *out, size_t size)
{
	char txt[INET6_ADDRSTRLEN];
	int fam = r->family == AF_INET6 ? AF_INET6 : AF_INET;

	if (r->family == 0 || inet_ntop(fam, a, txt, sizeof(txt)) == NULL) {
		snprintf(out, size, "-");
		return;
	}
	if (port == 0 && a == r->peer_addr) {
		snprintf(out, size, "-");
		return;
	}
	snprintf(out, size, fam == AF_INET6 ? "[%s]:%u" : "%s:%u", txt, port);
}

static void rsk_stat_row(const struct rsk_seg_proc *p, const struct rsk_statseg_sock *r)
{
	char la[64], pa[64];

	rsk_stat_addr(r, r->local_addr, r->local_port, la, sizeof(la));
	rsk_stat_addr(r, r->peer_addr, r->peer_port, pa, sizeof(pa));
	printf("%-7d %-15.15s %5d %-11s %-6s %-24s %-24s %12" PRIu64 " %12" PRIu64 " %9" PRIu64
	       " %9" PRIu64 " %6" PRIu64 " %s\n",
	       p->hdr.pid, p->hdr.program, r->fd, rsk_stat_state(r), rsk_stat_transport(r), la, pa,
	       r->bytes_sent, r->bytes_received, r->messages_sent, r->messages_received,
	       r->credit_stalls, rsk_stat_fallback(r));
}

static uint64_t rsk_sum(const uint64_t *v)
{
	return v[0] + v[1] + v[2];
}

static void rsk_stat_totals(const struct rsk_seg_proc *p)
{
	const struct rdmasock_stats *t = &p->hdr.totals;
	int i, any = 0;

	printf("%-7d %-15.15s total: connections kernel %" PRIu64 ", shm %" PRIu64 ", verbs %" PRIu64
	       "; bytes sent %" PRIu64 ", received %" PRIu64 "; credit stalls %" PRIu64 "; fallbacks:",
	       p->hdr.pid, p->hdr.program, t->connections[0], t->connections[1], t->connections[2],
	       rsk_sum(t->bytes_sent), rsk_sum(t->bytes_received), t->credit_stalls);
	for (i = 0; i < RDMASOCK_FB_COUNT; i++)
		if (t->fallbacks[i] != 0)
			printf("%s %s %" PRIu64, any++ ? "," : "",
			       rsk_fallback_name((enum rdmasock_fallback)i), t->fallbacks[i]);
	printf("%s%s%s\n", any ? "" : " none", p->fresh ? "" : " (not responding: stale data)",
	       p->hdr.dropped ? " (more sockets than the segment holds)" : "");
}

static void rsk_stat_table(struct rsk_seg_proc *procs, int n)
{
	uint32_t j;
	int i;

	printf("%-7s %-15s %5s %-11s %-6s %-24s %-24s %12s %12s %9s %9s %6s %s\n", "PID", "PROGRAM",
	       "FD", "STATE", "TRANSP", "LOCAL", "PEER", "TX_BYTES", "RX_BYTES", "TX_MSGS", "RX_MSGS",
	       "STALLS", "FALLBACK");
	for (i = 0; i < n; i++) {
		for (j = 0; j < procs[i].hdr.nrec; j++)
			rsk_stat_row(&procs[i], &procs[i].rec[j]);
		rsk_stat_totals(&procs[i]);
	}
}

static void rsk_stat_json_sock(const struct rsk_statseg_sock *r, int first)
{
	char la[64], pa[64];

	rsk_stat_addr(r, r->local_addr, r->local_port, la, sizeof(la));
	rsk_stat_addr(r, r->peer_addr, r->peer_port, pa, sizeof(pa));
	printf("%s{\"fd\":%d,\"local\":\"%s\",\"peer\":\"%s\",\"state\":\"%s\",\"transport\":\"%s\","
	       "\"bytes_sent\":%" PRIu64 ",\"bytes_received\":%" PRIu64 ",\"messages_sent\":%" PRIu64
	       ",\"messages_received\":%" PRIu64 ",\"credit_stalls\":%" PRIu64 ",\"fallback\":\"%s\"}",
	       first ? "" : ",", r->fd, la, pa, rsk_stat_state(r), rsk_stat_transport(r),
	       r->bytes_sent, r->bytes_received, r->messages_sent, r->messages_received,
	       r->credit_stalls, rsk_stat_fallback(r));
}

/* One line per process: the sockets, and as "totals" the RDMASOCK_STATS object itself. */
static void rsk_stat_json(struct rsk_seg_proc *procs, int n)
{
	char totals[4096];
	uint32_t j;
	int i;

	for (i = 0; i < n; i++) {
		const struct rsk_statseg_hdr *h = &procs[i].hdr;

		if (rsk_stats_format(&h->totals, h->pid, h->program, totals, sizeof(totals)) < 0)
			snprintf(totals, sizeof(totals), "null");
		printf("{\"pid\":%d,\"time_ms\":%" PRIu64 ",\"fresh\":%s,\"dropped\":%u,\"sockets\":[",
		       h->pid, h->published_ms, procs[i].fresh ? "true" : "false", h->dropped);
		for (j = 0; j < h->nrec; j++)
			rsk_stat_json_sock(&procs[i].rec[j], j == 0);
		printf("],\"totals\":%s}\n", totals);
	}
}

static int rsk_stat_parse(int argc, char **argv, struct rsk_stat_opts *o)
{
	static const struct option longs[] = {
		{"pid", required_argument, NULL, 'p'},   {"name", required_argument, NULL, 'n'},
		{"interval", required_argument, NULL, 'i'}, {"count", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "p:n:i:c:jh", longs, NULL)) != -1) {
		errno = 0;
		if (c == 'p' && ((o->pid = strtol(optarg, &end, 10)) <= 0 || *end || errno))
			return -rsk_cli_usage("stat", "invalid pid '%s'", optarg);
		if (c == 'n')
			o->name = optarg;
		if (c == 'i' && (!((o->interval = strtod(optarg, &end)) >= 0.1) || *end ||
				 o->interval > 86400))
			return -rsk_cli_usage("stat", "invalid interval '%s' (0.1 to 86400 s)", optarg);
		if (c == 'c' && ((o->count = strtol(optarg, &end, 10)) <= 0 || *end || errno))
			return -rsk_cli_usage("stat", "invalid count '%s'", optarg);
		if (c == 'j')
			o->json = 1;
		if (c == 'h') {
			rsk_help_stat();
			return 1;
		}
		if (c == '?')
			return -rsk_cli_usage("stat", "invalid option");
	}
	if (optind < argc)
		return -rsk_cli_usage("stat", "unexpected argument '%s'", argv[optind]);
	if (o->pid && o->name)
		return -rsk_cli_usage("stat", "-p and -n exclude each other");
	return 0;
}

/* The processes to show this time (-p: that one, reporting why it cannot be read). */
static int rsk_stat_open(const struct rsk_stat_opts *o, struct rsk_seg_proc *procs)
{
	static pid_t pids[RSK_STAT_MAX_PROCS];
	int n, i, k = 0, rc;

	if (o->pid) {
		rc = rsk_seg_open((pid_t)o->pid, &procs[0]);
		if (rc == -EACCES)
			rsk_cli_error("pid %ld: its stats belong to another user", o->pid);
		else if (rc < 0)
			rsk_cli_error("pid %ld: not a running preloaded process (%s)", o->pid,
				      rc == -ESRCH ? "no stats segment" : strerror(-rc));
		return rc < 0 ? 0 : 1;
	}
	n = rsk_seg_list(pids, RSK_STAT_MAX_PROCS);
	for (i = 0; i < n; i++) {
		if (rsk_seg_open(pids[i], &procs[k]) < 0)
			continue;
		if (o->name && fnmatch(o->name, procs[k].map->program, 0) != 0) {
			rsk_seg_close(&procs[k]);
			continue;
		}
		k++;
	}
	return k;
}

static int rsk_stat_once(const struct rsk_stat_opts *o)
{
	static struct rsk_seg_proc procs[RSK_STAT_MAX_PROCS];
	int n = rsk_stat_open(o, procs), i;

	if (n > 0)
		rsk_seg_sample(procs, n, RSK_STAT_WAIT_MS);
	if (o->json)
		rsk_stat_json(procs, n);
	else if (n > 0)
		rsk_stat_table(procs, n);
	else if (!o->pid)
		fprintf(stderr, "rdmasock: no running preloaded process%s%s\n",
			o->name ? " named " : "", o->name ? o->name : "");
	for (i = 0; i < n; i++)
		rsk_seg_close(&procs[i]);
	fflush(stdout);
	return n;
}

int rsk_cmd_stat(int argc, char **argv)
{
	struct rsk_stat_opts o = {0};
	struct timespec ts;
	long i;
	int rc = rsk_stat_parse(argc, argv, &o), found = 0;

	if (rc != 0)
		return rc > 0 ? RSK_EXIT_OK : -rc;
	if (o.count == 0)
		o.count = o.interval > 0 ? -1 : 1; /* -1: until interrupted */
	for (i = 0; o.count < 0 || i < o.count; i++) {
		if (i > 0) {
			ts.tv_sec = (time_t)o.interval;
			ts.tv_nsec = (long)((o.interval - (double)ts.tv_sec) * 1e9);
			nanosleep(&ts, NULL);
			if (!o.json)
				printf("\n");
		}
		found += rsk_stat_once(&o) > 0;
	}
	return (o.pid || o.name) && found == 0 ? RSK_EXIT_ERROR : RSK_EXIT_OK;
}
