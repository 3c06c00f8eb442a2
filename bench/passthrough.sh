#!/usr/bin/env bash
# Pass-through overhead of librdmasock: no LD_PRELOAD ("plain") vs LD_PRELOAD with
# RDMASOCK_TRANSPORT=kernel on both ends ("lib"). redis-benchmark -c 1 SET/GET and sockperf
# TCP ping-pong, interleaved plain/lib, medians + lib/plain ratio; then instructions per
# wrapped send()/recv() from callgrind on bench/callgrind_io.c, and per wrapped poll()/select()
# on kernel fds (a ready TCP socket, no timeout; and poll on an AF_UNIX pair while the process
# also holds a TCP pair: with RDMASOCK_TRANSPORT=kernel that pair is a kernel socket too, with
# BENCH_CG_TRANSPORT=shm it is a connection of ours and the wrapper's fd-classifying path runs).
# Markdown tables on stdout, progress on stderr. Targets: within 1% throughput/latency, <= 30
# instructions per call.
#
# Usage: bash bench/passthrough.sh
# Environment (defaults in brackets):
#   BENCH_REPS [5]            repetitions per side (plain, lib, plain, lib, ...)
#   BENCH_PIN [off]           off | split (server CPU BENCH_SERVER_CPU=0, client
#                             BENCH_CLIENT_CPU=1) | same (both on BENCH_SERVER_CPU)
#   BENCH_REDIS_SECS [2]      target seconds per redis-benchmark test (sizes -n by a
#                             calibration run); BENCH_REDIS_N overrides -n directly
#   BENCH_SOCKPERF_SECS [3]   sockperf pp -t
#   BENCH_CALLGRIND_K [100000] send+recv rounds under callgrind
#   BENCH_CG_TRANSPORT [kernel] RDMASOCK_TRANSPORT of the lib side under callgrind
#   BENCH_SKIP [none]         comma list of parts to skip: redis,sockperf,callgrind
#   RDMASOCK_LIB [build/librdmasock.so]  (built with cmake if missing)
#   BENCH_KEEP [0]            1: keep the scratch directory (logs, callgrind.out files)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPS=${BENCH_REPS:-5}
REDIS_SECS=${BENCH_REDIS_SECS:-2}
SP_SECS=${BENCH_SOCKPERF_SECS:-3}
CG_K=${BENCH_CALLGRIND_K:-100000}
SKIP=",${BENCH_SKIP:-},"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_REPS must be a positive integer"

LIB=$(bench_ensure_lib)
bench_init
read -ra PIN_S <<<"$(bench_pin server)"
read -ra PIN_C <<<"$(bench_pin client)"
STATS=$BENCH_TMP/rdmasock-stats.jsonl

# The two sides. plain: no preload at all (and none inherited). lib: preloaded, kernel
# transport, stats written so we can check the library really was in both processes.
# shellcheck disable=SC2034 # used through "${!envv}" (envv="ENV_${side}[@]")
ENV_plain=(env -u LD_PRELOAD)
# shellcheck disable=SC2034
ENV_lib=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT=kernel RDMASOCK_STATS="$STATS")

declare -A VAL # VAL[metric/side] = space-separated per-repetition values
add_val() { VAL[$1]="${VAL[$1]:-} $2"; }

ROWS=()   # markdown table rows
row() {
	local s="" x
	for x in "$@"; do s+=" $x |"; done
	ROWS+=("|$s")
}

# one_row LABEL METRIC KEY OP LIMIT: medians of VAL[KEY/plain] and VAL[KEY/lib] -> a row.
one_row() {
	local label=$1 metric=$2 key=$3 op=$4 limit=$5 p l r
	# shellcheck disable=SC2086
	p=$(bench_median ${VAL[$key/plain]:-})
	# shellcheck disable=SC2086
	l=$(bench_median ${VAL[$key/lib]:-})
	r=$(bench_ratio "$l" "$p")
	# shellcheck disable=SC2086
	row "$label" "$metric" "$p" "$l" "$r" "$(bench_spread ${VAL[$key/plain]:-})" \
		"$(bench_spread ${VAL[$key/lib]:-})" "ratio $op $limit" "$(bench_cmp "$r" "$op" "$limit")"
}

# ---------------------------------------------------------------- redis-benchmark -c 1
# redis_run SIDE N: fresh server + one redis-benchmark -t set,get run; sets REDIS_RES to
# "SET_rps GET_rps". Not for $(...): the server must stay a child of this shell.
redis_run() {
	local side=$1 n=$2 port out envv="ENV_${1}[@]"
	REDIS_RES=""
	bench_start_on_free_port "$BENCH_TMP/redis-$side" "${PIN_S[@]}" "${!envv}" redis-server \
		--bind 127.0.0.1 --port '{PORT}' --save '' --appendonly no --dir "$BENCH_TMP" \
		--daemonize no --protected-mode no || return 1
	port=$BENCH_SERVER_PORT
	out=$(timeout -k 5 $((REDIS_SECS * 20 + 60)) "${PIN_C[@]}" "${!envv}" redis-benchmark \
		-h 127.0.0.1 -p "$port" -c 1 -n "$n" -t set,get --csv 2>/dev/null) || {
		bench_stop_server "$BENCH_SERVER_PID"
		return 1
	}
	bench_stop_server "$BENCH_SERVER_PID" || true
	REDIS_RES=$(awk -F'","' '/^"SET"/ { s = $2 } /^"GET"/ { g = $2 } END {
		if (s == "" || g == "") exit 1; print s, g }' <<<"$out")
}

redis_rep() { # SIDE REP
	local r
	redis_run "$1" "$REDIS_N" || bench_die "redis run failed ($1, rep $2)"
	r=$REDIS_RES
	add_val "redis_set/$1" "${r% *}"
	add_val "redis_get/$1" "${r#* }"
	bench_log "redis rep $2 $1: SET ${r% *} GET ${r#* } rps"
}
redis_plain() { redis_rep plain "$1"; }
redis_lib() { redis_rep lib "$1"; }

if [[ "$SKIP" != *,redis,* ]]; then
	if [ -n "${BENCH_REDIS_N:-}" ]; then
		REDIS_N=$BENCH_REDIS_N
	else
		redis_run plain 10000 || bench_die "redis calibration run failed"
		cal=$REDIS_RES
		REDIS_N=$(awk -v g="${cal#* }" -v s="$REDIS_SECS" 'BEGIN {
			n = int(g * s / 1000) * 1000; if (n < 5000) n = 5000; print n }')
		bench_log "calibration: GET ${cal#* } rps -> -n $REDIS_N (~${REDIS_SECS}s per test)"
	fi
	bench_interleave "$REPS" redis_plain redis_lib
	one_row "redis-benchmark SET -c 1 -n $REDIS_N" "requests/s" redis_set ">=" 0.99
	one_row "redis-benchmark GET -c 1 -n $REDIS_N" "requests/s" redis_get ">=" 0.99
fi

# ---------------------------------------------------------------- sockperf ping-pong
sockperf_rep() { # SIDE REP
	local side=$1 port out envv="ENV_${1}[@]" avg p50 rate
	bench_start_on_free_port "$BENCH_TMP/sockperf-$side" "${PIN_S[@]}" "${!envv}" sockperf sr \
		--tcp -i 127.0.0.1 -p '{PORT}' || bench_die "sockperf server did not start ($side)"
	port=$BENCH_SERVER_PORT
	out=$(timeout -k 5 $((SP_SECS + 60)) "${PIN_C[@]}" "${!envv}" sockperf pp --tcp \
		-i 127.0.0.1 -p "$port" -m 64 -t "$SP_SECS" 2>&1 | sed 's/\x1b\[[0-9;]*m//g') || {
		bench_stop_server "$BENCH_SERVER_PID" INT
		bench_die "sockperf client failed ($side, rep $2)"
	}
	bench_stop_server "$BENCH_SERVER_PID" INT || true
	avg=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' <<<"$out")
	p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$out")
	rate=$(awk '/\[Valid Duration\]/ { match($0, /RunTime=[0-9.]+/); t = substr($0, RSTART + 8, RLENGTH - 8)
		match($0, /ReceivedMessages=[0-9]+/); m = substr($0, RSTART + 17, RLENGTH - 17)
		if (t > 0) printf "%.0f\n", m / t }' <<<"$out")
	if [ -z "$avg" ] || [ -z "$p50" ]; then
		bench_die "cannot parse sockperf output ($side): $out"
	fi
	add_val "sp_avg/$side" "$avg"
	add_val "sp_p50/$side" "$p50"
	add_val "sp_rate/$side" "${rate:-NA}"
	bench_log "sockperf rep $2 $side: avg ${avg} us, p50 ${p50} us, ${rate:-?} round trips/s"
}
sockperf_plain() { sockperf_rep plain "$1"; }
sockperf_lib() { sockperf_rep lib "$1"; }

if [[ "$SKIP" != *,sockperf,* ]]; then
	bench_interleave "$REPS" sockperf_plain sockperf_lib
	one_row "sockperf pp --tcp -m 64 -t $SP_SECS" "avg latency us (half RTT)" sp_avg "<=" 1.01
	one_row "sockperf pp --tcp -m 64 -t $SP_SECS" "p50 latency us (half RTT)" sp_p50 "<=" 1.01
	one_row "sockperf pp --tcp -m 64 -t $SP_SECS" "round trips/s" sp_rate ">=" 0.99
fi

if [ ${#ROWS[@]} -gt 0 ]; then
	echo
	echo "### Pass-through overhead: plain (no LD_PRELOAD) vs lib (LD_PRELOAD, RDMASOCK_TRANSPORT=kernel)"
	echo
	echo "reps=$REPS per side, interleaved; pinning: ${BENCH_PIN:-off}; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	echo "| benchmark | metric | plain median | lib median | lib/plain | plain spread | lib spread | target | result |"
	echo "|---|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
	echo
	echo "spread = (max - min) / median over the repetitions of one side: a 1% target cannot be"
	echo "judged on a run whose spread is far larger than 1%."
	echo
	echo "Raw values (per repetition, in run order):"
	echo
	for k in $(printf '%s\n' "${!VAL[@]}" | sort); do
		echo "- $k:${VAL[$k]}"
	done
	# The library must really have been in the lib processes: one stats line per process.
	if [ -s "$STATS" ]; then
		echo
		echo "RDMASOCK_STATS lines written by lib-side processes: $(wc -l <"$STATS")" \
			"($(python3 - "$STATS" <<'EOF'
import collections, json, sys
conn = collections.Counter(); progs = collections.Counter()
for line in open(sys.argv[1]):
    d = json.loads(line)
    progs[d["program"]] += 1
    for t, n in d["connections"].items():
        conn[t] += n
print(", ".join(f"{p} x{n}" for p, n in sorted(progs.items())) + "; connections "
      + ", ".join(f"{t}={n}" for t, n in sorted(conn.items())))
EOF
))"
	else
		echo
		echo "WARNING: no RDMASOCK_STATS line was written: was the library loaded?"
	fi
fi

# ---------------------------------------------------------------- callgrind instructions
# Self cost (Ir) per (object, function) from a callgrind.out file, skipping the inclusive
# cost lines that follow calls= lines. Prints "TOTAL <ir>" and "<object>\t<fn>\t<ir>" lines.
cg_parse() {
	python3 - "$1" <<'EOF'
import collections, re, sys
names = {}
def name(kind, v):
    m = re.match(r"\((\d+)\)\s*(.*)", v)
    if not m:
        return v
    if m.group(2):
        names[(kind, m.group(1))] = m.group(2)
    return names.get((kind, m.group(1)), v)
self_ir = collections.Counter(); ob = fn = "?"; skip = False; total = 0
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("ob="):
        ob = name("ob", line[3:])
    elif line.startswith("cob="):
        name("ob", line[4:])
    elif line.startswith("fn="):
        fn = name("fn", line[3:])
    elif line.startswith("cfn="):
        name("fn", line[4:])
    elif line.startswith(("fl=", "fi=", "fe=", "cfi=", "cfl=")):
        name("fl", line.split("=", 1)[1])
    elif line.startswith("calls="):
        skip = True
    elif line and (line[0].isdigit() or line[0] in "+-*"):
        parts = line.split()
        if skip:
            skip = False
            continue
        if len(parts) >= 2:
            self_ir[(ob, fn)] += int(parts[1])
    elif line.startswith("summary:") or line.startswith("totals:"):
        total = int(line.split()[1])
print("TOTAL", total or sum(self_ir.values()))
for (o, f), v in sorted(self_ir.items(), key=lambda x: -x[1]):
    print(f"{o}\t{f}\t{v}")
EOF
}

if [[ "$SKIP" != *,callgrind,* ]]; then
	command -v valgrind >/dev/null || bench_die "valgrind is not installed"
	CG_BIN=$BENCH_TMP/callgrind_io
	cc -O2 -Wall -Wextra -Wl,-z,now -o "$CG_BIN" "$BENCH_ROOT/bench/callgrind_io.c" ||
		bench_die "cannot build bench/callgrind_io.c"
	libname=$(basename "$LIB")
	CG_ROWS=()
	CG_DETAIL=()
	CG_WAIT_ROWS=()
	ENV_cglib=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT="${BENCH_CG_TRANSPORT:-kernel}"
		RDMASOCK_STATS="$STATS")
	for kind in tcp unix poll select pollmixed; do
		declare -A TOT=() CALLS=()
		for side in plain lib; do
			envv="ENV_${side}[@]"
			[ "$side" = lib ] && envv="ENV_cglib[@]"
			out=$BENCH_TMP/callgrind.$kind.$side.out
			res=$(timeout -k 5 600 "${!envv}" valgrind --tool=callgrind \
				--callgrind-out-file="$out" --toggle-collect=bench_loop \
				"$CG_BIN" "$kind" "$CG_K" 2>"$BENCH_TMP/callgrind.$kind.$side.log") ||
				bench_die "callgrind run failed ($kind, $side); see $BENCH_TMP"
			# "calls send=N recv=M wait=W": the calls made inside the collected bench_loop().
			CALLS[$side]=$(awk '/^calls / { split($2, a, "="); split($3, b, "="); split($4, c, "=");
				print a[2] + b[2] + c[2] }' <<<"$res")
			nwait=$(sed -n 's/.* wait=\([0-9]*\).*/\1/p' <<<"$res")
			callgrind_annotate --inclusive=no "$out" >"$out.annotate" 2>&1 || true
			parsed=$(cg_parse "$out")
			TOT[$side]=$(awk '$1 == "TOTAL" { print $2 }' <<<"$parsed")
			if [ "$side" = lib ]; then
				nsend=$(sed -n 's/^calls send=\([0-9]*\).*/\1/p' <<<"$res")
				nrecv=$(sed -n 's/.* recv=\([0-9]*\).*/\1/p' <<<"$res")
				lib_ir=$(awk -F'\t' -v o="$libname" '$1 ~ ("/" o "$") { s += $3 }
					END { print s + 0 }' <<<"$parsed")
				sr_ir=0
				for fn in send recv; do
					n=$([ $fn = send ] && echo "$nsend" || echo "$nrecv")
					v=$(awk -F'\t' -v o="$libname" -v f="$fn" \
						'$1 ~ ("/" o "$") && $2 == f { s += $3 } END { print s + 0 }' <<<"$parsed")
					sr_ir=$((sr_ir + v))
					CG_DETAIL+=("| $kind | $fn() in $libname | $n | $v | $(awk -v v="$v" -v n="$n" 'BEGIN { printf "%.1f", v / n }') |")
				done
				others=$(awk -F'\t' -v o="$libname" '$1 ~ ("/" o "$") && $2 != "send" &&
					$2 != "recv" { printf "%s%s=%s", sep, $2, $3; sep = ", " }' <<<"$parsed")
				[ -n "$others" ] && CG_DETAIL+=("| $kind | other $libname functions: $others | | | |")
			fi
		done
		if [ "$kind" != tcp ] && [ "$kind" != unix ]; then
			# The wait's own cost: this run's library instructions outside its send()/recv()
			# wrappers, per wait.
			per_wait=$(awk -v a="$lib_ir" -v b="$sr_ir" -v n="$nwait" \
				'BEGIN { printf "%.1f", (a - b) / n }')
			wdesc="poll(), 1 ready TCP socket"
			[ "$kind" = select ] && wdesc="select(), 1 ready TCP socket"
			[ "$kind" = pollmixed ] && wdesc="poll(), 1 ready AF_UNIX socket; the process also holds a TCP pair"
			CG_WAIT_ROWS+=("| $wdesc | $nwait | $per_wait | <= 30 | $(bench_cmp "$per_wait" "<=" 30) |")
			unset TOT CALLS
			continue
		fi
		ncalls=${CALLS[lib]}
		per_lib=$(awk -v v="$lib_ir" -v n="$ncalls" 'BEGIN { printf "%.1f", v / n }')
		per_delta=$(awk -v a="${TOT[lib]}" -v b="${TOT[plain]}" -v n="$ncalls" \
			'BEGIN { printf "%.1f", (a - b) / n }')
		desc="TCP loopback pair"
		[ $kind = unix ] && desc="AF_UNIX socketpair"
		CG_ROWS+=("| $desc | $ncalls | ${TOT[plain]} | ${TOT[lib]} | $per_delta | $per_lib | <= 30 | $(bench_cmp "$per_lib" "<=" 30) |")
		unset TOT CALLS
	done
	echo
	echo "### Instructions per pass-through send()/recv() (valgrind --tool=callgrind, K=$CG_K rounds of send 64 B + recv 64 B, collected inside bench_loop only)"
	echo
	echo "| socket | wrapped calls | Ir plain | Ir lib | (lib - plain) / call | Ir in $libname / call | target | result |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${CG_ROWS[@]}"
	echo
	echo "Per wrapped wait on a kernel fd (lib side RDMASOCK_TRANSPORT=${BENCH_CG_TRANSPORT:-kernel}; Ir in $libname outside send()/recv(), per wait):"
	echo
	echo "| wait | waits | Ir in $libname / wait | target | result |"
	echo "|---|---|---|---|---|"
	printf '%s\n' "${CG_WAIT_ROWS[@]}"
	echo
	echo "| socket | function | calls | self Ir | Ir / call |"
	echo "|---|---|---|---|---|"
	printf '%s\n' "${CG_DETAIL[@]}"
	echo
	echo "The AF_UNIX socketpair is not tracked by the library (AF_INET/AF_INET6 streams only);"
	echo "the TCP pair is tracked as a kernel socket, so its wrappers read the fd-table slot."
fi
