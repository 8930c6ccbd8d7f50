//! `GET /metrics`: Prometheus text format (prometheus-client).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use convoke_membership::MemberStatus;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::AppState;

/// Metrics recorded as they happen (the rest is read from the node at scrape time).
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

type Labels = Vec<(String, String)>;

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

/// Renders every metric of `app` in the Prometheus text format.
pub(super) fn render(app: &AppState) -> String {
    let mut registry = Registry::with_prefix("convoke");
    let state = app.node.state();
    let members =
        gauge_family(&mut registry, "members", "Members by status, as this node sees them");
    for status in MemberStatus::ALL.into_iter().filter(|s| *s != MemberStatus::Removed) {
        let n = state.members.iter().filter(|m| m.status() == status).count();
        members
            .get_or_create(&labels(&[("status", status.name())]))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    let g = Gauge::<i64>::default();
    registry.register("unreachable_members", "Members some member sees as unreachable", g.clone());
    g.set(i64::try_from(state.unreachable.len()).unwrap_or(i64::MAX));
    let g = Gauge::<i64>::default();
    registry.register("convergence", "1 when the gossip has converged, else 0", g.clone());
    g.set(i64::from(state.convergence));
    let g = Gauge::<i64>::default();
    registry.register("is_leader", "1 when this node is the leader, else 0", g.clone());
    g.set(i64::from(state.leader.as_ref() == Some(app.node.self_address())));

    let stats = app.node.transport().stats();
    let messages =
        counter_family(&mut registry, "messages", "Cluster messages sent and received, by kind");
    let bytes = counter_family(
        &mut registry,
        "message_bytes",
        "Bytes of cluster messages sent and received, by kind",
    );
    for (direction, table) in [("in", &stats.messages_in), ("out", &stats.messages_out)] {
        for (kind, (frames, size)) in table.iter() {
            let l = labels(&[("direction", direction), ("kind", kind)]);
            messages.get_or_create(&l).inc_by(*frames);
            bytes.get_or_create(&l).inc_by(*size);
        }
    }
    let dropped = counter_family(
        &mut registry,
        "dropped_frames",
        "Frames dropped by the transport, by reason",
    );
    for (reason, n) in [
        ("outbound_queue_full", stats.dropped_outbound),
        ("inbound", stats.dropped_inbound),
        ("bad_frame", stats.closed_bad_frame),
        ("oversized_outbound", stats.oversized_outbound),
    ] {
        dropped.get_or_create(&labels(&[("reason", reason)])).inc_by(n);
    }
    registry.register(
        "heartbeat_round_trip_seconds",
        "Heartbeat round-trip times to monitored members",
        app.metrics.heartbeat_rtt.clone(),
    );
    let mut out = String::new();
    if encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

pub(super) async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], render(&app))
}

/// Shared handle to the runtime metrics.
pub type SharedMetrics = Arc<RuntimeMetrics>;
