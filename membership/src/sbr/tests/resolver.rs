//! The resolver over time: who decides, when, down-all-when-unstable, and the
//! lease handshake, driven with events, ticks and lease answers in virtual time. Modelled on the
//! "Split Brain Resolver" cases of the reference `SplitBrainResolverSpec`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::config::{Config, SwitchDuration};
use crate::event::ClusterEvent;
use crate::reachability::{Reachability, ReachabilityStatus, Record};
use crate::sbr::{
    Decision, DecisionTrigger, InMemoryLeaseTable, LeaseOp, LeaseRequest, SplitBrainResolver,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

struct Harness {
    sbr: SplitBrainResolver,
    now: Instant,
}

fn config(strategy: &str, stable_after: Duration) -> Config {
    let mut c = Config { system_name: "sys".to_owned(), ..Config::default() };
    let sbr = &mut c.split_brain_resolver;
    sbr.active_strategy = strategy.to_owned();
    sbr.stable_after = stable_after;
    sbr.down_all_when_unstable = SwitchDuration::Off;
    sbr.static_quorum.quorum_size = 2;
    sbr.lease_majority.acquire_lease_delay_for_minority = ms(20);
    sbr.lease_majority.release_after = secs(10);
    c
}

impl Harness {
    fn new(config: &Config, me: &Member) -> Self {
        #[allow(clippy::disallowed_methods, reason = "a base instant; only offsets matter")]
        let now = Instant::now();
        let sbr = SplitBrainResolver::new(config, me.node().clone(), now).expect("a strategy");
        Self { sbr, now }
    }

    fn keep_majority(stable_after: Duration, me: &Member) -> Self {
        Self::new(&config("keep-majority", stable_after), me)
    }

    fn event(&mut self, e: ClusterEvent) {
        self.sbr.handle_event(self.now, &e);
    }

    fn member_up(&mut self, members: &[&Member]) {
        for m in members {
            self.event(ClusterEvent::MemberUp((*m).clone()));
        }
    }

    fn leader(&mut self, m: &Member) {
        self.event(ClusterEvent::LeaderChanged(Some(m.address().clone())));
    }

    /// Like the cluster, reports a member unreachable only when it was not already.
    fn unreachable(&mut self, members: &[&Member]) {
        for m in members {
            if !self.sbr.model().is_unreachable(m.node()) {
                self.event(ClusterEvent::UnreachableMember((*m).clone()));
            }
        }
    }

    fn reachable(&mut self, members: &[&Member]) {
        for m in members {
            if self.sbr.model().is_unreachable(m.node()) {
                self.event(ClusterEvent::ReachableMember((*m).clone()));
            }
        }
    }

    /// The subjects become unreachable, and the reachability holds exactly these records.
    fn reachability_changed(&mut self, records: &[(&Member, &Member)]) {
        let subjects: Vec<&Member> = records.iter().map(|(_, to)| *to).collect();
        self.unreachable(&subjects);
        self.records(records);
    }

    /// The reachability holds exactly these records; no member changes its reachability.
    fn records(&mut self, records: &[(&Member, &Member)]) {
        let r = Reachability::from_parts(
            records.iter().map(|(from, to)| Record {
                observer: from.node().clone(),
                subject: to.node().clone(),
                status: ReachabilityStatus::Unreachable,
                version: 1,
            }),
            records.iter().map(|(from, _)| (from.node().clone(), 1)),
        );
        self.sbr.handle_reachability(&r);
    }

    fn remove(&mut self, m: &Member) {
        let removed = with_status(m, MemberStatus::Removed);
        self.event(ClusterEvent::MemberRemoved {
            member: removed,
            previous_status: MemberStatus::Exiting,
        });
    }

    fn tick(&mut self) {
        self.sbr.handle_tick(self.now);
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// `ticks` times: `step` passes, the resolver ticks and decides nothing.
    fn ticks_without_decision(&mut self, ticks: usize, step: Duration) {
        for _ in 0..ticks {
            self.advance(step);
            self.tick();
            self.expect_no_decision();
        }
    }

    fn downs(&mut self) -> Vec<UniqueAddress> {
        std::iter::from_fn(|| self.sbr.poll_down()).collect()
    }

    fn expect_down_called(&mut self, members: &[&Member]) {
        let downs: BTreeSet<UniqueAddress> = self.downs().into_iter().collect();
        assert_eq!(downs, nodes(members));
    }

    fn expect_no_decision(&mut self) {
        assert_eq!(self.downs(), [], "no node is downed");
        assert_eq!(self.sbr.poll_decision(), None);
    }

    fn lease_request(&mut self) -> Option<LeaseRequest> {
        self.sbr.poll_lease_request()
    }

    fn answer(&mut self, op: LeaseOp, granted: bool) {
        let req = self.lease_request().expect("a lease request");
        assert_eq!(req.op, op);
        self.sbr.handle_lease_result(self.now, op, granted);
    }
}

fn abcde() -> (Member, Member, Member, Member, Member) {
    (member('a'), member('b'), member('c'), member('d'), member('e'))
}

#[test]
fn the_leader_downs_an_unreachable_member() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.tick();
    h.expect_down_called(&[&b]);
    let d = h.sbr.poll_decision().unwrap();
    assert_eq!((d.decision, d.trigger), (Decision::DownUnreachable, DecisionTrigger::Stable));
}

#[test]
fn a_member_that_is_not_the_leader_downs_nothing() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &b);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&c]);
    h.tick();
    h.expect_no_decision();
}

#[test]
fn a_member_that_becomes_leader_downs_the_unreachable() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&b);
    h.unreachable(&[&c]);
    h.leader(&a);
    h.tick();
    h.expect_down_called(&[&c]);
}

#[test]
fn the_leader_downs_only_after_stable_after() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(2), &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.ticks_without_decision(2, ms(999));
    h.advance(ms(2));
    h.tick();
    h.expect_down_called(&[&b]);
}

#[test]
fn a_member_that_becomes_leader_between_detection_and_stable_after_downs_in_time() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(2), &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&b);
    h.unreachable(&[&c]);
    h.leader(&a);
    h.tick();
    h.expect_no_decision();
    h.advance(secs(2));
    h.tick();
    h.expect_down_called(&[&c]);
}

#[test]
fn a_leader_that_loses_leadership_before_stable_after_downs_nothing() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(1), &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&c]);
    h.leader(&b);
    for _ in 0..3 {
        h.tick();
        h.advance(ms(500));
    }
    h.expect_no_decision();
}

#[test]
fn a_weakly_up_leader_decides() {
    // With only C Up, the WeaklyUp A and B are the reachable side of a minority: they go.
    let (a, b, c, ..) = abcde();
    let (aw, bw) = (weakly_up(&a), weakly_up(&b));
    let mut h = Harness::keep_majority(Duration::ZERO, &aw);
    h.member_up(&[&c]);
    h.event(ClusterEvent::MemberWeaklyUp(aw.clone()));
    h.event(ClusterEvent::MemberWeaklyUp(bw.clone()));
    h.unreachable(&[&c]);
    h.leader(&aw);
    h.tick();
    h.expect_down_called(&[&aw, &bw]);
}

#[test]
fn a_leader_that_left_before_it_was_moved_up_decides() {
    // A was asked to leave while Joining: Leaving, never Up or WeaklyUp, yet the leader (the
    // lowest address among the Up and Leaving). The crashed joiner C blocks convergence until
    // someone downs it.
    let (a, b, c, ..) = abcde();
    let al = leaving(&joining(&a));
    let cj = joining(&c);
    let mut h = Harness::keep_majority(Duration::ZERO, &al);
    h.event(ClusterEvent::MemberJoined(joining(&a)));
    h.member_up(&[&b]);
    h.event(ClusterEvent::MemberJoined(cj.clone()));
    h.event(ClusterEvent::MemberLeft(al.clone()));
    h.leader(&al);
    h.unreachable(&[&cj]);
    h.tick();
    h.expect_down_called(&[&cj]);
    assert!(h.sbr.is_responsible());
}

#[test]
fn a_leader_not_yet_seen_up_or_weakly_up_does_not_decide() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&b, &c]);
    h.event(ClusterEvent::MemberJoined(joining(&a)));
    h.leader(&a);
    h.unreachable(&[&c]);
    h.tick();
    h.expect_no_decision();
    assert!(!h.sbr.is_responsible());
}

#[test]
fn nothing_is_downed_when_the_unreachable_member_becomes_reachable_before_stable_after() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(1), &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.reachable(&[&b]);
    for _ in 0..3 {
        h.tick();
        h.advance(ms(500));
    }
    h.expect_no_decision();
}

#[test]
fn nothing_is_downed_when_the_unreachable_member_is_removed_before_stable_after() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(1), &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.remove(&b);
    for _ in 0..3 {
        h.tick();
        h.advance(ms(500));
    }
    h.expect_no_decision();
}

#[test]
fn an_unreachable_member_already_down_is_not_downed_again() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&downed(&b)]);
    h.tick();
    assert_eq!(h.downs(), []);
}

#[test]
fn the_leader_downs_the_minority_of_a_partition() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&c, &d)]);
    h.tick();
    h.expect_down_called(&[&b, &d]);
}

#[test]
fn keep_oldest_downs_the_side_without_the_oldest() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::new(&config("keep-oldest", Duration::ZERO), &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&a, &c), (&e, &d)]);
    h.tick();
    h.expect_down_called(&[&b, &c, &d]);
}

#[test]
fn static_quorum_downs_all_when_the_cluster_outgrew_the_quorum() {
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::new(&config("static-quorum", Duration::ZERO), &a);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&a);
    h.unreachable(&[&c, &d]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c, &d]);
}

#[test]
fn members_of_other_data_centers_are_neither_counted_nor_downed() {
    let (a, b, c, d, e) = abcde();
    let (d2, e2) = (in_dc(&d, "other"), in_dc(&e, "other"));
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d2, &e2]);
    h.leader(&a);
    h.unreachable(&[&b, &d2, &e2]);
    h.tick();
    h.expect_down_called(&[&b]);

    // Counting D and E would put A in the majority.
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d2, &e2]);
    h.leader(&a);
    h.unreachable(&[&b, &c]);
    h.tick();
    h.expect_down_called(&[&a]);
}

#[test]
fn keep_oldest_looks_for_the_oldest_in_its_own_data_center() {
    // D and E are older but in another data center: C is the oldest here, on the other side.
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::new(&config("keep-oldest", Duration::ZERO), &b);
    h.member_up(&[&a, &b, &c, &in_dc(&d, "other"), &in_dc(&e, "other")]);
    h.leader(&b);
    h.unreachable(&[&a, &c]);
    h.tick();
    h.expect_down_called(&[&b]);
}

#[test]
fn down_all_downs_only_its_own_data_center() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::new(&config("down-all", Duration::ZERO), &a);
    h.member_up(&[&a, &b, &c, &in_dc(&d, "other"), &in_dc(&e, "other")]);
    h.leader(&a);
    h.unreachable(&[&c]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c]);
}

#[test]
fn the_leader_downs_indirectly_connected_members_and_keeps_the_fully_connected() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&b, &a)]);
    h.tick();
    h.expect_down_called(&[&a, &b]);
    let d = h.sbr.poll_decision().unwrap();
    assert_eq!(d.decision, Decision::DownIndirectlyConnected);
    assert!(d.downs_self);
    assert_eq!(d.indirectly_connected, nodes(&[&a, &b]));
}

#[test]
fn indirectly_connected_members_and_a_crashed_one_are_downed_together() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&b, &a), (&b, &c)]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c]);
}

#[test]
fn indirectly_connected_members_with_a_clean_partition_leave_a_alone() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&b, &c), (&c, &b), (&a, &d), (&b, &d), (&b, &e), (&c, &e)]);
    h.tick();
    h.expect_down_called(&[&b, &c, &d, &e]);

    // The other side does not see the indirect connection: it downs itself.
    let mut h = Harness::keep_majority(Duration::ZERO, &d);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&d);
    h.reachability_changed(&[(&d, &a), (&d, &b), (&e, &b), (&e, &c)]);
    h.tick();
    h.expect_down_called(&[&d, &e]);
}

#[test]
fn a_node_does_not_keep_itself_alone_by_downing_everyone_else_as_indirectly_connected() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &e);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&e);
    // E is cut off from A and C; the others' records (possibly stale) make them all indirectly
    // connected, and E not.
    h.reachability_changed(&[(&a, &b), (&b, &a), (&c, &d), (&d, &c), (&e, &a), (&e, &c)]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c, &d, &e]);
    let decision = h.sbr.poll_decision().expect("a decision");
    assert_eq!(decision.decision, Decision::DownAll);
    assert!(decision.downs_self);
}

#[test]
fn a_record_of_a_member_cut_off_from_this_whole_side_makes_no_indirect_connection() {
    let (a, b, c, d, _) = abcde();
    // {A, C} | {B, D}, cut in steps: A's record about B crossed before the cut. B and D both
    // observe A (and C) unreachable, so nothing on B's side still hears from A: A's record is
    // set aside, and B sees the clean partition that A sees. On a tie the side with the lowest
    // address, A's, stays.
    let mut h = Harness::keep_majority(Duration::ZERO, &b);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&b);
    h.unreachable(&[&a, &c]);
    h.records(&[(&b, &a), (&b, &c), (&d, &a), (&d, &c), (&a, &b)]);
    h.tick();
    h.expect_down_called(&[&b, &d]);
    assert_eq!(h.sbr.poll_decision().map(|d| d.decision), Some(Decision::DownReachable));

    // Were D still to hear from A, A's record could hold: A and B are indirectly connected.
    let mut h = Harness::keep_majority(Duration::ZERO, &b);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&b);
    h.unreachable(&[&a, &c]);
    h.records(&[(&b, &a), (&b, &c), (&d, &c), (&a, &b)]);
    h.tick();
    let decision = h.sbr.poll_decision().expect("a decision");
    assert_eq!(decision.decision, Decision::DownIndirectlyConnected);
    assert_eq!(decision.indirectly_connected, nodes(&[&a, &b]));
}

#[test]
fn a_node_cut_off_from_an_indirectly_connected_member_does_not_keep_itself_alone() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    // B's links to C and E are cut, and A's to C and D. The reference downs B, C and E as
    // indirectly connected, then, A, B and E against C and D, downs C and D: A stays alone,
    // though only the others' records make C one of the indirectly connected and not A, which
    // cannot reach C itself. A downs all.
    h.reachability_changed(&[(&b, &c), (&c, &b), (&b, &e), (&e, &b), (&a, &c), (&a, &d)]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c, &d, &e]);
    assert_eq!(h.sbr.poll_decision().map(|d| d.decision), Some(Decision::DownAll));
}

#[test]
fn a_joiner_does_not_keep_a_node_from_being_alone_among_the_indirectly_connected() {
    let (a, b, c, d, e) = abcde();
    let f = member('f');
    let mut h = Harness::keep_majority(Duration::ZERO, &e);
    h.member_up(&[&a, &b, &c, &d, &e]);
    // F is joining through E: it counts on no side, and keeping E with F is keeping E alone.
    h.event(ClusterEvent::MemberJoined(joining(&f)));
    h.leader(&e);
    h.reachability_changed(&[(&a, &b), (&b, &a), (&c, &d), (&d, &c), (&e, &a), (&e, &c)]);
    h.tick();
    let decision = h.sbr.poll_decision().expect("a decision");
    assert_eq!(decision.decision, Decision::DownAll);
    assert!(decision.downs_self);
}

/// {A, B, C, D} | {E, F}, one of E and F Exiting, E observing F: the Exiting one is not downed.
fn partition_with_an_exiting_member(e: &Member, f: &Member, exiting_one: &Member) -> Harness {
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c, &d, &member('e'), &member('f')]);
    h.event(ClusterEvent::MemberExited(exiting_one.clone()));
    h.leader(&a);
    let mut records: Vec<(&Member, &Member)> = Vec::new();
    for observer in [&a, &b, &c, &d] {
        records.extend([(observer, e), (observer, f)]);
    }
    records.push((e, f));
    h.reachability_changed(&records);
    h.tick();
    h
}

#[test]
fn an_exiting_member_indirectly_connected_across_a_partition_is_not_downed() {
    let (e, f) = (member('e'), member('f'));
    let fx = exiting(&f);
    partition_with_an_exiting_member(&e, &fx, &fx).expect_down_called(&[&e]);
    let ex = exiting(&e);
    partition_with_an_exiting_member(&ex, &f, &ex).expect_down_called(&[&f]);
}

#[test]
fn down_all_when_unstable_scenario_1() {
    let (a, b, c, d, e) = abcde();
    let mut cfg = config("keep-majority", secs(2));
    cfg.split_brain_resolver.down_all_when_unstable = SwitchDuration::After(secs(1));
    let mut h = Harness::new(&cfg, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&b, &d), (&b, &e)]);
    h.tick();
    h.expect_no_decision();
    for step in 0..3 {
        h.advance(ms(1010));
        if step % 2 == 0 {
            h.reachability_changed(&[(&b, &d)]);
            h.reachable(&[&e]);
        } else {
            h.reachability_changed(&[(&b, &d), (&b, &e)]);
        }
        h.tick();
        if step < 2 {
            h.expect_no_decision();
        }
    }
    h.expect_down_called(&[&a, &b, &c, &d, &e]);
    let decision = h.sbr.poll_decision().unwrap();
    assert_eq!(
        (decision.decision, decision.trigger),
        (Decision::DownAll, DecisionTrigger::Unstable)
    );
}

#[test]
fn down_all_when_unstable_scenario_2() {
    let (a, b, c, d, e) = abcde();
    let mut cfg = config("keep-majority", secs(2));
    cfg.split_brain_resolver.down_all_when_unstable = SwitchDuration::After(ms(500));
    let mut h = Harness::new(&cfg, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &e), (&b, &d), (&c, &d)]);
    h.tick();
    h.expect_no_decision();
    h.advance(ms(600));
    h.reachability_changed(&[(&a, &e), (&b, &d)]);
    h.tick();
    h.expect_no_decision();
    h.advance(ms(600));
    h.reachability_changed(&[(&a, &e)]);
    h.reachable(&[&d]);
    h.tick();
    h.expect_no_decision();
    h.advance(ms(600));
    h.reachability_changed(&[(&a, &e), (&b, &d), (&c, &d)]);
    h.tick();
    h.expect_no_decision();
    // 2.8 s since the first change: still no stable period, so all go.
    h.advance(ms(1000));
    h.reachability_changed(&[(&a, &e), (&b, &d)]);
    h.tick();
    h.expect_down_called(&[&a, &b, &c, &d, &e]);
}

#[test]
fn down_all_when_unstable_does_not_fire_once_everything_is_reachable_again() {
    let (a, b, c, d, e) = abcde();
    let mut cfg = config("keep-majority", secs(2));
    cfg.split_brain_resolver.down_all_when_unstable = SwitchDuration::After(secs(1));
    let mut h = Harness::new(&cfg, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&b, &d), (&b, &e)]);
    h.tick();
    h.advance(secs(1));
    h.reachability_changed(&[(&b, &d)]);
    h.reachable(&[&e]);
    h.tick();
    h.advance(ms(500));
    h.tick();
    h.reachability_changed(&[]);
    h.reachable(&[&d]);
    h.advance(ms(500));
    h.tick();
    h.advance(secs(3));
    h.tick();
    h.expect_no_decision();
}

#[test]
fn down_all_when_unstable_runs_on_members_that_are_not_the_leader() {
    let (a, b, c, d, e) = abcde();
    let mut cfg = config("keep-majority", secs(2));
    cfg.split_brain_resolver.down_all_when_unstable = SwitchDuration::After(secs(1));
    let mut h = Harness::new(&cfg, &c);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.reachability_changed(&[(&b, &d), (&b, &e)]);
    for step in 0..4 {
        h.advance(ms(900));
        if step % 2 == 0 {
            h.reachable(&[&e]);
        } else {
            h.reachability_changed(&[(&b, &d), (&b, &e)]);
        }
        h.tick();
    }
    h.expect_down_called(&[&a, &b, &c, &d, &e]);
    let downs_self_last = h.sbr.poll_decision().unwrap();
    assert!(downs_self_last.downs_self);
}

#[test]
fn without_down_all_when_unstable_the_change_count_resets_after_twice_stable_after_of_quiet() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(secs(2), &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&c);
    h.reachability_changed(&[(&b, &d)]);
    for _ in 0..60 {
        h.advance(secs(1));
        h.tick();
    }
    h.expect_no_decision();
}

#[test]
fn the_others_are_downed_before_this_node() {
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &b);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&b);
    h.reachability_changed(&[(&b, &a), (&b, &d), (&b, &e)]);
    h.tick();
    assert_eq!(h.downs(), [c.node().clone(), b.node().clone()]);
}

#[test]
fn a_quarantine_by_a_member_downs_this_node() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(secs(20), &b);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.sbr.handle_quarantined_by_member(h.now);
    h.expect_down_called(&[&b]);
    let d = h.sbr.poll_decision().unwrap();
    assert_eq!(d.decision, Decision::DownSelfQuarantinedByRemote);
}

/// Keep-majority on A of {A, B, C, D}, A the leader, D unreachable: a clean 3|1 that A's side
/// wins after `stable_after` = 5 s, unless a pause intervenes.
fn paused_leader_of_four() -> (Harness, [Member; 4]) {
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(secs(5), &a);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&a);
    (h, [a, b, c, d])
}

#[test]
fn after_a_pause_longer_than_stable_after_no_word_from_a_member_downs_this_node_only() {
    let (mut h, [a, _, _, d]) = paused_leader_of_four();
    h.reachability_changed(&[(&a, &d)]);
    h.advance(secs(30));
    h.sbr.handle_resumed(h.now, secs(30));
    assert_eq!(h.sbr.contact_deadline(), Some(h.now + secs(5)));
    h.ticks_without_decision(4, secs(1));
    h.advance(secs(1));
    h.tick();
    h.expect_down_called(&[&a]);
    let decision = h.sbr.poll_decision().expect("a decision");
    assert_eq!(decision.decision, Decision::DownSelfAfterPause);
    assert_eq!(decision.trigger, DecisionTrigger::NoContactAfterPause);
    assert!(decision.downs_self);
}

#[test]
fn after_a_pause_word_from_a_member_resumes_deciding_once_stable_again() {
    let (mut h, [a, _, _, d]) = paused_leader_of_four();
    h.reachability_changed(&[(&a, &d)]);
    h.advance(secs(30));
    h.sbr.handle_resumed(h.now, secs(30));
    h.advance(secs(2));
    h.sbr.handle_member_contact(h.now);
    assert_eq!(h.sbr.contact_deadline(), None);
    h.ticks_without_decision(4, secs(1));
    h.advance(secs(1));
    h.tick();
    h.expect_down_called(&[&d]);
    assert_eq!(h.sbr.poll_decision().unwrap().decision, Decision::DownUnreachable);
}

/// A joiner is downed and removed by the others as well while it is paused. Cut off from them
/// after it resumes, it would become leader of what it holds, move itself to WeaklyUp and decide
/// for a membership nobody else holds: without word from a member it downs itself instead.
#[test]
fn a_node_paused_while_still_joining_downs_itself_without_word_from_a_member() {
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(secs(5), &d);
    h.member_up(&[&a, &b, &c]);
    h.event(ClusterEvent::MemberJoined(with_status(&d, MemberStatus::Joining)));
    h.advance(secs(30));
    h.sbr.handle_resumed(h.now, secs(30));
    assert_eq!(h.sbr.contact_deadline(), Some(h.now + secs(5)));
    h.leader(&d);
    h.event(ClusterEvent::MemberWeaklyUp(with_status(&d, MemberStatus::WeaklyUp)));
    h.unreachable(&[&a, &b, &c]);
    h.ticks_without_decision(4, secs(1));
    h.advance(secs(1));
    h.tick();
    h.expect_down_called(&[&d]);
    assert_eq!(h.sbr.poll_decision().unwrap().decision, Decision::DownSelfAfterPause);
}

#[test]
fn a_short_pause_or_one_with_nobody_else_to_hear_from_changes_nothing() {
    let (mut h, [a, _, _, d]) = paused_leader_of_four();
    h.reachability_changed(&[(&a, &d)]);
    h.advance(secs(4));
    h.sbr.handle_resumed(h.now, secs(4));
    assert_eq!(h.sbr.contact_deadline(), None);
    h.advance(secs(5));
    h.tick();
    h.expect_down_called(&[&d]);

    let (a, ..) = abcde();
    let mut alone = Harness::keep_majority(secs(5), &a);
    alone.member_up(&[&a]);
    alone.leader(&a);
    alone.advance(secs(60));
    alone.sbr.handle_resumed(alone.now, secs(60));
    assert_eq!(alone.sbr.contact_deadline(), None);
    alone.advance(secs(10));
    alone.tick();
    alone.expect_no_decision();
}

#[test]
fn a_removed_node_stops_deciding() {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(Duration::ZERO, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.remove(&a);
    h.unreachable(&[&b]);
    h.tick();
    h.expect_no_decision();
}

// ---- members removed before they took their Down in ---------------------------------------------

impl Harness {
    /// The cluster marked `members` Down (a decision's downs, taken in by this node).
    fn downed(&mut self, members: &[&Member]) {
        for m in members {
            self.event(ClusterEvent::MemberDowned(downed(m)));
        }
    }

    /// The current gossip has been seen by `members`.
    fn seen(&mut self, members: &[&Member]) {
        let seen: BTreeSet<UniqueAddress> = members.iter().map(|m| m.node().clone()).collect();
        self.sbr.handle_seen(&std::sync::Arc::new(seen.into()));
    }

    /// The leader removed `m`, which was Down.
    fn removed_while_down(&mut self, m: &Member) {
        self.event(ClusterEvent::MemberRemoved {
            member: with_status(m, MemberStatus::Removed),
            previous_status: MemberStatus::Down,
        });
    }
}

/// A of {A, B, C}, the leader, reaches both ends of a broken link between B and C: it downs both
/// as indirectly connected and keeps itself.
fn a_downs_b_and_c_as_indirectly_connected(stable_after: Duration) -> (Harness, [Member; 3]) {
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(stable_after, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.reachability_changed(&[(&b, &c), (&c, &b)]);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&b, &c]);
    assert_eq!(h.sbr.poll_decision().unwrap().decision, Decision::DownIndirectlyConnected);
    h.downed(&[&b, &c]);
    h.records(&[(&b, &c), (&c, &b)]);
    h.seen(&[&a]);
    (h, [a, b, c])
}

#[test]
fn a_node_cut_off_before_the_members_it_downed_took_their_down_in_downs_itself() {
    // Chaos seed 1411 at N = 3: A was cut off from B and C just before it decided, so its downs
    // never reached them. Once A saw them unreachable the leader (A) removed them; B and C, their
    // link healed, then kept themselves as two against one and downed A. A must not forget them:
    // counted on the other side, they outweigh it.
    let stable_after = secs(5);
    let (mut h, [a, b, c]) = a_downs_b_and_c_as_indirectly_connected(stable_after);
    h.advance(secs(3));
    h.records(&[(&a, &b), (&a, &c), (&b, &c), (&c, &b)]);
    h.removed_while_down(&b);
    h.removed_while_down(&c);
    h.tick();
    h.expect_no_decision();
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&a]);
    let d = h.sbr.poll_decision().expect("a decision");
    assert_eq!(d.decision, Decision::DownAll);
    assert!(d.downs_self);
}

#[test]
fn a_node_whose_downs_were_taken_in_stays_when_the_downed_members_are_removed() {
    let stable_after = secs(5);
    let (mut h, [a, b, c]) = a_downs_b_and_c_as_indirectly_connected(stable_after);
    // B and C saw their Down (the gossip that tells them is seen by them) and stopped.
    h.advance(ms(300));
    h.seen(&[&a, &b, &c]);
    h.advance(stable_after);
    h.tick();
    h.expect_no_decision();
    h.records(&[(&a, &b), (&a, &c), (&b, &c), (&c, &b)]);
    h.removed_while_down(&b);
    h.removed_while_down(&c);
    h.ticks_without_decision(10, secs(1));
    assert!(h.sbr.model().unreachable().is_empty());
}

#[test]
fn a_down_member_still_in_touch_is_not_counted_against_this_side() {
    // B and C have not taken their Down in yet, but A still reaches them: it waits for them.
    let stable_after = secs(5);
    let (mut h, _) = a_downs_b_and_c_as_indirectly_connected(stable_after);
    h.ticks_without_decision(12, secs(1));
}

#[test]
fn a_node_kept_by_another_nodes_decision_downs_itself_when_the_downed_never_took_it_in() {
    // Chaos seed 5163 at N = 5 (four members): A, itself indirectly connected, downed A, B and
    // C and kept D, while B, on a view in which A's records were set aside, downed A, B and D
    // and kept C. Each side's downs of the other never reached it. D heard A's decision, saw A
    // take its Down in, and B and C removed without: alone against two, it downs itself.
    let stable_after = secs(5);
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(stable_after, &d);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&a, &c), (&c, &a), (&d, &b)]);
    h.advance(secs(2));
    h.downed(&[&a, &b, &c]);
    h.seen(&[&a, &d]);
    h.leader(&d);
    h.records(&[(&d, &b), (&d, &c)]);
    h.removed_while_down(&b);
    h.removed_while_down(&c);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&d]);
    assert_eq!(h.sbr.poll_decision().unwrap().decision, Decision::DownAll);
}

#[test]
fn members_removed_before_they_took_their_down_in_count_for_one_decision_only() {
    // B, the leader, downed C and D as indirectly connected, keeping A and B; they were removed
    // before they were seen to take it in. A, not responsible, forgets them once the decision
    // after their removal is due: B crashing later is decided as one against one.
    let stable_after = secs(5);
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(stable_after, &a);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&b);
    h.reachability_changed(&[(&c, &d), (&d, &c)]);
    h.downed(&[&c, &d]);
    h.records(&[(&b, &c), (&b, &d)]);
    h.removed_while_down(&c);
    h.removed_while_down(&d);
    h.records(&[]);
    assert_eq!(h.sbr.model().removed_unacknowledged(), &nodes(&[&c, &d]));
    h.ticks_without_decision(6, secs(1));
    assert!(h.sbr.model().removed_unacknowledged().is_empty());
    h.leader(&a);
    h.reachability_changed(&[(&a, &b)]);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&b]);
}

#[test]
fn members_downed_by_a_decision_that_kept_more_are_forgotten_at_their_removal() {
    // Another node's decision kept A, B and E and downed C and D: outnumbered on their own view
    // too, they down themselves. A forgets them at their removal, so that the leader crashing
    // just after leaves two against one, not two against three.
    let stable_after = secs(5);
    let (a, b, c, d, e) = abcde();
    let mut h = Harness::keep_majority(stable_after, &a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&b);
    h.reachability_changed(&[(&b, &c), (&b, &d), (&e, &c), (&e, &d)]);
    h.downed(&[&c, &d]);
    h.removed_while_down(&c);
    h.removed_while_down(&d);
    h.records(&[]);
    assert!(h.sbr.model().removed_unacknowledged().is_empty());
    h.leader(&a);
    h.reachability_changed(&[(&a, &b), (&e, &b)]);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&b]);
}

#[test]
fn on_a_tie_the_downed_members_counted_on_the_other_side_count_for_the_lowest_address() {
    // Chaos seed 343 at N = 6: node 3 downed A and B (as indirectly connected) and kept itself;
    // its downs never reached them, and they kept themselves. A new incarnation joined node 3
    // meanwhile: two against the two removed members. On their own view A and B count
    // themselves, A holds the lowest address, and they keep themselves; so C downs all.
    let stable_after = secs(5);
    let (a, b, c, d, _) = abcde();
    let mut h = Harness::keep_majority(stable_after, &c);
    h.member_up(&[&a, &b, &c, &d]);
    h.leader(&c);
    h.downed(&[&a, &b]);
    h.records(&[(&c, &a), (&c, &b)]);
    h.removed_while_down(&a);
    h.removed_while_down(&b);
    h.records(&[]);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&c, &d]);
    assert_eq!(h.sbr.poll_decision().unwrap().decision, Decision::DownAll);
}

/// `m` restarted: the same address under uid `uid`, Up with a later up-number.
fn restarted(m: &Member, uid: u64) -> Member {
    let node = UniqueAddress::new(m.address().clone(), crate::address::Uid::new(uid).unwrap());
    Member::from_parts(
        node,
        crate::member::UpNumber(m.up_number().0 + 10 * uid as u32),
        MemberStatus::Up,
        m.roles().clone(),
        m.app_version().clone(),
    )
}

#[test]
fn downed_incarnations_of_an_address_held_by_a_live_member_are_not_counted() {
    // Chaos seed 2084 at N = 5: removed before they took their Down in, earlier incarnations of
    // the restarted nodes stayed in C's model as Down and unreachable, three of them of one
    // address, and outnumbered the live cluster at the next decision: C downed all. A process
    // that holds an address now joined after the one before it had stopped: of A's three
    // incarnations only A3 runs, and only one of B's may. So C's side of two outweighs B alone.
    let stable_after = secs(5);
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(stable_after, &c);
    h.member_up(&[&a, &b, &c]);
    h.leader(&c);
    h.downed(&[&a, &b]);
    h.records(&[(&c, &a), (&c, &b)]);
    h.removed_while_down(&a);
    h.removed_while_down(&b);
    let a2 = restarted(&a, 2);
    h.member_up(&[&a2]);
    h.downed(&[&a2]);
    h.records(&[(&c, &a2)]);
    h.removed_while_down(&a2);
    h.records(&[]);
    let a3 = restarted(&a, 3);
    h.member_up(&[&a3]);
    assert_eq!(h.sbr.model().removed_unacknowledged(), &nodes(&[&a, &a2, &b]));
    h.advance(stable_after);
    h.tick();
    // Only Down members were unreachable, and this side outweighs those that may run.
    h.expect_no_decision();
    assert!(h.sbr.model().removed_unacknowledged().is_empty());
}

#[test]
fn a_member_this_node_downed_as_the_minority_is_forgotten_at_its_removal() {
    // The minority of a clean partition, or a crashed member, is outweighed on its own view too.
    let stable_after = secs(5);
    let (a, b, c, ..) = abcde();
    let mut h = Harness::keep_majority(stable_after, &a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.reachability_changed(&[(&a, &c), (&b, &c)]);
    h.advance(stable_after);
    h.tick();
    h.expect_down_called(&[&c]);
    h.sbr.poll_decision().expect("a decision");
    h.downed(&[&c]);
    h.removed_while_down(&c);
    h.records(&[]);
    assert!(h.sbr.model().removed_unacknowledged().is_empty());
    assert!(h.sbr.model().unreachable().is_empty());
}

// ---- lease-majority -----------------------------------------------------------------------------

fn lease_harness(me: &Member) -> Harness {
    Harness::new(&config("lease-majority", Duration::ZERO), me)
}

#[test]
fn lease_majority_downs_the_other_side_when_the_lease_is_acquired() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.tick();
    let check = h.lease_request().unwrap();
    assert_eq!(
        check,
        LeaseRequest {
            op: LeaseOp::Check,
            lease_name: "sys-convoke-sbr".to_owned(),
            owner: "a:7355".to_owned(),
        }
    );
    assert!(h.sbr.is_waiting_for_lease());
    h.sbr.handle_lease_result(h.now, LeaseOp::Check, false);
    // The majority acquires at once.
    h.answer(LeaseOp::Acquire, true);
    h.expect_down_called(&[&b]);
    assert_eq!(h.sbr.poll_decision().unwrap().trigger, DecisionTrigger::LeaseAcquired);
}

#[test]
fn lease_majority_downs_its_own_side_when_the_lease_is_denied() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.tick();
    h.answer(LeaseOp::Check, false);
    h.answer(LeaseOp::Acquire, false);
    assert_eq!(h.downs(), [c.node().clone(), a.node().clone()], "others first, self last");
    let d = h.sbr.poll_decision().unwrap();
    assert_eq!((d.decision, d.trigger), (Decision::DownReachable, DecisionTrigger::LeaseDenied));
}

#[test]
fn lease_majority_acts_at_once_when_it_already_holds_the_lease() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.tick();
    h.answer(LeaseOp::Check, true);
    assert_eq!(h.lease_request(), None);
    h.expect_down_called(&[&b]);
    assert_eq!(h.sbr.poll_decision().unwrap().trigger, DecisionTrigger::LeaseHeld);
}

#[test]
fn lease_majority_downs_indirectly_connected_with_the_lease_and_all_without_it() {
    for (granted, expected) in [(true, vec!['a', 'b']), (false, vec!['a', 'b', 'c'])] {
        let (a, b, c, ..) = abcde();
        let mut h = lease_harness(&a);
        h.member_up(&[&a, &b, &c]);
        h.leader(&a);
        h.reachability_changed(&[(&a, &b), (&b, &a)]);
        h.tick();
        h.answer(LeaseOp::Check, false);
        h.answer(LeaseOp::Acquire, granted);
        let want: Vec<Member> = expected.into_iter().map(member).collect();
        h.expect_down_called(&want.iter().collect::<Vec<_>>());
    }
}

#[test]
fn lease_majority_minority_waits_before_acquiring() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&c);
    h.member_up(&[&a, &b, &c]);
    h.leader(&c);
    h.unreachable(&[&a, &b]);
    h.tick();
    h.answer(LeaseOp::Check, false);
    assert_eq!(h.lease_request(), None, "the minority waits");
    assert_eq!(h.sbr.acquire_deadline(), Some(h.now + ms(20)));
    h.advance(ms(19));
    h.sbr.handle_acquire_timeout(h.now);
    assert_eq!(h.lease_request(), None);
    h.advance(ms(1));
    h.sbr.handle_acquire_timeout(h.now);
    assert_eq!(h.sbr.acquire_deadline(), None);
    h.answer(LeaseOp::Acquire, true);
    h.expect_down_called(&[&a, &b]);
}

#[test]
fn lease_majority_holds_back_events_and_ticks_while_waiting_for_the_lease() {
    let (a, b, c, d, e) = abcde();
    let mut h = lease_harness(&a);
    h.member_up(&[&a, &b, &c, &d, &e]);
    h.leader(&a);
    h.unreachable(&[&d]);
    h.tick();
    h.answer(LeaseOp::Check, false);
    // E becomes unreachable while the acquisition is under way; the decision was taken without it.
    h.unreachable(&[&e]);
    assert!(!h.sbr.model().is_unreachable(e.node()), "held back");
    h.tick();
    assert_eq!(h.lease_request().map(|r| r.op), Some(LeaseOp::Acquire));
    h.sbr.handle_lease_result(h.now, LeaseOp::Acquire, true);
    h.expect_down_called(&[&d]);
    assert!(h.sbr.model().is_unreachable(e.node()), "applied after the answer");
}

#[test]
fn lease_majority_releases_the_lease_after_the_downed_are_removed_and_release_after() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&a);
    let table = InMemoryLeaseTable::new();
    // Answers every pending request from the table; returns the operations answered.
    let serve = |h: &mut Harness| {
        let mut ops = Vec::new();
        while let Some(req) = h.lease_request() {
            let granted = table.answer(&req, h.now, None);
            h.sbr.handle_lease_result(h.now, req.op, granted);
            ops.push(req.op);
        }
        ops
    };
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.unreachable(&[&b]);
    h.tick();
    assert_eq!(serve(&mut h), [LeaseOp::Check, LeaseOp::Acquire]);
    h.expect_down_called(&[&b]);
    assert_eq!(table.holder("sys-convoke-sbr", h.now).as_deref(), Some("a:7355"));

    // B is Down but not removed yet: the lease is kept (a decision on the Down B downs nothing).
    h.event(ClusterEvent::MemberDowned(downed(&b)));
    h.advance(secs(5));
    h.tick();
    assert_eq!(serve(&mut h), [LeaseOp::Check]);
    assert_eq!(h.downs(), []);
    h.remove(&b);
    h.advance(ms(9_999));
    h.tick();
    assert_eq!(serve(&mut h), [], "release_after has not passed since the removal");
    h.advance(ms(1));
    h.tick();
    h.tick();
    assert_eq!(serve(&mut h), [LeaseOp::Release], "one release at a time");
    assert_eq!(table.holder("sys-convoke-sbr", h.now), None);
    h.advance(secs(1));
    h.tick();
    assert_eq!(serve(&mut h), [], "released");
}

#[test]
fn an_answer_nobody_waits_for_is_ignored() {
    let (a, b, c, ..) = abcde();
    let mut h = lease_harness(&a);
    h.member_up(&[&a, &b, &c]);
    h.leader(&a);
    h.sbr.handle_lease_result(h.now, LeaseOp::Acquire, true);
    h.sbr.handle_lease_result(h.now, LeaseOp::Check, false);
    h.expect_no_decision();
    assert_eq!(h.lease_request(), None);
}

// ---- the in-memory lease ------------------------------------------------------------------------

#[test]
fn two_contenders_for_an_in_memory_lease_one_wins_until_release_or_expiry() {
    #[allow(clippy::disallowed_methods, reason = "a base instant; only offsets matter")]
    let t = Instant::now();
    let table = InMemoryLeaseTable::new();
    let ttl = Some(secs(10));
    assert!(table.acquire("l", "x", t, ttl));
    assert!(!table.acquire("l", "y", t + secs(1), ttl), "held by x");
    assert!(table.check("l", "x", t + secs(1)));
    assert!(!table.check("l", "y", t + secs(1)));
    assert!(table.acquire("l", "x", t + secs(5), ttl), "x renews");
    assert!(!table.acquire("l", "y", t + secs(14), ttl), "renewed until 15 s");
    assert!(!table.release("l", "y"), "y does not hold it");
    assert!(table.acquire("l", "y", t + secs(15), ttl), "expired");
    assert_eq!(table.holder("l", t + secs(15)).as_deref(), Some("y"));
    assert!(table.release("l", "y"));
    assert_eq!(table.holder("l", t + secs(15)), None);
    assert!(table.acquire("other", "x", t, None), "leases are independent");
}

#[test]
fn the_in_memory_lease_implements_the_lease_trait_on_a_shared_table() {
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use crate::sbr::{InMemoryLease, Lease, LeaseSettings, perform};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the in-memory lease is immediate"),
        }
    }

    #[allow(clippy::disallowed_methods, reason = "a base instant; only offsets matter")]
    let t = Instant::now();
    let now = Arc::new(Mutex::new(t));
    let clock = {
        let now = now.clone();
        Arc::new(move || *now.lock().unwrap())
    };
    let table = InMemoryLeaseTable::new();
    let side1 = InMemoryLease::new(table.clone(), LeaseSettings::new("l", "h1:1"), clock.clone());
    let side2 = InMemoryLease::new(table, LeaseSettings::new("l", "h2:1"), clock);
    assert_eq!(side1.settings().owner_name, "h1:1");
    assert!(block_on(perform(&side1, LeaseOp::Acquire)));
    assert!(!block_on(perform(&side2, LeaseOp::Acquire)));
    assert!(side1.check_lease() && !side2.check_lease());
    // Not renewed within the heartbeat timeout: the lease expires and the other side gets it.
    *now.lock().unwrap() = t + side1.settings().heartbeat_timeout;
    assert!(!side1.check_lease());
    assert!(block_on(side2.acquire()).unwrap());
    assert!(!block_on(perform(&side1, LeaseOp::Release)));
    assert!(block_on(perform(&side2, LeaseOp::Release)));
    assert!(!block_on(perform(&side2, LeaseOp::Check)));
}

#[test]
fn lease_settings_for_a_node_carry_the_name_owner_and_timing() {
    use crate::config::LeaseMajorityConfig;
    use crate::sbr::LeaseSettings;
    let mut l = LeaseMajorityConfig::default();
    assert_eq!(l.heartbeat_interval, secs(12));
    assert_eq!(l.heartbeat_timeout, secs(120));
    assert_eq!(l.lease_operation_timeout, secs(5));
    let lease = LeaseSettings::for_node(&l, "orders", "10.0.0.1:25520");
    assert_eq!(lease, LeaseSettings::new("orders-convoke-sbr", "10.0.0.1:25520"));
    l.lease_name = "shared".into();
    l.heartbeat_interval = secs(3);
    l.heartbeat_timeout = secs(9);
    l.lease_operation_timeout = secs(1);
    let lease = LeaseSettings::for_node(&l, "orders", "n1");
    assert_eq!(lease.lease_name, "shared");
    assert_eq!(lease.owner_name, "n1");
    assert_eq!(lease.heartbeat_interval, secs(3));
    assert_eq!(lease.heartbeat_timeout, secs(9));
    assert_eq!(lease.operation_timeout, secs(1));
}
