"""The broker's client quotas: the quotas the metadata store holds (the same on every broker of
a cluster) resolved for each request's user and client id, charged to their rates
(``quota_rates``). Produce and Fetch charge their bytes here and answer the throttle time;
the connection then stops reading for that long (``network/connection.py``, KIP-219)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from logkeel.cluster.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    resolve,
    user_of_principal,
)
from logkeel.cluster.metadata import MetadataStore
from logkeel.server.handlers import RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.quota_rates import QuotaRates, RateWindow

__all__ = ["ClientQuotas"]

log = logging.getLogger(__name__)

# Kafka records request time as a percentage of one second: 100 percent-seconds per second.
_PERCENT_PER_SECOND = 100.0


class ClientQuotas:
    def __init__(
        self,
        metadata: MetadataStore,
        window: RateWindow,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata = metadata
        self._clock = clock
        self._rates = {k: QuotaRates(window) for k in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)}
        self._rates[REQUEST_PERCENTAGE] = QuotaRates(window)
        self._expired_at = clock()

    def _charge(self, key: str, ctx: RequestContext, value: float) -> int:
        quotas = self._metadata.client_quotas()
        if not quotas:
            return 0
        found = resolve(quotas, key, user_of_principal(ctx.session.principal), ctx.client_id)
        if found is None:
            return 0
        now = self._clock()
        if now - self._expired_at > 60:
            self._expired_at = now
            for rates in self._rates.values():
                rates.expire(now)
        throttle_ms = self._rates[key].record(found.rate_key, value, found.bound, now)
        if throttle_ms:
            log.debug(
                "%s of %s over %s %s of %s: throttled %d ms",
                ctx, found.rate_key, key, found.bound, found.entity, throttle_ms,
            )  # fmt: skip
        return throttle_ms

    def produced(self, ctx: RequestContext, nbytes: int) -> int:
        """Charges a Produce request's bytes; the throttle time in ms."""
        return self._charge(PRODUCER_BYTE_RATE, ctx, nbytes)

    def fetched(self, ctx: RequestContext, nbytes: int) -> int:
        """Charges a Fetch response's bytes; the throttle time in ms (then Kafka answers empty
        and takes the bytes back: ``unfetched``)."""
        return self._charge(CONSUMER_BYTE_RATE, ctx, nbytes)

    def unfetched(self, ctx: RequestContext, nbytes: int) -> None:
        found = resolve(
            self._metadata.client_quotas(),
            CONSUMER_BYTE_RATE,
            user_of_principal(ctx.session.principal),
            ctx.client_id,
        )
        if found is not None:
            self._rates[CONSUMER_BYTE_RATE].unrecord(found.rate_key, nbytes, self._clock())

    def request_meter(self, ctx: RequestContext, request: Any) -> Callable[[float], int] | None:
        """The charge of a request's handler time, if a request_percentage quota applies to
        it (``handlers.Meter``). Replication and cluster actions are exempt, as in Kafka."""
        quotas = self._metadata.client_quotas()
        if not quotas or _cluster_action(ctx, request):
            return None
        user = user_of_principal(ctx.session.principal)
        if resolve(quotas, REQUEST_PERCENTAGE, user, ctx.client_id) is None:
            return None
        return lambda seconds: self._charge(REQUEST_PERCENTAGE, ctx, seconds * _PERCENT_PER_SECOND)


def _cluster_action(ctx: RequestContext, request: Any) -> bool:
    if ctx.api_key == ApiKey.WRITE_TXN_MARKERS:
        return True
    if ctx.api_key in (ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH):
        state = getattr(request, "replica_state", None)
        replica = state.replica_id if state is not None else getattr(request, "replica_id", -1)
        return int(replica) >= 0
    return False
