# Role: bash library for guest scenario scripts (run.sh puts it at /rsk/guest-lib.sh).
# A scenario script sources it, runs each check through `scenario`, and ends with
# `rsk_summary` (its status becomes the guest's, and so run.sh's).
#
# Topology: veth0 192.0.2.1 carries rxe0, veth1 192.0.2.2 carries rxe1. Traffic to .2 (from
# .1, the default source) and from .2 to .1 crosses the pair, so it goes over RoCE; traffic
# from .1 to .1 stays on rxe0's internal loopback.
#
# Env: RSK_VM_ONLY=REGEX runs only the scenarios whose name matches (others are not listed).
#      RSK_VM_SCENARIO_TIMEOUT default bound of one scenario in seconds (60).

# shellcheck disable=SC2034 # for the scripts that source this
RSK_ADDR1=192.0.2.1
# shellcheck disable=SC2034
RSK_ADDR2=192.0.2.2
RSK_RESULTS_PASS=0 RSK_RESULTS_FAIL=0 RSK_RESULTS_SKIP=0

# alive PID: the process exists and is not a zombie (kill -0 succeeds on zombies).
alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$st" ] && [ "$st" != Z ]
}

# proc_stop PID SIG SECS: signal, wait bounded, SIGKILL if still there, reap.
proc_stop() {
	local i
	kill -"$2" "$1" 2>/dev/null
	for ((i = 0; i < $3 * 10; i++)); do
		alive "$1" || break
		sleep 0.1
	done
	alive "$1" && kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# rxe_sent_pkts: packets all rxe devices have sent (RoCE only: kernel TCP does not count).
rxe_sent_pkts() {
	local f n sum=0
	for f in /sys/class/infiniband/rxe*/ports/1/hw_counters/sent_pkts; do
		[ -r "$f" ] || continue
		read -r n <"$f"
		sum=$((sum + n))
	done
	echo "$sum"
}

# assert_rxe_rose BEFORE: fails (status 1, message) unless rxe_sent_pkts grew past BEFORE.
assert_rxe_rose() {
	local now
	now=$(rxe_sent_pkts)
	if [ "$now" -le "$1" ]; then
		echo "assert_rxe_rose: sent_pkts $1 -> $now: nothing went over RDMA" >&2
		return 1
	fi
	echo "rxe sent_pkts $1 -> $now (+$((now - $1)))"
}

# skip_scenario MSG: end the current scenario as SKIP (call from inside a scenario function).
skip_scenario() {
	echo "SKIP: $*" >&2
	exit 77
}

# _hexaddr A.B.C.D: the address as /proc/net/tcp prints it (little-endian hex).
_hexaddr() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '%02X%02X%02X%02X' "$4" "$3" "$2" "$1"
}

# wait_port_addr ADDR PORT SECS: wait (bounded) until a TCP socket listens on ADDR:PORT (or
# on the wildcard) per /proc/net/tcp{,6}. Reads kernel state only: a connecting probe would
# itself be a connection the server under test sees.
wait_port_addr() {
	local want wild6 port end
	want=$(_hexaddr "$1"):$(printf '%04X' "$2")
	wild6=00000000000000000000000000000000:$(printf '%04X' "$2")
	port=$(printf '%04X' "$2")
	end=$(($(date +%s) + $3))
	while [ "$(date +%s)" -lt "$end" ]; do
		# field 2 local address, field 4 state (0A = LISTEN)
		if awk -v a="$want" -v w="00000000:$port" -v w6="$wild6" \
			'$4 == "0A" && ($2 == a || $2 == w || $2 == w6) { f = 1 } END { exit !f }' \
			/proc/net/tcp /proc/net/tcp6 2>/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	echo "wait_port_addr: nothing listens on $1:$2 after $3 s" >&2
	return 1
}

# scenario NAME CMD...: run CMD (usually a function) in its own process group, bounded by
# RSK_VM_SCENARIO_TIMEOUT (or SCENARIO_TIMEOUT_<NAME>), and print
# "RSK-VM-RESULT NAME PASS|FAIL|SKIP secs". Status 77 from CMD means SKIP. Leftover
# processes of the scenario are killed with its group, so one scenario cannot leak into the next.
scenario() {
	local name=$1 limit pid wpid rc t0 t1 res var
	shift
	if [ -n "${RSK_VM_ONLY:-}" ] && ! [[ $name =~ $RSK_VM_ONLY ]]; then
		return 0
	fi
	var=SCENARIO_TIMEOUT_${name//[^A-Za-z0-9_]/_}
	limit=${!var:-${RSK_VM_SCENARIO_TIMEOUT:-60}}
	echo "=== scenario $name (bound ${limit}s)"
	t0=$EPOCHREALTIME
	set -m # each background job gets its own process group, which we can kill whole
	("$@") &
	pid=$!
	(
		sleep "$limit"
		echo "scenario $name: timed out after ${limit}s" >&2
		kill -TERM -- -"$pid" 2>/dev/null
		sleep 2
		kill -KILL -- -"$pid" 2>/dev/null
	) &
	wpid=$!
	set +m
	wait "$pid"
	rc=$?
	kill -KILL -- -"$wpid" 2>/dev/null
	wait "$wpid" 2>/dev/null
	kill -KILL -- -"$pid" 2>/dev/null # whatever the scenario left behind
	t1=$EPOCHREALTIME
	case $rc in
	0) res=PASS; RSK_RESULTS_PASS=$((RSK_RESULTS_PASS + 1)) ;;
	77) res=SKIP; RSK_RESULTS_SKIP=$((RSK_RESULTS_SKIP + 1)) ;;
	*) res=FAIL; RSK_RESULTS_FAIL=$((RSK_RESULTS_FAIL + 1)) ;;
	esac
	printf 'RSK-VM-RESULT %s %s %.2f\n' "$name" "$res" "$(bc_sub "$t1" "$t0")"
	[ $res != FAIL ] || echo "scenario $name: status $rc" >&2
	return 0
}

# bc_sub A B: A - B for the decimal seconds of EPOCHREALTIME (no bc in the guest).
bc_sub() {
	local a=${1/./} b=${2/./}
	local d=$((10#$a - 10#$b))
	printf '%d.%06d' $((d / 1000000)) $((d % 1000000))
}

# rsk_summary: print the counts; status 1 if any scenario failed, 77 if all were skipped.
rsk_summary() {
	echo "RSK-VM-SUMMARY pass=$RSK_RESULTS_PASS fail=$RSK_RESULTS_FAIL skip=$RSK_RESULTS_SKIP"
	[ "$RSK_RESULTS_FAIL" = 0 ] || return 1
	[ "$RSK_RESULTS_PASS" != 0 ] || [ "$RSK_RESULTS_SKIP" = 0 ] || return 77
	return 0
}
