"""The offline commands on a dir laid out as Apache Kafka leaves one (ZooKeeper-era and KRaft
files next to the partitions), with batches checked by kafka-python's own decoder."""

from __future__ import annotations

import json

from click.testing import CliRunner

from logkeel.cli.log_load import check_command, load_command
from tests.kafka_dirs import make_kafka_dir


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
