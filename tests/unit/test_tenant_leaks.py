"""Nothing of one tenant reaches another through the operator's words: a name another
namespace holds is said to be taken, not by whom, and a credential written into a server URL
is never shown."""

from __future__ import annotations

from jetstream_operator.api.consumer import ConsumerSpec
from jetstream_operator.api.stream import StreamSpec
from jetstream_operator.nats.pool import ConnectionTarget, classify, redacted
from jetstream_operator.reconcile.consumer_config import desired_consumer_config
from jetstream_operator.reconcile.consumer_plan import OwnedElsewhere as ConsumerOwnedElsewhere
from jetstream_operator.reconcile.consumer_plan import plan_consumer
from jetstream_operator.reconcile.ownership import Owner
from jetstream_operator.reconcile.stream_config import desired_stream_config
from jetstream_operator.reconcile.stream_plan import OwnedElsewhere, plan_stream

TEAM_A = Owner("team-a", "orders", "uid-a")
TEAM_B = Owner("team-b", "secret-project", "uid-b")
TEAM_A_OTHER = Owner("team-a", "orders-old", "uid-c")


def test_a_stream_of_another_namespace_is_taken_not_named() -> None:
    spec = StreamSpec.model_validate({"name": "ORDERS", "subjects": ["orders.>"]})
    held_by_b = {"config": desired_stream_config(spec, TEAM_B)}
    action = plan_stream(spec, TEAM_A, held_by_b)
    assert isinstance(action, OwnedElsewhere)
    message = action.message()
    assert "another namespace" in message and "Choose another spec.name" in message
    assert "team-b" not in message and "secret-project" not in message
    # Within a namespace the other resource is named: it is the team's own to find.
    held_by_a = {"config": desired_stream_config(spec, TEAM_A_OTHER)}
    own = plan_stream(spec, TEAM_A, held_by_a)
    assert isinstance(own, OwnedElsewhere)
    assert "team-a/orders-old" in own.message()


def test_a_consumer_of_another_namespace_is_taken_not_named() -> None:
    spec = ConsumerSpec.model_validate({"durableName": "reader", "streamName": "ORDERS"})
    held = {"config": desired_consumer_config(spec, TEAM_B, "ORDERS")}
    action = plan_consumer(spec, TEAM_A, True, held, stream_name="ORDERS")
    assert isinstance(action, ConsumerOwnedElsewhere)
    assert "team-b" not in action.message() and "secret-project" not in action.message()
    assert "another namespace" in action.message()


def test_credentials_in_a_server_url_are_never_shown() -> None:
    assert redacted("nats://alice:s3cret@nats.example:4222") == "nats://REDACTED@nats.example:4222"
    assert redacted("wss://token@ws.example/path?x=1") == "wss://REDACTED@ws.example/path?x=1"
    assert redacted("tls://nats.example:4222") == "tls://nats.example:4222"
    assert redacted("nats.example:4222") == "nats.example:4222"
    assert redacted("user:pw@nats.example") == "REDACTED@nats.example"
    target = ConnectionTarget(("nats://alice:s3cret@127.0.0.1:1", "nats://b:pw@h:2"), label="a/b")
    for failure in (
        classify(target, ["Authorization Violation"]),
        classify(target, ["SSL: CERTIFICATE_VERIFY_FAILED"]),
        classify(target, ["ConnectionRefusedError"]),
    ):
        assert "s3cret" not in str(failure) and "pw" not in str(failure)
        assert "127.0.0.1:1" in str(failure)
    assert "s3cret" not in repr(target)
