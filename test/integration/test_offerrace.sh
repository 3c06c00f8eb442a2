#!/usr/bin/env bash
# The offer race (docs/SECURITY.md): an offer must prove it comes from the process that owns
# the client's TCP socket. A forger of the same user (sec_peer offer ... steal) binds the
# port a victim will connect from (both use SO_REUSEADDR, which Linux allows while neither
# listens) and sends an offer with that socket before the victim connects. The server must
# not hand the victim's connection to the forger:
#  1. a plain victim: served on the kernel, bytes exact; the forger gets no accept;
#  2. a preloaded victim: its own offer is claimed (shm), bytes exact; the forger gets none.
# With OFFERRACE_WILDCARD=1 (int_offerrace_wildcard_*, registered with -DRSK_KNOWN_BUGS=ON):
#  3. a server on 0.0.0.0, and a forger that connects its socket to another local address of
#     the same listener (127.0.0.2) after the victim connected: same-port, same-source
#     offers, told apart only by the accepted connection's local address.
. "$(dirname "$0")/lib.sh"
for p in echo_server sec_client sec_peer; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done
BYTES=300000

# forge NAME PORT BINDPORT [CONNECT_ADDR]: a forger in the background; returns once offered.
forge() {
	local name=$1
	shift
	start_bg "$name" env SEC_PEER_WAIT="${FORGE_WAIT:-2}" SEC_PEER_GO="$RSK_TMP/go" "$RSK_PROGS/sec_peer" \
		offer "$1" steal "$2" ${3:+"$3"}
	for _ in $(seq 100); do grep -q '^offered' "$RSK_TMP/$name.log" && return; sleep 0.05; done
	fail "the forger did not offer: $(cat "$RSK_TMP/$name.log")"
}
# forger_done NAME: wait for the forger's answer line; it must not be an accept.
forger_done() {
	local pid
	pid=$(eval echo "\${PID_$1}")
	wait "$pid" 2>/dev/null
	cat "$RSK_TMP/$1.log"
	grep -q '^answer: ' "$RSK_TMP/$1.log" || fail "the forger ended without an answer line"
	! grep -q '^answer: accept' "$RSK_TMP/$1.log" || fail "the server accepted the forged offer"
}
# tcp_established PORT_A PORT_B: a connection between these local ports is up.
tcp_established() {
	local a b
	a=$(printf ':%04X' "$1")
	b=$(printf ':%04X' "$2")
	awk -v a="$a" -v b="$b" '$4 == "01" && substr($2, length($2) - 4) == a &&
		substr($3, length($3) - 4) == b { f = 1 } END { exit !f }' /proc/net/tcp
}

if [ "${OFFERRACE_WILDCARD:-0}" != 1 ]; then
	PORT=$(free_port)
	start_bg server pre "$RSK_PROGS/echo_server" "$PORT"
	wait_port "$PORT"

	# 1. a plain victim
	VPORT=$(free_port)
	forge forger1 "$PORT" "$VPORT"
	out=$(timeout 30 "$RSK_PROGS/sec_client" "$PORT" "$BYTES" "$VPORT") ||
		fail "plain victim: $out (its connection went to the forger?)"
	[ "$out" = "client ok $BYTES" ] || fail "plain victim said: $out"
	forger_done forger1
	echo "1. plain victim: served, bytes exact; forged offer not accepted"

	# 2. a preloaded victim
	VPORT=$(free_port)
	forge forger2 "$PORT" "$VPORT"
	out=$(pre timeout 30 "$RSK_PROGS/sec_client" "$PORT" "$BYTES" "$VPORT") ||
		fail "preloaded victim: $out"
	[ "$out" = "client ok $BYTES" ] || fail "preloaded victim said: $out"
	forger_done forger2
	if [ "$RSK_EXPECT" = shm ]; then
		[ "$(stats_get connections shm sec_client)" = 1 ] ||
			fail "the preloaded victim was not carried by its own shm offer"
	fi
	stop_bg server
	[ "$(stats_get connections kernel echo_server)" = 1 ] &&
		[ "$(stats_get connections "$RSK_EXPECT" echo_server)" -ge 1 ] ||
		fail "server: want the plain victim on the kernel and the preloaded one on $RSK_EXPECT"
	echo "2. preloaded victim: on $RSK_EXPECT through its own offer; forged offer not accepted"
	echo "offer race: ok"
	exit 0
fi

# 3. a wildcard listener; the forger connects to 127.0.0.2 after the victim. The server is
# stopped meanwhile, so it accepts the victim's connection while the forged offer (already
# connected) waits.
PORT=$(free_port)
start_bg server pre env RSK_TEST_ADDR=0.0.0.0 "$RSK_PROGS/echo_server" "$PORT"
wait_port "$PORT"
kill -STOP "$PID_server"
VPORT=$(free_port)
FORGE_WAIT=6 forge forger3 "$PORT" "$VPORT" 127.0.0.2
start_bg victim timeout 30 "$RSK_PROGS/sec_client" "$PORT" "$BYTES" "$VPORT"
for _ in $(seq 100); do tcp_established "$VPORT" "$PORT" && break; sleep 0.05; done
touch "$RSK_TMP/go"
sleep 0.5 # the forger's connect to 127.0.0.2 completes in the kernel's backlog
kill -CONT "$PID_server"
wait "$PID_victim" || fail "wildcard victim: $(cat "$RSK_TMP/victim.log") (its connection went to the forger?)"
grep -qx "client ok $BYTES" "$RSK_TMP/victim.log" || fail "wildcard victim said: $(cat "$RSK_TMP/victim.log")"
wait "$PID_forger3" 2>/dev/null
cat "$RSK_TMP/forger3.log"
stop_bg server
# The forger's own connection (to 127.0.0.2) is its own to accelerate; the victim's is not.
[ "$(stats_get connections kernel echo_server)" = 1 ] ||
	fail "the plain victim's connection was not served on the kernel"
echo "3. wildcard listener: the victim's connection was not handed to the forger"
echo "offer race (wildcard): ok"
