//! Outbound streams: one bounded queue and one writer task per (peer address, stream kind).
//!
//! The task connects when there is something to send, writes the handshake, then writes queued
//! messages as frames, batching whatever is queued into one flush. It watches the read half of
//! its socket: the peer never writes on a connection it accepted, so any read result means the
//! connection is gone (closed, reset, or a peer breaking the protocol).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use bytes::Bytes;
use convoke_membership::wire;
use convoke_membership::{Address, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shared;
use super::frame::{LENGTH_PREFIX_BYTES, append_frame, write_frame};
use super::handshake::{MAX_HANDSHAKE_BYTES, StreamKind};
use super::stats::{self, Counters, inc};
use super::tls::Io;

/// The most heartbeats queued for one peer.
pub(super) const CONTROL_QUEUE_LIMIT: usize = 64;
/// An ordinary or application connection with nothing to send for this long is closed (sooner if
/// half of `idle_timeout` is shorter). Gossip goes to a random member each round, so at a few
/// dozen members a connection kept for a longer while is seldom used again, and every open one
/// costs a socket at both ends: at 250 members a node would hold hundreds of idle connections.
const IDLE_CLOSE: Duration = Duration::from_secs(5);

/// Frames queued together are written together, up to this many bytes per write; a larger frame
/// is written on its own, without a copy.
const GATHER_BYTES: usize = 64 * 1024;

/// The first reconnection delay (before jitter).
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The smallest reconnection delay, whatever the settings say: no busy reconnect loop.
const MIN_BACKOFF: Duration = Duration::from_millis(5);

/// The outbound queues to one peer address.
#[derive(Debug, Default)]
pub(super) struct PeerLanes {
    ordinary: Option<Arc<Lane>>,
    control: Option<Arc<Lane>>,
    application: Option<Arc<Lane>>,
}

impl PeerLanes {
    pub(super) fn get_mut(&mut self, stream: StreamKind) -> &mut Option<Arc<Lane>> {
        match stream {
            StreamKind::Ordinary => &mut self.ordinary,
            StreamKind::Control => &mut self.control,
            StreamKind::Application => &mut self.application,
        }
    }

    fn is_empty(&self) -> bool {
        self.ordinary.is_none() && self.control.is_none() && self.application.is_none()
    }

    /// Drops every open connection of these lanes, which then reconnect: the peer restarted
    /// (see `Shared::introduced`).
    pub(super) fn peer_replaced(&self) {
        for lane in [&self.ordinary, &self.control, &self.application].into_iter().flatten() {
            lane.replaced.notify_waiters();
        }
    }
}

/// One queued frame: a membership message, encoded when written, or an application payload,
/// already encoded by the messaging layer.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outgoing {
    Cluster(Message),
    Application(Bytes),
}

impl Outgoing {
    fn is_heartbeat(&self) -> bool {
        matches!(self, Self::Cluster(m) if m.is_heartbeat())
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Cluster(m) => m.kind(),
            Self::Application(_) => super::APPLICATION_KIND,
        }
    }

    fn encode(self, encoder: &wire::GossipEncoder) -> Bytes {
        match self {
            Self::Cluster(m) => Bytes::from(encoder.encode_on_connection(&m)),
            Self::Application(payload) => payload,
        }
    }

    /// Whether `newer`, queued after this message, makes it worthless: a gossip is the whole
    /// state, so a newer gossip to the same incarnation supersedes an older one, and a newer
    /// gossip status an older status.
    fn superseded_by(&self, newer: &Outgoing) -> bool {
        match (self, newer) {
            (
                Self::Cluster(Message::Gossip { to: old, .. }),
                Self::Cluster(Message::Gossip { to: new, .. }),
            ) => old == new,
            (
                Self::Cluster(Message::GossipStatus { .. }),
                Self::Cluster(Message::GossipStatus { .. }),
            ) => true,
            _ => false,
        }
    }
}

/// One stream's queue to one peer.
#[derive(Debug)]
pub(super) struct Lane {
    peer: Address,
    stream: StreamKind,
    capacity: usize,
    queue: Mutex<Queue>,
    /// Wakes the lane's task; it is the only waiter.
    notify: Notify,
    /// Tells a connected task that the peer restarted (see [`PeerLanes::peer_replaced`]); wakes only
    /// a task that is connected, so a later connection is not dropped for an old restart.
    replaced: Notify,
}

#[derive(Debug)]
struct Queue {
    messages: VecDeque<Outgoing>,
    /// When a message was last queued: a peer nobody talks to any more is given up.
    last_push: Instant,
    /// Whether drops have been logged at WARN since the queue was last empty.
    dropping: bool,
}

impl Lane {
    pub(super) fn new(peer: Address, stream: StreamKind, capacity: usize) -> Self {
        let queue = Queue { messages: VecDeque::new(), last_push: Instant::now(), dropping: false };
        Self {
            peer,
            stream,
            capacity: capacity.max(1),
            queue: Mutex::new(queue),
            notify: Notify::new(),
            replaced: Notify::new(),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `message` unless the queue is full: the application stream refuses what does not
    /// fit (its sender is told and decides), so a payload is never dropped silently.
    pub(super) fn try_push(&self, message: Outgoing) -> bool {
        let mut q = self.queue();
        if q.messages.len() >= self.capacity {
            return false;
        }
        q.messages.push_back(message);
        q.last_push = Instant::now();
        drop(q);
        self.notify.notify_one();
        true
    }

    /// Queues `message`. A queued message it supersedes (an older gossip or gossip status) is
    /// replaced in place, so a peer that cannot keep up, or cannot be reached, holds at most one
    /// gossip per incarnation however long it lasts. When full, first drops the oldest
    /// non-heartbeat message (the oldest message when all are heartbeats).
    pub(super) fn push(&self, counters: &Counters, message: Outgoing) {
        let mut q = self.queue();
        // Only a gossip or a status can supersede: heartbeats and the rest skip the scan.
        let supersedes = matches!(
            &message,
            Outgoing::Cluster(Message::Gossip { .. } | Message::GossipStatus { .. })
        );
        if supersedes && let Some(old) = q.messages.iter_mut().find(|m| m.superseded_by(&message)) {
            *old = message;
            q.last_push = Instant::now();
            drop(q);
            inc(&counters.superseded_outbound);
            self.notify.notify_one();
            return;
        }
        if q.messages.len() >= self.capacity {
            let victim = q.messages.iter().position(|m| !m.is_heartbeat()).unwrap_or(0);
            if let Some(dropped) = q.messages.remove(victim) {
                inc(&counters.dropped_outbound);
                if q.dropping {
                    tracing::debug!(peer = %self.peer, kind = dropped.kind(), "outbound queue full; dropped the oldest message");
                } else {
                    q.dropping = true;
                    tracing::warn!(
                        peer = %self.peer,
                        stream = self.stream.as_str(),
                        capacity = self.capacity,
                        kind = dropped.kind(),
                        "outbound queue full; dropping the oldest messages"
                    );
                }
            }
        }
        q.messages.push_back(message);
        q.last_push = Instant::now();
        drop(q);
        self.notify.notify_one();
    }

    fn pop(&self) -> Option<Outgoing> {
        let mut q = self.queue();
        let message = q.messages.pop_front();
        if q.messages.is_empty() {
            q.dropping = false;
            // Most lanes carry a message now and then: an empty queue gives its room back
            // rather than hold it (a few hundred bytes per lane) until the lane ends.
            q.messages = VecDeque::new();
        }
        message
    }

    fn is_empty(&self) -> bool {
        self.queue().messages.is_empty()
    }

    fn idle_for(&self) -> Duration {
        self.queue().last_push.elapsed()
    }

    /// Empties the queue, counting what it held as dropped.
    fn clear(&self, counters: &Counters) -> usize {
        let n = std::mem::take(&mut self.queue().messages).len();
        counters.dropped_outbound.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        n
    }
}

/// Removes `lane` from the map if `force` or its queue is empty; a send then starts a new lane.
/// Both happen under the map lock, so no message is queued on a lane whose task has ended.
fn retire(shared: &Shared, lane: &Arc<Lane>, force: bool) -> bool {
    let mut lanes = shared.lanes.lock().unwrap_or_else(PoisonError::into_inner);
    if !force && !lane.is_empty() {
        return false;
    }
    let dropped = lane.clear(&shared.counters);
    if let Some(peer) = lanes.get_mut(&lane.peer) {
        let slot = peer.get_mut(lane.stream);
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, lane)) {
            *slot = None;
        }
        if peer.is_empty() {
            lanes.remove(&lane.peer);
        }
    }
    if dropped > 0 {
        tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), dropped, "gave up on an unreachable peer");
    }
    true
}

/// How a connection ended.
enum End {
    /// The transport is shutting down and the queue was flushed.
    Stopped,
    /// Nothing to send for a while; closed cleanly.
    Idle,
    /// Another incarnation of the peer introduced itself: dropped, to reconnect at once.
    Replaced,
    /// Closed by the peer or by an error.
    Failed(String),
}

/// The lane's task: wait for messages, connect, write, reconnect with backoff.
pub(super) async fn run(shared: Arc<Shared>, lane: Arc<Lane>) {
    let max_backoff = shared.settings.max_reconnect_backoff;
    let mut backoff = Backoff::new(max_backoff);
    let mut failures = 0u32;
    loop {
        if !wait_for_work(&shared, &lane).await {
            return;
        }
        let connected = tokio::select! {
            biased;
            () = shared.closed.cancelled() => return,
            // Boxed, as is the writer below: each is large and lives only while it runs, so a
            // lane waiting for work holds neither.
            r = Box::pin(connect(&shared, &lane.peer)) => r,
        };
        let delay = match connected {
            Ok(socket) => {
                failures = 0;
                let opened = Instant::now();
                let end = tokio::select! {
                    biased;
                    () = shared.closed.cancelled() => return,
                    () = lane.replaced.notified() => End::Replaced,
                    end = Box::pin(write(&shared, &lane, socket)) => end,
                };
                match end {
                    End::Stopped => return,
                    End::Idle => {
                        tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), "closed an idle connection");
                        // Nothing to send: the lane goes too (a send starts a new one), so that
                        // a node holds lanes only to the peers it talks to now.
                        if retire(&shared, &lane, false) {
                            return;
                        }
                        continue;
                    }
                    End::Replaced => {
                        tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), "dropped a connection to an earlier incarnation");
                        continue;
                    }
                    End::Failed(reason) => {
                        tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), %reason, "outbound connection closed");
                    }
                }
                if opened.elapsed() >= max_backoff {
                    backoff.reset();
                    continue;
                }
                backoff.next()
            }
            Err(e) => {
                inc(&shared.counters.connect_failures);
                failures += 1;
                if failures == 1 {
                    tracing::warn!(peer = %lane.peer, stream = lane.stream.as_str(), error = %e, "cannot connect; retrying with backoff");
                } else {
                    tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), error = %e, failures, "cannot connect");
                }
                if shared.stopping.is_cancelled() || lane.idle_for() >= shared.settings.idle_timeout
                {
                    // Shutting down, or nobody has had anything new for this peer for a while.
                    retire(&shared, &lane, true);
                    return;
                }
                backoff.next()
            }
        };
        tokio::select! {
            biased;
            () = shared.closed.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Waits until the lane has messages: `false` when the transport is stopping or the lane was
/// retired after `idle_timeout` without any.
async fn wait_for_work(shared: &Shared, lane: &Arc<Lane>) -> bool {
    loop {
        if !lane.is_empty() {
            return true;
        }
        if shared.stopping.is_cancelled() {
            return false;
        }
        tokio::select! {
            biased;
            () = shared.stopping.cancelled() => {}
            () = lane.notify.notified() => {}
            () = tokio::time::sleep(shared.settings.idle_timeout) => {
                if retire(shared, lane, false) {
                    return false;
                }
            }
        }
    }
}

/// Resolves `peer` and tries each address in turn, then runs the TLS handshake when TLS is on,
/// all within `connect_timeout`.
async fn connect(shared: &Shared, peer: &Address) -> io::Result<Io> {
    let attempt = async {
        let mut last = None;
        for addr in tokio::net::lookup_host(peer.host_port()).await? {
            match TcpStream::connect(addr).await {
                Ok(socket) => {
                    // Heartbeats and small gossip must not wait for Nagle's algorithm.
                    let _ = socket.set_nodelay(true);
                    return match &shared.tls {
                        None => Ok(Box::new(socket) as Io),
                        Some(tls) => tls.connect(socket, &shared.counters).await,
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the host resolved to no address")
        }))
    };
    let timeout = shared.settings.connect_timeout;
    tokio::time::timeout(timeout, attempt).await.unwrap_or_else(|_| {
        Err(io::Error::new(io::ErrorKind::TimedOut, format!("no connection within {timeout:?}")))
    })
}

/// Sends the handshake, then queued messages until the connection ends.
async fn write(shared: &Shared, lane: &Lane, socket: Io) -> End {
    let (mut read_half, mut write_half) = tokio::io::split(socket);
    let max_frame_size = shared.settings.max_frame_size;
    let handshake = match shared.handshake(lane.stream) {
        Ok(h) => h.clone(),
        Err(e) => {
            lane.clear(&shared.counters);
            return End::Failed(format!("cannot encode the handshake: {e}"));
        }
    };
    if let Err(e) = write_frame(&mut write_half, &handshake, MAX_HANDSHAKE_BYTES).await {
        return End::Failed(e.to_string());
    }
    let _open = stats::open(&shared.counters.open_outbound);
    tracing::debug!(peer = %lane.peer, stream = lane.stream.as_str(), "connected");
    // Close before the peer's idle timeout can cut the connection during a write; heartbeats
    // keep a control connection busy, the others close sooner (see `IDLE_CLOSE`).
    let idle = match lane.stream {
        StreamKind::Control => shared.settings.idle_timeout / 2,
        StreamKind::Ordinary | StreamKind::Application => {
            (shared.settings.idle_timeout / 2).min(IDLE_CLOSE)
        }
    };
    let mut probe = [0u8; 1];
    loop {
        // What is queued goes out in as few writes as it can: small frames are gathered into
        // one buffer of up to `GATHER_BYTES`, so a burst costs a system call, not one per frame.
        let mut gathered = Vec::new();
        while let Some(message) = lane.pop() {
            let kind = message.kind();
            let payload = message.encode(&shared.encoder);
            if payload.len() > max_frame_size {
                inc(&shared.counters.oversized_outbound);
                tracing::warn!(
                    peer = %lane.peer,
                    kind,
                    bytes = payload.len(),
                    max_frame_size,
                    "not sending a message larger than max_frame_size"
                );
                continue;
            }
            let framed = LENGTH_PREFIX_BYTES + payload.len();
            shared.counters.sent(kind, framed);
            if gathered.len() + framed > GATHER_BYTES && !gathered.is_empty() {
                if let Err(e) = write_half.write_all(&gathered).await {
                    return End::Failed(e.to_string());
                }
                gathered.clear();
            }
            let written = if framed > GATHER_BYTES {
                write_frame(&mut write_half, &payload, max_frame_size).await
            } else {
                append_frame(&mut gathered, &payload, max_frame_size)
            };
            if let Err(e) = written {
                return End::Failed(e.to_string());
            }
        }
        if !gathered.is_empty()
            && let Err(e) = write_half.write_all(&gathered).await
        {
            return End::Failed(e.to_string());
        }
        if let Err(e) = write_half.flush().await {
            return End::Failed(e.to_string());
        }
        if shared.stopping.is_cancelled() {
            let _ = write_half.shutdown().await;
            return End::Stopped;
        }
        // Short of descriptors (many nodes in one process, or a low limit): an ordinary
        // connection is given back as soon as it is drained. Heartbeats keep theirs, and
        // application frames keep their order (a new connection has a new reader at the peer,
        // which could overtake the old one).
        if lane.stream == StreamKind::Ordinary && lane.is_empty() && stats::crowded() {
            inc(&shared.counters.closed_crowded);
            let _ = write_half.shutdown().await;
            return End::Idle;
        }
        tokio::select! {
            biased;
            () = shared.stopping.cancelled() => {}
            () = lane.notify.notified() => {}
            r = read_half.read(&mut probe) => {
                if let (Err(e), Some(tls)) = (&r, &shared.tls) {
                    tls.note_closed(&lane.peer.to_string(), e);
                }
                return End::Failed(match r {
                    Ok(0) => "closed by the peer".to_owned(),
                    Ok(_) => "the peer wrote on a send-only connection".to_owned(),
                    Err(e) => e.to_string(),
                });
            }
            () = tokio::time::sleep(idle) => {
                if lane.is_empty() {
                    let _ = write_half.shutdown().await;
                    return End::Idle;
                }
            }
        }
    }
}

/// Capped exponential backoff with jitter, from backon: each delay is drawn from `[d, 2d)` with
/// `d` doubling from 100 ms up to half the cap, so no delay exceeds the cap.
struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Self {
        let half = (max / 2).max(MIN_BACKOFF);
        let builder = ExponentialBuilder::new()
            .with_min_delay(INITIAL_BACKOFF.min(half))
            .with_max_delay(half)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self { delays: builder.build(), builder, max }
    }

    fn next(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.max)
    }

    fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoke_membership::{Uid, UniqueAddress};

    fn address() -> Address {
        "convoke://s@127.0.0.1:1".parse().unwrap()
    }

    fn join(n: u64) -> Message {
        Message::ExitingConfirmed { node: UniqueAddress::new(address(), Uid::new(n).unwrap()) }
    }

    fn heartbeat(n: u64) -> Message {
        Message::Heartbeat {
            from: UniqueAddress::new(address(), Uid::new(1).unwrap()),
            sequence_nr: n,
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_non_heartbeat_message() {
        let counters = Counters::default();
        let lane = Lane::new(address(), StreamKind::Ordinary, 3);
        for m in [heartbeat(1), join(1), join(2), join(3), join(4)] {
            lane.push(&counters, Outgoing::Cluster(m));
        }
        let left: Vec<Outgoing> = std::iter::from_fn(|| lane.pop()).collect();
        let left: Vec<Message> = left.into_iter().map(cluster).collect();
        assert_eq!(left, [heartbeat(1), join(3), join(4)]);
        assert_eq!(counters.snapshot().dropped_outbound, 2);
    }

    #[test]
    fn a_newer_gossip_or_status_replaces_the_queued_one_in_place() {
        use convoke_membership::gossip::Gossip;
        use convoke_membership::vclock::VectorClock;
        let counters = Counters::default();
        let lane = Lane::new(address(), StreamKind::Ordinary, 1024);
        let node = |n| UniqueAddress::new(address(), Uid::new(n).unwrap());
        let versions: Vec<Arc<Gossip>> = (0..=100).map(|_| Arc::new(Gossip::empty())).collect();
        let gossip = |to: u64, v: usize| Message::Gossip {
            from: node(1),
            to: node(to),
            gossip: versions[v].clone(),
        };
        let status = |v: u8| Message::GossipStatus {
            from: node(1),
            version: VectorClock::new(),
            seen_digest: vec![v],
        };
        // A peer that cannot be reached while a hundred versions are made holds the last one.
        lane.push(&counters, Outgoing::Cluster(join(7)));
        for v in 1..=100usize {
            lane.push(&counters, Outgoing::Cluster(gossip(2, v)));
            lane.push(&counters, Outgoing::Cluster(status(v as u8)));
        }
        // Another incarnation at the same address is not superseded by it.
        lane.push(&counters, Outgoing::Cluster(gossip(3, 1)));
        let left: Vec<Message> = std::iter::from_fn(|| lane.pop()).map(cluster).collect();
        assert_eq!(left.len(), 4, "{left:?}");
        assert_eq!(left[0], join(7));
        assert!(
            matches!(&left[1], Message::Gossip { to, gossip, .. }
            if to == &node(2) && Arc::ptr_eq(gossip, &versions[100])),
            "{:?}",
            left[1]
        );
        assert_eq!(left[2], status(100));
        assert!(matches!(&left[3], Message::Gossip { to, .. } if to == &node(3)));
        let stats = counters.snapshot();
        assert_eq!((stats.superseded_outbound, stats.dropped_outbound), (198, 0));
    }

    #[test]
    fn a_queue_of_heartbeats_drops_the_oldest_heartbeat() {
        let counters = Counters::default();
        let lane = Lane::new(address(), StreamKind::Control, 2);
        for n in 1..=4 {
            lane.push(&counters, Outgoing::Cluster(heartbeat(n)));
        }
        let left: Vec<Message> = std::iter::from_fn(|| lane.pop()).map(cluster).collect();
        assert_eq!(left, [heartbeat(3), heartbeat(4)]);
        assert_eq!(counters.snapshot().dropped_outbound, 2);
    }

    fn cluster(o: Outgoing) -> Message {
        match o {
            Outgoing::Cluster(m) => m,
            Outgoing::Application(_) => panic!("an application payload on a cluster lane"),
        }
    }

    #[test]
    fn a_full_application_queue_refuses_the_newest_payload_and_keeps_the_rest() {
        let lane = Lane::new(address(), StreamKind::Application, 2);
        let payload = |n: u8| Outgoing::Application(Bytes::from(vec![n]));
        assert!(lane.try_push(payload(1)));
        assert!(lane.try_push(payload(2)));
        assert!(!lane.try_push(payload(3)));
        let left: Vec<Outgoing> = std::iter::from_fn(|| lane.pop()).collect();
        assert_eq!(left, [payload(1), payload(2)]);
    }

    #[test]
    fn backoff_grows_and_never_exceeds_the_cap() {
        let max = Duration::from_secs(5);
        let mut b = Backoff::new(max);
        let delays: Vec<Duration> = (0..20).map(|_| b.next()).collect();
        assert!(delays[0] >= INITIAL_BACKOFF && delays[0] < 2 * INITIAL_BACKOFF, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= max), "{delays:?}");
        assert!(delays[19] >= max / 2, "{delays:?}");
        b.reset();
        assert!(b.next() < 2 * INITIAL_BACKOFF);
    }
}
