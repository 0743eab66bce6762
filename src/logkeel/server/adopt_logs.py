"""At start-up, partition logs on disk that the metadata does not know: a single node adopts
them as topics and serves them, a cluster reports them and leaves them alone (the decision
is ``cluster.adoption``'s). Runs after interrupted topic deletions were finished and before
the partitions are built from the metadata, off the event loop."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from logkeel.cluster.adoption import Adoption, plan_adoption
from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.server.group.log import InternalTopic
from logkeel.storage.log_dir import random_uuid
from logkeel.storage.log_manager import LogManager
from logkeel.storage.partition_metadata import read_topic_id
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


def stray_logs(
    log_manager: LogManager, metadata: MetadataStore
) -> dict[TopicPartition, str | None]:
    """Loaded (or unloadable) partition logs no partition of the metadata names, each with the
    topic id its `partition.metadata` holds (None: none)."""
    topics = metadata.topics()
    found = [*log_manager.logs, *log_manager.offline_partitions]
    strays: dict[TopicPartition, str | None] = {}
    for tp in found:
        state = topics.get(tp.topic)
        if state is not None and tp.partition in state.partitions:
            continue
        plog = log_manager.get_log(tp)
        dirs = (
            [plog.dir]
            if plog is not None
            else [d.path / tp.dir_name for d in log_manager.online_dirs]
        )
        topic_id = None
        for path in dirs:
            try:
                topic_id = read_topic_id(path)
            except OSError as exc:
                log.warning("%s: cannot read its partition.metadata: %s", path, exc)
            if topic_id is not None:
                break
        strays[tp] = topic_id
    return strays


def adopt_stray_logs(
    metadata: MetadataStore,
    log_manager: LogManager,
    coordinator_topics: Mapping[str, InternalTopic],
    *,
    single_node: bool,
) -> list[Adoption]:
    """Adopts (single node) or reports (cluster) the stray logs; returns what was adopted."""
    if not single_node:
        # The partition table reports each one ("not served") and nothing touches it.
        return []
    strays = stray_logs(log_manager, metadata)
    if not strays:
        return []
    adoptions, refusals = plan_adoption(
        strays,
        known={name: t.topic_id for name, t in metadata.topics().items()},
        pending_deletions={tp.topic for tp in metadata.pending_deletions()},
        deleted=metadata.deleted_topics(),
        coordinator_topics=coordinator_topics,
        new_id=random_uuid,
    )
    for refusal in refusals:
        log.warning("%s", refusal.describe())
    if not adoptions:
        return []

    def configs(a: Adoption) -> dict[str, str]:
        owner = coordinator_topics.get(a.topic)
        return owner.configs() if owner is not None else {}

    try:
        metadata.adopt_topics(adoptions, configs)
    except MetadataError as exc:
        log.error("could not register the topics found on disk: %s", exc)
        return []
    for a in adoptions:
        log.info("%s", a.describe())
        owner = coordinator_topics.get(a.topic)
        if owner is not None and owner.partitions != a.partitions:
            log.warning(
                "%s has %d partitions on disk, not the %d configured: the coordinator uses %d, "
                "as Kafka does for an existing topic",
                a.topic,
                a.partitions,
                owner.partitions,
                a.partitions,
            )
    return adoptions
