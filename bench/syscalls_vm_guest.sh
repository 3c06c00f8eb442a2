# shellcheck shell=bash
# Role: guest side of `BENCH_VM=1 bash bench/syscalls.sh` (run by test/vm/run.sh as /rsk/script
# inside the Soft-RoCE guest; not run on the host). sockperf pp --tcp -m 64 from 192.0.2.1 to
# 192.0.2.2 (across rxe0 -> rxe1), plain kernel TCP vs librdmasock with RDMASOCK_TRANSPORT=verbs
# and a spin long enough that waits spin (BVM_SPIN_US), interleaved BVM_REPS times. The guest
# has strace, not perf: the server is attached with strace -f -c -p once it listens, the client
# runs under strace -f -c from exec to exit. Each measurement is a short (-t BVM_SHORT_SECS) and
# a long (-t BVM_SECS) run: (long - short) counts / (long - short) round trips, so connection
# setup (rdma_cm, QP and MR creation: hundreds of calls, against a few hundred round trips a
# TCG guest manages) cancels out. One more such pair for the lib side under strace -f -y (every
# call with its fd's kind) attributes read/write/ioctl to uverbs (rxe's post_send doorbell is
# a write there), the completion channel, eventfd, epoll, sockets. Results: one "BVM-RESULT
# <json>" line per counted process, in the format bench/syscalls.sh reads; "BVM-ATTR" lines
# for the attribution; "BVM-RUN" per run; "BVM-LAT" per untraced latency run (after the
# counted ones, interleaved, BVM_LAT_SECS each); "BVM-INFO" once.
# Env (from the host): BVM_LIB, BVM_REPS, BVM_SECS, BVM_SHORT_SECS, BVM_SPIN_US. Every step
# is bounded.
set -u
# shellcheck source=test/vm/guest-lib.sh
. /rsk/guest-lib.sh
SRV=192.0.2.2
LIB=${BVM_LIB:?}
REPS=${BVM_REPS:-3}
SECS=${BVM_SECS:-6}
SHORT=${BVM_SHORT_SECS:-1}
SPIN=${BVM_SPIN_US:-200000}
PORT=11300

hexaddr() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '%02X%02X%02X%02X' "$4" "$3" "$2" "$1"
}
# listens PORT: kernel TCP listener on SRV:PORT, or an rdma_cm one.
listens() {
	local a
	a=$(hexaddr "$SRV"):$(printf '%04X' "$1")
	awk -v a="$a" '$4 == "0A" && $2 == a { f = 1 } END { exit !f }' /proc/net/tcp 2>/dev/null && return 0
	rdma res show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr ($SRV|0\.0\.0\.0):$1( |\$)"
}
side_env() { # SIDE STATS
	if [ "$1" = plain ]; then
		SE=(env -u LD_PRELOAD)
	else
		SE=(env LD_PRELOAD="$LIB" RDMASOCK_TRANSPORT=verbs RDMASOCK_TCP_FIRST=off
			RDMASOCK_SPIN_US="$SPIN" RDMASOCK_CONNECT_TIMEOUT_MS=30000 RDMASOCK_STATS="$2")
		# (rdma_cm under strace in TCG can take over the default 1 s: it would fall back to TCP)
	fi
}
# share STATS: "<verbs % of bytes_sent> <lines>" from RDMASOCK_STATS (awk: no python here).
share() {
	[ -s "$1" ] || { echo "NA 0"; return; }
	sed -n 's/.*"bytes_sent":{\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' | tr -d '"' |
		awk -F: -v n="$(grep -c . "$1")" '{ t += $2; if ($1 == "verbs") v += $2 }
			END { if (t == 0) print "NA", n; else printf "%.3f %d\n", 100 * v / t, n }'
}
# counts_c FILE: strace -c table -> "name count" lines and "TOTAL count".
counts_c() {
	awk 'NF >= 5 && $1 ~ /^[0-9.]+$/ && $4 ~ /^[0-9]+$/ {
		if ($NF == "total") print "TOTAL", $4; else print $NF, $4 }' "$1"
}
# counts_y FILE: strace -f -y trace -> "name<fd kind> count" lines (resumed halves skipped;
# fd kinds: uverbs/rdma_cm device files, eventfd, eventpoll, infinibandevent (a completion
# channel), socket, pipe); ioctl keys also carry the request strace decoded.
counts_y() {
	sed -nE 's/^([0-9]+ +)?([a-z_0-9]+)\(([0-9]+<([^>]*)>)?(, ([A-Z_0-9]+))?.*/\2 \4 \6/p' "$1" |
		sed -E 's|anon_inode:\[([^]]*)\]|\1|; s|/dev/infiniband/([a-z_]+)[0-9]*|\1|;
			s#(socket|pipe|TCP|UNIX):\[[^]]*\]#\1#' |
		awk '{ k = $1; if ($2 != "") k = k "<" $2 ">"; if ($1 == "ioctl" && $3 != "") k = k ":" $3;
			c[k]++; t++ } END { for (k in c) print k, c[k]; print "TOTAL", t }'
}
# diff_counts LONG SHORT: per-name LONG - SHORT (>= 0), i.e. the calls of the extra round trips.
diff_counts() {
	awk 'NR == FNR { s[$1] = $2; next } { d = $2 - s[$1]; if (d < 0) d = 0; print $1, d }' "$2" "$1"
}
# result END SIDE REP OPS METRIC COUNTS SHARE: one BVM-RESULT line (JSON) from "name count" lines.
result() {
	awk -v end="$1" -v side="$2" -v rep="$3" -v ops="${4:-0}" -v m="${5:-NA}" -v sh="$7" '
		$1 == "TOTAL" { total = $2; next }
		{ by = by (by == "" ? "" : ",") "\"" $1 "\":" $2 }
		END {
			printf "BVM-RESULT {\"wl\":\"vm_pp\",\"end\":\"%s\",\"side\":\"%s\",\"rep\":\"%s\",", end, side, rep
			printf "\"ops\":%d,\"metric\":\"%s\",\"total\":%s,\"by\":{%s},", ops, m, total == "" ? "null" : total, by
			printf "\"ctx\":null,\"clock_ms\":null,\"stats\":\"%s\"}\n", sh
		}' "$6"
}

# start_sr PORT: a sockperf server on PORT under ${SE[@]}, waited for (up to 20 s) until it
# listens or dies; its pid in SR_PID.
start_sr() {
	local i
	"${SE[@]}" sockperf sr --tcp -i "$SRV" -p "$1" >/tmp/srv.out 2>&1 &
	SR_PID=$!
	for ((i = 0; i < 200; i++)); do
		listens "$1" && break
		alive "$SR_PID" || break
		sleep 0.1
	done
}

# pp SIDE MODE SECS TAG: one server + client run, sockperf pp -t SECS; MODE c (strace -c) or
# y (strace -y, every call). Writes /tmp/TAG-server.cnt and /tmp/TAG-client.cnt ("name
# count" lines); sets RUN_OPS (round trips, whole run), RUN_AVG (one-way us), RUN_SHARE.
pp() {
	local side=$1 mode=$2 secs=$3 tag=$4 st=/tmp/stats-$4.jsonl spid tpid out port
	local opt=(-c)
	port=$((PORT++))
	[ "$mode" = y ] && opt=(-y -qq)
	RUN_OPS="" RUN_AVG="" RUN_SHARE="- -"
	rm -f "$st" /tmp/s.txt /tmp/c.txt
	side_env "$side" "$st"
	start_sr "$port"
	spid=$SR_PID
	if ! listens "$port"; then
		echo "BVM-FAIL pp $tag: server did not listen: $(tail -n 3 /tmp/srv.out)"
		proc_stop "$spid" KILL 2
		return 1
	fi
	strace -f "${opt[@]}" -o /tmp/s.txt -p "$spid" 2>/dev/null &
	tpid=$!
	sleep 1
	out=$(timeout -k 2 $((secs + 60)) strace -f "${opt[@]}" -o /tmp/c.txt -- "${SE[@]}" \
		sockperf pp --tcp -i "$SRV" -p "$port" -m 64 -t "$secs" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
	proc_stop "$tpid" INT 20
	proc_stop "$spid" INT 10
	RUN_OPS=$(echo "$out" | sed -n 's/.*\[Total Run\].*ReceivedMessages=\([0-9]*\).*/\1/p')
	RUN_AVG=$(echo "$out" | sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p')
	if [ -z "$RUN_OPS" ]; then
		echo "BVM-FAIL pp $tag: no result: $(echo "$out" | tail -n 3)"
		return 1
	fi
	if [ "$side" = lib ]; then
		RUN_SHARE=$(share "$st")
		if ! echo "$RUN_SHARE" | awk '{ exit !($1 != "NA" && $1 >= 99 && $2 >= 2) }'; then
			echo "BVM-FAIL pp $tag: verbs carried too little (byte share %, stats lines: $RUN_SHARE)"
			return 1
		fi
	fi
	"counts_$mode" /tmp/s.txt >"/tmp/$tag-server.cnt"
	"counts_$mode" /tmp/c.txt >"/tmp/$tag-client.cnt"
	echo "BVM-RUN pp $tag ($side, strace -$mode, -t $secs): $RUN_OPS round trips, one-way avg" \
		"${RUN_AVG:-?} us, syscalls server $(awk '$1 == "TOTAL" { print $2 }' "/tmp/$tag-server.cnt")" \
		"client $(awk '$1 == "TOTAL" { print $2 }' "/tmp/$tag-client.cnt"), verbs byte share/procs $RUN_SHARE"
}

# marginal SIDE MODE REP: a short and a long run; the difference of their counts over the
# difference of their round trips is the steady-state cost (connection setup cancels out).
marginal() {
	local side=$1 mode=$2 rep=$3 ops1 ops2 avg share e
	pp "$side" "$mode" "$SHORT" "$side-$rep-short" || return 0
	ops1=$RUN_OPS
	pp "$side" "$mode" "$SECS" "$side-$rep-long" || return 0
	ops2=$RUN_OPS avg=$RUN_AVG share=$RUN_SHARE
	if [ "$ops2" -le "$ops1" ]; then
		echo "BVM-FAIL pp $side rep $rep: the long run made no more round trips ($ops2 <= $ops1)"
		return 0
	fi
	for e in server client; do
		diff_counts "/tmp/$side-$rep-long-$e.cnt" "/tmp/$side-$rep-short-$e.cnt" >"/tmp/$side-$rep-$e.d"
		if [ "$mode" = c ]; then
			result "$e" "$side" "$rep" $((ops2 - ops1)) "$avg" "/tmp/$side-$rep-$e.d" "$share"
		else
			sort -k2 -rn "/tmp/$side-$rep-$e.d" | grep -v '^TOTAL' | head -n 14 |
				awk -v n=$((ops2 - ops1)) -v e="$e" '$2 > 0 { s = s (s == "" ? "" : ", ") $1 " " sprintf("%.2f", $2 / n) }
					END { print "BVM-ATTR " e " (" n " extra round trips): " s }'
		fi
	done
}

# lat SIDE REP: one untraced pp run (-t BVM_LAT_SECS): the latency without strace's stops,
# which cost a millisecond each under TCG and wait for a free vCPU while both ends spin.
lat() {
	local side=$1 rep=$2 spid out port avg
	port=$((PORT++))
	side_env "$side" /tmp/stats-lat.jsonl
	start_sr "$port"
	spid=$SR_PID
	out=$(timeout -k 2 $((LAT_SECS + 60)) "${SE[@]}" sockperf pp --tcp -i "$SRV" -p "$port" -m 64 \
		-t "$LAT_SECS" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
	proc_stop "$spid" INT 10
	avg=$(echo "$out" | sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p')
	echo "BVM-LAT $side rep $rep (untraced, -t $LAT_SECS): one-way avg ${avg:-?} us," \
		"$(echo "$out" | sed -n 's/.*\[Total Run\].*ReceivedMessages=\([0-9]*\).*/\1/p') round trips"
}
LAT_SECS=${BVM_LAT_SECS:-3}

echo "BVM-INFO kernel $(uname -r), $(nproc) vCPUs (qemu TCG), strace $(strace -V 2>/dev/null | head -n 1 | awk '{print $NF}'), sockperf pp -m 64 -t $SECS, $REPS reps, lib: RDMASOCK_TRANSPORT=verbs RDMASOCK_TCP_FIRST=off RDMASOCK_SPIN_US=$SPIN, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
for ((r = 1; r <= REPS; r++)); do
	marginal plain c "$r"
	marginal lib c "$r"
done
marginal lib y attr
for ((r = 1; r <= REPS; r++)); do
	lat plain "$r"
	lat lib "$r"
done
exit 0
