"""The aggregator server: problems, registration, medians, tokens, anonymous intake, training.

A FastAPI app (:func:`aggregator.app.create_app`) served by uvicorn, with its
state in SQLAlchemy (SQLite by default, any URL). It meets peers only through
:mod:`anonml.protocol` messages over HTTP and never imports :mod:`peer`.

The names below load their module on first use (:mod:`anonml.lazy`): importing
one submodule (``aggregator.settings``, ``aggregator.db``) must not build the
whole app and every route's schemas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anonml.lazy import lazy_exports

if TYPE_CHECKING:
    from aggregator.app import create_app, serve
    from aggregator.settings import AggregatorSettings

__all__ = ["AggregatorSettings", "create_app", "serve"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"AggregatorSettings": "aggregator.settings", "create_app": "aggregator.app", "serve": "aggregator.app"},
    globals(),
)
