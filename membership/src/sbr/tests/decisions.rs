//! The decision table: for every strategy, the partition cases of the reference
//! `SplitBrainResolverSpec`. Each case lists the sides of a split (`|`), with indirectly connected
//! members in parentheses, and the members that survive (`=>`). A side sees the members of every
//! other side as unreachable, observed by its first member, and has itself seen the gossip.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::reachability::{Reachability, ReachabilityStatus, Record};
use crate::sbr::{Decision, DoubleIndirectlyConnected, DowningModel, Strategy};

use Decision::*;

struct Setup {
    strategy: Strategy,
    side1: Vec<Member>,
    side2: Vec<Member>,
    side3: Vec<Member>,
    indirectly_connected: Vec<(Member, Member)>,
}

impl Setup {
    fn new(strategy: Strategy) -> Self {
        Self {
            strategy,
            side1: Vec::new(),
            side2: Vec::new(),
            side3: Vec::new(),
            indirectly_connected: Vec::new(),
        }
    }

    fn sides(mut self, sides: &[&[&Member]]) -> Self {
        let to_vec = |s: &[&Member]| s.iter().map(|m| (*m).clone()).collect::<Vec<_>>();
        self.side1 = sides.first().map_or_else(Vec::new, |s| to_vec(s));
        self.side2 = sides.get(1).map_or_else(Vec::new, |s| to_vec(s));
        self.side3 = sides.get(2).map_or_else(Vec::new, |s| to_vec(s));
        self
    }

    fn indirectly(mut self, pairs: &[(&Member, &Member)]) -> Self {
        self.indirectly_connected =
            pairs.iter().map(|(a, b)| ((*a).clone(), (*b).clone())).collect();
        self
    }

    fn all(&self) -> Vec<&Member> {
        self.side1.iter().chain(&self.side2).chain(&self.side3).collect()
    }

    /// The model of the member that sees `side` as its reachable part.
    fn model(&self, side: &[Member]) -> DowningModel {
        let mut model = DowningModel::new(self.strategy.clone(), "default");
        for m in self.all() {
            model.add(m.clone());
        }
        let Some(head) = side.first() else { return model };
        let others = self.all().into_iter().filter(|m| !side.contains(m));
        let mut pairs: Vec<(Member, Member)> = self.indirectly_connected.clone();
        pairs.extend(others.map(|o| (head.clone(), o.clone())));
        pairs.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        let records: Vec<Record> = pairs
            .iter()
            .map(|(from, to)| Record {
                observer: from.node().clone(),
                subject: to.node().clone(),
                status: ReachabilityStatus::Unreachable,
                version: 1,
            })
            .collect();
        let versions: Vec<_> = pairs.iter().map(|(from, _)| (from.node().clone(), 1)).collect();
        model.set_reachability(&Reachability::from_parts(records, versions));
        for (_, to) in pairs {
            model.add_unreachable(to);
        }
        let seen: BTreeSet<_> = side.iter().map(|m| m.node().clone()).collect();
        model.set_seen_by(std::sync::Arc::new(seen.into()));
        model
    }

    fn decide(&self, side: &[Member]) -> Decision {
        self.model(side).decide()
    }

    fn try_nodes_to_down(
        &self,
        side: &[Member],
        decision: Decision,
    ) -> Result<BTreeSet<UniqueAddress>, DoubleIndirectlyConnected> {
        self.model(side).nodes_to_down(decision, &node('z'))
    }

    fn nodes_to_down_for(&self, side: &[Member], decision: Decision) -> BTreeSet<UniqueAddress> {
        self.try_nodes_to_down(side, decision).unwrap()
    }

    fn nodes_to_down(&self, side: &[Member]) -> BTreeSet<UniqueAddress> {
        self.nodes_to_down_for(side, self.decide(side))
    }

    /// Every non-empty side downs exactly `expected`.
    fn assert_downing(&self, expected: &[&Member]) {
        for side in [&self.side1, &self.side2, &self.side3] {
            if !side.is_empty() {
                self.assert_downing_side(side, expected);
            }
        }
    }

    fn assert_downing_side(&self, side: &[Member], expected: &[&Member]) {
        assert_eq!(self.nodes_to_down(side), nodes(expected), "side {:?}", names(side));
    }
}

fn names(side: &[Member]) -> Vec<String> {
    side.iter().map(|m| format!("{}:{}", m.address().host(), m.status())).collect()
}

fn m(name: char) -> Member {
    member(name)
}

fn role(r: &str) -> Option<String> {
    Some(r.to_owned())
}

fn keep_majority(role: Option<String>) -> Setup {
    Setup::new(Strategy::KeepMajority { role })
}

fn static_quorum(quorum_size: usize, role: Option<String>) -> Setup {
    Setup::new(Strategy::StaticQuorum { quorum_size, role })
}

fn keep_oldest(down_if_alone: bool, role: Option<String>) -> Setup {
    Setup::new(Strategy::KeepOldest { down_if_alone, role })
}

const MINORITY_DELAY: Duration = Duration::from_secs(2);

fn lease_majority(role: Option<String>) -> Setup {
    Setup::new(Strategy::LeaseMajority {
        role,
        acquire_lease_delay_for_minority: MINORITY_DELAY,
        release_after: Duration::from_secs(10),
    })
}

// ---- static-quorum ------------------------------------------------------------------------------

#[test]
fn static_quorum_downs_unreachable_when_enough_reachable_nodes() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = static_quorum(3, None).sides(&[&[&a, &c, &e], &[&b, &d]]);
    s.assert_downing(&[&b, &d]);
}

#[test]
fn static_quorum_downs_reachable_when_not_enough_reachable_nodes() {
    let (a, b, c, d) = (m('a'), m('b'), m('c'), m('d'));
    let s = static_quorum(3, None).sides(&[&[&a, &b], &[&c, &d]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

#[test]
fn static_quorum_downs_unreachable_when_enough_reachable_nodes_with_role() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = static_quorum(2, role("role3")).sides(&[&[&a, &b, &c], &[&d, &e]]);
    s.assert_downing(&[&d, &e]);
}

#[test]
fn static_quorum_downs_all_when_there_are_more_than_twice_the_quorum_minus_one_members() {
    let (a, b, c, d, e, f) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'));
    let s = static_quorum(3, None).sides(&[&[&a, &b, &c], &[&d, &e, &f]]);
    s.assert_downing(&[&a, &b, &c, &d, &e, &f]);
}

#[test]
fn static_quorum_does_not_count_joining_members() {
    let (a, b, c, d, e, f) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'));
    let (cj, fj) = (joining(&c), joining(&f));
    let s = static_quorum(3, None).sides(&[&[&a, &b, &cj], &[&d, &e, &fj]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownReachable);

    // C becomes Up.
    let s = static_quorum(3, None).sides(&[&[&a, &b, &c], &[&d, &e, &fj]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    assert_eq!(s.decide(&s.side2), DownReachable);

    // F becomes Up, C is still Joining.
    let s = static_quorum(3, None).sides(&[&[&a, &b, &cj], &[&d, &e, &f]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownUnreachable);

    // Both C and F Up: too many members.
    let s = static_quorum(3, None).sides(&[&[&a, &b, &c], &[&d, &e, &f]]);
    assert_eq!(s.decide(&s.side1), DownAll);
    assert_eq!(s.decide(&s.side2), DownAll);
}

#[test]
fn static_quorum_counts_leaving_but_not_exiting_members() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = static_quorum(3, None).sides(&[&[&a, &b, &leaving(&c)], &[&d, &e]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    assert_eq!(s.decide(&s.side2), DownReachable);

    let s = static_quorum(3, None).sides(&[&[&a, &b, &exiting(&c)], &[&d, &e]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

// ---- keep-majority ------------------------------------------------------------------------------

#[test]
fn keep_majority_a_c_e_vs_b_d_keeps_a_c_e() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_majority(None).sides(&[&[&a, &c, &e], &[&b, &d]]).assert_downing(&[&b, &d]);
}

#[test]
fn keep_majority_a_b_vs_c_d_e_keeps_c_d_e() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_majority(None).sides(&[&[&a, &b], &[&c, &d, &e]]).assert_downing(&[&a, &b]);
}

#[test]
fn keep_majority_b_alone_vs_a_c_downs_b() {
    let (a, b, c) = (m('a'), m('b'), m('c'));
    keep_majority(None).sides(&[&[&b], &[&a, &c]]).assert_downing(&[&b]);
}

#[test]
fn keep_majority_equal_halves_a_b_vs_c_d_keep_the_half_with_the_lowest_address() {
    let (a, b, c, d) = (m('a'), m('b'), m('c'), m('d'));
    keep_majority(None).sides(&[&[&a, &b], &[&c, &d]]).assert_downing(&[&c, &d]);
}

#[test]
fn keep_majority_two_nodes_a_vs_b_keeps_the_lowest_address() {
    let (a, b) = (m('a'), m('b'));
    keep_majority(None).sides(&[&[&a], &[&b]]).assert_downing(&[&b]);
}

#[test]
fn keep_majority_with_role_a_b_vs_c_d_e_keeps_the_side_with_more_role_members() {
    // role3: A, B, D.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_majority(role("role3")).sides(&[&[&a, &b], &[&c, &d, &e]]).assert_downing(&[&c, &d, &e]);
}

#[test]
fn keep_majority_with_role_equal_halves_keep_the_lowest_address_with_the_role() {
    // role2: C, D; C is the lowest with it.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_majority(role("role2")).sides(&[&[&a, &d, &e], &[&b, &c]]).assert_downing(&[&a, &d, &e]);
}

#[test]
fn keep_majority_downs_all_when_no_member_has_the_role() {
    let (c, e) = (m('c'), m('e'));
    keep_majority(role("role3")).sides(&[&[&c], &[&e]]).assert_downing(&[&c, &e]);
}

#[test]
fn keep_majority_does_not_count_a_joining_member_but_downs_it() {
    // {B, D} | {Aj, C} => {B, D}: without A, C is not the lowest address any more.
    let (a, b, c, d) = (m('a'), m('b'), m('c'), m('d'));
    let aj = joining(&a);
    keep_majority(None).sides(&[&[&b, &d], &[&aj, &c]]).assert_downing(&[&aj, &c]);
}

#[test]
fn keep_majority_downs_the_minority_with_its_joining_member() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let bj = joining(&b);
    keep_majority(None).sides(&[&[&a, &bj], &[&c, &d, &e]]).assert_downing(&[&a, &bj]);
}

#[test]
fn keep_majority_split_in_three_parts_without_a_majority_downs_every_part() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_majority(None).sides(&[&[&a, &b], &[&c, &d], &[&e]]);
    s.assert_downing_side(&s.side1, &[&a, &b]);
    s.assert_downing_side(&s.side2, &[&c, &d]);
    s.assert_downing_side(&s.side3, &[&e]);
}

#[test]
fn keep_majority_counts_unreachable_members_downed_but_not_removed_on_the_other_side() {
    // {A, D, E}: A, not yet seeing a fresh cut from D, kept {A, D} and downed E, while D kept
    // {D, E} and downed A. Now A sees D unreachable too, and E (Down, unreachable) is not removed
    // (D's unreachability blocks convergence). Alone against D, a tie that A's lowest address
    // would win; but E may be running beside D, which is what happened: A downs all.
    let (a, d, e) = (m('a'), m('d'), m('e'));
    let ed = downed(&e);
    let s = keep_majority(None).sides(&[&[&a], &[&d, &ed]]);
    assert_eq!(s.decide(&s.side1), DownAll);
    s.assert_downing_side(&s.side1, &[&a, &d]);
    // Once E is removed, the tie keeps A as before.
    keep_majority(None).sides(&[&[&a], &[&d]]).assert_downing(&[&d]);
    // A Down member this side still reaches is on its way out and counts on neither side.
    let s = keep_majority(None).sides(&[&[&a, &ed], &[&d]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable);
}

#[test]
fn keep_majority_detects_members_moved_up_during_the_partition() {
    // {A, B, F', G'} | {C, D, E} => {A, B, F, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let s = keep_majority(None).sides(&[&[&a, &b, &f, &g], &[&c, &d, &e]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    s.assert_downing_side(&s.side1, &[&c, &d, &e]);

    // F and G were moved Up by side 1 during the partition; side 2 still sees them Joining.
    let (fj, gj) = (joining(&f), joining(&g));
    let s = keep_majority(None).sides(&[&[&a, &b, &fj, &gj], &[&c, &d, &e]]);
    assert_eq!(s.decide(&s.side2), DownAll);
    s.assert_downing_side(&s.side2, &[&a, &b, &fj, &gj, &c, &d, &e]);
}

#[test]
fn keep_majority_detects_a_member_moved_up_during_the_partition_making_equal_halves() {
    // {A, B, F'} | {C, D, E} => {A, B, F}
    let (a, b, c, d, e, f) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'));
    let s = keep_majority(None).sides(&[&[&a, &b, &f], &[&c, &d, &e]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable, "A has the lowest address");
    s.assert_downing_side(&s.side1, &[&c, &d, &e]);

    let fj = joining(&f);
    let s = keep_majority(None).sides(&[&[&a, &b, &fj], &[&c, &d, &e]]);
    assert_eq!(s.decide(&s.side2), DownAll, "counting the joining F, the halves are equal");
    s.assert_downing_side(&s.side2, &[&a, &b, &fj, &c, &d, &e]);
}

#[test]
fn keep_majority_a_member_moved_up_on_the_majority_side_is_safe() {
    // {A, B} | {C, D, E, F'} => {C, D, E, F}
    let (a, b, c, d, e, f) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'));
    let fj = joining(&f);
    let s = keep_majority(None).sides(&[&[&a, &b], &[&c, &d, &e, &fj]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    s.assert_downing_side(&s.side1, &[&a, &b]);

    let s = keep_majority(None).sides(&[&[&a, &b], &[&c, &d, &e, &f]]);
    assert_eq!(s.decide(&s.side2), DownUnreachable);
    s.assert_downing_side(&s.side2, &[&a, &b]);
}

#[test]
fn keep_majority_detects_a_leaving_member_moved_to_exiting_during_the_partition() {
    // {A', B} | {C, D} => {C, D}
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let (al, ej) = (leaving(&a), joining(&e));
    let s = keep_majority(None).sides(&[&[&al, &b, &ej], &[&c, &d]]);
    assert_eq!(s.decide(&s.side1), DownAll);
    s.assert_downing_side(&s.side1, &[&al, &b, &ej, &c, &d]);

    // Side 2 moved A to Exiting; side 1 does not know.
    let ax = exiting(&a);
    let s = keep_majority(None).sides(&[&[&ax, &b], &[&c, &d]]);
    assert_eq!(s.decide(&s.side2), DownUnreachable);
    s.assert_downing_side(&s.side2, &[&b]);
}

#[test]
fn keep_majority_indirectly_connected_a_b_down_both() {
    // {(A, B)} => {}
    let (a, b) = (m('a'), m('b'));
    let s = keep_majority(None).sides(&[&[&a, &b]]).indirectly(&[(&a, &b), (&b, &a)]);
    s.assert_downing(&[&a, &b]);
}

#[test]
fn keep_majority_indirectly_connected_a_b_with_c_keeps_c() {
    // {(A, B), C} => {C}
    let (a, b, c) = (m('a'), m('b'), m('c'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c]]).indirectly(&[(&a, &b), (&b, &a)]);
    s.assert_downing(&[&a, &b]);
}

#[test]
fn keep_majority_indirectly_connected_cycle_of_three_downs_all() {
    // {(A, B, C)} => {}
    let (a, b, c) = (m('a'), m('b'), m('c'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c]]).indirectly(&[(&a, &b), (&b, &c), (&c, &a)]);
    s.assert_downing(&[&a, &b, &c]);
}

#[test]
fn keep_majority_indirectly_connected_two_pairs_of_four_downs_all() {
    // {(A, B, C, D)} => {}
    let (a, b, c, d) = (m('a'), m('b'), m('c'), m('d'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c, &d]]).indirectly(&[
        (&a, &d),
        (&d, &a),
        (&b, &c),
        (&c, &b),
    ]);
    s.assert_downing(&[&a, &b, &c, &d]);
}

#[test]
fn keep_majority_indirectly_connected_cycle_of_three_with_d_e_keeps_d_e() {
    // {(A, B, C), D, E} => {D, E}
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c, &d, &e]]).indirectly(&[
        (&a, &b),
        (&b, &c),
        (&c, &a),
    ]);
    s.assert_downing(&[&a, &b, &c]);
}

#[test]
fn keep_majority_two_groups_of_indirectly_connected_keep_the_fully_connected() {
    // {A, (B, C), D, (E, F), G} => {A, D, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c, &d, &e, &f, &g]]).indirectly(&[
        (&b, &c),
        (&c, &b),
        (&e, &f),
        (&f, &e),
    ]);
    s.assert_downing(&[&b, &c, &e, &f]);
}

#[test]
fn keep_majority_indirectly_connected_detected_via_seen_downs_all() {
    // {(A, B, C)} => {}: B and C are unreachable from A but have seen the gossip.
    let (a, b, c) = (m('a'), m('b'), m('c'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c]]).indirectly(&[(&a, &b), (&a, &c)]);
    s.assert_downing(&[&a, &b, &c]);
}

#[test]
fn keep_majority_indirectly_connected_detected_via_seen_keeps_e() {
    // {(A, B, C, D), E} => {E}
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c, &d, &e]]).indirectly(&[
        (&b, &c),
        (&c, &b),
        (&a, &d),
    ]);
    s.assert_downing(&[&a, &b, &c, &d]);
}

#[test]
fn keep_majority_indirectly_connected_with_a_crashed_node_downs_both() {
    // {(A, B), D, E} | {C} => {D, E}: the crashed C is downed as well.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s =
        keep_majority(None).sides(&[&[&a, &b, &d, &e], &[&c]]).indirectly(&[(&a, &b), (&b, &a)]);
    s.assert_downing_side(&s.side1, &[&a, &b, &c]);
}

#[test]
fn keep_majority_indirectly_connected_with_a_clean_partition_keeps_a() {
    // {A, (B, C)} | {D, E} => {A}
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s =
        keep_majority(None).sides(&[&[&a, &b, &c], &[&d, &e]]).indirectly(&[(&b, &c), (&c, &b)]);
    // Side 1 keeps the fully connected A, and as the majority of the clean partition downs D, E.
    s.assert_downing_side(&s.side1, &[&b, &c, &d, &e]);
    // Side 2 did not see the indirect connection if the clean partition came first; C is then
    // not downed there, which is fine.
    let s2 = keep_majority(None).sides(&[&[&a, &b, &c], &[&d, &e]]);
    s2.assert_downing_side(&s2.side2, &[&d, &e]);
    // Or it did, when the indirect connection came first.
    s.assert_downing_side(&s.side2, &[&b, &c, &d, &e]);
}

#[test]
fn keep_majority_indirectly_connected_on_the_minority_side_of_a_clean_partition() {
    // {A, (B, C)} | {D, E, F, G} => {D, E, F, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e, &f, &g]];
    let s = keep_majority(None).sides(sides).indirectly(&[(&b, &c), (&c, &b)]);
    s.assert_downing_side(&s.side1, &[&a, &b, &c]);
    keep_majority(None).sides(sides).assert_downing_side(&s.side2, &[&a, &b, &c]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c]);
}

#[test]
fn keep_majority_indirectly_connected_on_the_majority_side_of_a_clean_partition() {
    // {A, B, C} | {(D, E), F, G} => {F, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e, &f, &g]];
    let clean = keep_majority(None).sides(sides);
    clean.assert_downing_side(&clean.side1, &[&a, &b, &c]);
    let s = keep_majority(None).sides(sides).indirectly(&[(&d, &e), (&e, &d)]);
    // Seen from side 1, the indirectly connected D and E are downed as well.
    s.assert_downing_side(&s.side1, &[&a, &b, &c, &d, &e]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c, &d, &e]);
}

#[test]
fn keep_majority_indirectly_connected_spanning_a_clean_partition_keeps_d_g() {
    // {A, (B), C} | {D, (E, F), G} => {D, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let s = keep_majority(None).sides(&[&[&a, &b, &c], &[&d, &e, &f, &g]]).indirectly(&[
        (&b, &e),
        (&e, &f),
        (&f, &b),
    ]);
    s.assert_downing_side(&s.side1, &[&a, &b, &c, &e, &f]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c, &e, &f]);
}

#[test]
fn keep_majority_indirectly_connected_via_seen_with_a_clean_partition_downs_all() {
    // {A, B, C} | {(D, E), (F, G)} => {}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e, &f, &g]];
    let clean = keep_majority(None).sides(sides);
    clean.assert_downing_side(&clean.side1, &[&a, &b, &c]);
    let s = keep_majority(None).sides(sides).indirectly(&[(&d, &e), (&g, &f)]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c, &d, &e, &f, &g]);
}

#[test]
fn keep_majority_double_indirectly_connected_decision_falls_back_to_down_all() {
    // {A, B, C} | {(D, E), (F, G)} => {}, when the indirect connection came before the clean
    // partition: side 1 cannot remove the records D->E, G->F (it has no seen evidence for them),
    // so its second decision is again an indirectly-connected one.
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let s = keep_majority(None)
        .sides(&[&[&a, &b, &c], &[&d, &e, &f, &g]])
        .indirectly(&[(&d, &e), (&g, &f)]);
    let decision = s.decide(&s.side1);
    assert_eq!(decision, DownIndirectlyConnected);
    let err = s.try_nodes_to_down(&s.side1, decision).unwrap_err();
    assert_eq!(err.decision, DownIndirectlyConnected);
    s.assert_downing_side(&s.side2, &[&a, &b, &c, &d, &e, &f, &g]);
}

// ---- keep-oldest --------------------------------------------------------------------------------

#[test]
fn keep_oldest_keeps_the_side_with_the_oldest() {
    // E is the oldest.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_oldest(true, None).sides(&[&[&a, &e], &[&b, &c, &d]]).assert_downing(&[&b, &c, &d]);
}

#[test]
fn keep_oldest_keeps_the_side_with_the_oldest_with_role() {
    // role2: C and D; D is the oldest of them.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(true, role("role2")).sides(&[&[&a, &e], &[&b, &c, &d]]);
    s.assert_downing(&[&a, &e]);
}

#[test]
fn keep_oldest_downs_the_oldest_when_it_is_alone() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_oldest(true, None).sides(&[&[&e], &[&a, &b, &c, &d]]).assert_downing(&[&e]);
}

#[test]
fn keep_oldest_keeps_the_oldest_of_a_two_node_cluster() {
    // B is older than A.
    let (a, b) = (m('a'), m('b'));
    keep_oldest(true, None).sides(&[&[&b], &[&a]]).assert_downing(&[&a]);
}

#[test]
fn keep_oldest_keeps_a_single_oldest() {
    let a = m('a');
    keep_oldest(true, None).sides(&[&[], &[&a]]).assert_downing(&[]);
}

#[test]
fn keep_oldest_keeps_the_oldest_even_when_alone_without_down_if_alone() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    keep_oldest(false, None).sides(&[&[&e], &[&a, &b, &c, &d]]).assert_downing(&[&a, &b, &c, &d]);
}

#[test]
fn keep_oldest_detects_an_oldest_leaving_member_moved_to_exiting_scenario_1() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let ex = exiting(&e);
    let s = keep_oldest(true, None).sides(&[&[&a, &b, &d], &[&c, &ex]]);
    // E is Exiting so D is the oldest.
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    s.assert_downing_side(&s.side1, &[&c]);

    // Side 1 moved E to Exiting; side 2 still sees it Leaving.
    let el = leaving(&e);
    let s = keep_oldest(true, None).sides(&[&[&a, &b, &d], &[&c, &el]]);
    assert_eq!(s.decide(&s.side2), DownAll);
    s.assert_downing_side(&s.side2, &[&a, &b, &d, &c, &el]);
}

#[test]
fn keep_oldest_detects_an_oldest_leaving_member_scenario_2() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(true, None).sides(&[&[&a, &leaving(&e)], &[&b, &c, &d]]);
    assert_eq!(s.decide(&s.side1), DownAll);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

#[test]
fn keep_oldest_leaving_members_on_the_younger_side_scenario_3() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let (bl, cl) = (leaving(&b), leaving(&c));
    keep_oldest(true, None).sides(&[&[&a, &e], &[&bl, &cl, &d]]).assert_downing(&[&bl, &cl, &d]);
}

#[test]
fn keep_oldest_unless_alone_with_a_leaving_member_scenario_1() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(true, None).sides(&[&[&leaving(&d), &e], &[&a, &b, &c]]);
    assert_eq!(s.decide(&s.side1), DownAll);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

#[test]
fn keep_oldest_unless_alone_with_a_leaving_member_scenario_4() {
    let (a, b, c, e) = (m('a'), m('b'), m('c'), m('e'));
    let s = keep_oldest(true, None).sides(&[&[&e], &[&a, &b, &leaving(&c)]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownUnreachable);
}

#[test]
fn keep_oldest_unless_alone_with_leaving_members_scenario_3() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s =
        keep_oldest(true, None).sides(&[&[&e], &[&a, &leaving(&b), &leaving(&c), &leaving(&d)]]);
    assert_eq!(s.decide(&s.side1), DownReachable);
    assert_eq!(s.decide(&s.side2), DownAll);
}

#[test]
fn keep_oldest_both_sides_down_themselves_when_the_exiting_oldest_leaves_one_alone() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(true, None).sides(&[&[&d, &exiting(&e)], &[&a, &b, &c]]);
    // E is Exiting, so D is the oldest, but it is alone: side 2 is kept.
    assert_eq!(s.decide(&s.side1), DownReachable);
    // Side 1 moved E to Exiting; side 2 still sees it Leaving.
    let s = keep_oldest(true, None).sides(&[&[&d, &leaving(&e)], &[&a, &b, &c]]);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

#[test]
fn keep_oldest_detects_a_single_oldest_whose_peer_left() {
    let (a, b) = (m('a'), m('b'));
    let s = keep_oldest(true, None).sides(&[&[&a], &[&exiting(&b)]]);
    // B is Exiting, so A is the oldest.
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    // Side 1 moved B to Exiting; side 2 still sees it Leaving.
    let s = keep_oldest(true, None).sides(&[&[&a], &[&leaving(&b)]]);
    assert_eq!(s.decide(&s.side2), DownAll);
}

#[test]
fn keep_oldest_counts_a_joining_member_that_may_be_up_on_the_other_side_when_alone() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(true, None).sides(&[&[&joining(&a), &e], &[&b, &c, &d]]);
    // E is alone when the joining A is not counted...
    assert_eq!(s.decide(&s.side1), DownReachable);
    // ...but A may be Up on side 1, so side 2 downs all.
    assert_eq!(s.decide(&s.side2), DownAll);
}

#[test]
fn keep_oldest_ignores_joining_members_without_down_if_alone() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = keep_oldest(false, None).sides(&[&[&joining(&a), &e], &[&b, &c, &d]]);
    assert_eq!(s.decide(&s.side1), DownUnreachable);
    assert_eq!(s.decide(&s.side2), DownReachable);
}

#[test]
fn keep_oldest_indirectly_connected_a_b_with_c_keeps_c() {
    let (a, b, c) = (m('a'), m('b'), m('c'));
    let s = keep_oldest(true, None).sides(&[&[&a, &b, &c]]).indirectly(&[(&a, &b), (&b, &a)]);
    s.assert_downing(&[&a, &b]);
}

#[test]
fn keep_oldest_indirectly_connected_on_the_younger_side_of_a_clean_partition() {
    // {A, (B, C)} | {D, E, F, G} => {D, E, F, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e, &f, &g]];
    let s = keep_oldest(true, None).sides(sides).indirectly(&[(&b, &c), (&c, &b)]);
    s.assert_downing_side(&s.side1, &[&a, &b, &c]);
    keep_oldest(true, None).sides(sides).assert_downing_side(&s.side2, &[&a, &b, &c]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c]);
}

#[test]
fn keep_oldest_indirectly_connected_on_the_oldest_side_of_a_clean_partition() {
    // {A, B, C} | {(D, E), F, G} => {F, G}
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e, &f, &g]];
    let clean = keep_oldest(true, None).sides(sides);
    clean.assert_downing_side(&clean.side1, &[&a, &b, &c]);
    let s = keep_oldest(true, None).sides(sides).indirectly(&[(&d, &e), (&e, &d)]);
    s.assert_downing_side(&s.side1, &[&a, &b, &c, &d, &e]);
    s.assert_downing_side(&s.side2, &[&a, &b, &c, &d, &e]);
}

// ---- down-all -----------------------------------------------------------------------------------

#[test]
fn down_all_downs_every_member() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    Setup::new(Strategy::DownAll)
        .sides(&[&[&a, &b, &c], &[&d, &e]])
        .assert_downing(&[&a, &b, &c, &d, &e]);
}

#[test]
fn down_all_downs_every_member_when_any_is_indirectly_connected() {
    let (a, b, c) = (m('a'), m('b'), m('c'));
    Setup::new(Strategy::DownAll)
        .sides(&[&[&a, &b, &c]])
        .indirectly(&[(&a, &b), (&b, &a)])
        .assert_downing(&[&a, &b, &c]);
}

// ---- lease-majority -----------------------------------------------------------------------------

#[test]
fn lease_majority_acquires_and_downs_unreachable_and_reverses_to_down_reachable() {
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = lease_majority(None).sides(&[&[&a, &c, &e], &[&b, &d]]);
    let d1 = s.decide(&s.side1);
    assert_eq!(d1, AcquireLeaseAndDownUnreachable { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side1, d1), nodes(&[&b, &d]));
    assert_eq!(d1.reverse(), Some(DownReachable));
    assert_eq!(s.nodes_to_down_for(&s.side1, DownReachable), nodes(&[&a, &c, &e]));

    let d2 = s.decide(&s.side2);
    assert_eq!(d2, AcquireLeaseAndDownUnreachable { acquire_delay: MINORITY_DELAY });
    assert_eq!(s.nodes_to_down_for(&s.side2, d2), nodes(&[&a, &c, &e]));
    assert_eq!(d2.reverse(), Some(DownReachable));
    assert_eq!(s.nodes_to_down_for(&s.side2, DownReachable), nodes(&[&b, &d]));
}

#[test]
fn lease_majority_gives_the_half_with_the_lowest_address_a_head_start() {
    // role2: C, D; C is the lowest with it, so side 1 waits.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let s = lease_majority(role("role2")).sides(&[&[&a, &d, &e], &[&b, &c]]);
    let d1 = s.decide(&s.side1);
    assert_eq!(d1, AcquireLeaseAndDownUnreachable { acquire_delay: MINORITY_DELAY });
    assert_eq!(s.nodes_to_down_for(&s.side1, d1), nodes(&[&b, &c]));
    let d2 = s.decide(&s.side2);
    assert_eq!(d2, AcquireLeaseAndDownUnreachable { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side2, d2), nodes(&[&a, &d, &e]));
}

#[test]
fn lease_majority_indirectly_connected_a_b_with_c_keeps_c_or_downs_all_without_the_lease() {
    let (a, b, c) = (m('a'), m('b'), m('c'));
    let s = lease_majority(None).sides(&[&[&a, &b, &c]]).indirectly(&[(&a, &b), (&b, &a)]);
    let d1 = s.decide(&s.side1);
    assert_eq!(d1, AcquireLeaseAndDownIndirectlyConnected { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side1, d1), nodes(&[&a, &b]));
    assert_eq!(d1.reverse(), Some(ReverseDownIndirectlyConnected));
    let reverse = s.nodes_to_down_for(&s.side1, ReverseDownIndirectlyConnected);
    assert_eq!(reverse, nodes(&[&a, &b, &c]));
}

#[test]
fn lease_majority_indirectly_connected_with_a_clean_partition_keeps_a() {
    // {A, (B, C)} | {D, E} => {A}
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let sides: &[&[&Member]] = &[&[&a, &b, &c], &[&d, &e]];
    let s = lease_majority(None).sides(sides).indirectly(&[(&b, &c), (&c, &b)]);
    let d1 = s.decide(&s.side1);
    assert_eq!(d1, AcquireLeaseAndDownIndirectlyConnected { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side1, d1), nodes(&[&b, &c, &d, &e]));
    assert_eq!(s.nodes_to_down_for(&s.side1, d1.reverse().unwrap()), nodes(&[&a, &b, &c]));

    // Side 2 without seeing the indirect connection.
    let clean = lease_majority(None).sides(sides);
    let d2 = clean.decide(&clean.side2);
    assert_eq!(d2, AcquireLeaseAndDownUnreachable { acquire_delay: MINORITY_DELAY });
    assert_eq!(clean.nodes_to_down_for(&clean.side2, d2), nodes(&[&a, &b, &c]));
    assert_eq!(clean.nodes_to_down_for(&clean.side2, d2.reverse().unwrap()), nodes(&[&d, &e]));

    // Side 2 having seen it.
    let d3 = s.decide(&s.side2);
    assert_eq!(d3, AcquireLeaseAndDownIndirectlyConnected { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side2, d3), nodes(&[&a, &b, &c]));
    let reverse = s.nodes_to_down_for(&s.side2, d3.reverse().unwrap());
    assert_eq!(reverse, nodes(&[&b, &c, &d, &e]));
}

#[test]
fn lease_majority_indirectly_connected_to_an_already_downed_node_during_a_partition() {
    // {A, B, C, D} | {(E, F)} => {A, B, C, D}
    let (a, b, c, d, e, f) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'));
    let (el, fd) = (leaving(&e), downed(&f));
    let s = lease_majority(None).sides(&[&[&a, &b, &c, &d], &[&el, &fd]]).indirectly(&[(&el, &fd)]);
    // Unlike the reference, E seeing the downed F unreachable does not make E indirectly
    // connected (records about Down members are left out), so each side takes the clean
    // partition's decision: the majority acquires the lease at once and downs E, and E's side,
    // acquiring only after the minority's delay, downs itself when the lease is taken.
    let d1 = s.decide(&s.side1);
    assert_eq!(d1, AcquireLeaseAndDownUnreachable { acquire_delay: Duration::ZERO });
    assert_eq!(s.nodes_to_down_for(&s.side1, d1), nodes(&[&el]));
    let d2 = s.decide(&s.side2);
    assert_eq!(d2, AcquireLeaseAndDownUnreachable { acquire_delay: MINORITY_DELAY });
    assert_eq!(s.nodes_to_down_for(&s.side2, d2.reverse().unwrap()), nodes(&[&el]));
}

#[test]
fn keep_majority_two_nodes_that_each_saw_downed_members_unreachable_do_not_both_stay() {
    // {A, B, C, D, E}: C, D, E are Down, and A and B, cut off from each other, each saw them
    // unreachable. Each holds its own records and the other's about C, D, E, but not the other's
    // about itself. The reference takes the other for indirectly connected (it observes and is
    // observed) on both sides, and both stay. Without the records about Down members, it is a
    // clean A | B; a tie by itself would keep A, but C, D and E are Down and not removed: an
    // earlier decision downed them, which may not have reached them, so they may have kept
    // themselves. Counted on the other side, they turn A's decision into down-all, and B downs
    // itself: no cluster stays rather than two.
    let (a, b, c, d, e) = (m('a'), m('b'), m('c'), m('d'), m('e'));
    let (cd, dd, ed) = (downed(&c), downed(&d), downed(&e));
    let seen_from = |me: &Member, other: &Member| {
        keep_majority(None).sides(&[&[me], &[other, &cd, &dd, &ed]]).indirectly(&[
            (other, &cd),
            (other, &dd),
            (other, &ed),
        ])
    };
    let from_a = seen_from(&a, &b);
    assert_eq!(from_a.decide(&from_a.side1), DownAll);
    assert_eq!(from_a.nodes_to_down_for(&from_a.side1, DownAll), nodes(&[&a, &b]));
    let from_b = seen_from(&b, &a);
    assert_eq!(from_b.decide(&from_b.side1), DownReachable);
    assert_eq!(from_b.nodes_to_down_for(&from_b.side1, DownReachable), nodes(&[&b]));
}

// ---- the model's member views -------------------------------------------------------------------

#[test]
fn the_model_replaces_members_by_identity_and_forgets_removed_ones() {
    for strategy in [
        Strategy::KeepMajority { role: None },
        Strategy::KeepOldest { down_if_alone: true, role: None },
    ] {
        let (a, b) = (m('a'), m('b'));
        let mut model = DowningModel::new(strategy, "default");
        model.add(joining(&a));
        model.add(joining(&b));
        let statuses =
            |model: &DowningModel| model.all_members().map(Member::status).collect::<Vec<_>>();
        assert_eq!(statuses(&model), [MemberStatus::Joining, MemberStatus::Joining]);
        model.add(a.clone());
        model.add(b.clone());
        assert_eq!(statuses(&model), [MemberStatus::Up, MemberStatus::Up]);
        model.add(leaving(&b));
        assert_eq!(statuses(&model), [MemberStatus::Up, MemberStatus::Leaving]);
        model.add(exiting(&b));
        assert_eq!(statuses(&model), [MemberStatus::Up, MemberStatus::Exiting]);
        model.remove(a.node());
        assert_eq!(statuses(&model), [MemberStatus::Exiting]);
    }
}

#[test]
fn the_model_collects_and_filters_members_by_status_and_reachability() {
    let (a, b, c, d, e, f, g) = (m('a'), m('b'), m('c'), m('d'), m('e'), m('f'), m('g'));
    let (aw, cj, el, fd, gx) = (weakly_up(&a), joining(&c), leaving(&e), downed(&f), exiting(&g));
    let sides: &[&[&Member]] = &[&[&aw, &b, &cj], &[&d, &el, &fd, &gx]];
    let s = keep_majority(None).sides(sides);
    let set = |it: &mut dyn Iterator<Item = &Member>| -> BTreeSet<UniqueAddress> {
        it.map(|m| m.node().clone()).collect()
    };

    let m1 = s.model(&s.side1);
    assert_eq!(set(&mut m1.members_with_role(false, false)), nodes(&[&b, &d, &el]));
    assert_eq!(set(&mut m1.members_with_role(true, false)), nodes(&[&aw, &b, &cj, &d, &el]));
    assert_eq!(set(&mut m1.members_with_role(false, true)), nodes(&[&b, &d]));
    assert_eq!(set(&mut m1.members_with_role(true, true)), nodes(&[&aw, &b, &cj, &d]));
    assert_eq!(set(&mut m1.reachable_members_with_role(false, false)), nodes(&[&b]));
    assert_eq!(set(&mut m1.reachable_members_with_role(true, false)), nodes(&[&aw, &b, &cj]));
    assert_eq!(set(&mut m1.reachable_members_with_role(false, true)), nodes(&[&b]));
    assert_eq!(set(&mut m1.reachable_members_with_role(true, true)), nodes(&[&aw, &b, &cj]));
    assert_eq!(set(&mut m1.unreachable_members_with_role(false, false)), nodes(&[&d, &el]));
    assert_eq!(set(&mut m1.unreachable_members_with_role(true, false)), nodes(&[&d, &el]));
    assert_eq!(set(&mut m1.unreachable_members_with_role(false, true)), nodes(&[&d]));
    assert_eq!(set(&mut m1.unreachable_members_with_role(true, true)), nodes(&[&d]));
    for (n, unreachable) in [(&aw, false), (&b, false), (&d, true), (&el, true), (&fd, true)] {
        assert_eq!(m1.is_unreachable(n.node()), unreachable, "{n}");
    }
    assert_eq!(set(&mut m1.joining()), nodes(&[&aw, &cj]));

    let m2 = s.model(&s.side2);
    assert_eq!(set(&mut m2.members_with_role(false, false)), nodes(&[&b, &d, &el]));
    assert_eq!(set(&mut m2.unreachable_members_with_role(false, false)), nodes(&[&b]));
    assert_eq!(set(&mut m2.unreachable_members_with_role(true, false)), nodes(&[&aw, &b, &cj]));
    assert_eq!(set(&mut m2.unreachable_members_with_role(true, true)), nodes(&[&aw, &b, &cj]));
    assert_eq!(set(&mut m2.reachable_members_with_role(false, false)), nodes(&[&d, &el]));
    assert_eq!(set(&mut m2.reachable_members_with_role(true, true)), nodes(&[&d]));
    for (n, unreachable) in [(&aw, true), (&b, true), (&d, false), (&el, false), (&fd, false)] {
        assert_eq!(m2.is_unreachable(n.node()), unreachable, "{n}");
    }
    assert_eq!(set(&mut m2.joining()), nodes(&[&aw, &cj]));
}
