//! The replicated store on a real cluster (nodes in one process over TCP, each with its own data
//! directory): writes through one node read back through the others, siblings, CRDT updates
//! through every node, refusals, and a node restarted with its directory that keeps its replicas.

mod support;

use std::time::Duration;

use convoke::Node;
use convoke::data::{CrdtOp, DataError, Level, Value, VersionVector};
use convoke::settings::Settings;
use support::{all_up, fast_settings, join_through_first, live, wait_for};

const T: Duration = Duration::from_secs(30);

fn data_settings(dir: &std::path::Path) -> Settings {
    let mut s = fast_settings();
    s.data.enabled = true;
    s.data.dir = dir.to_path_buf();
    s.data.request_timeout = Duration::from_secs(5);
    s
}

/// Starts `n` nodes, each on its own directory under `dirs`, and forms one cluster.
async fn start(dirs: &[tempfile::TempDir]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for d in dirs {
        nodes.push(Node::start(&data_settings(d.path())).await.expect("a node starts"));
    }
    join_through_first(&nodes).await;
    nodes
}

fn dirs(n: usize) -> Vec<tempfile::TempDir> {
    (0..n).map(|_| tempfile::tempdir().expect("a temporary directory")).collect()
}

fn bytes(values: &[Value]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = values
        .iter()
        .map(|v| match v {
            Value::Bytes(b) => b.clone(),
            other => panic!("bytes, not {other:?}"),
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_node_is_read_through_every_other_and_concurrent_writes_come_back_as_siblings()
 {
    let _live = live().await;
    let dirs = dirs(3);
    let nodes = start(&dirs).await;

    let ctx =
        nodes[0].data().put("greeting", b"hello".to_vec(), &VersionVector::new()).await.unwrap();
    for n in &nodes {
        let read = n.data().get("greeting").await.unwrap();
        assert_eq!(bytes(&read.values), [b"hello".to_vec()]);
        assert_eq!(read.context, ctx);
    }
    // Two writers that both read "hello" write concurrently: both values stay.
    nodes[1].data().put("greeting", b"hi".to_vec(), &ctx).await.unwrap();
    nodes[2].data().put("greeting", b"hey".to_vec(), &ctx).await.unwrap();
    let read = nodes[0].data().get_with("greeting", Level::All).await.unwrap();
    assert_eq!(bytes(&read.values), [b"hey".to_vec(), b"hi".to_vec()]);
    // A write with the read's context resolves them.
    nodes[0].data().put("greeting", b"hello again".to_vec(), &read.context).await.unwrap();
    let read = nodes[2].data().get("greeting").await.unwrap();
    assert_eq!(bytes(&read.values), [b"hello again".to_vec()]);

    // A delete reads as absent.
    nodes[1].data().delete("greeting", &read.context).await.unwrap();
    assert!(nodes[0].data().get("greeting").await.unwrap().values.is_empty());

    // Typed values travel as JSON.
    nodes[0].data().put_json("point", &(3, 4), &VersionVector::new()).await.unwrap();
    let (points, _) = nodes[2].data().get_json::<(i32, i32)>("point").await.unwrap();
    assert_eq!(points, [(3, 4)]);

    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_updates_through_every_node_add_up_and_bad_requests_are_refused() {
    let _live = live().await;
    let dirs = dirs(3);
    let nodes = start(&dirs).await;
    let mut tasks = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for _ in 0..20 {
            let data = n.data().clone();
            tasks.push(tokio::spawn(async move {
                data.update("hits", CrdtOp::Add(i as i64 + 1)).await
            }));
        }
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let read = nodes[1].data().get_with("hits", Level::All).await.unwrap();
    let [Value::Crdt(convoke::data::Crdt::PNCounter(c))] = read.values.as_slice() else {
        panic!("one counter: {read:?}")
    };
    assert_eq!(c.value(), 20 * (1 + 2 + 3));

    let long = "k".repeat(2000);
    let err = nodes[0].data().get(&long).await.unwrap_err();
    assert!(err.to_string().contains("data.max_key_bytes"), "{err}");
    let err = nodes[0].data().update("hits", CrdtOp::Enable).await.unwrap_err();
    assert!(matches!(err, DataError::Store(_)), "{err}");
    assert!(err.to_string().contains("pn-counter"), "{err}");

    let stats = nodes[0].data().stats().await.unwrap();
    assert_eq!(stats.ring_members, 3);
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_on_its_address_with_its_directory_keeps_its_replicas() {
    let _live = live().await;
    let dirs = dirs(3);
    // The third node keeps its port across the restart: the ring places data by address.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let third = || {
        let mut s = data_settings(dirs[2].path());
        s.cluster.port = port;
        s
    };
    let mut nodes = Vec::new();
    for d in &dirs[..2] {
        nodes.push(Node::start(&data_settings(d.path())).await.unwrap());
    }
    nodes.push(Node::start(&third()).await.unwrap());
    join_through_first(&nodes).await;
    for i in 0..50 {
        let key = format!("key-{i}");
        let value = Value::Bytes(key.clone().into_bytes());
        nodes[0].data().put_with(&key, value, &VersionVector::new(), Level::All).await.unwrap();
    }
    let before = nodes[2].data().stats().await.unwrap();
    assert!(before.keys >= 50, "{before:?}");
    assert!(
        matches!(nodes[2].shutdown().await, convoke::node::ShutdownOutcome::Left),
        "left gracefully"
    );
    nodes[2].data().stopped().await;

    // The same address and directory, not yet in any cluster: its replicas are there at once.
    let again = Node::start(&third()).await.expect("restarts");
    let after = again.data().stats().await.unwrap();
    assert!(after.keys >= 50, "{after:?}");
    again.join_seed_nodes(vec![nodes[0].self_address().clone()]).await.unwrap();
    wait_for(&again, T, "all three Up", |s| all_up(s, 3)).await;
    let read = again.data().get_with("key-7", Level::All).await.unwrap();
    assert_eq!(bytes(&read.values), [b"key-7".to_vec()]);
    for n in [&nodes[0], &nodes[1], &again] {
        n.stop().await;
    }
}

mod http {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use convoke::management::data::{CONTEXT_HEADER, Siblings, Written};
    use convoke::settings::ManagementSettings;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    /// Sends one request to `router`: status, context header, body.
    async fn call(
        router: &axum::Router,
        method: &str,
        uri: &str,
        context: Option<&str>,
        body: &[u8],
    ) -> (StatusCode, Option<String>, Vec<u8>) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(c) = context {
            req = req.header(CONTEXT_HEADER, c);
        }
        let resp =
            router.clone().oneshot(req.body(Body::from(body.to_vec())).unwrap()).await.unwrap();
        let status = resp.status();
        let ctx = resp.headers().get(CONTEXT_HEADER).map(|v| v.to_str().unwrap().to_owned());
        let bytes = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
        (status, ctx, bytes)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_siblings_deletes_and_stats_over_http_with_the_context_in_a_header() {
        let _live = live().await;
        let dirs = dirs(3);
        let nodes = start(&dirs).await;
        let writable = ManagementSettings { read_only: false, ..Default::default() };
        let router =
            |i: usize| convoke::management::router(nodes[i].management_handle(), &writable);
        let (a, b) = (router(0), router(1));

        let (status, ctx, body) = call(&a, "PUT", "/data/keys/users/42", None, b"ada").await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let written: Written = serde_json::from_slice(&body).unwrap();
        assert_eq!(ctx.as_deref(), Some(written.context.as_str()));

        let (status, ctx, body) = call(&b, "GET", "/data/keys/users/42?r=all", None, b"").await;
        assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"ada"[..]));
        let read_ctx = ctx.expect("a context header");

        // Two writers that read the same version: a 300 with both.
        call(&a, "PUT", "/data/keys/users/42", Some(&read_ctx), b"ada lovelace").await;
        call(&b, "PUT", "/data/keys/users/42", Some(&read_ctx), b"countess").await;
        let (status, ctx, body) = call(&a, "GET", "/data/keys/users/42?r=all", None, b"").await;
        assert_eq!(status, StatusCode::MULTIPLE_CHOICES);
        let siblings: Siblings = serde_json::from_slice(&body).unwrap();
        let mut texts: Vec<_> = siblings.siblings.iter().filter_map(|s| s.text.clone()).collect();
        texts.sort();
        assert_eq!(texts, ["ada lovelace", "countess"]);
        assert_eq!(ctx.as_deref(), Some(siblings.context.as_str()));

        // The delete with that context leaves nothing, but a context for the next write.
        let (status, _, _) =
            call(&b, "DELETE", "/data/keys/users/42", Some(&siblings.context), b"").await;
        assert_eq!(status, StatusCode::OK);
        let (status, ctx, _) = call(&a, "GET", "/data/keys/users/42", None, b"").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(ctx.is_some());

        // Bad input is refused, naming what is wrong.
        let (status, _, body) = call(&a, "PUT", "/data/keys/k", Some("%%%"), b"x").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(String::from_utf8_lossy(&body).contains("X-Convoke-Context"));
        let (status, _, body) = call(&a, "GET", "/data/keys/k?r=most", None, b"").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(String::from_utf8_lossy(&body).contains("expected one, quorum, all or a count"));

        let (status, _, body) = call(&a, "GET", "/data/stats", None, b"").await;
        assert_eq!(status, StatusCode::OK);
        let stats: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(stats["ringMembers"], 3);

        // Read-only (the default): writes answer 405, reads still work.
        let read_only = convoke::management::router(
            nodes[0].management_handle(),
            &ManagementSettings::default(),
        );
        assert_eq!(
            call(&read_only, "PUT", "/data/keys/k", None, b"x").await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            call(&read_only, "GET", "/data/keys/k", None, b"").await.0,
            StatusCode::NOT_FOUND
        );
        for n in &nodes {
            n.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_writes_and_deletes_keys_with_contexts_and_script_friendly_exit_statuses() {
    let _live = live().await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = data_settings(dir.path());
    s.data.replicas = 1;
    s.management.enabled = true;
    s.management.port = 0;
    s.management.read_only = false;
    s.bootstrap.enabled = false;
    let node = Node::start(&s).await.unwrap();
    node.join(node.self_address().clone()).await.unwrap();
    wait_for(&node, T, "Up", |s| all_up(s, 1)).await;
    let url = format!("http://{}", node.management_addr().unwrap());
    let cli = |args: &[&str]| {
        let url = url.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        async move {
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(env!("CARGO_BIN_EXE_convoke"))
                    .args(["--url", &url])
                    .args(&args)
                    .output()
                    .unwrap()
            })
            .await
            .unwrap()
        }
    };
    let put = cli(&["data", "put", "app/config", "v1"]).await;
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    assert!(String::from_utf8_lossy(&put.stdout).starts_with("Written \"app/config\" (context "));

    let get = cli(&["data", "get", "app/config"]).await;
    assert!(get.status.success());
    assert_eq!(get.stdout, b"v1");
    let stderr = String::from_utf8_lossy(&get.stderr);
    let context =
        stderr.trim().strip_prefix("context: ").expect("the context on stderr").to_owned();

    let del = cli(&["data", "delete", "app/config", "--context", &context]).await;
    assert!(del.status.success(), "{}", String::from_utf8_lossy(&del.stderr));
    let gone = cli(&["data", "get", "app/config", "--r", "one"]).await;
    assert_eq!(gone.status.code(), Some(3), "no value: exit 3");
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no value under key \"app/config\""));
    let bad = cli(&["data", "get", "k", "--r", "most"]).await;
    assert_eq!(bad.status.code(), Some(4), "a refused input: exit 4");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_sees_the_current_value_then_each_change_made_through_any_node() {
    let _live = live().await;
    let dirs = dirs(3);
    let nodes = start(&dirs).await;
    let ctx = nodes[0].data().put("config", b"v1".to_vec(), &VersionVector::new()).await.unwrap();
    let mut sub = nodes[2].data().subscribe("config", Duration::from_millis(200)).unwrap();
    let first = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert_eq!(bytes(&first.values), [b"v1".to_vec()]);
    // A change through another node: the subscriber on node 2 sees it (its replica changes, or
    // its next read finds it).
    nodes[1].data().put("config", b"v2".to_vec(), &ctx).await.unwrap();
    let second = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert_eq!(bytes(&second.values), [b"v2".to_vec()]);
    assert!(second.context.descends(&first.context) && second.context != first.context);
    for n in &nodes {
        n.stop().await;
    }
}
