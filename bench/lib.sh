# shellcheck shell=bash
# Shared helpers for bench/*.sh and scripts/demo.sh (source it, do not run it): free loopback
# port, start/stop a server by PID with bounded waits, CPU pinning prefixes, median/ratio
# arithmetic and the plain/lib interleaving loop. Every wait here is bounded; every server is
# started by the calling script on 127.0.0.1 and stopped by its PID (never by name).

if [ -n "${BENCH_LIB_SOURCED:-}" ]; then
	return 0
fi
BENCH_LIB_SOURCED=1

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_PIDS=()        # servers still running (stopped by bench_cleanup on exit)
BENCH_TMP=""         # per-run scratch directory (removed by bench_cleanup unless BENCH_KEEP=1)
BENCH_SERVER_PID=""  # set by bench_start_server
BENCH_SERVER_PORT="" # set by bench_start_on_free_port

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# Scratch directory + EXIT/INT/TERM trap that stops whatever servers we still own.
bench_init() {
	BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmasock-bench.XXXXXX")
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	local pid
	for pid in "${BENCH_PIDS[@]}"; do
		[ -n "$pid" ] && bench_stop_server "$pid" TERM 3 >/dev/null 2>&1
	done
	BENCH_PIDS=()
	if [ -n "$BENCH_TMP" ] && [ -d "$BENCH_TMP" ]; then
		if [ "${BENCH_KEEP:-0}" = 1 ]; then
			bench_log "kept scratch directory $BENCH_TMP"
		else
			rm -rf "$BENCH_TMP"
		fi
	fi
}

# bench_free_port: print a TCP port on 127.0.0.1 that nothing listens on right now.
bench_free_port() {
	local port i
	for ((i = 0; i < 50; i++)); do
		if command -v python3 >/dev/null 2>&1; then
			port=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
		else
			port=$((20000 + RANDOM % 30000))
		fi
		if [ -n "$port" ] && [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; then
			echo "$port"
			return 0
		fi
	done
	bench_die "no free loopback port found after 50 tries"
}

# bench_pid_alive PID: true while PID exists and is not a zombie (our unreaped child).
bench_pid_alive() {
	local state
	[ -r "/proc/$1/stat" ] || return 1
	state=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# bench_wait_listen PORT PID [SECONDS]: wait until PID listens on 127.0.0.1:PORT.
bench_wait_listen() {
	local port=$1 pid=$2 secs=${3:-10} i out
	for ((i = 0; i < secs * 20; i++)); do
		bench_pid_alive "$pid" || return 1
		out=$(ss -Hltnp "sport = :$port" 2>/dev/null)
		if [ -n "$out" ]; then
			# When ss can name the owner it must be our PID (someone else may have raced
			# us to the port); without process info we accept the listener.
			case "$out" in
			*"pid=$pid,"*) return 0 ;;
			*pid=*) return 1 ;;
			*) return 0 ;;
			esac
		fi
		sleep 0.05
	done
	return 1
}

# bench_start_server PORT LOG CMD...: start CMD in the background (stdout+stderr to LOG),
# wait until it listens on PORT, set BENCH_SERVER_PID. Fails (returns 1) if it never does.
# Must be called directly (not in $(...)) so the server is a child of this shell.
bench_start_server() {
	local port=$1 log=$2
	shift 2
	"$@" >"$log" 2>&1 </dev/null &
	BENCH_SERVER_PID=$!
	BENCH_PIDS+=("$BENCH_SERVER_PID")
	if ! bench_wait_listen "$port" "$BENCH_SERVER_PID" "${BENCH_START_TIMEOUT:-10}"; then
		bench_log "server did not come up on port $port: $*"
		tail -n 5 "$log" >&2 || true
		bench_stop_server "$BENCH_SERVER_PID" KILL 2
		return 1
	fi
	return 0
}

# bench_start_on_free_port LOGPREFIX CMD...: pick a free port, substitute it for every
# literal {PORT} argument of CMD, start CMD with bench_start_server; up to 3 ports are tried
# (another process may take a port between our check and the server's bind). Sets
# BENCH_SERVER_PORT and BENCH_SERVER_PID; the log is LOGPREFIX-<port>.log.
bench_start_on_free_port() {
	local prefix=$1 try port a args
	shift
	for ((try = 1; try <= 3; try++)); do
		port=$(bench_free_port)
		args=()
		for a in "$@"; do
			args+=("${a//\{PORT\}/$port}")
		done
		if bench_start_server "$port" "$prefix-$port.log" "${args[@]}"; then
			# shellcheck disable=SC2034 # read by the sourcing script
			BENCH_SERVER_PORT=$port
			return 0
		fi
	done
	return 1
}

# bench_stop_server PID [SIGNAL=TERM] [SECONDS=10]: signal PID, wait (bounded) for it to
# exit, SIGKILL it if it does not, reap it. Prints nothing; returns 0 if it exited by itself.
bench_stop_server() {
	local pid=$1 sig=${2:-TERM} secs=${3:-10} i rc=0 p keep=()
	if bench_pid_alive "$pid"; then
		kill -s "$sig" "$pid" 2>/dev/null || true
		for ((i = 0; i < secs * 20; i++)); do
			bench_pid_alive "$pid" || break
			sleep 0.05
		done
		if bench_pid_alive "$pid"; then
			bench_log "PID $pid ignored SIG$sig for ${secs}s: SIGKILL"
			kill -s KILL "$pid" 2>/dev/null || true
			rc=1
		fi
	fi
	wait "$pid" 2>/dev/null || true
	for p in "${BENCH_PIDS[@]}"; do
		[ "$p" != "$pid" ] && keep+=("$p")
	done
	BENCH_PIDS=("${keep[@]}")
	return $rc
}

# bench_pin ROLE: print the command prefix that pins ROLE (server|client) per BENCH_PIN:
#   off (default): nothing; split: server on BENCH_SERVER_CPU (0), client on
#   BENCH_CLIENT_CPU (1); same: both on BENCH_SERVER_CPU.
bench_pin() {
	local scpu=${BENCH_SERVER_CPU:-0} ccpu=${BENCH_CLIENT_CPU:-1}
	case "${BENCH_PIN:-off}" in
	off | 0 | no | "") ;;
	split | 1 | yes) [ "$1" = server ] && echo "taskset -c $scpu" || echo "taskset -c $ccpu" ;;
	same) echo "taskset -c $scpu" ;;
	*) bench_die "BENCH_PIN must be off, split or same (got '$BENCH_PIN')" ;;
	esac
}

# bench_median N...: median of the numeric arguments (mean of the middle two for an even
# count); prints NA when there are none.
bench_median() {
	[ $# -eq 0 ] && {
		echo NA
		return
	}
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END { if (NR % 2) printf "%.10g\n", v[(NR + 1) / 2];
		      else printf "%.10g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bench_median_in: bench_median of the numbers on stdin, one per line (for pipelines).
bench_median_in() {
	local v
	mapfile -t v
	bench_median "${v[@]}"
}

# bench_spread N...: (max - min) / median, as a percentage: how noisy one side was.
bench_spread() {
	[ $# -lt 2 ] && {
		echo NA
		return
	}
	local med
	med=$(bench_median "$@")
	printf '%s\n' "$@" | sort -g | awk -v m="$med" '{ v[NR] = $1 }
		END { if (m == 0) print "NA"; else printf "%.1f%%\n", 100 * (v[NR] - v[1]) / m }'
}

# bench_ratio A B [FMT]: A / B printed with FMT (default %.3f; NA if either is missing or B
# is 0). Pass %.10g to get a value precise enough to compare against a target.
bench_ratio() {
	awk -v a="$1" -v b="$2" -v f="${3:-%.3f}" 'BEGIN {
		if (a == "NA" || b == "NA" || a == "" || b == "" || b + 0 == 0) print "NA";
		else printf f "\n", a / b }'
}

# bench_fmt V: a number for a table cell: no decimals from 1000 up, 1 decimal from 10 up,
# 3 decimals from 0.1 up, else 4 significant digits; NA passes through.
bench_fmt() {
	awk -v v="$1" 'BEGIN {
		if (v == "NA" || v == "") { print "NA"; exit }
		a = v < 0 ? -v : v;
		if (a >= 1000) printf "%.0f\n", v; else if (a >= 10) printf "%.1f\n", v;
		else if (a >= 0.1) printf "%.3f\n", v; else printf "%.4g\n", v }'
}

# bench_wait_exit PID [SECONDS=10]: wait (bounded) for PID to exit by itself (a one-shot
# server such as iperf3 -s -1), then bench_stop_server it (TERM) if it has not; reaps it.
bench_wait_exit() {
	local pid=$1 secs=${2:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		bench_pid_alive "$pid" || break
		sleep 0.05
	done
	bench_stop_server "$pid" TERM 5
}

# bench_machine: one line describing the machine (CPU count, model, kernel).
bench_machine() {
	local model
	model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
	echo "Machine: nproc=$(nproc), CPU model: ${model:-unknown}, kernel $(uname -r) ($(uname -m))"
}

# bench_stats_share FILE [TRANSPORT=shm]: from the RDMASOCK_STATS lines in FILE, print
#   "<percent of bytes_sent carried by TRANSPORT> <processes with >= 1 connection> <conns>"
# e.g. "99.998 2 kernel=0,shm=2,verbs=0". Bytes are summed over every line (both ends);
# the percent is NA when no byte was counted or the file is missing.
bench_stats_share() {
	python3 - "$1" "${2:-shm}" <<'EOF'
import collections, json, sys
sent = collections.Counter(); conns = collections.Counter(); procs = 0
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    line = line.strip()
    if not line:
        continue
    try:
        d = json.loads(line)
    except ValueError:
        continue
    c = d.get("connections", {})
    if sum(c.values()) > 0:
        procs += 1
    conns.update(c)
    sent.update(d.get("bytes_sent", {}))
total = sum(sent.values())
share = "NA" if total == 0 else "%.3f" % (100.0 * sent[sys.argv[2]] / total)
print(share, procs, ",".join(f"{t}={conns[t]}" for t in ("kernel", "shm", "verbs")))
EOF
}

# bench_cmp VALUE OP LIMIT: numeric comparison (OP is <= or >=) that prints PASS or MISS
# (MISS also when VALUE is NA: a target we could not measure is not met).
bench_cmp() {
	awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
		if (v == "NA" || v == "") { print "MISS"; exit }
		ok = (op == "<=") ? (v + 0 <= l + 0) : (v + 0 >= l + 0);
		print ok ? "PASS" : "MISS" }'
}

# bench_interleave REPS FN_A FN_B: FN_A 1, FN_B 1, FN_A 2, FN_B 2, ... (each called with the
# repetition number). Both sides see the same drift of a noisy machine.
bench_interleave() {
	local reps=$1 a=$2 b=$3 i
	for ((i = 1; i <= reps; i++)); do
		"$a" "$i"
		"$b" "$i"
	done
}

# bench_ensure_lib: build build/librdmasock.so with cmake if it is missing; print its path.
bench_ensure_lib() {
	local lib=${RDMASOCK_LIB:-$BENCH_ROOT/build/librdmasock.so}
	if [ ! -f "$lib" ]; then
		bench_log "building $lib"
		if ! cmake -S "$BENCH_ROOT" -B "$BENCH_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			>/dev/null || ! cmake --build "$BENCH_ROOT/build" -j "$(nproc)" >/dev/null; then
			bench_die "library build failed"
		fi
	fi
	[ -f "$lib" ] || bench_die "no library at $lib"
	echo "$lib"
}
