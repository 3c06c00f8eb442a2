#!/usr/bin/env bash
# Sockets across fork, without and with the library on both ends:
#  1. fork_client against echo_server (poll): a child's close/close_range of inherited
#     connections leaves the parent's working (and the child's own new connection on a
#     just-closed fd number works), a child's round trip on an inherited
#     connection then the parent's, the dup family (dup, dup2, dup3, F_DUPFD_CLOEXEC,
#     dup2 onto a live connection, CLOSE_RANGE_CLOEXEC), EOF on every connection.
#  2. mt_client (8 connections) against echo_server in fork-per-connection mode: one child
#     per connection, each exits 0 and (with the library) writes its own stats line.
#  3. mt_client (16 connections) against echo_server prefork (4 children polling the one
#     inherited listener): the children together served exactly the 16 connections.
# Each phase keeps its own stats file so counts of lines and connections are exact.
. "$(dirname "$0")/lib.sh"
for p in echo_server fork_client mt_client; do
	[ -x "$RSK_PROGS/$p" ] || fail "test program $p not built in RSK_PROGS=$RSK_PROGS"
done


STATS_ALL=$RSK_STATS

# phase NAME TAG: stats of this phase's run go to their own file.
phase() {
	RSK_STATS=$RSK_TMP/stats_$1_$2.jsonl
}

# 1. fork_client against the poll server.
run_forkclient() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port
	phase forkclient "$tag"
	port=$(free_port)
	start_bg "poll_$tag" $wrap "$RSK_PROGS/echo_server" "$port" poll
	wait_listen "$port"
	$wrap "$RSK_PROGS/fork_client" "$port" >"$RSK_TMP/fc_$tag.out" 2>&1 ||
		fail "fork_client ($tag): $(cat "$RSK_TMP/fc_$tag.out")"
	grep -q "^fork_client: connections 7+1 children 2 round trips 21: ok$" "$RSK_TMP/fc_$tag.out" ||
		fail "fork_client ($tag): $(cat "$RSK_TMP/fc_$tag.out")"
	stop_bg "poll_$tag"
	grep -q "served 8 connections" "$RSK_TMP/poll_$tag.log" ||
		fail "echo_server poll ($tag): $(cat "$RSK_TMP/poll_$tag.log")"
}

# 2. one child per connection.
run_forkserver() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port
	phase forkserver "$tag"
	port=$(free_port)
	start_bg "fork_$tag" $wrap "$RSK_PROGS/echo_server" "$port" fork
	wait_listen "$port"
	$wrap "$RSK_PROGS/mt_client" "$port" conn 8 100 >"$RSK_TMP/fs_$tag.out" 2>&1 ||
		fail "mt_client vs fork server ($tag): $(cat "$RSK_TMP/fs_$tag.out")"
	grep -q "^mt_client: conn threads 8 connections 8 messages 800 bytes [0-9]*: ok$" \
		"$RSK_TMP/fs_$tag.out" || fail "mt_client ($tag): $(cat "$RSK_TMP/fs_$tag.out")"
	stop_bg "fork_$tag"
	grep -q "accepted 8 connections; children 8 ok 8$" "$RSK_TMP/fork_$tag.log" ||
		fail "echo_server fork ($tag): $(cat "$RSK_TMP/fork_$tag.log")"
	[ "$(grep -c "child served 1 connection" "$RSK_TMP/fork_$tag.log")" = 8 ] ||
		fail "echo_server fork ($tag): not 8 serving children: $(cat "$RSK_TMP/fork_$tag.log")"
}

# 3. prefork children on one listener.
run_prefork() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port total
	phase prefork "$tag"
	port=$(free_port)
	start_bg "pre_$tag" $wrap "$RSK_PROGS/echo_server" "$port" prefork 4
	wait_listen "$port"
	$wrap "$RSK_PROGS/mt_client" "$port" conn 16 100 >"$RSK_TMP/pf_$tag.out" 2>&1 ||
		fail "mt_client vs prefork server ($tag): $(cat "$RSK_TMP/pf_$tag.out")"
	grep -q "^mt_client: conn threads 16 connections 16 messages 1600 bytes [0-9]*: ok$" \
		"$RSK_TMP/pf_$tag.out" || fail "mt_client ($tag): $(cat "$RSK_TMP/pf_$tag.out")"
	stop_bg "pre_$tag"
	grep -q "children 4 ok 4$" "$RSK_TMP/pre_$tag.log" ||
		fail "echo_server prefork ($tag): $(cat "$RSK_TMP/pre_$tag.log")"
	total=$(sed -n 's/.*: served \([0-9]*\) connections.*/\1/p' "$RSK_TMP/pre_$tag.log" |
		awk '{n++; s += $1} END {print n " " s}')
	[ "$total" = "4 16" ] ||
		fail "prefork children (count, connections) = $total, expected 4 16: $(cat "$RSK_TMP/pre_$tag.log")"
}

run_forkclient "" plain
run_forkserver "" plain
run_prefork "" plain
for f in "$RSK_TMP"/stats_*_plain.jsonl; do
	[ -e "$f" ] && fail "the runs without the library wrote stats ($f)"
done

run_forkclient pre with
phase forkclient with
# The parent and both children exit normally: three lines; 7 connections are the parent's,
# 1 the first child's.
[ "$(stats_lines fork_client)" = 3 ] || fail "fork_client wrote $(stats_lines fork_client) stats lines, expected 3"
assert_carried "$RSK_EXPECT" 8 fork_client
assert_carried "$RSK_EXPECT" 8 echo_server

run_forkserver pre with
phase forkserver with
# The accepting parent and its 8 children.
[ "$(stats_lines echo_server)" = 9 ] || fail "fork server wrote $(stats_lines echo_server) stats lines, expected 9"
assert_carried "$RSK_EXPECT" 8 echo_server
assert_carried "$RSK_EXPECT" 8 mt_client

run_prefork pre with
phase prefork with
[ "$(stats_lines echo_server)" = 5 ] || fail "prefork server wrote $(stats_lines echo_server) stats lines, expected 5"
assert_carried "$RSK_EXPECT" 16 echo_server
assert_carried "$RSK_EXPECT" 16 mt_client

RSK_STATS=$STATS_ALL
echo "fork, fork server, prefork server over $RSK_EXPECT: ok"
