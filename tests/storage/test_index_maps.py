"""Index maps and descriptors (issue 19): an index is mapped only while it has entries, at most
``MAPS.limit`` stay mapped, one that gave its map back still reads, appends, flushes and
recovers; the broker's descriptor budget refuses what it cannot serve."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from logkeel.storage import descriptors
from logkeel.storage.descriptors import DescriptorBudget
from logkeel.storage.engine import index_file
from logkeel.storage.engine.index_maps import MAPS, MapBudget
from logkeel.storage.engine.offset_index import OffsetIndex, OffsetPosition
from logkeel.storage.engine.time_index import TimeIndex
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from .logutil import open_fds
from .startuputil import (
    CFG,
    append_workload,
    copy,
    crash,
    fingerprint,
    load,
    rebuild_from_scratch,
)

# Before 3.13 an mmap holds a dup of its file's descriptor.
MAPPED_FDS = 1 if sys.version_info < (3, 13) else 0


def partition_dir(root: Path) -> Path:
    d = root / "logs" / "topic-0"
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_an_active_index_without_entries_holds_no_map_until_its_first_entry(
    tmp_path: Path,
) -> None:
    d = partition_dir(tmp_path)
    before = open_fds()
    offsets = OffsetIndex(d / "00000000000000000100.index", 100)
    times = TimeIndex(d / "00000000000000000100.timeindex", 100)
    for index in (offsets, times):
        index.resize(index.max_index_size)  # what an active segment does
        assert index.is_loaded and not index.is_mapped
        assert index.entries == 0 and not index.is_full()
    assert offsets.lookup(150) == OffsetPosition(100, 0)
    assert times.last_entry.offset == 100
    offsets.flush()
    times.flush()
    assert open_fds() == before
    assert not offsets.is_mapped

    offsets.append(105, 4096)
    times.maybe_append(1_700_000_000_000, 105)
    assert offsets.is_mapped and times.is_mapped
    assert open_fds() == before + 2 * MAPPED_FDS
    assert offsets.lookup(150) == OffsetPosition(105, 4096)

    # Truncated back to nothing and trimmed (a roll of an entry-less segment): no map again.
    offsets.truncate_to(100)
    offsets.trim_to_valid_size()
    assert not offsets.is_mapped and offsets.entries == 0
    offsets.close()
    times.close()
    assert open_fds() == before
    # Reopened: the time index's entry came back, through a map made when it was loaded.
    again = TimeIndex(d / "00000000000000000100.timeindex", 100)
    assert again.entries == 1 and again.is_mapped
    again.close()


def test_junk_after_a_crash_is_zeroed_without_a_map(tmp_path: Path) -> None:
    """A preallocated index whose written slots end in junk (offsets going back) keeps the
    valid prefix; the junk is zeroed on disk so that a later crash cannot read it back."""
    path = partition_dir(tmp_path) / "00000000000000000000.index"
    index = OffsetIndex(path, 0)
    for offset, position in ((1, 10), (2, 20), (3, 30)):
        index.append(offset, position)
    index.flush()
    index.close_handler()  # a crash: the file stays preallocated
    raw = bytearray(path.read_bytes())
    raw[16:24] = (1).to_bytes(4, "big") + (40).to_bytes(4, "big")  # slot 2: offset 1 < 2
    path.write_bytes(bytes(raw))

    reloaded = OffsetIndex(path, 0)
    assert reloaded.entries == 2
    assert path.read_bytes()[16:24] == bytes(8)
    assert reloaded.lookup(9) == OffsetPosition(2, 20)
    reloaded.close()


def test_at_most_the_limit_of_indexes_stay_mapped_and_the_others_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MAPS, "limit", 3)
    d = partition_dir(tmp_path)
    before = open_fds()
    indexes = [OffsetIndex(d / f"{i * 1000:020d}.index", i * 1000) for i in range(8)]
    for round_ in range(5):
        for i, index in enumerate(indexes):
            index.append(i * 1000 + round_ + 1, (round_ + 1) * 100)
            assert sum(x.is_mapped for x in indexes) <= 3
            assert open_fds() <= before + 3 * MAPPED_FDS
    for i, index in enumerate(indexes):
        assert index.entries == 5
        assert index.lookup(i * 1000 + 3) == OffsetPosition(i * 1000 + 3, 300)
        assert list(index.iter_entries())[-1] == OffsetPosition(i * 1000 + 5, 500)
        index.sanity_check()
    for index in indexes:
        index.close()
    assert open_fds() == before
    assert all(OffsetIndex(x.path, x.base_offset).entries == 5 for x in indexes)


def test_an_index_that_gave_its_map_back_syncs_its_file_on_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(index_file, "fsync_file", lambda p: synced.append(Path(p)))
    monkeypatch.setattr(MAPS, "limit", 1)
    d = partition_dir(tmp_path)
    first = OffsetIndex(d / "00000000000000000000.index", 0)
    second = OffsetIndex(d / "00000000000000001000.index", 1000)
    first.append(1, 10)
    second.append(1001, 10)  # the budget takes the first one's map
    assert not first.is_mapped and second.is_mapped
    first.flush()
    assert synced == [first.path]
    first.flush()  # nothing written since
    assert synced == [first.path]
    first.append(2, 20)  # mapped again, the second one's map given back
    assert first.is_mapped and not second.is_mapped
    first.close()
    second.close()


def test_the_budget_passes_over_recently_used_and_busy_indexes() -> None:
    class Fake:
        def __init__(self, busy: bool = False) -> None:
            self._used = False
            self.busy = busy
            self.released = False

        def _release_map_if_idle(self) -> bool:
            self.released = not self.busy
            return self.released

    budget = MapBudget(2)
    a, b, c, d = Fake(), Fake(busy=True), Fake(), Fake()
    budget.add(a)
    budget.add(b)
    a._used = True  # used since: a second chance
    budget.add(c)
    assert (a.released, b.released) == (False, False) and b.busy  # b was busy: kept
    assert len(budget) == 3
    budget.add(d)  # c and a (its chance spent) go, oldest first; b is still busy
    assert a.released and c.released and not b.released and not d.released
    assert len(budget) == 2
    budget.discard(b)
    assert len(budget) == 1


def test_a_log_whose_maps_were_given_back_reads_appends_flushes_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four partitions written in turn with room for two maps: every index loses its map
    again and again; the logs read back, and after a crash recover to exactly what a rebuild
    from the records makes."""
    monkeypatch.setattr(MAPS, "limit", 2)
    path = tmp_path / "d"
    tps = [TopicPartition("t", p) for p in range(4)]
    m = LogManager([path], default_config=CFG)
    m.startup(start_background=False)
    logs = [m.get_or_create_log(tp) for tp in tps]
    for start in range(0, 30, 3):
        for plog in logs:
            append_workload(plog, 3, start=start)
            plog.high_watermark = plog.log_end_offset
        if start == 15:
            for plog in logs:
                plog.flush()
            m.checkpoint_all()
    mapped = [s.offset_index.is_mapped for plog in logs for s in plog.segments]
    assert sum(mapped) <= 2 and sum(s.offset_index.entries > 0 for s in logs[0].segments) > 2
    written = [fingerprint(plog) for plog in logs]
    crash(m)  # the second half unflushed
    reference = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    recovered = load(path)
    for tp, before in zip(tps, written, strict=True):
        after = fingerprint(recovered.get_log(tp))
        assert after == fingerprint(reference.get_log(tp))
        assert after["records"] == before["records"]
    recovered.shutdown()
    reference.shutdown()


def test_the_budget_refuses_replicas_past_the_limit() -> None:
    budget = DescriptorBudget(limit=20_000, raised_from=1024, hard=20_000, maps=5_000)
    assert budget.replicas == 20_000 - 5_000 - descriptors.RESERVE
    assert budget.refusal(budget.replicas) is None
    refusal = budget.refusal(budget.replicas + 1)
    assert refusal is not None and "ulimit -Hn" in refusal and str(budget.replicas) in refusal
    line = budget.describe(10_000)
    assert "10000 replica logs" in line and "raised from 1024" in line


def test_a_new_replica_past_the_budget_is_refused_with_the_reason(tmp_path: Path) -> None:
    m = LogManager([tmp_path / "d"], default_config=CFG)
    m.startup(start_background=False)
    m.descriptors = DescriptorBudget(limit=12, raised_from=12, hard=12, maps=0, reserve=10)
    m.get_or_create_log(TopicPartition("t", 0))
    m.get_or_create_log(TopicPartition("t", 1))
    with pytest.raises(KafkaStorageError, match="need more file descriptors") as refused:
        m.get_or_create_log(TopicPartition("t", 2))
    assert refused.value.log_dir == ""  # no dir's fault: only that partition
    assert all(d.online for d in m.dirs) and len(m.logs) == 2
    m.shutdown()


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.fail(f"this test needs a finite hard limit above 256, not {hard}")
    code = (
        "import resource; from logkeel.storage import descriptors;"
        "from logkeel.storage.engine.index_maps import MAPS;"
        "b = descriptors.configure();"
        "print(b.raised_from, b.limit, resource.getrlimit(resource.RLIMIT_NOFILE)[0], MAPS.limit)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    maps = "None" if sys.version_info >= (3, 13) else str(hard // 4)
    assert out == ["256", str(hard), str(hard), maps]


def test_an_index_dropped_without_closing_unmaps_when_collected(tmp_path: Path) -> None:
    """The budget holds its indexes weakly: one nobody closes (a test's, a dropped segment's)
    gives its descriptor back when collected, as before there was a budget."""
    before = open_fds()
    index = OffsetIndex(partition_dir(tmp_path) / "00000000000000000000.index", 0)
    index.append(1, 1)
    assert open_fds() == before + MAPPED_FDS
    del index
    assert open_fds() == before
