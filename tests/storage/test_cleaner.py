"""The log cleaner: compaction of cleanup.policy=compact logs, and its crash safety."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from logkeel.config.topic import BrokerConfig, TopicConfig
from logkeel.records.batch import CompressionType
from logkeel.records.builder import build_batch
from logkeel.records.record import Record, iter_records
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    file_name,
)

from .logutil import TP, all_records, now_ms, open_manager

HOUR_MS = 3600 * 1000

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=1500,
    index_interval_bytes=200,
    file_delete_delay_ms=0,
    segment_ms=1 << 40,
    retention_ms=-1,
)

# (key, value) per record; None value: a tombstone, None key: a keyless record
Rec = tuple[bytes | None, bytes | None]


def workload(n: int = 300, keys: int = 17) -> list[list[Rec]]:
    """Batches of 1-4 records over a few keys, with tombstones and a few keyless records."""
    batches: list[list[Rec]] = []
    i = 0
    while i < n:
        size = 1 + i % 4
        recs: list[Rec] = []
        for j in range(i, i + size):
            key = None if j % 53 == 0 else b"key-%d" % (j * 7 % keys)
            value = None if j % 11 == 0 else b"value-%d" % j
            recs.append((key, value))
        batches.append(recs)
        i += size
    return batches


def fill(plog: PartitionLog, batches: list[list[Rec]], ts: int, **opts: object) -> None:
    for recs in batches:
        plog.append_as_leader(build_batch([(ts, k, v, ()) for k, v in recs], **opts), 0)


def make_log(
    path: Path, batches: list[list[Rec]], *, config: LogConfig = COMPACT, ts: int | None = None
):
    """A manager whose partition holds ``batches`` in inactive segments plus one batch in the
    active segment, all below the high watermark."""
    m = open_manager(path, config)
    plog = m.get_or_create_log(TP, config)
    ts = now_ms() - HOUR_MS if ts is None else ts
    fill(plog, batches, ts)
    plog.roll()
    fill(plog, [[(b"key-1", b"in-the-active-segment")]], ts)
    plog.high_watermark = plog.log_end_offset
    return m, plog


def expected(records: list[Record], end: int, *, keep_tombstones: bool) -> list[tuple]:
    """The model: below ``end`` only each key's latest record (tombstones if retained), all
    keyless records; from ``end`` on everything."""
    latest = {r.key: r.offset for r in records if r.offset < end and r.key is not None}
    out = []
    for r in records:
        superseded = r.offset < end and r.key is not None and latest[r.key] != r.offset
        expired = r.offset < end and r.key is not None and r.value is None and not keep_tombstones
        if superseded or expired:
            continue
        out.append((r.offset, r.key, r.value))
    return out


def triples(plog: PartitionLog) -> list[tuple]:
    return [(r.offset, r.key, r.value) for r in all_records(plog)]


def check_indexes(plog: PartitionLog) -> None:
    """Every segment's offset and time index equal what a rebuild from its log gives, and
    point at real batches."""
    for segment in plog.segments:
        offsets = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
        times = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
        batches = {b.position: b.header for b in segment.log.batches()}
        for entry in offsets:
            assert batches[entry.position].last_offset == entry.offset
        for entry in times:
            assert any(h.last_offset == entry.offset for h in batches.values())
        if segment is plog.active_segment:
            continue
        segment.rebuild_indexes_from(0)
        segment.on_becoming_inactive()
        assert [
            segment.offset_index.entry(i) for i in range(segment.offset_index.entries)
        ] == offsets
        assert [segment.time_index.entry(i) for i in range(segment.time_index.entries)] == times


def dir_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# -- compaction ---------------------------------------------------------------------------------


def test_cleaning_keeps_the_latest_value_per_key_at_its_offset(tmp_path):
    m, plog = make_log(tmp_path, workload())
    before = all_records(plog)
    end = plog.active_segment.base_offset
    active_bytes = plog.active_segment.log.read(0, plog.active_segment.size)
    inactive = len(plog.segments) - 1
    assert inactive >= 5

    assert m.background.clean_logs() == inactive

    after = triples(plog)
    assert after == expected(before, end, keep_tombstones=True)
    assert len(after) < len(before) / 3
    # the active segment is untouched
    assert plog.active_segment.log.read(0, plog.active_segment.size) == active_bytes
    assert after[-1] == (end, b"key-1", b"in-the-active-segment")
    assert plog.log_start_offset == 0 and plog.log_end_offset == end + 1
    # the batches on disk are Kafka's: kafka-python's decoder reads them with their CRCs
    for segment in plog.segments:
        for batch in segment.log.batches():
            raw = segment.log.read(batch.position, batch.header.size)
            decoded = DefaultRecordBatch(raw)
            assert decoded.validate_crc()
            assert decoded.base_offset == batch.header.base_offset
            kept = [r.offset for r in decoded]
            assert kept[0] == batch.header.base_offset and kept[-1] == batch.header.last_offset
    check_indexes(plog)
    # no leftover files, and the old segments' files are gone
    names = os.listdir(plog.dir)
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))]
    m.shutdown()


def test_a_consumer_reading_from_any_old_offset_gets_the_next_kept_record(tmp_path):
    m, plog = make_log(tmp_path, workload(120))
    m.background.clean_logs()
    kept = [r.offset for r in all_records(plog)]
    for offset in range(plog.log_end_offset):
        data = plog.read(offset, 1 << 20).read_bytes()
        first = next(r.offset for r in iter_records(data) if r.offset >= offset)
        assert first == min(o for o in kept if o >= offset)
    m.shutdown()


def test_expired_tombstones_are_removed_and_recent_ones_kept(tmp_path):
    old = now_ms() - 2 * HOUR_MS
    config = LogConfig(**{**_fields(COMPACT), "delete_retention_ms": HOUR_MS})
    m, plog = make_log(tmp_path / "old", workload(), config=config, ts=old)
    before = all_records(plog)
    end = plog.active_segment.base_offset
    m.background.clean_logs()
    after = triples(plog)
    assert after == expected(before, end, keep_tombstones=False)
    assert all(v is not None for _, k, v in after if k is not None)
    m.shutdown()

    m, plog = make_log(tmp_path / "recent", workload(), config=config, ts=now_ms())
    before = all_records(plog)
    m.background.clean_logs()
    after = triples(plog)
    assert after == expected(before, end, keep_tombstones=True)
    assert any(v is None for _, k, v in after if k is not None)
    m.shutdown()


def test_only_segments_below_the_high_watermark_and_past_the_lag_are_cleaned(tmp_path):
    m, plog = make_log(tmp_path, workload())
    segments = plog.segments
    plog.high_watermark = segments[3].base_offset + 1  # segments 0-2 end at or below it
    before = all_records(plog)
    assert m.background.clean_logs() == 3
    assert triples(plog) == expected(before, segments[3].base_offset, keep_tombstones=True)
    m.shutdown()

    config = LogConfig(**{**_fields(COMPACT), "min_compaction_lag_ms": 2 * HOUR_MS})
    m, plog = make_log(tmp_path / "lag", workload(), config=config)  # records are 1 h old
    files = dir_files(plog.dir)
    assert m.background.clean_logs() == 0
    assert dir_files(plog.dir) == files
    m.shutdown()


def test_delete_policy_logs_are_never_cleaned(tmp_path):
    config = LogConfig(**{**_fields(COMPACT), "cleanup_policy": ("delete",)})
    m, plog = make_log(tmp_path, workload(), config=config)
    files = dir_files(plog.dir)
    assert m.background.clean_logs(force=True) == 0
    assert m.background.cleaner.clean(plog, force=True) is None
    assert dir_files(plog.dir) == files
    m.shutdown()


def test_compact_only_logs_are_not_deleted_by_retention(tmp_path):
    config = LogConfig(**{**_fields(COMPACT), "retention_ms": 1})
    m, plog = make_log(tmp_path / "compact", workload(), config=config)
    n = len(plog.segments)
    assert m.background.run_retention() == 0 and len(plog.segments) == n
    m.shutdown()
    config = LogConfig(
        **{**_fields(COMPACT), "retention_ms": 1, "cleanup_policy": ("compact", "delete")}
    )
    m, plog = make_log(tmp_path / "both", workload(), config=config)
    assert m.background.run_retention() >= n - 1  # the expired active segment too, rolled first
    m.shutdown()


def test_later_passes_clean_only_when_dirty_enough_and_then_drop_superseded_keys(tmp_path):
    m, plog = make_log(tmp_path, workload())
    assert m.background.clean_logs() > 0
    files = dir_files(plog.dir)
    assert m.background.clean_logs() == 0  # nothing dirty
    assert dir_files(plog.dir) == files
    # a little new data: below min.cleanable.dirty.ratio (0.5), so no pass
    fill(plog, [[(b"key-2", b"new")]], now_ms())
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    assert m.background.clean_logs() == 0
    # forced, the new key-2 supersedes the one kept in the clean part
    assert m.background.clean_logs(force=True) > 0
    values = [(r.key, r.value) for r in all_records(plog) if r.key == b"key-2"]
    assert values == [(b"key-2", b"new")]
    check_indexes(plog)
    m.shutdown()


def test_segments_emptied_by_cleaning_stay_readable_across_an_unclean_restart(tmp_path):
    m, plog = make_log(tmp_path, [[(b"a", b"x" * 100)] for _ in range(40)])
    m.background.clean_logs()
    assert [s.size for s in plog.segments[:-2]] == [0] * (len(plog.segments) - 2)
    records = triples(plog)
    assert [r[0] for r in records] == [39, 40]
    assert [r.offset for r in iter_records(plog.read(0, 1 << 20).read_bytes())] == [39]
    m.shutdown()
    records_after, report = _reload(tmp_path, unclean=True)
    assert records_after == records and report.problems == []


def test_batches_with_a_producer_id_are_left_untouched(tmp_path):
    m = open_manager(tmp_path, COMPACT)
    plog = m.get_or_create_log(TP, COMPACT)
    ts = now_ms() - HOUR_MS
    idempotent = build_batch(
        [(ts, b"k", b"v%d" % i, ()) for i in range(3)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )
    plog.append_as_leader(idempotent, 0)
    fill(plog, [[(b"k", b"plain-%d" % i)] for i in range(3)], ts)
    fill(plog, [[(b"k", b"latest")]], ts)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    m.background.clean_logs()
    assert triples(plog) == [
        (0, b"k", b"v0"),
        (1, b"k", b"v1"),
        (2, b"k", b"v2"),
        (6, b"k", b"latest"),
    ]
    m.shutdown()


def test_compressed_batches_are_rewritten_with_their_codec(tmp_path):
    m = open_manager(tmp_path, COMPACT)
    plog = m.get_or_create_log(TP, COMPACT)
    ts = now_ms() - HOUR_MS
    fill(plog, [[(b"a", b"1"), (b"b", b"1"), (b"a", b"2")]], ts, compression=CompressionType.ZSTD)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    m.background.clean_logs()
    assert triples(plog) == [(1, b"b", b"1"), (2, b"a", b"2")]
    (batch,) = list(plog.segments[0].log.batches())
    assert batch.header.compression == CompressionType.ZSTD
    assert (batch.header.base_offset, batch.header.last_offset) == (1, 2)
    m.shutdown()


def test_topic_configs_map_to_the_log_config():
    topic = TopicConfig(
        BrokerConfig({}),
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "delete.retention.ms": "5",
            "min.compaction.lag.ms": "6",
        },
    )
    config = LogConfig.from_topic_config(topic)
    assert config.cleanup_policy == ("compact", "delete") and config.compact and config.delete
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.1, 5)
    assert config.min_compaction_lag_ms == 6
    default = LogConfig.from_topic_config(TopicConfig(BrokerConfig({})))
    assert default.cleanup_policy == ("delete",) and not default.compact


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from([b"a", b"b", b"c", b"d", None]),
                st.one_of(st.none(), st.binary(max_size=30)),
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_property_cleaning_matches_the_model(tmp_path_factory, batches, expire):
    path = tmp_path_factory.mktemp("prop")
    config = LogConfig(**{**_fields(COMPACT), "segment_bytes": 400, "delete_retention_ms": HOUR_MS})
    ts = now_ms() - (2 * HOUR_MS if expire else 0)
    m, plog = make_log(path, batches, config=config, ts=ts)
    before = all_records(plog)
    end = plog.active_segment.base_offset
    m.background.clean_logs()
    assert triples(plog) == expected(before, end, keep_tombstones=not expire)
    check_indexes(plog)
    m.shutdown()
    m = open_manager(path, config)
    assert triples(m.get_log(TP)) == expected(before, end, keep_tombstones=not expire)
    m.shutdown()


# -- crash safety -------------------------------------------------------------------------------


def _cleaned_copy(tmp_path: Path) -> tuple[Path, Path, list[tuple], list[tuple]]:
    """A partition dir as it was before cleaning (``orig``) and as cleaning left it
    (``done``), both after a clean shutdown; and the records each holds."""
    m, plog = make_log(tmp_path / "orig", workload())
    m.shutdown()
    shutil.copytree(tmp_path / "orig", tmp_path / "done")
    m = open_manager(tmp_path / "done", COMPACT)
    before = triples(m.get_log(TP))
    assert m.background.clean_logs() > 0
    after = triples(m.get_log(TP))
    m.shutdown()
    assert before != after
    return tmp_path / "orig" / TP.dir_name, tmp_path / "done" / TP.dir_name, before, after


def _reload(log_dir: Path, *, unclean: bool) -> tuple[list[tuple], object]:
    if unclean:
        for marker in log_dir.glob(".kafka_cleanshutdown"):
            marker.unlink()
    m = open_manager(log_dir, COMPACT)
    plog = m.get_log(TP)
    records = triples(plog)
    check_indexes(plog)
    report = m.startup_report
    m.shutdown()
    leftovers = [
        n for n in os.listdir(plog.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))
    ]
    assert leftovers == []
    return records, report


def _stage(orig: Path, done: Path, base: int, *, suffix: str, old_renamed: bool = False) -> None:
    """Puts the cleaned files of segment ``base`` beside the original ones with ``suffix``."""
    for kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        shutil.copyfile(done / file_name(base, kind), orig / file_name(base, kind + suffix))
        if old_renamed:
            os.replace(orig / file_name(base, kind), orig / file_name(base, kind + DELETED_SUFFIX))


def test_crash_before_the_swap_keeps_the_old_segments(tmp_path):
    orig, done, before, _ = _cleaned_copy(tmp_path)
    bases = [int(n[:20]) for n in sorted(os.listdir(orig)) if n.endswith(LOG_SUFFIX)][:-1]
    for base in bases[:3]:
        _stage(orig, done, base, suffix=CLEANED_SUFFIX)
    # an index already renamed to .swap, its log not yet: still before the swap
    shutil.copyfile(
        done / file_name(bases[3], INDEX_SUFFIX),
        orig / file_name(bases[3], INDEX_SUFFIX + SWAP_SUFFIX),
    )
    for unclean in (False, True):
        records, _ = _reload(orig.parent, unclean=unclean)
        assert records == before


def test_crash_after_the_swap_file_completes_the_swap(tmp_path):
    orig, done, before, after = _cleaned_copy(tmp_path)
    bases = [int(n[:20]) for n in sorted(os.listdir(orig)) if n.endswith(LOG_SUFFIX)][:-1]
    for i, base in enumerate(bases):
        # half the segments crashed with .swap files only, half after the old files became .deleted
        _stage(orig, done, base, suffix=SWAP_SUFFIX, old_renamed=i % 2 == 1)
    for unclean in (True, False):
        records, report = _reload(orig.parent, unclean=unclean)
        assert records == after
        if unclean:  # the first load completed the swaps, rebuilding their indexes
            assert len(report.rebuilt_indexes) == len(bases)


def test_crash_mid_pass_recovers_to_a_mix_of_old_and_new_segments(tmp_path):
    orig, done, before, after = _cleaned_copy(tmp_path)
    bases = [int(n[:20]) for n in sorted(os.listdir(orig)) if n.endswith(LOG_SUFFIX)][:-1]
    # segments 0-1 swapped in, 2 left as .swap, 3 as .cleaned, the rest untouched
    for base in bases[:2]:
        for kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            shutil.copyfile(done / file_name(base, kind), orig / file_name(base, kind))
    _stage(orig, done, bases[2], suffix=SWAP_SUFFIX)
    _stage(orig, done, bases[3], suffix=CLEANED_SUFFIX)
    records, _ = _reload(orig.parent, unclean=True)
    cut = bases[3]
    assert [r for r in records if r[0] < cut] == [r for r in after if r[0] < cut]
    assert [r for r in records if r[0] >= cut] == [r for r in before if r[0] >= cut]
    # and a later pass finishes the job
    m = open_manager(orig.parent, COMPACT)
    m.background.clean_logs(force=True)
    assert triples(m.get_log(TP)) == after
    m.shutdown()


@pytest.mark.parametrize("failing", [".log.cleaned", ".log.swap"])
def test_an_io_error_mid_swap_takes_the_dir_offline_and_a_restart_recovers(
    tmp_path, monkeypatch, failing
):
    """The real write sequence, interrupted at the rename of the segment's log file from
    ``.cleaned`` to ``.swap`` (old segment stays) or from ``.swap`` into place (new one wins)."""
    m, plog = make_log(tmp_path, workload())
    before = all_records(plog)
    end = plog.active_segment.base_offset
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(src).endswith(failing):
            raise OSError(errno.EIO, "injected")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    failures: list[str] = []
    m.add_dir_failure_listener(lambda d, reason: failures.append(reason))
    assert m.background.clean_logs() == 0
    assert failures and TP in m.offline_partitions
    monkeypatch.setattr(os, "replace", real_replace)
    m.shutdown()
    first = before[0].offset
    records, _ = _reload(tmp_path, unclean=True)
    if failing == ".log.cleaned":
        assert records == [(r.offset, r.key, r.value) for r in before]
    else:  # the first segment was swapped in at restart, the others are as they were
        cut = plog.segments[1].base_offset
        model = expected(before, end, keep_tombstones=True)  # the map spans the whole range
        model = [r for r in model if r[0] < cut] + [
            (r.offset, r.key, r.value) for r in before if r.offset >= cut
        ]
        assert records == model and records[0][0] >= first
    m = open_manager(tmp_path, COMPACT)
    plog = m.get_log(TP)
    plog.high_watermark = plog.log_end_offset  # not checkpointed: the dir failed
    m.background.clean_logs(force=True)
    assert triples(plog) == expected(before, end, keep_tombstones=True)
    m.shutdown()


def _fields(config: LogConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in LogConfig.__dataclass_fields__}
