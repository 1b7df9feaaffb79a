"""Which streams' consumers a resync lists: the idle cost of drift repair for consumers."""

from typing import Any

from jetstream_operator.handlers.drift import ConsumerSweep


def listing(names: list[str], last_seq: int = 0, consumers: int = 1) -> dict[str, Any]:
    return {
        name: {"created": "t0", "state": {"last_seq": last_seq, "consumer_count": consumers}}
        for name in names
    }


def test_first_pass_lists_everything_then_only_a_rotating_share() -> None:
    names = [f"S{i:02}" for i in range(20)]
    sweep = ConsumerSweep(share=0.1)
    infos = listing(names)
    assert sweep.choose(infos, names) == set(names)
    seen: list[set[str]] = [sweep.choose(infos, names) for _ in range(10)]
    assert all(len(chosen) == 2 for chosen in seen)
    # Ten idle passes at a tenth each cover every stream exactly once.
    assert sorted(name for chosen in seen for name in chosen) == names


def test_a_stream_whose_state_moved_is_listed_at_once() -> None:
    names = ["A", "B", "C", "D"]
    sweep = ConsumerSweep(share=0.0)
    sweep.choose(listing(names), names)
    assert sweep.choose(listing(names), names) == set()
    moved = listing(names)
    moved["C"]["state"]["last_seq"] = 5  # new messages change the consumers' pending counts
    assert sweep.choose(moved, names) == {"C"}
    assert sweep.choose(moved, names) == set()
    recreated = {**moved, "D": {**moved["D"], "created": "t1"}}
    assert sweep.choose(recreated, names) == {"D"}
    fewer = {**recreated, "A": {**recreated["A"], "state": {"consumer_count": 0}}}
    assert sweep.choose(fewer, names) == {"A"}


def test_everything_after_a_reconnect_and_forgotten_streams() -> None:
    sweep = ConsumerSweep(share=0.0)
    sweep.choose(listing(["A", "B"]), ["A", "B"])
    sweep.everything_next()
    assert sweep.choose(listing(["A", "B"]), ["A", "B"]) == {"A", "B"}
    # A stream that stops having Consumer resources is forgotten; when it gets one back, that
    # consumer's handler has just checked it, so it is only marked, and listed once it moves.
    assert sweep.choose(listing(["A", "B"]), ["A"]) == set()
    assert sweep.choose(listing(["A", "B"]), ["A", "B"]) == set()
    assert sweep.choose(listing(["A", "B"], last_seq=3), ["A", "B"]) == {"A", "B"}


def test_streams_first_seen_after_the_first_pass_are_not_listed_at_once() -> None:
    """Thousands of new streams with consumers would otherwise cost a listing each on the first
    resync after their handlers made them."""
    sweep = ConsumerSweep(share=0.0)
    sweep.choose(listing(["A"]), ["A"])
    names = ["A", *(f"N{i}" for i in range(100))]
    assert sweep.choose(listing(names), names) == set()


def test_share_of_one_lists_everything_every_pass() -> None:
    sweep = ConsumerSweep(share=5.0)
    names = ["A", "B", "C"]
    for _ in range(3):
        assert sweep.choose(listing(names), names) == set(names)


def test_a_small_share_of_few_streams_still_averages_out() -> None:
    """Three streams at a hundredth each pass: one listing per 33 passes, not one per pass."""
    names = ["A", "B", "C"]
    sweep = ConsumerSweep(share=0.01)
    sweep.choose(listing(names), names)
    listed = sum(len(sweep.choose(listing(names), names)) for _ in range(100))
    assert listed == 3
