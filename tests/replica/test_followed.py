"""A follower fetcher's partitions kept by what changed (``followed``), without sockets, on real
partitions over real logs: after whatever moves a position -- this fetcher's appends and
truncations, a truncation or log-start move by anything else, a log replaced, a back-off ending,
a partition removed and re-added, its throttling -- what the next Fetch asks for equals what a
recomputation over every followed partition gives."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logkeel.cluster.metadata import PartitionState, topic_id_text, topic_uuid
from logkeel.records.builder import build_batch
from logkeel.server.fetch_sessions import FetchParams
from logkeel.server.replica.fetcher_session import SessionKey
from logkeel.server.replica.followed import FetchState, FollowedPartitions
from logkeel.server.replica.partition import Partition
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.partition_tables import follower_partitions

TOPIC_ID = topic_id_text(uuid.UUID(int=0x19))
MAX_BYTES = 1 << 20
BACKOFF_S = 1.0


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"])
    manager.startup(start_background=False)
    yield manager
    manager.shutdown()


class Tracked:
    """FollowedPartitions as a fetcher holds it; log listeners touch at once (the fetcher
    brings them onto its loop)."""

    def __init__(self, throttled: Callable[[TopicPartition, Partition], bool] | None = None):
        self.listened: list[TopicPartition] = []
        self.followed = FollowedPartitions(
            MAX_BYTES,
            BACKOFF_S,
            throttled or (lambda _tp, _p: False),
            self._listener,
        )

    def _listener(self, tp: TopicPartition) -> Callable[[], None]:
        def moved() -> None:
            self.listened.append(tp)
            self.followed.touch(tp)

        return moved

    def add_fetching(self, p: Partition, now: float) -> FetchState:
        """Added, and its truncation done (as the fetcher's round does it)."""
        s = self.followed.add(p, p.leader_epoch)
        s.truncating = False
        self.followed.touch(p.tp)
        self.followed.refresh(now)
        return s


def from_scratch(f: FollowedPartitions, now: float) -> dict[SessionKey, FetchParams]:
    """What the Fetch asks for, recomputed over every followed partition (the old rounds)."""
    out = {}
    for s in f.states.values():
        if s.delayed_until > now or s.truncating:
            continue
        position = s.partition.fetch_position()
        if position is None:
            continue
        log_end, epoch, start = position
        out[s.key] = FetchParams(log_end, MAX_BYTES, s.leader_epoch, epoch, start)
    return out


def append(p: Partition, count: int = 1, epoch: int = 0) -> None:
    """The leader's records appended as this fetcher appends them, high watermark to the end."""
    plog = p.log
    assert plog is not None
    end = plog.log_end_offset
    batch = build_batch(
        [(0, None, b"v", ())] * count, base_offset=end, partition_leader_epoch=epoch
    )
    assert p.append_as_follower(batch, 0, end + count, expected_log_end=end) is not None


def test_a_round_recomputes_only_what_was_touched(logs: LogManager) -> None:
    parts = follower_partitions(logs, "t", TOPIC_ID, 4)
    t = Tracked()
    f = t.followed
    for p in parts:
        s = f.add(p, 0)
        assert s.truncating
    assert f.refresh(0.0) == set()  # truncating first: nothing fetched yet
    assert f.truncating == {p.tp for p in parts}
    for p in parts:
        f.states[p.tp].truncating = False
        f.touch(p.tp)
    assert len(f.refresh(0.0)) == 4 and f.wanted == from_scratch(f, 0.0)
    assert f.refresh(0.0) == set()  # nothing touched: nothing recomputed

    append(parts[1], 3)
    f.touch(parts[1].tp)  # the fetcher touches what its answer named
    assert f.refresh(0.0) == {f.states[parts[1].tp].key}
    assert f.wanted[f.states[parts[1].tp].key].fetch_offset == 3
    assert f.wanted == from_scratch(f, 0.0)


def test_a_log_moved_by_something_else_tells_its_fetcher(logs: LogManager) -> None:
    """A validation cut, retention and a log start taken from the leader move a follower's
    log without its fetcher: the log tells it, or the leader would go on answering from the
    old position (a cut unseen would leave a gap at the next append)."""
    [p] = follower_partitions(logs, "t", TOPIC_ID, 1)
    t = Tracked()
    f = t.followed
    t.add_fetching(p, 0.0)
    append(p, 5)
    f.touch(p.tp)
    f.refresh(0.0)
    plog = p.log
    assert plog is not None and plog.high_watermark == 5

    plog.truncate_to(3)  # a cut by validation, not by the fetcher
    assert t.listened == [p.tp]
    f.refresh(0.0)
    assert f.wanted == from_scratch(f, 0.0) and f.wanted[f.states[p.tp].key].fetch_offset == 3

    assert plog.maybe_increment_log_start_offset(2)  # retention or DeleteRecords
    f.refresh(0.0)
    assert f.wanted[f.states[p.tp].key].log_start_offset == 2

    plog.truncate_fully_and_start_at(10)
    f.refresh(0.0)
    assert f.wanted == from_scratch(f, 0.0) and f.wanted[f.states[p.tp].key].fetch_offset == 10


def test_records_fetched_before_a_cut_are_not_appended_past_it(logs: LogManager) -> None:
    [p] = follower_partitions(logs, "t", TOPIC_ID, 1)
    append(p, 5)
    plog = p.log
    assert plog is not None
    plog.truncate_to(3)
    batch = build_batch([(0, None, b"v", ())], base_offset=5, partition_leader_epoch=0)
    assert p.append_as_follower(batch, 0, 6, expected_log_end=5) is None
    assert plog.log_end_offset == 3  # no gap from 3 to 5


def test_a_replaced_log_is_read_and_listened_to(logs: LogManager, tmp_path: Path) -> None:
    """A replica moved to another log dir: the manager touches it; from then on the new log
    is the one that tells of moves, and the old one no longer does."""
    [p] = follower_partitions(logs, "t", TOPIC_ID, 1)
    t = Tracked()
    f = t.followed
    t.add_fetching(p, 0.0)
    old = p.log
    assert old is not None
    other = LogManager([tmp_path / "other"])
    other.startup(start_background=False)
    try:
        new = other.get_or_create_log(p.tp)
        new.truncate_fully_and_start_at(7)
        p.log = new
        f.touch(p.tp)  # ReplicaManager.on_log_replaced, through the fetcher manager
        f.refresh(0.0)
        assert f.wanted[f.states[p.tp].key].fetch_offset == 7
        assert new.position_listener is not None
        new.truncate_fully_and_start_at(9)
        f.refresh(0.0)
        assert f.wanted == from_scratch(f, 0.0)
        f.remove(p.tp)
        assert new.position_listener is None
    finally:
        other.shutdown()


def test_back_off_leaves_a_partition_out_until_it_ends(logs: LogManager) -> None:
    parts = follower_partitions(logs, "t", TOPIC_ID, 2)
    t = Tracked()
    f = t.followed
    states = [t.add_fetching(p, 0.0) for p in parts]
    f.back_off([states[0]], None, 10.0)
    assert f.refresh(10.0) == {states[0].key} and states[0].key not in f.wanted
    assert f.next_due(10.0) == BACKOFF_S
    append(parts[0], 2)  # appended meanwhile (by an answer in flight)
    assert f.refresh(10.5) == set() and f.wanted == from_scratch(f, 10.5)
    # Its due time alone brings it back, with its current position.
    assert f.refresh(11.0) == {states[0].key}
    assert f.wanted == from_scratch(f, 11.0) and f.wanted[states[0].key].fetch_offset == 2
    assert f.next_due(11.0) is None


def test_a_partition_removed_and_readded_under_a_new_topic_id(logs: LogManager) -> None:
    [p] = follower_partitions(logs, "t", TOPIC_ID, 1)
    t = Tracked()
    f = t.followed
    s = t.add_fetching(p, 0.0)
    plog = p.log
    f.remove(p.tp)
    assert f.refresh(0.0) == {s.key} and f.wanted == {}
    assert plog is not None and plog.position_listener is None
    recreated = Partition(p.tp, topic_id_text(uuid.UUID(int=0x20)), 1)
    recreated.log = plog
    recreated.apply_state(PartitionState("t", 0, [1, 2, 3], 3, 1, [1, 2, 3], 0))
    f.planned = 4  # an answer to a Fetch planned before the re-add is not about it
    s2 = t.add_fetching(recreated, 0.0)
    assert f.current(p.tp, 4) is None and f.current(p.tp, 5) is s2
    assert s2.key == (topic_uuid(recreated.topic_id), 0) != s.key
    assert f.wanted == {s2.key: FetchParams(0, MAX_BYTES, 1, -1, 0)}
    assert f.tp_of(s2.key) == p.tp and f.tp_of(s.key) is None


def test_an_offline_partition_backs_off(logs: LogManager) -> None:
    [p] = follower_partitions(logs, "t", TOPIC_ID, 1)
    t = Tracked()
    f = t.followed
    s = t.add_fetching(p, 0.0)
    plog, p.log = p.log, None
    f.touch(p.tp)
    f.refresh(0.0)
    assert f.wanted == {} and s.delayed_until == BACKOFF_S
    p.log = plog  # back online: the back-off's end reads it again
    f.refresh(BACKOFF_S)
    assert f.wanted == from_scratch(f, BACKOFF_S) != {}


def test_throttling_is_read_again_when_touched(logs: LogManager) -> None:
    """Whether a replica is throttled follows its ISR and topic configs, which reach the
    fetcher as a touch from the fetcher manager."""
    parts = follower_partitions(logs, "t", TOPIC_ID, 3)
    listed = {1}
    t = Tracked(lambda tp, p: tp.partition in listed and p.node_id not in p.isr)
    f = t.followed
    for p in parts:
        t.add_fetching(p, 0.0)
    assert f.throttled == set()  # in the ISR
    parts[1].apply_state(PartitionState("t", 1, [1, 2, 3], 3, 0, [2, 3], 1))
    f.touch(parts[1].tp)
    f.refresh(0.0)
    assert f.throttled == {parts[1].tp}
    listed.clear()  # follower.replication.throttled.replicas changed
    f.touch(parts[1].tp)
    f.refresh(0.0)
    assert f.throttled == set()


def test_random_moves_keep_what_is_asked_equal_to_a_full_recomputation(
    logs: LogManager,
) -> None:
    """Appends and truncations (this fetcher's, touched), cuts and log-start moves by others
    (told by the logs), back-offs, removals and re-adds, in random order: after each round's
    refresh, what the Fetch asks for is what recomputing every partition gives."""
    rng = random.Random(227)
    parts = follower_partitions(logs, "t", TOPIC_ID, 12)
    t = Tracked()
    f = t.followed
    for p in parts:
        t.add_fetching(p, 0.0)
    now = 0.0
    for _ in range(600):
        p = rng.choice(parts)
        plog = p.log
        assert plog is not None
        s = f.states.get(p.tp)
        op = rng.randrange(8)
        if op == 0:
            append(p, rng.randint(1, 3))
            f.touch(p.tp)
        elif op == 1 and plog.log_end_offset > plog.log_start_offset:
            plog.truncate_to(rng.randint(plog.log_start_offset, plog.log_end_offset))
        elif op == 2 and plog.high_watermark > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(plog.high_watermark)
        elif op == 3 and s is not None:
            f.back_off([s], None, now)
        elif op == 4:
            f.remove(p.tp)
        elif op == 5 and s is None:
            t.add_fetching(p, now)
        elif op == 6 and s is not None:
            s.truncating = True  # a diverging epoch answered
            f.touch(p.tp)
        elif op == 7 and s is not None and s.truncating:
            plog.truncate_to(plog.high_watermark)  # the truncation round
            s.truncating = False
            f.touch(p.tp)
        now += rng.choice((0.0, 0.1, 0.5))
        f.refresh(now)
        assert f.wanted == from_scratch(f, now)
        assert f.truncating == {
            tp for tp, st in f.states.items() if st.truncating and st.delayed_until <= now
        }


def test_a_refresh_failing_half_way_loses_no_change(logs: LogManager) -> None:
    """A recompute that raises leaves the rest dirty, and the keys already changed are still
    handed to the next plan."""
    parts = follower_partitions(logs, "t", TOPIC_ID, 3)
    broken: set[TopicPartition] = set()

    def throttled(tp: TopicPartition, _p: Partition) -> bool:
        if tp in broken:
            raise RuntimeError("settings unreadable")
        return False

    t = Tracked(throttled)
    f = t.followed
    for p in parts:
        t.add_fetching(p, 0.0)
    f.take_changed()
    for p in parts:
        append(p, 2)
        f.touch(p.tp)
    broken.add(parts[1].tp)
    with pytest.raises(RuntimeError):
        f.refresh(0.0)
    broken.clear()
    f.refresh(0.0)
    assert f.wanted == from_scratch(f, 0.0)
    assert f.take_changed() == {f.states[p.tp].key for p in parts}
