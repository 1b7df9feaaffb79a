from jetstream_operator.nats.advisories import consumer_from_subject, stream_from_subject


def test_stream_advisory_subjects() -> None:
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS") == "ORDERS"
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.DELETED.ORDERS") == "ORDERS"
    assert stream_from_subject("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS") is None
    assert stream_from_subject("$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.C") is None


def test_consumer_advisory_subjects() -> None:
    assert consumer_from_subject("$JS.EVENT.ADVISORY.CONSUMER.DELETED.ORDERS.C") == (
        "ORDERS",
        "C",
    )
    assert consumer_from_subject("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.C") is None
    assert consumer_from_subject("$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS") is None
