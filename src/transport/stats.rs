//! Counters, updated lock-free by the connection tasks, read as a [`TransportStats`] snapshot.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the transport's counters, for tests, logs and metrics.
///
/// Frames and bytes count message frames only (not handshakes); bytes include the 4-byte length
/// prefix. Every counter but `open_*` only grows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStats {
    /// Message frames read and decoded.
    pub frames_in: u64,
    /// Bytes of those frames.
    pub bytes_in: u64,
    /// Message frames handed to a socket.
    pub frames_out: u64,
    /// Bytes of those frames.
    pub bytes_out: u64,
    /// Messages dropped before sending: the oldest when a queue was full, and what was still
    /// queued when a peer stayed unreachable or the transport shut down.
    pub dropped_outbound: u64,
    /// Queued gossips and gossip statuses replaced by a newer one before they were sent (see
    /// [`Transport`](super::Transport): a queue holds one gossip per peer incarnation).
    pub superseded_outbound: u64,
    /// Messages received but not delivered because the receiver was gone.
    pub dropped_inbound: u64,
    /// Messages not sent because their frame exceeded `max_frame_size`.
    pub oversized_outbound: u64,
    /// Inbound connections closed at once because `max_connections` were open.
    pub rejected_connections: u64,
    /// Inbound connections closed for an oversized, truncated or undecodable frame.
    pub closed_bad_frame: u64,
    /// Inbound connections closed after `idle_timeout` without a frame.
    pub closed_idle: u64,
    /// Outbound ordinary connections closed as soon as they were drained because the process
    /// was short of file descriptors (see the transport's connection model).
    pub closed_crowded: u64,
    /// Inbound connections closed for a missing, late, malformed or mismatched handshake.
    pub handshake_failures: u64,
    /// Outbound connection attempts that failed (resolution, refusal or timeout).
    pub connect_failures: u64,
    /// Inbound connections open now (handshake pending or done).
    pub open_inbound: u64,
    /// Outbound connections open now (handshake sent).
    pub open_outbound: u64,
    /// Peers refused in the TLS handshake, by every reason of
    /// [`TLS_REFUSAL_REASONS`](super::TLS_REFUSAL_REASONS) (zero without TLS).
    pub tls_refused: BTreeMap<&'static str, u64>,
    /// Times changed TLS files were loaded and used for new connections.
    pub tls_reloads: u64,
    /// Times a peer introduced itself as another incarnation at an address this node had
    /// connections open to, which were then dropped and made again.
    pub peer_restarts: u64,
    /// Per message kind ([`Message::kind`](convoke_membership::Message::kind)): frames and bytes
    /// received.
    pub messages_in: BTreeMap<&'static str, (u64, u64)>,
    /// Per message kind: frames and bytes sent.
    pub messages_out: BTreeMap<&'static str, (u64, u64)>,
}

/// The live counters behind [`TransportStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) dropped_outbound: AtomicU64,
    pub(super) superseded_outbound: AtomicU64,
    pub(super) dropped_inbound: AtomicU64,
    pub(super) oversized_outbound: AtomicU64,
    pub(super) rejected_connections: AtomicU64,
    pub(super) closed_bad_frame: AtomicU64,
    pub(super) closed_idle: AtomicU64,
    pub(super) closed_crowded: AtomicU64,
    pub(super) handshake_failures: AtomicU64,
    pub(super) connect_failures: AtomicU64,
    pub(super) open_inbound: AtomicU64,
    pub(super) open_outbound: AtomicU64,
    pub(super) tls_reloads: AtomicU64,
    pub(super) peer_restarts: AtomicU64,
    /// Indexed like [`TLS_REFUSAL_REASONS`](super::TLS_REFUSAL_REASONS).
    pub(super) tls_refused: [AtomicU64; super::TLS_REFUSAL_REASONS.len()],
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    // A short critical section per frame; the maps have one entry per message kind.
    messages_in: Mutex<BTreeMap<&'static str, (u64, u64)>>,
    messages_out: Mutex<BTreeMap<&'static str, (u64, u64)>>,
}

pub(super) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(super) fn received(&self, kind: &'static str, bytes: usize) {
        Self::frame(&self.frames_in, &self.bytes_in, &self.messages_in, kind, bytes);
    }

    pub(super) fn sent(&self, kind: &'static str, bytes: usize) {
        Self::frame(&self.frames_out, &self.bytes_out, &self.messages_out, kind, bytes);
    }

    fn frame(
        frames: &AtomicU64,
        total: &AtomicU64,
        by_kind: &Mutex<BTreeMap<&'static str, (u64, u64)>>,
        kind: &'static str,
        bytes: usize,
    ) {
        let bytes = bytes as u64;
        frames.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(bytes, Ordering::Relaxed);
        let mut map = by_kind.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = map.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += bytes;
    }

    pub(super) fn snapshot(&self) -> TransportStats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let map = |m: &Mutex<BTreeMap<&'static str, (u64, u64)>>| {
            m.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
        };
        TransportStats {
            frames_in: load(&self.frames_in),
            bytes_in: load(&self.bytes_in),
            frames_out: load(&self.frames_out),
            bytes_out: load(&self.bytes_out),
            dropped_outbound: load(&self.dropped_outbound),
            superseded_outbound: load(&self.superseded_outbound),
            dropped_inbound: load(&self.dropped_inbound),
            oversized_outbound: load(&self.oversized_outbound),
            rejected_connections: load(&self.rejected_connections),
            closed_bad_frame: load(&self.closed_bad_frame),
            closed_idle: load(&self.closed_idle),
            closed_crowded: load(&self.closed_crowded),
            handshake_failures: load(&self.handshake_failures),
            connect_failures: load(&self.connect_failures),
            open_inbound: load(&self.open_inbound),
            open_outbound: load(&self.open_outbound),
            tls_refused: super::TLS_REFUSAL_REASONS
                .into_iter()
                .zip(self.tls_refused.each_ref().map(load))
                .collect(),
            tls_reloads: load(&self.tls_reloads),
            peer_restarts: load(&self.peer_restarts),
            messages_in: map(&self.messages_in),
            messages_out: map(&self.messages_out),
        }
    }
}

/// Sockets of the connections open in all the transports of this process (an end each): file
/// descriptors are a resource of the process, shared by every node it runs.
static OPEN_IN_PROCESS: AtomicU64 = AtomicU64::new(0);

/// Counts one open connection in `gauge` (and in the process's count) until the guard drops.
pub(super) fn open(gauge: &AtomicU64) -> OpenGuard<'_> {
    gauge.fetch_add(1, Ordering::Relaxed);
    OPEN_IN_PROCESS.fetch_add(1, Ordering::Relaxed);
    OpenGuard(gauge)
}

/// Decrements its gauges when dropped, so every exit path of a connection task is counted.
#[derive(Debug)]
pub(super) struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        OPEN_IN_PROCESS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether the sockets of open connections in this process hold half or more of its
/// file-descriptor limit (the soft `RLIMIT_NOFILE`, read at each call: a program may raise it).
/// Then an ordinary connection closes as soon as it is drained instead of after an idle while,
/// so that the process keeps descriptors for new connections, heartbeats and the application.
pub(super) fn crowded() -> bool {
    holds_half(OPEN_IN_PROCESS.load(Ordering::Relaxed), nofile_limit())
}

#[cfg(unix)]
fn nofile_limit() -> Option<u64> {
    let (soft, _hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?;
    (soft != rlimit::INFINITY).then_some(soft)
}

#[cfg(not(unix))]
fn nofile_limit() -> Option<u64> {
    None
}

/// Whether `open` sockets are half or more of a descriptor limit; without a limit, never.
fn holds_half(open: u64, limit: Option<u64>) -> bool {
    limit.is_some_and(|limit| open >= limit / 2)
}

#[cfg(test)]
mod tests {
    use super::holds_half;

    #[test]
    fn crowded_from_half_the_descriptor_limit_and_never_without_one() {
        assert!(!holds_half(0, Some(1024)));
        assert!(!holds_half(511, Some(1024)));
        assert!(holds_half(512, Some(1024)));
        assert!(holds_half(10_000, Some(20_000)));
        assert!(!holds_half(9_999, Some(20_000)));
        assert!(!holds_half(u64::MAX, None));
    }
}
