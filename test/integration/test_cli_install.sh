#!/usr/bin/env bash
# The installed prefix as a new user gets it: cmake --install into a temporary prefix, then
# from there only: rdmasock --help, run (finds the installed library by itself), doctor,
# the man pages render, pkg-config finds rdmasock.pc, and a tiny program compiles against
# the installed header and library and calls the explicit API.
. "$(dirname "$0")/lib.sh"
need cmake cc pkg-config man
RSK_BUILD=${RSK_BUILD:?RSK_BUILD must name the build directory}
P=$RSK_TMP/prefix
cmake --install "$RSK_BUILD" --prefix "$P" >"$RSK_TMP/install.log" 2>&1 ||
	fail "cmake --install failed: $(tail -5 "$RSK_TMP/install.log")"
for f in bin/rdmasock lib/librdmasock.so include/rdmasock.h lib/pkgconfig/rdmasock.pc \
	share/man/man1/rdmasock.1 share/man/man5/rdmasock.conf.5 share/man/man7/librdmasock.7; do
	[ -e "$P/$f" ] || fail "$f is not installed"
done
unset RDMASOCK_LIBRARY
cd "$RSK_TMP" || fail "no scratch directory"
R=$P/bin/rdmasock

"$R" --help >out.txt || fail "--help exited $?"
grep -q "^Usage: rdmasock COMMAND" out.txt || fail "--help: $(cat out.txt)"
"$R" --version | grep -qx "rdmasock 0.1.0" || fail "--version"

# run finds the library of its own prefix, and the program really has it loaded.
out=$(LD_PRELOAD= "$R" run -t shm -- sh -c 'echo "$LD_PRELOAD"')
[ "$out" = "$P/lib/librdmasock.so" ] || fail "installed run preloads '$out'"
"$R" run -s "$RSK_STATS" -- python3 -c 'import socket; socket.socket().close()' ||
	fail "a program under the installed run failed"
[ "$(stats_lines python3)" = 1 ] || fail "the installed library wrote no stats line"

"$R" doctor >doctor.txt
rc=$?
[ "$rc" = 0 ] || [ "$rc" = 3 ] || fail "installed doctor exited $rc: $(cat doctor.txt)"
grep -q "^OK   library: $P/lib/librdmasock.so$" doctor.txt || fail "doctor: $(cat doctor.txt)"

for m in man1/rdmasock.1 man5/rdmasock.conf.5 man7/librdmasock.7; do
	w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$P/share/man/$m" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "$m has roff warnings: $w"
done
MANPATH=$P/share/man man -w rdmasock.conf | grep -q "$P" || fail "man -w does not find it"
# librdmasock(7) names every variable of rdmasock.h, every stats key and fallback reason.
MANWIDTH=200 man -l "$P/share/man/man7/librdmasock.7" 2>/dev/null >man7.txt
RSK_SRC=${RSK_SRC:?RSK_SRC must name the source tree}
for v in $(sed -n 's/^#define RDMASOCK_ENV_[A-Z_]* "\(RDMASOCK_[A-Z_]*\)".*/\1/p' "$P/include/rdmasock.h") \
	$(sed -n 's/^\t\[RDMASOCK_FB_[A-Z_]*\] = "\([a-z_]*\)",$/\1/p' "$RSK_SRC/core/base/stats.c") \
	connections bytes_sent bytes_received messages_sent messages_received credit_stalls \
	fallbacks writes_coalesced credit_messages listener_faces bearer_connections; do
	grep -qw -- "$v" man7.txt || fail "librdmasock(7) does not document $v"
done
[ "$(grep -c "^#define RDMASOCK_ENV_" "$P/include/rdmasock.h")" -ge 14 ] || fail "header parse"
grep -qw tcp_first man7.txt || fail "fallback names were not parsed from stats.c"

flags=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs rdmasock) ||
	fail "pkg-config does not find rdmasock"
grep -q -- "-lrdmasock" <<<"$flags" || fail "pkg-config flags: $flags"
cat >tiny.c <<'C'
#include <rdmasock.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct rdmasock_stats s;
	unsigned char old[RDMASOCK_STATS_MIN_SIZE + 8];
	char json[4096];

	if (rdmasock_get_stats(&s, sizeof(s)) != 0 || rdmasock_stats_json(json, sizeof(json)) <= 0)
		return 1;
	/* a program built against the oldest header: its size is accepted, nothing past it written */
	memset(old, 0xa5, sizeof(old));
	if (rdmasock_get_stats((struct rdmasock_stats *)(void *)old, RDMASOCK_STATS_MIN_SIZE) != 0 ||
	    old[RDMASOCK_STATS_MIN_SIZE] != 0xa5)
		return 2;
	printf("%s %s\n", rdmasock_version(), strstr(json, "\"fallbacks\"") ? "json" : "?");
	return 0;
}
C
# shellcheck disable=SC2086 # flags are words
cc -Wall -Werror -o tiny tiny.c $flags || fail "tiny program does not build against the prefix"
out=$(LD_LIBRARY_PATH=$P/lib ./tiny) || fail "tiny program failed"
[ "$out" = "0.1.0 json" ] || fail "tiny program printed '$out'"
echo "installed prefix: ok"
