#!/usr/bin/env bash
# The listener's face (RDMASOCK_BEARER=face, docs/design.md "A same-host bearer", stage 1):
# face_listener.py uses one listening socket every way a program may (names, options, fstat,
# select/poll/epoll with EPOLLEXCLUSIVE, timeouts, shutdown waking a blocked accept,
# SCM_RIGHTS, exec) and must print exactly what it prints without the library, while its
# stats show that it listened through a face (none on the kernel transport, which leaves
# listeners alone), and with the bearer off, that it did not.
. "$(dirname "$0")/lib.sh"
need python3
prog=$(dirname "$0")/face_listener.py

timeout 60 python3 "$prog" >"$RSK_TMP/plain.out" 2>&1 || fail "plain run: $(cat "$RSK_TMP/plain.out")"
grep -q "^exec: accepts True" "$RSK_TMP/plain.out" || fail "plain run: $(cat "$RSK_TMP/plain.out")"

for bearer in face none; do
	st=$RSK_TMP/stats.face_$bearer
	RDMASOCK_BEARER=$bearer FACE_STATS_OUT=$st pre timeout 60 python3 "$prog" \
		>"$RSK_TMP/$bearer.out" 2>&1 || fail "bearer $bearer: $(cat "$RSK_TMP/$bearer.out")"
	diff "$RSK_TMP/plain.out" "$RSK_TMP/$bearer.out" >&2 ||
		fail "bearer $bearer: the listener behaved otherwise than without the library"
	[ -s "$st" ] || fail "bearer $bearer: no stats from the listening image"
	faces=$(rsk_faces_seen "$st") || fail "bearer $bearer: stats without listener_faces"
	want=0
	[ "$bearer" = face ] && [ "$RSK_TEST_TRANSPORT" != kernel ] && want=1
	[ "$faces" -ge "$want" ] && { [ "$want" = 1 ] || [ "$faces" = 0 ]; } ||
		fail "bearer $bearer: $faces listener faces, want $want"
	echo "bearer $bearer on $RSK_TEST_TRANSPORT: same as without the library, $faces face(s)"
done
