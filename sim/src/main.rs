//! The `convoke-sim` binary: `converge`, `detect`, `chaos` and `bootstrap` (see the crate docs).

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand};
use convoke_membership::config::{TargetPreference, parse_duration};
use convoke_sim::commands::chaos::{ChaosDowning, ChaosOptions, Nodes, SeedReport, run_seed};
use convoke_sim::commands::converge::{self, ConvergeOptions, JoinMode};
use convoke_sim::commands::detect::{self, DetectOptions};
use convoke_sim::singleton::Margin;
use serde::Serialize;

/// The simulator holds thousands of nodes' tables in one heap and replaces them at every step;
/// with the system allocator, a third of the samples profiled in a 5,000-node run were in
/// `malloc` (docs/benchmarks.md, "Simulator at scale").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` for the reports: when stdout is closed (the reader went away, as `| head` does) the
/// program ends quietly with the status a SIGPIPE death gives, instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

#[derive(Parser, Debug)]
#[command(
    name = "convoke-sim",
    version,
    about = "Deterministic simulator for the convoke membership core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// N nodes join; report how long until all see all Up with convergence, and the traffic.
    Converge {
        /// Cluster size.
        #[arg(long)]
        nodes: usize,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How the nodes join.
        #[arg(long, value_enum, default_value_t = JoinMode::Bulk)]
        join_mode: JoinMode,
        /// Gossip target selection: always-prefer-unseen or reduced-probability (default: the
        /// core's default).
        #[arg(long, value_parser = parse_preference)]
        target_preference: Option<TargetPreference>,
        /// Skip the invariant checkers (faster, for measuring the core alone).
        #[arg(long)]
        no_checks: bool,
        /// Encode every gossip to size it, instead of once per gossip version (slow).
        #[arg(long)]
        exact_sizes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Crash nodes one at a time in a converged cluster; report detection times.
    Detect {
        /// Cluster size.
        #[arg(long)]
        nodes: usize,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many crashes.
        #[arg(long, default_value_t = 20)]
        crashes: usize,
        /// Skip the invariant checkers.
        #[arg(long)]
        no_checks: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Random faults, then a liveness phase, for each seed.
    Chaos {
        /// Cluster size, or an inclusive range `A..=B` (or `A..B`) to draw it per seed.
        #[arg(long, value_parser = parse_nodes)]
        nodes: Nodes,
        /// Seeds: `A..B` (B excluded), `A..=B`, or one seed.
        #[arg(long, value_parser = parse_seeds)]
        seeds: SeedRange,
        /// How long faults are injected (virtual time), e.g. `600s`, `10m`.
        #[arg(long, default_value = "600s", value_parser = parse_dur)]
        duration: Duration,
        /// Run every seed twice and compare trace hashes.
        #[arg(long)]
        twice: bool,
        /// Seeds run in parallel (default: the available cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// On failure, print this many of the last steps.
        #[arg(long, default_value_t = 0)]
        log: usize,
        /// Who downs unreachable nodes: the split-brain resolver in the cores, or the simulator's
        /// oracle with the resolver off.
        #[arg(long, value_enum, default_value_t = ChaosDowning::Resolver)]
        downing: ChaosDowning,
        /// The cluster singleton's removal margin: the recommended one, or the resolver's
        /// stable_after alone (too short; kept to show it).
        #[arg(long, value_enum, default_value_t = Margin::Recommended)]
        singleton_margin: Margin,
        /// Run the cluster singleton with a lease, from a modelled lease store that loses,
        /// fails and delays operations while faults are injected.
        #[arg(long)]
        singleton_lease: bool,
        /// Form the initial cluster by Cluster Bootstrap's machine over modelled discovery and
        /// probes, instead of seed nodes (B1 checks it).
        #[arg(long)]
        bootstrap: bool,
        /// Run the replicated store on modelled disks, with a load of reads and writes and its
        /// checks (D1 to D4).
        #[arg(long)]
        data: bool,
        /// The entity type remembers its entities (in a modelled store of remembered sets that
        /// fences a shard's earlier hosts once a new one reads it); some asks make their entity
        /// passivate; L11 checks the remembered entities run once the shards are balanced.
        #[arg(long)]
        remember_entities: bool,
        /// The entities keep a count in the replicated store (which runs, as with --data), written
        /// at quorum before each answer; S19 checks that no two writers' states fork, S20 that no
        /// acknowledged write is lost.
        #[arg(long)]
        entity_state: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// N processes form their cluster by Cluster Bootstrap, with optional faults; report whether
    /// one cluster formed (B1) and how long it took.
    Bootstrap(convoke_sim::commands::bootstrap::BootstrapArgs),
}

#[derive(Clone, Copy, Debug)]
struct SeedRange(u64, u64);

fn parse_seeds(s: &str) -> Result<SeedRange, String> {
    let num = |t: &str| t.trim().parse::<u64>().map_err(|e| format!("bad seed {t:?}: {e}"));
    if let Some((a, b)) = s.split_once("..=") {
        return Ok(SeedRange(num(a)?, num(b)?.saturating_add(1)));
    }
    if let Some((a, b)) = s.split_once("..") {
        return Ok(SeedRange(num(a)?, num(b)?));
    }
    let a = num(s)?;
    Ok(SeedRange(a, a + 1))
}

fn parse_nodes(s: &str) -> Result<Nodes, String> {
    let num = |t: &str| {
        t.trim().parse::<usize>().map_err(|e| format!("bad node count {t:?}: {e}")).and_then(|n| {
            if (1..=50_000).contains(&n) {
                Ok(n)
            } else {
                Err(format!("{n} nodes: want 1..=50000"))
            }
        })
    };
    let range =
        s.split_once("..=").map(|(a, b)| (a, b, 0)).or(s.split_once("..").map(|(a, b)| (a, b, 1)));
    match range {
        Some((a, b, excl)) => {
            let (lo, hi) = (num(a)?, num(b)? - excl);
            if lo > hi {
                return Err(format!("empty node range {s:?}"));
            }
            Ok(Nodes::Range(lo, hi))
        }
        None => num(s).map(Nodes::Fixed),
    }
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration("--duration", s).map_err(|e| e.to_string())
}

fn parse_preference(s: &str) -> Result<TargetPreference, String> {
    TargetPreference::parse("--target-preference", s).map_err(|e| e.to_string())
}

fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => say!("{s}"),
        Err(e) => eprintln!("cannot serialise the report: {e}"),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Converge {
            nodes,
            seed,
            join_mode,
            target_preference,
            no_checks,
            exact_sizes,
            json,
        } => {
            let mut o = ConvergeOptions::new(nodes, seed);
            o.join_mode = join_mode;
            if let Some(p) = target_preference {
                o.preference = p;
            }
            o.check_invariants = !no_checks;
            if exact_sizes {
                o.size_mode = convoke_sim::counters::SizeMode::Exact;
            }
            let r = converge::run(&o);
            if json {
                print_json(&r);
            } else {
                print_converge(&r);
            }
            if r.violation.is_some() || r.all_up_s.is_none() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Command::Detect { nodes, seed, crashes, no_checks, json } => {
            if nodes < 3 {
                eprintln!("detect needs at least 3 nodes");
                return ExitCode::from(2);
            }
            let r =
                detect::run(&DetectOptions { nodes, seed, crashes, check_invariants: !no_checks });
            if json {
                print_json(&r);
            } else {
                print_detect(&r);
            }
            let incomplete =
                r.crashes.len() < crashes || r.crashes.iter().any(|c| c.all_detect_s.is_none());
            if r.violation.is_some() || incomplete { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Command::Chaos {
            nodes,
            seeds,
            duration,
            twice,
            jobs,
            log,
            downing,
            singleton_margin,
            singleton_lease,
            bootstrap,
            data,
            remember_entities,
            entity_state,
            json,
        } => chaos(
            nodes,
            seeds,
            ChaosRun {
                duration,
                twice,
                jobs,
                log,
                downing,
                singleton_margin,
                singleton_lease,
                bootstrap,
                data,
                remember_entities,
                entity_state,
            },
            json,
        ),
        Command::Bootstrap(args) => {
            let summary = args.run(|r| {
                if !args.json {
                    say!("{}", r.text());
                }
            });
            if args.json {
                print_json(&summary)
            } else {
                say!("{}", summary.text())
            }
            if summary.failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
    }
}

fn print_converge(r: &converge::ConvergeReport) {
    let opt = |v: Option<f64>| v.map_or("never".to_owned(), |v| format!("{v:.2}"));
    say!(
        "converge: {} nodes, seed {}, {:?} join, {}",
        r.nodes,
        r.seed,
        r.join_mode,
        r.target_preference
    );
    say!(
        "  all Up with convergence after {} s ({} gossip rounds)",
        opt(r.all_up_s),
        opt(r.gossip_rounds)
    );
    let s = &r.up_seen_by_all_s;
    say!(
        "  member seen Up by all, after the leader moved it: p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        s.p50,
        s.p99,
        s.max
    );
    let s = &r.join_to_up_by_all_s;
    say!(
        "  member seen Up by all, after it started:          p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        s.p50,
        s.p99,
        s.max
    );
    say!(
        "  steady state ({:.0} s): {:.0} bytes and {:.1} messages sent per node per second",
        r.steady_window_s,
        r.steady_bytes_per_node_per_s,
        r.steady_messages_per_node_per_s
    );
    say!(
        "  largest gossip message: {} bytes ({} members)",
        r.largest_gossip_bytes,
        r.largest_gossip_members
    );
    print_invariants(&r.invariants, r.violation.as_ref());
    say!(
        "  {} steps, {} messages, {} gossips encoded ({:?} sizes), trace {}, {:.1} s wall",
        r.steps,
        r.messages_delivered,
        r.gossips_encoded,
        r.size_mode,
        r.trace_hash,
        r.wall_s
    );
}

fn print_invariants(invariants: &[&str], violation: Option<&impl std::fmt::Display>) {
    say!("  invariants checked every step: {}", invariants.join(" "));
    match violation {
        Some(v) => say!("  VIOLATION: {v}"),
        None => say!("  no invariant violated"),
    }
}

fn print_detect(r: &detect::DetectReport) {
    say!("detect: {} nodes, seed {}, {} crashes", r.nodes, r.seed, r.crashes.len());
    let s = &r.all_detect_s;
    say!(
        "  every live node sees it unreachable: min {:.2} s, median {:.2} s, max {:.2} s",
        s.min,
        s.p50,
        s.max
    );
    let s = &r.first_detection_s;
    say!(
        "  first detector fires:                min {:.2} s, median {:.2} s, max {:.2} s",
        s.min,
        s.p50,
        s.max
    );
    say!(
        "  phi bound (threshold reached after the last heartbeat): {:.2} s steady, {:.2} s bootstrap",
        r.phi_bound_steady_s,
        r.phi_bound_bootstrap_s
    );
    print_invariants(&r.invariants, r.violation.as_ref());
    say!("  {} steps, trace {}, {:.1} s wall", r.steps, r.trace_hash, r.wall_s);
}

#[derive(Serialize)]
struct ChaosSummary {
    seeds: Vec<SeedReport>,
    passed: usize,
    failed: usize,
}

struct ChaosRun {
    duration: Duration,
    twice: bool,
    jobs: Option<usize>,
    log: usize,
    downing: ChaosDowning,
    singleton_margin: Margin,
    singleton_lease: bool,
    bootstrap: bool,
    data: bool,
    remember_entities: bool,
    entity_state: bool,
}

fn chaos(nodes: Nodes, seeds: SeedRange, run: ChaosRun, json: bool) -> ExitCode {
    let ChaosRun {
        duration,
        twice,
        jobs,
        log,
        downing,
        singleton_margin,
        singleton_lease,
        bootstrap,
        data,
        remember_entities,
        entity_state,
    } = run;
    let list: Vec<u64> = (seeds.0..seeds.1).collect();
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .clamp(1, list.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<SeedReport>>> = Mutex::new(vec![None; list.len()]);
    let printed = Mutex::new(0usize);
    let run_one = |seed: u64| {
        let mut o = ChaosOptions::new(seed, nodes.for_seed(seed), duration);
        o.log_steps = log;
        o.downing = downing;
        o.singleton_margin = singleton_margin;
        o.singleton_lease = singleton_lease;
        o.bootstrap = bootstrap;
        o.data = data;
        o.remember_entities = remember_entities;
        o.entity_state = entity_state;
        let mut r = run_seed(&o);
        if twice {
            let again = run_seed(&o);
            let same = again.trace_hash == r.trace_hash
                && again.singleton_trace_hash == r.singleton_trace_hash
                && again.sharding_trace_hash == r.sharding_trace_hash
                && again.data_trace_hash == r.data_trace_hash;
            if !same && r.violation.is_none() {
                r.pass = false;
                r.violation = Some(convoke_sim::invariants::Violation {
                    invariant: "determinism".to_owned(),
                    step: r.steps,
                    time_s: r.simulated_s,
                    slot: None,
                    message: format!(
                        "the same seed gave trace hashes {}/{}/{} and {}/{}/{}",
                        r.trace_hash,
                        r.singleton_trace_hash,
                        r.sharding_trace_hash,
                        again.trace_hash,
                        again.singleton_trace_hash,
                        again.sharding_trace_hash
                    ),
                });
            }
        }
        r
    };
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = list.get(i) else { break };
                    let r = run_one(seed);
                    let mut res = results.lock().expect("no panics while held");
                    res[i] = Some(r);
                    // Print finished seeds in order.
                    let mut p = printed.lock().expect("no panics while held");
                    while let Some(Some(r)) = res.get(*p) {
                        if !json {
                            print_seed(r);
                        }
                        *p += 1;
                    }
                }
            });
        }
    });
    let seeds: Vec<SeedReport> =
        results.into_inner().expect("workers done").into_iter().flatten().collect();
    let failed = seeds.iter().filter(|r| !r.pass).count();
    let passed = seeds.len() - failed;
    if json {
        print_json(&ChaosSummary { seeds, passed, failed });
    } else {
        say!("chaos: {passed} passed, {failed} failed");
    }
    if failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn print_seed(r: &SeedReport) {
    match &r.violation {
        None => say!(
            "seed {} (N={}): pass  [{} faults, {} resolver decisions, liveness {:.1}s of {:.0}s, singleton {} starts {} hand-overs {} aborts{}, one on the oldest {:.1}s of {:.0}s after, sharding {} coordinators {} shard starts {} handoffs {} entity starts {} asks ({} failed), balanced {:.1}s of {:.0}s after, {} asks checked{}{}, {:.0}s simulated, {:.1}s wall]",
            r.seed,
            r.nodes,
            r.faults,
            r.sbr_decisions,
            r.liveness_s.unwrap_or(0.0),
            r.liveness_bound_s,
            r.singleton.starts,
            r.singleton.hand_over_done,
            r.singleton.aborts,
            r.lease.map_or(String::new(), |l| format!(
                " lease {} acquires {} granted {} refused {} timed out",
                l.acquires, l.granted, l.refused, l.timeouts
            )),
            r.singleton_s.unwrap_or(0.0),
            r.singleton_bound_s,
            r.sharding.coordinators,
            r.sharding.shard_starts,
            r.sharding.hand_offs,
            r.sharding.entity_starts,
            r.sharding.asks,
            r.sharding.answered_failed,
            r.sharding_s.unwrap_or(0.0),
            r.sharding_bound_s,
            r.asks_checked,
            if r.sharding.state_claims > 0 {
                format!(
                    ", entity state {} claims ({} made again) {} writes {} fenced {} failed \
                     ({} with the replicas gone)",
                    r.sharding.state_claims,
                    r.sharding.state_reclaims,
                    r.sharding.state_writes,
                    r.sharding.state_fenced,
                    r.sharding.state_failed,
                    r.sharding.state_unavailable
                )
            } else {
                String::new()
            },
            r.data.map_or(String::new(), |d| format!(
                ", store {} writes ({} acked) {} reads ({} with siblings, {} checked by D2) {} failed, {} keys compared, {} held by D1",
                d.writes, d.writes_acked, d.reads, d.sibling_reads, d.reads_checked, d.failed, d.keys_compared, d.d1_checks
            )),
            r.simulated_s,
            r.wall_s
        ),
        Some(v) => {
            say!("seed {} (N={}): FAIL  {v}", r.seed, r.nodes);
            say!("  reproduce: {}", r.reproduce);
            for l in &r.log {
                say!("  | {l}");
            }
        }
    }
}
