"""The examples, each run as the one command its docstring gives, against `logkeel serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.spark.kafka_util import consume_all, unique

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_batch_load_then_streaming_etl_round_trip(spark, broker, tmp_path):
    topic = unique("example")
    run(
        "examples/batch_load.py",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic,
        "--demo-rows",
        "2000",
        "--partitions",
        "2",
        "--master",
        "local[2]",
    )
    loaded = consume_all(broker.bootstrap, topic, 2)
    assert len(loaded) == 2000
    assert all(
        m.key() == b"customer-%d" % (int(m.value().split(b'"id":')[1].split(b",")[0]) % 100)
        for m in loaded
    )

    out = tmp_path / "parquet"
    proc = run(
        "examples/streaming_etl.py",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic,
        "--output",
        str(out),
        "--once",
        "--max-offsets-per-trigger",
        "1200",
        "--master",
        "local[2]",
    )
    assert "batch 0:" in proc.stdout
    df = spark.read.parquet(str(out))
    assert df.count() == 2000
    assert sorted(
        (r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()
    ) == sorted((m.partition(), m.offset()) for m in loaded)
    assert "date" in df.columns and df.where("value like '{\"id\":%'").count() == 2000
