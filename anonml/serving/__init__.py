"""What the aggregator, the peer host and the witness share to serve HTTP — one of each, by idea.

- :mod:`~anonml.serving.sockets`: the listening socket (:func:`bind`, :func:`free_port`), the TLS
  certificate a service serves with (:class:`ServerTls`, :class:`TlsSettings`), its :func:`base_url`.
- :mod:`~anonml.serving.connections`: per-connection deadlines and limits against slow or greedy
  clients (:class:`ConnectionLimits`, :class:`GuardedH11Protocol`).
- :mod:`~anonml.serving.body`: the one body cap (:class:`BodyLimit`, :func:`read_body`).
- :mod:`~anonml.serving.bearer`: the one bearer-token check (:func:`require_bearer`).
- :mod:`~anonml.serving.admission`: the admission gate under overload (:class:`AdmissionGate`).
- :mod:`~anonml.serving.input_guards`: no request body makes a 500 (:func:`install_input_guards`).
- :mod:`~anonml.serving.running`: the one foreground runner (:func:`run_foreground`) and thread
  starter (:func:`serve_in_thread`, :func:`start_in_thread`).
- :mod:`~anonml.serving.children`: a service in a child process (:func:`spawn_child`,
  :class:`ChildServer`).

Every public name is re-exported here, so callers import from :mod:`anonml.serving`.
"""

from __future__ import annotations

from anonml.serving.admission import Admission, AdmissionGate, LaneStats, RouteClass
from anonml.serving.bearer import bearer_matches, require_bearer
from anonml.serving.body import (
    BodyLimit,
    BodyTooLarge,
    HttpMiddleware,
    declared_over,
    empty_receive,
    read_body,
    too_large_response,
)
from anonml.serving.children import (
    CHILD_START_SECONDS,
    ROOT,
    ChildServer,
    child_environment,
    ready_line,
    spawn_child,
    wait_answering,
)
from anonml.serving.connections import ConnectionLimits, GuardedH11Protocol, guarded_protocol
from anonml.serving.input_guards import (
    MAX_JSON_BODY_BYTES,
    FiniteJson,
    install_input_guards,
    non_finite_number,
    validation_error_response,
)
from anonml.serving.running import (
    ThreadedServer,
    keep_startup_objects,
    run_foreground,
    serve_in_thread,
    start_in_thread,
    uvicorn_options,
    uvicorn_server,
    wait_started,
)
from anonml.serving.sockets import ServerTls, TlsSettings, base_url, bind, free_port, server_tls

__all__ = [
    "bind",
    "free_port",
    "uvicorn_server",
    "uvicorn_options",
    "run_foreground",
    "keep_startup_objects",
    "ServerTls",
    "TlsSettings",
    "server_tls",
    "base_url",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "guarded_protocol",
    "start_in_thread",
    "serve_in_thread",
    "wait_started",
    "ThreadedServer",
    "HttpMiddleware",
    "BodyLimit",
    "BodyTooLarge",
    "declared_over",
    "read_body",
    "empty_receive",
    "bearer_matches",
    "require_bearer",
    "RouteClass",
    "Admission",
    "AdmissionGate",
    "LaneStats",
    "install_input_guards",
    "FiniteJson",
    "non_finite_number",
    "validation_error_response",
    "too_large_response",
    "MAX_JSON_BODY_BYTES",
    "ROOT",
    "child_environment",
    "spawn_child",
    "ready_line",
    "wait_answering",
    "ChildServer",
    "CHILD_START_SECONDS",
]
