"""The offline commands on a dir laid out as Apache Kafka leaves one (ZooKeeper-era and KRaft
files next to the partitions), with batches checked by kafka-python's own decoder."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatchBuilder

from logkeel.cli.log_load import check_command, load_command


def kafka_batch(base_offset: int, values: list[bytes]) -> bytes:
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
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC, as a broker assigns it
    return bytes(data)


def make_kafka_dir(root: Path) -> Path:
    root.mkdir()
    (root / "meta.properties").write_text(
        "#\n#Tue Nov 21 06:00:00 UTC 2023\nbroker.id=0\nversion=0\ncluster.id=Xk2hDqaFQYy8G5XEpDx2Lw\n"
    )
    (root / ".kafka_cleanshutdown").write_text("")
    (root / ".lock").write_text("")
    (root / "bootstrap.checkpoint").write_bytes(b"\x00\x01")
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (root / name).write_text("0\n1\npayments 0 6\n")
    (root / "log-start-offset-checkpoint").write_text("0\n1\npayments 0 0\n")
    part = root / "payments-0"
    part.mkdir()
    log = kafka_batch(0, [b"a", b"b", b"c"]) + kafka_batch(3, [b"d", b"e", b"f"])
    (part / f"{0:020d}.log").write_bytes(log)
    (part / f"{0:020d}.index").write_bytes(b"")  # Kafka trims indexes on clean shutdown
    (part / f"{0:020d}.timeindex").write_bytes(struct.pack(">qi", 1_700_000_000_002, 5))
    (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (part / "partition.metadata").write_text("version: 0\ntopic_id: 3Zbq1mK4RZ2u5nZ2wVZ5Jg\n")
    meta = root / "__cluster_metadata-0"
    meta.mkdir()
    (meta / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":1,"votedId":-1}')
    return root


def test_check_and_load_a_kafka_written_dir(tmp_path):
    root = make_kafka_dir(tmp_path / "kafka")
    checked = CliRunner().invoke(check_command, [str(root), "--json"])
    report = json.loads(checked.output.strip().splitlines()[-1])
    assert checked.exit_code == 0, report["problems"]
    assert report["batches"] == 2 and report["clean"] is True
    loaded = CliRunner().invoke(load_command, [str(root), "--json"])
    assert loaded.exit_code == 0, loaded.output
    report = json.loads(loaded.output.strip().splitlines()[-1])
    assert report["clean"] is True and report["offline"] == [] and report["truncations"] == []
    assert report["partitions"] == 2  # payments-0 and the (empty) metadata log
    assert (root / "payments-0" / f"{0:020d}.log").stat().st_size > 0
    again = CliRunner().invoke(check_command, [str(root), "--json"])
    assert again.exit_code == 0, again.output
