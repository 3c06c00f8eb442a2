# shellcheck shell=bash
# Role: guest side of `BENCH_VM=1 bash bench/connrate.sh` (run by test/vm/run.sh as /rsk/script
# inside the Soft-RoCE guest; not run on the host). Short connections over the veth pair
# (server on 192.0.2.2, client from 192.0.2.1: rxe0 -> rxe1 when RDMA carries them), kernel
# TCP against librdmasock with RDMASOCK_TRANSPORT=verbs and otherwise its defaults (TCP first:
# a short connection should stay on kernel TCP and cost what kernel TCP costs):
#   - build/connrate (connect + 64-byte request + 64-byte response + close) at each of
#     BCR_CONCS in flight, BCR_TOTAL connections per run, BCR_REPS interleaved repetitions
#     (which side goes first alternates), a fresh server and port per run (TIME_WAIT of one
#     run never meets the next: same source address, other destination port);
#   - `redis-benchmark -k 0 -c BCR_RK_CONC -t ping_inline` six runs in a row against one
#     redis-server per side and repetition;
#   - one keep-alive redis-benchmark under the library: its connections must move to verbs;
#   - optionally (BCR_STRACE=1) system calls per connection at one in flight, each side and
#     end, strace -f -c at two sizes (the difference leaves start-up out).
# Every library run's RDMASOCK_STATS lines say which transport carried what: the short runs
# must count every client connection `tcp_first` and none, in either process, on verbs, and
# rxe's sent_pkts must not move. Output, one line each, tags for the host to pick up:
# "BCR-RUN", "BCR-REDIS", "BCR-KEEP", "BCR-SYS", "BCR-FAIL", "BCR-INFO".
# Env (from the host): BCR_LIB, BCR_BIN (connrate), BCR_REPS, BCR_TOTAL, BCR_CONCS,
# BCR_STEP_SECS, BCR_RK_N, BCR_RK_CONC, BCR_RK_UPGRADE_MS, BCR_KEEP_N, BCR_STRACE, BCR_CLOCKSOURCE. Every step
# is bounded (timeout, bounded waits); run.sh bounds the whole guest.
set -u
# shellcheck source=test/vm/guest-lib.sh
. /rsk/guest-lib.sh
SRV=$RSK_ADDR2
export RSK_TEST_ADDR=$SRV # connrate's address on both ends
LIB=${BCR_LIB:?}
BIN=${BCR_BIN:?}
REPS=${BCR_REPS:-3}
TOTAL=${BCR_TOTAL:-3000}
CONCS=${BCR_CONCS:-1 10}
STEP=${BCR_STEP_SECS:-60}
RK_N=${BCR_RK_N:-2000}
RK_CONC=${BCR_RK_CONC:-2}
RK_MS=${BCR_RK_UPGRADE_MS:-200}
KEEP_N=${BCR_KEEP_N:-1000}
PORT=12000

# side_env SIDE STATS [MORE...]: the env(1) words of a process on SIDE (kernel | lib) into SE.
# lib: the verbs transport as vm_verbs runs it, the policy left at its default (TCP first).
side_env() {
	local side=$1 st=$2
	shift 2
	if [ "$side" = kernel ]; then
		SE=(env -u LD_PRELOAD)
	else
		SE=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS="$st" "$@")
	fi
}
# sv FILE OBJECT KEY: the sum of "OBJECT":{..."KEY":n...} over FILE's stats lines (0 if none).
sv() {
	[ -s "$1" ] || { echo 0; return; }
	sed -n "s/.*\"$2\":{\([^}]*\)}.*/\1/p" "$1" | tr ',' '\n' | tr -d '"' |
		awk -F: -v k="$3" '$1 == k { s += $2 } END { printf "%.0f\n", s }'
}
# order REP: which side goes first (alternates: a later run may find the host warmer or busier).
order() { [ $(($1 % 2)) = 1 ] && echo "kernel lib" || echo "lib kernel"; }

# start_server SIDE STATS CMD...: CMD under SIDE's env in the background, waited for (20 s)
# until it listens on SRV:PORT (a TCP-first server keeps a kernel listener); pid in SPID.
start_server() {
	local side=$1 st=$2
	shift 2
	side_env "$side" "$st"
	"${SE[@]}" "$@" >/tmp/srv.out 2>&1 &
	SPID=$!
	wait_port_addr "$SRV" "$PORT" 20 2>/dev/null && return 0
	echo "BCR-FAIL server on port $PORT did not listen: $(tail -n 2 /tmp/srv.out | tr '\n' ' ')"
	proc_stop "$SPID" KILL 2
	return 1
}

# check_short SRVSTATS CLISTATS CLILINES DONE RXE0: "verbs_conns=s/c tcp_first=n rxe=+d
# check=ok|FAIL:why" for a library run of short connections: one stats line from the server
# and CLILINES from clients, nothing on verbs (connections or bytes, either end), at least DONE
# client connections counted tcp_first, and rxe sent nothing since RXE0.
check_short() {
	local s=$1 c=$2 v tf rxe why="" ls lc
	ls=$(grep -c . "$s" 2>/dev/null) lc=$(grep -c . "$c" 2>/dev/null)
	v="$(sv "$s" connections verbs)/$(sv "$c" connections verbs)"
	tf=$(sv "$c" fallbacks tcp_first)
	rxe=$(($(rxe_sent_pkts) - $5))
	[ "$ls" = 1 ] && [ "$lc" = "$3" ] || why="$why stats_lines_server=$ls,client=$lc"
	[ "$v" = 0/0 ] || why="$why verbs_conns=$v"
	[ "$(sv "$s" bytes_sent verbs)" = 0 ] && [ "$(sv "$c" bytes_sent verbs)" = 0 ] ||
		why="$why bytes_on_verbs"
	[ "$tf" -ge "$4" ] || why="$why tcp_first<$4"
	[ "$rxe" = 0 ] || why="$why rxe_moved"
	why=${why# }
	why=${why// /,}
	echo "verbs_conns=$v tcp_first=$tf rxe=+$rxe check=${why:+FAIL:}${why:-ok}"
}

# cr_run REP CONC SIDE: one connrate server + client; one BCR-RUN line.
cr_run() {
	local rep=$1 conc=$2 side=$3 out cps p50 p99 failed acc rx chk=""
	local ss=/tmp/cr-s.jsonl cs=/tmp/cr-c.jsonl
	PORT=$((PORT + 1))
	rm -f "$ss" "$cs"
	rx=$(rxe_sent_pkts)
	start_server "$side" "$ss" "$BIN" server "$PORT" $((STEP + 20)) || return 0
	side_env "$side" "$cs"
	out=$(timeout -k 2 $((STEP + 5)) "${SE[@]}" "$BIN" client "$PORT" "$conc" "$TOTAL" "$STEP" 2>&1)
	proc_stop "$SPID" TERM 10
	cps=$(echo "$out" | sed -n 's/.*conn_per_s=\([0-9]*\).*/\1/p')
	p50=$(echo "$out" | sed -n 's/.*lat_p50_us=\([0-9.]*\).*/\1/p')
	p99=$(echo "$out" | sed -n 's/.*lat_p99_us=\([0-9.]*\).*/\1/p')
	failed=$(echo "$out" | sed -n 's/.* failed=\([0-9]*\).*/\1/p')
	acc=$(sed -n 's/.*accepted=\([0-9]*\).*/\1/p' /tmp/srv.out)
	if [ "$side" = lib ]; then
		chk=$(check_short "$ss" "$cs" 1 "$(echo "$out" | sed -n 's/.* done=\([0-9]*\).*/\1/p')" "$rx")
	fi
	echo "BCR-RUN rep=$rep conc=$conc mode=$side conn_per_s=${cps:-0} lat_p50_us=${p50:-0} lat_p99_us=${p99:-0}" \
		"failed=${failed:-?} accepted=${acc:-?} $chk $(echo "$out" | grep '^error:\|stopped' | tr '\n' ' ')"
}

# rk_set REP SIDE: one redis-server, six `redis-benchmark -k 0` runs in a row; BCR-REDIS lines.
# The library's client gets RDMASOCK_UPGRADE_MS=BCR_RK_UPGRADE_MS: a connection per request
# lives well under the default 5 ms on hardware, tens of ms under TCG (sc_tcpfirst_redis).
rk_set() {
	local rep=$1 side=$2 i out rps rx
	local ss=/tmp/rk-s.jsonl cs=/tmp/rk-c.jsonl
	PORT=$((PORT + 1))
	rm -f "$ss" "$cs"
	rx=$(rxe_sent_pkts)
	start_server "$side" "$ss" redis-server --bind "$SRV" --port "$PORT" --save '' \
		--appendonly no --protected-mode no || return 0
	for i in 1 2 3 4 5 6; do
		side_env "$side" "$cs" RDMASOCK_UPGRADE_MS="$RK_MS"
		out=$(timeout -k 2 "$STEP" "${SE[@]}" redis-benchmark -h "$SRV" -p "$PORT" -c "$RK_CONC" \
			-n "$RK_N" -k 0 -t ping_inline -q 2>&1 | tr '\r' '\n' | grep 'PING_INLINE:' | tail -n 1)
		rps=$(echo "$out" | sed -n 's/.*PING_INLINE: \([0-9.]*\) requests.*/\1/p')
		echo "BCR-REDIS rep=$rep mode=$side redis_k0 run=$i rps=${rps:-0}"
	done
	proc_stop "$SPID" TERM 20
	[ "$side" = lib ] || return 0
	# six client lines (one per redis-benchmark), one server line; a connection per request
	echo "BCR-REDIS rep=$rep mode=$side redis_k0 stats $(check_short "$ss" "$cs" 6 $((6 * RK_N)) "$rx")"
}

# keep_alive: redis-benchmark keeping its connections (-c 4 -t set,get) under the library:
# they start on TCP and must move to verbs (counted on verbs, most bytes there, rxe moved).
keep_alive() {
	local out rx rps rc ss=/tmp/ka-s.jsonl cs=/tmp/ka-c.jsonl why=""
	PORT=$((PORT + 1))
	rm -f "$ss" "$cs"
	rx=$(rxe_sent_pkts)
	start_server lib "$ss" redis-server --bind "$SRV" --port "$PORT" --save '' --appendonly no \
		--protected-mode no || return 0
	side_env lib "$cs"
	# (its own bound, twice a step's: a client killed by it writes no stats line)
	timeout -k 2 $((2 * STEP)) "${SE[@]}" redis-benchmark -h "$SRV" -p "$PORT" -c 4 -n "$KEEP_N" \
		-t set,get -q >/tmp/ka.out 2>&1
	rc=$?
	out=$(tr '\r' '\n' </tmp/ka.out | sed -En 's/^ *(SET|GET): ([0-9.]+) requests per second.*/\1 \2 rps/p' |
		tr '\n' ' ')
	proc_stop "$SPID" TERM 20
	[ $rc = 0 ] || why="redis-benchmark exit $rc"
	rps=${out% }
	[ "$(sv "$cs" connections verbs)" -ge 4 ] || why="$why client verbs conns < 4"
	[ "$(sv "$ss" connections verbs)" -ge 4 ] || why="$why server verbs conns < 4"
	[ "$(sv "$cs" bytes_sent verbs)" -gt "$(sv "$cs" bytes_sent kernel)" ] || why="$why client sent more on TCP"
	[ $(($(rxe_sent_pkts) - rx)) -gt 0 ] || why="$why rxe did not move"
	echo "BCR-KEEP redis-benchmark -c 4 -n $KEEP_N -t set,get (keep-alive): ${rps:-no result};" \
		"client verbs conns $(sv "$cs" connections verbs), sent verbs $(sv "$cs" bytes_sent verbs) B" \
		"/ TCP first $(sv "$cs" bytes_sent kernel) B; server verbs conns $(sv "$ss" connections verbs);" \
		"rxe sent_pkts +$(($(rxe_sent_pkts) - rx)); check=${why:+FAIL:}${why:-ok}"
	[ -z "$why" ] || tail -n 3 /tmp/ka.out | tr '\r' '\n' | tail -n 2
}

# counts FILE: strace -c table -> "name count" lines and "TOTAL count".
counts() {
	awk 'NF >= 5 && $1 ~ /^[0-9.]+$/ && $4 ~ /^[0-9]+$/ {
		if ($NF == "total") print "TOTAL", $4; else print $NF, $4 }' "$1"
}
# traced SIDE N TAG: a connrate pair at one in flight, up to N connections (and BCR_STEP_SECS),
# the server attached with strace -f -c once it listens, the client under strace -f -c;
# /tmp/TAG-{server,client}.cnt, the connections made in TDONE.
traced() {
	local side=$1 n=$2 tag=$3 tpid
	PORT=$((PORT + 1))
	TDONE=0
	start_server "$side" /tmp/sys-s.jsonl "$BIN" server "$PORT" $((STEP + 30)) || return 1
	strace -f -c -o /tmp/s.txt -p "$SPID" 2>/dev/null &
	tpid=$!
	sleep 1
	side_env "$side" /tmp/sys-c.jsonl
	timeout -k 2 $((STEP + 5)) strace -f -c -o /tmp/c.txt -- "${SE[@]}" "$BIN" client "$PORT" 1 "$n" "$STEP" \
		>/tmp/sys-c.out 2>&1
	proc_stop "$tpid" INT 20
	proc_stop "$SPID" TERM 10
	TDONE=$(sed -n 's/.* done=\([0-9]*\).*/\1/p' /tmp/sys-c.out)
	echo "BCR-SYSRUN mode=$side n=$n $(grep '^client:' /tmp/sys-c.out)"
	[ "${TDONE:-0}" -gt 0 ] || { echo "BCR-FAIL traced $tag: $(head -n 2 /tmp/sys-c.out)"; return 1; }
	counts /tmp/s.txt >"/tmp/$tag-server.cnt"
	counts /tmp/c.txt >"/tmp/$tag-client.cnt"
}
# syscalls SIDE: calls per connection, (big run - small run) / (their difference in
# connections made: a run stopped by time still counts), one BCR-SYS line per end.
syscalls() {
	local side=$1 d1 e
	traced "$side" 100 "$side-small" || return 0
	d1=$TDONE
	traced "$side" 600 "$side-big" || return 0
	[ "$TDONE" -gt "$d1" ] || { echo "BCR-FAIL syscalls $side: no more connections in the big run"; return 0; }
	for e in server client; do
		awk -v n=$((TDONE - d1)) 'NR == FNR { s[$1] = $2; next }
			{ d = ($2 - s[$1]) / n; if ($1 == "TOTAL") t = d; else if (d >= 0.05) l = l sprintf(" %s=%.2f", $1, d) }
			END { printf "total=%.2f%s (over %d connections)\n", t, l, n }' "/tmp/$side-small-$e.cnt" "/tmp/$side-big-$e.cnt" |
			sed "s/^/BCR-SYS mode=$side end=$e per_conn /"
	done
}

# BCR_CLOCKSOURCE: switch the guest's clocksource first (hpet by default under TCG: no vDSO,
# every clock read a system call and an emulated HPET read; tsc, where offered, reads in the vDSO)
if [ -n "${BCR_CLOCKSOURCE:-}" ]; then
	cs=/sys/devices/system/clocksource/clocksource0
	echo "$BCR_CLOCKSOURCE" >$cs/current_clocksource 2>/dev/null
	# (an unstable one is refused silently, with a line in dmesg)
	[ "$(cat $cs/current_clocksource)" = "$BCR_CLOCKSOURCE" ] ||
		echo "BCR-FAIL clocksource $BCR_CLOCKSOURCE not taken (available: $(cat $cs/available_clocksource);" \
			"$(dmesg | grep -i clocksource | tail -n 2 | tr '\n' ' '))"
fi
echo "BCR-INFO kernel $(uname -r), $(nproc) vCPUs (qemu TCG), connrate $TOTAL connections per run at" \
	"$CONCS in flight, $REPS reps; redis-benchmark -k 0 -c $RK_CONC -n $RK_N -t ping_inline x6" \
	"(lib client RDMASOCK_UPGRADE_MS=$RK_MS); lib: RDMASOCK_TRANSPORT=verbs, TCP_FIRST default;" \
	"clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
for ((r = 1; r <= REPS; r++)); do
	for conc in $CONCS; do
		for side in $(order "$r"); do
			cr_run "$r" "$conc" "$side"
		done
	done
	for side in $(order "$r"); do
		rk_set "$r" "$side"
	done
done
keep_alive
if [ "${BCR_STRACE:-1}" = 1 ]; then
	syscalls kernel
	syscalls lib
fi
exit 0
