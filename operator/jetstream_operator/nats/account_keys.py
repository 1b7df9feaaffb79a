"""A NatsAccount's keys as its Secret holds them: made once, then only revocations change."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from . import jwt

OPERATOR_CREDS_KEY = "operator.creds"
"""The key of an account's keys Secret holding the operator's own user of the account."""


def keys_secret_name(account: str) -> str:
    """The Secret in the operator's namespace with a NatsAccount's keys."""
    return f"natsaccount-{account}"


OPERATOR_PUBLISH = ["$JS.API.>"]
OPERATOR_SUBSCRIBE = ["_INBOX.>", "$JS.EVENT.>"]
"""The operator's own user of each account: the JetStream API and its advisories, nothing of
the applications' subjects."""


REVOCATION_GRACE = 300
"""Seconds a revocation outlives the credentials it revokes: servers whose clocks run behind
still see them as unexpired for a while."""


def _numbers(text: str | None) -> dict[str, int]:
    return {str(key): int(value) for key, value in json.loads(text or "{}").items()}


@dataclass
class AccountKeys:
    """What the keys Secret holds: the account's seed, the seed of the key that signs its
    users, the operator's own user, the users revoked (public key -> revocation time), and when
    the revoked users' last credentials expire, where they do (public key -> expiry)."""

    account_seed: str
    signing_seed: str
    operator_creds: str
    revocations: dict[str, int] = field(default_factory=dict)
    revocation_expiries: dict[str, int] = field(default_factory=dict)

    def without_expired(self, now: int, grace: int = REVOCATION_GRACE) -> AccountKeys:
        """These keys without the revocations of credentials that have expired anyway: the
        server refuses an expired JWT by itself, so the entry only grows the account's JWT.
        Credentials that never expire stay revoked for good."""
        expired = {
            key
            for key, expiry in self.revocation_expiries.items()
            if key in self.revocations and expiry + grace < now
        }
        if not expired:
            return self
        return replace(
            self,
            revocations={k: v for k, v in self.revocations.items() if k not in expired},
            revocation_expiries={
                k: v for k, v in self.revocation_expiries.items() if k not in expired
            },
        )

    @property
    def public_key(self) -> str:
        return jwt.public_key(self.account_seed)

    @property
    def signing_key(self) -> str:
        return jwt.public_key(self.signing_seed)

    def values(self) -> dict[str, str]:
        return {
            "account.seed": self.account_seed,
            "signing.seed": self.signing_seed,
            OPERATOR_CREDS_KEY: self.operator_creds,
            "revocations.json": json.dumps(self.revocations, sort_keys=True),
            "revocation-expiries.json": json.dumps(self.revocation_expiries, sort_keys=True),
        }

    @classmethod
    def of(cls, values: Mapping[str, str]) -> AccountKeys:
        return cls(
            values["account.seed"],
            values["signing.seed"],
            values[OPERATOR_CREDS_KEY],
            _numbers(values.get("revocations.json")),
            _numbers(values.get("revocation-expiries.json")),
        )

    @classmethod
    def made(cls, name: str) -> AccountKeys:
        account_seed, signing_seed = jwt.new_seed("account"), jwt.new_seed("account")
        user_seed = jwt.new_seed("user")
        token = jwt.encode(
            jwt.public_key(user_seed),
            f"jetstream-operator@{name}",
            jwt.user_claims(
                jwt.public_key(account_seed),
                {"allow": OPERATOR_PUBLISH},
                {"allow": OPERATOR_SUBSCRIBE},
            ),
            signing_seed,
        )
        return cls(account_seed, signing_seed, jwt.creds_file(token, user_seed))
