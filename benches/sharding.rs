//! Sharding figures on two nodes in one process over loopback TCP, each next to the direct
//! messaging ask it is built on.
//!
//! Node B hosts the entity type (it has the role); node A has no role, so its region is a proxy
//! and every sharded ask from A crosses to B, as every messaging ask from A to B's echo endpoint
//! does. Interleaving the two so both see the same machine load, it measures:
//!
//! - the round trip (p50, p99) of sequential asks of 100 B to one entity, against messaging asks;
//! - asks per second with 64 in flight over 1,000 entities, against messaging asks, and the same
//!   sharded asks sent on node B, where the entities run (no network);
//! - the time for the first message to a new shard (allocation written to a majority, shard
//!   started) against a message to a shard already known;
//! - then, on a node of its own, the resident memory per idle entity with 1,000,000 entities.
//!
//! `cargo bench --bench sharding` prints each figure as the median of 5 runs, then a Markdown
//! table with the ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke::Node;
use convoke::messaging::EndpointKey;
use convoke::sharding::{Entity, EntityContext, EntityRef};

// The live tests' settings: 200 ms gossip and heartbeats, port 0, management off.
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/figures.rs"]
mod figures;
use figures::{latencies, median, percentile, rate, us};

const RUNS: usize = 5;
const ECHO: EndpointKey<Vec<u8>, Vec<u8>> = EndpointKey::new("bench-echo");
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
const SIZE: usize = 100;
const IN_FLIGHT: usize = 64;
const ENTITIES: usize = 1_000;
const LATENCY_SAMPLES: usize = 10_000;
const RATE_WINDOW: Duration = Duration::from_secs(2);
const NEW_SHARDS: usize = 200;
const IDLE_ENTITIES: usize = 1_000_000;

struct Echo;

impl Entity for Echo {
    type Message = Vec<u8>;
    type Reply = Vec<u8>;

    async fn handle(&mut self, message: Vec<u8>, _ctx: &mut EntityContext) -> Vec<u8> {
        message
    }
}

fn settings(host: bool) -> convoke::settings::Settings {
    let mut s = support::fast_settings();
    if host {
        s.cluster.core.roles.insert("host".to_owned());
    }
    s.sharding.passivate_idle_after = None;
    s.sharding.entity_mailbox_size = 256;
    s
}

/// The entity type "echo" on `node`, hosted where the node has the role "host"; shard = id.
fn start_echo(node: &Node) -> EntityRef<Echo> {
    node.sharding()
        .start_with_extractor("echo", Some("host"), Arc::new(|id| id.to_owned()), |_| Echo)
        .unwrap()
}

struct Figures {
    ask_p50: (Duration, Duration),
    ask_p99: (Duration, Duration),
    rate: (f64, f64),
    /// Sharded asks per second from node B to its own entities.
    local_rate: f64,
    first: (Duration, Duration),
}

async fn one_run(
    a: &Node,
    b: &Node,
    echo: &EntityRef<Echo>,
    local: &EntityRef<Echo>,
    run: usize,
) -> Figures {
    let messaging = a.messaging().clone();
    let target = b.self_node().clone();
    let payload = vec![7u8; SIZE];
    let direct = {
        let (m, t, p) = (messaging.clone(), target.clone(), payload.clone());
        move |_: usize| {
            let (m, t, p) = (m.clone(), t.clone(), p.clone());
            async move {
                m.ask(&t, &ECHO, &p, ASK_TIMEOUT).await.unwrap();
            }
        }
    };
    let sharded = {
        let (e, p) = (echo.clone(), payload.clone());
        move |i: usize| {
            let (e, p) = (e.clone(), p.clone());
            async move {
                e.ask(&format!("{}", i % ENTITIES), &p, ASK_TIMEOUT).await.unwrap();
            }
        }
    };
    let one_entity = {
        let (e, p) = (echo.clone(), payload.clone());
        move |_: usize| {
            let (e, p) = (e.clone(), p.clone());
            async move {
                e.ask("0", &p, ASK_TIMEOUT).await.unwrap();
            }
        }
    };
    let m_lat = latencies(LATENCY_SAMPLES, direct.clone()).await;
    let s_lat = latencies(LATENCY_SAMPLES, one_entity).await;
    let m_rate = rate(IN_FLIGHT, RATE_WINDOW, direct).await;
    let s_rate = rate(IN_FLIGHT, RATE_WINDOW, sharded.clone()).await;
    let local_rate = rate(IN_FLIGHT, RATE_WINDOW, {
        let (e, p) = (local.clone(), payload.clone());
        move |i: usize| {
            let (e, p) = (e.clone(), p.clone());
            async move {
                e.ask(&format!("{}", i % ENTITIES), &p, ASK_TIMEOUT).await.unwrap();
            }
        }
    })
    .await;
    // New shards: ids never used before (the extractor makes each its own shard).
    let base = 1_000_000 + run * NEW_SHARDS;
    let mut first = Vec::new();
    let mut known = Vec::new();
    for k in 0..NEW_SHARDS {
        let id = format!("{}", base + k);
        let t = Instant::now();
        echo.ask(&id, &payload, ASK_TIMEOUT).await.unwrap();
        first.push(t.elapsed());
        let t = Instant::now();
        echo.ask(&id, &payload, ASK_TIMEOUT).await.unwrap();
        known.push(t.elapsed());
    }
    Figures {
        ask_p50: (percentile(&m_lat, 0.5), percentile(&s_lat, 0.5)),
        ask_p99: (percentile(&m_lat, 0.99), percentile(&s_lat, 0.99)),
        rate: (m_rate, s_rate),
        local_rate,
        first: (median(known), median(first)),
    }
}

async fn idle_entity_memory() -> f64 {
    let node = Node::start(&settings(true)).await.unwrap();
    node.join(node.self_address().clone()).await.unwrap();
    support::wait_for(&node, Duration::from_secs(30), "Up", |s| support::all_up(s, 1)).await;
    // The default extractor: 1,000 shards.
    let idle = node.sharding().start("idle", Some("host"), |_| Echo).unwrap();
    for shard in 0..1000 {
        // Every shard started before the baseline is taken.
        let id = (0..)
            .map(|k| format!("warm-{shard}-{k}"))
            .find(|id| idle.shard_of(id) == shard.to_string())
            .unwrap();
        idle.ask(&id, &vec![], ASK_TIMEOUT).await.unwrap();
    }
    let before = support::vm_rss();
    let started = Instant::now();
    let batch = 1_000;
    for start in (0..IDLE_ENTITIES).step_by(batch) {
        let asks = (start..start + batch).map(|i| {
            let idle = idle.clone();
            async move { idle.ask(&format!("e-{i}"), &vec![], ASK_TIMEOUT).await.unwrap() }
        });
        futures::future::join_all(asks).await;
    }
    let after = support::vm_rss();
    eprintln!("{IDLE_ENTITIES} entities started in {:.1} s", started.elapsed().as_secs_f64());
    let report = node.sharding().report("idle").await.unwrap();
    let entities: u64 = report.shards.iter().map(|s| s.num_entities).sum();
    assert!(entities as usize >= IDLE_ENTITIES, "{entities} entities");
    node.stop().await;
    (after.saturating_sub(before)) as f64 / IDLE_ENTITIES as f64
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let a = Node::start(&settings(false)).await.unwrap();
        let b = Node::start(&settings(true)).await.unwrap();
        support::join_through_first(&[a.clone(), b.clone()]).await;
        b.messaging().serve(&ECHO, 256, |_, p: Vec<u8>| async move { p }).unwrap();
        let echo = start_echo(&a);
        let local = start_echo(&b);
        // Warm up: every entity of the rate test exists.
        for i in 0..ENTITIES {
            echo.ask(&format!("{i}"), &vec![], ASK_TIMEOUT).await.unwrap();
        }
        let mut runs = Vec::new();
        for run in 0..RUNS {
            let f = one_run(&a, &b, &echo, &local, run).await;
            eprintln!(
                "run {run}: p50 {:?}/{:?} p99 {:?}/{:?} rate {:.0}/{:.0} local {:.0} first {:?}/{:?}",
                f.ask_p50.0, f.ask_p50.1, f.ask_p99.0, f.ask_p99.1, f.rate.0, f.rate.1,
                f.local_rate, f.first.0, f.first.1
            );
            runs.push(f);
        }
        a.stop().await;
        b.stop().await;
        let med = |g: fn(&Figures) -> (f64, f64)| {
            (median(runs.iter().map(|f| g(f).0).collect()), median(runs.iter().map(|f| g(f).1).collect()))
        };
        let p50 = med(|f| (us(f.ask_p50.0), us(f.ask_p50.1)));
        let p99 = med(|f| (us(f.ask_p99.0), us(f.ask_p99.1)));
        let r = med(|f| f.rate);
        let local_rate = median(runs.iter().map(|f| f.local_rate).collect());
        let first = med(|f| (us(f.first.0), us(f.first.1)));
        let per_entity = idle_entity_memory().await;
        println!("| figure | messaging ask (A→B) | sharded ask (A→B) | ratio |");
        println!("|---|---|---|---|");
        println!("| ask round trip p50, 100 B | {:.0} µs | {:.0} µs | {:.2} |", p50.0, p50.1, p50.1 / p50.0);
        println!("| ask round trip p99, 100 B | {:.0} µs | {:.0} µs | {:.2} |", p99.0, p99.1, p99.1 / p99.0);
        println!("| asks/s, 64 in flight, 1,000 entities | {:.0} | {:.0} | {:.2} |", r.0, r.1, r.1 / r.0);
        println!(
            "| sharded asks/s on the entities' own node (B→B), 64 in flight | | {local_rate:.0} | {:.2} of A→B |",
            local_rate / r.1
        );
        println!(
            "| first message to a new shard (vs a known shard), median | {:.0} µs | {:.0} µs | {:.2} |",
            first.0, first.1, first.1 / first.0
        );
        println!("| resident memory per idle entity (1,000,000 on one node) | | {per_entity:.0} B | |");
    });
}
