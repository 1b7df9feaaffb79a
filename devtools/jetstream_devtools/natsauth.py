"""The keys and JWTs of a NATS system in operator mode (decentralized auth), for `dev up --auth
jwt` and the tests: an operator, its signing key, the system account and a user of it.

Accounts are signed by the operator's signing key, never the operator key itself, as a real
deployment would do; the system user is what pushes account JWTs to the servers' resolver
(`$SYS.REQ.CLAIMS.UPDATE`). Tokens come from `jetstream_operator.nats.jwt`, so running servers
check the operator's own encoding.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jetstream_operator.nats import jwt

OPERATOR_NAME = "jetstream-operator-dev"
SYSTEM_ACCOUNT_NAME = "SYS"
SYSTEM_USER_NAME = "sys"
DEFAULT_ACCOUNT_NAME = "DEFAULT"
UNLIMITED_JETSTREAM: dict[str, Any] = {
    "mem_storage": -1,
    "disk_storage": -1,
    "streams": -1,
    "consumer": -1,
}
UNLIMITED_ACCOUNT_LIMITS: dict[str, Any] = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
}
"""Client limits of an account with none, as nsc writes them (JetStream left out: disabled)."""


def _quote(value: str) -> str:
    return json.dumps(value)


@dataclass(frozen=True)
class OperatorKeys:
    """The seeds of one operator-mode system; everything else (JWTs, .creds) derives from them,
    so these four strings are all that must be kept to restart the same system."""

    operator_seed: str
    signing_seed: str
    system_account_seed: str
    system_user_seed: str
    default_account_seed: str = field(default_factory=lambda: jwt.new_seed("account"))
    """An account with JetStream, preloaded like the system account: where the operator's
    default connection works (`default_creds`), as resources without an account need."""
    default_user_seed: str = field(default_factory=lambda: jwt.new_seed("user"))

    @classmethod
    def generate(cls) -> OperatorKeys:
        return cls(
            operator_seed=jwt.new_seed("operator"),
            signing_seed=jwt.new_seed("operator"),
            system_account_seed=jwt.new_seed("account"),
            system_user_seed=jwt.new_seed("user"),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> OperatorKeys:
        data = json.loads(text)
        return cls(
            operator_seed=str(data["operator_seed"]),
            signing_seed=str(data["signing_seed"]),
            system_account_seed=str(data["system_account_seed"]),
            system_user_seed=str(data["system_user_seed"]),
            default_account_seed=str(data.get("default_account_seed") or jwt.new_seed("account")),
            default_user_seed=str(data.get("default_user_seed") or jwt.new_seed("user")),
        )

    @property
    def operator_public(self) -> str:
        return jwt.public_key(self.operator_seed)

    @property
    def signing_public(self) -> str:
        return jwt.public_key(self.signing_seed)

    @property
    def system_account_public(self) -> str:
        return jwt.public_key(self.system_account_seed)

    @property
    def system_user_public(self) -> str:
        return jwt.public_key(self.system_user_seed)

    def operator_jwt(self) -> str:
        """Self-signed by the operator key, naming the signing key and the system account."""
        claims = jwt.operator_claims([self.signing_public], self.system_account_public)
        return jwt.encode(self.operator_public, OPERATOR_NAME, claims, self.operator_seed)

    def system_account_jwt(self) -> str:
        """The system account, signed by the operator's signing key; no JetStream (NATS
        refuses it in the system account)."""
        claims = {"limits": UNLIMITED_ACCOUNT_LIMITS, "signing_keys": [], "type": "account"}
        return jwt.encode(
            self.system_account_public, SYSTEM_ACCOUNT_NAME, claims, self.signing_seed
        )

    def system_user_jwt(self) -> str:
        """A system user signed by the account key itself: no account signing key to manage."""
        claims = jwt.user_claims(None, {}, {})
        return jwt.encode(
            self.system_user_public, SYSTEM_USER_NAME, claims, self.system_account_seed
        )

    def default_account_jwt(self) -> str:
        """The default account: no limits, JetStream included."""
        claims = {
            "limits": {**UNLIMITED_ACCOUNT_LIMITS, **UNLIMITED_JETSTREAM},
            "signing_keys": [],
            "type": "account",
        }
        public = jwt.public_key(self.default_account_seed)
        return jwt.encode(public, DEFAULT_ACCOUNT_NAME, claims, self.signing_seed)

    def default_creds(self) -> str:
        """A user of the default account, for the operator's default connection."""
        token = jwt.encode(
            jwt.public_key(self.default_user_seed),
            "jetstream-operator",
            jwt.user_claims(None, {}, {}),
            self.default_account_seed,
        )
        return jwt.creds_file(token, self.default_user_seed)

    def system_creds(self) -> str:
        """The system user's .creds text (nats-py `user_credentials`, `nats --creds`)."""
        return jwt.creds_file(self.system_user_jwt(), self.system_user_seed)

    def server_config(self, resolver_dir: Path, operator_jwt_file: Path) -> str:
        """The operator-mode block of a nats-server config (see `write_operator_jwt`).

        A full resolver: the server stores every pushed account JWT in `resolver_dir`, which
        must be its own (each cluster node keeps a copy, synchronised over the routes), and
        accepts deletions. The system account is preloaded, so pushing needs nothing else.
        """
        return "\n".join(
            [
                f"operator: {_quote(str(operator_jwt_file))}",
                f"system_account: {_quote(self.system_account_public)}",
                "resolver {",
                "  type: full",
                f"  dir: {_quote(str(resolver_dir))}",
                "  allow_delete: true",
                "}",
                "resolver_preload {",
                f"  {_quote(self.system_account_public)}: {_quote(self.system_account_jwt())}",
                f"  {_quote(jwt.public_key(self.default_account_seed))}: "
                f"{_quote(self.default_account_jwt())}",
                "}",
            ]
        )

    def write_operator_jwt(self, path: Path) -> Path:
        """The operator JWT file the config's `operator:` names (public: no secret in it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, self.operator_jwt() + "\n", 0o644)
        return path


def write_secret(path: Path, text: str) -> Path:
    """A file only its owner may read (seeds, .creds), never readable even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, text, 0o600)
    return path


def _write_atomically(path: Path, text: str, mode: int) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        os.chmod(partial, mode)  # exactly `mode`, whatever the umask
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
