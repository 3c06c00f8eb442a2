#!/usr/bin/env bash
# Keep-alive clients of a prefork server: nginx (master + 2 workers) and `ab -k` (C in
# flight, N requests of a 3-byte body), with and without the library, and with OLD_LIB (an
# earlier build, optional), interleaved repetitions, medians. Default policy (auto): a burst
# of C non-blocking connects sets up 8 at connect and starts the rest on TCP (setup_limit),
# which then move once busy; into a prefork server they move only by knocks (docs/design.md,
# "Moves into a prefork server"). Prints req/s per side, ratios to kernel TCP and the
# client's connections by transport. WORKERS (default 2) sets nginx's worker_processes: more
# than 16 shows the bell's kin beyond its first 16 places (a build before 2026-12-05 never
# knocked at those workers). A benchmark, not a test.
#   [OLD_LIB=/path/librdmasock.so] [WORKERS=N] bash bench/prefork_ab.sh [REPS] [C] [N]
#   (5, 50, 30000)
set -u
. "$(dirname "$0")/lib.sh"
REPS=${1:-5}
C=${2:-50}
N=${3:-30000}
command -v nginx >/dev/null && command -v ab >/dev/null || bench_die "needs nginx and ab"
LIB=$(bench_ensure_lib)
OLD=${OLD_LIB:-}
bench_init
. "$BENCH_ROOT/test/integration/nginx_ok.sh"

# one_run SIDE LIB: nginx + ab once; prints "rps conns" (conns: the client's, by transport)
one_run() {
	local side=$1 lib=$2 d=$BENCH_TMP/$1 port rps
	rm -rf "$d"
	port=$(bench_free_port)
	nginx_ok_conf "$d" "$port" off
	sed -i -e 's/worker_connections 64;/worker_connections 1024;/' \
		-e "s/worker_processes 2;/worker_processes ${WORKERS:-2};/" "$d/nginx.conf"
	: >"$d/stats"
	env ${lib:+LD_PRELOAD=$lib} RDMASOCK_STATS="$d/stats" \
		nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" &
	BENCH_SERVER_PID=$!
	BENCH_PIDS+=("$BENCH_SERVER_PID")
	bench_wait_listen "$port" "$BENCH_SERVER_PID" 10 || bench_die "nginx did not listen"
	rps=$(env ${lib:+LD_PRELOAD=$lib} RDMASOCK_STATS="$d/stats" timeout -s KILL 120 \
		ab -q -k -c "$C" -n "$N" "http://127.0.0.1:$port/ok" 2>&1 |
		sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p')
	bench_stop_server "$BENCH_SERVER_PID" QUIT 10
	echo "${rps:-NA} $(grep '"program":"ab"' "$d/stats" |
		python3 -c 'import json,sys
c = {"kernel": 0, "shm": 0}
for l in sys.stdin:
    for t in c: c[t] += json.loads(l)["connections"][t]
print("kernel=%d,shm=%d" % (c["kernel"], c["shm"]))')"
}

sides="kernel new"
[ -n "$OLD" ] && sides="kernel old new"
declare -A rps conns
bench_log "$(bench_machine); nginx worker_processes ${WORKERS:-2}"
for ((r = 1; r <= REPS; r++)); do
	for side in $sides; do
		case $side in kernel) lib="" ;; old) lib=$OLD ;; new) lib=$LIB ;; esac
		read -r v k < <(one_run "$side" "$lib")
		rps[$side]+="$v "
		conns[$side]=$k
		bench_log "rep $r $side: $v req/s, client connections $k"
	done
done
printf '%-8s %12s %8s  %s\n' side "req/s (med)" "x kernel" "client connections (last run)"
kmed=$(bench_median ${rps[kernel]})
for side in $sides; do
	med=$(bench_median ${rps[$side]})
	printf '%-8s %12s %8s  %s\n' "$side" "$(bench_fmt "$med")" "$(bench_ratio "$med" "$kmed" %.2f)" \
		"$([ "$side" = kernel ] && echo - || echo "${conns[$side]}")"
done
