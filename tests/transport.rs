//! The TCP transport over real sockets on 127.0.0.1: delivery both ways, heartbeat isolation,
//! bounded queues, reconnection, shutdown, and robustness against hostile clients while a third
//! node keeps exchanging heartbeats with the node under attack.
//!
//! Nothing here sleeps to synchronise: tests await messages, socket closes or counters, each
//! with a deadline.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use convoke::membership::gossip::Gossip;
use convoke::membership::wire::{self, PROTOCOL_VERSION};
use convoke::membership::{Address, Message, Uid, UniqueAddress};
use convoke::settings::{ClusterTlsSettings, TransportSettings};
use convoke::transport::frame::encode_frame;
use convoke::transport::handshake::{Handshake, StreamKind};
use convoke::transport::{Inbound, Transport, TransportConfig, TransportStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

#[path = "support/certs.rs"]
#[allow(dead_code, unreachable_pub)]
mod certs;

const SYSTEM: &str = "transport-test";
/// How long any single expected event may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn settings() -> TransportSettings {
    TransportSettings {
        handshake_timeout: Duration::from_secs(2),
        max_reconnect_backoff: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(2),
        ..TransportSettings::default()
    }
}

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn next_uid() -> Uid {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    Uid::new(NEXT.fetch_add(1, Ordering::Relaxed)).unwrap()
}

fn address(port: u16) -> Address {
    Address::new(SYSTEM, "127.0.0.1", port).unwrap()
}

/// A transport with its inbound receiver.
struct Node {
    id: UniqueAddress,
    transport: Transport,
    rx: mpsc::Receiver<Inbound>,
}

impl Node {
    async fn start(settings: TransportSettings) -> Node {
        Node::start_on("127.0.0.1:0".parse().unwrap(), settings).await
    }

    async fn start_on(addr: SocketAddr, settings: TransportSettings) -> Node {
        Node::start_with(TcpListener::bind(addr).await.unwrap(), settings)
    }

    fn start_with(listener: TcpListener, settings: TransportSettings) -> Node {
        Node::start_tls(listener, settings, ClusterTlsSettings::default())
    }

    fn start_tls(
        listener: TcpListener,
        settings: TransportSettings,
        tls: ClusterTlsSettings,
    ) -> Node {
        init_logs();
        let id = UniqueAddress::new(address(listener.local_addr().unwrap().port()), next_uid());
        let config = TransportConfig { system_name: SYSTEM.into(), settings, tls };
        let (transport, rx) = Transport::start(listener, id.clone(), config).unwrap();
        Node { id, transport, rx }
    }

    fn address(&self) -> Address {
        self.id.address.clone()
    }

    fn stats(&self) -> TransportStats {
        self.transport.stats()
    }

    async fn recv(&mut self) -> Inbound {
        timeout(PATIENCE, self.rx.recv())
            .await
            .expect("no message within the deadline")
            .expect("the inbound channel closed")
    }
}

fn heartbeat(from: &UniqueAddress, sequence_nr: u64) -> Message {
    Message::Heartbeat { from: from.clone(), sequence_nr }
}

/// A small ordinary message tagged with `n`.
fn tagged(n: u64) -> Message {
    Message::ExitingConfirmed { node: UniqueAddress::new(address(1), Uid::new(n).unwrap()) }
}

fn tag(message: &Message) -> u64 {
    match message {
        Message::ExitingConfirmed { node } => node.uid.get(),
        other => panic!("expected a tagged message, got {other:?}"),
    }
}

/// An ordinary message of about `bytes` bytes.
fn large(bytes: usize, n: u64) -> Message {
    let config =
        BTreeMap::from([("n".to_owned(), n.to_string()), ("pad".to_owned(), "x".repeat(bytes))]);
    Message::InitJoin { config }
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A node under attack that answers heartbeats, and a third party that keeps pinging it.

/// Starts `node` answering every heartbeat with a heartbeat response, as a driver would.
/// Returns its transport; the other messages it delivers are counted in `delivered`.
fn answer_heartbeats(mut node: Node, delivered: Arc<AtomicU64>) -> (UniqueAddress, Transport) {
    let (id, transport) = (node.id.clone(), node.transport.clone());
    tokio::spawn(async move {
        while let Some(inbound) = node.rx.recv().await {
            match inbound.message {
                Message::Heartbeat { sequence_nr, .. } => {
                    let rsp = Message::HeartbeatRsp { from: node.id.clone(), sequence_nr };
                    node.transport.send(&inbound.from.address, rsp);
                }
                _ => {
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    (id, transport)
}

/// The node under attack and a prober that exchanges heartbeats with it.
struct Arena {
    target: Transport,
    target_id: UniqueAddress,
    delivered: Arc<AtomicU64>,
    prober: Node,
    sequence: u64,
}

impl Arena {
    async fn new(settings: TransportSettings) -> Arena {
        let delivered = Arc::new(AtomicU64::new(0));
        let (target_id, target) = answer_heartbeats(Node::start(settings).await, delivered.clone());
        let mut arena = Arena {
            target,
            target_id,
            delivered,
            prober: Node::start(self::settings()).await,
            sequence: 0,
        };
        arena.heartbeats_flow().await;
        arena
    }

    fn target_addr(&self) -> SocketAddr {
        self.target.local_addr()
    }

    fn stats(&self) -> TransportStats {
        self.target.stats()
    }

    /// Three heartbeat round trips between the prober and the target. A heartbeat without an
    /// answer within a second is followed by the next one, as a failure detector would send it
    /// (one may be lost when a connection closes under it); the deadline bounds the whole.
    async fn heartbeats_flow(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        let mut answered = 0;
        while answered < 3 {
            assert!(Instant::now() < deadline, "heartbeats stopped flowing");
            self.sequence += 1;
            let seq = self.sequence;
            self.prober.transport.send(&self.target_id.address, heartbeat(&self.prober.id, seq));
            let (prober, target) = (&mut self.prober, &self.target_id);
            let answer = async {
                loop {
                    let inbound = prober.rx.recv().await.expect("the prober's channel closed");
                    if let Message::HeartbeatRsp { sequence_nr, .. } = inbound.message {
                        assert_eq!(&inbound.from, target);
                        if sequence_nr == seq {
                            return;
                        }
                    }
                }
            };
            if timeout(Duration::from_secs(1), answer).await.is_ok() {
                answered += 1;
            }
        }
    }

    /// A raw client that has sent a valid ordinary-stream handshake.
    async fn handshaken_client(&self) -> TcpStream {
        let mut client = TcpStream::connect(self.target_addr()).await.unwrap();
        let me = UniqueAddress::new(address(9), next_uid());
        client
            .write_all(&handshake_frame(&Handshake::new(me, StreamKind::Ordinary)))
            .await
            .unwrap();
        client
    }
}

fn handshake_frame(handshake: &Handshake) -> Vec<u8> {
    encode_frame(&handshake.encode().unwrap())
}

fn message_frame(message: &Message) -> Vec<u8> {
    encode_frame(&wire::encode(message))
}

/// Waits until the node closes `client` (end of stream or reset), discarding anything read.
async fn closed_by_node(client: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    timeout(PATIENCE, async {
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the node did not close the connection");
}

/// Deterministic noise (xorshift64*).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Delivery.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transports_exchange_messages_both_ways_naming_the_handshake_sender() {
    let mut a = Node::start(settings()).await;
    let mut b = Node::start(settings()).await;
    let gossip =
        Message::Gossip { from: a.id.clone(), to: b.id.clone(), gossip: Arc::new(Gossip::empty()) };
    let to_b = [tagged(1), heartbeat(&a.id, 1), gossip, large(100_000, 2), tagged(3)];
    for m in &to_b {
        a.transport.send(&b.address(), m.clone());
    }
    let to_a = [tagged(10), Message::HeartbeatRsp { from: b.id.clone(), sequence_nr: 1 }];
    for m in &to_a {
        b.transport.send(&a.address(), m.clone());
    }

    let mut at_b = Vec::new();
    for _ in 0..to_b.len() {
        let inbound = b.recv().await;
        assert_eq!(inbound.from, a.id);
        at_b.push(inbound.message);
    }
    // The heartbeat travels on its own stream; the ordinary ones keep their order.
    let ordinary: Vec<&Message> = at_b.iter().filter(|m| !m.is_heartbeat()).collect();
    assert_eq!(ordinary, to_b.iter().filter(|m| !m.is_heartbeat()).collect::<Vec<_>>());
    assert!(at_b.contains(&to_b[1]));
    for expected in &to_a {
        let inbound = a.recv().await;
        assert_eq!(inbound.from, b.id);
        assert!(to_a.contains(&inbound.message), "{expected:?}");
    }

    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.frames_out, 5);
    assert_eq!(sb.frames_in, 5);
    assert_eq!(sb.bytes_in, sa.bytes_out);
    assert_eq!(sb.messages_in["ExitingConfirmed"], sa.messages_out["ExitingConfirmed"]);
    assert_eq!(sb.messages_in["ExitingConfirmed"].0, 2);
    assert_eq!(sb.messages_in["InitJoin"].0, 1);
    assert!(sb.messages_in["InitJoin"].1 > 100_000);
    // One connection per stream kind in each direction.
    assert_eq!((sa.open_outbound, sb.open_inbound), (2, 2));
    assert_eq!((sb.open_outbound, sa.open_inbound), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_get_through_while_the_ordinary_stream_is_stalled_by_large_frames() {
    // A peer that reads handshakes, then never reads its ordinary connection again: the
    // sender's large frames fill the socket buffers and its ordinary queue backs up.
    // Its small, fixed receive buffer keeps the kernel from absorbing the backlog.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let peer = socket.listen(16).unwrap();
    let peer_address = address(peer.local_addr().unwrap().port());
    // 16 queued 2 MiB messages are far more than socket buffers hold.
    let sent = 40;
    let a = Node::start(TransportSettings { outbound_queue_size: 16, ..settings() }).await;
    for n in 0..sent {
        a.transport.send(&peer_address, large(2 << 20, n));
    }
    let (mut ordinary, first) = accept_with_handshake(&peer).await;
    assert_eq!(first.stream, StreamKind::Ordinary);
    assert_eq!(first.from, a.id);

    for seq in 1..=3 {
        a.transport.send(&peer_address, heartbeat(&a.id, seq));
    }
    let (mut control, second) = accept_with_handshake(&peer).await;
    assert_eq!(second.stream, StreamKind::Control);
    for seq in 1..=3 {
        assert_eq!(read_message(&mut control, &second.from).await, heartbeat(&a.id, seq));
    }

    // Large messages were still waiting in the queue when the heartbeats arrived.
    let stats = a.stats();
    let written = stats.messages_out.get("InitJoin").map_or(0, |c| c.0);
    assert!(
        written + stats.dropped_outbound < sent,
        "written {written}, dropped {}",
        stats.dropped_outbound
    );
    // And they were only delayed: the stalled stream still delivers once read.
    assert!(matches!(read_message(&mut ordinary, &first.from).await, Message::InitJoin { .. }));
}

async fn accept_with_handshake(listener: &TcpListener) -> (TcpStream, Handshake) {
    let (mut socket, _) =
        timeout(PATIENCE, listener.accept()).await.expect("no connection").unwrap();
    let payload = read_frame(&mut socket).await;
    (socket, Handshake::decode(&payload).unwrap())
}

async fn read_frame(socket: &mut TcpStream) -> Vec<u8> {
    timeout(PATIENCE, async {
        let len = socket.read_u32().await.unwrap();
        let mut payload = vec![0; len as usize];
        socket.read_exact(&mut payload).await.unwrap();
        payload
    })
    .await
    .expect("no frame within the deadline")
}

/// Reads one message from a connection whose handshake named `sender`.
async fn read_message(socket: &mut TcpStream, sender: &UniqueAddress) -> Message {
    wire::decode_on_connection(&read_frame(socket).await, &wire::DecodeLimits::DEFAULT, sender)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_is_delivered_ahead_of_a_backlog_of_ordinary_messages() {
    let a = Node::start(settings()).await;
    let mut b = Node::start(settings()).await;
    // B's driver is "slow": nobody reads its receiver until the backlog is in place.
    let backlog = 200;
    for n in 1..=backlog {
        a.transport.send(&b.address(), tagged(n));
    }
    // 81 = the driver's channel (16) + the ordinary queue (64) + one held by the blocked reader.
    eventually("the ordinary backlog to fill B's queues", || b.stats().frames_in >= 81).await;
    a.transport.send(&b.address(), heartbeat(&a.id, 1));
    eventually("B to read the heartbeat", || b.stats().messages_in.contains_key("Heartbeat")).await;

    let mut tags = Vec::new();
    loop {
        let message = b.recv().await.message;
        if message.is_heartbeat() {
            break;
        }
        tags.push(tag(&message));
    }
    let position = tags.len() + 1;
    assert!(position <= 20, "the heartbeat was message {position}, behind the ordinary backlog");
    // Nothing was lost: backpressure held the rest back.
    while tags.len() < backlog as usize {
        tags.push(tag(&b.recv().await.message));
    }
    tags.sort_unstable();
    assert_eq!(tags, (1..=backlog).collect::<Vec<_>>());
    assert_eq!(b.stats().dropped_inbound, 0);
}

// ---------------------------------------------------------------------------------------------
// Queues, reconnection, limits on sending, shutdown.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbound_queue_drops_the_oldest_non_heartbeat_and_counts_it() {
    // A port with nobody listening yet: everything stays queued. The socket holds the port
    // (bound, not listening: connections to it are refused) until B listens on it, so no other
    // test can take it in between.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let a = Node::start(TransportSettings { outbound_queue_size: 4, ..settings() }).await;
    a.transport.send(&address(port), heartbeat(&a.id, 1));
    for n in 1..=10 {
        a.transport.send(&address(port), tagged(n));
    }
    assert_eq!(a.stats().dropped_outbound, 6);

    let mut b = Node::start_with(socket.listen(1024).unwrap(), settings());
    let mut tags = Vec::new();
    let mut heartbeats = 0;
    while tags.len() < 4 || heartbeats < 1 {
        let inbound = b.recv().await;
        if inbound.message.is_heartbeat() {
            heartbeats += 1;
        } else {
            tags.push(tag(&inbound.message));
        }
    }
    assert_eq!(tags, [7, 8, 9, 10]);
    assert_eq!(heartbeats, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_reconnects_after_the_peer_restarts_on_the_same_port() {
    let mut a = Node::start(settings()).await;
    let mut b1 = Node::start(settings()).await;
    let port = b1.address().port();
    a.transport.send(&b1.address(), tagged(1));
    assert_eq!(b1.recv().await.from, a.id);
    b1.transport.send(&a.address(), tagged(2));
    assert_eq!(a.recv().await.from, b1.id);

    b1.transport.shutdown(Duration::from_secs(1)).await;
    assert!(timeout(PATIENCE, b1.rx.recv()).await.unwrap().is_none(), "the old receiver ends");
    // The port is released and bound again on purpose: a restart at the same address is what is
    // tested.
    let mut b2 = Node::start_on(SocketAddr::from(([127, 0, 0, 1], port)), settings()).await;
    assert_ne!(b2.id, b1.id);

    // Messages written into the dying connection may be lost; keep sending until one arrives.
    let deadline = Instant::now() + PATIENCE;
    let inbound = loop {
        assert!(Instant::now() < deadline, "A never reached the restarted peer");
        a.transport.send(&b2.address(), tagged(3));
        if let Ok(Some(inbound)) = timeout(Duration::from_millis(250), b2.rx.recv()).await {
            break inbound;
        }
    };
    assert_eq!(inbound.from, a.id);
    assert_eq!(inbound.message, tagged(3));
    b2.transport.send(&a.address(), tagged(4));
    let back = a.recv().await;
    assert_eq!((back.from, back.message), (b2.id.clone(), tagged(4)));
}

/// A peer that vanished without closing its connections (its host cut off the network) and came
/// back as a new process at the same address: the old connection looks open, and what is written
/// to it goes nowhere. Here the old connection is a socket that is accepted and never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_incarnation_introducing_itself_replaces_a_connection_to_the_vanished_one() {
    let mut a = Node::start(settings()).await;
    let old_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = old_listener.local_addr().unwrap().port();
    let old = UniqueAddress::new(address(port), next_uid());
    // The old incarnation introduces itself to A, and A heartbeats it.
    let mut introduction = TcpStream::connect(a.transport.local_addr()).await.unwrap();
    introduction
        .write_all(&handshake_frame(&Handshake::new(old.clone(), StreamKind::Control)))
        .await
        .unwrap();
    introduction.write_all(&message_frame(&heartbeat(&old, 1))).await.unwrap();
    assert_eq!(a.recv().await.from, old);
    a.transport.send(&old.address, heartbeat(&a.id, 1));
    let (black_hole, handshake) = accept_with_handshake(&old_listener).await;
    assert_eq!(handshake.from, a.id);
    // The old process is gone but its connection is not; the new one listens at the address.
    drop(old_listener);
    let mut new = Node::start_on(SocketAddr::from(([127, 0, 0, 1], port)), settings()).await;
    new.transport.send(&a.address(), heartbeat(&new.id, 1));
    assert_eq!(a.recv().await.from, new.id);
    assert_eq!(a.stats().peer_restarts, 1);

    a.transport.send(&new.address(), heartbeat(&a.id, 2));
    let inbound = new.recv().await;
    assert_eq!((inbound.from, inbound.message), (a.id.clone(), heartbeat(&a.id, 2)));
    drop(black_hole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_above_max_frame_size_is_not_sent_and_is_counted() {
    let a = Node::start(TransportSettings { max_frame_size: 64 * 1024, ..settings() }).await;
    let mut b = Node::start(settings()).await;
    a.transport.send(&b.address(), large(100_000, 1));
    a.transport.send(&b.address(), tagged(2));
    assert_eq!(b.recv().await.message, tagged(2));
    assert_eq!(a.stats().oversized_outbound, 1);
    assert_eq!(a.stats().frames_out, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flushes_queued_messages_then_closes_every_connection() {
    let a = Node::start(settings()).await;
    let mut b = Node::start(settings()).await;
    for n in 1..=100 {
        a.transport.send(&b.address(), tagged(n));
    }
    a.transport.send(&b.address(), heartbeat(&a.id, 1));
    a.transport.shutdown(Duration::from_secs(5)).await;
    let mut tags = Vec::new();
    while tags.len() < 100 {
        let inbound = b.recv().await;
        if !inbound.message.is_heartbeat() {
            tags.push(tag(&inbound.message));
        }
    }
    assert_eq!(tags, (1..=100).collect::<Vec<_>>());
    assert_eq!(a.stats().open_outbound, 0);
    eventually("B to see A's connections close", || b.stats().open_inbound == 0).await;

    // After shutdown, sends are dropped and counted, and the port is free.
    a.transport.send(&b.address(), tagged(101));
    assert_eq!(a.stats().dropped_outbound, 1);
    TcpListener::bind(a.transport.local_addr()).await.expect("the listener was closed");
}

// ---------------------------------------------------------------------------------------------
// Robustness: each hostile client gets its own connection closed and counted, while heartbeats
// between the node and a third party keep flowing.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_random_bytes_is_disconnected_and_heartbeats_continue() {
    let mut arena = Arena::new(settings()).await;
    let mut client = TcpStream::connect(arena.target_addr()).await.unwrap();
    // The write may fail once the node has closed the connection; that is the point.
    let _ = client.write_all(&noise(64 * 1024, 0x5eed)).await;
    arena.heartbeats_flow().await;
    closed_by_node(&mut client).await;
    eventually("the failed handshake to be counted", || arena.stats().handshake_failures == 1)
        .await;
    arena.heartbeats_flow().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_length_prefix_closes_the_connection_before_any_allocation() {
    let mut arena = Arena::new(settings()).await;
    // Before the handshake the limit is the handshake's size...
    let mut early = TcpStream::connect(arena.target_addr()).await.unwrap();
    early.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    closed_by_node(&mut early).await;
    eventually("the bad handshake to be counted", || arena.stats().handshake_failures == 1).await;

    // ...after it, max_frame_size. A valid frame first shows the connection was accepted.
    let mut client = arena.handshaken_client().await;
    client.write_all(&message_frame(&tagged(1))).await.unwrap();
    client.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    arena.heartbeats_flow().await;
    closed_by_node(&mut client).await;
    eventually("the bad frame to be counted", || arena.stats().closed_bad_frame == 1).await;
    eventually("the frame before it to be delivered", || {
        arena.delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    arena.heartbeats_flow().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_closes_only_that_connection() {
    let mut arena = Arena::new(settings()).await;
    let mut client = arena.handshaken_client().await;
    let frame = message_frame(&tagged(1));
    client.write_all(&frame).await.unwrap();
    client.write_all(&frame[..frame.len() - 3]).await.unwrap();
    client.shutdown().await.unwrap();
    closed_by_node(&mut client).await;
    eventually("the truncated frame to be counted", || arena.stats().closed_bad_frame == 1).await;
    eventually("the whole frame before it to be delivered", || {
        arena.delivered.load(Ordering::Relaxed) == 1
    })
    .await;
    arena.heartbeats_flow().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_that_is_not_a_message_closes_the_connection() {
    let mut arena = Arena::new(settings()).await;
    let mut client = arena.handshaken_client().await;
    client.write_all(&encode_frame(&noise(300, 42))).await.unwrap();
    closed_by_node(&mut client).await;
    eventually("the undecodable frame to be counted", || arena.stats().closed_bad_frame == 1).await;

    // An ordinary message on a control stream would jump the heartbeat queue: refused too.
    let mut control = TcpStream::connect(arena.target_addr()).await.unwrap();
    let me = UniqueAddress::new(address(9), next_uid());
    control.write_all(&handshake_frame(&Handshake::new(me, StreamKind::Control))).await.unwrap();
    control.write_all(&message_frame(&tagged(1))).await.unwrap();
    closed_by_node(&mut control).await;
    eventually("the misplaced message to be counted", || arena.stats().closed_bad_frame == 2).await;
    assert_eq!(arena.delivered.load(Ordering::Relaxed), 0);
    arena.heartbeats_flow().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_with_the_wrong_system_or_protocol_version_is_refused() {
    let mut arena = Arena::new(settings()).await;
    let stranger =
        UniqueAddress::new(Address::new("other-system", "127.0.0.1", 9).unwrap(), next_uid());
    let mut client = TcpStream::connect(arena.target_addr()).await.unwrap();
    client
        .write_all(&handshake_frame(&Handshake::new(stranger, StreamKind::Ordinary)))
        .await
        .unwrap();
    let _ = client.write_all(&message_frame(&tagged(1))).await;
    closed_by_node(&mut client).await;
    eventually("the foreign system to be counted", || arena.stats().handshake_failures == 1).await;

    let mut future =
        Handshake::new(UniqueAddress::new(address(9), next_uid()), StreamKind::Ordinary);
    future.protocol_version = PROTOCOL_VERSION + 1;
    let mut client = TcpStream::connect(arena.target_addr()).await.unwrap();
    client.write_all(&handshake_frame(&future)).await.unwrap();
    let _ = client.write_all(&message_frame(&tagged(2))).await;
    closed_by_node(&mut client).await;
    eventually("the foreign version to be counted", || arena.stats().handshake_failures == 2).await;

    assert_eq!(
        arena.delivered.load(Ordering::Relaxed),
        0,
        "nothing from a refused peer is delivered"
    );
    arena.heartbeats_flow().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_are_capped_then_timed_out_while_heartbeats_continue() {
    // 1000 client sockets plus up to 600 accepted ones live in this process.
    let limit = rlimit::increase_nofile_limit(4096).expect("cannot read the open-file limit");
    assert!(limit >= 2000, "open-file limit {limit} is too low for this test; raise `ulimit -n`");
    let max_connections = 600;
    let mut arena = Arena::new(TransportSettings {
        max_connections,
        handshake_timeout: Duration::from_secs(4),
        ..settings()
    })
    .await;
    let before = arena.stats();
    assert_eq!(before.open_inbound, 1, "the prober's control stream");

    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(arena.target_addr()).await.unwrap());
    }
    // The cap: the prober holds one slot, so 599 are kept and 401 are closed at once.
    eventually("the excess connections to be refused", || {
        arena.stats().rejected_connections == 401
    })
    .await;
    let during = arena.stats();
    assert_eq!(during.open_inbound, max_connections as u64);
    arena.heartbeats_flow().await;

    // The handshake timeout then closes the rest; every client sees its connection closed.
    for client in &mut idle {
        closed_by_node(client).await;
    }
    eventually("the silent connections to time out", || arena.stats().handshake_failures == 599)
        .await;
    eventually("the slots to be released", || arena.stats().open_inbound == 1).await;
    arena.heartbeats_flow().await;

    // A new peer still gets in.
    let mut late = Node::start(settings()).await;
    late.transport.send(&arena.target_id.address, heartbeat(&late.id, 1));
    let rsp = late.recv().await;
    assert_eq!(rsp.from, arena.target_id);
    assert!(matches!(rsp.message, Message::HeartbeatRsp { sequence_nr: 1, .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_connection_without_frames_for_idle_timeout_is_closed() {
    let mut arena =
        Arena::new(TransportSettings { idle_timeout: Duration::from_millis(500), ..settings() })
            .await;
    let mut client = arena.handshaken_client().await;
    closed_by_node(&mut client).await;
    eventually("the idle close to be counted", || arena.stats().closed_idle >= 1).await;
    assert_eq!(arena.stats().closed_bad_frame, 0);
    arena.heartbeats_flow().await;
}

// ---------------------------------------------------------------------------------------------
// Mutual TLS.

/// TLS settings for files written into `dir`: `leaf` and the CA `ca` trusts.
fn tls_settings(dir: &std::path::Path, ca: &certs::Ca, leaf: &certs::Leaf) -> ClusterTlsSettings {
    certs::Files::write(dir, leaf, &ca.pem).settings()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_transports_talk_on_every_stream_and_a_plaintext_client_is_never_heard() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certs::Ca::new("transport CA");
    let listener = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let tls = |name: &str| tls_settings(&dir.path().join(name), &ca, &ca.leaf(certs::Flaw::None));
    let mut a = Node::start_tls(listener().await, settings(), tls("a"));
    let mut b = Node::start_tls(listener().await, settings(), tls("b"));
    // Ordinary, control and back: all through TLS sessions.
    a.transport.send(&b.address(), tagged(1));
    a.transport.send(&b.address(), heartbeat(&a.id, 1));
    let mut got = [b.recv().await, b.recv().await];
    got.sort_by_key(|i| i.message.is_heartbeat());
    assert_eq!(tag(&got[0].message), 1);
    assert_eq!(got[1].message, heartbeat(&a.id, 1));
    assert!(got.iter().all(|i| i.from == a.id));
    b.transport.send(&a.address(), tagged(2));
    assert_eq!(tag(&a.recv().await.message), 2);

    // A plaintext client with a valid handshake and message: closed, nothing delivered.
    let frames_in = b.stats().frames_in;
    let mut client = TcpStream::connect(b.transport.local_addr()).await.unwrap();
    let me = UniqueAddress::new(address(9), next_uid());
    let mut bytes = handshake_frame(&Handshake::new(me, StreamKind::Ordinary));
    bytes.extend(message_frame(&tagged(3)));
    client.write_all(&bytes).await.unwrap();
    closed_by_node(&mut client).await;
    let stats = b.stats();
    assert_eq!(stats.tls_refused.get("not_tls"), Some(&1), "{stats:?}");
    assert_eq!(stats.frames_in, frames_in, "no frame of the plaintext client was read");
    a.transport.send(&b.address(), tagged(4));
    assert_eq!(tag(&b.recv().await.message), 4, "the plaintext message never reached the driver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialler_refuses_a_node_whose_certificate_another_ca_issued() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certs::Ca::new("transport CA");
    let foreign = certs::Ca::new("foreign CA");
    let listener = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let a = Node::start_tls(
        listener().await,
        settings(),
        tls_settings(&dir.path().join("a"), &ca, &ca.leaf(certs::Flaw::None)),
    );
    // The impostor trusts the cluster's CA but holds a certificate from another one.
    let mut impostor = Node::start_tls(
        listener().await,
        settings(),
        tls_settings(&dir.path().join("b"), &ca, &foreign.leaf(certs::Flaw::None)),
    );
    a.transport.send(&impostor.address(), tagged(1));
    eventually("the dialler refuses the impostor's certificate", || {
        a.stats().tls_refused.get("untrusted").is_some_and(|n| *n >= 1)
    })
    .await;
    assert!(impostor.rx.try_recv().is_err(), "the impostor received nothing");
}
