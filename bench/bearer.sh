#!/usr/bin/env bash
# What a short same-host connection could cost if its bytes rode an AF_UNIX stream socket
# instead of loopback TCP (issue 9's 1.2x target for one-request connections; the design
# question is in docs/design.md, "A same-host bearer without the TCP handshake").
# build/connrate (connect + 64-byte request + 64-byte response + close, single-threaded epoll
# client and server) in four modes, each run in its own network namespace, interleaved
# repetitions, medians:
#   kernel  loopback TCP, no library
#   library loopback TCP, both ends preloaded (today: such a connection stays on TCP first)
#   unix    both ends plain abstract unix sockets, no library: the kernel's floor
#   setup   no library, but the kernel work a preload would add for a unix bearer
#           (RSK_CONNRATE_BEARER=setup in bench/connrate.c: the server's TCP listener and a
#           unix rendezvous under one epoll key, a bell in shared memory; the client's TCP
#           socket replaced by a bound, connected unix one through dup3)
#   nested  setup, with the server's TCP listener and unix rendezvous inside one inner epoll
#           fd that its epoll set holds in the listener's place: a preload could dup3() that
#           fd onto the listener's number, so that every wait on the listener (poll, select,
#           an epoll set the preload never sees, io_uring) wakes for either
# then system calls per connection at one in flight (perf stat raw_syscalls, (3,000 - 1,000)
# / 2,000). A benchmark, not a test: it asserts only that every run completed its connections.
#   bash bench/bearer.sh [REPS] [TOTAL]        (defaults 3, 3000; every run <= 15 s)
# Needs root (unshare -n).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
REPS=${1:-3}
TOTAL=${2:-3000}
CONCS=${CONCS:-1 10 100}
ALL_MODES="kernel library unix setup nested"
MODES=${MODES:-$ALL_MODES}
[ "$BIN" -nt "$ROOT/bench/connrate.c" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
[ -f "$LIB" ] || { echo "no $LIB (build it first)" >&2; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-bearer.XXXXXX")
# shellcheck source=lib.sh
. "$ROOT/bench/lib.sh" # bench_median, bench_ratio

env_of() { # mode -> env assignments for both ends
	case $1 in
	kernel) echo "RSK_CONNRATE_BEARER=tcp" ;;
	library) echo "RSK_CONNRATE_BEARER=tcp LD_PRELOAD=$LIB" ;;
	unix) echo "RSK_CONNRATE_BEARER=unix" ;;
	setup) echo "RSK_CONNRATE_BEARER=setup" ;;
	nested) echo "RSK_CONNRATE_BEARER=nested" ;;
	esac
}

# one_run mode conc n [perf] -> the client's line; with perf, "server_calls client_calls"
one_run() {
	local mode=$1 conc=$2 n=$3 perf=${4:-} e
	e=$(env_of "$mode")
	unshare -n bash -c '
		ip link set lo up || exit 1
		ps=""; pc=""
		if [ -n "$4" ]; then
			ps="perf stat -x, -e raw_syscalls:sys_enter -o $1/srv.perf"
			pc="perf stat -x, -e raw_syscalls:sys_enter -o $1/cli.perf"
		fi
		env '"$e"' $ps "$0" server 18500 20 >"$1/srv.txt" 2>&1 &
		sp=$!
		# the server is up once its first line is out (a unix-only server has no TCP port)
		for i in $(seq 100); do grep -q listening "$1/srv.txt" 2>/dev/null && break; sleep 0.02; done
		env '"$e"' $pc timeout -s KILL 20 "$0" client 18500 "$2" "$3" 12
		pkill -TERM -P $sp -x connrate || kill -TERM $sp 2>/dev/null
		for i in $(seq 50); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		kill -KILL $sp 2>/dev/null; wait
	' "$BIN" "$OUT" "$conc" "$n" "$perf"
	if [ -n "$perf" ]; then
		echo "$(grep -m1 raw_syscalls "$OUT/srv.perf" | cut -d, -f1) $(grep -m1 raw_syscalls "$OUT/cli.perf" | cut -d, -f1)"
	fi
}

rc=0
for ((r = 1; r <= REPS; r++)); do
	# rotate the order per repetition: a later run may find the machine warmer or busier
	set -- $MODES
	for ((k = 0; k < (r - 1) % 4; k++)); do set -- "$@" "$1"; shift; done
	for conc in $CONCS; do
		for mode in "$@"; do
			res=$(one_run "$mode" "$conc" "$TOTAL" 2>&1)
			cps=$(echo "$res" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)
			p50=$(echo "$res" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2)
			done_n=$(echo "$res" | grep -o 'done=[0-9]*' | cut -d= -f2)
			[ "${done_n:-0}" = "$TOTAL" ] || { echo "run incomplete: $mode $conc: $res" >&2; rc=1; }
			echo "rep=$r conc=$conc mode=$mode conn_per_s=${cps:-0} lat_p50_us=${p50:-0} done=${done_n:-0}" | tee -a "$OUT/runs.txt"
		done
	done
done

echo
printf '| in flight | kernel TCP conn/s | library (TCP first) | unix | unix + setup | nested | library / kernel | unix / kernel | setup / kernel | nested / kernel |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for conc in $CONCS; do
	declare -A m=()
	for mode in $ALL_MODES; do # (a mode not run: its median is NA)
		m[$mode]=$(bench_median $(grep " conc=$conc mode=$mode " "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2))
	done
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$conc" "${m[kernel]}" \
		"${m[library]}" "${m[unix]}" "${m[setup]}" "${m[nested]}" \
		"$(bench_ratio "${m[library]}" "${m[kernel]}" %.2fx)" \
		"$(bench_ratio "${m[unix]}" "${m[kernel]}" %.2fx)" \
		"$(bench_ratio "${m[setup]}" "${m[kernel]}" %.2fx)" \
		"$(bench_ratio "${m[nested]}" "${m[kernel]}" %.2fx)"
done
echo "(runs: $OUT/runs.txt; $REPS interleaved repetitions of $TOTAL connections, medians)"

if [ "${SYSCALLS:-1}" = 1 ] && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
	echo
	printf '| system calls per connection, one in flight | server | client |\n|---|---|---|\n'
	for mode in $MODES; do
		read -r s1 c1 <<<"$(one_run "$mode" 1 1000 perf | tail -1)"
		read -r s2 c2 <<<"$(one_run "$mode" 1 3000 perf | tail -1)"
		printf '| %s | %s | %s |\n' "$mode" \
			"$(awk -v a="$s1" -v b="$s2" 'BEGIN {printf "%.2f", (b - a) / 2000}')" \
			"$(awk -v a="$c1" -v b="$c2" 'BEGIN {printf "%.2f", (b - a) / 2000}')"
	done
fi
exit $rc
