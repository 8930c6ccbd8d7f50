//! The foca harness of the comparison suite: N foca nodes in this process, each with its own UDP
//! socket on 127.0.0.1, with foca's LAN configuration for N members, each joining through the
//! first. See `peers-common` for the run and the report.
//!
//! foca is sans-IO: it never touches a socket or a clock, so the harness supplies the runtime
//! loop. It follows foca's `examples/foca_insecure_udp_agent.rs`, folded into one tokio task per
//! node (the example spreads the same work over a receiving loop, a foca task, a writer task and a
//! scheduler task connected by channels):
//!
//! * every interaction with foca (`announce`, `handle_data` for a received datagram,
//!   `handle_timer` for a due timer event) goes through foca's `AccumulatingRuntime`, which is
//!   drained right after it, as foca asks:
//!   - datagrams to send go out through the node's socket, their bytes counted in one shared
//!     `AtomicU64` (UDP payload bytes, the only traffic the node makes);
//!   - timer events go into the node's min-heap of (deadline, event), the example's scheduler,
//!     which delivers them in deadline order (and in foca's `Timer` order for equal deadlines);
//!   - notifications (`MemberUp`, `MemberDown`, ...) update the node's [`View`];
//! * the task waits, with `tokio::select!`, for the first of: a datagram on the socket, the
//!   earliest timer deadline, or (before the node has found any member) the next re-announce.
//!
//! The [`View`] each node publishes (its member count and whether it has declared the victim down)
//! is made of atomics, so the main thread polls every node every 20 ms through `wait_until`
//! without sending a message to any node or blocking a runtime thread.
//!
//! Stopping a node aborts its task, which drops its socket and its foca instance without a
//! `leave_cluster`: to the others it simply falls silent.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use foca::{
    AccumulatingRuntime, Config, Foca, NoCustomBroadcast, OwnedNotification, PostcardCodec, Timer,
};
use peers_common::{Args, Report, steady_rate, vm_rss, wait_until};
use rand::rngs::StdRng;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// The exact foca version, as Cargo.toml pins it.
const FOCA_VERSION: &str = "2.0.0";

/// How long a node that has found no member yet waits before announcing to node 0 again (a lost
/// announce datagram would otherwise leave it alone forever: foca only talks to members it knows).
const REANNOUNCE_AFTER: Duration = Duration::from_secs(1);

/// How often the harness reports a phase's progress on stderr while it waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// A node's identity, as in foca's UDP example: its address plus a `bump` that `renew` increases,
/// so a node wrongly declared down rejoins at once under a newer identity.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Id {
    addr: SocketAddr,
    bump: u64,
}

impl foca::Identity for Id {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Id { addr: self.addr, bump: self.bump.wrapping_add(1) })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}

type FocaNode = Foca<Id, PostcardCodec, StdRng, NoCustomBroadcast>;

/// What a node publishes for the main thread to poll.
#[derive(Default)]
struct View {
    /// `foca.num_members()` after the node's latest interaction: the active members other than
    /// itself (foca never counts its own identity).
    members: AtomicUsize,
    /// Whether foca has notified `MemberDown` for the victim's address (and no `MemberUp` since).
    victim_down: AtomicBool,
}

/// Counters shared by every node.
#[derive(Default)]
struct Shared {
    /// UDP payload bytes sent by all nodes.
    bytes_sent: AtomicU64,
    /// Times a node was declared down wrongly and rejoined under a renewed identity.
    rejoins: AtomicU64,
    /// Errors foca returned (it tolerates them; the example logs and ignores them too).
    foca_errors: AtomicU64,
    /// Announces repeated because a node had found no member after `REANNOUNCE_AFTER`.
    reannounces: AtomicU64,
}

/// One node: its foca instance, the socket it owns, and the scheduler of foca's timer events.
struct Node {
    foca: FocaNode,
    runtime: AccumulatingRuntime<Id>,
    socket: UdpSocket,
    /// foca's timer events by deadline; `Reverse` makes the max-heap a min-heap.
    timers: BinaryHeap<Reverse<(tokio::time::Instant, Timer<Id>)>>,
    /// Node 0's identity, for every other node to join through.
    seed: Option<Id>,
    /// When to announce again if still alone (`None` once the node knows a member).
    reannounce_at: Option<tokio::time::Instant>,
    /// The configured `max_packet_size`, for the receive buffer.
    max_packet: usize,
    victim: SocketAddr,
    view: Arc<View>,
    shared: Arc<Shared>,
}

impl Node {
    /// Runs the node until its task is aborted.
    async fn run(mut self) {
        // foca neither produces nor accepts datagrams larger than `max_packet_size`.
        let mut buf = vec![0u8; self.max_packet];
        if let Some(seed) = self.seed.clone() {
            let result = self.foca.announce(seed, &mut self.runtime);
            self.after_interaction(result).await;
            self.reannounce_at = Some(tokio::time::Instant::now() + REANNOUNCE_AFTER);
        }
        loop {
            let next_timer = self.timers.peek().map(|Reverse((at, _))| *at);
            tokio::select! {
                received = self.socket.recv_from(&mut buf) => {
                    // A receive error on an unconnected UDP socket is transient: try again.
                    if let Ok((len, _from)) = received {
                        let result = self.foca.handle_data(&buf[..len], &mut self.runtime);
                        self.after_interaction(result).await;
                    }
                }
                () = sleep_until(next_timer), if next_timer.is_some() => {
                    // Deliver every event that is due, earliest first, draining after each.
                    let now = tokio::time::Instant::now();
                    while let Some(Reverse((at, _))) = self.timers.peek()
                        && *at <= now
                    {
                        let Some(Reverse((_, timer))) = self.timers.pop() else { break };
                        let result = self.foca.handle_timer(timer, &mut self.runtime);
                        self.after_interaction(result).await;
                    }
                }
                () = sleep_until(self.reannounce_at), if self.reannounce_at.is_some() => {
                    if let Some(seed) = self.seed.clone() {
                        self.shared.reannounces.fetch_add(1, Ordering::Relaxed);
                        let result = self.foca.announce(seed, &mut self.runtime);
                        self.after_interaction(result).await;
                    }
                    self.reannounce_at = Some(tokio::time::Instant::now() + REANNOUNCE_AFTER);
                }
            }
            if self.foca.num_members() > 0 {
                self.reannounce_at = None;
            }
        }
    }

    /// Drains the runtime after one interaction with foca: sends, schedules, notifies, and
    /// publishes the member count.
    async fn after_interaction(&mut self, result: Result<(), foca::Error>) {
        if result.is_err() {
            self.shared.foca_errors.fetch_add(1, Ordering::Relaxed);
        }
        while let Some((to, data)) = self.runtime.to_send() {
            if let Ok(sent) = self.socket.send_to(&data, to.addr).await {
                self.shared.bytes_sent.fetch_add(sent as u64, Ordering::Relaxed);
            }
        }
        let now = tokio::time::Instant::now();
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.timers.push(Reverse((now + after, timer)));
        }
        while let Some(notification) = self.runtime.to_notify() {
            match notification {
                OwnedNotification::MemberDown(id) if id.addr == self.victim => {
                    self.view.victim_down.store(true, Ordering::Release);
                }
                OwnedNotification::MemberUp(id) if id.addr == self.victim => {
                    self.view.victim_down.store(false, Ordering::Release);
                }
                OwnedNotification::Rejoin(_) => {
                    self.shared.rejoins.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        self.view.members.store(self.foca.num_members(), Ordering::Release);
    }
}

/// Sleeps until `at`, or forever for `None` (the `select!` branch is disabled then anyway).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// foca's recommended configuration for a LAN cluster of `n` members, unchanged.
fn lan_config(n: usize) -> Config {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    Config::new_lan(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

fn main() {
    let args = Args::parse();
    let mut report = Report::new("foca", FOCA_VERSION, args.nodes);
    let config = lan_config(args.nodes);
    report.failure_means = "declared down (foca's MemberDown notification for the stopped node)";
    report.settings = format!(
        "Config::new_lan({n}) unchanged (probe_period {:?}, probe_rtt {:?}, suspect_to_down_after \
         {:?}, max_transmissions {}, periodic_gossip every {:?} to {}); PostcardCodec; identity \
         {{addr, bump}} with renew() as in foca's example; harness re-announces to node 0 every \
         {:?} while a node knows no member",
        config.probe_period,
        config.probe_rtt,
        config.suspect_to_down_after,
        config.max_transmissions,
        config.periodic_gossip.as_ref().map(|p| p.frequency).unwrap_or_default(),
        config.periodic_gossip.as_ref().map_or(0, |p| p.num_members.get()),
        REANNOUNCE_AFTER,
        n = args.nodes,
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let shared = Arc::new(Shared::default());
    if let Err(e) = run(&runtime, args, config, &shared, &mut report) {
        report.error = Some(e);
    }
    eprintln!(
        "foca: {} foca errors ignored, {} re-announces, {} rejoins after a false down",
        shared.foca_errors.load(Ordering::Relaxed),
        shared.reannounces.load(Ordering::Relaxed),
        shared.rejoins.load(Ordering::Relaxed),
    );
    report.print();
    // The nodes never leave: exiting drops them all at once.
    std::process::exit(0);
}

fn run(
    runtime: &tokio::runtime::Runtime,
    args: Args,
    config: Config,
    shared: &Arc<Shared>,
    report: &mut Report,
) -> Result<(), String> {
    let n = args.nodes;

    let started = Instant::now();
    // Bind every socket first, so that each node knows the victim's (the last node's) address.
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = runtime
            .block_on(UdpSocket::bind("127.0.0.1:0"))
            .map_err(|e| format!("start: bind: {e}"))?;
        sockets.push(socket);
    }
    let addrs: Vec<SocketAddr> = sockets
        .iter()
        .map(|s| s.local_addr())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("start: local_addr: {e}"))?;
    let ids: Vec<Id> = addrs.iter().map(|&addr| Id { addr, bump: 1 }).collect();
    let victim = addrs[n - 1];

    let mut views = Vec::with_capacity(n);
    let mut tasks: Vec<JoinHandle<()>> = Vec::with_capacity(n);
    for (i, socket) in sockets.into_iter().enumerate() {
        let view = Arc::new(View::default());
        let node = Node {
            foca: Foca::new(ids[i].clone(), config.clone(), rand::make_rng(), PostcardCodec),
            runtime: AccumulatingRuntime::new(),
            socket,
            timers: BinaryHeap::new(),
            seed: (i > 0).then(|| ids[0].clone()),
            reannounce_at: None,
            max_packet: config.max_packet_size.get(),
            victim,
            view: Arc::clone(&view),
            shared: Arc::clone(shared),
        };
        views.push(view);
        tasks.push(runtime.spawn(node.run()));
    }
    eprintln!("foca: {n} nodes started and joining through {}", addrs[0]);

    let saw_all = |views: &[Arc<View>]| {
        views.iter().filter(|v| v.members.load(Ordering::Acquire) == n - 1).count()
    };
    let fewest = |views: &[Arc<View>]| {
        views.iter().map(|v| v.members.load(Ordering::Acquire)).min().unwrap_or_default()
    };
    let mut progress = Progress::new(started);
    report.convergence_s = wait_until(started, args.timeout, || {
        let done = saw_all(&views);
        progress.tick(|| {
            format!(
                "{done} of {n} nodes see all {} others (the worst sees {})",
                n - 1,
                fewest(&views)
            )
        });
        done == n
    });
    let ports: Vec<u16> = addrs.iter().map(SocketAddr::port).collect();
    eprintln!(
        "foca: {} datagrams dropped by the kernel so far (full receive buffers)",
        kernel_drops(&ports)
    );
    if report.convergence_s.is_none() {
        return Err(format!(
            "convergence: {} of {n} nodes saw all {} others",
            saw_all(&views),
            n - 1
        ));
    }
    report.converged_rss();
    eprintln!(
        "foca: every node sees all members after {:.2} s",
        report.convergence_s.unwrap_or_default()
    );

    let sent = || shared.bytes_sent.load(Ordering::Relaxed);
    report.steady_bytes_per_s_per_node = steady_rate(&args, sent);
    if let Some(rate) = report.steady_bytes_per_s_per_node {
        eprintln!("foca: steady traffic {rate:.0} B/s per node");
    }

    // Stop the last node: abort its task, which drops its socket and foca without leaving.
    let victim_task = tasks.pop().expect("at least two nodes");
    let stopped = Instant::now();
    victim_task.abort();
    // Wait until the task is gone (its socket closed); the result is the cancellation.
    let _cancelled = runtime.block_on(victim_task);
    eprintln!("foca: stopped {victim}");

    let survivors = &views[..n - 1];
    let saw_down = |views: &[Arc<View>]| {
        views.iter().filter(|v| v.victim_down.load(Ordering::Acquire)).count()
    };
    let mut progress = Progress::new(stopped);
    report.failure_detected_s = wait_until(stopped, args.timeout, || {
        let done = saw_down(survivors);
        progress.tick(|| format!("{done} of {} survivors declared it down", n - 1));
        done == n - 1
    });
    report.rss_after_failure_bytes = vm_rss();
    eprintln!("foca: {} datagrams dropped by the kernel so far", kernel_drops(&ports));
    if report.failure_detected_s.is_none() {
        return Err(format!(
            "failure: {} of {} survivors declared it down",
            saw_down(survivors),
            n - 1
        ));
    }
    eprintln!(
        "foca: every survivor declared it down after {:.2} s",
        report.failure_detected_s.unwrap_or_default()
    );
    Ok(())
}

/// Prints a phase's progress on stderr every `PROGRESS_EVERY` while `wait_until` polls.
struct Progress {
    since: Instant,
    next: Instant,
}

impl Progress {
    fn new(since: Instant) -> Progress {
        Progress { since, next: since + PROGRESS_EVERY }
    }

    /// Prints `line()` if the next progress line is due (`line` is only built then).
    fn tick(&mut self, line: impl FnOnce() -> String) {
        let now = Instant::now();
        if now >= self.next {
            self.next += PROGRESS_EVERY;
            eprintln!("foca: {:.0} s: {}", (now - self.since).as_secs_f64(), line());
        }
    }
}

/// How many datagrams the kernel dropped at the given loopback UDP ports because their receive
/// buffers were full (the last column of `/proc/net/udp`), for the progress lines: when 2 cores
/// run hundreds of nodes, bursts can overflow the default buffers. The ports of a stopped node's
/// socket are no longer listed.
fn kernel_drops(ports: &[u16]) -> u64 {
    let table = std::fs::read_to_string("/proc/self/net/udp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields.get(1)?.rsplit(':').next()?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let drops: u64 = fields.last()?.parse().ok()?;
            ports.contains(&port).then_some(drops)
        })
        .sum()
}
