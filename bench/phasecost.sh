#!/usr/bin/env bash
# Runs bench/phasecost.c in private network namespaces (root; loopback only):
#   bash bench/phasecost.sh [REPS] [N]   per-phase costs, REPS runs of N iterations, medians
#   TW=1 bash bench/phasecost.sh         bind cost vs TIME_WAIT count (bind- and connect-made)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/phasecost
[ -x "$BIN" ] || cc -O2 -Wall -Wno-unused-result -o "$BIN" "$ROOT/bench/phasecost.c" || exit 1
if [ "${TW:-0}" = 1 ]; then
	for how in bind connect; do
		echo "== TIME_WAIT sockets whose ports were chosen by $how()"
		unshare -n sh -c 'ip link set lo up && "$0" tw 0,2000,5000,10000,12000,14000,16000,18000 "$1"' "$BIN" "$how"
	done
	exit 0
fi
REPS=${1:-3}
N=${2:-2000}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/rsk-phasecost.XXXXXX")
for ((r = 1; r <= REPS; r++)); do
	unshare -n sh -c 'ip link set lo up && "$0" phases "$1"' "$BIN" "$N" >"$OUT/run.$r.txt"
done
# median per line across the runs
paste -d"\t" "$OUT"/run.*.txt | awk -F'\t' -v reps="$REPS" '
NR == 1 { printf "%-78s %9s\n", "phase (median of " reps " runs of the per-run medians)", "us"; next }
{ n = 0; for (i = 1; i <= NF; i++) { v = $i; sub(/.* /, "", v); a[++n] = v + 0 }
  name = $1; sub(/ +[0-9.]+$/, "", name)
  for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
  m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  printf "%-78s %9.2f\n", name, m; delete a }'
