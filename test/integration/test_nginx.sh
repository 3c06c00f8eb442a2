#!/usr/bin/env bash
# nginx (master + 2 workers, sendfile on) serving generated files to curl, both ends preloaded,
# against the same requests without the library: 200 curl processes (4 at a time, one
# connection each), a range request, and one curl fetching 12 URLs over one keep-alive
# connection. Every body must have the sha256 of its file, the responses and nginx's access log
# (status, bytes, URI, request number on the connection) must be identical with and without
# the library, and the stats must show the expected transport carrying the connections of
# nginx (master + workers) and of every curl.
. "$(dirname "$0")/lib.sh"
need nginx curl python3

NREQ=200
FILES=(big.bin one.txt small.txt page.html odd.bin)

make_files() { # $1 = document root
	mkdir -p "$1"
	head -c 1048576 /dev/urandom >"$1/big.bin"
	printf x >"$1/one.txt"
	head -c 100 /dev/urandom | base64 -w 0 >"$1/small.txt"
	head -c 3000 /dev/urandom | base64 >"$1/page.html"
	head -c 65537 /dev/urandom >"$1/odd.bin"
}

# write_conf DIR PORT: nginx configuration with every path inside DIR.
write_conf() {
	local d=$1 port=$2 t user=""
	[ "$(id -u)" = 0 ] && user="user root;" # the workers read files in a 0700 directory
	for t in body proxy fastcgi uwsgi scgi; do mkdir -p "$d/tmp/$t"; done
	cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
$user
error_log $d/error.log notice;
pid $d/nginx.pid;
events { worker_connections 256; }
http {
	log_format t '\$status \$body_bytes_sent \$request_uri \$connection_requests';
	access_log $d/access.log t;
	client_body_temp_path $d/tmp/body;
	proxy_temp_path $d/tmp/proxy;
	fastcgi_temp_path $d/tmp/fastcgi;
	uwsgi_temp_path $d/tmp/uwsgi;
	scgi_temp_path $d/tmp/scgi;
	default_type application/octet-stream;
	sendfile on;
	tcp_nopush on;
	keepalive_timeout 30s;
	keepalive_requests 1000;
	server {
		listen 127.0.0.1:$port;
		root $RSK_TMP/www;
	}
}
EOF
}

# check_bodies DIR: each DIR/N.body is the file its DIR/N.name names (sha256); the range body
# is bytes 1000..600000 of big.bin.
check_bodies() {
	python3 - "$1" "$RSK_TMP/www" <<'PY'
import hashlib, os, sys
d, www = sys.argv[1], sys.argv[2]
sha = lambda b: hashlib.sha256(b).hexdigest()
want = {f: sha(open(os.path.join(www, f), "rb").read()) for f in os.listdir(www)}
n = 0
for e in sorted(os.listdir(d)):
    if not e.endswith(".name"):
        continue
    name = open(os.path.join(d, e)).read().strip()
    body = open(os.path.join(d, e[:-5] + ".body"), "rb").read()
    if name == "range":
        exp = sha(open(os.path.join(www, "big.bin"), "rb").read()[1000:600001])
    else:
        exp = want[name]
    if sha(body) != exp:
        sys.exit("%s: body of %s (%d bytes) has sha256 %s, want %s" % (d, name, len(body), sha(body), exp))
    n += 1
print(n)
PY
}

run_nginx() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port d out i j f pids rc args n
	port=$(free_port)
	d=$RSK_TMP/$tag
	out=$d/out
	mkdir -p "$out"
	write_conf "$d" "$port"
	start_bg "nginx$tag" $wrap nginx -e "$d/error.log" -p "$d" -c "$d/nginx.conf"
	wait_port "$port"
	cwrap=$wrap # curl cannot take a sanitizer's runtime (lib.sh, pre_plain)
	[ "$wrap" = pre ] && cwrap=pre_plain

	# 200 requests, one curl (one connection) each, 4 at a time
	for ((i = 0; i < NREQ; i += 4)); do
		pids=()
		for ((j = i; j < i + 4 && j < NREQ; j++)); do
			f=${FILES[j % ${#FILES[@]}]}
			echo "$f" >"$out/$j.name"
			$cwrap curl -sS --max-time 20 -o "$out/$j.body" -w "$j %{http_code} %{size_download} %{num_connects}\n" \
				"http://127.0.0.1:$port/$f" >"$out/$j.w" 2>&1 &
			pids+=($!)
		done
		rc=0
		for j in "${pids[@]}"; do wait "$j" || rc=1; done
		[ $rc = 0 ] || fail "curl failed: $(cat "$out"/*.w | grep -v ' 200 ' | head -5)"
	done
	# a range of the big file
	echo range >"$out/range.name"
	$cwrap curl -sS --max-time 20 -r 1000-600000 -o "$out/range.body" -w "range %{http_code} %{size_download}\n" \
		"http://127.0.0.1:$port/big.bin" >"$out/range.w" || fail "curl range request failed"
	# keep-alive: 12 URLs over one connection
	args=()
	for ((j = 0; j < 12; j++)); do
		f=${FILES[j % ${#FILES[@]}]}
		echo "$f" >"$out/ka$j.name"
		args+=("http://127.0.0.1:$port/$f?ka=$j" -o "$out/ka$j.body")
	done
	$cwrap curl -sS --max-time 20 -w "ka %{http_code} %{size_download} %{num_connects}\n" "${args[@]}" \
		>"$out/ka.w" || fail "curl keep-alive requests failed"

	stop_bg "nginx$tag" QUIT # graceful: workers and master return through exit()
	n=$(check_bodies "$out") || fail "wrong body ($tag)"
	[ "$n" -eq $((NREQ + 13)) ] || fail "$n bodies checked, want $((NREQ + 13))"
	cat "$out"/*.w | sort >"$d/responses"
	[ "$(grep -c ' 200 ' "$d/responses")" -eq $((NREQ + 12)) ] ||
		fail "not every request got 200: $(grep -v ' 200 ' "$d/responses" | head -5)"
	grep -q "^range 206 599001$" "$d/responses" || fail "range request: $(grep ^range "$d/responses")"
	# one connection for the 12 keep-alive URLs: num_connects is 1 for the first, 0 after
	[ "$(awk '$1 == "ka" { s += $4 } END { print s }' "$d/responses")" = 1 ] ||
		fail "keep-alive: curl connected $(awk '$1 == "ka" { s += $4 } END { print s }' "$d/responses") times for 12 URLs"
	sort "$d/access.log" >"$d/access.sorted"
	[ "$(wc -l <"$d/access.sorted")" -eq $((NREQ + 13)) ] ||
		fail "nginx logged $(wc -l <"$d/access.sorted") requests, want $((NREQ + 13))"
	grep -q "ka=11 12$" "$d/access.sorted" || fail "nginx did not serve 12 requests on one connection"
}

make_files "$RSK_TMP/www"
run_nginx "" plain
[ "$(stats_lines)" -eq 0 ] || fail "the run without the library wrote stats"
run_nginx pre with
cmp -s "$RSK_TMP/plain/responses" "$RSK_TMP/with/responses" ||
	fail "curl results differ with the library: $(diff "$RSK_TMP/plain/responses" "$RSK_TMP/with/responses" | head -10)"
cmp -s "$RSK_TMP/plain/access.sorted" "$RSK_TMP/with/access.sorted" ||
	fail "nginx access logs differ with the library: $(diff "$RSK_TMP/plain/access.sorted" "$RSK_TMP/with/access.sorted" | head -10)"

# nginx writes its process titles over argv, and the library names the program of a stats
# line by program_invocation_short_name, which points into argv: the lines of nginx say
# "nginx: master process ..." and "nginx: worker process is shutting down". Count them as
# "nginx" (in a copy of the stats) to assert the traffic; the naming is the library's to fix.
python3 - "$RSK_STATS" >"$RSK_TMP/stats.nginx" <<'PY'
import json, sys
for line in open(sys.argv[1]).read().splitlines():
    o = json.loads(line)
    if o["program"].startswith("nginx:"):
        print("warning: stats line of pid %d names program %r" % (o["pid"], o["program"]), file=sys.stderr)
        o["program"] = "nginx"
    print(json.dumps(o))
PY
# master + 2 workers, each exited normally and wrote its line; one line per curl
n=$(RSK_STATS=$RSK_TMP/stats.nginx stats_lines nginx)
[ "$n" -eq 3 ] || fail "$n nginx stats lines, want 3"
[ "$(stats_lines curl)" -eq $((NREQ + 2)) ] || fail "$(stats_lines curl) curl stats lines, want $((NREQ + 2))"
RSK_STATS=$RSK_TMP/stats.nginx assert_carried "$RSK_EXPECT" $((NREQ + 2)) nginx
assert_carried "$RSK_EXPECT" $((NREQ + 2)) curl
# Every body byte curl wrote out came through the library.
bodies=$(cat "$RSK_TMP"/with/out/*.body | wc -c)
got=$(stats_get bytes_received "$RSK_EXPECT" curl)
rsk_bearer_on || [ "$got" -ge "$bodies" ] ||
	fail "stats: curl received $got bytes over $RSK_EXPECT, the bodies are $bodies"
echo "nginx over $RSK_EXPECT: ok ($((NREQ + 13)) requests, $bodies body bytes)"
