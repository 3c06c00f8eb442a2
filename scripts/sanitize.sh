#!/usr/bin/env bash
# The integration suite with a sanitized library, preloaded into real programs after the
# sanitizer's runtime (LD_PRELOAD="<runtime> librdmasock.so", see test/integration/lib.sh):
#   asan  ASan+UBSan build (build-asan): every integration test on shm and auto, and the
#         rdmasock command's tests. The scale tests are load tests sized for the release
#         build, and run smaller here (env in run_asan): stale events 180 cycles instead of
#         1,800, 1,000 idle connections instead of 10,000, churn 2,000 cycles without its
#         aging check (CPU time per cycle means nothing under ASan), and not its 100,000-
#         cycle variant (label long); emfile as it is. At full size stale alone took 2.5-7 min per run here and
#         missed its limits. Two stay out: scale_backlog (its outcomes hang on windows of
#         0.6-2.5 s from process start, which the sanitized processes' start-up on a busy
#         machine missed: "nothing listens") and scale_redis (passes, but -c 1000 took 26
#         of its 60 s at a load of 17, and its paths run in int_redis_*). Timed 2026-12-02
#         on the 2 shared cores (loads 4-9): the whole pass 875 s, the 9 scale tests 102 of
#         its 1,731 test-seconds (under a minute of the pass at -j2);
#   tsan  TSan build (build-tsan): the unit tests and the threaded integration tests
#         (threads, memcached, redis, the monitor thread's timers in nagle and move, and the
#         fork/exec/socat paths where connections are shared and relayed). Not daemon
#         (nginx forking its master from the process that listened), and so not the other
#         nginx tests: that process already runs our stats thread (from its first socket),
#         and TSan puts a child forked from a threaded process into a mode that skips its
#         interceptors for good (die_after_fork=0; "forked a multi-threaded process"). It
#         then queues the master's SIGQUIT for a handler it never runs, and the master sits
#         in sigsuspend for ever (seen 2026-12-06: nginx's handler never logged the signal,
#         the workers' channel got nothing). nginx under TSan's runtime alone quits, and
#         without TSan int_daemon passes. Nor close_busy: it closes a socket while another
#         thread is in recv on it, on purpose, which TSan's model of fds reports as a race
#         on the fd (seen 2026-12-06: the close against our recv on the app end). A kernel
#         socket's recv would race its close the same way in that model (not run: python
#         under TSan's runtime alone crashes here). Its unit tests (test_lifecycle) run here.
# Only librdmasock (and our own test programs) are built with the sanitizer; redis, nginx,
# memcached, socat, iperf3, sockperf, bash and python get its runtime by LD_PRELOAD alone.
# Each sanitizer writes its reports to files (log_path) in a directory of its own; the run
# fails on any test failure and on any report, whichever process wrote it (a server in the
# background, a forked child, a client whose exit status a test does not look at).
# Exceptions (third-party programs' own leaks, curl): test/sanitize/, each with its reason.
# Usage: bash scripts/sanitize.sh [asan|tsan]...   (default: both; 6-8 min on 2 idle cores
# with the trees built when last timed, before the stdio, scale and wake-up tests came; far
# longer on a shared machine). scripts/test.sh (CI) runs both passes.
# Forks: neither gcc 12's nor clang 14's ASan runtime locks its allocator around fork, so a
# child forked while another thread was inside malloc inherits that lock held and hangs
# (building with clang 14 would not help). The library's own threads therefore never work
# while the process forks (the fork gate, core/base/thread.h); an application thread that
# allocates during another's fork would still hang its child, which none of the programs
# here do. Any process a pass leaves running fails it (leftovers below).
# Each pass is bounded by RSK_SANITIZE_SECS (default 1800 s);
# RSK_SANITIZE_TESTS=REGEX (for debugging) runs only the tests of a pass that match it
# (under tsan: instead of its own list of integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
[ "$jobs" -gt 4 ] && jobs=4 # the integration tests start servers; more at once only adds noise
limit=${RSK_SANITIZE_SECS:-1800}
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(asan tsan)
top=$PWD
status=0
summary=()
only=()
[ -z "${RSK_SANITIZE_TESTS:-}" ] || only=(-R "$RSK_SANITIZE_TESTS")

# reports DIR NAME: the number of files in DIR with a sanitizer's report, each shown; status 1
# if any. A file with no report in it is counted, not shown, when it holds only LSan's
# "Running thread N was not suspended" (a forked child of a threaded parent checked for
# leaks and found none) or its list of suppressions used (test/sanitize/lsan.supp); any
# other text without a report is shown.
reports() {
	local f n=0 quiet=0 supp=0
	for f in "$1"/*; do
		[ -e "$f" ] || continue
		if ! grep -qE "ERROR: |runtime error|WARNING: ThreadSanitizer" "$f"; then
			if grep -q "^Suppressions used:" "$f"; then
				supp=$((supp + 1))
			elif grep -qvE "^==[0-9]+==Running thread [0-9]+ was not suspended" "$f"; then
				echo "sanitize: $2: note $f: $(head -3 "$f")"
			else
				quiet=$((quiet + 1))
			fi
			continue
		fi
		n=$((n + 1))
		echo "=== $2 report $f" >&2
		head -80 "$f" >&2
	done
	[ "$quiet" = 0 ] || echo "sanitize: $2: $quiet file(s) with LSan's 'thread was not suspended' only"
	[ "$supp" = 0 ] || echo "sanitize: $2: $supp file(s) with suppressed reports only:" \
		"$(cat "$1"/* | awk '/^Suppressions used:/ { s = 1; next } s && $1 ~ /^[0-9]+$/ { print $3 }' |
			sort | uniq -c | tr -s ' \n' ' ')"
	if [ "$n" -gt 0 ]; then
		echo "sanitize: $2: $n report file(s) in $1" >&2
		status=1
	fi
	return "$n"
}

# sctest SIDFILE ARGS...: ctest ARGS in a session of its own, whose id is added to SIDFILE,
# bounded by RSK_SANITIZE_SECS.
sctest() {
	local f=$1
	shift
	timeout -k 30 "$limit" setsid -w bash -c 'echo $$ >>"$0"; exec ctest "$@"' "$f" "$@"
}

# leftovers SIDFILE NAME: end the processes still running in the sessions of SIDFILE (what
# the tests of this pass started and left), each shown; their number. A test's time limit
# ends its script, not an orphaned child that hangs (as forked children did in the ASan
# runtime's allocator lock, before the fork gate: see the header).
leftovers() {
	local p sid n=0 pids=()
	[ -s "$1" ] || return 0
	for p in /proc/[0-9]*; do
		sid=$(sed -E 's/^.*\) [A-Za-z] [0-9-]+ [0-9-]+ ([0-9-]+) .*$/\1/' "$p/stat" 2>/dev/null) ||
			continue
		grep -qx -- "$sid" "$1" && pids+=("${p#/proc/}")
	done
	for p in "${pids[@]}"; do
		echo "sanitize: $2: left running: $p $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")" >&2
		kill -TERM "$p" 2>/dev/null && n=$((n + 1))
	done
	[ "$n" = 0 ] || { sleep 2; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
	[ "$n" = 0 ] || status=1
	return "$n"
}

# logdir NAME: a fresh directory anyone may write (the cross-uid test runs clients as nobody).
# Under the build tree when nobody can reach it there; a checkout inside a private directory
# (mktemp -d makes it 0700) would keep those clients' reports out, so then under /tmp.
logdir() {
	local d=$top/build-$1/sanitizer-logs
	rm -rf "$d" "$d.sid"
	mkdir -p "$d"
	chmod 1777 "$d"
	if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
		! setpriv --reuid=65534 --regid=65534 --clear-groups test -w "$d" 2>/dev/null; then
		rm -rf "$d"
		d=$(mktemp -d "/tmp/rsk-sanitize-$1.XXXXXX")
		chmod 1777 "$d"
	fi
	echo "$d"
}

# plain_lib: an unsanitized library for pre_plain (the CI build's, or one made here).
# (always brought up to date: a stale one from older sources speaks an older wire format to
# the sanitized library, and nginx's accepts failed with EPROTO on a developer's tree)
plain_lib() {
	[ -f build-ci/CMakeCache.txt ] ||
		cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRSK_WERROR=ON >/dev/null
	cmake --build build-ci -j "$(nproc)" --target rdmasock >/dev/null
	echo "$top/build-ci/librdmasock.so"
}

# pass NAME RC REPORTS LEFT SECS: one line of the summary.
pass() {
	local r=ok
	[ "$2" = 0 ] || r="tests FAILED (ctest $2)"
	[ "$3" = 0 ] || r="$r, $3 sanitizer report file(s)"
	[ "$4" = 0 ] || r="$r, $4 process(es) left running"
	summary+=("$1: $r, ${5}s")
}

run_asan() {
	local logs rc=0 n=0 left=0 t0 s=$top/test/sanitize
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRSK_WERROR=ON -DRSK_ASAN=ON >/dev/null
	cmake --build build-asan -j "$(nproc)"
	logs=$(logdir asan)
	if [ "${logs#"$top"/}" = "$logs" ]; then # a private tree (logdir): nobody reads a copy
		rm -rf "$logs.supp"
		cp -r "$s" "$logs.supp"
		chmod -R a+rX "$logs.supp"
		s=$logs.supp
	fi
	t0=$SECONDS
	(
		cd build-asan
		export RSK_PRELOAD_FIRST RSK_LIB_PLAIN ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
		# The Debug build with ASan moves shm bytes ~8x slower than the release one: 1 GiB
		# each way (test_integrity.sh) does not fit the test programs' 55 s alarm.
		export INTEGRITY_BYTES=${INTEGRITY_BYTES:-128M}
		RSK_PRELOAD_FIRST=$(gcc -print-file-name=libasan.so)
		RSK_LIB_PLAIN=$(cd "$top" && plain_lib)
		# verify_asan_link_order=0: a program that `rdmasock run` starts (the cli tests)
		# gets the library without the runtime in front of it; it still runs, instrumented
		# where the library's own code is.
		ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:verify_asan_link_order=0"
		ASAN_OPTIONS+=":suppressions=$s/asan.supp:include_if_exists=$s/asan-%b.opts"
		LSAN_OPTIONS="suppressions=$s/lsan.supp"
		UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
		# The scale tests at the sizes the header gives (each test reads its own).
		export SCALE_STALE_SEQ=20 SCALE_STALE_CONC_CYCLES=160 SCALE_IDLE_N=1000
		export SCALE_CHURN_CYCLES=2000 CHURN_AGING_CHECK=0
		sctest "$logs.sid" --output-on-failure -L integration -LE '^(kernel|long)$' \
			-E '^int_scale_(backlog|redis)_' "${only[@]}" -j "$jobs" --timeout 600
	) || rc=$?
	[ "$rc" = 0 ] || { echo "sanitize: asan: integration tests failed" >&2; status=1; }
	reports "$logs" asan || n=$?
	leftovers "$logs.sid" asan || left=$?
	pass "asan+ubsan (integration, shm/auto/cli)" "$rc" "$n" "$left" $((SECONDS - t0))
}

run_tsan() {
	local logs rc=0 n=0 left=0 t0
	local tsan_int='^int_(threads|memcached|redis|nagle|move|fork|exec|socat|stdio_relay)_(shm|auto)$'
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRSK_WERROR=ON -DRSK_TSAN=ON \
		>/dev/null
	cmake --build build-tsan -j "$(nproc)"
	logs=$(logdir tsan)
	t0=$SECONDS
	(
		cd build-tsan
		export RSK_PRELOAD_AFTER RSK_LIB_PLAIN TSAN_OPTIONS
		RSK_PRELOAD_AFTER=$(gcc -print-file-name=libtsan.so) # after the library: lib.sh
		RSK_LIB_PLAIN=$(cd "$top" && plain_lib)
		TSAN_OPTIONS="log_path=$logs/tsan:suppressions=$top/test/sanitize/tsan.supp"
		TSAN_OPTIONS+=":second_deadlock_stack=1:history_size=4"
		# A forked child that holds connections starts its own monitor thread, and the
		# fork tests' parents have one: TSan would end such a child ("starting new threads
		# after multi-threaded fork is not supported"); it may deadlock there instead,
		# which the tests' time limits would show.
		TSAN_OPTIONS+=":die_after_fork=0"
		rc=0
		sctest "$logs.sid" --output-on-failure -j "$jobs" --timeout 600 -L unit \
			"${only[@]}" ||
			rc=$?
		sctest "$logs.sid" --output-on-failure -j "$jobs" --timeout 600 \
			-R "${RSK_SANITIZE_TESTS:-$tsan_int}" ||
			rc=$?
		exit "$rc"
	) || rc=$?
	[ "$rc" = 0 ] || { echo "sanitize: tsan: tests failed" >&2; status=1; }
	reports "$logs" tsan || n=$?
	leftovers "$logs.sid" tsan || left=$?
	pass "tsan (unit + threaded integration)" "$rc" "$n" "$left" $((SECONDS - t0))
}

for w in "${what[@]}"; do
	case "$w" in
	asan) run_asan ;;
	tsan) run_tsan ;;
	*) echo "sanitize: unknown '$w' (asan|tsan)" >&2; exit 2 ;;
	esac
done
echo "sanitize: summary"
for l in "${summary[@]}"; do echo "  $l"; done
exit "$status"
