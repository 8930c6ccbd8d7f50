//! Helpers shared by the node integration tests.

#![allow(dead_code, unreachable_pub)]

pub mod netns;
pub mod process;

use std::time::Duration;

use convoke::Node;
use convoke::control::Snapshot;
use convoke::settings::Settings;

/// Settings with short intervals, so failures are detected in about a second of real time.
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
    c.core.failure_detector.acceptable_heartbeat_pause = Duration::from_millis(800);
    c.core.failure_detector.expected_response_after = Duration::from_millis(500);
    c.leave_timeout = Duration::from_secs(10);
    s.management.enabled = false;
    s
}

/// The `fast_settings` as `--set` arguments for the binary.
pub fn fast_sets() -> Vec<String> {
    [
        "cluster.gossip_interval=\"200ms\"",
        "cluster.leader_actions_interval=\"200ms\"",
        "cluster.unreachable_nodes_reaper_interval=\"200ms\"",
        "cluster.periodic_tasks_initial_delay=\"100ms\"",
        "cluster.seed_node_timeout=\"2s\"",
        "cluster.retry_unsuccessful_join_after=\"2s\"",
        "cluster.failure_detector.heartbeat_interval=\"200ms\"",
        "cluster.failure_detector.acceptable_heartbeat_pause=\"800ms\"",
        "cluster.failure_detector.expected_response_after=\"500ms\"",
        "management.enabled=false",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
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

/// A free TCP port on 127.0.0.1 (bound and released; fine for tests that start at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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
