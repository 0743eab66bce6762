"""Fetch (API key 1), versions 4-18: records out, straight from the segment files.

Versions: 4 is the first that carries RecordBatch v2 (what the log stores), so nothing is ever
down-converted; 13 names topics by id; 15 moves the replica id into ``replica_state``.

Zero-copy: the response is encoded with kio's own writer, but into a buffer that keeps each
partition's records out: they stay ``RegionRecords`` (a duplicated descriptor, a position and
a size in a segment file). The network layer writes the encoded bytes and ``sendfile``s the
regions between them, so record bytes go from the page cache to the socket without entering
Python (see ``network._send_parts``).

Fetch sessions (KIP-227): ``fetch_sessions.FetchSessionCache`` decides (one cache per broker,
``max.incremental.fetch.session.cache.slots``; 0 declines every session, as a full Kafka cache
does). The long poll covers the session's whole partition set; an incremental request is
answered with only the partitions the cache says changed. A partition whose last read had
nothing to return and that has not changed since is not read at all (``session_reads``): an
idle follower's Fetch reads none of its ~667 partitions at 2,000 partitions RF 3. A follower's
session goes further: told of its partitions' changes by the fetch purgatory, it hands this
handler only the partitions it reads, so the entries, the session's answer, the remembered
reads and the long poll cost what changed, not the session's size (~3,333 partitions per
follower at 10,000 RF 3); CLUSTER_ACTION is still checked on every request, and a refused
follower is answered every partition. A consumer's session walks all of its partitions (its
READ ACLs are per topic).

Reading from the nearest replica (KIP-392): with ``replica.selector.class`` set, a consumer's
Fetch v11+ carries its ``rack_id`` into each partition's request; the leader may answer with a
``preferred_read_replica`` and a follower serves it (``partition_reads``). As in Kafka, a
follower serves any consumer's Fetch v11+ (up to its high watermark) whatever its own config;
below v11 consumers are the leader's alone.

Long polls wait in the replica manager's fetch purgatory (``max_wait`` / ``min_bytes``).
``max_bytes`` is capped by the broker's ``fetch.max.bytes`` (followers:
``replica.fetch.response.max.bytes``), as in Kafka.
"""

from __future__ import annotations

import io
import logging
import struct
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import IO, Any, cast

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataStore, topic_id_text, topic_uuid
from logkeel.config import BrokerConfig
from logkeel.server.api.messages import FetchRequest, FetchResponse
from logkeel.server.api.responses import build, nested_types, node_endpoints, response
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ContextKind,
    FetchContext,
    FetchParams,
    FetchSession,
    FetchSessionCache,
    PartitionKey,
    PartitionOutcome,
)
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.quotas import ClientQuotas
from logkeel.server.replica.fetches import Fetches
from logkeel.server.replica.results import (
    FetchPartitionRequest,
    FetchPartitionResult,
    MemoryRecords,
    RegionRecords,
    close_records,
)
from logkeel.server.replica.session_reads import SessionReads, Stamp, Unread
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["MAX_VERSION", "MIN_VERSION", "FetchApi", "FetchResponseFrame", "register"]

log = logging.getLogger(__name__)

MIN_VERSION = 4
MAX_VERSION = 18
_TOPIC_IDS_FROM = 13
_REPLICA_STATE_FROM = 15
_CLIENT_RACK_FROM = 11  # rack_id, preferred_read_replica (KIP-392)
_INT32_MAX = (1 << 31) - 1


class _PartsWriter:
    """A write-only buffer for kio's writer that keeps ``RegionRecords`` out of the bytes.

    kio writes a records field as its length followed by ``write(value)``; a region answers
    ``len()`` with its size and is kept as a part of its own here, so the encoded frame is
    [bytes, region, bytes, region, ..., bytes].
    """

    def __init__(self) -> None:
        self.parts: list[bytes | RegionRecords] = []
        self._buf = bytearray()

    def write(self, data: Any) -> int:
        if isinstance(data, RegionRecords):
            self.parts.append(bytes(self._buf))
            self._buf.clear()
            self.parts.append(data)
        else:
            self._buf += data
        return len(data)

    def finish(self) -> list[bytes | RegionRecords]:
        self.parts.append(bytes(self._buf))
        self._buf.clear()
        return [p for p in self.parts if len(p) or isinstance(p, RegionRecords)]


class FetchResponseFrame:
    """A Fetch response whose records are file regions; the network layer sends it with
    ``frame_parts`` (bytes and regions in order) and then calls ``close``."""

    def __init__(
        self, response: FetchResponse, records: list[RegionRecords | MemoryRecords]
    ) -> None:
        self.__api_key__ = ApiKey.FETCH
        self.__version__ = response.__version__
        self.response = response
        self._records = records
        # Told when sending starts (False) and ends (True), with the ms its regions took to
        # read from their files (0 at the start): a follower's fetch is timed so a leader too
        # slow for its followers can tell (beyond KIP-501).
        self.on_send: Callable[[bool, int], None] | None = None
        self.throttle_time = response.throttle_time  # read by the connection (KIP-219 mute)
        self._file_read_ms = 0

    def file_read(self, seconds: float) -> None:
        """The network layer read (part of) a region from its file in ``seconds`` (one
        ``sendfile``): what the disk took, apart from the socket and the CPU."""
        self._file_read_ms += round(seconds * 1000)

    def frame_parts(self, correlation_id: int) -> list[bytes | RegionRecords]:
        if self.on_send is not None:
            self.on_send(False, 0)
        response_type = type(self.response)
        header_type = response_type.__header_schema__
        head = io.BytesIO()
        entity_writer(header_type)(head, header_type(correlation_id=i32(correlation_id)))
        writer = _PartsWriter()
        writer.write(head.getvalue())
        # kio only calls write() on it
        entity_writer(response_type)(cast("IO[bytes]", writer), self.response)
        parts = writer.finish()
        size = sum(len(p) for p in parts)
        return [struct.pack(">i", size), *parts]

    def encode(self, correlation_id: int) -> bytes:
        """The whole frame as bytes (reads the regions): for tests and fallbacks."""
        return b"".join(
            p.read_bytes() if isinstance(p, RegionRecords) else p
            for p in self.frame_parts(correlation_id)
        )

    def close(self) -> None:
        for r in self._records:
            r.close()
        on_send, self.on_send = self.on_send, None
        if on_send is not None:
            on_send(True, self._file_read_ms)


class FetchApi:
    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataStore,
        fetches: Fetches,
        authorizer: RequestAuthorizer,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self._quotas = quotas
        self._authorizer = authorizer
        self._config = config
        self._metadata = metadata
        self._fetches = fetches
        # KIP-392: whether this broker, as a leader, sends consumers to a follower.
        self._selector = bool(config.get("replica.selector.class"))
        self._sessions = FetchSessionCache(
            int(config.get("max.incremental.fetch.session.cache.slots")),
            on_removed=_close_reads,
        )

    def _max_bytes(self, requested: int, follower: bool) -> int:
        name = "replica.fetch.response.max.bytes" if follower else "fetch.max.bytes"
        return max(0, min(requested, int(self._config.get(name))))

    async def handle(
        self, ctx: RequestContext, request: FetchRequest
    ) -> FetchResponse | FetchResponseFrame:
        version = ctx.api_version
        mod = nested_types(ApiKey.FETCH, version)
        if hasattr(request, "replica_state"):  # v15+
            replica_id = int(request.replica_state.replica_id)
        else:
            replica_id = int(request.replica_id)
        follower = replica_id >= 0
        by_id = version >= _TOPIC_IDS_FROM
        requested, forgotten = _requested(request, by_id), _forgotten(request, by_id)
        # Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic;
        # checked on every request, for the whole session.
        follower_allowed = not follower or self._authorizer.allowed(
            ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        )
        session = self._sessions.new_context(
            int(getattr(request, "session_id", INVALID_SESSION_ID)),
            int(getattr(request, "session_epoch", FINAL_EPOCH)),
            requested,
            forgotten,
            privileged=follower,
            owner=(ctx.session.principal, follower),
            uses_topic_ids=by_id,
            now_ms=_now_ms(),
            listed=False,
        )
        if session.kind is ContextKind.ERROR:
            return response(ctx, error_code=session.error, session_id=0, responses=())
        # The session's partitions (a full request's own), in order; each a request to read
        # or the error it is answered with.
        # As Kafka: any replica serves a consumer's Fetch v11+ (one told to by a leader with a
        # selector, or with stale metadata); only a leader with a selector sends it elsewhere
        # (no rack: nowhere). Mixed configs during a rolling change then never ping-pong.
        client_rack = (
            (str(getattr(request, "rack_id", None) or "") if self._selector else "")
            if not follower and version >= _CLIENT_RACK_FROM
            else None
        )
        isolation_level = int(getattr(request, "isolation_level", 0))
        reads = _reads(session, replica_id)
        unread: Mapping[PartitionKey, Unread] = {}
        watch: _LateReads | None = None
        if reads is not None:
            reads.forget(key for key, _ in requested)
            reads.remove(forgotten)
            unread = reads.unread(
                self._fetches.partition,
                isolation_level,
                read_anyway=self._fetches.on_slow_dir if follower else None,
                check_all=follower and self._fetches.dir_reads.any_slow(),
            )
            if reads.narrows and follower_allowed:
                # Only what the session reads: the partitions unread and unchanged are left
                # out of every step below (their response entries too, as KIP-227 says).
                session.partitions = self._sessions.partitions_of(session, reads.to_read())
                watch = _LateReads(reads)
        if session.kind is ContextKind.INCREMENTAL and watch is None:
            session.partitions = self._sessions.partitions_of(session)
        entries = self._entries(
            ctx, session, by_id, follower, follower_allowed, client_rack, unread
        )
        for key, _ in entries:
            if key in unread and reads is not None:  # now answered with an error (an ACL)
                reads.drop(key)
        pending = {key: u.request for key, u in unread.items()} if watch is None else {}
        wanted = [e for _, e in entries if isinstance(e, FetchPartitionRequest)]
        # A session's reads are stamped, to answer the partitions they find idle without a
        # read next time (a full request's session is made when it is answered).
        stamps: dict[int, Stamp | None] | None = (
            {} if session.kind in (ContextKind.FULL, ContextKind.INCREMENTAL) else None
        )
        results = await self._fetches.fetch(
            wanted,
            replica_id=replica_id,
            max_wait_ms=round(request.max_wait.total_seconds() * 1000),
            min_bytes=int(request.min_bytes),
            max_bytes=self._max_bytes(int(getattr(request, "max_bytes", _INT32_MAX)), follower),
            isolation_level=isolation_level,
            unread=[unread[key] for key in pending] if watch is None else (),
            stamps=stamps,
            session=watch,
        )
        try:
            if watch is not None and watch.late:
                # Unread partitions that changed while the fetch ran: read at its end.
                pending = watch.late
                session.partitions += self._sessions.partitions_of(session, pending)
            answered = _answered(session, entries, wanted, results, pending)
            throttle_ms = 0
            if not follower and self._quotas is not None:
                throttle_ms = self._throttle(ctx, results)
            outcome = self._sessions.answer(
                session,
                [_outcome(r) if r is not None else None for r in answered],
                _now_ms(),
                throttled=bool(throttle_ms),
            )
            if throttle_ms or outcome.error != ErrorCode.none:
                # Kafka answers a throttled fetch empty (the bytes read are not charged) and
                # the client fetches them again once the connection reads again.
                close_records(results)
                return FetchResponseFrame(
                    response(
                        ctx,
                        throttle_ms,
                        error_code=outcome.error,
                        session_id=outcome.session_id,
                        responses=(),
                    ),
                    [],
                )
            sent = [
                (key, r)
                for (key, _), r, included in zip(
                    session.partitions, answered, outcome.include, strict=True
                )
                if included and r is not None
            ]
            close_records(
                r
                for r, included in zip(answered, outcome.include, strict=True)
                if not included and r is not None
            )
            if stamps is not None and outcome.session_id != INVALID_SESSION_ID:
                self._remember_reads(
                    outcome.session_id, replica_id, session, entries, pending, answered, stamps
                )
            frame = self._response(ctx, mod, sent, outcome.session_id, by_id)
        except BaseException:
            close_records(results)
            raise
        served = [r.tp for _, r in sent if r.records is not None and not r.read_earlier]
        if follower and served:
            token = id(frame)
            frame.on_send = lambda done, file_read_ms: self._fetches.follower_response(
                served, replica_id, token, done, file_read_ms
            )
        return frame

    def _remember_reads(
        self,
        session_id: int,
        replica_id: int,
        context: FetchContext,
        entries: list[tuple[PartitionKey, FetchPartitionRequest | ErrorCode]],
        pending: Mapping[PartitionKey, FetchPartitionRequest],
        answered: list[FetchPartitionResult | None],
        stamps: dict[int, Stamp | None],
    ) -> None:
        """The session learns which of the partitions just read and answered it need not
        read next time (`session_reads`); ``pending``: the requests of those left unread."""
        session = self._sessions.get(session_id)
        if session is None:
            return
        reads = session.reads
        if not isinstance(reads, SessionReads) or reads.replica_id != replica_id:
            if isinstance(reads, SessionReads):
                reads.close()
            # A follower's session is told of its partitions' changes (the fetch purgatory's
            # checks): its Fetches cost what changed. A consumer's checks every partition.
            feed = self._fetches.changes if replica_id >= 0 else None
            reads = session.reads = SessionReads(replica_id, feed)
        requests = {key: e for key, e in entries if isinstance(e, FetchPartitionRequest)}
        for (key, _), result in zip(context.partitions, answered, strict=True):
            request = requests.get(key) or pending.get(key)
            if result is None:
                continue  # unread and unchanged
            if request is None:
                reads.keep_reading(key)  # an error entry
                continue
            reads.read(key, request, stamps.get(id(request)), result)

    def _entries(
        self,
        ctx: RequestContext,
        session: FetchContext,
        by_id: bool,
        follower: bool,
        follower_allowed: bool,
        client_rack: str | None,
        unread: Mapping[PartitionKey, Unread],
    ) -> list[tuple[PartitionKey, FetchPartitionRequest | ErrorCode]]:
        """Per partition of the session, in order: the request to read, or the error it is
        answered with; the ``unread`` partitions still allowed are left out."""
        metadata = self._metadata
        names: dict[str, str | None] = {}
        allowed: dict[str, bool] = {}
        entries: list[tuple[PartitionKey, FetchPartitionRequest | ErrorCode]] = []
        for key, params in session.partitions:
            topic, index = key
            if topic not in names:
                if by_id:
                    state = metadata.topic_by_id(topic) if topic else None
                    names[topic] = state.name if state is not None else None
                else:
                    names[topic] = topic
            name = names[topic]
            if name is None:
                entries.append((key, ErrorCode.unknown_topic_id))
                continue
            if name not in allowed:
                allowed[name] = follower_allowed and (
                    follower
                    or self._authorizer.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name)
                )
            if not allowed[name]:
                entries.append((key, ErrorCode.topic_authorization_failed))
                continue
            if key in unread:
                continue
            entries.append(
                (
                    key,
                    FetchPartitionRequest(
                        TopicPartition(name, index),
                        params.fetch_offset,
                        params.max_bytes,
                        current_leader_epoch=params.current_leader_epoch,
                        last_fetched_epoch=params.last_fetched_epoch,
                        log_start_offset=params.log_start_offset,
                        client_rack=client_rack,
                    ),
                )
            )
        return entries

    def _throttle(self, ctx: RequestContext, results: list[FetchPartitionResult]) -> int:
        assert self._quotas is not None
        size = sum(_records_size(r.records) for r in results if r.records is not None)
        throttle_ms = self._quotas.fetched(ctx, size)
        if throttle_ms:
            self._quotas.unfetched(ctx, size)
        return throttle_ms

    def _response(
        self,
        ctx: RequestContext,
        mod: ModuleType,
        sent: list[tuple[PartitionKey, FetchPartitionResult]],
        session_id: int,
        by_id: bool,
    ) -> FetchResponseFrame:
        # One entry per topic, in the order of its first partition.
        by_topic: dict[str, list[Any]] = {}
        leaders: set[int] = set()
        for (topic, index), result in sent:
            if result.error == ErrorCode.not_leader_or_follower and result.leader_id >= 0:
                leaders.add(result.leader_id)
            by_topic.setdefault(topic, []).append(_partition_data(mod, index, result))
        topics = [
            build(
                mod.FetchableTopicResponse,
                partitions=tuple(partitions),
                **(
                    {"topic_id": topic_uuid(topic) if topic else None}
                    if by_id
                    else {"topic": topic}
                ),
            )
            for topic, partitions in by_topic.items()
        ]
        answer = response(
            ctx,
            error_code=ErrorCode.none,
            session_id=session_id,
            responses=tuple(topics),
            node_endpoints=node_endpoints(mod, self._metadata.brokers(), leaders),
        )
        return FetchResponseFrame(answer, [r.records for _, r in sent if r.records is not None])

    def error_response(
        self, ctx: RequestContext, request: FetchRequest, code: ErrorCode
    ) -> FetchResponse:
        """The whole request failed: Kafka answers the top-level error and no partitions."""
        return response(
            ctx,
            error_code=code,
            session_id=0,
            responses=(),
        )


class _LateReads:
    """A follower session's unread partitions as its fetch waits on them: the fetch reads
    those that change (`Fetches.fetch`'s ``session``), kept here by key."""

    def __init__(self, reads: SessionReads) -> None:
        self._reads = reads
        self.late: dict[PartitionKey, FetchPartitionRequest] = {}

    def __len__(self) -> int:
        return len(self._reads)

    def changed(self) -> list[FetchPartitionRequest]:
        pairs = self._reads.changed()
        self.late.update(pairs)
        return [r for _, r in pairs]

    def park(self, wake: Callable[[], object] | None) -> None:
        self._reads.park(wake)


def _close_reads(session: FetchSession) -> None:
    if isinstance(session.reads, SessionReads):
        session.reads.close()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _reads(context: FetchContext, replica_id: int) -> SessionReads | None:
    """An incremental request's session's record of its partitions answered without reading."""
    session = context.session
    if context.kind is not ContextKind.INCREMENTAL or session is None:
        return None
    reads = session.reads
    return reads if isinstance(reads, SessionReads) and reads.replica_id == replica_id else None


def _answered(
    context: FetchContext,
    entries: list[tuple[PartitionKey, FetchPartitionRequest | ErrorCode]],
    wanted: list[FetchPartitionRequest],
    results: list[FetchPartitionResult],
    pending: Mapping[PartitionKey, FetchPartitionRequest],
) -> list[FetchPartitionResult | None]:
    """Per partition of the context, in order: its result (an error entry's error), or None
    for one left unread (``results`` has the ``wanted`` ones', then those of the ``pending``
    partitions (left unread) that changed during the long poll)."""
    by_request = {id(r): res for r, res in zip(wanted, results, strict=False)}
    late = {res.tp: res for res in results[len(wanted) :]}
    entry_of = dict(entries)
    answered: list[FetchPartitionResult | None] = []
    for key, _ in context.partitions:
        e = entry_of.get(key)
        if e is None:
            answered.append(late.get(pending[key].tp))
        elif isinstance(e, FetchPartitionRequest):
            answered.append(by_request[id(e)])
        else:
            answered.append(FetchPartitionResult(TopicPartition("", key[1]), e))
    return answered


def _topic_key(topic: Any, by_id: bool) -> str:
    if by_id:
        return topic_id_text(topic.topic_id) if topic.topic_id is not None else ""
    return str(topic.topic)


def _requested(request: Any, by_id: bool) -> list[tuple[PartitionKey, FetchParams]]:
    return [
        (
            (_topic_key(topic, by_id), int(part.partition)),
            FetchParams(
                int(part.fetch_offset),
                max(0, int(part.partition_max_bytes)),
                current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                last_fetched_epoch=int(getattr(part, "last_fetched_epoch", -1)),
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
            ),
        )
        for topic in request.topics
        for part in topic.partitions
    ]


def _forgotten(request: Any, by_id: bool) -> list[PartitionKey]:
    return [
        (_topic_key(topic, by_id), int(index))
        for topic in getattr(request, "forgotten_topics_data", None) or ()
        for index in topic.partitions
    ]


def _outcome(r: FetchPartitionResult) -> PartitionOutcome:
    return PartitionOutcome(
        records_size=r.size,
        error=r.error,
        high_watermark=r.high_watermark,
        last_stable_offset=r.last_stable_offset,
        log_start_offset=r.log_start_offset,
        preferred_read_replica=r.preferred_read_replica,
        diverging=r.diverging_epoch is not None,
    )


def _records_size(records: Any) -> int:
    size = getattr(records, "size", None)
    return int(size) if size is not None else len(records)


def _partition_data(mod: ModuleType, index: int, r: FetchPartitionResult) -> Any:
    values: dict[str, Any] = {
        "partition_index": index,
        "error_code": r.error,
        "high_watermark": r.high_watermark,
        "last_stable_offset": r.last_stable_offset,
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": (
            None
            if r.aborted_transactions is None
            else tuple(
                mod.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                for t in r.aborted_transactions
            )
        ),
        "preferred_read_replica": r.preferred_read_replica,
        # Kafka sends empty records, not null, for a partition with nothing to return.
        "records": r.records if r.records is not None else b"",
    }
    if r.diverging_epoch is not None and hasattr(mod, "EpochEndOffset"):
        epoch, end = r.diverging_epoch
        values["diverging_epoch"] = mod.EpochEndOffset(epoch=epoch, end_offset=end)
    if (
        r.error in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)
        and r.leader_id >= 0
        and hasattr(mod, "LeaderIdAndEpoch")
    ):
        values["current_leader"] = mod.LeaderIdAndEpoch(
            leader_id=r.leader_id, leader_epoch=r.leader_epoch
        )
    return build(mod.PartitionData, **values)


def register(
    registry: HandlerRegistry,
    config: BrokerConfig,
    metadata: MetadataStore,
    fetches: Fetches,
    authorizer: RequestAuthorizer,
    quotas: ClientQuotas | None = None,
) -> FetchApi:
    api = FetchApi(config, metadata, fetches, authorizer, quotas)
    registry.register(
        ApiKey.FETCH, MIN_VERSION, MAX_VERSION, api.handle,
        rule=per_entry(
            "a consumer: READ on each topic; a follower (replica id >= 0): CLUSTER_ACTION on the "
            "cluster (TOPIC_AUTHORIZATION_FAILED for the partitions refused)"
        ),
        error_response=api.error_response,
    )  # fmt: skip
    return api
