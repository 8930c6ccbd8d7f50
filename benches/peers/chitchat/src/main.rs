//! The peer comparison harness for quickwit's [chitchat](https://crates.io/crates/chitchat)
//! (scuttlebutt anti-entropy gossip with a phi-accrual failure detector).
//!
//! It does the run described in `peers_common`: N chitchat nodes in this one process, each started
//! with `chitchat::spawn_chitchat` over chitchat's own UDP transport on its own 127.0.0.1 port, on
//! a tokio multi-threaded runtime with the default worker count. Every node has the first node as
//! its only seed.
//!
//! - **Convergence**: from just before the first node starts until every node's
//!   `Chitchat::live_nodes()` holds all N node ids. chitchat counts the node itself in
//!   `live_nodes()` (it is always live to itself), so "all N" includes self.
//! - **Steady traffic**: the UDP transport is wrapped in a [`CountingTransport`] that adds the
//!   serialized size of every message each node sends (the `num_bytes_sent` chitchat's UDP
//!   socket reports, i.e. the datagram payload) to one shared counter; the harness reads it
//!   before and after `--steady-secs` of quiet.
//! - **Failure**: the last node's server task is aborted (`ChitchatHandle::abort`; chitchat has
//!   no graceful leave anyway), which drops its socket. Detected once every survivor has moved
//!   it from `live_nodes()` to `dead_nodes()` (phi above the threshold). chitchat's timeout is
//!   adaptive (8 × a smoothed mean heartbeat interval with a 5 s prior), so this figure shrinks
//!   the longer the cluster has run before the stop: with the default 10 s of steady traffic it
//!   is longer than for a cluster that has been up for minutes.
//!
//! Memory grows with N per node: each node's failure detector keeps a window of
//! `sampling_window_size` (default 1000) f64 heartbeat intervals, 8 kB, for every peer, which is
//! most of the per-node RSS (about 0.8 of the 1 MB per node at N = 100).
//!
//! Settings: `ChitchatConfig` has no public `Default`, so every field is set here, each to
//! chitchat's own default or recommendation (see [`config`]); nothing is tuned.
//!
//! Views are polled every 20 ms, the rate of `peers_common::wait_until`, with an async loop so
//! that no runtime thread is ever blocked.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpTransport};
use chitchat::{
    Chitchat, ChitchatConfig, ChitchatEnvelope, ChitchatHandle, ChitchatId, FailureDetectorConfig,
    ProtocolVersion, spawn_chitchat,
};
use peers_common::{Args, Report, steady_rate};

/// The chitchat version measured; Cargo.toml pins exactly this one.
const VERSION: &str = "0.13.0";

/// How often the harness looks at the nodes' views (as `peers_common::wait_until`).
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How often a long wait reports its progress on stderr.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// chitchat's gossip period: the value of its own `ChitchatConfig::default()` (compiled only for
/// its tests) and the one Quickwit, chitchat's main user, runs with.
const GOSSIP_INTERVAL: Duration = Duration::from_secs(1);

/// How long deleted keys are kept: the 15 minutes chitchat's README recommends (and its
/// test-only `ChitchatConfig::default()` uses). The harness deletes no key, so it plays no part.
const MARKED_FOR_DELETION_GRACE_PERIOD: Duration = Duration::from_secs(15 * 60);

/// What the report's `settings` says: the configuration, and that none of it departs from
/// chitchat's defaults.
const SETTINGS: &str = "none changed: ChitchatConfig has no public Default, so each field is \
    chitchat's own default: gossip_interval 1s (its test Default; Quickwit's value), \
    FailureDetectorConfig::default() (phi_threshold 8, sampling_window_size 1000, \
    max_interval 10s, initial_interval 5s, dead_node_grace_period 24h), \
    marked_for_deletion_grace_period 15min (README's recommendation), protocol_version V0 \
    (its Default; V1 compresses digests), no catchup callback or extra liveness predicate; \
    UdpTransport wrapped only to count sent bytes; generation_id 0, node ids node-0..node-{N-1}";

/// chitchat's UDP transport, with every sent message's size added to a shared counter.
struct CountingTransport {
    /// Bytes sent by all the sockets this transport opened.
    sent: Arc<AtomicU64>,
}

#[async_trait]
impl Transport for CountingTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let inner = UdpTransport.open(listen_addr).await?;
        Ok(Box::new(CountingSocket { inner, sent: Arc::clone(&self.sent) }))
    }
}

/// One node's UDP socket, counting what it sends.
struct CountingSocket {
    inner: Box<dyn Socket>,
    sent: Arc<AtomicU64>,
}

#[async_trait]
impl Socket for CountingSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.inner.local_addr()
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        let outcome = self.inner.send(to, envelope).await?;
        // The UDP socket reports the serialized envelope's length, i.e. the datagram payload.
        self.sent.fetch_add(outcome.num_bytes_sent as u64, Ordering::Relaxed);
        Ok(outcome)
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        // Plain delegation keeps the inner `recv` cancellable, as chitchat's server needs.
        self.inner.recv().await
    }
}

/// The configuration of one node, all chitchat defaults (see [`SETTINGS`]).
fn config(chitchat_id: ChitchatId, seed: &str) -> ChitchatConfig {
    ChitchatConfig {
        listen_addr: chitchat_id.gossip_advertise_addr,
        chitchat_id,
        cluster_id: "peers-bench".to_string(),
        gossip_interval: GOSSIP_INTERVAL,
        seed_nodes: vec![seed.to_string()],
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: MARKED_FOR_DELETION_GRACE_PERIOD,
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: ProtocolVersion::V0,
    }
}

fn main() {
    let args = Args::parse();
    // The RSS baseline is taken here, before the runtime and any node exist.
    let mut report = Report::new("chitchat", VERSION, args.nodes);
    report.failure_means =
        "dead: every survivor's phi-accrual detector moved it from live_nodes() to dead_nodes()";
    report.settings = SETTINGS.to_string();

    // The multi-threaded runtime with the default worker count (one per core).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    if let Err(error) = runtime.block_on(run(args, &mut report)) {
        eprintln!("chitchat: {error}");
        report.error = Some(error);
    }
    report.print();
    // The surviving nodes are still gossiping: stop them without waiting.
    runtime.shutdown_background();
}

/// The measured run; fills `report` as it goes and returns the phase that failed, if one did.
async fn run(args: Args, report: &mut Report) -> Result<(), String> {
    let n = args.nodes;
    let reserved = reserve_ports(n).map_err(|e| format!("start: reserving {n} UDP ports: {e}"))?;
    let ids: Vec<ChitchatId> = reserved
        .iter()
        .enumerate()
        .map(|(i, socket)| {
            let addr = socket.local_addr().expect("a bound socket has an address");
            ChitchatId::new(format!("node-{i}"), 0, addr)
        })
        .collect();
    let seed = ids[0].gossip_advertise_addr.to_string();
    let sent = Arc::new(AtomicU64::new(0));
    let transport = CountingTransport { sent: Arc::clone(&sent) };

    // 1. Start every node, then wait until every live set holds all N (self included).
    eprintln!("chitchat {VERSION}: starting {n} nodes, seed {seed}");
    let start = Instant::now();
    let mut handles: Vec<ChitchatHandle> = Vec::with_capacity(n);
    for (socket, id) in reserved.into_iter().zip(&ids) {
        // Free the reserved port just before the node binds it.
        drop(socket);
        let handle = spawn_chitchat(config(id.clone(), &seed), Vec::new(), &transport)
            .await
            .map_err(|e| format!("start: node {} of {n} did not start: {e:#}", handles.len()))?;
        handles.push(handle);
    }
    eprintln!("chitchat: {n} nodes started in {:.2} s", start.elapsed().as_secs_f64());

    let expected: HashSet<&ChitchatId> = ids.iter().collect();
    let converged = wait_for_all(&handles, start, args.timeout, "convergence", |chitchat| {
        chitchat.live_nodes().filter(|id| expected.contains(id)).count() == n
    })
    .await?;
    report.convergence_s = Some(converged);
    report.converged_rss();
    eprintln!(
        "chitchat: converged in {converged:.2} s, {} kB RSS per node",
        report.rss_per_node_bytes / 1024
    );

    // 2. Count what every node sends while nothing changes.
    // On a worker of the multi-threaded runtime, which lets the other workers run meanwhile.
    report.steady_bytes_per_s_per_node =
        tokio::task::block_in_place(|| steady_rate(&args, || sent.load(Ordering::Relaxed)));
    if let Some(rate) = report.steady_bytes_per_s_per_node {
        eprintln!("chitchat: steady traffic {rate:.0} B/s per node");
    }

    // 3. Stop the last node abruptly, then wait until every survivor holds it dead.
    let victim = handles.pop().expect("at least two nodes");
    let victim_id = victim.chitchat_id().clone();
    // Phi-accrual adapts: each survivor's timeout for the victim is 8 × its smoothed mean
    // heartbeat interval, whose 5 s prior fades as the cluster ages. Shown to explain the figure.
    let mut timeouts = Vec::with_capacity(handles.len());
    for handle in &handles {
        let timeout =
            handle.with_chitchat(|chitchat| chitchat.failure_detection_timeout(&victim_id));
        timeouts.extend(timeout.await.map(|t| t.as_secs_f64()));
    }
    timeouts.sort_by(f64::total_cmp);
    if let (Some(min), Some(max)) = (timeouts.first(), timeouts.last()) {
        eprintln!(
            "chitchat: survivors' detection timeouts for the victim: min {min:.1} s, median {:.1} s, \
             max {max:.1} s",
            timeouts[timeouts.len() / 2]
        );
    }
    eprintln!("chitchat: aborting {victim_id:?}");
    let stopped = Instant::now();
    victim.abort();
    // The abort lands at the task's next poll; once it has, its socket is closed.
    let _ = victim.termination_watcher().await;
    drop(victim);
    let detected = wait_for_all(&handles, stopped, args.timeout, "failure detection", |chitchat| {
        !chitchat.live_nodes().any(|id| *id == victim_id)
            && chitchat.dead_nodes().any(|id| *id == victim_id)
    })
    .await?;
    report.failure_detected_s = Some(detected);
    report.rss_after_failure_bytes = peers_common::vm_rss();
    eprintln!("chitchat: failure seen by all {} survivors in {detected:.2} s", handles.len());
    Ok(())
}

/// Binds `n` distinct loopback UDP ports chosen by the system and holds them until each node
/// takes its own: a node's id must name its port before the node binds it, and system-chosen
/// ports do not collide with another harness running at the same time (except in the instant
/// between a port's release and its node's bind, when a start would fail with an error).
fn reserve_ports(n: usize) -> std::io::Result<Vec<StdUdpSocket>> {
    (0..n).map(|_| StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0))).collect()
}

/// Polls every node's view every [`POLL_INTERVAL`] until `holds` is true of all of them at once;
/// returns the seconds elapsed since `since`, or, after `timeout`, the phase and how many nodes
/// it held for.
async fn wait_for_all(
    handles: &[ChitchatHandle],
    since: Instant,
    timeout: Duration,
    phase: &str,
    holds: impl Fn(&Chitchat) -> bool,
) -> Result<f64, String> {
    let deadline = Instant::now() + timeout;
    let mut next_progress = Instant::now() + PROGRESS_INTERVAL;
    loop {
        // Stopping at the first node that is not there keeps the wait cheap at large N.
        if count_holding(handles, &holds, true).await == handles.len() {
            return Ok(since.elapsed().as_secs_f64());
        }
        let now = Instant::now();
        if now > deadline {
            let holding = count_holding(handles, &holds, false).await;
            return Err(format!(
                "{phase}: timed out after {} s with {holding}/{} nodes there",
                timeout.as_secs(),
                handles.len()
            ));
        }
        if now >= next_progress {
            let holding = count_holding(handles, &holds, false).await;
            eprintln!(
                "chitchat: {phase}: {holding}/{} nodes there after {:.0} s",
                handles.len(),
                since.elapsed().as_secs_f64()
            );
            next_progress += PROGRESS_INTERVAL;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// How many nodes `holds` is true of, looking at each under its lock; with `stop_at_first_miss`,
/// only up to the first node it is false of.
async fn count_holding(
    handles: &[ChitchatHandle],
    holds: &impl Fn(&Chitchat) -> bool,
    stop_at_first_miss: bool,
) -> usize {
    let mut holding = 0;
    for handle in handles {
        if handle.with_chitchat(|chitchat| holds(chitchat)).await {
            holding += 1;
        } else if stop_at_first_miss {
            break;
        }
    }
    holding
}
