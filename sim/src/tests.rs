//! The checkers that judge the whole world (S1, S4, S14), fed a simulated one. They live here,
//! above both, because `world` runs the checkers: from inside `invariants` they would import the
//! world back.

use std::collections::BTreeSet;
use std::time::Duration;

use convoke_membership::config::Config;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::MemberStatus::{Down, Up};

use crate::commands::{all_up_converged, start_bulk};
use crate::invariants::{
    self, Cause, DownAllWhenUnstable, DownedNodeStops, Invariant, Observation, OneLiveCluster,
    WorldView,
};
use crate::world::{Action, Sim, SimOptions};

/// A world seen `.1` after the simulator's present, with nothing having happened meanwhile: a
/// core that should have acted did not. The process in slot `.2`, if any, is paused.
struct Later<'a>(&'a Sim, Duration, Option<usize>);

impl WorldView for Later<'_> {
    fn now(&self) -> Duration {
        self.0.now() + self.1
    }
    fn slots(&self) -> usize {
        WorldView::slots(self.0)
    }
    fn core(&self, slot: usize) -> Option<&convoke_membership::Cluster> {
        WorldView::core(self.0, slot)
    }
    fn is_stopped(&self, slot: usize) -> bool {
        self.0.is_stopped(slot)
    }
    fn link_open(&self, from: usize, to: usize) -> bool {
        self.0.link_open(from, to)
    }
    fn is_running(&self, slot: usize) -> bool {
        self.2 != Some(slot) && WorldView::is_running(self.0, slot)
    }
    fn running_time(&self, slot: usize) -> Duration {
        let ran = if self.is_running(slot) { self.1 } else { Duration::ZERO };
        self.0.running_time(slot) + ran
    }
}

/// `slots` formed into one cluster (checkers off: these tests feed the checker by hand).
fn formed(nodes: usize, clusters: &[&[usize]]) -> Sim {
    let mut opts = SimOptions::new(7, nodes);
    opts.check_invariants = false;
    let mut sim = Sim::new(opts);
    for slots in clusters {
        start_bulk(&mut sim, slots);
    }
    let all_formed = sim.run_until_pred(Duration::from_secs(60), Duration::from_millis(500), |s| {
        clusters.iter().all(|c| all_up_converged(s, c))
    });
    assert!(all_formed);
    sim
}

#[test]
fn s1_fires_when_two_live_clusters_outlast_the_bound() {
    let sim = formed(4, &[&[0, 1], &[2, 3]]);
    let bound = invariants::s01_one_live_cluster::bound(&Config::default());
    let mut s1 = OneLiveCluster::armed();
    assert_eq!(s1.check_world(&sim), Ok(()));
    assert_eq!(s1.check_world(&Later(&sim, bound / 2, None)), Ok(()));
    let err = s1.check_world(&Later(&sim, bound + Duration::from_secs(1), None)).unwrap_err();
    assert!(err.contains("two live clusters"), "{err}");
}

#[test]
fn s1_stays_quiet_with_one_cluster() {
    let sim = formed(4, &[&[0, 1, 2, 3]]);
    let mut s1 = OneLiveCluster::armed();
    assert_eq!(s1.check_world(&sim), Ok(()));
    assert_eq!(s1.check_world(&Later(&sim, Duration::from_secs(600), None)), Ok(()));
}

#[test]
fn s14_fires_when_a_node_that_holds_itself_down_keeps_running() {
    let mut sim = formed(3, &[&[0, 1, 2]]);
    sim.apply(Action::Down { from: 1, target: 1 });
    assert_eq!(WorldView::core(&sim, 1).map(|c| c.self_status()), Some(Down));
    let mut s14 = DownedNodeStops::default();
    assert_eq!(s14.check_world(&sim), Ok(()));
    assert_eq!(s14.check_world(&Later(&sim, Duration::from_secs(2), None)), Ok(()));
    let err = s14.check_world(&Later(&sim, Duration::from_secs(10), None)).unwrap_err();
    assert!(err.contains("still runs"), "{err}");
}

#[test]
fn s14_stays_quiet_when_the_downed_node_stops() {
    let mut sim = formed(3, &[&[0, 1, 2]]);
    sim.apply(Action::Down { from: 1, target: 1 });
    let mut s14 = DownedNodeStops::default();
    assert_eq!(s14.check_world(&sim), Ok(()));
    sim.run_for(Duration::from_secs(10));
    assert!(sim.is_stopped(1));
    assert_eq!(s14.check_world(&sim), Ok(()));
}

#[test]
fn s14_does_not_count_time_spent_paused_between_two_looks() {
    let mut sim = formed(3, &[&[0, 1, 2]]);
    let links = vec![(0, 1), (1, 0), (2, 1), (1, 2)];
    sim.apply(Action::Block { id: 1, links });
    sim.apply(Action::Down { from: 1, target: 1 });
    let mut s14 = DownedNodeStops::default();
    assert_eq!(s14.check_world(&sim), Ok(()));
    sim.apply(Action::Pause(1));
    sim.run_for(Duration::from_secs(10));
    sim.apply(Action::Resume(1));
    assert!(!sim.is_stopped(1), "the downed node still runs right after it resumed");
    // Ten seconds went by since the last look, all but none of them paused.
    assert_eq!(s14.check_world(&sim), Ok(()));
    let err = s14.check_world(&Later(&sim, Duration::from_secs(10), None)).unwrap_err();
    assert!(err.contains("still runs"), "{err}");
}

/// Three nodes; node 2 cut off, downed by node 0 and removed by 0 and 1 without hearing of it.
fn removed_behind_its_back() -> Sim {
    let mut sim = formed(3, &[&[0, 1, 2]]);
    let links = vec![(0, 2), (2, 0), (1, 2), (2, 1)];
    sim.apply(Action::Block { id: 1, links });
    sim.apply(Action::Down { from: 0, target: 2 });
    let node2 = sim.slot(2).node.clone().expect("running");
    let removed = sim.run_until_pred(Duration::from_secs(15), Duration::from_millis(500), |s| {
        [0, 1].iter().all(|&i| {
            WorldView::core(s, i).is_some_and(|c| c.gossip().tombstones().contains_key(&node2))
        })
    });
    assert!(removed);
    assert_eq!(WorldView::core(&sim, 2).map(|c| c.self_status()), Some(Up));
    sim
}

#[test]
fn s14_fires_when_a_node_resumed_after_its_removal_keeps_running() {
    let sim = removed_behind_its_back();
    let stable_after = Config::default().split_brain_resolver.stable_after;
    let bound = invariants::s14_downed_node_stops::resumed_bound(&Config::default());
    let mut s14 = DownedNodeStops::default();
    // Seen paused, then running again 2 × stable_after + 1 s later, and never stopping.
    assert_eq!(s14.check_world(&Later(&sim, Duration::ZERO, Some(2))), Ok(()));
    let resumed = stable_after * 2 + Duration::from_secs(1);
    assert_eq!(s14.check_world(&Later(&sim, resumed, None)), Ok(()));
    assert_eq!(s14.check_world(&Later(&sim, resumed + bound / 2, None)), Ok(()));
    let err =
        s14.check_world(&Later(&sim, resumed + bound + Duration::from_secs(1), None)).unwrap_err();
    assert!(err.contains("resumed from a pause"), "{err}");
}

#[test]
fn s14_stays_quiet_after_a_shorter_pause() {
    let sim = removed_behind_its_back();
    let stable_after = Config::default().split_brain_resolver.stable_after;
    let mut s14 = DownedNodeStops::default();
    assert_eq!(s14.check_world(&Later(&sim, Duration::ZERO, Some(2))), Ok(()));
    assert_eq!(s14.check_world(&Later(&sim, stable_after, None)), Ok(()));
    assert_eq!(s14.check_world(&Later(&sim, Duration::from_secs(600), None)), Ok(()));
}

#[test]
fn s4_fires_when_a_node_holds_an_unreachable_member_past_the_bound_without_deciding() {
    let mut sim = formed(3, &[&[0, 1, 2]]);
    fn core0(sim: &Sim) -> &convoke_membership::Cluster {
        WorldView::core(sim, 0).expect("running")
    }
    let connected = Gossip::clone(core0(&sim).gossip());
    sim.apply(Action::Block { id: 1, links: vec![(0, 2), (2, 0), (1, 2), (2, 1)] });
    let node2 = sim.slot(2).node.clone().expect("running");
    let unreachable =
        sim.run_until_pred(Duration::from_secs(15), Duration::from_millis(100), |s| {
            WorldView::core(s, 0)
                .is_some_and(|c| c.gossip().reachability().all_unreachable().contains(&node2))
        });
    assert!(unreachable);
    let bound =
        invariants::s04_down_all_when_unstable::bound(&Config::default()).expect("on by default");
    let mut s4 = DownAllWhenUnstable::default();
    // The clock starts with the step in which node 0 saw node 2 unreachable.
    let cut_off = core0(&sim);
    let config = Config::default();
    let step = Observation {
        step: 1,
        now: Duration::from_secs(1),
        slot: 0,
        self_node: cut_off.self_node(),
        cause: &Cause::Timer,
        before: &connected,
        after: cut_off.gossip(),
        converged: false,
        leader: None,
        exiting_confirmed: &BTreeSet::new(),
        config: &config,
        decisions: &[],
        leader_moved: false,
    };
    assert_eq!(s4.check_step(&step), Ok(()));
    assert_eq!(s4.check_world(&sim), Ok(()));
    assert_eq!(s4.check_world(&Later(&sim, bound / 2, None)), Ok(()));
    let err = s4.check_world(&Later(&sim, bound + Duration::from_secs(1), None)).unwrap_err();
    assert!(err.contains("without deciding"), "{err}");
}

#[test]
fn s4_stays_quiet_while_every_member_is_reachable() {
    let sim = formed(3, &[&[0, 1, 2]]);
    let mut s4 = DownAllWhenUnstable::default();
    assert_eq!(s4.check_world(&sim), Ok(()));
    assert_eq!(s4.check_world(&Later(&sim, Duration::from_secs(600), None)), Ok(()));
}
