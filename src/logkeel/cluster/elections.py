"""Leader elections as pure functions, in the manner of the ZooKeeper-era controller's
PartitionStateMachine: each takes a partition's registration and what the controller knows of
its replicas, and returns a `Decision` (new registration, reason, or Kafka's error name).

Eligibility is the same everywhere: a leader must be live, have its log dir online, not be
shutting down, and not have lost acknowledged data (`lost_data`: an empty or wiped log, a new
log dir, a log ending below the acknowledged mark) -- only an operator's forced designation
picks such a replica, or, once every replica has reported and none holds all the data, the
election that leads with the most and reports the loss (`elect_leader`).
"""

from __future__ import annotations

from collections.abc import Iterable

from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    PartitionRegistration,
    Views,
    lost_data,
    lost_for_certain,
    storage_wiped,
    unchanged,
    view_of,
)


def _eligible(views: Views, replica: int, partition_had_data: bool, acked: int = 0) -> bool:
    return view_of(views, replica).can_lead and not storage_wiped(
        views, replica, partition_had_data=partition_had_data, acked=acked
    )


def _trusted(views: Views, replica: int, partition_had_data: bool, acked: int = 0) -> bool:
    """May lead while the partition has a live leader (keeping it, or taking it over in a
    preferred election, a controlled shutdown, a resignation): that leader's ISR vouches for
    its followers, so only a current report's loss counts, not a suspicion on an older one."""
    return view_of(views, replica).can_lead and _in_sync(views, replica, partition_had_data, acked)


def _in_sync(views: Views, replica: int, partition_had_data: bool, acked: int) -> bool:
    """May stay in the ISR: reachable, its dir online, not shutting down, and not lost data by
    a current report. A replica not reported yet, or suspected on an older report, stays:
    only leadership waits for its report."""
    v = view_of(views, replica)
    return (
        v.live and v.log_dir_online and not v.shutting_down and not v.restarted_since_isr
        and not lost_for_certain(views, replica, partition_had_data=partition_had_data,
                                 acked=acked)
    )  # fmt: skip


def _remaining_isr(
    state: PartitionRegistration, views: Views, partition_had_data: bool, acked: int = 0
) -> tuple[int, ...]:
    return tuple(r for r in state.isr if _in_sync(views, r, partition_had_data, acked))


def _lead_alone(state: PartitionRegistration, views: Views, leader: int, why: str) -> Decision:
    """An out-of-sync replica leads with an ISR of itself; the others truncate to its log. The
    loss is always stated (from which offset, and how much each replica is known to hold past
    it): a replica whose last report is stale may lose more than its report shows."""
    truncated = _truncated(views, leader)
    lead = view_of(views, leader).log
    start = -1 if lead is None else lead.log_end_offset
    if start < 0:
        loss = "; replicas truncate to its log, whose end it has not reported"
    else:
        loss = f"; the other replicas truncate every record from offset {start}"
    if truncated:
        loss += f" (past it: {', '.join(f'{r} holds {n}' for r, n in sorted(truncated.items()))})"
    return Decision(
        state.with_leader(leader, (leader,)),
        why + loss,
        changed=True,
        truncated=truncated,
        truncate_from=start,
    )


def _truncated(views: Views, leader: int) -> dict[int, int]:
    """Replicas whose logs reach past the new leader's end, and by how many offsets: what the
    followers will at least lose when they truncate to it."""
    lead = view_of(views, leader).log
    if lead is None:
        return {}
    return {
        r: v.log.log_end_offset - lead.log_end_offset
        for r, v in views.items()
        if r != leader and v.log is not None and v.log.log_end_offset > lead.log_end_offset
    }


def _offline(
    state: PartitionRegistration,
    views: Views,
    partition_had_data: bool,
    why: str,
    acked: int = 0,
) -> Decision:
    """No eligible leader: record the partition as offline. The ISR keeps every member not
    known to have lost data, dead ones included (as KIP-966's eligible leader replicas: nothing
    is acknowledged while no one leads, so each still holds all that was), and keeps its
    members as they are when every one of them lost data (they are still the ones that held
    it last, and rank first when every replica has reported)."""
    isr = tuple(
        r for r in state.isr
        if not lost_for_certain(views, r, partition_had_data=partition_had_data, acked=acked)
    ) or state.isr  # fmt: skip
    if state.offline and isr == state.isr:
        return unchanged(state, f"partition stays offline: {why}", "ELIGIBLE_LEADERS_NOT_AVAILABLE")
    return Decision(state.with_leader(NO_LEADER, isr), f"partition offline: {why}", changed=True)


def _no_eligible(
    state: PartitionRegistration, views: Views, partition_had_data: bool, acked: int
) -> str:
    """Why no in-sync replica may lead, replica by replica, and which others lost data."""

    def why(r: int) -> str:
        v = view_of(views, r)
        lost = lost_data(views, r, partition_had_data=partition_had_data, acked=acked)
        if not v.live:
            return f"{r} is not live"
        if not v.log_dir_online:
            return f"{r}'s log dir is offline"
        if v.shutting_down:
            return f"{r} is shutting down"
        if v.awaiting_report:
            return f"{r} has not reported its log"
        return lost or f"{r} is not eligible"

    reasons = [why(r) for r in state.isr]
    others = [
        lost for r in state.replicas if r not in state.isr
        and (lost := lost_data(views, r, partition_had_data=partition_had_data, acked=acked))
    ]  # fmt: skip
    waiting = [r for r in state.isr if not view_of(views, r).live]
    text = f"no eligible in-sync replica ({'; '.join(reasons)})"
    if others:
        text += f"; {'; '.join(others)}"
    if waiting:
        text += f"; waiting for in-sync replicas {waiting}"
    return text


def _current(views: Views, replica: int) -> bool:
    """Live and reported against the registration being decided on."""
    v = view_of(views, replica)
    return v.live and v.log is not None and v.log.current


def _without_full_copy(
    state: PartitionRegistration,
    views: Views,
    *,
    unclean_allowed: bool,
    partition_had_data: bool,
    acked: int,
) -> Decision | None:
    """No in-sync replica may lead and some lost data: wait while any replica may still
    return with it (dead, or not reported on the leaderless partition); once every replica
    has reported, the one holding the most leads and the loss is reported, as after an unclean
    election. Without unclean elections that choice stays with the ISR: an out-of-sync
    replica holding more waits for an operator (`logkeel elect --replica`); with them, the
    unclean election does not wait for replicas that may return. None when no in-sync replica
    lost data or an unclean election decides."""

    def lost(r: int) -> str | None:
        return lost_data(views, r, partition_had_data=partition_had_data, acked=acked)

    suspects = [r for r in state.isr if view_of(views, r).can_lead and lost(r) is not None]
    if not suspects:
        return None
    reasons = "; ".join(str(lost(r)) for r in suspects)
    stale = [r for r in suspects if not _current(views, r)]
    if stale:
        return _offline(
            state, views, partition_had_data,
            f"{reasons} (on an earlier report: deciding on reports against the leaderless "
            "partition)", acked,
        )  # fmt: skip
    waiting = [r for r in state.replicas if not _current(views, r)]
    if waiting:
        if unclean_allowed:
            return None  # availability first: the unclean election ranks those reported
        return _offline(
            state,
            views,
            partition_had_data,
            f"{reasons}; waiting for replicas {waiting}, which may hold the acknowledged data",
            acked,
        )
    order = {r: i for i, r in enumerate(state.replicas)}
    ranked = sorted(
        (views[r].log.position, -order[r], r)  # type: ignore[union-attr]
        for r in state.replicas if view_of(views, r).can_lead
    )  # fmt: skip
    position, _, best = ranked[-1]
    if best not in state.isr and not unclean_allowed:
        return _offline(
            state, views, partition_had_data,
            f"{reasons}; out-of-sync replica {best} holds the most {position}: an operator "
            f"may designate it (logkeel elect --replica {best})", acked,
        )  # fmt: skip
    return _lead_alone(
        state, views, best,
        f"no replica holds all acknowledged data ({reasons}): {best} holds the most {position}",
    )  # fmt: skip


def elect_leader(
    state: PartitionRegistration,
    views: Views,
    *,
    unclean_allowed: bool = False,
    partition_had_data: bool = False,
    acked: int = 0,
    now_ms: int = 0,
    unclean_wait_started_ms: int | None = None,
    unclean_wait_ms: int = 0,
) -> Decision:
    """Leader election for a partition whose leader may be gone (broker death, log dir failure,
    broker start-up of an offline partition's replica).

    Clean: the first replica in assignment order that is in the ISR and eligible. When an
    in-sync replica lost acknowledged data (`lost_data`), see `_without_full_copy`. Unclean
    (only when allowed and no clean candidate): the eligible replica with the highest (last
    leader epoch, log end offset), ties going to assignment order -- never simply the first
    live one. Before an unclean choice it waits up to ``unclean_wait_ms`` from
    ``unclean_wait_started_ms`` for every replica to report its log (as KIP-966's unclean
    recovery does), ending early once all have reported; meanwhile the decision asks to be
    retried at ``retry_at_ms``. ``acked`` is the acknowledged mark of every report known.
    """
    if (
        state.leader != NO_LEADER
        and state.leader in state.isr
        and not view_of(views, state.leader).restarted
        and _trusted(views, state.leader, partition_had_data, acked)
    ):
        return unchanged(state, f"leader {state.leader} is eligible", "ELECTION_NOT_NEEDED")

    for replica in state.replicas:
        if replica in state.isr and _eligible(views, replica, partition_had_data, acked):
            isr = _remaining_isr(state, views, partition_had_data, acked)
            return Decision(
                state.with_leader(replica, isr),
                f"clean election: {replica} is the first eligible in-sync replica",
                changed=True,
            )

    decided = _without_full_copy(
        state,
        views,
        unclean_allowed=unclean_allowed,
        partition_had_data=partition_had_data,
        acked=acked,
    )
    if decided is not None:
        return decided

    if not unclean_allowed:
        return _offline(
            state, views, partition_had_data, _no_eligible(state, views, partition_had_data, acked),
            acked,
        )  # fmt: skip

    unreported = [r for r in state.replicas if view_of(views, r).log is None]
    if unreported and unclean_wait_ms > 0:
        started = now_ms if unclean_wait_started_ms is None else unclean_wait_started_ms
        if now_ms < started + unclean_wait_ms:
            return Decision(
                state,
                f"unclean election waits for replicas {unreported} to report their logs",
                retry_at_ms=started + unclean_wait_ms,
            )

    order = {r: i for i, r in enumerate(state.replicas)}
    ranked = [
        (log.position, -order[r], r)
        for r in state.replicas
        if view_of(views, r).can_lead
        and (log := view_of(views, r).log) is not None
        and log.current
        # Every candidate lacks acknowledged records here: only the wiped are left out.
        and not lost_data(views, r, partition_had_data=partition_had_data, below_mark=False)
    ]
    if not ranked:
        return _offline(
            state, views, partition_had_data, "no eligible replica has reported its log", acked
        )
    position, _, chosen = max(ranked)
    return _lead_alone(
        state,
        views,
        chosen,
        f"unclean election: {chosen} has the highest (last epoch, log end offset) {position}",
    )


def on_replicas_offline(
    state: PartitionRegistration,
    views: Views,
    *,
    unclean_allowed: bool = False,
    partition_had_data: bool = False,
    acked: int = 0,
    now_ms: int = 0,
    unclean_wait_started_ms: int | None = None,
    unclean_wait_ms: int = 0,
) -> Decision:
    """Brokers died or log dirs failed (their views say so): elect a new leader if the leader is
    affected (`elect_leader`, with its unclean wait), otherwise drop the affected followers from
    the ISR (it may shrink to the leader alone: min.insync.replicas only gates acks=all
    produce, never the ISR)."""
    if (
        state.leader == NO_LEADER
        or view_of(views, state.leader).restarted
        or not _trusted(views, state.leader, partition_had_data, acked)
    ):
        return elect_leader(
            state,
            views,
            unclean_allowed=unclean_allowed,
            partition_had_data=partition_had_data,
            acked=acked,
            now_ms=now_ms,
            unclean_wait_started_ms=unclean_wait_started_ms,
            unclean_wait_ms=unclean_wait_ms,
        )
    isr = _remaining_isr(state, views, partition_had_data, acked)
    if isr == state.isr:
        return unchanged(state, "every in-sync replica is still eligible")
    gone = [r for r in state.isr if r not in isr]
    bounced = [r for r in gone if view_of(views, r).restarted_since_isr]
    why = "; ".join(
        f"replicas {rs} left the ISR: {what}"
        for rs, what in (
            ([r for r in gone if r not in bounced], "offline"),
            (bounced, "restarted since the ISR was written"),
        )
        if rs
    )
    return Decision(state.with_isr(isr), why, changed=True)


def preferred_election(
    state: PartitionRegistration, views: Views, *, partition_had_data: bool = False, acked: int = 0
) -> Decision:
    """Move leadership back to the first replica in the assignment, if it is in sync."""
    preferred = state.preferred_leader
    if state.leader == preferred:
        return unchanged(
            state, f"preferred replica {preferred} already leads", "ELECTION_NOT_NEEDED"
        )
    if preferred not in state.isr:
        return unchanged(
            state,
            f"preferred replica {preferred} is not in the ISR",
            "PREFERRED_LEADER_NOT_AVAILABLE",
        )
    if not _trusted(views, preferred, partition_had_data, acked):
        return unchanged(
            state,
            f"preferred replica {preferred} is not eligible",
            "PREFERRED_LEADER_NOT_AVAILABLE",
        )
    return Decision(
        state.with_leader(preferred, state.isr),
        f"preferred election: {preferred} leads again",
        changed=True,
    )


def controlled_shutdown(
    state: PartitionRegistration,
    views: Views,
    broker: int,
    *,
    partition_had_data: bool = False,
    acked: int = 0,
) -> Decision:
    """A broker asks to shut down: leadership moves to another eligible in-sync replica first,
    and the broker leaves the ISR. When it is the only in-sync replica its leadership stays (the
    broker retries, and finally shuts down uncleanly as Kafka does)."""
    if broker not in state.replicas:
        return unchanged(state, f"broker {broker} holds no replica")
    isr = tuple(r for r in state.isr if r != broker)
    if state.leader != broker:
        if broker not in state.isr:
            return unchanged(state, f"broker {broker} is a follower outside the ISR")
        return Decision(
            state.with_isr(isr), f"shutting-down follower {broker} leaves the ISR", changed=True
        )
    for replica in state.replicas:
        if (
            replica != broker
            and replica in isr
            and _trusted(views, replica, partition_had_data, acked)
        ):
            return Decision(
                state.with_leader(replica, isr),
                f"controlled shutdown of {broker}: {replica} leads",
                changed=True,
            )
    return unchanged(
        state,
        f"controlled shutdown of {broker}: no other eligible in-sync replica",
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    )


def designated_election(
    state: PartitionRegistration,
    views: Views,
    replica: int,
    *,
    force: bool = False,
    partition_had_data: bool = False,
    acked: int = 0,
) -> Decision:
    """An operator makes a chosen replica leader (`logkeel elect --replica`), in or out of the ISR.

    Refused, with the reason, when the replica is not assigned, not live, its log dir is offline,
    or it is shutting down; and -- unless ``force`` -- when its storage was wiped while others
    hold data. Out of the ISR it leads alone and the others truncate to its log.
    """
    if replica not in state.replicas:
        return unchanged(
            state, f"{replica} is not a replica of the partition", "INVALID_REPLICA_ASSIGNMENT"
        )
    view = view_of(views, replica)
    refusal = None
    if not view.live:
        refusal = f"broker {replica} is not live"
    elif not view.log_dir_online:
        refusal = f"the log dir of replica {replica} is offline"
    elif view.shutting_down:
        refusal = f"broker {replica} is shutting down"
    elif not force and view.log is None:
        refusal = (
            f"replica {replica} has not reported its log; force the election to accept "
            "whatever it holds"
        )
    elif not force and (
        # Out of the ISR it lacks acknowledged records by definition (the loss is reported);
        # only a wiped one, or an in-sync one short of them, needs the operator's force.
        lost := lost_data(
            views,
            replica,
            partition_had_data=partition_had_data,
            acked=acked,
            below_mark=replica in state.isr,
        )  # fmt: skip
    ):
        refusal = f"{lost}: it lost acknowledged data; force the election to accept the loss"
    if refusal is not None:
        return unchanged(state, refusal, "ELIGIBLE_LEADERS_NOT_AVAILABLE")
    if state.leader == replica:
        return unchanged(state, f"{replica} already leads", "ELECTION_NOT_NEEDED")
    if replica in state.isr:
        isr: Iterable[int] = (replica,) + tuple(
            r for r in _remaining_isr(state, views, partition_had_data, acked) if r != replica
        )
        return Decision(
            state.with_leader(replica, isr),
            f"designated election: in-sync {replica} leads",
            changed=True,
        )
    return _lead_alone(
        state, views, replica, f"designated election: out-of-sync {replica} leads alone"
    )


def resign_leadership(
    state: PartitionRegistration,
    views: Views,
    leader: int,
    *,
    partition_had_data: bool = False,
    acked: int = 0,
) -> Decision:
    """A leader too slow to serve its followers (KIP-501, beyond the KIP) hands leadership to
    the first other eligible in-sync replica; it stays in the ISR (its log is complete) and
    gets leadership back only through a preferred election once healthy."""
    if state.leader != leader:
        return unchanged(
            state, f"{leader} does not lead (leader {state.leader})", "NOT_LEADER_OR_FOLLOWER"
        )
    for replica in state.replicas:
        if (
            replica != leader
            and replica in state.isr
            and _trusted(views, replica, partition_had_data, acked)
        ):
            return Decision(
                state.with_leader(replica, state.isr),
                f"slow leader {leader} resigned: {replica} leads",
                changed=True,
            )
    return unchanged(
        state,
        f"slow leader {leader}: no other eligible in-sync replica",
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    )
