#!/usr/bin/env bash
# A process ends (main returns, exit runs the destructors) while another of its threads is
# inside a call on a connection: exit_threads.py. The kernel keeps its sockets whole until the
# process is gone; the library's exit ends its streams while that thread still runs, and it
# used to free the connection under it: the thread woke inside the freed connection and the
# process died of SIGSEGV in about one run in two (a Python daemon thread serving a socket).
#  pair:   both ends in one process, a daemon thread echoing on the accepted end, the main
#          thread's end waited for with epoll; 20 runs, every other one ending in os._exit
#          (the library's _exit flush, on a thread of its own), each must exit 0 (on the code
#          before: SIGSEGV at run 3 on shm, run 1 on auto).
#  server: a server with a daemon thread blocked in recv sends 100,000 bytes and returns from
#          main, its socket still open; the client (another process) must read all of them,
#          in order, then EOF, and the server must exit 0; 10 runs.
# Stats: the connections were carried by the transport under test.
. "$(dirname "$0")/lib.sh"
use_python
PROG=$(dirname "$0")/exit_threads.py
PAIRS=20
SERVERS=10
N=100000

for i in $(seq "$PAIRS"); do
	mode=pair
	[ $((i % 2)) = 0 ] && mode=pair_exit
	port=$(free_port)
	rc=0
	out=$(pre timeout 30 "$PY" "$PROG" "$mode" "$port" 2>&1) || rc=$?
	[ "$rc" = 0 ] || fail "$mode run $i: exit $rc: $out"
	[ "$out" = "pair: ready" ] || fail "$mode run $i: '$out'"
done

for i in $(seq "$SERVERS"); do
	port=$(free_port)
	start_bg "srv$i" pre "$PY" "$PROG" server "$port" "$N"
	wait_listen "$port"
	got=$(pre timeout 30 "$PY" "$PROG" client "$port") || fail "client run $i: exit $?"
	pid=$(eval echo "\${PID_srv$i}")
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$pid" 2>/dev/null && fail "server run $i: still running 10 s after its client"
	rc=0
	wait "$pid" || rc=$?
	sent=$(sed -n 's/^server: //p' "$RSK_TMP/srv$i.log")
	[ "$rc" = 0 ] || fail "server run $i: exit $rc ($(cat "$RSK_TMP/srv$i.log"))"
	[ -n "$sent" ] && [ "client: $sent" = "$got" ] ||
		fail "server run $i: sent '$sent', the client read '$got'"
done
prog=$(python3 - "$RSK_STATS" <<'PY'
import json, sys
print(json.loads(open(sys.argv[1]).readline())["program"])
PY
)
# (os._exit writes no stats line, as it runs nothing of the program's: half the pairs count)
assert_carried "$RSK_EXPECT" $((2 * (PAIRS / 2) + 2 * SERVERS)) "$prog"
echo "exit with a thread in recv over $RSK_EXPECT: $PAIRS pairs and $SERVERS servers, ok"
