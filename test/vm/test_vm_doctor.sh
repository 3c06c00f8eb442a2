#!/usr/bin/env bash
# Role: ctest vm_doctor (host side). Boots the Soft-RoCE guest with the rdmasock command,
# the library and echo_server, and runs guest/doctor.sh there: doctor with real devices.
# Exit 77 (skipped) when no guest can be had on this machine; see run.sh.
#
# Env (set by CMake): RSK_CLI, RSK_LIB, RSK_PROGS.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
: "${RSK_CLI:?}" "${RSK_LIB:?}" "${RSK_PROGS:?}"
start=$SECONDS
bash "$HERE/run.sh" --timeout "${RSK_VM_DOCTOR_TIMEOUT:-180}" \
	--bin "$RSK_CLI" --bin "$RSK_LIB" --bin "$RSK_PROGS/echo_server" \
	--env "RSK_CLI=$RSK_CLI" --env "RSK_LIB=$RSK_LIB" --env "RSK_ECHO=$RSK_PROGS/echo_server" \
	${RSK_VM_ONLY:+--env "RSK_VM_ONLY=$RSK_VM_ONLY"} "$HERE/guest/doctor.sh"
rc=$?
echo "test_vm_doctor: exit $rc after $((SECONDS - start)) s"
exit $rc
