"""Which streams' consumers a resync lists: the idle cost of drift repair for consumers."""

from typing import Any

from jetstream_operator.triggers.consumer_sweep import ConsumerSweep


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


def consumers(**figures: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """A CONSUMER.LIST answer: name -> (delivered stream seq, num_pending)."""
    return {
        name: {
            "delivered": {"stream_seq": seq},
            "ack_floor": {"stream_seq": seq},
            "num_pending": pending,
            "num_ack_pending": 0,
        }
        for name, (seq, pending) in figures.items()
    }


def listed_over(sweep: ConsumerSweep, names: list[str], passes: int) -> dict[str, int]:
    counts = dict.fromkeys(names, 0)
    for _ in range(passes):
        for name in sweep.choose(listing(names), names):
            counts[name] += 1
    return counts


def test_idle_consumers_are_listed_at_the_idle_share_and_busy_ones_at_the_full_share() -> None:
    names = ["BUSY", "IDLE1", "IDLE2", "IDLE3"]
    sweep = ConsumerSweep(share=0.5, idle_share=0.01)
    sweep.choose(listing(names), names)  # the first pass lists everything
    sweep.looked("BUSY", consumers(C=(10, 90)))  # work outstanding when first seen
    for idle in names[1:]:
        sweep.looked(idle, consumers(C=(10, 0)))
    counts = listed_over(sweep, names, 100)
    assert counts["BUSY"] == 50
    assert sum(counts[idle] for idle in names[1:]) == 3  # 3 streams x 100 passes x 0.01


def test_a_consumer_stays_active_while_its_figures_move_and_turns_idle_when_they_stop() -> None:
    sweep = ConsumerSweep(share=1.0, idle_share=0.0)
    sweep.choose(listing(["S"]), ["S"])
    sweep.looked("S", consumers(C=(10, 90)))
    assert sweep.choose(listing(["S"]), ["S"]) == {"S"}
    sweep.looked("S", consumers(C=(50, 50)))  # a client drains the backlog: no new messages
    assert sweep.choose(listing(["S"]), ["S"]) == {"S"}
    sweep.looked("S", consumers(C=(50, 50)))  # nobody reads any more: a backlog left alone
    assert sweep.choose(listing(["S"]), ["S"]) == set()
    # New messages move the stream's mark: listed at once, whatever its share.
    assert sweep.choose(listing(["S"], last_seq=7), ["S"]) == {"S"}


def test_a_new_consumer_without_work_does_not_make_its_stream_active() -> None:
    sweep = ConsumerSweep(share=1.0, idle_share=0.0)
    sweep.choose(listing(["S"]), ["S"])
    sweep.looked("S", consumers(C=(10, 0)))
    sweep.looked("S", consumers(C=(10, 0), D=(10, 0)))
    assert sweep.choose(listing(["S"]), ["S"]) == set()
    sweep.looked("S", consumers(C=(10, 0), D=(10, 0), E=(0, 10)))
    assert sweep.choose(listing(["S"]), ["S"]) == {"S"}


def test_a_stream_first_seen_with_messages_counts_as_active() -> None:
    """Its consumers' handlers have just made them; a client may now be reading its backlog."""
    sweep = ConsumerSweep(share=1.0, idle_share=0.0)
    sweep.choose(listing(["A"]), ["A"])
    names = ["A", "FULL", "EMPTY"]
    infos = listing(names)
    infos["FULL"]["state"]["messages"] = 5
    assert sweep.choose(infos, names) == {"FULL"}
    sweep.looked("FULL", consumers(C=(5, 0)))
    assert sweep.choose(infos, names) == set()


def test_a_stream_whose_consumer_status_is_behind_is_looked_at_again_until_written() -> None:
    """Figures that stopped moving after their write was held back by the status budget:
    without `behind` the stream turns idle and status keeps the old figures for hours."""
    sweep = ConsumerSweep(share=1.0, idle_share=0.0)
    sweep.choose(listing(["S"]), ["S"])
    sweep.looked("S", consumers(C=(10, 0)))
    sweep.looked("S", consumers(C=(10, 0)))  # nothing moves between looks: idle
    assert sweep.choose(listing(["S"]), ["S"]) == set()
    sweep.behind("S")  # the look found figures its status write could not carry yet
    assert sweep.choose(listing(["S"]), ["S"]) == {"S"}
    sweep.looked("S", consumers(C=(10, 0)))  # looked again, written this time
    assert sweep.choose(listing(["S"]), ["S"]) == set()
