#!/usr/bin/env bash
# io_uring detection (test/progs/uring.c, preload/iouring.c). A process that sets up an
# io_uring may do its socket I/O there, where no preload sees it, so from then on its new
# connections stay on the kernel: as a client after io_uring_setup through libc's syscall()
# or liburing's io_uring_queue_init, and as a server that set one up after listen() (the
# preloaded client then finds no rendezvous). The control (no ring) must be accelerated,
# so each step's stats line says which path carried the bytes.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/uring" ] || fail "test program uring not built in RSK_PROGS=$RSK_PROGS"
[ -x "$RSK_PROGS/echo_server" ] || fail "test program echo_server not built"

# carried FILE PROG KIND: PROG's stats lines in FILE show 1 connection, all on KIND.
carried() {
	python3 - "$1" "$2" "$3" <<'PY' || fail "$2 in $1: not carried by $3 alone: $(cat "$1")"
import json, sys
path, prog, kind = sys.argv[1:]
lines = [json.loads(l) for l in open(path) if l.strip()]
lines = [d for d in lines if d.get("program") == prog]
c = {k: sum(d["connections"][k] for d in lines) for k in ("kernel", "shm", "verbs")}
sys.exit(0 if c[kind] == 1 and sum(c.values()) == 1 else 1)
PY
}

port=$(free_port)
start_bg echo pre "$RSK_PROGS/echo_server" "$port" poll
wait_listen "$port"
for how in none syscall liburing; do
	st=$RSK_TMP/client_$how.jsonl
	rc=0
	out=$(RSK_STATS=$st pre "$RSK_PROGS/uring" client "$port" "$how" 2>&1) || rc=$?
	[ "$rc" = 77 ] && { echo "client $how: liburing missing"; continue; }
	[ "$rc" = 0 ] || fail "uring client $how: $out"
	echo "$out"
	if [ "$how" = none ]; then carried "$st" uring shm; else carried "$st" uring kernel; fi
done
[ -s "$RSK_TMP/client_liburing.jsonl" ] || skip "liburing.so.2 missing (the syscall path passed)"
stop_bg echo

# The server sets its ring up after listen(): the rendezvous goes, the client stays TCP.
for how in none syscall; do
	st=$RSK_TMP/server_$how.jsonl
	RSK_STATS=$st pre "$RSK_PROGS/uring" server "$how" >"$RSK_TMP/server_$how.out" 2>&1 &
	spid=$!
	for _ in $(seq 100); do grep -q '^ready' "$RSK_TMP/server_$how.out" && break; sleep 0.05; done
	sport=$(sed -n 's/^port //p' "$RSK_TMP/server_$how.out")
	[ -n "$sport" ] || fail "uring server $how: $(cat "$RSK_TMP/server_$how.out")"
	out=$(RSK_STATS=$st pre "$RSK_PROGS/uring" client "$sport" none 2>&1) ||
		fail "client of the uring server ($how): $out"
	wait "$spid" || fail "uring server $how: $(cat "$RSK_TMP/server_$how.out")"
	kind=kernel
	[ "$how" = none ] && kind=shm
	python3 - "$st" "$kind" <<'PY' || fail "server $how: both ends not on $kind: $(cat "$st")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if len(lines) == 2 and all(d["connections"][sys.argv[2]] == 1 for d in lines) else 1)
PY
	echo "server $how: both ends on $kind"
done
echo "io_uring detection: ok"
