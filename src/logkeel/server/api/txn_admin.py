"""DescribeTransactions (65, v0) and ListTransactions (66, v0-2): the transaction coordinator's
state of transactional ids, for the admin tools (``kafka-transactions.sh``, AdminClient). Each
broker answers for the ``__transaction_state`` partitions it has loaded; an admin client asks
every broker for a list and the id's coordinator for a description, as with Kafka. With an
authorizer, describing an id needs DESCRIBE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), its
partitions are shown only for topics the principal may describe, and the list holds only the
ids the principal may describe, as in Kafka."""

from __future__ import annotations

import datetime
import re
import time

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.server.api.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from logkeel.server.api.responses import Endpoint, nested, register_family, response
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.coordinator import TransactionCoordinator
from logkeel.server.txn.records import TxnStatus
from logkeel.server.txn.state import TxnError, TxnMetadata

__all__ = ["register", "state_name"]


def state_name(status: TxnStatus) -> str:
    """Kafka's name of a transaction state (``PrepareCommit``)."""
    return "".join(word.capitalize() for word in status.name.split("_"))


_STATES = {state_name(s): s for s in TxnStatus}


class TxnAdminApi:
    def __init__(
        self, txn_coordinator: TransactionCoordinator, authorizer: RequestAuthorizer | None = None
    ) -> None:
        self._txns = txn_coordinator
        self._authorizer = authorizer

    def _may_describe(self, ctx: RequestContext, txn_id: str) -> bool:
        return self._authorizer is None or self._authorizer.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id
        )

    def _may_see_topic(self, ctx: RequestContext, topic: str) -> bool:
        return self._authorizer is None or self._authorizer.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic
        )

    async def describe_transactions(
        self, ctx: RequestContext, request: DescribeTransactionsRequest
    ) -> DescribeTransactionsResponse:
        states = nested(ctx, "TransactionState")
        topic_data = nested(ctx, "TopicData")
        described = []
        for txn_id in request.transactional_ids:
            meta: TxnMetadata | None = None
            try:
                if not self._may_describe(ctx, txn_id):
                    code = ErrorCode.transactional_id_authorization_failed
                else:
                    meta, code = self._txns.describe(txn_id), ErrorCode.none
            except TxnError as exc:
                meta, code = None, exc.code
            v = meta.value if meta is not None else None
            described.append(
                states(
                    error_code=code,
                    transactional_id=txn_id,
                    transaction_state=state_name(v.status) if v is not None else "",
                    transaction_timeout=datetime.timedelta(
                        milliseconds=v.timeout_ms if v is not None else 0
                    ),
                    # An error entry carries Kafka's defaults (zeros).
                    transaction_start_time=_datetime(v.start_ms if v is not None else 0),
                    producer_id=v.producer_id if v is not None else 0,
                    producer_epoch=v.producer_epoch if v is not None else 0,
                    topics=tuple(
                        topic_data(topic=t, partitions=tuple(ps))
                        for t, ps in sorted(v.partitions.items())
                        if self._may_see_topic(ctx, t)  # Kafka leaves out the others
                    )
                    if v is not None
                    else (),
                )
            )
        return response(ctx, transaction_states=tuple(described))

    async def list_transactions(
        self, ctx: RequestContext, request: ListTransactionsRequest
    ) -> ListTransactionsResponse:
        wanted_states = set(request.state_filters)
        unknown = tuple(s for s in request.state_filters if s not in _STATES)
        pids = set(request.producer_id_filters)
        min_duration = int(getattr(request, "duration_filter", -1))
        pattern_text = getattr(request, "transactional_id_pattern", None)
        pattern = re.compile(pattern_text) if pattern_text else None
        try:
            metas = self._txns.list_transactions()
        except TxnError as exc:
            return self.list_error(ctx, request, exc.code)
        now = time.time_ns() // 1_000_000
        listed = nested(ctx, "TransactionState")
        found = [
            listed(
                transactional_id=m.transactional_id,
                producer_id=m.producer_id,
                transaction_state=state_name(m.state),
            )
            for m in metas
            if m.state != TxnStatus.DEAD
            and (not wanted_states or state_name(m.state) in wanted_states)
            and (not pids or m.producer_id in pids)
            # As Kafka: the duration filter keeps transactions running longer than it.
            and (min_duration < 0 or now - m.value.start_ms > min_duration)
            and (pattern is None or pattern.fullmatch(m.transactional_id) is not None)
            and self._may_describe(ctx, m.transactional_id)
        ]
        return response(
            ctx,
            error_code=ErrorCode.none,
            unknown_state_filters=unknown,
            transaction_states=tuple(found),
        )

    def list_error(
        self, ctx: RequestContext, request: ListTransactionsRequest, code: ErrorCode
    ) -> ListTransactionsResponse:
        return response(ctx, error_code=code, unknown_state_filters=(), transaction_states=())

    def describe_error(
        self, ctx: RequestContext, request: DescribeTransactionsRequest, code: ErrorCode
    ) -> DescribeTransactionsResponse:
        states = nested(ctx, "TransactionState")
        return response(
            ctx,
            transaction_states=tuple(
                states(
                    error_code=code,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_datetime(0),
                    producer_id=0,
                    producer_epoch=0,
                    topics=(),
                )
                for txn_id in request.transactional_ids
            ),
        )


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def register(
    registry: HandlerRegistry,
    txn_coordinator: TransactionCoordinator,
    authorizer: RequestAuthorizer | None = None,
) -> TxnAdminApi:
    api = TxnAdminApi(txn_coordinator, authorizer)
    register_family(
        registry,
        {
            ApiKey.DESCRIBE_TRANSACTIONS: Endpoint(
                0,
                0,
                api.describe_transactions,
                api.describe_error,
                per_entry(
                    "DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); "
                    "its partitions only of topics with DESCRIBE"
                ),
            ),
            ApiKey.LIST_TRANSACTIONS: Endpoint(
                0,
                2,
                api.list_transactions,
                api.list_error,
                per_entry("lists only the transactional ids with DESCRIBE on them"),
            ),
        },
    )
    return api
