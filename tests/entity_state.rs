//! Entities with state on a real cluster (nodes in one process over TCP, each with its own data
//! directory): a counter keeps its value in the replicated store through
//! `EntityContext::state`/`persist`, so the value follows the entity to another node when its
//! node crashes; a write of an incarnation that another one has superseded is refused, the
//! entity stops, and the next message starts it again from the newer state.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoke::Node;
use convoke::data::FenceOp;
use convoke::settings::Settings;
use convoke::sharding::{Entity, EntityContext, EntityRef, StateError};
use serde::{Deserialize, Serialize};
use support::{fast_settings, join_through_first};

const ASK: Duration = Duration::from_secs(10);
const T: Duration = Duration::from_secs(90);

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    Add(u64),
    Get,
}

/// The value and the node that answered, or why the state could not be kept.
type Answer = Result<(u64, usize), String>;

/// A counter whose value lives in the store, never in the entity.
struct Counter {
    node: usize,
}

impl Entity for Counter {
    type Message = Cmd;
    type Reply = Answer;

    async fn handle(&mut self, cmd: Cmd, ctx: &mut EntityContext) -> Answer {
        let value = *ctx.state::<u64>().await.map_err(|e| e.to_string())?;
        let value = match cmd {
            Cmd::Add(n) => {
                ctx.persist(value + n).await.map_err(|e| e.to_string())?;
                value + n
            }
            Cmd::Get => value,
        };
        Ok((value, self.node))
    }
}

/// How many incarnations of each entity were made, on any node.
type Starts = Arc<Mutex<HashMap<String, usize>>>;

fn settings(dir: &std::path::Path) -> Settings {
    let mut s = support::fast_sharding_settings();
    s.sharding.number_of_shards = 12;
    s.data.enabled = true;
    s.data.dir = dir.to_path_buf();
    s.data.request_timeout = Duration::from_secs(3);
    s
}

async fn start(dirs: &[tempfile::TempDir]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for d in dirs {
        nodes.push(Node::start(&settings(d.path())).await.expect("a node starts"));
    }
    join_through_first(&nodes).await;
    nodes
}

fn start_counters(nodes: &[Node], starts: &Starts) -> Vec<EntityRef<Counter>> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let starts = starts.clone();
            n.sharding()
                .start("counter", None, move |id: &str| {
                    *starts.lock().unwrap().entry(id.to_owned()).or_default() += 1;
                    Counter { node: i }
                })
                .unwrap()
        })
        .collect()
}

/// Three nodes with counters, counter `id` at 3 through node 0, and what the store holds for it
/// (read through node 2). The directories must live as long as the nodes: bind them.
struct Three {
    dirs: Vec<tempfile::TempDir>,
    nodes: Vec<Node>,
    starts: Starts,
    refs: Vec<EntityRef<Counter>>,
    held: convoke::data::Fenced,
}

async fn three_counting_to_three(id: &str) -> Three {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = start(&dirs).await;
    let starts = Starts::default();
    let refs = start_counters(&nodes, &starts);
    for n in 1..=3 {
        assert_eq!(ask_until(&refs[0], id, || Cmd::Add(1)).await.0, n);
    }
    let key = format!("entity/counter/{id}");
    let held = nodes[2].data().fenced_read(&key).await.unwrap().expect("the counter's state");
    Three { dirs, nodes, starts, refs, held }
}

/// Asks until an answer comes back (the shard or the store may be settling after a crash).
async fn ask_until(r: &EntityRef<Counter>, id: &str, cmd: fn() -> Cmd) -> (u64, usize) {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let why = match r.ask(id, &cmd(), ASK).await {
            Ok(Ok(answer)) => return answer,
            Ok(Err(e)) => e,
            Err(e) => e.to_string(),
        };
        assert!(tokio::time::Instant::now() < deadline, "{id} never answered: {why}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counters_value_in_the_store_follows_it_to_another_node_when_its_node_crashes() {
    let _live = support::live().await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes = start(&dirs).await;
    let starts = Starts::default();
    let refs = start_counters(&nodes, &starts);
    let mut expected: HashMap<String, u64> = HashMap::new();
    let mut homes: HashMap<String, usize> = HashMap::new();
    for k in 0..120u64 {
        let id = format!("c-{}", k % 24);
        let (value, node) = ask_until(&refs[(k as usize) % 3], &id, || Cmd::Add(1)).await;
        let e = expected.entry(id.clone()).or_default();
        *e += 1;
        assert_eq!(value, *e, "{id}");
        homes.insert(id, node);
    }
    // Node 1 crashes: its counters start on the survivors and read their values from the
    // store; the others keep answering where they were.
    let crashed = 1;
    assert!(homes.values().any(|h| *h == crashed), "node {crashed} hosts some counters");
    nodes[crashed].stop().await;
    for (id, n) in &expected {
        let (value, node) = ask_until(&refs[0], id, || Cmd::Get).await;
        assert_ne!(node, crashed);
        assert_eq!(value, *n, "{id} (was on node {})", homes[id]);
    }
    // And they go on counting there.
    for id in expected.keys() {
        let (value, _) = ask_until(&refs[2], id, || Cmd::Add(1)).await;
        assert_eq!(value, expected[id] + 1, "{id}");
    }
    let moved = homes.values().filter(|h| **h == crashed).count();
    let restarted = homes
        .iter()
        .filter(|(_, h)| **h == crashed)
        .filter(|(id, _)| starts.lock().unwrap()[id.as_str()] == 2)
        .count();
    assert_eq!(restarted, moved, "each moved counter started once more, on a survivor");
    for (i, n) in nodes.iter().enumerate() {
        if i != crashed {
            n.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_a_superseded_incarnation_is_refused_and_the_next_message_reads_the_newer_state()
{
    let _live = support::live().await;
    let Three { dirs: _dirs, nodes, starts, refs, held } = three_counting_to_three("fenced").await;
    // Another writer claims the counter's state above the running incarnation and stores 100,
    // as an incarnation on the far side of a freeze would.
    let key = "entity/counter/fenced";
    let data = nodes[2].data();
    let first = held.state.as_ref().expect("written").ballot;
    let ballot = held.promise.next(42);
    let claimed = data.fenced_write(key, FenceOp::Claim(ballot)).await.unwrap();
    assert_eq!(claimed.state.map(|s| s.bytes), Some(b"3".to_vec()));
    let write = FenceOp::Write { ballot, seq: 1, bytes: b"100".to_vec() };
    data.fenced_write(key, write).await.unwrap();

    // The running incarnation's next write is refused: nothing is written over 100.
    let refused = refs[1].ask("fenced", &Cmd::Add(1), ASK).await.unwrap();
    let expected = StateError::Fenced("fenced".to_owned()).to_string();
    assert_eq!(refused, Err(expected));
    let held = data.fenced_read(key).await.unwrap().expect("the counter's state");
    assert_eq!(held.state.map(|s| s.bytes), Some(b"100".to_vec()));
    // It stopped; the next message starts a new incarnation that claims above and reads 100.
    assert_eq!(ask_until(&refs[1], "fenced", || Cmd::Add(1)).await.0, 101);
    assert_eq!(starts.lock().unwrap()["fenced"], 2);
    // On the same node as the first, under a writer id of its own (docs/data.md, "Writers").
    let held = data.fenced_read(key).await.unwrap().expect("the counter's state");
    let second = held.state.expect("written").ballot;
    assert!(second > ballot, "{second} claimed above {ballot}");
    assert_ne!(second.holder, first.holder, "two incarnations never share a writer id");
    for n in &nodes {
        n.stop().await;
    }
}

/// A claim above the running incarnation that wrote nothing (one that reached a replica and then
/// failed leaves such a promise behind): the incarnation's next write is refused, it claims
/// again, finds its own state, and the message succeeds without a new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promise_of_a_claim_that_wrote_nothing_does_not_stop_the_running_incarnation() {
    let _live = support::live().await;
    let Three { dirs: _dirs, nodes, starts, refs, held } = three_counting_to_three("orphan").await;
    let key = "entity/counter/orphan";
    let data = nodes[2].data();
    let running = held.state.as_ref().expect("written").ballot;
    let orphan = held.promise.next(42);
    data.fenced_write(key, FenceOp::Claim(orphan)).await.unwrap();

    let answer = refs[1].ask("orphan", &Cmd::Add(1), ASK).await.unwrap();
    assert_eq!(answer.map(|(value, _)| value), Ok(4));
    assert_eq!(starts.lock().unwrap()["orphan"], 1, "the same incarnation carried on");
    let held = data.fenced_read(key).await.unwrap().expect("the counter's state");
    let written = held.state.expect("written");
    assert_eq!(written.bytes, b"4".to_vec());
    assert!(written.ballot > orphan, "{} claimed above {orphan}", written.ballot);
    assert_eq!(written.ballot.holder, running.holder, "by the running incarnation's writer");
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_on_a_node_without_the_store_is_told_so_when_it_asks_for_its_state() {
    let _live = support::live().await;
    let mut s = fast_settings();
    s.sharding.number_of_shards = 4;
    let node = Node::start(&s).await.unwrap();
    join_through_first(std::slice::from_ref(&node)).await;
    let counters = start_counters(std::slice::from_ref(&node), &Starts::default());
    let answer = counters[0].ask("c", &Cmd::Get, ASK).await.unwrap();
    let why = answer.expect_err("no store");
    assert!(why.contains("data.enabled"), "{why}");
    node.stop().await;
}
