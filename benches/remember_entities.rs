//! What remembering entities costs when shards move, on three nodes in one process over loopback
//! TCP, each with a store directory of its own (`data.sync = "always"`).
//!
//! Two entity types run side by side on 100 shards with 100 entities each (10,000 entities per
//! type): `plain` and `remembered` (`sharding.remember_entities = ["remembered"]`). Each run
//! starts every entity of both types with one message, then shuts node 2 down gracefully: its
//! shards of both types hand off to the other two. It measures, from the start of the shutdown:
//!
//! - `plain`: until the survivors host every shard of the type (its entities wait for their
//!   next message);
//! - `remembered`: until every entity that ran on node 2 runs again on a survivor, with no
//!   message sent: the shard's move plus the read of its remembered set and the entity starts;
//!
//! and the time to start the 10,000 entities of each type with one message each (64 in flight),
//! where a remembered entity's start also changes its shard's set in the store. Last, the two
//! survivors are stopped and started again on their addresses and directories (a full restart):
//! the time until every remembered entity runs again, with no message sent.
//!
//! `cargo bench --bench remember_entities` prints each run, then a Markdown table of the medians
//! of 3 runs with the ratios.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use convoke::Node;
use convoke::settings::RememberEntities;
use convoke::sharding::{Entity, EntityContext, EntityRef};
use futures::StreamExt;

#[path = "../tests/support/mod.rs"]
mod support;
use support::running::{Running, RunsOn};

const RUNS: usize = 3;
const SHARDS: u32 = 100;
const PER_SHARD: usize = 100;
const IN_FLIGHT: usize = 64;
const ASK_TIMEOUT: Duration = Duration::from_secs(30);
const MOVE_TIMEOUT: Duration = Duration::from_secs(120);

/// An entity that says where it runs, from its start until it is dropped.
struct Tracked {
    _runs: RunsOn,
}

impl Entity for Tracked {
    type Message = ();
    type Reply = ();

    async fn handle(&mut self, (): (), _ctx: &mut EntityContext) {}
}

fn factory(node: usize, running: &Running) -> impl Fn(&str) -> Tracked + Send + Sync + 'static {
    let running = running.clone();
    move |id: &str| Tracked { _runs: RunsOn::start(id, node, &running).0 }
}

fn settings(dir: &std::path::Path, port: u16) -> convoke::settings::Settings {
    let mut s = support::fast_sharding_settings();
    s.cluster.port = port;
    s.sharding.number_of_shards = SHARDS;
    s.sharding.passivate_idle_after = None;
    s.sharding.remember_entities = RememberEntities::Types(vec!["remembered".to_owned()]);
    s.data.enabled = true;
    s.data.dir = dir.to_path_buf();
    s
}

/// `PER_SHARD` entity ids in each of the shards of `r`.
fn ids(r: &EntityRef<Tracked>) -> Vec<String> {
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for k in 0.. {
        let id = format!("e{k}");
        let list = per.entry(r.shard_of(&id)).or_default();
        if list.len() < PER_SHARD {
            list.push(id);
        }
        if per.len() == SHARDS as usize && per.values().all(|l| l.len() == PER_SHARD) {
            break;
        }
    }
    per.into_values().flatten().collect()
}

/// Sends one message to each id, `IN_FLIGHT` at a time; returns how long it took.
async fn start_all(r: &EntityRef<Tracked>, ids: &[String]) -> Duration {
    let t = Instant::now();
    futures::stream::iter(ids)
        .for_each_concurrent(IN_FLIGHT, |id| async move {
            r.ask(id, &(), ASK_TIMEOUT).await.expect("an entity answers");
        })
        .await;
    t.elapsed()
}

/// Waits until `done` holds, checking every 10 ms.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + MOVE_TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "never {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct Figures {
    /// Starting every entity with one message: plain, remembered.
    start: (Duration, Duration),
    /// From the shutdown until plain's shards are all hosted by the survivors, and until the
    /// remembered entities of node 2 all run there.
    moved: (Duration, Duration),
    /// Remembered entities that moved.
    entities_moved: usize,
    /// From the start of the restarted survivors until every remembered entity runs again.
    restart: Duration,
}

/// Starts a node on each directory (and port, 0 for any) and joins them; starts both types.
async fn start(
    dirs: &[tempfile::TempDir],
    ports: &[u16],
    plain_running: &Running,
    remembered_running: &Running,
) -> (Vec<Node>, EntityRef<Tracked>, EntityRef<Tracked>) {
    let mut nodes = Vec::new();
    for (d, p) in dirs.iter().zip(ports) {
        nodes.push(Node::start(&settings(d.path(), *p)).await.unwrap());
    }
    support::join_through_first(&nodes).await;
    let mut refs = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let plain = n.sharding().start("plain", None, factory(i, plain_running)).unwrap();
        let remembered =
            n.sharding().start("remembered", None, factory(i, remembered_running)).unwrap();
        refs.push((plain, remembered));
    }
    let (plain, remembered) = refs.swap_remove(0);
    (nodes, plain, remembered)
}

async fn one_run() -> Figures {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (plain_running, remembered_running) = (Running::default(), Running::default());
    let (nodes, plain, remembered) =
        start(&dirs, &[0, 0, 0], &plain_running, &remembered_running).await;
    let entity_ids = ids(&plain);
    let started = (start_all(&plain, &entity_ids).await, start_all(&remembered, &entity_ids).await);
    // Every entity runs; those of node 2 are to move.
    let on_2: Vec<String> = remembered_running
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n == 2)
        .map(|(id, _)| id.clone())
        .collect();
    let t = Instant::now();
    let shutdown = nodes[2].shutdown();
    let survivors = [&nodes[0], &nodes[1]];
    let plain_moved = async {
        let deadline = Instant::now() + MOVE_TIMEOUT;
        loop {
            let mut hosted = 0;
            for n in survivors {
                if let Some(r) = n.sharding().report("plain").await {
                    hosted += r.shards.len();
                }
            }
            if hosted == SHARDS as usize {
                return t.elapsed();
            }
            assert!(Instant::now() < deadline, "plain's shards never all moved: {hosted}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let remembered_moved = async {
        until("remembered entities moved", || {
            let now = remembered_running.lock().unwrap();
            on_2.iter().all(|id| now.get(id).is_some_and(|n| *n != 2))
        })
        .await;
        t.elapsed()
    };
    let (_, p, r) = tokio::join!(shutdown, plain_moved, remembered_moved);
    // A full restart of the two survivors.
    let ports: Vec<u16> = nodes[..2].iter().map(|n| n.self_address().port()).collect();
    for n in &nodes[..2] {
        n.stop().await;
        n.data().stopped().await;
    }
    drop((nodes, plain, remembered));
    until("every entity stopped", || remembered_running.lock().unwrap().is_empty()).await;
    let t = Instant::now();
    let (nodes, _, _) = start(&dirs[..2], &ports, &plain_running, &remembered_running).await;
    until("remembered entities running after the restart", || {
        remembered_running.lock().unwrap().len() == entity_ids.len()
    })
    .await;
    let restart = t.elapsed();
    for n in &nodes {
        n.stop().await;
    }
    Figures { start: started, moved: (p, r), entities_moved: on_2.len(), restart }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut runs = Vec::new();
        for run in 0..RUNS {
            let f = one_run().await;
            eprintln!(
                "run {run}: start {:?}/{:?}, moved {:?}/{:?} ({} remembered entities moved), \
                 full restart {:?}",
                f.start.0, f.start.1, f.moved.0, f.moved.1, f.entities_moved, f.restart
            );
            runs.push(f);
        }
        let med = |g: fn(&Figures) -> Duration| {
            median(runs.iter().map(|f| g(f).as_secs_f64()).collect::<Vec<f64>>())
        };
        let (s_plain, s_rem) = (med(|f| f.start.0), med(|f| f.start.1));
        let (m_plain, m_rem) = (med(|f| f.moved.0), med(|f| f.moved.1));
        let moved = median(runs.iter().map(|f| f.entities_moved as f64).collect::<Vec<f64>>());
        println!("| figure (medians of {RUNS}) | plain | remembered | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| start 10,000 entities, one message each, 64 in flight | {s_plain:.2} s | \
             {s_rem:.2} s | {:.2} |",
            s_rem / s_plain
        );
        println!(
            "| graceful shutdown of 1 of 3 nodes: shards hosted again (plain) / its {moved:.0} \
             entities running again (remembered) | {m_plain:.2} s | {m_rem:.2} s | {:.2} |",
            m_rem / m_plain
        );
        println!(
            "| full restart of the 2 remaining nodes: all 10,000 remembered entities running, no \
             message sent | | {:.2} s | |",
            med(|f| f.restart)
        );
    });
}
