#!/usr/bin/env bash
# Short-connection rate of this build's library against another one (OLD_LIB, e.g. built from
# the commit before a change), both ends preloaded: build/connrate's connect + 64-byte request
# + 64-byte response + close, 1 and 10 in flight (CONCS), interleaved repetitions (which
# library runs first alternates), medians. RDMASOCK_TCP_FIRST is off unless TCP_FIRST says
# otherwise: every connection is set up on shm at connect, so what a change costs or saves in
# a connection's setup and teardown is in every one of them (with the default policy short
# connections stay on TCP). Each run in its own network namespace, as bench/connrate.sh.
#   OLD_LIB=/path/librdmasock.so bash bench/connrate_ab.sh [REPS] [TOTAL]   (defaults 5, 3000)
# Needs root (unshare -n).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
OLD=${OLD_LIB:?set OLD_LIB to the library to compare with}
REPS=${1:-5}
TOTAL=${2:-3000}
CONCS=${CONCS:-1 10}
TF=${TCP_FIRST:-off}
[ -x "$BIN" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-connrate-ab.XXXXXX")

one_run() { # lib conc -> the client's line
	unshare -n bash -c '
		ip link set lo up || exit 1
		env LD_PRELOAD="$4" RDMASOCK_TCP_FIRST="$5" "$0" server 18500 20 >"$1/srv.txt" 2>&1 &
		sp=$!
		for i in $(seq 50); do ss -Hltn "sport = :18500" | grep -q . && break; sleep 0.02; done
		env LD_PRELOAD="$4" RDMASOCK_TCP_FIRST="$5" timeout -s KILL 20 "$0" client 18500 "$2" "$3" 12
		kill -TERM $sp; for i in $(seq 50); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		kill -KILL $sp 2>/dev/null; wait $sp 2>/dev/null
	' "$BIN" "$OUT" "$2" "$TOTAL" "$1" "$TF"
}

for ((r = 1; r <= REPS; r++)); do
	for conc in $CONCS; do
		order="new old"
		[ $((r % 2)) = 0 ] && order="old new"
		for m in $order; do
			lib=$LIB
			[ "$m" = old ] && lib=$OLD
			res=$(one_run "$lib" "$conc" 2>&1)
			cps=$(echo "$res" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)
			p50=$(echo "$res" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2)
			failed=$(echo "$res" | grep -o 'failed=[0-9]*' | cut -d= -f2)
			echo "rep=$r conc=$conc lib=$m conn_per_s=${cps:-0} lat_p50_us=${p50:-0} failed=${failed:-?}" |
				tee -a "$OUT/runs.txt"
		done
	done
done

. "$ROOT/bench/lib.sh"
median() { bench_median_in; }
col() { grep "conc=$1 lib=$2 " "$OUT/runs.txt" | grep -o "$3=[0-9.]*" | cut -d= -f2 | median; }
echo
echo "| in flight | old conn/s | new conn/s | new / old | old p50 us | new p50 us |"
echo "|---|---|---|---|---|---|"
for conc in $CONCS; do
	o=$(col "$conc" old conn_per_s)
	n=$(col "$conc" new conn_per_s)
	echo "| $conc | $o | $n | $(bench_ratio "$n" "$o" %.2f)x | $(col "$conc" old lat_p50_us) | $(col "$conc" new lat_p50_us) |"
done
