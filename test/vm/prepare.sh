#!/usr/bin/env bash
# Role: prepares, once, what a Soft-RoCE qemu guest boots: Debian's kernel (which ships
# rdma_rxe, unlike the host's) and a base initramfs with busybox, bash, iproute2, rdma-core and
# the verbs tools, the rxe/veth modules and an /init that sets up rxe0/rxe1 over a veth pair.
#
# Usage: prepare.sh            prints RSK_VM_KERNEL=... and RSK_VM_INITRD=... on stdout
# Cache: $RSK_VM_CACHE (default /var/cache/rdmasock-vm): the kernel .deb per kernel version,
#        and the built kernel+initramfs per kernel version + hash of these scripts and of the
#        host package versions copied in (so a script edit or an apt upgrade rebuilds).
# Env:   RSK_VM_KPKG=linux-image-6.1.0-NN-amd64 pins the kernel package;
#        RSK_VM_QEMU names the qemu binary (default qemu-system-x86_64).
# Exit:  0 ready; 77 when a guest cannot be had here (no qemu, kernel package not
#        downloadable and not cached); 1 on a real error.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pack-lib.sh
. "$HERE/pack-lib.sh"

CACHE=${RSK_VM_CACHE:-/var/cache/rdmasock-vm}
# Modules the guest loads, in --show-depends order (dependencies resolved at build time).
MODULES="rdma_rxe rdma_ucm ib_uverbs ib_umad rdma_cm veth crc32_generic crc32_pclmul"
# Host programs copied into the guest with their libraries. ip: busybox's own ip cannot make
# a veth pair. timeout: GNU semantics (-k, exit 124) that scripts on both sides share.
TOOLS="dash bash ldd ip rdma ss timeout ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong
       rping ucmatose rstream ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_lat"
# Packages whose files land in the image: their versions are part of the cache key.
KEY_PKGS="busybox-static dash bash iproute2 coreutils libc6 libgcc-s1 libibverbs1 librdmacm1
          ibverbs-providers ibverbs-utils rdmacm-utils perftest"

log() { echo "prepare: $*" >&2; }
skip() {
	log "SKIP: $*"
	exit 77
}

command -v "${RSK_VM_QEMU:-qemu-system-x86_64}" >/dev/null || skip "${RSK_VM_QEMU:-qemu-system-x86_64} missing (scripts/install-deps.sh)"
for t in busybox cpio gzip dpkg depmod modprobe flock $TOOLS; do
	command -v "$t" >/dev/null || skip "$t missing (scripts/install-deps.sh installs it)"
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || skip "rxe provider missing (ibverbs-providers)"

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
# One preparer at a time; concurrent runs wait here and then find the cache filled.
flock -w 900 9 || { log "cache lock busy for 15 minutes"; exit 1; }

# kernel_pkg: the linux-image-6.1.0-NN-amd64 that linux-image-amd64 currently names.
kernel_pkg() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ && !p { p = $2 } END { print p }'
}

# fetch_deb PKG: make sure $CACHE/debs/PKG.deb exists (apt-get download; one apt-get update
# and retry if the lists are stale, as the security archive drops old kernel builds).
fetch_deb() {
	local pkg=$1 dl
	[ -s "$CACHE/debs/$pkg.deb" ] && return 0
	dl=$(mktemp -d "$CACHE/dl.XXXXXX")
	if ! (cd "$dl" && timeout 300 apt-get download -q -o APT::Sandbox::User=root "$pkg") >&2; then
		log "apt-get download $pkg failed; refreshing the package lists once"
		timeout 300 apt-get update -qq >&2 || true
		(cd "$dl" && timeout 300 apt-get download -q -o APT::Sandbox::User=root "$pkg") >&2 || {
			rm -rf "$dl"
			return 1
		}
	fi
	mkdir -p "$CACHE/debs"
	mv "$dl"/*.deb "$CACHE/debs/$pkg.deb"
	rm -rf "$dl"
}

KPKG=${RSK_VM_KPKG:-$(kernel_pkg || true)}
if [ -z "$KPKG" ]; then
	timeout 300 apt-get update -qq >&2 || true
	KPKG=$(kernel_pkg || true)
fi
if [ -z "$KPKG" ] || ! fetch_deb "$KPKG"; then
	# Offline: fall back to the newest kernel already in the cache.
	KPKG=$(cd "$CACHE/debs" 2>/dev/null && ls -1 linux-image-*.deb 2>/dev/null | sort -V | tail -n1 | sed 's/\.deb$//') || true
	[ -n "$KPKG" ] || skip "kernel package not downloadable and none cached in $CACHE"
	log "using cached $KPKG"
fi
KVER=${KPKG#linux-image-}

KEY=$( {
	cat "$HERE/prepare.sh" "$HERE/pack-lib.sh" "$HERE/init.sh"
	dpkg-query -W $KEY_PKGS 2>/dev/null
} | sha256sum | cut -c1-12)
OUT=$CACHE/$KVER-$KEY
if [ -s "$OUT/initrd.gz" ] && [ -s "$OUT/vmlinuz" ]; then
	touch "$OUT" # last use, for the pruning below
	echo "RSK_VM_KERNEL=$OUT/vmlinuz"
	echo "RSK_VM_INITRD=$OUT/initrd.gz"
	exit 0
fi

log "building $OUT"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
K=$WORK/kernel
R=$WORK/root
mkdir -p "$K" "$R"

dpkg -x "$CACHE/debs/$KPKG.deb" "$K"
[ -s "$K/boot/vmlinuz-$KVER" ] || { log "$KPKG has no boot/vmlinuz-$KVER"; exit 1; }
depmod -b "$K" "$KVER" # the package ships no modules.dep

# Modules: the ordered, de-duplicated insmod list of every module and its dependencies.
mods=$(for m in $MODULES; do modprobe -d "$K" -S "$KVER" --show-depends "$m"; done |
	awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
: >"$WORK/modules"
for ko in $mods; do
	rel=${ko#"$K"}
	mkdir -p "$R/usr$(dirname "$rel")"
	cp "$ko" "$R/usr$rel" # /lib is a symlink to usr/lib in the image
	echo "$rel" >>"$WORK/modules"
done

# Layout: the host's merged-/usr symlinks, then real tools, then busybox for everything else.
for d in /bin /sbin /lib /lib64; do pk_links "$R" "$d"; done
mkdir -p "$R"/{dev,proc,sys,tmp,run,root,etc/rsk,etc/libibverbs.d,rsk,var/tmp,mnt}
chmod 1777 "$R/tmp" "$R/var/tmp"
for t in $TOOLS; do pk_bin "$R" "$t"; done
pk_path "$R" /bin/sh # the host's sh is dash: busybox ash would run its own ip applet
pk_bin "$R" /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
pk_bin "$R" /usr/lib/x86_64-linux-gnu/libibverbs.so.1
pk_bin "$R" /usr/lib/x86_64-linux-gnu/librdmacm.so.1
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/" # only rxe: no other provider probed
pk_path "$R" "$(command -v busybox)"
bb=$(readlink -f "$(command -v busybox)")
for a in $(busybox --list); do
	for d in usr/bin usr/sbin; do [ -e "$R/$d/$a" ] && continue 2; done
	ln -s "$bb" "$R/usr/bin/$a"
done

# /etc: just enough for getpwnam/getaddrinfo/getservbyname (nss "files" is inside glibc).
cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
cat >"$R/etc/hosts" <<'EOF'
127.0.0.1 localhost
192.0.2.1 rxe0-host
192.0.2.2 rxe1-host
EOF
echo "hosts: files" >"$R/etc/nsswitch.conf"
for f in /etc/services /etc/protocols; do [ -e "$f" ] && cp "$f" "$R/etc/"; done
echo rsk-vm >"$R/etc/hostname"
cp "$WORK/modules" "$R/etc/rsk/modules"
echo "$KVER" >"$R/etc/rsk/kernel"
install -m 0755 "$HERE/init.sh" "$R/init"
# The console node, so /init has stdio from its first line (devtmpfs comes later).
[ "$(id -u)" = 0 ] && mknod -m 600 "$R/dev/console" c 5 1

mkdir -p "$WORK/out"
cp "$K/boot/vmlinuz-$KVER" "$WORK/out/vmlinuz"
pk_cpio "$R" "$WORK/out/initrd.gz"
rm -rf "$OUT"
mv "$WORK/out" "$OUT"
# Prune builds unused for 3 days (another checkout may still use its own key meanwhile).
find "$CACHE" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*-*' -mtime +3 -exec rm -rf {} + || true
log "built $(du -h "$OUT/initrd.gz" | cut -f1) initramfs for $KVER"
echo "RSK_VM_KERNEL=$OUT/vmlinuz"
echo "RSK_VM_INITRD=$OUT/initrd.gz"
