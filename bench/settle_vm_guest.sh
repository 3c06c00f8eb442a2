# shellcheck shell=bash
# Role: guest side of bench/settle_vm.sh (run by test/vm/run.sh as /rsk/script inside the
# Soft-RoCE guest; not run on the host). What settling a reader's credits costs per request
# over verbs when the server reads until EAGAIN: bench/etecho (epoll edge-triggered echo,
# 64-byte requests) on 192.0.2.2, its client from 192.0.2.1, both preloaded with
# RDMASOCK_TRANSPORT=verbs and the library defaults otherwise, RDMASOCK_SPIN_US from SV_SPINS
# (by default the library's, whose waits sleep in the kernel between requests in TCG, then
# 200000: waits spin and the loop thread sleeps untimed, a busy server's regime). For every
# library in SV_LIBS (space-separated paths), interleaved SV_REPS times:
#   - an untraced run (SV_N round trips after SV_WARM): etecho's own counts per request of
#     the measured part: credit-only messages and messages sent (rdmasock_get_stats), context
#     switches per thread of the server (/proc; the non-main thread that switches is the
#     event loop's);
#   - a traced run (SV_NT round trips): strace -f -y attached to the server after the
#     warm-up, every call counted per thread (main / other) and per fd kind (eventfd,
#     uverbs = rxe's doorbell, infinibandevent = a completion channel, eventpoll, socket).
# Lines: "SV-RUN <lib> <rep> untraced|traced ..." with the ETECHO lines and "SV-SYS" counts.
# Every step is bounded.
set -u
# shellcheck source=test/vm/guest-lib.sh
. /rsk/guest-lib.sh
SRV=192.0.2.2
LIBS=${SV_LIBS:?}
REPS=${SV_REPS:-2}
N=${SV_N:-5000}
NT=${SV_NT:-1000}
WARM=${SV_WARM:-200}
ETECHO=${SV_ETECHO:?}
SPINS=${SV_SPINS:-default 200000} # RDMASOCK_SPIN_US of both ends (default: the library's);
# prefixed lt-: the server's epoll is level-triggered (it still reads until EAGAIN); nl-
# (before lt-): after the accept the server waits on a new epoll set holding only the
# connection, so the set holds only the library's fds
PORT=12300

penv() { # LIB SPIN: SPIN is [nl-][lt-]default or [nl-][lt-]MICROSECONDS (see SPINS)
	local s=${2#nl-} t
	PE=(env LD_PRELOAD="$1" RDMASOCK_TRANSPORT=verbs RDMASOCK_TCP_FIRST=off
		RDMASOCK_CONNECT_TIMEOUT_MS=30000)
	[ "$s" = "$2" ] || PE+=(ETECHO_NOLISTEN=1)
	t=${s#lt-}
	[ "$t" = "$s" ] || PE+=(ETECHO_LT=1)
	[ "$t" = default ] || PE+=(RDMASOCK_SPIN_US="$t")
}
# classify TRACE MAINPID: "<main|other> <call> <fd kind> count" per key, per request later.
classify() {
	sed -nE 's/^([0-9]+) +([a-z_0-9]+)\(([0-9]+<([^>]*)>)?.*/\1 \2 \4/p' "$1" |
		sed -E 's|anon_inode:\[([^]]*)\]|\1|; s|/dev/infiniband/([a-z_]+)[0-9]*|\1|;
			s#(socket|pipe|TCP|UNIX):\[[^]]*\]#\1#' |
		awk -v m="$2" '{ t = ($1 == m) ? "main" : "other"; k = t " " $2 " " ($3 == "" ? "-" : $3); c[k]++ }
			END { for (k in c) print k, c[k] }' | sort
}
# one LIB SPIN REP MODE COUNT: a server + client pair; MODE untraced|traced.
one() {
	local lib=$1 spin=$2 rep=$3 mode=$4 cnt=$5 port spid cpid tpid i out
	port=$((PORT++))
	rm -f /tmp/etecho.go /tmp/srv.out /tmp/cli.out /tmp/trace.txt
	penv "$lib" "$spin"
	"${PE[@]}" "$ETECHO" server "$SRV" "$port" 120 >/tmp/srv.out 2>&1 &
	spid=$!
	sleep 1
	"${PE[@]}" "$ETECHO" client "$SRV" "$port" "$cnt" "$WARM" 100 >/tmp/cli.out 2>&1 &
	cpid=$!
	for ((i = 0; i < 600; i++)); do
		grep -q warm /tmp/cli.out 2>/dev/null && break
		alive "$cpid" || break
		sleep 0.1
	done
	sleep 0.4 # the server snapshots once it saw no request for 200 ms
	tpid=""
	if [ "$mode" = traced ]; then
		strace -f -y -qq -o /tmp/trace.txt -p "$spid" 2>/dev/null &
		tpid=$!
		sleep 1
	fi
	touch /tmp/etecho.go
	for ((i = 0; i < 1200; i++)); do
		alive "$cpid" || break
		sleep 0.1
	done
	proc_stop "$cpid" KILL 1
	for ((i = 0; i < 50; i++)); do
		alive "$spid" || break
		sleep 0.1
	done
	[ -n "$tpid" ] && proc_stop "$tpid" INT 20
	proc_stop "$spid" KILL 1
	out="$(cat /tmp/cli.out /tmp/srv.out)"
	echo "SV-RUN $lib spin=$spin $rep $mode: $(echo "$out" | tr '\n' ' ')"
	if [ "$mode" = traced ] && [ -s /tmp/trace.txt ]; then
		classify /tmp/trace.txt "$spid" | awk -v n="$cnt" -v l="$lib" -v s="$spin" \
			'$4 / n >= 0.01 { printf "SV-SYS %s spin=%s %s %s<%s> %.3f\n", l, s, $1, $2, $3, $4 / n }'
	fi
}

echo "SV-INFO kernel $(uname -r), $(nproc) vCPUs, libs: $LIBS, spins: $SPINS, reps $REPS, N $N, traced $NT"
for spin in $SPINS; do
	for ((r = 1; r <= REPS; r++)); do
		for lib in $LIBS; do
			one "$lib" "$spin" "$r" untraced "$N"
		done
	done
	for lib in $LIBS; do
		one "$lib" "$spin" 1 traced "$NT"
	done
done
exit 0
