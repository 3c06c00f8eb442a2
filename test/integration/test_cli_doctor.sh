#!/usr/bin/env bash
# rdmasock doctor outside the Soft-RoCE guest (no RDMA device here): a clear WARN with its
# fix and exit status 3 (warnings only); a memlock line; for HOST:PORT a preloaded listener
# is OK, a plain one WARN, no listener FAIL (exit 1); a bad rules file and a bad variable
# FAIL with the line; usage errors exit 2.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cli_lib.sh"
need python3
RSK_CLI=${RSK_CLI:?RSK_CLI must name the rdmasock command}
export RDMASOCK_LIBRARY=$RSK_LIB
export RDMASOCK_CONFIG=$RSK_TMP/rules.conf
echo "redis-server server * 6379 transport=shm" >"$RDMASOCK_CONFIG"

doctor() { # EXPECTED_RC ARGS...: output in $OUT
	local want=$1 rc
	shift
	# 8 MiB of memlock (Debian's default; lowering is always allowed) fits 16 connections
	OUT=$(ulimit -l 8192 2>/dev/null; "$RSK_CLI" doctor -c 16 "$@" 2>&1)
	rc=$?
	[ "$rc" = "$want" ] || fail "doctor $* exited $rc, want $want: $OUT"
}
has() { grep -qE "$1" <<<"$OUT" || fail "doctor output lacks /$1/: $OUT"; }

if ls /sys/class/infiniband/* >/dev/null 2>&1; then
	skip "this host has an RDMA device: the no-device checks do not apply (test/vm runs doctor there)"
fi
doctor 3
has "^WARN rdma-devices: no RDMA device: .*\(no_device\); fix: "
has "^OK   library: $RSK_LIB$"
has "^OK   rules: $RDMASOCK_CONFIG: 1 rules$"
has "^OK   memlock: 8.0 MiB: room for 16 verbs connections \(16 need 8.0 MiB\)$"
[ "$(grep -c '^WARN' <<<"$OUT")" = 1 ] || fail "only the device should warn: $OUT"
# every line is one check with a verdict
grep -qvE '^(OK  |WARN|FAIL) [a-z_-]+: ' <<<"$OUT" && fail "a line without a verdict: $OUT"

# memlock against N connections: 2 x 8 x 32 KiB each, in 4 MiB chunks of 16 rings.
OUT=$(ulimit -l 8192 && "$RSK_CLI" doctor -c 100 2>&1)
has "^WARN memlock: 8.0 MiB: room for 16 verbs connections, 100 need 52.0 MiB .*; fix: raise it"
OUT=$(ulimit -l 2048 && "$RSK_CLI" doctor -c 1 2>&1)
has "^WARN memlock: 2.0 MiB: room for 0 verbs connections, 1 need 4.0 MiB "

# A service on this host: preloaded listener, plain listener, nothing.
[ -x "$RSK_PROGS/echo_server" ] || skip "test programs not built"
cli_start pre "$RSK_CLI" run -t shm -- "$RSK_PROGS/echo_server" '{PORT}'
p1=$PORT_pre
doctor 3 "127.0.0.1:$p1"
has "^OK   service: 127.0.0.1:$p1: listener is preloaded \(rendezvous @rsk1/l/[0-9]+/127.0.0.1/$p1\)"
has "^WARN rdma_cm: 127.0.0.1:$p1: not checked: no RDMA device"
cli_start plain "$RSK_PROGS/echo_server" '{PORT}'
p2=$PORT_plain
doctor 3 "127.0.0.1:$p2"
has "^WARN service: 127.0.0.1:$p2: listener is not preloaded .*\(no_peer\); fix: start the server with: rdmasock run"
p3=$(cli_port)
doctor 1 "127.0.0.1:$p3"
has "^FAIL service: 127.0.0.1:$p3: nothing listens"
doctor 1 "[::1]:$p3"
has "^FAIL service: \[::1\]:$p3: nothing listens"

# Configuration errors are failures, with the file and line.
printf 'ok * * * transport=shm\nbad clinet * * transport=shm\n' >"$RDMASOCK_CONFIG"
doctor 1
has "^FAIL rules: $RDMASOCK_CONFIG:2: invalid role \"clinet\""
RDMASOCK_CONFIG=$RSK_TMP/missing.conf doctor 1
has "^FAIL rules: cannot read $RSK_TMP/missing.conf"
echo "x * * * transport=shm" >"$RDMASOCK_CONFIG"
RDMASOCK_BUF_COUNT=3 doctor 1
has "^FAIL environment: invalid RDMASOCK_BUF_COUNT=\"3\""

doctor 2 not-a-target
doctor 2 127.0.0.1:1 127.0.0.1:2
doctor 2 --bogus
doctor 0 --help
has "^Usage: rdmasock doctor"
echo "rdmasock doctor: ok"
