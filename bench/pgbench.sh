#!/usr/bin/env bash
# PostgreSQL under pgbench, kernel TCP against the library (both ends preloaded, shm, the
# defaults), interleaved repetitions, medians: TPC-B-like with 4 clients on 2 threads (scale
# 1: every transaction updates the one branch row, so lock holders and their clients make
# the critical path), select-only with 4 clients, and select-only with one client (latency
# bound). A fresh cluster per run (initdb as the postgres user, fsync off: the connections
# are measured, not the disk), on 127.0.0.1, stopped by its postmaster's pid.
#   bash bench/pgbench.sh [REPS] [SECS]        (defaults 3 repetitions, 5 s per pgbench run)
#   BENCH_PG_EXTRA="RDMASOCK_SPIN_US=0 ..."    adds a third side: the library with these
#   BENCH_PG_LIB=/path/librdmasock.so         another build of the library (default build/)
# Needs root (runs PostgreSQL as its postgres user) and the postgresql package.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=${BENCH_PG_LIB:-$ROOT/build/librdmasock.so}
REPS=${1:-3}
SECS=${2:-5}
PGBIN=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pgbench" ] && [ -x "$d/postgres" ] && PGBIN=$d; done
[ -n "$PGBIN" ] || { echo "PostgreSQL is not installed (scripts/install-deps.sh)" >&2; exit 1; }
[ -f "$LIB" ] || { echo "no $LIB (build it first)" >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "no postgres user" >&2; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-pgbench.XXXXXX")
chmod 0711 "$OUT"
# shellcheck source=lib.sh
. "$ROOT/bench/lib.sh" # bench_median, bench_ratio
as_pg() { runuser -u postgres -- "$@"; }

# pgb ARGS...: pgbench against this side's server, with its environment
pgb() { as_pg env "${E[@]}" timeout $((SECS + 30)) "$PGBIN/pgbench" -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

# one_run SIDE PORT ENV... -> "tpcb select4 select1" (tps, integer)
one_run() {
	local side=$1 port=$2 d=$OUT/pg.$1 a b c pm
	shift 2
	E=("$@") # the environment of every process of this side
	rm -rf "$d" && mkdir "$d" && chown postgres: "$d"
	as_pg "$PGBIN/initdb" -D "$d/data" -A trust -U postgres --no-sync >/dev/null 2>&1 || return 1
	as_pg env "$@" "$PGBIN/postgres" -D "$d/data" -h 127.0.0.1 -p "$port" -k "$d" \
		-c fsync=off -c synchronous_commit=off -c full_page_writes=off >"$d/log" 2>&1 &
	for _ in $(seq 100); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
	PORT=$port
	pgb -i -s 1 -q postgres >/dev/null 2>&1
	a=$(pgb -c 4 -j 2 -T "$SECS" postgres 2>&1 | sed -n 's/^tps = \([0-9]*\).*/\1/p')
	b=$(pgb -c 4 -j 2 -T "$SECS" -S -n postgres 2>&1 | sed -n 's/^tps = \([0-9]*\).*/\1/p')
	c=$(pgb -c 1 -j 1 -T "$SECS" -S -n postgres 2>&1 | sed -n 's/^tps = \([0-9]*\).*/\1/p')
	pm=$(head -n 1 "$d/data/postmaster.pid" 2>/dev/null)
	[ -z "$pm" ] || kill -INT "$pm"
	for _ in $(seq 100); do [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null || break; sleep 0.1; done
	wait
	echo "${a:-0} ${b:-0} ${c:-0}"
}

sides="kernel library"
[ -z "${BENCH_PG_EXTRA:-}" ] || sides="$sides extra"
for ((r = 1; r <= REPS; r++)); do
	set -- $sides
	[ $((r % 2)) = 0 ] && set -- $(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
	for side in "$@"; do
		case $side in
		kernel) res=$(one_run kernel 15460 PGBENCH_SIDE=kernel) ;;
		library) res=$(one_run library 15461 LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT=shm) ;;
		extra) res=$(one_run extra 15462 LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT=shm $BENCH_PG_EXTRA) ;;
		esac
		read -r a b c <<<"$res"
		echo "rep=$r side=$side tpcb_c4=$a select_c4=$b select_c1=$c" | tee -a "$OUT/runs.txt"
	done
done

echo
printf '| pgbench (tps) | kernel TCP | library | library / kernel |%s\n' "${BENCH_PG_EXTRA:+ $BENCH_PG_EXTRA | / kernel |}"
printf '|---|---|---|---|%s\n' "${BENCH_PG_EXTRA:+---|---|}"
for k in tpcb_c4 select_c4 select_c1; do
	declare -A m=()
	for side in $sides; do
		m[$side]=$(bench_median $(grep " side=$side " "$OUT/runs.txt" | grep -o "$k=[0-9]*" | cut -d= -f2))
	done
	row="| $k | ${m[kernel]} | ${m[library]} | $(bench_ratio "${m[library]}" "${m[kernel]}" %.2fx) |"
	[ -z "${BENCH_PG_EXTRA:-}" ] || row="$row ${m[extra]} | $(bench_ratio "${m[extra]}" "${m[kernel]}" %.2fx) |"
	echo "$row"
done
echo "(runs: $OUT/runs.txt; $REPS interleaved repetitions of ${SECS} s per run, medians)"
