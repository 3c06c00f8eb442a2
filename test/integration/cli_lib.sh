# Helpers of the rdmasock command's tests (sourced after lib.sh). Servers get ports below
# the kernel's ephemeral range (free_port), and a server that still loses its port between
# our check and its bind is restarted on another one.

# cli_port: a TCP port below the ephemeral range, free right now (lib.sh free_port).
cli_port() {
	free_port
}

# cli_alive PID: running and not a zombie (our unreaped child counts as dead).
cli_alive() {
	local st
	st=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# cli_listening PORT PID: wait up to 10 s, while PID lives, for a listener on PORT.
cli_listening() {
	local hex
	hex=$(printf ':%04X' "$1")
	for _ in $(seq 200); do
		cli_alive "$2" || return 1
		awk -v p="$hex" 'substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 }
			END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# cli_start NAME CMD...: start_bg NAME with every "{PORT}" in CMD replaced by a free port;
# sets PORT_NAME once it listens. Up to 3 ports are tried.
cli_start() {
	local name=$1 port a pid _try
	local -a args
	shift
	for _try in 1 2 3; do
		port=$(cli_port)
		args=()
		for a in "$@"; do
			args+=("${a//\{PORT\}/$port}")
		done
		start_bg "$name" "${args[@]}"
		pid=$(eval echo "\${PID_$name}")
		if cli_listening "$port" "$pid"; then
			eval "PORT_$name=$port"
			return 0
		fi
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	fail "$name did not come up on 3 ports: $(tail -n 3 "$RSK_TMP/$name.log")"
}
