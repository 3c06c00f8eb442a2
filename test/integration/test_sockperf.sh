#!/usr/bin/env bash
# sockperf TCP server and clients, both ends preloaded, against the same runs without the
# library: ping-pong (pp, 64-byte messages, 2 s) and throughput (tp, 1024-byte messages, 2 s).
# The client reports must show messages exchanged, a positive latency, no dropped, duplicated
# or out-of-order message and no error, and the stats must show the expected transport
# carrying both connections on both ends.
. "$(dirname "$0")/lib.sh"
need sockperf python3


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

# check_report KIND FILE: assert a client report (colours stripped); print what it counted.
check_report() {
	python3 - "$1" "$2" <<'PY'
import re, sys
kind, path = sys.argv[1], sys.argv[2]
text = re.sub(r"\x1b\[[0-9;]*m", "", open(path, errors="replace").read())
def need(pattern):
    m = re.search(pattern, text)
    if not m:
        sys.exit("%s: no match for %r in:\n%s" % (path, pattern, text[-1500:]))
    return m
if re.search(r"ERROR|error", text):
    sys.exit("%s reports an error:\n%s" % (path, text[-1500:]))
if kind == "pp":
    m = need(r"\[Total Run\] RunTime=[0-9.]+ sec; Warm up time=\d+ msec; "
             r"SentMessages=(\d+); ReceivedMessages=(\d+)")
    tsent, trecv = int(m.group(1)), int(m.group(2))
    m = need(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)")
    sent, recv = int(m.group(2)), int(m.group(3))
    # ping-pong: one message in flight at a time. On failure the report's tail goes with it:
    # sockperf skips a reply it counts dropped or out of order (an rx time below the last),
    # and only its error line and the latency percentiles tell which happened.
    if sent <= 0 or recv <= 0 or not 0 <= sent - recv <= 1 or not 0 <= tsent - trecv <= 1:
        sys.exit("%s: sent %d received %d (total run %d/%d); the report:\n%s"
                 % (path, sent, recv, tsent, trecv, text[-2500:]))
    lat = float(need(r"avg-latency=([0-9.]+)").group(1))
    obs = int(need(r"Total (\d+) observations").group(1))
    if lat <= 0 or obs <= 0:
        sys.exit("%s: latency %f over %d observations" % (path, lat, obs))
    m = need(r"# dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)")
    if m.groups() != ("0", "0", "0"):
        sys.exit("%s: dropped/duplicated/out-of-order %s" % (path, m.groups()))
    print("pp_received %d" % trecv)
else:
    n = int(need(r"Total of (\d+) messages sent in [0-9.]+ sec").group(1))
    rate = float(need(r"Message Rate is ([0-9.]+) \[msg/sec\]").group(1))
    bw = float(need(r"BandWidth is ([0-9.]+) MBps").group(1))
    if n <= 0 or rate <= 0 or bw <= 0:
        sys.exit("%s: %d messages, rate %f, bandwidth %f" % (path, n, rate, bw))
    print("tp_sent %d" % n)
PY
}

run_sockperf() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port name n
	port=$(free_port)
	name=srv$tag
	start_bg "$name" $wrap sockperf sr --tcp -i 127.0.0.1 -p "$port"
	wait_listen "$port"
	# --mps: sockperf sizes its table of round trips for about 600k a second unless told, and
	# exits with "_seqN > m_maxSequenceNo" past it (shm without system calls gets there)
	$wrap sockperf pp --tcp -i 127.0.0.1 -p "$port" -t 2 -m 64 --mps=5000000 >"$RSK_TMP/$tag.pp" 2>&1 ||
		fail "sockperf pp failed: $(tail -c 500 "$RSK_TMP/$tag.pp")"
	$wrap sockperf tp --tcp -i 127.0.0.1 -p "$port" -t 2 -m 1024 >"$RSK_TMP/$tag.tp" 2>&1 ||
		fail "sockperf tp failed: $(tail -c 500 "$RSK_TMP/$tag.tp")"
	stop_bg "$name" INT # the server ends its loop and returns from main on SIGINT
	check_report pp "$RSK_TMP/$tag.pp" >"$RSK_TMP/$tag.chk" || fail "ping-pong ($tag)"
	check_report tp "$RSK_TMP/$tag.tp" >>"$RSK_TMP/$tag.chk" || fail "throughput ($tag)"
	! grep -q ERROR "$RSK_TMP/$name.log" || fail "sockperf server: $(grep ERROR "$RSK_TMP/$name.log")"
	n=$(sed -n 's/.*Total \([0-9]*\) messages received and handled.*/\1/p' "$RSK_TMP/$name.log")
	[ "${n:-0}" -gt 0 ] || fail "the sockperf server handled no message: $(tail -c 500 "$RSK_TMP/$name.log")"
	SERVER_PID=$(eval echo "\${PID_$name}")
}

run_sockperf "" plain
[ "$(stats_lines)" -eq 0 ] || fail "the run without the library wrote stats"
run_sockperf pre with

# server + pp client + tp client, each exited normally and wrote its line
[ "$(stats_lines sockperf)" -eq 3 ] || fail "$(stats_lines sockperf) sockperf stats lines, want 3"
conns=$(stats_pid_get connections "$RSK_EXPECT" "$SERVER_PID")
[ "$conns" -ge 2 ] || fail "the sockperf server accounted $conns $RSK_EXPECT connections, want 2"
assert_carried "$RSK_EXPECT" 4 sockperf
# Each ping-pong reply the client received was a ping the server received first.
pp=$(sed -n 's/^pp_received //p' "$RSK_TMP/with.chk")
got=$(stats_get bytes_received "$RSK_EXPECT" sockperf)
[ "$got" -ge $((2 * 64 * pp)) ] ||
	fail "stats: sockperf received $got bytes over $RSK_EXPECT, ping-pong alone is $((2 * 64 * pp))"
echo "sockperf over $RSK_EXPECT: ok ($pp ping-pongs, $(sed -n 's/^tp_sent //p' "$RSK_TMP/with.chk") throughput messages)"
