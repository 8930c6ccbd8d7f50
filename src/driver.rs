//! The driver task: the one owner of the membership core. Inbound messages, commands, lease
//! answers and timers go in; transmits go to the transport, events to a broadcast channel,
//! snapshots to a `watch`. [`spawn`] starts it and returns its [`Control`].

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convoke_membership::gossip::WallMillis;
use convoke_membership::{Cluster, ClusterEvent, ShutdownReason};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::control::{Command, Control, Snapshot, Termination};
use crate::lease::LeaseRuntime;
use crate::metrics::Metrics;
use crate::transport::{Inbound, Transport};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;
/// How many commands may wait for the driver.
const COMMAND_BUFFER: usize = 256;

/// The network side of a driver: where transmits go and where inbound messages come from. A
/// driver without one (router tests) runs a core that can only form a cluster of itself.
#[derive(Debug)]
pub(crate) struct Network {
    pub(crate) transport: Transport,
    pub(crate) inbound: mpsc::Receiver<Inbound>,
}

struct Driver {
    core: Cluster,
    /// When the latest heartbeat ticks were sent, to measure round trips by sequence number.
    heartbeats_sent: HeartbeatsSent,
    metrics: Metrics,
    commands: mpsc::Receiver<Command>,
    network: Option<Network>,
    /// Created by the first subscription: until someone listens, events go nowhere, and the
    /// channel's buffer (`EVENT_BUFFER` slots) is not worth holding (`docs/benchmarks.md`,
    /// "Memory per node"). A subscription starts from the current state, so nothing is missed.
    events: Option<broadcast::Sender<ClusterEvent>>,
    snapshots: watch::Sender<Arc<Snapshot>>,
    terminated: watch::Sender<Option<Termination>>,
    /// The lease of the lease-majority strategy, when it is active.
    lease: Option<LeaseRuntime>,
}

/// Starts the driver task for `core` and returns its control.
pub(crate) fn spawn(
    core: Cluster,
    network: Option<Network>,
    lease: Option<LeaseRuntime>,
    metrics: Metrics,
) -> Control {
    let (commands_tx, commands) = mpsc::channel(COMMAND_BUFFER);
    let (snapshots_tx, snapshots) = watch::channel(snapshot(&core));
    let (terminated_tx, terminated) = watch::channel(None);
    let driver = Driver {
        core,
        heartbeats_sent: HeartbeatsSent::default(),
        metrics,
        commands,
        network,
        events: None,
        snapshots: snapshots_tx,
        terminated: terminated_tx,
        lease,
    };
    tokio::spawn(driver.run());
    Control::new(commands_tx, snapshots, terminated)
}

/// The wall-clock time, for tombstone ages.
pub(crate) fn wall_clock() -> WallMillis {
    WallMillis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

fn snapshot(core: &Cluster) -> Arc<Snapshot> {
    Arc::new(Snapshot { state: core.state(), gossip: core.gossip().clone() })
}

/// The next inbound message, or never without a network.
async fn next_inbound(network: &mut Option<Network>) -> Option<Inbound> {
    match network {
        Some(n) => n.inbound.recv().await,
        None => std::future::pending().await,
    }
}

/// The lease worker's next answer, or never without a lease.
async fn next_lease_answer(lease: &mut Option<LeaseRuntime>) -> Option<crate::lease::LeaseAnswer> {
    match lease {
        Some(l) => l.answer().await,
        None => std::future::pending().await,
    }
}

impl Driver {
    pub(crate) async fn run(mut self) {
        if let Some(lease) = &mut self.lease {
            lease.start();
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
                Some(inb) = next_inbound(&mut self.network) => {
                    let now = Instant::now().into_std();
                    if let convoke_membership::Message::HeartbeatRsp { sequence_nr, .. } = &inb.message {
                        self.record_round_trip(now, *sequence_nr);
                    }
                    self.core.handle_queued_message(now, inb.received_at.into_std(), inb.from, inb.message);
                }
                () = sleep => self.core.handle_timeout(Instant::now().into_std()),
                Some(answer) = next_lease_answer(&mut self.lease) => {
                    let answered = self.lease.as_mut().and_then(|l| l.answered(answer, Instant::now()));
                    if let Some((op, granted)) = answered {
                        self.core.handle_lease_result(Instant::now().into_std(), op, granted);
                    }
                }
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
            Termination::Core(reason @ ShutdownReason::JoinUnsuccessful) => {
                let after = self.core.config().shutdown_after_unsuccessful_join_seed_nodes;
                tracing::error!(%reason, after = ?after.unwrap_or_default(), "cluster node shutting down: no seed node admitted it in time (convoke run then exits 1, so that the pod is restarted)");
            }
            Termination::Core(reason) => tracing::warn!(%reason, "cluster node shutting down"),
            Termination::Stopped => tracing::info!("cluster node stopped"),
        }
        // The last event subscribers see before their streams end.
        self.emit(ClusterEvent::ClusterShuttingDown);
        if let Some(lease) = &mut self.lease {
            lease.release_on_stop().await;
        }
        if let Some(network) = &self.network {
            network.transport.shutdown(Duration::from_secs(2)).await;
        }
        self.terminated.send_replace(Some(termination));
    }

    /// Hands `e` to the subscribers, if anyone has subscribed yet.
    fn emit(&self, e: ClusterEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(e);
        }
    }

    fn record_round_trip(&self, now: std::time::Instant, sequence_nr: u64) {
        if let Some(rtt) =
            self.heartbeats_sent.sent_at(sequence_nr).and_then(|s| now.checked_duration_since(s))
        {
            self.metrics.recorded().heartbeat_rtt.observe(rtt.as_secs_f64());
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
                let events = self.events.get_or_insert_with(|| broadcast::channel(EVENT_BUFFER).0);
                let _ = reply.send((self.core.initial_events(), events.subscribe()));
            }
            Command::Ping(reply) => {
                let _ = reply.send(());
            }
            Command::Phi(reply) => {
                let _ = reply.send(self.core.monitored_phi(now));
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
            self.metrics.record_decision(&decision);
            if decision.nodes.is_empty() {
                tracing::debug!(%decision, "split-brain resolver decision (nothing to down)");
            } else {
                tracing::warn!(%decision, "split-brain resolver decision");
            }
        }
        while let Some(t) = self.core.poll_transmit() {
            if let convoke_membership::Message::Heartbeat { sequence_nr, .. } = &t.message {
                self.heartbeats_sent.sent(*sequence_nr, std::time::Instant::now());
            }
            if let Some(network) = &self.network {
                network.transport.send(&t.to, t.message);
            }
        }
        let mut changed = false;
        while let Some(e) = self.core.poll_event() {
            log_event(&e);
            changed = true;
            self.emit(e);
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

/// The send times of the latest heartbeat ticks. A tick sends one sequence number to every
/// monitored member; an answer to a tick older than the latest [`HeartbeatsSent::KEPT`] is not
/// measured.
#[derive(Debug, Default)]
struct HeartbeatsSent {
    ticks: std::collections::VecDeque<(u64, std::time::Instant)>,
}

impl HeartbeatsSent {
    const KEPT: usize = 16;

    /// Notes a heartbeat of `sequence_nr` sent at `at`; the first send of a tick counts.
    fn sent(&mut self, sequence_nr: u64, at: std::time::Instant) {
        if self.ticks.back().is_some_and(|&(last, _)| last >= sequence_nr) {
            return;
        }
        if self.ticks.len() == Self::KEPT {
            self.ticks.pop_front();
        }
        self.ticks.push_back((sequence_nr, at));
    }

    /// When the tick of `sequence_nr` was sent, if it is among the latest kept.
    fn sent_at(&self, sequence_nr: u64) -> Option<std::time::Instant> {
        self.ticks.iter().find(|&&(s, _)| s == sequence_nr).map(|&(_, at)| at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::HeartbeatsSent;

    #[test]
    fn a_round_trip_is_timed_from_the_first_send_of_its_tick_while_the_tick_is_kept() {
        let t = Instant::now();
        let mut sent = HeartbeatsSent::default();
        sent.sent(1, t);
        sent.sent(1, t + Duration::from_millis(5));
        assert_eq!(sent.sent_at(1), Some(t), "the tick's first send");
        assert_eq!(sent.sent_at(2), None, "a tick not sent");
        for seq in 2..=HeartbeatsSent::KEPT as u64 + 1 {
            sent.sent(seq, t + Duration::from_secs(seq));
        }
        assert_eq!(sent.sent_at(1), None, "older than the kept ticks");
        assert_eq!(sent.sent_at(2), Some(t + Duration::from_secs(2)));
        // A sequence number at or below the latest is not a new tick.
        sent.sent(3, t + Duration::from_secs(100));
        assert_eq!(sent.sent_at(3), Some(t + Duration::from_secs(3)));
    }
}
