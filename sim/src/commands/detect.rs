//! `detect`: crash nodes one at a time in a converged cluster; how long until every live node sees
//! the crashed one unreachable.
//!
//! Each round: wait a random fraction of a heartbeat interval (so crashes fall at every phase of
//! the heartbeat cycle), crash a random node other than the first, and measure
//! - *first detection*: the first live node whose own failure detector marks it unreachable (its own
//!   reachability row), which is what the phi bound predicts;
//! - *all detect*: every live node has it unreachable in its view (own row or learnt by gossip).
//!
//! Then the leader downs it, and once it is removed everywhere a new incarnation is started in its
//! slot and joins, so the cluster size stays N; the next round starts after the cluster has
//! converged and a settle time has given the failure detectors a steady history.

use std::time::{Duration, Instant};

use convoke_membership::phi::{PhiAccrualFailureDetector, PhiSettings};
use convoke_membership::reachability::ReachabilityStatus;
use rand::Rng;
use serde::Serialize;

use super::{all_up_converged, secs, start_bulk};
use crate::invariants::Violation;
use crate::stats::Summary;
use crate::world::{Sim, SimOptions, Stream, rng};

/// What to run.
#[derive(Clone, Debug)]
pub struct DetectOptions {
    /// Cluster size.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// How many crashes.
    pub crashes: usize,
    /// Whether to run the invariant checkers.
    pub check_invariants: bool,
}

/// One crash.
#[derive(Clone, Debug, Serialize)]
pub struct Crash {
    /// The slot crashed.
    pub slot: usize,
    /// When, in virtual seconds.
    pub at_s: f64,
    /// Seconds until the first live node's own detector marked it unreachable.
    pub first_detection_s: Option<f64>,
    /// Seconds until every live node saw it unreachable.
    pub all_detect_s: Option<f64>,
}

/// The figures.
#[derive(Clone, Debug, Serialize)]
pub struct DetectReport {
    /// Cluster size.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// Every crash.
    pub crashes: Vec<Crash>,
    /// Until every live node saw the crashed one unreachable: min, median, max.
    pub all_detect_s: Summary,
    /// Until the first node's own detector fired.
    pub first_detection_s: Summary,
    /// φ reaches the threshold this long after the last heartbeat, for a history of perfectly
    /// regular heartbeats (σ at its floor).
    pub phi_bound_steady_s: f64,
    /// The same with a history of one heartbeat (the bootstrap estimate, σ = interval / 4): about
    /// 5.3 s with the default settings.
    pub phi_bound_bootstrap_s: f64,
    /// Invariants checked after every step.
    pub invariants: Vec<&'static str>,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// Steps taken.
    pub steps: u64,
    /// The trace hash.
    pub trace_hash: String,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
}

/// When φ reaches the threshold after the last of `heartbeats` regular heartbeats.
fn phi_bound(settings: PhiSettings, interval: Duration, heartbeats: u32) -> Duration {
    // The one wall-clock read here only anchors a synthetic timeline.
    let t0 = Instant::now();
    let mut fd = PhiAccrualFailureDetector::new(settings);
    for k in 0..heartbeats {
        fd.heartbeat(t0 + interval * k);
    }
    fd.time_to_reach(settings.threshold).unwrap_or_default()
}

/// Runs it.
pub fn run(o: &DetectOptions) -> DetectReport {
    let wall = Instant::now();
    let mut opts = SimOptions::new(o.seed, o.nodes);
    opts.check_invariants = o.check_invariants;
    let config = opts.config.clone();
    let mut sim = Sim::new(opts);
    let mut choose = rng(o.seed, Stream::Shape);
    let all: Vec<usize> = (0..o.nodes).collect();
    start_bulk(&mut sim, &all);
    let settle = Duration::from_secs(10);
    let hb = config.failure_detector.heartbeat_interval;
    let limit = Duration::from_secs(600);
    let poll = Duration::from_millis(10);
    let mut crashes = Vec::new();
    for _ in 0..o.crashes {
        if !sim.run_until_pred(limit, Duration::from_millis(100), |s| all_up_converged(s, &all)) {
            break;
        }
        sim.run_for(settle + hb.mul_f64(choose.random::<f64>()));
        let slot = choose.random_range(1..o.nodes);
        let victim = sim.slot(slot).node.clone().expect("running");
        let live: Vec<usize> = all.iter().copied().filter(|i| *i != slot).collect();
        let at = sim.now();
        sim.crash(slot);
        let mut first = None;
        let all_detect = sim.run_until_pred(limit, poll, |s| {
            let marks = |i: &usize| {
                s.core(*i).is_some_and(|c| {
                    c.gossip().reachability().status_by(c.self_node(), &victim)
                        != ReachabilityStatus::Reachable
                })
            };
            if first.is_none() && live.iter().any(marks) {
                first = Some(s.now());
            }
            live.iter().all(|i| {
                s.core(*i).is_some_and(|c| {
                    c.gossip().reachability().all_unreachable_or_terminated().contains(&victim)
                })
            })
        });
        let all_detect = all_detect.then(|| sim.now());
        crashes.push(Crash {
            slot,
            at_s: secs(at),
            first_detection_s: first.map(|t| secs(t - at)),
            all_detect_s: all_detect.map(|t| secs(t - at)),
        });
        if all_detect.is_none() || sim.violation().is_some() {
            break;
        }
        // Down it from the leader, wait for the removal, and bring the slot back.
        let leader = live
            .iter()
            .copied()
            .find(|i| sim.core(*i).is_some_and(|c| c.membership().is_leader(c.self_node())))
            .unwrap_or(live[0]);
        sim.apply(crate::world::Action::Down { from: leader, target: slot });
        let removed = sim.run_until_pred(limit, Duration::from_millis(100), |s| {
            live.iter().all(|i| s.core(*i).is_some_and(|c| !c.gossip().has_member(&victim)))
        });
        if !removed {
            break;
        }
        sim.start(slot);
        sim.join_seeds(slot, &live[..live.len().min(3)]);
    }
    let durations = |f: fn(&Crash) -> Option<f64>| -> Vec<Duration> {
        crashes.iter().filter_map(f).map(Duration::from_secs_f64).collect()
    };
    let fd = &config.failure_detector;
    let settings = PhiSettings {
        threshold: fd.threshold,
        max_sample_size: fd.max_sample_size,
        min_std_deviation: fd.min_std_deviation,
        acceptable_heartbeat_pause: fd.acceptable_heartbeat_pause,
        first_heartbeat_estimate: fd.heartbeat_interval,
    };
    DetectReport {
        nodes: o.nodes,
        seed: o.seed,
        all_detect_s: Summary::of(&durations(|c| c.all_detect_s)),
        first_detection_s: Summary::of(&durations(|c| c.first_detection_s)),
        crashes,
        phi_bound_steady_s: secs(phi_bound(settings, fd.heartbeat_interval, 100)),
        phi_bound_bootstrap_s: secs(phi_bound(settings, fd.heartbeat_interval, 1)),
        invariants: sim.checker_ids(),
        violation: sim.violation().cloned(),
        steps: sim.steps(),
        trace_hash: format!("{:016x}", sim.trace_hash()),
        wall_s: wall.elapsed().as_secs_f64(),
    }
}
