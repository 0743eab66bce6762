"""InitProducerId (API key 22), versions 0-5: producer ids for idempotent producers.

Each idempotent producer gets a fresh producer id with epoch 0; the log's producer state then
drops its retried batches (duplicates answer with their original offsets). Ids must never be
handed out twice, even across a crash, or a new producer's first batches could be mistaken
for an old producer's retries and dropped. So ids are reserved in blocks
(``ProducerIdManager.BLOCK_SIZE``): the end of the current block is written durably
(``atomic_write``) to a small file in every online log dir before any id of the block is
given out; at start-up the largest reservation found, and every producer id already in the
logs, bound the next block from below.

A request with a transactional id goes to the transaction coordinator, which keeps one
producer id per transactional id and bumps its epoch at each initialisation (fencing older
incarnations); it takes new ids from the same manager.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.api.messages import InitProducerIdRequest, InitProducerIdResponse
from logkeel.server.api.responses import duration_ms, response
from logkeel.server.api.transactions import visible_code
from logkeel.server.authorization import IDEMPOTENT_WRITE, WRITE_TXN, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.coordinator import TransactionCoordinator
from logkeel.server.txn.state import TxnError
from logkeel.storage.errors import KafkaStorageError, io_guard
from logkeel.storage.fileio import atomic_write
from logkeel.storage.log_manager import LogManager

__all__ = ["PRODUCER_ID_FILE", "InitProducerIdApi", "ProducerIdManager", "register"]

log = logging.getLogger(__name__)

PRODUCER_ID_FILE = "logkeel-producer-id-block.json"
_INT64_MAX = (1 << 63) - 1


class ProducerIdManager:
    """Hands out producer ids from durably reserved blocks (blocking; call from a thread)."""

    BLOCK_SIZE = 1000

    def __init__(
        self,
        log_manager: LogManager,
        reserve_in_cluster: Callable[[int], tuple[int, int] | None] = lambda _size: None,
    ) -> None:
        self._log_manager = log_manager
        # In a cluster the blocks come from the metadata store (ZooKeeper), shared by every
        # broker; alone, from the files in the log dirs.
        self._reserve_in_cluster = reserve_in_cluster
        self._next = 0
        self._block_end = 0  # exclusive; _next == _block_end: a new block is needed
        self._loaded = False

    def _dirs(self) -> list[Path]:
        return [Path(d.path) for d in self._log_manager.online_dirs]

    def _load(self) -> None:
        floor = 0
        for d in [Path(d.path) for d in self._log_manager.dirs]:
            try:
                doc = json.loads((d / PRODUCER_ID_FILE).read_text())
                floor = max(floor, int(doc["next_block_start"]))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable producer id block file in %s: %s", d, exc)
        # If the reservation file was lost (a wiped dir), ids already in the logs still bound
        # the next block: reusing one could turn a new producer's batches into "duplicates".
        for plog in list(self._log_manager.logs.values()):
            with plog.lock:
                pids = list(plog.producer_state.active_producers)
            if pids:
                floor = max(floor, max(pids) + 1)
        self._next = self._block_end = floor
        self._loaded = True

    def _reserve_block(self) -> None:
        while (block := self._reserve_in_cluster(self.BLOCK_SIZE)) is not None:
            start, end = block
            if start >= self._block_end:  # never below an id already in the logs here
                self._next, self._block_end = start, end
                log.info("reserved producer ids [%d, %d) in the cluster", start, end)
                return
        start = self._block_end
        end = min(start + self.BLOCK_SIZE, _INT64_MAX)
        if start >= end:
            raise RuntimeError("producer ids are exhausted")
        data = json.dumps({"version": 1, "next_block_start": end}).encode()
        written = 0
        for d in self._dirs():
            try:
                with io_guard(d, "reserving a producer id block"):
                    atomic_write(d / PRODUCER_ID_FILE, data)
                written += 1
            except KafkaStorageError as exc:
                log.error("could not write the producer id block to %s: %s", d, exc)
                self._log_manager.handle_dir_failure(exc)
        if not written:
            raise KafkaStorageError(
                ",".join(str(d.path) for d in self._log_manager.dirs),
                "no log dir could record the producer id block",
            )
        self._next, self._block_end = start, end
        log.info("reserved producer ids [%d, %d)", start, end)

    def next_producer_id(self) -> int:
        if not self._loaded:
            self._load()
        if self._next >= self._block_end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid


class InitProducerIdApi:
    MIN_VERSION = 0
    MAX_VERSION = 5  # v6 adds KIP-939 two-phase commit (enable2_pc), which logkeel has not

    def __init__(
        self,
        log_manager: LogManager,
        reserve_in_cluster: Callable[[int], tuple[int, int] | None] = lambda _size: None,
    ) -> None:
        self.manager = ProducerIdManager(log_manager, reserve_in_cluster)
        self._lock = asyncio.Lock()
        self.txn_coordinator: TransactionCoordinator | None = None

    async def next_producer_id(self) -> int:
        """A fresh producer id; raises KafkaStorageError."""
        async with self._lock:
            return await asyncio.to_thread(self.manager.next_producer_id)

    async def handle(
        self, ctx: RequestContext, request: InitProducerIdRequest
    ) -> InitProducerIdResponse:
        if request.transactional_id is not None:
            return await self._transactional(ctx, request, request.transactional_id)
        try:
            pid = await self.next_producer_id()
        except KafkaStorageError as exc:
            log.error("cannot allocate a producer id: %s", exc)
            return self._response(ctx, ErrorCode.kafka_storage_error, -1, -1)
        except Exception:
            log.exception("cannot reserve producer ids in the cluster")
            return self._response(ctx, ErrorCode.coordinator_not_available, -1, -1)
        return self._response(ctx, ErrorCode.none, pid, 0)

    async def _transactional(
        self, ctx: RequestContext, request: InitProducerIdRequest, transactional_id: str
    ) -> InitProducerIdResponse:
        if self.txn_coordinator is None:
            return self._response(ctx, ErrorCode.coordinator_not_available, -1, -1)
        try:
            pid, epoch = await self.txn_coordinator.init_producer_id(
                transactional_id,
                duration_ms(request.transaction_timeout),
                int(getattr(request, "producer_id", -1)),
                int(getattr(request, "producer_epoch", -1)),
            )
        except TxnError as exc:
            return self._response(ctx, visible_code(ctx, exc.code), -1, -1)
        except KafkaStorageError as exc:
            log.error("cannot allocate a producer id: %s", exc)
            return self._response(ctx, ErrorCode.kafka_storage_error, -1, -1)
        return self._response(ctx, ErrorCode.none, pid, epoch)

    @staticmethod
    def _response(ctx: RequestContext, code: ErrorCode, pid: int, epoch: int) -> Any:
        return response(
            ctx,
            error_code=code,
            producer_id=pid,
            producer_epoch=epoch,
            ongoing_txn_producer_id=-1,
            ongoing_txn_producer_epoch=-1,
        )

    def error_response(
        self, ctx: RequestContext, request: InitProducerIdRequest, code: ErrorCode
    ) -> InitProducerIdResponse:
        return self._response(ctx, code, -1, -1)


def register(registry: HandlerRegistry, api: InitProducerIdApi) -> InitProducerIdApi:
    registry.register(
        ApiKey.INIT_PRODUCER_ID,
        api.MIN_VERSION,
        api.MAX_VERSION,
        api.handle,
        rule=gated(WRITE_TXN, IDEMPOTENT_WRITE),
        error_response=api.error_response,
    )
    return api
