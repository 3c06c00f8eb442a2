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
	env "$@" LD_PRELOAD="$RSK_LIB" RDMASOCK_TRANSPORT=verbs RDMASOCK_STATS="$stats" \
		RDMASOCK_CONNECT_TIMEOUT_MS=2000 bash -c "for i in 1 2; do
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
	# ulimit -l too low to register buffers (root must drop CAP_IPC_LOCK for it to apply)
	setpriv --inh-caps=-ipc_lock --ambient-caps=-ipc_lock --bounding-set=-ipc_lock \
		bash -c "ulimit -l 64; $(declare -f echo_via); RSK_LIB=$RSK_LIB echo_via 192.0.2.2 7200 $d/d.jsonl" ||
		return 1
	[ "$(fb_count "$d/d.jsonl" memlock)" = 2 ] || { cat "$d/d.jsonl"; return 1; }
	echo "refused, negative_cache, no_device, memlock: each counted, each connection worked"
}

SCENARIO_TIMEOUT_engine=240
scenario engine sc_engine
scenario fork sc_fork
scenario fallbacks sc_fallbacks
rsk_summary
