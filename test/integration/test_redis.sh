#!/usr/bin/env bash
# redis-server + redis-cli + redis-benchmark (-c 50, -P 16), both ends preloaded, against
# the same commands without the library: replies must be identical, and the stats must show
# the expected transport carrying the connections.
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark

cli_script() {
	local i
	for i in $(seq 1 50); do
		echo "SET key:$i value-$i-$(printf '%0*d' $((i * 37)) 0)"
	done
	echo "MGET key:1 key:25 key:50"
	echo "INCRBY counter 41"
	echo "INCR counter"
	echo "LPUSH list a b c"
	echo "LRANGE list 0 -1"
	echo "GET key:49"
	echo "DBSIZE"
}

run_redis() { # $1 = "pre" or "", $2 = transcript file
	local wrap=$1 out=$2 port
	port=$(free_port)
	start_bg "redis$port" $wrap redis-server --port "$port" --bind 127.0.0.1 --save "" \
		--appendonly no --protected-mode no
	wait_port "$port"
	cli_script | $wrap redis-cli -p "$port" >"$RSK_TMP/cli$port.out" ||
		fail "redis-cli failed"
	$wrap redis-benchmark -p "$port" -c 50 -n 20000 -t set,get -q >"$RSK_TMP/b1.$port" 2>&1 ||
		fail "redis-benchmark -c 50 failed"
	$wrap redis-benchmark -p "$port" -c 50 -P 16 -n 50000 -t set,get -q >"$RSK_TMP/b2.$port" 2>&1 ||
		fail "redis-benchmark -P 16 failed"
	for f in b1 b2; do
		grep -q "GET: .*requests per second" "$RSK_TMP/$f.$port" ||
			fail "redis-benchmark ($f) printed no GET result: $(tail -c 300 "$RSK_TMP/$f.$port")"
		grep -q "SET: .*requests per second" "$RSK_TMP/$f.$port" ||
			fail "redis-benchmark ($f) printed no SET result"
	done
	stop_bg "redis$port"
	cp "$RSK_TMP/cli$port.out" "$out"
}

run_redis "" "$RSK_TMP/plain.out"
run_redis pre "$RSK_TMP/with.out"
[ -s "$RSK_TMP/plain.out" ] || fail "plain run produced no output"
cmp -s "$RSK_TMP/plain.out" "$RSK_TMP/with.out" ||
	fail "redis-cli transcripts differ with the library: $(diff "$RSK_TMP/plain.out" "$RSK_TMP/with.out" | head -20)"

# 1 cli + 2 x (50 benchmark clients + 1 probe each) from the clients, as many on the server.
[ "$(stats_lines redis-server)" -ge 1 ] || fail "redis-server wrote no stats line"
assert_carried "$RSK_EXPECT" 100 redis-benchmark
assert_carried "$RSK_EXPECT" 100 redis-server
assert_carried "$RSK_EXPECT" 1 redis-cli
echo "redis over $RSK_EXPECT: ok"
