#!/usr/bin/env bash
# Role: ctest vm_engine (host side). Boots the Soft-RoCE guest with test_verbs (the engine
# over real verbs) and verbs_fork plus librdmasock.so, and runs guest/engine.sh there.
# Exit 77 (skipped) when no guest can be had on this machine; see run.sh.
#
# Env (set by CMake): RSK_LIB, RSK_TEST_VERBS, RSK_VERBS_FORK.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
: "${RSK_LIB:?}" "${RSK_TEST_VERBS:?}" "${RSK_VERBS_FORK:?}"
start=$SECONDS
bash "$HERE/run.sh" --timeout "${RSK_VM_ENGINE_TIMEOUT:-400}" \
	--bin "$RSK_TEST_VERBS" --bin "$RSK_VERBS_FORK" --bin "$RSK_LIB" --bin socat --bin setpriv \
	--bin redis-server --bin redis-cli --bin redis-benchmark \
	--env "RSK_TEST_VERBS=$RSK_TEST_VERBS" --env "RSK_VERBS_FORK=$RSK_VERBS_FORK" \
	--env "RSK_LIB=$RSK_LIB" ${RSK_VM_ONLY:+--env "RSK_VM_ONLY=$RSK_VM_ONLY"} "$HERE/guest/engine.sh"
rc=$?
echo "test_vm_engine: exit $rc after $((SECONDS - start)) s"
exit $rc
