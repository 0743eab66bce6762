"""The console's routes (Starlette) and its pollers: two threads, one for the cluster (brokers,
partitions, offsets; election losses every few polls: they come from ZooKeeper) and one for the
consumer groups (a group whose coordinator is failing over must not hold the brokers' view
back). The page reads the last poll's results; the message browser and the actions ask the
brokers when called. Whatever fails, an endpoint answers JSON saying what is missing."""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from logkeel.admin.cluster_status import status_of, zookeeper_connect
from logkeel.admin.elections import (
    designated_election,
    elect_leaders_request,
    election_results,
)
from logkeel.admin.log_dirs import bring_online
from logkeel.admin.reassignments import alter_reassignments
from logkeel.admin.session import AdminError, AdminSession
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.console.actions import (
    INT32_MAX,
    INT64_MAX,
    Action,
    ActionRefused,
    bounded_int,
    check_origin,
    host_allowed,
    parse_action,
    topic_name,
)
from logkeel.console.browse import BrowseError, read_partition
from logkeel.console.gather import poll_cluster, poll_groups
from logkeel.console.history import history_rows
from logkeel.console.samplers import BrokerRoster, LagHistory, LeaderChanges, OffsetRates
from logkeel.server.network.client import BrokerConnectionError, ClientSecurity

__all__ = ["ConsoleState", "create_app"]

log = logging.getLogger(__name__)

# What the controller's history does not hold, said on the page.
NOT_RECORDED = [
    "log dirs already offline when their broker started (they failed while it was down): "
    "the brokers view shows them, the history does not",
    "a slow leader's request to step down that the controller refused (no in-sync follower "
    "to take over): only the broker's log has it",
    "the history keeps the last 1,000 events of each kind",
]
_LOSSES_EVERY = 5  # polls: election losses are read from ZooKeeper, a session each time
_ACTION_TIMEOUT_S = 30.0
_BROWSE_READS = 8  # at once; more are refused (the threadpool has 40 threads)
_FROM_ZOOKEEPER = ("offline_reason", "designate")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ConsoleState:
    """The last poll of the cluster and of the groups, and what the samplers remember."""

    bootstrap: list[str]
    security: ClientSecurity
    interval_s: float = 2.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    cluster: dict[str, Any] = field(default_factory=dict)
    cluster_error: str | None = "not polled yet"
    brokers: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    groups_error: str | None = "not polled yet"
    losses: list[dict[str, Any]] | None = None
    history: dict[str, list[dict[str, Any]]] | None = None
    # What ZooKeeper says of each offline partition (why it waits, the replica to designate),
    # read every few polls and shown on the polls between.
    offline_info: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    updated_ms: int = 0
    roster: BrokerRoster = field(default_factory=BrokerRoster)
    changes: LeaderChanges = field(default_factory=LeaderChanges)
    rates: OffsetRates = field(default_factory=OffsetRates)
    lags: LagHistory = field(default_factory=LagHistory)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def addresses(self) -> list[str]:
        return self.bootstrap + self.roster.addresses()

    def poll_cluster_once(self, with_losses: bool) -> None:
        now = _now_ms()
        try:
            status = poll_cluster(self.addresses(), self.security, with_losses=with_losses)
        except (BrokerConnectionError, ValueError) as exc:
            with self.lock:
                self.cluster_error = str(exc)
                self.brokers = self.roster.mark_all_unreachable()
            return
        with self.lock:
            live = [
                {**b, "alive": b["reachable"]} for b in status["brokers"]
            ]  # listed, but its log dirs did not answer: dying, or its session not expired yet
            brokers = self.roster.observe(now, live)
            for b in brokers:
                b["alive"] = b["alive"] and b.get("reachable", False)
                b["controller"] = b["id"] == status["controller"]
            self.brokers = brokers
            del status["brokers"]
            if with_losses:
                self.losses = status.pop("election_losses", None)
                self.history = status.pop("history", None)
                self.offline_info = {
                    (p["topic"], p["partition"]): {k: p[k] for k in _FROM_ZOOKEEPER if k in p}
                    for p in status["partitions"] if p["offline"]
                }  # fmt: skip
            for p in status["partitions"]:
                if p["offline"]:
                    p.update(self.offline_info.get((p["topic"], p["partition"]), {}))
            self.changes.observe(now, status["partitions"])
            self.rates.add(now, {
                (p["topic"], p["partition"]): (p["log_end_offset"], p["leader"])
                for p in status["partitions"] if p["log_end_offset"] is not None
            })  # fmt: skip
            self.cluster, self.cluster_error, self.updated_ms = status, None, now

    def poll_groups_once(self) -> None:
        try:
            docs = poll_groups(self.addresses(), self.security)
        except (BrokerConnectionError, ValueError) as exc:
            with self.lock:
                self.groups_error = str(exc)
            return
        except AdminError as exc:
            with self.lock:
                self.groups_error = str(exc)
            return
        now = _now_ms()
        lags = {
            d["group"]: sum(r["lag"] or 0 for r in d["offsets"]) for d in docs if "offsets" in d
        }
        with self.lock:
            self.lags.add(now, lags)
            for d in docs:
                d["lag_trend"] = self.lags.trend(d["group"])
                d["total_lag"] = lags.get(d["group"])
            self.groups, self.groups_error = docs, None

    def start(self) -> None:
        self._stop.clear()
        count = iter(range(1 << 62))
        self._threads = [
            threading.Thread(
                target=self._loop,
                args=(lambda: self.poll_cluster_once(next(count) % _LOSSES_EVERY == 0),),
                name="console-cluster",
                daemon=True,
            ),
            threading.Thread(
                target=self._loop, args=(self.poll_groups_once,), name="console-groups", daemon=True
            ),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)

    def _loop(self, once: Callable[[], None]) -> None:
        while not self._stop.is_set():
            try:
                once()
            except Exception:  # one poll going wrong must not end the console (logged)
                log.exception("console poll failed")
            self._stop.wait(self.interval_s)

    def admin(self) -> AdminSession:
        return AdminSession(
            ",".join(dict.fromkeys(self.addresses())),
            client_id="logkeel-console",
            timeout_ms=10_000,
            security=self.security,
        )


def create_app(
    state: ConsoleState, *, allow_actions: bool = False, hosts: frozenset[str] | None = None
) -> Starlette:
    """The console's web app over ``state`` (started and stopped with the app). ``hosts``: the
    Host headers it answers (`actions.served_hosts`; None: any)."""
    static = resources.files("logkeel.console") / "static"
    # Per process: the page carries it, every action must send it back (CSRF).
    token = secrets.token_urlsafe(32)
    page = (static / "index.html").read_text().replace("__CONSOLE_TOKEN__", token)

    # The views above answer on the event loop (memory only); the reads below ask a broker
    # from the threadpool, which a stuck broker and a burst of reads must not fill: the views
    # and the actions share it.
    reading = threading.BoundedSemaphore(_BROWSE_READS)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state.start()
        try:
            yield
        finally:
            state.stop()

    async def index(_request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def overview(_request: Request) -> Response:
        with state.lock:
            c = state.cluster
            return JSONResponse({
                "bootstrap": state.bootstrap, "updated_ms": state.updated_ms,
                "error": state.cluster_error, "cluster_id": c.get("cluster_id"),
                "controller": c.get("controller"), "brokers": state.brokers,
                "actions_allowed": allow_actions, "interval_ms": int(state.interval_s * 1000),
            })  # fmt: skip

    async def partitions(_request: Request) -> Response:
        with state.lock:
            return JSONResponse({
                "updated_ms": state.updated_ms, "error": state.cluster_error,
                "partitions": state.cluster.get("partitions", []),
            })  # fmt: skip

    async def groups(_request: Request) -> Response:
        with state.lock:
            return JSONResponse({"error": state.groups_error, "groups": state.groups})

    async def elections(_request: Request) -> Response:
        with state.lock:
            recorded = state.history is not None and state.losses is not None
            return JSONResponse({
                "losses": state.losses,
                "losses_note": None if state.losses is not None else
                "election losses unknown: ZooKeeper not reachable, or a single node",
                "history": history_rows(state.history or {}),
                "history_note": None if recorded else
                "the cluster's history is unknown: ZooKeeper not reachable, or a single node",
                "observed": list(state.changes.changes),
                "not_recorded": NOT_RECORDED,
            })  # fmt: skip

    async def throughput(_request: Request) -> Response:
        with state.lock:
            return JSONResponse(state.rates.series())

    def messages(request: Request) -> Response:
        q = request.query_params
        try:
            topic = topic_name(q["topic"])
            partition = bounded_int(q.get("partition", "0"), INT32_MAX)
            offset = bounded_int(q["offset"], INT64_MAX) if q.get("offset") else None
            timestamp = bounded_int(q["timestamp_ms"], INT64_MAX) if q.get("timestamp_ms") else None
            limit = min(max(int(q.get("limit", "50")), 1), 500)
        except (KeyError, ValueError):
            return _error(400, "give topic (a legal topic name), partition and offset or "
                               "timestamp_ms (integers from 0)")  # fmt: skip
        if not reading.acquire(blocking=False):
            return _error(503, f"{_BROWSE_READS} reads of messages are under way: try again")
        try:
            with state.admin() as admin:
                return JSONResponse(read_partition(
                    admin, topic, partition, offset=offset, timestamp_ms=timestamp, limit=limit
                ))  # fmt: skip
        except (BrowseError, BrokerConnectionError, ValueError) as exc:
            return _error(503 if isinstance(exc, BrokerConnectionError) else 404, str(exc))
        finally:
            reading.release()

    async def action(request: Request) -> Response:
        if not allow_actions:
            return _error(403, "actions are off: this console is read-only "
                               "(start it with --allow-actions to enable them)")  # fmt: skip
        refused = check_origin(request.headers, token, hosts)
        if refused is not None:
            return _error(403, refused)
        try:
            body = await request.json()
        except ValueError:
            body = None
        try:
            act = parse_action(request.path_params["kind"], body)
        except ActionRefused as exc:
            return _error(exc.status, str(exc))
        operator = request.client.host if request.client else "unknown"
        log.warning("console action %s on %s by %s: %s", act.kind, act.subject, operator, act)
        return await run_in_threadpool(_run_action, state, act)

    routes = [
        Route("/", index),
        Route("/api/overview", overview),
        Route("/api/partitions", partitions),
        Route("/api/groups", groups),
        Route("/api/elections", elections),
        Route("/api/throughput", throughput),
        Route("/api/messages", messages),
        Route("/api/actions/{kind:str}", action, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(_Guard, hosts=hosts)])


# Every answer: not to be framed by another site's page (clickjacking: a transparent frame of
# the action forms under the attacker's buttons), its scripts and styles from the console only.
_SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


class _Guard:
    """Refuses a request whose Host is not the console's (`host_allowed`): a DNS-rebound page
    would otherwise read every view, the messages and the token as its own origin's; and adds
    `_SECURITY_HEADERS` to every answer."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(_SECURITY_HEADERS)
            await send(message)

        host = Headers(scope=scope).get("host", "")
        if not host_allowed(host, self.hosts):
            answer = _error(403, f"Host {host!r} is not this console's address")
            await answer(scope, receive, secured)
            return
        await self.app(scope, receive, secured)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _run_action(state: ConsoleState, act: Action) -> Response:
    try:
        with state.admin() as admin:
            if act.kind == "log-dir-online":
                assert act.broker is not None and act.log_dir is not None
                address = admin.brokers().get(act.broker)
                if address is None:
                    return _error(409, f"broker {act.broker} is not alive")
                return JSONResponse({"message": bring_online(admin, address, act.log_dir)})
            assert act.tp is not None
            if act.kind == "reassignment":
                error = alter_reassignments(admin, {act.tp: act.replicas}).get(act.tp)
                return JSONResponse({"results": [{"partition": str(act.tp), "error": error,
                                                  "message": f"replicas {list(act.replicas)}"}]})  # fmt: skip
            if act.kind == "preferred-election":
                answer = admin.send(elect_leaders_request("preferred", [act.tp], _ACTION_TIMEOUT_S))
                results = election_results(answer)
            else:
                assert act.replica is not None
                connect = zookeeper_connect(admin, status_of(admin, with_losses=False))
                if connect is None:
                    return _error(409, "the bootstrap broker names no zookeeper.connect")
                results = designated_election(
                    connect, act.tp, act.replica, act.force, _ACTION_TIMEOUT_S
                )
    except AdminError as exc:
        return _error(409, str(exc))
    except (BrokerConnectionError, ZooKeeperUnavailable, ValueError) as exc:
        return _error(503, str(exc))
    return JSONResponse({
        "results": [
            {"partition": str(p), "error": err, "message": why}
            for p, (err, why) in sorted(results.items())
        ]
    })  # fmt: skip
