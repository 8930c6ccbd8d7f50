//! The replicated store as five `convoke run` processes, each with its own data directory, under
//! concurrent clients that read and write at quorum through random processes over HTTP, while
//! processes are killed (one, then two at once, with `kill -9`), restarted one by one (SIGTERM,
//! then the same address and directory), and finally all killed and restarted. The history every
//! client saw is then checked, as a Jepsen checker would:
//!
//! - no value a read returned was never written;
//! - no acknowledged write is lost: the context a final read at `all` returns covers every
//!   acknowledged write's context (the write, or a write that knowingly superseded it);
//! - the replicas converge: after the anti-entropy bound, every process reads every key alike at
//!   `one` (a replica answers from its own copy), and `/data/stats` shows no write held for
//!   another replica.
//!
//! The figures (writes acknowledged, failed and in doubt, reads, siblings, the time replicas took
//! to converge) are printed; `--nocapture` shows them. A run with a network partition between the
//! processes needs network namespaces and root, and is opt-in (`.ci/netns`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use convoke::data::VersionVector;
use convoke::management::data::{CONTEXT_HEADER, Siblings, parse_context};
use rand::{Rng, SeedableRng};
use support::fast_sets;
use support::netns::{Forward, Network};
use support::process::{Proc, address};
use tokio::sync::Mutex;
use tokio::time::Instant;

const T: Duration = Duration::from_secs(120);
const KEYS: u32 = 100;
/// Requests in flight at once.
const CONCURRENCY: usize = 16;
/// Requests per phase of the load.
const OPS_PER_PHASE: usize = 600;

/// One store process: its cluster port, management port and directory.
struct Node {
    proc: Option<Proc>,
    port: u16,
    management: u16,
    dir: std::path::PathBuf,
}

impl Node {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.management)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn sets(node: &Node, seeds: &[u16]) -> Vec<String> {
    let mut sets = fast_sets();
    sets.retain(|s| !s.starts_with("management.enabled"));
    let seeds: Vec<String> = seeds.iter().map(|p| format!("\"{}\"", address(*p))).collect();
    sets.extend([
        "cluster.split_brain_resolver.active_strategy=\"keep-majority\"".to_owned(),
        "cluster.split_brain_resolver.stable_after=\"2s\"".to_owned(),
        format!("cluster.seed_nodes=[{}]", seeds.join(",")),
        "management.enabled=true".to_owned(),
        "management.hostname=\"127.0.0.1\"".to_owned(),
        format!("management.port={}", node.management),
        "management.read_only=false".to_owned(),
        "bootstrap.enabled=false".to_owned(),
        "data.enabled=true".to_owned(),
        format!("data.dir=\"{}\"", node.dir.display()),
        "data.request_timeout=\"2s\"".to_owned(),
        "data.hint_interval=\"500ms\"".to_owned(),
        "data.anti_entropy_interval=\"200ms\"".to_owned(),
        "data.arcs_per_round=16".to_owned(),
    ]);
    sets
}

/// Starts node `i` (its address and directory as before); the first of `seeds` forms the
/// cluster when it is not running yet.
fn start(nodes: &mut [Node], i: usize, seeds: &[u16]) {
    let sets = sets(&nodes[i], seeds);
    nodes[i].proc = Some(Proc::run(nodes[i].port, &sets));
}

async fn wait_members(client: &reqwest::Client, base: &str, n: usize) {
    support::process::wait_members_up(client, base, n, T).await;
}

/// What one request did.
#[derive(Clone, Debug)]
enum Event {
    /// A write of `value` with `context`: acknowledged with a context, refused, or in doubt
    /// (no answer: it may have been written).
    Write { key: u32, value: String, outcome: Written },
    /// A read and the values it returned.
    Read { key: u32, values: Vec<String> },
}

#[derive(Clone, Debug)]
enum Written {
    Acked(VersionVector),
    Failed,
    InDoubt,
}

/// The history, and what each client last read of each key.
#[derive(Default)]
struct History {
    events: Vec<Event>,
}

async fn read(
    client: &reqwest::Client,
    url: &str,
    key: u32,
    r: &str,
) -> Option<(Vec<String>, String)> {
    let resp = client.get(format!("{url}/data/keys/k{key}?r={r}")).send().await.ok()?;
    let status = resp.status();
    let ctx = resp.headers().get(CONTEXT_HEADER)?.to_str().ok()?.to_owned();
    let body = resp.bytes().await.ok()?;
    let values = match status.as_u16() {
        200 => vec![String::from_utf8_lossy(&body).into_owned()],
        300 => {
            let s: Siblings = serde_json::from_slice(&body).ok()?;
            s.siblings.into_iter().filter_map(|s| s.text).collect()
        }
        404 => Vec::new(),
        _ => return None,
    };
    Some((values, ctx))
}

/// `n` requests through random running nodes by `CONCURRENCY` clients, each a read or a
/// read-modify-write of a random key.
async fn load(
    client: &reqwest::Client,
    urls: &[String],
    n: usize,
    history: &Mutex<History>,
    seed: u64,
) {
    let urls = Arc::new(urls.to_vec());
    let workers = (0..CONCURRENCY).map(|w| {
        let (client, urls) = (client.clone(), urls.clone());
        async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed * 1000 + w as u64);
            let mut contexts: BTreeMap<u32, String> = BTreeMap::new();
            for i in 0..n.div_ceil(CONCURRENCY) {
                let key = rng.random_range(0..KEYS);
                let url = &urls[rng.random_range(0..urls.len())];
                if rng.random_bool(0.5) {
                    if let Some((values, ctx)) = read(&client, url, key, "quorum").await {
                        contexts.insert(key, ctx);
                        history.lock().await.events.push(Event::Read { key, values });
                    }
                    continue;
                }
                let value = format!("s{seed}-w{w}-{i}");
                let mut req = client.put(format!("{url}/data/keys/k{key}")).body(value.clone());
                if let Some(ctx) = contexts.get(&key) {
                    req = req.header(CONTEXT_HEADER, ctx);
                }
                let outcome = match req.send().await {
                    Ok(r) if r.status().is_success() => {
                        let ctx = r
                            .headers()
                            .get(CONTEXT_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        match ctx.as_deref().map(parse_context) {
                            Some(Ok(vv)) => {
                                contexts.insert(key, ctx.unwrap_or_default());
                                Written::Acked(vv)
                            }
                            _ => Written::InDoubt,
                        }
                    }
                    // Unavailable before anything was written, or a refusal.
                    Ok(r) if r.status().as_u16() == 400 || r.status().as_u16() == 409 => {
                        Written::Failed
                    }
                    // A timeout, a lost connection: the write may have reached some replicas.
                    _ => Written::InDoubt,
                };
                history.lock().await.events.push(Event::Write { key, value, outcome });
            }
        }
    });
    futures::future::join_all(workers).await;
}

/// Waits until every process reads every key alike from its own copy (at `one`) and no process
/// holds a write for another replica; how long that took.
async fn converge(client: &reqwest::Client, urls: &[String]) -> Duration {
    let started = Instant::now();
    let deadline = started + T;
    loop {
        let mut differ = Vec::new();
        for key in 0..KEYS {
            let mut seen = BTreeSet::new();
            for url in urls {
                let r = read(client, url, key, "one").await;
                seen.insert(r.map(|(mut v, c)| {
                    v.sort();
                    (v, parse_context(&c).ok().map(|vv| format!("{vv:?}")))
                }));
            }
            if seen.len() > 1 {
                differ.push(key);
            }
        }
        let mut hints = 0;
        for url in urls {
            let stats: serde_json::Value =
                client.get(format!("{url}/data/stats")).send().await.unwrap().json().await.unwrap();
            hints += stats["hintedHandoffsPending"].as_u64().unwrap();
        }
        if differ.is_empty() && hints == 0 {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "replicas still differ on keys {differ:?}, {hints} hints pending"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The checker: no read returned a value never written, and a final read at `all` through `url`
/// covers every acknowledged write. Prints the figures.
async fn check_history(
    client: &reqwest::Client,
    url: &str,
    events: Vec<Event>,
    converged: Duration,
    total: Duration,
) {
    let written: BTreeSet<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Write { value, .. } => Some(value.as_str()),
            Event::Read { .. } => None,
        })
        .collect();
    let mut final_contexts = BTreeMap::new();
    for key in 0..KEYS {
        let (values, ctx) = read(client, url, key, "all").await.expect("a final read at all");
        for v in &values {
            assert!(written.contains(v.as_str()), "key k{key}: {v:?} was never written");
        }
        final_contexts.insert(key, parse_context(&ctx).unwrap());
    }
    let (mut acked, mut failed, mut in_doubt, mut reads, mut sibling_reads) = (0, 0, 0, 0, 0);
    for e in &events {
        match e {
            Event::Write { key, value, outcome: Written::Acked(vv) } => {
                acked += 1;
                assert!(
                    final_contexts[key].descends(vv),
                    "key k{key}: the acknowledged write {value:?} is lost (final context {:?}, its context {vv:?})",
                    final_contexts[key]
                );
            }
            Event::Write { outcome: Written::Failed, .. } => failed += 1,
            Event::Write { outcome: Written::InDoubt, .. } => in_doubt += 1,
            Event::Read { key, values } => {
                reads += 1;
                sibling_reads += usize::from(values.len() > 1);
                for v in values {
                    assert!(
                        written.contains(v.as_str()),
                        "key k{key}: a read returned {v:?}, never written"
                    );
                }
            }
        }
    }
    println!(
        "{acked} writes acknowledged, 0 lost, {failed} refused, {in_doubt} in doubt; {reads} reads \
         ({sibling_reads} with siblings); replicas converged {:.1} s after the last restart; \
         {:.1} s in all",
        converged.as_secs_f64(),
        total.as_secs_f64()
    );
    assert!(acked > OPS_PER_PHASE, "enough writes acknowledged to mean something: {acked}");
}

fn running_urls(nodes: &[Node]) -> Vec<String> {
    nodes.iter().filter(|n| n.proc.is_some()).map(Node::url).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_processes_lose_no_acknowledged_write_through_kills_a_rolling_restart_and_a_full_restart()
 {
    let _live = support::live().await;
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (0..5)
        .map(|i| Node {
            proc: None,
            port: free_port(),
            management: free_port(),
            dir: dir.path().join(format!("n{i}")),
        })
        .collect();
    let seeds: Vec<u16> = nodes.iter().take(3).map(|n| n.port).collect();
    for i in 0..5 {
        start(&mut nodes, i, &seeds);
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    for n in &nodes {
        wait_members(&client, &n.url(), 5).await;
    }
    let history = Mutex::new(History::default());
    let started = Instant::now();

    // Calm, then one process killed under load and restarted on its address and directory.
    load(&client, &running_urls(&nodes), OPS_PER_PHASE, &history, 1).await;
    nodes[4].proc.take().unwrap().kill9().await;
    load(&client, &running_urls(&nodes), OPS_PER_PHASE, &history, 2).await;
    start(&mut nodes, 4, &seeds);
    wait_members(&client, &nodes[4].url(), 5).await;

    // Two killed at once: keys with both among their replicas are written through fallbacks.
    nodes[3].proc.take().unwrap().kill9().await;
    nodes[4].proc.take().unwrap().kill9().await;
    load(&client, &running_urls(&nodes), OPS_PER_PHASE, &history, 3).await;
    start(&mut nodes, 3, &seeds);
    start(&mut nodes, 4, &seeds);
    for i in [3, 4] {
        wait_members(&client, &nodes[i].url(), 5).await;
    }

    // A rolling restart: each leaves gracefully and comes back with its directory.
    for i in 0..5 {
        let mut p = nodes[i].proc.take().unwrap();
        let others: Vec<String> = running_urls(&nodes);
        let leaving = tokio::spawn({
            let (client, others) = (client.clone(), others.clone());
            async move {
                let h = Mutex::new(History::default());
                load(&client, &others, OPS_PER_PHASE / 5, &h, 40 + i as u64).await;
                h.into_inner().events
            }
        });
        p.term();
        assert_eq!(p.exit_code(T).await, Some(0), "node {i} left gracefully");
        start(&mut nodes, i, &seeds);
        wait_members(&client, &nodes[i].url(), 5).await;
        history.lock().await.events.extend(leaving.await.unwrap());
    }
    load(&client, &running_urls(&nodes), OPS_PER_PHASE, &history, 5).await;

    // Every process killed, then all restarted with their directories.
    for n in &mut nodes {
        n.proc.take().unwrap().kill9().await;
    }
    for i in 0..5 {
        start(&mut nodes, i, &seeds);
    }
    for n in &nodes {
        wait_members(&client, &n.url(), 5).await;
    }

    let urls = running_urls(&nodes);
    let converged = converge(&client, &urls).await;
    check_history(&client, &urls[0], history.into_inner().events, converged, started.elapsed())
        .await;
    for n in &mut nodes {
        if let Some(mut p) = n.proc.take() {
            p.kill9().await;
        }
    }
}

/// The cluster port of the processes in network namespaces, each on its namespace's address.
const NET_PORT: u16 = 25520;
/// Their management port, on each namespace's loopback.
const NET_MANAGEMENT: u16 = 8558;

/// A store process in a network namespace, whose management API the test reaches through a
/// forwarded port.
struct NetNode {
    proc: Proc,
    url: String,
    _forward: Forward,
}

/// Starts node `i` of `net` in its namespace, on its address, with directory `dir`; node 0,
/// first in its own seed list, forms the cluster.
async fn start_in(net: &Network, i: usize, dir: &std::path::Path) -> NetNode {
    let node =
        Node { proc: None, port: NET_PORT, management: NET_MANAGEMENT, dir: dir.to_path_buf() };
    let mut sets = sets(&node, &[]);
    sets.retain(|s| !s.starts_with("cluster.seed_nodes") && !s.starts_with("management.hostname"));
    sets.extend([
        format!("cluster.hostname=\"{}\"", net.ip(i)),
        format!("cluster.seed_nodes=[\"convoke://convoke@{}:{NET_PORT}\"]", net.ip(0)),
        "management.hostname=\"127.0.0.1\"".to_owned(),
    ]);
    let proc = Proc::run_wrapped(&net.wrapper(i), NET_PORT, &sets);
    proc.wait_log(&["management server listening"], T).await;
    let forward = net.forward(i, NET_MANAGEMENT);
    NetNode { proc, url: forward.url(), _forward: forward }
}

#[ignore = "needs root and network namespaces; run by .ci/netns"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_2_partition_under_load_loses_no_acknowledged_write_and_the_two_rejoin_with_their_directories()
 {
    let _live = support::live().await;
    let net = Network::new(5);
    let dir = tempfile::tempdir().unwrap();
    let dirs: Vec<std::path::PathBuf> = (0..5).map(|i| dir.path().join(format!("n{i}"))).collect();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut nodes = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        nodes.push(start_in(&net, i, d).await);
    }
    for n in &nodes {
        wait_members(&client, &n.url, 5).await;
    }
    let history = Mutex::new(History::default());
    let started = Instant::now();
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    load(&client, &urls, OPS_PER_PHASE, &history, 1).await;

    // Cut 3|2 while clients write through all five: the two accept writes through fallbacks
    // on their side until their resolver downs them and they exit 1.
    let (majority, minority) = ([0, 1, 2], [3, 4]);
    net.partition(&majority, &minority);
    let cut = Instant::now();
    let during = load(&client, &urls, OPS_PER_PHASE, &history, 2);
    let exits = async {
        for i in minority {
            let code = nodes[i].proc.exit_code(T).await;
            assert_eq!(code, Some(1), "node {i} on the minority side downs itself and exits 1");
        }
    };
    tokio::join!(during, exits);
    eprintln!("the two exited {:.1} s after the cut", cut.elapsed().as_secs_f64());
    let majority_urls: Vec<String> = majority.iter().map(|&i| nodes[i].url.clone()).collect();
    load(&client, &majority_urls, OPS_PER_PHASE, &history, 3).await;

    // Healed: the two come back on their addresses with their directories, and what they
    // acknowledged while cut off reaches the others.
    net.heal();
    for i in minority {
        nodes[i] = start_in(&net, i, &dirs[i]).await;
    }
    for n in &nodes {
        wait_members(&client, &n.url, 5).await;
    }
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    load(&client, &urls, OPS_PER_PHASE, &history, 4).await;
    let converged = converge(&client, &urls).await;
    check_history(&client, &urls[0], history.into_inner().events, converged, started.elapsed())
        .await;
    for n in &mut nodes {
        n.proc.term();
    }
}
