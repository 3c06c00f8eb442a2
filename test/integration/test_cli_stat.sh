#!/usr/bin/env bash
# rdmasock stat against a running preloaded redis-server with preloaded redis-cli and
# redis-benchmark shm clients and a plain (not preloaded) redis-cli: rows, transports and
# fallback reasons are right, counts rise between two samples, nothing is published before
# anyone reads, a process without sockets has no segment and no thread, segments are 0600
# and unreadable to another user, dead processes' (and exec'd images') segments are cleaned
# by stat, an _exit'ed process's by the next preloaded process, exits remove theirs, and the
# default directory is /dev/shm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cli_lib.sh"
need redis-server redis-cli redis-benchmark python3
RSK_CLI=${RSK_CLI:?RSK_CLI must name the rdmasock command}

# A private segment directory (sticky and world-writable like /dev/shm): only our processes.
export RDMASOCK_STAT_DIR=$RSK_TMP/stat
mkdir -m 1777 "$RDMASOCK_STAT_DIR"
export RDMASOCK_LIBRARY=$RSK_LIB
# Under scripts/sanitize.sh: the sanitizer's runtime first in the LD_PRELOAD that `rdmasock run`
# appends the library to (redis-server, not built with it, crashes with the runtime after libc).
[ -z "${RSK_PRELOAD_FIRST:-}" ] || export LD_PRELOAD=$RSK_PRELOAD_FIRST
seg() { echo "$RDMASOCK_STAT_DIR/rdmasock-stat.$1"; }

cli_start server "$RSK_CLI" run -t shm -s "$RSK_STATS" -- redis-server --port '{PORT}' \
	--bind 127.0.0.1 --save "" --appendonly no --protected-mode no
port=$PORT_server
for _ in $(seq 50); do [ -e "$(seg "$PID_server")" ] && break; sleep 0.1; done
[ -e "$(seg "$PID_server")" ] || fail "redis-server has no stats segment"
[ "$(stat -c %a "$(seg "$PID_server")")" = 600 ] || fail "segment mode is not 0600"

# Nobody has read yet: nothing may have been published (generation, header offset 112).
gen() { python3 -c 'import struct,sys; print(struct.unpack_from("<Q", open(sys.argv[1],"rb").read(120), 112)[0])' "$1"; }
[ "$(gen "$(seg "$PID_server")")" = 0 ] || fail "the segment was published with no reader"

# A preloaded process that never tracks a socket has neither a segment nor a thread.
start_bg idle "$RSK_CLI" run -- sleep 30
sleep 0.3
[ ! -e "$(seg "$PID_idle")" ] || fail "a process without sockets has a stats segment"
[ "$(awk '/^Threads:/ { print $2 }' "/proc/$PID_idle/status")" = 1 ] ||
	fail "a process without sockets runs a publisher thread"
stop_bg idle

# After an exec the pid (and its start time) stay, but the old segment is no longer anyone's.
# A preloaded new image removes it as it starts; one that is not preloaded cannot, and stat
# then sees that nothing maps it any more and removes it.
execd() { # NAME ENV_FOR_THE_NEW_IMAGE: a socket, then exec sleep (preloaded or not)
	start_bg "$1" "$RSK_CLI" run -- python3 -c 'import os, socket, sys, time
s = socket.socket()
time.sleep(0.3)
env = dict(os.environ)
if sys.argv[1] == "plain":
    env.pop("LD_PRELOAD")
os.execve("/bin/sleep", ["sleep", "30"], env)' "$2"
	local pid
	pid=$(eval echo "\${PID_$1}")
	for _ in $(seq 100); do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] && break; sleep 0.05; done
	[ "$(cat "/proc/$pid/comm")" = sleep ] || fail "the $1 test program did not exec"
}
execd execpre preloaded
sleep 0.2
[ ! -e "$(seg "$PID_execpre")" ] || fail "a preloaded exec'd image kept its predecessor's segment"
stop_bg execpre
execd execplain plain
[ -e "$(seg "$PID_execplain")" ] || fail "the exec'd (not preloaded) image has no leftover to test"
"$RSK_CLI" stat -p "$PID_execplain" >/dev/null 2>&1 && fail "stat read the segment of an exec'd image"
[ ! -e "$(seg "$PID_execplain")" ] || fail "stat did not remove the exec'd image's stale segment"
stop_bg execplain

# A process that ends by _exit (no destructor) leaves its segment; the next preloaded process
# that makes one sweeps it from its publisher thread as it starts, with no stat run.
quit=$("$RSK_CLI" run -- python3 -c 'import os, socket
s = socket.socket()
print(os.getpid(), flush=True)
os._exit(0)')
[ -e "$(seg "$quit")" ] || fail "the _exit test program left no segment to sweep"
"$RSK_CLI" run -- python3 -c 'import socket, time
s = socket.socket()
time.sleep(0.5)'
[ ! -e "$(seg "$quit")" ] || fail "the next preloaded process did not sweep an _exit'ed one's segment"

# Without RDMASOCK_STAT_DIR the segment is /dev/shm/rdmasock-stat.PID, gone at exit.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	start_bg dflt env -u RDMASOCK_STAT_DIR "$RSK_CLI" run -- python3 -c 'import signal, socket, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)) # exit, so the destructor runs
s = socket.socket()
signal.pause()'
	# /dev/shm is everyone's: a file of this pid may be a killed process's leftover (pids
	# wrap), which the library replaces at its start. Wait until stat reads our process.
	for _ in $(seq 100); do
		RDMASOCK_STAT_DIR= "$RSK_CLI" stat --json -p "$PID_dflt" 2>/dev/null |
			grep -q "\"pid\":$PID_dflt," && break
		sleep 0.05
	done
	RDMASOCK_STAT_DIR= "$RSK_CLI" stat --json -p "$PID_dflt" | grep -q "\"pid\":$PID_dflt," ||
		fail "stat does not read /dev/shm by default"
	[ "$(stat -c %a "/dev/shm/rdmasock-stat.$PID_dflt" 2>/dev/null)" = 600 ] ||
		fail "no 0600 segment in /dev/shm by default"
	stop_bg dflt
	[ ! -e "/dev/shm/rdmasock-stat.$PID_dflt" ] || fail "the default segment survived its exit"
fi

start_bg cli "$RSK_CLI" run -t shm -- redis-cli -p "$port" -i 0.05 -r 100000 INCR n
start_bg bench "$RSK_CLI" run -t shm -- redis-benchmark -p "$port" -c 4 -n 100000000 -t get -q
start_bg plain redis-cli -p "$port" -i 0.05 -r 100000 PING
sleep 1.5

sample() { "$RSK_CLI" stat --json "$@" || fail "rdmasock stat $* failed ($?)"; }
sample -p "$PID_server" >"$RSK_TMP/s1.json"
sample -n 'redis-*' >"$RSK_TMP/all1.json"
sleep 1.2
sample -p "$PID_server" >"$RSK_TMP/s2.json"
sample -n 'redis-*' >"$RSK_TMP/all2.json"
"$RSK_CLI" stat -n redis-server >"$RSK_TMP/table.txt" || fail "table output failed"

python3 - "$RSK_TMP" "$PID_server" "$PID_cli" "$PID_bench" "$PID_plain" <<'PY' || fail "stat rows are wrong"
import json, sys
tmp, server, cli, bench, plain = sys.argv[1], *map(int, sys.argv[2:])
def load(name):
    return {o["pid"]: o for o in map(json.loads, open(f"{tmp}/{name}").read().splitlines())}
s1, s2 = load("s1.json")[server], load("s2.json")[server]
a1, a2 = load("all1.json"), load("all2.json")
assert s1["fresh"] and s2["fresh"], "server did not answer"
assert set(a1) == {server, cli, bench}, f"processes {sorted(a1)}: want server, cli, bench (not the plain cli)"
socks = s1["sockets"]
lst = [r for r in socks if r["state"] == "listen"]
assert len(lst) == 1 and lst[0]["transport"] == "accel", f"listener rows {lst}"
shm = [r for r in socks if r["state"] == "established" and r["transport"] == "shm"]
ker = [r for r in socks if r["state"] == "established" and r["transport"] == "kernel"]
assert len(shm) == 5, f"{len(shm)} shm rows, want 1 cli + 4 benchmark"
assert all(r["fallback"] == "-" for r in shm), shm
assert len(ker) == 1 and ker[0]["fallback"] == "no_peer", f"kernel rows {ker}"
for who in (cli, bench):
    rows = [r for r in a1[who]["sockets"] if r["state"] == "established"]
    assert rows and all(r["transport"] == "shm" for r in rows), f"{who}: {rows}"
    assert all(r["peer"].endswith(":%d" % int(lst[0]["local"].rsplit(":", 1)[1])) for r in rows)
assert len([r for r in a1[bench]["sockets"] if r["state"] == "established"]) == 4
# counts rise between the samples: per socket and per process
by_fd = lambda o: {r["fd"]: r for r in o["sockets"]}
r1, r2 = by_fd(s1), by_fd(s2)
for r in shm + ker:
    b = r2.get(r["fd"])
    assert b is not None, f"fd {r['fd']} vanished"
    assert b["bytes_received"] > r["bytes_received"] and b["bytes_sent"] > r["bytes_sent"], (r, b)
    if r["transport"] == "shm":
        assert b["messages_received"] > r["messages_received"], (r, b)
t1, t2 = s1["totals"], s2["totals"]
assert t2["bytes_sent"]["shm"] > t1["bytes_sent"]["shm"] > 0
assert t2["bytes_received"]["kernel"] > t1["bytes_received"]["kernel"] > 0
assert t1["connections"]["shm"] >= 5 and t1["fallbacks"]["no_peer"] >= 1
assert a2[cli]["totals"]["bytes_sent"]["shm"] > a1[cli]["totals"]["bytes_sent"]["shm"]
print("stat rows ok:", len(shm), "shm,", len(ker), "kernel (no_peer), listener accel")
PY
grep -q "^PID .*TRANSP.*FALLBACK" "$RSK_TMP/table.txt" || fail "table has no header"
grep -q "redis-server .* established kernel .* no_peer$" "$RSK_TMP/table.txt" ||
	fail "table shows no kernel row with no_peer: $(cat "$RSK_TMP/table.txt")"
grep -q "redis-server  *total: connections" "$RSK_TMP/table.txt" || fail "no total line"

# Another user can read nothing (mode 0600; the command refuses other owners too).
if ! command -v setpriv >/dev/null || [ "$(id -u)" != 0 ]; then
	echo "note: not root (or no setpriv): the other-user checks did not run" >&2
else
	chmod 755 "$RSK_TMP" # the way to the segments is open: only their 0600 mode protects them
	out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$RSK_CLI" stat -p "$PID_server" 2>&1)
	rc=$?
	[ "$rc" = 1 ] || fail "another user's stat -p exited $rc: $out"
	grep -q "another user" <<<"$out" || fail "no 'another user' message: $out"
	out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$RSK_CLI" stat --json 2>&1)
	[ -z "$(grep '"pid"' <<<"$out")" ] || fail "another user saw processes: $out"
fi

# SIGKILL leaves a stale segment; stat removes it. A clean exit removes its own.
bench_seg=$(seg "$PID_bench")
stop_bg bench KILL
[ -e "$bench_seg" ] || fail "SIGKILL should leave the segment for stat to clean"
sh -c 'exit 0' & dead=$!
wait "$dead"
cp "$(seg "$PID_server")" "$(seg "$dead")"
"$RSK_CLI" stat >/dev/null
[ ! -e "$bench_seg" ] || fail "stat did not remove the dead benchmark's segment"
[ ! -e "$(seg "$dead")" ] || fail "stat did not remove a dead pid's segment"
"$RSK_CLI" stat -p "$PID_bench" 2>/dev/null && fail "stat -p of a dead pid succeeded"
stop_bg cli
stop_bg plain
server_seg=$(seg "$PID_server")
stop_bg server
[ ! -e "$server_seg" ] || fail "redis-server's segment survived its exit"
echo "rdmasock stat: ok"
