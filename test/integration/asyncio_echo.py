"""asyncio echo server and client for test_asyncio.sh.

    asyncio_echo.py server PORT
    asyncio_echo.py client PORT [CONNECTIONS [MESSAGES [SEED]]]

server: asyncio.start_server on 127.0.0.1, echoes every byte in order, closes after the
    client's EOF; SIGTERM stops it and it returns from main (so a preloaded interpreter
    writes its stats line), printing "served N connections, B bytes".
client: CONNECTIONS concurrent connections share MESSAGES messages of random sizes
    (1 B .. 256 KiB, seeded); each connection writes a message, reads the echo with
    readexactly() and compares it, then writes EOF and expects EOF back. Prints
    "asyncio client: connections C messages M bytes B: ok" and exits 0 only if all matched.
"""
import asyncio
import random
import signal
import sys


async def serve(port):
    stats = {"conns": 0, "bytes": 0}

    async def handle(reader, writer):
        stats["conns"] += 1
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
                stats["bytes"] += len(data)
        except ConnectionError:
            pass
        finally:
            writer.close()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await stop.wait()
    print("served %d connections, %d bytes" % (stats["conns"], stats["bytes"]), flush=True)


def message_sizes(rng, n):
    sizes = []
    for i in range(n):
        r = rng.random()
        if r < 0.4:
            sizes.append(rng.randint(1, 100))
        elif r < 0.8:
            sizes.append(rng.randint(101, 16384))
        else:
            sizes.append(rng.randint(16385, 262144))
    sizes[0] = 1
    sizes[-1] = 262144
    return sizes


async def one_connection(port, cid, sizes, seed):
    rng = random.Random(seed * 1000 + cid)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    total = 0
    for n in sizes:
        msg = rng.randbytes(n)
        writer.write(msg)
        await writer.drain()
        echo = await reader.readexactly(n)
        if echo != msg:
            raise RuntimeError("connection %d: echo of a %d-byte message differs" % (cid, n))
        total += n
    writer.write_eof()
    rest = await reader.read()
    if rest != b"":
        raise RuntimeError("connection %d: %d extra bytes before EOF" % (cid, len(rest)))
    writer.close()
    await writer.wait_closed()
    return total


async def client(port, conns, msgs, seed):
    sizes = message_sizes(random.Random(seed), msgs)
    share = [sizes[i::conns] for i in range(conns)]
    totals = await asyncio.wait_for(
        asyncio.gather(*(one_connection(port, c, share[c], seed) for c in range(conns))), 40)
    print("asyncio client: connections %d messages %d bytes %d: ok" % (conns, msgs, sum(totals)))


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("server", "client"):
        sys.exit(__doc__)
    port = int(sys.argv[2])
    if sys.argv[1] == "server":
        asyncio.run(serve(port))
        return
    conns = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    msgs = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 12345
    asyncio.run(client(port, conns, msgs, seed))


if __name__ == "__main__":
    main()
