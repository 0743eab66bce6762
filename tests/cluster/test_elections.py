from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logkeel.cluster.elections import (
    controlled_shutdown,
    designated_election,
    elect_leader,
    on_replicas_offline,
    preferred_election,
)
from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    PartitionRegistration,
    ReplicaLog,
    ReplicaView,
    storage_wiped,
)

LIVE = ReplicaView(live=True)
DEAD = ReplicaView(live=False)


def reg(replicas=(1, 2, 3), leader=1, isr=(1, 2, 3), epoch=5, pepoch=7) -> PartitionRegistration:
    return PartitionRegistration(tuple(replicas), leader, epoch, tuple(isr), pepoch)


def live(epoch: int, leo: int, **kw) -> ReplicaView:
    return ReplicaView(live=True, log=ReplicaLog(epoch, leo), **kw)


# ---- clean elections -----------------------------------------------------------------------


def test_eligible_leader_needs_no_election() -> None:
    d = elect_leader(reg(), {1: LIVE, 2: LIVE, 3: LIVE})
    assert not d.changed and d.error == "ELECTION_NOT_NEEDED"


def test_clean_election_picks_first_live_isr_replica_in_assignment_order() -> None:
    d = elect_leader(reg(replicas=(1, 3, 2), isr=(1, 2, 3)), {1: DEAD, 2: LIVE, 3: LIVE})
    assert d.changed and d.state.leader == 3
    assert d.state.isr == (2, 3)
    assert d.state.leader_epoch == 6 and d.state.partition_epoch == 8
    assert "clean" in d.reason


def test_clean_election_skips_live_replica_outside_isr() -> None:
    d = elect_leader(reg(isr=(1, 3)), {1: DEAD, 2: LIVE, 3: LIVE})
    assert d.state.leader == 3


def test_leader_whose_log_dir_failed_is_replaced() -> None:
    d = elect_leader(reg(), {1: ReplicaView(live=True, log_dir_online=False), 2: LIVE, 3: LIVE})
    assert d.state.leader == 2
    assert 1 not in d.state.isr


def test_no_live_isr_without_unclean_goes_offline_keeping_last_isr_member() -> None:
    d = elect_leader(reg(isr=(1,)), {1: DEAD, 2: LIVE, 3: LIVE})
    assert d.changed and d.state.offline and d.state.leader == NO_LEADER
    assert d.state.isr == (1,)
    again = elect_leader(d.state, {1: DEAD, 2: LIVE, 3: LIVE})
    assert not again.changed and again.error == "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    back = elect_leader(d.state, {1: LIVE, 2: LIVE, 3: LIVE})
    assert back.state.leader == 1 and back.state.leader_epoch > d.state.leader_epoch


# ---- unclean elections ---------------------------------------------------------------------


def test_unclean_picks_highest_epoch_then_longest_log_not_first_live() -> None:
    views = {1: DEAD, 2: live(3, 900), 3: live(4, 100)}
    d = elect_leader(reg(isr=(1,)), views, unclean_allowed=True)
    assert d.state.leader == 3 and d.state.isr == (3,)
    assert d.truncated == {2: 800} and d.truncate_from == 100
    assert "unclean" in d.reason and "truncate" in d.reason

    same_epoch = {1: DEAD, 2: live(4, 100), 3: live(4, 900)}
    assert elect_leader(reg(isr=(1,)), same_epoch, unclean_allowed=True).state.leader == 3


def test_unclean_ties_go_to_assignment_order() -> None:
    views = {1: DEAD, 2: live(4, 100), 3: live(4, 100)}
    assert (
        elect_leader(reg(replicas=(1, 3, 2), isr=(1,)), views, unclean_allowed=True).state.leader
        == 3
    )


def test_unclean_waits_bounded_for_unreported_replicas() -> None:
    def unclean_at(now_ms: int, views: dict[int, ReplicaView]) -> Decision:
        return elect_leader(
            reg(isr=(1,)),
            views,
            unclean_allowed=True,
            now_ms=now_ms,
            unclean_wait_started_ms=1000,
            unclean_wait_ms=3000,
        )

    views = {1: DEAD, 2: live(4, 100), 3: LIVE}  # 3 is up but has not reported its log yet
    d = unclean_at(1000, views)
    assert not d.changed and d.retry_at_ms == 4000 and "3" in d.reason
    # Everyone reported (1 is down but its last report stands): no need to wait any longer.
    reported = {1: ReplicaView(live=False, log=ReplicaLog(4, 50)), 2: live(4, 100), 3: live(4, 500)}
    early = unclean_at(1500, reported)
    assert early.changed and early.state.leader == 3
    assert unclean_at(4000, views).state.leader == 2


def test_wiped_replica_is_never_elected_even_uncleanly_or_alone() -> None:
    wiped = live(-1, 0)
    d = elect_leader(
        reg(isr=(1, 2)), {1: DEAD, 2: wiped, 3: DEAD}, unclean_allowed=True, partition_had_data=True
    )
    assert d.state.offline
    d2 = elect_leader(reg(isr=(1, 2)), {1: DEAD, 2: wiped, 3: live(3, 40)}, unclean_allowed=True)
    assert d2.state.leader == 3
    new_dir = ReplicaView(live=True, log=ReplicaLog(5, 10, dir_id_changed=True))
    assert storage_wiped({2: new_dir}, 2)
    assert elect_leader(reg(isr=(2,)), {1: DEAD, 2: new_dir, 3: DEAD}).state.offline


def test_empty_log_is_not_wiped_when_nobody_had_data() -> None:
    views = {1: live(-1, 0), 2: live(-1, 0)}
    assert not storage_wiped(views, 1)
    assert elect_leader(reg(replicas=(1, 2), leader=NO_LEADER, isr=(1, 2)), views).state.leader == 1


# ---- replicas going offline ----------------------------------------------------------------


def test_follower_going_offline_leaves_isr_and_isr_may_shrink_to_leader_alone() -> None:
    d = on_replicas_offline(
        reg(), {1: LIVE, 2: DEAD, 3: ReplicaView(live=True, log_dir_online=False)}
    )
    assert d.state.leader == 1 and d.state.isr == (1,)
    assert d.state.leader_epoch == 5 and d.state.partition_epoch == 8


def test_leader_going_offline_triggers_an_election() -> None:
    d = on_replicas_offline(reg(), {1: DEAD, 2: LIVE, 3: LIVE})
    assert d.state.leader == 2


# ---- preferred, controlled shutdown, designated -------------------------------------------


def test_preferred_election() -> None:
    views = {1: LIVE, 2: LIVE, 3: LIVE}
    assert preferred_election(reg(), views).error == "ELECTION_NOT_NEEDED"
    d = preferred_election(reg(leader=2), views)
    assert d.state.leader == 1 and d.state.leader_epoch == 6
    assert (
        preferred_election(reg(leader=2, isr=(2, 3)), views).error
        == "PREFERRED_LEADER_NOT_AVAILABLE"
    )
    assert (
        preferred_election(reg(leader=2), {**views, 1: DEAD}).error
        == "PREFERRED_LEADER_NOT_AVAILABLE"
    )


def test_controlled_shutdown_moves_leadership_and_leaves_isr() -> None:
    views = {1: ReplicaView(live=True, shutting_down=True), 2: LIVE, 3: LIVE}
    d = controlled_shutdown(reg(), views, 1)
    assert d.state.leader == 2 and d.state.isr == (2, 3)
    f = controlled_shutdown(reg(), {**views, 2: ReplicaView(live=True, shutting_down=True)}, 2)
    assert f.state.leader == 1 and f.state.isr == (1, 3) and f.state.leader_epoch == 5
    alone = controlled_shutdown(reg(isr=(1,)), views, 1)
    assert not alone.changed and alone.error == "ELIGIBLE_LEADERS_NOT_AVAILABLE"


def test_designated_election_refusals_name_the_reason() -> None:
    views = {1: live(5, 100), 2: DEAD, 3: ReplicaView(live=True, log_dir_online=False)}
    assert designated_election(reg(), views, 9).error == "INVALID_REPLICA_ASSIGNMENT"
    dead = designated_election(reg(), views, 2)
    assert dead.error == "ELIGIBLE_LEADERS_NOT_AVAILABLE" and "not live" in dead.reason
    assert "log dir" in designated_election(reg(), views, 3).reason
    assert designated_election(reg(), views, 1).error == "ELECTION_NOT_NEEDED"


def test_designated_election_of_out_of_sync_and_wiped_replicas() -> None:
    views = {1: live(5, 100), 2: live(3, 40), 3: live(-1, 0)}
    d = designated_election(reg(isr=(1,)), views, 2)
    assert d.state.leader == 2 and d.state.isr == (2,) and d.truncated == {1: 60}
    refused = designated_election(reg(isr=(1,)), views, 3)
    assert refused.error and "lost acknowledged data" in refused.reason and not refused.changed
    forced = designated_election(reg(isr=(1,)), views, 3, force=True)
    assert forced.state.leader == 3 and forced.truncated == {1: 100, 2: 40}


# ---- properties ----------------------------------------------------------------------------

ids = st.integers(min_value=1, max_value=6)


@st.composite
def scenarios(draw):
    replicas = tuple(draw(st.lists(ids, min_size=1, max_size=5, unique=True)))
    isr = tuple(r for r in replicas if draw(st.booleans()))
    leader = draw(st.sampled_from((NO_LEADER, *isr))) if isr else NO_LEADER
    views = {}
    for r in replicas:
        log = draw(
            st.none()
            | st.builds(ReplicaLog, st.integers(-1, 8), st.integers(0, 1000), st.booleans())
        )
        views[r] = ReplicaView(draw(st.booleans()), draw(st.booleans()), draw(st.booleans()), log)
    state = PartitionRegistration(
        replicas, leader, draw(st.integers(0, 50)), isr, draw(st.integers(0, 50))
    )
    return state, views, draw(st.booleans()), draw(st.booleans())


@given(scenarios())
def test_elected_leader_is_eligible_and_epochs_move_on_leader_change(scenario) -> None:
    state, views, unclean, had_data = scenario
    d = elect_leader(state, views, unclean_allowed=unclean, partition_had_data=had_data)
    new = d.state
    if new.leader != NO_LEADER:
        assert views[new.leader].can_lead
        if storage_wiped(views, new.leader, partition_had_data=had_data):
            # Only once every replica reported and none holds all the data; the loss is told.
            assert all(v.live and v.log is not None for v in views.values())
            assert d.truncate_from is not None and "holds the most" in d.reason
        assert new.leader in new.isr
    if new.leader != state.leader:
        assert new.leader_epoch > state.leader_epoch and new.partition_epoch > state.partition_epoch
    if d.changed and not unclean:
        assert new.leader == NO_LEADER or new.leader in state.isr
    assert set(new.isr) <= set(state.replicas)
    if d.changed and "unclean" in d.reason:
        chosen = views[new.leader].log.position
        for r, v in views.items():
            if v.can_lead and v.log and not storage_wiped(views, r, partition_had_data=had_data):
                assert v.log.position <= chosen


@given(scenarios(), ids)
def test_controlled_shutdown_never_elects_the_broker_going_down(scenario, broker) -> None:
    state, views, _, had_data = scenario
    d = controlled_shutdown(state, views, broker, partition_had_data=had_data)
    if d.changed:
        assert broker not in d.state.isr
        if state.leader == broker:
            assert d.state.leader != broker and d.state.leader in state.isr
            assert d.state.leader_epoch > state.leader_epoch


def test_unclean_and_out_of_sync_designated_elections_are_not_refused_for_lacking_acked_records() -> (
    None
):
    """Every candidate of an unclean election, and any out-of-sync replica an operator
    designates, lacks acknowledged records by definition (the loss is reported): only a wiped
    replica is left out there. An in-sync replica short of them is refused without force."""
    views = {
        1: ReplicaView(live=False, log=ReplicaLog(5, 400, high_watermark=400, current=False)),
        2: ReplicaView(live=True, log=ReplicaLog(5, 300, high_watermark=300)),
        3: ReplicaView(live=True, log=ReplicaLog(5, 200, high_watermark=200)),
    }
    state = reg(leader=NO_LEADER, isr=(1,))
    d = elect_leader(state, views, unclean_allowed=True, partition_had_data=True, acked=400)
    assert d.state.leader == 2 and d.truncate_from == 300, d.reason
    d = designated_election(state, views, 3, partition_had_data=True, acked=400)
    assert d.state.leader == 3 and d.truncate_from == 200, d.reason
    short_in_sync = designated_election(
        reg(isr=(1, 3)), views, 3, partition_had_data=True, acked=400
    )
    assert short_in_sync.error and "below the acknowledged offset 400" in short_in_sync.reason
