# Role: guest side of ctest vm_engine (run by /init with bash inside the Soft-RoCE guest).
# The stream engine over real RC queue pairs (test_verbs: credits, one-way reader, FIN, RST,
# completion channel, 8 MiB each way) and fork with verbs connections (verbs_fork, both
# ends preloaded: children get ENOTCONN, the parents' connections go on). Each asserts that
# the rxe devices sent packets, and verbs_fork that the stats counted verbs connections.
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

SCENARIO_TIMEOUT_engine=240
scenario engine sc_engine
scenario fork sc_fork
rsk_summary
