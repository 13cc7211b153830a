"""The one of each of :mod:`anonml.serving`: body cap, bearer check, thread starter, child-process handle.

Servers are real uvicorn on loopback reached with ``requests``; child processes are real interpreters.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests
from fastapi import Depends, FastAPI, Header, Request

from anonml import serving
from anonml.serving import (
    BodyTooLarge,
    ChildServer,
    bearer_matches,
    declared_over,
    read_body,
    require_bearer,
    serve_in_thread,
    wait_answering,
)
from tests.waiting import wait_until


def _receive(*chunks: bytes, disconnect: bool = False):
    """An ASGI ``receive`` yielding ``chunks`` as one streamed body (then a disconnect, if asked)."""
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or disconnect}
        for i, c in enumerate(chunks)
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})

    async def receive():
        return messages.pop(0)

    return receive


def test_read_body_joins_the_chunks_up_to_the_cap_and_refuses_one_byte_more() -> None:
    assert asyncio.run(read_body(_receive(b"ab", b"cd", b"e"), 5)) == b"abcde"
    with pytest.raises(BodyTooLarge):
        asyncio.run(read_body(_receive(b"ab", b"cd", b"ef"), 5))


def test_read_body_is_none_when_the_client_left_before_the_end() -> None:
    assert asyncio.run(read_body(_receive(b"ab", disconnect=True), 5)) is None


def test_declared_over_reads_content_length_and_counts_a_non_number_as_over() -> None:
    assert declared_over([(b"content-length", b"6")], 5)
    assert not declared_over([(b"content-length", b"5")], 5)
    assert not declared_over([(b"content-type", b"application/json")], 5)
    assert declared_over([(b"content-length", b"5x")], 5)


@pytest.mark.parametrize(
    ("header", "expected", "matches"),
    [
        ("Bearer s3cret", "s3cret", True),
        ("bearer s3cret", "s3cret", True),  # the scheme is case-insensitive (RFC 6750 §2.1, RFC 7235)
        ("Bearer s3cre", "s3cret", False),
        ("Basic s3cret", "s3cret", False),
        ("s3cret", "s3cret", False),
        (None, "s3cret", False),
        ("Bearer ", "", False),  # an empty expected token opens nothing
    ],
)
def test_bearer_matches(header: str | None, expected: str, matches: bool) -> None:
    assert bearer_matches(header, expected) is matches


@pytest.fixture
def guarded() -> Iterator[serving.ThreadedServer]:
    """A real server: ``/admin`` behind :func:`require_bearer`, ``/echo`` behind a 16-byte body cap."""
    app = FastAPI()

    def admin(authorization: str | None = Header(None)) -> None:
        require_bearer(authorization, "tok", "token required")

    @app.get("/admin", dependencies=[Depends(admin)])
    def admin_page() -> dict:
        return {"ok": True}

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"size": len(await request.body())}

    app.add_middleware(serving.BodyLimit, max_bytes=16)
    served = serve_in_thread(app, name="serving test", lifespan="off")
    yield served
    served.stop()


def test_serve_in_thread_serves_at_its_url_and_stop_ends_the_thread(guarded: serving.ThreadedServer) -> None:
    assert guarded.url.startswith("http://127.0.0.1:") and not guarded.url.endswith(":0")
    refused = requests.get(f"{guarded.url}/admin", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    assert refused.json() == {"detail": "token required"}
    assert requests.get(f"{guarded.url}/admin", headers={"Authorization": "Bearer tok"}, timeout=30).ok
    assert requests.post(f"{guarded.url}/echo", data=b"x" * 16, timeout=30).json() == {"size": 16}
    over = requests.post(f"{guarded.url}/echo", data=b"x" * 17, timeout=30)
    assert over.status_code == 413 and "16 bytes" in over.json()["detail"]
    streamed = requests.post(f"{guarded.url}/echo", data=iter([b"x" * 10, b"x" * 10]), timeout=30)
    assert streamed.status_code == 413  # no content-length: refused once the stream passes the cap
    guarded.stop()
    assert not guarded.thread.is_alive()


def _child(code: str) -> subprocess.Popen:
    pipe = subprocess.PIPE
    return subprocess.Popen([sys.executable, "-c", code], stdin=pipe, stdout=pipe, text=True)


def test_child_server_stops_a_child_at_stdin_eof_or_by_its_signal() -> None:
    at_eof = ChildServer("", _child("import sys; sys.stdin.read(); sys.exit(7)"), stop_signal=None)
    at_eof.stop()
    assert at_eof.process.returncode == 7  # it ended on its own, at EOF: not killed
    signalled = ChildServer("", _child("import time; time.sleep(600)"))
    signalled.stop()
    assert signalled.process.returncode == -signal.SIGTERM
    assert signalled.process.stdout.closed


def test_wait_answering_names_a_child_that_exited_before_it_answered() -> None:
    process = _child("import sys; sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"the test child exited with 3 before it answered"):
        wait_answering(f"http://127.0.0.1:{serving.free_port()}", process, what="the test child", timeout=60)


def test_wait_answering_returns_once_healthz_answers_and_kills_a_child_that_never_does(
    guarded: serving.ThreadedServer,
) -> None:
    process = _child("import time; time.sleep(600)")
    try:
        wait_answering(guarded.url, process, what="the test child", timeout=60)
        assert process.poll() is None  # it answered: the child is left running
        silent = f"http://127.0.0.1:{serving.free_port()}"
        with pytest.raises(RuntimeError, match=r"the test child did not answer .*/healthz in 0.5 s"):
            wait_answering(silent, process, what="the test child", timeout=0.5)
        assert process.poll() is not None  # killed when its time ran out
    finally:
        if process.poll() is None:
            process.kill()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


#: A parent that starts a witness from a worker thread (as the demo does), prints its pid, and waits.
_WITNESS_PARENT = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from witness.app import start_witness_process
with ThreadPoolExecutor(1) as pool:
    served = pool.submit(start_witness_process, Path(sys.argv[1])).result()
print(served.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_witness_child_ends_when_its_parent_is_killed(tmp_path) -> None:
    # SIGKILL: no handler of the parent runs, so only the lifeline can end the witness.
    root, env = serving.child_environment()
    parent = subprocess.Popen(
        [sys.executable, "-c", _WITNESS_PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=root,
        env=env,
    )
    witness_pid = -1
    try:
        witness_pid = int(parent.stdout.readline())
        assert _alive(witness_pid)
        parent.kill()
        parent.wait(timeout=30)
        wait_until(lambda: not _alive(witness_pid), 60, "the orphaned witness to end")
    finally:
        parent.kill()
        if witness_pid > 0 and _alive(witness_pid):
            os.kill(witness_pid, signal.SIGKILL)


def test_free_port_is_bindable_and_below_the_ephemeral_range_the_kernel_states() -> None:
    low = serving.sockets._ephemeral_low()
    ports = {serving.free_port() for _ in range(20)}
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it
        if low is not None and low > serving.sockets.LOWEST_FREE_PORT + 1000:
            assert serving.sockets.LOWEST_FREE_PORT <= port < low  # never a source port's range
    assert len(ports) > 1  # drawn, not one fixed port
