"""kube-apiserver's flow-control figures, parsed as the benchmark reads them."""

from jetstream_operator.devenv.figures import parse_flow_control_waits

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
