#!/usr/bin/env bash
# exec() keeps a connected socket open: the new program image must see a dead socket (EOF,
# then EPIPE), never bytes that are not the peer's and never a hang. Without the library the
# same program reads the peer's bytes (a kernel socket survives exec), so the run without the
# library checks the program and the preloaded run checks what the library promises.
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/exec_inherit" ] || fail "exec_inherit not built in RSK_PROGS=$RSK_PROGS"

out=$("$RSK_PROGS/exec_inherit" 2>&1) && fail "plain run: a kernel socket should keep its data across exec: $out"
echo "$out" | grep -q "read after exec returned 11 (bytes)" || fail "plain run: $out"

out=$(pre "$RSK_PROGS/exec_inherit" 2>&1) || rc=$?
if [ "$RSK_EXPECT" = kernel ]; then
	# On the kernel path the socket is a plain TCP socket: its bytes survive exec.
	echo "$out" | grep -q "read after exec returned 11 (bytes)" || fail "kernel run: $out"
else
	[ "${rc:-0}" = 0 ] || fail "preloaded run: exit ${rc:-0}: $out"
	echo "$out" | grep -q "read 0 (EOF), write .*: ok" || fail "preloaded run: $out"
fi
# The image that made the connection never writes a stats line (exec replaces it), so the
# transport is read from the library itself before the exec (rdmasock_fd_transport).
case "$RSK_EXPECT" in kernel) want=0 ;; shm) want=1 ;; verbs) want=2 ;; esac
echo "$out" | grep -q "^exec_inherit: transport $want$" ||
	fail "the socket was not on $RSK_EXPECT before exec: $out"
echo "exec over $RSK_EXPECT: ok"
