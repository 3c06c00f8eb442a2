#!/usr/bin/env bash
# Stale monitor event (core/monitor.c rsk_mon_event identifies a connection by address only):
# runs short-connection workloads, both ends preloaded, and records uprobes on the library
# (perf probe; needs root, perf and the RelWithDebInfo build) to classify every monitor
# hangup event that matched a registered connection: "stale" when that address was
# registered again (rsk_monitor_add) after the monitor's epoll_wait returned the event.
#   bash bench/churn_stale.sh redis|nginx RUNS [OUTDIR]
# Env: DELAY=1 preloads build/mondelay.so after the library (holds the monitor 20 ms
# after it took a hangup event: the race made wide); N (requests per run), C (clients);
# NOFILE (ulimit -n for every process; above 65536 the library's hidden-fd window is
# [32768, limit), so its ~84-connection budget at 20000 does not interfere).
set -u
if [ -n "${NOFILE:-}" ]; then ulimit -Hn "$NOFILE" && ulimit -n "$NOFILE" || exit 1; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/build/librdmasock.so
MODE=${1:-redis}
RUNS=${2:-10}
OUT=${3:-/tmp/rsk-churn-stale}
N=${N:-20000}
C=${C:-50}
PRE="$LIB"
[ "${DELAY:-0}" = 1 ] && PRE="$LIB $ROOT/build/mondelay.so"
mkdir -p "$OUT"
port=$((21000 + RANDOM % 20000))

probes() {
	perf probe -d 'probe_librdmasock:*' -d 'probe_libc:*' >/dev/null 2>&1
	perf probe -q -x "$LIB" -a 'mon_wake=rsk_mon_main:9 n' &&
	perf probe -q -x "$LIB" -a 'mon_match=rsk_mon_event:7 c' &&
	perf probe -q -x "$LIB" -a 'mon_add=rsk_monitor_add c' &&
	perf probe -q -x "$LIB" -a 'peer_gone=rsk_conn_peer_gone c' &&
	perf probe -q -x /lib/x86_64-linux-gnu/libc.so.6 -a 'ep_ret=epoll_wait%return $retval'
}
probes || { echo "perf probe failed (tracefs mounted? root?)"; exit 1; }

start_server() {
	if [ "$MODE" = redis ]; then
		env LD_PRELOAD="$PRE" MONDELAY_FILE="$OUT/srv.mondelay" redis-server --port "$port" \
			--bind 127.0.0.1 --save '' --appendonly no >"$OUT/srv.out" 2>&1 &
		SP=$!
		for ((i = 0; i < 50; i++)); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
	else
		mkdir -p "$OUT/ng/www" "$OUT/ng/tmp"
		printf 'hello world 0123456789\n' >"$OUT/ng/www/small.txt"
		cat >"$OUT/ng/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 1;
user root;
error_log $OUT/ng/error.log notice;
pid $OUT/ng/nginx.pid;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $OUT/ng/tmp; proxy_temp_path $OUT/ng/tmp; fastcgi_temp_path $OUT/ng/tmp;
	uwsgi_temp_path $OUT/ng/tmp; scgi_temp_path $OUT/ng/tmp;
	default_type text/plain;
	server { listen 127.0.0.1:$port; root $OUT/ng/www; }
}
NGX
		env LD_PRELOAD="$PRE" MONDELAY_FILE="$OUT/srv.mondelay" nginx -c "$OUT/ng/nginx.conf" \
			-p "$OUT/ng" >"$OUT/srv.out" 2>&1 &
		SP=$!
		for ((i = 0; i < 50; i++)); do curl -s "http://127.0.0.1:$port/small.txt" >/dev/null && break; sleep 0.1; done
	fi
}

# classify TRACE ("comm pid/tid time event args"): the monitor thread took its events when libc's
# epoll_wait returned (ep_ret, the last one of that thread before mon_wake); a match whose
# address was registered again (mon_add, same process) after that moment is stale.
classify() {
	awk '
	{ comm = $1; split($2, pt, "/"); pid = pt[1]; tid = pt[2]; t = $3 + 0; ev = $4; c = ""
	  for (i = 5; i <= NF; i++) if ($i ~ /^c=/) c = substr($i, 3) }
	ev ~ /mon_add/ { name[pid] = comm }
	ev ~ /ep_ret/ { lastret[tid] = t; next }
	ev ~ /mon_wake/ { wake[tid] = (tid in lastret) ? lastret[tid] : t; next }
	ev ~ /mon_add/ { added[pid "/" c] = t; next }
	ev ~ /mon_match/ { m++; k = pid "/" c; if (added[k] > wake[tid]) { s++; printf "  stale: %s[%s]: event taken at %.6f, address %s registered again at %.6f, matched at %.6f\n", name[pid], pid, wake[tid], c, added[k], t } }
	END { printf "  hangup events matched %d, stale %d\n", m, s }' "$1"
}

for ((r = 1; r <= RUNS; r++)); do
	start_server
	if [ "$MODE" = redis ]; then
		cmd=(redis-benchmark -p "$port" -c "$C" -n "$N" -k 0 -t get -q)
	else
		cmd=(ab -q -n "$N" -c "$C" "http://127.0.0.1:$port/small.txt")
	fi
	timeout 120 perf record -q -a -o "$OUT/perf.$r.data" -e 'probe_librdmasock:*' -e 'probe_libc:*' -- \
		timeout -s KILL 60 env LD_PRELOAD="$PRE" MONDELAY_FILE="$OUT/cli.mondelay" "${cmd[@]}" \
		>"$OUT/run.$r.out" 2>&1
	rc=$?
	kill -TERM "$SP"; for ((i = 0; i < 50; i++)); do kill -0 "$SP" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$SP" 2>/dev/null; wait "$SP" 2>/dev/null
	perf script -i "$OUT/perf.$r.data" -F comm,pid,tid,time,event,trace 2>/dev/null |
		sed 's/: / /g' >"$OUT/trace.$r.txt"
	err=$(tr '\r' '\n' <"$OUT/run.$r.out" | grep -m1 -iE 'reset|error|apr_' || true)
	printf 'run %d: rc=%d %s\n' "$r" "$rc" "${err:-ok}"
	classify "$OUT/trace.$r.txt" | tail -3
	rm -f "$OUT/perf.$r.data"
done
perf probe -d 'probe_librdmasock:*' -d 'probe_libc:*' >/dev/null 2>&1
