#!/usr/bin/env bash
# Lost read wake-ups after a long readable run (test/progs/wakeflood.c): a reader that stays
# readable through 600 arrivals, then drains and waits in poll()/select() for 3 more, must see
# them within 2 s -- ten rounds each of: the accepting process reading (plain), a forked child
# reading while the accepting parent closed its copy (fork, socat's TCP-LISTEN:...,fork), and a
# reader that does not read during the flood (idle, with 1024 buffers so the flood fits).
# Without the library, then preloaded, each mode's stats checked for the transport.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/wakeflood" ] || fail "test program wakeflood not built in RSK_PROGS=$RSK_PROGS"

for mode in plain fork idle; do
	"$RSK_PROGS/wakeflood" "$mode" >"$RSK_TMP/plain.$mode" 2>&1 ||
		fail "$mode without the library: $(cat "$RSK_TMP/plain.$mode")"
	RSK_STATS=$RSK_TMP/$mode.jsonl
	bufs=8
	[ "$mode" = idle ] && bufs=1024
	RDMASOCK_BUF_COUNT=$bufs pre "$RSK_PROGS/wakeflood" "$mode" >"$RSK_TMP/pre.$mode" 2>&1 ||
		fail "$mode preloaded: $(cat "$RSK_TMP/pre.$mode")"
	cat "$RSK_TMP/pre.$mode"
	grep -q "^wakeflood: $mode rounds 10 messages 6030: ok$" "$RSK_TMP/pre.$mode" ||
		fail "$mode: no ok line"
	# the writer's connect and the reader's accept
	assert_carried "$RSK_EXPECT" 2 wakeflood
done
echo "wakeflood over $RSK_EXPECT: ok"
