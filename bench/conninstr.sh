#!/usr/bin/env bash
# Instructions per short connection, by side: build/connrate (connect + 64-byte request +
# 64-byte response + close, one in flight) with one end under valgrind --tool=callgrind, for
# kernel TCP and for the library (both ends preloaded, default policy: TCP first on shm).
# Each side is measured at two connection counts, N1 and N2, so that start-up and exit
# cancel: (Ir(N2) - Ir(N1)) / (N2 - N1). Counting, not timing: what a rate on this shared
# machine cannot show (README "What a short connection costs"). Each run gets its own network
# namespace (unshare -n, loopback only). Needs root and valgrind.
#   bash bench/conninstr.sh            (N1=500, N2=1500)
#   N1=... N2=... SIDES="server client" MODES="kernel lib" bash bench/conninstr.sh
#   KEEP=1 keeps the callgrind files (callgrind_annotate them)
# Prints one line per run and a table. Every run is bounded (timeout).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
N1=${N1:-500}
N2=${N2:-1500}
SIDES=${SIDES:-server client}
MODES=${MODES:-kernel lib}
command -v valgrind >/dev/null || { echo "valgrind not installed" >&2; exit 77; }
[ -f "$LIB" ] || { echo "no $LIB (build it first)" >&2; exit 1; }
[ "$BIN" -nt "$ROOT/bench/connrate.c" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-conninstr.XXXXXX")
[ "${KEEP:-0}" = 1 ] && echo "keeping $OUT" >&2 || trap 'rm -rf "$OUT"' EXIT

# one_run SIDE MODE N: total instructions (Ir) of SIDE's process for N connections
one_run() {
	local side=$1 mode=$2 n=$3 pre="" cg=$OUT/cg.$1.$2.$3
	[ "$mode" = lib ] && pre="LD_PRELOAD=$LIB"
	# the measured side runs under callgrind (the server: started first, given up to 10 s to
	# listen, then it serves for its own bounded time; the client: against a plain-speed server)
	timeout -k 5 120 unshare -n bash -c '
		ip link set lo up
		bin=$1 side=$2 pre=$3 cg=$4 n=$5 port=$((20000 + RANDOM % 20000))
		. "$6/bench/lib.sh" # bench_wait_listen
		vg="valgrind --tool=callgrind --callgrind-out-file=$cg"
		if [ "$side" = server ]; then
			env $pre $vg "$bin" server "$port" 30 >/dev/null 2>"$cg.err" &
			sp=$!
			bench_wait_listen "$port" $sp 10
			env $pre "$bin" client "$port" 1 "$n" 25 >"$cg.client" 2>&1
			kill -TERM $sp; wait $sp
		else
			env $pre "$bin" server "$port" 60 >/dev/null 2>&1 &
			sp=$!
			bench_wait_listen "$port" $sp 5
			env $pre $vg "$bin" client "$port" 1 "$n" 50 >"$cg.client" 2>"$cg.err"
			kill -TERM $sp; wait $sp
		fi' _ "$BIN" "$side" "$pre" "$cg" "$n" "$ROOT" >/dev/null 2>&1
	grep -q "done=$n failed=0" "$cg.client" || { echo "FAIL $side $mode $n: $(cat "$cg.client")" >&2; return 1; }
	sed -n 's/^summary: *//p' "$cg"
}

printf '%-7s %-7s %8s %14s\n' side mode conns instructions >&2
declare -A PER
for side in $SIDES; do
	for mode in $MODES; do
		a=$(one_run "$side" "$mode" "$N1") || exit 1
		b=$(one_run "$side" "$mode" "$N2") || exit 1
		printf '%-7s %-7s %8s %14s\n%-7s %-7s %8s %14s\n' "$side" "$mode" "$N1" "$a" \
			"$side" "$mode" "$N2" "$b" >&2
		PER[$side.$mode]=$(( (b - a) / (N2 - N1) ))
	done
done
echo
echo "Instructions per connection, (Ir($N2) - Ir($N1)) / $((N2 - N1)), one in flight, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null):"
echo
echo "| side | kernel TCP | library | library - kernel |"
echo "|---|---|---|---|"
for side in $SIDES; do
	k=${PER[$side.kernel]:-}
	l=${PER[$side.lib]:-}
	d=""
	[ -n "$k" ] && [ -n "$l" ] && d=$((l - k))
	echo "| $side | ${k:--} | ${l:--} | ${d:--} |"
done
