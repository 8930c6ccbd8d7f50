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
