//! Properties of the decisions over random memberships split cleanly in two sides A | B, each side
//! seeing the other as unreachable: the two sides' decisions must complement each other, so that
//! exactly one side survives (the simulator checks the same as invariant S2).

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::reachability::{Reachability, ReachabilityStatus, Record};
use crate::sbr::{Decision, DowningModel, Strategy as Downing};

#[derive(Clone, Debug)]
struct Spec {
    status: MemberStatus,
    up_number: u32,
    has_role: bool,
    /// Which side it is on.
    side_a: bool,
    /// Which member of its own side observes the other side's members (an index, modulo).
    observer: usize,
}

fn spec(statuses: Vec<MemberStatus>) -> impl Strategy<Value = Spec> {
    (prop::sample::select(statuses), 1u32..12, any::<bool>(), any::<bool>(), any::<usize>())
        .prop_map(|(status, up_number, has_role, side_a, observer)| Spec {
            status,
            up_number,
            has_role,
            side_a,
            observer,
        })
}

fn any_status() -> Vec<MemberStatus> {
    use MemberStatus::*;
    vec![Up, Up, Up, Up, Leaving, Joining, WeaklyUp, Exiting, Down, PreparingForShutdown]
}

fn strategy() -> impl Strategy<Value = Downing> {
    let role = prop::option::of(Just("r".to_owned()));
    prop_oneof![
        role.clone().prop_map(|role| Downing::KeepMajority { role }),
        (1usize..5, role.clone())
            .prop_map(|(quorum_size, role)| { Downing::StaticQuorum { quorum_size, role } }),
        (any::<bool>(), role.clone())
            .prop_map(|(down_if_alone, role)| { Downing::KeepOldest { down_if_alone, role } }),
        Just(Downing::DownAll),
        role.prop_map(|role| Downing::LeaseMajority {
            role,
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
        }),
    ]
}

/// The members of `specs`; the first is always on side A and the second on side B, so that both
/// sides have members.
fn build(specs: &[Spec]) -> Vec<(Member, bool, usize)> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let side_a = match i {
                0 => true,
                1 => false,
                _ => s.side_a,
            };
            let address = Address::new("sys", format!("h{i:02}"), 2552).unwrap();
            let node = UniqueAddress::new(address, Uid::new(i as u64 + 1).unwrap());
            let mut roles = BTreeSet::from(["dc-default".to_owned()]);
            if s.has_role {
                roles.insert("r".to_owned());
            }
            let up = match s.status {
                MemberStatus::Joining | MemberStatus::WeaklyUp => UpNumber::UNASSIGNED,
                _ => UpNumber(s.up_number),
            };
            let m = Member::from_parts(node, up, s.status, roles, AppVersion::default());
            (m, side_a, s.observer)
        })
        .collect()
}

/// The model of a member on side A (`side_a`) or B.
fn view(strategy: &Downing, members: &[(Member, bool, usize)], side_a: bool) -> DowningModel {
    let mut model = DowningModel::new(strategy.clone(), "default");
    for (m, ..) in members {
        model.add(m.clone());
    }
    let this: Vec<&Member> =
        members.iter().filter(|(_, s, _)| *s == side_a).map(|(m, ..)| m).collect();
    let other: Vec<(&Member, usize)> =
        members.iter().filter(|(_, s, _)| *s != side_a).map(|(m, _, o)| (m, *o)).collect();
    let records: Vec<Record> = other
        .iter()
        .map(|(subject, o)| Record {
            observer: this[o % this.len()].node().clone(),
            subject: subject.node().clone(),
            status: ReachabilityStatus::Unreachable,
            version: 1,
        })
        .collect();
    let versions: Vec<_> = records.iter().map(|r| (r.observer.clone(), 1)).collect();
    model.set_reachability(&Reachability::from_parts(records, versions));
    for (subject, _) in &other {
        model.add_unreachable((*subject).clone());
    }
    let seen: BTreeSet<_> = this.iter().map(|m| m.node().clone()).collect();
    model.set_seen_by(std::sync::Arc::new(seen.into()));
    model
}

/// Whether a side keeps some member of its own running after acting on `decision`.
fn keeps_itself(model: &DowningModel, decision: Decision, side: &[&Member]) -> bool {
    let me = side[0].node();
    let downed = model.nodes_to_down(decision, me).unwrap_or_else(|_| model.downable());
    side.iter().any(|m| !m.status().is_down_or_exiting() && !downed.contains(m.node()))
}

fn side(members: &[(Member, bool, usize)], side_a: bool) -> Vec<&Member> {
    members.iter().filter(|(_, s, _)| *s == side_a).map(|(m, ..)| m).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// S2: decisions taken on both sides of a clean split never both keep their side. With
    /// lease-majority, whichever side gets the lease acts on the decision, the other on its
    /// reverse.
    #[test]
    fn the_two_sides_of_a_clean_split_never_both_survive(
        strategy in strategy(),
        specs in prop::collection::vec(spec(any_status()), 2..10),
    ) {
        let members = build(&specs);
        let (a, b) = (side(&members, true), side(&members, false));
        let (view_a, view_b) = (view(&strategy, &members, true), view(&strategy, &members, false));
        prop_assert!(view_a.indirectly_connected().is_empty(), "a clean split is not indirect");
        let (da, db) = (view_a.decide(), view_b.decide());
        if strategy.uses_lease() {
            for a_wins in [true, false] {
                let da = if a_wins { da } else { da.reverse().unwrap() };
                let db = if a_wins { db.reverse().unwrap() } else { db };
                prop_assert!(!(keeps_itself(&view_a, da, &a) && keeps_itself(&view_b, db, &b)),
                    "both survive: {da} / {db}");
            }
        } else {
            prop_assert!(!(keeps_itself(&view_a, da, &a) && keeps_itself(&view_b, db, &b)),
                "both survive: {da} / {db}");
        }
    }

    /// S2: Joining and WeaklyUp members are not counted. Adding them to either side never
    /// changes a side's decision, except into downing all (the check for members that may have
    /// been moved Up on the other side during the partition); the lease's minority delay does not
    /// change at all. Keep-oldest with `down_if_alone` is left out on purpose: its re-check counts
    /// them on both sides, as they may flip the "alone" test; that it stays safe is
    /// the previous property, whose memberships include such members.
    #[test]
    fn joining_and_weakly_up_members_are_never_counted(
        strategy in strategy().prop_map(|s| match s {
            Downing::KeepOldest { role, .. } => Downing::KeepOldest { down_if_alone: false, role },
            other => other,
        }),
        specs in prop::collection::vec(spec(any_status()), 2..8),
        joiners in prop::collection::vec(
            spec(vec![MemberStatus::Joining, MemberStatus::WeaklyUp]), 1..4),
    ) {
        let members = build(&specs);
        let mut all = specs.clone();
        all.extend(joiners);
        let with = build(&all);
        for side_a in [true, false] {
            let before = view(&strategy, &members, side_a).decide();
            let after = view(&strategy, &with, side_a).decide();
            prop_assert!(after == before || after == Decision::DownAll,
                "side {}: {before} became {after}", if side_a { "A" } else { "B" });
            if matches!(strategy, Downing::LeaseMajority { .. }
                | Downing::StaticQuorum { .. }) {
                prop_assert_eq!(after, before);
            }
        }
    }
}
