"""What every ``anonml`` command shares: consoles, the error boundary, JSON output.

Rich tables go to stdout; progress and messages to stderr; an
:class:`~anonml.errors.AnonMLError` becomes one stderr line and exit code 1
(and, for a command run with ``--json``, one JSON document on stdout).

Both consoles print text as it is: Rich markup is off, so a file called
``records [old].json`` or a hint such as ``pip install 'anonml[plot]'`` is never
eaten as a style tag. Styled output is built from :class:`rich.text.Text`
(see :func:`styled`). When stdout is not a terminal (a pipe, a file, a test),
tables are laid out at full width instead of truncating paths to 80 columns.
Text that came from elsewhere (a proposal's title, an aggregator's reason, an
error message quoting either) goes through :func:`untrusted` before it is
printed: control characters and terminal escape sequences removed, length limited.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, Union, get_args, get_origin

import typer
from rich.console import Console
from rich.text import Text

from anonml.errors import AnonMLError, StoreError
from anonml.text import strip_controls

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "out",
    "err",
    "expected_errors",
    "error_document",
    "print_json",
    "parse_json_option",
    "ImporterParamsOption",
    "complete_importer",
    "styled",
    "flags_without_type",
    "ensure_port_free",
    "untrusted",
    "TlsCertOption",
    "TlsKeyOption",
    "CaBundleOption",
    "JsonOption",
    "valid_settings",
    "ModelFlag",
    "with_model_options",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

TlsCertOption = Annotated[
    Path | None,
    typer.Option("--tls-cert", help="Serve https with this PEM certificate chain (with --tls-key)."),
]
TlsKeyOption = Annotated[
    Path | None, typer.Option("--tls-key", help="The PEM private key of --tls-cert.")
]
CaBundleOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-bundle",
        help="Verify https certificates against this PEM bundle only (default $ANONML_CA_BUNDLE, "
        "else the system's store).",
    ),
]
#: ``--json`` of the command groups: stdout holds exactly one JSON document (:func:`print_json`).
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]

#: Width used when the stream is not a terminal: wide enough that no table cell is cut.
_UNBOUNDED = 100_000


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    interactive = hasattr(stream, "isatty") and stream.isatty()
    return Console(
        stderr=stderr,
        markup=False,
        highlight=False,
        soft_wrap=stderr,
        width=None if interactive else _UNBOUNDED,
    )


out = _console(stderr=False)
err = _console(stderr=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and ``(text, style)`` pairs; no text is read as markup.

    >>> styled(("error:", "bold red"), " cannot read [old].json").plain
    'error: cannot read [old].json'
    """
    return Text.assemble(*parts)


def flags_without_type() -> None:
    """Show boolean flags in ``--help`` as ``--flag`` / ``--flag/--no-flag``, not ``--flag <bool>``.

    Typer's Rich help prints a type column for every option, ``<bool>`` for
    flags, which reads as if the flag took a value. A flag takes none, so its
    type cell is left empty (idempotent; affects help only).
    """
    from typer.core import TyperOption

    if getattr(TyperOption.display_type_rich, "_anonml_flags", False):
        return
    typed = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return typed(self, ctx)

    display_type_rich._anonml_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def _wants_json() -> bool:
    """Whether the running command was given ``--json`` (every command names that flag ``as_json``)."""
    try:  # Typer >= 0.20 vendors Click: its own context stack is the one in use
        from typer._click.globals import get_current_context
    except ImportError:  # older Typer runs on Click itself
        from click import get_current_context

    ctx = get_current_context(silent=True)
    return bool(ctx is not None and ctx.params.get("as_json") is True)


def error_document(exc: BaseException) -> dict[str, Any]:
    """The JSON document a ``--json`` command prints for an expected failure."""
    document: dict[str, Any] = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    for attribute in ("path", "line", "record"):
        value = getattr(exc, attribute, None)
        if value is not None:
            document["error"][attribute] = value
    return document


@contextmanager
def expected_errors() -> Iterator[None]:
    """Turn an AnonMLError into one stderr line and exit code 1 (no traceback).

    With ``--json`` the error is also printed on stdout as one JSON document
    (:func:`error_document`), so a script reading stdout always gets JSON.
    A database failure the user can act on (locked, disk full, server
    unreachable: :func:`anonml.database.describe_database_error`) is one too.
    """
    try:
        yield
    except AnonMLError as exc:
        _fail(exc)
    except Exception as exc:
        from anonml.database import describe_database_error

        advice = describe_database_error(exc)
        if advice is None:
            raise
        _fail(StoreError(advice))


def _fail(exc: AnonMLError) -> None:
    """Print ``exc`` as one ``error:`` line (and a JSON document under ``--json``); exit code 1."""
    if _wants_json():
        print_json(error_document(exc))
    err.print(styled(("error:", "bold red"), f" {untrusted(exc, 2000)}"))
    raise typer.Exit(code=1) from None


def valid_settings(build: Callable[[], T], what: str) -> T:
    """``build()`` (a settings model), its validation error turned into one :class:`AnonMLError` line.

    The line names ``what``, the first invalid field and why (e.g. a TLS key that
    does not match its certificate), instead of a traceback.
    """
    from pydantic import ValidationError

    try:
        return build()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "settings"
        raise AnonMLError(f"invalid {what} settings: {where}: {first['msg']}") from None


def ensure_port_free(host: str, port: int, *, what: str = "the service") -> None:
    """Refuse to start ``what`` on a port another process holds, before saying it listens.

    Binds and releases ``(host, port)`` with the options uvicorn uses
    (``SO_REUSEADDR``), so a port it could take is never refused.

    Raises
    ------
    AnonMLError
        The port is taken or the address cannot be used, naming both.
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise AnonMLError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise AnonMLError(
                f"cannot start {what} on {host}:{port}: {reason} (another process listens there? "
                "stop it or choose another --port)"
            ) from None


def untrusted(text: object, limit: int = 200) -> str:
    """``text`` made safe for a terminal: printable, at most ``limit`` characters.

    Escape sequences and control characters are removed (tabs and newlines
    become spaces) and the result is cut to ``limit`` characters with an
    ellipsis. The consoles print with markup off, so ``[/oops]`` prints as itself.
    """
    plain = strip_controls(str(text)).replace("\t", " ").replace("\n", " ")
    if len(plain) > limit:
        plain = plain[: max(0, limit - 1)] + "…"
    return plain


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    typer.echo(json.dumps(document, indent=2, default=str))


#: ``--params`` of the commands that run an importer (``import``, ``importer check``).
ImporterParamsOption = Annotated[
    str | None,
    typer.Option(
        "--params",
        help="JSON or @file.json: the importer's params ('anonml importer params NAME' lists them), "
        "for the importer named with --importer or the one detected; or "
        '{"<importer>": {params}, ...} per importer.',
    ),
]


def complete_importer(incomplete: str) -> list[str]:
    """Shell completion of ``--importer``: installed importer names starting with what is typed.

    Read from the entry points alone (no plugin is imported), so a TAB stays instant.
    """
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="anonml.importers")}
    return sorted(n for n in names if n.startswith(incomplete))


def parse_json_option(text: str | None, option: str) -> dict[str, Any]:
    """A JSON object given inline or as ``@file.json``; errors name the option."""
    if not text:
        return {}
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise AnonMLError(f"{option}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnonMLError(f"{option}: invalid JSON at column {exc.colno}: {exc.msg}") from None
    if not isinstance(value, dict):
        raise AnonMLError(f"{option}: expected a JSON object")
    return value


@dataclass(frozen=True)
class ModelFlag:
    """One field of a pydantic model offered as a command-line option (:func:`with_model_options`).

    ``flags``: the option's names (``"--max-epsilon"``, or ``"--auto-accept/--ask"`` for a bool,
    its True side first); ``help``: what ``--help`` says of it.
    """

    field: str
    flags: str
    help: str


def _model_option(model: type[BaseModel], flag: ModelFlag) -> inspect.Parameter:
    """The keyword parameter of ``flag``: the field's type (None when not given), its default shown, and
    its inclusive bounds (``ge``/``le``) as the option's ``min``/``max``."""
    info = model.model_fields[flag.field]
    kind = info.annotation
    if get_origin(kind) in (Union, UnionType):  # an optional field: the option is optional anyway
        kind = next(a for a in get_args(kind) if a is not type(None))
    options: dict[str, Any] = {"help": flag.help}
    default = info.get_default(call_default_factory=True)
    if kind is bool:
        on, off = flag.flags.split("/")
        options["show_default"] = (on if default else off).lstrip("-")
    elif default not in (None, [], {}):
        options["show_default"] = str(default)
    for bound in info.metadata:
        if getattr(bound, "ge", None) is not None:
            options["min"] = bound.ge
        if getattr(bound, "le", None) is not None:
            options["max"] = bound.le
    annotation = Annotated[kind | None, typer.Option(*flag.flags.split("|"), **options)]
    return inspect.Parameter(flag.field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def with_model_options(model: type[BaseModel], flags: Sequence[ModelFlag]) -> Callable[[F], F]:
    """Give a Typer command one option per :class:`ModelFlag`, typed and bounded by ``model``'s fields.

    The command takes them as ``**changes``: the fields given on the command line (an option not
    given, or a repeatable one given no value, is left out), by field name — what it then validates
    against ``model``. So a field's type, default and bounds are written once, in the model.
    """

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        added = [_model_option(model, flag) for flag in flags]
        names = {flag.field for flag in flags}

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            changes = {n: given.pop(n) for n in names if given.get(n) not in (None, [])}
            for name in names:
                given.pop(name, None)
            return command(**given, **changes)

        run.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate
