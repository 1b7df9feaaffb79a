"""NatsAccount and NatsUser without servers: JWTs made and checked, an account's claims, a
user's permissions from what it references, the subject allowance and rotation timing. The
servers' side is tests/integration/test_accounts.py; the Go JWT library's own validation of our
tokens is tests/delivery/test_operator_mode.py."""

from __future__ import annotations

import base64
import json

import pytest

from jetstream_operator.api.account import NatsAccountSpec, NatsUserSpec
from jetstream_operator.nats import jwt
from jetstream_operator.nats.account_keys import REVOCATION_GRACE, AccountKeys
from jetstream_operator.reconcile.accounts import (
    BucketTarget,
    ConsumerTarget,
    StreamTarget,
    account_claims,
    api_prefixes,
    outside_allowance,
    rotation_due,
    same_account,
    user_permissions,
)


def _account(**spec: object) -> NatsAccountSpec:
    return NatsAccountSpec.model_validate(
        {
            "systemConnectionRef": "system",
            "operatorSigningKey": {"secretName": "signing"},
            **spec,
        }
    )


def _user(**spec: object) -> NatsUserSpec:
    return NatsUserSpec.model_validate({"accountRef": "team-a", **spec})


@pytest.mark.parametrize(("role", "initial"), [("operator", "O"), ("account", "A"), ("user", "U")])
def test_seeds_and_public_keys_are_of_their_role(role: jwt.KeyRole, initial: str) -> None:
    seed = jwt.new_seed(role)
    assert seed.startswith("S" + initial)
    public = jwt.public_key(seed)
    assert public.startswith(initial) and jwt.role_of(public) == role
    assert jwt.new_seed(role) != seed


def test_a_token_is_signed_by_its_issuer_and_a_changed_one_is_refused() -> None:
    signer, subject = jwt.new_seed("account"), jwt.public_key(jwt.new_seed("user"))
    token = jwt.encode(subject, "app", jwt.user_claims(None, {}, {}), signer, expires_at=99)
    claims = jwt.decode(token)
    assert claims["sub"] == subject and claims["iss"] == jwt.public_key(signer)
    assert claims["exp"] == 99 and claims["nats"]["version"] == 2 and claims["jti"]
    header, body, signature = token.split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=="))
    forged["nats"]["pub"] = {"allow": [">"]}
    forged_body = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    with pytest.raises(jwt.InvalidToken):
        jwt.decode(f"{header}.{forged_body}.{signature}")
    with pytest.raises(jwt.InvalidToken):
        jwt.decode("not.a.jwt")
    with pytest.raises(ValueError):
        jwt.public_key("SUNOTASEED")


def test_a_creds_file_holds_the_token_and_the_seed() -> None:
    text = jwt.creds_file("TOKEN", "SEED")
    assert "-----BEGIN NATS USER JWT-----\nTOKEN\n------END NATS USER JWT------" in text
    assert "-----BEGIN USER NKEY SEED-----\nSEED\n------END USER NKEY SEED------" in text


def test_the_account_claims_carry_its_limits_signing_key_and_revocations() -> None:
    spec = _account(
        jetstream={"fileStorage": 1024, "streams": 2, "maxBytesRequired": True},
        limits={"connections": 10},
        exports=[{"subject": "public.>"}],
    )
    claims = account_claims(spec, ["AKEY"], {"UB": 2, "UA": 1})
    assert claims["limits"]["disk_storage"] == 1024 and claims["limits"]["streams"] == 2
    assert claims["limits"]["max_bytes_required"] is True and claims["limits"]["conn"] == 10
    assert claims["signing_keys"] == ["AKEY"]
    assert list(claims["revocations"]) == ["UA", "UB"]
    assert claims["exports"] == [{"subject": "public.>", "type": "stream"}]
    assert "disk_storage" not in account_claims(_account(), [], {})["limits"]  # no JetStream


def test_tiers_replace_the_flat_jetstream_limits() -> None:
    spec = _account(jetstream={"tiers": [{"replicas": 3, "fileStorage": 5}]})
    claims = account_claims(spec, [], {})
    assert claims["tiered_limits"] == {"R3": pytest.approx(claims["tiered_limits"]["R3"])}
    assert claims["tiered_limits"]["R3"]["disk_storage"] == 5
    assert "disk_storage" not in claims["limits"]


def test_drift_is_a_difference_in_what_the_account_says_not_when_it_was_signed() -> None:
    signer, account = jwt.new_seed("operator"), jwt.public_key(jwt.new_seed("account"))
    first = jwt.decode(jwt.encode(account, "a", {"type": "account"}, signer, issued_at=1))
    again = jwt.decode(jwt.encode(account, "a", {"type": "account"}, signer, issued_at=2))
    changed = jwt.decode(jwt.encode(account, "a", {"type": "account", "x": 1}, signer))
    assert same_account(first, again)
    assert not same_account(first, changed)


def test_a_users_permissions_follow_what_it_references() -> None:
    user = _user(
        streams=[{"name": "orders", "access": "Publish"}, {"name": "audit", "access": "Read"}],
        consumers=[{"name": "worker"}, {"name": "pushed"}],
        keyValues=[{"name": "settings", "access": "ReadWrite"}],
        publish=["team-a.events"],
    )
    permissions = user_permissions(
        user,
        {
            "orders": StreamTarget("ORDERS", ("orders.>",)),
            "audit": StreamTarget("AUDIT", ("audit.>",)),
        },
        {
            "worker": ConsumerTarget("ORDERS", "worker"),
            "pushed": ConsumerTarget("ORDERS", "pushed", "deliver.pushed"),
        },
        {"settings": BucketTarget("settings")},
        {},
    )
    publish, subscribe = permissions.allow_lists()
    assert "orders.>" in publish and "audit.>" not in publish  # audit is only read
    assert "$JS.API.CONSUMER.CREATE.AUDIT.>" in publish
    assert "$JS.API.CONSUMER.CREATE.ORDERS.>" not in publish  # orders is only published to
    assert "$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker" in publish
    assert "$JS.API.CONSUMER.MSG.NEXT.ORDERS.pushed" not in publish  # a push consumer
    assert "deliver.pushed" in subscribe and "_INBOX.>" in subscribe
    assert "$KV.settings.>" in publish and "team-a.events" in publish
    assert not any(subject in (">", "$JS.API.>") for subject in publish)
    assert permissions.digest(False) != permissions.digest(True)


def test_resources_behind_a_js_domain_are_reached_under_its_prefix_too() -> None:
    """A client in another domain (a leaf node's, say) addresses the stream's JetStream as
    $JS.<domain>.API; one on the stream's own servers as $JS.API. Both are granted, only for
    what the user references."""
    assert api_prefixes({"jsDomain": "hub"}) == ("$JS.API", "$JS.hub.API")
    assert api_prefixes({"apiPrefix": "$JS.hub.API"}) == ("$JS.API", "$JS.hub.API")
    assert api_prefixes({"apiPrefix": "$JS.API"}) == api_prefixes(None) == ("$JS.API",)
    hub = api_prefixes({"jsDomain": "hub"})
    user = _user(
        streams=[{"name": "orders", "access": "Read"}],
        consumers=[{"name": "worker"}],
        objectStores=[{"name": "files", "access": "ReadWrite"}],
    )
    publish, _ = user_permissions(
        user,
        {"orders": StreamTarget("ORDERS", ("orders.>",), hub)},
        {"worker": ConsumerTarget("AUDIT", "worker", apis=hub)},
        {},
        {"files": BucketTarget("files", hub)},
    ).allow_lists()
    for api in hub:
        assert f"{api}.CONSUMER.CREATE.ORDERS.>" in publish
        assert f"{api}.CONSUMER.MSG.NEXT.AUDIT.worker" in publish
        assert f"{api}.STREAM.PURGE.OBJ_files" in publish
    assert not any(subject.startswith("$JS.hub.API.STREAM.INFO.KV_") for subject in publish)


def test_explicit_subjects_stay_within_the_accounts_prefixes_for_the_namespace() -> None:
    prefixes = ["{namespace}.", "shared.{namespace}."]
    assert outside_allowance(_user(publish=["team-a.x"]), prefixes, "team-a") is None
    assert outside_allowance(
        _user(publish=["team-a.x"], subscribe=["team-b.>"]), prefixes, "team-a"
    ) == ("subscribe", "team-b.>")
    assert outside_allowance(_user(subscribe=[">"]), [], "team-a") is None  # no prefixes set


def test_rotation_is_due_after_its_period_or_two_thirds_of_the_validity() -> None:
    assert rotation_due(100, 100, None, None) is None
    assert rotation_due(100, 100, 90, None) == 60
    assert rotation_due(100, 100, 90, 30) == 30
    assert rotation_due(200, 100, 90, 30) == 0


def test_a_rotation_period_needs_a_validity() -> None:
    schema = NatsUserSpec.model_json_schema()
    rules = [rule["rule"] for rule in schema["x-kubernetes-validations"]]
    assert any("rotationPeriod" in rule and "validFor" in rule for rule in rules)


def test_revocations_go_once_the_revoked_credentials_have_expired() -> None:
    keys = AccountKeys(
        "SA",
        "SB",
        "creds",
        {"UOLD": 100, "UNEW": 100, "UFOREVER": 100},
        {"UOLD": 1_000, "UNEW": 5_000},
    )
    assert keys.without_expired(1_000 + REVOCATION_GRACE) is keys  # not past the grace yet
    pruned = keys.without_expired(1_001 + REVOCATION_GRACE)
    assert pruned.revocations == {"UNEW": 100, "UFOREVER": 100}
    assert pruned.revocation_expiries == {"UNEW": 5_000}
    assert AccountKeys.of(pruned.values()) == pruned  # what the Secret holds reads back
    assert (
        AccountKeys.of({**keys.values(), "revocation-expiries.json": ""}).revocation_expiries == {}
    )
