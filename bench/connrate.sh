#!/usr/bin/env bash
# Short-connection rate, kernel TCP vs the library (both ends preloaded, shm):
# connect + 64-byte request + 64-byte response + close, with 1, 10 and 100 connections in
# flight (build/connrate, single-threaded epoll client and server), interleaved repetitions,
# medians. Each run gets its own network namespace (unshare -n, loopback only), so TIME_WAIT
# sockets of one run (the library's bind-chosen ports slow every later bind, see
# bench/phasecost.c tw) neither reach the next run nor anyone else on the machine.
# Then the applications (APPS=0 skips them), also one network namespace per run: nginx
# (master + 2 workers, keepalive_timeout 0) with `ab -c 10` without keep-alive for a 1 KiB
# and a 100 KiB file, and `redis-benchmark -k 0 -c 10 -t get` six runs in a row against one
# server (the issue's check: each run within 20% of the six's median).
#   bash bench/connrate.sh [REPS] [TOTAL]      (defaults 5, 3000; every run <= 15 s)
#   AB_N (3000) and RK_N (5000): requests per ab / redis-benchmark run
#   FACE=1: also the library with the listener's face (RDMASOCK_BEARER=face), connrate and
#     the applications
#   BEARER=1: instead, the library with the same-host bearer for every connection
#     (RDMASOCK_BEARER=unix)
#   NOBEARER=1: instead, the library without it (RDMASOCK_BEARER=none: TCP first alone, the
#     default before 2026-12-06; the default, auto, takes the bearer for short connections)
# Needs root (unshare -n). Prints one line per run, then the tables.
#
# Over verbs in the Soft-RoCE guest (opt-in, heavy: boots qemu TCG; with the defaults about 4
# min on a quiet host, 12 with other guests beside it): BENCH_VM=1 runs it before the host
# part, BENCH_VM=only runs only it. Within one guest boot (test/vm/run.sh), server on
# 192.0.2.2, client from 192.0.2.1 (across rxe0 -> rxe1), kernel TCP vs the library with
# RDMASOCK_TRANSPORT=verbs and the default policy (TCP first): connrate at BENCH_VM_CONCS in
# flight, redis-benchmark -k 0 -c BENCH_VM_RK_CONC -t ping_inline six runs in a row per
# server, interleaved repetitions, medians; each library run's RDMASOCK_STATS must show every
# short connection tcp_first and none on verbs (and rxe idle); one keep-alive redis-benchmark
# must move its connections to verbs; then system calls per connection at one in flight
# (strace -f -c; the guest has no perf). See bench/connrate_vm_guest.sh.
#   BENCH_VM [0]               1 | only
#   BENCH_VM_REPS [3]          interleaved repetitions
#   BENCH_VM_TOTAL [4000]      connections per connrate run
#   BENCH_VM_CONCS ["1 10 100"] in flight
#   BENCH_VM_RK_N [1500]       requests (= connections) per redis-benchmark -k 0 run
#   BENCH_VM_RK_CONC [2]       its -c
#   BENCH_VM_RK_UPGRADE_MS [200] RDMASOCK_UPGRADE_MS of the library's redis-benchmark -k 0
#                              (5 ms on hardware is tens of ms under TCG, as in vm_verbs)
#   BENCH_VM_KEEP_N [1000]     requests of the keep-alive run (bounded by 2 x 60 s)
#   BENCH_VM_STRACE [1]        0 skips the system call counts
#   BENCH_VM_TIMEOUT [1200]    the whole guest run (run.sh --timeout)
#   BENCH_VM_CLOCKSOURCE []    switch the guest's clocksource first (e.g. tsc: clock reads in
#                              the vDSO; the default hpet makes each a system call)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/connrate
LIB=$ROOT/build/librdmasock.so
REPS=${1:-5}
TOTAL=${2:-3000}
CONCS=${CONCS:-1 10 100}
VM=${BENCH_VM:-0}
case $VM in 0 | 1 | only) ;; *) echo "BENCH_VM must be 0, 1 or only" >&2; exit 2 ;; esac
# rebuilt when older than its source (the guest needs RSK_TEST_ADDR)
[ "$BIN" -nt "$ROOT/bench/connrate.c" ] || cc -O2 -Wall -o "$BIN" "$ROOT/bench/connrate.c" || exit 1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-connrate.XXXXXX")
. "$ROOT/bench/lib.sh"
median() { bench_median_in; }
ratio() { bench_ratio "$1" "$2" %.2f; }

# vm_part: the guest run (bench/connrate_vm_guest.sh), then its tables from the tagged lines.
vm_part() {
	local log=$OUT/vm.log rc vr=${BENCH_VM_REPS:-3} concs=${BENCH_VM_CONCS:-1 10 100} load0 k l c m r
	[ -f "$LIB" ] || { echo "no $LIB (build it first)" >&2; return 1; }
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	echo "Soft-RoCE guest: booting (test/vm/run.sh), $(date -u '+%H:%M UTC'), load average $load0" >&2
	# the host's load while the guest runs (other guests on the same cores halve its rates)
	(while :; do cut -d' ' -f1 /proc/loadavg; sleep 10; done) >"$OUT/load.txt" 2>/dev/null &
	local sampler=$!
	RSK_VM_QUIET=1 RSK_VM_LOG_DIR=$OUT/vmlogs timeout -k 10 $((${BENCH_VM_TIMEOUT:-1200} + 120)) \
		bash "$ROOT/test/vm/run.sh" --timeout "${BENCH_VM_TIMEOUT:-1200}" \
		--bin "$BIN" --bin "$(readlink -f "$LIB")" --bin redis-server --bin redis-benchmark --bin strace \
		--env "BCR_LIB=$(readlink -f "$LIB")" --env "BCR_BIN=$BIN" --env "BCR_REPS=$vr" \
		--env "BCR_TOTAL=${BENCH_VM_TOTAL:-4000}" --env "BCR_CONCS=$concs" \
		--env "BCR_RK_N=${BENCH_VM_RK_N:-1500}" --env "BCR_RK_CONC=${BENCH_VM_RK_CONC:-2}" \
		--env "BCR_RK_UPGRADE_MS=${BENCH_VM_RK_UPGRADE_MS:-200}" \
		--env "BCR_KEEP_N=${BENCH_VM_KEEP_N:-1000}" --env "BCR_STRACE=${BENCH_VM_STRACE:-1}" \
		--env "BCR_CLOCKSOURCE=${BENCH_VM_CLOCKSOURCE:-}" \
		"$ROOT/bench/connrate_vm_guest.sh" >/dev/null 2>"$OUT/vm.err"
	rc=$?
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null
	cat "$OUT"/vmlogs/*.log 2>/dev/null | tr -d '\r' >"$log"
	grep -E '^BCR-' "$log"
	echo
	echo "Soft-RoCE guest: run.sh exit $rc, $(date -u '+%H:%M UTC'); load average at start $load0, at end $(cut -d' ' -f1-3 /proc/loadavg); 1-min load every 10 s: $(sort -n "$OUT/load.txt" | sed -n '1p;$p' | tr '\n' ' ' | sed 's/ $//; s/ / to /')"
	[ $rc = 0 ] || tail -n 3 "$OUT/vm.err"
	printf '| guest, verbs build, in flight | kernel conn/s | library conn/s | library / kernel (median) | per repetition | kernel p50 | library p50 | library checks |\n'
	printf '|---|---|---|---|---|---|---|---|\n'
	for c in $concs; do
		k=$(grep "^BCR-RUN .* conc=$c mode=kernel" "$log" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
		l=$(grep "^BCR-RUN .* conc=$c mode=lib" "$log" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
		m=""
		for ((r = 1; r <= vr; r++)); do
			m="$m $(ratio "$(grep "^BCR-RUN rep=$r conc=$c mode=lib" "$log" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)" \
				"$(grep "^BCR-RUN rep=$r conc=$c mode=kernel" "$log" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)")x"
		done
		printf '| %s | %s | %s | %sx | %s | %s us | %s us | %s ok of %s |\n' "$c" "$k" "$l" "$(ratio "$l" "$k")" "${m# }" \
			"$(grep "^BCR-RUN .* conc=$c mode=kernel" "$log" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)" \
			"$(grep "^BCR-RUN .* conc=$c mode=lib" "$log" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)" \
			"$(grep -c "^BCR-RUN .* conc=$c mode=lib .*check=ok" "$log")" "$(grep -c "^BCR-RUN .* conc=$c mode=lib" "$log")"
	done
	k=$(grep '^BCR-REDIS .* mode=kernel .*rps=' "$log" | grep -o 'rps=[0-9.]*' | cut -d= -f2 | median)
	l=$(grep '^BCR-REDIS .* mode=lib .*rps=' "$log" | grep -o 'rps=[0-9.]*' | cut -d= -f2 | median)
	m=""
	for ((r = 1; r <= vr; r++)); do
		m="$m $(ratio "$(grep "^BCR-REDIS rep=$r mode=lib .*rps=" "$log" | grep -o 'rps=[0-9.]*' | cut -d= -f2 | median)" \
			"$(grep "^BCR-REDIS rep=$r mode=kernel .*rps=" "$log" | grep -o 'rps=[0-9.]*' | cut -d= -f2 | median)")x"
	done
	printf '| redis -k 0 (req/s, medians of six per server) | %s | %s | %sx | %s | | | %s ok of %s |\n' "$k" "$l" "$(ratio "$l" "$k")" "${m# }" \
		"$(grep -c '^BCR-REDIS .* mode=lib .*stats .*check=ok' "$log")" "$(grep -c '^BCR-REDIS .* mode=lib .*stats' "$log")"
	for mode in kernel lib; do
		for ((r = 1; r <= vr; r++)); do
			runs=$(grep "^BCR-REDIS rep=$r mode=$mode .*rps=" "$log" | grep -o 'rps=[0-9.]*' | cut -d= -f2)
			m=$(echo "$runs" | median)
			echo "redis -k 0, $mode, repetition $r: $(echo "$runs" | tr '\n' ' ')(median $m, largest deviation" \
				"$(echo "$runs" | awk -v m="$m" '{d = $1 > m ? $1 - m : m - $1; if (m > 0 && d / m > x) x = d / m} END {printf "%.0f%%", 100 * x}'))"
		done
	done
	grep '^BCR-KEEP' "$log"
	grep '^BCR-SYS' "$log"
	echo "(guest log: $log; $vr interleaved repetitions, medians)"
	return "$rc"
}
if [ "$VM" != 0 ]; then
	vm_part
	vm_rc=$?
	[ "$VM" = only ] && exit $vm_rc
fi

one_run() { # mode conc -> prints the client line (+ error lines)
	local mode=$1 conc=$2 pre=""
	[ "$mode" = lib ] && pre="LD_PRELOAD=$LIB"
	[ "$mode" = face ] && pre="LD_PRELOAD=$LIB RDMASOCK_BEARER=$THIRD"
	unshare -n bash -c '
		ip link set lo up || exit 1
		env '"$pre"' "$0" server 18500 20 >"$1/srv.txt" 2>&1 &
		sp=$!
		for i in $(seq 50); do ss -Hltn "sport = :18500" | grep -q . && break; sleep 0.02; done
		env '"$pre"' timeout -s KILL 20 "$0" client 18500 "$2" "$3" 12
		kill -TERM $sp; for i in $(seq 50); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		kill -KILL $sp 2>/dev/null; wait $sp 2>/dev/null
		grep -c "accept failed" "$1/srv.txt" | sed "s/^/server_drops=/"
	' "$BIN" "$OUT" "$conc" "$TOTAL"
}

# Which side runs first alternates per repetition: a later run may find the machine warmer
# or busier, and that must not always favour one side.
# FACE=1 adds a third side, the library with RDMASOCK_BEARER=face (the listener's face,
# docs/design.md: what the face alone costs), rotated with the other two; BEARER=1 the
# library with RDMASOCK_BEARER=unix (the same-host bearer) in that place.
THIRD=
[ "${FACE:-0}" = 1 ] && THIRD=face
[ "${BEARER:-0}" = 1 ] && THIRD=unix
[ "${NOBEARER:-0}" = 1 ] && THIRD=none
order() {
	if [ -n "$THIRD" ]; then
		case $(($1 % 3)) in 1) echo "kernel lib face" ;; 2) echo "lib face kernel" ;; *) echo "face kernel lib" ;; esac
	else
		[ $(($1 % 2)) = 1 ] && echo "kernel lib" || echo "lib kernel"
	fi
}

for ((r = 1; r <= REPS; r++)); do
	for conc in $CONCS; do
		for mode in $(order "$r"); do
			res=$(one_run "$mode" "$conc" 2>&1)
			cps=$(echo "$res" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2)
			p50=$(echo "$res" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2)
			failed=$(echo "$res" | grep -o 'failed=[0-9]*' | cut -d= -f2)
			drops=$(echo "$res" | grep -o 'server_drops=[0-9]*' | cut -d= -f2)
			errs=$(echo "$res" | grep '^error:' | sed 's/error: //' | tr '\n' ';')
			echo "rep=$r conc=$conc mode=$mode conn_per_s=${cps:-0} lat_p50_us=${p50:-0} failed=${failed:-?} server_drops=${drops:-?} $errs" | tee -a "$OUT/runs.txt"
		done
	done
done

echo
printf '| concurrent | kernel conn/s | library conn/s | library / kernel | kernel p50 latency | library p50 latency | library failed (sum) |\n'
printf '|---|---|---|---|---|---|---|\n'
for conc in $CONCS; do
	k=$(grep " conc=$conc mode=kernel" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
	l=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
	kl=$(grep " conc=$conc mode=kernel" "$OUT/runs.txt" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)
	ll=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'lat_p50_us=[0-9.]*' | cut -d= -f2 | median)
	lf=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'failed=[0-9]*' | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
	printf '| %s | %s | %s | %s | %s us | %s us | %s |\n' "$conc" "$k" "$l" \
		"$(awk -v a="$l" -v b="$k" 'BEGIN {printf "%.2f", b ? a / b : 0}')" "$kl" "$ll" "$lf"
done
if [ -n "$THIRD" ]; then
	printf '\n| concurrent | library conn/s | RDMASOCK_BEARER=%s | it / library | it / kernel |\n|---|---|---|---|---|\n' "$THIRD"
	for conc in $CONCS; do
		k=$(grep " conc=$conc mode=kernel" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
		l=$(grep " conc=$conc mode=lib" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
		f=$(grep " conc=$conc mode=face" "$OUT/runs.txt" | grep -o 'conn_per_s=[0-9]*' | cut -d= -f2 | median)
		printf '| %s | %s | %s | %s | %s |\n' "$conc" "$l" "$f" \
			"$(awk -v a="$f" -v b="$l" 'BEGIN {printf "%.2f", b ? a / b : 0}')" \
			"$(awk -v a="$f" -v b="$k" 'BEGIN {printf "%.2f", b ? a / b : 0}')"
	done
fi
echo "(runs: $OUT/runs.txt; $REPS interleaved repetitions of $TOTAL connections, medians)"

# System calls per connection (SYSCALLS=0 skips): one more run per side and concurrency,
# server and client under perf stat (raw_syscalls:sys_enter, all threads), at two sizes: the
# difference over the difference in connections leaves start-up and exit out. Not timed.
count_run() { # mode conc n -> "server_syscalls client_syscalls"
	local mode=$1 conc=$2 n=$3 pre=""
	[ "$mode" = lib ] && pre="LD_PRELOAD=$LIB"
	unshare -n bash -c '
		ip link set lo up || exit 1
		env '"$pre"' perf stat -x, -e raw_syscalls:sys_enter -o "$1/srv.perf" "$0" server 18500 20 >/dev/null 2>&1 &
		sp=$!
		for i in $(seq 50); do ss -Hltn "sport = :18500" | grep -q . && break; sleep 0.02; done
		env '"$pre"' perf stat -x, -e raw_syscalls:sys_enter -o "$1/cli.perf" timeout -s KILL 20 "$0" client 18500 "$2" "$3" 12 >/dev/null
		# only our server (perf'"'"'s child): other runs of connrate on the machine are not ours
		pkill -TERM -P $sp -x connrate; for i in $(seq 50); do kill -0 $sp 2>/dev/null || break; sleep 0.05; done
		wait
	' "$BIN" "$OUT" "$conc" "$n"
	echo "$(grep -m1 raw_syscalls "$OUT/srv.perf" | cut -d, -f1) $(grep -m1 raw_syscalls "$OUT/cli.perf" | cut -d, -f1)"
}
if [ "${SYSCALLS:-1}" = 1 ] && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
	echo
	printf '| concurrent | server syscalls / conn, kernel | library | client, kernel | library |\n'
	printf '|---|---|---|---|---|\n'
	for conc in $CONCS; do
		row="| $conc"
		declare -A sc=()
		for mode in kernel lib; do
			read -r s1 c1 <<<"$(count_run "$mode" "$conc" 1000)"
			read -r s2 c2 <<<"$(count_run "$mode" "$conc" 3000)"
			sc[$mode]="$(awk -v a="$s1" -v b="$s2" 'BEGIN {printf "%.2f", (b - a) / 2000}') $(awk -v a="$c1" -v b="$c2" 'BEGIN {printf "%.2f", (b - a) / 2000}')"
		done
		read -r ks kc <<<"${sc[kernel]}"
		read -r ls lc <<<"${sc[lib]}"
		echo "$row | $ks | $ls | $kc | $lc |"
	done
	echo "(perf stat raw_syscalls:sys_enter, all threads; (count at 3000 - count at 1000) / 2000)"
fi

[ "${APPS:-1}" = 1 ] || exit 0
if ! command -v nginx >/dev/null || ! command -v ab >/dev/null || ! command -v redis-server >/dev/null ||
	! command -v redis-benchmark >/dev/null; then
	echo "(applications skipped: nginx, ab or redis missing)"
	exit 0
fi
AB_N=${AB_N:-3000}
RK_N=${RK_N:-5000}

# One namespace: nginx + ab (1 KiB, 100 KiB), then one redis-server and six redis-benchmark
# -k 0 runs. Prints "ab_1k rps=R failed=F", "ab_100k ...", "redis_k0 run=I rps=R".
cat >"$OUT/apps.sh" <<'APP'
ip link set lo up || exit 1
d=$1 pre=$2 ab_n=$3 rk_n=$4
. "$5/bench/lib.sh" # bench_wait_listen, bench_stop_server
[ -n "$d" ] && [ -d "$d" ] || exit 1
rm -rf "$d/ngx" && mkdir -p "$d/www" "$d/ngx/tmp"
[ -f "$d/www/100k.bin" ] || { head -c 1024 /dev/urandom >"$d/www/1k.bin"; head -c 102400 /dev/urandom >"$d/www/100k.bin"; }
user=""; [ "$(id -u)" = 0 ] && user="user root;"
t=$d/ngx/tmp
cat >"$d/ngx/nginx.conf" <<CONF
daemon off; master_process on; worker_processes 2; $user
error_log $d/ngx/error.log; pid $d/ngx/nginx.pid;
events { worker_connections 1024; }
http { access_log off; sendfile on; keepalive_timeout 0;
	client_body_temp_path $t; proxy_temp_path $t; fastcgi_temp_path $t; uwsgi_temp_path $t; scgi_temp_path $t;
	server { listen 127.0.0.1:18600; root $d/www; } }
CONF
env $pre nginx -e "$d/ngx/error.log" -p "$d/ngx" -c "$d/ngx/nginx.conf" >/dev/null 2>&1 &
np=$!
bench_wait_listen 18600 $np 5 || { echo "error: nginx did not start"; exit 1; }
for f in 1k 100k; do
	out=$(env $pre timeout -s KILL 60 ab -q -n "$ab_n" -c 10 "http://127.0.0.1:18600/$f.bin" 2>&1)
	rps=$(echo "$out" | awk '/^Requests per second:/ { print $4 }')
	failed=$(echo "$out" | awk '/^Failed requests:/ { print $3 }')
	echo "ab_$f rps=${rps:-0} failed=${failed:-?} $(echo "$out" | grep -m1 -i 'error\|reset' | tr ' ' _)"
done
bench_stop_server $np QUIT 5
env $pre redis-server --port 18700 --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
rp=$!
bench_wait_listen 18700 $rp 5 || { echo "error: redis-server did not start"; exit 1; }
for i in 1 2 3 4 5 6; do
	out=$(env $pre timeout -s KILL 60 redis-benchmark -p 18700 -c 10 -n "$rk_n" -k 0 -t get -q 2>&1 |
		tr '\r' '\n' | grep 'GET:' | tail -1)
	echo "redis_k0 run=$i rps=$(echo "$out" | sed -n 's/.*GET: \([0-9.]*\) requests.*/\1/p')"
done
bench_stop_server $rp TERM 5
APP

: >"$OUT/apps.txt"
for ((r = 1; r <= REPS; r++)); do
	for mode in $(order "$r"); do
		pre=""
		[ "$mode" = lib ] && pre="LD_PRELOAD=$LIB"
		[ "$mode" = face ] && pre="LD_PRELOAD=$LIB RDMASOCK_BEARER=$THIRD"
		unshare -n bash "$OUT/apps.sh" "$OUT" "$pre" "$AB_N" "$RK_N" "$ROOT" 2>&1 | sed "s/^/rep=$r mode=$mode /" |
			tee -a "$OUT/apps.txt"
	done
done

rps_of() { grep " mode=$1 $2 " "$OUT/apps.txt" | grep -o 'rps=[0-9.]*' | cut -d= -f2; }
echo
printf '| workload | kernel | library | library / kernel | library failed (sum) |\n'
printf '|---|---|---|---|---|\n'
for w in ab_1k ab_100k redis_k0; do
	k=$(rps_of kernel "$w" | median)
	l=$(rps_of lib "$w" | median)
	lf=$(grep " mode=lib $w " "$OUT/apps.txt" | grep -o 'failed=[0-9]*' | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
	printf '| %s | %s req/s | %s req/s | %s | %s |\n' "$w" "$k" "$l" \
		"$(awk -v a="$l" -v b="$k" 'BEGIN {printf "%.2f", b ? a / b : 0}')" "$lf"
done
if [ -n "$THIRD" ]; then
	printf '\n| workload | library | RDMASOCK_BEARER=%s | it / library | it / kernel | it failed (sum) |\n|---|---|---|---|---|---|\n' "$THIRD"
	for w in ab_1k ab_100k redis_k0; do
		k=$(rps_of kernel "$w" | median)
		l=$(rps_of lib "$w" | median)
		f=$(rps_of face "$w" | median)
		ff=$(grep " mode=face $w " "$OUT/apps.txt" | grep -o 'failed=[0-9]*' | cut -d= -f2 | awk '{s += $1} END {print s + 0}')
		printf '| %s | %s req/s | %s req/s | %s | %s | %s |\n' "$w" "$l" "$f" \
			"$(awk -v a="$f" -v b="$l" 'BEGIN {printf "%.2f", b ? a / b : 0}')" \
			"$(awk -v a="$f" -v b="$k" 'BEGIN {printf "%.2f", b ? a / b : 0}')" "$ff"
	done
fi
# redis -k 0: the six runs of one repetition (one server), each against their median
for mode in kernel lib ${THIRD:+face}; do
	for ((r = 1; r <= REPS; r++)); do
		runs=$(grep "^rep=$r mode=$mode redis_k0 " "$OUT/apps.txt" | grep -o 'rps=[0-9.]*' | cut -d= -f2)
		m=$(echo "$runs" | median)
		dev=$(echo "$runs" | awk -v m="$m" '{d = $1 > m ? $1 - m : m - $1; if (m > 0 && d / m > x) x = d / m}
			END {printf "%.0f%%", 100 * x}')
		echo "redis -k 0, $mode, repetition $r: $(echo "$runs" | tr '\n' ' ')(median $m, largest deviation $dev)"
	done
done
echo "(runs: $OUT/apps.txt; $REPS interleaved repetitions, medians)"
