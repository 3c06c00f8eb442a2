#!/usr/bin/env bash
# select() says readable, then a blocking read() must not block (test/progs/selread.c):
# socat's relay loop over two connections, 12 s of two-message turns taken in alternation on
# each; a wake-up for a message already read makes select() report a connection whose
# blocking read() then sleeps while the writer waits on the other one. Without the library,
# then preloaded, with the transport checked from the stats.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/selread" ] || fail "test program selread not built in RSK_PROGS=$RSK_PROGS"

"$RSK_PROGS/selread" 3 >"$RSK_TMP/plain" 2>&1 || fail "without the library: $(cat "$RSK_TMP/plain")"
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
pre "$RSK_PROGS/selread" 12 >"$RSK_TMP/pre" 2>&1 || fail "preloaded: $(cat "$RSK_TMP/pre")"
cat "$RSK_TMP/pre"
grep -q "^selread: turns [0-9]*: ok$" "$RSK_TMP/pre" || fail "no ok line"
# the writer's two connects and the reader's two accepts
assert_carried "$RSK_EXPECT" 4 selread
echo "selread over $RSK_EXPECT: ok"
