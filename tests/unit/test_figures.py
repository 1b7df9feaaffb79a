"""/metrics as the benchmark and the tests read it: one parser, and the figures built on it."""

from jetstream_devtools.figures import (
    count_writes,
    counts_by_labels,
    parse_flow_control_waits,
    parse_metrics,
)

WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"


def line(kind: str, execute: str, schema: str, level: str, value: float) -> str:
    labels = f'execute="{execute}",flow_schema="{schema}",priority_level="{level}"'
    return f"{WAIT}_{kind}{{{labels}}} {value}"


METRICS = "\n".join(
    [
        f"# HELP {WAIT} [BETA] Length of time a request spent waiting in its queue",
        line("bucket", "true", "service-accounts", "workload-low", 5).replace("}", ',le="0.1"}'),
        line("sum", "true", "service-accounts", "workload-low", 0.5),
        line("count", "true", "service-accounts", "workload-low", 10),
        line("sum", "true", "kube-controller-manager", "workload-low", 0.25),
        line("count", "true", "kube-controller-manager", "workload-low", 5),
        line("sum", "false", "global-default", "global-default", 9),
        line("count", "false", "global-default", "global-default", 3),
        line("sum", "true", "global-default", "global-default", 0),
        line("count", "true", "global-default", "global-default", 2),
    ]
)


def test_waits_add_up_by_priority_level_and_leave_out_rejected_requests() -> None:
    assert parse_flow_control_waits(METRICS) == {
        "workload-low": (0.75, 15),
        "global-default": (0.0, 2),
    }


def test_no_flow_control_no_figures() -> None:
    assert parse_flow_control_waits('apiserver_request_total{verb="GET"} 3\n') == {}


def test_samples_keep_series_labels_in_order_and_values() -> None:
    text = "\n".join(
        [
            "# TYPE jetstream_operator_advisories_total counter",
            'jetstream_operator_advisories_total{kind="stream",action="DELETED"} 3.0',
            "",
            'odd{path="a\\\\b",quote="say \\"hi\\"",brace="}"} +Inf',
            "jetstream_operator_up 1",
        ]
    )
    samples = list(parse_metrics(text))
    assert [s.series for s in samples] == [
        'jetstream_operator_advisories_total{kind="stream",action="DELETED"}',
        'odd{path="a\\\\b",quote="say \\"hi\\"",brace="}"}',
        "jetstream_operator_up",
    ]
    assert samples[1].labels == {"path": "a\\b", "quote": 'say "hi"', "brace": "}"}
    assert samples[1].value == float("inf")
    assert samples[2].labels == {}
    assert counts_by_labels(samples, "jetstream_operator_advisories_total") == {"stream DELETED": 3}


def test_writes_by_verb_and_resource_of_one_group() -> None:
    text = "\n".join(
        [
            'apiserver_request_total{code="201",group="g",resource="streams",verb="POST"} 4',
            'apiserver_request_total{code="200",group="g",resource="streams",'
            'subresource="status",verb="PATCH"} 7',
            'apiserver_request_total{code="200",group="g",resource="streams",verb="GET"} 9',
            'apiserver_request_total{code="200",group="",resource="leases",verb="PUT"} 2',
        ]
    )
    assert count_writes(parse_metrics(text)) == {
        "POST streams": 4,
        "PATCH streams/status": 7,
        "PUT leases": 2,
    }
    assert count_writes(parse_metrics(text), group="g", resources=["streams"]) == {
        "POST streams": 4,
        "PATCH streams/status": 7,
    }
