//! The pod-deletion-cost annotation of `[rolling_update.kubernetes]` through the node: in-process
//! nodes patch their own pods on the stand-in Kubernetes API server of
//! `convoke_discovery::testkit` (the real kube client), the oldest with the highest cost.

mod support;

use std::time::Duration;

use convoke::Node;
use convoke::settings::Settings;
use convoke_discovery::kubernetes::{DELETION_COST_ANNOTATION, DELETION_COST_VERBS};
use convoke_discovery::testkit::FakeApiServer;
use serde_json::{Value, json};
use support::{all_up, fast_settings, wait_for};

const T: Duration = Duration::from_secs(60);
const TOKEN: &str = "rolling-update-token";
const NAMESPACE: &str = "shop";

fn node_settings(server: &FakeApiServer, dir: &std::path::Path, pod: &str) -> Settings {
    let mut s = fast_settings();
    s.discovery.kubernetes_api.api = server.client_settings(dir, TOKEN, NAMESPACE).unwrap();
    let r = &mut s.rolling_update.kubernetes;
    r.enabled = true;
    r.pod_name = pod.to_owned();
    r.retry_backoff = Duration::from_millis(200);
    s
}

/// The costs each pod was patched with, in order (`None`: the annotation removed).
fn patches(server: &FakeApiServer, pod: &str) -> Vec<Option<i64>> {
    server
        .pod_patches()
        .into_iter()
        .filter(|(ns, name, _)| ns == NAMESPACE && name == pod)
        .map(|(_, _, patch)| {
            let value = &patch["metadata"]["annotations"][DELETION_COST_ANNOTATION];
            assert!(value.is_null() || value.is_string(), "an annotation is a string: {patch}");
            value.as_str().map(|v| v.parse().unwrap())
        })
        .collect()
}

async fn wait_patches(server: &FakeApiServer, expected: &[(&str, Vec<Option<i64>>)]) {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let seen: Vec<(&str, Vec<Option<i64>>)> =
            expected.iter().map(|(pod, _)| (*pod, patches(server, pod))).collect();
        if seen == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "patches {seen:?}, expected {expected:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_oldest_members_annotate_their_pods_and_rerank_when_the_oldest_leaves() {
    let _live = support::live().await;
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start(TOKEN).await.unwrap();
    // The first patch (the first node's) is refused once: it is tried again.
    server.fail_pod_patches(&[409]);
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..4 {
        let node =
            Node::start(&node_settings(&server, dir.path(), &format!("pod-{i}"))).await.unwrap();
        let seed = nodes.first().unwrap_or(&node).self_address().clone();
        node.join_seed_nodes(vec![seed]).await.unwrap();
        wait_for(&node, T, "all members Up", |s| all_up(s, i + 1)).await;
        nodes.push(node);
    }
    wait_patches(
        &server,
        &[
            ("pod-0", vec![Some(3)]),
            ("pod-1", vec![Some(2)]),
            ("pod-2", vec![Some(1)]),
            // The youngest removes any annotation its pod may still carry.
            ("pod-3", vec![None]),
        ],
    )
    .await;
    let statuses: Vec<u16> = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.uri.contains("/pods/pod-0"))
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [409, 200], "refused, then tried again");
    // No patch failed but the one refused on purpose (a client that cannot read the answer
    // would send it again).
    let failed: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.status != 200)
        .map(|r| format!("{} {} {}", r.method, r.uri, r.status))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    for n in &nodes {
        let metrics = n.metrics().render(&Default::default());
        assert!(!metrics.contains("outcome=\"unreachable\""), "{metrics}");
    }
    let needed: std::collections::BTreeSet<(String, String)> =
        server.requests().iter().map(|r| r.rbac()).collect();
    let granted: std::collections::BTreeSet<(String, String)> =
        DELETION_COST_VERBS.iter().map(|v| ("pods".to_owned(), (*v).to_owned())).collect();
    assert_eq!(needed, granted, "exactly the verbs k8s/base/role.yaml grants for it");
    let metrics = nodes[0].metrics().render(&Default::default());
    for line in [
        "convoke_pod_deletion_cost_patches_total{outcome=\"409\"} 1",
        "convoke_pod_deletion_cost_patches_total{outcome=\"ok\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // The oldest leaves, as its pod is deleted first: the others move up one each.
    nodes.remove(0).shutdown().await;
    wait_patches(
        &server,
        &[
            ("pod-0", vec![Some(3)]),
            ("pod-1", vec![Some(2), Some(3)]),
            ("pod-2", vec![Some(1), Some(2)]),
            ("pod-3", vec![None, Some(1)]),
        ],
    )
    .await;
    let bodies: Vec<Value> = server
        .pod_patches()
        .into_iter()
        .filter(|(_, pod, _)| pod == "pod-3")
        .map(|(_, _, patch)| patch)
        .collect();
    assert_eq!(
        bodies,
        [
            json!({"metadata": {"annotations": {DELETION_COST_ANNOTATION: null}}}),
            json!({"metadata": {"annotations": {DELETION_COST_ANNOTATION: "1"}}}),
        ],
        "JSON merge patches of the one annotation"
    );
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test]
async fn a_bad_annotation_setting_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start(TOKEN).await.unwrap();
    let mut s = node_settings(&server, dir.path(), "pod-0");
    s.rolling_update.kubernetes.annotated_pods_nr = 0;
    let e = Node::start(&s).await.unwrap_err().to_string();
    assert!(e.contains("rolling_update.kubernetes.annotated_pods_nr"), "{e}");
}
