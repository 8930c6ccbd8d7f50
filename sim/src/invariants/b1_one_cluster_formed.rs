//! B1: processes started with the same discovery form exactly one cluster — never two — and
//! within [`bound`].
//!
//! Safety. While the formation is watched, the live members (running or paused processes whose
//! own status is Joining, WeaklyUp, Up, Leaving or preparing for shutdown) make up one cluster:
//! grouping them by "one holds the other as a member" gives at most one group. A second group is
//! a second cluster, formed by a second node joining itself while the first cluster lived; no
//! time is allowed for it, since nothing would ever merge the two. A cluster whose every member
//! crashed before another formed is gone and does not count. (Once the formation is over, a
//! partition and the split-brain resolver may rightly split a cluster for a while: that is S1's
//! business, so B1 is no longer watched then.)
//!
//! Liveness. Within [`bound`] of the moment the faults of discovery and probes end and every
//! process has started (whichever comes last), every process is a member of that one cluster, all
//! Up, with convergence. The bootstrap layer ([`crate::bootstrap`]) runs the safety check after
//! every join it makes and whenever its driver looks; the driver (`bootstrap`, `chaos
//! --bootstrap`) judges the bound. This is not a registered checker: like S18, it belongs to the
//! layer that can break it.
//!
//! The safety part holds when `bootstrap.required_contact_point_nr` is the number of processes
//! started (the recommended setting): only a node that has heard from every contact point, and is
//! the lowest of them, forms a cluster, and it forms none while any member of a live cluster
//! answers its probes with that cluster's seed nodes. With fewer required, a node that sees only
//! some of the pods for a stable margin (partial discovery) may form a cluster of its own; the
//! `bootstrap` command can run that setting to show it (`--required`).

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_bootstrap::BootstrapSettings;
use convoke_membership::config::{Config, RETRY_UNSUCCESSFUL_JOIN_AFTER_ON};
use convoke_membership::member::MemberStatus;
use convoke_membership::{Cluster, UniqueAddress};

use super::{Invariant, WorldView};

/// Whether `status` is that of a member of a live cluster, for B1: joined, and not downed or on
/// its way out.
pub fn is_member(status: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(status, Joining | WeaklyUp | Up | Leaving | PreparingForShutdown | ReadyForShutdown)
}

/// The node of `core` if it is a member of a live cluster (see [`is_member`]).
fn member_node(core: &Cluster) -> Option<&UniqueAddress> {
    is_member(core.self_status()).then(|| core.self_node())
}

/// The B1 checker (its safety part; the bound is judged by the driver).
#[derive(Debug, Default)]
pub struct OneClusterFormed;

/// The live clusters of `world`: the slots of live members, grouped by "one holds the other as a
/// member" (transitively), each group in slot order, the groups by their lowest slot.
pub fn clusters(world: &dyn WorldView) -> Vec<Vec<usize>> {
    let n = world.slots();
    let live: Vec<usize> = (0..n)
        .filter(|&i| !world.is_stopped(i) && world.core(i).and_then(member_node).is_some())
        .collect();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let node_of: BTreeMap<usize, _> =
        live.iter().map(|&i| (i, world.core(i).map(|c| c.self_node().clone()))).collect();
    for &i in &live {
        let Some(core) = world.core(i) else { continue };
        for &j in &live {
            if j == i {
                continue;
            }
            if node_of[&j].as_ref().is_some_and(|other| core.gossip().has_member(other)) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in &live {
        let r = root(&mut parent, i);
        groups.entry(r).or_default().push(i);
    }
    groups.into_values().collect()
}

impl Invariant for OneClusterFormed {
    fn id(&self) -> &'static str {
        "B1"
    }

    fn wants_world(&self) -> bool {
        true
    }

    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let groups = clusters(world);
        if groups.len() <= 1 {
            return Ok(());
        }
        let list: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
        Err(format!(
            "{} clusters formed by bootstrap, with the slots {}: each holds none of the others' \
             members",
            groups.len(),
            list.join(" and ")
        ))
    }
}

/// What the bound depends on besides the bootstrap settings: the models of discovery and probes
/// (see [`crate::bootstrap`]), the core configuration, the number of processes and the largest
/// clock drift.
#[derive(Clone, Copy, Debug)]
pub struct BoundInputs<'a> {
    /// Every node's bootstrap settings.
    pub settings: &'a BootstrapSettings,
    /// A pod is listed by discovery at most this long after its process started.
    pub register_delay: Duration,
    /// The longest lookup (one that takes longer ends at `resolve_timeout`).
    pub lookup_latency_max: Duration,
    /// Whether lookups may have failed or timed out before the calm (the backoff may be at its
    /// cap).
    pub lookups_may_fail: bool,
    /// The longest round trip of a probe after the calm.
    pub probe_round_trip_max: Duration,
    /// The cores' configuration.
    pub config: &'a Config,
    /// The number of processes.
    pub nodes: usize,
    /// The largest clock drift, parts per million either way.
    pub max_drift_ppm: i32,
    /// Whether the membership network may lose messages (a join may need a second attempt).
    pub lossy_network: bool,
}

/// How long after the faults end and the last process started (`T0`) one cluster of every process
/// may take to form, all Up with convergence (`docs/architecture.md`, "Bootstrap in the
/// simulator", derives it):
///
/// 1. `D` = `register_delay`: every pod is listed by `T0 + D`.
/// 2. `lookup` = `max(resolve_timeout, probe_timeout)` for what was in flight at `T0` (a probe
///    failing then may give its contact point up and push the next lookup a backoff later), plus
///    the backoff then in effect — `discovery_backoff_max` if lookups may have failed, else
///    `discovery_interval` — stretched by `1 + discovery_backoff_random_factor`, plus the longest
///    lookup: by then every node has an observation of all the pods, and it no longer changes.
/// 3. `stable_margin + probe_interval`: the lowest node decides at the margin's end, or at the
///    next regular decider run if an answer was missing then, and joins itself (or, if a cluster
///    formed earlier, every node joins it at its next answer).
/// 4. `probe_interval × (1 + probe_interval_jitter)` + the longest probe round trip: every other
///    node's next probe of it reports the cluster, and it joins the seed nodes.
/// 5. Membership: `seed_node_timeout + retry_unsuccessful_join_after` once if the network may
///    lose a join's messages; the periodic tasks' initial delay; two leader ticks; and
///    `gossip_interval × (2⌈log₂ n⌉ + 5)` twice (the joins reaching the leader's view, then the
///    moves to Up reaching everyone's and their seen sets).
///
/// All of it stretched by the largest clock drift (every interval runs on a node's clock). Probes
/// are assumed to keep an answer fresh: `probe_interval × (1 + jitter) + probe round trip` is
/// less than `probing_failure_timeout` (so with the defaults: 1.2 s + 20 ms < 3 s).
pub fn bound(i: &BoundInputs<'_>) -> Duration {
    let s = i.settings;
    let cp = &s.contact_point;
    let jitter = 1.0 + s.discovery_backoff_random_factor.max(0.0);
    let backoff = if i.lookups_may_fail { s.discovery_backoff_max } else { s.discovery_interval };
    let lookup = s.resolve_timeout.max(cp.probe_timeout)
        + backoff.mul_f64(jitter)
        + i.lookup_latency_max.min(s.resolve_timeout);
    let decide = s.stable_margin + cp.probe_interval;
    let rtt = i.probe_round_trip_max.min(cp.probe_timeout);
    let learn = cp.probe_interval.mul_f64(1.0 + cp.probe_interval_jitter.max(0.0)) + rtt;
    let c = i.config;
    let join = if i.lossy_network {
        c.seed_node_timeout
            + c.retry_unsuccessful_join_after.unwrap_or(RETRY_UNSUCCESSFUL_JOIN_AFTER_ON)
    } else {
        Duration::ZERO
    };
    let log2 = usize::BITS - i.nodes.max(1).leading_zeros();
    let spread = c.gossip_interval * (2 * log2 + 5);
    let membership =
        join + c.periodic_tasks_initial_delay + c.leader_actions_interval * 2 + spread * 2;
    let total = i.register_delay + lookup + decide + learn + membership;
    total.mul_f64(1.0 + f64::from(i.max_drift_ppm.unsigned_abs()) / 1e6)
}
