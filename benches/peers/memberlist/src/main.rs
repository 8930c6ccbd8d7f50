//! The memberlist harness of the comparison suite: N nodes of `memberlist` 0.8.5 (al8n's Rust port
//! of HashiCorp memberlist) in this process, on one multi-threaded tokio runtime with the default
//! worker count. Each node has its own TCP+UDP net transport on 127.0.0.1 (port 0) and the
//! library's LAN defaults (`Options::lan()`), and joins through the first node.
//!
//! - A node "sees" a member when `num_online_members()` counts it: every member not marked dead
//!   or left (alive or suspect), self included, so convergence is `num_online_members() == N` on
//!   every node.
//! - The sent bytes are the library's own `memberlist.packet.sent` (UDP) and
//!   `memberlist.stream.sent` (TCP) counters, which every outgoing payload goes through; a small
//!   `metrics` recorder installed here sums them over all nodes. They count payload bytes, not
//!   IP/UDP/TCP headers. The window opens right at convergence, so it also holds the last
//!   retransmissions of the joins' alive gossip (memberlist retransmits each broadcast
//!   `retransmit_mult * ceil(log10(N + 1))` times), which weighs more the larger N is.
//! - The victim is stopped with `shutdown()`, which by the library's documentation (and code)
//!   sends no leave message, so the survivors must find it by probing; "seen gone" is "marked
//!   dead" (no longer among `online_members()`).
//!
//! Views are polled every 20 ms, as `peers_common::wait_until` does, but with an async sleep on
//! the runtime. See `peers-common` for the run and the report.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memberlist::Memberlist;
use memberlist::Options;
use memberlist::metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use memberlist::net::NetTransportOptions;
use memberlist::proto::MaybeResolvedAddress;
use memberlist::tokio::{TokioNetTransport, TokioSocketAddrResolver, TokioTcp};
use peers_common::{Args, Report, steady_rate, vm_rss};
use smol_str::SmolStr;

/// The memberlist version this harness pins in its Cargo.toml.
const VERSION: &str = "0.8.5";

/// TCP+UDP transport on tokio, node ids as strings, peers addressed by socket address.
type Transport = TokioNetTransport<SmolStr, TokioSocketAddrResolver, TokioTcp>;
/// A node, without a delegate (the library's `VoidDelegate`).
type Node = Memberlist<Transport>;

/// How often the views are polled, as in `peers_common::wait_until`.
const POLL: Duration = Duration::from_millis(20);

fn main() {
    let args = Args::parse();
    let mut report = Report::new("memberlist", VERSION, args.nodes);
    report.failure_means = "marked dead";
    report.settings = "Options::lan() unchanged; NetTransportOptions defaults with bind address \
                       127.0.0.1:0; crate features tokio, tcp, metrics (bytes counted by the \
                       crate's packet/stream sent counters)"
        .into();
    // Before any node exists, so that every counter the nodes register lands here.
    if memberlist::metrics::set_global_recorder(SentBytes::default()).is_err() {
        report.error = Some("setup: could not install the metrics recorder".into());
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if report.error.is_none()
        && let Err(e) = runtime.block_on(run(args, &mut report))
    {
        report.error = Some(e);
    }
    report.print();
    // Tearing down hundreds of nodes takes time nobody measures.
    std::process::exit(0);
}

/// The measured run (see `peers-common`): fills `report`, or returns what stopped it and where.
async fn run(args: Args, report: &mut Report) -> Result<(), String> {
    let n = args.nodes;

    // Start: node 0 first, then every other node starts and joins through it.
    let started = Instant::now();
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    for i in 0..n {
        let node = start_node(i).await.map_err(|e| format!("start: node {i} of {n}: {e}"))?;
        if let Some(seed) = nodes.first() {
            let seed = MaybeResolvedAddress::resolved(*seed.advertise_address());
            node.join(seed).await.map_err(|e| format!("join: node {i} of {n}: {e}"))?;
        }
        nodes.push(node);
    }
    eprintln!(
        "memberlist: {n} nodes started and joined after {:.2} s",
        started.elapsed().as_secs_f64()
    );

    // Convergence: every node counts all N (itself included) as online.
    match poll_until(started, args.timeout, n, || count_seeing_all(&nodes)).await {
        Ok(elapsed) => report.convergence_s = Some(elapsed),
        Err(seen) => {
            return Err(format!("convergence: {seen} of {n} nodes saw all {n} members alive"));
        }
    }
    report.converged_rss();
    eprintln!(
        "memberlist: all members everywhere after {:.2} s",
        report.convergence_s.unwrap_or_default()
    );

    // Steady traffic: the bytes all nodes send while nothing changes.
    // On a worker of the multi-threaded runtime, which lets the other workers run meanwhile.
    report.steady_bytes_per_s_per_node =
        tokio::task::block_in_place(|| steady_rate(&args, || SENT_BYTES.load(Ordering::Relaxed)));
    if let Some(rate) = report.steady_bytes_per_s_per_node {
        eprintln!("memberlist: steady traffic {rate:.0} B/s per node");
    }

    // Failure: stop the last node without leaving; wait until every survivor marks it dead.
    let victim = nodes.pop().expect("at least two nodes");
    let gone = victim.local_id().clone();
    let stopped = Instant::now();
    victim.shutdown().await.map_err(|e| format!("failure: stopping the last node: {e}"))?;
    drop(victim);
    let result =
        poll_until(stopped, args.timeout, n - 1, || count_seeing_gone(&nodes, &gone)).await;
    report.rss_after_failure_bytes = vm_rss();
    match result {
        Ok(elapsed) => report.failure_detected_s = Some(elapsed),
        Err(seen) => return Err(format!("failure: {seen} of {} survivors marked it dead", n - 1)),
    }
    eprintln!(
        "memberlist: failure seen by all after {:.2} s",
        report.failure_detected_s.unwrap_or_default()
    );
    Ok(())
}

/// Starts node `i` on 127.0.0.1 with a port the OS picks. The transport binds TCP on port 0 and
/// then UDP on the same port, which can be taken already; a few new tries cover that.
async fn start_node(i: usize) -> Result<Node, String> {
    let mut last_error = String::new();
    for _ in 0..5 {
        let mut transport = NetTransportOptions::<SmolStr, TokioSocketAddrResolver, TokioTcp>::new(
            SmolStr::new(format!("node-{i}")),
        );
        transport.add_bind_address(SocketAddr::from(([127, 0, 0, 1], 0)));
        match Node::new(transport, Options::lan()).await {
            Ok(node) => return Ok(node),
            Err(e) => last_error = e.to_string(),
        }
    }
    Err(last_error)
}

/// How many nodes count all the nodes, themselves included, as online (not dead or left).
async fn count_seeing_all(nodes: &[Node]) -> usize {
    let mut count = 0;
    for node in nodes {
        if node.num_online_members().await == nodes.len() {
            count += 1;
        }
    }
    count
}

/// How many of `survivors` have marked `gone` dead (no longer count it as online).
async fn count_seeing_gone(survivors: &[Node], gone: &SmolStr) -> usize {
    let mut count = 0;
    for node in survivors {
        if !node.online_members().await.iter().any(|m| m.id() == gone) {
            count += 1;
        }
    }
    count
}

/// The async twin of `peers_common::wait_until`: polls `count` every 20 ms until it reaches
/// `target` or `timeout` passes. Returns the time from `since` when it reached it, or the last
/// count on a timeout.
async fn poll_until<F, Fut>(
    since: Instant,
    timeout: Duration,
    target: usize,
    mut count: F,
) -> Result<f64, usize>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let counted = count().await;
        if counted >= target {
            return Ok(since.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            return Err(counted);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The bytes all nodes have sent so far, summed by [`SentBytes`].
static SENT_BYTES: AtomicU64 = AtomicU64::new(0);

/// A `metrics` recorder that adds the crate's two "bytes sent" counters into [`SENT_BYTES`] and
/// drops every other metric.
#[derive(Default)]
struct SentBytes {
    counter: Arc<SentCounter>,
}

/// The counter handle behind `memberlist.packet.sent` and `memberlist.stream.sent`.
#[derive(Default)]
struct SentCounter;

impl CounterFn for SentCounter {
    fn increment(&self, value: u64) {
        SENT_BYTES.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, _value: u64) {}
}

impl Recorder for SentBytes {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match key.name() {
            "memberlist.packet.sent" | "memberlist.stream.sent" => {
                Counter::from_arc(self.counter.clone())
            }
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
