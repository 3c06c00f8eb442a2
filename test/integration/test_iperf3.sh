#!/usr/bin/env bash
# iperf3 client and server, both ends preloaded, against the same runs without the library:
# forward, reverse (-R) and 4 parallel streams (-P 4), 2 s each, congestion control set with
# -C (setsockopt/getsockopt TCP_CONGESTION) and TCP_INFO read by iperf3 on every stream. The
# receiver must have received what the sender sent (up to what was still in flight when the
# test ended), the JSON reports must have the same shape with and without the library (same
# fields: TCP_INFO and TCP_CONGESTION work), and the stats must show the expected transport
# carrying every connection (control + data streams, on both ends).
. "$(dirname "$0")/lib.sh"
need iperf3 python3


# stats_pid_get FIELD TRANSPORT PID: FIELD[TRANSPORT] of the stats line of process PID.
stats_pid_get() {
	python3 - "$RSK_STATS" "$1" "$2" "$3" <<'PY'
import json, sys
path, field, key, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    lines = open(path).read().splitlines()
except FileNotFoundError:
    lines = []
print(sum(o[field][key] for o in map(json.loads, lines) if o["pid"] == pid))
PY
}

# Congestion control to ask for: the system default, always allowed.
CC=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || true)
CC_OPT=()
[ -n "$CC" ] && CC_OPT=(-C "$CC")
# Most a stream can have in flight (socket buffers of both ends) when the test ends.
INFLIGHT=$(($(awk '{print $3}' /proc/sys/net/ipv4/tcp_rmem) + $(awk '{print $3}' /proc/sys/net/ipv4/tcp_wmem)))

# check_json FILE STREAMS REVERSE: assert the client's report; print its shape (field names,
# stream count, congestion control) and the bytes received.
check_json() {
	python3 - "$1" "$2" "$3" "$CC" "$INFLIGHT" <<'PY'
import json, sys
path, streams, reverse, cc, inflight = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
d = json.load(open(path))
if "error" in d:
    sys.exit("%s: iperf3 error: %s" % (path, d["error"]))
ts = d["start"]["test_start"]
if ts["num_streams"] != streams or ts["reverse"] != reverse or ts["protocol"] != "TCP":
    sys.exit("%s: unexpected test_start %s" % (path, ts))
e = d["end"]
if len(e["streams"]) != streams or len(d["start"]["connected"]) != streams:
    sys.exit("%s: %d streams reported, %d connected, want %d"
             % (path, len(e["streams"]), len(d["start"]["connected"]), streams))
sent, recv = e["sum_sent"]["bytes"], e["sum_received"]["bytes"]
if sent <= 0 or recv <= 0:
    sys.exit("%s: sent %d, received %d bytes" % (path, sent, recv))
# The receiver stops counting when the test ends: what was in flight then is not counted,
# at most the socket buffers of each stream (or 1% of the bytes).
slack = max(streams * 2 * inflight, sent // 100)
if recv > sent or sent - recv > slack:
    sys.exit("%s: sent %d bytes, received %d (slack %d)" % (path, sent, recv, slack))
for s in e["streams"]:
    if s["sender"]["bytes"] <= 0 or s["receiver"]["bytes"] <= 0:
        sys.exit("%s: a stream carried nothing: %s" % (path, s))
if cc and (e.get("sender_tcp_congestion") != cc or e.get("receiver_tcp_congestion") != cc):
    sys.exit("%s: congestion control %s/%s, asked for %s" % (path, e.get("sender_tcp_congestion"),
             e.get("receiver_tcp_congestion"), cc))
shape = [streams, reverse, e.get("sender_tcp_congestion"), e.get("receiver_tcp_congestion"),
         sorted(e["sum_sent"]), sorted(e["sum_received"]),
         sorted(e["streams"][0]["sender"]), sorted(e["streams"][0]["receiver"])]
print("shape %s" % json.dumps(shape))
print("received %d" % recv)
PY
}

# wait_exit NAME [SECONDS]: until the background program NAME exits on its own.
wait_exit() {
	local name=$1 secs=${2:-20} pid
	pid=$(eval echo "\${PID_$name}")
	for _ in $(seq $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && fail "$name did not exit after ${secs}s: $(tail -c 300 "$RSK_TMP/$name.log")"
	wait "$pid" 2>/dev/null || fail "$name exited with an error: $(tail -c 300 "$RSK_TMP/$name.log")"
}

# one_test WRAP TAG TEST STREAMS REVERSE CLIENT-OPTIONS...: a one-off server (-1: it serves
# one test and returns from main, no busy-server race between tests) and one client.
one_test() {
	local wrap=$1 tag=$2 test=$3 streams=$4 reverse=$5 port name
	shift 5
	port=$(free_port)
	name=srv$tag$test
	start_bg "$name" $wrap iperf3 -s -1 -B 127.0.0.1 -p "$port"
	wait_listen "$port"
	$wrap iperf3 -c 127.0.0.1 -p "$port" -t 2 --connect-timeout 5000 \
		"${CC_OPT[@]}" --json "$@" >"$RSK_TMP/$tag.$test.json" ||
		fail "iperf3 $test ($tag) failed: $(tail -c 400 "$RSK_TMP/$tag.$test.json")"
	wait_exit "$name"
	check_json "$RSK_TMP/$tag.$test.json" "$streams" "$reverse" >"$RSK_TMP/$tag.$test.chk" ||
		fail "iperf3 $test ($tag)"
	SERVER_PIDS+=("$(eval echo "\${PID_$name}") $((streams + 1))")
}

run_iperf3() { # $1 = "pre" or "", $2 = tag
	SERVER_PIDS=()
	one_test "$1" "$2" fwd 1 0 # the client sends
	one_test "$1" "$2" rev 1 1 -R # the server sends
	one_test "$1" "$2" par 4 0 -P 4 # 4 parallel streams
	cat "$RSK_TMP/$2".{fwd,rev,par}.chk | grep '^shape' >"$RSK_TMP/$2.shape"
}

run_iperf3 "" plain
[ "$(stats_lines)" -eq 0 ] || fail "the run without the library wrote stats"
run_iperf3 pre with
cmp -s "$RSK_TMP/plain.shape" "$RSK_TMP/with.shape" ||
	fail "iperf3 reports differ in shape with the library (TCP_INFO/TCP_CONGESTION?): $(diff "$RSK_TMP/plain.shape" "$RSK_TMP/with.shape")"

# 3 clients + 3 servers, every one exited normally and wrote its line.
[ "$(stats_lines iperf3)" -eq 6 ] || fail "$(stats_lines iperf3) iperf3 stats lines, want 6"
# Connections (control + data): forward 1+1, reverse 1+1, -P 4 1+4 = 9 per end.
for sp in "${SERVER_PIDS[@]}"; do
	set -- $sp
	conns=$(stats_pid_get connections "$RSK_EXPECT" "$1")
	[ "$conns" -ge "$2" ] || fail "iperf3 server $1 accounted $conns $RSK_EXPECT connections, want $2"
done
assert_carried "$RSK_EXPECT" 18 iperf3
# Every byte an iperf3 receiver counted was received through the library.
want=0
for n in $(sed -n 's/^received //p' "$RSK_TMP"/with.*.chk); do want=$((want + n)); done
got=$(stats_get bytes_received "$RSK_EXPECT" iperf3)
[ "$got" -ge "$want" ] || fail "stats: iperf3 received $got bytes over $RSK_EXPECT, iperf3 reports $want"
echo "iperf3 over $RSK_EXPECT: ok ($want bytes received in 3 tests)"
