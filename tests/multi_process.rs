//! Several `convoke run` processes on 127.0.0.1: forming, kill -9, SIGTERM, restart.

mod support;

use std::time::{Duration, Instant};

use support::process::{Proc, address};
use support::{fast_sets, free_port};

const T: Duration = Duration::from_secs(30);

fn sets_with_seed(seed: u16) -> Vec<String> {
    let mut sets = fast_sets();
    sets.push(format!("cluster.seed_nodes=[\"{}\"]", address(seed)));
    sets
}

async fn start_three() -> Vec<Proc> {
    let ports = [free_port(), free_port(), free_port()];
    let procs: Vec<Proc> = ports.iter().map(|p| Proc::run(*p, &sets_with_seed(ports[0]))).collect();
    for p in &procs {
        for q in &ports {
            p.wait_log(&["membership change: MemberUp", &address(*q)], T).await;
        }
    }
    procs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_with_seeds_form_a_cluster_and_kill_9_is_detected_on_the_others() {
    let mut procs = start_three().await;
    let victim = address(procs[2].port);
    let killed_at = Instant::now();
    procs[2].kill9().await;
    for p in &procs[..2] {
        p.wait_log(&["membership change: UnreachableMember", &victim], T).await;
    }
    // The fast settings give a phi bound of about 0.2 s heartbeat + 0.8 s pause + deviation.
    let took = killed_at.elapsed();
    assert!(took < Duration::from_secs(10), "detection took {took:?}");
    eprintln!("kill -9 to unreachable on both survivors: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_gracefully_exits_0_and_is_removed_on_the_others() {
    let mut procs = start_three().await;
    let leaver = address(procs[2].port);
    procs[2].term();
    assert_eq!(procs[2].exit_code(T).await, Some(0));
    for p in &procs[..2] {
        p.wait_log(&["membership change: MemberRemoved", &leaver], T).await;
        assert!(!p.logged(&["UnreachableMember", &leaver]), "a graceful leave is not a failure");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_restarted_on_the_same_port_joins_as_a_new_incarnation() {
    let mut procs = start_three().await;
    let port = procs[2].port;
    let seed = procs[0].port;
    procs[2].kill9().await;
    let restarted = Proc::run(port, &sets_with_seed(seed));
    // The new incarnation's join downs the old one; once that is removed the new one is let in.
    for p in &procs[..2] {
        p.wait_log(&["membership change: MemberRemoved", &address(port)], T).await;
    }
    restarted.wait_log(&["membership change: MemberUp", &address(port)], T).await;
    for p in &procs[..2] {
        // Up once as the old incarnation, once more as the new one.
        p.wait_count(&["membership change: MemberUp", &address(port)], 2, T).await;
    }
}

/// Figures for the record, with the default failure-detector settings; run with
/// `cargo test --release --test multi_process -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: about a minute"]
async fn measure_kill_9_to_unreachable_with_default_settings() {
    let mut times = Vec::new();
    for _ in 0..5 {
        let ports = [free_port(), free_port(), free_port()];
        let seeds = vec![
            format!("cluster.seed_nodes=[\"{}\"]", address(ports[0])),
            "management.enabled=false".into(),
        ];
        let mut procs: Vec<Proc> = ports.iter().map(|p| Proc::run(*p, &seeds)).collect();
        for p in &procs {
            for q in &ports {
                p.wait_log(&["membership change: MemberUp", &address(*q)], Duration::from_secs(60))
                    .await;
            }
        }
        // Let the detectors collect a few intervals beyond their bootstrap samples.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let victim = address(ports[2]);
        let killed = Instant::now();
        procs[2].kill9().await;
        for p in &procs[..2] {
            p.wait_log(&["membership change: UnreachableMember", &victim], Duration::from_secs(60))
                .await;
        }
        times.push(killed.elapsed());
    }
    times.sort();
    eprintln!("kill -9 to unreachable on all survivors, 5 runs: {times:?}; median {:?}", times[2]);
}

/// Resident memory of one idle node process in a 10-node cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn measure_idle_rss_in_a_ten_node_cluster() {
    let ports: Vec<u16> = (0..10).map(|_| free_port()).collect();
    let seeds = vec![
        format!("cluster.seed_nodes=[\"{}\"]", address(ports[0])),
        "management.enabled=false".into(),
    ];
    let procs: Vec<Proc> = ports.iter().map(|p| Proc::run(*p, &seeds)).collect();
    for q in &ports {
        procs[9]
            .wait_log(&["membership change: MemberUp", &address(*q)], Duration::from_secs(120))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for p in [&procs[0], &procs[9]] {
        let pid = p.child.id().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let rss = status.lines().find(|l| l.starts_with("VmRSS")).unwrap().to_owned();
        eprintln!("node on port {} (pid {pid}): {rss}", p.port);
    }
}
