//! `chaos`: for each seed, form a cluster, inject random faults for a while, heal everything, and
//! demand convergence within the liveness bound. Invariants are checked after every step.
//!
//! Everything about a seed's run is derived from the seed: the cluster size when a range is given,
//! the core configuration (default or the fast multi-node-test settings, target selection policy),
//! the network quality, clock drift and wall-clock offsets, the operator's downing delay, which
//! slots join late, and every fault. A run with `--nodes N` and seed S is the same run that a range
//! containing N picked for S, so the reproduction command names one N and one seed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use convoke_membership::config::{Config, TargetPreference};
use rand::Rng;
use rand::seq::SliceRandom;
use serde::Serialize;

use super::{all_up_converged, secs, start_bulk};
use crate::counters::SizeMode;
use crate::data::DataStats;
use crate::faults::{ChaosConfig, FaultRecord, Nemesis};
use crate::invariants::Violation;
use crate::lease::LeaseStats;
use crate::liveness;
use crate::net::NetConfig;
use crate::operator::OperatorConfig;
use crate::sharding::{self, ASK_BOUND, ShardingStats};
use crate::singleton::{self, Margin, SingletonStats};
use crate::world::{Action, Sim, SimOptions, SlotState, Stream, rng};

/// The cluster size: one, or one per seed from a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nodes {
    /// Always this many.
    Fixed(usize),
    /// Drawn per seed from this inclusive range.
    Range(usize, usize),
}

impl Nodes {
    /// The size for `seed`.
    pub fn for_seed(self, seed: u64) -> usize {
        match self {
            Self::Fixed(n) => n,
            Self::Range(lo, hi) => rng(seed, Stream::Size).random_range(lo..=hi),
        }
    }
}

/// Who downs unreachable nodes in a chaos run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ChaosDowning {
    /// The split-brain resolver in every core (keep-majority, `stable_after` drawn from the seed);
    /// the operator only quarantines, restarts and bootstraps.
    #[default]
    Resolver,
    /// The resolver is off; the simulator's oracle downs what really is gone (see
    /// [`crate::operator`]).
    Oracle,
}

/// What to run for one seed.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// The seed.
    pub seed: u64,
    /// The cluster size.
    pub nodes: usize,
    /// How long faults are injected.
    pub duration: Duration,
    /// Steps to keep as text for a failure report (0: none).
    pub log_steps: usize,
    /// Who downs.
    pub downing: ChaosDowning,
    /// The singleton managers' removal margin.
    pub singleton_margin: Margin,
    /// Whether the singleton runs with a lease.
    pub singleton_lease: bool,
    /// Form the initial cluster by Cluster Bootstrap's machine instead of seed nodes.
    pub bootstrap: bool,
    /// Run the replicated store, with its load and its checks (D1 to D4).
    pub data: bool,
    /// The entity type remembers its entities; L11 checks they run once shards are balanced.
    pub remember_entities: bool,
    /// The entities keep a count in the store (the store runs too); S19 checks their writers.
    pub entity_state: bool,
}

impl ChaosOptions {
    /// Seed `seed` with `nodes` nodes for `duration`, downing by the resolver, the recommended
    /// singleton removal margin, no lease, no log.
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        Self {
            seed,
            nodes,
            duration,
            log_steps: 0,
            downing: ChaosDowning::default(),
            singleton_margin: Margin::default(),
            singleton_lease: false,
            bootstrap: false,
            data: false,
            remember_entities: false,
            entity_state: false,
        }
    }
}

/// One seed's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The cluster size.
    pub nodes: usize,
    /// Whether every invariant held and the liveness phase converged in time.
    pub pass: bool,
    /// The first violation: a safety invariant, `timer`, or a liveness property (`L1`...).
    pub violation: Option<Violation>,
    /// The command that reproduces this run.
    pub reproduce: String,
    /// Faults injected.
    pub faults: usize,
    /// The faults, in order.
    pub fault_log: Vec<FaultRecord>,
    /// Incarnations downed by the operator.
    pub operator_downs: usize,
    /// Incarnations stopped by quarantine.
    pub quarantined: usize,
    /// Who downed.
    pub downing: ChaosDowning,
    /// The resolver's `stable_after`, seconds (resolver downing only).
    pub stable_after_s: Option<f64>,
    /// Decisions the split-brain resolvers acted on.
    pub sbr_decisions: u64,
    /// Times the operator had a node form a new cluster because none was left.
    pub bootstraps: usize,
    /// Virtual seconds from the heal to liveness, when reached.
    pub liveness_s: Option<f64>,
    /// The liveness bound, seconds.
    pub liveness_bound_s: f64,
    /// Virtual seconds simulated.
    pub simulated_s: f64,
    /// Steps taken.
    pub steps: u64,
    /// The trace hash of the membership cores' steps, up to the end of the membership liveness
    /// phase (the singleton layer leaves it as it was without it).
    pub trace_hash: String,
    /// The trace hash of the singleton layer's steps, to the end of the run.
    pub singleton_trace_hash: String,
    /// What the singletons did.
    pub singleton: SingletonStats,
    /// What the lease store did, when the singleton ran with a lease.
    pub lease: Option<LeaseStats>,
    /// Virtual seconds from the membership settling (L1) to one singleton instance running on the
    /// oldest member (L8), when reached.
    pub singleton_s: Option<f64>,
    /// The L8 bound, seconds.
    pub singleton_bound_s: f64,
    /// The trace hash of the sharding layer's steps, to the end of the run.
    pub sharding_trace_hash: String,
    /// What the sharding layer did.
    pub sharding: ShardingStats,
    /// Virtual seconds from one singleton on the oldest member (L8) to balanced shards (L10),
    /// when reached.
    pub sharding_s: Option<f64>,
    /// The L10 bound, seconds.
    pub sharding_bound_s: f64,
    /// Asks checked by L9.
    pub asks_checked: usize,
    /// With `--bootstrap`: virtual seconds until Cluster Bootstrap formed the initial cluster.
    pub bootstrap_formed_s: Option<f64>,
    /// With `--data`: the trace hash of the store layer's steps, to the end of the run.
    pub data_trace_hash: String,
    /// With `--data`: what the store layer did.
    pub data: Option<DataStats>,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// The latest steps, when a log was kept and the run failed.
    pub log: Vec<String>,
}

/// The settings of a multi-node test harness (Akka's): every periodic task several times faster
/// than by default, so that a test converges and detects in a few seconds.
fn harness_config() -> Config {
    let mut c = Config::default();
    c.gossip_interval = Duration::from_millis(200);
    c.leader_actions_interval = Duration::from_millis(200);
    c.unreachable_nodes_reaper_interval = Duration::from_millis(500);
    c.periodic_tasks_initial_delay = Duration::from_millis(300);
    c.failure_detector.heartbeat_interval = Duration::from_millis(500);
    c
}

/// The command line that reproduces the run `o`.
pub fn reproduce(o: &ChaosOptions) -> String {
    let downing = match o.downing {
        ChaosDowning::Resolver => "",
        ChaosDowning::Oracle => " --downing oracle",
    };
    let margin = match o.singleton_margin {
        Margin::Recommended => "",
        Margin::StableAfter => " --singleton-margin stable-after",
    };
    let lease = if o.singleton_lease { " --singleton-lease" } else { "" };
    let bootstrap = if o.bootstrap { " --bootstrap" } else { "" };
    let data = if o.data { " --data" } else { "" };
    let remember = if o.remember_entities { " --remember-entities" } else { "" };
    let state = if o.entity_state { " --entity-state" } else { "" };
    format!(
        "convoke-sim chaos --nodes {} --seeds {}..{} --duration {}s{downing}{margin}{lease}{bootstrap}{data}{remember}{state}",
        o.nodes,
        o.seed,
        o.seed + 1,
        o.duration.as_secs()
    )
}

/// Runs one seed.
pub fn run_seed(o: &ChaosOptions) -> SeedReport {
    let wall = Instant::now();
    let mut shape = rng(o.seed, Stream::Shape);
    let n = o.nodes;
    let mut config = if shape.random_bool(0.3) { harness_config() } else { Config::default() };
    config.gossip_target_preference = if shape.random_bool(0.5) {
        TargetPreference::AlwaysPreferUnseen
    } else {
        TargetPreference::ReducedProbability
    };
    let base_net = NetConfig {
        latency_min: Duration::from_micros(shape.random_range(50..2_000)),
        latency_mean: Duration::from_micros(shape.random_range(100..20_000)),
        latency_max: Duration::from_millis(shape.random_range(5..300)),
        loss: if shape.random_bool(0.5) { shape.random_range(0.0..0.03) } else { 0.0 },
        duplicate: if shape.random_bool(0.3) { shape.random_range(0.0..0.02) } else { 0.0 },
        reorder: if shape.random_bool(0.5) { shape.random_range(0.0..0.1) } else { 0.0 },
        reorder_delay: Duration::from_millis(shape.random_range(0..200)),
    };
    let drift = [0, 100, 1_000, 20_000][shape.random_range(0..4)];
    let down_after = Duration::from_secs([0, 1, 5, 10][shape.random_range(0..4)]);
    // Akka's recommendation is 7 s for small clusters in tests, 20 s (the default) in production.
    let stable_after = Duration::from_secs([5, 7, 10, 20][shape.random_range(0..4)]);
    let operator = match o.downing {
        ChaosDowning::Resolver => {
            config.split_brain_resolver.stable_after = stable_after;
            OperatorConfig::supervisor()
        }
        ChaosDowning::Oracle => {
            config.split_brain_resolver.active_strategy = "off".to_owned();
            OperatorConfig::oracle(down_after)
        }
    };
    let mut late: Vec<usize> = (3..n).collect();
    late.shuffle(&mut shape);
    late.truncate(n / 5);
    let initial: Vec<usize> = (0..n).filter(|i| !late.contains(i)).collect();
    let mut bound = liveness::bound(&config, n, &operator, drift);
    if o.data || o.entity_state {
        // A leave drawn before the heal hands the store's keys over first.
        bound += crate::world::LEAVE_TIMEOUT;
    }
    // Silence from before the heal can still make a failure detector fire this long after it.
    let fd = &config.failure_detector;
    let detection_lag = fd.acceptable_heartbeat_pause + 3 * fd.heartbeat_interval;
    let mut singleton_config = singleton::config(&config, o.singleton_margin);
    if o.singleton_lease {
        singleton_config = singleton::with_lease(singleton_config);
    }
    let opts = SimOptions {
        seed: o.seed,
        nodes: n,
        singleton: Some(singleton_config.clone()),
        sharding: Some(convoke_sharding::ShardingConfig {
            remember_entities: o.remember_entities,
            // As at run time, where the store runs.
            keep_homes: o.data || o.entity_state,
            ..sharding::config(&singleton_config)
        }),
        data: (o.data || o.entity_state).then(crate::data::config),
        entity_state: o.entity_state,
        config,
        net: base_net.clone(),
        max_drift_ppm: drift,
        max_wall_offset: Duration::from_secs(300),
        operator,
        check_invariants: true,
        log_steps: o.log_steps,
        // Nothing in a chaos report counts bytes.
        size_mode: SizeMode::Off,
    };
    let sharding_config = opts.sharding.clone().expect("set above");
    let mut sim = Sim::new(opts);
    let mut liveness_s = None;
    let mut fault_log = Vec::new();
    let late_set: BTreeSet<usize> = late.iter().copied().collect();

    // Formation, without faults.
    let mut bootstrap_formed_s = None;
    let formed = if o.bootstrap {
        bootstrap_formed_s = super::bootstrap::form_in_chaos(&mut sim, &initial, drift);
        bootstrap_formed_s.is_some()
    } else {
        start_bulk(&mut sim, &initial);
        sim.run_until_pred(Duration::from_secs(120), Duration::from_millis(250), |s| {
            all_up_converged(s, &initial)
        })
    };
    if !formed && sim.violation().is_none() {
        sim.set_violation(liveness_violation(
            &sim,
            "L1",
            "the initial cluster did not form".into(),
        ));
    }

    // Faults.
    if sim.violation().is_none() {
        let end = sim.now() + o.duration;
        let chaos = ChaosConfig {
            end,
            mean_interval: Duration::from_secs(shape.random_range(3..30)),
            max_fault: Duration::from_secs(shape.random_range(10..90)),
            base_net: base_net.clone(),
        };
        let nemesis = Nemesis::new(rng(o.seed, Stream::Faults), n, chaos, late.clone());
        sim.set_nemesis(nemesis, sim.now() + Duration::from_secs(1));
        sim.run_until(end);
    }
    let nemesis = sim.take_nemesis();
    if let Some(nm) = &nemesis {
        fault_log = nm.log.clone();
    }

    // Heal, then liveness.
    let mut settled_at = None;
    if sim.violation().is_none() {
        let calm = NetConfig { loss: 0.0, duplicate: 0.0, reorder: 0.0, ..base_net };
        sim.heal(calm);
        let healed = sim.now();
        let others = |slot: usize| (0..n).filter(|i| *i != slot).collect::<Vec<_>>();
        for slot in 0..n {
            let st = sim.slot(slot).state.clone();
            let restart = match st {
                SlotState::Idle => true,
                SlotState::Crashed => shape.random_bool(0.5),
                _ => false,
            };
            if restart {
                sim.apply(Action::Start { slot, seeds: others(slot) });
            }
        }
        settled_at =
            settle_membership(&mut sim, &late_set, [healed, bound, detection_lag], "the heal");
        liveness_s = settled_at.map(|at| secs(at - healed));
    }

    // The membership trace ends here; what follows only waits for the singleton.
    let trace_hash = sim.trace_hash();
    let singleton_bound = liveness::singleton_bound(&singleton_config, sim.net(), drift);
    let mut singleton_s = None;
    let mut singleton_at = None;
    if let Some(settled) = settled_at
        && sim.violation().is_none()
        && let Some((since, at)) = settle_singleton(&mut sim, settled, singleton_bound)
    {
        singleton_s = Some(secs(since.saturating_sub(settled)));
        singleton_at = Some(at);
    }

    let sharding_bound = liveness::sharding_bound(&sharding_config, sim.net(), drift);
    let (sharding_s, asks_checked) = match singleton_at {
        Some(at) if sim.violation().is_none() => {
            let settled = settled_at.unwrap_or(at);
            let bounds = Bounds {
                membership: bound,
                detection_lag,
                singleton: singleton_bound,
                sharding: sharding_bound,
            };
            settle_sharding(&mut sim, &late_set, [settled, at], &sharding_config, &bounds)
        }
        _ => (None, 0),
    };

    if o.data && settled_at.is_some() && sim.violation().is_none() {
        settle_data(&mut sim);
    }

    let violation = sim.violation().cloned();
    let singletons = sim.singletons();
    let shardings = sim.shardings();
    SeedReport {
        seed: o.seed,
        nodes: n,
        pass: violation.is_none(),
        reproduce: reproduce(o),
        faults: fault_log.len(),
        fault_log,
        operator_downs: sim.operator().downs.len(),
        quarantined: sim.operator().quarantined.len(),
        downing: o.downing,
        stable_after_s: (o.downing == ChaosDowning::Resolver).then_some(stable_after.as_secs_f64()),
        sbr_decisions: sim.decisions(),
        bootstraps: sim.operator().bootstraps.len(),
        liveness_s,
        liveness_bound_s: bound.as_secs_f64(),
        simulated_s: secs(sim.now()),
        steps: sim.steps(),
        trace_hash: format!("{trace_hash:016x}"),
        singleton_trace_hash: format!("{:016x}", singletons.map_or(0, |s| s.trace_hash())),
        singleton: singletons.map(|s| s.stats).unwrap_or_default(),
        lease: singletons.and_then(|s| s.lease()).map(|l| l.stats),
        singleton_s,
        singleton_bound_s: singleton_bound.as_secs_f64(),
        sharding_trace_hash: format!("{:016x}", shardings.map_or(0, |s| s.trace_hash())),
        sharding: shardings.map(|s| s.stats).unwrap_or_default(),
        sharding_s,
        sharding_bound_s: sharding_bound.as_secs_f64(),
        asks_checked,
        bootstrap_formed_s,
        data_trace_hash: format!("{:016x}", sim.data().map_or(0, |d| d.trace_hash())),
        data: sim.data().map(|d| d.stats),
        wall_s: wall.elapsed().as_secs_f64(),
        log: if violation.is_some() && o.log_steps > 0 {
            sim.log().map(str::to_owned).chain(sim.dump()).collect()
        } else {
            Vec::new()
        },
        violation,
    }
}

/// How long the store's load runs in the settled cluster, with D2 checking its reads.
const DATA_CALM: Duration = Duration::from_secs(15);

/// The store's last phase, once the membership has settled: the load runs on for
/// [`DATA_CALM`] with D2 on, then stops; within the convergence bound (and the last requests'
/// timeout) every key's replicas must hold the same versions (D3), and no acknowledged write may
/// be missing from the disks (D1). A failure is recorded as the run's violation.
fn settle_data(sim: &mut Sim) {
    let now = sim.now();
    let Some(d) = sim.data_mut() else { return };
    d.calm_since = Some(now);
    let bound = crate::data::convergence_bound(d.config());
    sim.run_for(DATA_CALM);
    if sim.violation().is_some() {
        return;
    }
    if let Some(d) = sim.data_mut() {
        d.load = false;
    }
    sim.run_for(bound);
    if sim.violation().is_some() {
        return;
    }
    let replicas = sim.data_replicas();
    let Some(d) = sim.data_mut() else { return };
    let checks = d
        .check_replicas_agree(|k| replicas.get(&k).cloned().unwrap_or_default())
        .and_then(|()| d.check_no_acked_write_lost());
    if let Err((id, why)) = checks {
        let v = liveness_violation(
            sim,
            id,
            format!("{why} ({:.0}s after the load stopped)", bound.as_secs_f64()),
        );
        sim.set_violation(v);
    }
}

fn liveness_violation(sim: &Sim, id: &str, message: String) -> Violation {
    Violation {
        invariant: id.to_owned(),
        step: sim.steps(),
        time_s: sim.now().as_secs_f64(),
        slot: None,
        message,
    }
}

/// Waits for the membership to settle (L1, L2, L4, L6) from `since` (the heal, or a process
/// that started after the membership had settled, `after` names which), for at most `bound`, and
/// for it to stay so for 5 s. Returns when it was reached; a failure is recorded as the run's
/// violation.
fn settle_membership(
    sim: &mut Sim,
    late: &BTreeSet<usize>,
    [since, bound, detection_lag]: [Duration; 3],
    after: &str,
) -> Option<Duration> {
    let deadline = since + bound;
    let mut ok = false;
    while sim.violation().is_none() && sim.now() < deadline {
        ok = sim.run_until_pred(deadline - sim.now(), Duration::from_millis(250), |s| {
            liveness::check(s, late).is_ok()
        });
        if !ok {
            break;
        }
        // It must also stay so: no flapping once converged. A process the supervisor
        // restarts in the meantime (its restart was scheduled before the heal) joins, and the
        // cluster must converge again, still within the bound; so must a cluster that
        // converged before its failure detectors noticed a node silenced by the faults.
        let reached = sim.now();
        sim.run_for(Duration::from_secs(5));
        let restarted = started_after(sim, reached).is_some();
        match liveness::check(sim, late) {
            Ok(()) => return Some(reached),
            // A convergence reached before the failure detectors caught up with the silence
            // of the faults is not yet the settled state; it must come again in the bound.
            Err(_) if restarted || reached < since + detection_lag => ok = false,
            Err((id, why)) => {
                let v = liveness_violation(sim, id, format!("converged, then lost it: {why}"));
                sim.set_violation(v);
                return None;
            }
        }
    }
    if !ok && sim.violation().is_none() {
        let (id, why) = liveness::check(sim, late).err().unwrap_or(("L1", "?".into()));
        let v = liveness_violation(
            sim,
            id,
            format!("not converged {:.0}s after {after}: {why}", bound.as_secs_f64()),
        );
        sim.set_violation(v);
    }
    None
}

/// Waits up to `bound` after the membership settled (`settled`) for one singleton instance on
/// the oldest member (L8). Returns when that instance started (or `settled`, if earlier) and
/// when L8 was seen to hold; a failure is recorded as the run's violation.
fn settle_singleton(
    sim: &mut Sim,
    settled: Duration,
    bound: Duration,
) -> Option<(Duration, Duration)> {
    let deadline = settled + bound;
    let ok =
        sim.run_until_pred(deadline.saturating_sub(sim.now()), Duration::from_millis(250), |s| {
            liveness::check_singleton(s).is_ok()
        });
    if ok {
        // It holds since the instance started, or since the membership settled.
        let since = sim.singletons().and_then(|s| s.instances().next()).map(|(_, i)| i.since);
        return Some((since.unwrap_or(settled), sim.now()));
    }
    if sim.violation().is_none() {
        let why = liveness::check_singleton(sim).err().map_or("?".into(), |(_, w)| w);
        let v = liveness_violation(
            sim,
            "L8",
            format!(
                "no single singleton instance on the oldest member {:.0}s after the membership \
                 settled: {why}",
                bound.as_secs_f64()
            ),
        );
        sim.set_violation(v);
    }
    None
}

/// The slots whose process started after `t`: the earliest and the latest start, if any did.
fn started_after(sim: &Sim, t: Duration) -> Option<(Duration, Duration)> {
    let starts = (0..sim.len()).map(|i| sim.slot(i).started_at).filter(|at| *at > t);
    starts.fold(None, |acc, at| match acc {
        None => Some((at, at)),
        Some((first, last)) => Some((first.min(at), last.max(at))),
    })
}

/// The bounds of the liveness phases: the membership's from the heal (or from a process that
/// starts later), the failure detectors' lag after the heal, the singleton's from the membership
/// settling, the sharding's from one singleton on the oldest member.
struct Bounds {
    membership: Duration,
    detection_lag: Duration,
    singleton: Duration,
    sharding: Duration,
}

/// How long the load runs on once the shards are balanced, before L9 and L10 are judged again.
const SETTLED_WINDOW: Duration = Duration::from_secs(20);

/// The sharding liveness phase, from `singleton_at` (when L8 held): waits up to the sharding
/// bound for balanced shards (L10), runs the load until [`SETTLED_WINDOW`] after that and after
/// the coordinator could have settled, then checks that the balance held, that every ask sent
/// since the membership settled (`settled_at`, L1) was answered, and that every ask sent since the
/// coordinator could have settled was answered in time (L9).
///
/// A process that starts after the membership settled (a crashed process whose restart was
/// drawn before the heal, up to the longest fault later) changes the membership again, and its
/// region is rightly given shards by rebalancing: the phase begins again from that start, with
/// L1, L8 and L10 each within its bound once more. L9 judges the asks of each phase by the
/// phase's own times, those sent while the membership settles again not at all, and an ask still
/// unanswered when the process started may meet a handoff of the rebalance that follows.
///
/// Returns the seconds from L8 to L10 in the last phase and the number of asks checked; a
/// failure is recorded as the run's violation.
fn settle_sharding(
    sim: &mut Sim,
    late: &BTreeSet<usize>,
    [settled_at, singleton_at]: [Duration; 2],
    config: &convoke_sharding::ShardingConfig,
    bounds: &Bounds,
) -> (Option<f64>, usize) {
    let mut phases = Vec::new();
    let (mut settled, mut singleton) = (settled_at, singleton_at);
    loop {
        // Shards of a region removed before the membership settled wait for the removal
        // margin, and a new coordinator reads the replicas first: asks are timed from then on.
        let from = singleton + config.removal_margin + config.retry_interval * 4;
        // A process that starts meanwhile ends the phase (see below) within a check.
        let balanced = sim.run_until_pred(bounds.sharding, Duration::from_millis(250), |s| {
            started_after(s, settled).is_some() || liveness::check_sharding_balance(s).is_ok()
        });
        let mut balanced_at = None;
        if balanced && started_after(sim, settled).is_none() {
            let at = sim.now();
            balanced_at = Some(at);
            let end = from.max(at) + SETTLED_WINDOW;
            sim.run_until_pred(end - at, Duration::from_millis(250), |s| {
                started_after(s, settled).is_some()
            });
        }
        if sim.violation().is_some() {
            return (None, 0);
        }
        if let Some((first, last)) = started_after(sim, settled) {
            // The membership changed again: the asks of this phase are judged up to the change,
            // and everything settles once more.
            let ok_from = balanced_at.unwrap_or(Duration::MAX);
            phases.push(liveness::AskPhase {
                settled,
                timed: from,
                ok_from,
                until: first,
                last: false,
            });
            let after = format!("a process started at {:.3}s", secs(last));
            let times = [last, bounds.membership, bounds.detection_lag];
            let Some(again) = settle_membership(sim, late, times, &after) else { return (None, 0) };
            let Some((_, at)) = settle_singleton(sim, again, bounds.singleton) else {
                return (None, 0);
            };
            (settled, singleton) = (again, at);
            continue;
        }
        let Some(balanced_at) = balanced_at else {
            let why = liveness::check_sharding_balance(sim).err().map_or("?".into(), |(_, w)| w);
            let v = liveness_violation(
                sim,
                "L10",
                format!(
                    "shards not balanced {:.0}s after one singleton ran on the oldest member: \
                     {why}",
                    bounds.sharding.as_secs_f64()
                ),
            );
            sim.set_violation(v);
            return (None, 0);
        };
        let result = liveness::check_sharding_balance(sim).map_err(|(id, why)| {
            (id, format!("balanced at {:.3}s, then no longer: {why}", secs(balanced_at)))
        });
        let until = sim.now().saturating_sub(ASK_BOUND);
        phases.push(liveness::AskPhase {
            settled,
            timed: from,
            ok_from: balanced_at,
            until,
            last: true,
        });
        let checked = sim.shardings().map_or(0, |s| {
            s.asks()
                .values()
                .filter(|a| phases.iter().any(|p| a.sent_at >= p.settled && a.sent_at < p.until))
                .count()
        });
        let result = result
            .and_then(|()| liveness::check_remembered(sim))
            .and_then(|()| liveness::check_asks(sim, &phases));
        if let Err((id, why)) = result {
            let v = liveness_violation(sim, id, why);
            sim.set_violation(v);
            return (None, checked);
        }
        return (Some(secs(balanced_at.saturating_sub(singleton))), checked);
    }
}
