# Helpers of the connection-scale tests (test_scale_*.sh), sourced after lib.sh: preloaded
# runs under a hard time limit (timeout itself not preloaded), key=value parsing of the test
# programs' result lines, and stats assertions for runs where the library may keep some
# connections on TCP on purpose (fd budget), which assert_carried does not allow.

# The environment of a preloaded run, for `timeout ... env "${PRE_ENV[@]}" CMD`, as it is at
# the call (pre_env_now: a test may point RSK_STATS elsewhere between runs, as
# test_scale_churn.sh does for its second pair).
pre_env_now() {
	PRE_ENV=(LD_PRELOAD="$RSK_PRELOAD" RDMASOCK_TRANSPORT="$RSK_TEST_TRANSPORT"
		RDMASOCK_STATS="$RSK_STATS" RDMASOCK_TCP_FIRST="$RSK_TCP_FIRST"
		RDMASOCK_UPGRADE_MS="$RSK_UPGRADE_MS")
}
pre_env_now

# run_limited SECS [pre] CMD...: CMD (preloaded after the word "pre"), killed after SECS
# (exit 124 then, as timeout reports it).
run_limited() {
	local secs=$1
	shift
	if [ "${1:-}" = pre ]; then
		shift
		pre_env_now
		timeout -k 5 "$secs" env "${PRE_ENV[@]}" "$@"
	else
		timeout -k 5 "$secs" "$@"
	fi
}

# kv FILE PREFIX KEY: the value of KEY= on the last line of FILE starting with PREFIX.
kv() {
	grep "^$2" "$1" | tail -1 | tr ' ' '\n' | sed -n "s/^$3=//p" | tr -d '"' | head -1
}

# stats_summary [PROGRAM]: one line per process (of PROGRAM): connections and fallbacks.
stats_summary() {
	python3 - "$RSK_STATS" "${1:-}" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for l in lines:
    o = json.loads(l)
    if sys.argv[2] and o["program"] != sys.argv[2]:
        continue
    fb = {k: v for k, v in o["fallbacks"].items() if v}
    print("  %s[%d]: connections %s fallbacks %s" % (o["program"], o["pid"], o["connections"], fb))
PY
}

# Python prepended to assert_conns' and assert_path's: totals(PATH, PROGRAM) sums the
# connections per transport and the fallbacks per reason over PROGRAM's stats lines (one a
# process), and exits failing when there is none.
SCALE_TOTALS_PY=$(
	cat <<'PY'
import json, sys
def totals(path, prog):
    conns, fbs = {}, {}
    lines = [json.loads(l) for l in open(path).read().splitlines()]
    lines = [o for o in lines if o["program"] == prog]
    if not lines:
        sys.exit("no stats line from " + prog)
    for o in lines:
        for t, n in o["connections"].items():
            conns[t] = conns.get(t, 0) + n
        for r, n in o["fallbacks"].items():
            fbs[r] = fbs.get(r, 0) + n
        # the same-host bearer's (the default's for short connections): a path of its own
        if o.get("bearer_connections", 0):
            conns["bearer"] = conns.get("bearer", 0) + o["bearer_connections"]
    return conns, fbs
PY
)

# scale_py ARG...: the Python program on stdin, after SCALE_TOTALS_PY, with ARGs.
scale_py() {
	python3 - "$@" < <(printf '%s\n' "$SCALE_TOTALS_PY" && cat)
}

# assert_conns PROGRAM TRANSPORT MIN [REASON...]: the processes of PROGRAM accounted at least
# MIN connections on TRANSPORT; every connection on another transport is explained by a
# fallback of one of the REASONs (none given: no other transport at all; "bearer": the
# same-host bearer's connections), and no fallback of another reason happened.
assert_conns() {
	scale_py "$RSK_STATS" "$@" <<'PY' || fail "stats of $1 do not show the expected transport"
path, prog, want, min_conns, reasons = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
conns, fbs = totals(path, prog)
print("%s: connections %s, fallbacks %s" % (prog, conns, {r: n for r, n in fbs.items() if n}))
if conns.get(want, 0) < min_conns:
    sys.exit("%s: %s connections %d < %d" % (prog, want, conns.get(want, 0), min_conns))
others = sum(n for t, n in conns.items() if t != want)
if want != "kernel":
    # ("bearer" among the REASONs: the same-host bearer's connections are allowed too)
    explained = sum(fbs.get(r, 0) for r in reasons) + \
        (conns.get("bearer", 0) if "bearer" in reasons else 0)
    if others > explained:
        sys.exit("%s: %d connections on other transports, %d explained by %s" %
                 (prog, others, explained, reasons or "no allowed reason"))
elif others:
    sys.exit("%s: %d connections not on the kernel" % (prog, others))
bad = {r: n for r, n in fbs.items() if n and r not in reasons and want != "kernel"}
if want == "kernel":
    bad = {r: n for r, n in fbs.items() if n and r != "policy"}
if bad:
    sys.exit("%s: unexpected fallbacks %s" % (prog, bad))
PY
}

# assert_path PROGRAM TOTAL TRANSPORT [ITEM...]: the processes of PROGRAM made exactly TOTAL
# connections, on TRANSPORT but for what the ITEMs allow: "REASON" any number of fallbacks
# of that reason, "REASON:MAX" at most MAX of them, "OTHER_TRANSPORT:MAX" at most MAX
# connections there ("bearer": the same-host bearer's, stats bearer_connections; without
# :MAX any number). Fallbacks of reasons not named, and connections on transports not named,
# fail it. Prints the counts: which path carried the connections.
assert_path() {
	scale_py "$RSK_STATS" "$@" <<'PY' || fail "stats of $1: not the path this variant claims"
path, prog, total, want, items = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
conns, fbs = totals(path, prog)
limit = {}
for it in items:
    name, _, mx = it.partition(":")
    limit[name] = int(mx) if mx else None
print("%s: connections %s, fallbacks %s" % (prog, conns, {r: n for r, n in fbs.items() if n}))
errs = []
if sum(conns.values()) != total:
    errs.append("%d connections, not %d" % (sum(conns.values()), total))
for t, n in conns.items():
    if t != want and t != "kernel" and n and (t not in limit or
                                              (limit[t] is not None and n > limit[t])):
        errs.append("%d on %s (allowed: %s)" % (n, t, limit.get(t, 0)))
for r, n in fbs.items():
    if n and r not in limit:
        errs.append("%d fallbacks '%s' (not allowed)" % (n, r))
    elif n and limit[r] is not None and n > limit[r]:
        errs.append("%d fallbacks '%s' (at most %d)" % (n, r, limit[r]))
if want != "kernel" and conns.get("kernel", 0) > sum(n for r, n in fbs.items() if r in limit):
    errs.append("%d on kernel, not all by an allowed fallback" % conns.get("kernel", 0))
if errs:
    sys.exit("%s: %s" % (prog, "; ".join(errs)))
print("%s: %.2f%% of %d connections on %s" % (prog, 100.0 * conns.get(want, 0) / total, total, want))
PY
}
