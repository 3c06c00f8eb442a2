#!/bin/sh
# Role: /init of the Soft-RoCE guest (run by dash, installed by prepare.sh). Mounts the pseudo
# filesystems, loads the rxe/veth modules, builds the veth pair with the policy routing that
# makes 192.0.2.1 <-> 192.0.2.2 traffic cross it, creates rxe0/rxe1, then runs /rsk/script
# (added by run.sh) with bash and reports its status on the console for the host to parse.
#
# Console protocol (host side: run.sh): "RSK-VM-BOOTED" once the guest is ready,
# "RSK-VM-INIT-FAILED <what>" if it never will be, "RSK-VM-EXIT <rc>" after the script.
#
# Filesystem layout: the initramfs is unpacked into the kernel's rootfs, which is a tmpfs
# already (no root= given), so / and /tmp are writable RAM as they are. Nothing is mounted over
# /tmp: files run.sh adds under /tmp stay visible. /dev/shm is its own tmpfs (shm_open).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C TERM=dumb

mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
# devtmpfs lacks these; bash's process substitution and /dev/stdin users need them.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
hostname "$(cat /etc/hostname)"

die() {
	echo "RSK-VM-INIT-FAILED $*"
	sleep 0.2 # let the serial line drain before the power goes
	poweroff -f
}

# must CMD...: run a setup step; the guest is useless without it.
must() {
	"$@" || die "$*"
}

while read -r ko; do
	case $ko in
	*crc32-pclmul*) insmod "$ko" 2>/dev/null || true ;; # optional: crc32_generic suffices
	*) must insmod "$ko" ;;
	esac
done </etc/rsk/modules

must ip link set lo up
# Both addresses are local, so by default the kernel would route .1 <-> .2 through lo, where
# rxe drops the packets (and 6.1's rxe has no netns support). Policy routing sends what goes to
# .2 out of veth0 and what goes from .2 to .1 out of veth1; accept_local lets the receiving side
# accept packets whose source is one of its own addresses.
must ip link add veth0 type veth peer name veth1
for c in all default veth0 veth1; do
	echo 1 >/proc/sys/net/ipv4/conf/$c/accept_local
	echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter
done
must ip addr add 192.0.2.1/24 dev veth0
must ip addr add 192.0.2.2/24 dev veth1
must ip link set veth0 up
must ip link set veth1 up
must ip rule add pref 100 lookup local
must ip rule del pref 0 lookup local
must ip rule add pref 9 iif lo from 192.0.2.2 to 192.0.2.2 lookup local
must ip rule add pref 10 iif lo to 192.0.2.2 lookup 100
must ip rule add pref 11 iif lo from 192.0.2.2 to 192.0.2.1 lookup 101
must ip route add 192.0.2.2 dev veth0 src 192.0.2.1 table 100
must ip route add 192.0.2.1 dev veth1 src 192.0.2.2 table 101
must rdma link add rxe0 type rxe netdev veth0
must rdma link add rxe1 type rxe netdev veth1

# Memory registration pins pages: no lock limit. Many-connection scenarios need fds.
# shellcheck disable=SC3045 # dash has ulimit -l and -n
ulimit -l unlimited || die "ulimit -l"
# shellcheck disable=SC3045
ulimit -n 65536

if [ -f /rsk/env ]; then
	set -a
	# shellcheck disable=SC1091 # written by run.sh
	. /rsk/env
	set +a
fi
export RSK_VM=1

echo "RSK-VM-INFO kernel $(uname -r) cpus $(nproc) uptime $(cut -d' ' -f1 /proc/uptime)"
echo "RSK-VM-BOOTED"
cd /tmp || die "no /tmp"
if [ -f /rsk/script ]; then
	bash /rsk/script </dev/null
	rc=$?
else
	echo "no /rsk/script"
	rc=2
fi
echo "RSK-VM-EXIT $rc"
sync
sleep 0.2 # let the serial line drain before the power goes
poweroff -f
