#!/usr/bin/env bash
# PostgreSQL, a fork-per-connection server (the postmaster accepts, a forked backend serves),
# with pgbench and psql, both ends preloaded: pgbench's TPC-B-like load over 4 connections
# (the balances it updated must sum to what its history recorded), pgbench -C (a new
# connection, so a new backend, per transaction), and 4 MiB copied in through COPY FROM STDIN
# and out again, byte-exact. The stats must show the expected transport carrying the
# connections of the server (every backend writes its own line) and of both clients.
. "$(dirname "$0")/lib.sh"
need runuser python3
PGBIN=""
for d in /usr/lib/postgresql/*/bin; do
	[ -x "$d/postgres" ] && [ -x "$d/initdb" ] && [ -x "$d/pgbench" ] && [ -x "$d/psql" ] && PGBIN=$d
done
[ -n "$PGBIN" ] || skip "PostgreSQL is not installed (scripts/install-deps.sh installs it)"
# postgres refuses to run as root: everything of it runs as the package's own user.
id postgres >/dev/null 2>&1 || skip "no postgres user (the postgresql package makes it)"

# The scratch directory is root's; the cluster lives in a directory of the postgres user.
# What the postgres user runs must be readable by it: the library is copied next to it (the
# build tree may sit under a directory only root can enter, as test_crossuid.sh found).
chmod 0711 "$RSK_TMP"
PGD=$RSK_TMP/pg
mkdir "$PGD" && chown postgres: "$PGD" || fail "cannot make $PGD"
# ... and so must the working directory its programs start in (psql warns on stderr
# otherwise, and ctest's may be under a directory only root can enter)
cd "$PGD" || fail "cannot enter $PGD"
mkdir -m 0755 "$RSK_TMP/pub" && cp "$RSK_LIB" "$RSK_TMP/pub/librdmasock.so" &&
	chmod 0755 "$RSK_TMP/pub/librdmasock.so" || fail "cannot copy the library"
RSK_PRELOAD=$RSK_TMP/pub/librdmasock.so
touch "$RSK_STATS" && chmod 0666 "$RSK_STATS"
# the live stats segments of the postgres user's processes (rdmasock stat)
RDMASOCK_STAT_DIR=$RSK_TMP/stat
mkdir -m 1777 "$RDMASOCK_STAT_DIR" || fail "cannot make $RDMASOCK_STAT_DIR"

# PostgreSQL's programs hang with a sanitizer's runtime preloaded, library or not (postgres
# and psql at start, pgbench at exit; test/sanitize/README.md), so the sanitized suite would
# only run the unsanitized library here.
[ -z "${RSK_PRELOAD_FIRST:-}${RSK_PRELOAD_AFTER:-}" ] ||
	skip "PostgreSQL's programs hang under a preloaded sanitizer runtime, without the library too"

as_pg() { runuser -u postgres -- "$@"; }
# as_pg_pre CMD...: as the postgres user, preloaded as pre() does.
as_pg_pre() {
	as_pg env LD_PRELOAD="$RSK_PRELOAD" RDMASOCK_TRANSPORT="$RSK_TEST_TRANSPORT" \
		RDMASOCK_STATS="$RSK_STATS" RDMASOCK_TCP_FIRST="$RSK_TCP_FIRST" \
		RDMASOCK_UPGRADE_MS="$RSK_UPGRADE_MS" RDMASOCK_STAT_DIR="$RDMASOCK_STAT_DIR" "$@"
}

# pg_stop: a fast shutdown of the postmaster (runuser's child: its pid is the first line of
# postmaster.pid), bounded; 0 once it is gone. Also at exit, so that no failure leaves it.
pg_stop() {
	local pm
	pm=$(head -n 1 "$PGD/data/postmaster.pid" 2>/dev/null) || return 0
	[ -n "$pm" ] || return 0
	kill -INT "$pm" 2>/dev/null || return 0
	for _ in $(seq 200); do kill -0 "$pm" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pm" 2>/dev/null
	return 1
}
# (the script's status reaches rsk_cleanup, which judges a passed run's faces)
trap 'rsk_st=$?; pg_stop; (exit $rsk_st); rsk_cleanup' EXIT

as_pg "$PGBIN/initdb" -D "$PGD/data" -A trust -U postgres --no-sync >"$RSK_TMP/initdb.log" 2>&1 ||
	fail "initdb: $(tail -n 5 "$RSK_TMP/initdb.log")"
port=$(free_port)
# The server: TCP on loopback only, its unix socket in its own directory; no fsync (the
# test is about the connections, not the disk).
as_pg_pre "$PGBIN/postgres" -D "$PGD/data" -h 127.0.0.1 -p "$port" -k "$PGD" \
	-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50 \
	>"$RSK_TMP/postgres.log" 2>&1 &
PG_PID=$!
RSK_PIDS+=("$PG_PID")
wait_port "$port" 30
# the postmaster's children are forked (no exec): they run the preloaded library too
PG=(-h 127.0.0.1 -p "$port" -U postgres)

as_pg_pre timeout 120 "$PGBIN/pgbench" "${PG[@]}" -i -s 1 -q postgres >"$RSK_TMP/init.out" 2>&1 ||
	fail "pgbench -i: $(tail -n 5 "$RSK_TMP/init.out")"

# TPC-B-like: 4 clients x 250 transactions, every one updating an account, a teller and a
# branch and appending to the history.
as_pg_pre timeout 120 "$PGBIN/pgbench" "${PG[@]}" -c 4 -j 2 -t 250 postgres >"$RSK_TMP/tpcb.out" 2>&1 ||
	fail "pgbench: $(tail -n 8 "$RSK_TMP/tpcb.out")"
grep -q "number of transactions actually processed: 1000/1000" "$RSK_TMP/tpcb.out" ||
	fail "pgbench did not process 1000 transactions: $(grep -E 'processed|failed|error' "$RSK_TMP/tpcb.out")"
grep -E "processed|failed|tps" "$RSK_TMP/tpcb.out"

# A new connection, so a new backend, per transaction (select-only; -n: no vacuum, which
# would empty the history).
as_pg_pre timeout 120 "$PGBIN/pgbench" "${PG[@]}" -n -C -c 2 -j 1 -t 50 -S postgres >"$RSK_TMP/conn.out" 2>&1 ||
	fail "pgbench -C: $(tail -n 8 "$RSK_TMP/conn.out")"
grep -q "number of transactions actually processed: 100/100" "$RSK_TMP/conn.out" ||
	fail "pgbench -C did not process 100 transactions"

# The sums pgbench's transactions must have left, asked over a preloaded connection.
sums=$(as_pg_pre timeout 60 "$PGBIN/psql" "${PG[@]}" -d postgres -Atc \
	"select (select sum(abalance) from pgbench_accounts) = (select sum(delta) from pgbench_history),
	        (select sum(tbalance) from pgbench_tellers) = (select sum(delta) from pgbench_history),
	        (select count(*) from pgbench_history)" 2>"$RSK_TMP/sums.err") ||
	fail "psql: $sums $(cat "$RSK_TMP/sums.err")"
[ "$sums" = "t|t|1000" ] || fail "balances do not match the history: '$sums' (want t|t|1000)"

# 4 MiB of text lines through COPY FROM STDIN and COPY TO STDOUT, compared byte for byte.
python3 - "$RSK_TMP/in.txt" <<'PY'
import base64, random, sys
rng = random.Random(20261204)
with open(sys.argv[1], "w") as f:
    n = 0
    while n < 4 << 20:
        line = base64.b64encode(rng.randbytes(rng.randint(1, 3000))).decode()
        f.write(line + "\n")
        n += len(line) + 1
PY
chmod 0644 "$RSK_TMP/in.txt"
as_pg_pre timeout 120 "$PGBIN/psql" "${PG[@]}" -d postgres -v ON_ERROR_STOP=1 -q \
	-c "create table blob (n serial primary key, line text)" \
	-c "\\copy blob (line) from '$RSK_TMP/in.txt'" \
	-c "\\copy (select line from blob order by n) to '$PGD/out.txt'" >"$RSK_TMP/copy.out" 2>&1 ||
	fail "psql copy: $(tail -n 5 "$RSK_TMP/copy.out")"
cmp "$RSK_TMP/in.txt" "$PGD/out.txt" || fail "4 MiB through COPY came back different"
echo "copy: $(wc -c <"$RSK_TMP/in.txt") bytes in and out, identical"

# A fast shutdown: every backend ends, then the postmaster (each writes its stats line).
[ -s "$PGD/data/postmaster.pid" ] || fail "no $PGD/data/postmaster.pid"
pg_stop || fail "postgres did not stop on SIGINT within 20 s"
for _ in $(seq 50); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
wait "$PG_PID" 2>/dev/null
grep -E "FATAL|PANIC|could not|terminated by signal" "$RSK_TMP/postgres.log" &&
	fail "the server logged errors (above)"

# 4 + 1 (pgbench) + 100 (-C) + 2 (psql) connections on the client side, as many backends.
assert_carried "$RSK_EXPECT" 100 pgbench
assert_carried "$RSK_EXPECT" 2 psql
assert_carried "$RSK_EXPECT" 100 postgres
echo "postgres over $RSK_EXPECT: ok"
