# Role: guest side of the vm_smoke test (run by /init with bash inside the Soft-RoCE guest).
# Proves the guest is fit for the library's RDMA tests: rxe devices exist, rdma_cm traffic
# crosses the veth pair as RoCE (sent_pkts rises on both devices), kernel TCP crosses it too
# without touching rxe, the facilities the library uses (memfd, shm, abstract unix sockets,
# unlimited memlock) work, rsocket's preload library carries an unmodified blocking program,
# and the applications later scenarios use start with the libraries run.sh copied.
#
# Env (from test_vm_smoke.sh via run.sh --env): RSK_VM_PROBE (vm_probe's path),
# RSK_RSPRELOAD (librspreload.so's path, optional).
# shellcheck source=../guest-lib.sh
. /rsk/guest-lib.sh

PROBE=${RSK_VM_PROBE:-}

# rxe_dev_sent DEV: sent_pkts of one rxe device.
rxe_dev_sent() {
	cat "/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts"
}

# retry N CMD...: run CMD until it succeeds, at most N times, 0.25 s apart. rdma_cm listeners
# do not show in /proc/net/tcp, so a client's first attempt may beat its server.
retry() {
	local n=$1 i
	shift
	for ((i = 1; i <= n; i++)); do
		"$@" && return 0
		sleep 0.25
	done
	return 1
}

# both_rxe_rose B0 B1: both devices sent, i.e. the traffic crossed the pair (loopback inside
# one rxe device would raise only that device's counter).
both_rxe_rose() {
	local a b
	a=$(rxe_dev_sent rxe0)
	b=$(rxe_dev_sent rxe1)
	echo "sent_pkts rxe0 $1 -> $a, rxe1 $2 -> $b"
	[ "$a" -gt "$1" ] && [ "$b" -gt "$2" ]
}

sc_devices() {
	local out
	out=$(ibv_devices) || return 1
	echo "$out"
	grep -qw rxe0 <<<"$out" && grep -qw rxe1 <<<"$out" || return 1
	ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || return 1
	ibv_devinfo -d rxe1 | grep -q PORT_ACTIVE || return 1
	rdma link show
}

sc_env() {
	[ -n "$PROBE" ] || skip_scenario "no vm_probe"
	"$PROBE" env || return 1
	[ "$(ulimit -l)" = unlimited ] || return 1
	[ -w /proc/sys/net/ipv4/ip_local_port_range ] || return 1
	[ -e /sys/class/infiniband/rxe0 ] || return 1
	echo x >/tmp/smoke.$$ && rm /tmp/smoke.$$ || return 1
	echo x >/dev/shm/smoke.$$ && rm /dev/shm/smoke.$$ || return 1
	echo "tmp, /dev/shm writable; /proc/sys, /sys/class/infiniband visible"
}

sc_rping() {
	local b0 b1 spid
	b0=$(rxe_dev_sent rxe0)
	b1=$(rxe_dev_sent rxe1)
	rping -s -a "$RSK_ADDR2" -p 7471 -C 10 -V &
	spid=$!
	retry 40 rping -c -a "$RSK_ADDR2" -p 7471 -C 10 -V || return 1
	wait "$spid" || return 1
	both_rxe_rose "$b0" "$b1"
}

sc_ib_send_bw() {
	local b0 b1 try
	b0=$(rxe_dev_sent rxe0)
	b1=$(rxe_dev_sent rxe1)
	# perftest calibrates its cycle clock before it reports; on an emulated CPU under load
	# that check can fail ("r^2 < 0.9, Can't produce a report") after the transfer, and the
	# single-shot server is then gone. So each attempt gets a fresh server.
	for try in 1 2 3; do
		ib_bw_once && { both_rxe_rose "$b0" "$b1"; return; }
		echo "ib_send_bw attempt $try failed" >&2
		cat /tmp/bw-server.log /tmp/bw-client.log >&2
	done
	return 1
}

# ib_bw_once: one server and one client run of ib_send_bw; both must exit 0. The client
# retries while its server lives (rdma_cm listeners do not show in /proc/net/tcp), but not
# after it crashed or hung (a signal, or its 25 s bound): perftest's client once died of
# SIGSEGV under TCG (CI, 2026-12-06; no library in it), and every retry against the server
# it left then hung until the scenario's bound. That attempt ends, and the next one gets a
# fresh server.
ib_bw_once() {
	local spid i rc=1 crc
	ib_send_bw -R -d rxe1 -n 500 -s 4096 -p 18515 >/tmp/bw-server.log 2>&1 &
	spid=$!
	for ((i = 1; i <= 40; i++)); do
		timeout -s KILL 25 ib_send_bw -R -d rxe0 -n 500 -s 4096 -p 18515 "$RSK_ADDR2" \
			>/tmp/bw-client.log 2>&1
		crc=$?
		[ "$crc" = 0 ] && { rc=0; break; }
		[ "$crc" -ge 124 ] && { echo "ib_send_bw client: status $crc" >&2; break; }
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.25
	done
	[ "$rc" = 0 ] || kill "$spid" 2>/dev/null
	wait "$spid" || rc=1
	return "$rc"
}

# Kernel TCP across the pair (.1 -> .2 and .2 -> .1): the veth counters rise, rxe's do not.
sc_tcp_kernel() {
	[ -n "$PROBE" ] || skip_scenario "no vm_probe"
	local before after v0 v1 spid
	before=$(rxe_sent_pkts)
	v0=$(cat /sys/class/net/veth0/statistics/tx_bytes)
	"$PROBE" serve "$RSK_ADDR2" 5001 &
	spid=$!
	wait_port_addr "$RSK_ADDR2" 5001 10 || return 1
	"$PROBE" client "$RSK_ADDR2" 5001 1000000 || return 1
	wait "$spid" || return 1
	v1=$(cat /sys/class/net/veth1/statistics/tx_bytes)
	"$PROBE" serve "$RSK_ADDR1" 5002 &
	spid=$!
	wait_port_addr "$RSK_ADDR1" 5002 10 || return 1
	"$PROBE" client "$RSK_ADDR1" 5002 1000000 "$RSK_ADDR2" || return 1
	wait "$spid" || return 1
	after=$(rxe_sent_pkts)
	echo "veth0 tx_bytes $v0 -> $(cat /sys/class/net/veth0/statistics/tx_bytes)," \
		"veth1 tx_bytes -> $(cat /sys/class/net/veth1/statistics/tx_bytes) (from $v1 mid-test)"
	echo "kernel TCP: rxe sent_pkts $before -> $after"
	[ "$(cat /sys/class/net/veth0/statistics/tx_bytes)" -gt $((v0 + 1000000)) ] || return 1
	[ "$after" = "$before" ] || { echo "sent_pkts moved for kernel TCP" >&2; return 1; }
}

# An unmodified blocking TCP program under rsocket's preload: the stream goes over RDMA.
sc_rsocket_preload() {
	[ -n "$PROBE" ] || skip_scenario "no vm_probe"
	[ -e "${RSK_RSPRELOAD:-/nonexistent}" ] || skip_scenario "no librspreload.so"
	local b0 b1 spid
	b0=$(rxe_dev_sent rxe0)
	b1=$(rxe_dev_sent rxe1)
	LD_PRELOAD=$RSK_RSPRELOAD "$PROBE" serve "$RSK_ADDR2" 5003 &
	spid=$!
	retry 40 env LD_PRELOAD="$RSK_RSPRELOAD" "$PROBE" client "$RSK_ADDR2" 5003 1000000 || return 1
	wait "$spid" || return 1
	both_rxe_rose "$b0" "$b1"
}

# The applications later scenarios use: each starts in the guest and talks over the pair.
sc_apps() {
	local n=0 spid out
	if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
		redis-server --bind "$RSK_ADDR2" --port 6390 --save '' --appendonly no \
			--protected-mode no >/tmp/redis.log 2>&1 &
		spid=$!
		wait_port_addr "$RSK_ADDR2" 6390 20 || { cat /tmp/redis.log; return 1; }
		out=$(redis-cli -h "$RSK_ADDR2" -p 6390 ping) && [ "$out" = PONG ] || return 1
		if command -v redis-benchmark >/dev/null; then
			redis-benchmark -h "$RSK_ADDR2" -p 6390 -n 200 -c 2 -t ping -q || return 1
		fi
		kill "$spid"
		wait "$spid"
		echo "redis ok"
		n=$((n + 1))
	fi
	if command -v iperf3 >/dev/null; then
		iperf3 -s -B "$RSK_ADDR2" -p 5201 -1 >/tmp/iperf3.log 2>&1 &
		spid=$!
		wait_port_addr "$RSK_ADDR2" 5201 20 || { cat /tmp/iperf3.log; return 1; }
		iperf3 -c "$RSK_ADDR2" -p 5201 -t 1 -f m | tail -n 4 || return 1
		wait "$spid" || { cat /tmp/iperf3.log; return 1; }
		n=$((n + 1))
	fi
	if command -v sockperf >/dev/null; then
		sockperf server -i "$RSK_ADDR2" -p 11111 --tcp >/tmp/sockperf.log 2>&1 &
		spid=$!
		wait_port_addr "$RSK_ADDR2" 11111 20 || { cat /tmp/sockperf.log; return 1; }
		sockperf ping-pong -i "$RSK_ADDR2" -p 11111 --tcp -t 1 | grep -E 'avg-latency|Summary' || return 1
		kill "$spid"
		wait "$spid"
		n=$((n + 1))
	fi
	if command -v socat >/dev/null; then
		socat TCP-LISTEN:5005,bind="$RSK_ADDR2",reuseaddr EXEC:cat >/tmp/socat.log 2>&1 &
		spid=$!
		wait_port_addr "$RSK_ADDR2" 5005 20 || return 1
		out=$(echo hello-socat | socat -t 5 - TCP:"$RSK_ADDR2":5005) || return 1
		[ "$out" = hello-socat ] || { echo "socat echoed '$out'" >&2; return 1; }
		wait "$spid"
		echo "socat ok"
		n=$((n + 1))
	fi
	[ $n -gt 0 ] || skip_scenario "no application was copied in"
	echo "$n applications ok"
}

scenario devices sc_devices
scenario env sc_env
scenario rping sc_rping
# (up to 3 attempts, each a fresh server: the default 60 s bound fits one hung attempt only)
SCENARIO_TIMEOUT_ib_send_bw=${SCENARIO_TIMEOUT_ib_send_bw:-100}
scenario ib_send_bw sc_ib_send_bw
scenario tcp_kernel sc_tcp_kernel
scenario rsocket_preload sc_rsocket_preload
scenario apps sc_apps
rsk_summary
