#!/usr/bin/env bash
# Same-host peers of different users never share memory (docs/SECURITY.md): a preloaded
# server run by root and clients run as nobody (setpriv).
#  1. control: a root client gets shm (so the cases below are decisions, not accidents);
#  2. a preloaded nobody client stays on the kernel (reason other_user), bytes exact, and the
#     server counts it on the kernel too;
#  3. a nobody process that offers anyway (sec_peer: a library instance without the client's
#     check) gets no answer from the server, and its connection stays on the kernel;
#  4. a nobody process that took the rendezvous name of a root server's port first receives
#     no offer: the root client stays on the kernel (other_user), bytes exact, with the real
#     server.
# Needs root (to start processes as nobody); registered for shm and auto.
. "$(dirname "$0")/lib.sh"
for p in echo_server sec_client sec_peer; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done
[ "$(id -u)" = 0 ] || skip "needs root to run clients as another user (nobody)"
need setpriv
BYTES=300000

# What nobody runs must be readable by nobody: the library and programs are copied into a
# directory of their own, with a stats file anyone may append to.
chmod 711 "$RSK_TMP"
PUB=$RSK_TMP/pub
mkdir -m 755 "$PUB"
cp "$RSK_LIB" "$PUB/librdmasock.so"
cp "$RSK_PROGS/sec_client" "$RSK_PROGS/sec_peer" "$PUB/"
NSTATS=$PUB/nobody.jsonl
: >"$NSTATS"
chmod 666 "$NSTATS"

as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}
# pre_nobody CMD...: CMD as nobody, preloaded, its stats in $NSTATS.
pre_nobody() {
	as_nobody env LD_PRELOAD="${RSK_PRELOAD_FIRST:+$RSK_PRELOAD_FIRST }$PUB/librdmasock.so${RSK_PRELOAD_AFTER:+ $RSK_PRELOAD_AFTER}" \
		RDMASOCK_TRANSPORT="$RSK_TEST_TRANSPORT" \
		RDMASOCK_STATS="$NSTATS" "$@"
}
# nstat FIELD KEY [PROGRAM]: like stats_get, over the nobody stats file.
nstat() {
	RSK_STATS=$NSTATS stats_get "$@"
}
fallback() { # fallback FILE REASON: sum of fallbacks[REASON] in FILE
	RSK_STATS=$1 stats_get fallbacks "$2"
}

# ---- 1-3: one root server ----
PORT=$(free_port)
start_bg server pre "$RSK_PROGS/echo_server" "$PORT"
wait_port "$PORT"

# 1. control: same user, same host
out=$(pre timeout 30 "$RSK_PROGS/sec_client" "$PORT" "$BYTES") || fail "root client: $out"
[ "$out" = "client ok $BYTES" ] || fail "root client said: $out"
[ "$(stats_get connections shm sec_client)" = 1 ] ||
	fail "control: the root client was not carried by shm"
echo "1. root client -> root server: shm"

# 2. a preloaded client of another user
out=$(pre_nobody timeout 30 "$PUB/sec_client" "$PORT" "$BYTES") || fail "nobody client: $out"
[ "$out" = "client ok $BYTES" ] || fail "nobody client said: $out"
[ "$(nstat connections kernel sec_client)" = 1 ] && [ "$(nstat connections shm sec_client)" = 0 ] ||
	fail "the nobody client was not kept on the kernel: $(cat "$NSTATS")"
[ "$(fallback "$NSTATS" other_user)" = 1 ] ||
	fail "the nobody client's fallback reason is not other_user: $(cat "$NSTATS")"
[ "$(nstat bytes_sent kernel sec_client)" = "$BYTES" ] ||
	fail "the nobody client's bytes were not counted on the kernel: $(cat "$NSTATS")"
echo "2. nobody client -> root server: kernel (other_user), $BYTES bytes exact"

# 3. another user's process that offers regardless
out=$(as_nobody env SEC_PEER_WAIT=3 timeout 30 "$PUB/sec_peer" offer "$PORT" own) ||
	fail "sec_peer offer own (nobody): $out"
echo "$out"
# (a server that watches its rendezvous, as TCP first makes it, may refuse the connection
# before the offer is even sent: as good)
grep -qxE "offered|refused" <<<"$out" || fail "the forged offer was not attempted: $out"
grep -q "^answer: accept" <<<"$out" && fail "the root server accepted an offer from nobody"

stop_bg server
[ "$(stats_get connections shm echo_server)" = 1 ] && [ "$(stats_get connections kernel echo_server)" = 2 ] ||
	fail "the server's connections: want shm 1 (root) and kernel 2 (nobody's): $(cat "$RSK_STATS")"
echo "3. nobody's own offer: not accepted, its connection on the kernel"

# ---- 4. a squatter of another user on the rendezvous name ----
PORT=$(free_port)
start_bg squat setpriv --reuid=65534 --regid=65534 --clear-groups "$PUB/sec_peer" squat "$PORT" 30
for _ in $(seq 100); do grep -q squatting "$RSK_TMP/squat.log" && break; sleep 0.05; done
grep -q squatting "$RSK_TMP/squat.log" || fail "the squatter did not start: $(cat "$RSK_TMP/squat.log")"
start_bg server2 pre "$RSK_PROGS/echo_server" "$PORT"
wait_port "$PORT"
: >"$RSK_STATS"
out=$(pre timeout 30 "$RSK_PROGS/sec_client" "$PORT" "$BYTES") || fail "root client: $out"
[ "$out" = "client ok $BYTES" ] || fail "root client (squatted port) said: $out"
[ "$(stats_get connections kernel sec_client)" = 1 ] && [ "$(fallback "$RSK_STATS" other_user)" = 1 ] ||
	fail "the root client did not stay on the kernel (other_user) before a squatter: $(cat "$RSK_STATS")"
stop_bg squat
cat "$RSK_TMP/squat.log"
grep -q "^squat: offer" "$RSK_TMP/squat.log" &&
	fail "the squatter received an offer (a client's memory and TCP socket)"
stop_bg server2
echo "4. nobody squatting the rendezvous: no offer reached it, root client on the kernel"
echo "cross-uid: ok"
