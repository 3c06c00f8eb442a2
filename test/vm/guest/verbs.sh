# Role: guest side of the vm_verbs test (run by /init with bash inside the Soft-RoCE guest).
# Runs real applications and the test programs with servers on 192.0.2.2 and clients coming
# from 192.0.2.1, so every stream crosses the veth pair, under the preload library being
# tested (librdmasock with RDMASOCK_TRANSPORT=verbs, or rsocket's librspreload.so) or under
# none (kernel TCP, the reference run). Each scenario checks the application's own result,
# that RDMA carried the traffic (rxe sent_pkts rose on both devices; for kernel TCP they must
# not move) and, for librdmasock, what its RDMASOCK_STATS lines say. One line per scenario
# starts with "RSK-VM-VERBS": mode, name, result, seconds and what was seen (the symptom when
# it failed); test_vm_verbs.sh prints them again as the run's summary.
#
# Env (from test_vm_verbs.sh via run.sh --env):
#   RSK_VM_MODE       rdmasock | rsocket | other (some other RDMA preload) | kernel (none)
#   RSK_VM_PRELOAD    the preload library (empty in kernel mode)
#   RSK_VM_TRANSPORT  RDMASOCK_TRANSPORT of preloaded processes in rdmasock mode (verbs)
#   RSK_VM_EXPECT     the transport that must carry the streams in rdmasock mode (verbs);
#                     kernel or shm check the harness itself against a library without verbs
#   RSK_VM_PROGS      directory of test/progs (integrity, mixed_peer, peerdeath, lastwords, nagle)
#   RSK_VM_PROBE, RSK_VM_NBCONNECT   vm_probe and nbconnect
#   RSK_VM_INTEGRITY_BYTES  each way, suffix K/M/G (default 1G); RSK_VM_INTEGRITY_SECS its
#                     time limit (400)
#   RSK_VM_IDLE_SECS  a benchmark client is ended as stalled after this long without a byte
#                     crossing the pair (10)
#   RSK_VM_REDIS_N    redis-benchmark -n (default 2000); RSK_VM_MIXED_BYTES (8 MiB)
#   RSK_VM_FDS_N      connections of the fds scenario (100)
#   RSK_VM_CHURN_N    cycles of the churn scenario after its warm-up of a tenth (1000)
#   RSK_VM_ONLY       regex of scenario names (guest-lib.sh)
# shellcheck source=../guest-lib.sh
. /rsk/guest-lib.sh

MODE=${RSK_VM_MODE:-kernel}
PRELOAD=${RSK_VM_PRELOAD:-}
PROGS=${RSK_VM_PROGS:-}
SRV=$RSK_ADDR2
# The test programs (test/progs) bind and connect this address instead of 127.0.0.1.
export RSK_TEST_ADDR=$SRV
INTEGRITY_BYTES=${RSK_VM_INTEGRITY_BYTES:-1G}
REDIS_N=${RSK_VM_REDIS_N:-2000}
MIXED_BYTES=${RSK_VM_MIXED_BYTES:-8388608}
# Seconds one integrity run may take: 1 GiB each way needs ~20 s over kernel TCP (and over
# librdmasock's shm) in this guest on 2 TCG vCPUs; rsocket moved 64 MiB each way at ~28 MB/s,
# so 1 GiB over RDMA could need ~80 s. The scenario's bound leaves room on top: 300 s. At 200 s
# it failed 2 of 3 clean-clone CI runs of 2026-12-03, both at 1,057-1,064 of 1,073 MB (the
# server's alarm), one at a host load of 1.3-1.7; the whole vm_verbs run stays well inside
# its own 900 s and ctest's 1,020 s.
INTEGRITY_SECS=${RSK_VM_INTEGRITY_SECS:-400}
STATS=/tmp/stats.none.jsonl # each scenario names its own file
EXPECT=${RSK_VM_EXPECT:-verbs}
# What carries a preloaded pair's bytes, as the counters see it: rdma (rxe sent_pkts rise),
# tcp (kernel TCP across the pair: rxe still, veth moves) or local (shm: neither moves).
LABEL=$MODE
[ "$MODE" != rdmasock ] || LABEL=rdmasock/${RSK_VM_TRANSPORT:-verbs}
case $MODE:$EXPECT in
kernel:*) CARRY=tcp ;;
rdmasock:verbs | rsocket:* | other:*) CARRY=rdma ;;
rdmasock:kernel) CARRY=tcp ;;
*) CARRY=local ;;
esac
NOTES=/tmp/verbs-notes
mkdir -p "$NOTES"

# Bounds per scenario (guest-lib's scenario() reads SCENARIO_TIMEOUT_<name>): generous for a
# loaded machine, small enough that a run where everything hangs still ends in under 12 minutes.
SCENARIO_TIMEOUT_redis=${SCENARIO_TIMEOUT_redis:-90}
SCENARIO_TIMEOUT_iperf3=${SCENARIO_TIMEOUT_iperf3:-45}
SCENARIO_TIMEOUT_sockperf_pp=${SCENARIO_TIMEOUT_sockperf_pp:-40}
SCENARIO_TIMEOUT_sockperf_tp=${SCENARIO_TIMEOUT_sockperf_tp:-40}
SCENARIO_TIMEOUT_integrity=${SCENARIO_TIMEOUT_integrity:-$((INTEGRITY_SECS + 30))}
SCENARIO_TIMEOUT_nbconnect=${SCENARIO_TIMEOUT_nbconnect:-40}
SCENARIO_TIMEOUT_mixed_plain_client=${SCENARIO_TIMEOUT_mixed_plain_client:-45}
SCENARIO_TIMEOUT_mixed_plain_server=${SCENARIO_TIMEOUT_mixed_plain_server:-45}
SCENARIO_TIMEOUT_lastwords=${SCENARIO_TIMEOUT_lastwords:-150}
SCENARIO_TIMEOUT_coalesce=${SCENARIO_TIMEOUT_coalesce:-60}
SCENARIO_TIMEOUT_tcpfirst_redis=${SCENARIO_TIMEOUT_tcpfirst_redis:-90}
SCENARIO_TIMEOUT_tcpfirst_integrity=${SCENARIO_TIMEOUT_tcpfirst_integrity:-$((INTEGRITY_SECS + 30))}
SCENARIO_TIMEOUT_fds=${SCENARIO_TIMEOUT_fds:-120}
# churn's own bound (connscale's SECONDS), and the scenario's with start and stop on top
CHURN_SECS=${RSK_VM_CHURN_SECS:-150}
SCENARIO_TIMEOUT_churn=${SCENARIO_TIMEOUT_churn:-$((CHURN_SECS + 45))}
for s in server_recv server_epoll client_recv client_send; do
	eval "SCENARIO_TIMEOUT_peerdeath_$s=\${SCENARIO_TIMEOUT_peerdeath_$s:-30}"
done

# ---- notes and failing ------------------------------------------------------------------

# note TEXT: one fact for the scenario's summary line (also printed now).
note() {
	echo "note: $*"
	echo "$*" >>"$NOTES/$CUR"
}

# die_sc TEXT: end the current scenario as FAIL with TEXT as its symptom. Scenarios run in a
# subshell (guest-lib's scenario), so exit ends exactly the scenario; never call it in $(...).
die_sc() {
	note "FAIL: $*"
	echo "FAIL: $*" >&2
	exit 1
}

# ---- processes ----------------------------------------------------------------------------

# pre_env: the environment words that preload a process in this mode.
pre_env() {
	PE=()
	[ -n "$PRELOAD" ] || return 0
	PE=("LD_PRELOAD=$PRELOAD")
	if [ "$MODE" = rdmasock ]; then
		# The scenarios below test the verbs data path from the first byte (set up at
		# connect); the tcpfirst_* ones set VM_TCP_FIRST to run the policy (auto) or a move.
		PE+=("RDMASOCK_TRANSPORT=${RSK_VM_TRANSPORT:-verbs}" "RDMASOCK_STATS=$STATS"
			"RDMASOCK_TCP_FIRST=${VM_TCP_FIRST:-off}")
		[ -z "${VM_UPGRADE_BYTES:-}" ] || PE+=("RDMASOCK_UPGRADE_BYTES=$VM_UPGRADE_BYTES")
		[ -z "${VM_UPGRADE_MS:-}" ] || PE+=("RDMASOCK_UPGRADE_MS=$VM_UPGRADE_MS")
		[ -z "${VM_COALESCE:-}" ] || PE+=("RDMASOCK_COALESCE=$VM_COALESCE")
	fi
}

# pre SECS CMD...: CMD preloaded, killed after SECS. timeout stays outside the preload (it
# would write a stats line of its own) and in our process group (--foreground), so the
# scenario's group kill reaches whatever is left.
pre() {
	local secs=$1
	shift
	pre_env
	timeout --foreground -k 2 "$secs" env "${PE[@]}" "$@"
}

# plain SECS CMD...: CMD without any preload, killed after SECS.
plain() {
	local secs=$1
	shift
	timeout --foreground -k 2 "$secs" "$@"
}

# pre_bg CMD... / plain_bg CMD...: start a server in the background; its own pid in BG_PID
# (env execs the program, so it is the program's pid: signals reach it directly).
pre_bg() {
	pre_env
	env "${PE[@]}" "$@" &
	BG_PID=$!
}
plain_bg() {
	"$@" &
	BG_PID=$!
}

# status_str RC: "status N" or "killed by SIGNAME".
status_str() {
	if [ "$1" -gt 128 ] && [ "$1" -lt 160 ]; then
		echo "killed by SIG$(kill -l $(($1 - 128)))"
	else
		echo "status $1"
	fi
}

# wait_bg PID SECS: wait (bounded) for a background process to end by itself; its status,
# or 124 after SIGKILL when it did not end within SECS.
wait_bg() {
	local pid=$1 end=$((SECONDS + $2))
	while alive "$pid" && [ $SECONDS -lt "$end" ]; do sleep 0.1; done
	if alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return 124
	fi
	wait "$pid"
}

# stop_bg PID SIG SECS: signal a server and wait (bounded) for its status.
stop_bg() {
	kill -"$2" "$1" 2>/dev/null
	wait_bg "$1" "$3"
}

net_bytes() { echo $(($(veth_tx veth0) + $(veth_tx veth1))); }

# watched pre|plain SECS SPID CMD...: run a client (preloaded or not) that must keep traffic
# flowing, and end it early instead of waiting out SECS when it cannot finish: when nothing
# crossed the veth pair (RoCE or TCP alike) for IDLE_SECS, or when SPID (a server that must
# outlive the client; "" for none) died. Status: the client's, or 126 stalled (WATCH_WHY
# says after how much), 125 server died, 124 SECS ran out.
IDLE_SECS=${RSK_VM_IDLE_SECS:-10}
watched() {
	local how=$1 secs=$2 spid=$3 cpid last now b0 still=0 rc
	shift 3
	PE=()
	[ "$how" != pre ] || pre_env
	b0=$(net_bytes)
	last=$b0
	timeout --foreground -k 2 "$secs" env "${PE[@]}" "$@" &
	cpid=$!
	WATCH_WHY=""
	while alive "$cpid"; do
		sleep 1
		if [ -n "$spid" ] && ! alive "$spid"; then
			sleep 1 # let the client notice and say so itself
			alive "$cpid" || break
			kill -TERM "$cpid"
			wait "$cpid"
			wait "$spid"
			WATCH_WHY="the server died ($(status_str $?)) under the client"
			return 125
		fi
		now=$(net_bytes)
		[ "$CARRY" != local ] || continue # shm moves nothing over the pair: no stall to see
		if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0 last=$now; fi
		if [ $still -ge "$IDLE_SECS" ]; then
			kill -TERM "$cpid"
			wait "$cpid"
			WATCH_WHY="stalled: $(human $((now - b0))) crossed the pair, then nothing for $IDLE_SECS s"
			return 126
		fi
	done
	wait "$cpid"
	rc=$?
	[ $rc != 124 ] || WATCH_WHY="still running after $secs s"
	return $rc
}

# human BYTES: "N KiB" below 1 MiB, else "N MiB".
human() {
	if [ "$1" -lt 1048576 ]; then echo "$(($1 >> 10)) KiB"; else echo "$(($1 >> 20)) MiB"; fi
}

# why_failed RC: the symptom of a watched client's status.
why_failed() {
	if [ -n "$WATCH_WHY" ]; then echo "$WATCH_WHY"; else status_str "$1"; fi
}

# ---- listeners ----------------------------------------------------------------------------

# tcp_listens ADDR PORT: a kernel socket listens on ADDR:PORT or the wildcard.
tcp_listens() {
	local a w
	a=$(_hexaddr "$1"):$(printf '%04X' "$2")
	w=00000000:$(printf '%04X' "$2")
	awk -v a="$a" -v w="$w" '$4 == "0A" && ($2 == a || $2 == w) { f = 1 } END { exit !f }' \
		/proc/net/tcp 2>/dev/null
}

# rdma_listens ADDR PORT: an rdma_cm id listens there (rsocket listens on rdma_cm only, and
# rdma_cm listeners are not in /proc/net/tcp).
rdma_listens() {
	rdma res show cm_id 2>/dev/null |
		grep -Eq "state LISTEN .*src-addr ($1|0\.0\.0\.0):$2( |\$)"
}

# wait_listen ADDR PORT SECS [PID [LOG]]: until something listens on ADDR:PORT (kernel or
# rdma_cm); fails at once when PID (the server) is gone, with its status in the symptom (and
# the end of its LOG printed).
wait_listen() {
	local end=$((SECONDS + $3)) rc
	while [ $SECONDS -lt $end ]; do
		if [ -n "${4:-}" ] && ! alive "$4"; then
			wait "$4"
			rc=$?
			[ -z "${5:-}" ] || tail -n 40 "$5"
			die_sc "the server exited ($(status_str $rc)) before listening on $1:$2"
		fi
		tcp_listens "$1" "$2" && return 0
		rdma_listens "$1" "$2" && return 0
		sleep 0.1
	done
	die_sc "nothing listens on $1:$2 after $3 s"
}

# ---- RDMA counters ------------------------------------------------------------------------

dev_sent() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts"; }
veth_tx() { cat "/sys/class/net/$1/statistics/tx_bytes"; }

# rxe_mark: remember the rxe and veth counters before a scenario's traffic.
rxe_mark() {
	RX0=$(dev_sent rxe0) RX1=$(dev_sent rxe1) VX0=$(veth_tx veth0)
}

# rxe_check pair|fallback: the packets since rxe_mark. pair: the preloaded pair's streams
# went the way CARRY says: rdma, both rxe devices sent (they crossed the pair over RoCE);
# tcp, rxe did not move at all and veth0 sent (kernel TCP crossed the pair, not lo); local,
# rxe did not move. fallback: a plain peer's bytes went over kernel TCP across the pair
# (veth0 sent at least RSK_CHECK_BYTES) and rxe sent at most a connection attempt's worth
# (64 packets), far fewer than the data would need; with no preload, as tcp.
rxe_check() {
	local d0 d1 dv how=$1
	d0=$(($(dev_sent rxe0) - RX0))
	d1=$(($(dev_sent rxe1) - RX1))
	dv=$(($(veth_tx veth0) - VX0))
	note "rxe sent_pkts +$d0/+$d1, veth0 +$dv B"
	[ "$how" != pair ] || how=$CARRY
	[ "$MODE" != kernel ] || how=tcp
	case $how in
	tcp)
		[ $d0 = 0 ] && [ $d1 = 0 ] || die_sc "rxe sent_pkts moved (+$d0/+$d1) for kernel TCP"
		[ $dv -gt 0 ] || die_sc "veth0 sent nothing: the traffic did not cross the pair"
		;;
	local)
		[ $d0 = 0 ] && [ $d1 = 0 ] || die_sc "rxe sent_pkts moved (+$d0/+$d1) for shm"
		;;
	rdma)
		[ $d0 -gt 0 ] && [ $d1 -gt 0 ] ||
			die_sc "rxe sent_pkts +$d0/+$d1: the traffic did not cross the pair over RDMA"
		;;
	fallback)
		[ $((d0 + d1)) -le 64 ] ||
			die_sc "rxe sent $((d0 + d1)) packets: the plain peer's bytes went over RDMA?"
		# With shm, librdmasock binds a client to the destination's address before it
		# falls back, so that connection runs .2 -> .2 over lo: veth may not move.
		[ "$CARRY" = local ] || [ $dv -ge "${RSK_CHECK_BYTES:-1}" ] ||
			die_sc "veth0 sent $dv bytes, less than the $RSK_CHECK_BYTES exchanged"
		;;
	esac
}

# ---- RDMASOCK_STATS (rdmasock mode) --------------------------------------------------------

# stats_load [PROGRAM]: the sums over $STATS's lines (of PROGRAM) into ST[key]: lines,
# connections.T, bytes_sent.T, bytes_received.T, fallbacks.REASON. No python3 in the guest:
# awk picks the flat {"name":number,...} objects out of each line.
stats_load() {
	local k v
	unset ST
	declare -gA ST=([lines]=0)
	[ -s "$STATS" ] || return 0
	while read -r k v; do ST[$k]=$v; done < <(awk -v p="${1:-}" '
		function obj(line, key) {
			if (!match(line, "\"" key "\":\\{[^}]*\\}"))
				return ""
			return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
		}
		function add(prefix, body, n, i, kv, pair) {
			n = split(body, kv, ",")
			for (i = 1; i <= n; i++) {
				split(kv[i], pair, ":")
				gsub(/"/, "", pair[1])
				tot[prefix "." pair[1]] += pair[2]
			}
		}
		{
			if (p != "") {
				if (!match($0, /"program":"[^"]*"/))
					next
				if (substr($0, RSTART + 11, RLENGTH - 12) != p)
					next
			}
			lines++
			add("connections", obj($0, "connections"))
			add("bytes_sent", obj($0, "bytes_sent"))
			add("bytes_received", obj($0, "bytes_received"))
			add("fallbacks", obj($0, "fallbacks"))
		}
		END {
			printf "lines %d\n", lines
			for (k in tot)
				printf "%s %.0f\n", k, tot[k]
		}' "$STATS")
}

# st KEY: a loaded sum (0 when absent).
st() { echo "${ST[$1]:-0}"; }

# assert_carried TRANSPORT MIN_CONNS [PROGRAM]: in rdmasock mode, TRANSPORT counted at least
# MIN_CONNS connections, no other transport counted one, and TRANSPORT carried >= 99% of all
# bytes sent + received (of PROGRAM's processes). A no-op in the other modes (no stats).
assert_carried() {
	local want=$1 min=$2 prog=${3:-} k t total=0 mine others="" conns
	[ "$MODE" = rdmasock ] || return 0
	stats_load "$prog"
	[ "$(st lines)" -gt 0 ] || die_sc "no RDMASOCK_STATS line${prog:+ from $prog}"
	for k in "${!ST[@]}"; do
		case $k in
		bytes_sent.* | bytes_received.*) total=$((total + ST[$k])) ;;
		connections.*)
			t=${k#connections.}
			[ "$t" = "$want" ] || [ "${ST[$k]}" = 0 ] || others="$others $t:${ST[$k]}"
			;;
		esac
	done
	mine=$(($(st "bytes_sent.$want") + $(st "bytes_received.$want")))
	conns=$(st "connections.$want")
	note "${prog:-all}: $(st lines) stats lines, $want $conns conns, $mine of $total B"
	# A failure below is easier to read with the fallback reasons next to it.
	[ "$conns" -ge "$min" ] && [ -z "$others" ] || note "fallbacks:$(fallback_str)"
	[ "$conns" -ge "$min" ] || die_sc "${prog:-all}: $want counted $conns connections, want >= $min"
	[ -z "$others" ] || die_sc "${prog:-all}: connections on other transports:$others"
	[ "$total" -gt 0 ] && [ $((mine * 100)) -ge $((total * 99)) ] ||
		die_sc "${prog:-all}: $want carried $mine of $total bytes (< 99%)"
}

# fallback_str: " reason:n ..." of the loaded stats (the reasons counted at least once).
fallback_str() {
	local k
	for k in "${!ST[@]}"; do
		[[ $k == fallbacks.* ]] && [ "${ST[$k]}" != 0 ] && printf ' %s:%s' "${k#fallbacks.}" "${ST[$k]}"
	done
	return 0
}

# assert_fallback_counted: in rdmasock mode, the loaded stats count a fallback reason.
assert_fallback_counted() {
	local r
	[ "$MODE" = rdmasock ] || return 0
	r=$(fallback_str)
	[ -n "$r" ] || die_sc "no fallback reason counted"
	note "fallbacks:$r"
}

# bytes_of N[KMG]: the number.
bytes_of() {
	case $1 in
	*[kK]) echo $((${1%?} << 10)) ;;
	*[mM]) echo $((${1%?} << 20)) ;;
	*[gG]) echo $((${1%?} << 30)) ;;
	*) echo "$1" ;;
	esac
}

# first_error FILE...: the first line that looks like an error, for a symptom (not bash's
# own job reports, which land in a client's output file too).
first_error() {
	grep -hiE 'error|fail|not supported|refused|reset|smash|fault|abort|hung|denied|timed out' \
		"$@" 2>/dev/null | grep -v '^/rsk/script: ' | tr -d '\r' | head -n 1 | cut -c1-160
}

# ---- scenarios ----------------------------------------------------------------------------

# 1. redis-server + redis-benchmark -c 50 -t set,get, then the same pipelined (-P 16).
sc_redis() {
	local port=6390 spid rc f rps out
	STATS=/tmp/stats.redis.jsonl
	rxe_mark
	pre_bg redis-server --bind "$SRV" --port $port --save '' --appendonly no \
		--protected-mode no >/tmp/redis-server.log 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid" /tmp/redis-server.log
	for f in c50 p16; do
		out=/tmp/redis-$f.out
		if [ $f = c50 ]; then
			watched pre 40 "$spid" redis-benchmark -h "$SRV" -p $port -c 50 -n "$REDIS_N" \
				-t set,get -q >"$out" 2>&1
		else
			watched pre 40 "$spid" redis-benchmark -h "$SRV" -p $port -c 50 -P 16 \
				-n "$REDIS_N" -t set,get -q >"$out" 2>&1
		fi
		rc=$?
		rps=$(tr '\r' '\n' <"$out" |
			sed -En 's/^ *(SET|GET): ([0-9.]+) requests per second.*/\1 \2/p' | tr '\n' ' ')
		echo "redis-benchmark $f: $rps"
		if [ $rc != 0 ] || ! [[ $rps == *SET* && $rps == *GET* ]]; then
			grep -a -B2 -A8 -m1 'crashed by signal' /tmp/redis-server.log
			die_sc "redis-benchmark $f: $(why_failed $rc); $(first_error "$out")"
		fi
		note "$f: ${rps% } rps"
	done
	stop_bg "$spid" TERM 20 || die_sc "redis-server did not stop cleanly ($(status_str $?))"
	assert_carried "$EXPECT" 100 redis-benchmark
	assert_carried "$EXPECT" 100 redis-server
	rxe_check pair
}

# 2. iperf3, one stream for 3 s (-1: the server serves one test and exits).
sc_iperf3() {
	local port=5201 spid rc line
	STATS=/tmp/stats.iperf3.jsonl
	rxe_mark
	pre_bg iperf3 -s -1 -B "$SRV" -p $port >/tmp/iperf3-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid"
	watched pre 25 "" iperf3 -c "$SRV" -p $port -t 3 --connect-timeout 5000 -f m \
		>/tmp/iperf3-c.out 2>&1
	rc=$?
	tail -n 4 /tmp/iperf3-c.out
	line=$(grep -E ' receiver$' /tmp/iperf3-c.out | tail -n 1)
	if [ $rc != 0 ] || [ -z "$line" ]; then
		tail -n 20 /tmp/iperf3-s.out
		die_sc "iperf3 client: $(why_failed $rc); $(first_error /tmp/iperf3-c.out /tmp/iperf3-s.out)"
	fi
	note "receiver $(echo "$line" | awk '{print $5, $6, $7, $8}')"
	wait_bg "$spid" 15 || die_sc "iperf3 server: $(status_str $?); $(first_error /tmp/iperf3-s.out)"
	echo "$line" | awk '{ exit !($5 > 0) }' || die_sc "iperf3 moved nothing: $line"
	# control + data connection on each end
	assert_carried "$EXPECT" 4 iperf3
	rxe_check pair
}

# sockperf_run KIND PORT ARGS...: a sockperf server and one client run (pp or tp).
sockperf_run() {
	local kind=$1 port=$2 spid rc n
	shift 2
	STATS=/tmp/stats.sockperf_$kind.jsonl
	rxe_mark
	pre_bg sockperf sr --tcp -i "$SRV" -p "$port" >"/tmp/sockperf-s-$kind.out" 2>&1
	spid=$BG_PID
	wait_listen "$SRV" "$port" 20 "$spid"
	watched pre 25 "$spid" sockperf "$kind" --tcp -i "$SRV" -p "$port" "$@" \
		>"/tmp/sockperf-$kind.out" 2>&1
	rc=$?
	grep -E 'Total Run|avg-latency|dropped|Total of|BandWidth|ERROR' "/tmp/sockperf-$kind.out"
	if [ $rc != 0 ] || grep -q ERROR "/tmp/sockperf-$kind.out"; then
		tail -n 20 "/tmp/sockperf-s-$kind.out"
		die_sc "sockperf $kind: $(why_failed $rc); $(first_error "/tmp/sockperf-$kind.out")"
	fi
	if [ "$kind" = pp ]; then
		grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' \
			/tmp/sockperf-pp.out || die_sc "sockperf pp: messages dropped, duplicated or reordered"
		n=$(sed -n 's/.*\[Valid Duration\].*ReceivedMessages=\([0-9]*\).*/\1/p' /tmp/sockperf-pp.out)
		[ "${n:-0}" -gt 0 ] || die_sc "sockperf pp: no round trip"
		note "$n round trips, avg-latency $(sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' /tmp/sockperf-pp.out) us"
	else
		n=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' /tmp/sockperf-tp.out)
		[ "${n:-0}" -gt 0 ] || die_sc "sockperf tp: no message sent"
		note "$n messages, $(sed -n 's/.*BandWidth is \([0-9.]*\) MBps.*/\1/p' /tmp/sockperf-tp.out) MB/s"
	fi
	# The server ends its loop and returns from main on SIGINT (so it writes its stats).
	stop_bg "$spid" INT 10 || die_sc "sockperf server: $(status_str $?)"
	n=$(sed -n 's/.*Total \([0-9]*\) messages received and handled.*/\1/p' "/tmp/sockperf-s-$kind.out")
	[ "${n:-0}" -gt 0 ] || die_sc "the sockperf server handled no message"
	assert_carried "$EXPECT" 2 sockperf
	rxe_check pair
}

# 3. sockperf ping-pong (64-byte messages) and throughput (1 KiB messages), 2 s each.
sc_sockperf_pp() { sockperf_run pp 11111 -t 2 -m 64; }
sc_sockperf_tp() { sockperf_run tp 11112 -t 2 -m 1024; }

# 4. integrity: INTEGRITY_BYTES each way at once, random sizes, every byte checked.
sc_integrity() {
	local port=7300 spid rc bytes lc ls w
	STATS=/tmp/stats.integrity.jsonl
	bytes=$(bytes_of "$INTEGRITY_BYTES")
	export INTEGRITY_TIME_LIMIT=$INTEGRITY_SECS
	rxe_mark
	pre_bg "$PROGS/integrity" server $port >/tmp/integrity-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid"
	watched pre $((INTEGRITY_SECS + 5)) "" "$PROGS/integrity" client $port "$bytes" \
		>/tmp/integrity-c.out 2>&1
	rc=$?
	[ $rc = 0 ] || kill -TERM "$spid" 2>/dev/null
	wait_bg "$spid" 20
	cat /tmp/integrity-c.out /tmp/integrity-s.out
	[ $rc = 0 ] || die_sc "integrity client: $(why_failed $rc); $(grep -h 'integrity\[' /tmp/integrity-c.out /tmp/integrity-s.out | grep -v 'seed' | head -n 1)"
	lc=$(grep '^integrity: client .*: ok$' /tmp/integrity-c.out) || die_sc "client did not verify"
	ls=$(grep '^integrity: server .*: ok$' /tmp/integrity-s.out) || die_sc "server did not verify"
	# word N of a result line: 4 bytes sent, 6 their hash, 8 bytes received, 10 their hash
	w() { echo "$1" | awk -v n="$2" '{print $n}'; }
	[ "$(w "$lc" 4)" = "$bytes" ] && [ "$(w "$lc" 8)" = "$bytes" ] &&
		[ "$(w "$ls" 4)" = "$bytes" ] && [ "$(w "$ls" 8)" = "$bytes" ] ||
		die_sc "byte counts differ from $bytes each way"
	[ "$(w "$lc" 6)" = "$(w "$ls" 10)" ] && [ "$(w "$ls" 6)" = "$(w "$lc" 10)" ] ||
		die_sc "hashes differ between the ends"
	note "$INTEGRITY_BYTES each way in $(w "$lc" 18) s, $(w "$lc" 20 | tr -d :) MB/s"
	assert_carried "$EXPECT" 2 integrity
	rxe_check pair
	[ "$MODE" != rdmasock ] || [ "$(st "bytes_sent.$EXPECT")" -ge $((2 * bytes)) ] ||
		die_sc "$EXPECT sent $(st "bytes_sent.$EXPECT") bytes, want >= $((2 * bytes))"
}

# 5. non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, then 1 MiB echoed byte-exact
# (the server is vm_probe's blocking echo, which every preload handles).
sc_nbconnect() {
	local port=7400 spid rc
	STATS=/tmp/stats.nbconnect.jsonl
	rxe_mark
	pre_bg "$RSK_VM_PROBE" serve "$SRV" $port >/tmp/nb-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid"
	pre 30 "$RSK_VM_NBCONNECT" "$SRV" $port 1048576 >/tmp/nb-c.out 2>&1
	rc=$?
	cat /tmp/nb-c.out
	[ $rc = 0 ] && grep -q ': ok$' /tmp/nb-c.out ||
		die_sc "nbconnect: $(status_str $rc); $(grep -h nbconnect: /tmp/nb-c.out | head -n 1)"
	wait_bg "$spid" 10 || die_sc "echo server: $(status_str $?); $(cat /tmp/nb-s.out)"
	note "$(sed -n 's/^nbconnect: \(.*\): ok$/\1/p' /tmp/nb-c.out)"
	assert_carried "$EXPECT" 2
	rxe_check pair
}

# mixed SIDE: one byte-exact exchange between a preloaded and a plain mixed_peer; SIDE is
# the one preloaded (server or client). Expected: the kernel carries it (fallback).
mixed() {
	local side=$1 port spid rc
	STATS=/tmp/stats.mixed_$side.jsonl
	port=$([ "$side" = server ] && echo 7500 || echo 7501)
	"$PROGS/mixed_peer" gen server /tmp/want_s "$MIXED_BYTES" || die_sc "gen"
	"$PROGS/mixed_peer" gen client /tmp/want_c "$MIXED_BYTES" || die_sc "gen"
	rxe_mark
	if [ "$side" = server ]; then
		pre_bg "$PROGS/mixed_peer" server "$port" /tmp/got_s "$MIXED_BYTES" >/tmp/mixed-s.out 2>&1
	else
		plain_bg "$PROGS/mixed_peer" server "$port" /tmp/got_s "$MIXED_BYTES" >/tmp/mixed-s.out 2>&1
	fi
	spid=$BG_PID
	wait_listen "$SRV" "$port" 20 "$spid"
	if [ "$side" = client ]; then
		pre 30 "$PROGS/mixed_peer" client "$port" /tmp/got_c "$MIXED_BYTES" >/tmp/mixed-c.out 2>&1
	else
		plain 30 "$PROGS/mixed_peer" client "$port" /tmp/got_c "$MIXED_BYTES" >/tmp/mixed-c.out 2>&1
	fi
	rc=$?
	cat /tmp/mixed-c.out
	[ $rc = 0 ] || die_sc "the $([ "$side" = client ] && echo preloaded || echo plain) client: $(status_str $rc); $(grep -h 'mixed_peer\[' /tmp/mixed-c.out | head -n 1)"
	wait_bg "$spid" 15 || die_sc "the server: $(status_str $?); $(cat /tmp/mixed-s.out)"
	cat /tmp/mixed-s.out
	grep -q "^mixed_peer: client sent $MIXED_BYTES received $MIXED_BYTES: ok$" /tmp/mixed-c.out &&
		grep -q "^mixed_peer: server sent $MIXED_BYTES received $MIXED_BYTES: ok$" /tmp/mixed-s.out ||
		die_sc "an end did not move $MIXED_BYTES bytes each way"
	cmp /tmp/got_s /tmp/want_c && cmp /tmp/got_c /tmp/want_s || die_sc "bytes differ"
	note "$MIXED_BYTES B each way byte-exact"
	assert_carried kernel 1 mixed_peer
	[ "$MODE" != rdmasock ] || [ "$(st lines)" = 1 ] ||
		die_sc "$(st lines) stats lines from mixed_peer, want 1 (the preloaded end)"
	assert_fallback_counted
	RSK_CHECK_BYTES=$MIXED_BYTES rxe_check fallback
}

# 6. mixed peers: a plain client to a preloaded server, a preloaded client to a plain server.
sc_mixed_plain_client() { mixed server; }
sc_mixed_plain_server() { mixed client; }

# 7. SIGKILL of one side (test/progs/peerdeath): the blocked survivor gets EOF or
# ECONNRESET within 2 s (the peer is a second preloaded process, exec'd by peerdeath).
peerdeath() {
	local s=$1 rc
	STATS=/tmp/stats.peerdeath_$s.jsonl
	export PEERDEATH_LIMIT=2
	rxe_mark
	pre 25 "$PROGS/peerdeath" "$s" >"/tmp/pd-$s.out" 2>&1
	rc=$?
	cat "/tmp/pd-$s.out"
	if [ $rc != 0 ] || ! grep -q "^peerdeath: $s: .*: ok$" "/tmp/pd-$s.out"; then
		die_sc "$(status_str $rc); $(grep -h 'peerdeath' "/tmp/pd-$s.out" | head -n 1)"
	fi
	note "$(grep -h '^peerdeath: ' "/tmp/pd-$s.out" | sed 's/^peerdeath: //; s/: ok$//' |
		awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $0 }')"
	# the killed peer writes no stats line; ours counts the one connection
	assert_carried "$EXPECT" 1 peerdeath
	rxe_check pair
}

# 7b. A peer's last writes (test/progs/lastwords): a preloaded sender writes 100,000 bytes
# (writes of 1 B to 20 KB) and ends by close, exit, _exit, SIGKILL, SIGSEGV, SO_LINGER 0,
# close over unread data or shutdown(SHUT_RDWR) with its fd kept open; the preloaded reader
# must print the line the same program prints over kernel TCP in this guest (every byte,
# then EOF or ECONNRESET). Both ends preloaded. stdio_kill turns the roles: a stdio reader
# (fdopen before its first byte: a verbs relay, in its own process) SIGKILLed 300 ms after
# it read everything must read as a FIN (EOF): the relay gives its consumed credits back
# once the application has read the pipe.
# Every mode must give the kernel's line, kill and segv included: a verbs sender holds no
# byte in user memory after send() returned for it (no Nagle stage survives a SIGKILL), and
# the reader tells the dead sender's end from a reset by its credit ledger (docs/design.md,
# "How a connection ends").
LASTWORDS_MODES="close exit _exit kill segv linger0 unread shutrdwr stdio_kill"
sc_lastwords() {
	local m want got bad="" seen=""
	STATS=/tmp/stats.lastwords.jsonl
	rxe_mark
	for m in $LASTWORDS_MODES; do
		want=$(plain 20 "$PROGS/lastwords" "$m" 2>&1) || die_sc "lastwords $m over kernel TCP: $want"
		got=$(pre 20 "$PROGS/lastwords" "$m" 2>&1)
		echo "kernel:    $want"
		echo "preloaded: $got"
		if [ "$got" = "$want" ]; then
			seen="$seen $m"
		else
			bad="$bad; $m: '${got#lastwords: }', kernel '${want#lastwords: $m: }'"
		fi
	done
	note "as the kernel:${seen:- none}"
	[ -z "$bad" ] || die_sc "differs from kernel TCP${bad}"
	# the reader writes a stats line in every mode (a killed sender does not)
	assert_carried "$EXPECT" 8 lastwords
	rxe_check pair
}

# 7b2. close() under a call (test/progs/close_busy.c): a thread inside recv, or inside a write
# blocked on a full window, while the main thread closes the socket. The connection lives
# until the call returns, as the kernel's socket does: the peer sees no end before, the
# reader gets the peer's later bytes or its EOF, the writer's 16 MiB all arrive, in order,
# then EOF. And a server that closes and returns from main with a thread still in recv: its
# client reads the 100,000 bytes, then EOF, and the server exits 0.
sc_close_busy() {
	local m out port=7600 spid rc
	STATS=/tmp/stats.close_busy.jsonl
	rxe_mark
	for m in reader reader_eof writer; do
		out=$(pre 60 "$PROGS/close_busy" $m $port 2>&1)
		rc=$?
		echo "$m: $out"
		[ $rc = 0 ] && [ "$out" = "close_busy: $m: ok" ] ||
			die_sc "$m: $(status_str $rc); $(head -n 1 <<<"$out" | cut -c1-160)"
		port=$((port + 1))
	done
	pre_bg "$PROGS/close_busy" exit $port >/tmp/cb-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid" /tmp/cb-s.out
	out=$(pre 40 "$PROGS/close_busy" client $port 2>&1)
	echo "client: $out"
	[ "$out" = "close_busy: client: ok" ] || die_sc "client: $(head -n 1 <<<"$out" | cut -c1-160)"
	wait_bg "$spid" 20
	rc=$?
	[ $rc = 0 ] && grep -qx "close_busy: exit: ok" /tmp/cb-s.out ||
		die_sc "the exiting server: $(status_str $rc); $(tail -n 1 /tmp/cb-s.out | cut -c1-160)"
	note "as the kernel: reader reader_eof writer exit"
	assert_carried "$EXPECT" 8 close_busy
	rxe_check pair
}

# 7c. Nagle over verbs (test/progs/nagle.c, both ends in one process): by default
# (RDMASOCK_COALESCE=safe) a verbs stream stages nothing, since a sender killed with a stage
# in its own memory would lose it; with RDMASOCK_COALESCE=always small writes behind an unread
# one are merged as on shm. nagle checks every byte and its own ok line in each mode.
sc_coalesce() {
	local m out rc n want
	for VM_COALESCE in safe always; do
		STATS=/tmp/stats.coalesce_$VM_COALESCE.jsonl
		rxe_mark
		for m in coalesce cork waitpush; do
			out=$(pre 20 "$PROGS/nagle" "$m" 2>&1)
			rc=$?
			echo "$VM_COALESCE $m: $out"
			[ $rc = 0 ] && grep -q "^nagle: $m: ok" <<<"$out" ||
				die_sc "nagle $m with RDMASOCK_COALESCE=$VM_COALESCE: $(first_error <(echo "$out"))"
		done
		assert_carried "$EXPECT" 6 nagle
		rxe_check pair
		[ "$MODE" = rdmasock ] || continue
		n=$(grep -o '"writes_coalesced":[0-9]*' "$STATS" | awk -F: '{s += $2} END {print s + 0}')
		note "$VM_COALESCE: $n writes coalesced"
		if [ "$VM_COALESCE" = safe ]; then
			[ "$n" = 0 ] || die_sc "RDMASOCK_COALESCE=safe staged $n writes over $EXPECT"
		else
			want=$((32 + 3)) # coalesce: all but the first two of 64; cork: three at least
			[ "$n" -ge $want ] || die_sc "RDMASOCK_COALESCE=always coalesced $n writes, want >= $want"
		fi
	done
	unset VM_COALESCE
}

# 8. TCP first, the default policy for verbs: a redis-benchmark making a new connection per
# request (-k 0) stays on TCP (each counted tcp_first: an rdma_cm setup per request would
# cost more than it earns); one keeping its connections moves them onto verbs mid-use.
sc_tcpfirst_redis() {
	local port=6391 spid rc f out rps
	STATS=/tmp/stats.tcpfirst-redis.jsonl
	VM_TCP_FIRST=auto
	pre_bg redis-server --bind "$SRV" --port $port --save '' --appendonly no \
		--protected-mode no >/tmp/redis-server-tf.log 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid" /tmp/redis-server-tf.log
	for f in k0 keep; do
		out=/tmp/redis-tf-$f.out
		if [ $f = k0 ]; then
			# A connection per request lives well under the default 5 ms on hardware;
			# under TCG it takes tens of ms, so the age threshold is scaled to match.
			VM_UPGRADE_MS=200 watched pre 40 "$spid" redis-benchmark -h "$SRV" -p $port \
				-c 2 -n 200 -k 0 -t ping_inline -q >"$out" 2>&1
		else
			watched pre 40 "$spid" redis-benchmark -h "$SRV" -p $port -c 4 -n "$REDIS_N" \
				-t set,get -q >"$out" 2>&1
		fi
		rc=$?
		rps=$(tr '\r' '\n' <"$out" | sed -En 's/^ *([A-Z_]+): ([0-9.]+) requests per second.*/\1 \2/p' |
			tr '\n' ' ')
		if [ $rc != 0 ] || [ -z "$rps" ]; then
			tail -n 40 "$out" /tmp/redis-server-tf.log | tr '\r' '\n' | tail -n 80 >&2
			die_sc "redis-benchmark $f: $(why_failed $rc); $(first_error "$out")"
		fi
		note "$f: ${rps% } rps"
		if [ "$MODE" = rdmasock ] && [ $f = k0 ]; then
			stats_load redis-benchmark
			note "-k 0: kernel $(st connections.kernel) conns, tcp_first $(st fallbacks.tcp_first), verbs $(st connections.verbs)"
			[ "$(st connections.verbs)" = 0 ] && [ "$(st fallbacks.tcp_first)" -ge 200 ] ||
				die_sc "short connections did not all stay on TCP"
			: >"$STATS"
		fi
	done
	VM_TCP_FIRST=
	stop_bg "$spid" TERM 20 || die_sc "redis-server did not stop cleanly ($(status_str $?))"
	[ "$MODE" = rdmasock ] || return 0
	stats_load redis-benchmark
	note "keep-alive: verbs $(st connections.verbs) conns, $(st bytes_sent.verbs) B on verbs, $(st bytes_sent.kernel) B on TCP first"
	[ "$(st connections.verbs)" -ge 4 ] || die_sc "the keep-alive connections did not move to verbs"
	[ "$(st bytes_sent.verbs)" -gt "$(st bytes_sent.kernel)" ] || die_sc "verbs carried less than TCP"
}

# 9. TCP first, moving after 1 MiB while 64 MiB go each way at once (integrity): byte-exact,
# both ends end on verbs, and the bytes split between TCP and verbs.
sc_tcpfirst_integrity() {
	local port=7301 spid rc bytes=$((64 << 20))
	STATS=/tmp/stats.tcpfirst-integrity.jsonl
	VM_TCP_FIRST=on VM_UPGRADE_BYTES=1048576 VM_UPGRADE_MS=600000 # the byte threshold decides
	export INTEGRITY_TIME_LIMIT=$INTEGRITY_SECS
	pre_bg "$PROGS/integrity" server $port >/tmp/integrity-tf-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid"
	watched pre $((INTEGRITY_SECS + 5)) "" "$PROGS/integrity" client $port $bytes \
		>/tmp/integrity-tf-c.out 2>&1
	rc=$?
	VM_TCP_FIRST= VM_UPGRADE_BYTES= VM_UPGRADE_MS=
	[ $rc = 0 ] || kill -TERM "$spid" 2>/dev/null
	wait_bg "$spid" 20
	[ $rc = 0 ] || die_sc "integrity client: $(why_failed $rc); $(first_error /tmp/integrity-tf-c.out /tmp/integrity-tf-s.out)"
	grep -q '^integrity: client .*: ok$' /tmp/integrity-tf-c.out || die_sc "client did not verify"
	grep -q '^integrity: server .*: ok$' /tmp/integrity-tf-s.out || die_sc "server did not verify"
	[ "$MODE" = rdmasock ] || return 0
	stats_load integrity
	note "verbs $(st connections.verbs) conns; sent: TCP $(st bytes_sent.kernel) B, verbs $(st bytes_sent.verbs) B"
	# A server socket two threads use never moves (docs/design.md, TCP first): integrity's
	# reader and writer keep this one on TCP, byte-exact. Either both ends moved or none did.
	[ "$(st connections.verbs)" = 0 ] && [ "$(st connections.kernel)" = 2 ] && return 0
	[ "$(st connections.verbs)" = 2 ] || die_sc "one end moved to verbs and the other did not"
	# The client moves once its TCP part carried 1 MiB (sent and received). The stats count
	# that part from tcp_info (bytes the peer acknowledged) as the fd goes, which trails what
	# was written by whatever was in flight: a quarter of the threshold is the floor.
	[ "$(st bytes_sent.kernel)" -ge 262144 ] && [ "$(st bytes_sent.verbs)" -ge $((bytes)) ] ||
		die_sc "the bytes did not split at the move"
}

# 14. hidden fds (issue 9): RSK_VM_FDS_N (100) verbs connections from one client process to
# one epoll echo server (connscale idle against connserver: an echo each, 1 s idle, a second
# echo round). Per connection, each process may hold 2 fds: the application's and at most one
# hidden (the readiness ctl end); fds the library opens once per process (shared completion
# and rdma_cm channels, the event loop's) are allowed 16 in all. Counted from /proc/PID/fd
# before and while holding them.
sc_fds() {
	local port=7500 n=${RSK_VM_FDS_N:-100} spid rc fc fs
	STATS=/tmp/stats.fds.jsonl
	rxe_mark
	pre_bg "$PROGS/connserver" $port --seconds 90 >/tmp/fds-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid" /tmp/fds-s.out
	pre 80 "$PROGS/connscale" idle $port "$n" "$spid" >/tmp/fds-c.out 2>&1
	rc=$?
	grep -E '^(idle|client|server)' /tmp/fds-c.out
	stop_bg "$spid" TERM 10 || die_sc "connserver: $(status_str $?); $(tail -n 2 /tmp/fds-s.out)"
	[ $rc = 0 ] || die_sc "connscale idle: $(status_str $rc); $(first_error /tmp/fds-c.out)"
	fc=$(sed -n 's/.* fds_client=\([0-9.]*\).*/\1/p' /tmp/fds-c.out)
	fs=$(sed -n 's/.* fds_server=\([0-9.]*\).*/\1/p' /tmp/fds-c.out)
	[ -n "$fc" ] && [ -n "$fs" ] || die_sc "no per-connection fd counts from connscale"
	note "$n conns: fds per connection client $fc, server $fs"
	# the bound is librdmasock's (issue 9); another preload's count is only reported
	[ "$MODE" != rsocket ] && [ "$MODE" != other ] ||
		{ rxe_check pair; return 0; }
	awk -v c="$fc" -v s="$fs" -v n="$n" 'BEGIN { m = 2 + 16 / n; exit !(c <= m && s <= m) }' ||
		die_sc "more than 2 fds per connection (client $fc, server $fs; allowed 2 + 16/$n)"
	assert_carried "$EXPECT" $((2 * n))
	rxe_check pair
}

# 15. churn (issue 9): RSK_VM_CHURN_N (1,000) cycles of connect + 32-byte echo + close, 10 at
# once, after a warm-up of a tenth, from one client process (connscale churn: one epoll loop,
# non-blocking connects) to one epoll echo server (connserver). Every connection is set up on
# verbs at connect (TCP first is off in every scenario here). connscale fails on any failed
# cycle (reset, EOF, a wrong or missing echo, a hang) and when fds, threads or shared mappings
# of either process grew, or its RSS by more than 4 MiB, from after the warm-up to the end;
# here the server must have accepted every connection with no reset or error, and both
# processes must count every one of them on verbs. Aging is not judged at this size.
sc_churn() {
	local port=7600 n=${RSK_VM_CHURN_N:-1000} spid rc line srv k v started
	STATS=/tmp/stats.churn.jsonl
	[ "$MODE" = rdmasock ] || skip_scenario "judges librdmasock's transport counts only"
	rxe_mark
	pre_bg "$PROGS/connserver" $port --seconds $((CHURN_SECS + 30)) >/tmp/churn-s.out 2>&1
	spid=$BG_PID
	wait_listen "$SRV" $port 20 "$spid" /tmp/churn-s.out
	export CHURN_AGING_CHECK=0
	pre $((CHURN_SECS + 10)) "$PROGS/connscale" churn $port "$n" 10 "$spid" "$CHURN_SECS" \
		>/tmp/churn-c.out 2>&1
	rc=$?
	unset CHURN_AGING_CHECK
	grep -E '^churn: (cycles|ok|FAIL|per tenth)|after (the run|warm-up)|leaked|grew|files in' /tmp/churn-c.out
	stop_bg "$spid" TERM 10 || die_sc "connserver: $(status_str $?); $(tail -n 2 /tmp/churn-s.out)"
	srv=$(grep '^connserver: accepted=' /tmp/churn-s.out) || die_sc "no count from connserver"
	echo "$srv"
	line=$(grep '^churn: cycles=' /tmp/churn-c.out) ||
		die_sc "connscale churn: $(status_str $rc); $(first_error /tmp/churn-c.out)"
	[ $rc = 0 ] || die_sc "connscale churn: $(status_str $rc); $(first_error /tmp/churn-c.out)"
	for k in failed reset eof hang unfinished; do
		v=$(echo "$line" | sed -n "s/.* $k=\([0-9]*\).*/\1/p")
		[ "$v" = 0 ] || die_sc "churn: $k=$v"
	done
	for k in resets errors accept_errors open; do
		v=$(echo "$srv" | sed -n "s/.* $k=\([0-9]*\).*/\1/p")
		[ "$v" = 0 ] || die_sc "connserver: $k=$v"
	done
	started=$(echo "$line" | sed -n 's/.* started=\([0-9]*\).*/\1/p')
	[ -n "$started" ] && [ "$started" -gt "$n" ] || die_sc "churn started ${started:-no} connections"
	[ "$(echo "$srv" | sed -n 's/.*accepted=\([0-9]*\).*/\1/p')" = "$started" ] ||
		die_sc "the client started $started connections, the server: $srv"
	note "$started conns, $(echo "$line" | sed -n 's/.*conn_per_s=\([0-9]*\).*/\1/p') conn/s, no failure or reset; fds, threads, RSS steady"
	assert_carried "$EXPECT" $((2 * started))
	stats_load connscale
	[ "$(st "connections.$EXPECT")" = "$started" ] || die_sc "connscale counted $(st "connections.$EXPECT") on $EXPECT of $started"
	stats_load connserver
	[ "$(st "connections.$EXPECT")" = "$started" ] || die_sc "connserver counted $(st "connections.$EXPECT") on $EXPECT of $started"
	rxe_check pair
}

# run_sc NAME: scenario NAME (function sc_NAME or a command) and its RSK-VM-VERBS line.
run_sc() {
	local name=$1 p f t0 res secs lim var
	shift
	if [ -n "${RSK_VM_ONLY:-}" ] && ! [[ $name =~ $RSK_VM_ONLY ]]; then
		return 0
	fi
	p=$RSK_RESULTS_PASS f=$RSK_RESULTS_FAIL
	CUR=$name
	: >"$NOTES/$name"
	t0=$EPOCHREALTIME
	scenario "$name" "$@"
	secs=$(bc_sub "$EPOCHREALTIME" "$t0")
	if [ "$RSK_RESULTS_PASS" != "$p" ]; then
		res=PASS
	elif [ "$RSK_RESULTS_FAIL" != "$f" ]; then
		res=FAIL
		var=SCENARIO_TIMEOUT_$name
		lim=${!var:-60}
		[ "${secs%.*}" -lt "$lim" ] || echo "FAIL: timed out after the scenario's bound of $lim s" >>"$NOTES/$name"
	else
		res=SKIP
	fi
	LINES_OUT+=("$(printf 'RSK-VM-VERBS %s %-24s %s %6.1fs: %s' "$LABEL" "$name" "$res" "$secs" \
		"$(awk '{ printf "%s%s", (NR > 1 ? "; " : ""), $0 }' "$NOTES/$name")")")
	echo "${LINES_OUT[-1]}"
}

echo "vm_verbs: mode $MODE, preload ${PRELOAD:-none}, transport ${RSK_VM_TRANSPORT:-verbs}," \
	"expect $EXPECT ($CARRY), integrity $INTEGRITY_BYTES, redis -n $REDIS_N"
[ "$MODE" = kernel ] || [ -e "$PRELOAD" ] || { echo "no preload library $PRELOAD"; exit 1; }
for p in integrity mixed_peer peerdeath lastwords connserver connscale nagle; do
	[ -x "$PROGS/$p" ] || { echo "test program $PROGS/$p missing"; exit 1; }
done
LINES_OUT=()

run_sc redis sc_redis
run_sc iperf3 sc_iperf3
run_sc sockperf_pp sc_sockperf_pp
run_sc sockperf_tp sc_sockperf_tp
run_sc integrity sc_integrity
run_sc nbconnect sc_nbconnect
run_sc mixed_plain_client sc_mixed_plain_client
run_sc mixed_plain_server sc_mixed_plain_server
for s in server_recv server_epoll client_recv client_send; do
	run_sc "peerdeath_$s" peerdeath "$s"
done
run_sc lastwords sc_lastwords
run_sc close_busy sc_close_busy
run_sc coalesce sc_coalesce
run_sc tcpfirst_redis sc_tcpfirst_redis
run_sc tcpfirst_integrity sc_tcpfirst_integrity
run_sc fds sc_fds
run_sc churn sc_churn

echo "=== vm_verbs summary (mode $LABEL)"
printf '%s\n' "${LINES_OUT[@]}"
rsk_summary
