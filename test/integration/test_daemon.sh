#!/usr/bin/env bash
# nginx as it runs by default (daemon on): it listens, then forks the master and the process
# that listened exits. The rendezvous lives on in the master and its workers, and so must its
# bell (docs/design.md, "The bell"): before, the exiting parent took the bell file with it,
# every client started on TCP and, with the rendezvous shared, no move ever came (ab -k: all
# on TCP). Now curls over keep-alive connections are carried by shm, and the bell file goes
# when the last nginx process does.
. "$(dirname "$0")/lib.sh"
need nginx curl python3
[ "$RSK_TEST_TRANSPORT" = kernel ] && skip "no rendezvous on the kernel transport"

port=$(free_port)
d=$RSK_TMP/ngx
. "$(dirname "$0")/nginx_ok.sh"
nginx_ok_conf "$d" "$port" on
bell=/dev/shm/rdmasock-rdv.$(stat -L -c %i /proc/self/ns/net).127.0.0.1.$port

pre nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf" || fail "nginx did not start"
for _ in $(seq 100); do [ -s "$d/nginx.pid" ] && break; sleep 0.05; done
master=$(cat "$d/nginx.pid") || fail "no pid file"
RSK_PIDS+=("$master")
wait_port "$port"
[ -e "$bell" ] || fail "no bell file while nginx runs"

# 5 curls, one keep-alive connection of 20 requests each
for i in 1 2 3 4 5; do
	urls=()
	for _ in $(seq 20); do urls+=("http://127.0.0.1:$port/ok"); done
	got=$(pre_plain curl -sS --max-time 20 "${urls[@]}" 2>&1) || fail "curl $i: $got"
	[ "$(grep -c '^ok$' <<<"$got")" -eq 20 ] || fail "curl $i: $(head -3 <<<"$got")"
done
kill -QUIT "$master"
for _ in $(seq 100); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
kill -0 "$master" 2>/dev/null && fail "nginx did not quit"
for _ in $(seq 50); do [ -e "$bell" ] || break; sleep 0.1; done
[ -e "$bell" ] && fail "the bell file outlived nginx"
assert_carried shm 5 curl
echo "PASS"
