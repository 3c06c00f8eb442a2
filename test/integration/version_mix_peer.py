"""Role: both ends of test_version_mix.sh's request/response exchange, run preloaded.

    version_mix_peer.py server PORT CONNS
        Listens on 127.0.0.1:PORT (the listener stays open throughout: its rendezvous is
        where an offer goes), serves CONNS connections one after the other, then exits 0.
        Each request is a 4-byte big-endian length and that many bytes; the response is the
        same length and the bytes reversed. A connection ends at the client's EOF.
    version_mix_peer.py client PORT CONNS
        CONNS connections, each ROUNDS requests of pseudo-random sizes (1 B .. 96 KiB, a
        fixed seed), every response checked byte for byte; then shutdown and EOF. Prints
        "client ok CONNS conns R rounds B bytes sent" and exits 0, or raises (a reset is
        ConnectionResetError: exit 1).
"""
import random
import socket
import struct
import sys

ROUNDS = 16


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            return bytes(buf)
        buf += b
    return bytes(buf)


def server(port, conns):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    for _ in range(conns):
        c, _ = ls.accept()
        while True:
            hdr = recv_exact(c, 4)
            if not hdr:
                break  # the client's EOF
            if len(hdr) != 4:
                sys.exit("server: a request header cut short (%d bytes)" % len(hdr))
            (n,) = struct.unpack(">I", hdr)
            body = recv_exact(c, n)
            if len(body) != n:
                sys.exit("server: a request of %d bytes cut at %d" % (n, len(body)))
            c.sendall(hdr + body[::-1])
        c.close()
    ls.close()
    print("server ok %d conns" % conns)


def client(port, conns):
    rng = random.Random(20261203)
    sent = 0
    for k in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        for r in range(ROUNDS):
            n = rng.randint(1, 96 * 1024)
            body = bytes(rng.getrandbits(8) for _ in range(64)) * (n // 64 + 1)
            body = body[:n]
            s.sendall(struct.pack(">I", n) + body)
            sent += 4 + n
            got = recv_exact(s, 4 + n)
            if got != struct.pack(">I", n) + body[::-1]:
                sys.exit("client: conn %d round %d: the response differs (%d of %d bytes)"
                         % (k, r, len(got), 4 + n))
        s.shutdown(socket.SHUT_WR)
        if s.recv(1) != b"":
            sys.exit("client: conn %d: bytes after the last response" % k)
        s.close()
    print("client ok %d conns %d rounds %d bytes sent" % (conns, conns * ROUNDS, sent))


if __name__ == "__main__":
    role, port, conns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    (server if role == "server" else client)(port, conns)
