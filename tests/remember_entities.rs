//! Remembered entities on a real cluster (nodes in one process over TCP, each with its own data
//! directory, `sharding.remember_entities = true`): the entities a crashed node ran start on the
//! survivors without a message, and one that passivated itself does not; after every node is
//! stopped and started again on its address and directory, the entities start again without a
//! message; settings that remember entities without the store are refused, naming the setting.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke::Node;
use convoke::settings::{RememberEntities, Settings};
use convoke::sharding::{Entity, EntityContext, EntityRef};
use serde::{Deserialize, Serialize};
use support::join_through_first;
use support::running::{Running, RunsOn};

const ASK: Duration = Duration::from_secs(10);
const T: Duration = Duration::from_secs(90);

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    Hello,
    Stop,
}

/// An entity that says where it runs, from its start until it is dropped.
struct Tracked(RunsOn);

impl Tracked {
    fn new(id: &str, node: usize, running: &Running) -> Self {
        let (runs, previous) = RunsOn::start(id, node, running);
        assert_eq!(previous, None, "{id} started on node {node} while it runs on {previous:?}");
        Self(runs)
    }
}

impl Entity for Tracked {
    type Message = Cmd;
    type Reply = usize;

    async fn handle(&mut self, cmd: Cmd, ctx: &mut EntityContext) -> usize {
        if let Cmd::Stop = cmd {
            ctx.passivate();
        }
        self.0.node()
    }
}

fn settings(dir: &std::path::Path) -> Settings {
    settings_on(dir, 0)
}

fn settings_on(dir: &std::path::Path, port: u16) -> Settings {
    let mut s = support::fast_sharding_settings();
    s.cluster.port = port;
    s.sharding.number_of_shards = 12;
    s.sharding.remember_entities = RememberEntities::Types(vec!["tracked".to_owned()]);
    s.data.enabled = true;
    s.data.dir = dir.to_path_buf();
    s.data.request_timeout = Duration::from_secs(3);
    s
}

/// Asks until an answer comes back.
async fn ask_until(r: &EntityRef<Tracked>, id: &str, cmd: fn() -> Cmd) -> usize {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let why = match r.ask(id, &cmd(), ASK).await {
            Ok(node) => return node,
            Err(e) => e.to_string(),
        };
        assert!(tokio::time::Instant::now() < deadline, "{id} never answered: {why}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The entity ids the store remembers under `key`.
async fn remembered(node: &Node, key: &str) -> Vec<String> {
    let held = node.data().fenced_read(key).await.expect("the store answers");
    let bytes = held.and_then(|f| f.state).map(|w| w.bytes).unwrap_or_default();
    if bytes.is_empty() {
        Vec::new()
    } else {
        serde_json::from_slice(&bytes).expect("a list of ids")
    }
}

/// Waits until `done` holds of the running entities, or fails with what they are.
async fn until(running: &Running, what: &str, done: impl Fn(&BTreeMap<String, usize>) -> bool) {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let now = running.lock().unwrap().clone();
        if done(&now) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {what}: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entities_of_a_crashed_node_start_on_the_survivors_without_a_message() {
    // RUST_LOG=convoke::sharding=debug shows the remembered sets' reads and writes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let _live = support::live().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes = Vec::new();
    for d in &dirs {
        nodes.push(Node::start(&settings(d.path())).await.expect("a node starts"));
    }
    join_through_first(&nodes).await;
    let running = Running::default();
    let refs: Vec<EntityRef<Tracked>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let running = running.clone();
            n.sharding().start("tracked", None, move |id: &str| Tracked::new(id, i, &running))
        })
        .collect::<Result<_, _>>()
        .unwrap();
    let ids: Vec<String> = (0..60).map(|k| format!("t-{k}")).collect();
    for (k, id) in ids.iter().enumerate() {
        ask_until(&refs[k % 3], id, || Cmd::Hello).await;
    }
    // One entity on node 1 passivates itself: it is forgotten.
    let crashed = 1;
    let on_crashed: Vec<String> = {
        let now = running.lock().unwrap();
        ids.iter().filter(|id| now.get(*id) == Some(&crashed)).cloned().collect()
    };
    assert!(on_crashed.len() >= 2, "node {crashed} runs {on_crashed:?}");
    let passivated = on_crashed[0].clone();
    ask_until(&refs[0], &passivated, || Cmd::Stop).await;
    until(&running, "passivated", |r| !r.contains_key(&passivated)).await;
    let key = format!("remember/tracked/{}", refs[0].shard_of(&passivated));
    // The set is written after its entities started, on its own time: it fills while the
    // machine is busy.
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let stored = remembered(&nodes[0], &key).await;
        assert!(
            stored.iter().all(|id| on_crashed.contains(id)),
            "{key} holds only its shard's entities, which run on node {crashed}: {stored:?}"
        );
        if !stored.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{key} never written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while remembered(&nodes[0], &key).await.contains(&passivated) {
        assert!(tokio::time::Instant::now() < deadline, "{passivated} never forgotten in {key}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Node 1 crashes. With no message sent, its other entities start on the survivors once
    // their shards have moved there; the passivated one stays stopped.
    nodes[crashed].stop().await;
    let expected: BTreeSet<&String> = ids.iter().filter(|id| **id != passivated).collect();
    until(&running, "restarted on the survivors", |r| {
        r.keys().collect::<BTreeSet<_>>() == expected && r.values().all(|n| *n != crashed)
    })
    .await;
    assert!(!running.lock().unwrap().contains_key(&passivated));
    for (i, n) in nodes.iter().enumerate() {
        if i != crashed {
            n.stop().await;
        }
    }
}

/// Starts a node on each directory (and port, 0 for any), joins them and starts the type;
/// returns the nodes and the first node's handle of the type.
async fn start(
    dirs: &[tempfile::TempDir],
    ports: &[u16],
    running: &Running,
) -> (Vec<Node>, EntityRef<Tracked>) {
    let mut nodes = Vec::new();
    for (d, p) in dirs.iter().zip(ports) {
        nodes.push(Node::start(&settings_on(d.path(), *p)).await.expect("a node starts"));
    }
    join_through_first(&nodes).await;
    let mut refs = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let running = running.clone();
        let factory = move |id: &str| Tracked::new(id, i, &running);
        refs.push(n.sharding().start("tracked", None, factory).unwrap());
    }
    (nodes, refs.swap_remove(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_full_restart_the_remembered_entities_start_without_a_message() {
    let _live = support::live().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let running = Running::default();
    let (nodes, r) = start(&dirs, &[0, 0, 0], &running).await;
    let ids: BTreeSet<String> = (0..60).map(|k| format!("t-{k}")).collect();
    for id in &ids {
        ask_until(&r, id, || Cmd::Hello).await;
    }
    // Every shard's set is written (the entities' adds are written after they start).
    let shards: BTreeSet<String> = ids.iter().map(|id| r.shard_of(id)).collect();
    for shard in &shards {
        let key = format!("remember/tracked/{shard}");
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let stored = remembered(&nodes[0], &key).await;
            if stored.iter().filter(|id| ids.contains(*id)).count()
                == ids.iter().filter(|id| r.shard_of(id) == *shard).count()
            {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{key} holds only {stored:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let ports: Vec<u16> = nodes.iter().map(|n| n.self_address().port()).collect();
    for n in &nodes {
        n.stop().await;
        n.data().stopped().await;
    }
    drop((nodes, r));
    until(&running, "stopped with their nodes", BTreeMap::is_empty).await;
    // Started again on their addresses and directories, with no message sent.
    let (nodes, _r) = start(&dirs, &ports, &running).await;
    until(&running, "restarted after the full restart", |r| {
        r.keys().cloned().collect::<BTreeSet<_>>() == ids
    })
    .await;
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_without_the_store_are_refused_naming_the_setting() {
    let mut s = support::fast_sharding_settings();
    s.sharding.remember_entities = RememberEntities::Types(vec!["tracked".to_owned()]);
    let why = s.validate().expect_err("remember_entities without data.enabled is refused");
    assert_eq!(why.key, "sharding.remember_entities", "{why}");
    assert!(why.to_string().contains("data.enabled"), "{why}");
    assert!(why.to_string().contains("tracked"), "names the value: {why}");
    let Err(refused) = Node::start(&s).await else { panic!("a node started with it") };
    assert!(refused.to_string().contains("sharding.remember_entities"), "{refused}");
}
