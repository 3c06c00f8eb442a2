#!/usr/bin/env bash
# Coalescing of small writes (test/progs/nagle.c): with TCP_NODELAY off (TCP's default) small
# writes behind an unconsumed message are merged, with TCP_NODELAY on they never are; a
# held-back write reaches the peer within 50 ms even while the writer sleeps outside the
# library; TCP_CORK/MSG_MORE data arrives on uncork; write-write-read never stalls. Each
# mode without the library, then preloaded, with the counters checked from RDMASOCK_STATS.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/nagle" ] || fail "test program nagle not built in RSK_PROGS=$RSK_PROGS"

# counter MODE FIELD: the sum of FIELD (a plain number) over the stats lines of MODE's run.
counter() {
	python3 - "$RSK_TMP/$1.jsonl" "$2" <<'PY'
import json, sys
print(sum(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]).read().splitlines()))
PY
}

for mode in coalesce nodelay tick cork waitpush; do
	"$RSK_PROGS/nagle" "$mode" >"$RSK_TMP/plain.$mode" 2>&1 ||
		fail "$mode without the library: $(cat "$RSK_TMP/plain.$mode")"
	RSK_STATS=$RSK_TMP/$mode.jsonl
	pre "$RSK_PROGS/nagle" "$mode" >"$RSK_TMP/pre.$mode" 2>&1 ||
		fail "$mode preloaded: $(cat "$RSK_TMP/pre.$mode")"
	cat "$RSK_TMP/pre.$mode"
	grep -q "^nagle: $mode: ok" "$RSK_TMP/pre.$mode" || fail "$mode: no ok line"
	assert_carried "$RSK_EXPECT" 2 nagle
done

joined=$(counter coalesce writes_coalesced)
joined_nd=$(counter nodelay writes_coalesced)
echo "writes coalesced: Nagle $joined, TCP_NODELAY $joined_nd"
[ "$joined_nd" = 0 ] || fail "TCP_NODELAY still coalesced $joined_nd writes"
if [ "$RSK_EXPECT" = kernel ]; then
	[ "$joined" = 0 ] || fail "the kernel path counted $joined coalesced writes"
else
	# 64 writes behind an unread first one: all but the first two join a staged message.
	[ "$joined" -ge 32 ] || fail "only $joined of 64 small writes were coalesced"
	[ "$(counter cork writes_coalesced)" -ge 3 ] || fail "TCP_CORK/MSG_MORE did not coalesce"
fi
echo "nagle over $RSK_EXPECT: ok"
