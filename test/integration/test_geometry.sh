#!/usr/bin/env bash
# integrity (test/progs/integrity.c: full duplex, random sizes 1 B..1 MiB, every byte and the
# hash trailers checked, EOF) with 8 MiB each way, for shm buffer geometries other than the
# default: RDMASOCK_BUF_SIZE x RDMASOCK_BUF_COUNT, including the smallest the configuration
# accepts (count 2, size 1 KiB) and the largest buffers (4 MiB). Each run is bounded (6 s);
# every geometry is tried and all failures are listed. Both ends must print ok and the stats
# must show the expected transport carrying the connections (in the kernel variant the
# geometry is unused and the runs only confirm that).
. "$(dirname "$0")/lib.sh"
[ -x "$RSK_PROGS/integrity" ] || fail "test program integrity not built in RSK_PROGS=$RSK_PROGS"

# Counts below 6 are refused by the configuration (test_config): a stream needs 6 buffers.
GEOMETRIES="1024x6 4194304x6 1024x7 1024x8 4096x12 65536x16 4194304x6 32768x256"
BYTES=8M
LIMIT=6


bad=""
runs=0
for g in $GEOMETRIES; do
	size=${g%x*}
	count=${g#*x}
	port=$(free_port)
	export RDMASOCK_BUF_SIZE=$size RDMASOCK_BUF_COUNT=$count
	start_bg "srv_$g" pre timeout "$LIMIT" "$RSK_PROGS/integrity" server "$port"
	wait_listen "$port"
	rc=0
	pre timeout "$LIMIT" "$RSK_PROGS/integrity" client "$port" "$BYTES" \
		>"$RSK_TMP/cli_$g.out" 2>&1 || rc=$?
	eval "pid=\$PID_srv_$g"
	src=0
	wait "$pid" || src=$?
	unset RDMASOCK_BUF_SIZE RDMASOCK_BUF_COUNT
	runs=$((runs + 1))
	if [ "$rc" = 0 ] && [ "$src" = 0 ] && grep -q ': ok$' "$RSK_TMP/cli_$g.out" &&
		grep -q ': ok$' "$RSK_TMP/srv_$g.log"; then
		echo "geometry $g: ok ($(grep -o 'secs [0-9.]*' "$RSK_TMP/cli_$g.out"))"
	else
		msg="geometry $g (BUF_SIZE=$size BUF_COUNT=$count): client exit $rc: $(tail -1 "$RSK_TMP/cli_$g.out" | tr -d '\n'); server exit $src$([ "$src" = 124 ] && echo " (stopped after $LIMIT s: hung)"): $(tail -1 "$RSK_TMP/srv_$g.log" | tr -d '\n')"
		echo "$msg"
		bad="$bad
$msg"
	fi
done
[ -z "$bad" ] || fail "integrity failed for some buffer geometries:$bad"
assert_carried "$RSK_EXPECT" $((2 * runs)) integrity
echo "geometries over $RSK_EXPECT: ok"
