#!/usr/bin/env bash
# A connect that times out against a full backlog, then closed, ends as the kernel's does: no
# SYN goes on after the close. With both ends preloaded the client's offer lends its TCP
# socket to the server's rendezvous queue; before the fix the queue kept that socket alive
# in SYN-SENT after the application's close, so its retransmitted SYN could complete later
# and reach the server's accept as a connection nobody owned (int_scale_backlog_auto's
# occasional 9 extra no_peer accepts). The server (backlog 0) accepts nothing: a plain
# filler from 127.0.0.3 fills its queue, the preloaded client from 127.0.0.2 times out.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/connserver" ] || fail "test program connserver not built in RSK_PROGS=$RSK_PROGS"
need ss
port=$(free_port)
# Windows of 60 s: the client is a pyenv shim (bash) and python, each preloaded, which under
# scripts/sanitize.sh's ASan runtime on 2 busy cores took over 20 s to start and finish.
start_bg srv pre "$RSK_PROGS/connserver" "$port" --backlog 0 --hold-ms 60000 --seconds 65
wait_port "$port"
start_bg filler python3 -c "
import socket, time
s = socket.socket(); s.bind(('127.0.0.3', 0)); s.connect(('127.0.0.1', $port))
time.sleep(60)"
# the filler is in the queue once its connect returned: wait for its ESTAB entry
for _ in $(seq 100); do
	[ "$(ss -Htn state established src 127.0.0.3 dport = :"$port" | wc -l)" -ge 1 ] && break
	sleep 0.05
done
out=$(RDMASOCK_LOG=debug run_limited 50 pre python3 -c "
import errno, socket, struct, time
s = socket.socket(); s.bind(('127.0.0.2', 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack('ll', 0, 400000))
try:
    s.connect(('127.0.0.1', $port)); print('connected')
except OSError as e:
    print('timed_out' if e.errno == errno.EINPROGRESS else 'error %d' % e.errno)
s.close()
print('closed')
time.sleep(0.3)" 2>&1)
echo "client: $out"
left=$(ss -Htn state syn-sent src 127.0.0.2 dport = :"$port" | wc -l)
echo "SYN-SENT sockets from 127.0.0.2 after the close: $left"
grep -q '^timed_out' <<<"$out" || fail "the client's connect did not time out: $out"
[ "$left" = 0 ] || fail "a closed connect goes on sending SYNs ($left socket(s) in SYN-SENT)"
stop_bg filler
stop_bg srv
stats_summary
# the path under test: on shm and auto the client offered, then withdrew its offer (a
# connect that never completes is counted nowhere in the stats, so its debug line says it)
if [ "$RSK_TEST_TRANSPORT" != kernel ]; then
	grep -q "the handshake is slow: the connection stays on TCP" <<<"$out" ||
		fail "the client did not offer and withdraw"
fi
echo "a timed-out connect closed: gone, as over kernel TCP"
