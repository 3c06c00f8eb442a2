#!/usr/bin/env bash
# Peer death and normal close (test/progs/peerdeath.c), a preloaded program against a second
# preloaded program (its peer, exec'd by it): SIGKILL the client while the server is blocked
# in recv, in epoll_wait, in send (full window); SIGKILL the server while the client is
# blocked in recv (with and without unread bytes at the server) and in send (full window).
# The blocked call must return within 1 s of the kill (measured) with ECONNRESET, or on the
# kernel transport what TCP gives there (EOF after a FIN, EPIPE); in the shm variant exactly
# what the loopback kernel gives (EOF from a dead peer that left nothing of ours unread). A peer that closes its socket, or exits with exit(0), gives EOF
# (twice), never ECONNRESET. _exit(0) without close is printed for information only.
# First without the library (the expectations are the kernel's own behaviour), then preloaded.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/peerdeath" ] || fail "test program peerdeath not built in RSK_PROGS=$RSK_PROGS"

SCENARIOS="server_recv server_epoll server_send client_recv client_recv_unread client_send
close_client close_server exit_client exit_server _exit_client"

# run TAG [pre]: every scenario; collects the failing lines.
run() {
	local tag=$1 wrap=${2:-} s rc bad=""
	for s in $SCENARIOS; do
		rc=0
		if [ -n "$wrap" ]; then
			PEERDEATH_TRANSPORT=$RSK_EXPECT pre "$RSK_PROGS/peerdeath" "$s" \
				>"$RSK_TMP/$tag.$s.out" 2>&1 || rc=$?
		else
			"$RSK_PROGS/peerdeath" "$s" >"$RSK_TMP/$tag.$s.out" 2>&1 || rc=$?
		fi
		cat "$RSK_TMP/$tag.$s.out"
		if [ "$rc" != 0 ] || ! grep -q "^peerdeath: $s: .*: \(ok\|info\)" "$RSK_TMP/$tag.$s.out" ||
			grep -q ': FAIL' "$RSK_TMP/$tag.$s.out"; then
			bad="$bad
$(cat "$RSK_TMP/$tag.$s.out") (exit $rc)"
		fi
	done
	[ -z "$bad" ] || fail "peerdeath ($tag):$bad"
}

run plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run with pre
# Each scenario's process has one connection; the peers that ended normally wrote a line too.
[ "$(stats_lines peerdeath)" -ge 15 ] || fail "peerdeath wrote $(stats_lines peerdeath) stats lines"
assert_carried "$RSK_EXPECT" 15 peerdeath
echo "peer death over $RSK_EXPECT: ok"
