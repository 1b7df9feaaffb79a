"""NATS's decentralized authentication, the parts the operator needs: NKeys made and read, and
the JWTs that operators, accounts and users are (header, claims, an Ed25519 signature by the
issuer's NKey, each part base64url without padding), plus the `.creds` file clients read.

The claims follow the v2 layout that nats-server and github.com/nats-io/jwt/v2 read; the tests
check our tokens with that Go library's own validation."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import time
from collections.abc import Mapping
from typing import Any, Literal

import nkeys
from nacl.signing import VerifyKey

KeyRole = Literal["operator", "account", "user"]

_PREFIXES: dict[KeyRole, int] = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}
_PUBLIC_INITIALS: dict[KeyRole, str] = {"operator": "O", "account": "A", "user": "U"}
HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
CLAIMS_VERSION = 2


class InvalidToken(ValueError):
    """Not a NATS JWT, or one whose signature its issuer did not make."""


def new_seed(role: KeyRole) -> str:
    """A fresh NKey seed ("SO...", "SA...", "SU...") from the system's randomness."""
    seed: bytes = nkeys.encode_seed(os.urandom(32), _PREFIXES[role])
    return seed.decode()


def public_key(seed: str) -> str:
    """The public key ("O...", "A...", "U...") of a seed; ValueError for anything else."""
    try:
        pair = nkeys.from_seed(seed.strip().encode())
    except Exception as error:  # nkeys raises its own errors, and binascii's
        raise ValueError("not an NKey seed") from error
    key: bytes = pair.public_key
    return key.decode()


def role_of(key: str) -> KeyRole | None:
    """Which kind of public key this is, by its first letter (None: not one we use)."""
    for role, initial in _PUBLIC_INITIALS.items():
        if key.startswith(initial):
            return role
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _claims_id(claims: Mapping[str, Any]) -> str:
    """The `jti`: a hash of the claims, as the Go library makes it (SHA-512/256, base32)."""
    digest = hashlib.new("sha512_256", _canonical(claims).encode()).digest()
    return base64.b32encode(digest).decode().rstrip("=")


def _canonical(value: Mapping[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def encode(
    subject: str,
    name: str,
    nats: Mapping[str, Any],
    signer_seed: str,
    *,
    issued_at: int | None = None,
    expires_at: int | None = None,
) -> str:
    """A signed JWT for `subject` (a public key), issued by the key of `signer_seed`."""
    signer = nkeys.from_seed(signer_seed.encode())
    claims: dict[str, Any] = {
        "iat": int(time.time()) if issued_at is None else issued_at,
        "iss": signer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": CLAIMS_VERSION},
    }
    if expires_at is not None:
        claims["exp"] = expires_at
    claims = {"jti": _claims_id(claims), **claims}
    signing_input = f"{_b64(_canonical(HEADER).encode())}.{_b64(_canonical(claims).encode())}"
    signature: bytes = signer.sign(signing_input.encode())
    return f"{signing_input}.{_b64(signature)}"


def decode(token: str, *, verify: bool = True) -> dict[str, Any]:
    """The claims of a JWT; with `verify`, only if its issuer's key signed it."""
    try:
        header_part, claims_part, signature_part = token.strip().split(".")
        header = json.loads(_unb64(header_part))
        claims: dict[str, Any] = json.loads(_unb64(claims_part))
        signature = _unb64(signature_part)
    except (ValueError, binascii.Error) as error:
        raise InvalidToken("not a JWT") from error
    if header.get("alg") not in ("ed25519-nkey", "ed25519"):
        raise InvalidToken(f"unknown algorithm {header.get('alg')!r}")
    if verify:
        issuer = str(claims.get("iss", ""))
        try:
            _verify_key(issuer).verify(f"{header_part}.{claims_part}".encode(), signature)
        except Exception as error:
            raise InvalidToken(f"not signed by its issuer {issuer or '(none)'}") from error
    return claims


def _verify_key(public: str) -> VerifyKey:
    """The Ed25519 key inside a public NKey: base32 of a prefix byte, 32 key bytes and a CRC."""
    raw = base64.b32decode(public + "=" * (-len(public) % 8))
    if len(raw) != 35 or not nkeys.valid_public_prefix_byte(raw[0]):
        raise ValueError("not a public NKey")
    return VerifyKey(raw[1:33])


def creds_file(token: str, seed: str) -> str:
    """The `.creds` text nats-py, nats.go, the `nats` CLI and nsc read: the user JWT and the
    seed that proves the user holds its key."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{token}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def operator_claims(signing_keys: list[str], system_account: str) -> dict[str, Any]:
    """An operator's `nats` claims: the keys that may sign its accounts, its system account."""
    return {
        "signing_keys": signing_keys,
        "system_account": system_account,
        "type": "operator",
    }


def user_claims(
    issuer_account: str | None,
    publish: Mapping[str, list[str]],
    subscribe: Mapping[str, list[str]],
    *,
    responses: int | None = None,
) -> dict[str, Any]:
    """A user's `nats` claims: its permissions ({"allow": [...], "deny": [...]} each), the
    account whose signing key issues it, and how many replies it may send to requests."""
    claims: dict[str, Any] = {
        "pub": {key: value for key, value in publish.items() if value},
        "sub": {key: value for key, value in subscribe.items() if value},
        "subs": -1,
        "data": -1,
        "payload": -1,
        "type": "user",
    }
    if issuer_account is not None:
        claims["issuer_account"] = issuer_account
    if responses is not None:
        claims["resp"] = {"max": responses, "ttl": 0}
    return claims
