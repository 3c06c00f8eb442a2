#!/usr/bin/env bash
# System calls per short connection, by call, for each side: kernel TCP, the library, and
# (optional) an older build of the library for a before/after view. The workload is
# build/connrate (connect + 64-byte request + 64-byte response + close, one in flight),
# both ends preloaded, each run in its own network namespace. Counted with `strace -f -c`
# at two sizes, N and 2N connections: (count at 2N - count at N) / N leaves start-up and exit
# out. strace slows every call, so this counts calls; it does not time them.
#   bash bench/phases.sh [N]                       (default 1000)
#   BEFORE=/path/to/old/librdmasock.so bash bench/phases.sh
# Needs root (unshare -n) and strace.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
N=${1:-1000}
[ -x "$BIN" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
command -v strace >/dev/null || { echo "strace missing"; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-phases.XXXXXX")

one() { # label preload n -> $OUT/{srv,cli}.label.n (strace -c tables)
	local label=$1 pre=$2 n=$3
	unshare -n bash -c '
		ip link set lo up || exit 1
		env '"$pre"' strace -f -c -o "$1/srv.$2.$3" "$0" server 18500 60 >/dev/null 2>&1 &
		sp=$!
		for i in $(seq 100); do ss -Hltn "sport = :18500" | grep -q . && break; sleep 0.05; done
		env '"$pre"' strace -f -c -o "$1/cli.$2.$3" timeout -s KILL 120 "$0" client 18500 1 "$3" 30 >/dev/null
		# only our server (strace'"'"'s child): other runs of connrate on the machine are not ours
		pkill -TERM -P $sp -x connrate; for i in $(seq 100); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		wait
	' "$BIN" "$OUT" "$label" "$n"
}

labels="kernel"
one kernel "" "$N"; one kernel "" $((2 * N))
if [ -n "${BEFORE:-}" ]; then
	labels="$labels before"
	one before "LD_PRELOAD=$BEFORE" "$N"; one before "LD_PRELOAD=$BEFORE" $((2 * N))
fi
labels="$labels library"
one library "LD_PRELOAD=$LIB" "$N"; one library "LD_PRELOAD=$LIB" $((2 * N))

calls() { # file -> "name count" lines
	awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { print $NF, $4 }' "$1"
}
for side in srv cli; do
	name=$([ $side = srv ] && echo server || echo client)
	echo
	printf '| %s: calls per connection |' "$name"; for l in $labels; do printf ' %s |' "$l"; done; echo
	printf '|---|'; for l in $labels; do printf -- '---|'; done; echo
	names=$(for l in $labels; do calls "$OUT/$side.$l.$((2 * N))"; done | awk '{print $1}' | sort -u)
	for c in $names total; do
		row="| $c |"; keep=0
		for l in $labels; do
			a=$(calls "$OUT/$side.$l.$N" | awk -v c="$c" '$1 == c || c == "total" {s += $2} END {print s + 0}')
			b=$(calls "$OUT/$side.$l.$((2 * N))" | awk -v c="$c" '$1 == c || c == "total" {s += $2} END {print s + 0}')
			v=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN {v = (b - a) / n; if (v < 0.005 && v > -0.005) v = 0; printf "%.2f", v}')
			awk -v v="$v" 'BEGIN {exit !(v >= 0.05 || v <= -0.05)}' && keep=1
			row="$row $v |"
		done
		[ $keep = 1 ] && echo "$row"
	done
done
echo "(strace -f -c, (count at $((2 * N)) - count at $N) / $N; files in $OUT)"
