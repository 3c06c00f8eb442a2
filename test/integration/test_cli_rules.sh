#!/usr/bin/env bash
# The rules file end to end, with real preloaded processes: a server rule keeps one port on
# the kernel (reason policy) while the catch-all gives shm; a bad line is reported once with
# FILE:LINE and the rest applies; the first match wins; the environment beats the file; a
# client rule decides a client's connections.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cli_lib.sh"
need python3
PROBE=${RSK_EXAMPLES:?}/transport_probe
[ -x "$PROBE" ] && [ -x "$RSK_PROGS/echo_server" ] || skip "example or test programs not built"

pa=$(cli_port) # the rules name the ports, so they are chosen first (below the
pb=$(cli_port) # ephemeral range, where no client takes them meanwhile)
for _ in 1 2 3; do [ "$pb" != "$pa" ] && break; pb=$(cli_port); done
R1=$RSK_TMP/first.conf
cat >"$R1" <<CONF
# a server rule, then a bad line, then the catch-all
echo_server server * $pa transport=kernel
echo_server clinet * * transport=shm
* * * * transport=shm
CONF
R2=$RSK_TMP/second.conf
printf '* * * * transport=shm\necho_server server * %s transport=kernel\n' "$pa" >"$R2"
R3=$RSK_TMP/client.conf
printf 'transport_probe client 127.0.0.1 %s transport=kernel\n* * * * transport=shm\n' "$pb" >"$R3"

# server NAME PORT RULES [ENV...]: echo_server preloaded with the rules (no transport env).
server() {
	local name=$1 port=$2 rules=$3
	shift 3
	start_bg "$name" env LD_PRELOAD="$RSK_PRELOAD" RDMASOCK_CONFIG="$rules" \
		RDMASOCK_STATS="$RSK_STATS" "$@" "$RSK_PROGS/echo_server" "$port"
	wait_port "$port"
}
# probe PORT RULES [ENV...]: the transport the client's connection got.
probe() {
	local port=$1 rules=$2
	shift 2
	env LD_PRELOAD="$RSK_PRELOAD" RDMASOCK_CONFIG="$rules" RDMASOCK_STATS="$RSK_STATS" "$@" \
		"$PROBE" 127.0.0.1 "$port" 2>>"$RSK_TMP/probe.err" | sed -n 's/^transport: //p'
}
expect() { # WHAT GOT WANT
	[ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

server a "$pa" "$R1"
server b "$pb" "$R1"
expect "server rule keeps port $pa on the kernel" "$(probe "$pa" "$R1")" kernel
expect "catch-all gives shm on port $pb" "$(probe "$pb" "$R1")" shm
expect "env beats the file (client)" "$(probe "$pb" "$R1" RDMASOCK_TRANSPORT=kernel)" kernel
stop_bg a
stop_bg b
[ "$(grep -c "$R1:3: invalid role \"clinet\" (client, server or \*); line ignored" \
	"$RSK_TMP/a.log")" = 1 ] || fail "the bad line was not reported once: $(cat "$RSK_TMP/a.log")"
grep -q "$R1:[124]" "$RSK_TMP/a.log" && fail "good lines were reported"
python3 - "$RSK_STATS" <<'PY' || fail "the servers' stats do not show the rules"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
srv = [o for o in lines if o["program"] == "echo_server"]
assert len(srv) == 2, srv
a = [o for o in srv if o["connections"]["shm"] == 0]
b = [o for o in srv if o["connections"]["shm"] == 1]
# a: the port rule's server, one kernel connection by policy
assert len(a) == 1 and a[0]["connections"]["kernel"] == 1 and a[0]["fallbacks"]["policy"] == 1, a
# b: one shm client, and the client the environment kept on the kernel (a plain peer to b)
assert len(b) == 1 and b[0]["connections"]["kernel"] == 1 and b[0]["fallbacks"]["no_peer"] == 1, b
assert b[0]["fallbacks"]["policy"] == 0, b
PY
: >"$RSK_STATS"

# First match wins: the catch-all comes first in R2, so the port rule never applies.
server c "$pa" "$R2"
expect "first match wins" "$(probe "$pa" "$R2")" shm
stop_bg c
# Env beats the file (server): the rule says kernel, RDMASOCK_TRANSPORT=shm wins.
server d "$pa" "$R1" RDMASOCK_TRANSPORT=shm
expect "env beats the file (server)" "$(probe "$pa" "$R1")" shm
stop_bg d
# A client rule: the probe keeps port pb on the kernel, reason policy, whatever the server.
server e "$pb" "$R3"
expect "client rule" "$(probe "$pb" "$R3")" kernel
expect "client rule leaves other ports" "$(probe "$pb" "$R1")" shm
stop_bg e
[ "$(stats_get fallbacks policy transport_probe)" = 1 ] || fail "the client rule's fallback is not policy"
echo "rules file: ok"
