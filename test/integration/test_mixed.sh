#!/usr/bin/env bash
# Mixed peers, byte-exact: (a) a plain (not preloaded) client against a preloaded server,
# (b) a preloaded client against a plain server. Both ends of each pair (test/progs/
# mixed_peer.c) send 8 MiB of a known sequence in random-size writes while reading the
# other's until EOF, and store exactly what they received; the sha256 of each received file
# must equal that of the sequence the other end sent. The preloaded end's stats must show
# exactly one connection, carried by the kernel (99% of the bytes, at least 8 MiB each way),
# with the fallback reason no_peer (policy in the kernel variant) -- in the shm variant too.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/mixed_peer" ] || fail "test program mixed_peer not built in RSK_PROGS=$RSK_PROGS"
need sha256sum

BYTES=$((8 << 20))
if [ "$RSK_EXPECT" = kernel ]; then REASON=policy; else REASON=no_peer; fi


sum() { sha256sum "$1" | cut -d' ' -f1; }

"$RSK_PROGS/mixed_peer" gen server "$RSK_TMP/want_from_server" "$BYTES" || fail "gen"
"$RSK_PROGS/mixed_peer" gen client "$RSK_TMP/want_from_client" "$BYTES" || fail "gen"
WANT_S=$(sum "$RSK_TMP/want_from_server")
WANT_C=$(sum "$RSK_TMP/want_from_client")
[ "$WANT_S" != "$WANT_C" ] || fail "the two sequences are the same"

# run TAG SERVER_WRAP CLIENT_WRAP: one exchange; the preloaded side's stats in their own file.
run() {
	local tag=$1 swrap=$2 cwrap=$3 port
	RSK_STATS=$RSK_TMP/stats_$tag.jsonl
	port=$(free_port)
	start_bg "srv_$tag" $swrap "$RSK_PROGS/mixed_peer" server "$port" "$RSK_TMP/srv_got_$tag" "$BYTES"
	wait_listen "$port"
	$cwrap "$RSK_PROGS/mixed_peer" client "$port" "$RSK_TMP/cli_got_$tag" "$BYTES" \
		>"$RSK_TMP/cli_$tag.out" 2>&1 || fail "client ($tag): $(cat "$RSK_TMP/cli_$tag.out")"
	eval "pid=\$PID_srv_$tag"
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	wait "$pid" || fail "server ($tag) failed: $(cat "$RSK_TMP/srv_$tag.log")"
	cat "$RSK_TMP/cli_$tag.out" "$RSK_TMP/srv_$tag.log"
	grep -q "^mixed_peer: client sent $BYTES received $BYTES: ok$" "$RSK_TMP/cli_$tag.out" ||
		fail "client ($tag): $(cat "$RSK_TMP/cli_$tag.out")"
	grep -q "^mixed_peer: server sent $BYTES received $BYTES: ok$" "$RSK_TMP/srv_$tag.log" ||
		fail "server ($tag): $(cat "$RSK_TMP/srv_$tag.log")"
	[ "$(sum "$RSK_TMP/srv_got_$tag")" = "$WANT_C" ] ||
		fail "($tag) the server received bytes that differ from what the client sent"
	[ "$(sum "$RSK_TMP/cli_got_$tag")" = "$WANT_S" ] ||
		fail "($tag) the client received bytes that differ from what the server sent"
	[ "$(stats_lines mixed_peer)" = 1 ] ||
		fail "($tag) $(stats_lines mixed_peer) stats lines from mixed_peer, expected 1 (the preloaded end)"
	assert_carried kernel 1 mixed_peer
	[ "$(stats_get connections kernel mixed_peer)" = 1 ] ||
		fail "($tag) $(stats_get connections kernel mixed_peer) kernel connections, expected 1"
	[ "$(stats_get fallbacks "$REASON" mixed_peer)" = 1 ] ||
		fail "($tag) fallback $REASON counted $(stats_get fallbacks "$REASON" mixed_peer) times, expected 1"
	[ "$(stats_get bytes_sent kernel mixed_peer)" -ge "$BYTES" ] &&
		[ "$(stats_get bytes_received kernel mixed_peer)" -ge "$BYTES" ] ||
		fail "($tag) the kernel carried less than $BYTES bytes each way"
}

run plain_client "pre" ""
run plain_server "" "pre"
echo "mixed peers ($RSK_TEST_TRANSPORT variant): byte-exact, kernel ($REASON) both ways: ok"
