//! The TCP transport: carries the membership core's [`Message`]s between nodes.
//!
//! # Frames
//!
//! A connection is a sequence of frames: a `u32` big-endian payload length, then the payload
//! ([`frame`]). The first frame is a [handshake]; every later frame is one message
//! encoded by [`convoke_membership::wire::encode`].
//!
//! # Handshake
//!
//! The dialling node opens each connection with a handshake naming its unique address (system,
//! host, port, uid), the wire [protocol version](convoke_membership::wire::PROTOCOL_VERSION) and
//! the stream kind; the layout is in [`handshake`]. The accepting node checks the magic, the
//! version and the system name; a mismatch closes the connection with a WARN line naming the
//! peer's socket address and the mismatch. Nothing is sent back. Every message on the connection
//! is then delivered as coming from the handshake's unique address ([`Inbound::from`]).
//!
//! # Connection model
//!
//! Connections are one-way, as in Akka Artery: a node sends only on connections it dialled and
//! only reads connections it accepted. Two nodes talking both ways therefore use two connections
//! per stream kind, one dialled by each.
//!
//! For each peer address a node dials up to three connections, each fed by its own bounded queue
//! and written by its own task:
//! - the **control** stream carries heartbeats and heartbeat responses only;
//! - the **ordinary** stream carries everything else (join handshake, gossip, status, ...);
//! - the **application** stream carries the messaging layer's frames (asks, tells, replies;
//!   `docs/messaging.md`). Its frames are opaque here: they skip the driver and go, undecoded, to
//!   the channel of [`Transport::application_inbound`]. Saturating it cannot delay a heartbeat,
//!   which has its own connection, nor gossip, which has another.
//!
//! Why two connections rather than one with a priority queue: a priority queue only reorders
//! frames that have not been written yet. A multi-megabyte gossip frame already handed to the
//! socket still sits in the kernel send buffer, on the wire and in the peer's receive buffer
//! ahead of any heartbeat written after it, and a peer that reads its ordinary connection
//! slowly stalls it entirely. A separate TCP connection has its own buffers and flow control, so
//! a heartbeat is never behind gossip bytes anywhere between the two cores. On the receiving side
//! each connection has its own reader task, and delivery to the driver gives the control stream
//! priority: readers hand messages to a small control queue or an ordinary queue, and one task
//! moves them into the driver's channel, always taking a waiting heartbeat first. So a heartbeat
//! waits behind at most the few messages already in the driver's channel, never behind a backlog
//! of gossip.
//!
//! An outbound stream connects when its first message is queued, and after a failure or a close
//! reconnects with capped exponential backoff with jitter: the `n`-th wait is drawn from
//! `[d, 2d)` with `d = min(100 ms · 2ⁿ, max_reconnect_backoff / 2)`, so it never exceeds
//! `max_reconnect_backoff`; the backoff starts over once a connection has stayed up for
//! `max_reconnect_backoff`. Host names are resolved on every attempt with
//! [`tokio::net::lookup_host`] and each resolved address is tried in turn. A stream with nothing
//! to send closes its connection before the peer's idle timeout could cut it in the middle of a
//! write: a control stream after half of `idle_timeout`, an ordinary or application stream after
//! 5 s or that, whichever is shorter (gossip picks a random member each round, so an idle
//! connection is seldom reused, and each open one holds a socket at both ends). Its queue and
//! task end with that connection (the next message starts new ones), or after `idle_timeout`
//! when nothing was ever sent. A connection end holds no buffer between frames
//! ([`frame::FrameReader`], [`frame::write_frame`]), so what an open connection costs a node is
//! its socket and its task. Sockets are a resource of the process, shared by every node it runs:
//! while the connections of all transports in the process hold half of its file-descriptor
//! limit (the soft `RLIMIT_NOFILE`) or more, an ordinary connection closes as soon as its queue
//! is drained (counted in [`TransportStats::closed_crowded`]), so a process running many
//! nodes, or one with a low limit, keeps descriptors for heartbeats and new connections instead
//! of running out of them (see `docs/benchmarks.md`, "250 nodes in one process, again").
//! Control connections are kept, and application connections too: a frame sent on a new
//! connection has a new reader at the peer, which could deliver it before the frames still
//! read from the old one. Ordinary messages do not rely on their order (a gossip is the whole
//! state, the join handshake is retried).
//! When a peer stays unreachable and nothing new has been queued for it for `idle_timeout`, the
//! queue is dropped and counted.
//!
//! A peer that restarts at the same address introduces itself with a new uid on its first
//! connection to this node. The connections this node has open to that address are then dropped
//! and made again (counted in [`TransportStats::peer_restarts`]): they may lead to the old
//! process, and a host that vanished without closing its sockets (cut off the network, powered
//! off) leaves them looking open until TCP gives up on unacknowledged data, seconds to minutes
//! in which every heartbeat and gossip written to them is lost while the new incarnation waits
//! for them.
//!
//! # TLS
//!
//! With `[cluster.tls] enabled`, every connection of every kind is a mutual TLS 1.3 session before
//! its first frame: the dialler verifies the acceptor's certificate and the acceptor the
//! dialler's, both against the configured CA bundle and the identity rule (valid for
//! `peer_name`). A refused peer never gets a frame read; see [`tls`](self) (module `tls`) and
//! `docs/security.md`.
//!
//! # Limits
//!
//! Every limit comes from [`TransportSettings`]:
//! - `max_frame_size`: checked on the length prefix before any payload byte is kept; a larger
//!   prefix closes that connection. A message whose frame would be larger is not sent (logged at
//!   WARN, counted in [`TransportStats::oversized_outbound`]). The handshake frame has its own
//!   limit of [`handshake::MAX_HANDSHAKE_BYTES`], so an unidentified peer cannot make the node
//!   buffer more than that.
//! - `max_decompressed_size`: passed with `max_frame_size` to the decoder as
//!   [`DecodeLimits`], so a compressed gossip cannot inflate beyond it.
//! - `max_connections`: inbound connections open at once (handshake pending or done); an excess
//!   connection is accepted and closed at once, counted, and logged at most once a second.
//! - `handshake_timeout`: an inbound connection must deliver its handshake within this time.
//! - `idle_timeout`: an inbound connection without a complete frame for this long is closed, which
//!   also bounds how slowly a frame may trickle in.
//! - `outbound_queue_size`: messages queued per peer on the ordinary stream. A gossip replaces a
//!   queued gossip to the same incarnation, and a gossip status a queued status (each is the whole
//!   state or its digest; counted in [`TransportStats::superseded_outbound`]), so a peer that is
//!   slow or unreachable holds one of each, not one per version. When the queue is full, the
//!   oldest non-heartbeat message is dropped and counted. The control stream holds at most
//!   `min(outbound_queue_size, 64)` heartbeats, and drops its oldest (a stale heartbeat is
//!   worthless) when full. The application stream also holds `outbound_queue_size` frames, but
//!   refuses a new frame when full ([`ApplicationSendError::QueueFull`]) so that its sender
//!   knows.
//! - `connect_timeout`: one connection attempt, resolution included.
//! - `max_reconnect_backoff`: the longest wait between connection attempts.
//!
//! A malformed, oversized or truncated frame, an undecodable message, or an ordinary message on a
//! control stream closes only that connection, with a WARN line naming the peer and the reason.
//! Inbound delivery is bounded: when the driver falls behind, readers wait (TCP pushes back on
//! the sender), each on its own connection, so one slow or hostile peer never blocks the others.
//!
//! Layout: [`frame`] (length prefix codec), [`handshake`] (the first frame), `outbound` (queues,
//! dialling, writing), `inbound` (accepting, reading, delivery), `tls` (mutual TLS, reloading),
//! `stats` ([`TransportStats`]).

pub mod frame;
pub mod handshake;
mod inbound;
mod outbound;
mod stats;
mod tls;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use convoke_membership::wire::DecodeLimits;
use convoke_membership::{Address, Message, Uid, UniqueAddress};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::settings::{ClusterTlsSettings, SettingsError, TransportSettings};
use handshake::{Handshake, HandshakeError, StreamKind};
use outbound::{Lane, Outgoing, PeerLanes};
pub use stats::TransportStats;
use stats::{Counters, inc};

/// Messages waiting for the driver: the control queue, the ordinary queue, and the driver's
/// channel they are merged into (small, so that a heartbeat is never far from its head).
const CONTROL_INBOUND_QUEUE: usize = 64;
const ORDINARY_INBOUND_QUEUE: usize = 64;
const DELIVERY_QUEUE: usize = 16;
/// Past this many remembered peer incarnations, those of addresses without open lanes are
/// forgotten (they matter only while there are connections to drop).
const INCARNATIONS_KEPT: usize = 1024;

/// What a transport needs besides its listener and identity.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportConfig {
    /// The cluster name; handshakes naming another system are refused.
    pub system_name: String,
    /// Limits and timeouts.
    pub settings: TransportSettings,
    /// Mutual TLS; off by default.
    pub tls: ClusterTlsSettings,
}

/// A message received from a peer.
#[derive(Clone, Debug)]
pub struct Inbound {
    /// The sender, as named in its connection's handshake.
    pub from: UniqueAddress,
    /// The message.
    pub message: Message,
    /// When its frame was read off the socket (before any wait for the driver).
    pub received_at: tokio::time::Instant,
}

/// The `reason` labels of TLS refusals in [`TransportStats::tls_refused`] and `/metrics`.
pub const TLS_REFUSAL_REASONS: [&str; 6] =
    ["untrusted", "expired", "name_mismatch", "no_certificate", "not_tls", "other"];

/// The kind under which application frames are counted in [`TransportStats`].
pub const APPLICATION_KIND: &str = "application";

/// Frames from application streams waiting for the messaging layer.
const APPLICATION_INBOUND_QUEUE: usize = 1024;

/// An application frame received from a peer, not decoded.
#[derive(Clone, Debug)]
pub struct ApplicationInbound {
    /// The sender, as named in its connection's handshake.
    pub from: UniqueAddress,
    /// The frame's payload.
    pub payload: Bytes,
}

/// Why [`Transport::send_application`] did not queue a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplicationSendError {
    /// The frame is larger than `cluster.transport.max_frame_size`.
    #[error("{bytes} bytes is more than cluster.transport.max_frame_size ({limit} bytes)")]
    TooLarge {
        /// The payload's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// `outbound_queue_size` frames already wait for this peer.
    #[error("{capacity} frames already wait to be sent to this peer")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The transport is shutting down.
    #[error("the transport is shutting down")]
    Stopped,
}

/// A running transport. Cheap to clone; all clones drive the same connections.
///
/// It runs until [`shutdown`](Self::shutdown) is called.
#[derive(Clone)]
pub struct Transport {
    shared: Arc<Shared>,
}

/// State shared by the handle and the connection tasks.
struct Shared {
    self_node: UniqueAddress,
    system_name: String,
    settings: TransportSettings,
    limits: DecodeLimits,
    local_addr: SocketAddr,
    /// Mutual TLS, when enabled.
    tls: Option<Arc<tls::Tls>>,
    /// The handshake payloads this node sends, by stream kind (ordinary, control, application).
    handshakes: [Result<Bytes, HandshakeError>; 3],
    /// Where application frames go; taken once by the messaging layer.
    application_tx: mpsc::Sender<ApplicationInbound>,
    application_rx: Mutex<Option<mpsc::Receiver<ApplicationInbound>>>,
    counters: Counters,
    /// Compresses each gossip version once, whichever lanes send it.
    encoder: convoke_membership::wire::GossipEncoder,
    /// Outbound queues by peer address. Lock order: this map, then `incarnations` or a lane's
    /// queue.
    lanes: Mutex<HashMap<Address, PeerLanes>>,
    /// The incarnation each peer address last introduced itself as (see `Shared::introduced`).
    incarnations: Mutex<HashMap<Address, Uid>>,
    /// Cancelled when shutdown begins: stop accepting and reading, flush and close outbound.
    stopping: CancellationToken,
    /// Cancelled when the shutdown grace ends: every task returns at once.
    closed: CancellationToken,
    tasks: TaskTracker,
    runtime: Handle,
}

impl Transport {
    /// Starts accepting on `listener` (already bound; port 0 allowed) as `self_node`. Inbound
    /// messages go to the returned receiver.
    ///
    /// # Errors
    /// TLS is enabled and its files do not load (the key is named).
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start(
        listener: TcpListener,
        self_node: UniqueAddress,
        config: TransportConfig,
    ) -> Result<(Transport, mpsc::Receiver<Inbound>), SettingsError> {
        let TransportConfig { system_name, settings, tls } = config;
        let tls = if tls.enabled { Some(Arc::new(tls::Tls::new(tls)?)) } else { None };
        let local_addr = listener.local_addr().unwrap_or_else(|e| {
            tracing::error!(error = %e, "the transport listener has no local address");
            SocketAddr::from(([0, 0, 0, 0], 0))
        });
        if self_node.address.system() != system_name {
            tracing::warn!(
                node = %self_node,
                system = %system_name,
                "the node's address names another system than the transport's system name"
            );
        }
        let mut limits = DecodeLimits::DEFAULT;
        limits.max_frame_bytes = settings.max_frame_size;
        limits.max_decompressed_bytes = settings.max_decompressed_size;
        let handshake =
            |stream| Handshake::new(self_node.clone(), stream).encode().map(Bytes::from);
        let (application_tx, application_rx) = mpsc::channel(APPLICATION_INBOUND_QUEUE);
        let shared = Arc::new(Shared {
            handshakes: [
                handshake(StreamKind::Ordinary),
                handshake(StreamKind::Control),
                handshake(StreamKind::Application),
            ],
            application_tx,
            application_rx: Mutex::new(Some(application_rx)),
            self_node,
            system_name,
            settings,
            limits,
            local_addr,
            tls,
            counters: Counters::default(),
            encoder: convoke_membership::wire::GossipEncoder::default(),
            lanes: Mutex::new(HashMap::new()),
            incarnations: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            closed: CancellationToken::new(),
            tasks: TaskTracker::new(),
            runtime: Handle::current(),
        });
        if let Err(e) = &shared.handshakes[0] {
            tracing::error!(node = %shared.self_node, error = %e, "cannot encode this node's handshake; nothing will be sent");
        }
        let (control_tx, control_rx) = mpsc::channel(CONTROL_INBOUND_QUEUE);
        let (ordinary_tx, ordinary_rx) = mpsc::channel(ORDINARY_INBOUND_QUEUE);
        let (delivery_tx, delivery_rx) = mpsc::channel(DELIVERY_QUEUE);
        shared.spawn(inbound::deliver(shared.clone(), control_rx, ordinary_rx, delivery_tx));
        let queues = inbound::Queues { control: control_tx, ordinary: ordinary_tx };
        shared.spawn(inbound::accept(shared.clone(), listener, queues));
        if let Some(tls) = shared.tls.clone() {
            let s = shared.clone();
            shared.spawn(async move { tls.reload(&s.stopping, &s.counters).await });
        }
        tracing::debug!(node = %shared.self_node, %local_addr, tls = shared.tls.is_some(), "transport listening");
        Ok((Transport { shared }, delivery_rx))
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Queues `message` for `to`; never blocks, never fails (problems are logged and counted).
    ///
    /// Heartbeats go on the peer's control stream, everything else on its ordinary stream. When
    /// the ordinary queue is full its oldest message is dropped; see the [module docs](self).
    pub fn send(&self, to: &Address, message: Message) {
        let shared = &self.shared;
        if shared.stopping.is_cancelled() {
            inc(&shared.counters.dropped_outbound);
            tracing::debug!(peer = %to, kind = message.kind(), "transport shut down; message dropped");
            return;
        }
        let stream = StreamKind::of(&message);
        if shared.handshake(stream).is_err() {
            // Logged once at start: this node cannot identify itself to peers.
            inc(&shared.counters.dropped_outbound);
            return;
        }
        self.with_lane(to, stream, |lane| lane.push(&shared.counters, Outgoing::Cluster(message)));
    }

    /// Queues an application frame (already encoded by the messaging layer) for `to`, on the
    /// application stream. Never blocks.
    ///
    /// # Errors
    /// The frame is too large, the peer's application queue is full, or the transport stops.
    pub fn send_application(
        &self,
        to: &Address,
        payload: Bytes,
    ) -> Result<(), ApplicationSendError> {
        let shared = &self.shared;
        if shared.stopping.is_cancelled() || shared.handshake(StreamKind::Application).is_err() {
            return Err(ApplicationSendError::Stopped);
        }
        let limit = shared.settings.max_frame_size;
        if payload.len() > limit {
            inc(&shared.counters.oversized_outbound);
            return Err(ApplicationSendError::TooLarge { bytes: payload.len(), limit });
        }
        if self.with_lane(to, StreamKind::Application, |lane| {
            lane.try_push(Outgoing::Application(payload))
        }) {
            Ok(())
        } else {
            inc(&shared.counters.dropped_outbound);
            Err(ApplicationSendError::QueueFull { capacity: shared.settings.outbound_queue_size })
        }
    }

    /// The receiving end of the application frames (from every peer, in arrival order per
    /// connection). It can be taken once; frames that arrive while nobody has taken it wait in
    /// a bounded channel, then hold up their connection.
    pub fn application_inbound(&self) -> Option<mpsc::Receiver<ApplicationInbound>> {
        self.shared.application_rx.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Runs `queue` on the queue of `stream` to `to`, started (with its task) when there is
    /// none. The map stays locked meanwhile, so the lane cannot be retired (its task ended)
    /// between being found and being given the message.
    fn with_lane<R>(&self, to: &Address, stream: StreamKind, queue: impl FnOnce(&Lane) -> R) -> R {
        let shared = &self.shared;
        let mut lanes = shared.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = lanes.get_mut(to).and_then(|peer| peer.get_mut(stream).as_ref()) {
            return queue(lane);
        }
        let capacity = match stream {
            StreamKind::Ordinary | StreamKind::Application => shared.settings.outbound_queue_size,
            StreamKind::Control => {
                shared.settings.outbound_queue_size.min(outbound::CONTROL_QUEUE_LIMIT)
            }
        };
        let lane = Arc::new(Lane::new(to.clone(), stream, capacity));
        *lanes.entry(to.clone()).or_default().get_mut(stream) = Some(lane.clone());
        let queued = queue(&lane);
        shared.spawn(outbound::run(self.shared.clone(), lane));
        queued
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> TransportStats {
        self.shared.counters.snapshot()
    }

    /// Stops accepting, flushes queued frames best-effort for up to `grace`, closes every
    /// connection. Returns once every connection task has ended; later sends are dropped.
    pub async fn shutdown(&self, grace: Duration) {
        let shared = &self.shared;
        shared.stopping.cancel();
        shared.tasks.close();
        if tokio::time::timeout(grace, shared.tasks.wait()).await.is_err() {
            tracing::debug!(?grace, "transport shutdown grace expired; closing what is left");
        }
        shared.closed.cancel();
        shared.tasks.wait().await;
        tracing::debug!(node = %shared.self_node, "transport shut down");
    }
}

impl Shared {
    fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn_on(task, &self.runtime);
    }

    fn handshake(&self, stream: StreamKind) -> &Result<Bytes, HandshakeError> {
        match stream {
            StreamKind::Ordinary => &self.handshakes[0],
            StreamKind::Control => &self.handshakes[1],
            StreamKind::Application => &self.handshakes[2],
        }
    }

    /// Notes the incarnation `peer` introduced itself as on an inbound connection. When another
    /// incarnation did so before from the same address, the peer restarted there, and the
    /// connections open to the address may lead to the old process: a host that vanished without
    /// closing its sockets (a container cut off the network, a machine that lost power) leaves
    /// them looking open until TCP gives up on unacknowledged data, which takes seconds to
    /// minutes while everything written to them is lost. They are dropped, and the lanes
    /// reconnect to the incarnation listening now.
    fn introduced(&self, peer: &UniqueAddress) {
        // Every inbound connection passes here; the usual answer (the incarnation already
        // known) takes one lock and no copy.
        let previous = {
            let mut known = self.incarnations.lock().unwrap_or_else(PoisonError::into_inner);
            match known.get_mut(&peer.address) {
                Some(uid) if *uid == peer.uid => return,
                Some(uid) => Some(std::mem::replace(uid, peer.uid)),
                None => known.insert(peer.address.clone(), peer.uid),
            }
        };
        let lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        if previous.is_none() {
            let mut known = self.incarnations.lock().unwrap_or_else(PoisonError::into_inner);
            if known.len() > INCARNATIONS_KEPT {
                // Addresses of peers that restarted elsewhere pile up; only open lanes need one.
                known.retain(|address, _| lanes.contains_key(address));
            }
            return;
        }
        if let Some(lanes) = lanes.get(&peer.address) {
            lanes.peer_replaced();
        }
        drop(lanes);
        inc(&self.counters.peer_restarts);
        tracing::info!(peer = %peer, "the peer restarted at its address; reconnecting to the new incarnation");
    }

    /// Where application frames go: the channel, as long as its receiver exists.
    fn application_sink(&self) -> Option<mpsc::Sender<ApplicationInbound>> {
        Some(self.application_tx.clone()).filter(|tx| !tx.is_closed())
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("self_node", &self.shared.self_node)
            .field("local_addr", &self.shared.local_addr)
            .finish_non_exhaustive()
    }
}
