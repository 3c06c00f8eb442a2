#!/usr/bin/env bash
# 10,000 concurrent idle connections from one client process to one server process, both
# preloaded (test/progs/connscale.c idle, connserver.c): each soft RLIMIT_NOFILE raised to its
# hard limit, every connection verified with an 8-byte echo, held idle for 1 s (no event may
# show on any: no reset, no EOF) and echoed once more. Prints the connections accelerated and
# the fds, RSS and shared memory per connection of each process. Asserts, besides no
# failure: on shm/auto every connection the fd budget allows is accelerated (connscale.c
# explains the budget; from `ulimit -n` 23,500 that is all 10,000), and every connection
# left on TCP was kept there for the fd limit, before anything was committed (client
# fallback fd_limit, server no_peer); on kernel, none is accelerated.
# Env SCALE_IDLE_N changes the count.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/connscale" ] || fail "test program connscale not built in RSK_PROGS=$RSK_PROGS"
n=${SCALE_IDLE_N:-10000}
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge $((n + 64)) ] ||
	skip "ulimit -Hn is $hard: $n connections need at least $((n + 64)) fds per process"

port=$(free_port)
start_bg srv pre "$RSK_PROGS/connserver" "$port" --nofile-max --backlog 4096 --seconds 200
wait_port "$port"
rc=0
run_limited 200 pre "$RSK_PROGS/connscale" idle "$port" "$n" "$PID_srv" >"$RSK_TMP/idle.out" 2>&1 ||
	rc=$?
cat "$RSK_TMP/idle.out"
stop_bg srv
cat "$RSK_TMP/srv.log"
[ "$rc" = 0 ] || fail "connscale idle failed (exit $rc)"
grep -q 'rdmasock.*warn' "$RSK_TMP/srv.log" "$RSK_TMP/idle.out" &&
	fail "the library warned: $(grep -h 'rdmasock.*warn' "$RSK_TMP/srv.log" "$RSK_TMP/idle.out" | head -3)"
[ "$(kv "$RSK_TMP/srv.log" 'connserver: accepted' resets)" = 0 ] || fail "the server saw resets"
[ "$(kv "$RSK_TMP/srv.log" 'connserver: accepted' errors)" = 0 ] || fail "the server saw errors"

connected=$(kv "$RSK_TMP/idle.out" 'idle: n=' connected)
accel=$(kv "$RSK_TMP/idle.out" 'idle: n=' accelerated)
expect=$(kv "$RSK_TMP/idle.out" 'idle: n=' expect_accel)
[ "$connected" = "$n" ] || fail "$connected of $n connections"
stats_summary
if [ "$RSK_EXPECT" = kernel ]; then
	[ "$accel" = 0 ] || fail "$accel connections accelerated with RDMASOCK_TRANSPORT=kernel"
	assert_conns connscale kernel "$n"
	assert_conns connserver kernel "$n"
else
	echo "accelerated $accel of $n (the fd budget allows at least $expect)"
	[ "$accel" -ge "$expect" ] ||
		fail "only $accel of $n connections accelerated; the fd budget allows $expect"
	# The client's own fd_limit; no_peer where the server ran short first and paused its
	# rendezvous (the client cannot tell that from no listener at all).
	assert_conns connscale "$RSK_EXPECT" "$expect" fd_limit no_peer
	assert_conns connserver "$RSK_EXPECT" "$expect" no_peer fd_limit
fi
echo "$n idle connections over $RSK_EXPECT: ok"
