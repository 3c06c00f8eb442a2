#!/usr/bin/env bash
# Many clients on one server (issue 9's target: `redis-benchmark -c 200` >= 1.3x kernel TCP,
# with every connection on shm): redis-benchmark -c CLIENTS -t set,get against a fresh
# redis-server per run, kernel TCP and the library (both ends preloaded, RDMASOCK_TRANSPORT
# shm) interleaved, medians. The library's runs must show every connection of redis-benchmark
# on shm (its stats line); a run that does not is reported and counted as a MISS.
#   bash bench/redis_many.sh [REPS=3]
#   CLIENTS (200), REQS (200000): redis-benchmark -c and -n. Every run is bounded (60 s).
set -u
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
REPS=${1:-3}
CLIENTS=${CLIENTS:-200}
REQS=${REQS:-200000}
LIB=$(bench_ensure_lib)
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
	bench_die "redis-server and redis-benchmark are needed (scripts/install-deps.sh)"
bench_init
declare -A RPS=()
ALL_SHM=1

one() { # rep mode
	local r=$1 mode=$2 pre=() out cst srv share conns
	[ "$mode" = lib ] && pre=(env "LD_PRELOAD=$LIB" RDMASOCK_TRANSPORT=shm)
	cst=$BENCH_TMP/cli-$mode-$r.jsonl
	srv=$BENCH_TMP/srv-$mode-$r.jsonl
	# redis-server needs room for CLIENTS connections plus its own fds
	ulimit -n $((CLIENTS * 2 + 256)) 2>/dev/null || true
	bench_start_on_free_port "$BENCH_TMP/redis-$mode-$r" \
		"${pre[@]}" env RDMASOCK_STATS="$srv" redis-server --bind 127.0.0.1 --port '{PORT}' \
		--save '' --appendonly no --maxclients $((CLIENTS + 32)) ||
		bench_die "redis-server did not start"
	out=$("${pre[@]}" env RDMASOCK_STATS="$cst" timeout -s KILL 60 redis-benchmark \
		-h 127.0.0.1 -p "$BENCH_SERVER_PORT" -c "$CLIENTS" -n "$REQS" -t set,get -q 2>&1 |
		tr '\r' '\n' | sed -En 's/^ *([A-Z]+): ([0-9.]+) requests per second.*/\1=\2/p' |
		tr '\n' ' ')
	bench_stop_server "$BENCH_SERVER_PID" TERM 10
	RPS[$mode.SET]+="$(echo "$out" | grep -o 'SET=[0-9.]*' | cut -d= -f2) "
	RPS[$mode.GET]+="$(echo "$out" | grep -o 'GET=[0-9.]*' | cut -d= -f2) "
	conns=""
	if [ "$mode" = lib ]; then
		read -r share _ conns <<<"$(bench_stats_share "$cst" shm)"
		# SET and GET each open CLIENTS connections, plus redis-benchmark's config query
		case "$conns" in
		kernel=0,shm=*,verbs=0) [ "${conns#kernel=0,shm=}" != 0 ] || ALL_SHM=0 ;;
		*) ALL_SHM=0 ;;
		esac
	fi
	echo "rep=$r mode=$mode $out${conns:+client_conns=$conns}"
}

lib_run() { one "$1" lib; }
ker_run() { one "$1" kernel; }
bench_machine
for ((r = 1; r <= REPS; r++)); do
	if [ $((r % 2)) = 1 ]; then ker_run "$r"; lib_run "$r"; else lib_run "$r"; ker_run "$r"; fi
done
echo
echo "| redis-benchmark -c $CLIENTS -n $REQS | kernel rps | library rps | library / kernel | target 1.3x |"
echo "|---|---|---|---|---|"
for t in SET GET; do
	# shellcheck disable=SC2086 # the lists are space-separated numbers
	k=$(bench_median ${RPS[kernel.$t]})
	# shellcheck disable=SC2086
	l=$(bench_median ${RPS[lib.$t]})
	ratio=$(bench_ratio "$l" "$k" %.2f)
	echo "| $t | $(bench_fmt "$k") | $(bench_fmt "$l") | ${ratio}x | $(bench_cmp "$ratio" '>=' 1.3) |"
done
[ "$ALL_SHM" = 1 ] && echo "every library run: all of redis-benchmark's connections on shm" ||
	echo "MISS: some library run had connections off shm (client_conns above)"
