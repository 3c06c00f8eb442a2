#!/usr/bin/env bash
# Two builds of the library on the two ends of one host (issues 9, 10): this one and
# rdmasock_next (RSK_TEST_PROTO_NEXT: every handshake version one up, as a later release
# would be). A connection between them stays on kernel TCP, decided before either end
# committed: the application sees nothing (no error, no reset, every byte), and the client
# counts it under fallback reason "version". For each start policy (RDMASOCK_TCP_FIRST off:
# set up at connect; on: start on TCP and move at the first call; auto), each way round:
#  1. control: each build with itself is accelerated (so the mixed cases are decisions),
#     and never counts a version fallback,
#  2. server of this build, client of the next: request/response byte-exact, both ends
#     kernel, the client's connections all "version", the kernel bytes all counted;
#  3. the same the other way round.
# Registered for shm and auto (test/integration/CMakeLists.txt).
. "$(dirname "$0")/lib.sh"
need python3
RSK_LIB_NEXT=${RSK_LIB_NEXT:?RSK_LIB_NEXT must name the rdmasock_next build}
[ -f "$RSK_LIB_NEXT" ] || fail "the next-version build $RSK_LIB_NEXT is missing (target rdmasock_next)"
PEER=$(dirname "$0")/version_mix_peer.py
CONNS=3
SRV_STATS=$RSK_TMP/srv.jsonl
CLI_STATS=$RSK_TMP/cli.jsonl

# sum FILE FIELD KEY: FIELD[KEY] summed over FILE's lines
sum() {
	RSK_STATS=$1 stats_get "$2" "$3" python3 # (python3 may be a wrapper script: its shells count nothing)
}

# preload LIB: LD_PRELOAD's value for LIB (behind a sanitizer's runtime in a sanitized run)
preload() {
	echo "${RSK_PRELOAD_FIRST:+$RSK_PRELOAD_FIRST }$1${RSK_PRELOAD_AFTER:+ $RSK_PRELOAD_AFTER}"
}

# run_pair SRVLIB CLILIB POLICY: the peer's server preloaded with SRVLIB, its client with
# CLILIB, both with RDMASOCK_TCP_FIRST=POLICY (moving at their first call when on TCP).
run_pair() {
	local srv=$1 cli=$2 policy=$3 port out
	: >"$SRV_STATS"
	: >"$CLI_STATS"
	port=$(free_port)
	start_bg srv env LD_PRELOAD="$(preload "$srv")" RDMASOCK_TRANSPORT="$RSK_TEST_TRANSPORT" \
		RDMASOCK_STATS="$SRV_STATS" RDMASOCK_TCP_FIRST="$policy" RDMASOCK_UPGRADE_MS=0 \
		RDMASOCK_UPGRADE_BYTES=1 RDMASOCK_LOG=debug python3 "$PEER" server "$port" "$CONNS"
	wait_port "$port"
	out=$(env LD_PRELOAD="$(preload "$cli")" RDMASOCK_TRANSPORT="$RSK_TEST_TRANSPORT" \
		RDMASOCK_STATS="$CLI_STATS" RDMASOCK_TCP_FIRST="$policy" RDMASOCK_UPGRADE_MS=0 \
		RDMASOCK_UPGRADE_BYTES=1 RDMASOCK_LOG=debug timeout 60 python3 "$PEER" client "$port" \
		"$CONNS" 2>"$RSK_TMP/cli.log") ||
		fail "$(basename "$srv") <- $(basename "$cli") ($policy): the client failed: $out $(cat "$RSK_TMP/cli.log"); server: $(cat "$RSK_TMP/srv.log")"
	wait_bg srv
	grep -q "^server ok $CONNS conns" "$RSK_TMP/srv.log" ||
		fail "$(basename "$srv") <- $(basename "$cli") ($policy): server: $(cat "$RSK_TMP/srv.log")"
	grep -q "^client ok $CONNS conns" <<<"$out" || fail "client said: $out $(cat "$RSK_TMP/cli.log")"
	CLI_SENT=$(sed -n 's/.* \([0-9]*\) bytes sent$/\1/p' <<<"$out")
}

# conns FILE TRANSPORT: connections counted on TRANSPORT in FILE
conns() {
	sum "$1" connections "$2"
}

assert_accelerated() { # control: the build accelerates itself, and never says "version"
	local f
	# (each: with TCP first too. A client that dialed while the server's accept looked, or
	# between that look and the server's socket joining the address map, stayed on TCP until
	# both were mended: CI saw 0 of 3 move once, here 1 run in 10 left one behind)
	for f in "$SRV_STATS" "$CLI_STATS"; do
		[ "$(conns "$f" "$RSK_EXPECT")" = "$CONNS" ] && [ "$(sum "$f" fallbacks version)" = 0 ] ||
			fail "$1: no connection on $RSK_EXPECT, or a version fallback: $(cat "$f")
$(both_sides)"
	done
}

# both_sides: both ends' stats and what their libraries said of the connections (debug),
# for a failure to be read from CI's log (a move missed once in hundreds of runs there).
both_sides() {
	echo "server stats: $(cat "$SRV_STATS")"
	echo "client stats: $(cat "$CLI_STATS")"
	echo "server log:"
	grep -v 'librdmasock [0-9.]*, transport' "$RSK_TMP/srv.log" | tail -n 60
	echo "client log:"
	grep -v 'librdmasock [0-9.]*, transport' "$RSK_TMP/cli.log" | tail -n 60
}

assert_kernel_version() { # mixed: both ends kernel, the client's reason version, bytes all there
	local f
	for f in "$SRV_STATS" "$CLI_STATS"; do
		[ "$(conns "$f" kernel)" = "$CONNS" ] && [ "$(conns "$f" "$RSK_EXPECT")" = 0 ] ||
			fail "$1: not every connection stayed on the kernel: $(cat "$f")
$(both_sides)"
	done
	[ "$(sum "$CLI_STATS" fallbacks version)" = "$CONNS" ] ||
		fail "$1: the client's fallback reason is not version for all $CONNS: $(cat "$CLI_STATS")"
	# (each response is as long as its request; bytes received would count the FIN too)
	[ "$(sum "$CLI_STATS" bytes_sent kernel)" = "$CLI_SENT" ] &&
		[ "$(sum "$SRV_STATS" bytes_sent kernel)" = "$CLI_SENT" ] ||
		fail "$1: $CLI_SENT bytes sent, not all counted on the kernel at both ends: $(cat "$CLI_STATS" "$SRV_STATS")"
}

[ "$RSK_EXPECT" = shm ] || skip "the same-host handshake is shm's (transport $RSK_TEST_TRANSPORT)"
for policy in off on auto; do
	run_pair "$RSK_LIB" "$RSK_LIB" "$policy"
	assert_accelerated "this build with itself ($policy)"
	run_pair "$RSK_LIB_NEXT" "$RSK_LIB_NEXT" "$policy"
	assert_accelerated "the next build with itself ($policy)"
	run_pair "$RSK_LIB" "$RSK_LIB_NEXT" "$policy"
	assert_kernel_version "server of this build, client of the next ($policy)"
	run_pair "$RSK_LIB_NEXT" "$RSK_LIB" "$policy"
	assert_kernel_version "server of the next build, client of this one ($policy)"
	echo "$policy: each build with itself on $RSK_EXPECT; mixed both ways on the kernel (version), $CLI_SENT bytes exact"
done
echo "version mix: ok"
