"""What the peer's dashboard and the aggregator's console share: login, CSRF, forms, pages, SVG charts.

Both pages are server-rendered from the roles' FastAPI apps (Jinja2, autoescape
on, so every string from an aggregator or a file name is escaped), with one
small script (``static/live.js``) that polls JSON and rewrites text nodes only.
Nothing is loaded from anywhere but the app itself: the Content-Security-Policy
of every page says so (``default-src 'self'``).

Login
    The role's token (the peer's local token, the aggregator's admin token)
    is typed once into a form and compared in constant time. A match opens a
    server-side session: a random 256-bit id in a cookie that is ``HttpOnly``
    (no script reads it), ``SameSite=Strict`` (no other site's page sends it)
    and scoped to the pages' path. Sessions live in the process's memory and
    end after :data:`SESSION_SECONDS`, at logout, or when the server restarts.
CSRF
    Each session holds a random token, put in every form as a hidden field and
    compared in constant time with the session's on every POST; the login form
    itself uses a double-submit pair (a cookie and the same value in the form).
    A POST without it, or with another, is refused with 403 before it acts.
Forms
    Read from ``application/x-www-form-urlencoded`` bodies only (at most
    :data:`FORM_LIMIT` bytes, each field once); anything else is a 4xx naming it.
    A POST that acts answers with a redirect to a page (POST/redirect/GET), so a
    reload never sends it again: its outcome named in the redirect's query when
    it is one of the page's fixed notices, else (a refusal's reason) kept in the
    session for the next page it renders (:meth:`WebAuth.flash`).
Untrusted text
    Every value a template prints goes through
    :func:`anonml.text.strip_controls` (the same function as the commands'
    output): no bidi override, zero-width or control character reaches a page
    or a tab title.
API docs
    :func:`local_api_docs` serves FastAPI's ``/docs`` from the Swagger UI 5
    files the ``swagger-ui-bundle-v2`` package ships (version 5 reads the
    OpenAPI 3.1 FastAPI writes), so no server page loads anything from
    another origin.
"""

from __future__ import annotations

import hmac
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup, escape

from anonml.text import strip_controls

if TYPE_CHECKING:
    from jinja2 import Environment

__all__ = [
    "SESSION_SECONDS",
    "FORM_LIMIT",
    "SECURITY_HEADERS",
    "WebSession",
    "WebAuth",
    "Pages",
    "read_form",
    "Series",
    "svg_step_chart",
    "svg_timeline",
    "epsilon_sentence",
    "countdown",
    "local_api_docs",
]

#: How long a login lasts (seconds).
SESSION_SECONDS = 12 * 3600
#: Largest form body accepted (bytes).
FORM_LIMIT = 64 * 1024
_HERE = Path(__file__).resolve().parent
TEMPLATES = _HERE / "templates"
STATIC = _HERE / "static"
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}

#: Sent with every page: nothing but the app itself is loaded, nothing frames it, nothing is cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class WebSession:
    """One logged-in browser: its id (the cookie), its CSRF token and when it ends (monotonic)."""

    sid: str
    csrf: str
    expires: float
    #: Outcomes of the last POSTs, ``(kind, text)`` with kind ``notice`` or ``error``, shown once by the
    #: page the POST redirected to (:meth:`Pages.render` takes them).
    flashes: list[tuple[str, str]] = field(default_factory=list)


class _SessionStore:
    """The live sessions of one app (kept on ``app.state``, so two apps never share a login)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, WebSession] = {}


_STORE_LOCK = threading.Lock()


@dataclass(frozen=True)
class WebAuth:
    """Token login, session cookies and CSRF checks for the pages under ``prefix``.

    Parameters
    ----------
    prefix : str
        Path the pages live under (``/ui``, ``/console``); the cookies are scoped to it.
    cookie : str
        Name of the session cookie (one per role, so a peer and an aggregator
        on the same host never read each other's).
    token_of : callable
        The expected token of the app serving a request.
    what : str
        What the token is called on the login page ("local token", "admin token").
    """

    prefix: str
    cookie: str
    token_of: Callable[[Request], str]
    what: str

    @property
    def login_cookie(self) -> str:
        return f"{self.cookie}_login"

    def _store(self, request: Request) -> _SessionStore:
        name = f"web_sessions_{self.cookie}"
        with _STORE_LOCK:
            store = getattr(request.app.state, name, None)
            if store is None:
                store = _SessionStore()
                setattr(request.app.state, name, store)
        return store

    def login(self, request: Request, typed: str) -> WebSession | None:
        """A new session if ``typed`` is the app's token (constant-time), else None."""
        expected = self.token_of(request)
        if not expected or not hmac.compare_digest(typed.encode(), expected.encode()):
            return None
        session = WebSession(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.monotonic() + SESSION_SECONDS
        )
        store = self._store(request)
        with store.lock:
            now = time.monotonic()
            for sid in [s for s, v in store.sessions.items() if v.expires <= now]:
                del store.sessions[sid]
            store.sessions[session.sid] = session
        return session

    def logout(self, request: Request, session: WebSession) -> None:
        store = self._store(request)
        with store.lock:
            store.sessions.pop(session.sid, None)

    def session(self, request: Request) -> WebSession | None:
        """The live session named by the request's cookie, or None."""
        sid = request.cookies.get(self.cookie, "")
        store = self._store(request)
        with store.lock:
            found = store.sessions.get(sid)
            if found is not None and found.expires <= time.monotonic():
                del store.sessions[sid]
                found = None
        return found

    def require(self, request: Request) -> WebSession:
        """The session, or a redirect to the login page (303) for a page, 401 for a JSON poll."""
        found = self.session(request)
        if found is not None:
            return found
        if request.url.path.startswith(f"{self.prefix}/api/"):
            raise HTTPException(status_code=401, detail=f"log in with the {self.what} first")
        raise HTTPException(
            status_code=303, detail="log in first", headers={"Location": f"{self.prefix}/login"}
        )

    def check_csrf(self, session: WebSession, form: dict[str, str]) -> None:
        """403 unless the form's ``csrf`` field is the session's token (constant-time)."""
        if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode()):
            raise HTTPException(status_code=403, detail="missing or wrong CSRF token: reload the page")

    def flash(self, request: Request, session: WebSession, kind: str, text: str) -> None:
        """Keep ``text`` (``kind`` ``notice`` or ``error``) for the next page this session renders."""
        if kind not in ("notice", "error"):
            raise ValueError(f"a flash is a notice or an error, not {kind!r}")
        with self._store(request).lock:
            session.flashes.append((kind, text))

    def take_flashes(self, request: Request, session: WebSession) -> list[tuple[str, str]]:
        with self._store(request).lock:
            taken, session.flashes[:] = list(session.flashes), []
        return taken

    async def posted(self, request: Request, limit: int = FORM_LIMIT) -> tuple[WebSession, dict[str, str]]:
        """A logged-in POST: its session and form (at most ``limit`` bytes), the CSRF token checked
        (the order: auth, then CSRF)."""
        session = self.require(request)
        form = await read_form(request, limit)
        self.check_csrf(session, form)
        return session, form

    def set_session_cookie(self, response: Response, session: WebSession) -> None:
        response.set_cookie(
            self.cookie, session.sid, max_age=SESSION_SECONDS, path=self.prefix,
            httponly=True, samesite="strict",
        )
        response.delete_cookie(self.login_cookie, path=self.prefix, httponly=True, samesite="strict")


async def read_form(request: Request, limit: int = FORM_LIMIT) -> dict[str, str]:
    """The fields of an urlencoded form body, each given at most once.

    Raises
    ------
    HTTPException
        415 for a non-empty body of another content type, 413 past ``limit`` bytes, 400 for a
        field given twice. An empty body is an empty form.
    """
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise HTTPException(status_code=413, detail=f"form larger than {limit} bytes")
    if not body:
        return {}  # an empty form, whatever it claims to be (its CSRF check then fails)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(
            status_code=415, detail=f"a form must be application/x-www-form-urlencoded, not {kind[:60]!r}"
        )
    fields: dict[str, str] = {}
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(status_code=400, detail=f"unreadable form: {exc}") from None
    for name, value in pairs:
        if name in fields:
            raise HTTPException(status_code=400, detail=f"form field {name[:40]!r} given twice")
        fields[name] = value
    return fields


class Pages:
    """The templates of one role (its own folder first, then the shared ``base.html``) and its routes.

    :meth:`router` gives the login, logout and static-file routes under the
    auth's prefix; :meth:`render` a page with the security headers.
    """

    def __init__(
        self,
        folder: Path,
        auth: WebAuth,
        title: str,
        nav: Sequence[tuple[str, str]],
        template_globals: Mapping[str, Any] | None = None,
    ) -> None:
        self.auth = auth
        self.title = title
        self.nav = tuple(nav)
        self.folder = folder
        self.template_globals = dict(template_globals or {})

    @cached_property
    def env(self) -> Environment:
        """The Jinja2 environment, built on the first page rendered: a service answers its API
        and ``/healthz`` without importing Jinja2 (issue 31, the aggregator's cold start)."""
        from jinja2 import ChoiceLoader, Environment, FileSystemLoader, StrictUndefined

        env = Environment(
            loader=ChoiceLoader([FileSystemLoader(self.folder), FileSystemLoader(TEMPLATES)]),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters["eps"] = _eps
        env.filters["when"] = _when
        env.filters["path"] = _path
        env.filters["countdown"] = countdown
        env.finalize = _inert  # every printed value, page and tab title alike
        env.globals.update(self.template_globals)
        return env


    def render(
        self, request: Request, name: str, session: WebSession | None, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        if session is not None:
            for kind, text in self.auth.take_flashes(request, session):
                if not context.get(kind):  # a page's own notice or error (a 4xx) comes first
                    context[kind] = text
        page = self.env.get_template(name).render(
            request=request,
            prefix=self.auth.prefix,
            site=self.title,
            nav=self.nav,
            here=request.url.path,
            csrf=session.csrf if session is not None else "",
            logged_in=session is not None,
            **({"notice": "", "error": ""} | context),
        )
        return HTMLResponse(page, status_code=status_code, headers=SECURITY_HEADERS)

    def router(self) -> APIRouter:
        """``GET/POST login``, ``POST logout``, ``GET static/{name}``, to include under the auth's prefix."""
        auth = self.auth
        router = APIRouter(include_in_schema=False)

        @router.get("/login")
        def login_form(request: Request) -> HTMLResponse:
            pair = secrets.token_urlsafe(24)
            response = self.render(request, "login.html", None, what=auth.what, login_csrf=pair, error="")
            response.set_cookie(
                auth.login_cookie, pair, max_age=3600, path=auth.prefix, httponly=True, samesite="strict"
            )
            return response

        @router.post("/login")
        async def login(request: Request) -> Response:
            form = await read_form(request)
            pair = request.cookies.get(auth.login_cookie, "")
            if not pair or not hmac.compare_digest(form.get("csrf", "").encode(), pair.encode()):
                raise HTTPException(status_code=403, detail="missing or wrong CSRF token: reload the page")
            session = auth.login(request, form.get("token", "").strip())
            if session is None:
                response = self.render(
                    request, "login.html", None, 401, what=auth.what, login_csrf=pair,
                    error=f"That is not this server's {auth.what}.",
                )
                return response
            redirect = RedirectResponse(f"{auth.prefix}/", status_code=303, headers=SECURITY_HEADERS)
            auth.set_session_cookie(redirect, session)
            return redirect

        @router.post("/logout")
        async def logout(request: Request) -> Response:
            session, _ = await auth.posted(request)
            auth.logout(request, session)
            redirect = RedirectResponse(f"{auth.prefix}/login", status_code=303)
            redirect.delete_cookie(auth.cookie, path=auth.prefix, httponly=True, samesite="strict")
            return redirect

        @router.get("/static/{name}")
        def static(name: str) -> Response:
            path = STATIC / name
            kind = _STATIC_TYPES.get(path.suffix)
            if kind is None or path.parent != STATIC or not path.is_file():
                raise HTTPException(status_code=404, detail=f"no static file {name[:60]!r}")
            return Response(path.read_bytes(), media_type=kind, headers={"X-Content-Type-Options": "nosniff"})

        return router


def _inert(value: Any) -> Any:
    """A value about to be printed, without the characters that reorder or hide text (:mod:`anonml.text`).

    Markup (a chart) stays markup: removing control characters cannot make a tag.
    """
    if isinstance(value, Markup):
        return Markup(strip_controls(str(value)))
    if isinstance(value, str):
        return strip_controls(value)
    return value


def _path(value: Any) -> Markup:
    """A file path (escaped) that a narrow column breaks after its separators, not at any character."""
    return Markup(_SEPARATOR.sub(r"\1<wbr>", str(escape(strip_controls(str(value))))))


#: Where a path may break: after a separator (escaping leaves ``/`` and ``\\`` as they are).
_SEPARATOR = re.compile(r"([/\\])")


def _eps(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _when(value: Any) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M")


def countdown(at: float, now: float) -> str:
    """How far ``at`` is from ``now`` (POSIX seconds), as ``"in 2 min 05 s"`` or ``"5 s ago"``.

    ``static/live.js`` rewrites the same text every second from the element's
    ``data-deadline`` (the same format), so the page without JavaScript says it once.
    """
    seconds = round(at - now)
    span = abs(seconds)
    hours, rest = divmod(span, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        text = f"{hours} h {minutes:02d} min"
    elif minutes:
        text = f"{minutes} min {secs:02d} s"
    else:
        text = f"{secs} s"
    return f"in {text}" if seconds > 0 else ("now" if seconds == 0 else f"{text} ago")


def epsilon_sentence(epsilon: float) -> str:
    """ε in one plain sentence: the likelihood-ratio bound ``e^ε`` of ε-differential privacy.

    Whatever is released, its probability with your real data is at most
    ``e^ε`` times its probability with any other data you could have had
    (Dwork & Roth 2014, def. 2.4, applied locally to one person's report).
    """
    return (
        f"Whatever the aggregator receives from you is at most {math.exp(epsilon):.3g} times "
        f"(e^{epsilon:g}) more or less likely with your real data than with any other data you "
        "could have had."
    )


# -- SVG charts, rendered on the server ------------------------------------------------

#: Colours of the series (a colour-blind-safe palette, Okabe & Ito 2008).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


@dataclass(frozen=True)
class Series:
    """One line of a step chart: a label and its points ``(x, y)`` in increasing ``x``."""

    label: str
    points: tuple[tuple[float, float], ...]


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def svg_step_chart(
    series: Sequence[Series],
    *,
    cap: float | None = None,
    cap_label: str = "cap",
    x_label: str = "",
    y_label: str = "",
    width: int = 640,
    height: int = 260,
) -> Markup:
    """A step chart (each series holds its value until its next point) with a dashed ``cap`` line.

    Axes start at 0; the y range covers every point and the cap; labels are
    escaped. With no points it says so instead of drawing empty axes.
    """
    points = [p for s in series for p in s.points]
    if not points:
        return Markup('<p class="muted">Nothing to chart yet.</p>')
    left, right, top, bottom = 48, 150, 12, 38
    x_max = max(x for x, _ in points) or 1.0
    x_min = min(x for x, _ in points)
    y_max = max([y for _, y in points] + ([cap] if cap is not None else [])) * 1.1 or 1.0
    span = (x_max - x_min) or 1.0

    def px(x: float) -> float:
        return left + (x - x_min) / span * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - y / y_max * (height - top - bottom)

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(y_label)}">',
        f'<line x1="{left}" y1="{_fmt(py(0))}" x2="{width - right}" y2="{_fmt(py(0))}" stroke="#999"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{_fmt(py(0))}" stroke="#999"/>',
    ]
    for tick in _ticks(y_max):
        parts.append(
            f'<text x="{left - 6}" y="{_fmt(py(tick) + 4)}" text-anchor="end" class="tick">{tick:g}</text>'
            f'<line x1="{left}" y1="{_fmt(py(tick))}" x2="{width - right}" y2="{_fmt(py(tick))}" '
            'stroke="#eee"/>'
        )
    for tick in _ticks(x_max - x_min) if x_max > x_min else [0.0]:
        parts.append(
            f'<text x="{_fmt(px(x_min + tick))}" y="{_fmt(py(0) + 14)}" text-anchor="middle" class="tick">'
            f"{x_min + tick:g}</text>"
        )
    if cap is not None:
        parts.append(
            f'<line x1="{left}" y1="{_fmt(py(cap))}" x2="{width - right}" y2="{_fmt(py(cap))}" '
            'stroke="#c00" stroke-dasharray="6 4"/>'
            f'<text x="{width - right + 6}" y="{_fmt(py(cap) + 4)}" class="legend" fill="#c00">'
            f"{escape(cap_label)}</text>"
        )
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        path: list[str] = []
        previous: float | None = None
        for x, y in s.points:
            if previous is None:
                path.append(f"M{_fmt(px(x))},{_fmt(py(0))} L{_fmt(px(x))},{_fmt(py(y))}")
            else:
                path.append(f"L{_fmt(px(x))},{_fmt(py(previous))} L{_fmt(px(x))},{_fmt(py(y))}")
            previous = y
        last_x, last_y = s.points[-1] if s.points else (x_min, 0.0)
        path.append(f"L{width - right},{_fmt(py(last_y))}")
        parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2"/>')
        ly = top + 14 + 16 * i
        parts.append(
            f'<rect x="{width - right + 6}" y="{ly + 30 - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{width - right + 20}" y="{ly + 30}" class="legend">{escape(s.label[:20])}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" text-anchor="middle" class="axis">'
        f"{escape(x_label)}</text>"
        f'<text x="12" y="{top + 4}" class="axis">{escape(y_label)}</text></svg>'
    )
    return Markup("".join(parts))


def _ticks(top: float) -> list[float]:
    """About four round tick values in [0, top]."""
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [k * step for k in range(int(top / step) + 1)]


def svg_timeline(segments: Sequence[tuple[str, float]], *, width: int = 640, height: int = 54) -> Markup:
    """A horizontal bar of consecutive phases, each as wide as its seconds, labelled (escaped)."""
    total = sum(max(0.0, s) for _, s in segments)
    if total <= 0:
        return Markup('<p class="muted">No phase has finished yet.</p>')
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="phase timeline">'
    ]
    x = 0.0
    for i, (name, seconds) in enumerate(segments):
        w = max(0.0, seconds) / total * width
        colour = PALETTE[i % len(PALETTE)]
        parts.append(
            f'<rect x="{_fmt(x)}" y="4" width="{_fmt(w)}" height="22" fill="{colour}">'
            f"<title>{escape(name)}: {seconds:.2f} s</title></rect>"
        )
        if w > 60:
            parts.append(
                f'<text x="{_fmt(x + 4)}" y="42" class="legend">{escape(name)} {seconds:.1f} s</text>'
            )
        x += w
    parts.append("</svg>")
    return Markup("".join(parts))


# -- API docs, served from this process ----------------------------------------------------

#: What the docs page may load: its own origin only (its one inline script starts Swagger UI).
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
)
_DOCS_TYPES = {
    ".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".png": "image/png"
}
_DOCS_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")


def local_api_docs(app: FastAPI, title: str) -> None:
    """``GET /docs``: Swagger UI for the app's ``/openapi.json``, its files served by the app itself.

    FastAPI's own ``/docs`` loads Swagger UI from a CDN and its favicon from
    FastAPI's site; the app is made with ``docs_url=None, redoc_url=None`` and
    this serves the same page from the files of the ``swagger-ui-bundle-v2``
    package, with the validator badge (an image from swagger.io) off and a
    Content-Security-Policy of this origin only.
    """
    from swagger_ui_bundle import swagger_ui_path  # the package's folder of Swagger UI files

    folder = Path(swagger_ui_path)

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} — API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers.update({**SECURITY_HEADERS, "Content-Security-Policy": DOCS_POLICY,
                             "Cache-Control": "no-cache"})
        return page

    @app.get("/docs/static/{name}", include_in_schema=False)
    def docs_file(name: str) -> Response:
        if name not in _DOCS_FILES:
            raise HTTPException(status_code=404, detail=f"no docs file {name[:60]!r}")
        path = folder / name
        return Response(
            path.read_bytes(), media_type=_DOCS_TYPES[path.suffix],
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=3600"},
        )
