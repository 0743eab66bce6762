"""One transactional id's state and its transitions (Kafka's TransactionMetadata), pure.

Every change goes in two steps, as in Kafka: ``prepare_*`` checks the request against the state,
raises ``TxnError`` with the Kafka error to answer, and returns the target ``TxnLogValue``
(the record to write) while marking the id busy (``pending``); once the record is in
``__transaction_state`` the coordinator calls ``complete(target)`` (or ``abandon()`` if the
write failed). A request arriving while a change is pending gets CONCURRENT_TRANSACTIONS.

Transitions (target: allowed current states), Kafka's:
EMPTY: EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT; ONGOING: ONGOING, EMPTY, COMPLETE_*;
PREPARE_COMMIT: ONGOING; PREPARE_ABORT: ONGOING, PREPARE_EPOCH_FENCE;
COMPLETE_COMMIT: PREPARE_COMMIT; COMPLETE_ABORT: PREPARE_ABORT; DEAD: EMPTY, COMPLETE_*;
PREPARE_EPOCH_FENCE: ONGOING.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from logkeel.server.txn.records import TxnLogValue, TxnStatus

__all__ = ["MAX_EPOCH", "TxnError", "TxnMetadata", "VALID_PREVIOUS"]

# Kafka bumps to a new producer id rather than reach Short.MAX_VALUE.
MAX_EPOCH = 32767 - 1

S = TxnStatus
VALID_PREVIOUS: dict[TxnStatus, frozenset[TxnStatus]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
_COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class TxnError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        super().__init__(message or code.name.upper())


class TxnMetadata:
    """The coordinator's view of one transactional id."""

    def __init__(self, transactional_id: str, value: TxnLogValue) -> None:
        self.transactional_id = transactional_id
        self.value = value
        self.pending: TxnStatus | None = None

    @classmethod
    def new(
        cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
    ) -> TxnMetadata:
        """A fresh id; its first InitProducerId takes the epoch to 0."""
        return cls(
            transactional_id,
            TxnLogValue(producer_id, -1, timeout_ms, S.EMPTY, {}, now_ms, -1),
        )

    # -- inspection ------------------------------------------------------------------------

    @property
    def state(self) -> TxnStatus:
        return self.value.status

    @property
    def producer_id(self) -> int:
        return self.value.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.value.producer_epoch

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, ps in sorted(self.value.partitions.items()) for p in ps]

    def expired(self, now_ms: int) -> bool:
        """An open transaction past its timeout (the coordinator aborts it)."""
        v = self.value
        return (
            self.pending is None
            and v.status == S.ONGOING
            and v.start_ms >= 0
            and now_ms > v.start_ms + v.timeout_ms
        )

    def idle(self, now_ms: int, expiration_ms: int) -> bool:
        """No transaction open and no change for ``transactional.id.expiration.ms``."""
        return (
            self.pending is None
            and self.value.status in _COMPLETED
            and now_ms > self.value.last_update_ms + expiration_ms
        )

    # -- checks ----------------------------------------------------------------------------

    def check_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A request of an established producer: INVALID_PRODUCER_ID_MAPPING for another id,
        PRODUCER_FENCED for another epoch (an older incarnation), CONCURRENT_TRANSACTIONS
        while a change is being written."""
        if producer_id != self.value.producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        if producer_epoch != self.value.producer_epoch:
            raise TxnError(
                ErrorCode.producer_fenced,
                f"epoch {producer_epoch} of {self.transactional_id!r} is not the current "
                f"{self.value.producer_epoch}",
            )
        if self.pending is not None:
            raise TxnError(ErrorCode.concurrent_transactions)

    # -- transitions -----------------------------------------------------------------------

    def _target(self, status: TxnStatus, now_ms: int, **changes: object) -> TxnLogValue:
        if self.pending is not None:
            raise TxnError(ErrorCode.concurrent_transactions)
        if self.value.status not in VALID_PREVIOUS[status]:
            raise TxnError(
                ErrorCode.invalid_txn_state,
                f"{self.transactional_id!r}: {self.value.status.name} -> {status.name} "
                "is not a valid transition",
            )
        v = self.value
        fields = {
            "producer_id": v.producer_id,
            "producer_epoch": v.producer_epoch,
            "timeout_ms": v.timeout_ms,
            "status": status,
            "partitions": v.partitions,
            "last_update_ms": now_ms,
            "start_ms": v.start_ms,
        }
        fields.update(changes)
        target = TxnLogValue(**fields)  # type: ignore[arg-type]
        self.pending = status
        return target

    def prepare_init(
        self, new_producer_id: int | None, timeout_ms: int, now_ms: int
    ) -> TxnLogValue:
        """InitProducerId on a completed state: the next epoch (or a new producer id, epoch 0,
        given as ``new_producer_id`` when the epoch is exhausted)."""
        if new_producer_id is not None:
            pid, epoch = new_producer_id, 0
        else:
            pid, epoch = self.value.producer_id, self.value.producer_epoch + 1
        return self._target(
            S.EMPTY,
            now_ms,
            producer_id=pid,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            partitions={},
            start_ms=-1,
        )

    def needs_new_producer_id(self) -> bool:
        return self.value.producer_epoch >= MAX_EPOCH

    def prepare_fence(self, now_ms: int) -> TxnLogValue:
        """The transaction of an older incarnation (or a timed-out one) is to be aborted: the
        epoch is bumped so that its producer is fenced, then PREPARE_ABORT follows."""
        return self._target(
            S.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=self.value.producer_epoch + 1
        )

    def prepare_add_partitions(
        self, partitions: Iterable[tuple[str, int]], now_ms: int
    ) -> TxnLogValue | None:
        """AddPartitionsToTxn/AddOffsetsToTxn; None if every partition is already in."""
        v = self.value
        if v.status in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise TxnError(ErrorCode.concurrent_transactions)
        merged = {t: set(ps) for t, ps in v.partitions.items()}
        for topic, partition in partitions:
            merged.setdefault(topic, set()).add(partition)
        new = {t: tuple(sorted(ps)) for t, ps in merged.items()}
        if v.status == S.ONGOING and new == dict(v.partitions):
            return None
        start = v.start_ms if v.status == S.ONGOING else now_ms
        return self._target(S.ONGOING, now_ms, partitions=new, start_ms=start)

    def prepare_end(self, commit: bool, now_ms: int) -> TxnLogValue | None:
        """EndTxn: PREPARE_COMMIT or PREPARE_ABORT; None for a retry of a completed end."""
        status = self.value.status
        wanted_complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        wanted_prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if status == wanted_complete:
            return None
        if status == wanted_prepare:
            raise TxnError(ErrorCode.concurrent_transactions)
        if status != S.ONGOING and not (status == S.PREPARE_EPOCH_FENCE and not commit):
            raise TxnError(
                ErrorCode.invalid_txn_state,
                f"{self.transactional_id!r}: cannot {'commit' if commit else 'abort'} in "
                f"state {status.name}",
            )
        return self._target(wanted_prepare, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnLogValue:
        """After the markers: COMPLETE_COMMIT or COMPLETE_ABORT, the partitions cleared."""
        status = self.value.status
        if status == S.PREPARE_COMMIT:
            target = S.COMPLETE_COMMIT
        elif status == S.PREPARE_ABORT:
            target = S.COMPLETE_ABORT
        else:
            raise TxnError(ErrorCode.invalid_txn_state, f"no transaction ending in {status.name}")
        return self._target(target, now_ms, partitions={})

    def prepare_dead(self, now_ms: int) -> TxnLogValue:
        """The id expires: its record is removed (a tombstone) once this is durable."""
        return self._target(S.DEAD, now_ms)

    def complete(self, target: TxnLogValue) -> None:
        """The target of the pending change is durable: it becomes the state."""
        self.value = target
        self.pending = None

    def abandon(self) -> None:
        """The pending change could not be written: the state stays as it was."""
        self.pending = None

    @property
    def is_completed(self) -> bool:
        return self.value.status in _COMPLETED
