# Shared harness of the integration tests (sourced, bash). Starts real programs on free
# loopback ports, with and without LD_PRELOAD=librdmasock.so, stops them by PID, and reads
# the RDMASOCK_STATS lines to assert which transport carried the bytes.
#
# Environment (set by ctest, see test/integration/CMakeLists.txt):
#   RSK_LIB            path to librdmasock.so
#   RSK_PROGS          directory of the test programs built from test/progs
#   RSK_TEST_TRANSPORT transport the preloaded runs use: kernel (default), shm, auto
# and, set by scripts/sanitize.sh for a sanitized build of the library:
#   RSK_PRELOAD_FIRST  what LD_PRELOAD lists before the library: ASan's runtime, which must
#                      come first in a program that was not built with it
#   RSK_PRELOAD_AFTER  what LD_PRELOAD lists after it: TSan's runtime, whose interceptors of
#                      blocking calls (poll, read, accept...) ignore every interceptor called
#                      inside them; first, it would not see the locks the library takes in its
#                      own poll() and report races that are none
#   RSK_LIB_PLAIN      an unsanitized build of the library, for the programs that cannot
#                      take the runtime (pre_plain)
set -u

RSK_LIB=${RSK_LIB:?RSK_LIB must name librdmasock.so}
RSK_PRELOAD="${RSK_PRELOAD_FIRST:+$RSK_PRELOAD_FIRST }$RSK_LIB${RSK_PRELOAD_AFTER:+ $RSK_PRELOAD_AFTER}"
RSK_PROGS=${RSK_PROGS:-}
RSK_TEST_TRANSPORT=${RSK_TEST_TRANSPORT:-kernel}
RSK_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rsk-test.XXXXXX")
RSK_STATS=$RSK_TMP/stats.jsonl

# python3 on PATH may be a version manager's shim: pyenv's is a bash script that runs some 40
# processes (0.4 s here) before the interpreter, and a test calls python3 tens of times
# (helpers, stats, preloaded peers). The interpreter's own path, asked once per machine and
# kept as a link, goes first on PATH instead. (Not kept across users or a missing target.)
rsk_py_direct() {
	local link=${TMPDIR:-/tmp}/rsk-python3.$(id -u) py
	if ! [ -x "$link" ]; then
		py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$py" ] || return 0
		ln -sfn "$py" "$link.$$" && mv -fT "$link.$$" "$link" || return 0
	fi
	mkdir -p "$RSK_TMP/bin" && ln -s "$link" "$RSK_TMP/bin/python3" && PATH=$RSK_TMP/bin:$PATH
}
rsk_py_direct
# Live stats segments (rdmasock stat) of the programs we start stay in our scratch directory:
# one a test SIGKILLs would otherwise stay in /dev/shm until someone runs rdmasock stat.
export RDMASOCK_STAT_DIR=${RDMASOCK_STAT_DIR:-$RSK_TMP}
RSK_PIDS=()

# rsk_stats_sum FIELD [FILE...]: the stats lines' FIELD (a number) summed over FILEs, by
# default every stats file of the test (a line cut short by a killed process is passed over;
# one without FIELD fails).
rsk_stats_sum() {
	python3 - "$RSK_TMP" "$@" <<'PY'
import glob, json, os, sys
field, n = sys.argv[2], 0
for path in sys.argv[3:] or glob.glob(os.path.join(sys.argv[1], "stats*")):
    for line in open(path).read().splitlines():
        try:
            n += json.loads(line)[field]  # (a KeyError: a line without it fails)
        except ValueError:
            continue
print(n)
PY
}

# rsk_faces_seen [FILE...]: listener faces (stats listener_faces). The face variant
# (RDMASOCK_BEARER=face from ctest; unix makes faces too): a test that passed must show that
# some process it ran listened through one.
rsk_faces_seen() {
	rsk_stats_sum listener_faces "$@"
}

# rsk_bearer_on: the bearer variant (RDMASOCK_BEARER=unix from ctest): connections between
# preloaded processes may be unix connections the transports' counters do not see.
rsk_bearer_on() {
	[ "${RDMASOCK_BEARER:-none}" = unix ]
}

# rsk_bearer_seen [FILE...]: bearer connections (stats bearer_connections).
rsk_bearer_seen() {
	rsk_stats_sum bearer_connections "$@"
}

rsk_cleanup() {
	local pid st=$? faceless=0
	for pid in "${RSK_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${RSK_PIDS[@]}"; do
		# bounded wait, then force
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	done
	# ($st: the script's status, which stands otherwise; a trap of its own passes it on,
	# test_postgres.sh)
	if [ "$st" = 0 ] && [ "${RDMASOCK_BEARER:-none}" != none ] &&
		[ "$RSK_TEST_TRANSPORT" != kernel ] && [ "$(rsk_faces_seen)" -lt 1 ]; then
		echo "FAIL: RDMASOCK_BEARER=$RDMASOCK_BEARER, and no process listened through a face" >&2
		faceless=1
	fi
	if [ "$st" = 0 ] && [ "$faceless" = 0 ] && rsk_bearer_on &&
		[ "$RSK_TEST_TRANSPORT" != kernel ] && [ "$(rsk_bearer_seen)" -lt 1 ]; then
		echo "FAIL: RDMASOCK_BEARER=unix, and no connection took the bearer" >&2
		faceless=1
	fi
	if [ "${RSK_KEEP_TMP:-0}" = 1 ]; then
		echo "kept $RSK_TMP" >&2
	else
		rm -rf "$RSK_TMP"
	fi
	[ "$faceless" = 0 ] || exit 1
}
trap rsk_cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	if [ -s "$RSK_STATS" ]; then
		echo "--- stats:" >&2
		cat "$RSK_STATS" >&2
	fi
	exit 1
}

skip() {
	echo "SKIP: $*" >&2
	exit 77
}

need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (scripts/install-deps.sh installs it)"
	done
}

# use_python: PY names Debian's interpreter (a pyenv shim is a script, whose preloaded shell
# would be counted too), or whatever python3 is on PATH.
use_python() {
	if [ -x /usr/bin/python3 ]; then
		PY=/usr/bin/python3
	else
		need python3
		PY=$(command -v python3)
	fi
}

# A TCP port nobody uses right now, below the kernel's ephemeral range: a port the kernel
# picks from that range may be handed to some concurrent job's outgoing connect() before our
# server binds it ("bind: Address already in use", then "nothing listens on port" -- seen
# with other test jobs on the machine). Falls back to the kernel's pick.
free_port() {
	python3 - <<'PY'
import random, socket
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    lo = 0
def free(port):
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(fam)
        except OSError:
            continue
        try:
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    return True
for _ in range(200 if lo > 11000 else 0):
    p = random.randint(10000, lo - 1)
    if free(p):
        print(p)
        break
else:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()
PY
}

# wait_port PORT [SECONDS]: until a socket listens on TCP PORT (any address). It looks in
# /proc/net/tcp{,6} instead of connecting: a probe connection from this (not preloaded)
# shell would be a kernel connection in a preloaded server's stats.
wait_port() {
	local port=$1 secs=${2:-10} hex
	hex=$(printf ':%04X' "$port")
	for _ in $(seq $((secs * 20))); do
		awk -v p="$hex" 'substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 }
			END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.05
	done
	fail "nothing listens on port $port after ${secs}s"
}

# The name several tests use for wait_port.
wait_listen() {
	wait_port "$@"
}

# The variants: "shm" sets every connection up at connect (RDMASOCK_TCP_FIRST=off); "auto"
# runs the defaults (TCP first where the policy says so, docs/design.md); test_move.sh runs
# connections through the move itself. RSK_TCP_FIRST/RSK_UPGRADE_MS may be set by a test.
if [ "$RSK_TEST_TRANSPORT" = shm ]; then
	RSK_TCP_FIRST=${RSK_TCP_FIRST:-off}
fi
RSK_TCP_FIRST=${RSK_TCP_FIRST:-auto}
RSK_UPGRADE_MS=${RSK_UPGRADE_MS:-5}

# Run a command with the library preloaded, stats appended to $RSK_STATS.
pre() {
	LD_PRELOAD=$RSK_PRELOAD RDMASOCK_TRANSPORT=$RSK_TEST_TRANSPORT RDMASOCK_STATS=$RSK_STATS \
		RDMASOCK_TCP_FIRST=$RSK_TCP_FIRST RDMASOCK_UPGRADE_MS=$RSK_UPGRADE_MS "$@"
}

# pre_plain CMD...: like pre, for a program that cannot take a sanitizer's runtime: when the
# suite runs a sanitized library, CMD gets the unsanitized RSK_LIB_PLAIN instead (its peers
# still run the sanitized one). curl is one: its p11-kit constructor calls newlocale(), which
# holds glibc's locale lock for writing while its malloc() starts a preloaded ASan runtime,
# whose dlerror() takes and releases that lock again; setlocale() in curl's main() then
# waits forever (LD_PRELOAD of the bare runtime does it, without librdmasock).
pre_plain() {
	if [ -z "${RSK_PRELOAD_FIRST:-}${RSK_PRELOAD_AFTER:-}" ]; then
		pre "$@"
		return
	fi
	LD_PRELOAD=${RSK_LIB_PLAIN:?RSK_LIB_PLAIN must name an unsanitized librdmasock.so} \
		RDMASOCK_TRANSPORT=$RSK_TEST_TRANSPORT RDMASOCK_STATS=$RSK_STATS \
		RDMASOCK_TCP_FIRST=$RSK_TCP_FIRST RDMASOCK_UPGRADE_MS=$RSK_UPGRADE_MS "$@"
}

# start_bg NAME [pre] CMD...: run CMD in the background (output in $RSK_TMP/NAME.log),
# preloaded when the word "pre" comes first; its PID (the program's own, not a shell's) is
# remembered as $PID_NAME and the program is stopped at exit.
start_bg() {
	local name=$1
	shift
	(
		if [ "${1:-}" = pre ]; then
			shift
			export LD_PRELOAD=$RSK_PRELOAD RDMASOCK_TRANSPORT=$RSK_TEST_TRANSPORT \
				RDMASOCK_STATS=$RSK_STATS RDMASOCK_TCP_FIRST=$RSK_TCP_FIRST \
				RDMASOCK_UPGRADE_MS=$RSK_UPGRADE_MS
		fi
		exec "$@"
	) >"$RSK_TMP/$name.log" 2>&1 &
	RSK_PIDS+=($!)
	eval "PID_$name=$!"
}

# wait_bg NAME [SECONDS]: wait for a background program that ends by itself (a one-connection
# server) to exit, so its stats line is written; then stop it as stop_bg does.
wait_bg() {
	local name=$1 secs=${2:-10} pid
	pid=$(eval echo "\${PID_$name}")
	for _ in $(seq $((secs * 20))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
	stop_bg "$name"
}

# stop_bg NAME [SIGNAL]: stop a background program and wait for it (it writes its stats).
stop_bg() {
	local name=$1 sig=${2:-TERM} pid
	pid=$(eval echo "\${PID_$name}")
	kill -"$sig" "$pid" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; fail "$name did not stop on SIG$sig"; }
	wait "$pid" 2>/dev/null || true
}

# stats_get FIELD TRANSPORT [PROGRAM]: sum of FIELD[TRANSPORT] over the stats lines (of PROGRAM).
stats_get() {
	python3 - "$RSK_STATS" "$1" "$2" "${3:-}" <<'PY'
import json, sys
path, field, key, prog = sys.argv[1:5]
total = 0
try:
    lines = open(path).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    o = json.loads(line)
    if prog and o["program"] != prog:
        continue
    total += o[field][key]
print(total)
PY
}

# stats_lines [PROGRAM]: how many processes (of PROGRAM) wrote a stats line.
stats_lines() {
	python3 - "$RSK_STATS" "${1:-}" <<'PY'
import json, sys
n = 0
try:
    for line in open(sys.argv[1]).read().splitlines():
        if not sys.argv[2] or json.loads(line)["program"] == sys.argv[2]:
            n += 1
except FileNotFoundError:
    pass
print(n)
PY
}

# assert_carried TRANSPORT MIN_CONNS [PROGRAM]: TRANSPORT accounted at least MIN_CONNS
# connections and carried at least 99% of all bytes (sent + received, every transport; 95%
# in "auto", below); no other transport counted a connection. With the bearer on
# (RDMASOCK_BEARER=unix, the bearer variant) a connection on the bearer counts as one of
# TRANSPORT's, and the bytes are not weighed once any took it: the kernel's unix sockets
# carry those, which no counter sees. With the default bearer (auto) the ones it took stand
# in for connections TCP first would have kept on TCP.
assert_carried() {
	python3 - "$RSK_STATS" "$1" "$2" "${3:-}" "$RSK_TEST_TRANSPORT" "${RDMASOCK_BEARER:-auto}" \
		<<'PY' || fail "stats do not show $1 carrying the traffic"
import json, sys
path, want, min_conns, prog = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
variant, bearer_mode = sys.argv[5], sys.argv[6]
conns, bytes_, tcp_first = {}, {}, 0
lines = [json.loads(l) for l in open(path).read().splitlines()]
lines = [o for o in lines if not prog or o["program"] == prog]
if not lines:
    sys.exit("no stats line%s" % (" from " + prog if prog else ""))
for o in lines:
    for t, n in o["connections"].items():
        conns[t] = conns.get(t, 0) + n
    for f in ("bytes_sent", "bytes_received"):
        for t, n in o[f].items():
            bytes_[t] = bytes_.get(t, 0) + n
    # A server cannot tell a client that stays on TCP from one without the library: it
    # counts such a connection as no_peer (the client's own line says tcp_first).
    tcp_first += o["fallbacks"].get("tcp_first", 0) + o["fallbacks"].get("no_peer", 0)
    tcp_first += o["fallbacks"].get("setup_limit", 0) # started on TCP in a burst: the same
total = sum(bytes_.values())
bearer_all = sum(o.get("bearer_connections", 0) for o in lines)
bearer = bearer_all if bearer_mode == "unix" else 0
# The default bearer (auto) takes, like TCP first, connections to a destination whose
# connections end short: kept off the transport by the policy, and counted by neither.
auto_bearer = bearer_all if bearer_mode == "auto" else 0
print("connections %s, bytes %s, tcp_first %d, bearer %d" % (conns, bytes_, tcp_first, bearer_all))
if bearer:
    conns[want] = conns.get(want, 0) + bearer
if auto_bearer and (variant != "auto" or want == "kernel"):
    sys.exit("%d bearer connections where the policy sets every connection up" % auto_bearer)
if auto_bearer:
    if conns.get(want, 0) < 1:
        sys.exit("no %s connection at all" % want)
    min_conns -= auto_bearer
# The defaults ("auto") keep a connection on TCP when the destination's history says its
# connections are short (docs/design.md, TCP first): such a connection is the kernel's and
# counted as a tcp_first fallback. Every kernel connection must be one of those, and at least
# one connection (the first to a destination: no history yet) must be accelerated.
if variant == "auto" and want != "kernel" and conns.get("kernel", 0):
    k = conns.pop("kernel")
    if k > tcp_first:
        sys.exit("%d kernel connections, only %d of them kept on TCP by the policy" % (k, tcp_first))
    if conns.get(want, 0) < 1:
        sys.exit("no %s connection at all" % want)
    min_conns -= k
    bytes_[want] = bytes_.get(want, 0) + bytes_.pop("kernel", 0)
if conns.get(want, 0) < min_conns:
    sys.exit("%s connections %d < %d" % (want, conns.get(want, 0), min_conns))
others = {t: n for t, n in conns.items() if t != want and n}
if others:
    sys.exit("connections on other transports: %s" % others)
# In "auto", a burst of non-blocking connects to a destination without a verdict sets up only
# 8 at connect (setup_limit, docs/design.md); the rest start on TCP and move after their first
# calls, which the kernel carried: 1.9% of redis-benchmark -c 50's bytes (every connection
# moved, so none is a kernel connection to fold in above).
share = 0.95 if variant == "auto" and want != "kernel" else 0.99
if not bearer and (total == 0 or bytes_.get(want, 0) < share * total):
    sys.exit("%s carried %d of %d bytes" % (want, bytes_.get(want, 0), total))
PY
}

# The transport that must carry the bytes of a preloaded pair on this host.
case "$RSK_TEST_TRANSPORT" in
kernel) RSK_EXPECT=kernel ;;
shm | auto) RSK_EXPECT=shm ;;
verbs) RSK_EXPECT=verbs ;;
*) fail "unknown RSK_TEST_TRANSPORT=$RSK_TEST_TRANSPORT" ;;
esac
