#!/usr/bin/env bash
# mt_client against echo_server (poll mode): 8 threads with a connection each, 300 messages
# of 1 B..64 KiB per thread, every echo checked; then 2 threads sharing one socket (one
# writes 3000 messages and shuts down, the other reads concurrently until EOF). Checked,
# without and with the library on both ends: the clients verify every byte and EOF, the
# server echoed exactly the bytes the clients sent over exactly 9 connections, the totals
# are the same in both runs, and the stats show the expected transport carrying them.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/mt_client" ] && [ -x "$RSK_PROGS/echo_server" ] ||
	fail "test programs not built in RSK_PROGS=$RSK_PROGS"

THREADS=8
MSGS=300
SHARED_MSGS=3000


# field NAME FILE: the number after the word NAME in FILE's first matching line.
field() {
	grep -o "$1 [0-9]*" "$2" | head -1 | cut -d' ' -f2
}

run_threads() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port conn_bytes shared_bytes served
	port=$(free_port)
	start_bg "srv_$tag" $wrap "$RSK_PROGS/echo_server" "$port" poll
	wait_listen "$port"
	$wrap "$RSK_PROGS/mt_client" "$port" conn "$THREADS" "$MSGS" \
		>"$RSK_TMP/conn_$tag.out" 2>&1 || fail "mt_client conn ($tag): $(cat "$RSK_TMP/conn_$tag.out")"
	grep -q "^mt_client: conn threads $THREADS connections $THREADS messages $((THREADS * MSGS)) bytes [0-9]*: ok$" \
		"$RSK_TMP/conn_$tag.out" || fail "mt_client conn ($tag): $(cat "$RSK_TMP/conn_$tag.out")"
	$wrap "$RSK_PROGS/mt_client" "$port" shared "$SHARED_MSGS" \
		>"$RSK_TMP/shared_$tag.out" 2>&1 || fail "mt_client shared ($tag): $(cat "$RSK_TMP/shared_$tag.out")"
	grep -q "^mt_client: shared threads 2 connections 1 messages $SHARED_MSGS bytes [0-9]*: ok" \
		"$RSK_TMP/shared_$tag.out" || fail "mt_client shared ($tag): $(cat "$RSK_TMP/shared_$tag.out")"
	stop_bg "srv_$tag"
	conn_bytes=$(field bytes "$RSK_TMP/conn_$tag.out")
	shared_bytes=$(field bytes "$RSK_TMP/shared_$tag.out")
	served=$(grep -o "served [0-9]* connections, [0-9]* bytes" "$RSK_TMP/srv_$tag.log")
	[ "$served" = "served $((THREADS + 1)) connections, $((conn_bytes + shared_bytes)) bytes" ] ||
		fail "echo_server ($tag) $served; clients sent $((conn_bytes + shared_bytes)) bytes on $((THREADS + 1)) connections"
	echo "$conn_bytes $shared_bytes" >"$RSK_TMP/totals_$tag"
}

run_threads "" plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run_threads pre with
cmp -s "$RSK_TMP/totals_plain" "$RSK_TMP/totals_with" ||
	fail "totals differ: $(cat "$RSK_TMP/totals_plain") vs $(cat "$RSK_TMP/totals_with")"

[ "$(stats_lines mt_client)" = 2 ] || fail "mt_client wrote $(stats_lines mt_client) stats lines, expected 2"
[ "$(stats_lines echo_server)" = 1 ] || fail "echo_server wrote no stats line"
assert_carried "$RSK_EXPECT" $((THREADS + 1)) mt_client
assert_carried "$RSK_EXPECT" $((THREADS + 1)) echo_server
echo "threads over $RSK_EXPECT: ok ($(cat "$RSK_TMP/totals_with") bytes)"
