#!/usr/bin/env python3
# A process that ends while another of its threads is blocked in recv on a connection
# (test_exit_threads.sh): Python's daemon threads, or any program whose main returns while a
# worker waits. The kernel keeps every socket whole until the process is gone.
#   exit_threads.py pair PORT          both ends in this process: a daemon thread accepts and
#                                      echoes, the main thread's client end (epoll) sends 50
#                                      messages and returns
#   exit_threads.py pair_exit PORT     the same, ending with os._exit (the library's _exit)
#   exit_threads.py server PORT BYTES  accept one client, a daemon thread blocked in recv on
#                                      it, the main thread sends BYTES and returns
#   exit_threads.py client PORT        read until EOF; print "client: BYTES SHA256"
import os
import socket
import sys
import threading
import time


def listener(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(4)
    return ls


def block_in_recv(sock):
    """A daemon thread that waits in recv on @sock until the process ends."""
    started = threading.Event()

    def body():
        started.set()
        try:
            sock.recv(1)
        except OSError:
            pass

    threading.Thread(target=body, daemon=True).start()
    started.wait(5)
    time.sleep(0.05)  # into the wait itself


def payload(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def pair(port):
    """An echo thread that accepts and serves (a daemon, in recv when the main thread is
    done), the main thread's client end waited for with epoll, as an event loop's."""
    import select

    ls = listener(port)

    def echo():
        c, _ = ls.accept()
        for _ in range(200):
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()

    threading.Thread(target=echo, daemon=True).start()
    cl = socket.create_connection(("127.0.0.1", port))
    ep = select.epoll()
    ep.register(cl.fileno(), select.EPOLLIN)
    for _ in range(50):  # past the first calls: a connection started on TCP has moved
        cl.sendall(b"x" * 1000)
        got = 0
        while got < 1000:
            if not ep.poll(5.0):
                sys.exit("pair: no echo within 5 s")
            got += len(cl.recv(65536))
    print("pair: ready", flush=True)  # (the echo thread on its way back into recv)
    return cl, ep  # open until the process ends, as the kernel's sockets are


def server(port, n):
    import hashlib

    ls = listener(port)
    print("server listening", flush=True)
    c, _ = ls.accept()
    block_in_recv(c)
    data = payload(n)
    c.sendall(data)
    print("server: %d %s" % (n, hashlib.sha256(data).hexdigest()), flush=True)
    return c  # open until the process ends


def client(port):
    import hashlib

    s = socket.create_connection(("127.0.0.1", port))
    h, n = hashlib.sha256(), 0
    while True:
        d = s.recv(65536)
        if not d:
            break
        h.update(d)
        n += len(d)
    print("client: %d %s" % (n, h.hexdigest()), flush=True)


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode in ("pair", "pair_exit"):
        kept = pair(port)
        if mode == "pair_exit":
            os._exit(0)  # no destructor: the library's _exit flush ends the streams
    elif mode == "server":
        kept = server(port, int(sys.argv[3]))
    elif mode == "client":
        client(port)
    else:
        sys.exit("unknown mode " + mode)
