#!/usr/bin/env bash
# Moves into a prefork server (docs/design.md, "Knocks"): nginx's master and 2 workers share
# the listener, and with it the rendezvous, where no process's event loop looks. Clients that
# start on TCP (RDMASOCK_TCP_FIRST=on) and prove long-lived offer their move there; before,
# the accepts that read such an offer handed it back and nobody announced it: every
# connection stayed on TCP. Now the client knocks at each worker's door and the worker whose
# connection it is moves it at its next call: keep-alive connections of 300 requests each,
# every answer checked, all moved, counted on shm at both ends; fresh connections made after
# them are answered at once.
. "$(dirname "$0")/lib.sh"
need nginx python3
[ "$RSK_TEST_TRANSPORT" = kernel ] && skip "no rendezvous on the kernel transport"

port=$(free_port)
d=$RSK_TMP/ngx
. "$(dirname "$0")/nginx_ok.sh"
nginx_ok_conf "$d" "$port" off
RSK_TCP_FIRST=on
start_bg nginx pre nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf"
wait_port "$port"

pre python3 - "$port" >"$RSK_TMP/client" 2>&1 <<'PY' || fail "client: $(cat "$RSK_TMP/client")"
import socket, sys, time
port, conns, reqs, fresh = int(sys.argv[1]), 6, 300, 20
req = b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
deadline = time.time() + 60
for i in range(reqs):
    for s in socks:                  # interleaved: each connection lives the whole run
        s.sendall(req)
    for s in socks:
        got = b""
        while not got.endswith(b"\r\n\r\nok\n"):
            b = s.recv(4096)
            assert b, "EOF after %d requests" % i
            got += b
            assert time.time() < deadline, "too slow"
        assert got.startswith(b"HTTP/1.1 200"), got[:40]
# New plain connections meanwhile (one request each, no move): each answered at once. Before,
# an accept that read another worker's move offer could not hand it back and held it, and
# the other worker's accepts of plain clients waited a second for it, then reset them.
for i in range(fresh):
    t = time.time()
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"GET /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        got += b
    c.close()
    took = time.time() - t
    assert got.startswith(b"HTTP/1.1 200"), "fresh connection %d: %r" % (i, got[:40])
    assert took < 0.5, "fresh connection %d took %.2f s" % (i, took)
for s in socks:
    s.close()
print("client: %d x %d requests answered, then %d fresh connections" % (conns, reqs, fresh))
PY
cat "$RSK_TMP/client"
stop_bg nginx QUIT
sleep 0.2 # (the workers' stats lines)
# The 6 long connections moved, the 20 short ones stayed on TCP (tcp_first, no_peer).
for p in python3 nginx; do
	c=$(stats_get connections shm "$p")
	k=$(stats_get connections kernel "$p")
	echo "$p: $c connection(s) on shm, $k on kernel"
	[ "$c" = 6 ] && [ "$k" = 20 ] || fail "$p: expected 6 moved onto shm and 20 on TCP"
done
[ "$(stats_get bytes_received shm nginx)" -gt 0 ] || fail "nginx received nothing on shm"
echo "PASS"
