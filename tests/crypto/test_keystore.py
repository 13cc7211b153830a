"""Keys at rest: Argon2id + secretbox, or plain files that must stay 0600."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import nacl.pwhash
import numpy as np
import pytest

from anonml.crypto.exceptions import KeyFileError, WrongPassphrase
from anonml.crypto.identity import Identity
from anonml.crypto.keystore import load_identity, save_identity

# libsodium's minimum Argon2id cost keeps the tests fast; the default is MODERATE.
FAST = {"opslimit": nacl.pwhash.argon2id.OPSLIMIT_MIN, "memlimit": nacl.pwhash.argon2id.MEMLIMIT_MIN}


@pytest.fixture()
def identity() -> Identity:
    return Identity.generate(np.random.default_rng(1))


def test_encrypted_round_trip(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", "correct horse", **FAST)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert identity._secret_bytes().hex() not in text  # the secret is not stored in clear
    loaded = load_identity(path, "correct horse")
    assert loaded.public == identity.public
    assert loaded._secret_bytes() == identity._secret_bytes()


def test_wrong_or_missing_passphrase(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", b"secret", **FAST)
    with pytest.raises(WrongPassphrase):
        load_identity(path, b"Secret")
    with pytest.raises(WrongPassphrase):
        load_identity(path)


def test_altered_ciphertext_is_detected(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", "pw", **FAST)
    doc = json.loads(path.read_text())
    box = bytearray.fromhex(doc["box"])
    box[-1] ^= 1
    doc["box"] = box.hex()
    path.write_text(json.dumps(doc))
    with pytest.raises(WrongPassphrase):
        load_identity(path, "pw")


def test_plain_file_round_trip_and_permissions(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "plain.json", None)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_identity(path).public == identity.public
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="too open"):
        load_identity(path)


def test_refuses_to_overwrite_unless_asked(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", None)
    other = Identity.generate(np.random.default_rng(2))
    with pytest.raises(KeyFileError, match="already exists"):
        save_identity(other, path, None)
    save_identity(other, path, None, overwrite=True)
    assert load_identity(path).public == other.public


def test_fingerprint_mismatch_and_malformed_files(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", None)
    doc = json.loads(path.read_text())
    doc["fingerprint"] = "00" * 32
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="fingerprint"):
        load_identity(path)
    for content in ("not json", "[]", json.dumps({"format": "anonml-identity", "version": 1})):
        path.write_text(content)
        with pytest.raises(KeyFileError):
            load_identity(path)
    with pytest.raises(KeyFileError, match="cannot read"):
        load_identity(tmp_path / "missing.json")


def test_excessive_kdf_cost_in_a_file_is_refused(tmp_path: Path, identity: Identity) -> None:
    path = save_identity(identity, tmp_path / "id.json", "pw", **FAST)
    doc = json.loads(path.read_text())
    doc["kdf"]["memlimit"] = nacl.pwhash.argon2id.MEMLIMIT_SENSITIVE * 4
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="memlimit"):
        load_identity(path, "pw")


def test_empty_passphrase_is_refused(tmp_path: Path, identity: Identity) -> None:
    with pytest.raises(KeyFileError):
        save_identity(identity, tmp_path / "id.json", "", **FAST)
