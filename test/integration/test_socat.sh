#!/usr/bin/env bash
# socat as a forking TCP relay (TCP-LISTEN:P1,reuseaddr,fork TCP:127.0.0.1:P2) in front of
# echo_server, and socat as a client. Without and with the library (relay, clients and echo
# server all preloaded): a 4 MiB random file sent through the relay by `socat - TCP:...`
# comes back with the same sha256; mt_client's 8 concurrent connections through the relay
# (8 relay children) verify every byte; a one-shot `socat - TCP:127.0.0.1:P2` round trip
# echoes its line. The preloaded socat must not crash (rsocket's preload segfaults in
# socat): every socat process exits normally and writes its stats line.
. "$(dirname "$0")/lib.sh"
need socat sha256sum pgrep
for p in echo_server mt_client; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done


# wait_children PID: until PID has no child processes left (bounded: 10 s).
wait_children() {
	for _ in $(seq 200); do
		pgrep -P "$1" >/dev/null || return 0
		sleep 0.05
	done
	fail "children of $1 still running after 10s: $(pgrep -a -P "$1")"
}

head -c $((4 * 1024 * 1024)) /dev/urandom >"$RSK_TMP/in.bin" || fail "cannot make the input file"
IN_SUM=$(sha256sum <"$RSK_TMP/in.bin" | cut -d' ' -f1)
LINE="one-shot $(date +%s%N) through socat"

run_socat() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 p1 p2 sum pid
	p2=$(free_port)
	start_bg "echo_$tag" $wrap "$RSK_PROGS/echo_server" "$p2" poll
	wait_listen "$p2"
	p1=$(free_port)
	# -t 30: after one direction's EOF, wait for the other (the default 0.5 s could cut it).
	start_bg "relay_$tag" $wrap socat -t 30 "TCP-LISTEN:$p1,bind=127.0.0.1,reuseaddr,fork" \
		"TCP:127.0.0.1:$p2"
	wait_listen "$p1"

	$wrap socat -t 30 - "TCP:127.0.0.1:$p1" <"$RSK_TMP/in.bin" >"$RSK_TMP/out_$tag.bin" \
		2>"$RSK_TMP/file_$tag.err" || fail "socat client ($tag): $(cat "$RSK_TMP/file_$tag.err")"
	sum=$(sha256sum <"$RSK_TMP/out_$tag.bin" | cut -d' ' -f1)
	[ "$sum" = "$IN_SUM" ] ||
		fail "4 MiB through the relay ($tag): got $(stat -c %s "$RSK_TMP/out_$tag.bin") bytes, sha256 $sum != $IN_SUM"

	$wrap "$RSK_PROGS/mt_client" "$p1" conn 8 50 >"$RSK_TMP/mt_$tag.out" 2>&1 ||
		fail "mt_client through the relay ($tag): $(cat "$RSK_TMP/mt_$tag.out")"
	grep -q "^mt_client: conn threads 8 connections 8 messages 400 bytes [0-9]*: ok$" \
		"$RSK_TMP/mt_$tag.out" || fail "mt_client ($tag): $(cat "$RSK_TMP/mt_$tag.out")"

	printf '%s\n' "$LINE" | $wrap socat - "TCP:127.0.0.1:$p2" >"$RSK_TMP/one_$tag.out" \
		2>"$RSK_TMP/one_$tag.err" || fail "one-shot socat ($tag): $(cat "$RSK_TMP/one_$tag.err")"
	[ "$(cat "$RSK_TMP/one_$tag.out")" = "$LINE" ] ||
		fail "one-shot socat ($tag) echoed '$(cat "$RSK_TMP/one_$tag.out")'"

	# The relay's children (one per connection) exit on their own once both sides closed.
	pid=$(eval echo "\$PID_relay_$tag")
	wait_children "$pid"
	stop_bg "relay_$tag"
	stop_bg "echo_$tag"
	if grep -qiE "segmentation|signal 11|core dumped" "$RSK_TMP/relay_$tag.log"; then
		fail "relay ($tag) crashed: $(cat "$RSK_TMP/relay_$tag.log")"
	fi
	# 9 connections through the relay + 1 one-shot, every byte echoed: 4 MiB + mt_client's.
	grep -qx "echo_server\[[0-9]*\]: served 10 connections, $((4194304 + $(grep -o 'bytes [0-9]*' \
		"$RSK_TMP/mt_$tag.out" | cut -d' ' -f2) + ${#LINE} + 1)) bytes" "$RSK_TMP/echo_$tag.log" ||
		fail "echo_server ($tag): $(cat "$RSK_TMP/echo_$tag.log")"
}

run_socat "" plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run_socat pre with

# socat lines: the relay parent (SIGTERM: socat exits through exit()), its 9 children, the
# file client and the one-shot client = 12. Connections: 9 accepted by the relay parent,
# 9 upstream by its children, 2 by the clients = 20.
[ "$(stats_lines socat)" = 12 ] || fail "socat wrote $(stats_lines socat) stats lines, expected 12"
assert_carried "$RSK_EXPECT" 20 socat
assert_carried "$RSK_EXPECT" 10 echo_server
assert_carried "$RSK_EXPECT" 8 mt_client
echo "socat relay over $RSK_EXPECT: ok"
