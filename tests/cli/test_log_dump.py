"""`logkeel log dump`: segment files written by LogManager, dumped through the CLI.

The partition written once per module (``written``) is only read; tests that corrupt files
work on copies in their own tmp_path.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeel.cli.main import cli
from logkeel.records.batch import BatchHeader, CompressionType
from logkeel.records.builder import build_batch, build_control_batch
from logkeel.records.control import ControlRecordType
from logkeel.records.varint import encode_varint, encode_varlong
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.tools.dump_log import dump_log
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
LOGKEEL = Path(sys.executable).with_name("logkeel")

# (timestamp, key, value, headers), as build_batch takes them
Rec = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class Appended:
    """One appended batch and the offsets the log gave it."""

    records: list[Rec]
    first_offset: int
    last_offset: int
    compression: str = "none"
    control: str | None = None
    producer_id: int = -1


@dataclass
class Written:
    partition_dir: Path
    batches: list[Appended] = field(default_factory=list)

    def files(self, suffix: str) -> list[Path]:
        return sorted(self.partition_dir.glob(f"*{suffix}"))

    def records_by_offset(self) -> dict[int, Rec]:
        out: dict[int, Rec] = {}
        for b in self.batches:
            for i, rec in enumerate(b.records):
                out[b.first_offset + i] = rec
        return out


def open_manager(log_dir: Path, *, segment_bytes: int, index_interval_bytes: int) -> LogManager:
    m = LogManager(
        [log_dir],
        default_config=LogConfig(
            segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes
        ),
    )
    m.startup(start_background=False)
    return m


def append(log, written: Written, records: list[Rec], **opts) -> None:
    info = log.append_as_leader(build_batch(records, **opts), leader_epoch=0)
    compression = CompressionType(opts.get("compression", CompressionType.NONE)).name.lower()
    written.batches.append(
        Appended(
            records,
            info.first_offset,
            info.last_offset,
            compression,
            producer_id=opts.get("producer_id", -1),
        )
    )


def append_marker(log, written: Written, kind: ControlRecordType, producer_id: int) -> None:
    batch = build_control_batch(
        kind, producer_id=producer_id, producer_epoch=0, coordinator_epoch=3, timestamp=5000
    )
    info = log.append_as_leader(batch, leader_epoch=0)
    written.batches.append(
        Appended(
            [], info.first_offset, info.last_offset, control=kind.name, producer_id=producer_id
        )
    )


def write_standard(log_dir: Path, *, shutdown: bool = True) -> tuple[Written, LogManager]:
    """Several segments holding plain, multi-record, compressed, transactional and control
    batches, with index entries every few batches."""
    m = open_manager(log_dir, segment_bytes=1500, index_interval_bytes=150)
    log = m.get_or_create_log(TP)
    written = Written(log.dir)
    for i in range(20):
        append(log, written, [(1000 + i, f"k{i}".encode(), f"v{i}".encode(), (("h", b"%d" % i),))])
    append(
        log,
        written,
        [
            (2000, None, b"no key", ()),
            (2001, b"bin", b"\xff\xfe\x00binary", (("n", None), ("b", b"\x80"))),
            (1999, b"dead", None, ()),  # a tombstone with an earlier timestamp
        ],
    )
    gz = [(3000 + i, b"g%d" % i, b"gzip value %d" % i * 3, ()) for i in range(5)]
    append(log, written, gz, compression=CompressionType.GZIP)
    zs = [(3100 + i, b"z%d" % i, b"zstd value %d" % i * 3, ()) for i in range(4)]
    append(log, written, zs, compression=CompressionType.ZSTD)
    txn = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}
    append(log, written, [(4000, b"t1", b"aborted-1", ()), (4001, b"t2", b"aborted-2", ())], **txn)
    append_marker(log, written, ControlRecordType.ABORT, 7)
    txn = {"producer_id": 8, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}
    append(log, written, [(4100, b"c1", b"committed", ())], **txn)
    append_marker(log, written, ControlRecordType.COMMIT, 8)
    for i in range(10):
        append(log, written, [(6000 + i, b"tail%d" % i, b"x" * 40, ())])
    if shutdown:
        m.shutdown()
    return written, m


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    w, _ = write_standard(tmp_path_factory.mktemp("logdir"))
    assert len(w.files(".log")) >= 3, "the fixture should span several segments"
    return w


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["log", "dump", *map(str, args)])


def run_json(*args: str | Path, expect_exit: int = 0) -> dict:
    result = run("--json", *args)
    assert result.exit_code == expect_exit, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def decode(value: str | None, encoding: str | None) -> bytes | None:
    if value is None:
        assert encoding is None
        return None
    assert encoding in ("utf-8", "base64")
    return value.encode() if encoding == "utf-8" else base64.b64decode(value)


def batches_of(written: Written) -> list[dict]:
    out = []
    for path in written.files(".log"):
        out.extend(run_json(path)["batches"])
    return out


# ---- .log ---------------------------------------------------------------------------------


def test_log_json_batches_match_what_was_appended(written: Written) -> None:
    dumped = batches_of(written)
    assert [(b["base_offset"], b["last_offset"]) for b in dumped] == [
        (a.first_offset, a.last_offset) for a in written.batches
    ]
    for b, a in zip(dumped, written.batches, strict=True):
        assert b["records"] == max(1, len(a.records))
        assert b["compression"] == a.compression
        assert b["is_control"] == (a.control is not None)
        assert b["is_transactional"] == (a.producer_id >= 0)
        assert b["producer_id"] == a.producer_id
        assert b["crc_valid"] is True
        assert b["magic"] == 2
        assert b["partition_leader_epoch"] == 0
        assert b["timestamp_type"] == "CreateTime"
        if a.records:
            assert b["max_timestamp"] == max(r[0] for r in a.records)
        assert "data" not in b


def test_log_positions_match_the_byte_layout(written: Written) -> None:
    for path in written.files(".log"):
        doc = run_json(path)
        raw = path.read_bytes()
        assert doc["size"] == len(raw) == doc["valid_bytes"]
        assert doc["trailing_bytes"] == 0 and doc["errors"] == []
        expected_position = 0
        for b in doc["batches"]:
            assert b["position"] == expected_position
            header = BatchHeader.parse(raw, b["position"])
            assert header.base_offset == b["base_offset"]
            assert header.size == b["size"]
            assert (
                header.crc
                == b["crc"]
                == crc32c.crc32c(raw[b["position"] + 21 : b["position"] + b["size"]])
            )
            expected_position += b["size"]
        assert expected_position == len(raw)
        assert doc["base_offset"] == int(path.name[:20]) == doc["batches"][0]["base_offset"]


def test_print_data_gives_every_record_back(written: Written) -> None:
    expected = written.records_by_offset()
    seen = {}
    for path in written.files(".log"):
        for b in run_json("--print-data", path)["batches"]:
            assert len(b["data"]) == b["records"]
            for r in b["data"]:
                if b["is_control"]:
                    continue
                seen[r["offset"]] = (
                    r["timestamp"],
                    decode(r["key"], r["key_encoding"]),
                    decode(r["value"], r["value_encoding"]),
                    tuple(
                        (h["key"], decode(h["value"], h["value_encoding"])) for h in r["headers"]
                    ),
                )
                rec = expected[r["offset"]]
                assert r["key_size"] == (-1 if rec[1] is None else len(rec[1]))
                assert r["value_size"] == (-1 if rec[2] is None else len(rec[2]))
    assert seen == expected


def test_binary_values_are_base64_and_say_so(written: Written) -> None:
    record = next(
        r
        for path in written.files(".log")
        for b in run_json("--print-data", path)["batches"]
        for r in b.get("data", ())
        if r["key"] == "bin"
    )
    assert record["value_encoding"] == "base64"
    assert base64.b64decode(record["value"]) == b"\xff\xfe\x00binary"
    assert record["headers"] == [
        {"key": "n", "value": None, "value_encoding": None},
        {"key": "b", "value": "gA==", "value_encoding": "base64"},
    ]
    text = "\n".join(run("--print-data", *written.files(".log")).stdout.splitlines())
    assert "payload: base64:" + base64.b64encode(b"\xff\xfe\x00binary").decode() in text


def test_sequences_of_idempotent_records(written: Written) -> None:
    data = [
        r
        for path in written.files(".log")
        for b in run_json("--print-data", path)["batches"]
        if b["producer_id"] == 7 and not b["is_control"]
        for r in b["data"]
    ]
    assert [r["sequence"] for r in data] == [0, 1]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_batches_dump_their_records(written: Written, codec: str) -> None:
    (appended,) = [a for a in written.batches if a.compression == codec]
    (batch,) = [
        b
        for path in written.files(".log")
        for b in run_json("--print-data", path)["batches"]
        if b["compression"] == codec
    ]
    assert batch["records"] == len(appended.records)
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in batch["data"]] == [
        (appended.first_offset + i, ts, k.decode(), v.decode())
        for i, (ts, k, v, _) in enumerate(appended.records)
    ]
    text = run("--print-data", *written.files(".log")).stdout
    assert f"compresscodec: {codec}" in text
    assert (
        f"key: {appended.records[-1][1].decode()} payload: {appended.records[-1][2].decode()}"
        in text
    )


def test_control_batches_show_the_marker_type(written: Written) -> None:
    markers = [
        (b["producer_id"], r["offset"], r["control"])
        for path in written.files(".log")
        for b in run_json("--print-data", path)["batches"]
        if b["is_control"]
        for r in b["data"]
    ]
    expected = [(a.producer_id, a.first_offset, a.control) for a in written.batches if a.control]
    assert [(p, o, c["type"]) for p, o, c in markers] == expected
    assert all(c["coordinator_epoch"] == 3 for _, _, c in markers)
    assert [c["type_id"] for _, _, c in markers] == [0, 1]
    text = run("--print-data", *written.files(".log")).stdout
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 3" in text


BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: -?\d+ "
    r"lastSequence: -?\d+ producerId: -?\d+ producerEpoch: -?\d+ partitionLeaderEpoch: -?\d+ "
    r"isTransactional: (true|false) isControl: (true|false) deleteHorizonMs: OptionalLong.empty "
    r"position: (\d+) CreateTime: \d+ size: (\d+) magic: 2 compresscodec: (none|gzip|zstd) "
    r"crc: \d+ isvalid: true$"
)
RECORD_LINE = re.compile(
    r"^\| offset: (\d+) CreateTime: \d+ keySize: -?\d+ valueSize: -?\d+ sequence: -?\d+ "
    r"headerKeys: \[[^\]]*\]"
)


def test_text_output_has_kafka_fields(written: Written) -> None:
    first = written.files(".log")[0]
    result = run("--print-data", first)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {first}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = [m for m in map(BATCH_LINE.match, lines) if m]
    record_lines = [m for m in map(RECORD_LINE.match, lines) if m]
    assert len(batch_lines) + len(record_lines) == len(lines) - 2
    doc = run_json(first)
    assert [(int(m[1]), int(m[6]), int(m[7])) for m in batch_lines] == [
        (b["base_offset"], b["position"], b["size"]) for b in doc["batches"]
    ]
    assert (
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h] key: k0 payload: v0 headers: [h=0]"
        in lines
    )
    # without --print-data, batches only
    plain = run(first).stdout.splitlines()
    assert len(plain) == len(batch_lines) + 2 and not any(line.startswith("|") for line in plain)


def test_tombstone_and_null_key(written: Written) -> None:
    text = run("--print-data", *written.files(".log")).stdout
    tombstone = next(line for line in text.splitlines() if "key: dead" in line)
    assert "valueSize: -1" in tombstone and "payload" not in tombstone
    no_key = next(line for line in text.splitlines() if "payload: no key" in line)
    assert "keySize: -1" in no_key and " key: " not in no_key


# ---- corrupt .log -------------------------------------------------------------------------


def copy_partition(written: Written, tmp_path: Path) -> Path:
    target = tmp_path / written.partition_dir.name
    shutil.copytree(written.partition_dir, target)
    return target


def test_truncated_log_tail_is_reported_with_its_position(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    log = sorted(part.glob("*.log"))[0]
    good = run_json(log)["batches"]
    last = good[-1]
    with open(log, "r+b") as f:
        f.truncate(last["position"] + last["size"] - 7)
    doc = run_json(log, expect_exit=1)
    assert doc["batches"] == good[:-1]
    (error,) = doc["errors"]
    assert error["kind"] == "partial_batch"
    assert error["position"] == last["position"] == doc["valid_bytes"]
    assert doc["trailing_bytes"] == last["size"] - 7
    result = run(log)
    assert result.exit_code == 1
    assert (
        f"error: position {last['position']}: batch at offset {last['base_offset']}"
        in result.stdout
    )
    assert f"Found {last['size'] - 7} invalid bytes at the end of {log.name}" in result.stdout
    assert "1 problem(s) found" in result.stderr


def test_garbage_after_the_last_batch_stops_the_walk(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    log = sorted(part.glob("*.log"))[1]
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(bytes(range(200)))
    doc = run_json("--print-data", log, expect_exit=1)
    assert doc["valid_bytes"] == size and doc["trailing_bytes"] == 200
    (error,) = doc["errors"]
    assert error["kind"] == "invalid_batch" and error["position"] == size
    assert "magic" in error["message"]


def test_crc_mismatch_is_listed_and_the_walk_goes_on(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    log = sorted(part.glob("*.log"))[0]
    good = run_json(log)["batches"]
    victim = good[3]
    raw = bytearray(log.read_bytes())
    raw[victim["position"] + victim["size"] - 1] ^= 0x55  # the last header's value: "3" -> "f"
    log.write_bytes(raw)
    doc = run_json("--print-data", log, expect_exit=1)
    assert len(doc["batches"]) == len(good)
    assert [b["crc_valid"] for b in doc["batches"]] == [i != 3 for i in range(len(good))]
    (error,) = doc["errors"]
    assert error["kind"] == "crc_mismatch"
    assert (error["position"], error["offset"]) == (victim["position"], victim["base_offset"])
    # the records of the bad batch are still shown, as they now read
    assert doc["batches"][3]["data"][0]["headers"] == [
        {"key": "h", "value": "f", "value_encoding": "utf-8"}
    ]
    assert "isvalid: false" in run(log).stdout


def test_offsets_going_back_are_reported(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    log = sorted(part.glob("*.log"))[0]
    batches = run_json(log)["batches"]
    raw = bytearray(log.read_bytes())
    # The base offset is outside the CRC: a rewrite keeps the batch valid, as in the incident.
    struct.pack_into(">q", raw, batches[2]["position"], batches[0]["base_offset"])
    log.write_bytes(raw)
    doc = run_json(log, expect_exit=1)
    (error,) = doc["errors"]
    assert error["kind"] == "offset_order" and error["position"] == batches[2]["position"]


def test_small_read_chunks_give_the_same_dump(written: Written) -> None:
    """Batches straddling chunk boundaries, and batches larger than a chunk."""
    for path in written.files(".log"):
        whole = dump_log(path, print_data=True).to_dict()
        for chunk in (61, 100, 1000):
            assert dump_log(path, print_data=True, read_chunk=chunk).to_dict() == whole


# ---- indexes ------------------------------------------------------------------------------


def batch_index(written: Written) -> dict[int, dict]:
    """Batches of every segment by position, per segment base offset."""
    return {
        int(p.name[:20]): {b["position"]: b for b in run_json(p)["batches"]}
        for p in written.files(".log")
    }


def test_offset_index_entries_are_absolute_and_point_at_batches(written: Written) -> None:
    batches = batch_index(written)
    indexed = 0
    for path in written.files(".index"):
        base = int(path.name[:20])
        doc = run_json(path)
        assert doc["kind"] == "offset_index" and doc["base_offset"] == base
        raw = path.read_bytes()
        assert doc["entry_count"] == len(doc["entries"]) == len(raw) // 8
        for n, e in enumerate(doc["entries"]):
            relative, position = struct.unpack_from(">ii", raw, n * 8)
            assert (e["offset"], e["position"]) == (base + relative, position)
            assert batches[base][e["position"]]["last_offset"] == e["offset"]
        indexed += len(doc["entries"])
    assert indexed > 5
    assert any(int(p.name[:20]) > 0 and run_json(p)["entries"] for p in written.files(".index"))
    text = run(written.files(".index")[0]).stdout.splitlines()
    assert text[1:] == [
        f"offset: {e['offset']} position: {e['position']}"
        for e in run_json(written.files(".index")[0])["entries"]
    ]


def test_time_index_entries_match_batch_max_timestamps(written: Written) -> None:
    logs = {int(p.name[:20]): run_json(p)["batches"] for p in written.files(".log")}
    for path in written.files(".timeindex"):
        base = int(path.name[:20])
        doc = run_json(path)
        assert doc["kind"] == "time_index" and doc["entries"]
        for e in doc["entries"]:
            (batch,) = [
                b for b in logs[base] if b["base_offset"] <= e["offset"] <= b["last_offset"]
            ]
            assert batch["max_timestamp"] == e["timestamp"]
        text = run(path).stdout.splitlines()
        assert text[1:] == [
            f"timestamp: {e['timestamp']} offset: {e['offset']}" for e in doc["entries"]
        ]


def test_verify_passes_on_good_indexes(written: Written) -> None:
    files = written.files(".index") + written.files(".timeindex")
    doc = run_json("--verify", *files)
    assert [d["file"] for d in doc["files"]] == [str(f) for f in files]
    for d in doc["files"]:
        assert d["mismatches"] == [] and d["errors"] == []
        assert d["log_file"] == str(Path(d["file"]).with_suffix(".log"))
    result = run("--verify", *files)
    assert result.exit_code == 0
    assert result.stdout.count("passed verification") == len(files)


def test_verify_lists_an_index_entry_that_points_inside_a_batch(
    written: Written, tmp_path: Path
) -> None:
    part = copy_partition(written, tmp_path)
    index = next(p for p in sorted(part.glob("*.index")) if p.stat().st_size >= 24)
    raw = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", raw, 8)
    struct.pack_into(">ii", raw, 8, relative, position + 5)
    index.write_bytes(raw)
    doc = run_json("--verify", index, expect_exit=1)
    (mismatch,) = doc["mismatches"]
    base = int(index.name[:20])
    assert mismatch["entry"] == 1
    assert (mismatch["offset"], mismatch["position"]) == (base + relative, position + 5)
    assert "not the start of a batch" in mismatch["message"]
    result = run("--verify", index)
    assert result.exit_code == 1
    assert (
        f"mismatch: entry 1 (offset: {base + relative} position: {position + 5})" in result.stdout
    )
    assert "1 problem(s) found" in result.stderr
    # without --verify the same file dumps cleanly: its entries are still in order
    assert run(index).exit_code == 0


def test_verify_lists_an_index_entry_with_the_wrong_offset(
    written: Written, tmp_path: Path
) -> None:
    part = copy_partition(written, tmp_path)
    index = next(p for p in sorted(part.glob("*.index")) if p.stat().st_size >= 24)
    raw = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", raw, 0)
    struct.pack_into(">ii", raw, 0, relative - 1, position)  # still ordered
    index.write_bytes(raw)
    doc = run_json("--verify", index, expect_exit=1)
    (mismatch,) = doc["mismatches"]
    base = int(index.name[:20])
    assert mismatch["entry"] == 0 and mismatch["log_offset"] == base + relative
    assert f"has last offset {base + relative}, not {base + relative - 1}" in mismatch["message"]


def test_verify_lists_a_time_index_entry_with_the_wrong_timestamp(
    written: Written, tmp_path: Path
) -> None:
    part = copy_partition(written, tmp_path)
    tindex = next(p for p in sorted(part.glob("*.timeindex")) if p.stat().st_size >= 36)
    raw = bytearray(tindex.read_bytes())
    ts, relative = struct.unpack_from(">qi", raw, 12)
    (next_ts,) = struct.unpack_from(">q", raw, 24)
    assert next_ts > ts + 1
    struct.pack_into(">qi", raw, 12, ts + 1, relative)  # still ordered, no longer true
    tindex.write_bytes(raw)
    doc = run_json("--verify", tindex, expect_exit=1)
    (mismatch,) = doc["mismatches"]
    assert mismatch["entry"] == 1 and mismatch["timestamp"] == ts + 1
    assert mismatch["log_timestamp"] == ts


def test_verify_lists_out_of_order_time_index_entries(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    tindex = next(p for p in sorted(part.glob("*.timeindex")) if p.stat().st_size >= 36)
    raw = bytearray(tindex.read_bytes())
    ts0, _ = struct.unpack_from(">qi", raw, 0)
    _, rel1 = struct.unpack_from(">qi", raw, 12)
    struct.pack_into(">qi", raw, 12, ts0 - 1, rel1)
    tindex.write_bytes(raw)
    doc = run_json("--verify", tindex, expect_exit=1)
    assert [m["entry"] for m in doc["mismatches"]] == [1]
    assert "out of order" in doc["mismatches"][0]["message"]
    # the index's own sanity check fails too, with or without --verify
    assert any(e["kind"] == "corrupt_index" for e in doc["errors"])
    assert run(tindex).exit_code == 1


def test_verify_against_a_truncated_log(written: Written, tmp_path: Path) -> None:
    part = copy_partition(written, tmp_path)
    index = next(p for p in sorted(part.glob("*.index")) if p.stat().st_size >= 24)
    (_, position) = struct.unpack_from(">ii", index.read_bytes(), 8)
    with open(index.with_suffix(".log"), "r+b") as f:
        f.truncate(position + 10)
    doc = run_json("--verify", index, expect_exit=1)
    assert [m["entry"] for m in doc["mismatches"]] == list(range(1, len(doc["entries"])))
    assert any(e["kind"] == "log_corrupt" and e["position"] == position for e in doc["errors"])


def test_verify_without_the_log_file(written: Written, tmp_path: Path) -> None:
    index = tmp_path / written.files(".index")[0].name
    shutil.copy(written.files(".index")[0], index)
    doc = run_json("--verify", index, expect_exit=1)
    assert [e["kind"] for e in doc["errors"]] == ["missing_log"]


def test_dump_changes_no_file_of_a_live_partition(tmp_path: Path) -> None:
    """The active segment's indexes are preallocated and mapped by the running log; a dump
    must neither trim nor touch them."""
    w, manager = write_standard(tmp_path / "logdir", shutdown=False)
    try:
        before = {
            p: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in w.partition_dir.iterdir()
        }
        active_index = w.files(".index")[-1]
        assert active_index.stat().st_size == LogConfig().segment_index_bytes  # preallocated
        dumped = sorted(
            p
            for p in w.partition_dir.iterdir()
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
        )
        result = run("--verify", "--print-data", *dumped)
        assert result.exit_code == 0, result.output
        # the untrimmed active index yields exactly its written entries
        doc = run_json("--verify", active_index)
        assert doc["entries"] and doc["mismatches"] == []
        after = {
            p: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in w.partition_dir.iterdir()
        }
        assert after == before
    finally:
        manager.shutdown()


# ---- .txnindex, .snapshot -----------------------------------------------------------------


def test_txn_index_lists_the_aborted_transaction(written: Written) -> None:
    (aborted,) = [a for a in written.batches if a.producer_id == 7 and a.control is None]
    (marker,) = [a for a in written.batches if a.control == "ABORT"]
    docs = [run_json(p) for p in written.files(".txnindex")]
    entries = [e for d in docs for e in d["entries"]]
    assert len(entries) == 1
    (entry,) = entries
    assert entry["version"] == 0 and entry["producer_id"] == 7
    assert (entry["first_offset"], entry["last_offset"]) == (
        aborted.first_offset,
        marker.last_offset,
    )
    assert entry["last_stable_offset"] >= entry["first_offset"]
    text = run(*written.files(".txnindex")).stdout
    assert (
        f"version: 0 producerId: 7 firstOffset: {aborted.first_offset} "
        f"lastOffset: {marker.last_offset} lastStableOffset: {entry['last_stable_offset']}"
    ) in text


def test_producer_snapshot_lists_the_producers(written: Written) -> None:
    last = written.files(".snapshot")[-1]
    doc = run_json(last)
    assert doc["kind"] == "producer_snapshot" and doc["offset"] == int(last.name[:20])
    by_pid = {e["producer_id"]: e for e in doc["entries"]}
    assert set(by_pid) == {7, 8}
    (committed,) = [a for a in written.batches if a.producer_id == 8 and a.control is None]
    e8 = by_pid[8]
    assert (e8["producer_epoch"], e8["last_sequence"], e8["first_sequence"]) == (0, 0, 0)
    assert e8["last_offset"] == committed.last_offset and e8["current_txn_first_offset"] is None
    assert (by_pid[7]["first_sequence"], by_pid[7]["last_sequence"]) == (0, 1)
    text = run(last).stdout
    assert (
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong.empty"
        in text
    )
    assert f"lastOffset: {committed.last_offset} offsetDelta: 0" in text


def test_corrupt_snapshot_is_an_error(written: Written, tmp_path: Path) -> None:
    snap = tmp_path / written.files(".snapshot")[-1].name
    raw = bytearray(written.files(".snapshot")[-1].read_bytes())
    raw[-1] ^= 1
    snap.write_bytes(raw)
    doc = run_json(snap, expect_exit=1)
    assert doc["entries"] == [] and "CRC mismatch" in doc["errors"][0]["message"]


# ---- arguments ----------------------------------------------------------------------------


def test_unknown_suffix_exits_2(tmp_path: Path) -> None:
    odd = tmp_path / "00000000000000000000.bin"
    odd.write_bytes(b"x")
    result = run(odd)
    assert result.exit_code == 2
    assert "unknown file type" in result.stderr and str(odd) in result.stderr
    assert result.stdout == ""


def test_missing_file_exits_2_before_any_output(written: Written, tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000000.log"
    result = run("--json", written.files(".log")[0], missing)
    assert result.exit_code == 2
    assert "does not exist" in result.stderr and str(missing) in result.stderr
    assert result.stdout == ""


def test_index_name_without_base_offset_exits_2(written: Written, tmp_path: Path) -> None:
    odd = tmp_path / "segment.index"
    shutil.copy(written.files(".index")[0], odd)
    result = run(odd)
    assert result.exit_code == 2 and "base offset" in result.stderr


def test_several_files_make_one_document_in_order(written: Written) -> None:
    files = [written.files(".timeindex")[0], written.files(".log")[1], written.files(".index")[0]]
    doc = run_json(*files)
    assert list(doc) == ["files"]
    assert [(d["file"], d["kind"]) for d in doc["files"]] == [
        (str(files[0]), "time_index"),
        (str(files[1]), "log"),
        (str(files[2]), "offset_index"),
    ]
    text = run(*files).stdout
    starts = [text.index(f"Dumping {f}\n") for f in files]
    assert starts == sorted(starts)


def test_transient_suffixes_dump_like_the_file(written: Written, tmp_path: Path) -> None:
    deleted = tmp_path / (written.files(".log")[0].name + ".deleted")
    shutil.copy(written.files(".log")[0], deleted)
    assert run_json(deleted)["batches"] == run_json(written.files(".log")[0])["batches"]


# ---- properties ---------------------------------------------------------------------------

header_values = st.one_of(st.none(), st.binary(max_size=8))
records = st.lists(
    st.tuples(
        st.integers(1_700_000_000_000, 1_700_000_100_000),  # within one segment.ms
        st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=12).map(str.encode)),
        st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=40).map(str.encode)),
        st.lists(st.tuples(st.text(max_size=5), header_values), max_size=2).map(tuple),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            records,
            st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4]),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_print_data_round_trips_any_records(batches: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        m = open_manager(Path(tmp), segment_bytes=1 << 20, index_interval_bytes=1)
        log = m.get_or_create_log(TP)
        written = Written(log.dir)
        for recs, codec in batches:
            append(log, written, recs, compression=codec)
        m.shutdown()
        (log_file,) = written.files(".log")
        doc = dump_log(log_file, print_data=True).to_dict()
        json.loads(json.dumps(doc))  # plain JSON values only
        assert doc["errors"] == []
        got = {
            r["offset"]: (
                r["timestamp"],
                decode(r["key"], r["key_encoding"]),
                decode(r["value"], r["value_encoding"]),
                tuple((h["key"], decode(h["value"], h["value_encoding"])) for h in r["headers"]),
            )
            for b in doc["batches"]
            for r in b["data"]
        }
        assert got == written.records_by_offset()
        positions = [b["position"] for b in doc["batches"]]
        assert positions == [0] + [
            sum(b["size"] for b in doc["batches"][:i]) for i in range(1, len(positions))
        ]


# ---- a large segment ----------------------------------------------------------------------


def sparse_batch(f, base_offset: int, value_size: int, timestamp: int) -> None:
    """A one-record batch whose value is ``value_size`` zero bytes, written as a hole."""
    prefix = (
        b"\x00"
        + encode_varlong(0)
        + encode_varint(0)
        + encode_varint(-1)
        + encode_varint(value_size)
    )
    suffix = encode_varint(0)
    records = encode_varint(len(prefix) + value_size + len(suffix)) + prefix
    size = 61 + len(records) + value_size + len(suffix)
    header = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            base_offset,
            size - 12,
            0,
            2,
            0,
            0,
            0,
            timestamp,
            timestamp,
            -1,
            -1,
            -1,
            1,
        )
    )
    crc = crc32c.crc32c(bytes(header[21:]) + records)
    zeros = bytes(1 << 20)
    for _ in range(value_size >> 20):
        crc = crc32c.crc32c(zeros, value=crc)
    struct.pack_into(">I", header, 17, crc32c.crc32c(suffix, value=crc))
    f.write(header + records)
    f.seek(value_size, os.SEEK_CUR)
    f.write(suffix)


def test_a_1gib_segment_dumps_in_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    with open(log, "wb") as f:
        for i in range(4):
            sparse_batch(f, i, 256 << 20, 1000 + i)
    assert log.stat().st_size > 1 << 30
    out = tmp_path / "out.json"
    # A small wrapper starts the dump and reports its peak RSS: measured straight from this
    # process, a forked child's ru_maxrss can include pytest's own pages from before exec.
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.call(sys.argv[1:], stdout=open(sys.argv[-1] + '.json', 'wb'))\n"
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, LOGKEEL, "log", "dump", "--json", str(log)],
        capture_output=True,
        text=True,
        check=True,
    )
    returncode, maxrss = map(int, done.stdout.split())
    assert returncode == 0
    os.replace(str(log) + ".json", out)
    doc = json.loads(out.read_text())
    assert [(b["base_offset"], b["crc_valid"], b["size"]) for b in doc["batches"]] == [
        (i, True, doc["batches"][0]["size"]) for i in range(4)
    ]
    assert doc["valid_bytes"] == log.stat().st_size
    # ru_maxrss is in KiB on Linux: the interpreter plus a read chunk, not the segment
    assert maxrss < 200 * 1024, maxrss


def test_output_into_a_closed_pipe_stops_quietly(written: Written) -> None:
    proc = subprocess.Popen(
        [LOGKEEL, "log", "dump", "--print-data", *map(str, written.files(".log") * 30)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"Dumping ")
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert b"Traceback" not in stderr, stderr


def test_gzip_module_agrees_on_the_gzip_batch(written: Written) -> None:
    """Independent check of the position/size fields: the gzip member sits right after the
    61-byte header of the batch the dump places there."""
    for path in written.files(".log"):
        for b in run_json(path)["batches"]:
            if b["compression"] == "gzip":
                raw = path.read_bytes()[b["position"] + 61 : b["position"] + b["size"]]
                assert gzip.decompress(raw)  # a whole gzip member, nothing before or after
                return
    pytest.fail("no gzip batch")
