#!/usr/bin/env bash
# fortify_io (built -O2 -D_FORTIFY_SOURCE=2) against echo_server (poll mode): the client's
# reads and polls go through __read_chk, __recv_chk, __recvfrom_chk and __poll_chk. Checked:
# nm shows the binary references them; with the library, the dynamic linker binds them to
# librdmasock.so (LD_DEBUG=bindings, lazy binding = at the first call); every echoed byte,
# poll readiness and EOF are verified by the client, identically with and without the
# library; asking a checked call for more than its array still aborts the process.
. "$(dirname "$0")/lib.sh"
need nm
[ -x "$RSK_PROGS/fortify_io" ] && [ -x "$RSK_PROGS/echo_server" ] ||
	fail "test programs not built in RSK_PROGS=$RSK_PROGS"

CHK="__read_chk __recv_chk __recvfrom_chk __poll_chk"
ROUNDS=400

syms=$(nm -D "$RSK_PROGS/fortify_io") || fail "nm -D fortify_io failed"
for s in $CHK; do
	grep -q " U $s@" <<<"$syms" || fail "fortify_io does not reference $s: not built fortified"
done


run_fortify() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port m rc out
	port=$(free_port)
	start_bg "srv_$tag" $wrap "$RSK_PROGS/echo_server" "$port" poll
	wait_listen "$port"
	out=$RSK_TMP/client_$tag.out
	LD_DEBUG=bindings LD_DEBUG_OUTPUT=$RSK_TMP/bind_$tag $wrap "$RSK_PROGS/fortify_io" \
		"$port" "$ROUNDS" >"$out" 2>"$RSK_TMP/client_$tag.err" ||
		fail "fortify_io ($tag) failed: $(cat "$RSK_TMP/client_$tag.err")"
	grep -q "^fortify_io: rounds $ROUNDS bytes [0-9]* .*: ok$" "$out" ||
		fail "fortify_io ($tag) printed no ok line: $(cat "$out")"
	# Every receive method was used, many times.
	for m in read recv recvfrom peek waitall; do
		grep -qE " $m [0-9]{2,}" "$out" || fail "fortify_io ($tag): too few $m calls: $(cat "$out")"
	done
	# Overflows are still caught (abort, no "not caught" line) whatever binds the symbols.
	for m in read recv recvfrom poll; do
		rc=0
		($wrap "$RSK_PROGS/fortify_io" "$port" "overflow-$m") >"$RSK_TMP/ovf_$tag.$m" 2>&1 ||
			rc=$?
		[ "$rc" = 134 ] || fail "overflow-$m ($tag): exit $rc, expected SIGABRT: $(cat "$RSK_TMP/ovf_$tag.$m")"
		grep -q "buffer overflow detected" "$RSK_TMP/ovf_$tag.$m" ||
			fail "overflow-$m ($tag): no fortify message: $(cat "$RSK_TMP/ovf_$tag.$m")"
	done
	stop_bg "srv_$tag"
	# 2 connections of the checked client + 4 of the overflow runs, every byte echoed.
	grep -q "served 6 connections" "$RSK_TMP/srv_$tag.log" ||
		fail "echo_server ($tag): $(cat "$RSK_TMP/srv_$tag.log")"
}

# lib_of_binding TAG SYMBOL: the object fortify_io's SYMBOL was bound to in run TAG.
lib_of_binding() {
	cat "$RSK_TMP/bind_$1".* 2>/dev/null |
		sed -n "s/.*binding file [^ ]*fortify_io \[0\] to \([^ ]*\) .*symbol \`$2'.*/\1/p" | head -1
}

run_fortify "" plain
[ "$(stats_lines)" = 0 ] || fail "the run without the library wrote stats lines"
for s in $CHK; do
	lib=$(lib_of_binding plain "$s")
	case "$lib" in
	*/libc.so*) ;;
	*) fail "without the library, $s bound to '${lib:-nothing}' instead of libc" ;;
	esac
done

run_fortify pre with
for s in $CHK; do
	lib=$(lib_of_binding with "$s")
	[ "$lib" = "$RSK_LIB" ] || [ "$(readlink -f "$lib")" = "$(readlink -f "$RSK_LIB")" ] ||
		fail "with the library, $s bound to '${lib:-nothing}', not $RSK_LIB"
done
plain_bytes=$(grep -o "bytes [0-9]*" "$RSK_TMP/client_plain.out")
with_bytes=$(grep -o "bytes [0-9]*" "$RSK_TMP/client_with.out")
[ "$plain_bytes" = "$with_bytes" ] || fail "byte totals differ: $plain_bytes vs $with_bytes"

# The aborted overflow clients write no stats; the checked client and the server do.
[ "$(stats_lines fortify_io)" = 1 ] || fail "fortify_io wrote $(stats_lines fortify_io) stats lines, expected 1"
[ "$(stats_lines echo_server)" = 1 ] || fail "echo_server wrote no stats line"
assert_carried "$RSK_EXPECT" 2 fortify_io
assert_carried "$RSK_EXPECT" 6 echo_server
echo "fortify wrappers over $RSK_EXPECT: ok ($with_bytes)"
