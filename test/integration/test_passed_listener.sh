#!/usr/bin/env bash
# KNOWN BUG (registered only with -DRSK_KNOWN_BUGS=ON, label known_bugs): a listener this
# process keeps and another accepts on untracked -- a program exec'd in a child that
# inherited it (nginx's binary upgrade), or a child it was passed to with SCM_RIGHTS --
# strands a preloaded client whose connection was set up directly on shm: its offer went to
# the keeper's rendezvous, no accept claims it, and both ends wait on different paths until
# their timeouts. Without the library (and with a plain client) the echo comes back.
. "$(dirname "$0")/lib.sh"
need python3
prog=$(dirname "$0")/passed_listener.py
for how in exec scm; do
	out=$(timeout 30 python3 "$prog" "$how" 2>&1) || fail "$how without the library: $out"
	out=$(RDMASOCK_TCP_FIRST=off pre timeout 30 python3 "$prog" "$how" 2>&1) ||
		fail "$how with the library: $out"
	echo "$how: $out"
done
