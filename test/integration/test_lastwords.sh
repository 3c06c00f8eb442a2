#!/usr/bin/env bash
# A peer's last writes (test/progs/lastwords.c): a preloaded sender writes 100,000 bytes in
# writes of varied sizes and then ends by close, exit(0), _exit(0), SIGKILL, a crash
# (SIGSEGV), an abortive close (SO_LINGER 0), close with data of ours unread, or
# shutdown(SHUT_RDWR) with the fd kept open (the end must come then, not at its exit); and
# the other way round, a stdio reader (a relayed connection) SIGKILLed after it read all we
# wrote, which must read as its kernel's FIN, EOF. Every
# byte its write() returned for must reach the preloaded reader, in order, and the stream
# must end there as over kernel TCP: each mode runs first without the library, and that result
# line (byte count and EOF or ECONNRESET) is what the preloaded run must print.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/lastwords" ] || fail "test program lastwords not built in RSK_PROGS=$RSK_PROGS"

MODES="close exit _exit kill segv linger0 unread shutrdwr stdio_kill"
bad=""
for m in $MODES; do
	want=$("$RSK_PROGS/lastwords" "$m" 2>&1) || fail "lastwords $m without the library: $want"
	echo "kernel:    $want"
	got=$(pre "$RSK_PROGS/lastwords" "$m" 2>&1) || bad="$bad
$m: $got (exit $?)"
	echo "preloaded: $got"
	[ "$got" = "$want" ] || bad="$bad
$m: got '$got', the kernel gives '$want'"
done
[ -z "$bad" ] || fail "last writes:$bad"
# Both ends of each run wrote a stats line; every connection was carried as claimed (segv
# and kill leave no line for the sender, so count the reader's).
assert_carried "$RSK_EXPECT" 8 lastwords
echo "last writes over $RSK_EXPECT: ok"
