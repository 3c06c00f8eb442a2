#!/usr/bin/env bash
# A process at its fd limit (test/progs/connscale.c emfile and emfile-srv, connserver.c),
# without the library and then both ends preloaded:
#  client: under `ulimit -n 256` the client connects (1-byte echo each) until socket() fails.
#    The first failure must be socket()'s EMFILE with the fd table full -- never a failed
#    connect or echo, never a reset -- and the client must hold as many connections as without
#    the library, give or take the library's hidden fds at that moment. Tolerance: held +
#    hidden >= kernel's held - 2 (2 for fds the library may have in transit), and at most one
#    hidden fd per accelerated connection plus 8 for the process (issue 9 item 1). After
#    closing one connection, the next one must connect and echo.
#  server: a server under `ulimit -n 256` accepts until accept() fails with EMFILE and then
#    stops accepting; 280 clients connect one after another. Over kernel TCP every connect
#    succeeds (the backlog queues the rest), the connections accepted echo and the others
#    wait; with the library the same must hold: no reset, no EOF, no accept error
#    (ECONNABORTED), and held + hidden fds >= kernel's held - 2.
# Stats: on shm/auto the connections accelerated are on shm, the others stayed on TCP for the
# fd limit before anything was committed (fd_limit on the side that ran out, no_peer on the
# other).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/connscale" ] || fail "test program connscale not built in RSK_PROGS=$RSK_PROGS"
LIMIT=256
M=280

# client_run TAG [pre]: the client under the low limit against a server with a high one.
client_run() {
	local tag=$1 wrap=${2:-} port rc=0
	port=$(free_port)
	start_bg "srv_$tag" $wrap "$RSK_PROGS/connserver" "$port" --nofile-max --seconds 60
	wait_port "$port"
	run_limited 60 $wrap bash -c "ulimit -n $LIMIT && exec \"\$0\" emfile $port 1000" \
		"$RSK_PROGS/connscale" >"$RSK_TMP/cli_$tag.out" 2>&1 || rc=$?
	stop_bg "srv_$tag"
	cat "$RSK_TMP/cli_$tag.out"
	[ "$rc" = 0 ] || fail "client at the fd limit ($tag): exit $rc"
	[ "$(kv "$RSK_TMP/cli_$tag.out" 'emfile: limit' stop)" = socket_EMFILE ] ||
		fail "client ($tag): the first failure was not socket()'s EMFILE"
	grep -q '^emfile: after closing one connection: ok' "$RSK_TMP/cli_$tag.out" ||
		fail "client ($tag): no new connection after closing one"
	# the directory fd listing them is one more
	[ $(($(kv "$RSK_TMP/cli_$tag.out" 'emfile: limit' fds_open) + 1)) -ge $((LIMIT - 2)) ] ||
		fail "client ($tag): EMFILE while the fd table was not full"
}

# server_run TAG [pre]: the server under the low limit, the client with a high one.
server_run() {
	local tag=$1 wrap=${2:-} port rc=0
	port=$(free_port)
	start_bg "lsrv_$tag" $wrap bash -c "ulimit -n $LIMIT && exec \"\$0\" $port --emfile-stop --backlog 1024 --seconds 60" \
		"$RSK_PROGS/connserver"
	wait_port "$port"
	run_limited 60 $wrap "$RSK_PROGS/connscale" emfile-srv "$port" "$M" \
		>"$RSK_TMP/scli_$tag.out" 2>&1 || rc=$?
	stop_bg "lsrv_$tag"
	cat "$RSK_TMP/scli_$tag.out" "$RSK_TMP/lsrv_$tag.log"
	[ "$rc" = 0 ] || fail "clients of the server at its fd limit ($tag): exit $rc (resets or EOFs)"
	[ "$(kv "$RSK_TMP/lsrv_$tag.log" 'connserver: accepted' accept_errors)" = 0 ] ||
		fail "server ($tag): accept() failed with something else than EMFILE"
	grep -q 'accept EMFILE with' "$RSK_TMP/lsrv_$tag.log" || fail "server ($tag): never at EMFILE"
	[ "$(kv "$RSK_TMP/scli_$tag.out" 'emfile-srv:' echoed)" = \
		"$(kv "$RSK_TMP/lsrv_$tag.log" 'connserver: accepted' emfile_at)" ] ||
		fail "server ($tag): the clients echoed are not the connections it accepted"
}

srv_held() { # TAG: held at EMFILE, hidden fds then (fds open - fds at start - held), fds
	# open, and fds open once listening (the listener's own hidden ones among them: its
	# face's TCP listener and bearer rendezvous, the transports' companions)
	local log=$RSK_TMP/lsrv_$1.log line held open base
	line=$(grep 'accept EMFILE with' "$log")
	held=$(echo "$line" | sed 's/.* with \([0-9]*\) connections held, \([0-9]*\) fds open/\1/')
	open=$(echo "$line" | sed 's/.* with \([0-9]*\) connections held, \([0-9]*\) fds open/\2/')
	base=$(sed -n 's/^connserver: listening on .*, \([0-9]*\) fds open$/\1/p' "$log")
	echo "$held $((open - base - held)) $open $base"
}

client_run plain
client_run with pre
kh=$(kv "$RSK_TMP/cli_plain.out" 'emfile: limit' held)
lh=$(kv "$RSK_TMP/cli_with.out" 'emfile: limit' held)
lx=$(kv "$RSK_TMP/cli_with.out" 'emfile: limit' hidden)
la=$(kv "$RSK_TMP/cli_with.out" 'emfile: limit' accelerated)
echo "client at $LIMIT fds: kernel TCP held $kh; the library held $lh ($la accelerated) with $lx hidden fds"
[ $((lh + lx)) -ge $((kh - 2)) ] ||
	fail "client: EMFILE after $lh connections + $lx hidden fds; kernel TCP held $kh"
[ "$lx" -le $((la + 8)) ] || fail "client: $lx hidden fds for $la accelerated connections"

server_run plain
server_run with pre
read -r ksh _ _ kbase <<<"$(srv_held plain)"
read -r lsh lsx lso lbase <<<"$(srv_held with)"
# (the listener's hidden fds count with the connections')
lsx=$((lsx + lbase - kbase))
echo "server at $LIMIT fds: kernel TCP held $ksh; the library held $lsh with $lsx hidden fds ($lso open)"
# A server short of fds keeps RSK_ACCEPT_SWITCH_FDS (6, core/calls/accept.c) numbers free:
# a client committed to shm needs them for a moment as it is taken, and is left in the
# backlog (EMFILE, as with a full table) rather than reset for want of them.
SW=6
[ $((lso + 1)) -ge $((LIMIT - 2 - SW)) ] || fail "server: EMFILE while the fd table was not full"
[ $((lsh + lsx)) -ge $((ksh - 2 - SW)) ] ||
	fail "server: EMFILE after $lsh connections + $lsx hidden fds; kernel TCP held $ksh"

stats_summary
if [ "$RSK_EXPECT" = kernel ]; then
	assert_conns connscale kernel $((kh + M))
	assert_conns connserver kernel $((kh + ksh))
else
	[ "$la" -ge 1 ] || fail "client: no connection accelerated"
	assert_conns connscale "$RSK_EXPECT" "$la" fd_limit no_peer
	assert_conns connserver "$RSK_EXPECT" "$la" fd_limit no_peer
fi
echo "EMFILE at the fd limit over $RSK_EXPECT: ok"
