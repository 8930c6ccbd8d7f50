//! The sharded counter example (`examples/counter.rs`) as separate processes sharing a data
//! directory: 20,000 increments over 1,000 counters through random processes; `kill -9` of one,
//! after which every counter answers again; two more processes join and the shards even out; a
//! rolling restart of every process under load. No increment that got a success reply is lost,
//! and the processes' logs never show one counter running in two processes at once. The times
//! are printed (`--nocapture` shows them).
//!
//! Two more runs make the same checks through harder faults:
//!
//! - five processes, each in its own network namespace (`support::netns`, as in
//!   `tests/partition.rs`), split 3|2 by the router while increments flow through all five: the
//!   two down themselves and exit 1, and every counter answers through the three;
//! - the coordinator's host (the oldest process) stopped by SIGSTOP while increments flow through
//!   the others, until they have removed it and every counter answers through them (longer than
//!   the removal margin), then resumed under load: it stops its counters before it acts on
//!   anything and exits 1. Its frozen time does not count in the overlap check, but a counter
//!   of it that handled a message after the resume while another process ran it fails the test
//!   — except the message it was handling when it froze, which completes when it resumes: the
//!   counter's file lock (examples/counter.rs) keeps every other process out of that counter
//!   until then, which the test checks from the logs, and the others serve every other counter
//!   meanwhile.
//!
//! A third run keeps the counters in the replicated store (`--store`), each process with a data
//! directory of its own: 20,000 increments over 1,000 counters through random processes, each
//! sent again until it succeeds (the counter counts an increment's id once), `kill -9` of two
//! processes under that load and their restart, then `kill -9` of all five and a restart of
//! all: every shard runs again on the process it ran on before (the coordinator's homes kept in
//! the store) before any counter is asked for, and every counter equals the number of its
//! increments, none lost and none counted twice.
//!
//! The file runs also read every counter's file once no process runs. The partition run needs root, `ip`
//! and `iptables` (`.ci/install-test-deps`) and fails without them, so it is opt-in: `.ci/netns`
//! runs it.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::ops::AddAssign;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use support::fast_sets;
use support::netns::{Forward, Network};
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
    support::process::wait_members_up(client, &c.management, n, T).await;
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
    all_answer_but(client, fronts, tally, &[]).await
}

/// [`all_answer`] for every counter but those in `except`.
async fn all_answer_but(
    client: &reqwest::Client,
    fronts: &[String],
    tally: &Mutex<Tally>,
    except: &[usize],
) -> Duration {
    let started = Instant::now();
    let mut missing: Vec<usize> = (0..COUNTERS).filter(|k| !except.contains(k)).collect();
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

// Counters kept in the replicated store: no shared directory.

/// A counter process keeping its counters in the replicated store (`--store`), with its own
/// data directory `dir`, on cluster port `port` (0 picks one); it forms the cluster when `seed`
/// is `None`, else joins through the process on port `seed`. Five replicas per key, so that
/// any write acknowledged by a quorum (three) keeps a copy on a survivor of any two processes.
async fn start_in_store(dir: &std::path::Path, port: u16, seed: Option<u16>) -> Counter {
    start_in_store_at(dir, port, seed, "0.0.0").await
}

/// [`start_in_store`] with `cluster.app_version = version`.
async fn start_in_store_at(
    dir: &std::path::Path,
    port: u16,
    seed: Option<u16>,
    version: &str,
) -> Counter {
    let mut extra = vec![
        format!("cluster.app_version=\"{version}\""),
        "data.enabled=true".to_owned(),
        format!("data.dir=\"{}\"", dir.display()),
        "data.replicas=5".to_owned(),
        "data.request_timeout=\"3s\"".to_owned(),
    ];
    extra.extend(seed.map(|p| format!("cluster.seed_nodes=[\"{}\"]", address(p))));
    let args = ["--http-port", "0", "--store"];
    let proc = Proc::example_with_args("counter", &args, &[], port, &sets(&extra)).await;
    if seed.is_none() {
        proc.form().await;
    }
    let http = format!("http://{}", proc.logged_field("counter front listening", "http=").await);
    let management = proc.management_url().await;
    Counter { proc, http, management }
}

/// Sends `n` increments to random counters, each with an id of its own, through random
/// processes of `fronts`, each sent again (through another random process) until it gets a
/// success: the counter counts an id once, so each increment is counted exactly once. A try
/// that failed is counted in `failed`; `ok` and `tried` count increments.
async fn load_once(
    client: &reqwest::Client,
    fronts: &[String],
    n: usize,
    tally: &Mutex<Tally>,
    seed: u64,
) {
    let fronts = Arc::new(fronts.to_vec());
    let workers = (0..CONCURRENCY).map(|w| {
        let (client, fronts) = (client.clone(), fronts.clone());
        // Exactly `n` in all.
        let per_worker = n / CONCURRENCY + usize::from(w < n % CONCURRENCY);
        async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + w as u64);
            for i in 0..per_worker {
                let k = rng.random_range(0..COUNTERS);
                tally.lock().await.tried.entry(k).or_default().add_assign(1);
                let deadline = Instant::now() + T;
                loop {
                    let front = &fronts[rng.random_range(0..fronts.len())];
                    let url = format!("{front}/counters/c{k}/increment?request=s{seed}w{w}i{i}");
                    let sent = client.post(&url).timeout(Duration::from_secs(10)).send().await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        break;
                    }
                    tally.lock().await.failed += 1;
                    assert!(Instant::now() < deadline, "increment {i} of c{k} never succeeded");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tally.lock().await.ok.entry(k).or_default().add_assign(1);
            }
        }
    });
    futures::future::join_all(workers).await;
}

/// Reads every counter through `fronts` until each has answered; returns the values.
async fn read_all(client: &reqwest::Client, fronts: &[String]) -> HashMap<usize, u64> {
    let started = Instant::now();
    let mut values = HashMap::new();
    let mut round = 0;
    while values.len() < COUNTERS {
        assert!(started.elapsed() < T, "{} counters never answered", COUNTERS - values.len());
        for k in 0..COUNTERS {
            if !values.contains_key(&k)
                && let Some(v) = read(client, &fronts[(k + round) % fronts.len()], k).await
            {
                values.insert(k, v);
            }
        }
        round += 1;
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_in_the_store_survive_kill_9_of_two_and_a_full_restart_with_none_lost() {
    let _live = support::live().await;
    let dirs: Vec<_> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let client = reqwest::Client::new();
    let mut live = vec![start_in_store(dirs[0].path(), 0, None).await];
    let seed = live[0].proc.port;
    for d in &dirs[1..] {
        live.push(start_in_store(d.path(), 0, Some(seed)).await);
    }
    wait_members(&client, &live[0], 5).await;
    let ports: Vec<u16> = live.iter().map(|c| c.proc.port).collect();
    let tally = Mutex::new(Tally::default());
    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();

    // A third of the increments; then two processes are killed while the next third flows
    // through all five (those sent to the dead fail); they come back on their addresses and
    // directories for the last third.
    let t = Instant::now();
    load_once(&client, &fronts, INCREMENTS / 3, &tally, 7).await;
    let calm = t.elapsed();
    let killing = async {
        load_flowing(&tally, 500).await;
        for i in [1, 3] {
            live[i].proc.kill9().await;
        }
    };
    let t = Instant::now();
    tokio::join!(load_once(&client, &fronts, INCREMENTS / 3, &tally, 1_007), killing);
    let through_kill = t.elapsed();
    let survivors: Vec<String> = [0, 2, 4].iter().map(|i| live[*i].http.clone()).collect();
    let back = all_answer(&client, &survivors, &tally).await;
    for i in [1, 3] {
        live[i] = start_in_store(dirs[i].path(), ports[i], Some(seed)).await;
    }
    wait_members(&client, &live[0], 5).await;
    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();
    load_once(&client, &fronts, INCREMENTS - 2 * (INCREMENTS / 3), &tally, 2_007).await;
    all_answer(&client, &fronts, &tally).await;

    // Every process killed at once (once no shard moves), then all restarted on their
    // addresses and directories: each shard goes back to its process (the coordinator's homes
    // are kept in the store) before any message comes.
    let before = still_placement(&client, &live).await;
    for c in &mut live {
        c.proc.kill9().await;
    }
    let t = Instant::now();
    let mut live = vec![start_in_store(dirs[0].path(), ports[0], None).await];
    for i in 1..5 {
        live.push(start_in_store(dirs[i].path(), ports[i], Some(ports[0])).await);
    }
    wait_members(&client, &live[0], 5).await;
    let placed_back = placed_as(&client, &live, &before).await;
    let fronts: Vec<String> = live.iter().map(|c| c.http.clone()).collect();
    let values = read_all(&client, &fronts).await;
    let recovered = t.elapsed();

    let t = tally.lock().await;
    let wrong: Vec<String> = (0..COUNTERS)
        .filter_map(|k| {
            let ok = t.ok.get(&k).copied().unwrap_or(0);
            (values[&k] != ok).then(|| format!("c{k}: {} after {ok} increments", values[&k]))
        })
        .collect();
    let acknowledged: u64 = t.ok.values().sum();
    eprintln!(
        "{acknowledged} increments acknowledged (each sent until it succeeded; {} tries \
         failed and were sent again); a third in {:.1} s, a third through kill -9 of two in \
         {:.1} s, every counter answering {:.1} s after it; after kill -9 of all five and a \
         restart, all {} shards back on their processes {:.1} s and every counter read \
         {:.1} s after the kill: sum {}, {} of {COUNTERS} counters equal to their acknowledged \
         increments",
        t.failed,
        calm.as_secs_f64(),
        through_kill.as_secs_f64(),
        back.as_secs_f64(),
        before.len(),
        placed_back.as_secs_f64(),
        recovered.as_secs_f64(),
        values.values().sum::<u64>(),
        COUNTERS - wrong.len(),
    );
    assert_eq!(acknowledged, INCREMENTS as u64);
    assert!(wrong.is_empty(), "{} counters lost or doubled increments: {wrong:?}", wrong.len());
}

/// Where each counter shard runs: the port of the process whose region hosts it, from each
/// process's `/cluster/shards/counter`, read one process after another. `None` when two list one
/// shard: a shard that moved while they were read (it never runs in two at once, which the
/// counters' sums check).
async fn placement(client: &reqwest::Client, live: &[Counter]) -> Option<BTreeMap<String, u16>> {
    let mut placed = BTreeMap::new();
    for c in live {
        let url = format!("{}/cluster/shards/counter", c.management);
        let report: serde_json::Value =
            client.get(&url).send().await.unwrap().json().await.unwrap();
        for shard in report["regions"].as_array().unwrap() {
            let id = shard["shardId"].as_str().unwrap().to_owned();
            if placed.insert(id, c.proc.port).is_some() {
                return None;
            }
        }
    }
    Some(placed)
}

/// The placement once it is the same in two looks three rebalance intervals apart (no shard
/// moving), so that the coordinator's homes kept in the store are this placement.
async fn still_placement(client: &reqwest::Client, live: &[Counter]) -> BTreeMap<String, u16> {
    let deadline = Instant::now() + T;
    let mut last = placement(client, live).await;
    loop {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let now = placement(client, live).await;
        if let Some(placed) = now.as_ref().filter(|p| !p.is_empty() && last.as_ref() == Some(*p)) {
            return placed.clone();
        }
        assert!(Instant::now() < deadline, "the shards never stopped moving");
        last = now;
    }
}

/// Waits until every shard of `before` runs where it ran then, each process looked at in turn
/// and no counter asked for; returns how long that took.
async fn placed_as(
    client: &reqwest::Client,
    live: &[Counter],
    before: &BTreeMap<String, u16>,
) -> Duration {
    let started = Instant::now();
    loop {
        let now = placement(client, live).await.unwrap_or_default();
        let astray: Vec<_> = before.iter().filter(|(s, p)| now.get(*s) != Some(p)).collect();
        if astray.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < T,
            "{} shards not back where they ran before the restart: {:?}",
            astray.len(),
            astray.iter().take(10).map(|(s, p)| (s, p, now.get(*s))).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// A network partition and a frozen coordinator host, with the helpers only they use.

/// The removal margin of the processes (`sets`): the singleton's margin, which a new coordinator
/// also waits after a region's removal before it moves the region's shards (docs/singleton.md,
/// "The removal margin"; docs/sharding-design.md, "A node that crashes"). Computed from the
/// settings the processes load: 2 s `stable_after` + 4 s down-all-when-unstable (its shortest
/// "on") + 3 s acceptable heartbeat pause + 3 × 200 ms heartbeats + 2 s hand-over timeout, 11.6 s.
fn removal_margin() -> Duration {
    use convoke::settings::{Settings, Sources};
    let sources = Sources { file: None, env: false, sets: sets(&[]) };
    let settings = Settings::load(&sources).expect("the test's settings load");
    settings.singleton.removal_margin(&settings.cluster.core)
}

/// Sends rounds of increments through `fronts` (which may change between rounds) until
/// `running` is cleared.
async fn load_while(
    client: &reqwest::Client,
    fronts: &Mutex<Vec<String>>,
    running: &AtomicBool,
    tally: &Mutex<Tally>,
    seed: u64,
) {
    let mut round = 0;
    while running.load(Ordering::Relaxed) {
        let now: Vec<String> = fronts.lock().await.clone();
        load(client, &now, CONCURRENCY * 4, tally, seed + round * CONCURRENCY as u64).await;
        round += 1;
    }
}

async fn tried(tally: &Mutex<Tally>) -> u64 {
    tally.lock().await.tried.values().sum()
}

/// Waits until `n` increments more than now have been tried: the load flows.
async fn load_flowing(tally: &Mutex<Tally>, n: u64) {
    let (from, deadline) = (tried(tally).await, Instant::now() + T);
    loop {
        let now = tried(tally).await;
        if now >= from + n {
            return;
        }
        assert!(Instant::now() < deadline, "only {} of {n} increments tried", now - from);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads every counter but those in `except` through `fronts` until each has answered once,
/// while increments may still flow (so the values are not checked here); returns how long it
/// took.
async fn answering(client: &reqwest::Client, fronts: &[String], except: &[usize]) -> Duration {
    let started = Instant::now();
    let mut missing: Vec<usize> = (0..COUNTERS).filter(|k| !except.contains(k)).collect();
    let mut round = 0;
    while !missing.is_empty() {
        assert!(started.elapsed() < T, "{} counters never answered", missing.len());
        let mut still = Vec::new();
        for k in missing {
            if read(client, &fronts[(k + round) % fronts.len()], k).await.is_none() {
                still.push(k);
            }
        }
        missing = still;
        round += 1;
    }
    started.elapsed()
}

/// Every counter's file in `dir`, read once no process runs, that lost a success or holds more
/// than was tried. A file is what a counter starts from wherever it starts next, so a stale
/// write by a second writer shows here even when the live entity still answers from memory.
async fn files_wrong(dir: &str, tally: &Mutex<Tally>) -> Vec<String> {
    let t = tally.lock().await;
    let mut wrong = Vec::new();
    for k in 0..COUNTERS {
        let path = std::path::Path::new(dir).join(format!("c{k}"));
        let value = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or_else(|e| panic!("{path:?}: {e}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => panic!("{path:?}: {e}"),
        };
        let ok = t.ok.get(&k).copied().unwrap_or(0);
        let tried = t.tried.get(&k).copied().unwrap_or(0);
        if value < ok || value > tried {
            wrong.push(format!("c{k}: its file holds {value} after {ok} successful of {tried}"));
        }
    }
    wrong
}

/// The counters whose file lock (`DIR/c<k>.lock`, see examples/counter.rs) stays taken while
/// this test tries it for a while: with every process but a frozen one running, those the frozen
/// process was handling a message of when it stopped.
async fn held_locks(dir: &str) -> Vec<usize> {
    let mut held = Vec::new();
    for k in 0..COUNTERS {
        let path = std::path::Path::new(dir).join(format!("c{k}.lock"));
        // A counter never asked has no lock file; opening it read-only creates none.
        let Ok(file) = std::fs::File::open(&path) else { continue };
        let mut taken = true;
        // A running process holds a lock for one message, well under the 200 ms tried here.
        for _ in 0..10 {
            if file.try_lock().is_ok() {
                file.unlock().unwrap();
                taken = false;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if taken {
            held.push(k);
        }
    }
    held
}

/// A process for the overlap check: its log, when it ended (or the check's time), and the
/// windows in which SIGSTOP had stopped it, each from just after the STOP was sent until just
/// before the CONT was.
struct Ran<'a> {
    proc: &'a Proc,
    until: f64,
    frozen: Vec<(f64, f64)>,
}

/// A part of one interval of a counter in one process: `from`, `to`, and `freeze`, the frozen
/// window `(stop, resume)` that this part follows when the interval began before it (the
/// entity was running when its process resumed, and should be stopping).
#[derive(Clone, Copy, Debug)]
struct Span {
    from: f64,
    to: f64,
    process: usize,
    freeze: Option<(f64, f64)>,
}

/// What the overlap check saw of entities that were running when their process resumed.
#[derive(Debug, Default)]
struct Resumed {
    /// How many there were.
    entities: usize,
    /// The longest time from the resume until one of them stopped, in seconds.
    longest: f64,
    /// How many of them overlapped an interval of the same counter in another process without
    /// handling any message after the resume (each that handled one is a violation).
    overlapping: usize,
    /// Messages they handled after the resume, but for those in flight at the freeze.
    handled: usize,
    /// Messages in flight at the freeze, completed after the resume under the counter's lock.
    completed: usize,
}

/// Every counter's log lines in `p` (`entity started`, `entity storing`, `entity handled`,
/// `entity stopped`), with their timestamps.
fn entity_lines(p: &Proc) -> HashMap<String, Vec<(f64, String)>> {
    let mut lines: HashMap<String, Vec<(f64, String)>> = HashMap::new();
    for line in p.log() {
        let entity = line.split_whitespace().find_map(|w| w.strip_prefix("entity="));
        let Some(entity) = entity.map(|e| e.trim_matches('"').to_owned()) else { continue };
        lines.entry(entity).or_default().push((timestamp(&line), line));
    }
    lines
}

/// The number in a log line's `key` field (`value=7`, `value=Some(7)`).
fn field_u64(line: &str, key: &str) -> Option<u64> {
    let word = line.split_whitespace().find_map(|w| w.strip_prefix(key))?;
    word.trim_start_matches("Some(").trim_end_matches(')').parse().ok()
}

/// A Unix time of day as `HH:MM:SS.ffffff` (UTC), as in the logs.
fn clock(t: f64) -> String {
    let s = t.rem_euclid(86_400.0);
    let (h, m) = ((s / 3600.0) as u32, (s % 3600.0 / 60.0) as u32);
    format!("{h:02}:{m:02}:{:09.6}", s % 60.0)
}

/// No counter ever ran in two processes at once, by the processes' own logs: any two intervals
/// of one counter in two processes are disjoint. SIGSTOP stops a process, so its frozen windows
/// do not count. An entity that was running when its process resumed is to stop then, before it
/// acts on anything (docs/sharding-design.md, "Frozen hosts"): its time from the resume until its
/// `entity stopped` may overlap another process's interval only if it handled no message in it;
/// one that did is a second writer. Returns what it saw of resumed entities and every violation,
/// each with both processes' lines for that counter.
fn never_twice(ran: &[Ran<'_>]) -> (Resumed, Vec<String>) {
    let mut by_entity: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    for (i, r) in ran.iter().enumerate() {
        for (entity, spans) in intervals(r.proc, r.until) {
            let out = by_entity.entry(entity).or_default();
            for (a, b) in spans {
                // (a, b) minus the frozen windows.
                let mut parts = vec![Span { from: a, to: b, process: i, freeze: None }];
                for &(s, c) in &r.frozen {
                    parts = parts
                        .into_iter()
                        .flat_map(|p| {
                            let mut left = Vec::new();
                            if p.from < s {
                                left.push(Span { to: p.to.min(s), ..p });
                            }
                            if p.to > c {
                                let freeze = if p.from < c { Some((s, c)) } else { p.freeze };
                                left.push(Span { from: p.from.max(c), freeze, ..p });
                            }
                            left
                        })
                        .collect();
                }
                out.extend(parts);
            }
        }
    }
    let mut resumed = Resumed::default();
    let mut violations = Vec::new();
    let logs: Vec<_> = ran.iter().map(|r| entity_lines(r.proc)).collect();
    for (entity, spans) in &by_entity {
        let lines: Vec<&[(f64, String)]> =
            logs.iter().map(|l| l.get(entity).map_or(&[][..], Vec::as_slice)).collect();
        // The message a span after a freeze was handling when its process froze, if any: the
        // first it handled after the resume, from its `entity locked` line (before the freeze,
        // or after it when the freeze came before the lock) to its `entity handled` line. An
        // entity handles one message at a time and the gate lets none begin after the freeze
        // until the region has stopped the shard, so at most that one completes.
        let in_flight = |s: &Span| -> Option<(f64, f64)> {
            let (_, c) = s.freeze?;
            let lines = &lines[s.process];
            let done = lines.iter().find(|(t, l)| *t > c && l.contains("entity handled"))?.0;
            let locked = lines
                .iter()
                .filter(|(t, _)| *t <= done)
                .rfind(|(_, l)| l.contains("entity locked"));
            Some((locked.map_or(c, |(t, _)| *t), done))
        };
        // What it handled after the resume, but for that message: the counter's lock kept every
        // other process out until it was done (checked below).
        let handled_after = |s: &Span| -> Vec<(f64, String)> {
            let Some((_, c)) = s.freeze else { return Vec::new() };
            let completed = in_flight(s).map(|(_, done)| done);
            let lines = &lines[s.process];
            let handled = lines.iter().filter(|(t, _)| *t > c && *t <= s.to);
            let handled =
                handled.filter(|(t, l)| l.contains("entity handled") && Some(*t) != completed);
            handled.cloned().collect()
        };
        for s in spans.iter().filter(|s| s.freeze.is_some()) {
            resumed.entities += 1;
            resumed.longest = resumed.longest.max(s.to - s.freeze.unwrap().1);
            resumed.handled += handled_after(s).len();
            let Some((locked, done)) = in_flight(s) else { continue };
            resumed.completed += 1;
            // No other process took the counter's lock while the frozen one held it.
            for (p, other) in lines.iter().enumerate().filter(|(p, _)| *p != s.process) {
                let inside = other.iter().filter(|(t, l)| {
                    (locked..=done).contains(t)
                        && ["entity locked", "entity storing", "entity handled"]
                            .iter()
                            .any(|k| l.contains(k))
                });
                for (_, l) in inside {
                    violations.push(format!(
                        "{entity}: process {p} handled it while process {} held its lock across \
                         its freeze, from {} to {}: {l}",
                        s.process,
                        clock(locked),
                        clock(done)
                    ));
                }
            }
        }
        for (n, x) in spans.iter().enumerate() {
            for y in &spans[n + 1..] {
                let (from, to) = (x.from.max(y.from), x.to.min(y.to));
                if x.process == y.process || from >= to {
                    continue;
                }
                let stopping = [x, y].into_iter().find(|s| s.freeze.is_some());
                let acted = stopping.map(handled_after).unwrap_or_default();
                if stopping.is_some() && acted.is_empty() {
                    resumed.overlapping += 1;
                    continue;
                }
                let mut report = format!(
                    "{entity} ran in processes {} and {} at once from {} to {}",
                    x.process,
                    y.process,
                    clock(from),
                    clock(to)
                );
                if let Some(s) = stopping {
                    let (stop, resume) = s.freeze.expect("a stopping span follows a freeze");
                    let other = if std::ptr::eq(s, x) { y } else { x };
                    // What the other process found in the counter's file when it started it:
                    // its first increment stores one more, its first read answers it.
                    let found = lines[other.process]
                        .iter()
                        .filter(|(t, _)| *t >= other.from)
                        .find_map(|(_, l)| {
                            let value = field_u64(l, "value=")?;
                            if l.contains("entity storing") {
                                Some(value - 1)
                            } else if l.contains("entity handled") {
                                Some(value)
                            } else {
                                None
                            }
                        });
                    // An increment logs `entity storing` before its write and `entity handled`
                    // after it: was the one handled after the resume taken before the freeze,
                    // and had its write landed when the other process read the file?
                    let storing: Vec<f64> = lines[s.process]
                        .iter()
                        .filter(|(_, l)| l.contains("entity storing"))
                        .map(|(t, _)| *t)
                        .collect();
                    let kinds: Vec<String> = acted
                        .iter()
                        .map(|(t, l)| {
                            let began = storing.iter().copied().rfind(|b| b <= t);
                            let value = field_u64(l, "value=").unwrap_or_default();
                            let kind = if l.contains("op=\"get\"") {
                                format!("a read of {value} at {}", clock(*t))
                            } else {
                                match began {
                                    Some(b) if b < stop => format!(
                                        "an increment to {value} stored at {}, whose write \
                                         began at {}, before the freeze",
                                        clock(*t),
                                        clock(b)
                                    ),
                                    _ => format!(
                                        "an increment to {value} taken after the resume, stored \
                                         at {}",
                                        clock(*t)
                                    ),
                                }
                            };
                            let landed = match found {
                                Some(f) if f >= value => "; the file already held it then",
                                Some(_) => "; the file did not hold it yet then",
                                None => "",
                            };
                            format!(
                                "{kind} (process {} started the counter at {} from the value \
                                 {} in its file{landed})",
                                other.process,
                                clock(other.from),
                                found.map_or("?".to_owned(), |f| f.to_string()),
                            )
                        })
                        .collect();
                    report += &format!(
                        ": process {} was frozen from {} to {} and then handled {}",
                        s.process,
                        clock(stop),
                        clock(resume),
                        kinds.join("; ")
                    );
                }
                // Each process's lines for the counter: the first three of its interval (for a
                // part after a freeze, the last three before the freeze), and the lines from a
                // second before the overlap until a second after it.
                for s in [x, y] {
                    let l = &lines[s.process];
                    let mut shown: Vec<usize> = match s.freeze {
                        None => (0..l.len()).filter(|&n| l[n].0 >= s.from).take(3).collect(),
                        Some((stop, _)) => {
                            let before: Vec<usize> =
                                (0..l.len()).filter(|&n| l[n].0 < stop).collect();
                            before[before.len().saturating_sub(3)..].to_vec()
                        }
                    };
                    shown.extend(
                        (0..l.len()).filter(|&n| (from - 1.0..=to + 1.0).contains(&l[n].0)),
                    );
                    shown.sort_unstable();
                    shown.dedup();
                    let shown: Vec<&str> = shown.iter().map(|&n| l[n].1.as_str()).collect();
                    report += &format!("\n  process {}:\n    {}", s.process, shown.join("\n    "));
                }
                violations.push(report);
            }
        }
    }
    assert!(by_entity.len() >= COUNTERS, "only {} counters in the logs", by_entity.len());
    (resumed, violations)
}

/// For every counter of the processes `from` that the processes `to` started later: how long
/// after it stopped in `from` (with `since`, after `since`, for the counters running at that
/// time) it first started in `to`, in seconds, shortest first.
fn moves(ran: &[Ran<'_>], from: &[usize], to: &[usize], since: Option<f64>) -> Vec<f64> {
    let spans: Vec<_> = ran.iter().map(|r| intervals(r.proc, r.until)).collect();
    let mut gaps = Vec::new();
    for &i in from {
        for (entity, own) in &spans[i] {
            let stopped = match since {
                Some(t) if own.iter().any(|&(a, b)| a < t && b > t) => t,
                Some(_) => continue,
                None => own.iter().map(|s| s.1).fold(f64::MIN, f64::max),
            };
            let started = to.iter().filter_map(|&j| spans[j].get(entity)).flatten();
            let next = started.map(|s| s.0).filter(|&a| a >= stopped).fold(f64::INFINITY, f64::min);
            if next.is_finite() {
                gaps.push(next - stopped);
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    gaps
}

/// `n gaps, a–b s`.
fn spread(gaps: &[f64]) -> String {
    match (gaps.first(), gaps.last()) {
        (Some(a), Some(b)) => format!("{} counters, {a:.1}–{b:.1} s", gaps.len()),
        _ => "no counters".to_owned(),
    }
}

/// Fails with every counter that ran twice at once and every counter file that lost a success.
fn assert_safe(violations: &[String], files: &[String]) {
    assert!(
        violations.is_empty() && files.is_empty(),
        "{} counters ran in two processes at once:\n{}\n{} counter files are wrong:\n{}",
        violations.len(),
        violations.join("\n"),
        files.len(),
        files.join("\n")
    );
}

/// The port of a logged `127.0.0.1:PORT` or `http://127.0.0.1:PORT/...`.
fn logged_port(address: &str) -> u16 {
    let rest = address.trim_start_matches("http://");
    let port = rest.split('/').next().unwrap_or_default().rsplit(':').next().unwrap_or_default();
    port.parse().unwrap_or_else(|_| panic!("no port in {address:?}"))
}

/// The cluster port of the processes in network namespaces, each on its namespace's address.
const NET_PORT: u16 = 25520;

fn net_address(net: &Network, i: usize) -> String {
    format!("convoke://convoke@{}:{NET_PORT}", net.ip(i))
}

/// A counter process in a network namespace, whose HTTP front and management API (on the
/// namespace's loopback) the test reaches through forwarded ports.
struct NetCounter {
    counter: Counter,
    _forwards: [Forward; 2],
}

/// Starts a counter process in node `i`'s namespace of `net`, on the namespace's address, with
/// node 0 as seed node (node 0, first in its own seed list, forms the cluster).
async fn start_in(net: &Network, i: usize, dir: &str) -> NetCounter {
    let extra = [
        format!("cluster.hostname=\"{}\"", net.ip(i)),
        format!("cluster.seed_nodes=[\"{}\"]", net_address(net, 0)),
    ];
    let args = ["--http-port", "0", "--data-dir", dir];
    let wrapper = net.wrapper(i);
    let proc = Proc::example_with_args("counter", &args, &wrapper, NET_PORT, &sets(&extra)).await;
    let front = proc.logged_field("counter front listening", "http=").await;
    let http = net.forward(i, logged_port(&front));
    let management = net.forward(i, logged_port(&proc.management_url().await));
    let counter = Counter { proc, http: http.url(), management: management.url() };
    NetCounter { counter, _forwards: [http, management] }
}

#[ignore = "needs root and network namespaces; run by .ci/netns"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_under_load_through_a_3_2_partition_the_two_exit_and_none_runs_twice() {
    let _live = support::live().await;
    let net = Network::new(5);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let mut nodes = Vec::new();
    for i in 0..5 {
        nodes.push(start_in(&net, i, &dir).await);
    }
    for n in &nodes {
        wait_members(&client, &n.counter, 5).await;
    }
    let tally = Mutex::new(Tally::default());
    let fronts: Vec<String> = nodes.iter().map(|n| n.counter.http.clone()).collect();
    let t = Instant::now();
    load(&client, &fronts, INCREMENTS / 4, &tally, 1).await;
    eprintln!(
        "{} increments through 5 processes in namespaces: {:.1} s, {} failed",
        INCREMENTS / 4,
        t.elapsed().as_secs_f64(),
        tally.lock().await.failed
    );
    all_answer(&client, &fronts, &tally).await;

    // Increments through all five while the router cuts them 3|2. The coordinator runs on node 0,
    // the oldest, on the majority side. The two down themselves and exit 1; the load goes on
    // through the three until every counter answers through them.
    let (majority, minority) = ([0, 1, 2], [3, 4]);
    let majority_fronts: Vec<String> =
        majority.iter().map(|&i| nodes[i].counter.http.clone()).collect();
    let running = AtomicBool::new(true);
    let loading = Mutex::new(fronts.clone());
    let mut ended: Vec<(usize, f64)> = Vec::new();
    let split = async {
        load_flowing(&tally, CONCURRENCY as u64 * 4).await;
        let failed_before = tally.lock().await.failed;
        net.partition(&majority, &minority);
        let cut = Instant::now();
        for i in minority {
            let p = &mut nodes[i].counter.proc;
            let code = p.exit_code(T).await;
            ended.push((i, now_secs()));
            assert_eq!(code, Some(1), "node {i} on the minority side must exit 1");
            p.wait_log(&["cluster node shutting down", "this node was downed"], T).await;
            p.wait_log(&["the node stopped"], T).await;
            let after = cut.elapsed().as_secs_f64();
            eprintln!(
                "node {i} ({}) downed itself and exited 1 {after:.1} s after the cut",
                net.ip(i)
            );
            loading.lock().await.retain(|f| *f != nodes[i].counter.http);
        }
        for i in majority {
            wait_members(&client, &nodes[i].counter, 3).await;
        }
        let removed = cut.elapsed();
        let answering = answering(&client, &majority_fronts, &[]).await;
        running.store(false, Ordering::Relaxed);
        eprintln!(
            "the three see 3 members Up {:.1} s after the cut; every counter answers through them \
             (under load) {:.1} s later",
            removed.as_secs_f64(),
            answering.as_secs_f64()
        );
        (cut, failed_before)
    };
    let ((cut, failed_before), ()) =
        tokio::join!(split, load_while(&client, &loading, &running, &tally, 1_000));
    all_answer(&client, &majority_fronts, &tally).await;
    let t = tally.lock().await;
    eprintln!(
        "no success lost {:.1} s after the cut; {} increments tried in all, {} failed ({} from \
         the cut on)",
        cut.elapsed().as_secs_f64(),
        t.tried.values().sum::<u64>(),
        t.failed,
        t.failed - failed_before
    );
    drop(t);

    for i in majority {
        nodes[i].counter.proc.term();
    }
    for i in majority {
        let code = nodes[i].counter.proc.exit_code(T).await;
        ended.push((i, now_secs()));
        assert_eq!(code, Some(0), "node {i}: a graceful leave exits 0");
    }
    let files = files_wrong(&dir, &tally).await;
    let ran: Vec<Ran<'_>> = (0..5)
        .map(|i| Ran {
            proc: &nodes[i].counter.proc,
            until: ended.iter().find(|(j, _)| *j == i).expect("every process ended").1,
            frozen: Vec::new(),
        })
        .collect();
    let (_, violations) = never_twice(&ran);
    eprintln!(
        "the three started the two's counters after the two had stopped them: {} (removal \
         margin {:.1} s)",
        spread(&moves(&ran, &minority, &majority, None)),
        removal_margin().as_secs_f64()
    );
    assert_safe(&violations, &files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_host_frozen_past_the_removal_margin_under_load_stops_its_counters_on_resuming()
 {
    let _live = support::live().await;
    let margin = removal_margin();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    // The first process is the oldest: it runs the coordinator.
    let mut frozen = start(&dir, None).await;
    let seed = frozen.proc.port;
    let mut others = Vec::new();
    for _ in 0..4 {
        others.push(start(&dir, Some(seed)).await);
    }
    wait_members(&client, &frozen, 5).await;
    let mut fronts: Vec<String> = vec![frozen.http.clone()];
    fronts.extend(others.iter().map(|c| c.http.clone()));
    let tally = Mutex::new(Tally::default());
    load(&client, &fronts, INCREMENTS / 4, &tally, 1).await;
    all_answer(&client, &fronts, &tally).await;
    assert!(frozen.proc.logged(&["shard coordinator starting here"]), "the oldest coordinates");
    let hosted = frozen.proc.count(&["entity started"]);
    assert!(hosted > 0, "the coordinator's host hosts counters");

    // SIGSTOP it while increments flow through the others; keep it stopped until they have
    // removed it and every counter answers through them, which takes more than a removal margin.
    let survivors: Vec<String> = others.iter().map(|c| c.http.clone()).collect();
    let running = AtomicBool::new(true);
    let loading = Mutex::new(survivors.clone());
    let freeze = async {
        load_flowing(&tally, CONCURRENCY as u64 * 4).await;
        frozen.proc.signal("STOP");
        let stopped = (Instant::now(), now_secs());
        // The counters whose message the frozen host was handling keep their file lock: they
        // answer only once it resumes and completes that message (examples/counter.rs).
        let held = held_locks(&dir).await;
        for c in &others {
            wait_members(&client, c, 4).await;
        }
        let removed = stopped.0.elapsed();
        let answering = answering(&client, &survivors, &held).await;
        running.store(false, Ordering::Relaxed);
        eprintln!(
            "the others removed the frozen host {:.1} s after SIGSTOP; every counter but the {} \
             whose lock it holds ({held:?}) answers through them (under load) {:.1} s later",
            removed.as_secs_f64(),
            held.len(),
            answering.as_secs_f64()
        );
        assert!(held.len() <= CONCURRENCY, "one message in flight per load worker at most");
        (stopped, held)
    };
    let (((stopped, stopped_at), held), ()) =
        tokio::join!(freeze, load_while(&client, &loading, &running, &tally, 1_000));
    all_answer_but(&client, &survivors, &tally, &held).await;
    let took_over = stopped.elapsed();
    let coordinator = others.iter().enumerate().find_map(|(n, c)| {
        let log = c.proc.log();
        let line = log.iter().find(|l| l.contains("shard coordinator starting here"))?;
        Some((n + 1, timestamp(line) - stopped_at))
    });
    let (n, after) = coordinator.expect("another process runs the coordinator");
    eprintln!("the coordinator started again in process {n} {after:.1} s after SIGSTOP");
    eprintln!(
        "no success lost {:.1} s after SIGSTOP (removal margin {:.1} s)",
        took_over.as_secs_f64(),
        margin.as_secs_f64()
    );
    assert!(took_over > margin, "the others took over within the removal margin");

    // SIGCONT it while increments flow through the new hosts. It must stop its counters before
    // it acts on anything, and shut down: the others have downed and removed it.
    running.store(true, Ordering::Relaxed);
    let resume = async {
        load_flowing(&tally, CONCURRENCY as u64 * 4).await;
        let resumed_at = now_secs();
        frozen.proc.signal("CONT");
        let resumed = Instant::now();
        let code = frozen.proc.exit_code(T).await;
        let exited_at = now_secs();
        running.store(false, Ordering::Relaxed);
        eprintln!(
            "frozen {:.1} s; after SIGCONT it exited {code:?} within {:.1} s",
            resumed_at - stopped_at,
            resumed.elapsed().as_secs_f64()
        );
        (resumed_at, exited_at, code)
    };
    let ((resumed_at, exited_at, code), ()) =
        tokio::join!(resume, load_while(&client, &loading, &running, &tally, 2_000));
    assert!(resumed_at - stopped_at > margin.as_secs_f64(), "frozen longer than the margin");
    assert_eq!(code, Some(1), "the resumed host, downed by the others, must exit 1");
    frozen.proc.wait_log(&["cluster node shutting down", "this node was downed"], T).await;
    frozen.proc.wait_log(&["the node stopped"], T).await;
    all_answer(&client, &survivors, &tally).await;
    let t = tally.lock().await;
    eprintln!("{} increments tried in all, {} failed", t.tried.values().sum::<u64>(), t.failed);
    drop(t);

    for c in &others {
        c.proc.term();
    }
    let mut ran =
        vec![Ran { proc: &frozen.proc, until: exited_at, frozen: vec![(stopped_at, resumed_at)] }];
    for c in &mut others {
        assert_eq!(c.proc.exit_code(T).await, Some(0), "a graceful leave exits 0");
        let until = now_secs();
        ran.push(Ran { proc: &c.proc, until, frozen: Vec::new() });
    }
    let files = files_wrong(&dir, &tally).await;
    let (resumed, violations) = never_twice(&ran);
    eprintln!(
        "the others started the frozen host's counters after SIGSTOP: {}",
        spread(&moves(&ran, &[0], &[1, 2, 3, 4], Some(stopped_at)))
    );
    eprintln!(
        "the frozen host had started {hosted} counters; {} were running when it resumed and \
         stopped within {:.3} s of it; {} of those had meanwhile been started elsewhere and \
         handled nothing after the resume but the message in flight at the freeze; {} messages \
         in flight at the freeze completed under their lock after the resume; {} other \
         messages handled after the resume",
        resumed.entities, resumed.longest, resumed.overlapping, resumed.completed, resumed.handled
    );
    assert_safe(&violations, &files);
}

// A rolling update from one application version to the next.

/// What the watcher of a rolling update saw, sampling one live process every 100 ms.
#[derive(Default)]
struct UpdateWatch {
    /// The oldest member (the host of the coordinator and of every singleton) as it changed.
    oldest: Vec<String>,
    /// Shards that appeared in the region of an old-version member once a new-version member
    /// was Up: (shard, member).
    to_old: Vec<(String, String)>,
    /// Shards that appeared in a region once the update had begun (moves, and first
    /// allocations of shards no message had reached before).
    arrivals: u64,
    /// Samples of the shard table taken.
    samples: u64,
}

/// Samples `/cluster/members` and `/cluster/shards/counter/stats` through the first of
/// `managements` that answers, until `running` is cleared.
async fn watch_update(
    client: &reqwest::Client,
    managements: &Mutex<Vec<String>>,
    new_up: &AtomicBool,
    running: &AtomicBool,
    seen: &Mutex<UpdateWatch>,
) {
    let mut regions: HashMap<String, Vec<String>> = HashMap::new();
    while running.load(Ordering::Relaxed) {
        for base in managements.lock().await.clone() {
            let members = client.get(format!("{base}/cluster/members")).send().await;
            let Ok(members) = members else { continue };
            let Ok(members) = members.json::<serde_json::Value>().await else { continue };
            let stats = client.get(format!("{base}/cluster/shards/counter/stats")).send().await;
            let Ok(stats) = stats else { continue };
            let Ok(stats) = stats.json::<serde_json::Value>().await else { continue };
            let mut w = seen.lock().await;
            if let Some(oldest) = members["oldest"].as_str()
                && w.oldest.last().map(String::as_str) != Some(oldest)
            {
                w.oldest.push(oldest.to_owned());
            }
            w.samples += 1;
            // A region is its address and the version its member runs (a new process may get
            // a port an old one had).
            let versions: BTreeMap<&str, &str> = members["members"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| Some((m["node"].as_str()?, m["appVersion"].as_str()?)))
                .collect();
            for r in stats["regions"].as_array().into_iter().flatten() {
                let address = r["address"].as_str().unwrap_or_default();
                let Some(version) = versions.get(address) else { continue };
                let member = format!("{address} {version}");
                let shards: Vec<String> = r["shards"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s["shardId"].as_str().map(str::to_owned))
                    .collect();
                let before = regions.insert(member.clone(), shards.clone());
                let is_old = *version == "1.0.0";
                // An old region is judged against a sample of it; a new one's first sample
                // holds only shards that came to it.
                let judged = new_up.load(Ordering::Relaxed) && (before.is_some() || !is_old);
                if judged {
                    let before = before.as_deref().unwrap_or_default();
                    w.arrivals += shards.iter().filter(|s| !before.contains(s)).count() as u64;
                }
                let before = before.unwrap_or_default();
                if judged && is_old {
                    for s in shards.iter().filter(|s| !before.contains(s)) {
                        w.to_old.push((s.clone(), member.clone()));
                    }
                }
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `c`'s `/ready` until it answers 200, and the moment it does, reads ten counters through
/// `c`: a process that says it is ready serves. Returns how long the 503s lasted and the last
/// 503's reason.
async fn ready_and_serving(client: &reqwest::Client, c: &Counter) -> (Duration, String) {
    let started = Instant::now();
    let mut reason = String::new();
    loop {
        let answer = client.get(format!("{}/ready", c.management)).send().await;
        if let Ok(r) = answer {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            if status == 200 {
                break;
            }
            reason = body;
        }
        assert!(started.elapsed() < T, "{} never ready: {reason}", c.management);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waited = started.elapsed();
    for k in 0..10 {
        let url = format!("{}/counters/c{k}", c.http);
        let r = client.get(&url).timeout(Duration::from_secs(5)).send().await;
        let status = r.as_ref().map(|r| r.status().as_u16()).map_err(ToString::to_string);
        assert_eq!(status, Ok(200), "{url} right after /ready said 200");
    }
    (waited, reason)
}

/// The processes of `live` by age (up-number), oldest first, as `base`'s members show them.
async fn by_age(client: &reqwest::Client, base: &str, live: &[Counter]) -> Vec<usize> {
    let url = format!("{base}/cluster/members");
    let body: serde_json::Value = client.get(&url).send().await.unwrap().json().await.unwrap();
    let mut aged: Vec<(u64, usize)> = body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let node = m["node"].as_str().unwrap();
            let i = live.iter().position(|c| node.ends_with(&format!(":{}", c.proc.port)));
            (m["upNumber"].as_u64().unwrap(), i.unwrap())
        })
        .collect();
    aged.sort_unstable();
    aged.into_iter().map(|(_, i)| i).collect()
}

/// Five processes on version 1.0.0 replaced one at a time by processes on 2.0.0 (each new one
/// started and ready before an old one gets SIGTERM), the old ones stopped youngest first (the
/// order pod-deletion costs give a ReplicaSet) or oldest first, under a steady load of
/// increments; returns the figures as one line.
async fn rolling_update(oldest_first: bool, name: &str) -> String {
    let dirs: Vec<_> = (0..10).map(|_| tempfile::tempdir().unwrap()).collect();
    let client = reqwest::Client::new();
    let mut live = vec![start_in_store_at(dirs[0].path(), 0, None, "1.0.0").await];
    let seed = live[0].proc.port;
    for d in &dirs[1..5] {
        live.push(start_in_store_at(d.path(), 0, Some(seed), "1.0.0").await);
    }
    wait_members(&client, &live[0], 5).await;
    let mut order = by_age(&client, &live[0].management, &live).await;
    if !oldest_first {
        order.reverse();
    }
    let fronts = Mutex::new(live.iter().map(|c| c.http.clone()).collect::<Vec<_>>());
    let managements = Mutex::new(live.iter().map(|c| c.management.clone()).collect::<Vec<_>>());
    let (running, new_up) = (AtomicBool::new(true), AtomicBool::new(false));
    let (tally, seen) = (Mutex::new(Tally::default()), Mutex::new(UpdateWatch::default()));
    let mut waits = Vec::new();
    let mut replaced: Vec<Option<Counter>> = live.into_iter().map(Some).collect();
    let update = async {
        load_flowing(&tally, 300).await;
        // The watcher has seen every region before the update begins.
        while seen.lock().await.samples < 5 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let started = Instant::now();
        let mut new = Vec::new();
        for (step, &i) in order.iter().enumerate() {
            let through = new.first().map_or_else(
                || replaced.iter().flatten().next().unwrap().proc.port,
                |c: &Counter| c.proc.port,
            );
            let c = start_in_store_at(dirs[5 + step].path(), 0, Some(through), "2.0.0").await;
            waits.push(ready_and_serving(&client, &c).await);
            new_up.store(true, Ordering::Relaxed);
            fronts.lock().await.push(c.http.clone());
            managements.lock().await.insert(0, c.management.clone());
            let mut gone = replaced[i].take().unwrap();
            fronts.lock().await.retain(|f| *f != gone.http);
            managements.lock().await.retain(|m| *m != gone.management);
            gone.proc.term();
            assert_eq!(gone.proc.exit_code(T).await, Some(0), "a graceful leave exits 0");
            new.push(c);
            wait_members(&client, &new[0], 5).await;
        }
        let took = started.elapsed();
        load_flowing(&tally, 300).await;
        running.store(false, Ordering::Relaxed);
        (new, took)
    };
    let ((new, took), (), ()) = tokio::join!(
        update,
        load_while(&client, &fronts, &running, &tally, 40_000),
        watch_update(&client, &managements, &new_up, &running, &seen),
    );
    let fronts: Vec<String> = new.iter().map(|c| c.http.clone()).collect();
    all_answer(&client, &fronts, &tally).await;
    let (t, w) = (tally.lock().await, seen.lock().await);
    let acknowledged: u64 = t.ok.values().sum();
    let tried: u64 = t.tried.values().sum();
    let longest = waits.iter().map(|(d, _)| *d).max().unwrap_or_default();
    let line = format!(
        "{name}: {} s; oldest (singleton host) changed {} times; {} shards arrived in a \
         region (moved or first allocated), {} of them on a 1.0.0 member after a 2.0.0 member \
         was Up ({} samples); {tried} increments tried, \
         {acknowledged} acknowledged, {} failed, none lost (every counter >= its \
         acknowledged increments); new processes ready after {:.1} s at most, each serving \
         at once, last reason before ready: {:?}",
        took.as_secs(),
        w.oldest.len().saturating_sub(1),
        w.arrivals,
        w.to_old.len(),
        w.samples,
        t.failed,
        longest.as_secs_f64(),
        waits.last().map(|(_, r)| r.as_str()).unwrap_or_default(),
    );
    eprintln!("{line}");
    assert!(w.to_old.is_empty(), "{line}: {:?}", w.to_old);
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_youngest_first_moves_the_singletons_once_and_no_shard_to_the_old_version()
{
    let _live = support::live().await;
    // The order of a ReplicaSet that reads the pod-deletion costs: the oldest pods carry the
    // highest, so the youngest old pod goes first and the oldest last.
    let line = rolling_update(false, "youngest first").await;
    assert!(line.contains("changed 1 times"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement beside the test above: cargo test --test sharding_processes \
            oldest_first -- --ignored --nocapture"]
async fn a_rolling_update_oldest_first_loses_nothing_and_allocates_no_shard_to_the_old_version() {
    let _live = support::live().await;
    // The order a ReplicaSet may take without deletion costs: every step moves the singletons.
    let line = rolling_update(true, "oldest first").await;
    assert!(line.contains("changed 5 times"), "{line}");
}
