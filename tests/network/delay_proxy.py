"""``python -m tests.network.delay_proxy LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS``.

A TCP relay that adds latency where the kernel has no ``netem``: every chunk read from one
side is written to the other ``DELAY_MS`` milliseconds after it arrived, in order, in both
directions — a link with that one-way delay and no rate limit. TLS passes through untouched
(the client verifies the certificate of the server behind it). Prints ``ready`` on stdout
once it listens and runs until its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys
import threading


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read (order kept)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            chunk = await reader.read(65536)
            queue.put_nowait((loop.time() + delay, chunk))
            if not chunk:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def _serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(
                _pipe(client_r, server_w, delay), _pipe(server_r, client_w, delay), return_exceptions=True
            )
        except asyncio.CancelledError:
            pass  # the proxy is stopping: its connections end with it
        finally:
            client_w.close()
            server_w.close()

    server = await asyncio.start_server(handle, *listen)
    print("ready", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()

    def wait_for_eof() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed our stdin
        loop.call_soon_threadsafe(stopped.set)

    threading.Thread(target=wait_for_eof, daemon=True).start()
    async with server:
        await stopped.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    listen_host, listen_port, target_host, target_port, delay_ms = argv
    listen, target = (listen_host, int(listen_port)), (target_host, int(target_port))
    asyncio.run(_serve(listen, target, int(delay_ms) / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
