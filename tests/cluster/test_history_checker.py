"""The Jepsen-style checker finds each anomaly it exists for (and none in a clean run)."""

from __future__ import annotations

from logkeel.testing.history import History


def _run(acks: list[tuple[int, str, int]], reads: list[tuple[int, int, str]] = ()) -> History:
    h = History()
    for seq, (partition, value, offset) in enumerate(acks):
        h.ack(partition, value, seq, offset)
    for partition, offset, value in reads:
        h.read(partition, offset, value)
    return h


def test_clean_run_has_no_anomalies() -> None:
    h = _run([(0, "a", 0), (0, "b", 1), (1, "c", 0)], [(0, 0, "a")])
    assert h.check({0: [(0, "a"), (1, "b"), (2, "unacked")], 1: [(0, "c")]}) == []


def test_lost_acked_write() -> None:
    h = _run([(0, "a", 0), (0, "b", 1)])
    [anomaly] = h.check({0: [(0, "a")]})
    assert "acked 'b' at 1 lost" in anomaly


def test_acked_write_at_another_offset_is_lost() -> None:
    h = _run([(0, "a", 0)])
    assert any("lost (offset holds 'x')" in a for a in h.check({0: [(0, "x"), (1, "a")]}))


def test_duplicate() -> None:
    h = _run([(0, "a", 0)])
    assert any("duplicated at 0 and 1" in a for a in h.check({0: [(0, "a"), (1, "a")]}))


def test_out_of_order_acks() -> None:
    h = _run([(0, "a", 1), (0, "b", 0)])
    assert any(
        "sent after 'a' but acked at 0 <= 1" in a for a in h.check({0: [(0, "b"), (1, "a")]})
    )


def test_read_above_the_high_watermark() -> None:
    h = _run([(0, "a", 0)], [(0, 1, "ghost")])
    assert any("read 'ghost' at 1" in a for a in h.check({0: [(0, "a")]}))


def test_reported_truncation_excuses_only_what_it_covers() -> None:
    h = _run([(0, "a", 0), (0, "b", 1), (0, "c", 2)], [(0, 2, "c")])
    assert h.check({0: [(0, "a"), (1, "b")]}, reported_truncations={0: 2}) == []
    anomalies = h.check({0: [(0, "a")]}, reported_truncations={0: 2})
    assert anomalies == ["p0: acked 'b' at 1 lost"]


def test_an_ack_without_an_offset_is_checked_where_the_final_log_holds_it() -> None:
    h = _run([(0, "a", 0), (0, "b", None), (0, "c", 2)])
    assert h.check({0: [(0, "a"), (1, "b"), (2, "c")]}) == []
    assert h.check({0: [(0, "a"), (2, "c")]}) == ["p0: acked 'b' (offset not told) lost"]
    assert h.check({0: [(0, "a"), (1, "x"), (2, "c"), (3, "b")]}) == [
        "p0: 'c' sent after 'b' but acked at 2 <= 3"
    ]
    # A reported cut excuses it only past a write that was cut too.
    assert h.check({0: [(0, "a")]}, reported_truncations={0: 0}) == []
    assert h.check({0: [(0, "a")]}, reported_truncations={0: 2}) == [
        "p0: acked 'b' (offset not told) lost"
    ]
