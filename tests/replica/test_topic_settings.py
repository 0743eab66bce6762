"""What a partition reads from its topic's configs on every append (no sockets)."""

from __future__ import annotations

import pytest

from logkeel.config import BrokerConfig, TopicConfig
from logkeel.records.batch import CompressionType
from logkeel.server.replica.topic_settings import TopicSettings


def settings(broker: dict[str, str] | None = None, **topic: str) -> TopicSettings:
    overrides = {k.replace("_", "."): v for k, v in topic.items()}
    return TopicSettings.from_topic_config(
        TopicConfig.from_broker(BrokerConfig(broker or {}), overrides)
    )


@pytest.mark.parametrize(
    ("value", "codec"),
    [
        ("producer", None),
        ("uncompressed", CompressionType.NONE),
        ("gzip", CompressionType.GZIP),
        ("snappy", CompressionType.SNAPPY),
        ("lz4", CompressionType.LZ4),
        ("zstd", CompressionType.ZSTD),
    ],
)
def test_compression_type_names_the_stored_codec(value: str, codec: CompressionType | None) -> None:
    assert settings(compression_type=value).codec == codec


def test_levels_as_kafka_applies_them() -> None:
    # Kafka's defaults are the codecs' own: zlib's default, lz4's fast compressor, zstd 3.
    assert settings(compression_type="gzip").level is None
    assert settings(compression_type="lz4").level is None
    assert settings(compression_type="zstd").level == 3
    assert settings(compression_type="gzip", compression_gzip_level="9").level == 9
    assert settings(compression_type="lz4", compression_lz4_level="12").level == 12
    assert settings(compression_type="zstd", compression_zstd_level="-5").level == -5
    # The broker's level is the default of every topic's.
    assert settings({"compression.gzip.level": "1"}, compression_type="gzip").level == 1
    # A level of another codec does not apply.
    assert settings(compression_type="snappy", compression_zstd_level="9").level is None


def test_broker_default_codec_and_compaction() -> None:
    assert settings({"compression.type": "zstd"}).codec == CompressionType.ZSTD
    assert settings({"compression.type": "zstd"}, compression_type="producer").codec is None
    assert settings(cleanup_policy="compact,delete").rules.compacted
    assert not settings().rules.compacted
