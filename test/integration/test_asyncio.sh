#!/usr/bin/env bash
# Python asyncio (non-blocking connect, SO_ERROR, epoll, partial reads, write_eof) on both
# ends: asyncio_echo.py server and client, 20 concurrent connections carrying 1000 messages
# of random sizes (1 B .. 256 KiB), every echo compared, EOF after write_eof. Run without
# and with the library on both interpreters: the client's totals are identical, the server
# echoed exactly the client's bytes on exactly 20 connections, and the stats lines of the
# interpreter (its program name is discovered from them) show the expected transport.
. "$(dirname "$0")/lib.sh"
use_python
"$PY" -c 'import asyncio, random; random.Random(1).randbytes(1)' 2>/dev/null ||
	skip "$PY lacks asyncio or random.randbytes (Python >= 3.9 needed)"
ECHO=$(dirname "$0")/asyncio_echo.py
CONNS=20
MSGS=1000


run_asyncio() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port bytes
	port=$(free_port)
	start_bg "srv_$tag" $wrap "$PY" "$ECHO" server "$port"
	wait_listen "$port"
	$wrap "$PY" "$ECHO" client "$port" "$CONNS" "$MSGS" >"$RSK_TMP/client_$tag.out" 2>&1 ||
		fail "asyncio client ($tag): $(tail -20 "$RSK_TMP/client_$tag.out")"
	grep -q "^asyncio client: connections $CONNS messages $MSGS bytes [0-9]*: ok$" \
		"$RSK_TMP/client_$tag.out" || fail "asyncio client ($tag): $(cat "$RSK_TMP/client_$tag.out")"
	stop_bg "srv_$tag"
	bytes=$(sed -n 's/.* bytes \([0-9]*\): ok$/\1/p' "$RSK_TMP/client_$tag.out")
	grep -qx "served $CONNS connections, $bytes bytes" "$RSK_TMP/srv_$tag.log" ||
		fail "asyncio server ($tag): '$(cat "$RSK_TMP/srv_$tag.log")', client sent $bytes bytes"
	echo "$bytes" >"$RSK_TMP/bytes_$tag"
}

run_asyncio "" plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run_asyncio pre with
cmp -s "$RSK_TMP/bytes_plain" "$RSK_TMP/bytes_with" ||
	fail "byte totals differ: $(cat "$RSK_TMP/bytes_plain") vs $(cat "$RSK_TMP/bytes_with")"

# Both interpreters wrote one line each, under the interpreter's own program name
# (program_invocation_short_name: "python3" for /usr/bin/python3).
progs=$(python3 - "$RSK_STATS" <<'PY'
import json, sys
print(" ".join(sorted(json.loads(l)["program"] for l in open(sys.argv[1]).read().splitlines())))
PY
)
prog=${progs%% *}
case "$prog" in
python*) ;;
*) fail "unexpected program names in the stats: '$progs'" ;;
esac
[ "$progs" = "$prog $prog" ] || fail "expected two stats lines from $prog, got '$progs'"
# 20 connections counted by the client and 20 by the server.
assert_carried "$RSK_EXPECT" $((2 * CONNS)) "$prog"
echo "asyncio ($prog) over $RSK_EXPECT: ok ($(cat "$RSK_TMP/bytes_with") bytes each way)"
