//! A node that cannot join must not hang: it exits non-zero once a join has not completed within
//! `cluster.shutdown_after_unsuccessful_join_seed_nodes`, and `/alive` fails once it has been in no
//! cluster for longer than `management.health_checks.join_deadline` (bootstrap probing for ever),
//! so that Kubernetes restarts the pod.

mod support;

use std::time::Duration;

use support::process::Proc;

/// A TCP listener that accepts connections into its backlog and never answers: a seed node or
/// contact point that is there but never says anything. Bound to port 0 and kept open, so no
/// other test can take its port.
fn silent_peer() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

#[tokio::test]
async fn a_node_whose_seed_nodes_never_answer_exits_non_zero_after_the_join_timeout() {
    let _live = support::live().await;
    let seed = silent_peer();
    let seed_port = seed.local_addr().unwrap().port();
    let mut node = Proc::start(&[
        format!("cluster.seed_nodes=[\"convoke://convoke@127.0.0.1:{seed_port}\"]"),
        "cluster.shutdown_after_unsuccessful_join_seed_nodes=\"2s\"".into(),
        "management.enabled=false".into(),
    ])
    .await;
    let code = node.exit_code(Duration::from_secs(60)).await;
    assert_eq!(code, Some(1), "exit code; log:\n{}", node.log().join("\n"));
    assert!(
        node.logged(&[
            "could not join the seed nodes within cluster.shutdown_after_unsuccessful_join_seed_nodes"
        ]),
        "the log says why:\n{}",
        node.log().join("\n")
    );
    drop(seed);
}

#[tokio::test]
async fn a_bootstrapping_node_that_is_not_among_its_contact_points_fails_alive_after_the_join_deadline()
 {
    let _live = support::live().await;
    let other = silent_peer();
    let other_port = other.local_addr().unwrap().port();
    let node = Proc::start(&[
        "management.enabled=true".into(),
        "management.hostname=\"127.0.0.1\"".into(),
        "management.port=0".into(),
        "management.health_checks.join_deadline=\"2s\"".into(),
        "bootstrap.enabled=true".into(),
        "bootstrap.contact_point.probe_timeout=\"500ms\"".into(),
        "discovery.method=\"config\"".into(),
        format!(
            "discovery.config.services.convoke.endpoints=[{{host=\"127.0.0.1\", port={other_port}}}]"
        ),
    ])
    .await;
    let url = node.management_url().await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let alive = || async {
        let resp = http.get(format!("{url}/alive")).send().await.expect("GET /alive");
        (resp.status().as_u16(), resp.text().await.unwrap_or_default())
    };
    // The node logs that it is not among the contact points, so it can never form a cluster.
    node.wait_log(
        &["this node is not among the discovered contact points"],
        Duration::from_secs(30),
    )
    .await;
    // /alive answers 200 until the deadline has passed, then 503 saying why; nothing signals the
    // moment it passes, so it is polled.
    let failed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (status, body) = alive().await;
            if status != 200 {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("/alive fails within 30 s of a 2 s join deadline");
    assert_eq!(failed.0, 503, "{}", failed.1);
    assert!(failed.1.contains("has not joined a cluster"), "{}", failed.1);
    assert!(failed.1.contains("management.health_checks.join_deadline"), "{}", failed.1);
    node.wait_log(&["/alive now fails so that the node is restarted"], Duration::from_secs(5))
        .await;
    drop(other);
}
