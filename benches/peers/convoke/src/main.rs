//! The convoke harness of the comparison suite: N nodes in this process through the library API,
//! with the default settings (but port 0 and no management server), each joining through the
//! first. Views are read from each node's snapshot channel, so polling costs no message to a
//! node. See `peers-common` for the run and the report.
//!
//! Like `convoke run`, the harness reads `CONVOKE_*` environment variables as settings
//! (`CONVOKE_CLUSTER__GOSSIP_INTERVAL=3s`); the suite sets none, and a run that does names them
//! in the report's `settings`.

use std::sync::Arc;
use std::time::Instant;

use convoke::Node;
use convoke::Snapshot;
use convoke::membership::MemberStatus;
use convoke::settings::{ADMIN_ENV_VARS, ENV_PREFIX, Settings, Sources};
use peers_common::{Args, Report, cpu_seconds, steady_rate, vm_rss, wait_until};
use tokio::sync::watch;

fn main() {
    let args = Args::parse();
    let mut report = Report::new("convoke", env!("CARGO_PKG_VERSION"), args.nodes);
    report.failure_means = "unreachable";
    // `vars_os`, so that a variable that is not Unicode, which is none of ours, cannot panic.
    let overrides: Vec<String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX) && !ADMIN_ENV_VARS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", v.to_string_lossy()))
        .collect();
    let changed =
        if overrides.is_empty() { String::new() } else { format!(" but {}", overrides.join(", ")) };
    report.settings = format!("defaults{changed}; cluster.port = 0, management.enabled = false");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if let Err(e) = run(&runtime, args, &mut report) {
        report.error = Some(e);
    }
    report.print();
    // Leaving 250 nodes gracefully takes time nobody measures.
    std::process::exit(0);
}

fn run(runtime: &tokio::runtime::Runtime, args: Args, report: &mut Report) -> Result<(), String> {
    let sources = Sources { env: true, ..Sources::default() };
    let mut settings = Settings::load(&sources).map_err(|e| format!("settings: {e}"))?;
    settings.cluster.port = 0;
    settings.management.enabled = false;
    let n = args.nodes;

    let started = Instant::now();
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        let node = runtime.block_on(Node::start(&settings)).map_err(|e| format!("start: {e}"))?;
        nodes.push(node);
    }
    let seed = nodes[0].self_address().clone();
    for node in &nodes {
        runtime
            .block_on(node.join_seed_nodes(vec![seed.clone()]))
            .map_err(|e| format!("join: {e}"))?;
    }
    let views: Vec<watch::Receiver<Arc<Snapshot>>> = nodes.iter().map(Node::watch).collect();
    eprintln!("convoke: {n} nodes started and joining");

    let all_members = |views: &[watch::Receiver<Arc<Snapshot>>]| {
        views.iter().filter(|v| v.borrow().state.members.len() == n).count()
    };
    let all_up = |views: &[watch::Receiver<Arc<Snapshot>>]| {
        views
            .iter()
            .filter(|v| {
                let s = v.borrow();
                s.state.members.len() == n
                    && s.state.members.iter().all(|m| m.status() == MemberStatus::Up)
            })
            .count()
    };
    report.convergence_s = wait_until(started, args.timeout, || all_members(&views) == n);
    if report.convergence_s.is_none() {
        return Err(format!("convergence: {} of {n} nodes saw all members", all_members(&views)));
    }
    report.convergence_up_s = wait_until(started, args.timeout, || all_up(&views) == n);
    if report.convergence_up_s.is_none() {
        return Err(format!("convergence: {} of {n} nodes saw all Up", all_up(&views)));
    }
    report.converged_rss();
    eprintln!("convoke: cpu {:.1} s so far, rss {} MB", cpu_seconds(), vm_rss() >> 20);
    eprintln!(
        "convoke: members everywhere after {:.2} s, all Up after {:.2} s",
        report.convergence_s.unwrap_or_default(),
        report.convergence_up_s.unwrap_or_default()
    );

    let sent = || nodes.iter().map(|node| node.transport().stats().bytes_out).sum::<u64>();
    report.steady_bytes_per_s_per_node = steady_rate(&args, sent);
    eprintln!("convoke: cpu {:.1} s so far", cpu_seconds());

    let victim = nodes.pop().expect("at least two nodes");
    let gone = victim.self_node().clone();
    let stopped = Instant::now();
    runtime.block_on(victim.stop());
    let sees_gone = |v: &watch::Receiver<Arc<Snapshot>>| {
        let s = v.borrow();
        s.state.unreachable.iter().any(|(m, _)| m.node() == &gone)
            || !s.state.members.iter().any(|m| m.node() == &gone)
    };
    let survivors = &views[..n - 1];
    report.failure_detected_s =
        wait_until(stopped, args.timeout, || survivors.iter().all(sees_gone));
    report.rss_after_failure_bytes = vm_rss();
    eprintln!("convoke: cpu {:.1} s so far, rss {} MB", cpu_seconds(), vm_rss() >> 20);
    if report.failure_detected_s.is_none() {
        let seen = survivors.iter().filter(|v| sees_gone(v)).count();
        return Err(format!("failure: {seen} of {} survivors saw it", n - 1));
    }
    Ok(())
}
