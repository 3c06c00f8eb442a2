#!/usr/bin/env bash
# close() of a socket while another thread of the process is inside a call on it
# (test/progs/close_busy.c). The kernel keeps the socket until that call returns: no FIN, no
# reset meanwhile, and the call goes on. The library released the connection at the close:
# the peer's send failed with EPIPE, the blocked reader crashed the process (SIGSEGV: it woke
# in a released connection) or never returned, a writer blocked on a full window lost all but
# its first 229,376 of 16 MiB (the peer read EOF there), and a server that closed and returned
# from main with a thread in recv died of SIGSEGV at exit. Now the release waits for the last
# call in progress.
#  reader:     a thread in recv, the main thread closes, then the peer sends 4 bytes: the
#              reader gets them, the peer saw nothing before, and reads EOF after (5 runs)
#  reader_eof: the same, the peer closing instead: the reader gets EOF (5 runs)
#  writer:     a thread blocked in a 16 MiB write, the main thread closes: the peer reads
#              every byte in order, then EOF (3 runs)
#  exit:       a server closes its connection and returns from main with a thread still in
#              recv: its client (another process) reads its 100,000 bytes and EOF, and the
#              server exits 0 (the exit ends the connection the close left) (5 runs)
# Stats: the connections were carried by the transport under test.
. "$(dirname "$0")/lib.sh"
PROG=$RSK_PROGS/close_busy
runs=0

one() { # MODE RUN
	local port rc=0 out
	port=$(free_port)
	out=$(pre timeout 60 "$PROG" "$1" "$port" 2>&1) || rc=$?
	[ "$rc" = 0 ] || fail "$1 run $2: exit $rc: $out"
	[ "$out" = "close_busy: $1: ok" ] || fail "$1 run $2: '$out'"
	runs=$((runs + 1))
}

for i in 1 2 3 4 5; do one reader "$i"; done
for i in 1 2 3 4 5; do one reader_eof "$i"; done
for i in 1 2 3; do one writer "$i"; done
for i in 1 2 3 4 5; do
	port=$(free_port)
	start_bg "srv$i" pre "$PROG" exit "$port"
	wait_listen "$port"
	out=$(pre timeout 30 "$PROG" client "$port" 2>&1) || fail "client run $i: $out"
	[ "$out" = "close_busy: client: ok" ] || fail "client run $i: '$out'"
	pid=$(eval echo "\${PID_srv$i}")
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$pid" 2>/dev/null && fail "server run $i: still running 10 s after its client"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" = 0 ] || fail "server run $i: exit $rc ($(cat "$RSK_TMP/srv$i.log"))"
	grep -qx "close_busy: exit: ok" "$RSK_TMP/srv$i.log" ||
		fail "server run $i: $(cat "$RSK_TMP/srv$i.log")"
done
assert_carried "$RSK_EXPECT" $((2 * runs + 2 * 5)) close_busy
echo "close under a call over $RSK_EXPECT: $runs in-process runs and 5 servers, ok"
