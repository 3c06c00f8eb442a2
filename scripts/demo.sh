#!/usr/bin/env bash
# README command 1: install what is needed, build build/librdmasock.so, and run the main job:
# redis-server + redis-benchmark without and with the library (interleaved, medians) for
# -c 1, -c 50 and -c 50 -P 16 (SET and GET), one comparison table, and which transport
# carried the connections (from the RDMASOCK_STATS lines the preloaded processes write).
# Usage (as root on Debian 12, from anywhere): bash scripts/demo.sh   (~1-3 minutes after install+build)
#
# Environment (defaults in brackets):
#   RDMASOCK_TRANSPORT [auto]  transport of the preloaded runs (auto|kernel|shm|verbs)
#   DEMO_REPS [5]              repetitions per side, interleaved (kernel, lib, kernel, ...)
#   DEMO_SECS [1]              target seconds per redis-benchmark test (sizes -n)
#   DEMO_SKIP_INSTALL [0]      1: never run scripts/install-deps.sh. Otherwise it runs only
#                              when a package or tool the demo needs is missing: on a
#                              machine that has everything (a shared one, say) the demo
#                              touches no package and no other user's server.
#   BENCH_PIN [off]            off | split | same: CPU pinning, see bench/lib.sh
#   DEMO_OUT [build/demo]      where the table (.md) and its bar chart (.png) are written
# The targets in the table (librdmasock/kernel >= 5 for -c 1, >= 1.5 for -c 50, >= 1.2 for
# -c 50 -P 16) are those of the same-host shm transport; bench/shm_vs_kernel.sh is the full
# benchmark (sockperf, iperf3, shm byte-share checks).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the demo needs: the build (tests included, they are built by default) and redis.
DEMO_PKGS="build-essential cmake pkg-config libibverbs-dev librdmacm-dev uthash-dev libcmocka-dev
           redis-server redis-tools python3 iproute2 procps gnuplot-nox"
demo_missing() {
	local p c missing=""
	if command -v dpkg-query >/dev/null 2>&1; then
		for p in $DEMO_PKGS; do
			dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
				missing+=" $p"
		done
	fi
	for c in cmake cc redis-server redis-benchmark python3 ss taskset timeout; do
		command -v "$c" >/dev/null 2>&1 || missing+=" ($c)"
	done
	echo "$missing"
}
if [ "${DEMO_SKIP_INSTALL:-0}" != 1 ]; then
	missing=$(demo_missing)
	if [ -n "$missing" ]; then
		echo "[demo] missing:$missing -> running scripts/install-deps.sh" >&2
		bash scripts/install-deps.sh
	else
		echo "[demo] all dependencies present: scripts/install-deps.sh not run" >&2
	fi
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
export RDMASOCK_LIB=$PWD/build/librdmasock.so
[ -f "$RDMASOCK_LIB" ] || {
	echo "error: build produced no $RDMASOCK_LIB" >&2
	exit 1
}

source bench/lib.sh
source bench/plot.sh
bench_init

REPS=${DEMO_REPS:-5}
SECS=${DEMO_SECS:-1}
MODE=${RDMASOCK_TRANSPORT:-auto}
STATS=$BENCH_TMP/rdmasock-stats.jsonl
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || bench_die "DEMO_REPS must be a positive integer"
read -ra PIN_S <<<"$(bench_pin server)"
read -ra PIN_C <<<"$(bench_pin client)"

# shellcheck disable=SC2034 # used through "${!envv}" (envv="ENV_${side}[@]")
ENV_kernel=(env -u LD_PRELOAD)
# shellcheck disable=SC2034
ENV_lib=(env LD_PRELOAD="$RDMASOCK_LIB" RDMASOCK_TRANSPORT="$MODE" RDMASOCK_STATS="$STATS")

WORKLOADS=("-c 1" "-c 50" "-c 50 -P 16")
TARGETS=(5 1.5 1.2) # librdmasock/kernel, per workload
declare -A N VAL # N[workload] = -n; VAL[workload/test/side] = per-repetition rps values

# bench_one SIDE WORKLOAD N PORT [STATSFILE]: one redis-benchmark -t set,get run; sets
# RES="SET GET". The preloaded client writes its RDMASOCK_STATS line to STATSFILE (default
# $STATS), so each workload's client connections can be told apart.
bench_one() {
	local side=$1 wl=$2 n=$3 port=$4 envv="ENV_${1}[@]" out cenv
	RES=""
	cenv=("${!envv}")
	[ "$side" = lib ] && [ -n "${5:-}" ] && cenv+=(RDMASOCK_STATS="$5")
	# shellcheck disable=SC2086 # $wl is a word list on purpose
	out=$(timeout -k 5 $((SECS * 30 + 60)) "${PIN_C[@]}" "${cenv[@]}" redis-benchmark \
		-h 127.0.0.1 -p "$port" $wl -n "$n" -t set,get --csv 2>/dev/null) || return 1
	RES=$(awk -F'","' '/^"SET"/ { s = $2 } /^"GET"/ { g = $2 } END {
		if (s == "" || g == "") exit 1; print s, g }' <<<"$out")
}

# server_up SIDE: a fresh redis-server on a free port (PORT, BENCH_SERVER_PID).
server_up() {
	local envv="ENV_${1}[@]"
	bench_start_on_free_port "$BENCH_TMP/redis-$1" "${PIN_S[@]}" "${!envv}" redis-server \
		--bind 127.0.0.1 --port '{PORT}' --save '' --appendonly no --dir "$BENCH_TMP" \
		--daemonize no --protected-mode no || bench_die "redis-server ($1) did not start"
	PORT=$BENCH_SERVER_PORT
}

# Size -n per workload from one short run without the library.
server_up kernel
for wl in "${WORKLOADS[@]}"; do
	bench_one kernel "$wl" 20000 "$PORT" || bench_die "calibration run failed ($wl)"
	N[$wl]=$(awk -v g="${RES#* }" -v s="$SECS" 'BEGIN {
		n = int(g * s / 1000) * 1000; if (n < 5000) n = 5000; print n }')
	bench_log "calibration $wl: GET ${RES#* } rps -> -n ${N[$wl]}"
done
bench_stop_server "$BENCH_SERVER_PID" || true

# One repetition of one side: fresh server, all workloads, server stopped (so the preloaded
# server writes its RDMASOCK_STATS line).
rep() {
	local side=$1 i=$2 wl idx
	server_up "$side"
	for idx in "${!WORKLOADS[@]}"; do
		wl=${WORKLOADS[$idx]}
		bench_one "$side" "$wl" "${N[$wl]}" "$PORT" "$BENCH_TMP/client-$idx.jsonl" ||
			bench_die "redis-benchmark $wl failed ($side)"
		VAL[$wl/SET/$side]="${VAL[$wl/SET/$side]:-} ${RES% *}"
		VAL[$wl/GET/$side]="${VAL[$wl/GET/$side]:-} ${RES#* }"
		bench_log "rep $i $side $wl: SET ${RES% *} GET ${RES#* } rps"
	done
	bench_stop_server "$BENCH_SERVER_PID" || bench_log "redis-server ($side) needed SIGKILL"
}
rep_kernel() { rep kernel "$1"; }
rep_lib() { rep lib "$1"; }
bench_interleave "$REPS" rep_kernel rep_lib

OUT_DIR=${DEMO_OUT:-build/demo}
mkdir -p "$OUT_DIR"
PLOT_DATA=$BENCH_TMP/plot.dat
: >"$PLOT_DATA"
exec 3>&1 > >(tee "$OUT_DIR/redis-kernel-vs-librdmasock.md") # the report, also to a file
TEE_PID=$!
echo
echo "### redis-benchmark: kernel (no library) vs librdmasock (RDMASOCK_TRANSPORT=$MODE)"
echo
echo "medians of $REPS interleaved repetitions per side; -n per workload sized for ~${SECS}s per test;"
echo "pinning: ${BENCH_PIN:-off}; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
bench_machine
echo
echo "| workload | kernel rps (no library) | librdmasock rps | librdmasock/kernel | target | result | librdmasock client connections carried by |"
echo "|---|---|---|---|---|---|---|"
for idx in "${!WORKLOADS[@]}"; do
	wl=${WORKLOADS[$idx]}
	# Which transport carried this workload's client connections, over all repetitions.
	carried=$(python3 - "$BENCH_TMP/client-$idx.jsonl" <<'EOF'
import collections, json, sys
conn = collections.Counter(); sent = collections.Counter()
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if line.strip():
        d = json.loads(line)
        conn.update(d.get("connections", {}))
        sent.update(d.get("bytes_sent", {}))
tot_c, tot_b = sum(conn.values()), sum(sent.values())
if not tot_c:
    print("no stats line (library not loaded?)")
else:
    print(", ".join(f"{t} {conn[t]}/{tot_c}" for t in ("kernel", "shm", "verbs") if conn[t])
          + (f" (shm {100.0 * sent['shm'] / tot_b:.1f}% of bytes sent)" if tot_b else ""))
EOF
)
	for t in SET GET; do
		# shellcheck disable=SC2086
		k=$(bench_median ${VAL[$wl/$t/kernel]})
		# shellcheck disable=SC2086
		l=$(bench_median ${VAL[$wl/$t/lib]})
		r=$(bench_ratio "$l" "$k")
		printf '"%s %s" %s %s\n' "$t" "$wl" "$k" "$l" >>"$PLOT_DATA"
		echo "| $t $wl -n ${N[$wl]} | $k | $l | $r | >= ${TARGETS[$idx]} |" \
			"$(bench_cmp "$(bench_ratio "$l" "$k" %.10g)" ">=" "${TARGETS[$idx]}") | $carried |"
	done
done
echo
if bench_plot_bars "$PLOT_DATA" "$OUT_DIR/redis-kernel-vs-librdmasock.png" \
	"redis-benchmark, medians of $REPS: kernel vs librdmasock ($MODE)" "requests per second"; then
	echo "Chart: $OUT_DIR/redis-kernel-vs-librdmasock.png (table: $OUT_DIR/redis-kernel-vs-librdmasock.md)"
fi
echo
echo "Raw rps per repetition (run order):"
for wl in "${WORKLOADS[@]}"; do
	for t in SET GET; do
		echo "- $t $wl: kernel${VAL[$wl/$t/kernel]} / librdmasock${VAL[$wl/$t/lib]}"
	done
done

echo
echo "### Transport that carried the connections (RDMASOCK_STATS, RDMASOCK_TRANSPORT=$MODE)"
echo
# Server lines are in $STATS, client lines in one file per workload.
STATS_FILES=()
for f in "$STATS" "$BENCH_TMP"/client-*.jsonl; do
	[ -s "$f" ] && STATS_FILES+=("$f")
done
if [ ${#STATS_FILES[@]} -eq 0 ]; then
	echo "No RDMASOCK_STATS line was written: the library did not run in the preloaded processes."
	exit 1
fi
python3 - "${STATS_FILES[@]}" <<'EOF'
import collections, json, sys
per = collections.defaultdict(lambda: {"procs": 0, "conn": collections.Counter(),
                                       "sent": collections.Counter(), "fb": collections.Counter()})
lines = [l for f in sys.argv[1:] for l in open(f)]
for line in lines:
    line = line.strip()
    if not line:
        continue
    d = json.loads(line)
    p = per[d.get("program", "?")]
    p["procs"] += 1
    p["conn"].update(d.get("connections", {}))
    p["sent"].update(d.get("bytes_sent", {}))
    p["fb"].update({k: v for k, v in d.get("fallbacks", {}).items() if v})
print("| program | processes | conns kernel | conns shm | conns verbs | bytes sent kernel | bytes sent shm | bytes sent verbs | fallback reasons (kernel conns) |")
print("|---|---|---|---|---|---|---|---|---|")
total = collections.Counter()
for prog, p in sorted(per.items()):
    c, s = p["conn"], p["sent"]
    total.update(c)
    fb = ", ".join(f"{k}={v}" for k, v in sorted(p["fb"].items())) or "-"
    print(f"| {prog} | {p['procs']} | {c['kernel']} | {c['shm']} | {c['verbs']} "
          f"| {s['kernel']} | {s['shm']} | {s['verbs']} | {fb} |")
used = [t for t in ("kernel", "shm", "verbs") if total[t]]
print()
print("Connections were carried by (each counted at both ends): "
      + (", ".join(f"{t} ({total[t]})" for t in used) or "none counted"))
EOF
exec >&3 3>&-
wait "$TEE_PID" 2>/dev/null || true # the report file is complete before we return
