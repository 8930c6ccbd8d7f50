//! The driver task: the one owner of the membership core. Inbound messages, commands and timers
//! go in; transmits go to the transport, events to a broadcast channel, snapshots to a `watch`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convoke_membership::gossip::Gossip;
use convoke_membership::{Address, Cluster, ClusterEvent, CurrentClusterState, ShutdownReason};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::transport::{Inbound, Transport};

/// Commands other tasks send to the driver.
#[derive(Debug)]
pub(crate) enum Command {
    JoinSeedNodes(Vec<Address>, oneshot::Sender<Result<(), convoke_membership::JoinError>>),
    Join(Address, oneshot::Sender<Result<(), convoke_membership::JoinError>>),
    Leave(Address),
    Down(Address),
    PrepareForFullShutdown,
    Subscribe(oneshot::Sender<(Vec<ClusterEvent>, broadcast::Receiver<ClusterEvent>)>),
    Ping(oneshot::Sender<()>),
    /// The lease worker's answer to a lease operation.
    LeaseResult(crate::lease::LeaseAnswer),
    Stop,
}

/// What the driver publishes after every input.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The current view.
    pub state: CurrentClusterState,
    /// The gossip it was computed from.
    pub gossip: Arc<Gossip>,
}

/// Why the driver stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Termination {
    /// The core asked for shutdown.
    Core(ShutdownReason),
    /// The node was stopped by its owner.
    Stopped,
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Core(reason) => reason.fmt(f),
            Self::Stopped => f.write_str("stopped"),
        }
    }
}

pub(crate) struct Driver {
    pub(crate) core: Cluster,
    /// The `now` the core was created at: heartbeat creation times count from it.
    pub(crate) core_started: std::time::Instant,
    pub(crate) metrics: crate::management::SharedMetrics,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) inbound: mpsc::Receiver<Inbound>,
    pub(crate) transport: Transport,
    pub(crate) events: broadcast::Sender<ClusterEvent>,
    pub(crate) snapshots: watch::Sender<Arc<Snapshot>>,
    pub(crate) terminated: watch::Sender<Option<Termination>>,
    /// The lease of the lease-majority strategy, when it is active.
    pub(crate) lease: Option<crate::lease::LeaseRuntime>,
    /// The command channel, for the lease worker's answers (weak: the driver stops when every
    /// `Node` handle is gone).
    pub(crate) self_commands: mpsc::WeakSender<Command>,
}

/// Milliseconds since the Unix epoch, for tombstone ages.
pub(crate) fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn snapshot(core: &Cluster) -> Arc<Snapshot> {
    Arc::new(Snapshot { state: core.state(), gossip: core.gossip().clone() })
}

impl Driver {
    pub(crate) async fn run(mut self) {
        if let Some(lease) = &mut self.lease {
            lease.start(self.self_commands.clone());
        }
        let termination = loop {
            let sleep = sleep_until(self.core.poll_timeout().map(Instant::from_std));
            let renew =
                sleep_until(self.lease.as_ref().and_then(crate::lease::LeaseRuntime::next_renewal));
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    None | Some(Command::Stop) => break Termination::Stopped,
                    Some(cmd) => self.command(cmd),
                },
                Some(inb) = self.inbound.recv() => {
                    let now = Instant::now().into_std();
                    if let convoke_membership::Message::HeartbeatRsp { creation_time_nanos, .. } = &inb.message {
                        self.record_round_trip(now, *creation_time_nanos);
                    }
                    self.core.handle_queued_message(now, inb.received_at.into_std(), inb.from, inb.message);
                }
                () = sleep => self.core.handle_timeout(Instant::now().into_std()),
                () = renew => {
                    if let Some(lease) = &mut self.lease {
                        lease.renew();
                    }
                }
            }
            self.drain();
            if let Some(reason) = self.core.shutdown_reason() {
                break Termination::Core(reason.clone());
            }
        };
        match &termination {
            Termination::Core(ShutdownReason::Left) => tracing::info!("left the cluster"),
            Termination::Core(reason) => tracing::warn!(%reason, "cluster node shutting down"),
            Termination::Stopped => tracing::info!("cluster node stopped"),
        }
        if let Some(lease) = &mut self.lease {
            lease.release_on_stop().await;
        }
        self.transport.shutdown(Duration::from_secs(2)).await;
        self.terminated.send_replace(Some(termination));
    }

    fn record_round_trip(&self, now: std::time::Instant, creation_time_nanos: i64) {
        let Ok(nanos) = u64::try_from(creation_time_nanos) else { return };
        let sent = self.core_started + Duration::from_nanos(nanos);
        if let Some(rtt) = now.checked_duration_since(sent) {
            self.metrics.heartbeat_rtt.observe(rtt.as_secs_f64());
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now().into_std();
        match cmd {
            Command::JoinSeedNodes(seeds, reply) => {
                let _ = reply.send(self.core.join_seed_nodes(now, seeds));
            }
            Command::Join(address, reply) => {
                let _ = reply.send(self.core.join(now, address));
            }
            Command::Leave(address) => self.core.leave(now, &address),
            Command::Down(address) => self.core.down(now, &address),
            Command::PrepareForFullShutdown => self.core.prepare_for_full_shutdown(now),
            Command::Subscribe(reply) => {
                let _ = reply.send((self.core.initial_events(), self.events.subscribe()));
            }
            Command::Ping(reply) => {
                let _ = reply.send(());
            }
            Command::LeaseResult(answer) => {
                let answered = self.lease.as_mut().and_then(|l| l.answered(answer, Instant::now()));
                if let Some((op, granted)) = answered {
                    self.core.handle_lease_result(now, op, granted);
                }
            }
            Command::Stop => {}
        }
    }

    fn drain(&mut self) {
        // Every request is answered exactly once: a check at once, an acquire or release when the
        // lease worker reports back. Without a lease (a core built by hand with lease-majority)
        // the request is refused, so the resolver falls back to its reverse decision instead of
        // waiting forever.
        while let Some(req) = self.core.poll_lease_request() {
            let answer = match &mut self.lease {
                Some(lease) => lease.request(&req),
                None => {
                    tracing::warn!(lease = %req.lease_name, "no lease in this runtime; refusing the lease request");
                    Some(false)
                }
            };
            if let Some(granted) = answer {
                self.core.handle_lease_result(Instant::now().into_std(), req.op, granted);
            }
        }
        while let Some(decision) = self.core.poll_downing_decision() {
            if decision.nodes.is_empty() {
                tracing::debug!(%decision, "split-brain resolver decision (nothing to down)");
            } else {
                tracing::warn!(%decision, "split-brain resolver decision");
            }
        }
        while let Some(t) = self.core.poll_transmit() {
            self.transport.send(&t.to, t.message);
        }
        let mut changed = false;
        while let Some(e) = self.core.poll_event() {
            log_event(&e);
            changed = true;
            let _ = self.events.send(e);
        }
        let current = self.snapshots.borrow().gossip.clone();
        if changed || !Arc::ptr_eq(&current, self.core.gossip()) {
            self.snapshots.send_replace(snapshot(&self.core));
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn log_event(e: &ClusterEvent) {
    match e.member() {
        Some(m) => tracing::info!(
            event = e.type_name(),
            member = %m.address(),
            status = %m.status(),
            "membership change: {} {}",
            e.type_name(),
            m.address()
        ),
        None => match e {
            ClusterEvent::LeaderChanged(l) => {
                tracing::info!(event = e.type_name(), leader = ?l.as_ref().map(ToString::to_string), "leader changed");
            }
            _ => tracing::debug!(event = e.type_name(), "{e:?}"),
        },
    }
}
