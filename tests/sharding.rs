//! Cluster sharding on a real cluster (nodes in one process over TCP): asks from every node reach
//! one entity per id; a graceful leave hands the leaving node's shards off; a crashed node's
//! shards come back elsewhere after its removal and the margin; the coordinator's node crashing
//! moves no shard with a live home. A registry counts the live instances of each entity and
//! fails the test if one ever has two.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoke::Node;
use convoke::management::{ClusterShardingStats, ShardEntityTypeKeys, ShardRegionStats};
use convoke::node::ShutdownOutcome;
use convoke::settings::Settings;
use convoke::sharding::{Entity, EntityContext, EntityRef, ShardingError};
use serde::{Deserialize, Serialize};

const ASK: Duration = Duration::from_secs(5);
const T: Duration = Duration::from_secs(90);

/// Which node runs each entity now; a second start while one runs is recorded as a violation.
#[derive(Clone, Default)]
struct Registry {
    running: Arc<Mutex<HashMap<String, usize>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Registry {
    fn started(&self, id: &str, node: usize) {
        let mut running = self.running.lock().unwrap();
        if let Some(other) = running.insert(id.to_owned(), node) {
            self.violations.lock().unwrap().push(format!("{id} on {node} while on {other}"));
        }
    }

    fn stopped(&self, id: &str) {
        self.running.lock().unwrap().remove(id);
    }

    /// Waits until no entity runs on `node` (stopped: its tasks end).
    async fn wait_gone_from(&self, node: usize) {
        let deadline = tokio::time::Instant::now() + T;
        while self.running.lock().unwrap().values().any(|n| *n == node) {
            assert!(tokio::time::Instant::now() < deadline, "entities outlived node {node}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn assert_never_twice(&self) {
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "entities ran on two nodes at once: {v:?}");
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    Add(u64),
    Get,
}

/// The answer: the count and the node that answered.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Count {
    value: u64,
    node: usize,
}

struct Counter {
    id: String,
    node: usize,
    value: u64,
    registry: Registry,
}

impl Entity for Counter {
    type Message = Cmd;
    type Reply = Count;

    async fn handle(&mut self, message: Cmd, _ctx: &mut EntityContext) -> Count {
        if let Cmd::Add(n) = message {
            self.value += n;
        }
        Count { value: self.value, node: self.node }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.registry.stopped(&self.id);
    }
}

fn start_counters(nodes: &[Node], registry: &Registry) -> Vec<EntityRef<Counter>> {
    nodes.iter().enumerate().map(|(i, n)| start_counter(n, i, registry)).collect()
}

fn start_counter(node: &Node, i: usize, registry: &Registry) -> EntityRef<Counter> {
    let registry = registry.clone();
    node.sharding()
        .start("counter", None, move |id: &str| {
            registry.started(id, i);
            Counter { id: id.to_owned(), node: i, value: 0, registry: registry.clone() }
        })
        .unwrap()
}

fn settings() -> Settings {
    let mut s = support::fast_sharding_settings();
    s.sharding.rebalance_interval = Duration::from_secs(2);
    s.sharding.number_of_shards = 30;
    s
}

/// [`settings`] with the management API on an ephemeral port and no bootstrap.
fn with_management() -> Settings {
    let mut s = settings();
    s.management.enabled = true;
    s.management.port = 0;
    s.bootstrap.enabled = false;
    s
}

/// Asks until the entity answers (its shard may be moving), or panics after `T`.
async fn ask_until_answered(r: &EntityRef<Counter>, id: &str, cmd: fn() -> Cmd) -> Count {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        match r.ask(id, &cmd(), ASK).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "{id} never answered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_from_every_node_reach_one_entity_per_id() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&settings(), 3).await;
    let registry = Registry::default();
    let refs = start_counters(&nodes, &registry);
    let mut expected = HashMap::new();
    for k in 0..300u64 {
        let id = format!("c-{}", k % 30);
        let via = &refs[(k as usize * 7) % 3];
        let count = via.ask(&id, &Cmd::Add(1), ASK).await.unwrap();
        let e = expected.entry(id).or_insert(0u64);
        *e += 1;
        assert_eq!(count.value, *e);
    }
    for (id, n) in &expected {
        for r in &refs {
            assert_eq!(r.ask(id, &Cmd::Get, ASK).await.unwrap().value, *n, "{id}");
        }
    }
    // Every node hosts some of the 30 shards.
    let mut hosting = 0;
    for n in &nodes {
        let report = n.sharding().report("counter").await.unwrap();
        if !report.shards.is_empty() {
            hosting += 1;
        }
    }
    assert_eq!(hosting, 3);
    assert_eq!(nodes[0].sharding().type_names(), ["counter"]);
    registry.assert_never_twice();
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_node_hands_its_shards_off_and_every_entity_answers_after() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&settings(), 3).await;
    let registry = Registry::default();
    let refs = start_counters(&nodes, &registry);
    for k in 0..30 {
        refs[0].ask(&format!("c-{k}"), &Cmd::Add(1), ASK).await.unwrap();
    }
    let leaving = 2;
    let report = nodes[leaving].sharding().report("counter").await.unwrap();
    assert!(!report.shards.is_empty());
    let outcome = tokio::time::timeout(T, nodes[leaving].shutdown()).await.expect("leave hung");
    assert!(matches!(outcome, ShutdownOutcome::Left), "{outcome:?}");
    for k in 0..30 {
        let c = ask_until_answered(&refs[0], &format!("c-{k}"), || Cmd::Get).await;
        assert_ne!(c.node, leaving, "c-{k} answered from the node that left");
    }
    registry.assert_never_twice();
    for n in &nodes[..2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_nodes_entities_answer_again_elsewhere_and_other_shards_stay() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&settings(), 3).await;
    let registry = Registry::default();
    let refs = start_counters(&nodes, &registry);
    let mut before = HashMap::new();
    for k in 0..30 {
        let id = format!("c-{k}");
        let c = refs[1].ask(&id, &Cmd::Add(1), ASK).await.unwrap();
        before.insert(id, c.node);
    }
    // Node 0 is the oldest: it runs the coordinator. Crash it.
    let crashed = 0;
    nodes[crashed].stop().await;
    // Its entities end with its tasks (they are in this process); none may start elsewhere
    // before that, which the registry checks.
    registry.wait_gone_from(crashed).await;
    // Entities with a live home keep their count (they did not move).
    for (id, &home) in &before {
        if home != crashed {
            let c = ask_until_answered(&refs[1], id, || Cmd::Get).await;
            assert_eq!((c.node, c.value), (home, 1), "{id} moved or lost its count");
        }
    }
    // The crashed node's entities answer again, from a survivor, after its removal.
    for (id, &home) in &before {
        if home == crashed {
            let c = ask_until_answered(&refs[2], id, || Cmd::Get).await;
            assert_ne!(c.node, crashed);
        }
    }
    registry.assert_never_twice();
    for n in &nodes[1..] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_a_type_twice_is_refused() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&settings(), 1).await;
    let registry = Registry::default();
    start_counter(&nodes[0], 0, &registry);
    let again = nodes[0].sharding().start("counter", None, |id: &str| Counter {
        id: id.to_owned(),
        node: 0,
        value: 0,
        registry: Registry::default(),
    });
    assert!(matches!(again, Err(ShardingError::AlreadyStarted(t)) if t == "counter"));
    nodes[0].stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_lists_types_shards_and_every_members_shards() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&with_management(), 2).await;
    let registry = Registry::default();
    let refs = start_counters(&nodes, &registry);
    for k in 0..20 {
        refs[0].ask(&format!("c-{k}"), &Cmd::Add(1), ASK).await.unwrap();
    }
    let client = reqwest::Client::new();
    let base = format!("http://{}", nodes[0].management_addr().unwrap());
    let get = |path: &str| client.get(format!("{base}{path}")).send();

    let keys: ShardEntityTypeKeys = get("/cluster/shards").await.unwrap().json().await.unwrap();
    assert_eq!(keys.entity_type_keys, ["counter"]);

    let here = nodes[0].sharding().report("counter").await.unwrap();
    let region: ShardRegionStats =
        get("/cluster/shards/counter").await.unwrap().json().await.unwrap();
    let shown: Vec<(String, u64)> =
        region.regions.iter().map(|d| (d.shard_id.clone(), d.num_entities)).collect();
    let expected: Vec<(String, u64)> =
        here.shards.iter().map(|d| (d.shard_id.clone(), d.num_entities)).collect();
    assert_eq!(shown, expected);
    assert!(!shown.is_empty());

    let missing = get("/cluster/shards/nope").await.unwrap();
    assert_eq!(missing.status(), reqwest::StatusCode::NOT_FOUND);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["message"], "Shard Region nope is not started");

    let stats: ClusterShardingStats =
        get("/cluster/shards/counter/stats").await.unwrap().json().await.unwrap();
    assert!(stats.failed.is_empty(), "{:?}", stats.failed);
    assert_eq!(stats.regions.len(), 2);
    let entities: u64 = stats.regions.iter().flat_map(|r| &r.shards).map(|d| d.num_entities).sum();
    assert_eq!(entities, 20, "every entity counted once, on one member");

    // The admin CLI shows the same: the types, each member's figures with their total, and
    // this node's region shard by shard.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoke"))
            .args(args)
            .args(["--url", &base])
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let rows = |text: &str| -> Vec<Vec<String>> {
        text.lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
    };
    assert_eq!(run(&["shards"]), (Some(0), "ENTITY TYPE\ncounter\n".to_owned()));
    let (code, out) = run(&["shards", "counter"]);
    assert_eq!(code, Some(0), "{out}");
    let table = rows(&out);
    assert_eq!(table[0], ["MEMBER", "SHARDS", "ENTITIES"]);
    let mut members: Vec<String> = stats.regions.iter().map(|m| m.address.clone()).collect();
    members.sort();
    let listed: Vec<String> = table[1..3].iter().map(|r| r[0].clone()).collect();
    assert_eq!(listed, members, "{out}");
    let column =
        |c: usize| -> u64 { table[1..3].iter().map(|r| r[c].parse::<u64>().unwrap()).sum() };
    assert_eq!(table[3], ["TOTAL".to_owned(), column(1).to_string(), "20".to_owned()], "{out}");
    assert_eq!(column(2), 20, "{out}");
    let (code, out) = run(&["shards", "counter", "--local"]);
    assert_eq!(code, Some(0), "{out}");
    let listed: Vec<(String, u64)> =
        rows(&out)[1..].iter().map(|r| (r[0].clone(), r[1].parse().unwrap())).collect();
    let mut sorted = expected.clone();
    sorted.sort_by(|a, b| (a.0.len(), &a.0).cmp(&(b.0.len(), &b.0)));
    assert_eq!(listed, sorted);
    let (code, out) = run(&["shards", "counter", "-o", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(serde_json::from_str::<ClusterShardingStats>(&out).unwrap().regions.len(), 2);
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_number_of_shards_is_refused_at_join() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&settings(), 1).await;
    let mut other = settings();
    other.sharding.number_of_shards = 31;
    let joiner = Node::start(&other).await.unwrap();
    joiner.join_seed_nodes(vec![nodes[0].self_address().clone()]).await.unwrap();
    let ended = tokio::time::timeout(T, joiner.terminated()).await.expect("the joiner was let in");
    match ended {
        convoke::Termination::Core(convoke::membership::ShutdownReason::IncompatibleConfig(
            why,
        )) => {
            assert!(why.contains("rejected this node's configuration"), "{why}");
        }
        other => panic!("ended for another reason: {other:?}"),
    }
    assert_eq!(nodes[0].state().members.len(), 1);
    nodes[0].stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_waits_for_the_region_to_be_registered_and_the_singleton_to_know_the_oldest() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&with_management(), 2).await;
    let registry = Registry::default();
    let client = reqwest::Client::new();
    let ready = |i: usize| {
        let url = format!("http://{}/ready", nodes[i].management_addr().unwrap());
        let client = client.clone();
        async move {
            let answer = client.get(url).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    assert_eq!(ready(1).await, (200, "OK".to_owned()), "nothing started yet");
    // The coordinator cannot read its table while the other member, a replica, has not
    // started the type; a singleton whose role no member has has no oldest.
    start_counter(&nodes[1], 1, &registry);
    nodes[1].singletons().start("reports", Some("reporting"), |_| async {}).unwrap();
    let (status, text) = ready(1).await;
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("Check [sharding] not ok: the region of counter has not been registered")
            && text.contains("Check [singletons] not ok: the manager of reports does not know"),
        "both checks named: {text}"
    );
    start_counter(&nodes[0], 0, &registry);
    let deadline = tokio::time::Instant::now() + T;
    let text = loop {
        let (status, text) = ready(1).await;
        if !text.contains("[sharding]") {
            assert_eq!(status, 503, "{text}");
            break text;
        }
        assert!(tokio::time::Instant::now() < deadline, "the region never registered: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(text.contains("Check [singletons]"), "{text}");
    assert_eq!(ready(0).await.0, 200, "node 0's region registered with the same coordinator");
    for n in &nodes {
        n.stop().await;
    }
}
