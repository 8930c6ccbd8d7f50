//! The nemesis: random faults, derived from the seed, for the chaos runs.
//!
//! At random intervals (exponential, mean [`ChaosConfig::mean_interval`]) the nemesis picks one
//! fault by weight, picks its victims among the slots as they are at that moment, applies it, and
//! schedules its end. Durations are log-uniform between 200 ms and [`ChaosConfig::max_fault`], so
//! short blips and faults far longer than the failure detector's window are both common.
//!
//! Faults:
//! - partitions: symmetric, one-way, isolate-one, bridge, majorities-ring (see [`PartitionKind`]);
//! - swizzle-clog: clog a random subset of nodes one by one, then unclog them in random order;
//! - crash (restarted later with a new uid, or left dead until the heal), restart (crash and come
//!   back at once with a new uid), pause (the process stops, then resumes with a jump in time);
//! - isolate-and-down: cut a node off and have the operator down it (see [`crate::operator`]);
//! - a late node joins; a node leaves gracefully; the operator downs a live node;
//! - stray messages the node must reject (a gossip for another incarnation, from a stranger, a join
//!   from another actor system);
//! - a spell of bad network: loss, duplication, reordering, higher latency.
//!
//! Process faults (crash, pause, restart, leave, down) are limited so that a majority of slots is
//! always running and untouched: the cluster must survive to be able to heal.
//!
//! The nemesis acts on the world through [`Control`] only.

use std::time::Duration;

use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::control::{Action, Control};
use crate::invariants::WorldView;
use crate::net::{NetConfig, PartitionKind};

/// Settings of the nemesis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChaosConfig {
    /// When faults stop (global time).
    pub end: Duration,
    /// The mean time between the starts of two faults.
    pub mean_interval: Duration,
    /// The longest a timed fault lasts.
    pub max_fault: Duration,
    /// The network quality outside bad-network spells.
    pub base_net: NetConfig,
}

/// The kinds of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[allow(missing_docs)]
pub enum FaultKind {
    Symmetric,
    OneWay,
    IsolateOne,
    Bridge,
    MajoritiesRing,
    SwizzleClog,
    Crash,
    Restart,
    Pause,
    IsolateAndDown,
    Join,
    Leave,
    DownLive,
    Stray,
    BadNetwork,
}

const WEIGHTS: [(FaultKind, u32); 15] = [
    (FaultKind::Symmetric, 3),
    (FaultKind::OneWay, 2),
    (FaultKind::IsolateOne, 2),
    (FaultKind::Bridge, 2),
    (FaultKind::MajoritiesRing, 1),
    (FaultKind::SwizzleClog, 2),
    (FaultKind::Crash, 3),
    (FaultKind::Restart, 2),
    (FaultKind::Pause, 3),
    (FaultKind::IsolateAndDown, 2),
    (FaultKind::Join, 2),
    (FaultKind::Leave, 1),
    (FaultKind::DownLive, 1),
    (FaultKind::Stray, 1),
    (FaultKind::BadNetwork, 2),
];

/// One fault, for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultRecord {
    /// When it started, in seconds.
    pub at_s: f64,
    /// What.
    pub kind: FaultKind,
    /// Victims and duration.
    pub detail: String,
}

/// The fault injector.
#[derive(Debug)]
pub struct Nemesis {
    rng: ChaCha8Rng,
    config: ChaosConfig,
    next_partition: u64,
    /// Until when each slot is the victim of a process fault.
    busy_until: Vec<Duration>,
    /// Slots that have not been started yet and join later.
    late: Vec<usize>,
    /// Every fault so far.
    pub log: Vec<FaultRecord>,
}

impl Nemesis {
    /// A nemesis over `n` slots, of which `late` join during the run.
    pub fn new(rng: ChaCha8Rng, n: usize, config: ChaosConfig, late: Vec<usize>) -> Self {
        Self {
            rng,
            config,
            next_partition: 0,
            busy_until: vec![Duration::ZERO; n],
            late,
            log: Vec::new(),
        }
    }

    /// Slots that have not joined yet.
    pub fn late_joiners(&self) -> &[usize] {
        &self.late
    }

    /// Applies one fault now; when the next move is due (`None`: no more faults).
    pub fn fire(&mut self, w: &mut impl Control) -> Option<Duration> {
        let now = w.now();
        if now >= self.config.end {
            return None;
        }
        let total: u32 = WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut pick = self.rng.random_range(0..total);
        let kind = WEIGHTS
            .iter()
            .find(|(_, w)| {
                let hit = pick < *w;
                pick = pick.saturating_sub(*w);
                hit
            })
            .map(|(k, _)| *k)
            .expect("weights cover the range");
        if let Some(detail) = self.apply(w, kind) {
            self.log.push(FaultRecord { at_s: now.as_secs_f64(), kind, detail });
        }
        let mean = self.config.mean_interval.as_secs_f64();
        let u: f64 = self.rng.random();
        let gap = Duration::from_secs_f64((-mean * (1.0 - u).ln()).min(mean * 10.0));
        Some(now + gap.max(Duration::from_millis(10)))
    }

    fn duration(&mut self) -> Duration {
        let (lo, hi) = (0.2f64.ln(), self.config.max_fault.as_secs_f64().max(0.3).ln());
        Duration::from_secs_f64(self.rng.random_range(lo..hi).exp())
    }

    fn subset(&mut self, from: &[usize], min: usize, max: usize) -> Vec<usize> {
        let mut v = from.to_vec();
        v.shuffle(&mut self.rng);
        let k = self.rng.random_range(min..=max.max(min));
        v.truncate(k);
        v.sort_unstable();
        v
    }

    /// Running slots that are not in another process fault.
    fn idle_running(&self, w: &impl Control) -> Vec<usize> {
        w.running().filter(|i| self.busy_until[*i] <= w.now()).collect()
    }

    /// Whether another slot may be taken down without leaving less than a majority untouched.
    fn may_take_one_more(&self, w: &impl Control) -> bool {
        // After taking one more, a strict majority must remain untouched.
        self.idle_running(w).len() > w.slots() / 2 + 1
    }

    fn block(&mut self, w: &mut impl Control, kind: &PartitionKind, d: Duration) {
        self.next_partition += 1;
        let id = self.next_partition;
        let all: Vec<usize> = (0..w.slots()).collect();
        w.apply(Action::Block { id, links: kind.blocked_links(&all) });
        w.schedule(w.now() + d, Action::Unblock(id));
    }

    fn apply(&mut self, w: &mut impl Control, kind: FaultKind) -> Option<String> {
        let n = w.slots();
        let now = w.now();
        let all: Vec<usize> = (0..n).collect();
        let d = self.duration();
        match kind {
            FaultKind::Symmetric
            | FaultKind::OneWay
            | FaultKind::IsolateOne
            | FaultKind::Bridge
            | FaultKind::MajoritiesRing => {
                let p = match kind {
                    FaultKind::Symmetric => {
                        PartitionKind::Symmetric { side: self.subset(&all, 1, n - 1) }
                    }
                    FaultKind::OneWay => {
                        let from = self.subset(&all, 1, n - 1);
                        let rest: Vec<usize> =
                            all.iter().copied().filter(|i| !from.contains(i)).collect();
                        let to = self.subset(&rest, 1, rest.len());
                        PartitionKind::OneWay { from, to }
                    }
                    FaultKind::IsolateOne => {
                        PartitionKind::IsolateOne { node: self.rng.random_range(0..n) }
                    }
                    FaultKind::Bridge if n >= 3 => {
                        let bridge = self.rng.random_range(0..n);
                        let rest: Vec<usize> =
                            all.iter().copied().filter(|i| *i != bridge).collect();
                        PartitionKind::Bridge {
                            bridge,
                            side: self.subset(&rest, 1, rest.len() - 1),
                        }
                    }
                    FaultKind::MajoritiesRing if n >= 4 => {
                        let mut ring = all.clone();
                        ring.shuffle(&mut self.rng);
                        PartitionKind::MajoritiesRing { ring }
                    }
                    _ => return None,
                };
                self.block(w, &p, d);
                Some(format!("{p:?} for {d:.1?}"))
            }
            FaultKind::SwizzleClog => {
                let nodes = self.subset(&all, 1, (n / 2).max(1));
                let mut order = nodes.clone();
                order.shuffle(&mut self.rng);
                let step = Duration::from_secs_f64(self.rng.random_range(0.1..3.0));
                let mut t = now;
                for node in &order {
                    w.schedule(t, Action::Clog(*node));
                    t += step;
                }
                t += d;
                order.shuffle(&mut self.rng);
                for node in &order {
                    w.schedule(t, Action::Unclog(*node));
                    t += step;
                }
                Some(format!("clog {order:?}, one every {step:.1?}, held {d:.1?}"))
            }
            FaultKind::Crash
            | FaultKind::Restart
            | FaultKind::Pause
            | FaultKind::Leave
            | FaultKind::DownLive
            | FaultKind::IsolateAndDown => {
                if !self.may_take_one_more(w) {
                    return None;
                }
                let candidates = self.idle_running(w);
                let victim = *candidates.get(self.rng.random_range(0..candidates.len().max(1)))?;
                let others: Vec<usize> = all.iter().copied().filter(|i| *i != victim).collect();
                let detail = match kind {
                    FaultKind::Crash => {
                        w.apply(Action::Crash(victim));
                        if self.rng.random_bool(0.8) {
                            w.schedule(now + d, Action::Start { slot: victim, seeds: others });
                            format!("crash {victim}, restart after {d:.1?}")
                        } else {
                            format!("crash {victim} until the heal")
                        }
                    }
                    FaultKind::Restart => {
                        let gap = Duration::from_secs_f64(self.rng.random_range(0.0..3.0));
                        w.apply(Action::Crash(victim));
                        w.schedule(now + gap, Action::Start { slot: victim, seeds: others });
                        format!("restart {victim} after {gap:.1?}")
                    }
                    FaultKind::Pause => {
                        w.apply(Action::Pause(victim));
                        w.schedule(now + d, Action::Resume(victim));
                        format!("pause {victim} for {d:.1?}")
                    }
                    FaultKind::Leave => {
                        w.apply(Action::Leave(victim));
                        format!("{victim} leaves")
                    }
                    FaultKind::DownLive => {
                        // The operator downs a live member it can reach. (Downing by hand a member
                        // cut off behind a partition shrinks only this side's count, so with
                        // keep-majority both sides can keep themselves: see the README.)
                        let reaches = |i: usize| w.link_open(i, victim) && w.link_open(victim, i);
                        let from =
                            *self.idle_running(w).iter().find(|i| **i != victim && reaches(**i))?;
                        w.apply(Action::Down { from, target: victim });
                        format!("{from} downs {victim}")
                    }
                    _ => {
                        let node = w.node(victim).cloned()?;
                        let d = d.max(w.down_after() + Duration::from_secs(15));
                        w.down_isolated(node, victim);
                        self.block(w, &PartitionKind::IsolateOne { node: victim }, d);
                        format!("isolate {victim} for {d:.1?} and down it")
                    }
                };
                self.busy_until[victim] = now + d + Duration::from_secs(30);
                Some(detail)
            }
            FaultKind::Join => {
                let slot = self.late.pop()?;
                let others: Vec<usize> = all.iter().copied().filter(|i| *i != slot).collect();
                w.apply(Action::Start { slot, seeds: others });
                Some(format!("{slot} joins"))
            }
            FaultKind::Stray => {
                let victim = *self.idle_running(w).first()?;
                w.apply(Action::Stray(victim));
                Some(format!("stray messages to {victim}"))
            }
            FaultKind::BadNetwork => {
                let base = self.config.base_net.clone();
                let bad = NetConfig {
                    latency_min: base.latency_min,
                    latency_mean: base.latency_mean
                        + Duration::from_secs_f64(self.rng.random_range(0.0..0.2)),
                    latency_max: base.latency_max
                        + Duration::from_secs_f64(self.rng.random_range(0.0..2.0)),
                    loss: self.rng.random_range(0.0..0.3),
                    duplicate: self.rng.random_range(0.0..0.1),
                    reorder: self.rng.random_range(0.0..0.5),
                    reorder_delay: Duration::from_secs_f64(self.rng.random_range(0.0..2.0)),
                };
                let detail = format!(
                    "bad network for {d:.1?}: loss {:.2}, dup {:.2}, reorder {:.2}",
                    bad.loss, bad.duplicate, bad.reorder
                );
                w.apply(Action::SetNet(bad));
                w.schedule(now + d, Action::SetNet(base));
                Some(detail)
            }
        }
    }
}

/// Whether slot `i` holds a process that could still come back on its own (running or paused).
pub fn is_alive(w: &impl WorldView, i: usize) -> bool {
    !w.is_stopped(i)
}
