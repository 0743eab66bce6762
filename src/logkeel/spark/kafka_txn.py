"""Ending the sink's task transactions from the Spark driver, once Spark commits the write.

A task of the transactional sink produces everything in one Kafka transaction and leaves it
open; librdkafka keeps it open when the producer is destroyed, and the task reports the
transaction's producer id and epoch (from DescribeTransactions) in its commit message. Only the
driver knows whether the task's output is the one Spark keeps: a task whose input failed
upstream sees its input end as if it were complete, so the task cannot decide alone. The
driver then sends EndTxn for each task (commit when the job or micro-batch commits, abort when
it aborts), as the producer itself would have; a transaction that the coordinator aborted in
the meantime (timed out, or fenced by a later attempt) cannot be committed and fails the write.

Requests go over PLAINTEXT through the broker's own client (``BrokerClient``); the confluent
client has no call for EndTxn on another producer's behalf.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.network.client import BrokerClient, BrokerConnectionError
from logkeel.server.protocol import ApiKey, InvalidRequest, request_schema

__all__ = [
    "TaskTransaction",
    "TransactionNotCommitted",
    "check_still_ours",
    "describe",
    "end",
]

REQUEST_TIMEOUT_MS = 30_000
RETRY_FOR_S = 60.0
_RETRY_PAUSE_S = 0.2
_COORDINATOR_TRANSACTION = 1  # FindCoordinator key type
# Answers that mean "ask again (maybe elsewhere) in a moment".
_RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.concurrent_transactions,
    }
)


class TransactionNotCommitted(RuntimeError):
    """A task's transaction could not be committed: its records are not visible to
    read_committed consumers (aborted, or about to be)."""


@dataclass(frozen=True, slots=True)
class TaskTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int


def _request(api_key: ApiKey, version: int, **fields: Any) -> Any:
    schema = request_schema(api_key, version)
    assert schema is not None, (api_key, version)
    return schema(**fields)


class _Coordinators:
    """Finds and talks to the transaction coordinator of each id (one connection per broker)."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = [_host_port(s) for s in bootstrap.split(",") if s.strip()]
        self._clients: dict[tuple[str, int], BrokerClient] = {}

    def _client(self, where: tuple[str, int]) -> BrokerClient:
        client = self._clients.get(where)
        if client is None:
            client = self._clients[where] = BrokerClient(
                where[0],
                where[1],
                client_id="logkeel-spark-sink",
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                max_response_bytes=16 * 1024 * 1024,
            )
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()

    async def _find(self, transactional_id: str) -> tuple[str, int]:
        request = _request(
            ApiKey.FIND_COORDINATOR, 3, key=transactional_id, key_type=_COORDINATOR_TRANSACTION
        )
        last: Exception | None = None
        for where in self._bootstrap:
            try:
                r = await self._client(where).send(request)
            except BrokerConnectionError as exc:
                last = exc
                continue
            if r.error_code != ErrorCode.none:
                raise _Retry(ErrorCode(r.error_code))
            return r.host, r.port
        raise last or BrokerConnectionError("no bootstrap server")

    async def call(self, transactional_id: str, request: Any) -> Any:
        """Sends ``request`` to the id's coordinator; retries while the coordinator moves,
        loads or finishes the id's previous transaction. Returns the response."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                where = await self._find(transactional_id)
                response = await self._client(where).send(request)
                code = _error_of(response)
                if code in _RETRIABLE:
                    raise _Retry(code)
                return response
            except (_Retry, BrokerConnectionError) as exc:
                if isinstance(exc.__cause__, InvalidRequest):
                    # kio cannot decode every answer: DescribeTransactions of an id with no
                    # transaction carries a start time of -1, which it refuses.
                    raise TransactionNotCommitted(
                        f"transactional id {transactional_id!r}: undecodable answer ({exc})"
                    ) from exc
                if time.monotonic() > deadline:
                    raise TransactionNotCommitted(
                        f"transactional id {transactional_id!r}: no answer within {RETRY_FOR_S} s "
                        f"({exc})"
                    ) from exc
                await asyncio.sleep(_RETRY_PAUSE_S)


class _Retry(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)


def _error_of(response: Any) -> ErrorCode:
    states = getattr(response, "transaction_states", None)
    if states is not None:
        return ErrorCode(states[0].error_code)
    return ErrorCode(response.error_code)


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def describe(bootstrap: str, transactional_id: str) -> tuple[TaskTransaction, str]:
    """The id's producer id and epoch now, and its state (``Ongoing``, ``Empty``, ...)."""

    async def run() -> tuple[TaskTransaction, str]:
        coordinators = _Coordinators(bootstrap)
        try:
            r = await coordinators.call(
                transactional_id,
                _request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(transactional_id,)),
            )
        finally:
            await coordinators.close()
        state = r.transaction_states[0]
        if state.error_code != ErrorCode.none:
            raise TransactionNotCommitted(
                f"transactional id {transactional_id!r}: {ErrorCode(state.error_code).name}"
            )
        txn = TaskTransaction(transactional_id, state.producer_id, state.producer_epoch)
        return txn, state.transaction_state

    return asyncio.run(run())


def check_still_ours(bootstrap: str, mine: TaskTransaction) -> None:
    """Raises unless ``mine`` (described once the task's first record was acknowledged) still
    has the id's transaction open: another attempt of the task would have bumped the epoch."""
    now, state = describe(bootstrap, mine.transactional_id)
    if now != mine or state != "Ongoing":
        raise TransactionNotCommitted(
            f"transactional id {mine.transactional_id!r} is {state} at epoch {now.producer_epoch}"
            f" (this task had epoch {mine.producer_epoch}): another attempt of the task fenced "
            "it, or the transaction timed out"
        )


def end(bootstrap: str, transactions: Iterable[TaskTransaction], commit: bool) -> None:
    """EndTxn for each task's transaction. Every one is tried; a commit that fails for any of
    them raises TransactionNotCommitted naming them all (the others stay committed)."""

    async def run() -> list[str]:
        coordinators = _Coordinators(bootstrap)
        failed = []
        try:
            for t in transactions:
                request = _request(
                    ApiKey.END_TXN,
                    3,
                    transactional_id=t.transactional_id,
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    committed=commit,
                )
                try:
                    code = _error_of(await coordinators.call(t.transactional_id, request))
                except TransactionNotCommitted as exc:
                    failed.append(str(exc))
                    continue
                if code != ErrorCode.none:
                    failed.append(f"{t.transactional_id!r}: {code.name}")
        finally:
            await coordinators.close()
        return failed

    failed = asyncio.run(run())
    if failed and commit:
        raise TransactionNotCommitted(
            "the transactions of these tasks could not be committed (aborted by the coordinator "
            "after transaction.timeout.ms, or fenced by another attempt of the task): "
            + "; ".join(failed)
        )
