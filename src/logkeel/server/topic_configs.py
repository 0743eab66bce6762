"""Each topic's resolved configs as this broker serves them: the broker's defaults with the
topic's overrides from metadata on top, and the storage settings derived from them."""

from __future__ import annotations

import logging
import threading

from logkeel.cluster.metadata import MetadataStore
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.storage.engine.log_config import LogConfig

__all__ = ["TopicConfigs"]

log = logging.getLogger(__name__)


class TopicConfigs:
    """Resolved topic configs, from any thread."""

    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self._config = config
        self._metadata = metadata
        # Keyed by the overrides: topics with the same overrides share one resolved config.
        self._cache: dict[tuple[tuple[str, str], ...], TopicConfig] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> TopicConfig:
        """The broker defaults with the topic's overrides from metadata on top."""
        state = self._metadata.topic(name)
        overrides = dict(state.configs) if state is not None else {}
        key = tuple(sorted(overrides.items()))
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            config = TopicConfig.from_broker(self._config, overrides)
        except ValueError as exc:
            # Stored overrides were valid when written; a changed broker default can still make
            # them clash. Serve the topic on the broker defaults rather than not at all.
            log.error("topic %s: stored configs are invalid (%s); using broker defaults", name, exc)
            config = TopicConfig.from_broker(self._config)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = config
        return config

    def log_config(self, name: str) -> LogConfig:
        """The storage settings of topic ``name`` (see ``get``)."""
        return self.log_config_from(self.get(name))

    def log_config_from(self, topic: TopicConfig) -> LogConfig:
        return LogConfig.from_topic_config(
            topic,
            producer_snapshot_interval_ms=self._config.producer_state_snapshot_interval_ms,
            producer_id_expiration_ms=self._config.producer_id_expiration_ms,
        )
