"""Per-partition state of idempotent and transactional producers (Kafka's ProducerStateManager).

For each producer id the partition remembers its epoch, the metadata of its last five batches
(enough to recognise a retried batch and answer with its original offsets), the coordinator
epoch of its last transaction marker, and the first offset of its open transaction. Open and
completed-but-unreplicated transactions give the first unstable offset, from which the log
derives the last stable offset that read_committed consumers may read up to.

How the log drives it, per appended batch (the caller holds the log's lock):

1. ``prepare_append(header)`` (or ``prepare_appends`` for several batches of one request) before
   writing: returns a ``DuplicateBatch`` for a retry, raises for a fenced or out-of-order
   producer, else None and nothing has changed yet.
2. ``update(header, first_offset, last_offset)`` after the batch is in the log (every batch, with
   or without a producer id: it also advances ``map_end_offset``). Followers and recovery call
   ``load_batch(header)`` instead, which never raises a validation error.
3. If that returned a ``CompletedTxn``: ``last_stable_offset(txn)`` for the transaction index,
   then ``complete_txn(txn)``.

State is persisted only in ``<offset>.snapshot`` files (see producer_snapshot); on start-up it is
rebuilt from the newest good snapshot plus the log after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from logkeel.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
)
from logkeel.records.control import ControlRecordType
from logkeel.storage.engine.producer_entry import (
    Buffer,
    CompletedTxn,
    DuplicateBatch,
    EndTxnMarker,
    ProducerStateEntry,
    SnapshotLoadResult,
    StagedProducer,
    TxnMetadata,
    TxnsByOffset,
    in_sequence,
    read_end_txn_marker,
)
from logkeel.storage.engine.producer_snapshot import (
    PendingSnapshot,
    encode_snapshot,
    list_snapshot_files,
    read_snapshot,
    snapshot_listing,
    snapshot_path,
)
from logkeel.storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    StorageError,
    io_guard,
)

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer with an open transaction (INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(StorageError):
    """A marker from an older transaction coordinator (TRANSACTION_COORDINATOR_FENCED)."""


# -- the manager -----------------------------------------------------------------------------


class ProducerStateManager:
    """Producer ids, sequences, transactions and snapshots of one partition dir.

    Not thread-safe: like Kafka's, it relies on the log's lock. IO errors surface as
    KafkaStorageError naming ``log_dir`` (by default the partition dir's parent).
    """

    def __init__(
        self,
        partition_dir: str | Path,
        max_producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        log_dir: str | Path | None = None,
        snapshot_names: Iterable[str] | None = None,
    ):
        """``snapshot_names``: the dir's file names when the caller has just listed it (the
        loader does), so that start-up lists each partition dir once."""
        self.partition_dir = Path(partition_dir)
        self.log_dir = Path(log_dir) if log_dir is not None else self.partition_dir.parent
        self.max_producer_id_expiration_ms = max_producer_id_expiration_ms
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing = TxnsByOffset()
        # Completed, but the marker may be above the high watermark: still unstable.
        self._unreplicated = TxnsByOffset()
        self._snapshots: dict[int, Path] = {}
        self.malformed_snapshot_files: list[Path] = []
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._scan_snapshots(snapshot_names)

    # -- inspection ------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The state covers every batch below this offset."""
        return self._last_map_offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def is_empty(self) -> bool:
        return not self._producers and not len(self._unreplicated)

    # -- appends ---------------------------------------------------------------------------

    def prepare_append(
        self, header: BatchHeader, origin_is_client: bool = True, *, batch: Buffer | None = None
    ) -> DuplicateBatch | None:
        """Validates one batch before the log writes it; changes nothing.

        ``origin_is_client``: a produce request, checked fully. False: the broker's own writes
        (transaction markers, group coordinator), whose epochs are checked but not sequences.
        A control batch needs its bytes in ``batch`` to read the marker.
        """
        return self.prepare_appends([(header, batch)], origin_is_client)

    def prepare_appends(
        self, batches: Iterable[tuple[BatchHeader, Buffer | None]], origin_is_client: bool = True
    ) -> DuplicateBatch | None:
        """``prepare_append`` for the batches of one request, each checked against the state the
        earlier ones would leave. Raises at the first invalid batch; returns the duplicate if any
        batch is a retry (the whole append then is one, as in Kafka)."""
        staged: dict[int, StagedProducer] = {}
        for header, data in batches:
            if not header.has_producer_id:
                continue
            pid = header.producer_id
            current = self._producers.get(pid) or ProducerStateEntry(pid)
            if origin_is_client and not header.is_control:
                dup = current.find_duplicate(
                    header.producer_epoch, header.base_sequence, header.last_sequence
                )
                if dup is not None:
                    return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp)
            stage = staged.get(pid)
            if stage is None:
                stage = staged[pid] = StagedProducer(
                    current.producer_epoch,
                    None,
                    current.current_txn_first_offset is not None,
                    current.coordinator_epoch,
                )
            if header.is_control:
                if data is None:
                    raise ValueError("a control batch needs its bytes to read the marker")
                self._validate_marker(header, read_end_txn_marker(header, data), stage)
            else:
                self._validate_data(header, current, stage, origin_is_client)
        return None

    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        *,
        batch: Buffer | None = None,
    ) -> CompletedTxn | None:
        """Records a batch the log has written at [first_offset, last_offset]; never validates.

        Call it for every batch, so ``map_end_offset`` follows the log. A control batch needs
        its bytes. Returns the transaction a marker completed (the caller then computes
        ``last_stable_offset`` and calls ``complete_txn``).
        """
        if last_offset - first_offset != header.last_offset_delta:
            raise ValueError(
                f"offsets [{first_offset}, {last_offset}] do not span the batch's "
                f"{header.last_offset_delta + 1} offsets"
            )
        completed = None
        if header.has_producer_id:
            if header.is_control:
                if batch is None:
                    raise ValueError("a control batch needs its bytes to read the marker")
                marker = read_end_txn_marker(header, batch)
                if marker is not None:
                    completed = self._apply_marker(header, first_offset, marker)
            else:
                self._apply_data(header, first_offset, last_offset)
        self._last_map_offset = last_offset + 1
        return completed

    def load_batch(
        self, header: BatchHeader, *, batch: Buffer | None = None
    ) -> CompletedTxn | None:
        """``update`` with the offsets already in the batch: replication and recovery."""
        return self.update(header, header.base_offset, header.last_offset, batch=batch)

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    def _validate_data(
        self, header: BatchHeader, current: ProducerStateEntry, stage: StagedProducer, client: bool
    ) -> None:
        pid, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
        where = f"producer {pid} at offset {header.base_offset} in {self.partition_dir.name}"
        self._check_epoch(epoch, stage, where)
        if client:
            if epoch != stage.epoch:
                if first_seq != 0 and stage.epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"{where}: new epoch {epoch} (was {stage.epoch}) must start at "
                        f"sequence 0, got {first_seq}"
                    )
            else:
                if stage.last_seq is not None:
                    last_seq = stage.last_seq
                elif epoch == current.producer_epoch:
                    last_seq = current.last_seq
                else:
                    last_seq = NO_SEQUENCE
                # With no known epoch (state gone with retention or DeleteRecords) Kafka accepts
                # any sequence rather than answering UNKNOWN_PRODUCER_ID.
                if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(
                    last_seq, first_seq
                ):
                    raise OutOfOrderSequenceError(
                        f"{where}: sequence {first_seq} does not follow {last_seq}"
                    )
        if epoch != stage.epoch:
            stage.epoch = epoch
            stage.last_seq = None
        stage.last_seq = header.last_sequence
        if stage.txn_open and not header.is_transactional:
            raise InvalidTxnStateError(f"{where}: non-transactional batch inside a transaction")
        if header.is_transactional:
            stage.txn_open = True

    def _validate_marker(
        self, header: BatchHeader, marker: EndTxnMarker | None, stage: StagedProducer
    ) -> None:
        if marker is None:
            return
        where = f"producer {header.producer_id} at offset {header.base_offset} in {self.partition_dir.name}"
        self._check_epoch(header.producer_epoch, stage, where)
        if stage.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{where}: coordinator epoch {marker.coordinator_epoch} is older than "
                f"{stage.coordinator_epoch}"
            )
        if header.producer_epoch != stage.epoch:
            stage.epoch = header.producer_epoch
            stage.last_seq = None
        stage.coordinator_epoch = marker.coordinator_epoch
        stage.txn_open = False

    @staticmethod
    def _check_epoch(epoch: int, stage: StagedProducer, where: str) -> None:
        if epoch < stage.epoch:
            raise InvalidProducerEpochError(
                f"{where}: epoch {epoch} is older than the last seen epoch {stage.epoch}"
            )

    def _entry(self, pid: int) -> ProducerStateEntry:
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        return entry

    def _apply_data(self, header: BatchHeader, first_offset: int, last_offset: int) -> None:
        entry = self._entry(header.producer_id)
        if header.producer_epoch < entry.producer_epoch:
            log.warning(
                "%s: producer %d wrote epoch %d at offset %d after epoch %d",
                self.partition_dir.name,
                header.producer_id,
                header.producer_epoch,
                first_offset,
                entry.producer_epoch,
            )
        entry.add_batch(
            header.producer_epoch,
            header.last_sequence,
            last_offset,
            last_offset - first_offset,
            header.max_timestamp,
        )
        if entry.current_txn_first_offset is None:
            if header.is_transactional:
                entry.current_txn_first_offset = first_offset
                self._ongoing.put(TxnMetadata(header.producer_id, first_offset))
        elif not header.is_transactional:
            log.warning(
                "%s: non-transactional batch at %d from producer %d inside its transaction",
                self.partition_dir.name,
                first_offset,
                header.producer_id,
            )

    def _apply_marker(
        self, header: BatchHeader, offset: int, marker: EndTxnMarker
    ) -> CompletedTxn | None:
        entry = self._entry(header.producer_id)
        completed = None
        # A marker without data before it leaves nothing to complete or to index.
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(
                header.producer_id,
                entry.current_txn_first_offset,
                offset,
                marker.control_type == ControlRecordType.ABORT,
            )
        entry.end_txn(header.producer_epoch, marker.coordinator_epoch, marker.timestamp)
        return completed

    # -- transactions ----------------------------------------------------------------------

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the next other open transaction's first offset,
        else just past the marker. Call before ``complete_txn``."""
        for txn in self._ongoing:
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing.pop(completed.first_offset)
        if txn is None:
            raise ValueError(f"transaction {completed} was never started in {self.partition_dir}")
        txn.last_offset = completed.last_offset
        self._unreplicated.put(txn)

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction."""
        txn = self._ongoing.first()
        return txn.first_offset if txn else None

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction that is open or whose marker is above the
        high watermark; None when every transaction is decided and replicated."""
        ongoing, unreplicated = self._ongoing.first(), self._unreplicated.first()
        if ongoing is None and unreplicated is None:
            return None  # read twice by every fetch of every partition: no list built
        offsets = [t.first_offset for t in (ongoing, unreplicated) if t]
        return min(offsets) if offsets else None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated_below(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_below(log_start_offset)
        if self._last_map_offset < log_start_offset:
            self._last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def _remove_unreplicated_below(self, offset: int) -> None:
        for txn in list(self._unreplicated):
            if txn.last_offset is not None and txn.last_offset < offset:
                self._unreplicated.pop(txn.first_offset)

    def has_late_transaction(self, now_ms: int) -> bool:
        """Whether the oldest open transaction has been silent for longer than any transaction
        may last (a hanging transaction that holds back the LSO)."""
        txn = self._ongoing.first()
        if txn is None:
            return False
        entry = self._producers.get(txn.producer_id)
        last = entry.last_timestamp if entry else -1
        return (
            last > 0
            and now_ms - last > self.max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS
        )

    # -- expiration ------------------------------------------------------------------------

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        # An open transaction keeps its producer: forgetting it would lose the LSO's anchor.
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.max_producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forgets producers idle for ``max_producer_id_expiration_ms``; returns their ids."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now)]
        for pid in expired:
            del self._producers[pid]
        return expired

    # -- snapshots -------------------------------------------------------------------------

    def _scan_snapshots(self, names: Iterable[str] | None) -> None:
        if names is not None:
            listing = snapshot_listing(self.partition_dir, names)
        else:
            # A ``.tmp`` here is not removed: it may be the live manager's snapshot being
            # written while a scratch manager (replay) reads the dir; the loader removes the
            # ones a crash left, at start-up, before anything writes.
            with io_guard(self.log_dir, f"listing producer snapshots in {self.partition_dir}"):
                listing = list_snapshot_files(self.partition_dir)
        self._snapshots = {f.offset: f.path for f in listing.files}
        self.malformed_snapshot_files = listing.malformed
        for path in listing.malformed:
            log.warning("ignoring producer snapshot with a malformed name: %s", path)

    @property
    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots) if self._snapshots else None

    def snapshot_file(self, offset: int) -> Path | None:
        return self._snapshots.get(offset)

    def take_snapshot(self, offset: int | None = None) -> Path | None:
        """Writes the state as ``<offset>.snapshot``; None if no batch arrived since the last one.

        ``offset`` (default ``map_end_offset``) may be above ``map_end_offset`` when the batches
        in between carry no producer state, e.g. at a segment roll; it becomes the new one.
        """
        if offset is not None:
            if offset < self._last_map_offset:
                raise ValueError(
                    f"cannot snapshot at {offset}: state already covers up to {self._last_map_offset}"
                )
            self._last_map_offset = offset
        pending = self.prepare_snapshot()
        if pending is None:
            return None
        pending.write()
        self.add_snapshot(pending)
        return pending.path

    def prepare_snapshot(self) -> PendingSnapshot | None:
        """The state at ``map_end_offset``, encoded, for ``PendingSnapshot.write`` (which may
        run without the log's lock: it fsyncs) and then ``add_snapshot``; None if no batch
        arrived since the last snapshot."""
        offset = self._last_map_offset
        if offset <= self._last_snap_offset:
            return None
        entries = [self._producers[pid].to_snapshot_entry() for pid in sorted(self._producers)]
        return PendingSnapshot(
            snapshot_path(self.partition_dir, offset), offset, encode_snapshot(entries),
            len(entries), self.log_dir,
        )  # fmt: skip

    def add_snapshot(self, pending: PendingSnapshot) -> None:
        """Registers a written snapshot as the newest (``take_snapshot``'s last step)."""
        self._snapshots[pending.offset] = pending.path
        self._last_snap_offset = max(self._last_snap_offset, pending.offset)

    def load_latest_snapshot(
        self, log_start_offset: int = 0, now_ms: int | None = None
    ) -> SnapshotLoadResult:
        """Replaces the in-memory state with the newest readable snapshot.

        Corrupt snapshots are deleted and the next older one is tried. With none left the state
        starts empty at ``log_start_offset``. ``now_ms`` drops producers that expired meanwhile.
        """
        self._clear_state()
        discarded: list[Path] = []
        while self._snapshots:
            offset = max(self._snapshots)
            path = self._snapshots[offset]
            try:
                with io_guard(self.log_dir, f"reading producer snapshot {path}"):
                    entries = read_snapshot(path)
            except CorruptSnapshotError as exc:
                log.warning("discarding corrupt producer snapshot: %s", exc)
                self._delete_snapshot(offset)
                discarded.append(path)
                continue
            for snap in entries:
                entry = ProducerStateEntry.from_snapshot_entry(snap)
                if now_ms is not None and self._is_expired(entry, now_ms):
                    continue
                self._load_entry(entry)
            self._last_snap_offset = self._last_map_offset = offset
            return SnapshotLoadResult(offset, discarded, len(self._producers))
        self._last_snap_offset = self._last_map_offset = log_start_offset
        return SnapshotLoadResult(None, discarded, 0)

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        """Adds a producer as read from a snapshot (for loaders and tests)."""
        self._load_entry(entry)

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing.put(TxnMetadata(entry.producer_id, entry.current_txn_first_offset))

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None
    ) -> SnapshotLoadResult | None:
        """Fits the state to a log now spanning [log_start_offset, log_end_offset).

        Snapshots above the log end, or at or below the log start, are deleted (as in Kafka).
        If the state no longer ends at the log end it is reloaded from the newest remaining
        snapshot; the caller then replays the log from ``map_end_offset``. Returns the load
        result, or None when no reload was needed. Assumes log end <= high watermark.
        """
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            return self.load_latest_snapshot(log_start_offset, now_ms)
        self.on_log_start_offset_incremented(log_start_offset)
        return None

    def assume_empty_snapshot(self, log_start_offset: int, log_end_offset: int) -> None:
        """As ``truncate_and_reload`` when the newest snapshot is known, without reading it, to
        hold no producer at the log end (a clean start whose manifest vouches for the file)."""
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        self._clear_state()
        at = log_end_offset if log_end_offset in self._snapshots else log_start_offset
        self._last_snap_offset = at
        self._last_map_offset = log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forgets everything, snapshots included (the log was emptied and restarts at offset)."""
        self._clear_state()
        for snap_offset in list(self._snapshots):
            self._delete_snapshot(snap_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def delete_snapshots_below(self, offset: int) -> list[int]:
        """Deletes snapshots with offsets below ``offset`` (exclusive); returns their offsets."""
        doomed = sorted(o for o in self._snapshots if o < offset)
        for snap_offset in doomed:
            self._delete_snapshot(snap_offset)
        return doomed

    def remove_stray_snapshots(self, segment_base_offsets: Collection[int]) -> list[int]:
        """Deletes snapshots at offsets where no segment starts, except the newest such one if it
        lies above every segment base (the one written at clean shutdown). Returns the deleted."""
        bases = set(segment_base_offsets)
        strays = sorted(o for o in self._snapshots if o not in bases)
        keep = strays[-1] if strays and (not bases or strays[-1] >= max(bases)) else None
        doomed = [o for o in strays if o != keep]
        for snap_offset in doomed:
            self._delete_snapshot(snap_offset)
        return doomed

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            with io_guard(self.log_dir, f"deleting producer snapshot {path}"):
                path.unlink(missing_ok=True)

    def _clear_state(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
