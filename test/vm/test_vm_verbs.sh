#!/usr/bin/env bash
# Role: ctest vm_verbs (host side). Boots the Soft-RoCE guest once with a preload library,
# the test programs and the applications, and runs guest/verbs.sh there: redis, iperf3,
# sockperf, 1 GiB integrity, non-blocking connect, mixed peers, peer death and a dying peer's
# last writes, every stream
# crossing rxe0 -> rxe1. The same scenarios run against librdmasock (the default), rsocket's
# librspreload.so or no preload at all (kernel TCP, the reference). Prints one RSK-VM-VERBS
# line per scenario again at the end. Exit: the guest's (1 if a scenario failed), 77 when no
# guest can be had here (see run.sh).
#
# Env: RSK_VM_PRELOAD  what to preload: a path to a .so; "rsocket" (librspreload.so);
#                      "none" or "kernel" (nothing); default RSK_LIB
#      RSK_LIB         librdmasock.so (set by ctest; default build/librdmasock.so)
#      RSK_PROGS       test/progs binaries (set by ctest; default build/test/progs)
#      RSK_VM_PROBE, RSK_VM_NBCONNECT  built by CMake (compiled here from test/vm if unset)
#      RSK_VM_TRANSPORT RDMASOCK_TRANSPORT for librdmasock (default verbs), RSK_VM_EXPECT the
#                      transport whose stats must show the bytes (default verbs; kernel
#                      checks the harness against a library without a verbs transport)
#      RSK_VM_INTEGRITY_BYTES (default 1G), RSK_VM_INTEGRITY_SECS (400), RSK_VM_REDIS_N (2000),
#      RSK_VM_MIXED_BYTES (8388608), RSK_VM_IDLE_SECS (10), RSK_VM_ONLY (regex of names),
#      RSK_VM_VERBS_TIMEOUT whole run in seconds (default 900)
#      RDMASOCK_* (other than TRANSPORT and STATS) are passed into the guest, e.g. for logging.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rsk-vm-verbs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

say() { echo "test_vm_verbs: $*" >&2; }

# Debian puts rsocket's preload library beside librdmacm (package librdmacm1).
rsocket_lib() { ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n1; }

preload=${RSK_VM_PRELOAD:-${RSK_LIB:-$TOP/build/librdmasock.so}}
case $preload in
none | kernel) preload="" mode=kernel ;;
rsocket) preload=$(rsocket_lib) mode=rsocket ;;
*librdmasock*) mode=rdmasock ;;
*librspreload*) mode=rsocket ;;
*) mode=other ;;
esac
if [ $mode != kernel ]; then
	[ -n "$preload" ] && [ -f "$preload" ] || { say "no preload library '${preload}'"; exit 1; }
	preload=$(readlink -f "$preload")
fi

progs=${RSK_PROGS:-$TOP/build/test/progs}
for p in integrity mixed_peer peerdeath lastwords close_busy connserver connscale nagle; do
	[ -x "$progs/$p" ] || { say "test program $progs/$p not built (RSK_PROGS)"; exit 1; }
done
progs=$(readlink -f "$progs")

# vm_probe (blocking echo server) and nbconnect: CMake builds them; by hand, compile here.
probe=${RSK_VM_PROBE:-}
if [ -z "$probe" ]; then
	probe=$tmp/vm_probe
	cc -O2 -Wall -o "$probe" "$HERE/vm_probe.c" || exit 1
fi
nbc=${RSK_VM_NBCONNECT:-}
if [ -z "$nbc" ]; then
	nbc=$tmp/nbconnect
	cc -O2 -Wall -o "$nbc" "$HERE/nbconnect.c" || exit 1
fi

args=(--timeout "${RSK_VM_VERBS_TIMEOUT:-900}")
args+=(--env "RSK_VM_MODE=$mode" --env "RSK_VM_PRELOAD=$preload" --env "RSK_VM_PROGS=$progs")
args+=(--bin "$probe" --env "RSK_VM_PROBE=$probe" --bin "$nbc" --env "RSK_VM_NBCONNECT=$nbc")
[ -z "$preload" ] || args+=(--bin "$preload")
for p in integrity mixed_peer peerdeath lastwords close_busy connserver connscale nagle; do args+=(--bin "$progs/$p"); done
for app in redis-server redis-benchmark iperf3 sockperf; do
	if command -v "$app" >/dev/null; then
		args+=(--bin "$app")
	else
		say "$app is not installed: its scenario will fail (scripts/install-deps.sh)"
	fi
done
for v in RSK_VM_TRANSPORT RSK_VM_EXPECT RSK_VM_INTEGRITY_BYTES RSK_VM_INTEGRITY_SECS RSK_VM_REDIS_N \
	RSK_VM_MIXED_BYTES RSK_VM_IDLE_SECS RSK_VM_ONLY RSK_VM_FDS_N RSK_VM_CHURN_N RSK_VM_CHURN_SECS; do
	[ -z "${!v:-}" ] || args+=(--env "$v=${!v}")
done
while IFS='=' read -r v _; do
	case $v in
	RDMASOCK_TRANSPORT | RDMASOCK_STATS) ;;
	RDMASOCK_*) args+=(--env "$v=${!v}") ;;
	esac
done < <(env)

logdir=${RSK_VM_LOG_DIR:-${TMPDIR:-/tmp}/rsk-vm-logs}
mkdir -p "$logdir"
log=$logdir/verbs-$mode-$(date +%Y%m%d-%H%M%S)-$$.log
say "mode $mode, preload ${preload:-none}, log $log"

start=$SECONDS
bash "$HERE/run.sh" "${args[@]}" --log "$log" "$HERE/guest/verbs.sh"
rc=$?
echo "=== vm_verbs ($mode, ${preload:-no preload}) on $(hostname), $(date -u '+%Y-%m-%d %H:%M UTC')"
# The guest prints each line as its scenario ends and all again in its summary block; a run
# cut short has no block: then the lines printed so far.
if grep -aq '^=== vm_verbs summary' "$log"; then
	sed -n '/^=== vm_verbs summary/,/^RSK-VM-SUMMARY/p' "$log" |
		grep -a -e '^RSK-VM-VERBS ' -e '^RSK-VM-SUMMARY'
else
	grep -a '^RSK-VM-VERBS ' "$log"
fi
say "exit $rc after $((SECONDS - start)) s"
exit $rc
