"""``python -m aggregator``: serve one aggregator whose settings arrive as JSON on stdin.

Used by :func:`aggregator.app.start_server_process` (the demo, the benchmark)
to put the aggregator on its own core; people use ``anonml aggregator serve``.
"""

from aggregator.app import serve_child

if __name__ == "__main__":
    serve_child()
