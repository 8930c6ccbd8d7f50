//! Metrics: what the runtime records as it happens ([`RuntimeMetrics`]), and the Prometheus text
//! rendering of those plus what is read at scrape time ([`Scrape`]: the membership view, the
//! failure detector's φ, the shard regions and singletons) and the transport's counters
//! ([`Metrics::render`]). The management server serves it at `/metrics`; the README's "Monitoring"
//! section lists every metric, and `monitoring/` holds the dashboard and alert rules on them.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use convoke_membership::sbr::{Decision, DowningDecision};
use convoke_membership::{Address, CurrentClusterState, MemberStatus};
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
    /// The split-brain resolver's decisions that downed members, by decision and by whether
    /// this node was among the downed.
    pub sbr_decisions: Family<Vec<(String, String)>, Counter>,
    /// Patches of this pod's deletion-cost annotation, by outcome (`ok`, the API server's
    /// status code, or `unreachable`).
    pub deletion_cost_patches: Family<Vec<(String, String)>, Counter>,
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        let buckets = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
        Self {
            heartbeat_rtt: Histogram::new(buckets),
            sbr_decisions: Family::default(),
            deletion_cost_patches: Family::default(),
        }
    }
}

/// What a scrape reads from the rest of the node when `/metrics` is asked for.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// The node's view of the cluster.
    pub state: CurrentClusterState,
    /// Whether this node leads.
    pub is_leader: bool,
    /// This node's own status in its view (`None`: not a member, as before joining).
    pub self_status: Option<MemberStatus>,
    /// The failure detector's φ of every member this node monitors.
    pub phi: Vec<(Address, f64)>,
    /// This node's shard regions (proxies included, with no shards).
    pub regions: Vec<RegionFigures>,
    /// The singletons started on this node.
    pub singletons: Vec<SingletonFigures>,
}

impl Scrape {
    /// A scrape of the membership view only.
    pub fn of(state: CurrentClusterState, is_leader: bool) -> Self {
        let self_status = state.self_member().map(|m| m.status());
        Self { state, is_leader, self_status, ..Self::default() }
    }
}

/// One shard region's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionFigures {
    /// The entity type.
    pub entity_type: String,
    /// The shards it hosts.
    pub shards: usize,
    /// The entities running (or stopping) in them.
    pub entities: u64,
    /// Whether the entity type's coordinator runs on this node.
    pub coordinator_here: bool,
}

/// One singleton's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SingletonFigures {
    /// Its name.
    pub name: String,
    /// Whether its instance runs on this node.
    pub running_here: bool,
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

    /// Counts a split-brain resolver decision; one that downs nobody is not counted.
    pub(crate) fn record_decision(&self, decision: &DowningDecision) {
        if !decision.nodes.is_empty() {
            self.count_decision(&decision.decision, decision.downs_self);
        }
    }

    /// Counts a patch of this pod's deletion-cost annotation by its outcome.
    pub(crate) fn record_deletion_cost_patch(&self, outcome: &str) {
        let l = labels(&[("outcome", outcome)]);
        self.recorded.deletion_cost_patches.get_or_create(&l).inc();
    }

    fn count_decision(&self, decision: &Decision, downs_self: bool) {
        // The decision's name without its parameters (`AcquireLeaseAndDownUnreachable(2s)`).
        let name = decision.to_string();
        let name = name.split('(').next().unwrap_or_default();
        let downs_self = if downs_self { "true" } else { "false" };
        let l = labels(&[("decision", name), ("downs_self", downs_self)]);
        self.recorded.sbr_decisions.get_or_create(&l).inc();
    }

    /// Renders every metric in the Prometheus text format, with what `scrape` read.
    pub fn render(&self, scrape: &Scrape) -> String {
        let Scrape { state, is_leader, .. } = scrape;
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
        g.set(i64::from(*is_leader));
        let own = gauge_family(
            &mut registry,
            "self_status",
            "1 for this node's own status in its view, 0 for every other status",
        );
        for status in MemberStatus::ALL {
            let v = i64::from(scrape.self_status == Some(status));
            own.get_or_create(&labels(&[("status", status.name())])).set(v);
        }
        let phi = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "member_phi",
            "The failure detector's suspicion level of each monitored member (unreachable above the threshold)",
            phi.clone(),
        );
        for (address, value) in &scrape.phi {
            phi.get_or_create(&labels(&[("address", &address.to_string())])).set(*value);
        }
        registry.register(
            "sbr_decisions",
            "Split-brain resolver decisions that downed members, by decision",
            self.recorded.sbr_decisions.clone(),
        );
        registry.register(
            "pod_deletion_cost_patches",
            "Patches of this pod's deletion-cost annotation, by outcome (ok, the API server's status, unreachable)",
            self.recorded.deletion_cost_patches.clone(),
        );
        register_sharding(&mut registry, &scrape.regions);
        let running = gauge_family(
            &mut registry,
            "singleton_running",
            "1 when the singleton's instance runs on this node, else 0",
        );
        for s in &scrape.singletons {
            running.get_or_create(&labels(&[("name", &s.name)])).set(i64::from(s.running_here));
        }

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

fn register_sharding(registry: &mut Registry, regions: &[RegionFigures]) {
    let shards = gauge_family(registry, "sharding_shards", "Shards hosted by this node's region");
    let entities = gauge_family(
        registry,
        "sharding_entities",
        "Entities running in the shards this node's region hosts",
    );
    let coordinator = gauge_family(
        registry,
        "sharding_coordinator",
        "1 when the entity type's shard coordinator runs on this node, else 0",
    );
    for r in regions {
        let l = labels(&[("entity_type", &r.entity_type)]);
        shards.get_or_create(&l).set(i64::try_from(r.shards).unwrap_or(i64::MAX));
        entities.get_or_create(&l).set(i64::try_from(r.entities).unwrap_or(i64::MAX));
        coordinator.get_or_create(&l).set(i64::from(r.coordinator_here));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_counted_by_name_and_whether_they_downed_this_node() {
        let metrics = Metrics::default();
        let lease = Decision::AcquireLeaseAndDownUnreachable {
            acquire_delay: std::time::Duration::from_secs(2),
        };
        metrics.count_decision(&Decision::DownUnreachable, false);
        metrics.count_decision(&Decision::DownUnreachable, false);
        metrics.count_decision(&Decision::DownReachable, true);
        metrics.count_decision(&lease, false);
        let text = metrics.render(&Scrape::default());
        for line in [
            "convoke_sbr_decisions_total{decision=\"DownUnreachable\",downs_self=\"false\"} 2",
            "convoke_sbr_decisions_total{decision=\"DownReachable\",downs_self=\"true\"} 1",
            "convoke_sbr_decisions_total{decision=\"AcquireLeaseAndDownUnreachable\",downs_self=\"false\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("DownAll"), "{text}");
        assert!(!text.contains("downs_self=\"true\"} 2"), "{text}");
    }

    #[test]
    fn phi_regions_and_singletons_are_rendered_with_their_labels() {
        let address: Address = "convoke://c@10.0.0.9:25520".parse().unwrap();
        let scrape = Scrape {
            self_status: Some(MemberStatus::Leaving),
            phi: vec![(address, 1.5)],
            regions: vec![RegionFigures {
                entity_type: "counter".into(),
                shards: 7,
                entities: 40,
                coordinator_here: true,
            }],
            singletons: vec![SingletonFigures { name: "ticker".into(), running_here: false }],
            ..Scrape::default()
        };
        let text = Metrics::default().render(&scrape);
        for line in [
            "convoke_self_status{status=\"Leaving\"} 1",
            "convoke_self_status{status=\"Up\"} 0",
            "convoke_member_phi{address=\"convoke://c@10.0.0.9:25520\"} 1.5",
            "convoke_sharding_shards{entity_type=\"counter\"} 7",
            "convoke_sharding_entities{entity_type=\"counter\"} 40",
            "convoke_sharding_coordinator{entity_type=\"counter\"} 1",
            "convoke_singleton_running{name=\"ticker\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
