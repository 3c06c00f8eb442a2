# Role: guest side of ctest vm_engine (run by /init with bash inside the Soft-RoCE guest).
# The stream engine over real RC queue pairs (test_verbs: credits, one-way reader, FIN, RST,
# completion channel, 8 MiB each way), fork with verbs connections (verbs_fork, both ends
# preloaded: children get ENOTCONN, the parents' connections go on), and the fallbacks
# (refused, negative cache, no device, memlock), each counted by reason. The verbs
# scenarios assert that the rxe devices sent packets and the stats counted verbs.
#
# Env (from test_vm_engine.sh): RSK_TEST_VERBS, RSK_VERBS_FORK, RSK_LIB.
# shellcheck source=../guest-lib.sh
. /rsk/guest-lib.sh

# These scenarios are about connections set up at connect (fork with a live queue pair,
# the fallback of each setup step): TCP first, the verbs default, would keep them on the
# kernel at first. vm_verbs runs the move itself (tcpfirst_*).
export RDMASOCK_TCP_FIRST=off

sc_engine() {
	local before
	before=$(rxe_sent_pkts)
	"$RSK_TEST_VERBS" || return 1
	assert_rxe_rose "$before"
}

sc_fork() {
	local before stats=/tmp/fork.jsonl n
	before=$(rxe_sent_pkts)
	rm -f "$stats"
	LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS=$stats \
		"$RSK_VERBS_FORK" 192.0.2.2 7001 || return 1
	assert_rxe_rose "$before" || return 1
	# the client and the server each counted one verbs connection and nothing on the kernel
	n=$(grep -c '"connections":{"kernel":0,"shm":0,"verbs":1}' "$stats")
	echo "stats lines with one verbs connection: $n"
	cat "$stats"
	[ "$n" = 2 ]
}

# fb_count FILE REASON: the fallback count REASON in the (first) stats line of FILE.
fb_count() {
	grep -o "\"$2\":[0-9]*" "$1" | head -n1 | cut -d: -f2
}

# echo_via ADDR PORT STATS [VAR=VALUE...]: a preloaded bash sends a line through /dev/tcp
# and reads it back, twice over two connections (the negative cache is per process).
echo_via() {
	local addr=$1 port=$2 stats=$3
	shift 3
	env LD_PRELOAD="$RSK_LIB" RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS="$stats" \
		RDMASOCK_CONNECT_TIMEOUT_MS=2000 "$@" bash -c "for i in 1 2; do
			exec 3<>/dev/tcp/$addr/$port; echo hi >&3; read -r l <&3; [ \"\$l\" = hi ] || exit 1
			exec 3>&-; done"
}

# Every way verbs cannot be had is a fallback with its reason, and the bytes still flow.
sc_fallbacks() {
	local d=/tmp/fb
	rm -rf "$d" && mkdir -p "$d"
	socat TCP-LISTEN:7100,bind=192.0.2.2,reuseaddr,fork EXEC:cat &
	LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS=$d/srv.jsonl \
		socat TCP-LISTEN:7200,bind=192.0.2.2,reuseaddr,fork EXEC:cat &
	wait_port_addr 192.0.2.2 7100 10 && wait_port_addr 192.0.2.2 7200 10 || return 1
	# a plain server: rdma_cm is rejected, then remembered (second connection)
	echo_via 192.0.2.2 7100 "$d/a.jsonl" || return 1
	[ "$(fb_count "$d/a.jsonl" refused)" = 1 ] || { cat "$d/a.jsonl"; return 1; }
	[ "$(fb_count "$d/a.jsonl" negative_cache)" = 1 ] || { cat "$d/a.jsonl"; return 1; }
	# no such device
	echo_via 192.0.2.2 7200 "$d/c.jsonl" RDMASOCK_DEVICE=nosuch || return 1
	[ "$(fb_count "$d/c.jsonl" no_device)" = 2 ] || { cat "$d/c.jsonl"; return 1; }
	# rdma_cm cannot even resolve the address in 1 ms: timeout, then remembered
	echo_via 192.0.2.2 7200 "$d/e.jsonl" RDMASOCK_CONNECT_TIMEOUT_MS=1 || return 1
	[ "$(fb_count "$d/e.jsonl" timeout)" = 1 ] || { cat "$d/e.jsonl"; return 1; }
	[ "$(fb_count "$d/e.jsonl" negative_cache)" = 1 ] || { cat "$d/e.jsonl"; return 1; }
	# ulimit -l too low to register buffers (root must drop CAP_IPC_LOCK for it to apply)
	setpriv --inh-caps=-ipc_lock --ambient-caps=-ipc_lock --bounding-set=-ipc_lock \
		bash -c "ulimit -l 64; $(declare -f echo_via); RSK_LIB=$RSK_LIB echo_via 192.0.2.2 7200 $d/d.jsonl" ||
		return 1
	[ "$(fb_count "$d/d.jsonl" memlock)" = 2 ] || { cat "$d/d.jsonl"; return 1; }
	echo "refused, negative_cache, no_device, timeout, memlock: each counted, each connection worked"
}

# A fork-per-connection server (socat fork: the parent accepts, a forked child serves, the
# parent closes its copy unused): the connection is relayed through its socketpair by the
# parent (relay.c), so the child serves it and the client stays on verbs.
sc_fork_per_connection() {
	local d=/tmp/fpc i before
	rm -rf "$d" && mkdir -p "$d"
	before=$(rxe_sent_pkts)
	LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs \
		socat TCP-LISTEN:7400,bind=192.0.2.2,reuseaddr,fork EXEC:cat 2>"$d/srv.log" &
	wait_port_addr 192.0.2.2 7400 10 || return 1
	head -c 1048576 /dev/urandom >"$d/src"
	for i in 1 2 3; do
		LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS=$d/cli$i.jsonl \
			socat -t 5 - TCP:192.0.2.2:7400 <"$d/src" >"$d/back$i" || return 1
		cmp "$d/src" "$d/back$i" || { cat "$d/srv.log"; return 1; }
		grep -q '"connections":{"kernel":0,"shm":0,"verbs":1}' "$d/cli$i.jsonl" ||
			{ cat "$d/cli$i.jsonl"; return 1; }
	done
	assert_rxe_rose "$before" || return 1
	echo "3 clients, 1 MiB each echoed by forked children over verbs (relayed), byte-exact"
}

# redis BGSAVE forks with verbs clients connected: every connection must go on working.
sc_bgsave() {
	local d=/tmp/bgsave before pre
	rm -rf "$d" && mkdir -p "$d"
	before=$(rxe_sent_pkts)
	pre="env LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS=$d/stats.jsonl"
	$pre redis-server --port 6390 --bind 192.0.2.2 --dir "$d" --save "" --appendonly no \
		--protected-mode no >"$d/server.log" 2>&1 &
	wait_port_addr 192.0.2.2 6390 20 || return 1
	$pre redis-cli -h 192.0.2.2 -p 6390 debug populate 20000 >/dev/null || return 1
	$pre redis-benchmark -h 192.0.2.2 -p 6390 -c 20 -n 20000 -t set,get -q >"$d/bench.log" 2>&1 &
	local bench=$!
	sleep 1
	$pre redis-cli -h 192.0.2.2 -p 6390 bgsave || return 1
	wait "$bench" || { cat "$d/bench.log"; return 1; }
	grep -q "GET: .*requests per second" "$d/bench.log" || { cat "$d/bench.log"; return 1; }
	for _ in $(seq 50); do
		$pre redis-cli -h 192.0.2.2 -p 6390 info persistence | grep -q "rdb_bgsave_in_progress:0" && break
		sleep 0.2
	done
	$pre redis-cli -h 192.0.2.2 -p 6390 info persistence | grep -q "rdb_last_bgsave_status:ok" ||
		return 1
	[ -s "$d/dump.rdb" ] || return 1
	$pre redis-cli -h 192.0.2.2 -p 6390 shutdown nosave >/dev/null 2>&1
	sleep 1
	assert_rxe_rose "$before" || return 1
	# the server counted its 20 benchmark clients (and the redis-cli ones) on verbs
	grep '"program":"redis-server"' "$d/stats.jsonl" | grep -o '"connections":{[^}]*}'
	grep '"program":"redis-server"' "$d/stats.jsonl" | grep -q '"kernel":0,"shm":0,"verbs":[1-9][0-9]' ||
		return 1
	echo "BGSAVE with verbs clients connected: benchmark completed, dump written"
}

# close() right after a large write: every byte still arrives, then EOF (TCP semantics).
sc_close_in_flight() {
	local d=/tmp/cif before pre
	rm -rf "$d" && mkdir -p "$d"
	before=$(rxe_sent_pkts)
	pre="env LD_PRELOAD=$RSK_LIB RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS=$d/stats.jsonl"
	head -c 8388608 /dev/urandom >"$d/src"
	$pre socat -u TCP-LISTEN:7300,bind=192.0.2.2,reuseaddr CREATE:"$d/dst" &
	local srv=$!
	wait_port_addr 192.0.2.2 7300 10 || return 1
	$pre socat -u FILE:"$d/src" TCP:192.0.2.2:7300 || return 1
	wait "$srv" || return 1
	cmp "$d/src" "$d/dst" || return 1
	assert_rxe_rose "$before" || return 1
	[ "$(grep -c '"verbs":1}' "$d/stats.jsonl")" -ge 2 ] || { cat "$d/stats.jsonl"; return 1; }
	echo "8 MiB written then closed at once: all arrived, then EOF"
}

SCENARIO_TIMEOUT_engine=240
scenario engine sc_engine
scenario fork sc_fork
scenario fallbacks sc_fallbacks
scenario close_in_flight sc_close_in_flight
scenario fork_per_connection sc_fork_per_connection
SCENARIO_TIMEOUT_bgsave=120
scenario bgsave sc_bgsave
rsk_summary
