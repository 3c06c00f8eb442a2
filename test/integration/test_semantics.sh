#!/usr/bin/env bash
# TCP stream semantics one check at a time (test/progs/semantics.c): blocking and
# non-blocking I/O, partial reads, readv/writev, sendmsg/recvmsg, MSG_PEEK, MSG_WAITALL,
# MSG_DONTWAIT, MSG_NOSIGNAL/EPIPE and SIGPIPE, SHUT_WR/SHUT_RD/SHUT_RDWR, close with data in
# flight, close with unread data (reset), repeated EOF, SO_ERROR, FIONREAD, SO_RCVTIMEO,
# SO_SNDTIMEO, TCP_NODELAY, SO_RCVBUF/SO_SNDBUF, getsockname/getpeername, the dup family,
# O_NONBLOCK through fcntl and FIONBIO, SOCK_NONBLOCK/SOCK_CLOEXEC on socket and accept4,
# lowest-free fd numbering, non-blocking connect, refused connect.
# First without the library (the checks' expectations are the kernel's own behaviour), then
# preloaded, where every connection must also be carried by the expected transport. Checked:
# exit 0, every check line says ok, and the stats show the expected transport carrying them.
# Every check opens a fresh short connection to one server: the destination history would
# soon start them on TCP (docs/design.md, "TCP first"); these checks are about the stream.
RSK_TCP_FIRST=${RSK_TCP_FIRST:-off}
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/semantics" ] || fail "test program semantics not built in RSK_PROGS=$RSK_PROGS"

# run TAG [pre]: the whole list; prints the failing lines and fails on any.
run() {
	local tag=$1 wrap=${2:-} rc=0 n ok
	if [ -n "$wrap" ]; then
		SEMANTICS_EXPECT=$RSK_EXPECT pre timeout 55 "$RSK_PROGS/semantics" \
			>"$RSK_TMP/$tag.out" 2>&1 || rc=$?
	else
		timeout 55 "$RSK_PROGS/semantics" >"$RSK_TMP/$tag.out" 2>&1 || rc=$?
	fi
	cat "$RSK_TMP/$tag.out"
	n=$(grep -c '^semantics: check ' "$RSK_TMP/$tag.out")
	ok=$(grep -c '^semantics: check [a-z0-9_]*: ok$' "$RSK_TMP/$tag.out")
	[ "$rc" = 0 ] && [ "$n" -ge 29 ] && [ "$ok" = "$n" ] ||
		fail "semantics ($tag): exit $rc, $ok of $n checks ok: $(grep -v ': ok$' "$RSK_TMP/$tag.out")"
}

run plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
run with pre
# One line per check child plus the parent; two connections counted per client/server pair.
[ "$(stats_lines semantics)" -ge 30 ] || fail "semantics wrote $(stats_lines semantics) stats lines"
assert_carried "$RSK_EXPECT" 60 semantics
echo "semantics over $RSK_EXPECT: ok"
