"""Log dirs laid out as Apache Kafka leaves them, with batches built by kafka-python's own
record builder (an independent encoder): for the offline tools and for serving them."""

from __future__ import annotations

import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

TIMESTAMP = 1_700_000_000_000


def kafka_batch(base_offset: int, values: list[bytes], *, keys: list[bytes] | None = None) -> bytes:
    """A v2 batch built by kafka-python (an independent encoder), at ``base_offset``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        key = keys[i] if keys is not None else None
        builder.append(i, timestamp=TIMESTAMP + base_offset + i, key=key, value=v, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC, as a broker assigns it
    return bytes(data)


def write_meta(root: Path, checkpoints: dict[str, int]) -> None:
    """Kafka's per-dir files (ZooKeeper-era meta.properties, clean-shutdown marker, the three
    offset checkpoints for ``checkpoints``: partition dir name -> log end)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.properties").write_text(
        "#\n#Tue Nov 21 06:00:00 UTC 2023\nbroker.id=0\nversion=0\ncluster.id=Xk2hDqaFQYy8G5XEpDx2Lw\n"
    )
    (root / ".kafka_cleanshutdown").write_text("")
    (root / ".lock").write_text("")
    lines = []
    for name, end in sorted(checkpoints.items()):
        topic, _, partition = name.rpartition("-")
        lines.append(f"{topic} {partition} {end}")
    body = f"0\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (root / name).write_text(body)
    (root / "log-start-offset-checkpoint").write_text(
        f"0\n{len(lines)}\n" + "".join(f"{line.rsplit(' ', 1)[0]} 0\n" for line in lines)
    )


def write_partition(
    part: Path,
    values: list[bytes],
    *,
    topic_id: str | None,
    per_batch: int = 50,
    per_segment: int = 1000,
) -> int:
    """A Kafka partition dir holding ``values`` from offset 0: batches of ``per_batch``,
    segments of ``per_segment`` records, indexes trimmed empty as after a clean shutdown
    (valid: an entry every log.index.interval.bytes is not required), a leader-epoch
    checkpoint and, when ``topic_id``, a `partition.metadata`. Returns the log end offset."""
    part.mkdir(parents=True)
    for seg_start in range(0, max(len(values), 1), per_segment):
        chunk = values[seg_start : seg_start + per_segment]
        data = b"".join(
            kafka_batch(seg_start + i, chunk[i : i + per_batch])
            for i in range(0, len(chunk), per_batch)
        )
        (part / f"{seg_start:020d}.log").write_bytes(data)
        (part / f"{seg_start:020d}.index").write_bytes(b"")
        last = seg_start + len(chunk) - 1
        (part / f"{seg_start:020d}.timeindex").write_bytes(
            struct.pack(">qi", TIMESTAMP + last, last - seg_start) if chunk else b""
        )
    (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    if topic_id is not None:
        (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    return len(values)


def make_kafka_dir(root: Path) -> Path:
    """One topic, ``payments-0`` (two batches, six records), and Kafka's KRaft metadata log."""
    write_meta(root, {"payments-0": 6})
    (root / "bootstrap.checkpoint").write_bytes(b"\x00\x01")
    write_partition(
        root / "payments-0",
        [b"a", b"b", b"c", b"d", b"e", b"f"],
        topic_id="3Zbq1mK4RZ2u5nZ2wVZ5Jg",
        per_batch=3,
    )
    meta = root / "__cluster_metadata-0"
    meta.mkdir()
    (meta / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1}')
    return root
