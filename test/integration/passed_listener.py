#!/usr/bin/env python3
"""A listening socket this process keeps, accepted on by another: a program it exec'd in a
child and handed the listener to (systemd's convention: fd 3, LISTEN_FDS, LISTEN_PID; as
nginx's binary upgrade hands it in NGINX), one it started with posix_spawn (a dup2 action
onto fd 3, LISTEN_FDS) or with system() (the listener inherited on fd 3, LISTEN_FDS in the
environment; glibc's system() spawns inside libc), or a child it was passed to with
SCM_RIGHTS; or a program whose command line names the listener's number, exec'd in a child
("argv": --listen-fd=N) or run by system() ("sysargv": fd://N), with no variable saying so;
or exec'd through libc's syscall() ("rawexec", LISTEN_FDS), where no exec wrapper runs.
A client connects and must get its echo, as without the library. "own" is the
control: this process accepts on the listener itself; "helper" and "spawnhelper" too, after
exec'ing (or posix_spawn'ing, with a dup2 action of another fd) a helper that does not take
the listener, which must change nothing.
Usage: passed_listener.py exec|spawn|system|argv|sysargv|rawexec|scm|own|helper|spawnhelper
(prints "echo ok" or what went wrong)"""
import ctypes
import os
import socket
import sys
import time


def serve(fd):
    l = socket.socket(fileno=fd)
    c, _ = l.accept()
    c.settimeout(8)
    c.sendall(c.recv(4))
    c.close()


def echo_here(l, port):
    c = socket.create_connection(("127.0.0.1", port), timeout=8)
    c.sendall(b"ping")
    s, _ = l.accept()
    s.settimeout(8)
    s.sendall(s.recv(4))
    return c.recv(4)


# execve's number for syscall(2), where this test knows it
SYS_EXECVE = {"x86_64": 59, "aarch64": 221, "riscv64": 221, "i686": 11}


def raw_execve(args, env):
    """execve through libc's syscall(): no exec wrapper runs, only syscall()'s."""
    libc = ctypes.CDLL(None, use_errno=True)
    argv = (ctypes.c_char_p * (len(args) + 1))(*[a.encode() for a in args], None)
    envl = ["%s=%s" % kv for kv in env.items()]
    envp = (ctypes.c_char_p * (len(envl) + 1))(*[e.encode() for e in envl], None)
    libc.syscall.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    libc.syscall(SYS_EXECVE[os.uname().machine], args[0].encode(), argv, envp)
    os._exit(127)


def spawn(l, role):
    """fork + exec this script as @role with the listener inherited ("argv": on its own
    number, which the command line names)."""
    os.set_inheritable(l.fileno(), True)
    pid = os.fork()
    if pid == 0:
        env = dict(os.environ)
        args = [sys.executable, __file__, role]
        if role == "child":  # handed over, as sd_listen_fds() expects it
            os.dup2(l.fileno(), 3)
            env.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
        elif role == "argv":
            args = [sys.executable, __file__, "child", "--listen-fd=%d" % l.fileno()]
        elif role == "rawexec":
            os.dup2(l.fileno(), 3)
            env.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
            raw_execve([sys.executable, __file__, "child"], env)
        os.execve(sys.executable, args, env)
    return pid


def posix_spawn(l, role):
    """posix_spawn this script as @role; "child" is handed the listener on fd 3, "idle" gets
    a dup2 action of /dev/null onto its stdin and no listener."""
    env = dict(os.environ)
    if role == "child":
        acts = [(os.POSIX_SPAWN_DUP2, l.fileno(), 3)]
        env.update(LISTEN_FDS="1")
    else:
        acts = [(os.POSIX_SPAWN_DUP2, os.open(os.devnull, os.O_RDONLY), 0)]
    return os.posix_spawn(sys.executable, [sys.executable, __file__, role], env,
                          file_actions=acts)


def system(l):
    """system() runs this script as "child" in the background with the listener on fd 3."""
    if l.fileno() == 3:
        os.set_inheritable(3, True)
    else:
        os.dup2(l.fileno(), 3)  # (inheritable: dup2's copy has no FD_CLOEXEC)
    os.environ["LISTEN_FDS"] = "1"
    os.system("%s %s child &" % (sys.executable, __file__))
    del os.environ["LISTEN_FDS"]
    if l.fileno() == 3:
        os.set_inheritable(3, False)
    else:
        os.close(3)
    return 0


def sysargv(l):
    """system() runs this script as "child" in the background, told the listener's number
    on its command line only."""
    os.set_inheritable(l.fileno(), True)
    os.system("%s %s child fd://%d &" % (sys.executable, __file__, l.fileno()))
    os.set_inheritable(l.fileno(), False)
    return 0


def main():
    if sys.argv[1] == "child":
        fd = 3
        if len(sys.argv) > 2:  # --listen-fd=N or fd://N
            fd = int(sys.argv[2].split("=")[-1].split("/")[-1])
        serve(fd)
        return 0
    if sys.argv[1] == "idle":
        time.sleep(1)
        return 0
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(4)
    port = l.getsockname()[1]
    pid = 0
    if sys.argv[1] in ("own", "helper", "spawnhelper"):
        if sys.argv[1] == "helper":
            pid = spawn(l, "idle")
        elif sys.argv[1] == "spawnhelper":
            pid = posix_spawn(l, "idle")
        if pid:
            time.sleep(0.3)
        got = echo_here(l, port)
        if pid:
            os.waitpid(pid, 0)
        print("echo ok" if got == b"ping" else "no echo: %s" % (got,))
        return 0 if got == b"ping" else 1
    if sys.argv[1] == "exec":
        pid = spawn(l, "child")
    elif sys.argv[1] in ("argv", "rawexec"):
        pid = spawn(l, sys.argv[1])
    elif sys.argv[1] == "sysargv":
        pid = sysargv(l)
    elif sys.argv[1] == "spawn":
        pid = posix_spawn(l, "child")
    elif sys.argv[1] == "system":
        pid = system(l)  # (the background child is the shell's, not ours to wait for)
    else:
        a, b = socket.socketpair(socket.AF_UNIX)
        pid = os.fork()
        if pid == 0:
            _, fds, _, _ = socket.recv_fds(b, 1, 1)
            serve(fds[0])
            os._exit(0)
        socket.send_fds(a, [b"l"], [l.fileno()])
    time.sleep(0.3)
    c = socket.create_connection(("127.0.0.1", port), timeout=8)
    c.sendall(b"ping")
    try:
        got = c.recv(4)
    except OSError as e:
        got = repr(e)
    if pid:
        os.waitpid(pid, 0)
    print("echo ok" if got == b"ping" else "no echo: %s" % (got,))
    return 0 if got == b"ping" else 1


if __name__ == "__main__":
    sys.exit(main())
