//! S3: indirectly connected nodes are downed, never kept.
//!
//! Whenever a node's resolver acts on a decision, the checker recomputes from the gossip the
//! resolver saw (the node's gossip before the step) which members are indirectly connected, with
//! its own code: those that both observe a member unreachable and are observed so (a cycle), and
//! both ends of an unreachability record whose subject has seen the current gossip, counting only
//! records between members that are neither Down nor Exiting. Every one of
//! them that could still be downed must be among the nodes the decision downs (or already Down
//! after the step). A decision to down everyone, or a node downing itself because it was
//! quarantined, is not about them.
//!
//! Records of an observer that the deciding node and every member it reaches observe as
//! unreachable are left out, as the resolver leaves them out: nothing that node can reach still
//! talks to that observer, so its records crossed before a cut and may be stale (README, "Split
//! brain resolver"). Such an observer is on the far side of the decider's view; a decision that
//! keeps the decider's side downs it anyway, and one that downs the decider's side leaves it to
//! its own side.
//!
//! The resolver ticks after the leader actions and the reaper. When the leader moved a member in
//! the same step (Joining to WeaklyUp or Up, Leaving to Exiting, a removal: seen in the statuses
//! before and after the step, or in the core's events when the decision then downed the moved
//! member) or the reaper changed reachability, the gossip the resolver decided on already had a
//! new version, whose seen set holds only this node: the seen-by evidence was gone when it
//! decided, and only the cycles count, in the reachability table after the step (the decision's
//! downs leave it as it was).

use std::collections::BTreeSet;

use convoke_membership::UniqueAddress;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::MemberStatus;
use convoke_membership::reachability::{Reachability, ReachabilityStatus};
use convoke_membership::sbr::Decision;

use super::{Invariant, Observation};

/// The S3 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct IndirectlyConnectedDowned;

/// Whether the leader's own actions in the step changed a member's status to anything but Down
/// (which is the decision's doing), or removed one.
fn leader_acted(before: &Gossip, after: &Gossip) -> bool {
    before.members().any(|m| match after.member(m.node()) {
        Some(now) => now.status() != m.status() && now.status() != MemberStatus::Down,
        None => true,
    })
}

/// Whether `node` is a member that is neither Down nor Exiting: records about others say nothing
/// about how the cluster is connected.
fn is_active(g: &Gossip, node: &UniqueAddress) -> bool {
    g.member(node).is_some_and(|m| !m.status().is_down_or_exiting())
}

/// The members whose records `decider` sets aside: those it observes as unreachable, and so does
/// every active member it does not observe as unreachable.
fn cut_off_from(
    g: &Gossip,
    table: &Reachability,
    decider: &UniqueAddress,
) -> BTreeSet<UniqueAddress> {
    let observed = table.all_unreachable_from(decider);
    let side: Vec<&UniqueAddress> = g
        .members()
        .map(|m| m.node())
        .filter(|m| *m == decider || (is_active(g, m) && !observed.contains(*m)))
        .collect();
    (observed.iter())
        .filter(|o| side.iter().all(|m| m == o || !table.is_reachable_by(m, o)))
        .cloned()
        .collect()
}

/// The indirectly connected members of `g` with the reachability table `table`, as `decider`
/// sees them: from cycles, and with `seen_evidence` also from records whose subject has seen `g`.
fn indirectly_connected_by(
    g: &Gossip,
    table: &Reachability,
    decider: &UniqueAddress,
    seen_evidence: bool,
) -> BTreeSet<UniqueAddress> {
    let cut_off = cut_off_from(g, table, decider);
    let records: Vec<_> = table
        .records()
        .filter(|r| r.status != ReachabilityStatus::Reachable)
        .filter(|r| is_active(g, &r.observer) && is_active(g, &r.subject))
        .filter(|r| !cut_off.contains(&r.observer))
        .collect();
    let observers: BTreeSet<&UniqueAddress> = records.iter().map(|r| &r.observer).collect();
    let subjects: BTreeSet<&UniqueAddress> = records.iter().map(|r| &r.subject).collect();
    let mut out: BTreeSet<UniqueAddress> =
        observers.intersection(&subjects).map(|n| (*n).clone()).collect();
    for r in records.iter().filter(|r| seen_evidence && g.seen_by(&r.subject)) {
        out.insert(r.observer.clone());
        out.insert(r.subject.clone());
    }
    out
}

impl Invariant for IndirectlyConnectedDowned {
    fn id(&self) -> &'static str {
        "S3"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        let relevant = |d: &Decision| {
            !matches!(
                d,
                Decision::DownAll
                    | Decision::DownSelfQuarantinedByRemote
                    | Decision::DownSelfAfterPause
            )
        };
        for d in obs.decisions.iter().filter(|d| relevant(&d.decision)) {
            // The resolver ticks after the reaper: a reachability change in the same step came
            // first, gave the gossip a new version seen by this node alone, and is what it
            // decided on. The decision's own downs change no reachability.
            let table = obs.after.reachability();
            let reaped = obs.before.reachability() != table;
            let seen = !reaped && !obs.leader_moved && !leader_acted(obs.before, obs.after);
            let indirect = indirectly_connected_by(obs.before, table, obs.self_node, seen);
            let kept = indirect.iter().find(|n| {
                let downable =
                    obs.before.member(n).is_some_and(|m| !m.status().is_down_or_exiting());
                let still_up =
                    obs.after.member(n).is_some_and(|m| m.status() != MemberStatus::Down);
                downable && still_up && !d.nodes.contains(*n)
            });
            if let Some(n) = kept {
                return Err(format!(
                    "{} decided {:?} and kept {n}, which is indirectly connected in the gossip it \
                     decided on",
                    obs.self_node, d.decision
                ));
            }
        }
        Ok(())
    }
}
