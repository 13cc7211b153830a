"""One router per resource; :func:`aggregator.app.create_app` mounts them."""
