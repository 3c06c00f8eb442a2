#!/usr/bin/env bash
# A listener this process keeps while another accepts on it where no library sees it: a
# program exec'd in a child and handed it (LISTEN_FDS, as nginx's binary upgrade hands it in
# NGINX), one started by posix_spawn (a dup2 action) or system() (inherited; glibc execs
# inside libc there, where no exec wrapper sees it), a program whose command line names its
# number (exec'd: "argv"; by system(): "sysargv"), one exec'd through libc's syscall()
# ("rawexec"), or a child it was passed to with
# SCM_RIGHTS. Its rendezvous would take offers that
# no accept claims, and a client set up directly on shm would wait for ever while the
# acceptor reads the TCP connection (docs/design.md, "A listener another program accepts
# on"). So new clients must find no rendezvous: the echo comes back, on kernel TCP, counted
# as no_peer. The controls prove the same client is accelerated otherwise: "own" (the keeper
# accepts), "helper" (the keeper first execs a helper that merely inherits the listener,
# which must not cost the keeper its acceleration) and "spawnhelper" (a posix_spawn whose
# file action hands the helper another fd).
. "$(dirname "$0")/lib.sh"
need python3
prog=$(dirname "$0")/passed_listener.py
[ "$RSK_TEST_TRANSPORT" = kernel ] && skip "no rendezvous on the kernel transport"
for how in own helper spawnhelper exec spawn system argv sysargv rawexec scm; do
	out=$(timeout 30 python3 "$prog" "$how" 2>&1) || fail "$how without the library: $out"
	RSK_STATS=$RSK_TMP/stats.$how # (stats*: lib.sh counts faces in them)
	out=$(RSK_TCP_FIRST=off pre timeout 30 python3 "$prog" "$how" 2>&1) ||
		fail "$how with the library: $out"
	shm=$(stats_get connections shm)
	kernel=$(stats_get connections kernel)
	nopeer=$(stats_get fallbacks no_peer)
	echo "$how: $out (shm $shm, kernel $kernel, no_peer $nopeer)"
	if [ "$how" = own ] || [ "$how" = helper ] || [ "$how" = spawnhelper ]; then
		[ "$shm" -eq 2 ] || fail "$how: the client and the accept were not both on shm"
	else
		[ "$shm" -eq 0 ] && [ "$kernel" -ge 1 ] && [ "$nopeer" -ge 1 ] ||
			fail "$how: the client was not kept on TCP by a shut rendezvous"
	fi
done
echo "PASS"
