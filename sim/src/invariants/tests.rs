//! Each checker fires on a deliberately broken input, and stays quiet on the correct counterpart
//! (so a checker that always fires would fail too).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::config::Config;
use convoke_membership::gossip::{Gossip, WallMillis};
use convoke_membership::member::{Member, MemberStatus, UpNumber};
use convoke_membership::reachability::Reachability;
use convoke_membership::vclock::VectorClock;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Uid, UniqueAddress};

use super::*;
use MemberStatus::*;

fn node(port: u16, uid: u64) -> UniqueAddress {
    let address = Address::new("convoke", crate::processes::HOST, port).expect("valid");
    UniqueAddress::new(address, Uid::new(uid).expect("nonzero"))
}

fn a() -> UniqueAddress {
    node(10_000, 1)
}
fn b() -> UniqueAddress {
    node(10_001, 2)
}
fn c() -> UniqueAddress {
    node(10_002, 3)
}
fn d() -> UniqueAddress {
    node(10_003, 4)
}

fn member(n: &UniqueAddress, status: MemberStatus, up: u32) -> Member {
    let roles = BTreeSet::from(["dc-default".to_owned()]);
    let up = if up == 0 { UpNumber::UNASSIGNED } else { UpNumber(up) };
    Member::from_parts(n.clone(), up, status, roles, AppVersion::default())
}

/// A gossip with these members, seen by `seen`, unreachability `(observer, subject)`, the clock
/// `version` and tombstones.
fn gossip(
    members: &[(UniqueAddress, MemberStatus)],
    seen: &[UniqueAddress],
    unreachable: &[(UniqueAddress, UniqueAddress)],
    version: &[(UniqueAddress, u64)],
    tombstones: &[UniqueAddress],
) -> Gossip {
    let mut r = Reachability::new();
    for (o, s) in unreachable {
        r.unreachable(o, s);
    }
    let members = members.iter().enumerate().map(|(i, (n, s))| {
        let up = if matches!(s, Joining | WeaklyUp) { 0 } else { u32::try_from(i).unwrap() + 1 };
        member(n, *s, up)
    });
    Gossip::from_parts(
        members,
        seen.iter().cloned().collect(),
        r,
        VectorClock::from_entries(version.iter().cloned()),
        tombstones.iter().map(|n| (n.clone(), WallMillis(1))).collect::<BTreeMap<_, _>>(),
    )
}

/// Three Up members, seen by all, nothing unreachable, clock `{a: v}`.
fn all_up(v: u64) -> Gossip {
    gossip(&[(a(), Up), (b(), Up), (c(), Up)], &[a(), b(), c()], &[], &[(a(), v)], &[])
}

struct Step {
    cause: Cause,
    before: Gossip,
    after: Gossip,
    converged: bool,
    leader: Option<UniqueAddress>,
    confirmed: BTreeSet<UniqueAddress>,
    config: Config,
    self_node: UniqueAddress,
    decisions: Vec<SbrDecision>,
    leader_moved: bool,
}

impl Step {
    fn new(cause: Cause, before: Gossip, after: Gossip) -> Self {
        Self {
            cause,
            before,
            after,
            converged: false,
            leader: None,
            confirmed: BTreeSet::new(),
            config: Config::default(),
            self_node: a(),
            decisions: Vec::new(),
            leader_moved: false,
        }
    }

    fn by(mut self, n: UniqueAddress) -> Self {
        self.self_node = n;
        self
    }

    fn converged(mut self, leader: Option<UniqueAddress>) -> Self {
        self.converged = true;
        self.leader = leader;
        self
    }

    fn check(&self, checker: &mut dyn Invariant) -> Result<(), String> {
        let obs = Observation {
            step: 1,
            now: Duration::from_secs(1),
            slot: 0,
            self_node: &self.self_node,
            cause: &self.cause,
            before: &self.before,
            after: &self.after,
            converged: self.converged,
            leader: self.leader.as_ref(),
            exiting_confirmed: &self.confirmed,
            config: &self.config,
            decisions: &self.decisions,
            leader_moved: self.leader_moved,
        };
        checker.check_step(&obs)
    }
}

fn received_from(from: UniqueAddress, g: &Gossip) -> Cause {
    Cause::Message(Delivered::Gossip {
        from,
        to: a(),
        gossip: Arc::new(g.clone()),
        queued_for: Duration::ZERO,
    })
}

#[test]
fn s5_fires_when_a_member_seen_down_comes_back_up() {
    let mut s5 = NoResurrection::default();
    let up = all_up(1);
    let b_down = gossip(&[(a(), Up), (b(), Down), (c(), Up)], &[a()], &[], &[(a(), 2)], &[]);
    assert_eq!(Step::new(Cause::Timer, up.clone(), b_down.clone()).check(&mut s5), Ok(()));
    let back = all_up(3);
    let err = Step::new(Cause::Timer, b_down, back).check(&mut s5).unwrap_err();
    assert!(err.contains("Down or removed"), "{err}");
}

#[test]
fn s5_fires_when_two_incarnations_of_one_address_are_up() {
    let mut s5 = NoResurrection::default();
    let b2 = node(10_001, 22);
    let both = gossip(&[(a(), Up), (b(), Up), (b2, Up)], &[a()], &[], &[(a(), 2)], &[]);
    let err = Step::new(Cause::Timer, all_up(1), both).check(&mut s5).unwrap_err();
    assert!(err.contains("two incarnations"), "{err}");
    let mut s5 = NoResurrection::default();
    let joining =
        gossip(&[(a(), Up), (b(), Up), (node(10_001, 22), Joining)], &[a()], &[], &[], &[]);
    assert_eq!(Step::new(Cause::Timer, all_up(1), joining).check(&mut s5), Ok(()));
}

#[test]
fn s6_fires_on_a_transition_outside_the_graph() {
    let down = gossip(&[(a(), Up), (b(), Down), (c(), Up)], &[a()], &[], &[(a(), 2)], &[]);
    let leaving = gossip(&[(a(), Up), (b(), Leaving), (c(), Up)], &[a()], &[], &[(a(), 3)], &[]);
    let err = Step::new(Cause::Timer, down.clone(), leaving).check(&mut AllowedTransitions);
    assert!(err.unwrap_err().contains("Down -> Leaving"));
    let exiting = gossip(&[(a(), Up), (b(), Exiting), (c(), Up)], &[a()], &[], &[(a(), 3)], &[]);
    let up_to_exiting = Step::new(Cause::Timer, all_up(1), exiting).check(&mut AllowedTransitions);
    assert_eq!(up_to_exiting, Ok(()), "Up reaches Exiting through Leaving");
    assert_eq!(Step::new(Cause::Timer, all_up(1), down).check(&mut AllowedTransitions), Ok(()));
}

#[test]
fn s7_fires_on_a_seen_node_that_is_not_a_member() {
    let bad = gossip(&[(a(), Up), (b(), Up)], &[a(), c()], &[], &[(a(), 2)], &[]);
    let err = Step::new(Cause::Timer, all_up(1), bad).check(&mut GossipStructure).unwrap_err();
    assert!(err.contains("seen node"), "{err}");
    assert_eq!(Step::new(Cause::Timer, all_up(1), all_up(2)).check(&mut GossipStructure), Ok(()));
}

#[test]
fn s7_fires_on_a_tombstoned_member_and_a_clock_entry_for_a_removed_node() {
    let tombstoned = gossip(&[(a(), Up), (b(), Up)], &[a()], &[], &[(a(), 2)], &[b()]);
    let err = Step::new(Cause::Timer, all_up(1), tombstoned).check(&mut GossipStructure);
    assert!(err.unwrap_err().contains("also tombstoned"));
    let stale_clock = gossip(&[(a(), Up)], &[a()], &[], &[(a(), 2), (b(), 1)], &[b()]);
    let err = Step::new(Cause::Timer, all_up(1), stale_clock).check(&mut GossipStructure);
    assert!(err.unwrap_err().contains("vector clock"));
}

#[test]
fn s8_fires_when_a_leader_moves_a_joiner_up_without_convergence() {
    let before = gossip(&[(a(), Up), (b(), Up), (c(), Joining)], &[a(), c()], &[], &[], &[]);
    let after = gossip(&[(a(), Up), (b(), Up), (c(), Up)], &[a()], &[], &[(a(), 1)], &[]);
    let err =
        Step::new(Cause::Timer, before, after.clone()).check(&mut LeaderActionsNeedConvergence);
    assert!(err.unwrap_err().contains("without convergence"));
    let seen = gossip(&[(a(), Up), (b(), Up), (c(), Joining)], &[a(), b()], &[], &[], &[]);
    let ok = Step::new(Cause::Timer, seen.clone(), after.clone());
    assert_eq!(ok.check(&mut LeaderActionsNeedConvergence), Ok(()));
    // The same step by a node that is not the leader.
    let err = Step::new(Cause::Timer, seen, after).by(b()).check(&mut LeaderActionsNeedConvergence);
    assert!(err.unwrap_err().contains("the leader of that gossip is"));
}

#[test]
fn s9_fires_when_the_core_reports_convergence_with_an_unreachable_member() {
    let g = gossip(&[(a(), Up), (b(), Up), (c(), Up)], &[a(), b(), c()], &[(b(), c())], &[], &[]);
    let step = Step::new(Cause::Timer, all_up(1), g.clone()).converged(Some(a()));
    let err = step.check(&mut NoConvergenceWhileUnreachable).unwrap_err();
    assert!(err.contains("is unreachable"), "{err}");
    let not_claimed = Step::new(Cause::Timer, all_up(1), g);
    assert_eq!(not_claimed.check(&mut NoConvergenceWhileUnreachable), Ok(()));
    let downed = gossip(&[(a(), Up), (b(), Up), (c(), Down)], &[a(), b()], &[(b(), c())], &[], &[]);
    let step = Step::new(Cause::Timer, all_up(1), downed).converged(Some(a()));
    assert_eq!(step.check(&mut NoConvergenceWhileUnreachable), Ok(()));
}

#[test]
fn s10_fires_when_two_holders_of_one_converged_gossip_name_different_leaders() {
    let mut s10 = SingleLeader::default();
    let first = Step::new(Cause::Timer, all_up(1), all_up(2)).converged(Some(a()));
    assert_eq!(first.check(&mut s10), Ok(()));
    let agrees = Step::new(Cause::Timer, all_up(1), all_up(2)).by(b()).converged(Some(a()));
    assert_eq!(agrees.check(&mut s10), Ok(()));
    let other = Step::new(Cause::Timer, all_up(1), all_up(2)).by(c()).converged(Some(b()));
    assert!(other.check(&mut s10).unwrap_err().contains("compute leaders"));
}

#[test]
fn s10_lets_the_leadership_of_a_leader_that_confirmed_its_exit_pass_on() {
    let mut s10 = SingleLeader::default();
    let leaver = Step::new(Cause::Timer, all_up(1), all_up(2)).converged(Some(a()));
    assert_eq!(leaver.check(&mut s10), Ok(()));
    let mut next =
        Step::new(Cause::Message(Delivered::Other("ExitingConfirmed")), all_up(2), all_up(2))
            .by(b())
            .converged(Some(b()));
    next.confirmed.insert(a());
    assert_eq!(next.check(&mut s10), Ok(()));
    let later = Step::new(Cause::Timer, all_up(1), all_up(2)).by(c()).converged(Some(b()));
    assert_eq!(later.check(&mut s10), Ok(()), "the record passed to the new leader");
    let clash = Step::new(Cause::Timer, all_up(1), all_up(2)).by(c()).converged(Some(c()));
    assert!(clash.check(&mut s10).unwrap_err().contains("compute leaders"));
}

#[test]
fn s11_fires_when_a_clock_entry_goes_back() {
    let mut s11 = MonotonicVersions::default();
    let err = Step::new(Cause::Timer, all_up(5), all_up(4)).check(&mut s11).unwrap_err();
    assert!(err.contains("went back from 5 to 4"), "{err}");
    assert_eq!(Step::new(Cause::Timer, all_up(4), all_up(5)).check(&mut s11), Ok(()));
}

#[test]
fn s11_fires_when_one_clock_carries_two_different_states() {
    let mut s11 = MonotonicVersions::default();
    assert_eq!(Step::new(Cause::Timer, all_up(1), all_up(2)).check(&mut s11), Ok(()));
    let same_clock_b_down =
        gossip(&[(a(), Up), (b(), Down), (c(), Up)], &[a()], &[], &[(a(), 2)], &[]);
    let err = Step::new(Cause::Timer, all_up(1), same_clock_b_down).by(b()).check(&mut s11);
    assert!(err.unwrap_err().contains("same vector clock"));
}

#[test]
fn s12_fires_when_an_up_member_vanishes_without_a_tombstone() {
    let gone = gossip(&[(a(), Up), (c(), Up)], &[a()], &[], &[(a(), 2)], &[]);
    let err = Step::new(Cause::Timer, all_up(1), gone).check(&mut NoSilentDisappearance);
    assert!(err.unwrap_err().contains("without a tombstone"));
    let removed = gossip(&[(a(), Up), (c(), Up)], &[a()], &[], &[(a(), 2)], &[b()]);
    let ok = Step::new(Cause::Timer, all_up(1), removed).check(&mut NoSilentDisappearance);
    assert_eq!(ok, Ok(()));
}

#[test]
fn s13_fires_when_a_gossip_for_another_incarnation_is_taken_in() {
    let incoming = all_up(2);
    let cause = Cause::Message(Delivered::Gossip {
        from: b(),
        to: node(10_000, 99),
        gossip: Arc::new(incoming.clone()),
        queued_for: Duration::ZERO,
    });
    let err = Step::new(cause, all_up(1), incoming.clone()).check(&mut GossipAcceptance);
    assert!(err.unwrap_err().contains("addressed to uid 99"));
    let ok = Step::new(received_from(b(), &incoming), all_up(1), incoming);
    assert_eq!(ok.check(&mut GossipAcceptance), Ok(()));
}

#[test]
fn s13_fires_when_a_gossip_from_an_unreachable_sender_is_taken_in() {
    let before = gossip(&[(a(), Up), (b(), Up), (c(), Up)], &[a()], &[(a(), b())], &[], &[]);
    let incoming = all_up(2);
    let step = Step::new(received_from(b(), &incoming), before, incoming);
    assert!(step.check(&mut GossipAcceptance).unwrap_err().contains("marks the sender"));
}

#[test]
fn s13_fires_when_a_new_incarnation_is_admitted_next_to_the_old_one() {
    let b2 = node(10_001, 22);
    let after =
        gossip(&[(a(), Up), (b(), Up), (b2.clone(), Joining), (c(), Up)], &[a()], &[], &[], &[]);
    let step = Step::new(Cause::Message(Delivered::Join { node: b2 }), all_up(1), after);
    assert!(step.check(&mut GossipAcceptance).unwrap_err().contains("previous incarnation"));
}

#[test]
fn s13_lets_a_forgotten_joiner_in_but_nothing_else_of_its_gossip() {
    // d welcomed b, then was removed before its gossip about b spread.
    let before = gossip(&[(a(), Up), (c(), Up)], &[a()], &[], &[(a(), 1)], &[d()]);
    let theirs = gossip(&[(a(), Up), (b(), Joining), (c(), Up), (d(), Up)], &[b()], &[], &[], &[]);
    let readmitted =
        gossip(&[(a(), Up), (b(), Joining), (c(), Up)], &[a()], &[], &[(a(), 2)], &[d()]);
    let ok = Step::new(received_from(b(), &theirs), before.clone(), readmitted.clone());
    assert_eq!(ok.check(&mut GossipAcceptance), Ok(()));
    let merged = gossip(&[(a(), Up), (b(), Joining), (c(), Up), (d(), Up)], &[a()], &[], &[], &[]);
    let err =
        Step::new(received_from(b(), &theirs), before.clone(), merged).check(&mut GossipAcceptance);
    assert!(err.unwrap_err().contains("beyond readmitting it"));
    // A joiner of another cluster, one that holds a member this cluster never had, is not let in.
    let never_had = gossip(&[(a(), Up), (c(), Up)], &[a()], &[], &[(a(), 1)], &[]);
    let err =
        Step::new(received_from(b(), &theirs), never_had, readmitted).check(&mut GossipAcceptance);
    assert!(err.unwrap_err().contains("is not a member"));
    // A sender that is Up in its own gossip is a member of another cluster, not a joiner.
    let up = gossip(&[(a(), Up), (b(), Up), (c(), Up)], &[b()], &[], &[], &[]);
    let err = Step::new(received_from(b(), &up), before, up.clone()).check(&mut GossipAcceptance);
    assert!(err.unwrap_err().contains("is not a member"));
}

// ---- the split-brain resolver's invariants ----------------------------------------------------

use convoke_membership::sbr::{Decision, DecisionTrigger};

fn decision(decision: Decision, trigger: DecisionTrigger, nodes: &[UniqueAddress]) -> SbrDecision {
    let nodes: BTreeSet<UniqueAddress> = nodes.iter().cloned().collect();
    SbrDecision {
        decision,
        trigger,
        downs_self: false,
        nodes,
        indirectly_connected: BTreeSet::new(),
    }
}

fn deciding(by: UniqueAddress, d: SbrDecision, before: Gossip, after: Gossip) -> Step {
    let mut step = Step::new(Cause::Timer, before, after).by(by.clone());
    step.decisions = vec![SbrDecision { downs_self: d.nodes.contains(&by), ..d }];
    step
}

#[test]
fn s2_fires_when_two_nodes_each_keep_themselves_and_down_the_other() {
    use DecisionTrigger::Stable;
    let mut s2 = ComplementaryDecisions::default();
    let a_downs_c = decision(Decision::DownUnreachable, Stable, &[c()]);
    assert_eq!(deciding(a(), a_downs_c, all_up(1), all_up(2)).check(&mut s2), Ok(()));
    let c_gives_up = decision(Decision::DownReachable, Stable, &[c()]);
    assert_eq!(deciding(c(), c_gives_up, all_up(1), all_up(2)).check(&mut s2), Ok(()));
    let c_downs_a = decision(Decision::DownUnreachable, Stable, &[a(), b()]);
    let err = deciding(c(), c_downs_a, all_up(1), all_up(2)).check(&mut s2).unwrap_err();
    assert!(err.contains("both sides survive"), "{err}");
}

#[test]
fn s2_does_not_pair_decisions_whose_kept_sides_overlap() {
    use DecisionTrigger::Stable;
    let mut s2 = ComplementaryDecisions::default();
    // b, seeing only a unreachable, downs a and keeps {b, c}; later a, cut off from b alone,
    // downs b and keeps {a, c}: c is on both sides, so they decided on different reachability.
    let b_downs_a = decision(Decision::DownUnreachable, Stable, &[a()]);
    assert_eq!(deciding(b(), b_downs_a, all_up(1), all_up(2)).check(&mut s2), Ok(()));
    let a_downs_b = decision(Decision::DownUnreachable, Stable, &[b()]);
    assert_eq!(deciding(a(), a_downs_b, all_up(2), all_up(3)).check(&mut s2), Ok(()));
}

#[test]
fn s3_fires_when_a_decision_keeps_an_indirectly_connected_node() {
    use DecisionTrigger::Stable;
    // a sees b unreachable and b sees c unreachable: b is in a cycle, indirectly connected.
    let cycle = gossip(
        &[(a(), Up), (b(), Up), (c(), Up)],
        &[a()],
        &[(a(), b()), (b(), c())],
        &[(a(), 1)],
        &[],
    );
    let keeps_b = decision(Decision::DownUnreachable, Stable, &[c()]);
    let err =
        deciding(a(), keeps_b, cycle.clone(), cycle.clone()).check(&mut IndirectlyConnectedDowned);
    assert!(err.unwrap_err().contains("kept convoke://convoke@sim:10001"));
    let downs_b = decision(Decision::DownIndirectlyConnected, Stable, &[b(), c()]);
    let ok = deciding(a(), downs_b, cycle.clone(), cycle).check(&mut IndirectlyConnectedDowned);
    assert_eq!(ok, Ok(()));
}

#[test]
fn s3_sets_aside_the_records_of_an_observer_cut_off_from_the_deciders_side() {
    use DecisionTrigger::Stable;
    let members = [(a(), Up), (b(), Up), (c(), Up), (d(), Up)];
    // d, b and c all observe a unreachable; a's record about d crossed before the cut. d downs a
    // and keeps itself: a's stale record makes no cycle of {a, d}.
    let cut = [(d(), a()), (b(), a()), (c(), a()), (a(), d())];
    let g = gossip(&members, &[d()], &cut, &[(a(), 1)], &[]);
    let downs_a = decision(Decision::DownUnreachable, Stable, &[a()]);
    let ok = deciding(d(), downs_a.clone(), g.clone(), g).check(&mut IndirectlyConnectedDowned);
    assert_eq!(ok, Ok(()));
    // c still reaches a: a's record about d may hold, and d, kept, is indirectly connected.
    let through_c = [(d(), a()), (b(), a()), (a(), d())];
    let g = gossip(&members, &[d()], &through_c, &[(a(), 1)], &[]);
    let err = deciding(d(), downs_a, g.clone(), g).check(&mut IndirectlyConnectedDowned);
    assert!(err.unwrap_err().contains("kept convoke://convoke@sim:10003"));
}

#[test]
fn s3_counts_seen_evidence_unless_the_leader_gave_the_gossip_a_new_version_in_the_same_step() {
    use DecisionTrigger::Stable;
    // b sees c unreachable and c has seen the gossip: both are indirectly connected.
    let members = [(a(), Up), (b(), Up), (c(), Up), (d(), Joining)];
    let evidence = gossip(&members, &[a(), c()], &[(b(), c())], &[(a(), 1)], &[]);
    let keeps_b = decision(Decision::DownUnreachable, Stable, &[c()]);
    let downed = gossip(
        &[(a(), Up), (b(), Up), (c(), Down), (d(), Joining)],
        &[a()],
        &[(b(), c())],
        &[(a(), 2)],
        &[],
    );
    let err = deciding(a(), keeps_b.clone(), evidence.clone(), downed)
        .check(&mut IndirectlyConnectedDowned);
    assert!(err.unwrap_err().contains("kept convoke://convoke@sim:10001"));
    // The leader moved d to WeaklyUp in the same step: the seen set was reset before the decision.
    let moved = gossip(
        &[(a(), Up), (b(), Up), (c(), Down), (d(), WeaklyUp)],
        &[a()],
        &[(b(), c())],
        &[(a(), 3)],
        &[],
    );
    let ok = deciding(a(), keeps_b.clone(), evidence.clone(), moved)
        .check(&mut IndirectlyConnectedDowned);
    assert_eq!(ok, Ok(()));
    // The leader moved d to WeaklyUp and the decision then downed d: the statuses before and
    // after do not show the move, the core's events do.
    let downs_c_d = decision(Decision::DownUnreachable, Stable, &[c(), d()]);
    let moved_then_downed = gossip(
        &[(a(), Up), (b(), Up), (c(), Down), (d(), Down)],
        &[a()],
        &[(b(), c())],
        &[(a(), 3)],
        &[],
    );
    let mut step = deciding(a(), downs_c_d, evidence, moved_then_downed);
    let err = step.check(&mut IndirectlyConnectedDowned);
    assert!(err.unwrap_err().contains("kept convoke://convoke@sim:10001"));
    step.leader_moved = true;
    assert_eq!(step.check(&mut IndirectlyConnectedDowned), Ok(()));
}

#[test]
fn s4_fires_when_an_instability_decision_spares_a_member() {
    use DecisionTrigger::Unstable;
    let spares_c = decision(Decision::DownAll, Unstable, &[a(), b()]);
    let err =
        deciding(a(), spares_c, all_up(1), all_up(2)).check(&mut DownAllWhenUnstable::default());
    assert!(err.unwrap_err().contains("spared convoke://convoke@sim:10002"));
    let keeps_majority = decision(Decision::DownUnreachable, Unstable, &[c()]);
    let err = deciding(a(), keeps_majority, all_up(1), all_up(2))
        .check(&mut DownAllWhenUnstable::default());
    assert!(err.unwrap_err().contains("unstable but decided"));
    let all = decision(Decision::DownAll, Unstable, &[a(), b(), c()]);
    assert_eq!(
        deciding(a(), all, all_up(1), all_up(2)).check(&mut DownAllWhenUnstable::default()),
        Ok(())
    );
}

/// A world of processes without cores that run singleton instances, for S17.
struct Instances {
    now: Duration,
    slots: Vec<Option<InstanceView>>,
}

impl WorldView for Instances {
    fn now(&self) -> Duration {
        self.now
    }
    fn slots(&self) -> usize {
        self.slots.len()
    }
    fn core(&self, _: usize) -> Option<&convoke_membership::Cluster> {
        None
    }
    fn is_stopped(&self, _: usize) -> bool {
        false
    }
    fn link_open(&self, _: usize, _: usize) -> bool {
        true
    }
    fn is_running(&self, _: usize) -> bool {
        true
    }
    fn running_time(&self, _: usize) -> Duration {
        self.now
    }
    fn singleton(&self, slot: usize) -> Option<InstanceView> {
        self.slots[slot].clone()
    }
}

fn instance(n: UniqueAddress, since: u64) -> InstanceView {
    InstanceView {
        node: n,
        since: Duration::from_secs(since),
        stopping: false,
        long_pause_from: None,
        stale_until: None,
        paused: false,
        resume_grace_until: None,
        leased: None,
    }
}

/// S17 after each of these worlds, one second apart.
fn s17_over(worlds: Vec<Vec<Option<InstanceView>>>) -> Result<(), String> {
    let mut s17 = OneSingleton::default();
    for (t, slots) in worlds.into_iter().enumerate() {
        let w = Instances { now: Duration::from_secs(t as u64), slots };
        s17.check_singletons(&w)?;
    }
    Ok(())
}

#[test]
fn s17_fires_when_two_instances_ran_at_once_in_one_cluster() {
    let err = s17_over(vec![
        vec![Some(instance(a(), 0)), None],
        vec![Some(instance(a(), 0)), Some(instance(b(), 1))],
        vec![None, Some(instance(b(), 1))],
    ])
    .unwrap_err();
    assert!(err.contains("ran at once in one cluster"), "{err}");
    assert!(err.contains("from 1.000 s until 2.000 s"), "{err}");
}

#[test]
fn s17_stays_quiet_when_the_instance_moves_without_overlap() {
    let handed_over = s17_over(vec![
        vec![Some(instance(a(), 0)), None],
        vec![Some(InstanceView { stopping: true, ..instance(a(), 0) }), None],
        vec![None, None],
        vec![None, Some(instance(b(), 3))],
    ]);
    assert_eq!(handed_over, Ok(()));
}

#[test]
fn s17_does_not_count_an_instance_frozen_longer_than_the_removal_margin() {
    let frozen = InstanceView { long_pause_from: Some(Duration::ZERO), ..instance(a(), 0) };
    let overlap = vec![Some(frozen), Some(instance(b(), 1))];
    assert_eq!(s17_over(vec![overlap, vec![None, Some(instance(b(), 1))]]), Ok(()));
}

#[test]
fn s17_judges_a_pause_whole_once_it_outlasts_the_removal_margin() {
    // a's process froze at 1 s; b started at 2 s, while a's pause was still short of the margin;
    // at 3 s the pause has outlasted the margin (the view shows it from then on).
    let frozen_since_1 =
        InstanceView { long_pause_from: Some(Duration::from_secs(1)), ..instance(a(), 0) };
    let outlasted = s17_over(vec![
        vec![Some(instance(a(), 0)), None],
        vec![Some(instance(a(), 0)), None],
        vec![Some(instance(a(), 0)), Some(instance(b(), 2))],
        vec![Some(frozen_since_1), Some(instance(b(), 2))],
    ]);
    assert_eq!(outlasted, Ok(()));

    // A pause that began after b started does not excuse the time a ran beside b.
    let frozen_since_3 =
        InstanceView { long_pause_from: Some(Duration::from_secs(3)), ..instance(a(), 0) };
    let ran_beside = s17_over(vec![
        vec![Some(instance(a(), 0)), None],
        vec![Some(instance(a(), 0)), Some(instance(b(), 1))],
        vec![Some(instance(a(), 0)), Some(instance(b(), 1))],
        vec![Some(frozen_since_3), Some(instance(b(), 1))],
    ])
    .unwrap_err();
    assert!(ran_beside.contains("from 1.000 s until 3.000 s"), "{ran_beside}");
}

#[test]
fn s17_fires_when_an_instance_starts_without_holding_the_lease() {
    let leased = InstanceView { leased: Some(true), ..instance(a(), 0) };
    let unleased = InstanceView { leased: Some(false), ..instance(b(), 2) };
    let ok = s17_over(vec![vec![Some(leased.clone()), None], vec![None, None]]);
    assert_eq!(ok, Ok(()));
    let err =
        s17_over(vec![vec![Some(leased), None], vec![None, None], vec![None, Some(unleased)]])
            .unwrap_err();
    assert!(err.contains("slot 1") && err.contains("did not hold the lease"), "{err}");
}

#[test]
fn s17_fires_when_an_instance_runs_on_past_its_hosts_check_after_a_long_pause() {
    // a's process was frozen from 0 s past the margin and resumed at 1 s: it may stay beside b
    // until its stale_until (3 s), not after.
    let resumed = InstanceView {
        long_pause_from: Some(Duration::ZERO),
        stale_until: Some(Duration::from_secs(3)),
        ..instance(a(), 0)
    };
    let beside = |n| (0..n).map(|_| vec![Some(resumed.clone()), Some(instance(b(), 0))]).collect();
    assert_eq!(s17_over(beside(4)), Ok(()), "until 3 s it may");
    let err = s17_over(beside(5)).unwrap_err();
    assert!(err.contains("still ran at 4.000 s beside the instance on slot 1"), "{err}");
    // Alone, it may run on: nothing else does.
    let alone = (0..6).map(|_| vec![Some(resumed.clone()), None]).collect();
    assert_eq!(s17_over(alone), Ok(()));
}

#[test]
fn s17_judges_an_instance_paused_again_after_a_long_pause_by_its_latest_pause() {
    // a's process was frozen past the margin and resumed at 0 s (stale_until 2 s); its manager
    // kept the instance, alone in its view. Paused again from 3 s, it was removed by the others,
    // and b started at 5 s: the second pause excuses the overlap while it lasts, and after the
    // resume at 6 s for the resume's grace (until 8 s), not the first pause's deadline.
    let kept = InstanceView {
        long_pause_from: Some(Duration::ZERO),
        stale_until: Some(Duration::from_secs(2)),
        ..instance(a(), 0)
    };
    let paused_again = InstanceView { paused: true, ..kept.clone() };
    let resumed = InstanceView { resume_grace_until: Some(Duration::from_secs(8)), ..kept.clone() };
    let mut worlds: Vec<Vec<Option<InstanceView>>> = vec![vec![Some(kept.clone()), None]; 3];
    worlds.extend(vec![vec![Some(paused_again.clone()), None]; 2]);
    worlds.push(vec![Some(paused_again), Some(instance(b(), 5))]);
    worlds.extend(vec![vec![Some(resumed.clone()), Some(instance(b(), 5))]; 3]);
    assert_eq!(s17_over(worlds.clone()), Ok(()), "until 8 s it may");
    worlds.push(vec![Some(resumed), Some(instance(b(), 5))]);
    let err = s17_over(worlds).unwrap_err();
    assert!(err.contains("still ran at 9.000 s beside the instance on slot 1"), "{err}");
}

#[test]
fn s17_excuses_an_instance_whose_process_was_paused_when_the_other_started() {
    // a's process froze before b started at 1 s (for less than the margin: no long pause), resumed
    // at 2 s with its grace until 3 s, and its instance was gone by 3 s.
    let paused = InstanceView { paused: true, ..instance(a(), 0) };
    let resumed =
        InstanceView { resume_grace_until: Some(Duration::from_secs(3)), ..instance(a(), 0) };
    let stopped_in_time = s17_over(vec![
        vec![Some(paused.clone()), None],
        vec![Some(paused.clone()), Some(instance(b(), 1))],
        vec![Some(resumed.clone()), Some(instance(b(), 1))],
        vec![None, Some(instance(b(), 1))],
    ]);
    assert_eq!(stopped_in_time, Ok(()));

    // Still there beside b after its grace: S17 fires.
    let mut worlds = vec![vec![Some(paused.clone()), None]];
    worlds.push(vec![Some(paused.clone()), Some(instance(b(), 1))]);
    worlds.extend((2..5).map(|_| vec![Some(resumed.clone()), Some(instance(b(), 1))]));
    let ran_on = s17_over(worlds).unwrap_err();
    assert!(ran_on.contains("whose process was paused when the instance on slot 1"), "{ran_on}");
    assert!(ran_on.contains("started at 1.000 s, still ran beside it at 4.000 s"), "{ran_on}");

    // A pause that begins after b started excuses nothing: a ran beside b from 1 s.
    let froze_later = s17_over(vec![
        vec![Some(instance(a(), 0)), Some(instance(b(), 1))],
        vec![Some(paused), Some(instance(b(), 1))],
        vec![None, Some(instance(b(), 1))],
    ])
    .unwrap_err();
    assert!(froze_later.contains("ran at once in one cluster"), "{froze_later}");
}
