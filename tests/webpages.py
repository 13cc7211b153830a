"""Test-side helpers for the pages (peer dashboard, aggregator console): log in, read CSRF tokens."""

from __future__ import annotations

import re

import requests

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a page."""
    found = _CSRF.search(html)
    assert found is not None, "no form with a CSRF token on the page"
    return found.group(1)


def login(url: str, prefix: str, token: str) -> tuple[requests.Session, str]:
    """A browser-like session logged in under ``prefix`` and the CSRF token of its first page."""
    http = requests.Session()
    form = http.get(f"{url}{prefix}/login", timeout=30)
    assert form.status_code == 200, form.text
    reply = http.post(
        f"{url}{prefix}/login",
        data={"csrf": csrf_of(form.text), "token": token},
        timeout=30,
        allow_redirects=False,
    )
    assert reply.status_code == 303, reply.text
    page = http.get(f"{url}{prefix}/", timeout=30)
    assert page.status_code == 200, page.text
    return http, csrf_of(page.text)
