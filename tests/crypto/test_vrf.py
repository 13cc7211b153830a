"""ECVRF-EDWARDS25519-SHA512-TAI against RFC 9381's own vectors, and the uniqueness the beacon rests on."""

from __future__ import annotations

import hashlib
import os

import nacl.bindings
import pytest

from anonml.crypto import Element, Identity, InvalidProof, vrf
from anonml.crypto.group import L
from anonml.crypto.vrf import _encode_to_curve, _secret_scalar
from tests.crypto.helpers import grinding_vrf_proof

#: RFC 9381 Appendix B.3, Examples 16-18: SK, PK, alpha, H, pi, beta (hex).
RFC_VECTORS = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "91bbed02a99461df1ad4c6564a5f5d829d0b90cfc7903e7a5797bd658abf3318",
        "8657106690b5526245a92b003bb079ccd1a92130477671f6fc01ad16f26f723f26f8a57ccaed74ee1b190bed1f479d97"
        "27d2d0f9b005a6e456a35d4fb0daab1268a1b0db10836d9826a528ca76567805",
        "90cf1df3b703cce59e2a35b925d411164068269d7b2d29f3301c03dd757876ff66b71dda49d2de59d03450451af02679"
        "8e8f81cd2e333de5cdf4f3e140fdd8ae",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "5b659fc3d4e9263fd9a4ed1d022d75eaacc20df5e09f9ea937502396598dc551",
        "f3141cd382dc42909d19ec5110469e4feae18300e94f304590abdced48aed5933bf0864a62558b3ed7f2fea45c92a465"
        "301b3bbf5e3e54ddf2d935be3b67926da3ef39226bbc355bdc9850112c8f4b02",
        "eb4440665d3891d668e7e0fcaf587f1b4bd7fbfe99d0eb2211ccec90496310eb5e33821bc613efb94db5e5b54c70a848"
        "a0bef4553a41befc57663b56373a5031",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "bf4339376f5542811de615e3313d2b36f6f53c0acfebb482159711201192576a",
        "9bc0f79119cc5604bf02d23b4caede71393cedfbb191434dd016d30177ccbf8096bb474e53895c362d8628ee9f9ea3c0"
        "e52c7a5c691b6c18c9979866568add7a2d41b00b05081ed0f58ee5e31b3a970e",
        "645427e5d00c62a23fb703732fa5d892940935942101e456ecca7bb217c61c452118fec1219202a0edcf038bb6373241"
        "578be7217ba85a2687f7a0310b2df19f",
    ),
]


@pytest.mark.parametrize(("sk", "pk", "alpha", "h", "pi", "beta"), RFC_VECTORS)
def test_rfc_9381_vectors(sk, pk, alpha, h, pi, beta):
    sk, pk, alpha = bytes.fromhex(sk), bytes.fromhex(pk), bytes.fromhex(alpha)
    assert bytes(Element.base_mul(_secret_scalar(sk)[0])) == pk  # the Ed25519 key pair
    assert bytes(_encode_to_curve(pk, alpha)).hex() == h
    assert vrf.prove(sk, alpha).hex() == pi
    assert vrf.verify(pk, alpha, bytes.fromhex(pi)).hex() == beta
    assert vrf.proof_to_hash(bytes.fromhex(pi)).hex() == beta


def test_identity_proves_with_its_ed25519_key_and_the_vrf_public_key_is_its_first_half():
    identity = Identity.generate()
    proof = identity.vrf_prove(b"statement")
    assert len(proof) == vrf.PROOF_SIZE
    beta = vrf.verify(bytes(identity.public)[:32], b"statement", proof)
    assert len(beta) == vrf.OUTPUT_SIZE
    assert identity.vrf_prove(b"statement") == proof  # deterministic


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("index", [0, 31, 32, 47, 48, 79])
def test_a_tampered_proof_is_refused(index):
    sk, pk, alpha, _, pi, _ = (bytes.fromhex(v) for v in RFC_VECTORS[2])
    with pytest.raises(InvalidProof):
        vrf.verify(pk, alpha, _flip(pi, index))


def test_wrong_input_wrong_key_and_malformed_keys_are_refused():
    sk, pk, alpha, _, pi, _ = (bytes.fromhex(v) for v in RFC_VECTORS[2])
    with pytest.raises(InvalidProof):
        vrf.verify(pk, alpha + b"\x00", pi)
    with pytest.raises(InvalidProof):
        vrf.verify(bytes.fromhex(RFC_VECTORS[0][1]), alpha, pi)
    identity_point = (1).to_bytes(32, "little")  # small order: no unique output (RFC 9381 §5.4.5)
    with pytest.raises(InvalidProof):
        vrf.verify(identity_point, alpha, pi)
    with pytest.raises(InvalidProof, match="not canonical"):  # s >= L
        vrf.verify(pk, alpha, pi[:48] + (int.from_bytes(pi[48:], "little") + L).to_bytes(32, "little"))
    with pytest.raises(ValueError):
        vrf.verify(pk, alpha, pi[:-1])


def test_a_prover_who_varies_its_nonce_makes_new_proofs_but_never_a_new_output():
    seed, alpha = os.urandom(32), b"one roster transcript"
    public_key = bytes(Element.base_mul(_secret_scalar(seed)[0]))
    honest = vrf.verify(public_key, alpha, vrf.prove(seed, alpha))
    proofs = {grinding_vrf_proof(seed, alpha) for _ in range(200)}
    assert len(proofs) == 200  # every proof is new ...
    assert {vrf.verify(public_key, alpha, p) for p in proofs} == {honest}  # ... and the output is not


def test_a_gamma_with_a_torsion_component_is_refused():
    """``Gamma + T`` (T of order 2) hashes like ``Gamma`` after the cofactor; it is refused outright."""
    sk, pk, alpha, _, pi, _ = (bytes.fromhex(v) for v in RFC_VECTORS[0])
    order_two = (2**255 - 20).to_bytes(32, "little")  # (0, -1)
    shifted = nacl.bindings.crypto_core_ed25519_add(pi[:32], order_two)
    with pytest.raises(InvalidProof):
        vrf.verify(pk, alpha, shifted + pi[32:])


def test_outputs_look_uniform():
    """The first byte of beta over 2,048 inputs, in 16 buckets: chi-square (df 15; p = 0.001 at 37.7)."""
    seed = hashlib.sha256(b"vrf uniformity").digest()
    counts = [0] * 16
    n = 2048
    for i in range(n):
        counts[vrf.proof_to_hash(vrf.prove(seed, i.to_bytes(4, "big")))[0] >> 4] += 1
    expected = n / 16
    assert sum((c - expected) ** 2 / expected for c in counts) < 37.7
