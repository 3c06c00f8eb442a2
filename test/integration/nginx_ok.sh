# nginx_ok_conf DIR PORT DAEMON: a small nginx configuration in DIR/nginx.conf (master and 2
# workers, every path inside DIR, daemon on or off) answering "ok" at /ok. Sourced by the
# tests that run nginx for its process handling (test_daemon.sh, test_nginx_upgrade.sh).
nginx_ok_conf() {
	local d=$1 port=$2 daemon=$3 user=""
	mkdir -p "$d/tmp"
	[ "$(id -u)" = 0 ] && user="user root;"
	cat >"$d/nginx.conf" <<EOF
daemon $daemon;
master_process on;
worker_processes 2;
$user
error_log $d/error.log notice;
pid $d/nginx.pid;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path $d/tmp;
	keepalive_requests 1000;
	server {
		listen 127.0.0.1:$port;
		location = /ok { return 200 "ok\n"; }
	}
}
EOF
}
