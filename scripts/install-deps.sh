#!/usr/bin/env bash
# Installs, non-interactively and idempotently, every Debian 12 package the build, the tests
# and the benchmarks need. Distro services are not started (policy-rc.d denies it during
# the install) and no running process is touched: tests start their own servers on free
# loopback ports and stop them by PID.
set -euo pipefail

BUILD_PKGS="build-essential cmake pkg-config libibverbs-dev librdmacm-dev uthash-dev libcmocka-dev"
# Fuzzing (scripts/fuzz.sh): clang with libFuzzer and its sanitizer runtimes.
FUZZ_PKGS="clang libclang-rt-14-dev"
TEST_PKGS="redis-server redis-tools iperf3 sockperf nginx-light curl memcached python3 socat postgresql
           libmemcached-tools valgrind procps iproute2 netcat-openbsd groff-base man-db util-linux
           gnuplot-nox"
# bench/syscalls.sh and BENCH_PROFILE=1 of bench/shm_vs_kernel.sh count syscalls with perf
# (raw_syscalls tracepoints); strace is the fallback and what the Soft-RoCE guest part uses.
# bench/connrate.sh drives nginx with ab (apache2-utils).
BENCH_PKGS="linux-perf strace apache2-utils"
# Soft-RoCE guest (test/vm): qemu boots Debian's own kernel, whose rdma_rxe gives real verbs
# on a host kernel without RDMA. The kernel package itself is only downloaded, never installed
# (test/vm/prepare.sh). bash, dash and libgcc-s1 are copied into the guest from the host.
VM_PKGS="qemu-system-x86 busybox-static cpio kmod rdma-core ibverbs-providers ibverbs-utils
         rdmacm-utils perftest iproute2 librdmacm1 dpkg bash dash libgcc-s1 gzip"

want=""
for p in $BUILD_PKGS $FUZZ_PKGS $TEST_PKGS $BENCH_PKGS $VM_PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || want="$want $p"
done

if [ -n "$want" ]; then
	export DEBIAN_FRONTEND=noninteractive
	# Forbid maintainer scripts from starting services while we install (policy-rc.d 101).
	policy=/usr/sbin/policy-rc.d
	had_policy=0
	[ -e "$policy" ] && had_policy=1
	if [ "$had_policy" = 0 ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
	fi
	apt-get update -qq || apt-get update
	apt-get install -y -qq --no-install-recommends $want
	if [ "$had_policy" = 0 ]; then
		rm -f "$policy"
	fi
fi

exit 0
