"""``anonml credential issuer|issue|install|list``: admission credentials (issuer and peer side).

An issuer (e.g. a course platform) keeps an identity key file; ``issue`` signs
an :class:`~anonml.protocol.AdmissionCredential` for one peer identity and a
scope, valid for some days. The peer ``install``s it into its
``credentials_dir`` (``$ANONML_HOME/peer/credentials``), where the daemon finds
it when it registers for a problem that admits by that issuer's credentials.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from anonml.cli_support import expected_errors, out
from anonml.errors import AnonMLError
from anonml.paths import private_file

app = typer.Typer(help="Issue and install admission credentials.", no_args_is_help=True)

KeyOption = Annotated[
    Path, typer.Option("--issuer-key", help="The issuer's identity key file (created if missing).")
]


def _write_private(path: Path, text: str) -> None:
    private_file(path).write_text(text, encoding="utf-8")  # 0600 before any byte is written


@app.command()
def issuer(issuer_key: KeyOption) -> None:
    """Print the issuer's public identity (hex): what a proposal's admission names."""
    from anonml.crypto import load_or_create_identity

    with expected_errors():
        print(bytes(load_or_create_identity(issuer_key).public).hex())


@app.command()
def issue(
    issuer_key: KeyOption,
    subject: Annotated[str, typer.Option("--subject", help="The peer's public identity (128 hex digits).")],
    scope: Annotated[str, typer.Option("--scope", help="What the credential admits to (e.g. a course id).")],
    days: Annotated[float, typer.Option("--days", min=0.001, max=3660, help="Validity in days.")] = 30.0,
    output: Annotated[Path | None, typer.Option("--out", help="Write it here (default: stdout).")] = None,
) -> None:
    """Sign a credential admitting ``subject`` to problems of ``scope``."""
    from anonml.crypto import load_or_create_identity
    from anonml.protocol import AdmissionCredential, sign_message

    with expected_errors():
        try:
            subject_bytes = bytes.fromhex(subject)
        except ValueError:
            raise AnonMLError("--subject: not hex") from None
        if len(subject_bytes) != 64:
            raise AnonMLError(f"--subject: a public identity is 64 bytes, got {len(subject_bytes)}")
        identity = load_or_create_identity(issuer_key)
        try:
            credential = sign_message(
                AdmissionCredential(
                    issuer=bytes(identity.public),
                    subject=subject_bytes,
                    scope=scope,
                    not_after=datetime.now(UTC) + timedelta(days=days),
                    signature=bytes(64),
                ),
                identity,
            )
        except ValidationError as exc:
            raise AnonMLError(f"--scope: {exc.errors()[0]['msg']}") from None
        text = credential.model_dump_json(indent=1) + "\n"
        if output is None:
            print(text, end="")
        else:
            _write_private(output, text)


@app.command()
def install(
    file: Annotated[Path, typer.Argument(help="A credential file from 'anonml credential issue'.")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Credentials folder (default: the peer's credentials_dir).")
    ] = None,
) -> None:
    """Check a credential's signature and copy it into the peer's credentials folder (0600)."""
    from anonml.crypto import CryptoError
    from anonml.protocol import AdmissionCredential, verify_message
    from peer.settings import PeerSettings

    with expected_errors():
        try:
            credential = AdmissionCredential.model_validate_json(file.read_bytes())
        except OSError as exc:
            raise AnonMLError(f"{file}: cannot read ({exc.strerror})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise AnonMLError(f"{file}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        try:
            verify_message(credential, bytes(credential.issuer))
        except CryptoError as exc:
            raise AnonMLError(f"{file}: the issuer's signature does not verify: {exc}") from None
        if credential.not_after <= datetime.now(UTC):
            raise AnonMLError(f"{file}: expired at {credential.not_after.isoformat()}")
        folder = directory if directory is not None else PeerSettings.from_env().credentials_dir
        scope_tag = hashlib.blake2b(credential.scope.encode("ascii"), digest_size=4).hexdigest()
        name = (
            f"{bytes(credential.issuer).hex()[:16]}-{bytes(credential.subject).hex()[:16]}-{scope_tag}.json"
        )
        target = folder / name
        _write_private(target, credential.model_dump_json(indent=1) + "\n")
        out.print(f"installed {target}", highlight=False, markup=False)
