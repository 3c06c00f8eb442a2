#!/usr/bin/env bash
# A full backlog while the server is slow to accept (test/progs/connscale.c backlog against
# connserver.c --backlog 8), 200 clients at once (100 non-blocking connects waited for with
# poll, 100 blocking ones with SO_SNDTIMEO), without the library and then both ends preloaded,
# in two phases run side by side:
#  timeout: the server accepts nothing for 2.5 s, the clients give up after 1.5 s: over kernel
#    TCP the 9 connections the queue holds (backlog + 1) connect and are echoed once the
#    server accepts, the other 191 time out (their SYNs are dropped);
#  refused: the server closes its listener after 0.6 s, the clients wait up to 3.5 s: the 9
#    queued connections are reset, the others' SYN retransmission is refused.
# The preloaded run must give the kernel's outcome counts (connected, timed out, refused,
# other errors; echoed, reset, EOF, no echo) within 2 (kernel TCP itself varies by one or two:
# a SYN answered just before the queue filled up completes on the client's side), no client
# may hang more than 1 s past
# its own timeout, and the server may see no accept error. Stats: the connections the
# timeout-phase server accepted are on the expected transport.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/connscale" ] || fail "test program connscale not built in RSK_PROGS=$RSK_PROGS"
N=200

run() { # TAG [pre]
	local tag=$1 wrap=${2:-} pa pb rca=0 rcb=0
	pa=$(free_port)
	pb=$(free_port)
	[ "$pa" != "$pb" ] || pb=$(free_port)
	start_bg "a_$tag" $wrap "$RSK_PROGS/connserver" "$pa" --backlog 8 --hold-ms 2500 --seconds 10
	start_bg "b_$tag" $wrap "$RSK_PROGS/connserver" "$pb" --backlog 8 --hold-ms 600 \
		--close-listener --seconds 10
	# b's listener closes 0.6 s after it listens: look for it first (a's holds 2.5 s)
	wait_port "$pb"
	wait_port "$pa"
	run_limited 30 $wrap "$RSK_PROGS/connscale" backlog "$pa" "$N" 1500 2500 \
		>"$RSK_TMP/a_$tag.out" 2>&1 &
	local ja=$!
	run_limited 30 $wrap "$RSK_PROGS/connscale" backlog "$pb" "$N" 3500 1000 \
		>"$RSK_TMP/b_$tag.out" 2>&1 || rcb=$?
	wait "$ja" || rca=$?
	stop_bg "a_$tag"
	stop_bg "b_$tag"
	echo "--- $tag"
	cat "$RSK_TMP/a_$tag.out" "$RSK_TMP/b_$tag.out" "$RSK_TMP/a_$tag.log" "$RSK_TMP/b_$tag.log"
	[ "$rca" = 0 ] || fail "timeout phase ($tag): exit $rca (a client hung past its timeout?)"
	[ "$rcb" = 0 ] || fail "refused phase ($tag): exit $rcb (a client hung past its timeout?)"
}

run plain
run with pre
bad=""
for ph in a b; do
	for k in connected timed_out refused other echoed echo_reset echo_eof echo_none echo_other; do
		kv_k=$(kv "$RSK_TMP/${ph}_plain.out" 'backlog:' $k)
		kv_l=$(kv "$RSK_TMP/${ph}_with.out" 'backlog:' $k)
		[ "$kv_l" -ge $((kv_k - 2)) ] && [ "$kv_l" -le $((kv_k + 2)) ] || bad="$bad
  phase $ph: $k: kernel TCP $kv_k, with the library $kv_l"
	done
	[ "$(kv "$RSK_TMP/${ph}_with.log" 'connserver: accepted' accept_errors)" = 0 ] ||
		bad="$bad
  phase $ph: the server's accept() failed $(kv "$RSK_TMP/${ph}_with.log" 'connserver: accepted' accept_errors) times"
done
[ -z "$bad" ] || fail "the library's outcomes differ from kernel TCP's:$bad"
[ "$(kv "$RSK_TMP/a_plain.out" 'backlog:' connected)" -ge 1 ] || fail "no client connected at all"

stats_summary
# the timeout phase's server accepted (and echoed) the queued connections, give or take the
# one or two by which kernel TCP itself varies (above)
assert_conns connserver "$RSK_EXPECT" "$(($(kv "$RSK_TMP/a_plain.out" 'backlog:' echoed) - 2))"
echo "full backlog over $RSK_EXPECT: as kernel TCP"
