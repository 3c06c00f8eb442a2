#!/usr/bin/env bash
# Reproduces "redis-benchmark -c 200 -t get spins forever" (issue text) against a preloaded
# redis-server, both ends LD_PRELOADed, debug logs and stats kept per attempt.
#   bash bench/churn_redis_c200.sh [ATTEMPTS] [OUTDIR]
# Env: CLI_NOFILE / SRV_NOFILE (ulimit -n of each side, default: the shell's), REQS (100000),
#      CLIENTS (200), WAIT_S (seconds before an attempt counts as stuck, 12).
# A stuck client is classified from two 1 s samples of /proc/PID/stat: "spin" (>80% CPU)
# or "slow"; for a spin, gdb prints the hiredis context's err/errstr/fd at its next
# redisBufferWrite() (hiredis 1.x layout: err at +8, errstr at +12, fd at +140).
# Bounded: each attempt is killed after WAIT_S+25 s at most; servers stopped by PID.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/build/librdmasock.so
N=${1:-5}
OUT=${2:-/tmp/rsk-churn-c200}
REQS=${REQS:-100000}
CLIENTS=${CLIENTS:-200}
WAIT_S=${WAIT_S:-12}
mkdir -p "$OUT"
port=$((21000 + RANDOM % 20000))

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

for ((a = 1; a <= N; a++)); do
	D=$OUT/a$a
	rm -rf "$D"
	mkdir -p "$D"
	(
		[ -n "${SRV_NOFILE:-}" ] && { ulimit -Hn "$SRV_NOFILE"; ulimit -n "$SRV_NOFILE"; }
		exec env LD_PRELOAD="$LIB" RDMASOCK_STATS="$D/srv.jsonl" RDMASOCK_LOG=debug \
			RDMASOCK_LOG_FILE="$D/srv.log" redis-server --port "$port" --bind 127.0.0.1 \
			--save '' --appendonly no
	) >"$D/redis.out" 2>&1 &
	SP=$!
	for ((i = 0; i < 50; i++)); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	(
		[ -n "${CLI_NOFILE:-}" ] && { ulimit -Hn "$CLI_NOFILE"; ulimit -n "$CLI_NOFILE"; }
		exec env LD_PRELOAD="$LIB" RDMASOCK_STATS="$D/cli.jsonl" RDMASOCK_LOG=debug \
			RDMASOCK_LOG_FILE="$D/cli.log" redis-benchmark -p "$port" -c "$CLIENTS" \
			-t get -n "$REQS" -q
	) >"$D/bench.out" 2>&1 &
	BP=$!
	t0=$(date +%s.%N)
	for ((i = 0; i < WAIT_S * 10; i++)); do
		kill -0 "$BP" 2>/dev/null || break
		sleep 0.1
	done
	state=done
	if kill -0 "$BP" 2>/dev/null; then
		c0=$(cpu_ticks "$BP"); sleep 1; c1=$(cpu_ticks "$BP")
		if [ $((c1 - c0)) -gt 80 ]; then state=spin; else state=slow; fi
		if [ "$state" = spin ]; then
			timeout 20 gdb -p "$BP" -batch -ex "thread apply all bt" \
				-ex "break redisBufferWrite" -ex continue \
				-ex 'printf "ctx err=%d fd=%d errstr=%s\n", *(int*)($rdi+8), *(int*)($rdi+140), (char*)($rdi+12)' \
				>"$D/gdb.txt" 2>&1
			grep "ctx err" "$D/gdb.txt" >"$D/spin.txt"
			timeout -s INT 2 strace -p "$BP" -o "$D/spin.strace" >/dev/null 2>&1
		fi
		kill -KILL "$BP" 2>/dev/null
	fi
	wait "$BP" 2>/dev/null
	rc=$?
	t1=$(date +%s.%N)
	kill -TERM "$SP"
	for ((i = 0; i < 50; i++)); do kill -0 "$SP" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$SP" 2>/dev/null
	wait "$SP" 2>/dev/null
	rps=$(tr '\r' '\n' <"$D/bench.out" | grep -o 'GET: [0-9.]* requests per second' | awk '{print $2}')
	printf 'attempt %d: %s rc=%d %.1fs rps=%s cli_shm=%s srv_shm=%s srv_drops=%s cli_fb_resources=%s %s\n' \
		"$a" "$state" "$rc" "$(echo "$t1 - $t0" | bc)" "${rps:--}" \
		"$(grep -c 'connection on shm' "$D/cli.log")" "$(grep -c 'connection on shm' "$D/srv.log")" \
		"$(grep -c 'accelerated accept failed' "$D/srv.log")" \
		"$(grep -c 'stays on the kernel (resources)' "$D/cli.log")" \
		"$(cat "$D/spin.txt" 2>/dev/null)"
done
