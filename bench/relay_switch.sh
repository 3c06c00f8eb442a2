#!/usr/bin/env bash
# What the stdio switch costs (bench/relay_switch.c: fdopen on a shm connection), this
# build's library against another one (OLD_LIB, e.g. one built from the commit before the
# relay helper), interleaved repetitions (which one runs first alternates), medians.
#   OLD_LIB=/path/librdmasock.so bash bench/relay_switch.sh [REPS] [N]   (defaults 7, 40)
# The echo server (build/test/progs/echo_server) runs under this build's library.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
LIB=$ROOT/build/librdmasock.so
OLD=${OLD_LIB:?set OLD_LIB to the library to compare with}
REPS=${1:-7}
N=${2:-40}
BIN=$ROOT/build/relay_switch
[ -x "$BIN" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/relay_switch.c" || exit 1
bench_init
port=$(bench_free_port)
RDMASOCK_TCP_FIRST=off LD_PRELOAD=$LIB "$ROOT/build/test/progs/echo_server" "$port" poll \
	>"$BENCH_TMP/srv.log" 2>&1 &
BENCH_PIDS+=($!)
for i in $(seq 50); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
run() { # lib -> median us
	RDMASOCK_TCP_FIRST=off LD_PRELOAD=$1 timeout 60 "$BIN" "$port" "$N" | awk '{print $3}'
}
old=() new=()
for r in $(seq "$REPS"); do
	if [ $((r % 2)) = 1 ]; then
		o=$(run "$OLD"); n=$(run "$LIB")
	else
		n=$(run "$LIB"); o=$(run "$OLD")
	fi
	echo "rep $r: fdopen median us old $o new $n"
	old+=("$o") new+=("$n")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "fdopen (us, median of $REPS medians of $N): old $(med "${old[@]}") new $(med "${new[@]}")"
