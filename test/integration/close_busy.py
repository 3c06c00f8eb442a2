#!/usr/bin/env python3
# close() of a socket while another thread of the process is inside a call on it
# (test_close_busy.sh). The kernel keeps the socket until that call returns: the peer sees
# no FIN and no reset meanwhile, the call goes on (a reader gets the peer's later bytes, a
# writer blocked on a full window finishes), and only then does the socket end, in order.
# Both ends live in this process (the connection moves to shm on a preloaded run).
#   close_busy.py reader PORT   a thread blocked in recv(4); the main thread closes; the peer
#                               then sends b"late": the reader gets it, then the peer EOF
#   close_busy.py reader_eof PORT  the same, but the peer closes: the reader gets EOF
#   close_busy.py writer PORT   a thread blocked in sendall(16 MiB) on a full window; the main
#                               thread closes; the peer reads all 16 MiB, in order, then EOF
#   close_busy.py exit PORT     a server: a daemon thread blocked in recv, the main thread
#                               sends 100,000 bytes, closes and returns (the process ends
#                               with the thread still in recv)
#   close_busy.py client PORT   exit's client, another process: the 100,000 bytes, then EOF
# Prints "<mode>: ok" or exits with what differed.
import hashlib
import socket
import sys
import threading
import time

BIG = 16 << 20
EXIT_BYTES = 100000
WAIT = 10.0


def pair(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    cl = socket.create_connection(("127.0.0.1", port))
    sv, _ = ls.accept()
    ls.close()
    for _ in range(20):  # past the first calls: a connection started on TCP has moved
        cl.sendall(b"p" * 100)
        got = 0
        while got < 100:
            got += len(sv.recv(100 - got))
        sv.sendall(b"q")
        if cl.recv(1) != b"q":
            sys.exit("pair: no answer")
    return cl, sv


def in_thread(fn):
    res = {}

    def body():
        try:
            res["ok"] = fn()
        except OSError as e:
            res["err"] = e

    t = threading.Thread(target=body)
    t.start()
    return t, res


def no_end_yet(cl, what):
    """The peer sees neither EOF nor a reset while the call is in progress."""
    try:
        d = cl.recv(1, socket.MSG_DONTWAIT)
        sys.exit("%s: the peer read %r while the call was in progress" % (what, d))
    except BlockingIOError:
        pass
    except OSError as e:
        sys.exit("%s: the peer got %s while the call was in progress" % (what, e))


def read_eof(cl, what):
    cl.settimeout(WAIT)
    try:
        d = cl.recv(1)
    except OSError as e:
        sys.exit("%s: the peer got %s where EOF was due" % (what, e))
    if d != b"":
        sys.exit("%s: the peer read %r where EOF was due" % (what, d))


def reader(port):
    cl, sv = pair(port)
    t, res = in_thread(lambda: sv.recv(4))
    time.sleep(0.2)  # into its wait
    sv.close()
    time.sleep(0.2)
    no_end_yet(cl, "reader")
    try:
        cl.sendall(b"late")
    except OSError as e:
        sys.exit("reader: the peer's send failed: %s" % e)
    t.join(WAIT)
    if t.is_alive():
        sys.exit("reader: the blocked recv never returned")
    if res.get("ok") != b"late":
        sys.exit("reader: the blocked recv returned %r" % res)
    read_eof(cl, "reader")


def reader_eof(port):
    cl, sv = pair(port)
    t, res = in_thread(lambda: sv.recv(4))
    time.sleep(0.2)
    sv.close()
    time.sleep(0.2)
    no_end_yet(cl, "reader_eof")
    cl.close()
    t.join(WAIT)
    if t.is_alive():
        sys.exit("reader_eof: the blocked recv never returned")
    if res.get("ok") != b"":
        sys.exit("reader_eof: the blocked recv returned %r, not EOF" % res)


def payload(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def exit_server(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    print("exit: listening", flush=True)
    sv, _ = ls.accept()
    ls.close()
    started = threading.Event()

    def body():
        started.set()
        try:
            sv.recv(1)
        except OSError:
            pass

    threading.Thread(target=body, daemon=True).start()
    started.wait(WAIT)
    time.sleep(0.1)  # into its wait
    sv.sendall(payload(EXIT_BYTES))
    sv.close()
    time.sleep(0.1)


def exit_client(port):
    cl = socket.create_connection(("127.0.0.1", port))
    cl.settimeout(WAIT)
    want, got = payload(EXIT_BYTES), bytearray()
    while True:
        try:
            d = cl.recv(65536)
        except OSError as e:
            sys.exit("client: %s after %d bytes" % (e, len(got)))
        if not d:
            break
        got += d
    if bytes(got) != want:
        sys.exit("client: %d bytes read, not the %d sent" % (len(got), len(want)))


def writer(port):
    cl, sv = pair(port)
    data = bytes((i * 13 + 5) & 0xFF for i in range(251)) * (BIG // 251 + 1)
    data = data[:BIG]
    t, res = in_thread(lambda: sv.sendall(data))
    time.sleep(0.3)  # the window fills; the thread waits for room
    if not t.is_alive():
        sys.exit("writer: 16 MiB went without the peer reading (no full window)")
    sv.close()
    time.sleep(0.2)
    h, n = hashlib.sha256(), 0
    cl.settimeout(WAIT)
    while n < BIG:
        try:
            d = cl.recv(65536)
        except OSError as e:
            sys.exit("writer: the peer got %s after %d bytes" % (e, n))
        if not d:
            sys.exit("writer: EOF after %d of %d bytes" % (n, BIG))
        h.update(d)
        n += len(d)
    if h.hexdigest() != hashlib.sha256(data).hexdigest():
        sys.exit("writer: the bytes differ")
    t.join(WAIT)
    if t.is_alive() or "err" in res:
        sys.exit("writer: the blocked sendall: %r" % res)
    read_eof(cl, "writer")


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    modes = {"reader": reader, "reader_eof": reader_eof, "writer": writer, "exit": exit_server,
             "client": exit_client}
    modes[mode](port)
    print("%s: ok" % mode, flush=True)
