#!/usr/bin/env bash
# memcached and a python3 client speaking the text protocol, both ends preloaded, against the
# same run without the library: 200 keys with random values of 1 B to 100 KiB set over 4
# concurrent connections and read back one by one, with multi-gets, gets/cas, append, incr and
# delete; every value is verified and the transcripts (and the server's deterministic
# counters, read with memcstat) must be identical with and without the library. memcslap adds
# load from 4 threads. The stats must show the expected transport carrying the connections of
# memcached, of the python client and of the libmemcached tools.
. "$(dirname "$0")/lib.sh"
need memcached python3

# The python3 found in PATH may be a wrapper script (pyenv shim) that runs shells before the
# interpreter: preload the interpreter itself, whose stats lines then name its basename.
PY=$(python3 -c 'import sys; print(sys.executable)')
[ -x "$PY" ] || fail "cannot find the python3 interpreter ($PY)"
PYNAME=$(basename "$PY")
HAVE_TOOLS=0
command -v memcstat >/dev/null 2>&1 && command -v memcslap >/dev/null 2>&1 && HAVE_TOOLS=1

cat >"$RSK_TMP/client.py" <<'PY'
import hashlib, random, socket, sys, threading

PORT, NKEYS, NCONN = int(sys.argv[1]), 200, 4
rng = random.Random(20240611)
# sizes: the edges, sizes around buffer boundaries, the rest log-uniform up to 100 KiB
sizes = [1, 2, 1023, 1024, 1025, 4095, 4096, 16384, 65535, 65536, 65537, 102400]
while len(sizes) < NKEYS:
    sizes.append(max(1, int(2 ** rng.uniform(0, 16.64))))
keys = ["rsk:%03d:%s" % (i, "k" * (i % 40)) for i in range(NKEYS)]
values = {k: rng.randbytes(n) for k, n in zip(keys, sizes)}


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=20)
        self.buf = b""

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l.decode()

    def exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, tail, self.buf = self.buf[:n], self.buf[n:n + 2], self.buf[n + 2:]
        if tail != b"\r\n":
            raise ValueError("data block not followed by CRLF")
        return data

    def cmd(self, line, data=None):
        msg = line.encode() + b"\r\n"
        if data is not None:
            msg += data + b"\r\n"
        self.s.sendall(msg)
        return self.line()

    def store(self, verb, key, data, flags=0, extra=""):
        return self.cmd("%s %s %d 0 %d%s" % (verb, key, flags, len(data), extra), data)

    def get(self, *ks, verb="get"):
        """{key: (flags, data, cas)} of the keys found."""
        self.s.sendall(("%s %s\r\n" % (verb, " ".join(ks))).encode())
        found = {}
        while True:
            l = self.line()
            if l == "END":
                return found
            p = l.split()
            if p[0] != "VALUE":
                raise ValueError("unexpected reply %r" % l)
            found[p[1]] = (int(p[2]), self.exact(int(p[3])), int(p[4]) if len(p) > 4 else None)

    def close(self):
        self.s.close()


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


errors = []


def worker(t):
    try:
        c = Conn()
        mine = keys[t::NCONN]
        for k in mine:
            r = c.store("set", k, values[k], flags=t)
            if r != "STORED":
                raise ValueError("set %s: %s" % (k, r))
        for k in mine:
            got = c.get(k)
            if got.get(k, (None, None))[:2] != (t, values[k]):
                raise ValueError("get %s returned a wrong value" % k)
        c.close()
    except Exception as e:  # reported by the main thread
        errors.append("connection %d: %r" % (t, e))


threads = [threading.Thread(target=worker, args=(t,)) for t in range(NCONN)]
for th in threads:
    th.start()
for th in threads:
    th.join(60)
check(not any(th.is_alive() for th in threads), "a connection thread hangs")
check(not errors, "; ".join(errors))
print("set+get over %d connections: %d keys ok" % (NCONN, NKEYS))

c = Conn()
# multi-get: all keys, 50 a request, some replies several MB long
n = 0
for i in range(0, NKEYS, 50):
    ks = keys[i:i + 50]
    got = c.get(*ks)
    check(sorted(got) == sorted(ks), "multi-get %d: %d of %d keys" % (i, len(got), len(ks)))
    for k in ks:
        check(got[k][1] == values[k] and got[k][0] == keys.index(k) % NCONN, "multi-get: wrong value for %s" % k)
    n += len(got)
print("multi-get: %d keys ok" % n)
# pipelined: 100 gets in one send, then the 100 replies
ks = keys[::2]
c.s.sendall(b"".join(b"get %s\r\n" % k.encode() for k in ks))
for k in ks:
    l = c.line()
    check(l.startswith("VALUE %s " % k), "pipelined get %s: %r" % (k, l))
    check(c.exact(int(l.split()[3])) == values[k], "pipelined get %s: wrong value" % k)
    check(c.line() == "END", "pipelined get %s: no END" % k)
print("pipelined gets: %d ok" % len(ks))
# gets/cas, append, incr/decr, delete, misses
k = keys[7]
cas = c.get(k, verb="gets")[k][2]
print("cas stale:", c.store("cas", k, b"new", extra=" %d" % (cas + 1000)))
print("cas:", c.store("cas", k, b"new", extra=" %d" % cas))
print("append:", c.store("append", k, b"-tail"))
print("get after cas+append:", c.get(k)[k][1])
print("add existing:", c.store("add", keys[8], b"x"))
print("replace missing:", c.store("replace", "rsk:missing", b"x"))
print("set counter:", c.store("set", "rsk:counter", b"40"))
print("incr:", c.cmd("incr rsk:counter 2"))
print("decr:", c.cmd("decr rsk:counter 5"))
print("incr non-numeric:", c.cmd("incr %s 1" % keys[3]))
for dk in keys[-10:]:
    check(c.cmd("delete %s" % dk) == "DELETED", "delete %s" % dk)
print("delete again:", c.cmd("delete %s" % keys[-1]))
got = c.get(*keys[-12:])
print("after deletes: %d of 12 found" % len(got))
print("miss:", c.get("rsk:nothing-here"))
print("unknown command:", c.cmd("bogus"))
c.close()
h = hashlib.sha256()
for k in keys:
    h.update(values[k])
print("values sha256 %s, %d bytes" % (h.hexdigest(), sum(sizes)))
PY

# Counters memcstat reports that depend only on the commands sent.
STATS_KEYS="cmd_get cmd_set get_hits get_misses delete_hits delete_misses incr_hits incr_misses decr_hits cas_hits cas_badval cas_misses curr_items total_items"

run_memcached() { # $1 = "pre" or "", $2 = tag
	local wrap=$1 tag=$2 port name user=()
	port=$(free_port)
	name=mc$tag
	[ "$(id -u)" = 0 ] && user=(-u root)
	start_bg "$name" $wrap memcached -l 127.0.0.1 -p "$port" -U 0 -m 64 -t 2 "${user[@]}"
	wait_port "$port"
	$wrap "$PY" "$RSK_TMP/client.py" "$port" >"$RSK_TMP/$tag.out" 2>&1 ||
		fail "python client ($tag): $(tail -c 800 "$RSK_TMP/$tag.out")"
	if [ $HAVE_TOOLS = 1 ]; then
		$wrap memcstat --servers="127.0.0.1:$port" >"$RSK_TMP/$tag.stat1" 2>&1 ||
			fail "memcstat failed: $(tail -c 300 "$RSK_TMP/$tag.stat1")"
		for t in set get; do
			$wrap memcslap --servers="127.0.0.1:$port" --concurrency=4 --execute-number=1000 \
				--test=$t >"$RSK_TMP/$tag.slap.$t" 2>&1 || fail "memcslap --test=$t failed"
		done
		grep -q "Time to set *4000 keys by *4 threads" "$RSK_TMP/$tag.slap.set" ||
			fail "memcslap set: $(cat "$RSK_TMP/$tag.slap.set")"
		grep -q "Time to get *4000 keys by *4 threads" "$RSK_TMP/$tag.slap.get" ||
			fail "memcslap get: $(cat "$RSK_TMP/$tag.slap.get")"
		$wrap memcstat --servers="127.0.0.1:$port" >"$RSK_TMP/$tag.stat2" 2>&1 ||
			fail "memcstat failed"
		for f in stat1 stat2; do
			for k in $STATS_KEYS; do
				v=$(awk -v k="$k:" '$1 == k { print $2 }' "$RSK_TMP/$tag.$f")
				[ -n "$v" ] || fail "memcstat printed no $k: $(head -c 300 "$RSK_TMP/$tag.$f")"
				echo "$f $k $v"
			done
		done >"$RSK_TMP/$tag.counters"
		# the 4000 gets memcslap made found the keys it had loaded
		h1=$(awk '$1 == "stat1" && $2 == "get_hits" { print $3 }' "$RSK_TMP/$tag.counters")
		h2=$(awk '$1 == "stat2" && $2 == "get_hits" { print $3 }' "$RSK_TMP/$tag.counters")
		[ $((h2 - h1)) -ge 4000 ] || fail "memcslap: $((h2 - h1)) get hits, want 4000"
	fi
	stop_bg "$name" TERM # memcached leaves its event loop and returns from main
	grep -q "^values sha256" "$RSK_TMP/$tag.out" || fail "python client ($tag) did not finish"
}

run_memcached "" plain
[ "$(stats_lines)" -eq 0 ] || fail "the run without the library wrote stats"
run_memcached pre with
cmp -s "$RSK_TMP/plain.out" "$RSK_TMP/with.out" ||
	fail "client transcripts differ with the library: $(diff "$RSK_TMP/plain.out" "$RSK_TMP/with.out" | head -20)"
if [ $HAVE_TOOLS = 1 ]; then
	cmp -s <(grep '^stat1' "$RSK_TMP/plain.counters") <(grep '^stat1' "$RSK_TMP/with.counters") ||
		fail "memcached counters differ with the library: $(diff "$RSK_TMP/plain.counters" "$RSK_TMP/with.counters" | head -20)"
	grep -q "^stat1 curr_items 191$" "$RSK_TMP/with.counters" ||
		fail "memcached holds $(grep '^stat1 curr_items' "$RSK_TMP/with.counters"), want 191 items"
fi

[ "$(stats_lines memcached)" -eq 1 ] || fail "$(stats_lines memcached) memcached stats lines, want 1"
[ "$(stats_lines "$PYNAME")" -eq 1 ] || fail "$(stats_lines "$PYNAME") $PYNAME stats lines, want 1"
# python: 4 + 1 connections; memcstat 2 x 1, memcslap 4 + 5 (it loads the keys first)
assert_carried "$RSK_EXPECT" 5 "$PYNAME"
if [ $HAVE_TOOLS = 1 ]; then
	assert_carried "$RSK_EXPECT" 2 memcstat
	assert_carried "$RSK_EXPECT" 8 memcslap
	assert_carried "$RSK_EXPECT" 15 memcached
else
	assert_carried "$RSK_EXPECT" 5 memcached
fi
# The client received every value at least 3 times (get, multi-get, pipelined get for half).
vbytes=$(sed -n 's/^values sha256 [0-9a-f]*, \([0-9]*\) bytes$/\1/p' "$RSK_TMP/with.out")
got=$(stats_get bytes_received "$RSK_EXPECT" "$PYNAME")
rsk_bearer_on || [ "$got" -ge $((2 * vbytes)) ] ||
	fail "stats: $PYNAME received $got bytes over $RSK_EXPECT, less than twice the $vbytes value bytes"
got=$(stats_get bytes_received "$RSK_EXPECT" memcached)
rsk_bearer_on || [ "$got" -ge "$vbytes" ] ||
	fail "stats: memcached received $got bytes over $RSK_EXPECT, less than the $vbytes value bytes"
echo "memcached over $RSK_EXPECT: ok ($vbytes value bytes, $(grep -c . "$RSK_TMP/with.out") transcript lines)"
