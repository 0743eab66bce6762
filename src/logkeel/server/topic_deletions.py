"""Topic deletions a crash interrupted, finished at start-up before anything is served."""

from __future__ import annotations

import logging

from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager

__all__ = ["finish_topic_deletions"]

log = logging.getLogger(__name__)


def finish_topic_deletions(metadata: MetadataStore, log_manager: LogManager) -> None:
    """Deletes the logs of topics whose deletion a crash interrupted (the metadata records
    a deletion in the write that removes the topic; the dirs are renamed after), before
    anything is served: a deleted topic's data is never served or adopted again."""
    pending = metadata.pending_deletions()
    failed: set[str] = set()
    for tp in pending:
        try:
            log_manager.delete_log(tp, checkpoint=False)
        except KafkaStorageError as exc:
            log_manager.handle_dir_failure(exc)
            failed.add(tp.topic)
    if pending:
        log_manager.checkpoint_all()
        log.info("finished deleting %d partition(s) of deleted topics", len(pending))
    try:
        metadata.forget_deletions({tp.topic for tp in pending} - failed)
    except MetadataError as exc:
        log.error("could not record the finished deletions: %s", exc)
