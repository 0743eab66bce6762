"""Telling a broker whose process is gone from one that is only unreachable, in a fraction of a
second, without lowering the ZooKeeper session timeout that guards against network faults.

A process that died leaves its port closed: a connection to it is refused at once (ECONNREFUSED),
which a frozen process (SIGSTOP, a long pause) or a network cut never answers: its connections
hang or time out, and only the session's expiry removes it, as before. Every broker probes every
other registered broker's listeners a few times a second; a broker reached since its
registration whose listeners then all refuse, twice in a row, is declared gone: its registration
is deleted (conditional on being the same registration, by its version and broker epoch), and
/controller with it when it held the office. Every broker's watches then see what a session
expiry would have shown, seconds earlier: the controller moves its leaderships, or a new
controller is elected under the next controller epoch, which fences the old one's writes.

A broker wrongly declared gone (its listener closed, its process alive) sees its registration
deleted and registers again (`ZkMetadataStore`), under a new broker epoch: it is a restarted
broker to the controller, which never hands it back a leadership of its earlier run unproven.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint

__all__ = ["CrashDetector", "Declaration", "PeerVerdicts", "probe", "probe_order"]

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 0.5
# Refusals in a row before a broker is declared gone (one could be a listener being rebound).
REFUSALS = 2
# How long after a refusal the refusing broker is probed again.
CONFIRM_S = 0.05
# A probing round that fails (ZooKeeper unreachable) is logged at most this often.
_FAILURE_LOG_S = 10.0

UP, REFUSED, UNKNOWN = "up", "refused", "unknown"


def probe(endpoints: Iterable[tuple[str, int]], timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """UP if a listener accepts a connection, REFUSED if every one refuses it, else UNKNOWN (a
    timeout: silence is what a network fault or a frozen process looks like)."""
    outcome = None
    for host, port in endpoints:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return UP
        except ConnectionRefusedError:
            outcome = REFUSED if outcome is None else outcome
        except OSError as exc:
            outcome = REFUSED if exc.errno == errno.ECONNREFUSED and outcome is None else UNKNOWN
    return outcome or UNKNOWN


def probe_order(endpoints: Iterable[EndPoint], listener: str | None) -> list[tuple[str, int]]:
    """Where to probe a broker, its ``listener`` (the inter-broker one) first: a live broker
    answers there, and only there is the probe exempt from the broker's connection limits
    (``max.connection.creation.rate`` counts every other listener's connections: probes from
    every peer several times a second queued clients behind them for seconds). The other
    listeners follow, since a broker is gone only once every one refuses."""
    ordered = sorted(endpoints, key=lambda e: e.listener != listener)
    return [(e.host, e.port) for e in ordered]


@dataclass(frozen=True)
class Declaration:
    """A broker declared gone, not committed yet (`CrashDetector.declaration`)."""

    registration: BrokerRegistration
    txn: Any  # kazoo's TransactionRequest
    held_office: bool


@dataclass
class _Peer:
    broker_epoch: int
    seen_up: bool = False
    refusals: int = 0
    told_unreached: bool = False  # its refusals were logged as not counting (once)


class PeerVerdicts:
    """Which registered brokers are gone, from the probes' outcomes (pure)."""

    def __init__(self, refusals: int = REFUSALS) -> None:
        self.refusals = refusals
        self._peers: dict[int, _Peer] = {}

    def observe(self, broker: int, broker_epoch: int, outcome: str) -> bool:
        """True once ``broker`` (this registration of it) is gone: it was reached since it
        registered, and then refused ``refusals`` probes in a row. A broker never reached (an
        address this host cannot reach, a listener not bound yet) is never declared gone."""
        peer = self._peers.get(broker)
        if peer is None or peer.broker_epoch != broker_epoch:
            peer = self._peers[broker] = _Peer(broker_epoch)
        if outcome == UP:
            if not peer.seen_up:
                log.info("broker %d reached (broker epoch %d): it is taken for crashed once its "
                         "listeners refuse connections", broker, broker_epoch)  # fmt: skip
            peer.seen_up, peer.refusals = True, 0
        elif outcome == REFUSED:
            peer.refusals += 1
            if not peer.seen_up and not peer.told_unreached:
                peer.told_unreached = True
                log.info("broker %d refuses connections but was never reached from here: "
                         "left to its session", broker)  # fmt: skip
        else:
            peer.refusals = 0
        return peer.seen_up and peer.refusals >= self.refusals

    def counting(self, broker: int) -> bool:
        """Whether ``broker``'s refusals count (it was reached since it registered)."""
        peer = self._peers.get(broker)
        return peer is not None and peer.seen_up

    def forget_except(self, brokers: Iterable[int]) -> None:
        keep = set(brokers)
        for broker in [b for b in self._peers if b not in keep]:
            del self._peers[broker]


class CrashDetector:
    """Probes the other brokers of the cluster on a thread of its own (see the module)."""

    def __init__(
        self, client: ZkMetadataClient, broker_id: int, listener: str | None = None
    ) -> None:
        """``listener``: the inter-broker listener's name, probed first (`probe_order`)."""
        self.client = client
        self.broker_id = broker_id
        self.listener = listener
        self.verdicts = PeerVerdicts()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._registrations: dict[int, BrokerRegistration] = {}
        self._stale = threading.Event()
        self._stale.set()
        self._wake = threading.Event()

    def start(self) -> None:
        self.client.zk.ChildrenWatch(zd.BROKER_IDS, lambda _ids: self._stale.set())
        self._thread = threading.Thread(target=self._run, name="crash-detector", daemon=True)
        self._thread.start()

    def suspect(self) -> None:
        """A connection to another broker just failed (a follower's fetch from its leader):
        the next probing round starts now, not up to PROBE_INTERVAL_S later. A SIGKILL closes
        the dead broker's connections at once, so its followers see it first; the verdict
        still needs the refusals in a row (a live broker that dropped a connection answers the
        probe)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        logged = 0.0
        while True:
            self._wake.wait(PROBE_INTERVAL_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._probe_all()
            except Exception as exc:
                # Seen: a crash nobody declared would otherwise leave no trace.
                quiet = time.monotonic() - logged < _FAILURE_LOG_S
                if not quiet:
                    logged = time.monotonic()
                log.log(logging.DEBUG if quiet else logging.WARNING,
                        "probing the other brokers failed: %r", exc, exc_info=not quiet)  # fmt: skip
                self._stale.set()

    def _probe_all(self) -> None:
        if self._stale.is_set():
            self._stale.clear()
            self._registrations = self.client.brokers()
            self.verdicts.forget_except(self._registrations)
        for broker, reg in list(self._registrations.items()):
            if broker == self.broker_id or self._stop.is_set():
                continue
            endpoints = probe_order(reg.endpoints, self.listener)
            outcome = probe(endpoints)
            gone = self.verdicts.observe(broker, reg.broker_epoch, outcome)
            # A first refusal is confirmed at once, not a round later (~0.2 s of every
            # failover): the refusals in a row still have to come from separate probes.
            while not gone and outcome == REFUSED and self.verdicts.counting(broker):
                if self._stop.wait(CONFIRM_S):
                    return
                outcome = probe(endpoints)
                gone = self.verdicts.observe(broker, reg.broker_epoch, outcome)
            if gone:
                self._declare_gone(reg)
                self._stale.set()

    def _declare_gone(self, reg: BrokerRegistration) -> None:
        declaration = self.declaration(reg)
        if declaration is not None:
            self.commit(declaration)

    def declaration(self, reg: BrokerRegistration) -> Declaration | None:
        """The transaction that declares ``reg`` gone (not committed), or None when it is gone
        already, replaced, or declared by another broker. It records the broker epoch in
        ``zd.crash_verdict_path`` conditional on that znode's version as read here: another
        broker's declaration in between (after which the live broker may have registered
        again, at version 0 like every registration) fails the whole transaction."""
        zk = self.client.zk
        verdict = zd.crash_verdict_path(reg.broker_id)
        verdict_stat = zk.exists(verdict)  # read before the check: see the docstring
        path = zd.broker_path(reg.broker_id)
        stat = zk.exists(path)
        # A verdict on this registration deleted it in the same transaction: gone is enough.
        if stat is None or stat.czxid != reg.broker_epoch:
            log.info("broker %d refuses connections; its registration of broker epoch %d is "
                     "gone already or replaced", reg.broker_id, reg.broker_epoch)  # fmt: skip
            return None
        txn = zk.transaction()
        record = zd.encode_crash_verdict(reg.broker_epoch, self.broker_id)
        if verdict_stat is None:
            txn.create(verdict, record)
        else:
            txn.set_data(verdict, record, version=verdict_stat.version)
        txn.delete(path, version=stat.version)
        held_office = False
        try:
            data, ctl_stat = zk.get(zd.CONTROLLER)
            if zd.decode_controller(data) == reg.broker_id:
                txn.delete(zd.CONTROLLER, version=ctl_stat.version)
                held_office = True
        except NoNodeError:
            pass
        return Declaration(reg, txn, held_office)

    def commit(self, declaration: Declaration) -> None:
        reg, held_office = declaration.registration, declaration.held_office
        results = declaration.txn.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            # Another broker was first, or it changed meanwhile (probed again next round).
            log.info("broker %d refuses connections; removing its registration failed: %r",
                     reg.broker_id, failed[0])  # fmt: skip
            return
        log.warning(
            "broker %d refuses connections on every listener: its process is gone; its "
            "registration%s removed (broker epoch %d)", reg.broker_id,
            " and its controller's office" if held_office else "", reg.broker_epoch,
        )  # fmt: skip
