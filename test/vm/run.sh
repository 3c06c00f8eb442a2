#!/usr/bin/env bash
# Role: host-side runner of the Soft-RoCE guest. Packs programs, files and a guest script into
# a cpio appended to the base initramfs (prepare.sh), boots it under qemu TCG, streams the
# serial console to stdout and a log file, and exits with the guest script's status.
#
# Usage: run.sh [--bin PROG]... [--file SRC[:DST]]... [--dir SRC:DST]... [--env NAME=VALUE]...
#               [--timeout SECS] [--boot-timeout SECS] [--mem MIB] [--log FILE] SCRIPT
#   --bin PROG      program or shared object (name looked up in PATH) plus every library ldd
#                   lists and libgcc_s, at the same paths as on the host
#   --file SRC[:DST] one file; DST defaults to SRC's absolute path on the host
#   --dir SRC:DST   a directory tree
#   --env NAME=VALUE exported to SCRIPT (and visible to /init)
#   --timeout SECS  whole run, boot included (default 300)
#   --boot-timeout  until RSK-VM-BOOTED (default 120, env RSK_VM_BOOT_TIMEOUT)
#   --mem MIB       guest memory (default 1024, env RSK_VM_MEM)
#   --log FILE      console log (default $RSK_VM_LOG_DIR/SCRIPT-DATE-PID.log)
#   SCRIPT          run with bash in the guest as /rsk/script, cwd /tmp; /rsk/guest-lib.sh is there
# Exit: SCRIPT's status; 77 if no guest can be had here (no qemu, no kernel, no boot);
#       124 if the time ran out after boot; 1 if the guest died without reporting.
# Env: RSK_VM_CACHE (see prepare.sh), RSK_VM_LOG_DIR (default $TMPDIR/rsk-vm-logs),
#      RSK_VM_KEEP=1 keeps the temp dir (initrd, staging root), RSK_VM_MEM (MiB, default 1024),
#      RSK_VM_QUIET=1 does not echo the console (the log file still has it),
#      RSK_VM_QEMU the qemu binary (default qemu-system-x86_64), RSK_VM_QEMU_EXTRA more args.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pack-lib.sh
. "$HERE/pack-lib.sh"

usage() {
	sed -n '/^# Usage:/,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
log() { echo "run.sh: $*" >&2; }

BINS=() FILES=() DIRS=() ENVS=()
TIMEOUT=300
BOOT_TIMEOUT=${RSK_VM_BOOT_TIMEOUT:-120}
MEM=${RSK_VM_MEM:-1024}
LOG=""
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BINS+=("$2"); shift 2 ;;
	--file) FILES+=("$2"); shift 2 ;;
	--dir) DIRS+=("$2"); shift 2 ;;
	--env) ENVS+=("$2"); shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--boot-timeout) BOOT_TIMEOUT=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--log) LOG=$2; shift 2 ;;
	-h | --help) usage ;;
	--) shift; break ;;
	-*) log "unknown option $1"; usage ;;
	*) break ;;
	esac
done
[ $# -eq 1 ] || usage
SCRIPT=$1
[ -f "$SCRIPT" ] || { log "no script $SCRIPT"; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/rsk-vm.XXXXXX")
QPID="" # the timeout(1) wrapping qemu
# shellcheck disable=SC2317 # reached through the traps
cleanup() {
	local pid p
	exec 2>/dev/null
	if [ -s "$T/qemu.pid" ]; then pid=$(cat "$T/qemu.pid"); else pid=""; fi
	for p in $QPID $pid; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		kill -0 $QPID $pid 2>/dev/null || break # either may be empty: unquoted
		sleep 0.1
	done
	for p in $QPID $pid; do kill -KILL "$p" 2>/dev/null; done
	[ -z "$QPID" ] || wait "$QPID" 2>/dev/null
	if [ "${RSK_VM_KEEP:-0}" = 1 ]; then
		echo "run.sh: kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

out=$(timeout 1200 bash "$HERE/prepare.sh")
rc=$?
if [ $rc != 0 ]; then
	[ $rc = 77 ] && { log "SKIP: prepare.sh: no guest here"; exit 77; }
	log "prepare.sh failed ($rc)"
	exit 1
fi
KERNEL=$(sed -n 's/^RSK_VM_KERNEL=//p' <<<"$out")
BASE=$(sed -n 's/^RSK_VM_INITRD=//p' <<<"$out")
if [ ! -s "$KERNEL" ] || [ ! -s "$BASE" ]; then
	log "prepare.sh printed no kernel/initrd"
	exit 1
fi

# The extra archive: guest script, guest library, env, and whatever the caller asked for.
R=$T/root
mkdir -p "$R/rsk"
cp "$SCRIPT" "$R/rsk/script"
cp "$HERE/guest-lib.sh" "$R/rsk/guest-lib.sh"
for e in "${ENVS[@]}"; do
	case $e in
	[A-Za-z_]*=*) ;;
	*) log "--env wants NAME=VALUE, got $e"; exit 2 ;;
	esac
	v=${e#*=}
	# Single quotes: /init reads this file with dash, which has no $'...'.
	printf "%s='%s'\n" "${e%%=*}" "${v//\'/\'\\\'\'}" >>"$R/rsk/env"
done
for b in "${BINS[@]}"; do pk_bin "$R" "$b" || exit 1; done
for f in "${FILES[@]}"; do
	src=${f%%:*}
	dst=${f#*:}
	[ "$dst" != "$f" ] || dst=$(readlink -f "$src")
	pk_file "$R" "$src" "$dst" || exit 1
done
for d in "${DIRS[@]}"; do
	[[ $d == *:* ]] || { log "--dir wants SRC:DST, got $d"; exit 2; }
	pk_dir "$R" "${d%%:*}" "${d#*:}" || exit 1
done
pk_cpio "$R" "$T/extra.gz"
# Two concatenated archives: the kernel unpacks both, the second over the first.
cat "$BASE" "$T/extra.gz" >"$T/initrd.gz"

if [ -z "$LOG" ]; then
	dir=${RSK_VM_LOG_DIR:-${TMPDIR:-/tmp}/rsk-vm-logs}
	mkdir -p "$dir"
	LOG=$dir/$(basename "$SCRIPT" .sh)-$(date +%Y%m%d-%H%M%S)-$$.log
fi
: >"$LOG"

# TCG only: the /dev/kvm on these machines is a paravirtual KVM that hangs a stock kernel.
# -nic none: the guest has no network to the outside at all.
mkfifo "$T/console"
# RSK_VM_QEMU_EXTRA: more qemu arguments, split on spaces (e.g. "-bios
# /usr/share/qemu/qboot.rom" boots ~1 s faster than SeaBIOS; not the default, not needed).
read -r -a extra <<<"${RSK_VM_QEMU_EXTRA:-}"
timeout -k 5 $((TIMEOUT + 10)) "${RSK_VM_QEMU:-qemu-system-x86_64}" \
	-accel tcg,thread=multi -cpu max -machine pc -smp 2 -m "$MEM" \
	-nographic -display none -nic none -no-reboot -monitor none -serial stdio \
	-pidfile "$T/qemu.pid" "${extra[@]}" \
	-kernel "$KERNEL" -initrd "$T/initrd.gz" \
	-append "console=ttyS0 loglevel=4 panic=-1 quiet" \
	</dev/null >"$T/console" 2>&1 &
QPID=$!
exec {con}<"$T/console"

start=$SECONDS
booted=0 rc="" why=""
boot_deadline=$((start + BOOT_TIMEOUT))
deadline=$((start + TIMEOUT))
while :; do
	if [ $booted = 0 ]; then left=$((boot_deadline - SECONDS)); else left=$((deadline - SECONDS)); fi
	[ $left -gt 0 ] || { why=timeout; break; }
	IFS= read -r -t "$left" -u "$con" line
	st=$?
	if [ $st -gt 128 ]; then why=timeout; break; fi
	[ $st = 0 ] || [ -n "$line" ] || { why=eof; break; }
	line=${line%$'\r'}
	printf '%s\n' "$line" >>"$LOG"
	[ "${RSK_VM_QUIET:-0}" = 1 ] || printf '%s\n' "$line"
	case $line in
	RSK-VM-BOOTED*)
		booted=1
		log "guest booted in $((SECONDS - start)) s"
		;;
	RSK-VM-INIT-FAILED*) why=initfail; break ;;
	RSK-VM-EXIT\ *)
		rc=${line#RSK-VM-EXIT }
		rc=${rc%% *}
		why=exited
		break
		;;
	esac
	[ $st = 0 ] || { why=eof; break; }
done

# Give the guest a moment to power off by itself (it does right after RSK-VM-EXIT).
if [ "$why" = exited ]; then
	for _ in $(seq 50); do kill -0 "$QPID" 2>/dev/null || break; sleep 0.1; done
fi
exec {con}<&-
log "log: $LOG ($((SECONDS - start)) s)"
if [ $booted = 0 ]; then
	case $why in
	initfail) log "SKIP: guest init failed: ${line#RSK-VM-INIT-FAILED }" ;;
	timeout) log "SKIP: no RSK-VM-BOOTED within $BOOT_TIMEOUT s" ;;
	*) log "SKIP: qemu ended before the guest booted" ;;
	esac
	tail -n 20 "$LOG" >&2
	exit 77
fi
case $why in
exited)
	[[ $rc =~ ^[0-9]+$ ]] || { log "unparsable exit line"; exit 1; }
	exit "$rc"
	;;
timeout)
	log "FAIL: timed out after $TIMEOUT s (guest had booted)"
	exit 124
	;;
*)
	log "FAIL: guest died without RSK-VM-EXIT"
	exit 1
	;;
esac
