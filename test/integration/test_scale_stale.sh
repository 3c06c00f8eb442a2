#!/usr/bin/env bash
# Stale events under connection recycling (test/progs/stale.c): 200 connections one at a time
# and then 1,600 with 8 in flight, each closed while a close notification or a peer's death
# (a forked server child, a spawned client process, both killed with SIGKILL) is still on its
# way, and immediately replaced by the next connection at the same fd number (and, in the
# library, very likely the same memory). No new connection may ever be reset, ended early or
# given another's bytes, on either side. Without the library first (the protocol's own
# check), then both ends preloaded, then preloaded with test/progs/evdelay.so after the
# library: it holds the library's event thread 5 ms after every epoll_wait that returned
# events, so that events meant for a closed connection arrive after its successor exists
# (the old monitor of issue 9 -- events keyed by a connection's address -- fails this at
# once). Stats: every connection of the client and the server on the expected transport.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/stale" ] || fail "test program stale not built in RSK_PROGS=$RSK_PROGS"
[ -f "$RSK_PROGS/evdelay.so" ] || fail "evdelay.so not built in RSK_PROGS=$RSK_PROGS"
# Env SCALE_STALE_SEQ, SCALE_STALE_CONC_CYCLES and SCALE_STALE_LIMIT_S (the client's time
# limit, below stale.c's 280 s alarm) change the sizes: scripts/sanitize.sh runs a tenth
# under ASan, whose processes spawn and fork far slower; every mode and the event delay run
# all the same.
SEQ=${SCALE_STALE_SEQ:-200}
CONC_CYCLES=${SCALE_STALE_CONC_CYCLES:-1600}
CONC=8
LIMIT_S=${SCALE_STALE_LIMIT_S:-120}

run() { # TAG plain|pre|delay
	local tag=$1 how=$2 port rc=0 e=()
	case $how in
	pre) e=("${PRE_ENV[@]}") ;;
	delay) e=("${PRE_ENV[@]}" LD_PRELOAD="$RSK_PRELOAD $RSK_PROGS/evdelay.so"
		EVDELAY_COUNT_FILE="$RSK_TMP/evdelay.count") ;;
	esac
	port=$(free_port)
	start_bg "srv_$tag" env "${e[@]}" "$RSK_PROGS/stale" server "$port"
	wait_port "$port"
	timeout -k 5 "$LIMIT_S" env "${e[@]}" "$RSK_PROGS/stale" client "$port" $SEQ $CONC_CYCLES \
		$CONC >"$RSK_TMP/cli_$tag.out" 2>&1 || rc=$?
	stop_bg "srv_$tag"
	echo "--- $tag"
	cat "$RSK_TMP/cli_$tag.out" "$RSK_TMP/srv_$tag.log"
	[ "$rc" != 124 ] || fail "$tag: the client was still running after $LIMIT_S s"
	[ "$rc" = 0 ] || fail "$tag: the client saw connections fail (exit $rc)"
	for k in early_end bad reset_after_close children_failed; do
		[ "$(kv "$RSK_TMP/srv_$tag.log" 'stale-server:' $k)" = 0 ] ||
			fail "$tag: the server counted $k=$(kv "$RSK_TMP/srv_$tag.log" 'stale-server:' $k)"
	done
	[ "$(kv "$RSK_TMP/srv_$tag.log" 'stale-server:' served)" = $((SEQ + CONC_CYCLES)) ] ||
		fail "$tag: the server served $(kv "$RSK_TMP/srv_$tag.log" 'stale-server:' served) of $((SEQ + CONC_CYCLES))"
}

run plain plain
run with pre
run delayed delay
[ -s "$RSK_TMP/evdelay.count" ] && echo "evdelay held event threads: $(tr '\n' ' ' <"$RSK_TMP/evdelay.count")(pid count)"
stats_summary
# Two preloaded runs; in each the client's own connections are 3 of every 4 cycles (the 4th
# is a spawned process that dies by SIGKILL, without a stats line), the server accepts all.
# On auto, short connections start on TCP and stay there by policy (tcp_first, and no_peer on
# the server), or take the default same-host bearer once their destination has a verdict:
# those are explained; the shm variant sets every connection up at connect.
if [ "$RSK_TEST_TRANSPORT" = auto ]; then
	assert_conns stale shm 0 tcp_first no_peer bearer
else
	assert_conns stale "$RSK_EXPECT" $((2 * (SEQ + CONC_CYCLES)))
fi
echo "stale events over $RSK_EXPECT: none reached a new connection"
