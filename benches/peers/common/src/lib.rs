//! What every harness of the comparison suite shares, so that each does exactly the same work and
//! reports it the same way.
//!
//! A run, for N nodes in one process:
//! 1. record the process RSS (`rss_before_bytes`), start N nodes on loopback, and have every node
//!    join through the first;
//! 2. wait until every node sees all N as members (`convergence_s`; for convoke also until every
//!    node sees all N Up, `convergence_up_s`), then record the RSS (`rss_converged_bytes`);
//! 3. wait [`SETTLE`] for the news of the joins to die down, then count the bytes every node
//!    sends during `--steady-secs` of quiet (`steady_bytes_per_s_per_node`, when the harness can
//!    count them);
//! 4. stop the last node without leaving, and wait until every survivor sees it gone
//!    (`failure_detected_s`), then record the RSS (`rss_after_failure_bytes`).
//!
//! The harness prints one JSON line (a [`Report`]) on stdout and its progress on stderr.

use std::time::{Duration, Instant};

use serde::Serialize;

/// How long a harness waits after convergence before counting steady traffic: every library
/// keeps spreading the news of the joins for a few seconds after all nodes know of them.
pub const SETTLE: Duration = Duration::from_secs(10);

/// The command line every harness takes: `--nodes N [--steady-secs S] [--timeout-secs T]`.
#[derive(Debug, Clone, Copy)]
pub struct Args {
    /// How many nodes to start.
    pub nodes: usize,
    /// How long to count steady-state traffic, in seconds (0 skips the measurement).
    pub steady_secs: u64,
    /// How long each phase may take before the run gives up.
    pub timeout: Duration,
}

impl Args {
    /// Parses the process arguments; exits with status 2 and a usage line on anything else.
    pub fn parse() -> Args {
        let mut args = Args { nodes: 25, steady_secs: 10, timeout: Duration::from_secs(180) };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let value = it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
            let number: u64 = value.parse().unwrap_or_else(|_| {
                usage(&format!("{flag} expects a whole number, got {value:?}"))
            });
            match flag.as_str() {
                "--nodes" if number >= 2 => args.nodes = number as usize,
                "--nodes" => usage("--nodes must be at least 2"),
                "--steady-secs" => args.steady_secs = number,
                "--timeout-secs" => args.timeout = Duration::from_secs(number),
                _ => usage(&format!("unknown flag {flag}")),
            }
        }
        args
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: harness --nodes N [--steady-secs S] [--timeout-secs T]");
    std::process::exit(2)
}

/// The JSON line a harness prints. Figures a harness cannot measure are `null`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The library measured, e.g. `"foca"`.
    pub library: &'static str,
    /// Its version, as the harness's Cargo.toml pins it.
    pub version: &'static str,
    /// How many nodes were started.
    pub nodes: usize,
    /// From the first start to every node seeing all N as members.
    pub convergence_s: Option<f64>,
    /// From the first start to every node seeing all N Up (convoke only).
    pub convergence_up_s: Option<f64>,
    /// From stopping the last node to every survivor seeing it gone.
    pub failure_detected_s: Option<f64>,
    /// Process RSS before any node started.
    pub rss_before_bytes: u64,
    /// Process RSS once converged.
    pub rss_converged_bytes: u64,
    /// Process RSS once the failure was seen everywhere.
    pub rss_after_failure_bytes: u64,
    /// (converged − before) / N.
    pub rss_per_node_bytes: u64,
    /// Bytes sent per node per second while nothing changes, if the harness can count them.
    pub steady_bytes_per_s_per_node: Option<f64>,
    /// What "seen gone" means for this library (unreachable, dead, removed...).
    pub failure_means: &'static str,
    /// The settings the harness changed from the library's defaults, if any.
    pub settings: String,
    /// Why a phase did not finish, if one did not.
    pub error: Option<String>,
}

impl Report {
    /// A report with nothing measured yet; fills the RSS baseline.
    pub fn new(library: &'static str, version: &'static str, nodes: usize) -> Report {
        Report {
            library,
            version,
            nodes,
            convergence_s: None,
            convergence_up_s: None,
            failure_detected_s: None,
            rss_before_bytes: vm_rss(),
            rss_converged_bytes: 0,
            rss_after_failure_bytes: 0,
            rss_per_node_bytes: 0,
            steady_bytes_per_s_per_node: None,
            failure_means: "",
            settings: String::new(),
            error: None,
        }
    }

    /// Records the RSS at convergence and the per-node figure.
    pub fn converged_rss(&mut self) {
        self.rss_converged_bytes = vm_rss();
        self.rss_per_node_bytes =
            self.rss_converged_bytes.saturating_sub(self.rss_before_bytes) / self.nodes as u64;
    }

    /// Prints the JSON line on stdout.
    pub fn print(&self) {
        println!("{}", serde_json::to_string(self).expect("a report serializes"));
    }
}

/// Polls `done` every 20 ms until it holds or `timeout` passes; returns the elapsed time from
/// `since` when it held. (The libraries offer no common event to await, so the harnesses poll
/// their views, all at the same rate.)
pub fn wait_until(
    since: Instant,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Option<f64> {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return Some(since.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits [`SETTLE`], then returns the bytes per second per node that `sent` (a running total
/// over all nodes) grows by in `--steady-secs`; `None` when that is 0. Blocks the calling thread,
/// so call it from a thread that is not a runtime worker.
pub fn steady_rate(args: &Args, sent: impl Fn() -> u64) -> Option<f64> {
    if args.steady_secs == 0 {
        return None;
    }
    std::thread::sleep(SETTLE);
    let before = sent();
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(args.steady_secs));
    let bytes = sent().saturating_sub(before);
    Some(bytes as f64 / window.elapsed().as_secs_f64() / args.nodes as f64)
}

/// CPU time (user + system) this process has used so far, in seconds (Linux).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The resident set size of this process, in bytes (Linux).
pub fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
