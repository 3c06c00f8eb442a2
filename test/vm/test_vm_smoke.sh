#!/usr/bin/env bash
# Role: ctest vm_smoke (host side). Boots the Soft-RoCE guest once with vm_probe, rsocket's
# preload library and the applications later VM scenarios need, and runs guest/smoke.sh there.
# Exit 77 (skipped) when no guest can be had on this machine; see run.sh.
#
# Env: RSK_VM_PROBE  vm_probe built by CMake (compiled here from vm_probe.c if unset)
#      RSK_VM_ONLY   regex of smoke scenarios to run (guest-lib.sh)
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
args=(--timeout "${RSK_VM_SMOKE_TIMEOUT:-180}")
tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

probe=${RSK_VM_PROBE:-}
if [ -z "$probe" ]; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/rsk-vm-smoke.XXXXXX")
	probe=$tmp/vm_probe
	cc -O2 -Wall -o "$probe" "$HERE/vm_probe.c" || exit 1
fi
args+=(--bin "$probe" --env "RSK_VM_PROBE=$probe")

# Debian puts rsocket's preload library beside librdmacm (package librdmacm1).
rsp=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n1)
[ -z "$rsp" ] || args+=(--bin "$rsp" --env "RSK_RSPRELOAD=$rsp")

for app in redis-server redis-cli redis-benchmark iperf3 sockperf socat; do
	if command -v "$app" >/dev/null; then
		args+=(--bin "$app")
	else
		echo "test_vm_smoke: $app not installed, its check is left out" >&2
	fi
done
[ -z "${RSK_VM_ONLY:-}" ] || args+=(--env "RSK_VM_ONLY=$RSK_VM_ONLY")

start=$SECONDS
bash "$HERE/run.sh" "${args[@]}" "$HERE/guest/smoke.sh"
rc=$?
echo "test_vm_smoke: exit $rc after $((SECONDS - start)) s"
exit $rc
