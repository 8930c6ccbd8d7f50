//! Inbound connections: accepting within `max_connections`, checking handshakes, reading frames,
//! and delivering messages to the driver with heartbeats first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use convoke_membership::{UniqueAddress, wire};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use super::frame::{FrameError, FrameReader, LENGTH_PREFIX_BYTES};
use super::handshake::{Handshake, MAX_HANDSHAKE_BYTES, StreamKind};
use super::stats::{self, inc};
use super::tls::Io;
use super::{APPLICATION_KIND, ApplicationInbound, Inbound, Shared};

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// At most one "connection refused" line per this interval; a flood is summarised by the counter.
const REJECT_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Where readers put decoded messages, by stream kind. Boxed: a queue's memory comes in blocks
/// of slots, and a message is a few hundred bytes where a pointer is eight.
#[derive(Clone, Debug)]
pub(super) struct Queues {
    pub(super) control: mpsc::Sender<Box<Inbound>>,
    pub(super) ordinary: mpsc::Sender<Box<Inbound>>,
}

/// Accepts connections until the transport stops; each gets a reader task and a connection slot.
pub(super) async fn accept(shared: Arc<Shared>, listener: TcpListener, queues: Queues) {
    let slots =
        Arc::new(Semaphore::new(shared.settings.max_connections.min(Semaphore::MAX_PERMITS)));
    let mut last_reject_log: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            biased;
            () = shared.stopping.cancelled() => return,
            r = listener.accept() => r,
        };
        let (socket, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::select! {
                    () = shared.stopping.cancelled() => return,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            inc(&shared.counters.rejected_connections);
            if last_reject_log.is_none_or(|t| t.elapsed() >= REJECT_LOG_INTERVAL) {
                last_reject_log = Some(Instant::now());
                tracing::warn!(
                    %peer,
                    max_connections = shared.settings.max_connections,
                    rejected_so_far = shared.counters.snapshot().rejected_connections,
                    "closing connection: max_connections inbound connections are open"
                );
            }
            drop(socket);
            continue;
        };
        shared.spawn(serve(shared.clone(), socket, peer, slot, queues.clone()));
    }
}

/// Reads one connection: the handshake, then frames until it ends or misbehaves.
async fn serve(
    shared: Arc<Shared>,
    socket: TcpStream,
    peer: SocketAddr,
    _slot: OwnedSemaphorePermit,
    queues: Queues,
) {
    let _open = stats::open(&shared.counters.open_inbound);
    let socket: Io = match &shared.tls {
        None => Box::new(socket),
        Some(tls) => {
            let timeout = shared.settings.handshake_timeout;
            let accepted = tokio::select! {
                biased;
                () = shared.stopping.cancelled() => return,
                // Boxed: large, and only needed until the session is up.
                s = Box::pin(tls.accept(socket, peer, timeout, &shared.counters)) => s,
            };
            match accepted {
                Some(s) => s,
                None => return,
            }
        }
    };
    let mut frames = FrameReader::new(socket, MAX_HANDSHAKE_BYTES);
    let handshake = tokio::select! {
        biased;
        () = shared.stopping.cancelled() => return,
        h = Box::pin(handshake(&shared, &mut frames, peer)) => h,
    };
    let Some(Handshake { from, stream, .. }) = handshake else {
        inc(&shared.counters.handshake_failures);
        return;
    };
    tracing::debug!(%peer, node = %from, stream = stream.as_str(), "inbound connection");
    shared.introduced(&from);
    frames.set_max_frame_size(shared.settings.max_frame_size);
    let queue = match stream {
        StreamKind::Control => queues.control,
        StreamKind::Ordinary => queues.ordinary,
        StreamKind::Application => {
            return Box::pin(serve_application(&shared, frames, peer, from)).await;
        }
    };
    while let Some(frame) = next_frame(&shared, &mut frames, peer, &from).await {
        let received_at = Instant::now();
        let message = match wire::decode_on_connection(&frame, &shared.limits, &from) {
            Ok(m) => m,
            Err(e) => {
                inc(&shared.counters.closed_bad_frame);
                tracing::warn!(%peer, node = %from, reason = %e, "closing connection: undecodable message");
                return;
            }
        };
        if stream == StreamKind::Control && !message.is_heartbeat() {
            inc(&shared.counters.closed_bad_frame);
            tracing::warn!(
                %peer,
                node = %from,
                kind = message.kind(),
                "closing connection: only heartbeats may use a control stream"
            );
            return;
        }
        shared.counters.received(message.kind(), LENGTH_PREFIX_BYTES + frame.len());
        drop(frame);
        let inbound = Box::new(Inbound { from: from.clone(), message, received_at });
        if !forward(&shared, &queue, inbound).await {
            return;
        }
    }
}

/// Hands `item` to `queue`, waiting for room: the wait is the backpressure (this connection
/// stops being read, others go on). `false` when the transport stops; an item the queue's
/// receiver is gone for is counted as dropped.
///
/// Not an `async fn`: a reader usually finds room at once, and only the wait for room, which is
/// large, is kept in (boxed) future state, so a reader waiting for its next frame stays small.
fn forward<'a, T: Send + 'a>(
    shared: &'a Shared,
    queue: &'a mpsc::Sender<T>,
    item: T,
) -> impl Future<Output = bool> + Send + 'a {
    let waiting = match queue.try_send(item) {
        Ok(()) => None,
        Err(TrySendError::Closed(_)) => {
            inc(&shared.counters.dropped_inbound);
            None
        }
        Err(TrySendError::Full(item)) => Some(Box::pin(wait_for_room(shared, queue, item))),
    };
    async move {
        let Some(wait) = waiting else { return true };
        match wait.await {
            Some(true) => true,
            Some(false) => {
                inc(&shared.counters.dropped_inbound);
                true
            }
            None => false,
        }
    }
}

/// Sends `item` once `queue` has room: whether it was delivered, or `None` when the transport
/// stops first.
async fn wait_for_room<T>(shared: &Shared, queue: &mpsc::Sender<T>, item: T) -> Option<bool> {
    tokio::select! {
        biased;
        () = shared.stopping.cancelled() => None,
        r = queue.send(item) => Some(r.is_ok()),
    }
}

/// Reads an application stream: each frame goes, undecoded, to the messaging layer's channel
/// (see [`Transport::application_inbound`](super::Transport::application_inbound)); with no
/// messaging layer attached, frames are counted as dropped.
async fn serve_application(
    shared: &Shared,
    mut frames: FrameReader<Io>,
    peer: SocketAddr,
    from: UniqueAddress,
) {
    let sink = shared.application_sink();
    while let Some(payload) = next_frame(shared, &mut frames, peer, &from).await {
        shared.counters.received(APPLICATION_KIND, LENGTH_PREFIX_BYTES + payload.len());
        let Some(sink) = &sink else {
            inc(&shared.counters.dropped_inbound);
            continue;
        };
        let inbound = ApplicationInbound { from: from.clone(), payload };
        if !forward(shared, sink, inbound).await {
            return;
        }
    }
}

/// The next frame of an identified connection; `None` (logged and counted) when the connection
/// ends, idles out, misbehaves or the transport stops.
async fn next_frame(
    shared: &Shared,
    frames: &mut FrameReader<Io>,
    peer: SocketAddr,
    from: &UniqueAddress,
) -> Option<Bytes> {
    let idle_timeout = shared.settings.idle_timeout;
    let next = tokio::select! {
        biased;
        () = shared.stopping.cancelled() => return None,
        r = tokio::time::timeout(idle_timeout, frames.next()) => r,
    };
    match next {
        Err(_) => {
            inc(&shared.counters.closed_idle);
            tracing::debug!(%peer, node = %from, ?idle_timeout, "closing idle connection");
            None
        }
        Ok(None) => {
            tracing::debug!(%peer, node = %from, "connection closed by the peer");
            None
        }
        Ok(Some(Err(FrameError::Io(e)))) => {
            tracing::debug!(%peer, node = %from, error = %e, "connection failed");
            None
        }
        Ok(Some(Err(e))) => {
            inc(&shared.counters.closed_bad_frame);
            tracing::warn!(%peer, node = %from, reason = %e, "closing connection: bad frame");
            None
        }
        Ok(Some(Ok(frame))) => Some(frame),
    }
}

/// Reads and checks the handshake within `handshake_timeout`; `None` (logged) when it fails.
async fn handshake(
    shared: &Shared,
    frames: &mut FrameReader<Io>,
    peer: SocketAddr,
) -> Option<Handshake> {
    let timeout = shared.settings.handshake_timeout;
    let payload = match tokio::time::timeout(timeout, frames.next()).await {
        Err(_) => {
            tracing::warn!(%peer, ?timeout, "closing connection: no handshake within handshake_timeout");
            return None;
        }
        Ok(None) => {
            tracing::debug!(%peer, "connection closed before its handshake");
            return None;
        }
        Ok(Some(Err(e))) => {
            tracing::warn!(%peer, reason = %e, "closing connection: bad handshake frame");
            return None;
        }
        Ok(Some(Ok(payload))) => payload,
    };
    let handshake = match Handshake::decode(&payload) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(%peer, reason = %e, "closing connection: bad handshake");
            return None;
        }
    };
    let theirs = handshake.from.address.system();
    if theirs != shared.system_name {
        tracing::warn!(
            %peer,
            node = %handshake.from,
            their_system = theirs,
            our_system = %shared.system_name,
            "closing connection: handshake from another system"
        );
        return None;
    }
    Some(handshake)
}

/// Moves messages from the two queues into the driver's channel, a heartbeat first whenever one
/// is waiting. A slot in the driver's channel is reserved before a message is chosen, so the
/// choice is made as late as possible.
pub(super) async fn deliver(
    shared: Arc<Shared>,
    mut control: mpsc::Receiver<Box<Inbound>>,
    mut ordinary: mpsc::Receiver<Box<Inbound>>,
    out: mpsc::Sender<Inbound>,
) {
    loop {
        let slot = tokio::select! {
            biased;
            () = shared.stopping.cancelled() => return,
            slot = out.reserve() => match slot {
                Ok(slot) => slot,
                Err(_) => return, // The driver is gone; readers count what they cannot deliver.
            },
        };
        let next = tokio::select! {
            biased;
            () = shared.stopping.cancelled() => return,
            Some(m) = control.recv() => m,
            Some(m) = ordinary.recv() => m,
        };
        slot.send(*next);
    }
}
