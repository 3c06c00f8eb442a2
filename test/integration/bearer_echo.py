#!/usr/bin/env python3
"""Short connections between a server and a client that must look like TCP to both, however
they are carried (the same-host bearer, RDMASOCK_BEARER=unix, makes them unix connections).

server PORTFILE N [blocking|wildcard]: listen on 127.0.0.1 (wildcard: 0.0.0.0) at a free
  port, written to PORTFILE; serve N connections, each read to EOF and answered with the
  byte count and SHA-256 of what came, then closed. Accepts from a non-blocking listener in
  a selectors loop (nginx, redis), or "blocking" in a blocking accept (thread-per-connection
  servers), or "select": blocking accepts, each after select() says the listener is readable
  (iperf3), which must not say so once nobody is queued. Checks every accepted socket's names and family as TCP's,
  and that the unix socket its number names next (after close, close_range or a dup2 onto
  it) refuses TCP options.
client PORT N: N connections, blocking and non-blocking ones in turn (EINPROGRESS, or 0 at
  once over the bearer, then writable, SO_ERROR 0, and connect() again says EISCONN, which
  Python reports as 0), with TCP_NODELAY set and read
  back (every fourth set before its connect), the first bytes of every fourth sent with
  sendto and sendmsg naming an address (which a connected TCP socket ignores), payloads from 1 byte to 1 MiB, a half close (shutdown SHUT_WR) and the answer
  checked; names as TCP's.
Prints "server ok N" / "client ok N, non-blocking connects done at once K", or what went
wrong (exit 1)."""
import errno
import hashlib
import os
import select
import selectors
import socket
import struct
import sys

SIZES = [1, 64, 1500, 65536, 1 << 20]


def payload(i):
    n = SIZES[i % len(SIZES)]
    b = bytes((i + k) & 0xFF for k in range(256))
    return (b * (n // 256 + 1))[:n]


def check_tcp(s, where, own=None, peer=None):
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN) != socket.AF_INET:
        raise SystemExit("%s: SO_DOMAIN is not AF_INET" % where)
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) != socket.IPPROTO_TCP:
        raise SystemExit("%s: SO_PROTOCOL is not TCP" % where)
    name, pname = s.getsockname(), s.getpeername()
    for what, got, want in (("own", name, own), ("peer", pname, peer)):
        if not (isinstance(got, tuple) and got[0].startswith("127.") and got[1] > 0):
            raise SystemExit("%s: %s name %r is not a loopback TCP address" % (where, what, got))
        if want is not None and got != want:
            raise SystemExit("%s: %s name %r, want %r" % (where, what, got, want))
    return name, pname


def serve_one(c, addr, lport):
    c.setblocking(True)
    c.settimeout(20)
    _, pname = check_tcp(c, "accepted", own=("127.0.0.1", lport))
    if pname != addr:
        raise SystemExit("accept said %r, getpeername %r" % (addr, pname))
    # what the listener gave it, as TCP's accept does (set before listen and after it)
    got = (c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
           c.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
           c.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
           struct.unpack("ll", c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)))
    if got != (1, 1, 33, (7, 0)):
        raise SystemExit("accepted: TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE, SO_RCVTIMEO "
                         "read %r, not the listener's (1, 1, 33, (7, 0))" % (got,))
    h, n = hashlib.sha256(), 0
    while True:
        d = c.recv(1 << 16)
        if not d:
            break
        h.update(d)
        n += len(d)
    c.sendall(("%d %s" % (n, h.hexdigest())).encode())
    close_and_reuse(c)


def refuses_tcp_options(fd, where):
    """A plain unix socket at @fd (that number: a dup would be another) must refuse a TCP
    option, as the kernel's does, and say it is a unix socket."""
    u = socket.socket(fileno=fd)
    try:
        if u.family != socket.AF_UNIX:
            raise SystemExit("%s: a unix socket says family %r" % (where, u.family))
        u.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise SystemExit("%s: TCP_NODELAY on a unix socket: %s" % (where, e))
    else:
        raise SystemExit("%s: a unix socket took TCP_NODELAY" % where)
    finally:
        u.detach()  # (the caller's to close)


def close_and_reuse(c):
    """Close @c by close(), close_range() or dup2() onto its number, in turn; the number's next
    socket, a plain unix one, is no TCP stand-in (the library forgets what it knew of it)."""
    fd, k = c.fileno(), close_and_reuse.k
    close_and_reuse.k += 1
    if k % 3 == 2:
        u = socket.socket(socket.AF_UNIX)
        os.dup2(u.fileno(), fd)
        u.close()
        refuses_tcp_options(fd, "dup2 onto an accepted number")
        c.close()
        return
    if k % 3 == 0:
        c.close()
    else:
        os.closerange(c.detach(), fd + 1)
    a, b = socket.socketpair()
    for x in (a, b):
        if x.fileno() == fd:
            refuses_tcp_options(fd, "a socketpair on a closed accepted number")
    a.close()
    b.close()


close_and_reuse.k = 0


def server(portfile, total, how):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 7, 0))
    l.bind(("0.0.0.0" if how == "wildcard" else "127.0.0.1", 0))
    l.listen(64)
    l.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 33)  # (after listen: inherited too)
    l.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lport = l.getsockname()[1]
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % lport)
    os.rename(portfile + ".tmp", portfile)
    done = 0
    if how in ("blocking", "select"):
        l.setblocking(True)  # (a timeout would make Python poll a non-blocking socket)
        while done < total:
            if how == "select" and not select.select([l], [], [], 30)[0]:
                raise SystemExit("server: no client for 30 s after %d" % done)
            c, a = l.accept()
            serve_one(c, a, lport)
            done += 1
        # nobody left: the listener must not say readable (a blocking accept would hang)
        if how == "select" and select.select([l], [], [], 0)[0]:
            raise SystemExit("server: the listener is readable with nobody queued")
    else:
        l.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(l, selectors.EVENT_READ)
        while done < total:
            if not sel.select(30):
                raise SystemExit("server: no client for 30 s after %d" % done)
            while done < total:
                try:
                    c, a = l.accept()
                except BlockingIOError:
                    break
                serve_one(c, a, lport)
                done += 1
    print("server ok %d" % done)


def connect_nonblocking(port):
    s = socket.socket()
    s.setblocking(False)
    rc = s.connect_ex(("127.0.0.1", port))
    if rc not in (0, errno.EINPROGRESS):
        raise SystemExit("non-blocking connect: %s" % errno.errorcode.get(rc, rc))
    connect_nonblocking.at_once += rc == 0  # (the bearer's: the connection is made)
    _, w, _ = select.select([], [s], [], 10)
    if not w:
        raise SystemExit("non-blocking connect: never writable")
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise SystemExit("non-blocking connect: SO_ERROR %d" % err)
    rc = s.connect_ex(("127.0.0.1", port))  # APR asks again (Python reads EISCONN as 0)
    if rc not in (0, errno.EISCONN):
        raise SystemExit("connect again: %s, want EISCONN" % errno.errorcode.get(rc, rc))
    s.setblocking(True)
    return s


connect_nonblocking.at_once = 0


def client(port, total):
    for i in range(total):
        if i % 2:
            s = connect_nonblocking(port)
        elif i % 4 == 2:  # TCP_NODELAY set before the connect reads back set after it
            s = socket.socket()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(20)
            s.connect(("127.0.0.1", port))
            if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0:
                raise SystemExit("client %d: TCP_NODELAY set before connect reads 0" % i)
        else:
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.settimeout(20)
        check_tcp(s, "client %d" % i, peer=("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0:
            raise SystemExit("client %d: TCP_NODELAY set but reads 0" % i)
        p = payload(i)
        if i % 4 == 0:  # a connected TCP socket ignores an address given to sendto/sendmsg
            if s.sendto(p[:1], ("127.0.0.2", 9)) != 1:
                raise SystemExit("client %d: sendto with an address" % i)
            if len(p) > 1 and s.sendmsg([p[1:2]], [], 0, ("127.0.0.1", 1)) != 1:
                raise SystemExit("client %d: sendmsg with an address" % i)
            p_rest = p[2:]
        else:
            p_rest = p
        s.sendall(p_rest)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        want = ("%d %s" % (len(p), hashlib.sha256(p).hexdigest())).encode()
        if got != want:
            raise SystemExit("client %d: answer %r, want %r" % (i, got, want))
        s.close()
    print("client ok %d, non-blocking connects done at once %d" % (total, connect_nonblocking.at_once))


def main():
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "")
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
