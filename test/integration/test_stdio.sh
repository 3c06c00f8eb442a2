#!/usr/bin/env bash
# A socket used through stdio (test/progs/stdio_peer.c): glibc's stdio reads and writes with
# its internal calls, which no preload sees, so such a connection must be kept on the kernel
# from before its first byte. With TCP first (RDMASOCK_TCP_FIRST=on, which this test sets;
# verbs always starts so) fdopen() and a dup onto 0-2 keep the connection on TCP for good.
# Every byte must arrive in order: fdopen with line-buffered fprintf/fgets, 1 MiB by
# fwrite/fread, stdio mixed with send()/write()/recv() on one socket, write() + getc(), an
# inetd-style server (the socket on stdin/stdout, exec of `sed -u`), and bash's /dev/tcp
# both ways. A control connection that does not use stdio must move off TCP, so the test
# shows the library was active.
. "$(dirname "$0")/lib.sh"
need sed bash
for p in stdio_peer echo_server mt_client; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done
[ "$RSK_TEST_TRANSPORT" = kernel ] || RSK_TCP_FIRST=on

port=$(free_port)
start_bg echo pre "$RSK_PROGS/echo_server" "$port" poll
wait_listen "$port"
for m in lines bulk mix getc; do
	out=$(pre "$RSK_PROGS/stdio_peer" "$m" "$port" 2>&1) || fail "stdio_peer $m: $out"
	echo "$out"
	[ "$out" = "stdio_peer: $m: ok" ] || fail "stdio_peer $m: $out"
done
# bash: write through >&3 (stdio's echo on a dup onto 1), read through <&3.
line="bash over /dev/tcp $(date +%s%N)"
got=$(pre bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; echo "$2" >&3; read -r l <&3; echo "$l"' \
	_ "$port" "$line" 2>&1) || fail "bash /dev/tcp: $got"
[ "$got" = "$line" ] || fail "bash /dev/tcp echoed '$got', wanted '$line'"
echo "bash /dev/tcp: ok"
# The control: a connection without stdio, long enough to move when TCP first is on.
out=$(pre "$RSK_PROGS/mt_client" "$port" conn 1 200 2>&1) || fail "control mt_client: $out"
stop_bg echo

iport=$(free_port)
start_bg inetd pre "$RSK_PROGS/stdio_peer" inetd "$iport"
wait_listen "$iport"
out=$(pre "$RSK_PROGS/stdio_peer" inetd_client "$iport" 2>&1) || fail "inetd client: $out"
echo "$out"
wait_bg inetd 2>/dev/null || true
python3 - "$RSK_STATS" "$RSK_EXPECT" <<'PY' || fail "stats: the stdio connections or the control were carried wrongly"
import json, sys
want = sys.argv[2]
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def conns(prog):
    c = {"kernel": 0, "shm": 0, "verbs": 0}
    for d in lines:
        if d.get("program") == prog:
            for k in c:
                c[k] += d["connections"][k]
    return c
sp, mt = conns("stdio_peer"), conns("mt_client")
print("stdio_peer", sp, "mt_client", mt)
# stdio connections: 4 clients + the inetd pair (server side and client), all on the kernel
ok = sp["kernel"] >= 6 and sp["shm"] + sp["verbs"] == 0
# the control moved off TCP unless the whole run is the kernel's
ok = ok and (mt[want] == 1 if want != "kernel" else mt["kernel"] == 1)
sys.exit(0 if ok else 1)
PY
echo "stdio over $RSK_EXPECT: ok"
