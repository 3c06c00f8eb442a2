#!/usr/bin/env bash
# librdmasock's same-host shared-memory transport vs kernel TCP loopback, in one run.
#
# For every workload the two sides alternate (kernel 1, shm 1, kernel 2, shm 2, ...) so both
# see the same drift of a noisy machine; each repetition starts its own server on a free
# 127.0.0.1 port and stops it by PID. Medians per side, shm/kernel ratios, the targets and
# PASS/MISS (computed, never assumed) go to stdout as a markdown table; progress to stderr.
#
#   kernel side: no LD_PRELOAD at all: plain kernel TCP over loopback.
#   shm side:    LD_PRELOAD=build/librdmasock.so in server and client, RDMASOCK_TRANSPORT=shm,
#                RDMASOCK_STATS=<one file per run>. After every shm run the stats lines of
#                that run are read back: shm must have carried >= 99% of the bytes sent and
#                both ends must have written a line, or the row is marked INVALID.
#
# Workloads and targets (ratio = shm median / kernel median):
#   sockperf pp --tcp -m 64, server/client pinned to different CPUs: RTT ratio <= 1/30
#   sockperf pp --tcp -m 64, unpinned: reported (no target given)
#   sockperf tp --tcp -m 1024: msg/s reported (no target given)
#   redis-benchmark -t set,get -c 1: >= 5; -c 50: >= 1.5; -c 50 -P 16: >= 1.2
#   iperf3 -c, one stream, forward: Gbit/s >= 1.5
# sockperf prints one-way latency (RTT/2); the table shows RTT and the one-way value.
#
# The floor, in the same run: bench/shmring.c, a raw shared-memory ping-pong of 64-byte
# messages between two processes pinned (taskset) to the same two CPUs as the pinned sockperf
# rows, busy polling on a shared cache line, no syscalls. Its repetitions are interleaved with
# the pinned sockperf ones (kernel, shm, ring, kernel, shm, ring, ...); a second table sets the
# library's and the kernel's ping-pong against it.
#
# Usage: bash bench/shm_vs_kernel.sh          (full: ~6-8 minutes)
#        BENCH_REPS=1 BENCH_QUICK=1 bash bench/shm_vs_kernel.sh   (quick: ~40 s)
# Environment (defaults in brackets; quick-mode defaults after the slash):
#   BENCH_REPS [5/1]            repetitions per side (at least 5 for a result worth quoting)
#   BENCH_QUICK [0]             1: shorter runs for development (durations below)
#   BENCH_SOCKPERF_SECS [3/1]   sockperf pp/tp -t (integer seconds; sockperf drops 0.4 s warm-up)
#   BENCH_IPERF_SECS [3/1]      iperf3 -t
#   BENCH_REDIS_SECS [2/0.5]    target seconds per redis-benchmark test (sizes -n from a
#                               kernel calibration run); BENCH_REDIS_N overrides -n
#   BENCH_SPIN_US [unset]       passed as RDMASOCK_SPIN_US to the shm side (unset: the
#                               library default, 50 us, or whatever RDMASOCK_SPIN_US says)
#   BENCH_TRANSPORT [shm]       RDMASOCK_TRANSPORT of the preloaded side (shm or auto)
#   BENCH_SERVER_CPU [0], BENCH_CLIENT_CPU [1]   CPUs of the pinned sockperf pp rows
#   BENCH_PIN [off]             pinning of tp, redis and iperf3 runs: off | split | same
#                               (see bench/lib.sh)
#   BENCH_SKIP [none]           comma list of parts to skip: pp,ring,tp,redis,iperf
#   BENCH_RING_N [2000000/500000]  timed round trips per raw-ring run (plus 10000 warm-up and
#                               up to 200000 timed one by one for the p50)
#   BENCH_PROFILE [0]           1: afterwards, one more run per side of sockperf pp/tp and
#                               redis -c 1/-c 50 under perf stat: syscalls, context switches,
#                               migrations and CPU time per operation (second table; needs
#                               perf with tracepoint access)
#   RDMASOCK_LIB [build/librdmasock.so]  (built with cmake if missing)
#   BENCH_KEEP [0]              1: keep the scratch directory (server logs, stats files)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
	REPS=${BENCH_REPS:-1}
	SP_SECS=${BENCH_SOCKPERF_SECS:-1}
	IPERF_SECS=${BENCH_IPERF_SECS:-1}
	REDIS_SECS=${BENCH_REDIS_SECS:-0.5}
	REDIS_MIN_N=5000
	RING_N=${BENCH_RING_N:-500000}
else
	REPS=${BENCH_REPS:-5}
	SP_SECS=${BENCH_SOCKPERF_SECS:-3}
	IPERF_SECS=${BENCH_IPERF_SECS:-3}
	REDIS_SECS=${BENCH_REDIS_SECS:-2}
	REDIS_MIN_N=20000
	RING_N=${BENCH_RING_N:-2000000}
fi
TRANSPORT=${BENCH_TRANSPORT:-shm}
SPIN=${BENCH_SPIN_US:-}
SCPU=${BENCH_SERVER_CPU:-0}
CCPU=${BENCH_CLIENT_CPU:-1}
SKIP=",${BENCH_SKIP:-},"
MIN_SHARE=99 # percent of the bytes the shm transport must carry in a valid shm run

[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_REPS must be a positive integer"
[[ "$SP_SECS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_SOCKPERF_SECS must be a positive integer"
[[ "$IPERF_SECS" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_IPERF_SECS must be a positive integer"
[[ "$RING_N" =~ ^[1-9][0-9]*$ ]] || bench_die "BENCH_RING_N must be a positive integer"
[[ "$REDIS_SECS" =~ ^[0-9]*\.?[0-9]+$ ]] || bench_die "BENCH_REDIS_SECS must be a number"
[ -z "$SPIN" ] || [[ "$SPIN" =~ ^[0-9]+$ ]] || bench_die "BENCH_SPIN_US must be an integer"
case "$TRANSPORT" in shm | auto) ;; *) bench_die "BENCH_TRANSPORT must be shm or auto" ;; esac
for tool in sockperf redis-server redis-benchmark iperf3 taskset python3 ss timeout; do
	command -v "$tool" >/dev/null || bench_die "$tool is not installed (scripts/install-deps.sh)"
done

LIB=$(bench_ensure_lib)
bench_init
read -ra PIN_S <<<"$(bench_pin server)"
read -ra PIN_C <<<"$(bench_pin client)"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
DATE_START=$(date -u '+%Y-%m-%d %H:%M UTC')

# side_env SIDE STATSFILE: set SIDE_ENV to the env(1) prefix of SIDE (kernel | shm).
side_env() {
	if [ "$1" = kernel ]; then
		SIDE_ENV=(env -u LD_PRELOAD)
	else
		SIDE_ENV=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT="$TRANSPORT" RDMASOCK_STATS="$2")
		[ -n "$SPIN" ] && SIDE_ENV+=(RDMASOCK_SPIN_US="$SPIN")
	fi
	return 0
}

declare -A VAL   # VAL[metric/side]  = per-repetition values, space separated, run order
declare -A FAILS # FAILS[group/side] = runs of that side that failed (no value recorded)
declare -A SHARE # SHARE[group]      = shm byte share (%) of each shm run, run order
declare -A BAD   # BAD[group]        = shm runs whose stats did not show >= MIN_SHARE% shm
PFX="" # key prefix: "" for the measured runs, prof_ for the BENCH_PROFILE runs
add_val() { VAL[$PFX$1]="${VAL[$PFX$1]:-} $2"; }
run_failed() { # GROUP SIDE MESSAGE
	FAILS[$PFX$1/$2]=$((${FAILS[$PFX$1/$2]:-0} + 1))
	bench_log "FAILED: ${*:3}"
}

# check_stats GROUP SIDE STATSFILE: for shm runs, read the run's RDMASOCK_STATS lines back.
check_stats() {
	local group=$PFX$1 side=$2 file=$3 res share procs conns
	[ "$side" = shm ] || return 0
	res=$(bench_stats_share "$file" shm)
	read -r share procs conns <<<"$res"
	SHARE[$group]="${SHARE[$group]:-} $share"
	if [ "$share" = NA ] || [ "$procs" -lt 2 ] ||
		[ "$(bench_cmp "$share" ">=" "$MIN_SHARE")" != PASS ]; then
		BAD[$group]=$((${BAD[$group]:-0} + 1))
		bench_log "INVALID shm run ($group): shm share of bytes sent $share%, $procs processes" \
			"with connections, connections $conns"
	fi
}

# ---------------------------------------------------------------- perf stat (BENCH_PROFILE)
# With PROF=1 the run functions count syscalls, context switches, migrations and CPU time of
# the client (perf stat wraps it) and of the server (perf stat -p attached once it listens),
# and store the operations the run did in PROF_OPS[group/side].
PROF=0
PROF_EV=raw_syscalls:sys_enter,context-switches,cpu-migrations,task-clock
PROF_C=()
PROF_PID=""
declare -A PROF_OPS
prof_client() { # GROUP SIDE: set PROF_C, the client's command prefix
	PROF_C=()
	[ "$PROF" = 1 ] && PROF_C=(perf stat "-x," -e "$PROF_EV" -o "$BENCH_TMP/prof-$1-$2-client.txt" --)
	return 0
}
prof_attach() { # GROUP SIDE: after the server listens
	PROF_PID=""
	[ "$PROF" = 1 ] || return 0
	perf stat -x, -e "$PROF_EV" -p "$BENCH_SERVER_PID" -o "$BENCH_TMP/prof-$1-$2-server.txt" \
		>/dev/null 2>&1 &
	PROF_PID=$!
	BENCH_PIDS+=("$PROF_PID")
	sleep 0.3
}
prof_detach() { # before the server is stopped: perf stat writes its counts on SIGINT
	[ -n "$PROF_PID" ] || return 0
	bench_stop_server "$PROF_PID" INT 5 || true
	PROF_PID=""
}

# ---------------------------------------------------------------- sockperf ping-pong
# pp_run MODE SIDE REP: MODE pin (server on SCPU, client on CCPU) or free (unpinned).
pp_run() {
	local mode=$1 side=$2 rep=$3 stats=$BENCH_TMP/stats-pp-$1-$2-$3.jsonl out avg p50 ps=() pc=()
	side_env "$side" "$stats"
	if [ "$mode" = pin ]; then
		ps=(taskset -c "$SCPU")
		pc=(taskset -c "$CCPU")
	fi
	if ! bench_start_on_free_port "$BENCH_TMP/sockperf-$mode-$side" "${ps[@]}" "${SIDE_ENV[@]}" \
		sockperf sr --tcp -i 127.0.0.1 -p '{PORT}'; then
		run_failed "pp_$mode" "$side" "sockperf server did not start ($mode, $side, rep $rep)"
		return 0
	fi
	prof_client "pp_$mode" "$side"
	prof_attach "pp_$mode" "$side"
	# --mps: sockperf sizes its round-trip table for about 600k/s unless told (and exits with
	# "_seqN > m_maxSequenceNo" past it); both sides get it
	if ! out=$(timeout -k 5 $((SP_SECS + 60)) "${pc[@]}" "${PROF_C[@]}" "${SIDE_ENV[@]}" sockperf \
		pp --tcp -i 127.0.0.1 -p "$BENCH_SERVER_PORT" -m 64 --mps=5000000 -t "$SP_SECS" 2>&1 |
		sed 's/\x1b\[[0-9;]*m//g'); then
		prof_detach
		bench_stop_server "$BENCH_SERVER_PID" INT 5 || true
		run_failed "pp_$mode" "$side" "sockperf pp ($mode, $side, rep $rep): $(tail -n 3 <<<"$out")"
		return 0
	fi
	prof_detach
	bench_stop_server "$BENCH_SERVER_PID" INT 5 || bench_log "sockperf server needed SIGKILL"
	# Round trips of the whole run (warm-up included), for the per-operation counts.
	PROF_OPS[pp_$mode/$side]=$(sed -n 's/.*\[Total Run\].*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$out")
	avg=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' <<<"$out")
	p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' <<<"$out")
	if [ -z "$avg" ] || [ -z "$p50" ]; then
		run_failed "pp_$mode" "$side" "cannot parse sockperf pp output ($mode, $side): $out"
		return 0
	fi
	add_val "pp_${mode}_rtt/$side" "$(awk -v a="$avg" 'BEGIN { printf "%.3f", 2 * a }')"
	add_val "pp_${mode}_oneway/$side" "$avg"
	add_val "pp_${mode}_rtt50/$side" "$(awk -v a="$p50" 'BEGIN { printf "%.3f", 2 * a }')"
	check_stats "pp_$mode" "$side" "$stats"
	bench_log "sockperf pp $mode rep $rep $side: one-way avg $avg us (RTT $(awk -v a="$avg" \
		'BEGIN { printf "%.3f", 2 * a }') us), one-way p50 $p50 us"
}
pp_pin_kernel() { pp_run pin kernel "$1"; }
pp_pin_shm() { pp_run pin shm "$1"; }
pp_free_kernel() { pp_run free kernel "$1"; }
pp_free_shm() { pp_run free shm "$1"; }

# ---------------------------------------------------------------- raw shared-memory ring
RING_SRC=$BENCH_ROOT/bench/shmring.c
RING_BIN=$BENCH_ROOT/build/shmring
ring_build() { # (re)compile the helper when it is missing or older than its source
	[ "$RING_BIN" -nt "$RING_SRC" ] && return 0
	mkdir -p "$(dirname "$RING_BIN")"
	cc -O2 -Wall -Wextra -std=gnu11 -o "$RING_BIN" "$RING_SRC" ||
		bench_die "cannot build $RING_BIN from $RING_SRC"
}
ring_run() { # REP: pong on SCPU, ping on CCPU, both bounded by their own deadline and timeout
	local rep=$1 f=$BENCH_TMP/ring-$1.shm pid out rtt ow p50
	head -c 4096 /dev/zero >"$f"
	taskset -c "$SCPU" timeout -k 2 $((SP_SECS + 20)) "$RING_BIN" pong "$f" $((SP_SECS + 15)) \
		>"$BENCH_TMP/ring-pong.log" 2>&1 </dev/null &
	pid=$!
	BENCH_PIDS+=("$pid")
	if ! out=$(taskset -c "$CCPU" timeout -k 2 $((SP_SECS + 20)) "$RING_BIN" ping "$f" "$RING_N" \
		$((SP_SECS + 10)) 2>&1); then
		bench_stop_server "$pid" TERM 2 || true
		run_failed ring raw "raw ring ping-pong rep $rep: $out $(cat "$BENCH_TMP/ring-pong.log")"
		return 0
	fi
	bench_wait_exit "$pid" 5 || bench_log "raw ring pong did not exit by itself"
	rtt=$(sed -n 's/.*rtt_avg_ns=\([0-9.]*\).*/\1/p' <<<"$out")
	ow=$(sed -n 's/.*oneway_avg_ns=\([0-9.]*\).*/\1/p' <<<"$out")
	p50=$(sed -n 's/.*rtt_p50_ns=\([0-9]*\).*/\1/p' <<<"$out")
	if [ -z "$rtt" ] || [ -z "$ow" ] || [ -z "$p50" ]; then
		run_failed ring raw "cannot parse shmring output: $out"
		return 0
	fi
	add_val ring_rtt/raw "$(awk -v v="$rtt" 'BEGIN { printf "%.4f", v / 1000 }')"
	add_val ring_oneway/raw "$(awk -v v="$ow" 'BEGIN { printf "%.4f", v / 1000 }')"
	add_val ring_rtt50/raw "$(awk -v v="$p50" 'BEGIN { printf "%.4f", v / 1000 }')"
	bench_log "raw ring rep $rep: RTT avg $rtt ns, one-way avg $ow ns, RTT p50 $p50 ns"
}
# The ring's repetitions ride with the pinned shm ones: kernel, shm, ring, kernel, shm, ring...
pp_pin_shm_ring() {
	pp_pin_shm "$1"
	[[ "$SKIP" == *,ring,* ]] || ring_run "$1"
}

# ---------------------------------------------------------------- sockperf throughput
tp_run() { # SIDE REP
	local side=$1 rep=$2 stats=$BENCH_TMP/stats-tp-$1-$2.jsonl out rate mbps
	side_env "$side" "$stats"
	if ! bench_start_on_free_port "$BENCH_TMP/sockperf-tp-$side" "${PIN_S[@]}" "${SIDE_ENV[@]}" \
		sockperf sr --tcp -i 127.0.0.1 -p '{PORT}'; then
		run_failed tp "$side" "sockperf server did not start (tp, $side, rep $rep)"
		return 0
	fi
	prof_client tp "$side"
	prof_attach tp "$side"
	if ! out=$(timeout -k 5 $((SP_SECS + 60)) "${PIN_C[@]}" "${PROF_C[@]}" "${SIDE_ENV[@]}" \
		sockperf tp --tcp -i 127.0.0.1 -p "$BENCH_SERVER_PORT" -m 1024 -t "$SP_SECS" 2>&1 |
		sed 's/\x1b\[[0-9;]*m//g'); then
		prof_detach
		bench_stop_server "$BENCH_SERVER_PID" INT 5 || true
		run_failed tp "$side" "sockperf tp ($side, rep $rep): $(tail -n 3 <<<"$out")"
		return 0
	fi
	prof_detach
	bench_stop_server "$BENCH_SERVER_PID" INT 5 || bench_log "sockperf server needed SIGKILL"
	PROF_OPS[tp/$side]=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' <<<"$out")
	rate=$(sed -n 's/.*Summary: Message Rate is \([0-9.]*\) .*/\1/p' <<<"$out")
	mbps=$(sed -n 's/.*Summary: BandWidth is \([0-9.]*\) MBps.*/\1/p' <<<"$out")
	if [ -z "$rate" ] || [ -z "$mbps" ]; then
		run_failed tp "$side" "cannot parse sockperf tp output ($side): $out"
		return 0
	fi
	add_val "tp_rate/$side" "$rate"
	add_val "tp_mbps/$side" "$mbps"
	check_stats tp "$side" "$stats"
	bench_log "sockperf tp rep $rep $side: $rate msg/s, $mbps MB/s"
}
tp_kernel() { tp_run kernel "$1"; }
tp_shm() { tp_run shm "$1"; }

# ---------------------------------------------------------------- redis-benchmark
REDIS_WL=("-c 1" "-c 50" "-c 50 -P 16")
REDIS_TARGET=(5 1.5 1.2)
declare -A REDIS_N

# redis_run IDX SIDE REP N: fresh redis-server, one redis-benchmark -t set,get run with
# workload REDIS_WL[IDX], server stopped. Sets REDIS_RES="SET_rps GET_rps" ("" on failure).
redis_run() {
	local idx=$1 side=$2 rep=$3 n=$4 stats=$BENCH_TMP/stats-redis$1-$2-$3.jsonl out
	REDIS_RES=""
	side_env "$side" "$stats"
	if ! bench_start_on_free_port "$BENCH_TMP/redis-$side" "${PIN_S[@]}" "${SIDE_ENV[@]}" \
		redis-server --bind 127.0.0.1 --port '{PORT}' --save '' --appendonly no \
		--dir "$BENCH_TMP" --daemonize no --protected-mode no; then
		run_failed "redis$idx" "$side" "redis-server did not start ($side, rep $rep)"
		return 0
	fi
	prof_client "redis$idx" "$side"
	prof_attach "redis$idx" "$side"
	# shellcheck disable=SC2086 # the workload is a word list on purpose
	if ! out=$(timeout -k 5 "$(awk -v s="$REDIS_SECS" 'BEGIN { printf "%d", s * 40 + 60 }')" \
		"${PIN_C[@]}" "${PROF_C[@]}" "${SIDE_ENV[@]}" redis-benchmark -h 127.0.0.1 \
		-p "$BENCH_SERVER_PORT" ${REDIS_WL[$idx]} -n "$n" -t set,get --csv 2>&1); then
		prof_detach
		bench_stop_server "$BENCH_SERVER_PID" TERM 5 || true
		run_failed "redis$idx" "$side" "redis-benchmark ${REDIS_WL[$idx]} ($side, rep $rep): $(tail -n 3 <<<"$out")"
		return 0
	fi
	prof_detach
	bench_stop_server "$BENCH_SERVER_PID" TERM 10 || bench_log "redis-server needed SIGKILL"
	PROF_OPS[redis$idx/$side]=$((2 * n)) # -t set,get: n SETs then n GETs
	if ! REDIS_RES=$(awk -F'","' '/^"SET"/ { s = $2 } /^"GET"/ { g = $2 } END {
		if (s == "" || g == "") exit 1; print s, g }' <<<"$out"); then
		REDIS_RES=""
		run_failed "redis$idx" "$side" "cannot parse redis-benchmark output ($side): $out"
		return 0
	fi
	[ "$rep" = calibration ] || check_stats "redis$idx" "$side" "$stats"
}
redis_rep() { # SIDE REP (all three workloads, each with its own server)
	local side=$1 rep=$2 idx
	for idx in "${!REDIS_WL[@]}"; do
		redis_run "$idx" "$side" "$rep" "${REDIS_N[$idx]}"
		[ -n "$REDIS_RES" ] || continue
		add_val "redis${idx}_set/$side" "${REDIS_RES% *}"
		add_val "redis${idx}_get/$side" "${REDIS_RES#* }"
		bench_log "redis ${REDIS_WL[$idx]} rep $rep $side: SET ${REDIS_RES% *} GET ${REDIS_RES#* } rps"
	done
}
redis_kernel() { redis_rep kernel "$1"; }
redis_shm() { redis_rep shm "$1"; }

# ---------------------------------------------------------------- iperf3
iperf_run() { # SIDE REP
	local side=$1 rep=$2 stats=$BENCH_TMP/stats-iperf-$1-$2.jsonl out gbps
	side_env "$side" "$stats"
	# -1: the server serves one test and exits by itself (and so writes its stats line).
	if ! bench_start_on_free_port "$BENCH_TMP/iperf3-$side" "${PIN_S[@]}" "${SIDE_ENV[@]}" \
		iperf3 -s -1 -B 127.0.0.1 -p '{PORT}'; then
		run_failed iperf "$side" "iperf3 server did not start ($side, rep $rep)"
		return 0
	fi
	if ! out=$(timeout -k 5 $((IPERF_SECS + 60)) "${PIN_C[@]}" "${SIDE_ENV[@]}" iperf3 \
		-c 127.0.0.1 -p "$BENCH_SERVER_PORT" -t "$IPERF_SECS" -J 2>"$BENCH_TMP/iperf3-client.err"); then
		bench_stop_server "$BENCH_SERVER_PID" TERM 5 || true
		run_failed iperf "$side" "iperf3 client ($side, rep $rep): $(tail -c 400 <<<"$out")" \
			"$(tail -n 3 "$BENCH_TMP/iperf3-client.err")"
		return 0
	fi
	bench_wait_exit "$BENCH_SERVER_PID" 10 || bench_log "iperf3 server did not exit by itself"
	if ! gbps=$(python3 -c 'import json, sys
d = json.loads(sys.stdin.read())
print("%.3f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' <<<"$out" 2>/dev/null); then
		run_failed iperf "$side" "cannot parse iperf3 -J output ($side): $(head -c 400 <<<"$out")"
		return 0
	fi
	add_val "iperf/$side" "$gbps"
	check_stats iperf "$side" "$stats"
	bench_log "iperf3 rep $rep $side: $gbps Gbit/s (receiver)"
}
iperf_kernel() { iperf_run kernel "$1"; }
iperf_shm() { iperf_run shm "$1"; }

# ---------------------------------------------------------------- run
PP_PIN_OK=1
if [ "$(nproc)" -lt 2 ] || [ "$SCPU" = "$CCPU" ]; then
	PP_PIN_OK=0
	bench_log "pinned ping-pong skipped: needs 2 CPUs and BENCH_SERVER_CPU != BENCH_CLIENT_CPU"
fi
if [[ "$SKIP" != *,pp,* ]]; then
	if [ "$PP_PIN_OK" = 1 ]; then
		[[ "$SKIP" == *,ring,* ]] || ring_build
		bench_interleave "$REPS" pp_pin_kernel pp_pin_shm_ring
	fi
	bench_interleave "$REPS" pp_free_kernel pp_free_shm
fi
[[ "$SKIP" != *,tp,* ]] && bench_interleave "$REPS" tp_kernel tp_shm
if [[ "$SKIP" != *,redis,* ]]; then
	for idx in "${!REDIS_WL[@]}"; do
		if [ -n "${BENCH_REDIS_N:-}" ]; then
			REDIS_N[$idx]=$BENCH_REDIS_N
			continue
		fi
		redis_run "$idx" kernel calibration 10000
		[ -n "$REDIS_RES" ] || bench_die "redis calibration run failed (${REDIS_WL[$idx]})"
		# Sized on the kernel GET rate; at least 20000 requests (5000 in quick mode) so a
		# faster side still runs long enough to be measured.
		REDIS_N[$idx]=$(awk -v g="${REDIS_RES#* }" -v s="$REDIS_SECS" -v m="$REDIS_MIN_N" 'BEGIN {
			n = int(g * s / 1000) * 1000; if (n < m) n = m; print n }')
		bench_log "calibration ${REDIS_WL[$idx]}: kernel GET ${REDIS_RES#* } rps -> -n ${REDIS_N[$idx]}"
	done
	bench_interleave "$REPS" redis_kernel redis_shm
fi
[[ "$SKIP" != *,iperf,* ]] && bench_interleave "$REPS" iperf_kernel iperf_shm

# Diagnostics, not part of the comparison above: one more run per side under perf stat.
PROF_GROUPS=()
PROF_NOTE=""
if [ "${BENCH_PROFILE:-0}" = 1 ]; then
	if ! command -v perf >/dev/null || ! perf stat -x, -e "$PROF_EV" -o /dev/null true 2>/dev/null; then
		PROF_NOTE="BENCH_PROFILE=1 but perf stat cannot count $PROF_EV here: no profile table."
	else
		PROF=1
		PFX=prof_
		if [[ "$SKIP" != *,pp,* ]]; then
			[ "$PP_PIN_OK" = 1 ] && PROF_GROUPS+=(pp_pin)
			PROF_GROUPS+=(pp_free)
		fi
		[[ "$SKIP" != *,tp,* ]] && PROF_GROUPS+=(tp)
		[[ "$SKIP" != *,redis,* ]] && PROF_GROUPS+=(redis0 redis1)
		for g in "${PROF_GROUPS[@]}"; do
			for side in kernel shm; do
				case $g in
				pp_pin) pp_run pin "$side" profile ;;
				pp_free) pp_run free "$side" profile ;;
				tp) tp_run "$side" profile ;;
				redis*)
					idx=${g#redis}
					redis_run "$idx" "$side" profile "${REDIS_N[$idx]}"
					if [ -n "$REDIS_RES" ]; then
						add_val "redis${idx}_get/$side" "${REDIS_RES#* }"
						bench_log "profile redis ${REDIS_WL[$idx]} $side: GET ${REDIS_RES#* } rps"
					fi
					;;
				esac
			done
		done
		PROF=0
		PFX=""
	fi
fi

# ---------------------------------------------------------------- report
ROWS=()
# one_row LABEL METRIC KEY GROUP BETTER TARGET TARGET_TEXT
#   KEY: VAL[KEY/kernel], VAL[KEY/shm]; GROUP: the runs' FAILS/SHARE/BAD entries;
#   BETTER: lower | higher (for the "shm advantage" column); TARGET: "OP LIMIT" on the
#   shm/kernel ratio, or "" (no target; TARGET_TEXT says why).
one_row() {
	local label=$1 metric=$2 key=$3 group=$4 better=$5 target=$6 ttext=$7
	local k s r rfull adv res nk ns fk fs bad minshare
	# shellcheck disable=SC2086
	k=$(bench_median ${VAL[$key/kernel]:-})
	# shellcheck disable=SC2086
	s=$(bench_median ${VAL[$key/shm]:-})
	rfull=$(bench_ratio "$s" "$k" %.10g)
	r=$(bench_fmt "$rfull")
	if [ "$better" = lower ]; then
		adv=$(bench_ratio "$k" "$s" %.2f)
	else
		adv=$(bench_ratio "$s" "$k" %.2f)
	fi
	[ "$adv" != NA ] && adv="${adv}x"
	nk=$(wc -w <<<"${VAL[$key/kernel]:-}")
	ns=$(wc -w <<<"${VAL[$key/shm]:-}")
	fk=${FAILS[$group/kernel]:-0}
	fs=${FAILS[$group/shm]:-0}
	bad=${BAD[$group]:-0}
	# shellcheck disable=SC2086
	minshare=$(printf '%s\n' ${SHARE[$group]:-} | sort -g | head -n 1)
	[ -n "$minshare" ] && [ "$minshare" != NA ] && minshare="$minshare%"
	if [ "$bad" -gt 0 ] || [ "$fs" -gt 0 ] || [ "$fk" -gt 0 ] || [ "$nk" = 0 ] || [ "$ns" = 0 ]; then
		res="INVALID ("
		[ "$bad" -gt 0 ] && res+="$bad shm run(s) < ${MIN_SHARE}% shm bytes; "
		[ "$fs" -gt 0 ] && res+="$fs shm run(s) failed; "
		[ "$fk" -gt 0 ] && res+="$fk kernel run(s) failed; "
		res="${res%; })"
		[ "$res" = "INVALID (" ] && res="INVALID (no value)"
	elif [ -z "$target" ]; then
		res="n/a"
	else
		res=$(bench_cmp "$rfull" "${target% *}" "${target#* }")
	fi
	# shellcheck disable=SC2086
	ROWS+=("| $label | $metric | $(bench_fmt "$k") | $(bench_fmt "$s") | $r | $adv | $nk/$ns of $REPS | $(bench_spread ${VAL[$key/kernel]:-}) | $(bench_spread ${VAL[$key/shm]:-}) | $ttext | $res | ${minshare:-NA} |")
}

if [[ "$SKIP" != *,pp,* ]]; then
	if [ "$PP_PIN_OK" = 1 ]; then
		l="sockperf pp --tcp -m 64 -t $SP_SECS, server cpu $SCPU / client cpu $CCPU"
		one_row "$l" "RTT avg, us" pp_pin_rtt pp_pin lower "<= 0.0333333333" "<= 1/30 (0.0333)"
		one_row "$l" "one-way avg, us (sockperf's figure = RTT/2)" pp_pin_oneway pp_pin lower "" "(same ratio as RTT)"
		one_row "$l" "RTT p50, us" pp_pin_rtt50 pp_pin lower "" "none (target is on avg)"
	fi
	l="sockperf pp --tcp -m 64 -t $SP_SECS, unpinned"
	one_row "$l" "RTT avg, us" pp_free_rtt pp_free lower "" "none given"
	one_row "$l" "one-way avg, us (sockperf's figure = RTT/2)" pp_free_oneway pp_free lower "" "none given"
	one_row "$l" "RTT p50, us" pp_free_rtt50 pp_free lower "" "none given"
fi
if [[ "$SKIP" != *,tp,* ]]; then
	l="sockperf tp --tcp -m 1024 -t $SP_SECS (pin ${BENCH_PIN:-off})"
	one_row "$l" "msg/s (sender)" tp_rate tp higher "" "none given"
	one_row "$l" "MB/s (sender)" tp_mbps tp higher "" "none given"
fi
if [[ "$SKIP" != *,redis,* ]]; then
	for idx in "${!REDIS_WL[@]}"; do
		for t in set get; do
			T=${t^^}
			one_row "redis-benchmark $T ${REDIS_WL[$idx]} -n ${REDIS_N[$idx]} (pin ${BENCH_PIN:-off})" \
				"requests/s" "redis${idx}_$t" "redis$idx" higher ">= ${REDIS_TARGET[$idx]}" \
				">= ${REDIS_TARGET[$idx]}"
		done
	done
fi
if [[ "$SKIP" != *,iperf,* ]]; then
	one_row "iperf3 -c, 1 stream, forward, -t $IPERF_SECS (pin ${BENCH_PIN:-off})" \
		"Gbit/s (receiver)" iperf iperf higher ">= 1.5" ">= 1.5"
fi

if [ -n "$SPIN" ]; then
	spin_text="RDMASOCK_SPIN_US=$SPIN (BENCH_SPIN_US)"
elif [ -n "${RDMASOCK_SPIN_US:-}" ]; then
	spin_text="RDMASOCK_SPIN_US=$RDMASOCK_SPIN_US (inherited)"
else
	spin_text="RDMASOCK_SPIN_US unset (library default, 50 us)"
fi
rev=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$BENCH_ROOT" status --porcelain -- core preload include CMakeLists.txt 2>/dev/null)" ]; then
	rev="$rev + uncommitted library changes"
fi
other_env=$(env | grep -E '^RDMASOCK_' | grep -vE '^RDMASOCK_(LIB|SPIN_US)=' | tr '\n' ' ' || true)

echo
echo "### librdmasock shm vs kernel TCP loopback ($([ "$QUICK" = 1 ] && echo "QUICK mode: short runs, not a result to quote" || echo "full run"))"
echo
bench_machine
echo
echo "- library: $LIB (tree $rev); shm side: LD_PRELOAD in server and client," \
	"RDMASOCK_TRANSPORT=$TRANSPORT, $spin_text${other_env:+; also inherited: $other_env}"
echo "- kernel side: no LD_PRELOAD (kernel TCP over 127.0.0.1)"
echo "- $REPS repetition(s) per side, interleaved kernel, shm, kernel, shm, ... per workload;" \
	"fresh server per run; started $DATE_START"
[ "$REPS" -lt 5 ] && echo "- fewer than 5 repetitions: medians of so few runs are indicative only"
echo "- load average at start: $LOAD_START; at end: $(cut -d' ' -f1-3 /proc/loadavg)" \
	"(other jobs share this machine)"
echo
echo "| workload | metric | kernel median | shm median | shm/kernel | shm advantage | runs kernel/shm | kernel spread | shm spread | target (shm/kernel) | result | min shm byte share |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "shm/kernel = ratio of the medians (for latency lower is better, so the target is an upper"
echo "bound); shm advantage = kernel/shm for latency, shm/kernel for rates. runs = repetitions"
echo "that produced a value. spread = (max - min) / median of one side's repetitions. min shm"
echo "byte share = lowest share of bytes_sent carried by shm over the shm runs (RDMASOCK_STATS,"
echo "both ends summed); a row is INVALID when any shm run is under ${MIN_SHARE}%, lacks a stats line"
echo "from one end, or any run failed. n/a = no target was given for that row."

# The floor table: raw ring vs the pinned ping-pong of both sides (same CPUs, same run).
if [[ "$SKIP" != *,pp,* ]] && [[ "$SKIP" != *,ring,* ]] && [ "$PP_PIN_OK" = 1 ]; then
	echo
	echo "#### Floor: raw shared-memory ring ping-pong (bench/shmring.c), same run, cpu $SCPU / cpu $CCPU"
	echo
	echo "64-byte messages copied through a shared slot, published by a sequence number in the next"
	echo "cache line, busy polling, no syscalls; $RING_N timed round trips per run (p50 from up to"
	echo "200000 timed one by one, clock reads included). $(wc -w <<<"${VAL[ring_rtt/raw]:-}")/$REPS runs gave a value" \
		"(${FAILS[ring/raw]:-0} failed); spread of the RTT average $(bench_spread ${VAL[ring_rtt/raw]:-})."
	echo
	echo "| metric | raw ring | library shm (sockperf) | kernel TCP (sockperf) | shm / ring | kernel / ring |"
	echo "|---|---|---|---|---|---|"
	for m in "RTT avg, us:rtt" "one-way avg, us:oneway" "RTT p50, us:rtt50"; do
		# shellcheck disable=SC2086
		rg=$(bench_median ${VAL[ring_${m#*:}/raw]:-})
		# shellcheck disable=SC2086
		sh=$(bench_median ${VAL[pp_pin_${m#*:}/shm]:-})
		# shellcheck disable=SC2086
		kn=$(bench_median ${VAL[pp_pin_${m#*:}/kernel]:-})
		echo "| ${m%%:*} | $(bench_fmt "$rg") | $(bench_fmt "$sh") | $(bench_fmt "$kn") |" \
			"$(bench_ratio "$sh" "$rg" %.1f)x | $(bench_ratio "$kn" "$rg" %.1f)x |"
	done
fi

echo
echo "Raw values per repetition (run order):"
echo
for k in $(printf '%s\n' "${!VAL[@]}" | grep -v '^prof_' | sort); do
	echo "- $k:${VAL[$k]}"
done
for g in $(printf '%s\n' "${!SHARE[@]}" | grep -v '^prof_' | sort); do
	echo "- shm byte share % ($g):${SHARE[$g]}"
done

# perf stat -x, line "value,unit,event,..." -> value of EVENT in FILE (NA if absent).
prof_val() {
	awk -F, -v e="$2" '$3 == e && $1 ~ /^[0-9.]+$/ { print $1; f = 1 } END { if (!f) print "NA" }' \
		"$1" 2>/dev/null || echo NA
}
prof_per() { # VALUE OPS SCALE -> VALUE * SCALE / OPS, 2 decimals
	awk -v v="$1" -v n="$2" -v k="$3" 'BEGIN {
		if (v == "NA" || n == "" || n + 0 == 0) print "NA"; else printf "%.2f\n", v * k / n }'
}
if [ -n "$PROF_NOTE" ]; then
	echo
	echo "$PROF_NOTE"
elif [ ${#PROF_GROUPS[@]} -gt 0 ]; then
	echo
	echo "### Per-operation costs (BENCH_PROFILE=1: one extra run per side under perf stat; diagnostics only)"
	echo
	echo "op = one round trip (sockperf pp), one message sent (sockperf tp), one request (redis,"
	echo "SET + GET). Counts cover the whole run of each process, warm-up and setup included."
	echo "CPU us/op = task-clock / ops: time on CPU, spinning included."
	echo
	echo "| workload | side | result under perf | ops | client syscalls/op | server syscalls/op | client ctx switches/op | server ctx switches/op | client migrations | server migrations | client CPU us/op | server CPU us/op |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for g in "${PROF_GROUPS[@]}"; do
		for side in kernel shm; do
			case $g in
			pp_pin) label="sockperf pp -m 64, cpu $SCPU / cpu $CCPU"; k=prof_pp_pin_rtt; u="us RTT avg" ;;
			pp_free) label="sockperf pp -m 64, unpinned"; k=prof_pp_free_rtt; u="us RTT avg" ;;
			tp) label="sockperf tp -m 1024 (pin ${BENCH_PIN:-off})"; k=prof_tp_rate; u="msg/s" ;;
			redis*) label="redis-benchmark ${REDIS_WL[${g#redis}]} (pin ${BENCH_PIN:-off})"; k=prof_${g}_get; u="GET rps" ;;
			esac
			v=${VAL[$k/$side]:-}
			res="$(bench_fmt "${v:-NA}") $u"
			ops=${PROF_OPS[$g/$side]:-}
			cf=$BENCH_TMP/prof-$g-$side-client.txt
			sf=$BENCH_TMP/prof-$g-$side-server.txt
			echo "| $label | $side | $res | ${ops:-NA} |" \
				"$(prof_per "$(prof_val "$cf" raw_syscalls:sys_enter)" "$ops" 1) |" \
				"$(prof_per "$(prof_val "$sf" raw_syscalls:sys_enter)" "$ops" 1) |" \
				"$(prof_per "$(prof_val "$cf" context-switches)" "$ops" 1) |" \
				"$(prof_per "$(prof_val "$sf" context-switches)" "$ops" 1) |" \
				"$(prof_val "$cf" cpu-migrations) | $(prof_val "$sf" cpu-migrations) |" \
				"$(prof_per "$(prof_val "$cf" task-clock)" "$ops" 1000) |" \
				"$(prof_per "$(prof_val "$sf" task-clock)" "$ops" 1000) |"
		done
	done
fi
