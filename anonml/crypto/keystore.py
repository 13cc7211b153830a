"""Identity keys at rest: passphrase-encrypted (Argon2id + XSalsa20-Poly1305) or plain 0600.

File format (JSON, one object)::

    {"format": "anonml-identity", "version": 1,
     "fingerprint": "<hex of the Ed25519 fingerprint>",
     "protection": "argon2id13-xsalsa20poly1305",
     "kdf": {"salt": "<16 bytes hex>", "opslimit": 3, "memlimit": 268435456},
     "box": "<hex: 24-byte nonce ‖ secretbox ciphertext of the 64 secret bytes>"}

or, when the user chooses no passphrase, ``"protection": "none"`` and
``"secret": "<64 bytes hex>"``. The 64 secret bytes are the Ed25519 seed and the
X25519 secret. The key-encryption key is libsodium ``crypto_pwhash``
(Argon2id v1.3) of the passphrase; ``crypto_secretbox`` authenticates the
ciphertext, so a wrong passphrase or an edited file raises
:class:`~anonml.crypto.exceptions.WrongPassphrase`. Files are written
atomically with mode 0600, and a file readable by group or others is refused on
load (as ssh does), whatever its protection.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import nacl.exceptions
import nacl.pwhash
import nacl.secret

from anonml.crypto._util import _random_bytes
from anonml.crypto.exceptions import KeyFileError, WrongPassphrase
from anonml.crypto.identity import Identity
from anonml.paths import private_dir

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "save_identity",
    "load_identity",
    "load_or_create_identity",
    "OPSLIMIT_MODERATE",
    "MEMLIMIT_MODERATE",
]

_FORMAT = "anonml-identity"
_VERSION = 1
_ENCRYPTED = "argon2id13-xsalsa20poly1305"
_PLAIN = "none"
_KDF = nacl.pwhash.argon2id
OPSLIMIT_MODERATE = _KDF.OPSLIMIT_MODERATE
MEMLIMIT_MODERATE = _KDF.MEMLIMIT_MODERATE


def _passphrase_bytes(passphrase: str | bytes) -> bytes:
    data = passphrase.encode("utf-8") if isinstance(passphrase, str) else passphrase
    if not isinstance(data, bytes) or not data:
        raise KeyFileError("passphrase must be a non-empty str or bytes (None for a plain key file)")
    return data


def _kek(passphrase: bytes, salt: bytes, opslimit: int, memlimit: int) -> bytes:
    return _KDF.kdf(nacl.secret.SecretBox.KEY_SIZE, passphrase, salt, opslimit=opslimit, memlimit=memlimit)


def save_identity(
    identity: Identity,
    path: str | Path,
    passphrase: str | bytes | None,
    *,
    opslimit: int = OPSLIMIT_MODERATE,
    memlimit: int = MEMLIMIT_MODERATE,
    overwrite: bool = False,
    rng: np.random.Generator | None = None,
) -> Path:
    """Write ``identity`` to ``path`` (mode 0600), encrypted unless ``passphrase`` is None.

    Parameters
    ----------
    opslimit, memlimit : int
        Argon2id cost; the defaults are libsodium's MODERATE (256 MiB, ~1 s).
        Stored in the file, so :func:`load_identity` needs no arguments.
    overwrite : bool, default=False
        Refuse to replace an existing file unless True.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise KeyFileError(f"{path}: already exists (pass overwrite=True to replace it)")
    doc: dict[str, object] = {
        "format": _FORMAT,
        "version": _VERSION,
        "fingerprint": identity.fingerprint.hex(),
    }
    if passphrase is None:
        doc |= {"protection": _PLAIN, "secret": identity._secret_bytes().hex()}
    else:
        if not (_KDF.OPSLIMIT_MIN <= opslimit <= _KDF.OPSLIMIT_MAX):
            raise KeyFileError(f"opslimit {opslimit} outside libsodium's bounds")
        if not (_KDF.MEMLIMIT_MIN <= memlimit <= _KDF.MEMLIMIT_MAX):
            raise KeyFileError(f"memlimit {memlimit} outside libsodium's bounds")
        salt = _random_bytes(_KDF.SALTBYTES, rng)
        box = nacl.secret.SecretBox(_kek(_passphrase_bytes(passphrase), salt, opslimit, memlimit))
        sealed = box.encrypt(identity._secret_bytes(), _random_bytes(box.NONCE_SIZE, rng))
        doc |= {
            "protection": _ENCRYPTED,
            "kdf": {"salt": salt.hex(), "opslimit": opslimit, "memlimit": memlimit},
            "box": bytes(sealed).hex(),
        }
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _field(doc: dict, name: str, kind: type, path: Path) -> object:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise KeyFileError(f"{path}: field {name!r} missing or not a {kind.__name__}")
    return value


def _hex(doc: dict, name: str, size: int | None, path: Path) -> bytes:
    try:
        value = bytes.fromhex(_field(doc, name, str, path))  # type: ignore[arg-type]
    except ValueError as exc:
        raise KeyFileError(f"{path}: field {name!r} is not hex") from exc
    if size is not None and len(value) != size:
        raise KeyFileError(f"{path}: field {name!r} must be {size} bytes, got {len(value)}")
    return value


def load_identity(path: str | Path, passphrase: str | bytes | None = None) -> Identity:
    """Read an identity written by :func:`save_identity`.

    Raises :class:`KeyFileError` (missing, unsafe permissions, malformed,
    fingerprint mismatch) or :class:`WrongPassphrase`.
    """
    path = Path(path)
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read key file ({exc.strerror})") from exc
    if os.name == "posix" and stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyFileError(f"{path}: permissions {stat.S_IMODE(st.st_mode):04o} are too open; run chmod 600")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KeyFileError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
        raise KeyFileError(f"{path}: not an {_FORMAT} v{_VERSION} file")
    protection = doc.get("protection")
    if protection == _PLAIN:
        secret = _hex(doc, "secret", 64, path)
    elif protection == _ENCRYPTED:
        if passphrase is None:
            raise WrongPassphrase(f"{path}: key file is encrypted; a passphrase is required")
        kdf = _field(doc, "kdf", dict, path)
        salt = _hex(kdf, "salt", _KDF.SALTBYTES, path)  # type: ignore[arg-type]
        ops = _field(kdf, "opslimit", int, path)  # type: ignore[arg-type]
        mem = _field(kdf, "memlimit", int, path)  # type: ignore[arg-type]
        # Bound the cost a (possibly edited) file can make us pay: at most SENSITIVE.
        if not (_KDF.OPSLIMIT_MIN <= ops <= _KDF.OPSLIMIT_SENSITIVE):  # type: ignore[operator]
            raise KeyFileError(f"{path}: opslimit {ops} out of range")
        if not (_KDF.MEMLIMIT_MIN <= mem <= _KDF.MEMLIMIT_SENSITIVE):  # type: ignore[operator]
            raise KeyFileError(f"{path}: memlimit {mem} out of range")
        sealed = _hex(doc, "box", None, path)
        box = nacl.secret.SecretBox(_kek(_passphrase_bytes(passphrase), salt, ops, mem))  # type: ignore[arg-type]
        try:
            secret = box.decrypt(sealed)
        except nacl.exceptions.CryptoError as exc:
            raise WrongPassphrase(f"{path}: wrong passphrase or altered key file") from exc
        if len(secret) != 64:
            raise KeyFileError(f"{path}: decrypted secret has {len(secret)} bytes, expected 64")
    else:
        raise KeyFileError(f"{path}: unknown protection {protection!r}")
    identity = Identity(secret[:32], secret[32:])
    if identity.fingerprint.hex() != doc.get("fingerprint"):
        raise KeyFileError(f"{path}: keys do not match the recorded fingerprint")
    return identity


def load_or_create_identity(path: str | Path, passphrase: str | bytes | None = None) -> Identity:
    """The identity in ``path``, or a new one written there (mode 0600) when the file is missing.

    Safe against a concurrent first start: if another process writes the file
    between the check and our write, its identity is loaded and ours discarded.
    """
    path = Path(path)
    if path.exists():
        return load_identity(path, passphrase)
    identity = Identity.generate()
    try:
        save_identity(identity, path, passphrase)
    except KeyFileError:
        return load_identity(path, passphrase)
    return identity
