#!/usr/bin/env bash
# Readiness one check at a time (test/progs/readiness.c): epoll level-triggered, edge-triggered
# (one event per arrival, also while earlier data is unread; none after draining), EPOLLONESHOT
# and re-arming with EPOLL_CTL_MOD, nested epoll, EPOLLRDHUP on the peer's SHUT_WR, EPOLLHUP
# once both directions are shut, EPOLLIN with RDHUP/HUP/ERR when the peer process is killed
# (with and without unread data), fds registered before connect() (blocking and non-blocking:
# events after the connect, one event per fd, no EPOLLOUT on a full window), EPOLLOUT absent
# while the send window is full and back when the peer drains (level and edge), poll, ppoll,
# select and pselect readable/writable/timeouts, select(0, NULL, NULL, NULL, &tv) sleeping,
# no spurious readability (POLLIN on a drained socket whose recv would give EAGAIN, i.e. a
# blocking read would hang) over 400 random exchanges, and ~0% CPU (< 5%) while blocked in
# epoll_wait or in a blocking recv for 1 s.
# First without the library (the expectations are the kernel's own behaviour), then
# preloaded, every connection on the expected transport. Checked: exit 0, every check ok.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/readiness" ] || fail "test program readiness not built in RSK_PROGS=$RSK_PROGS"

# run TAG [pre]: the whole list; prints the failing lines and fails on any.
run() {
	local tag=$1 wrap=${2:-} rc=0 n ok
	if [ -n "$wrap" ]; then
		SEMANTICS_EXPECT=$RSK_EXPECT pre timeout 55 "$RSK_PROGS/readiness" \
			>"$RSK_TMP/$tag.out" 2>&1 || rc=$?
	else
		timeout 55 "$RSK_PROGS/readiness" >"$RSK_TMP/$tag.out" 2>&1 || rc=$?
	fi
	cat "$RSK_TMP/$tag.out"
	n=$(grep -c '^readiness: check ' "$RSK_TMP/$tag.out")
	ok=$(grep -c '^readiness: check [a-z0-9_]*: ok$' "$RSK_TMP/$tag.out")
	[ "$rc" = 0 ] && [ "$n" -ge 20 ] && [ "$ok" = "$n" ] ||
		fail "readiness ($tag): exit $rc, $ok of $n checks ok: $(grep -v ': ok$' "$RSK_TMP/$tag.out")"
}

run plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run with pre
# One line per check child plus the parent (the killed peers write none).
[ "$(stats_lines readiness)" -ge 20 ] || fail "readiness wrote $(stats_lines readiness) stats lines"
assert_carried "$RSK_EXPECT" 36 readiness
echo "readiness over $RSK_EXPECT: ok"
