import pytest

from jetstream_operator.api.base import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("100ms", 100_000_000),
        ("24h", 86_400_000_000_000),
        ("1h30m", 5_400_000_000_000),
        ("1.5s", 1_500_000_000),
        ("2m", 120_000_000_000),
        ("250us", 250_000),
        ("7ns", 7),
    ],
)
def test_go_durations_parse_to_nanoseconds(text: str, nanos: int) -> None:
    assert parse_duration(text) == nanos


@pytest.mark.parametrize("text", ["", "10", "1d", "-5s", "1h 30m", "abc", "1.s"])
def test_bad_durations_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="duration such as"):
        parse_duration(text)


@pytest.mark.parametrize("nanos", [0, 1, 999, 1_500_000_000, 5_400_000_000_000, 86_400_000_000_001])
def test_formatting_round_trips(nanos: int) -> None:
    assert parse_duration(format_duration(nanos)) == nanos


def test_format_uses_largest_units() -> None:
    assert format_duration(5_400_000_000_000) == "1h30m"
    assert format_duration(100_000_000) == "100ms"
