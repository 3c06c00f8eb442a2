#!/usr/bin/env bash
# nginx's binary upgrade, preloaded (docs/design.md, "A listener another program accepts
# on"): USR2 makes the master fork and exec a new nginx that inherits the listening socket,
# and both generations' workers accept on it until WINCH stops the old ones. The new image
# accepts where no library of the old master sees it, so the old master's rendezvous must
# take no new clients: before the upgrade every curl is set up directly on shm; from the
# upgrade on every curl is kept on TCP (the old code stranded those the new workers
# accepted: their request waited in shm, the worker on TCP). Every request must be answered
# in every phase.
. "$(dirname "$0")/lib.sh"
need nginx curl python3
[ "$RSK_TEST_TRANSPORT" = kernel ] && skip "no rendezvous on the kernel transport"
RSK_TCP_FIRST=off # every connection set up at connect: the case a stranded offer stalls

port=$(free_port)
d=$RSK_TMP/ngx
. "$(dirname "$0")/nginx_ok.sh"
nginx_ok_conf "$d" "$port" on # (the default; a master whose parent lives ignores USR2)

# phase NAME COUNT: COUNT curls, one connection each, with their own stats file; each must
# get the answer within 10 s.
phase() {
	local name=$1 n=$2 i got
	for ((i = 0; i < n; i++)); do
		got=$(RSK_STATS=$RSK_TMP/$name.stats pre_plain curl -sS --max-time 10 \
			"http://127.0.0.1:$port/ok" 2>&1) || fail "$name: request $i: $got"
		[ "$got" = ok ] || fail "$name: request $i answered '$got'"
	done
	echo "$name: $n answered (shm $(RSK_STATS=$RSK_TMP/$name.stats stats_get connections shm curl)," \
		"kernel $(RSK_STATS=$RSK_TMP/$name.stats stats_get connections kernel curl))"
}

# wait_for COND...: until COND holds (10 s at most).
wait_for() {
	for _ in $(seq 200); do "$@" && return 0; sleep 0.05; done
	return 1
}
new_master() { [ -s "$d/nginx.pid" ] && [ "$(cat "$d/nginx.pid")" != "$old" ]; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# The absolute path: the upgrade execs argv[0].
pre "$(command -v nginx)" -e "$d/error.log" -p "$d" -c "$d/nginx.conf" ||
	fail "nginx did not start: $(tail -5 "$d/error.log")"
wait_for test -s "$d/nginx.pid" || fail "nginx did not start: $(tail -5 "$d/error.log")"
old=$(cat "$d/nginx.pid")
RSK_PIDS+=("$old") # stopped at exit whatever happens
wait_port "$port"
phase before 10
[ "$(RSK_STATS=$RSK_TMP/before.stats stats_get connections shm curl)" -eq 10 ] ||
	fail "before the upgrade the curls were not all on shm"

kill -USR2 "$old"
wait_for new_master || fail "no new master after USR2: $(tail -5 "$d/error.log")"
newpid=$(cat "$d/nginx.pid")
RSK_PIDS+=("$newpid")
phase both 20 # old and new workers accept
kill -WINCH "$old"
phase new 10 # only the new workers
kill -QUIT "$old"
wait_for gone "$old" || fail "the old master did not quit"
phase after 10 # the new generation alone
kill -QUIT "$newpid"
wait_for gone "$newpid" || { kill -KILL "$newpid"; fail "the new master did not quit"; }

for p in both new after; do
	RSK_STATS=$RSK_TMP/$p.stats
	[ "$(stats_get connections shm curl)" -eq 0 ] || fail "$p: a curl was set up on shm"
	[ "$(stats_get connections kernel curl)" -ge 10 ] || fail "$p: curls not counted on TCP"
	[ "$(stats_get fallbacks no_peer curl)" -ge 10 ] || fail "$p: curls not kept on TCP as no_peer"
done
echo "PASS"
