#!/usr/bin/env bash
# integrity: 1 GiB in EACH direction at the same time over one preloaded connection, random
# write and read sizes from 1 B to 1 MiB, every byte checked where it lands, FNV-1a-64 hash
# trailers compared in-band, EOF after the trailer on both sides (see test/progs/integrity.c).
# Checked: both sides print ok, each side's sent hash equals the other's received hash, the
# byte counts are exactly 1 GiB each way, and the stats show the expected transport carrying
# (at least) 2 GiB per process. The seed is random per run and logged; INTEGRITY_SEED=N
# (and INTEGRITY_BYTES=N[KMG] for a quick run) in the environment reproduce a failing run.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/integrity" ] || fail "test program integrity not built in RSK_PROGS=$RSK_PROGS"

BYTES=$((1 << 30))
[ -n "${INTEGRITY_BYTES:-}" ] && BYTES=$(python3 -c '
import sys
s = sys.argv[1]; m = {"k": 10, "m": 20, "g": 30}
print(int(s[:-1]) << m[s[-1].lower()] if s[-1].lower() in m else int(s))' "$INTEGRITY_BYTES")


port=$(free_port)
start_bg srv pre "$RSK_PROGS/integrity" server "$port"
wait_listen "$port"
t0=$(date +%s.%N)
pre timeout 58 "$RSK_PROGS/integrity" client "$port" >"$RSK_TMP/client.out" 2>&1 ||
	fail "integrity client: $(cat "$RSK_TMP/client.out"; echo "--- server:"; cat "$RSK_TMP/srv.log")"
t1=$(date +%s.%N)
for _ in $(seq 100); do kill -0 "$PID_srv" 2>/dev/null || break; sleep 0.1; done
wait "$PID_srv" || fail "integrity server exited non-zero: $(cat "$RSK_TMP/srv.log")"
cat "$RSK_TMP/client.out" "$RSK_TMP/srv.log"

line_c=$(grep '^integrity: client .*: ok$' "$RSK_TMP/client.out") || fail "client did not verify"
line_s=$(grep '^integrity: server .*: ok$' "$RSK_TMP/srv.log") || fail "server did not verify"
# word N of a result line: 4 = bytes sent, 6 = their hash, 8 = bytes received, 10 = their hash
w() { echo "$1" | awk -v n="$2" '{print $n}'; }
[ "$(w "$line_c" 4)" = "$BYTES" ] && [ "$(w "$line_c" 8)" = "$BYTES" ] ||
	fail "client moved $(w "$line_c" 4)/$(w "$line_c" 8) bytes, expected $BYTES each way"
[ "$(w "$line_s" 4)" = "$BYTES" ] && [ "$(w "$line_s" 8)" = "$BYTES" ] ||
	fail "server moved $(w "$line_s" 4)/$(w "$line_s" 8) bytes, expected $BYTES each way"
[ "$(w "$line_c" 6)" = "$(w "$line_s" 10)" ] ||
	fail "client sent hash $(w "$line_c" 6), server received hash $(w "$line_s" 10)"
[ "$(w "$line_s" 6)" = "$(w "$line_c" 10)" ] ||
	fail "server sent hash $(w "$line_s" 6), client received hash $(w "$line_c" 10)"

[ "$(stats_lines integrity)" = 2 ] || fail "integrity wrote $(stats_lines integrity) stats lines, expected 2"
assert_carried "$RSK_EXPECT" 2 integrity
sent=$(stats_get bytes_sent "$RSK_EXPECT" integrity)
rcvd=$(stats_get bytes_received "$RSK_EXPECT" integrity)
[ "$sent" -ge $((2 * BYTES)) ] && [ "$rcvd" -ge $((2 * BYTES)) ] ||
	fail "$RSK_EXPECT carried sent $sent received $rcvd, expected >= $((2 * BYTES)) each"
echo "integrity over $RSK_EXPECT: ok ($BYTES bytes each way, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s)"
