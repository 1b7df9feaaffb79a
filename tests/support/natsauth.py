"""NATS credentials made in the test itself: NKeys, and an operator with one JetStream account
preloaded into a memory resolver, issuing creds files for connections' tests. Signed with the
operator's own JWT module (`jetstream_operator.nats.jwt`); the full-resolver system that
NatsAccounts push to is `jetstream_devtools.natsauth`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from jetstream_devtools.natsauth import UNLIMITED_ACCOUNT_LIMITS, UNLIMITED_JETSTREAM
from jetstream_operator.nats import jwt


@dataclass(frozen=True)
class Identity:
    seed: str
    public: str


def new_identity(role: jwt.KeyRole) -> Identity:
    seed = jwt.new_seed(role)
    return Identity(seed, jwt.public_key(seed))


def _signed(issuer: Identity, subject: str, name: str, nats: dict[str, object]) -> str:
    # A minute in the past: the server refuses tokens issued "in the future" by a skewed clock.
    return jwt.encode(subject, name, nats, issuer.seed, issued_at=int(time.time()) - 60)


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
        user = new_identity("user")
        token = jwt.encode(
            user.public,
            name,
            jwt.user_claims(None, {}, {}),
            self.account.seed,
            issued_at=int(time.time()) - 60,
            expires_at=expires,
        )
        return jwt.creds_file(token, user.seed)


def operator_mode() -> OperatorMode:
    operator, account, system = (
        new_identity("operator"),
        new_identity("account"),
        new_identity("account"),
    )
    app_limits = {**UNLIMITED_ACCOUNT_LIMITS, **UNLIMITED_JETSTREAM}
    system_limits = UNLIMITED_ACCOUNT_LIMITS
    return OperatorMode(
        operator,
        account,
        system,
        _signed(operator, operator.public, "test-operator", {"type": "operator"}),
        _signed(operator, account.public, "APP", {"type": "account", "limits": app_limits}),
        _signed(operator, system.public, "SYS", {"type": "account", "limits": system_limits}),
    )
