//! Cluster singletons on a real cluster (nodes in one process over TCP): one instance, on the
//! oldest member; a graceful hand-over that never overlaps; a crash that restarts it only after
//! the old host's removal; the proxy; `GET /cluster/singletons`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoke::Node;
use convoke::management::ClusterSingletons;
use convoke::membership::sbr::{Clock, InMemoryLease, InMemoryLeaseTable, Lease, LeaseSettings};
use convoke::messaging::EndpointKey;
use convoke::settings::Settings;
use convoke::singleton::SingletonContext;
use support::fast_settings;
use tokio::sync::mpsc;
use tokio::time::Instant;

const T: Duration = Duration::from_secs(60);
const WHERE: EndpointKey<(), String> = EndpointKey::new("ticker.where");

/// What an instance did, on which node, when.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Started(usize, Instant),
    Stopped(usize, Instant),
}

#[derive(Clone, Default)]
struct Journal {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Journal {
    fn record(&self, e: Event) {
        self.events.lock().unwrap().push(e);
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// When node `i` first started (`true`) or stopped (`false`) an instance.
    fn first(&self, i: usize, started: bool) -> Option<Instant> {
        self.events().into_iter().find_map(|e| match e {
            Event::Started(n, at) if n == i && started => Some(at),
            Event::Stopped(n, at) if n == i && !started => Some(at),
            _ => None,
        })
    }

    /// How many instances run at once at most, over the whole journal.
    fn max_concurrent(&self) -> usize {
        let (mut running, mut max) = (0usize, 0usize);
        for e in self.events() {
            match e {
                Event::Started(..) => running += 1,
                Event::Stopped(..) => running -= 1,
            }
            max = max.max(running);
        }
        max
    }
}

/// Starts singleton "ticker" on `node` (index `i`): its instance serves `WHERE` with its
/// address and records its start and stop in `journal`, announcing each start on `started`.
fn start_ticker(node: &Node, i: usize, journal: &Journal, started: &mpsc::UnboundedSender<usize>) {
    start_ticker_with(node, i, journal, started, None);
}

/// As `start_ticker`, holding `lease` while the instance runs when one is given.
fn start_ticker_with(
    node: &Node,
    i: usize,
    journal: &Journal,
    started: &mpsc::UnboundedSender<usize>,
    lease: Option<Arc<dyn Lease>>,
) {
    let (journal, started) = (journal.clone(), started.clone());
    let me = node.self_address().to_string();
    let factory = move |ctx: SingletonContext| {
        let (journal, started, me) = (journal.clone(), started.clone(), me.clone());
        async move {
            journal.record(Event::Started(i, Instant::now()));
            let _ = started.send(i);
            ctx.serve(&WHERE, 16, |_, ()| {
                let me = me.clone();
                async move { me }
            })
            .await
            .unwrap();
            journal.record(Event::Stopped(i, Instant::now()));
        }
    };
    let singletons = node.singletons();
    match lease {
        Some(lease) => singletons.start_with_lease("ticker", None, lease, factory),
        None => singletons.start("ticker", None, factory),
    }
    .unwrap();
}

async fn ticker_cluster(
    settings: &Settings,
    n: usize,
) -> (Vec<Node>, Journal, mpsc::UnboundedReceiver<usize>) {
    let nodes = support::start_cluster(settings, n).await;
    let journal = Journal::default();
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        start_ticker(node, i, &journal, &tx);
    }
    (nodes, journal, rx)
}

/// The index of the oldest member after node 0 (nodes that joined together are ordered by
/// address).
fn next_oldest(nodes: &[Node]) -> usize {
    let state = nodes[0].state();
    let mut members: Vec<_> =
        state.members.iter().filter(|m| m.node() != nodes[0].self_node()).collect();
    members.sort_by(|a, b| a.age_cmp(b));
    nodes.iter().position(|n| n.self_node() == members[0].node()).unwrap()
}

async fn next_start(rx: &mut mpsc::UnboundedReceiver<usize>) -> usize {
    tokio::time::timeout(T, rx.recv()).await.expect("an instance started in time").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_runs_on_the_oldest_and_moves_to_the_next_oldest_on_a_graceful_leave() {
    let _live = support::live().await;
    let (nodes, journal, mut started) = ticker_cluster(&fast_settings(), 3).await;
    // The first node formed the cluster: it is the oldest.
    assert_eq!(next_start(&mut started).await, 0);
    let proxy = nodes[2].singletons().proxy(None, WHERE);
    assert_eq!(proxy.ask(&(), T).await.unwrap(), nodes[0].self_address().to_string());

    // Asks sent through the proxy during the hand-over wait for the new instance.
    let asking = tokio::spawn({
        let proxy = proxy.clone();
        async move {
            let mut answers = Vec::new();
            for _ in 0..40 {
                answers.push(proxy.ask(&(), T).await);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        }
    });
    let next = next_oldest(&nodes);
    nodes[0].shutdown().await;
    assert_eq!(next_start(&mut started).await, next, "the next oldest takes over");
    let answers = asking.await.unwrap();
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(proxy.ask(&(), T).await.unwrap(), nodes[next].self_address().to_string());

    // The old instance had stopped before the new one started.
    let events = journal.events();
    let (stopped, restarted) = (journal.first(0, false), journal.first(next, true));
    assert!(stopped.unwrap() <= restarted.unwrap(), "{events:?}");
    assert_eq!(journal.max_concurrent(), 1, "{events:?}");
    for n in &nodes[1..] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_does_not_host_the_singleton_leaves_without_waiting_for_it() {
    let _live = support::live().await;
    let (nodes, _journal, mut started) = ticker_cluster(&fast_settings(), 2).await;
    assert_eq!(next_start(&mut started).await, 0);
    let outcome = tokio::time::timeout(T, nodes[1].shutdown()).await.expect("the leave hung");
    assert_eq!(outcome, convoke::node::ShutdownOutcome::Left);
    nodes[0].stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_host_is_replaced_only_after_its_removal_and_the_margin() {
    let _live = support::live().await;
    let mut settings = fast_settings();
    let sbr = &mut settings.cluster.core.split_brain_resolver;
    sbr.active_strategy = "keep-majority".into();
    sbr.stable_after = Duration::from_secs(2);
    // Removal margin: 2 s + 4 s down-all-when-unstable + 3 s heartbeat pause + 3 heartbeats +
    // this 2 s stop allowance.
    settings.singleton.hand_over_timeout = Duration::from_secs(2);
    let (nodes, journal, mut started) = ticker_cluster(&settings, 3).await;
    assert_eq!(next_start(&mut started).await, 0);
    let next = next_oldest(&nodes);
    let crashed = nodes[0].self_node().clone();
    let removed = nodes[next].messaging().watch_member(&crashed);
    nodes[0].stop().await;
    let crash = Instant::now();
    tokio::time::timeout(T, removed.gone()).await.expect("the crashed host was removed");
    let removed_at = Instant::now();
    assert_eq!(next_start(&mut started).await, next);
    let restarted = journal.first(next, true).unwrap();
    // The margin (11.6 s) runs from the removal.
    assert!(restarted >= removed_at, "started before the removal");
    assert!(
        restarted.duration_since(crash) >= Duration::from_millis(11_600),
        "started {:?} after the crash",
        restarted.duration_since(crash)
    );
    let status = nodes[next].singletons().statuses().list();
    assert_eq!(status[0].phase.as_str(), "running");
    assert!(status[0].running_here);
    for n in &nodes[1..] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_shows_where_each_singleton_runs() {
    let _live = support::live().await;
    let mut settings = fast_settings();
    settings.management.enabled = true;
    settings.management.port = 0;
    settings.bootstrap.enabled = false;
    let (nodes, _journal, mut started) = ticker_cluster(&settings, 2).await;
    assert_eq!(next_start(&mut started).await, 0);
    let client = reqwest::Client::new();
    for (i, node) in nodes.iter().enumerate() {
        let url = format!("http://{}/cluster/singletons", node.management_addr().unwrap());
        let expected_state = if i == 0 { "running" } else { "younger" };
        let body = wait_for_json(&client, &url, |b: &ClusterSingletons| {
            b.singletons.first().is_some_and(|s| s.state == expected_state)
        })
        .await;
        let s = &body.singletons[0];
        assert_eq!(s.name, "ticker");
        assert_eq!(s.host.as_deref(), Some(&*nodes[0].self_address().to_string()));
        assert_eq!(s.running_here, i == 0);
        assert!(s.since > 0);
    }
    // The admin CLI's table says the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["singletons", "--url", &format!("http://{}", nodes[0].management_addr().unwrap())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "ROLE", "STATE", "HOST", "HERE", "SINCE"], "{text}");
    let host = nodes[0].self_address().to_string();
    assert_eq!(rows[1][..5], ["ticker", "-", "running", host.as_str(), "yes"], "{text}");
    assert!(rows[1][5..].ends_with(&["ago"]), "{text}");
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lease_the_instance_starts_only_while_its_host_holds_the_lease() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&fast_settings(), 2).await;
    let table = InMemoryLeaseTable::new();
    let clock: Clock = Arc::new(std::time::Instant::now);
    let lease_of = |owner: &str| -> Arc<dyn Lease> {
        Arc::new(InMemoryLease::new(
            table.clone(),
            LeaseSettings::new("ticker", owner),
            clock.clone(),
        ))
    };
    // Someone else holds the lease: the oldest waits for it and nothing runs.
    let now = std::time::Instant::now();
    assert!(table.acquire("ticker", "intruder", now, Some(Duration::from_secs(600))));
    let journal = Journal::default();
    let (tx, mut started) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        start_ticker_with(node, i, &journal, &tx, Some(lease_of(&format!("node-{i}"))));
    }
    let statuses = nodes[0].singletons().statuses();
    let deadline = Instant::now() + T;
    while statuses.list().first().is_none_or(|s| s.phase.as_str() != "acquiring-lease") {
        assert!(Instant::now() < deadline, "{:?}", statuses.list());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(journal.events().is_empty(), "started without the lease");
    // Once the lease is free, the oldest takes it and starts; it holds it while it runs.
    assert!(table.release("ticker", "intruder"));
    assert_eq!(next_start(&mut started).await, 0);
    assert!(table.check("ticker", "node-0", std::time::Instant::now()));
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_refused_by_the_lease_stops_the_instance() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&fast_settings(), 2).await;
    let table = InMemoryLeaseTable::new();
    let clock: Clock = Arc::new(std::time::Instant::now);
    let every = Duration::from_millis(200);
    let journal = Journal::default();
    let (tx, mut started) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        let mut settings = LeaseSettings::new("ticker", format!("node-{i}"));
        settings.heartbeat_interval = every;
        let lease: Arc<dyn Lease> =
            Arc::new(InMemoryLease::new(table.clone(), settings, clock.clone()));
        start_ticker_with(node, i, &journal, &tx, Some(lease));
    }
    assert_eq!(next_start(&mut started).await, 0);
    // Renewed every heartbeat interval while it runs: still held well past the first one.
    tokio::time::sleep(every * 5).await;
    assert!(table.check("ticker", "node-0", std::time::Instant::now()));
    assert_eq!(journal.first(0, false), None);
    // Another owner takes it: the next renewal is refused and the instance is told to stop.
    assert!(table.release("ticker", "node-0"));
    let now = std::time::Instant::now();
    assert!(table.acquire("ticker", "intruder", now, Some(Duration::from_secs(600))));
    let deadline = Instant::now() + T;
    while journal.first(0, false).is_none() {
        assert!(Instant::now() < deadline, "the instance kept running without its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(journal.first(0, false).unwrap().duration_since(now.into()) < every * 10);
    assert_eq!(journal.max_concurrent(), 1);
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_ignores_its_stop_is_aborted_after_the_hand_over_timeout() {
    let _live = support::live().await;
    let mut settings = fast_settings();
    settings.singleton.hand_over_timeout = Duration::from_millis(500);
    let nodes = support::start_cluster(&settings, 2).await;
    let (tx, mut started) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        let tx = tx.clone();
        let factory = move |_ctx: SingletonContext| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(i);
                // Never looks at its stop signal.
                std::future::pending::<()>().await;
            }
        };
        node.singletons().start("stubborn", None, factory).unwrap();
    }
    assert_eq!(next_start(&mut started).await, 0);
    let asked = Instant::now();
    let handed_over = tokio::time::timeout(T, nodes[0].singletons().hand_over_all()).await;
    assert!(handed_over.is_ok(), "the instance was never aborted");
    let took = asked.elapsed();
    assert!(took >= Duration::from_millis(500), "ended before the timeout: {took:?}");
    assert!(took < Duration::from_secs(5), "not aborted in time: {took:?}");
    for n in &nodes {
        n.stop().await;
    }
}

/// GETs `url` until its JSON satisfies `ok`: the manager publishes its state on its own task.
async fn wait_for_json<B: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    ok: impl Fn(&B) -> bool,
) -> B {
    let deadline = Instant::now() + T;
    loop {
        let body: B = client.get(url).send().await.unwrap().json().await.unwrap();
        if ok(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{url} never showed the expected state");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
