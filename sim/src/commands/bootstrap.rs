//! `bootstrap`: N processes started at once (or staggered) with the same discovery and no seed
//! nodes form their cluster by Cluster Bootstrap's machine ([`crate::bootstrap`]), with optional
//! faults for a while: lost and slow probes, partial, failing and slow lookups, pods listed late,
//! processes restarted or paused mid-formation. For each seed: whether exactly one cluster formed
//! (B1, [`crate::invariants::b1_one_cluster_formed`]) within its bound, and how long it took.
//!
//! Everything about a seed's run is derived from the seed: with `--random-faults`, the fault
//! settings too (so the reproduction command names one seed and the flags).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{all_up_converged, secs};
use crate::bootstrap::{BootstrapConfig, BootstrapStats, Decided, ProbeModel};
use crate::invariants::Violation;
use crate::invariants::b1_one_cluster_formed::{self, BoundInputs};
use crate::net::NetConfig;
use crate::processes::SlotState;
use crate::stats::Summary;
use crate::world::{Sim, SimOptions, Stream, rng};

/// How often the driver looks at the world (B1's safety part, formation, stopped processes).
pub const LOOK: Duration = Duration::from_millis(250);
/// How long a process whose core shut it down stays down before its supervisor starts it again
/// (bootstrapping again).
const SUPERVISOR_DELAY: Duration = Duration::from_secs(1);
/// The runtime's `cluster.shutdown_after_unsuccessful_join_seed_nodes` (the core's default is
/// off).
pub const RUNTIME_JOIN_DEADLINE: Duration = Duration::from_secs(60);
/// How long the run goes on once the cluster formed, for B1 to see that it stays one.
const AFTER_FORMED: Duration = Duration::from_secs(5);

/// The faults of a bootstrap run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BootstrapFaults {
    /// The probability that a probe is lost (it ends with its timeout).
    pub probe_loss: f64,
    /// The probability that a probe's answer is slowed down by up to twice the probe timeout.
    pub probe_slow: f64,
    /// The probability that a lookup's answer leaves out a given pod.
    pub partial: f64,
    /// Whether the pods left out are drawn once per looking node and pod for the whole window
    /// (a stale cache per node) rather than per answer.
    pub sticky_partial: bool,
    /// The probability that a lookup fails.
    pub lookup_failure: f64,
    /// The probability that a lookup outlasts its timeout.
    pub lookup_slow: f64,
    /// Each pod is listed by discovery up to this long after its process started.
    pub register_delay: Duration,
    /// Processes crashed during the fault window and started again (bootstrapping) 0.5–10 s
    /// later.
    pub restarts: usize,
    /// Processes paused during the fault window for 0.2–20 s (log-uniform).
    pub pauses: usize,
    /// The processes start at times drawn uniformly from `0..=stagger`.
    pub stagger: Duration,
    /// How long from the start the faults of discovery and probes are on, and when restarts and
    /// pauses may strike.
    pub window: Duration,
}

impl BootstrapFaults {
    /// Whether any fault is set.
    pub fn any(&self) -> bool {
        self.probe_loss > 0.0
            || self.probe_slow > 0.0
            || self.partial > 0.0
            || self.lookup_failure > 0.0
            || self.lookup_slow > 0.0
            || self.restarts > 0
            || self.pauses > 0
    }

    /// Faults drawn from `rng` for `n` processes: each kind on or off at random, with a random
    /// strength.
    pub fn random(rng: &mut ChaCha8Rng, n: usize) -> Self {
        let p = |rng: &mut ChaCha8Rng| {
            if rng.random_bool(0.5) { rng.random_range(0.0..0.3) } else { 0.0 }
        };
        let probe_loss = p(rng);
        let probe_slow = p(rng);
        let partial = p(rng);
        let sticky_partial = rng.random_bool(0.3);
        let lookup_failure = p(rng);
        let lookup_slow = p(rng) / 3.0;
        let secs = |rng: &mut ChaCha8Rng, hi: f64| {
            if rng.random_bool(0.5) {
                Duration::from_secs_f64(rng.random_range(0.0..hi))
            } else {
                Duration::ZERO
            }
        };
        let register_delay = secs(rng, 4.0);
        let stagger = secs(rng, 10.0);
        let most = (n / 3).max(1);
        let restarts = if rng.random_bool(0.5) { rng.random_range(0..=most) } else { 0 };
        let pauses = if rng.random_bool(0.3) { rng.random_range(0..=most) } else { 0 };
        let window = Duration::from_secs(rng.random_range(5..30));
        Self {
            probe_loss,
            probe_slow,
            partial,
            sticky_partial,
            lookup_failure,
            lookup_slow,
            register_delay,
            restarts,
            pauses,
            stagger,
            window,
        }
    }
}

/// What to run for one seed.
#[derive(Clone, Debug)]
pub struct BootstrapOptions {
    /// The seed.
    pub seed: u64,
    /// The number of processes.
    pub nodes: usize,
    /// `bootstrap.required_contact_point_nr`; `None`: the number of processes.
    pub required: Option<usize>,
    /// The faults.
    pub faults: BootstrapFaults,
    /// Draw the faults (and a clock drift) from the seed instead.
    pub random_faults: bool,
    /// Steps to keep as text for a failure report (0: none).
    pub log_steps: usize,
    /// Give up after this much virtual time (B1's bound fails first, unless it is longer).
    pub max_time: Duration,
}

impl BootstrapOptions {
    /// `nodes` processes started at once, no faults.
    pub fn new(seed: u64, nodes: usize) -> Self {
        Self {
            seed,
            nodes,
            required: None,
            faults: BootstrapFaults {
                window: Duration::from_secs(20),
                ..BootstrapFaults::default()
            },
            random_faults: false,
            log_steps: 0,
            max_time: Duration::from_secs(600),
        }
    }
}

/// One seed's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct BootstrapSeedReport {
    /// The seed.
    pub seed: u64,
    /// The number of processes.
    pub nodes: usize,
    /// `bootstrap.required_contact_point_nr`.
    pub required: usize,
    /// Whether one cluster formed within the bound and every invariant held.
    pub pass: bool,
    /// The first violation: B1, another safety invariant, or `timer`.
    pub violation: Option<Violation>,
    /// The faults (drawn from the seed with `--random-faults`).
    pub faults: BootstrapFaults,
    /// The largest clock drift, parts per million.
    pub max_drift_ppm: i32,
    /// Virtual seconds from the start to one cluster of every process, all Up with convergence.
    pub formed_s: Option<f64>,
    /// When the faults ended and every process had started (and resumed), seconds: B1's bound
    /// counts from then.
    pub calm_s: f64,
    /// Virtual seconds from `calm_s` to the cluster.
    pub formed_after_calm_s: Option<f64>,
    /// B1's bound, seconds from `calm_s`.
    pub bound_s: f64,
    /// When the last node decided to join, seconds.
    pub last_decision_s: Option<f64>,
    /// Nodes that joined themselves (formed a cluster): one, unless a formed cluster died with
    /// its only members' processes.
    pub joined_self: u64,
    /// Processes restarted by the fault schedule, and by the supervisor after their core shut
    /// them down.
    pub restarts: usize,
    /// What the bootstrap layer did.
    pub stats: BootstrapStats,
    /// Every decision, when the run failed or a log was asked for.
    pub decisions: Vec<Decided>,
    /// Steps taken.
    pub steps: u64,
    /// The trace hash of the membership cores' steps.
    pub trace_hash: String,
    /// The trace hash of the bootstrap layer's steps.
    pub bootstrap_trace_hash: String,
    /// Virtual seconds simulated.
    pub simulated_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// The command that reproduces this run.
    pub reproduce: String,
    /// The latest steps and the final state, when a log was kept.
    pub log: Vec<String>,
}

impl BootstrapSeedReport {
    /// One line for the text output (more lines on failure).
    pub fn text(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("never".to_owned(), |v| format!("{v:.2}s"));
        match &self.violation {
            None => format!(
                "seed {} (N={}, required {}): one cluster after {} ({} after calm at {:.1}s, bound \
                 {:.1}s), {} joined self, {} restarts, {} lookups ({} failed), {} probes ({} timed \
                 out, {} refused), {:.0}s simulated, {:.2}s wall",
                self.seed,
                self.nodes,
                self.required,
                opt(self.formed_s),
                opt(self.formed_after_calm_s),
                self.calm_s,
                self.bound_s,
                self.joined_self,
                self.restarts,
                self.stats.lookups,
                self.stats.lookups_failed,
                self.stats.probes,
                self.stats.probes_timed_out,
                self.stats.probes_refused,
                self.simulated_s,
                self.wall_s
            ),
            Some(v) => {
                let mut s = format!(
                    "seed {} (N={}): FAIL  {v}\n  reproduce: {}",
                    self.seed, self.nodes, self.reproduce
                );
                for d in &self.decisions {
                    s.push_str(&format!(
                        "\n  decision: slot {} ({}) at {:.3}s {} {:?}",
                        d.slot, d.node, d.at_s, d.decision, d.seeds
                    ));
                }
                for l in &self.log {
                    s.push_str("\n  | ");
                    s.push_str(l);
                }
                s
            }
        }
    }
}

/// The command line that reproduces the run `o`.
pub fn reproduce(o: &BootstrapOptions) -> String {
    let mut s = format!("convoke-sim bootstrap --nodes {} --seeds {}", o.nodes, o.seed);
    if let Some(r) = o.required {
        s.push_str(&format!(" --required {r}"));
    }
    if o.random_faults {
        s.push_str(" --random-faults");
    } else {
        let f = &o.faults;
        for (flag, v) in [
            ("--probe-loss", f.probe_loss),
            ("--probe-slow", f.probe_slow),
            ("--partial", f.partial),
            ("--lookup-failure", f.lookup_failure),
            ("--lookup-slow", f.lookup_slow),
        ] {
            if v > 0.0 {
                s.push_str(&format!(" {flag} {v}"));
            }
        }
        if f.sticky_partial {
            s.push_str(" --sticky-partial");
        }
        for (flag, v) in [("--restarts", f.restarts), ("--pauses", f.pauses)] {
            if v > 0 {
                s.push_str(&format!(" {flag} {v}"));
            }
        }
        for (flag, v) in [("--register-delay", f.register_delay), ("--stagger", f.stagger)] {
            if !v.is_zero() {
                s.push_str(&format!(" {flag} {}ms", v.as_millis()));
            }
        }
        s.push_str(&format!(" --window {}ms", f.window.as_millis()));
    }
    s
}

/// Something the fault schedule does to one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Start(usize),
    Crash(usize),
    Pause(usize),
    Resume(usize),
}

/// The bootstrap layer's settings for `slots` over a network of quality `net`: probes travel with
/// its latencies, and lose nothing.
pub fn config_for(slots: Vec<usize>, net: &NetConfig) -> BootstrapConfig {
    let mut c = BootstrapConfig::new(slots);
    c.probes = ProbeModel {
        latency_min: net.latency_min,
        latency_mean: net.latency_mean,
        latency_max: net.latency_max,
        ..ProbeModel::lan()
    };
    c
}

/// B1's bound for the bootstrap layer of `sim`, `n` processes, clocks drifting by up to
/// `max_drift_ppm`, over a network of quality `net`.
pub fn bound_for(sim: &Sim, n: usize, max_drift_ppm: i32) -> Duration {
    let b = sim.bootstraps().expect("the bootstrap layer is on");
    let c = b.config();
    b1_one_cluster_formed::bound(&BoundInputs {
        settings: &c.settings,
        register_delay: c.discovery.register_delay,
        lookup_latency_max: c.discovery.latency_max,
        lookups_may_fail: c.discovery.failure > 0.0 || c.discovery.slow > 0.0,
        probe_round_trip_max: c.probes.round_trip_max(),
        config: &sim.options().config,
        nodes: n,
        max_drift_ppm,
        lossy_network: sim.net().loss > 0.0,
    })
}

/// Starts every slot of `slots` bootstrapping now (the layer must be on) and runs until they form
/// one cluster, all Up with convergence, looking at B1 every [`LOOK`]. Returns when they did;
/// `None` and a B1 violation if not within `bound`, or `None` at any other violation.
pub fn form(sim: &mut Sim, slots: &[usize], bound: Duration) -> Option<Duration> {
    let start = sim.now();
    for &i in slots {
        sim.start_bootstrapping(i);
    }
    let deadline = start + bound;
    loop {
        sim.bootstrap_look();
        if sim.violation().is_some() {
            return None;
        }
        if all_up_converged(sim, slots) {
            return Some(sim.now());
        }
        if sim.now() >= deadline {
            let v = not_formed(sim, slots, bound, start);
            sim.set_violation(v);
            return None;
        }
        sim.run_until((sim.now() + LOOK).min(deadline));
    }
}

/// The formation of a chaos run with `--bootstrap`: the bootstrap layer over `slots` (probes
/// with the latencies of the run's network), every slot bootstrapping at once, one cluster within
/// B1's bound, and B1 no longer watched after it (the faults that follow are S1's business).
/// Returns the virtual seconds it took; `None` with the run's violation recorded otherwise.
pub fn form_in_chaos(sim: &mut Sim, slots: &[usize], max_drift_ppm: i32) -> Option<f64> {
    let config = config_for(slots.to_vec(), &sim.net().clone());
    sim.enable_bootstrap(config);
    let bound = bound_for(sim, slots.len(), max_drift_ppm);
    let start = sim.now();
    let formed = form(sim, slots, bound);
    sim.end_bootstrap_watch();
    formed.map(|at| secs(at - start))
}

fn not_formed(sim: &Sim, slots: &[usize], bound: Duration, from: Duration) -> Violation {
    let groups = b1_one_cluster_formed::clusters(sim);
    let waiting: Vec<usize> = slots
        .iter()
        .copied()
        .filter(|i| sim.bootstraps().is_some_and(|b| b.is_bootstrapping(*i)))
        .collect();
    Violation {
        invariant: "B1".to_owned(),
        step: sim.steps(),
        time_s: sim.now().as_secs_f64(),
        slot: None,
        message: format!(
            "the {} processes did not form one cluster, all Up with convergence, within {:.1}s of \
             {:.1}s: clusters {groups:?}, still bootstrapping {waiting:?}",
            slots.len(),
            bound.as_secs_f64(),
            from.as_secs_f64()
        ),
    }
}

/// Runs one seed.
pub fn run_seed(o: &BootstrapOptions) -> BootstrapSeedReport {
    let wall = Instant::now();
    let n = o.nodes;
    let mut shape = rng(o.seed, Stream::Shape);
    let (faults, drift) = if o.random_faults {
        let f = BootstrapFaults::random(&mut shape, n);
        (f, [0, 100, 1_000, 20_000][shape.random_range(0..4)])
    } else {
        (o.faults.clone(), 0)
    };
    let mut opts = SimOptions::new(o.seed, n);
    // As the runtime sets it (`cluster.shutdown_after_unsuccessful_join_seed_nodes`, README): a
    // join that has not completed by then makes the process exit, and its supervisor restarts it.
    opts.config.shutdown_after_unsuccessful_join_seed_nodes = Some(RUNTIME_JOIN_DEADLINE);
    opts.max_drift_ppm = drift;
    opts.log_steps = o.log_steps;
    let mut sim = Sim::new(opts);
    let all: Vec<usize> = (0..n).collect();
    let mut config = config_for(all.clone(), &NetConfig::lan());
    let required = o.required.unwrap_or(n).max(1);
    config.settings.required_contact_point_nr = required;
    config.discovery.register_delay = faults.register_delay;
    config.discovery.partial = faults.partial;
    config.discovery.sticky = faults.sticky_partial;
    config.discovery.failure = faults.lookup_failure;
    config.discovery.slow = faults.lookup_slow;
    config.probes.loss = faults.probe_loss;
    config.probes.slow = faults.probe_slow;
    config.probes.slow_delay = config.settings.contact_point.probe_timeout * 2;
    config.faults_until = faults.window;
    sim.enable_bootstrap(config);

    // The schedule: starts, then restarts and pauses within the window.
    let mut plan: Vec<(Duration, Step)> = Vec::new();
    let uniform = |rng: &mut ChaCha8Rng, hi: Duration| {
        let hi = u64::try_from(hi.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(if hi > 0 { rng.random_range(0..=hi) } else { 0 })
    };
    for &i in &all {
        plan.push((uniform(&mut shape, faults.stagger), Step::Start(i)));
    }
    let mut victims = all.clone();
    victims.shuffle(&mut shape);
    let mut restarts = 0;
    for &i in victims.iter().take(faults.restarts) {
        let at = uniform(&mut shape, faults.window);
        let down = Duration::from_millis(shape.random_range(500..10_000));
        plan.push((at, Step::Crash(i)));
        plan.push((at + down, Step::Start(i)));
    }
    victims.shuffle(&mut shape);
    for &i in victims.iter().take(faults.pauses) {
        let at = uniform(&mut shape, faults.window);
        let (lo, hi) = (0.2f64.ln(), 20f64.ln());
        let d = Duration::from_secs_f64(shape.random_range(lo..hi).exp());
        plan.push((at, Step::Pause(i)));
        plan.push((at + d, Step::Resume(i)));
    }
    // In time order (a crash that comes before its slot started does nothing).
    plan.sort_by_key(|(at, _)| *at);
    let bound = bound_for(&sim, n, drift);
    let calm = if faults.any() { faults.window } else { Duration::ZERO }
        .max(plan.last().map_or(Duration::ZERO, |p| p.0));
    let mut next = 0;
    let mut supervisor: Vec<(Duration, usize)> = Vec::new();
    let mut formed_since = None;
    let mut formed_at = None;
    loop {
        // What is due now.
        while next < plan.len() && plan[next].0 <= sim.now() {
            match plan[next].1 {
                Step::Start(i) => {
                    if sim.start_bootstrapping(i) && sim.slot(i).incarnations > 1 {
                        restarts += 1;
                    }
                }
                Step::Crash(i) => sim.crash(i),
                Step::Pause(i) => sim.pause(i),
                Step::Resume(i) => sim.resume(i),
            }
            next += 1;
        }
        supervisor.retain(|&(at, i)| {
            if at <= sim.now() {
                // Not a fault of the schedule: B1's bound still counts from the calm.
                if sim.start_bootstrapping(i) {
                    restarts += 1;
                }
                false
            } else {
                true
            }
        });
        for i in 0..n {
            let stopped = matches!(sim.slot(i).state, SlotState::Stopped(_));
            if stopped && !supervisor.iter().any(|(_, j)| *j == i) {
                supervisor.push((sim.now() + SUPERVISOR_DELAY, i));
            }
        }
        sim.bootstrap_look();
        if sim.violation().is_some() {
            break;
        }
        // Formed: one cluster of all, since the latest look at which it was not, once nothing
        // planned is left to undo it.
        if all_up_converged(&sim, &all) {
            formed_since.get_or_insert(sim.now());
        } else {
            formed_since = None;
        }
        let settled = next >= plan.len() && supervisor.is_empty();
        formed_at = formed_since.filter(|_| settled);
        if formed_at.is_some_and(|at| sim.now() >= at.max(calm) + AFTER_FORMED) {
            break;
        }
        if formed_at.is_none() && (sim.now() >= calm + bound || sim.now() >= o.max_time) {
            let v = not_formed(&sim, &all, bound, calm);
            sim.set_violation(v);
            break;
        }
        let mut until = sim.now() + LOOK;
        if let Some((at, _)) = plan.get(next) {
            until = until.min(*at);
        }
        if let Some(at) = supervisor.iter().map(|(at, _)| *at).min() {
            until = until.min(at);
        }
        sim.run_until(until.max(sim.now()));
    }

    let violation = sim.violation().cloned();
    let b = sim.bootstraps().expect("on");
    let last_decision = b
        .decisions
        .iter()
        .map(|d| d.at_s)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    let keep_details = violation.is_some() || o.log_steps > 0;
    BootstrapSeedReport {
        seed: o.seed,
        nodes: n,
        required,
        pass: violation.is_none(),
        faults,
        max_drift_ppm: drift,
        formed_s: formed_at.map(secs),
        calm_s: secs(calm),
        formed_after_calm_s: formed_at.map(|at| secs(at.saturating_sub(calm))),
        bound_s: secs(bound),
        last_decision_s: last_decision,
        joined_self: b.stats.joins_self,
        restarts,
        stats: b.stats,
        decisions: if keep_details { b.decisions.clone() } else { Vec::new() },
        steps: sim.steps(),
        trace_hash: format!("{:016x}", sim.trace_hash()),
        bootstrap_trace_hash: format!("{:016x}", b.trace_hash()),
        simulated_s: secs(sim.now()),
        wall_s: wall.elapsed().as_secs_f64(),
        reproduce: reproduce(o),
        log: if o.log_steps > 0 {
            sim.log().map(str::to_owned).chain(sim.dump()).collect()
        } else {
            Vec::new()
        },
        violation,
    }
}

/// A sweep's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct BootstrapSummary {
    /// Every seed's report, in seed order.
    pub seeds: Vec<BootstrapSeedReport>,
    /// Seeds that passed.
    pub passed: usize,
    /// Seeds that failed.
    pub failed: usize,
    /// Seconds from the start to one cluster, over the seeds that formed one.
    pub formed_s: Summary,
    /// Seconds from the calm to one cluster.
    pub formed_after_calm_s: Summary,
    /// The largest bound, seconds.
    pub bound_max_s: f64,
    /// Seeds in which more than one node joined itself: a formed cluster died with its only
    /// members' processes first, or (with fewer contact points required than started) two
    /// clusters formed, which B1 reports.
    pub joined_self_more_than_once: usize,
    /// Wall-clock seconds.
    pub wall_s: f64,
}

impl BootstrapSummary {
    /// One line for the text output.
    pub fn text(&self) -> String {
        let f = &self.formed_s;
        let c = &self.formed_after_calm_s;
        format!(
            "bootstrap: {} passed, {} failed; one cluster after p50 {:.2}s p99 {:.2}s max {:.2}s \
             from the start, p50 {:.2}s max {:.2}s after the calm (bound up to {:.1}s); {} seeds \
             with more than one node joining itself; {:.1}s wall",
            self.passed,
            self.failed,
            f.p50,
            f.p99,
            f.max,
            c.p50,
            c.max,
            self.bound_max_s,
            self.joined_self_more_than_once,
            self.wall_s
        )
    }
}

/// Runs `options(seed)` for every seed on `jobs` threads; `each` sees every report, in seed order.
pub fn sweep(
    seeds: &[u64],
    jobs: usize,
    options: impl Fn(u64) -> BootstrapOptions + Sync,
    each: impl Fn(&BootstrapSeedReport) + Sync,
) -> BootstrapSummary {
    let wall = Instant::now();
    let jobs = jobs.clamp(1, seeds.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<BootstrapSeedReport>>> = Mutex::new(vec![None; seeds.len()]);
    let printed = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = seeds.get(i) else { break };
                    let r = run_seed(&options(seed));
                    let mut res = results.lock().expect("no panics while held");
                    res[i] = Some(r);
                    let mut p = printed.lock().expect("no panics while held");
                    while let Some(Some(r)) = res.get(*p) {
                        each(r);
                        *p += 1;
                    }
                }
            });
        }
    });
    let seeds: Vec<BootstrapSeedReport> =
        results.into_inner().expect("workers done").into_iter().flatten().collect();
    let failed = seeds.iter().filter(|r| !r.pass).count();
    let durations = |f: fn(&BootstrapSeedReport) -> Option<f64>| -> Vec<Duration> {
        seeds.iter().filter_map(f).map(Duration::from_secs_f64).collect()
    };
    BootstrapSummary {
        passed: seeds.len() - failed,
        failed,
        formed_s: Summary::of(&durations(|r| r.formed_s)),
        formed_after_calm_s: Summary::of(&durations(|r| r.formed_after_calm_s)),
        bound_max_s: seeds.iter().map(|r| r.bound_s).fold(0.0, f64::max),
        joined_self_more_than_once: seeds.iter().filter(|r| r.joined_self > 1).count(),
        wall_s: wall.elapsed().as_secs_f64(),
        seeds,
    }
}

/// The `bootstrap` subcommand's flags.
#[derive(Clone, Debug, clap::Args)]
pub struct BootstrapArgs {
    /// The number of processes.
    #[arg(long)]
    pub nodes: usize,
    /// Seeds: `A..B` (B excluded), `A..=B`, or one seed.
    #[arg(long, value_parser = parse_seeds)]
    pub seeds: (u64, u64),
    /// `bootstrap.required_contact_point_nr` (default: the number of processes, as recommended).
    #[arg(long)]
    pub required: Option<usize>,
    /// Probability that a probe is lost.
    #[arg(long, default_value_t = 0.0)]
    pub probe_loss: f64,
    /// Probability that a probe is slowed down by up to twice its timeout.
    #[arg(long, default_value_t = 0.0)]
    pub probe_slow: f64,
    /// Probability that a lookup leaves out a given pod.
    #[arg(long, default_value_t = 0.0)]
    pub partial: f64,
    /// Draw the pods a lookup leaves out once per looking node and pod, for the whole window.
    #[arg(long)]
    pub sticky_partial: bool,
    /// Probability that a lookup fails.
    #[arg(long, default_value_t = 0.0)]
    pub lookup_failure: f64,
    /// Probability that a lookup outlasts its timeout.
    #[arg(long, default_value_t = 0.0)]
    pub lookup_slow: f64,
    /// A pod is listed by discovery up to this long after its process started, e.g. `3s`.
    #[arg(long, default_value = "0s", value_parser = parse_dur)]
    pub register_delay: Duration,
    /// Processes crashed and restarted mid-formation.
    #[arg(long, default_value_t = 0)]
    pub restarts: usize,
    /// Processes paused mid-formation.
    #[arg(long, default_value_t = 0)]
    pub pauses: usize,
    /// Processes start at random times up to this long after the first, e.g. `5s`.
    #[arg(long, default_value = "0s", value_parser = parse_dur)]
    pub stagger: Duration,
    /// How long the faults are on, from the start.
    #[arg(long, default_value = "20s", value_parser = parse_dur)]
    pub window: Duration,
    /// Draw the faults and a clock drift from each seed (the fault flags are ignored).
    #[arg(long)]
    pub random_faults: bool,
    /// Seeds run in parallel (default: the available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// On failure, print this many of the last steps.
    #[arg(long, default_value_t = 0)]
    pub log: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl BootstrapArgs {
    /// The options of the run of `seed`.
    pub fn options(&self, seed: u64) -> BootstrapOptions {
        let mut o = BootstrapOptions::new(seed, self.nodes);
        o.required = self.required;
        o.random_faults = self.random_faults;
        o.log_steps = self.log;
        o.faults = BootstrapFaults {
            probe_loss: self.probe_loss,
            probe_slow: self.probe_slow,
            partial: self.partial,
            sticky_partial: self.sticky_partial,
            lookup_failure: self.lookup_failure,
            lookup_slow: self.lookup_slow,
            register_delay: self.register_delay,
            restarts: self.restarts,
            pauses: self.pauses,
            stagger: self.stagger,
            window: self.window,
        };
        o
    }

    /// Runs the sweep; `each` sees every report, in seed order.
    pub fn run(&self, each: impl Fn(&BootstrapSeedReport) + Sync) -> BootstrapSummary {
        let seeds: Vec<u64> = (self.seeds.0..self.seeds.1).collect();
        let jobs = self
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        sweep(&seeds, jobs, |s| self.options(s), each)
    }
}

fn parse_seeds(s: &str) -> Result<(u64, u64), String> {
    let num = |t: &str| t.trim().parse::<u64>().map_err(|e| format!("bad seed {t:?}: {e}"));
    if let Some((a, b)) = s.split_once("..=") {
        return Ok((num(a)?, num(b)?.saturating_add(1)));
    }
    if let Some((a, b)) = s.split_once("..") {
        return Ok((num(a)?, num(b)?));
    }
    let a = num(s)?;
    Ok((a, a + 1))
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    convoke_membership::config::parse_duration("duration", s).map_err(|e| e.to_string())
}
