//! Nodes in one process over real TCP on 127.0.0.1.

mod support;

use std::time::Duration;

use convoke::Node;
use convoke::membership::{ClusterEvent, MemberStatus};
use convoke::node::ShutdownOutcome;
use support::{all_up, fast_settings, wait_for};

const T: Duration = Duration::from_secs(30);

async fn cluster(n: usize) -> Vec<Node> {
    support::start_cluster(&fast_settings(), n).await
}

fn leaders(nodes: &[Node]) -> Vec<Option<String>> {
    nodes.iter().map(|n| n.state().leader.map(|a| a.to_string())).collect()
}

async fn nodes_form_a_cluster_with_one_leader(n: usize) {
    let nodes = cluster(n).await;
    let l = leaders(&nodes);
    assert!(l.iter().all(|x| x.is_some() && *x == l[0]), "{l:?}");
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_cluster_through_a_static_seed_with_one_leader() {
    let _live = support::live().await;
    nodes_form_a_cluster_with_one_leader(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_nodes_form_a_cluster_through_a_static_seed_with_one_leader() {
    let _live = support::live().await;
    nodes_form_a_cluster_with_one_leader(10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_ends_removed_everywhere_without_unreachable_events() {
    let _live = support::live().await;
    let nodes = cluster(3).await;
    let mut subs = Vec::new();
    for n in &nodes[..2] {
        subs.push(n.subscribe().await.unwrap());
    }
    let leaving = nodes[2].self_address().clone();
    assert_eq!(nodes[2].shutdown().await, ShutdownOutcome::Left);
    for n in &nodes[..2] {
        wait_for(n, T, "the leaver removed", |s| s.state.members.len() == 2 && s.state.convergence)
            .await;
    }
    for mut sub in subs {
        let mut saw_removed = false;
        while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
            if e.member().is_some_and(|m| *m.address() == leaving) {
                assert!(
                    !matches!(e, ClusterEvent::UnreachableMember(_)),
                    "graceful leave seen as failure"
                );
                saw_removed |= matches!(e, ClusterEvent::MemberRemoved { .. });
            }
        }
        assert!(saw_removed);
    }
    for n in &nodes[..2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abrupt_drop_becomes_unreachable_and_down_removes_it() {
    let _live = support::live().await;
    let nodes = cluster(3).await;
    let dropped = nodes[2].self_address().clone();
    nodes[2].stop().await;
    for n in &nodes[..2] {
        wait_for(n, T, "the dropped node unreachable", |s| {
            s.state.unreachable.iter().any(|(m, _)| *m.address() == dropped)
        })
        .await;
    }
    nodes[1].down(dropped.clone()).await.unwrap();
    for n in &nodes[..2] {
        wait_for(n, T, "the dropped node removed", |s| all_up(s, 2)).await;
    }
    for n in &nodes[..2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_incarnation_on_the_same_port_rejoins_after_the_old_one_is_downed() {
    let _live = support::live().await;
    let nodes = cluster(3).await;
    let old = nodes[2].self_node().clone();
    nodes[2].stop().await;
    let mut settings = fast_settings();
    // The one fixed port of this file, on purpose: the stopped node's, bound again at once (a new
    // incarnation at the same address is what is tested). Every other node binds port 0.
    settings.cluster.port = old.address.port();
    settings.cluster.seed_nodes = vec![nodes[0].self_address().to_string()];
    let new = Node::start(&settings).await.unwrap();
    assert_eq!(new.self_address(), &old.address);
    assert_ne!(new.self_node(), &old);
    for n in [&nodes[0], &nodes[1], &new] {
        wait_for(n, T, "the new incarnation Up", |s| {
            all_up(s, 3) && s.state.members.iter().any(|m| m.node() == new.self_node())
        })
        .await;
    }
    assert_eq!(new.self_status(), MemberStatus::Up);
    for n in [&nodes[0], &nodes[1], &new] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downed_node_shuts_itself_down_and_says_why() {
    let _live = support::live().await;
    let nodes = cluster(3).await;
    nodes[0].down(nodes[2].self_address().clone()).await.unwrap();
    let t = tokio::time::timeout(T, nodes[2].terminated()).await.unwrap();
    assert_eq!(t.to_string(), "this node was downed");
    for n in &nodes[..2] {
        wait_for(n, T, "the downed node removed", |s| all_up(s, 2)).await;
        n.stop().await;
    }
}
