"""LogConfig.from_topic_config: Kafka's defaults for whatever the topic config does not give."""

from __future__ import annotations

from logkeel.storage.engine.log_config import LogConfig


class _Partial:
    """A resolved topic config that knows only some keys (unknown ones raise, unset are None)."""

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def get(self, name: str) -> object:
        if name == "retention.bytes":
            return None
        return self.values[name]


def test_missing_and_unset_keys_take_the_defaults() -> None:
    cfg = LogConfig.from_topic_config(
        _Partial({"segment.bytes": "2048"}), producer_id_expiration_ms=5
    )
    assert cfg.segment_bytes == 2048
    assert cfg.retention_bytes == LogConfig().retention_bytes
    assert cfg.index_interval_bytes == 4096
    assert cfg.cleanup_policy == ("delete",)
    assert cfg.producer_id_expiration_ms == 5
