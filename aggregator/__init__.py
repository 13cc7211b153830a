"""The aggregator server: problems, registration, medians, tokens, anonymous intake, training.

A FastAPI app (:func:`aggregator.app.create_app`) served by uvicorn, with its
state in SQLAlchemy (SQLite by default, any URL). It meets peers only through
:mod:`anonml.protocol` messages over HTTP and never imports :mod:`peer`.
"""

from aggregator.app import create_app, serve
from aggregator.settings import AggregatorSettings

__all__ = ["AggregatorSettings", "create_app", "serve"]
