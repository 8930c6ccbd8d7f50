//! The sharded counter example (`examples/counter.rs`) as separate processes sharing a data
//! directory: 20,000 increments over 1,000 counters through random processes; `kill -9` of one,
//! after which every counter answers again; two more processes join and the shards even out; a
//! rolling restart of every process under load. No increment that got a success reply is lost,
//! and the processes' logs never show one counter running in two processes at once. The times
//! are printed (`--nocapture` shows them).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use support::fast_sets;
use support::process::{Proc, address, timestamp};
use tokio::sync::Mutex;
use tokio::time::Instant;

const T: Duration = Duration::from_secs(120);
const COUNTERS: usize = 1_000;
const INCREMENTS: usize = 20_000;
/// Requests in flight at once.
const CONCURRENCY: usize = 32;

/// One counter process: its log, its HTTP front and its management URL.
struct Counter {
    proc: Proc,
    http: String,
    management: String,
}

fn sets(extra: &[String]) -> Vec<String> {
    let mut sets = fast_sets();
    sets.retain(|s| !s.starts_with("management.enabled"));
    sets.extend([
        "cluster.split_brain_resolver.active_strategy=\"keep-majority\"".to_owned(),
        "cluster.split_brain_resolver.stable_after=\"2s\"".to_owned(),
        "singleton.hand_over_timeout=\"2s\"".to_owned(),
        "sharding.retry_interval=\"500ms\"".to_owned(),
        "sharding.rebalance_interval=\"2s\"".to_owned(),
        "management.enabled=true".to_owned(),
        "management.hostname=\"127.0.0.1\"".to_owned(),
        "management.port=0".to_owned(),
        "management.read_only=false".to_owned(),
        "bootstrap.enabled=false".to_owned(),
    ]);
    sets.extend_from_slice(extra);
    sets
}

async fn start(dir: &str, seed: Option<u16>) -> Counter {
    let extra: Vec<String> =
        seed.map(|p| format!("cluster.seed_nodes=[\"{}\"]", address(p))).into_iter().collect();
    let args = ["--http-port", "0", "--data-dir", dir];
    let proc = Proc::example_with_args("counter", &args, &[], 0, &sets(&extra)).await;
    if seed.is_none() {
        proc.form().await;
    }
    let http = format!("http://{}", proc.logged_field("counter front listening", "http=").await);
    let management = proc.management_url().await;
    Counter { proc, http, management }
}

/// Waits until `c`'s management API shows `n` members, all Up.
async fn wait_members(client: &reqwest::Client, c: &Counter, n: usize) {
    let deadline = Instant::now() + T;
    loop {
        let url = format!("{}/cluster/members", c.management);
        if let Ok(r) = client.get(&url).send().await
            && let Ok(body) = r.json::<serde_json::Value>().await
        {
            let members = body["members"].as_array().cloned().unwrap_or_default();
            if members.len() == n && members.iter().all(|m| m["status"] == "Up") {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{url} never showed {n} members Up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Successful increments per counter, and attempts (a failed attempt may still have counted).
#[derive(Default)]
struct Tally {
    ok: HashMap<usize, u64>,
    tried: HashMap<usize, u64>,
    failed: u64,
}

/// Sends `n` increments to random counters through random live processes.
async fn load(
    client: &reqwest::Client,
    fronts: &[String],
    n: usize,
    tally: &Mutex<Tally>,
    seed: u64,
) {
    let fronts = Arc::new(fronts.to_vec());
    let per_worker = n.div_ceil(CONCURRENCY);
    let workers = (0..CONCURRENCY).map(|w| {
        let (client, fronts) = (client.clone(), fronts.clone());
        async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + w as u64);
            for _ in 0..per_worker {
                let k = rng.random_range(0..COUNTERS);
                let front = &fronts[rng.random_range(0..fronts.len())];
                let ok = increment(&client, front, k).await;
                let mut t = tally.lock().await;
                *t.tried.entry(k).or_default() += 1;
                if ok {
                    *t.ok.entry(k).or_default() += 1;
                } else {
                    t.failed += 1;
                }
            }
        }
    });
    futures::future::join_all(workers).await;
}

async fn increment(client: &reqwest::Client, front: &str, k: usize) -> bool {
    let url = format!("{front}/counters/c{k}/increment");
    let sent = client.post(&url).timeout(Duration::from_secs(10)).send().await;
    sent.is_ok_and(|r| r.status().is_success())
}

async fn read(client: &reqwest::Client, front: &str, k: usize) -> Option<u64> {
    let url = format!("{front}/counters/c{k}");
    let r = client.get(&url).timeout(Duration::from_secs(10)).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json::<serde_json::Value>().await.ok()?["value"].as_u64()
}

/// Reads every counter through `fronts` until all answer; checks that none lost a success.
/// Returns how long it took.
async fn all_answer(client: &reqwest::Client, fronts: &[String], tally: &Mutex<Tally>) -> Duration {
    let started = Instant::now();
    let mut missing: Vec<usize> = (0..COUNTERS).collect();
    let mut round = 0;
    while !missing.is_empty() {
        assert!(started.elapsed() < T, "{} counters never answered", missing.len());
        let mut still = Vec::new();
        for k in missing {
            let front = &fronts[(k + round) % fronts.len()];
            match read(client, front, k).await {
                Some(value) => {
                    let t = tally.lock().await;
                    let ok = t.ok.get(&k).copied().unwrap_or(0);
                    let tried = t.tried.get(&k).copied().unwrap_or(0);
                    assert!(value >= ok, "c{k} is {value} after {ok} successful increments");
                    assert!(value <= tried, "c{k} is {value} after only {tried} increments");
                }
                None => still.push(k),
            }
        }
        missing = still;
        round += 1;
    }
    started.elapsed()
}

/// Waits until every member's region hosts shards and the counts differ by at most one;
/// returns how long it took.
async fn rebalanced(client: &reqwest::Client, c: &Counter, members: usize) -> Duration {
    let started = Instant::now();
    let url = format!("{}/cluster/shards/counter/stats", c.management);
    loop {
        if let Ok(r) = client.get(&url).send().await
            && let Ok(body) = r.json::<serde_json::Value>().await
        {
            let counts: Vec<usize> = body["regions"]
                .as_array()
                .map(|rs| rs.iter().map(|r| r["shards"].as_array().map_or(0, Vec::len)).collect())
                .unwrap_or_default();
            let even =
                counts.iter().max().zip(counts.iter().min()).is_some_and(|(a, b)| a - b <= 1);
            if counts.len() == members && even {
                return started.elapsed();
            }
        }
        assert!(started.elapsed() < T, "{url} never showed even shard counts");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every (start, end) interval of each counter in one process's log; an entity still running
/// when the log ends runs until `end`.
fn intervals(p: &Proc, end: f64) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut open: HashMap<String, f64> = HashMap::new();
    let mut done: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for line in p.log() {
        let entity = line.split_whitespace().find_map(|w| w.strip_prefix("entity="));
        let Some(entity) = entity.map(|e| e.trim_matches('"').to_owned()) else { continue };
        if line.contains("entity started") {
            open.insert(entity, timestamp(&line));
        } else if line.contains("entity stopped")
            && let Some(from) = open.remove(&entity)
        {
            done.entry(entity).or_default().push((from, timestamp(&line)));
        }
    }
    for (entity, from) in open {
        done.entry(entity).or_default().push((from, end));
    }
    done
}

fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_survive_a_kill_joins_and_a_rolling_restart_and_never_run_twice() {
    let _live = support::live().await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let first = start(&dir, None).await;
    let seed = first.proc.port;
    let mut live = vec![first];
    for _ in 0..4 {
        live.push(start(&dir, Some(seed)).await);
    }
    wait_members(&client, &live[0], 5).await;
    // Processes that have ended, with when they ended (for the overlap check).
    let mut ended: Vec<(Proc, f64)> = Vec::new();
    let tally = Mutex::new(Tally::default());

    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();
    let t = Instant::now();
    load(&client, &fronts, INCREMENTS, &tally, 1).await;
    eprintln!(
        "{INCREMENTS} increments through 5 processes: {:.1} s, {} failed",
        t.elapsed().as_secs_f64(),
        tally.lock().await.failed
    );
    all_answer(&client, &fronts, &tally).await;

    // kill -9 a process that does not host the coordinator (the first is the oldest).
    let mut killed = live.remove(3);
    killed.proc.kill9().await;
    ended.push((killed.proc, now_secs()));
    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();
    let back = all_answer(&client, &fronts, &tally).await;
    eprintln!("after kill -9, every counter answers again in {:.1} s", back.as_secs_f64());

    // Two more processes join; shards move to them.
    for _ in 0..2 {
        live.push(start(&dir, Some(seed)).await);
    }
    wait_members(&client, &live[0], 6).await;
    let settled = rebalanced(&client, &live[0], 6).await;
    eprintln!("two joined; shard counts even (within 1) after {:.1} s", settled.as_secs_f64());

    // Rolling restart under load: each process in turn leaves (SIGTERM) and a new one joins.
    let restarting = Arc::new(AtomicBool::new(true));
    let fronts = Arc::new(Mutex::new(live.iter().map(|c| c.http.clone()).collect::<Vec<_>>()));
    let background = {
        let (client, fronts, restarting) = (client.clone(), fronts.clone(), restarting.clone());
        let tally = &tally;
        async move {
            let mut round = 0;
            while restarting.load(Ordering::Relaxed) {
                let now: Vec<String> = fronts.lock().await.clone();
                load(&client, &now, CONCURRENCY * 4, tally, 100 + round).await;
                round += 1;
            }
        }
    };
    let restart = async {
        let t = Instant::now();
        let mut steps = Vec::new();
        for _ in 0..live.len() {
            let mut old = live.remove(0);
            fronts.lock().await.retain(|f| *f != old.http);
            let seed = live[0].proc.port;
            let step = Instant::now();
            old.proc.term();
            let code = old.proc.exit_code(T).await;
            assert_eq!(code, Some(0), "a process did not leave cleanly");
            let left = step.elapsed();
            ended.push((old.proc, now_secs()));
            let new = start(&dir, Some(seed)).await;
            wait_members(&client, &new, 6).await;
            steps.push(format!(
                "{:.1}+{:.1}",
                left.as_secs_f64(),
                (step.elapsed() - left).as_secs_f64()
            ));
            fronts.lock().await.push(new.http.clone());
            live.push(new);
        }
        eprintln!("rolling restart steps (leave + join, s): {}", steps.join(", "));
        restarting.store(false, Ordering::Relaxed);
        t.elapsed()
    };
    let (took, ()) = tokio::join!(restart, background);
    let t = tally.lock().await;
    eprintln!(
        "rolling restart of 6 processes under load: {:.1} s; {} increments tried in all, {} failed",
        took.as_secs_f64(),
        t.tried.values().sum::<u64>(),
        t.failed
    );
    drop(t);
    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();
    all_answer(&client, &fronts, &tally).await;

    // No counter ever ran in two processes at once (by their own logs).
    let end = now_secs();
    let mut by_entity: BTreeMap<String, Vec<(f64, f64, usize)>> = BTreeMap::new();
    let all: Vec<(&Proc, f64)> =
        ended.iter().map(|(p, at)| (p, *at)).chain(live.iter().map(|c| (&c.proc, end))).collect();
    for (i, (p, until)) in all.iter().enumerate() {
        for (entity, spans) in intervals(p, *until) {
            by_entity.entry(entity).or_default().extend(spans.into_iter().map(|(a, b)| (a, b, i)));
        }
    }
    assert!(by_entity.len() >= COUNTERS, "only {} counters in the logs", by_entity.len());
    for (entity, mut spans) in by_entity {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            let ((_, end_a, pa), (start_b, _, pb)) =
                ((w[0].0, w[0].1, w[0].2), (w[1].0, w[1].1, w[1].2));
            assert!(
                pa == pb || start_b >= end_a,
                "{entity} ran in process {pa} until {end_a:.3} and in {pb} from {start_b:.3}"
            );
        }
    }
}
