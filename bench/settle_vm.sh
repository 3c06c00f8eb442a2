#!/usr/bin/env bash
# Role: host side of the credit-settling measurement (bench/settle_vm_guest.sh): boots the
# Soft-RoCE guest once and runs bench/etecho (an edge-triggered server that reads until
# EAGAIN) under each library given, interleaved, counting per request the server's system
# calls by thread and fd kind, its event-loop thread's context switches and its credit-only
# messages. Heavy (qemu TCG, a few minutes): run by hand, not by ctest.
#   bash bench/settle_vm.sh LIB.so [LIB2.so ...]
# Env: SV_REPS [2] untraced runs per library, SV_N [5000] round trips each, SV_NT [1000]
# round trips of the one traced run per library, SV_SPINS [default 200000], SV_TIMEOUT [900].
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 LIB.so [LIB2.so ...]" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -Wall -Wextra -o "$OUT/etecho" "$ROOT/bench/etecho.c" -ldl
args=(--timeout "${SV_TIMEOUT:-900}" --bin strace --bin "$OUT/etecho")
libs=""
for l in "$@"; do
	l=$(readlink -f "$l")
	args+=(--bin "$l")
	libs+="${libs:+ }$l"
done
args+=(--env "SV_LIBS=$libs" --env "SV_ETECHO=$OUT/etecho" --env "SV_REPS=${SV_REPS:-2}"
	--env "SV_N=${SV_N:-5000}" --env "SV_NT=${SV_NT:-1000}"
	--env "SV_SPINS=${SV_SPINS:-default 200000}")
bash "$ROOT/test/vm/run.sh" "${args[@]}" "$ROOT/bench/settle_vm_guest.sh" 2>&1 |
	grep -E '^(SV-|RSK-VM-EXIT)' || true
