#!/usr/bin/env bash
# Connection churn (test/progs/connscale.c churn against connserver.c), both ends preloaded:
# SCALE_CHURN_CYCLES (default 20,000; the "long" variant 100,000) connect + 32-byte echo +
# close cycles, 10 in flight, after a warm-up. Asserts 0 failures, 0 resets, 0 hangs (10 s per
# cycle, the whole run bounded), nothing leaked in either process between the warm-up and the
# end (fds, threads, shared mappings from /proc; VmRSS within 4 MiB; our files in /dev/shm),
# that the pair has not aged -- the last 10% of the cycles cost at most 1.2x the CPU time per
# cycle of the first 10% (both processes, the third cheapest 1% window of each) in one of
# microseconds, system calls or loopback round trips timed then (connscale.c churn_aged:
# this machine changes speed under a run; the work a cycle costs, which the machine's load
# changes little; the wall-clock rate, which it changes a lot, and minor faults are printed
# only; a pair that reads as aged gets a second opinion: its last 10% against a fresh pair's
# first 10%, run right after, in the same units, so that a machine that got dearer under the
# run does not read as a pair that aged; churn_pair below) -- and that the path this variant
# claims carried the cycles, from both processes' stats: kernel TCP (kernel),
# shm set up at connect (shm), kernel TCP left there by the TCP-first policy (auto).
# CHURN_AGING_CHECK=0 (scripts/sanitize.sh, and the default below 100,000 cycles) prints the
# aging numbers without judging them.
# Runs in a private network namespace when it can (unshare -n): TIME_WAIT sockets then stay
# out of everyone else's way, the namespace's TIME_WAIT table is capped at 4096 (kernel TCP
# slows down as that table grows: without the cap the last 10% of 100,000 cycles ran at 0.66x
# the first without the library), and the rendezvous files in /dev/shm carry the
# namespace's number, so ours can be counted. Without it /dev/shm is not checked.
if [ -z "${RSK_SCALE_NETNS:-}" ] && unshare -n true 2>/dev/null; then
	exec unshare -n env RSK_SCALE_NETNS=1 bash -c 'ip link set lo up &&
		echo 4096 >/proc/sys/net/ipv4/tcp_max_tw_buckets && exec bash "$0"' "$0"
fi
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/scale.sh"
[ -x "$RSK_PROGS/connscale" ] || fail "test program connscale not built in RSK_PROGS=$RSK_PROGS"
if [ -z "${RSK_SCALE_NETNS:-}" ]; then
	echo "note: no private network namespace (unshare -n failed): /dev/shm not checked"
	export CHURN_SHM_FILES_CHECK=0
fi
cycles=${SCALE_CHURN_CYCLES:-20000}
# Aging is judged where its windows can tell 1.2x from noise: the 100,000-cycle variants
# (label long, CI's own step), whose 1% windows hold 1,000 cycles. At 20,000 a window is 200
# cycles, 15-30 ms for kernel TCP: the kernel variant's ratio ranged 0.93-1.27 between runs
# of one build on an idle machine (3 of 19 failed, one of them in a clean-clone CI run), so
# there it is printed, not judged. Everything else is checked at every size.
[ "$cycles" -ge 100000 ] || export CHURN_AGING_CHECK=${CHURN_AGING_CHECK:-0}
conc=10
# the whole run, seconds: 260 s for 20,000, 1,060 s for 100,000 (shm ran 20,000 at 133/s at a
# load of 19 here, 100,000 at 3,700/s on a quiet machine; kernel TCP 100,000 in 5 s)
limit=$((60 + cycles / 100))

# churn_pair TAG: a server and a client, the churn between them; output in $RSK_TMP/TAG.out
# and TAG_srv.log, stats in RSK_STATS. Sets rc to connscale's exit status (3: aged and
# nothing else, connscale.c) after checking everything else of the run.
churn_pair() {
	local tag=$1 port started accepted few first k
	port=$(free_port)
	start_bg "${tag}_srv" pre "$RSK_PROGS/connserver" "$port" --seconds $((limit + 30))
	wait_port "$port"
	rc=0
	run_limited $((limit + 10)) pre "$RSK_PROGS/connscale" churn "$port" "$cycles" "$conc" \
		"$(eval echo "\${PID_${tag}_srv}")" "$limit" >"$RSK_TMP/$tag.out" 2>&1 || rc=$?
	cat "$RSK_TMP/$tag.out"
	stop_bg "${tag}_srv"
	cat "$RSK_TMP/${tag}_srv.log"
	[ "$rc" != 124 ] || fail "connscale churn still running after $((limit + 10)) s"
	[ "$rc" = 0 ] || [ "$rc" = 3 ] ||
		fail "churn failed (exit $rc): $(grep '^churn: cycles' "$RSK_TMP/$tag.out")"
	for k in resets errors accept_errors open; do
		[ "$(kv "$RSK_TMP/${tag}_srv.log" 'connserver: accepted' $k)" = 0 ] ||
			fail "server: $k is not 0"
	done
	! grep -q 'rdmasock.*warn' "$RSK_TMP/${tag}_srv.log" "$RSK_TMP/$tag.out" ||
		fail "the library warned: $(grep -h 'rdmasock.*warn' "$RSK_TMP/${tag}_srv.log" "$RSK_TMP/$tag.out" | head -3)"
	started=$(kv "$RSK_TMP/$tag.out" 'churn: cycles' started)
	accepted=$(kv "$RSK_TMP/${tag}_srv.log" 'connserver: accepted' accepted)
	[ "$accepted" = "$started" ] ||
		fail "the client started $started connections, the server accepted $accepted"
	stats_summary
	# Every connection of either process on the path of this variant. A loopback handshake
	# not done 2 ms after connect() (a busy host left it to ksoftirqd) keeps its connection on
	# TCP by design (core/transport/shm_cm.c rsk_shm_withdraw, fallback "handshake"; the
	# server sees a client that did not offer, "no_peer"): 1 of 152,842 here while a build
	# ran beside it; up to 1 in 1,000 is allowed, and counted.
	few=$((started / 1000))
	case "$RSK_TEST_TRANSPORT" in
	kernel)
		assert_path connscale "$started" kernel policy
		assert_path connserver "$started" kernel policy ;;
	shm)
		assert_path connscale "$started" shm handshake:$few
		assert_path connserver "$started" shm no_peer:$few ;;
	auto) # short connections stay on TCP by the policy; the first burst, before the destination
		# has a verdict, is set up on shm. A verdict needs 4 closed connections' notes
		# (core/calls/history.c, RSK_HIST_DEPTH / 2), and only a closed connection lets connscale
		# start another, so at most conc open + 3 closed ones go direct before it (setup_limit
		# holds the open ones that are still setting up to 8, docs/design.md "TCP first"). A slow
		# ASan run set up 11 (8 + 3): the bound is conc + 3, not 8.
		# Once the verdict says short, the default bearer (RDMASOCK_BEARER=auto) carries 7 in 8
		# of them, and the eighth starts on TCP first (docs/design.md, "The bearer by default").
		first=$((conc + 3 + few))
		assert_path connscale "$started" kernel tcp_first setup_limit shm:$first handshake:$few bearer
		assert_path connserver "$started" kernel no_peer shm:$first bearer
		[ "$(scale_py "$RSK_STATS" connscale <<<'print(totals(sys.argv[1], sys.argv[2])[0].get("bearer", 0))')" -ge \
			$((started / 2)) ] || fail "fewer than half the connections on the default bearer" ;;
	*) fail "no path claimed for transport $RSK_TEST_TRANSPORT" ;;
	esac
}

churn_pair churn
# A pair that read as aged gets a second opinion: a fresh pair, started now on this machine,
# whose first 10% the aged pair's last section is judged against (connscale.c churn_fresh
# says why). Its stats go to a file of their own; its run is checked as the first was.
if [ "$rc" = 3 ]; then
	aged=$(sed -n 's/^churn: aged last //p' "$RSK_TMP/churn.out")
	[ -n "$aged" ] || fail "connscale exited 3 without the aged pair's last section"
	echo "churn: the pair read as aged; a fresh pair for a second opinion"
	RSK_STATS=$RSK_TMP/fresh_stats.jsonl
	export CHURN_AGED_LAST=$aged
	churn_pair fresh
	[ "$rc" = 0 ] || fail "the pair aged: its last 10% cost more than 1.2x a fresh pair's first 10%"
	echo "churn: the aged pair's last 10% costs what a fresh pair's first 10% does: the machine, not the pair"
fi
echo "churn of $cycles connections over $RSK_TEST_TRANSPORT: ok"
