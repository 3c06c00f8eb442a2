# Role: host-side helpers (sourced by prepare.sh and run.sh) that copy host files into a
# staging root for a guest initramfs and pack it as a gzip'd newc cpio.
#
# The guest mirrors the host's layout exactly: every symlink met while resolving a path on the
# host (/lib -> usr/lib, /lib64/ld-linux... -> /lib/x86_64-linux-gnu/...) is recreated as the
# same symlink, and real files and directories are only ever written at their canonical
# (readlink -f) location. Why: an appended cpio that contains a real "lib" directory replaces
# the base image's "lib -> usr/lib" symlink and the guest loses its libc. Writing only at
# canonical paths also means we never follow a (possibly absolute) symlink inside the staging
# root back onto the host.

# pk_links ROOT PATH: recreate in ROOT every symlink the host meets while resolving PATH
# (components and link targets, recursively). PATH need not exist past its existing prefix.
pk_links() {
	local root=$1 p=$2 cur="" comp tgt lpath parent
	local -a comps
	IFS=/ read -r -a comps <<<"${p#/}"
	for comp in "${comps[@]}"; do
		[ -n "$comp" ] || continue
		cur=$cur/$comp
		if [ -L "$cur" ]; then
			parent=$(readlink -f "$(dirname "$cur")")
			lpath=${parent%/}/$comp # where the link itself really lives
			tgt=$(readlink "$cur")
			if [ ! -L "$root$lpath" ]; then
				mkdir -p "$root$parent"
				rm -rf "$root$lpath" # a real entry here would shadow the link
				ln -s "$tgt" "$root$lpath"
			fi
			case $tgt in
			/*) ;;
			*) tgt=${parent%/}/$tgt ;;
			esac
			pk_links "$root" "$tgt"
		fi
		cur=$(readlink -m "$cur")
	done
}

# pk_path ROOT PATH: copy host PATH (a file, or a symlink chain ending in a file) into ROOT
# at the same path, symlinks included. Returns non-zero if PATH does not exist.
pk_path() {
	local root=$1 p=$2 real
	real=$(readlink -e "$p") || { echo "pack: $p does not exist" >&2; return 1; }
	pk_links "$root" "$p"
	if [ ! -e "$root$real" ]; then
		mkdir -p "$root$(dirname "$real")"
		cp -p "$real" "$root$real"
	fi
}

# pk_file ROOT SRC DST: copy host file SRC (links followed) to DST inside the guest.
pk_file() {
	local root=$1 src=$2 dst=$3 dir
	[ -f "$src" ] || { echo "pack: $src is not a file" >&2; return 1; }
	pk_links "$root" "$(dirname "$dst")"
	dir=$(readlink -m "$(dirname "$dst")")
	mkdir -p "$root$dir"
	cp -pL --remove-destination "$src" "$root${dir%/}/$(basename "$dst")"
}

# pk_dir ROOT SRC DST: copy the tree SRC to DST inside the guest (symlinks inside kept).
pk_dir() {
	local root=$1 src=$2 dst=$3 dir
	[ -d "$src" ] || { echo "pack: $src is not a directory" >&2; return 1; }
	pk_links "$root" "$dst"
	dir=$(readlink -m "$dst")
	mkdir -p "$root$dir"
	cp -a "$src/." "$root$dir/"
}

# pk_libgcc: where libgcc_s.so.1 lives. glibc dlopens it for pthread_exit/cancel and ldd does
# not list it, so every threaded program needs it copied explicitly.
pk_libgcc() {
	# awk reads to the end: an early exit would SIGPIPE ldconfig (pipefail callers).
	ldconfig -p 2>/dev/null | awk '/libgcc_s\.so\.1 .*x86-64/ && !p { p = $NF } END { print p }'
}

# pk_bin ROOT PROG: copy a program or shared object (a name is looked up in PATH) with every
# library ldd lists, plus libgcc_s. Fails if ldd reports a missing library.
pk_bin() {
	local root=$1 prog=$2 lib out
	case $prog in
	*/*) ;;
	*) prog=$(command -v "$prog") || { echo "pack: $2 not found in PATH" >&2; return 1; } ;;
	esac
	pk_path "$root" "$prog" || return 1
	if out=$(ldd "$prog" 2>&1); then
		if grep -q 'not found' <<<"$out"; then
			echo "pack: $prog: $(grep 'not found' <<<"$out")" >&2
			return 1
		fi
		for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"); do
			pk_path "$root" "$lib" || return 1
		done
	fi # else: static, not an ELF, or a script: nothing to add
	lib=$(pk_libgcc)
	[ -z "$lib" ] || pk_path "$root" "$lib"
}

# pk_cpio ROOT OUT: pack ROOT as a gzip'd newc cpio owned by root (the kernel unpacks it).
pk_cpio() {
	local root=$1 out=$2
	(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
		gzip -1 >"$out"
}
