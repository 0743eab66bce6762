"""Kafka's text checkpoint files: offset checkpoints and leader-epoch checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logkeel.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    CheckpointFile,
    CheckpointParseError,
    EpochEntry,
    EpochEntryCodec,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from logkeel.storage.errors import CorruptCheckpointError, KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=40,
)
offset_maps = st.dictionaries(
    st.builds(TopicPartition, topics, st.integers(0, (1 << 31) - 1)),
    st.integers(0, (1 << 63) - 1),
    max_size=30,
)


# -- offset checkpoints ----------------------------------------------------------------------


def test_offset_checkpoint_text_is_kafkas(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    cp.write({TopicPartition("orders", 0): 5, TopicPartition("orders", 11): 1234567890123})
    assert cp.path.read_text() == "0\n2\norders 0 5\norders 11 1234567890123\n"
    assert [p.name for p in tmp_path.iterdir()] == ["recovery-point-offset-checkpoint"]


def test_reads_a_checkpoint_as_kafka_documents_it(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text("0\n2\ntp1  1  1\ntp1\t2 2\n")  # any whitespace separates fields
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("tp1", 1): 1,
        TopicPartition("tp1", 2): 2,
    }


@given(offset_maps)
def test_offset_checkpoint_round_trip(offsets: dict[TopicPartition, int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cp = OffsetCheckpointFile(Path(d) / "log-start-offset-checkpoint")
        cp.write(offsets)
        assert cp.read() == offsets


def test_missing_empty_and_version_only_files_hold_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    path.write_text("")
    assert cp.read() == {}
    path.write_text("0\n")
    assert cp.read() == {}
    path.write_text("0\n0\n")
    assert cp.read() == {}


def test_crlf_line_endings_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n1\r\nt 3 9\r\n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 3): 9}


@pytest.mark.parametrize(
    ("content", "line_number"),
    [
        ("1\n1\nt 0 5\n", 1),  # unknown version
        ("x\n1\nt 0 5\n", 1),
        ("0\nmany\nt 0 5\n", 2),
        ("0\n1\nt 0\n", 3),  # too few fields
        ("0\n1\nt 0 5 6\n", 3),  # too many fields
        ("0\n2\nt 0 5\nt x 6\n", 4),  # partition not a number
        ("0\n1\nt 0 1_000\n", 3),  # Python-only integer syntax
        ("0\n1\nt 0 +5\n", 3),
        ("0\n1\nt -1 5\n", 3),  # negative partition
        ("0\n1\nt 2147483648 5\n", 3),  # partition beyond int32
        ("0\n1\nt 0 9223372036854775808\n", 3),  # offset beyond int64
        ("0\n2\nt 0 5\n\nt 1 6\n", 4),  # blank line
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, content: str, line_number: int) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CheckpointParseError) as info:
        OffsetCheckpointFile(path).read()
    assert isinstance(info.value, CorruptCheckpointError)
    assert info.value.path == path
    assert info.value.line_number == line_number
    assert str(path) in str(info.value) and f"line {line_number}" in str(info.value)


@pytest.mark.parametrize("content", ["0\n3\nt 0 5\nt 1 6\n", "0\n1\nt 0 5\nt 1 6\n"])
def test_entry_count_must_match(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match="declares"):
        OffsetCheckpointFile(path).read()


def test_non_utf8_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff\xfe 0 1\n")
    with pytest.raises(CorruptCheckpointError, match="UTF-8"):
        OffsetCheckpointFile(path).read()


def test_topic_with_whitespace_cannot_be_written(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    with pytest.raises(ValueError):
        cp.write({TopicPartition("a b", 0): 1})
    assert not cp.path.exists()


def test_io_errors_name_the_log_dir(tmp_path: Path) -> None:
    log_dir = tmp_path / "gone"
    cp = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint")
    with pytest.raises(KafkaStorageError) as info:
        cp.write({TopicPartition("t", 0): 1})
    assert info.value.log_dir == str(log_dir)
    unreadable = tmp_path / "dir-instead-of-file"
    unreadable.mkdir()
    with pytest.raises(KafkaStorageError) as info:
        OffsetCheckpointFile(unreadable).read()
    assert info.value.log_dir == str(tmp_path)


def test_rewrite_replaces_previous_content(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({TopicPartition("a", i): i for i in range(50)})
    cp.write({TopicPartition("b", 0): 7})
    assert cp.read() == {TopicPartition("b", 0): 7}


# -- leader-epoch checkpoints ----------------------------------------------------------------


def test_leader_epoch_checkpoint_text_is_kafkas(tmp_path: Path) -> None:
    part = tmp_path / "orders-0"
    part.mkdir()
    cp = LeaderEpochCheckpointFile.in_partition_dir(part)
    assert cp.path == part / LEADER_EPOCH_CHECKPOINT_FILE
    cp.write([EpochEntry(0, 0), EpochEntry(3, 1024)])
    assert cp.path.read_text() == "0\n2\n0 0\n3 1024\n"
    assert cp.read() == [EpochEntry(0, 0), EpochEntry(3, 1024)]


@given(
    st.lists(st.builds(EpochEntry, st.integers(0, (1 << 31) - 1), st.integers(0, (1 << 63) - 1)))
)
def test_leader_epoch_codec_round_trip(entries: list[EpochEntry]) -> None:
    cp = CheckpointFile(
        Path("/nonexistent/leader-epoch-checkpoint"), 0, EpochEntryCodec(), "/nonexistent"
    )
    text = f"0\n{len(entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    assert cp.parse(text.encode()) == entries


@pytest.mark.parametrize(
    ("content", "line_number"),
    [("0\n1\n5\n", 3), ("0\n1\n5 6 7\n", 3), ("0\n1\n2147483648 0\n", 3), ("1\n0\n", 1)],
)
def test_malformed_leader_epoch_lines(tmp_path: Path, content: str, line_number: int) -> None:
    path = tmp_path / "p-0" / LEADER_EPOCH_CHECKPOINT_FILE
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(CheckpointParseError) as info:
        LeaderEpochCheckpointFile(path).read()
    assert info.value.line_number == line_number


def test_leader_epoch_io_errors_blame_the_log_dir_above_the_partition(tmp_path: Path) -> None:
    cp = LeaderEpochCheckpointFile(tmp_path / "missing-partition" / LEADER_EPOCH_CHECKPOINT_FILE)
    with pytest.raises(KafkaStorageError) as info:
        cp.write([EpochEntry(1, 0)])
    assert info.value.log_dir == str(tmp_path)
