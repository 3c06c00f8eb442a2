#!/usr/bin/env bash
# TCP first (core/calls/upgrade.c): connections that start on TCP and move onto the
# transport mid-use, byte-exact, and the policy that decides which ones start on TCP.
#  1. test/progs/move.c: request/response, MSG_WAITALL and MSG_PEEK across the move,
#     half-close and close right after the offer, a writer that never reads, a reader
#     blocked in the kernel, an edge-triggered reader, both ends each in 7 epoll sets (more
#     than the socket notes in itself) -- every connection moving at its first call
#     (RDMASOCK_TCP_FIRST=on RDMASOCK_UPGRADE_MS=0); first without the library.
#  2. 64 MiB full duplex from two threads per end (test/progs/integrity.c) past a byte
#     threshold: byte-exact, both ends on the same side.
#  3. The learning policy (RDMASOCK_TCP_FIRST=learn): a destination whose connections end
#     short gets TCP first (counted as tcp_first), a long-lived one moves and is counted on
#     the transport.
. "$(dirname "$0")/lib.sh"
for p in move integrity; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done

# 1. the move mid-use
"$RSK_PROGS/move" >"$RSK_TMP/plain" 2>&1 || fail "without the library: $(cat "$RSK_TMP/plain")"
RSK_TCP_FIRST=on RSK_UPGRADE_MS=0 SEMANTICS_EXPECT=$RSK_EXPECT pre "$RSK_PROGS/move" \
	>"$RSK_TMP/move" 2>&1 || fail "preloaded: $(grep -v '^{' "$RSK_TMP/move")"
grep -v '^{' "$RSK_TMP/move"
[ "$(grep -c ': check .*: ok$' "$RSK_TMP/move")" = 10 ] || fail "not every move check said ok"

# 2. full duplex from two threads per end, past the 1 MiB threshold: byte-exact, both ends on
# the same side. (A server socket two threads use never moves, docs/design.md: here it stays.)
# Once this saw EOF mid-stream: a server read that entered the kernel before the socket was
# routed through the library took the move's FIN for the end of the data.
: >"$RSK_STATS"
port=$(free_port)
RSK_TCP_FIRST=on RSK_UPGRADE_MS=600000
start_bg srv pre env RDMASOCK_UPGRADE_BYTES=1048576 "$RSK_PROGS/integrity" server "$port"
wait_port "$port"
RDMASOCK_UPGRADE_BYTES=1048576 pre "$RSK_PROGS/integrity" client "$port" 64M \
	>"$RSK_TMP/integrity" 2>&1 ||
	fail "integrity: $(cat "$RSK_TMP/integrity"); server: $(grep -v '^{' "$RSK_TMP/srv.log")"
wait_bg srv # it serves one connection, then exits (and writes its stats)
grep -q ': ok$' "$RSK_TMP/integrity" || fail "integrity: $(cat "$RSK_TMP/integrity")"
tcp=$(stats_get bytes_sent kernel integrity)
moved=$(stats_get bytes_sent "$RSK_EXPECT" integrity)
conns=$(stats_get connections "$RSK_EXPECT" integrity)
kconns=$(stats_get connections kernel integrity)
echo "integrity full duplex: kernel $tcp B, $RSK_EXPECT $moved B sent; $conns on $RSK_EXPECT, $kconns on kernel"
[ "$RSK_EXPECT" = kernel ] && kconns=0
[ $((conns + kconns)) = 2 ] || fail "expected 2 connections counted, got $conns + $kconns"
if [ "$RSK_EXPECT" != kernel ] && [ "$conns" != 0 ]; then
	[ "$conns" = 2 ] || fail "one end moved and the other did not ($conns on $RSK_EXPECT)"
	[ "$tcp" -ge 262144 ] && [ "$moved" -ge $((64 * 1048576)) ] ||
		fail "the bytes did not split at the move (kernel $tcp, $RSK_EXPECT $moved)"
fi

# 3. the learning policy (RDMASOCK_TCP_FIRST=learn): short connections to one destination
# start on TCP, even when each waits past RDMASOCK_UPGRADE_MS for its answer (a loaded
# server's queues: one exchange never earns a setup back); a long one (it outlives
# RDMASOCK_UPGRADE_MS and keeps talking) moves.
: >"$RSK_STATS"
port=$(free_port)
RSK_TCP_FIRST=learn RSK_UPGRADE_MS=5
start_bg echo pre "$RSK_PROGS/echo_server" "$port"
wait_port "$port"
# (TCP first's own policy: the default bearer would carry the short ones instead, which
# test_bearer.sh's auto run covers)
RDMASOCK_BEARER=none pre python3 - "$port" >"$RSK_TMP/policy" 2>&1 <<'PY' || fail "policy client"
import socket, sys, time
port = int(sys.argv[1])
for i in range(12):                       # short: connect, one slow exchange, close
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"x" * 10)
    time.sleep(0.01)                      # twice RDMASOCK_UPGRADE_MS
    assert s.recv(10) == b"x" * 10
    s.close()
s = socket.create_connection(("127.0.0.1", port))   # long: lives 200 ms, keeps talking
end = time.time() + 0.2
while time.time() < end:
    s.sendall(b"y" * 100)
    got = b""
    while len(got) < 100:
        got += s.recv(100 - len(got))
    time.sleep(0.005)
s.close()
print("policy client: ok")
PY
stop_bg echo
grep -q "policy client: ok" "$RSK_TMP/policy" || fail "policy client: $(cat "$RSK_TMP/policy")"
first=$(stats_get fallbacks tcp_first python3)
accel=$(stats_get connections "$RSK_EXPECT" python3)
kern=$(stats_get connections kernel python3)
echo "policy: $accel on $RSK_EXPECT, $kern on kernel ($first of them tcp_first)"
if [ "$RSK_EXPECT" != kernel ]; then
	# the first ones (no history yet) are set up at connect; once the destination's
	# connections proved short, the next ones start on TCP; the long one moves
	[ "$first" -ge 4 ] || fail "expected short connections to start on TCP (tcp_first $first)"
	[ "$accel" -ge 2 ] || fail "expected the first connections and the long one on $RSK_EXPECT"
fi
echo "move over $RSK_EXPECT: ok"
