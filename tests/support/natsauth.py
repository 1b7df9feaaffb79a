"""NATS credentials made in the test itself: NKeys, and operator/account/user JWTs for creds.

Nothing is fetched: keys come from os.urandom, JWTs are signed here with the nkeys package.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys


@dataclass(frozen=True)
class Identity:
    seed: str
    public: str


def new_identity(prefix: int) -> Identity:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    pair = nkeys.from_seed(bytearray(seed))
    return Identity(seed.decode(), pair.public_key.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def sign_jwt(
    issuer: Identity, subject: str, name: str, nats: dict[str, Any], expires: int | None = None
) -> str:
    claims: dict[str, Any] = {
        "jti": _b64(os.urandom(24)).upper(),
        "iat": int(time.time()) - 60,
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    if expires is not None:
        claims["exp"] = expires
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = nkeys.from_seed(bytearray(issuer.seed.encode())).sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{_b64(signature)}"


UNLIMITED_ACCOUNT = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
    "mem_storage": -1,
    "disk_storage": -1,
    "streams": -1,
    "consumer": -1,
}


@dataclass(frozen=True)
class OperatorMode:
    """An operator with one JetStream account, and a way to issue users' creds files."""

    operator: Identity
    account: Identity
    system: Identity
    operator_jwt: str
    account_jwt: str
    system_jwt: str

    def server_config(self) -> str:
        return (
            f'operator: "{self.operator_jwt}"\n'
            f"system_account: {self.system.public}\n"
            "resolver: MEMORY\n"
            f'resolver_preload: {{ {self.account.public}: "{self.account_jwt}", '
            f'{self.system.public}: "{self.system_jwt}" }}\n'
        )

    def creds(self, name: str, expires: int | None = None) -> str:
        user = new_identity(nkeys.PREFIX_BYTE_USER)
        jwt = sign_jwt(
            self.account,
            user.public,
            name,
            {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
            expires,
        )
        return (
            f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n"
        )


def operator_mode() -> OperatorMode:
    operator = new_identity(nkeys.PREFIX_BYTE_OPERATOR)
    account = new_identity(nkeys.PREFIX_BYTE_ACCOUNT)
    operator_jwt = sign_jwt(operator, operator.public, "test-operator", {"type": "operator"})
    account_jwt = sign_jwt(
        operator,
        account.public,
        "APP",
        {
            "type": "account",
            "limits": UNLIMITED_ACCOUNT,
            "default_permissions": {"pub": {}, "sub": {}},
        },
    )
    system = new_identity(nkeys.PREFIX_BYTE_ACCOUNT)
    system_jwt = sign_jwt(
        operator,
        system.public,
        "SYS",
        {
            "type": "account",
            "limits": {
                "subs": -1,
                "data": -1,
                "payload": -1,
                "imports": -1,
                "exports": -1,
                "wildcards": True,
                "conn": -1,
                "leaf": -1,
            },
        },
    )
    return OperatorMode(operator, account, system, operator_jwt, account_jwt, system_jwt)
