#!/usr/bin/env bash
# The fuzz targets of test/fuzz under libFuzzer (clang, ASan+UBSan), each for a bounded time,
# starting from its corpus in test/fuzz/corpus/<target>/ (read only: new inputs go to a work
# directory). A crash or a failed invariant fails the run and leaves its input under
# build-fuzz/fuzz-work/<target>/ (add it to the corpus, with the fix, as a regression input).
# Usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   (default 45 s, every target)
#   FUZZ_MERGE=1: afterwards merge what was found into test/fuzz/corpus (for committing).
#   FUZZ_JOBS=N: targets run N at a time (default: one per core).
# scripts/test.sh runs it (60 s each); scripts/install-deps.sh installs clang and libclang-rt-14-dev.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-45}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config stream shm rdv hello)
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: SECONDS must be a positive integer" >&2; exit 2; }
command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/install-deps.sh)" >&2; exit 1; }

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DRSK_WERROR=ON -DRSK_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

top=$PWD
work=$top/build-fuzz/fuzz-work
jobs=${FUZZ_JOBS:-$(nproc)}

# fuzz_one TARGET: one bounded run; its exit status says whether it found nothing.
fuzz_one() {
	local t=$1
	rm -rf "${work:?}/$t"
	mkdir -p "$work/$t/new"
	# -timeout: one input taking a second is a hang (each is a few syscalls at most);
	# -rss_limit_mb: a leak shows long before it; leaks are checked at exit (-detect_leaks).
	(cd "$work/$t" && ASAN_OPTIONS=detect_leaks=1 timeout -k 10 $((secs + 120)) \
		"$top/build-fuzz/test/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$t/" \
		"$work/$t/new" "$top/test/fuzz/corpus/$t" >"$work/$t/log" 2>&1)
}

# fuzz_report TARGET STATUS: what one run found (and, with FUZZ_MERGE=1, keep its inputs).
fuzz_report() {
	local t=$1
	if [ "$2" != 0 ]; then
		echo "fuzz: $t FAILED; log $work/$t/log, input(s):" >&2
		ls "$work/$t"/crash-* "$work/$t"/timeout-* "$work/$t"/leak-* "$work/$t"/oom-* \
			2>/dev/null >&2 || true
		grep -m1 -A12 -E "ERROR|invariant failed|deadly signal" "$work/$t/log" >&2 || true
		return 1
	fi
	grep -E "^stat::(number_of_executed_units|new_units_added)" "$work/$t/log" |
		sed "s/^/fuzz: $t: /"
	if [ "${FUZZ_MERGE:-0}" = 1 ]; then
		"$top/build-fuzz/test/fuzz/fuzz_$t" -merge=1 "test/fuzz/corpus/$t" "$work/$t/new" \
			>>"$work/$t/log" 2>&1
	fi
}

# The targets run side by side, FUZZ_JOBS (default one per core) at a time, so the bound per
# target does not multiply the wall time by the number of targets.
failed=()
i=0
while [ $i -lt ${#targets[@]} ]; do
	batch=("${targets[@]:$i:$jobs}")
	pids=()
	for t in "${batch[@]}"; do
		echo "fuzz: $t for ${secs}s"
		fuzz_one "$t" &
		pids+=($!)
	done
	for k in "${!batch[@]}"; do
		st=0
		wait "${pids[$k]}" || st=$?
		fuzz_report "${batch[$k]}" "$st" || failed+=("${batch[$k]}")
	done
	i=$((i + jobs))
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${targets[*]}: no crash in ${secs}s each"
