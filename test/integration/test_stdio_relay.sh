#!/usr/bin/env bash
# stdio on a connection that is already accelerated (test/progs/stdio_peer.c): set up on shm
# at connect (RDMASOCK_TCP_FIRST=off here; with the defaults the first connection to a
# destination is set up so too), then used through glibc's stdio, whose internal reads and
# writes no preload sees. fdopen() and a dup onto 0-2 relay the connection through a pipe of
# its own (conn/relay.c): every byte must arrive in order, with those of the intercepted
# calls, and RDMASOCK_STATS must show shm carrying them. Cases: line-buffered fprintf/fgets,
# 1 MiB by fwrite/fread, 8 MiB written by a forked child while the parent reads (fork after
# the relay started), stdio mixed with send()/write()/recv() from the first byte and from
# mid-stream, write() + getc(), an epoll registration made before fdopen, a program with a
# SIGCHLD handler or SIGCHLD ignored and a waitpid(-1) thread (no SIGCHLD, no child of the
# library to reap), bash's /dev/tcp (builtins through stdout, read, and an exec'd
# head reading 1 MiB), and an inetd-style server (socket on stdin/stdout, exec of sed -u; one
# that asks the socket its names and options after the exec; and exec of a job that writes 4 MiB and is interrupted with its process group at once), and a
# server that writes 4 MiB through stdio and dies at once without destructors (_exit,
# SIGKILL): its relay runs in a helper process of its own and delivers all of it, then EOF;
# and such an orphaned relay ends when its peer takes nothing for RDMASOCK_ORPHAN_MS.
# test_stdio.sh covers the same with TCP first, where the connection stays on TCP.
. "$(dirname "$0")/lib.sh"
need sed bash head
for p in stdio_peer echo_server; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done
[ "$RSK_TEST_TRANSPORT" = kernel ] || RSK_TCP_FIRST=off

port=$(free_port)
start_bg echo pre "$RSK_PROGS/echo_server" "$port" poll
wait_listen "$port"
for m in lines bulk mix late getc epoll "big 8"; do
	set -- $m
	out=$(pre timeout 120 "$RSK_PROGS/stdio_peer" "$1" "$port" ${2:+"$2"} 2>&1) ||
		fail "stdio_peer $m: $out"
	echo "$out" | grep -q "^stdio_peer: $1: ok$" || fail "stdio_peer $m: $out"
	echo "stdio_peer $m: ok"
done
[ "$m" = "big 8" ] || fail "the mode list was cut short"

# The relay's helper is no child of the program: with a SIGCHLD handler (with and without
# SA_NOCLDWAIT) or SIGCHLD ignored, and a thread in waitpid(-1) for a child of its own, the
# program gets no SIGCHLD, reaps only its own child and has none left after (kernel TCP too).
for m in sigchld sigchld_nocldwait sigchld_ign; do
	out=$(pre timeout 60 "$RSK_PROGS/stdio_peer" "$m" "$port" 2>&1) || fail "stdio_peer $m: $out"
	echo "$out" | grep -q "^stdio_peer: $m: ok$" || fail "stdio_peer $m: $out"
	! echo "$out" | grep -q "helper not forked" || fail "stdio_peer $m: no helper: $out"
	echo "stdio_peer $m: ok"
done

# bash: builtins write through stdout (a dup of the socket onto 1) and read through stdin;
# then (bash started the relay itself: a relay reads for the process that started it) a
# forked subshell's builtin printf writes 1 MiB and an exec'd head reads its echo.
line="bash over /dev/tcp $(date +%s%N)"
got=$(pre timeout 60 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"
for i in $(seq 200); do echo "$2 $i" >&3; read -r l <&3; [ "$l" = "$2 $i" ] || { echo "round $i: $l"; exit 1; }; done
echo "$l"' _ "$port" "$line" 2>&1) || fail "bash /dev/tcp: $got"
[ "$got" = "$line 200" ] || fail "bash /dev/tcp echoed '$got', wanted '$line 200'"
echo "bash /dev/tcp lines: ok"
got=$(pre timeout 60 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"
echo go >&3; read -r l <&3; [ "$l" = go ] || exit 1
blob=$(printf "%01023d\n" 0)
( for i in $(seq 1024); do printf "%s\n" "$blob"; done >&3 ) &
head -c 1048576 <&3 | sha256sum; wait' _ "$port" 2>&1) || fail "bash /dev/tcp bulk: $got"
want=$(for i in $(seq 1024); do printf "%01023d\n" 0; done | sha256sum)
[ "$got" = "$want" ] || fail "bash /dev/tcp bulk: got '$got', wanted '$want'"
echo "bash /dev/tcp 1 MiB: ok"
stop_bg echo

# served SERVER_MODE CLIENT_MODE: a stdio_peer server and its client; both must say ok.
served() {
	local port out
	port=$(free_port)
	start_bg "$1" pre "$RSK_PROGS/stdio_peer" "$1" "$port"
	wait_listen "$port"
	out=$(pre timeout 60 "$RSK_PROGS/stdio_peer" "$2" "$port" 2>&1) || fail "$2: $out"
	echo "$out"
	wait_bg "$1" 2>/dev/null || true
	grep -q "$1: ok" "$RSK_TMP/$1.log" || fail "$1 server: $(cat "$RSK_TMP/$1.log")"
}

served inetd inetd_client

# An inetd child asks its socket what it is, after the dup2 and after the exec: TCP's names
# (the client's own, swapped), AF_INET, IPPROTO_TCP, TCP_NODELAY set and read back, as over
# the kernel; a relayed one is a unix socket underneath (its stand-in names, conn/relay.c).
served names names_client

# The exec'd job writes 4 MiB and is interrupted with its whole process group (Ctrl-C): the
# relay's helper is not in that group, so every byte still reaches the client, then EOF.
kport=$(free_port)
start_bg inetd_int pre "$RSK_PROGS/stdio_peer" inetd_int "$kport"
wait_listen "$kport"
out=$(pre timeout 60 "$RSK_PROGS/stdio_peer" zeros_client "$kport" 2>&1) ||
	fail "the interrupted job's client: $out"
wait_bg inetd_int 2>/dev/null || true
grep -q "inetd_int: ok" "$RSK_TMP/inetd_int.log" ||
	fail "inetd_int server: $(cat "$RSK_TMP/inetd_int.log")"
echo "an interrupted inetd job's last 4 MiB: ok"

# A server writes 4 MiB through stdio, fflush()es and dies at once without destructors
# (_exit, then SIGKILL): the client, reading a second later, gets every byte, then EOF.
for w in exit_writer kill_writer; do
	wport=$(free_port)
	start_bg "$w" pre "$RSK_PROGS/stdio_peer" "$w" "$wport"
	wait_listen "$wport"
	out=$(pre timeout 60 "$RSK_PROGS/stdio_peer" zeros_client "$wport" 2>&1) ||
		fail "$w: the client of a writer that died: $out"
	wait_bg "$w" 2>/dev/null || true
	grep -q "^written$" "$RSK_TMP/$w.log" || fail "$w: $(cat "$RSK_TMP/$w.log")"
	echo "4 MiB by stdio, then $w died: all of it, then EOF: ok"
done

# The writer's relay is an orphan once the writer is gone. As the kernel ends an orphaned TCP
# socket (tcp_fin_timeout; RDMASOCK_ORPHAN_MS here 1.5 s), it ends when its peer takes nothing
# for that long: a peer that read everything but keeps the connection open no longer keeps
# the relay's helper (it writes its stats line as it ends, in a file of its own here); a
# peer that reads nothing gets what it buffered, then ECONNRESET. Relayed connections only.
if [ "$RSK_TEST_TRANSPORT" != kernel ]; then
	ostats=$RSK_TMP/orphan.stats
	oport=$(free_port)
	start_bg orphan_fin pre env RDMASOCK_STATS="$ostats" RDMASOCK_ORPHAN_MS=1500 \
		"$RSK_PROGS/stdio_peer" exit_writer "$oport"
	wait_listen "$oport"
	start_bg hold pre "$RSK_PROGS/stdio_peer" hold_client "$oport" # holds for 20 s
	end=$((SECONDS + 7))
	while [ $SECONDS -lt $end ] && ! grep -q '"program":"stdio_peer"' "$ostats" 2>/dev/null; do
		sleep 0.1
	done
	grep -q "then EOF; holding" "$RSK_TMP/hold.log" || fail "holding client: $(cat "$RSK_TMP/hold.log")"
	kill -0 "$PID_hold" 2>/dev/null || fail "the holding client ended early: $(cat "$RSK_TMP/hold.log")"
	grep -q '"program":"stdio_peer"' "$ostats" 2>/dev/null ||
		fail "the orphaned relay still runs 6 s after its peer took the last byte"
	stop_bg hold
	echo "an orphan whose peer keeps the connection open: ended: ok"
	sport=$(free_port)
	start_bg orphan_rst pre env RDMASOCK_ORPHAN_MS=1500 "$RSK_PROGS/stdio_peer" exit_writer "$sport"
	wait_listen "$sport"
	out=$(pre timeout 60 "$RSK_PROGS/stdio_peer" stall_client "$sport" 2>&1) ||
		fail "an orphan's peer that reads nothing: $out"
	echo "$out"
fi

# Every connection of stdio_peer and bash on shm (none on the kernel), carrying the bytes.
# A relay runs in a helper process of its own, which writes its line (the bytes it moved,
# under the program's name) once the relay is over, maybe after its program ended: the check
# is tried again for up to 10 s.
check_stats() {
python3 - "$RSK_STATS" "$RSK_EXPECT" <<'PY'
import json, sys
want = sys.argv[2]
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def tot(progs, field):
    c = {"kernel": 0, "shm": 0, "verbs": 0}
    for d in lines:
        if d.get("program") in progs:
            for k in c:
                c[k] += d[field][k]
    return c
conns = tot(("stdio_peer",), "connections")
sent, rcvd = tot(("stdio_peer", "bash"), "bytes_sent"), tot(("stdio_peer", "bash"), "bytes_received")
bconns = tot(("bash",), "connections")
print("stdio_peer", conns, "bash", bconns, "sent", sent, "received", rcvd)
# 7 clients + the inetd and names pairs; bash: 2. The big run's child reports no connection.
ok = conns[want] >= 11 and bconns[want] >= 2
ok = ok and all(conns[k] + bconns[k] == 0 for k in conns if k != want)
# 1 MiB + 8 MiB + 1 MiB (bash) each way at least, all on shm (the relays count what they
# move; the inetd server's line is written by the helper that ran its relay after the exec).
# The kernel's counts come from TCP_INFO and are not checked here.
if want != "kernel":
    ok = ok and sent[want] >= 10 << 20 and rcvd[want] >= 10 << 20
    ok = ok and all(sent[k] + rcvd[k] == 0 for k in sent if k != want)
sys.exit(0 if ok else 1)
PY
}
for i in $(seq 50); do
	check_stats >/dev/null && break
	sleep 0.2
done
check_stats || fail "stats: the stdio connections were carried wrongly"
echo "stdio relayed over $RSK_EXPECT: ok"
