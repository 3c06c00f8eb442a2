#!/usr/bin/env bash
# System calls per request / message, with and without librdmasock, counted per process.
#
# Timings on this shared machine are noisy; syscall counts are not, and they are what a fast
# path has to remove. Every workload alternates plain, lib, plain, lib, ... (fresh server per
# run on a free 127.0.0.1 port, stopped by PID) and prints medians as markdown tables on
# stdout (progress on stderr).
#
#   plain: no LD_PRELOAD anywhere: kernel TCP loopback.
#   lib:   LD_PRELOAD=build/librdmasock.so in server AND client, RDMASOCK_TRANSPORT=shm
#          (BENCH_TRANSPORT), RDMASOCK_STATS per run; a lib run whose stats do not show
#          >= 99% of the bytes on shm from both ends is flagged in the table.
#
# Counting: `perf stat -e raw_syscalls:sys_enter,syscalls:sys_enter_*` (all threads of the
# process: the server is attached with -p once it listens and detached before it is
# stopped; the client runs under perf stat from exec to exit). Per-syscall tracepoints of the
# calls in BREAKDOWN give the breakdown (the remainder is "other"). When perf cannot count tracepoints here the script falls back to
# `strace -f -c` and says so in the output: strace stops the tracee at every syscall, which
# lengthens every wait and so changes how often the library's spin gives up.
#
# Workloads (ops = the denominator):
#   redis-benchmark -c 50 -t get -n N     ops = N GETs (server and client each / N)
#   sockperf pp --tcp -m 64 -t S          ops = round trips the client counted (whole run)
#   sockperf tp --tcp -m 1024 -t S        ops = messages the client sent (whole run)
# Server on BENCH_SERVER_CPU, client on BENCH_CLIENT_CPU (BENCH_PIN=split by default).
#
# Soft-RoCE guest (opt-in, heavy: boots qemu TCG, ~1-3 min): BENCH_VM=1 adds, BENCH_VM=only
# runs only, sockperf pp over verbs inside test/vm's guest under strace -f -c (the guest has
# no perf), plain kernel TCP across the veth pair vs the library with RDMASOCK_TRANSPORT=verbs
# and RDMASOCK_SPIN_US=BENCH_VM_SPIN_US (default 200000: waits spin rather than sleep); then
# the same pairs untraced for their latency only (BVM-LAT lines, 3 s each, interleaved).
# See bench/syscalls_vm_guest.sh.
#
# Usage: bash bench/syscalls.sh                 (~2 min: 3 reps x 3 workloads x 2 sides)
#        BENCH_VM=1 bash bench/syscalls.sh      (+ the guest part)
# Environment [defaults]:
#   BENCH_REPS [3]            repetitions per side
#   BENCH_REDIS_N [100000]    GETs per redis-benchmark run (bounded by a timeout too)
#   BENCH_SOCKPERF_SECS [2]   sockperf -t
#   BENCH_SKIP [none]         comma list of redis,pp,tp
#   BENCH_COUNTER [auto]      perf | strace | auto (perf when it can count tracepoints)
#   BENCH_PIN [split]         off | split | same (bench/lib.sh)
#   BENCH_TRANSPORT [shm]     RDMASOCK_TRANSPORT of the lib side
#   BENCH_SPIN_US [unset]     RDMASOCK_SPIN_US of the lib side (unset: library default)
#   BENCH_TOP [6]             syscalls listed per row in the breakdown table
#   BENCH_VM [0]              1 | only (see above); BENCH_VM_REPS [3], BENCH_VM_SECS [6] and
#                             BENCH_VM_SHORT_SECS [1] (long and short run: the difference is
#                             counted), BENCH_VM_SPIN_US [200000], BENCH_VM_TIMEOUT [600]
#   RDMASOCK_LIB, BENCH_KEEP  as in bench/lib.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPS=${BENCH_REPS:-3}
REDIS_N=${BENCH_REDIS_N:-100000}
SP_SECS=${BENCH_SOCKPERF_SECS:-2}
SKIP=",${BENCH_SKIP:-},"
TRANSPORT=${BENCH_TRANSPORT:-shm}
SPIN=${BENCH_SPIN_US:-}
TOP=${BENCH_TOP:-6}
VM=${BENCH_VM:-0}
export BENCH_PIN=${BENCH_PIN:-split}
MIN_SHARE=99

[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_REPS must be a positive integer"
[[ "$REDIS_N" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_REDIS_N must be a positive integer"
[[ "$SP_SECS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_SOCKPERF_SECS must be a positive integer"
[ -z "$SPIN" ] || [[ "$SPIN" =~ ^[0-9]+$ ]] || bench_die "BENCH_SPIN_US must be an integer"
case "$VM" in 0 | 1 | only) ;; *) bench_die "BENCH_VM must be 0, 1 or only" ;; esac
for tool in sockperf redis-server redis-benchmark taskset python3 ss timeout; do
	command -v "$tool" >/dev/null || bench_die "$tool is not installed (scripts/install-deps.sh)"
done

LIB=$(bench_ensure_lib)
bench_init
read -ra PIN_S <<<"$(bench_pin server)"
read -ra PIN_C <<<"$(bench_pin client)"
DATE_START=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
RESULTS=$BENCH_TMP/results.jsonl
: >"$RESULTS"

# ---------------------------------------------------------------- counter
# The breakdown names the calls a socket/epoll/spin path makes; the rest is "other". Not
# syscalls:sys_enter_* (~350 tracepoints): each costs ~35 ms to unregister, 12 s per perf.
BREAKDOWN="read write readv writev sendto recvfrom sendmsg recvmsg epoll_wait epoll_pwait
	epoll_pwait2 epoll_ctl poll ppoll select pselect6 futex sched_yield getpid gettid
	clock_gettime clock_nanosleep nanosleep ioctl fcntl eventfd2 accept4 close getsockopt
	setsockopt mmap munmap"
PERF_EV=raw_syscalls:sys_enter,context-switches,task-clock
for s in $BREAKDOWN; do
	[ -d "/sys/kernel/tracing/events/syscalls/sys_enter_$s" ] ||
		[ -d "/sys/kernel/debug/tracing/events/syscalls/sys_enter_$s" ] &&
		PERF_EV+=,syscalls:sys_enter_$s
done
COUNTER=${BENCH_COUNTER:-auto}
COUNTER_NOTE=""
perf_ok() {
	command -v perf >/dev/null &&
		perf stat -x, -e "$PERF_EV" -o "$BENCH_TMP/perf-probe.txt" true 2>/dev/null &&
		grep -q "raw_syscalls:sys_enter" "$BENCH_TMP/perf-probe.txt"
}
case "$COUNTER" in
auto)
	if perf_ok; then
		COUNTER=perf
	elif command -v strace >/dev/null; then
		COUNTER=strace
		COUNTER_NOTE="perf cannot count raw_syscalls/syscalls tracepoints on this kernel: FELL BACK to strace -f -c, which stops the tracee at every syscall and so perturbs spinning (counts of spin-dependent calls are inflated or deflated)"
	else
		bench_die "neither perf (with tracepoints) nor strace is usable (scripts/install-deps.sh)"
	fi
	;;
perf) perf_ok || bench_die "BENCH_COUNTER=perf but perf cannot count $PERF_EV here" ;;
strace)
	command -v strace >/dev/null || bench_die "strace is not installed"
	COUNTER_NOTE="BENCH_COUNTER=strace: strace -f -c perturbs spinning (see above)"
	;;
*) bench_die "BENCH_COUNTER must be perf, strace or auto" ;;
esac
[ "$VM" = only ] || bench_log "counting with $COUNTER"

# side_env SIDE STATSFILE: SIDE_ENV = env(1) prefix of SIDE (plain | lib). It comes after the
# counter in every command line, so perf/strace themselves are never preloaded.
side_env() {
	if [ "$1" = plain ]; then
		SIDE_ENV=(env -u LD_PRELOAD)
	else
		SIDE_ENV=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT="$TRANSPORT" RDMASOCK_STATS="$2")
		[ -n "$SPIN" ] && SIDE_ENV+=(RDMASOCK_SPIN_US="$SPIN")
	fi
	return 0
}

# count_client FILE: CNT_C = command prefix that counts the client's syscalls into FILE.
count_client() {
	if [ "$COUNTER" = perf ]; then
		CNT_C=(perf stat "-x," -e "$PERF_EV" -o "$1" --)
	else
		CNT_C=(strace -f -c -o "$1" --)
	fi
}
# count_attach PID FILE: start counting the running server PID (all its threads).
count_attach() {
	if [ "$COUNTER" = perf ]; then
		perf stat -x, -e "$PERF_EV" -p "$1" -o "$2" >/dev/null 2>&1 &
	else
		strace -f -c -p "$1" -o "$2" >/dev/null 2>&1 &
	fi
	CNT_PID=$!
	BENCH_PIDS+=("$CNT_PID")
	sleep 1 # the counters are set up (one open per event and thread) before the client starts
}
# count_detach: both print their counts on SIGINT (strace detaches first).
count_detach() {
	[ -n "${CNT_PID:-}" ] || return 0
	bench_stop_server "$CNT_PID" INT 10 || bench_log "counter $CNT_PID needed SIGKILL"
	CNT_PID=""
}

# record WL END SIDE REP OPS METRIC FILE STATS: one result line (JSON) from a counter file.
record() {
	python3 - "$@" >>"$RESULTS" <<'EOF'
import json, re, sys
wl, end, side, rep, ops, metric, path, stats = sys.argv[1:9]
total = None; by = {}; ctx = None; clock_ms = None
try:
    text = open(path).read()
except OSError:
    text = ""
if "raw_syscalls:sys_enter" in text or ",syscalls:" in text:          # perf stat -x,
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 3 or not re.match(r"^[0-9.]+$", f[0]):
            continue
        v = float(f[0]); ev = f[2]
        if ev == "raw_syscalls:sys_enter": total = v
        elif ev.startswith("syscalls:sys_enter_"):
            if v > 0: by[ev[len("syscalls:sys_enter_"):]] = v
        elif ev == "context-switches": ctx = v
        elif ev == "task-clock": clock_ms = v
else:                                                                   # strace -c
    for line in text.splitlines():
        f = line.split()
        if len(f) < 5 or not re.match(r"^[0-9.]+$", f[0]) or not f[3].isdigit():
            continue
        if f[-1] == "total": total = float(f[3])
        else: by[f[-1]] = float(f[3])
    if total is None and by: total = sum(by.values())
if total is not None and by and "raw_syscalls:sys_enter" in text:
    rest = total - sum(by.values())
    if rest > 0: by["other"] = rest
print(json.dumps(dict(wl=wl, end=end, side=side, rep=rep, ops=int(ops) if ops.isdigit() else 0,
                      metric=metric, total=total, by=by, ctx=ctx, clock_ms=clock_ms,
                      stats=stats)))
EOF
}

# check_share SIDE STATSFILE: "NA" for plain, else "<share> <procs>" from RDMASOCK_STATS.
check_share() {
	if [ "$1" = plain ]; then
		echo "- -"
	else
		bench_stats_share "$2" "$TRANSPORT" | awk '{ print $1, $2 }'
	fi
}

# ---------------------------------------------------------------- redis-benchmark -c 50 -t get
redis_run() { # SIDE REP
	local side=$1 rep=$2 st=$BENCH_TMP/stats-redis-$1-$2.jsonl sf=$BENCH_TMP/cnt-redis-$1-$2-s.txt
	local cf=$BENCH_TMP/cnt-redis-$1-$2-c.txt out rps share
	side_env "$side" "$st"
	if ! bench_start_on_free_port "$BENCH_TMP/redis-$side" "${PIN_S[@]}" "${SIDE_ENV[@]}" \
		redis-server --bind 127.0.0.1 --port '{PORT}' --save '' --appendonly no \
		--dir "$BENCH_TMP" --daemonize no --protected-mode no; then
		bench_log "FAILED: redis-server did not start ($side, rep $rep)"
		return 0
	fi
	count_attach "$BENCH_SERVER_PID" "$sf"
	count_client "$cf"
	if ! out=$(timeout -k 5 120 "${PIN_C[@]}" "${CNT_C[@]}" "${SIDE_ENV[@]}" redis-benchmark \
		-h 127.0.0.1 -p "$BENCH_SERVER_PORT" -c 50 -n "$REDIS_N" -t get --csv 2>&1); then
		count_detach
		bench_stop_server "$BENCH_SERVER_PID" TERM 5 || true
		bench_log "FAILED: redis-benchmark ($side, rep $rep): $(tail -n 3 <<<"$out")"
		return 0
	fi
	count_detach
	bench_stop_server "$BENCH_SERVER_PID" TERM 10 || bench_log "redis-server needed SIGKILL"
	rps=$(awk -F'","' '/^"GET"/ { print $2 }' <<<"$out" | tr -d '"')
	share=$(check_share "$side" "$st")
	record redis server "$side" "$rep" "$REDIS_N" "${rps:-NA}" "$sf" "$share"
	record redis client "$side" "$rep" "$REDIS_N" "${rps:-NA}" "$cf" "$share"
	bench_log "redis -c 50 GET rep $rep $side: ${rps:-?} rps (shm share/procs: $share)"
}
redis_plain() { redis_run plain "$1"; }
redis_lib() { redis_run lib "$1"; }

# ---------------------------------------------------------------- sockperf pp / tp
sp_run() { # KIND SIDE REP
	local kind=$1 side=$2 rep=$3 st=$BENCH_TMP/stats-$1-$2-$3.jsonl
	local sf=$BENCH_TMP/cnt-$1-$2-$3-s.txt cf=$BENCH_TMP/cnt-$1-$2-$3-c.txt out ops metric share
	# pp --mps: sockperf sizes its round-trip table for about 600k/s unless told, and exits with
	# "_seqN > m_maxSequenceNo" past it; both sides get it
	local args=(-m 64 --mps=5000000)
	[ "$kind" = tp ] && args=(-m 1024)
	side_env "$side" "$st"
	if ! bench_start_on_free_port "$BENCH_TMP/sockperf-$kind-$side" "${PIN_S[@]}" "${SIDE_ENV[@]}" \
		sockperf sr --tcp -i 127.0.0.1 -p '{PORT}'; then
		bench_log "FAILED: sockperf server did not start ($kind, $side, rep $rep)"
		return 0
	fi
	count_attach "$BENCH_SERVER_PID" "$sf"
	count_client "$cf"
	if ! out=$(timeout -k 5 $((SP_SECS + 60)) "${PIN_C[@]}" "${CNT_C[@]}" "${SIDE_ENV[@]}" \
		sockperf "$kind" --tcp -i 127.0.0.1 -p "$BENCH_SERVER_PORT" "${args[@]}" -t "$SP_SECS" 2>&1 |
		sed 's/\x1b\[[0-9;]*m//g'); then
		count_detach
		bench_stop_server "$BENCH_SERVER_PID" INT 5 || true
		bench_log "FAILED: sockperf $kind ($side, rep $rep): $(tail -n 3 <<<"$out")"
		return 0
	fi
	count_detach
	bench_stop_server "$BENCH_SERVER_PID" INT 5 || bench_log "sockperf server needed SIGKILL"
	if [ "$kind" = pp ]; then
		ops=$(sed -n 's/.*\[Total Run\].*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$out")
		metric=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' <<<"$out")
	else
		ops=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' <<<"$out")
		metric=$(sed -n 's/.*Summary: Message Rate is \([0-9.]*\) .*/\1/p' <<<"$out")
	fi
	share=$(check_share "$side" "$st")
	record "$kind" server "$side" "$rep" "${ops:-0}" "${metric:-NA}" "$sf" "$share"
	record "$kind" client "$side" "$rep" "${ops:-0}" "${metric:-NA}" "$cf" "$share"
	bench_log "sockperf $kind rep $rep $side: ${ops:-?} ops, ${metric:-?} (shm share/procs: $share)"
}
pp_plain() { sp_run pp plain "$1"; }
pp_lib() { sp_run pp lib "$1"; }
tp_plain() { sp_run tp plain "$1"; }
tp_lib() { sp_run tp lib "$1"; }

# ---------------------------------------------------------------- run
if [ "$VM" != only ]; then
	[[ "$SKIP" != *,redis,* ]] && bench_interleave "$REPS" redis_plain redis_lib
	[[ "$SKIP" != *,pp,* ]] && bench_interleave "$REPS" pp_plain pp_lib
	[[ "$SKIP" != *,tp,* ]] && bench_interleave "$REPS" tp_plain tp_lib
fi

VM_OUT=""
VM_NOTE=""
if [ "$VM" != 0 ]; then
	VM_OUT=$BENCH_TMP/vm.out
	vm_args=(--timeout "${BENCH_VM_TIMEOUT:-600}" --bin sockperf --bin strace --bin "$LIB"
		--file "$BENCH_ROOT/bench/syscalls_vm_guest.sh:/rsk/bench.sh"
		--env "BVM_LIB=$(readlink -f "$LIB")" --env "BVM_REPS=${BENCH_VM_REPS:-3}"
		--env "BVM_SECS=${BENCH_VM_SECS:-6}" --env "BVM_SHORT_SECS=${BENCH_VM_SHORT_SECS:-1}" --env "BVM_SPIN_US=${BENCH_VM_SPIN_US:-200000}")
	bench_log "Soft-RoCE guest: booting (test/vm/run.sh; a few minutes)"
	set +e
	RSK_VM_QUIET=1 RSK_VM_LOG_DIR=$BENCH_TMP/vmlogs timeout -k 10 $((${BENCH_VM_TIMEOUT:-600} + 120)) \
		bash "$BENCH_ROOT/test/vm/run.sh" "${vm_args[@]}" "$BENCH_ROOT/bench/syscalls_vm_guest.sh" \
		>"$VM_OUT" 2>"$BENCH_TMP/vm.err"
	vm_rc=$?
	set -e
	cat "$BENCH_TMP"/vmlogs/*.log >"$VM_OUT" 2>/dev/null || true
	if [ $vm_rc = 77 ]; then
		VM_NOTE="Soft-RoCE guest: not available here (test/vm/run.sh exit 77): $(tail -n 2 "$BENCH_TMP/vm.err" | tr '\n' ' ')"
	elif [ $vm_rc != 0 ]; then
		VM_NOTE="Soft-RoCE guest: run.sh exit $vm_rc; partial results below: $(tail -n 2 "$BENCH_TMP/vm.err" | tr '\n' ' ')"
	fi
	# The guest prints one BVM-RESULT line per counted process (JSON after the tag).
	sed -n 's/^.*BVM-RESULT //p' "$VM_OUT" | tr -d '\r' >>"$RESULTS" || true
	bench_log "Soft-RoCE guest: done (rc $vm_rc)"
fi

# ---------------------------------------------------------------- report
rev=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$BENCH_ROOT" status --porcelain -- core preload include CMakeLists.txt 2>/dev/null)" ]; then
	rev="$rev + uncommitted library changes"
fi
echo
echo "### System calls per operation, without and with librdmasock (bench/syscalls.sh)"
echo
bench_machine
echo
echo "- tree $rev; started $DATE_START; load average at start $LOAD_START, at end" \
	"$(cut -d' ' -f1-3 /proc/loadavg) (shared machine: timings are noisy, counts are not)"
if [ "$VM" != only ]; then
	echo "- counter: $COUNTER$([ "$COUNTER" = perf ] && echo " (perf stat -e raw_syscalls:sys_enter + one syscalls:sys_enter_NAME per call in BREAKDOWN, all threads; server attached while the client runs, client from exec to exit)")"
	[ -n "$COUNTER_NOTE" ] && echo "- **$COUNTER_NOTE**"
	echo "- plain: no preload (kernel TCP loopback); lib: LD_PRELOAD both ends," \
		"RDMASOCK_TRANSPORT=$TRANSPORT, RDMASOCK_SPIN_US=${SPIN:-${RDMASOCK_SPIN_US:-default (50)}};" \
		"pin $BENCH_PIN (server cpu ${BENCH_SERVER_CPU:-0}, client cpu ${BENCH_CLIENT_CPU:-1});" \
		"$REPS interleaved repetitions per side, medians"
fi
[ -n "$VM_NOTE" ] && echo "- **$VM_NOTE**"
python3 - "$RESULTS" "$TOP" "$MIN_SHARE" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
top, min_share = int(sys.argv[2]), float(sys.argv[3])
WL = {"redis": ("redis-benchmark -c 50 -t get", "GET", "GET rps"),
      "pp": ("sockperf pp --tcp -m 64", "round trip", "one-way avg us"),
      "tp": ("sockperf tp --tcp -m 1024", "message", "msg/s"),
      "vm_pp": ("guest: sockperf pp --tcp -m 64, 192.0.2.1 -> .2 (strace -f -c)", "extra round trip",
                "one-way avg us")}
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["wl"], r["end"]), {"plain": [], "lib": []})[r["side"]].append(r)

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
def per(r, v):
    return None if v is None or not r["ops"] else v / r["ops"]
def fmt(v, d=2):
    if v is None: return "NA"
    if abs(v) >= 1000: return "%.0f" % v
    return ("%." + str(d) + "f") % v
def num(s):
    try: return float(s)
    except (TypeError, ValueError): return None
def share_note(runs):
    bad = 0; shares = []
    for r in runs:
        s, procs = (r.get("stats") or "- -").split()[:2]
        if s == "-": return ""
        shares.append(s)
        if s == "NA" or float(s) < min_share or int(procs) < 2: bad += 1
    if not shares: return ""
    low = min(shares, key=lambda x: -1 if x == "NA" else float(x))
    return "%s%%" % low + (" (**%d run(s) under %g%% or one end without stats**)" % (bad, min_share) if bad else "")

print()
print("| workload | end | per | plain syscalls | lib syscalls | lib / plain | plain ctx sw | lib ctx sw | plain CPU us | lib CPU us | result plain / lib | runs plain/lib | lib transport byte share (min) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (wl, end), sides in groups.items():
    name, op, mname = WL.get(wl, (wl, "op", "metric"))
    v = {}
    for s in ("plain", "lib"):
        runs = sides[s]
        v[s] = dict(sc=med(per(r, r["total"]) for r in runs),
                    cs=med(per(r, r["ctx"]) for r in runs),
                    cpu=med(per(r, r["clock_ms"] * 1000 if r["clock_ms"] is not None else None) for r in runs),
                    m=med(num(r["metric"]) for r in runs), n=len([r for r in runs if r["total"] is not None]))
    ratio = v["lib"]["sc"] / v["plain"]["sc"] if v["lib"]["sc"] and v["plain"]["sc"] else None
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s %s | %d/%d | %s |" % (
        name, end, op, fmt(v["plain"]["sc"]), fmt(v["lib"]["sc"]), fmt(ratio),
        fmt(v["plain"]["cs"]), fmt(v["lib"]["cs"]), fmt(v["plain"]["cpu"]), fmt(v["lib"]["cpu"]),
        fmt(v["plain"]["m"], 3), fmt(v["lib"]["m"], 3), mname, v["plain"]["n"], v["lib"]["n"],
        share_note(sides["lib"]) or "-"))
print()
print("Per-syscall breakdown (median over the repetitions of each syscall's count per op; top %d):" % top)
print()
print("| workload | end | plain: syscalls per op | lib: syscalls per op |")
print("|---|---|---|---|")
for (wl, end), sides in groups.items():
    name = WL.get(wl, (wl,))[0]
    cells = []
    for s in ("plain", "lib"):
        runs = sides[s]
        names = set(k for r in runs for k in r["by"])
        m = {k: med(per(r, r["by"].get(k, 0.0)) for r in runs) for k in names}
        best = sorted(m.items(), key=lambda kv: -(kv[1] or 0))[:top]
        cells.append(", ".join("%s %s" % (k, fmt(x)) for k, x in best if x and x >= 0.005) or "NA")
    print("| %s | %s | %s | %s |" % (name, end, cells[0], cells[1]))
EOF
echo
echo "per = the operation each count is divided by: redis: GETs (-n); sockperf pp: round trips"
echo "the client counted over the whole run (warm-up included); sockperf tp: messages the client"
echo "sent. Server counts cover the time the client ran (attach before, detach after); client"
echo "counts its whole process life (connection setup included, small against the ops)."
echo "ctx sw = context switches per op; CPU us = task-clock per op (spinning included)."
[ "$VM" != 0 ] && [ -n "$VM_OUT" ] && {
	echo
	echo "Guest run (Soft-RoCE, test/vm): $(grep -a -m1 'BVM-INFO' "$VM_OUT" | sed 's/^.*BVM-INFO //' | tr -d '\r')."
	echo "Guest rows: plain = kernel TCP across the veth pair, lib = librdmasock over rxe verbs."
	echo "Each value is (long run - short run) calls / (long - short) round trips, so setup cancels;"
	echo "strace stops the process at every call (~ms under TCG), so a spinning wait makes fewer"
	echo "loop iterations (and so fewer clock_gettime calls, a real syscall on this guest's clocksource"
	echo "when it is not tsc) than it would untraced. Runs and the fd attribution (strace -f -y):"
	echo
	grep -a -E 'BVM-(RUN|ATTR|LAT|FAIL)' "$VM_OUT" | sed 's/^.*\(BVM-[A-Z]*\) /- \1 /' | tr -d '\r'
}
exit 0
