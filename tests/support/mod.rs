//! Helpers shared by the node integration tests.

#![allow(dead_code, unreachable_pub)]

pub mod certs;
pub mod netns;
pub mod process;
pub mod running;

use std::time::Duration;

use convoke::Node;
use convoke::control::Snapshot;
use convoke::settings::Settings;

// Failure-detector settings of the live tests.
//
// Every live test runs its nodes with 200 ms gossip and heartbeats (so clusters form and converge
// in about a second), but with the default phi-accrual tolerance: `acceptable_heartbeat_pause`
// 3 s and `threshold` 8. The detector is deterministic given the heartbeat gap: phi is computed
// from a normal distribution with mean = mean interval + acceptable pause (200 ms + 3000 ms) and
// standard deviation = max(measured, min_std_deviation 100 ms). Threshold 8 is reached at about
// 5.2 standard deviations above that mean, i.e. after a silence of about 3.7 s.
//
// A one-second scheduling stall (a loaded CI machine, a page-cache miss, the other live test of
// the binary starting five processes) delays a heartbeat response by about 1.2 s: that is
// (1200 - 3200) / 100 = -20 standard deviations *below* the mean: phi is about 1e-259 (0.0 in
// f64), nowhere near 8. A false "unreachable" needs a silence of about 3.7 s, a stall more than
// three times as long, which at most two live clusters per test binary (see `live`) on two cores
// do not come near. Stalls recorded in the interval history only raise the measured deviation,
// which makes the detector more tolerant, never less. With the previous 800 ms pause the same
// arithmetic put the threshold at a gap of about 1.5 s, so a 1.3 s stall was enough for a false
// positive; the tests asserting "never unreachable" (a graceful leave, a node under garbage
// traffic) could then fail on load alone.
//
// The tests that kill, pause or partition nodes use the same settings: detection takes about
// 3.7 s instead of 1.5 s, which their deadlines (tens of seconds) absorb, and a false positive
// could otherwise make their resolver assertions ("exactly one node decides", "survivors keep
// running") fail too. Those tests wait for detection; none bounds it below 10 s.

/// The phi threshold of the live tests (the default; see the comment above).
pub const FD_THRESHOLD: f64 = 8.0;
/// The acceptable heartbeat pause of the live tests (the default; see the comment above).
pub const FD_ACCEPTABLE_PAUSE: Duration = Duration::from_secs(3);

/// Settings with short intervals, so clusters form and converge in about a second of real time;
/// a stopped node is detected after about 3.7 s and scheduling stalls of up to about 3 s are
/// tolerated (see the comment above).
pub fn fast_settings() -> Settings {
    let mut s = Settings::default();
    let c = &mut s.cluster;
    c.port = 0;
    c.core.gossip_interval = Duration::from_millis(200);
    c.core.leader_actions_interval = Duration::from_millis(200);
    c.core.unreachable_nodes_reaper_interval = Duration::from_millis(200);
    c.core.periodic_tasks_initial_delay = Duration::from_millis(100);
    c.core.seed_node_timeout = Duration::from_secs(2);
    c.core.retry_unsuccessful_join_after = Some(Duration::from_secs(2));
    c.core.failure_detector.heartbeat_interval = Duration::from_millis(200);
    c.core.failure_detector.threshold = FD_THRESHOLD;
    c.core.failure_detector.acceptable_heartbeat_pause = FD_ACCEPTABLE_PAUSE;
    c.core.failure_detector.expected_response_after = Duration::from_millis(500);
    c.leave_timeout = Duration::from_secs(10);
    s.management.enabled = false;
    s
}

/// The `fast_settings` for sharding tests: keep-majority after 2 s, a 2 s singleton hand-over
/// timeout and a 500 ms sharding retry interval, so a crashed node's shards come back in
/// seconds.
pub fn fast_sharding_settings() -> Settings {
    let mut s = fast_settings();
    let sbr = &mut s.cluster.core.split_brain_resolver;
    sbr.active_strategy = "keep-majority".into();
    sbr.stable_after = Duration::from_secs(2);
    s.singleton.hand_over_timeout = Duration::from_secs(2);
    s.sharding.retry_interval = Duration::from_millis(500);
    s
}

/// The `fast_settings` as `--set` arguments for the binary.
pub fn fast_sets() -> Vec<String> {
    [
        "cluster.gossip_interval=\"200ms\"".to_owned(),
        "cluster.leader_actions_interval=\"200ms\"".to_owned(),
        "cluster.unreachable_nodes_reaper_interval=\"200ms\"".to_owned(),
        "cluster.periodic_tasks_initial_delay=\"100ms\"".to_owned(),
        "cluster.seed_node_timeout=\"2s\"".to_owned(),
        "cluster.retry_unsuccessful_join_after=\"2s\"".to_owned(),
        "cluster.failure_detector.heartbeat_interval=\"200ms\"".to_owned(),
        format!("cluster.failure_detector.threshold={FD_THRESHOLD:?}"),
        format!(
            "cluster.failure_detector.acceptable_heartbeat_pause=\"{}ms\"",
            FD_ACCEPTABLE_PAUSE.as_millis()
        ),
        "cluster.failure_detector.expected_response_after=\"500ms\"".to_owned(),
        "management.enabled=false".to_owned(),
    ]
    .to_vec()
}

/// How many live clusters (in-process nodes over TCP, or `convoke run` children) one test binary
/// runs at a time.
///
/// `cargo test --workspace --locked` (the README's command, and CI's first step) runs the test
/// binaries one after the other, and the tests of one binary on as many threads as the machine has
/// cores. The live tests' timing assumptions (see the failure-detector comment above) are made for
/// two busy clusters on two cores; on a bigger machine libtest would start more at once, and on
/// any machine a `--test-threads` override could. This limit holds under plain `cargo test`,
/// whatever the thread count: every live test takes a permit first (`let _live = live().await;`)
/// and keeps it until it ends, panicking or not. It is per binary, and only live tests wait for
/// it, so the fast unit tests of the other binaries keep all threads (which a
/// `RUST_TEST_THREADS` in `.cargo/config.toml` would have taken away from them as well).
pub const LIVE_CLUSTERS: usize = 2;

static LIVE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(LIVE_CLUSTERS);

/// Waits for one of the `LIVE_CLUSTERS` permits of this test binary; hold it for the whole test.
pub async fn live() -> tokio::sync::SemaphorePermit<'static> {
    LIVE.acquire().await.expect("the live-test semaphore is never closed")
}

/// Waits until `pred` holds for `node`'s snapshot, or panics after `timeout` naming `what`.
pub async fn wait_for(
    node: &Node,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Snapshot) -> bool,
) {
    let mut rx = node.watch();
    let r = tokio::time::timeout(timeout, async {
        loop {
            if pred(&rx.borrow_and_update()) {
                return;
            }
            if rx.changed().await.is_err() {
                panic!("node {} stopped while waiting for {what}", node.self_address());
            }
        }
    })
    .await;
    if r.is_err() {
        panic!("timed out after {timeout:?} waiting for {what}; state: {:#?}", node.state());
    }
}

/// Whether the snapshot shows exactly `n` members, all Up, converged.
pub fn all_up(s: &Snapshot, n: usize) -> bool {
    s.state.members.len() == n
        && s.state.members.iter().all(|m| m.status() == convoke::membership::MemberStatus::Up)
        && s.state.convergence
}

/// How long the helpers below wait for a cluster to form.
pub const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts `n` nodes with `settings`, without joining them.
pub async fn start_nodes(settings: &Settings, n: usize) -> Vec<Node> {
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        nodes.push(Node::start(settings).await.unwrap());
    }
    nodes
}

/// Joins every node through the first one as seed and waits until each sees all of them Up.
pub async fn join_through_first(nodes: &[Node]) {
    let seed = nodes[0].self_address().clone();
    for node in nodes {
        node.join_seed_nodes(vec![seed.clone()]).await.unwrap();
    }
    for node in nodes {
        wait_for(node, FORM_TIMEOUT, "all members Up", |s| all_up(s, nodes.len())).await;
    }
}

/// Starts `n` nodes with `settings` and forms one cluster of them.
pub async fn start_cluster(settings: &Settings, n: usize) -> Vec<Node> {
    let nodes = start_nodes(settings, n).await;
    join_through_first(&nodes).await;
    nodes
}

/// Resident memory of this process, in bytes.
pub fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("a VmRSS line");
    kb * 1024
}
