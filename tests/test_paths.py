"""Owner-only files: the stored bearer token both services fall back on."""

from __future__ import annotations

import stat
from pathlib import Path

from aggregator.settings import AggregatorSettings
from anonml.paths import stored_token
from peer.settings import PeerSettings


def test_stored_token_is_created_private_once_and_then_read(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "admin-token"
    first = stored_token(path)
    assert len(first) >= 43  # 32 random bytes, URL-safe base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text(encoding="utf-8") == first + "\n"
    assert stored_token(path) == first
    assert stored_token(tmp_path / "other-token") != first


def test_services_keep_their_token_beside_the_identity(tmp_path: Path) -> None:
    aggregator = AggregatorSettings(identity_file=tmp_path / "aggregator" / "identity.json")
    peer = PeerSettings(identity_file=tmp_path / "peer" / "identity.json")
    admin, local = aggregator.resolved_admin_token(), peer.resolved_local_token()
    assert (tmp_path / "aggregator" / "admin-token").read_text(encoding="utf-8").strip() == admin
    assert (tmp_path / "peer" / "local-token").read_text(encoding="utf-8").strip() == local
    assert aggregator.resolved_admin_token() == admin and peer.resolved_local_token() == local
    configured = aggregator.model_copy(update={"admin_token": "configured"})
    assert configured.resolved_admin_token() == "configured"
    set_by_hand = PeerSettings(identity_file=tmp_path / "p2" / "identity.json", local_token="set")
    assert set_by_hand.resolved_local_token() == "set"
    assert not (tmp_path / "p2" / "local-token").exists()
