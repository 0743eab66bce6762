"""In-sync replica tracking as pure functions: the leader's view of each follower's fetches, ISR
shrink and expand proposals, the high watermark, the controller's check of an AlterPartition
proposal, and the slow-leader rule.

Follower state follows Kafka's Replica.updateFetchState; KIP-501
(`follower.fetch.pending.reads.insync.enable`) adds pending fetches: a fetch that started at or
past the leader's log end as of the follower's previous fetch keeps the follower in sync while the
leader is still serving it, and a fetch that took at least
``replica.lag.time.max.ms * replica.read.time.insync.factor`` to serve counts as caught up at its
completion rather than its start. The ISR may shrink to the leader alone; `min.insync.replicas`
only gates acks=all produce (`check_min_insync`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from logkeel.cluster.partition_state import (
    Decision,
    PartitionRegistration,
    ReplicaView,
    Views,
    unchanged,
    view_of,
)


@dataclass(frozen=True, slots=True)
class IsrConfig:
    replica_lag_time_max_ms: int = 30_000
    follower_fetch_pending_reads_insync_enable: bool = False
    replica_read_time_insync_factor: float = 0.5  # KIP-501: in (0, 1]
    follower_fetch_process_time_max_ms: int = 500  # KIP-501 solution 2: leader gives up


@dataclass(frozen=True, slots=True)
class PendingFetch:
    fetch_offset: int
    started_ms: int


@dataclass(frozen=True, slots=True)
class FollowerState:
    """The leader's record of one follower (Kafka's Replica state)."""

    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    pending: tuple[PendingFetch, ...] = ()


# A follower not heard from yet (immutable, so one will do).
UNKNOWN_FOLLOWER = FollowerState()


def _with_pending(follower: FollowerState, pending: tuple[PendingFetch, ...]) -> FollowerState:
    """``follower`` with ``pending`` replaced. Called on every fetch of every partition: built
    directly, as `dataclasses.replace` takes twice as long."""
    if pending == follower.pending:
        return follower
    return FollowerState(
        follower.log_end_offset,
        follower.last_caught_up_ms,
        follower.last_fetch_ms,
        follower.last_fetch_leader_log_end_offset,
        pending,
    )


def fetch_started(
    follower: FollowerState, fetch_offset: int, now_ms: int, config: IsrConfig
) -> FollowerState:
    """A follower fetch begins to be served. Under KIP-501 it is recorded as pending when it
    starts at or past the leader's log end as of the previous fetch (the follower had caught up
    to what it last saw). A follower sends one fetch at a time: an earlier one still recorded
    (its response was lost) no longer counts."""
    if not config.follower_fetch_pending_reads_insync_enable:
        return follower
    if fetch_offset < follower.last_fetch_leader_log_end_offset:
        return _with_pending(follower, ())
    return _with_pending(follower, (PendingFetch(fetch_offset, now_ms),))


def _without_pending(
    follower: FollowerState, fetch_offset: int, started_ms: int
) -> tuple[PendingFetch, ...]:
    if not follower.pending:
        return ()  # an idle follower's every fetch: nothing to build
    mine = PendingFetch(fetch_offset, started_ms)
    rest = list(follower.pending)
    if mine in rest:
        rest.remove(mine)
    return tuple(rest)


def fetch_completed(
    follower: FollowerState,
    fetch_offset: int,
    started_ms: int,
    now_ms: int,
    leader_log_end_offset: int,
    config: IsrConfig,
    *,
    sending: bool = False,
) -> FollowerState:
    """A follower fetch was read: its fetch offset is the follower's log end offset, and it
    counts as caught up at the fetch's start time when it reached the leader's current log end,
    or at the previous fetch's time when it reached the log end seen then. ``sending``: its
    records still have to reach the follower, so it stays pending until `fetch_sent` (the
    send is what a slow disk makes slow, with zero-copy reads)."""
    slow_read = now_ms - started_ms >= (
        config.replica_lag_time_max_ms * config.replica_read_time_insync_factor
    )
    # KIP-501: a follower that had reached what it last saw is not lagging because the leader
    # took long to serve it; it counts as caught up when the read completes.
    leader_was_slow = (
        config.follower_fetch_pending_reads_insync_enable
        and slow_read
        and fetch_offset >= follower.last_fetch_leader_log_end_offset
    )
    fetch_time = now_ms if leader_was_slow else started_ms
    caught_up = follower.last_caught_up_ms
    if fetch_offset >= leader_log_end_offset:
        caught_up = max(caught_up, fetch_time)
    elif fetch_offset >= follower.last_fetch_leader_log_end_offset:
        caught_up = max(caught_up, now_ms if leader_was_slow else follower.last_fetch_ms)
    return FollowerState(
        log_end_offset=fetch_offset,
        last_caught_up_ms=caught_up,
        last_fetch_ms=fetch_time,
        last_fetch_leader_log_end_offset=leader_log_end_offset,
        pending=follower.pending
        if sending
        else _without_pending(follower, fetch_offset, started_ms),
    )


def fetched_unchanged(follower: FollowerState, fetched_ms: int) -> FollowerState:
    """The follower's fetch session fetched this partition at ``fetched_ms`` and found it as
    its last read left it, which reached the log end: nothing was appended since (the leader
    answered without reading, `session_reads`). That fetch was at the log end, so the follower
    was caught up at its start, as a read would have recorded."""
    if fetched_ms <= follower.last_fetch_ms:
        return follower
    return FollowerState(
        follower.log_end_offset,
        max(follower.last_caught_up_ms, fetched_ms),
        fetched_ms,
        follower.last_fetch_leader_log_end_offset,
        follower.pending,
    )


def fetch_sent(
    follower: FollowerState,
    fetch_offset: int,
    started_ms: int,
    now_ms: int,
    config: IsrConfig,
    *,
    leader_slow: bool = False,
) -> FollowerState:
    """The records of a pending fetch reached the follower (or the response was dropped): it
    is pending no more, and if serving it took at least
    ``replica.lag.time.max.ms * replica.read.time.insync.factor`` the follower counts as caught
    up now, its completion, rather than when it started (KIP-501). ``leader_slow``: the leader
    itself found the read slow (a log dir past its budget, `dir_reads`), so the time was its own
    whatever the factor says."""
    mine = PendingFetch(fetch_offset, started_ms)
    if mine not in follower.pending:
        return follower
    caught_up = follower.last_caught_up_ms
    if leader_slow or (
        now_ms - started_ms
        >= config.replica_lag_time_max_ms * config.replica_read_time_insync_factor
    ):
        caught_up = max(caught_up, now_ms)
    return replace(
        follower,
        pending=_without_pending(follower, fetch_offset, started_ms),
        last_caught_up_ms=caught_up,
    )


def fetch_failed(follower: FollowerState, fetch_offset: int, started_ms: int) -> FollowerState:
    """A fetch ended in an error: it no longer counts as pending (KIP-501), nothing else moves."""
    return replace(follower, pending=_without_pending(follower, fetch_offset, started_ms))


def in_sync(
    follower: FollowerState, leader_log_end_offset: int, now_ms: int, config: IsrConfig
) -> tuple[bool, str]:
    if follower.log_end_offset >= leader_log_end_offset:
        return True, "at the leader's log end"
    lag = now_ms - follower.last_caught_up_ms
    if lag <= config.replica_lag_time_max_ms:
        return True, f"caught up {lag} ms ago"
    if config.follower_fetch_pending_reads_insync_enable and follower.pending:
        return True, "a fetch that started caught up is still being served"
    return (
        False,
        f"last caught up {lag} ms ago (replica.lag.time.max.ms={config.replica_lag_time_max_ms})",
    )


def shrink_isr(
    state: PartitionRegistration,
    followers: Mapping[int, FollowerState],
    leader_log_end_offset: int,
    now_ms: int,
    config: IsrConfig,
) -> Decision:
    """The leader's periodic check: propose an ISR without the followers that fell behind.
    The proposal keeps the partition epoch it was made against; the controller bumps it."""
    out: dict[int, str] = {}
    for replica in state.isr:
        if replica == state.leader:
            continue
        ok, why = in_sync(
            followers.get(replica, UNKNOWN_FOLLOWER), leader_log_end_offset, now_ms, config
        )
        if not ok:
            out[replica] = why
    if not out:
        return unchanged(state, "every follower in the ISR is in sync")
    isr = tuple(r for r in state.isr if r not in out)
    return Decision(replace(state, isr=isr), f"shrink ISR: {out}", changed=True)


def expand_isr(
    state: PartitionRegistration,
    replica: int,
    follower: FollowerState,
    high_watermark: int,
    leader_epoch_start_offset: int,
    *,
    shutting_down: AbstractSet[int] = frozenset(),
    live: AbstractSet[int] | None = None,
) -> Decision:
    """A follower rejoins once it has fetched up to the high watermark and into the current
    leader epoch (so it holds nothing the new term might have truncated), unless its broker
    is in a controlled shutdown (KIP-841: it would only have to leave again, and stopping
    brokers would churn the ISRs) or not registered (``live``, None: not known). A broker
    gone after its last fetch would otherwise be proposed again and again from that fetch,
    refused each time, while the pending proposal holds the high watermark back."""
    if replica in state.isr:
        return unchanged(state, f"{replica} is already in the ISR")
    if replica not in state.replicas:
        return unchanged(state, f"{replica} is not a replica", "INELIGIBLE_REPLICA")
    if replica in shutting_down:
        return unchanged(state, f"broker {replica} is shutting down", "INELIGIBLE_REPLICA")
    if live is not None and replica not in live:
        return unchanged(state, f"broker {replica} is not registered", "INELIGIBLE_REPLICA")
    if follower.log_end_offset < max(high_watermark, leader_epoch_start_offset):
        return unchanged(
            state,
            f"{replica} at {follower.log_end_offset} has not reached the high watermark "
            f"{high_watermark} and the leader epoch start {leader_epoch_start_offset}",
        )
    return Decision(
        replace(state, isr=(*state.isr, replica)), f"expand ISR: {replica} caught up", changed=True
    )


def high_watermark(
    current: int,
    leader: int,
    leader_log_end_offset: int,
    isr: Sequence[int],
    followers: Mapping[int, FollowerState],
) -> int:
    """The smallest log end offset over the ISR; it never moves backwards."""
    ends = [leader_log_end_offset]
    ends += [followers.get(r, UNKNOWN_FOLLOWER).log_end_offset for r in isr if r != leader]
    return max(current, min(ends))


def check_min_insync(isr_size: int, min_insync_replicas: int) -> str | None:
    """acks=all produce is refused below min.insync.replicas (Kafka's NOT_ENOUGH_REPLICAS)."""
    return "NOT_ENOUGH_REPLICAS" if isr_size < min_insync_replicas else None


def alter_partition(
    current: PartitionRegistration, proposal: PartitionRegistration, requester: int, views: Views
) -> Decision:
    """The controller's answer to a leader's AlterPartition: applied only when it comes from the
    current leader in the current leader epoch and was made against the current partition epoch,
    and every replica it adds is live with its log dir online."""
    if requester != current.leader:
        return unchanged(
            current, f"{requester} is not the leader ({current.leader})", "NOT_LEADER_OR_FOLLOWER"
        )
    if proposal.leader_epoch != current.leader_epoch:
        return unchanged(
            current,
            f"leader epoch {proposal.leader_epoch} is not the current {current.leader_epoch}",
            "FENCED_LEADER_EPOCH",
        )
    if proposal.partition_epoch != current.partition_epoch:
        return unchanged(
            current,
            f"partition epoch {proposal.partition_epoch} is not the current {current.partition_epoch}",
            "INVALID_UPDATE_VERSION",
        )
    if current.leader not in proposal.isr:
        return unchanged(current, "the ISR must contain the leader", "INVALID_REQUEST")
    for replica in proposal.isr:
        if replica not in current.replicas:
            return unchanged(current, f"{replica} is not a replica", "INELIGIBLE_REPLICA")
        if replica not in current.isr and not view_of(views, replica).can_lead:
            return unchanged(
                current, f"{replica} is not live with an online log dir", "INELIGIBLE_REPLICA"
            )
    if proposal.isr == current.isr:
        return unchanged(current, "the ISR is unchanged")
    return Decision(
        current.with_isr(proposal.isr), f"ISR is now {list(proposal.isr)}", changed=True
    )


def validate_isr_write(
    current: PartitionRegistration,
    proposal: PartitionRegistration,
    requester: int,
    *,
    live: AbstractSet[int],
    shutting_down: AbstractSet[int],
) -> Decision:
    """`alter_partition` over what a broker knows of the cluster from ZooKeeper: live brokers
    (registered) and those in a controlled shutdown (KIP-841: never added to an ISR). A
    leader checks its own proposal with it before the conditional write (ZooKeeper mode has
    leaders write their ISR themselves; the write's version check fences the epoch)."""
    views = {
        r: ReplicaView(live=r in live, shutting_down=r in shutting_down) for r in current.replicas
    }
    return alter_partition(current, proposal, requester, views)


@dataclass(frozen=True, slots=True)
class SlowLeader:
    """Since when the leader has been too slow serving follower fetches (None: it is not),
    when it was last seen too slow, and whether the disk was seen slow in this spell: a read
    of records from it that took too long, or a read of it still under way past the budget."""

    slow_since_ms: int | None = None
    last_slow_ms: int | None = None
    on_disk: bool = False


def follower_fetch_served(
    tracking: SlowLeader,
    served_ms: int,
    now_ms: int,
    config: IsrConfig,
    *,
    read_records: bool = True,
) -> SlowLeader:
    """A follower fetch's response took ``served_ms`` from its read to its last byte sent (the
    part a slow disk makes slow; not the long-poll wait). A slower one than
    `follower.fetch.process.time.max.ms` starts a slow spell, from when it began, or continues
    it; ``read_records`` from the disk, it shows the disk slow. One within the budget ends the
    spell if it read records from the disk, or if the disk was not seen slow in the spell
    (one read a loaded CPU stretched). A read that found nothing to return (or only located its
    records for sendfile) says nothing of the disk: reads of a slow dir's partitions at their
    log end came between its slow reads of records and ended each spell those had started, so
    the leader never stayed slow for the lag time (a flaky test)."""
    if served_ms > config.follower_fetch_process_time_max_ms:
        since = tracking.slow_since_ms
        return SlowLeader(
            now_ms - served_ms if since is None else since, now_ms, tracking.on_disk or read_records
        )
    if read_records or not tracking.on_disk:
        return SlowLeader()
    return tracking


def slow_leader_check(
    tracking: SlowLeader,
    oldest_unsent_ms: int | None,
    now_ms: int,
    config: IsrConfig,
    oldest_sending_ms: int | None = None,
) -> tuple[SlowLeader, bool, str]:
    """Beyond KIP-501: a leader whose follower fetches take longer than
    `follower.fetch.process.time.max.ms` to serve, continuously for longer than
    `replica.lag.time.max.ms`, should hand leadership to an in-sync follower. A read of its
    log dir still under way (started at ``oldest_unsent_ms``) counts too, so a disk that hangs
    outright is noticed; a response still being sent (``oldest_sending_ms``) counts only once
    it has hung for the whole lag time: sending thousands of partitions' records takes long on
    a busy machine without any disk being slow (a slow send marks the dirs slow, and their
    reads, timed on the dirs' own threads, tell). A spell in which the disk was not seen slow
    is over once nothing was seen slow for half the lag time (one stretched read, then an idle
    follower whose partitions are not even read, `session_reads`); one in which it was goes on
    until a read of records in time ends it (`follower_fetch_served`): between the slow reads
    a slow leader's partitions may have nothing to read for long (its producers wait on it).
    Returns the new tracking state, whether to resign, and why."""
    limit = config.follower_fetch_process_time_max_ms
    since, last, on_disk = tracking.slow_since_ms, tracking.last_slow_ms, tracking.on_disk
    if oldest_unsent_ms is not None and now_ms - oldest_unsent_ms > limit:
        since = oldest_unsent_ms if since is None else min(since, oldest_unsent_ms)
        last, on_disk = now_ms, True
    if (
        oldest_sending_ms is not None
        and now_ms - oldest_sending_ms > config.replica_lag_time_max_ms
    ):
        since = oldest_sending_ms if since is None else min(since, oldest_sending_ms)
        last = now_ms
    faded = last is None or now_ms - last > config.replica_lag_time_max_ms / 2
    if since is None or (faded and not on_disk):
        return SlowLeader(), False, f"follower fetches are served within {limit} ms"
    slow_for = now_ms - since
    why = f"follower fetches slower than {limit} ms for {slow_for} ms"
    return SlowLeader(since, last, on_disk), slow_for > config.replica_lag_time_max_ms, why
