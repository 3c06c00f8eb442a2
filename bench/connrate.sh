#!/usr/bin/env bash
# Short-connection rate, kernel TCP vs the library (both ends preloaded, shm):
# connect + 64-byte request + 64-byte response + close, with 1, 10 and 100 connections in
# flight (build/connrate, single-threaded epoll client and server), interleaved repetitions,
# medians. Each run gets its own network namespace (unshare -n, loopback only), so TIME_WAIT
# sockets of one run (the library's bind-chosen ports slow every later bind, see
# bench/phasecost.c tw) neither reach the next run nor anyone else on the machine.
#   bash bench/connrate.sh [REPS] [TOTAL]      (defaults 5, 3000; every run <= 15 s)
# Needs root (unshare -n). Prints one line per run, then the table.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
REPS=${1:-5}
TOTAL=${2:-3000}
CONCS=${CONCS:-1 10 100}
[ -x "$BIN" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-connrate.XXXXXX")

one_run() { # mode conc -> prints the client line (+ error lines)
	local mode=$1 conc=$2 pre=""
	[ "$mode" = lib ] && pre="LD_PRELOAD=$LIB"
	unshare -n bash -c '
		ip link set lo up || exit 1
		env '"$pre"' "$0" server 18500 20 >"$1/srv.txt" 2>&1 &
		sp=$!
		for i in $(seq 50); do ss -Hltn "sport = :18500" | grep -q . && break; sleep 0.02; done
		env '"$pre"' timeout -s KILL 20 "$0" client 18500 "$2" "$3" 12
		kill -TERM $sp; for i in $(seq 50); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		kill -KILL $sp 2>/dev/null; wait $sp 2>/dev/null
		grep -c "accept failed" "$1/srv.txt" | sed "s/^/server_drops=/"
	' "$BIN" "$OUT" "$conc" "$TOTAL"
}

for ((r = 1; r <= REPS; r++)); do
	for conc in $CONCS; do
		for mode in kernel lib; do
			res=$(one_run "$mode" "$conc" 2>&1)
			cps=$(echo "$res" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)
			p50=$(echo "$res" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2)
			failed=$(echo "$res" | grep -o 'failed=[0-9]*' | cut -d= -f2)
			drops=$(echo "$res" | grep -o 'server_drops=[0-9]*' | cut -d= -f2)
			errs=$(echo "$res" | grep '^error:' | sed 's/error: //' | tr '\n' ';')
			echo "rep=$r conc=$conc mode=$mode conn_per_s=${cps:-0} lat_p50_us=${p50:-0} failed=${failed:-?} server_drops=${drops:-?} $errs" | tee -a "$OUT/runs.txt"
		done
	done
done

median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
echo
printf '| concurrent | kernel conn/s | library conn/s | library / kernel | kernel p50 latency | library p50 latency | library failed (sum) |\n'
printf '|---|---|---|---|---|---|---|\n'
for conc in $CONCS; do
	k=$(grep " conc=$conc mode=kernel" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
	l=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
	kl=$(grep " conc=$conc mode=kernel" "$OUT/runs.txt" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)
	ll=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)
	lf=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'failed=[0-9]*' | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
	printf '| %s | %s | %s | %s | %s us | %s us | %s |\n' "$conc" "$k" "$l" \
		"$(awk -v a="$l" -v b="$k" 'BEGIN {printf "%.2f", b ? a / b : 0}')" "$kl" "$ll" "$lf"
done
echo "(runs: $OUT/runs.txt; $REPS interleaved repetitions of $TOTAL connections, medians)"
