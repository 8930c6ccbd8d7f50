//! What entity state in the replicated store costs, on three nodes in one process over loopback
//! TCP, each with a store directory of its own (`data.sync = "always"`: every write synced to
//! disk on a quorum before it counts).
//!
//! Two entity types run side by side on the same nodes: `plain` keeps a counter in memory,
//! `stored` keeps it as entity state (`EntityContext::state`/`persist`, one quorum write per
//! message). Interleaved so that both see the same machine load, it measures:
//!
//! - asks per second with 64 in flight over 1,000 entities, each ask an increment;
//! - the round trip (p50, p99) of sequential increments of one entity;
//! - the first message to an entity that has never run (its claim) against one that runs;
//! - then the recovery of a full restart: every node stopped, started again on its address and
//!   directory, and the time until all 1,000 stored counters have answered with their values.
//!
//! `cargo bench --bench entity_state` prints each figure as the median of 5 runs, then a
//! Markdown table with the ratios.

use std::time::{Duration, Instant};

use convoke::Node;
use convoke::sharding::{Entity, EntityContext, EntityRef};

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/figures.rs"]
mod figures;
use figures::{latencies, median, percentile, rate, us};

const RUNS: usize = 5;
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
const IN_FLIGHT: usize = 64;
const ENTITIES: usize = 1_000;
const LATENCY_SAMPLES: usize = 2_000;
const RATE_WINDOW: Duration = Duration::from_secs(3);
const NEW_ENTITIES: usize = 200;

/// A counter in memory.
struct Plain(u64);

impl Entity for Plain {
    type Message = u64;
    type Reply = u64;

    async fn handle(&mut self, by: u64, _ctx: &mut EntityContext) -> u64 {
        self.0 += by;
        self.0
    }
}

/// A counter kept as entity state: one quorum write per increment.
struct Stored;

impl Entity for Stored {
    type Message = u64;
    type Reply = Result<u64, String>;

    async fn handle(&mut self, by: u64, ctx: &mut EntityContext) -> Result<u64, String> {
        let value = *ctx.state::<u64>().await.map_err(|e| e.to_string())?;
        if by > 0 {
            ctx.persist(value + by).await.map_err(|e| e.to_string())?;
        }
        Ok(value + by)
    }
}

fn settings(dir: &std::path::Path, port: u16) -> convoke::settings::Settings {
    let mut s = support::fast_settings();
    s.cluster.port = port;
    s.sharding.passivate_idle_after = None;
    s.sharding.entity_mailbox_size = 256;
    s.data.enabled = true;
    s.data.dir = dir.to_path_buf();
    s
}

struct Cluster {
    nodes: Vec<Node>,
    plain: EntityRef<Plain>,
    stored: EntityRef<Stored>,
}

async fn start(dirs: &[tempfile::TempDir], ports: &[u16]) -> Cluster {
    let mut nodes = Vec::new();
    for (d, p) in dirs.iter().zip(ports) {
        nodes.push(Node::start(&settings(d.path(), *p)).await.unwrap());
    }
    support::join_through_first(&nodes).await;
    let mut refs = Vec::new();
    for n in &nodes {
        let plain = n.sharding().start("plain", None, |_| Plain(0)).unwrap();
        let stored = n.sharding().start("stored", None, |_| Stored).unwrap();
        refs.push((plain, stored));
    }
    let (plain, stored) = refs.swap_remove(0);
    Cluster { nodes, plain, stored }
}

struct Figures {
    rate: (f64, f64),
    p50: (Duration, Duration),
    p99: (Duration, Duration),
    /// Stored: a known entity, a new one.
    first: (Duration, Duration),
}

async fn one_run(c: &Cluster, run: usize) -> Figures {
    let plain = c.plain.clone();
    let plain_ask = move |i: usize| {
        let p = plain.clone();
        async move {
            p.ask(&format!("c{}", i % ENTITIES), &1, ASK_TIMEOUT).await.unwrap();
        }
    };
    let stored = c.stored.clone();
    let stored_ask = move |i: usize| {
        let s = stored.clone();
        async move {
            s.ask(&format!("c{}", i % ENTITIES), &1, ASK_TIMEOUT).await.unwrap().unwrap();
        }
    };
    let r_plain = rate(IN_FLIGHT, RATE_WINDOW, plain_ask).await;
    let r_stored = rate(IN_FLIGHT, RATE_WINDOW, stored_ask).await;
    let l_plain = latencies(LATENCY_SAMPLES, |_| async {
        c.plain.ask("one", &1, ASK_TIMEOUT).await.unwrap();
    })
    .await;
    let l_stored = latencies(LATENCY_SAMPLES, |_| async {
        c.stored.ask("one", &1, ASK_TIMEOUT).await.unwrap().unwrap();
    })
    .await;
    let (mut known, mut first) = (Vec::new(), Vec::new());
    for k in 0..NEW_ENTITIES {
        let id = format!("new-{run}-{k}");
        let t = Instant::now();
        c.stored.ask(&id, &1, ASK_TIMEOUT).await.unwrap().unwrap();
        first.push(t.elapsed());
        let t = Instant::now();
        c.stored.ask(&id, &1, ASK_TIMEOUT).await.unwrap().unwrap();
        known.push(t.elapsed());
    }
    Figures {
        rate: (r_plain, r_stored),
        p50: (percentile(&l_plain, 0.5), percentile(&l_stored, 0.5)),
        p99: (percentile(&l_plain, 0.99), percentile(&l_stored, 0.99)),
        first: (median(known), median(first)),
    }
}

/// Stops every node, starts them again on their addresses and directories, and returns how
/// long until every stored counter has answered (each at least `at_least`).
async fn full_restart(c: Cluster, dirs: &[tempfile::TempDir], at_least: u64) -> Duration {
    let ports: Vec<u16> = c.nodes.iter().map(|n| n.self_address().port()).collect();
    for n in &c.nodes {
        n.stop().await;
        n.data().stopped().await;
    }
    let t = Instant::now();
    let c = start(dirs, &ports).await;
    let asks = (0..ENTITIES).map(|k| {
        let s = c.stored.clone();
        async move {
            loop {
                match s.ask(&format!("c{k}"), &0, ASK_TIMEOUT).await {
                    Ok(Ok(v)) => {
                        assert!(v >= at_least, "c{k} is {v}, below {at_least}");
                        return;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
    });
    futures::future::join_all(asks).await;
    let took = t.elapsed();
    for n in &c.nodes {
        n.stop().await;
    }
    took
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let c = start(&dirs, &[0, 0, 0]).await;
        // Warm up: every entity of the rate test runs in both types.
        for i in 0..ENTITIES {
            c.plain.ask(&format!("c{i}"), &0, ASK_TIMEOUT).await.unwrap();
            c.stored.ask(&format!("c{i}"), &1, ASK_TIMEOUT).await.unwrap().unwrap();
        }
        let mut runs = Vec::new();
        for run in 0..RUNS {
            let f = one_run(&c, run).await;
            eprintln!(
                "run {run}: rate {:.0}/{:.0} p50 {:?}/{:?} p99 {:?}/{:?} first {:?}/{:?}",
                f.rate.0, f.rate.1, f.p50.0, f.p50.1, f.p99.0, f.p99.1, f.first.0, f.first.1
            );
            runs.push(f);
        }
        let recovery = full_restart(c, &dirs, 1).await;
        let med = |g: fn(&Figures) -> (f64, f64)| {
            (
                median(runs.iter().map(|f| g(f).0).collect()),
                median(runs.iter().map(|f| g(f).1).collect()),
            )
        };
        let r = med(|f| f.rate);
        let p50 = med(|f| (us(f.p50.0), us(f.p50.1)));
        let p99 = med(|f| (us(f.p99.0), us(f.p99.1)));
        let first = med(|f| (us(f.first.0), us(f.first.1)));
        println!("| figure | in memory | entity state (a quorum write each) | ratio |");
        println!("|---|---|---|---|");
        println!(
            "| increments/s, 64 in flight, 1,000 entities | {:.0} | {:.0} | {:.2} |",
            r.0,
            r.1,
            r.1 / r.0
        );
        println!(
            "| increment round trip p50 | {:.0} µs | {:.0} µs | {:.2} |",
            p50.0,
            p50.1,
            p50.1 / p50.0
        );
        println!(
            "| increment round trip p99 | {:.0} µs | {:.0} µs | {:.2} |",
            p99.0,
            p99.1,
            p99.1 / p99.0
        );
        println!(
            "| first message to an entity (vs one running), median | {:.0} µs | {:.0} µs | {:.2} |",
            first.0,
            first.1,
            first.1 / first.0
        );
        println!(
            "| full restart of 3 nodes until 1,000 stored counters answer | | {:.2} s | |",
            recovery.as_secs_f64()
        );
    });
}
