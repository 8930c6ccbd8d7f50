//! S1: no two live sub-clusters once the split-brain resolver has had time to decide.
//!
//! Two running processes whose own status is a live one (WeaklyUp, Up, Leaving, preparing for
//! shutdown) and that each hold the other as Down or not a member at all, and hold no third member
//! as live in common, are in two different live clusters: each side kept itself and gave the other
//! up. Two views that still share a live member are one cluster whose views have not merged yet
//! (see [`holds_a_common_live_member`]). That may last while a decision is under
//! way (the failure detector's verdict, `stable_after`, down-all-when-unstable, the losing side's
//! Down spreading and its processes stopping), but not longer: the checker fails once one such pair
//! has lasted longer than [`bound`]. A side that downed itself does not count: its members see
//! themselves Down, and S14 demands that they stop.
//!
//! The check is O(n²) per look, so it looks every half second of virtual time, and only once some
//! member has been downed (before that no side can have given the other up).

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::config::Config;
use convoke_membership::member::MemberStatus;
use convoke_membership::{Cluster, UniqueAddress};

use super::{Invariant, Observation, WorldView};

/// How often the world is looked at.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Paces a checker that looks at the whole world to one look every [`LOOK_EVERY`] of virtual time.
#[derive(Debug, Default)]
pub(super) struct Pace {
    last_look: Option<Duration>,
}

impl Pace {
    /// `None` while it is not yet time to look; otherwise the virtual time since the last look
    /// (zero at the first).
    pub(super) fn look(&mut self, now: Duration) -> Option<Duration> {
        let elapsed = match self.last_look {
            Some(t) if now < t + LOOK_EVERY => return None,
            Some(t) => now - t,
            None => Duration::ZERO,
        };
        self.last_look = Some(now);
        Some(elapsed)
    }
}

/// The S1 checker.
#[derive(Debug, Default)]
pub struct OneLiveCluster {
    armed: bool,
    pace: Pace,
    /// Pairs (lower, higher) of live nodes that hold each other Down or gone, and since when.
    split_since: BTreeMap<(UniqueAddress, UniqueAddress), Duration>,
}

/// How long two live clusters may coexist: a failure detector's verdict, `stable_after`,
/// down-all-when-unstable, two resolver ticks, and the losing side's Down spreading (up to five
/// leader ticks before a Down node shuts down anyway, plus ten seconds of dissemination under
/// loss), stretched by 10 % for clock drift.
pub(crate) fn bound(config: &Config) -> Duration {
    let fd = &config.failure_detector;
    let sbr = &config.split_brain_resolver;
    let detect = fd.acceptable_heartbeat_pause + fd.heartbeat_interval * 3;
    let decide = sbr.stable_after
        + sbr.down_all_when_unstable_after().unwrap_or(Duration::ZERO)
        + Duration::from_secs(2);
    let stop = config.leader_actions_interval * 5 + Duration::from_secs(10);
    (detect + decide + stop).mul_f64(1.1)
}

/// Whether `status` is that of a live member of a cluster.
pub(super) fn is_live(status: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(status, WeaklyUp | Up | Leaving | PreparingForShutdown | ReadyForShutdown)
}

/// Whether `core` holds `other` as Down or not a member.
pub(super) fn gives_up(core: &Cluster, other: &UniqueAddress) -> bool {
    core.gossip().member(other).is_none_or(|m| m.status() == MemberStatus::Down)
}

/// Whether `a` and `b` both hold a third node, the same incarnation, as a member that is not
/// Down: then they are two views of one cluster that have not merged yet, not two clusters. A
/// joiner welcomed by a member that then crashed, while a partition cut it off from the rest,
/// never heard of the members admitted after it, and they never heard of it; but it still holds
/// as Up the member that both sides share, and the cluster has not given that member up on
/// either side. Once the two can talk, that member readmits the forgotten joiner (README, "Split brain
/// resolver", on forgotten joiners). A joiner's fragment cannot act as a cluster meanwhile: its
/// view holds an unreachable Up member, so it never converges, and the oldest Up member, where
/// the singleton and the shard coordinator run, is not the joiner. Two sides that each gave up
/// the other do not share a live member: each holds the other side's members Down or removed.
fn holds_a_common_live_member(a: &Cluster, b: &Cluster) -> bool {
    let (ga, gb) = (a.gossip(), b.gossip());
    ga.members().any(|m| {
        m.node() != a.self_node()
            && m.node() != b.self_node()
            && m.status() != MemberStatus::Down
            && gb.member(m.node()).is_some_and(|o| o.status() != MemberStatus::Down)
    })
}

/// The live pairs of `world` that hold each other Down or gone, and no third member in common.
pub(super) fn split_pairs(world: &dyn WorldView) -> Vec<(UniqueAddress, UniqueAddress)> {
    let live: Vec<&Cluster> = (0..world.slots())
        .filter(|&i| world.is_running(i))
        .filter_map(|i| world.core(i))
        .filter(|c| is_live(c.self_status()))
        .collect();
    let mut pairs = Vec::new();
    for (k, a) in live.iter().enumerate() {
        for b in &live[k + 1..] {
            if gives_up(a, b.self_node())
                && gives_up(b, a.self_node())
                && !holds_a_common_live_member(a, b)
            {
                let (x, y) = (a.self_node().clone(), b.self_node().clone());
                pairs.push(if x < y { (x, y) } else { (y, x) });
            }
        }
    }
    pairs
}

/// `node`'s view of the membership, for a failure report: each member's address, uid, status and
/// whether `node`'s gossip holds it unreachable (`!`) or terminated (`x`).
fn describe_view(world: &dyn WorldView, node: &UniqueAddress) -> String {
    use convoke_membership::reachability::ReachabilityStatus;
    let core = (0..world.slots())
        .filter(|&i| world.is_running(i))
        .filter_map(|i| world.core(i))
        .find(|c| c.self_node() == node);
    let Some(core) = core else { return format!("{node}: not running") };
    let g = core.gossip();
    let members: Vec<String> = g
        .members()
        .map(|m| {
            let mark = match g.reachability().status(m.node()) {
                ReachabilityStatus::Reachable => "",
                ReachabilityStatus::Unreachable => "!",
                ReachabilityStatus::Terminated => "x",
            };
            format!("{}#{} {:?}{mark}", m.node().address.port(), m.node().uid, m.status())
        })
        .collect();
    format!("{}#{} sees [{}]", node.address.port(), node.uid, members.join(", "))
}

impl OneLiveCluster {
    /// A checker that looks from the start, as if a member had been downed already.
    #[cfg(test)]
    pub(crate) fn armed() -> Self {
        Self { armed: true, ..Self::default() }
    }
}

impl Invariant for OneLiveCluster {
    fn id(&self) -> &'static str {
        "S1"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if !self.armed {
            self.armed = obs.after.members().any(|m| m.status() == MemberStatus::Down);
        }
        Ok(())
    }

    fn wants_world(&self) -> bool {
        true
    }

    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let now = world.now();
        if !self.armed || self.pace.look(now).is_none() {
            return Ok(());
        }
        let Some(config) = (0..world.slots()).find_map(|i| world.core(i)).map(Cluster::config)
        else {
            return Ok(());
        };
        let bound = bound(config);
        let pairs = split_pairs(world);
        self.split_since.retain(|p, _| pairs.contains(p));
        for p in pairs {
            let since = *self.split_since.entry(p.clone()).or_insert(now);
            if now.saturating_sub(since) > bound {
                return Err(format!(
                    "{} and {} are both live and each holds the other Down or removed, for {:.1} s \
                     (bound {:.1} s): two live clusters; views: {}; {}",
                    p.0,
                    p.1,
                    (now - since).as_secs_f64(),
                    bound.as_secs_f64(),
                    describe_view(world, &p.0),
                    describe_view(world, &p.1),
                ));
            }
        }
        Ok(())
    }
}
