"""Kept-alive outbound connections (anonml.outbound.KeepAlive): reused, and replaced once when stale."""

from __future__ import annotations

import socket

from anonml.outbound import KeepAlive, post
from tests.peer.test_relay_batch import capture  # noqa: F401 - a fixture, registered by import


def _origin(url: str) -> tuple[str, str, int | None]:
    host, _, port = url.removeprefix("http://").partition(":")
    return ("http", host, int(port))


def test_a_connection_whose_answer_was_read_in_full_carries_the_next_request(capture):  # noqa: F811
    keep = KeepAlive()
    assert post(f"{capture.url}/intake", b"{}", "application/json", keep_alive=keep).status == 201
    first = keep.take(_origin(capture.url))
    assert first is not None and first.sock is not None
    keep.give(_origin(capture.url), first)
    assert post(f"{capture.url}/intake", b"{}", "application/json", keep_alive=keep).status == 201
    assert keep.take(_origin(capture.url)) is first  # the same connection, back again
    assert len(capture.received) == 2
    first.close()


def test_a_kept_connection_closed_meanwhile_is_replaced_within_the_same_request(capture):  # noqa: F811
    keep = KeepAlive()
    assert post(f"{capture.url}/intake", b"{}", "application/json", keep_alive=keep).status == 201
    stale = keep.take(_origin(capture.url))
    assert stale is not None
    stale.sock.shutdown(socket.SHUT_RDWR)  # as if the other side had dropped it
    keep.give(_origin(capture.url), stale)
    assert post(f"{capture.url}/intake", b"{}", "application/json", keep_alive=keep).status == 201
    replaced = keep.take(_origin(capture.url))
    assert replaced is not None and replaced is not stale and stale.sock is None
    assert len(capture.received) == 2


def test_idle_connections_are_bounded_per_origin_and_expire():
    keep = KeepAlive(per_origin=2, idle_seconds=0.0)

    class Fake:
        closed = 0
        sock = object()

        def close(self) -> None:
            Fake.closed += 1

    origin = ("http", "127.0.0.1", 9)
    for _ in range(3):
        keep.give(origin, Fake())  # type: ignore[arg-type]
    assert Fake.closed == 1  # the third is not kept
    assert keep.take(origin) is None and Fake.closed == 3  # idle past idle_seconds: closed, not reused
