#!/usr/bin/env bash
# rdmasock run: the environment it sets, LD_PRELOAD appended after an existing one (both
# libraries end up loaded, in that order, and never twice), relative paths made absolute,
# exit codes (command's own, 126, 127, 2 for usage, 1 without the library), and a preloaded
# pair started through it really runs over shm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cli_lib.sh"
need cc python3
RSK_CLI=${RSK_CLI:?RSK_CLI must name the rdmasock command}
export RDMASOCK_LIBRARY=$RSK_LIB

# Another preload library, loaded first: it says so from its constructor.
cat >"$RSK_TMP/other.c" <<'C'
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void hello(void) { dprintf(2, "other-preload-loaded\n"); }
C
cc -shared -fPIC -o "$RSK_TMP/libother.so" "$RSK_TMP/other.c" || fail "cannot build the test preload"

out=$(LD_PRELOAD=$RSK_TMP/libother.so "$RSK_CLI" run -t shm -l info -s rel.jsonl -- \
	sh -c 'echo "$LD_PRELOAD|$RDMASOCK_TRANSPORT|$RDMASOCK_LOG|$RDMASOCK_STATS"' 2>"$RSK_TMP/err")
[ "$out" = "$RSK_TMP/libother.so:$RSK_LIB|shm|info|$PWD/rel.jsonl" ] ||
	fail "environment: got '$out'"
grep -q other-preload-loaded "$RSK_TMP/err" || fail "the existing preload did not load"

# Both in the link map, in order: the loader lists preloaded objects first, as loaded.
order=$(LD_PRELOAD=$RSK_TMP/libother.so "$RSK_CLI" run -- env LD_TRACE_LOADED_OBJECTS=1 \
	/bin/true 2>/dev/null | awk '/libother.so|librdmasock.so/ { print $1 }' | tr '\n' ' ')
[ "$order" = "$RSK_TMP/libother.so $RSK_LIB " ] || fail "preload order: '$order'"

# Already preloaded (run inside run): not added twice.
out=$("$RSK_CLI" run -- "$RSK_CLI" run -- sh -c 'echo "$LD_PRELOAD"')
[ "$out" = "$RSK_LIB" ] || fail "nested run: LD_PRELOAD='$out'"
out=$(LD_PRELOAD="$RSK_TMP/libother.so $RSK_LIB" "$RSK_CLI" run -- sh -c 'echo "$LD_PRELOAD"' 2>/dev/null)
[ "$out" = "$RSK_TMP/libother.so $RSK_LIB" ] || fail "space-separated LD_PRELOAD: '$out'"

# --config: relative made absolute, missing file is an error before anything runs.
touch "$RSK_TMP/rules.conf"
out=$(cd "$RSK_TMP" && "$RSK_CLI" run -c rules.conf -- sh -c 'echo "$RDMASOCK_CONFIG"')
[ "$out" = "$RSK_TMP/rules.conf" ] || fail "--config: '$out'"
"$RSK_CLI" run -c "$RSK_TMP/none.conf" -- true 2>/dev/null
[ $? = 1 ] || fail "missing --config file should exit 1"

expect_rc() { # RC CMD...
	local want=$1 rc
	shift
	"$@" >/dev/null 2>&1
	rc=$?
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want"
}
expect_rc 7 "$RSK_CLI" run -- sh -c 'exit 7'
expect_rc 0 "$RSK_CLI" run true
expect_rc 127 "$RSK_CLI" run -- /nonexistent/program
chmod -x "$RSK_TMP/other.c"
expect_rc 126 "$RSK_CLI" run -- "$RSK_TMP/other.c"
expect_rc 2 "$RSK_CLI" run -t rdma -- true
expect_rc 2 "$RSK_CLI" run -l loud -- true
expect_rc 2 "$RSK_CLI" run
expect_rc 2 "$RSK_CLI" run --bogus -- true
expect_rc 2 "$RSK_CLI" frobnicate
expect_rc 0 "$RSK_CLI" run --help
expect_rc 0 "$RSK_CLI" --help
expect_rc 0 "$RSK_CLI" help stat
expect_rc 0 "$RSK_CLI" --version
RDMASOCK_LIBRARY=$RSK_TMP/none.so expect_rc 1 "$RSK_CLI" run -- true
"$RSK_CLI" run --help | grep -q "^Usage: rdmasock run" || fail "run --help prints no usage"

# A pair started through run is accelerated (the stats lines say shm).
[ -x "$RSK_PROGS/echo_server" ] || skip "test programs not built"
cli_start echo "$RSK_CLI" run -t shm -s "$RSK_STATS" -- "$RSK_PROGS/echo_server" '{PORT}'
port=$PORT_echo
"$RSK_CLI" run -t shm -s "$RSK_STATS" -- python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"x" * 100000)
s.shutdown(socket.SHUT_WR)
n = 0
while True:
    b = s.recv(65536)
    if not b:
        break
    n += len(b)
sys.exit(0 if n == 100000 else "echoed %d" % n)' "$port" || fail "echo through run failed"
stop_bg echo
assert_carried shm 1 python3
assert_carried shm 1 echo_server
echo "rdmasock run: ok"
