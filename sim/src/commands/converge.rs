//! `converge`: N nodes join; how long until every node sees all N Up with convergence, and what
//! it costs.

use std::time::{Duration, Instant};

use convoke_membership::config::TargetPreference;
use convoke_membership::member::MemberStatus;
use serde::Serialize;

use super::{all_up_converged, secs, start_bulk};
use crate::counters::{SizeMode, TrafficReport};
use crate::invariants::Violation;
use crate::stats::Summary;
use crate::world::{Sim, SimOptions};

/// How the nodes join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum JoinMode {
    /// All start at once and join through the first three as seeds.
    Bulk,
    /// Node i starts once node i−1 is Up in the first node's view, and joins through it.
    OneByOne,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct ConvergeOptions {
    /// Cluster size.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// How nodes join.
    pub join_mode: JoinMode,
    /// Gossip target selection.
    pub preference: TargetPreference,
    /// Whether to run the invariant checkers.
    pub check_invariants: bool,
    /// Give up after this much virtual time.
    pub max_time: Duration,
    /// The steady-state window measured after convergence.
    pub steady: Duration,
    /// How gossip sizes are computed.
    pub size_mode: SizeMode,
}

impl ConvergeOptions {
    /// Defaults: bulk join, the core's default target preference, checkers on, 30 s steady window.
    pub fn new(nodes: usize, seed: u64) -> Self {
        Self {
            nodes,
            seed,
            join_mode: JoinMode::Bulk,
            preference: convoke_membership::Config::default().gossip_target_preference,
            check_invariants: true,
            max_time: Duration::from_secs(3600),
            steady: Duration::from_secs(30),
            size_mode: SizeMode::default(),
        }
    }
}

/// The figures.
#[derive(Clone, Debug, Serialize)]
pub struct ConvergeReport {
    /// Cluster size.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// How nodes joined.
    pub join_mode: JoinMode,
    /// Gossip target selection.
    pub target_preference: String,
    /// Virtual seconds until every node saw all N Up with convergence; `None` if never.
    pub all_up_s: Option<f64>,
    /// The same in gossip intervals.
    pub gossip_rounds: Option<f64>,
    /// Per member: from the first node seeing it Up (the leader moving it) to the last.
    pub up_seen_by_all_s: Summary,
    /// Per member: from its start to the last node seeing it Up.
    pub join_to_up_by_all_s: Summary,
    /// The steady-state window, seconds.
    pub steady_window_s: f64,
    /// Bytes sent per node per second in the steady state.
    pub steady_bytes_per_node_per_s: f64,
    /// Messages sent per node per second in the steady state.
    pub steady_messages_per_node_per_s: f64,
    /// The largest gossip message (Gossip or Welcome) over the whole run, bytes on the wire.
    pub largest_gossip_bytes: u64,
    /// Its member count.
    pub largest_gossip_members: usize,
    /// Traffic while forming.
    pub formation_traffic: TrafficReport,
    /// Traffic in the steady state.
    pub steady_traffic: TrafficReport,
    /// Invariants checked after every step.
    pub invariants: Vec<&'static str>,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// Steps taken.
    pub steps: u64,
    /// Messages handed to cores.
    pub messages_delivered: u64,
    /// The trace hash.
    pub trace_hash: String,
    /// How gossip sizes were computed.
    pub size_mode: SizeMode,
    /// Gossip messages encoded to size them.
    pub gossips_encoded: u64,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
}

/// Runs it.
pub fn run(o: &ConvergeOptions) -> ConvergeReport {
    let wall = Instant::now();
    let mut opts = SimOptions::new(o.seed, o.nodes);
    opts.config.gossip_target_preference = o.preference;
    opts.check_invariants = o.check_invariants;
    opts.size_mode = o.size_mode;
    let gossip_interval = opts.config.gossip_interval;
    let mut sim = Sim::new(opts);
    let all: Vec<usize> = (0..o.nodes).collect();
    let poll = Duration::from_millis(50);
    match o.join_mode {
        JoinMode::Bulk => start_bulk(&mut sim, &all),
        JoinMode::OneByOne => {
            sim.start(0);
            sim.join_seeds(0, &[0]);
            for i in 1..o.nodes {
                sim.start(i);
                sim.join_seeds(i, &[0]);
                let address = sim.slot(i).address.clone();
                let up = sim.run_until_pred(o.max_time, Duration::from_millis(10), |s| {
                    s.core(0).is_some_and(|c| {
                        c.gossip()
                            .members()
                            .any(|m| m.address() == &address && m.status() == MemberStatus::Up)
                    })
                });
                if !up {
                    break;
                }
            }
        }
    }
    let n = o.nodes;
    let remaining = o.max_time.saturating_sub(sim.now());
    let done = sim.run_until_pred(remaining, poll, |s| {
        s.up_tracker().all_saw_up.len() >= n && all_up_converged(s, &all)
    });
    let all_up = done.then(|| sim.now());
    let up = sim.up_tracker();
    let spread: Vec<Duration> = up.all_saw_up.values().map(|(first, all)| *all - *first).collect();
    let joined: Vec<Duration> = up
        .all_saw_up
        .iter()
        .filter_map(|(node, (_, all))| {
            let slot = sim.slot_of(&node.address)?;
            Some(all.saturating_sub(sim.slot(slot).started_at))
        })
        .collect();
    let formation_traffic = TrafficReport::of(sim.counters());
    let mut steady_bytes = 0.0;
    let mut steady_msgs = 0.0;
    let mut steady_traffic = TrafficReport::default();
    if done && sim.violation().is_none() {
        sim.reset_counters();
        sim.run_for(o.steady);
        steady_traffic = TrafficReport::of(sim.counters());
        let sent = sim.counters().iter().fold((0u64, 0u64), |(b, m), c| {
            let t = c.total_sent();
            (b + t.bytes, m + t.messages)
        });
        let per = n as f64 * o.steady.as_secs_f64();
        steady_bytes = sent.0 as f64 / per;
        steady_msgs = sent.1 as f64 / per;
    }
    let largest = formation_traffic.largest_gossip_bytes.max(steady_traffic.largest_gossip_bytes);
    let largest_members =
        if steady_traffic.largest_gossip_bytes > formation_traffic.largest_gossip_bytes {
            steady_traffic.largest_gossip_members
        } else {
            formation_traffic.largest_gossip_members
        };
    ConvergeReport {
        nodes: n,
        seed: o.seed,
        join_mode: o.join_mode,
        target_preference: o.preference.as_str().to_owned(),
        all_up_s: all_up.map(secs),
        gossip_rounds: all_up.map(|t| t.as_secs_f64() / gossip_interval.as_secs_f64()),
        up_seen_by_all_s: Summary::of(&spread),
        join_to_up_by_all_s: Summary::of(&joined),
        steady_window_s: o.steady.as_secs_f64(),
        steady_bytes_per_node_per_s: steady_bytes,
        steady_messages_per_node_per_s: steady_msgs,
        largest_gossip_bytes: largest,
        largest_gossip_members: largest_members,
        formation_traffic,
        steady_traffic,
        invariants: sim.checker_ids(),
        violation: sim.violation().cloned(),
        steps: sim.steps(),
        messages_delivered: sim.delivered(),
        trace_hash: format!("{:016x}", sim.trace_hash()),
        size_mode: o.size_mode,
        gossips_encoded: sim.gossips_encoded(),
        wall_s: wall.elapsed().as_secs_f64(),
    }
}
