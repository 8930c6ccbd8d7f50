//! Metrics: what the runtime records as it happens ([`RuntimeMetrics`]), and the Prometheus text
//! rendering of those plus what is read at scrape time from the membership view and the
//! transport's counters ([`Metrics::render`]). The management server serves it at `/metrics`.

use std::sync::Arc;

use convoke_membership::{CurrentClusterState, MemberStatus};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::messaging::{MessagingCounters, MessagingStats};
use crate::transport::{Transport, TransportStats};

/// Metrics recorded as they happen.
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    /// Heartbeat round trips, in seconds.
    pub heartbeat_rtt: Histogram,
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        let buckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
        Self { heartbeat_rtt: Histogram::new(buckets) }
    }
}

/// Everything `/metrics` reports, apart from the membership view: the recorded metrics and the
/// transport whose counters are read at scrape time (none in a node without a transport, as in
/// router tests). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    recorded: Arc<RuntimeMetrics>,
    transport: Option<Transport>,
    /// The messaging layer's counters, shared with it.
    messaging: Option<MessagingCounters>,
}

type Labels = Vec<(String, String)>;

impl Metrics {
    /// Metrics of a node whose transport is `transport` and whose messaging layer counts in
    /// `messaging`.
    pub(crate) fn new(transport: Option<Transport>, messaging: Option<MessagingCounters>) -> Self {
        Self { recorded: Arc::default(), transport, messaging }
    }

    /// The metrics recorded as they happen.
    pub fn recorded(&self) -> &RuntimeMetrics {
        &self.recorded
    }

    /// Renders every metric in the Prometheus text format; `state` is the node's view and
    /// `is_leader` whether it leads.
    pub fn render(&self, state: &CurrentClusterState, is_leader: bool) -> String {
        let mut registry = Registry::with_prefix("convoke");
        let members =
            gauge_family(&mut registry, "members", "Members by status, as this node sees them");
        for status in MemberStatus::ALL.into_iter().filter(|s| *s != MemberStatus::Removed) {
            let n = state.members.iter().filter(|m| m.status() == status).count();
            members
                .get_or_create(&labels(&[("status", status.name())]))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let g = Gauge::<i64>::default();
        registry.register(
            "unreachable_members",
            "Members some member sees as unreachable",
            g.clone(),
        );
        g.set(i64::try_from(state.unreachable.len()).unwrap_or(i64::MAX));
        let g = Gauge::<i64>::default();
        registry.register("convergence", "1 when the gossip has converged, else 0", g.clone());
        g.set(i64::from(state.convergence));
        let g = Gauge::<i64>::default();
        registry.register("is_leader", "1 when this node is the leader, else 0", g.clone());
        g.set(i64::from(is_leader));

        let stats = self.transport.as_ref().map(Transport::stats).unwrap_or_default();
        register_transport(&mut registry, &stats);
        if let Some(m) = &self.messaging {
            register_messaging(&mut registry, &m.snapshot());
        }
        registry.register(
            "heartbeat_round_trip_seconds",
            "Heartbeat round-trip times to monitored members",
            self.recorded.heartbeat_rtt.clone(),
        );
        let mut out = String::new();
        if encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

fn register_transport(registry: &mut Registry, stats: &TransportStats) {
    let messages =
        counter_family(registry, "messages", "Cluster messages sent and received, by kind");
    let bytes = counter_family(
        registry,
        "message_bytes",
        "Bytes of cluster messages sent and received, by kind",
    );
    for (direction, table) in [("in", &stats.messages_in), ("out", &stats.messages_out)] {
        for (kind, (frames, size)) in table {
            let l = labels(&[("direction", direction), ("kind", kind)]);
            messages.get_or_create(&l).inc_by(*frames);
            bytes.get_or_create(&l).inc_by(*size);
        }
    }
    let dropped =
        counter_family(registry, "dropped_frames", "Frames dropped by the transport, by reason");
    for (reason, n) in [
        ("outbound_queue_full", stats.dropped_outbound),
        ("superseded", stats.superseded_outbound),
        ("inbound", stats.dropped_inbound),
        ("bad_frame", stats.closed_bad_frame),
        ("oversized_outbound", stats.oversized_outbound),
    ] {
        dropped.get_or_create(&labels(&[("reason", reason)])).inc_by(n);
    }
    let refused = counter_family(
        registry,
        "transport_tls_refused",
        "Peers refused in the cluster transport's TLS handshake, by reason",
    );
    for (reason, n) in &stats.tls_refused {
        refused.get_or_create(&labels(&[("reason", reason)])).inc_by(*n);
    }
    let reloads = counter_family(
        registry,
        "transport_tls_reloads",
        "Times changed cluster TLS files were loaded for new connections",
    );
    reloads.get_or_create(&Labels::new()).inc_by(stats.tls_reloads);
    let restarts = counter_family(
        registry,
        "transport_peer_restarts",
        "Times a peer restarted at an address with connections open to it, which were made again",
    );
    restarts.get_or_create(&Labels::new()).inc_by(stats.peer_restarts);
}

fn register_messaging(registry: &mut Registry, stats: &MessagingStats) {
    let dropped = counter_family(
        registry,
        "messaging_dropped",
        "Application messages dropped or refused by the messaging layer, by reason",
    );
    for (reason, n) in [
        ("from_non_member", stats.from_non_members),
        ("wrong_incarnation", stats.wrong_incarnation),
        ("malformed", stats.malformed),
        ("no_such_endpoint", stats.no_such_endpoint),
        ("overloaded", stats.overloaded),
        ("undecodable", stats.undecodable),
        ("late_reply", stats.late_replies),
    ] {
        dropped.get_or_create(&labels(&[("reason", reason)])).inc_by(n);
    }
}

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    registry.register(name, help, f.clone());
    f
}

fn counter_family(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    registry.register(name, help, f.clone());
    f
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}
