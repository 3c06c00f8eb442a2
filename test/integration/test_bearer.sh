#!/usr/bin/env bash
# The same-host bearer (RDMASOCK_BEARER=unix, docs/design.md "A same-host bearer", stage 2):
# bearer_echo.py's short connections (blocking and non-blocking connects, payloads up to
# 1 MiB, half closes, names, SO_DOMAIN, TCP_NODELAY) must behave as without the library,
# and the stats must say which way they went:
# - both ends preloaded, a non-blocking server (as nginx and redis accept): every connection
#   on the bearer, counted by both, none on a transport or on kernel TCP, and each
#   non-blocking connect made when it returns (0, where TCP says EINPROGRESS); also for a
#   wildcard listener (found at 127.0.0.1);
# - a blocking server: its first blocking accept that finds nobody shuts the rendezvous, so
#   at most the one client already queued takes the bearer, and every other goes TCP;
# - a server without the library: the client finds no rendezvous and takes TCP;
# - the bearer off (RDMASOCK_BEARER=face): no bearer connection;
# - the default (auto): short connections take it once the history has a verdict.
. "$(dirname "$0")/lib.sh"
need python3
prog=$(dirname "$0")/bearer_echo.py
[ "$RSK_TEST_TRANSPORT" = kernel ] && skip "the kernel transport makes no faces, so no bearer"
N=30

# bearer_count FILE: bearer_connections summed over FILE's stats lines
bearer_count() {
	python3 - "$1" <<'PY'
import json, sys
n = 0
try:
    for line in open(sys.argv[1]).read().splitlines():
        n += json.loads(line)["bearer_connections"]
except FileNotFoundError:
    pass
print(n)
PY
}

# run NAME SERVER_PRE CLIENT_PRE [SERVER_MODE] [BEARER]: one server, N clients, both checked
run() {
	local name=$1 spre=$2 cpre=$3 how=${4:-} bearer=${5:-unix} port out sp i
	rm -f "$RSK_TMP/port"
	RSK_STATS=$RSK_TMP/stats.$name.srv RDMASOCK_BEARER=$bearer $spre timeout 60 \
		python3 "$prog" server "$RSK_TMP/port" "$N" $how >"$RSK_TMP/$name.srv" 2>&1 &
	sp=$!
	RSK_PIDS+=("$sp")
	for i in $(seq 200); do [ -s "$RSK_TMP/port" ] && break; sleep 0.05; done
	port=$(cat "$RSK_TMP/port" 2>/dev/null) || fail "$name: the server did not start: $(cat "$RSK_TMP/$name.srv")"
	out=$(RSK_STATS=$RSK_TMP/stats.$name.cli RDMASOCK_BEARER=$bearer $cpre timeout 60 \
		python3 "$prog" client "$port" "$N" 2>&1) || fail "$name: client: $out"
	wait "$sp" || fail "$name: server: $(cat "$RSK_TMP/$name.srv")"
	grep -q "^server ok $N" "$RSK_TMP/$name.srv" || fail "$name: server: $(cat "$RSK_TMP/$name.srv")"
	SRV=$(bearer_count "$RSK_TMP/stats.$name.srv")
	CLI=$(bearer_count "$RSK_TMP/stats.$name.cli")
	AT_ONCE=$(sed -n 's/.*done at once \([0-9]*\)$/\1/p' <<<"$out")
	echo "$name: $out; bearer connections: server $SRV, client $CLI"
}

run plain "" ""
[ "$SRV" = 0 ] && [ "$CLI" = 0 ] || fail "plain: bearer counts without the library"
[ "$AT_ONCE" = 0 ] || fail "plain: $AT_ONCE non-blocking TCP connects said 0, not EINPROGRESS"

run both pre pre
[ "$SRV" = "$N" ] && [ "$CLI" = "$N" ] || fail "both: not every connection took the bearer"
# (every other connect is non-blocking: over the bearer each is made when it returns, 0)
[ "$AT_ONCE" = $((N / 2)) ] || fail "both: $AT_ONCE of $((N / 2)) non-blocking connects said 0"
RSK_STATS=$RSK_TMP/stats.both.cli
[ "$(stats_get connections kernel)" = 0 ] && [ "$(stats_get connections shm)" = 0 ] ||
	fail "both: the client counted connections on a transport too"

run wildcard pre pre wildcard
[ "$SRV" = "$N" ] && [ "$CLI" = "$N" ] || fail "wildcard: not every connection took the bearer"

run blocking pre pre blocking
[ "$SRV" -le 1 ] && [ "$CLI" = "$SRV" ] ||
	fail "blocking: a blocking server took more than the one queued client from the bearer"

# A server that waits in select() before each blocking accept (iperf3), its clients over TCP
# (without the library): its first accept finds the rendezvous empty and shuts it, and the
# listener must not stay readable after that (it did, for ever: iperf3's server then blocked
# in an accept nobody came to, with its test's streams waiting). bearer_echo.py's server
# checks that the listener is not readable at the end. Its clients through the bearer come
# before any blocking accept looks, so they all take it.
run select pre "" select
[ "$SRV" = 0 ] || fail "select: bearer connections from clients without the library"
run select_bearer pre pre select
[ "$SRV" = "$N" ] && [ "$CLI" = "$N" ] || fail "select_bearer: not every connection took the bearer"

run server_plain "" pre
[ "$CLI" = 0 ] || fail "server_plain: the client found a rendezvous nobody made"

run face_only pre pre "" face
[ "$SRV" = 0 ] && [ "$CLI" = 0 ] || fail "face_only: bearer connections with the bearer off"
[ "$AT_ONCE" = 0 ] || fail "face_only: $AT_ONCE non-blocking connects said 0, not EINPROGRESS"

# The default (auto): the bearer only once the destination's history says its connections
# end short (after the first few, set up on shm; one in eight still on TCP first), and never
# where every connection is set up at connect (the shm variant: RDMASOCK_TCP_FIRST=off).
run auto pre pre "" auto
RSK_STATS=$RSK_TMP/stats.auto.cli
direct=$(stats_get connections shm)
if [ "$RSK_TCP_FIRST" = off ]; then
	[ "$SRV" = 0 ] && [ "$CLI" = 0 ] || fail "auto: bearer connections with TCP first off"
else
	[ "$CLI" -ge $((N / 2)) ] && [ "$SRV" = "$CLI" ] && [ "$direct" -ge 1 ] ||
		fail "auto: $CLI of $N connections on the bearer (server $SRV), $direct set up on shm"
fi
echo "PASS"
