//! S2: complementary decisions, end to end.
//!
//! The property of the pure `decide()` is tested in the core. Here the simulator pairs the
//! decisions that nodes actually acted on: when a node keeps itself and downs another, and that
//! other node, also keeping itself, downs the first within the same episode (the S1 bound of each
//! other), both sides kept themselves — the split brain the resolver exists to prevent.
//!
//! Only decisions on the same membership are paired: clean-partition decisions
//! (down the unreachable, or the reachable) taken by deciders that counted the same members and
//! split them into two disjoint sides, each keeping its own. Deciders whose kept sides overlap
//! saw different reachability (one decided, the other later decided on a newer partition without
//! having heard of the first decision); that is not a split into two sides A | B.
//! Decisions about indirectly connected nodes are taken on each side's own, possibly stale,
//! reachability and need not be complementary; whether two live clusters remain is S1's to judge.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_membership::UniqueAddress;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::MemberStatus;
use convoke_membership::sbr::Decision;

use super::{Invariant, Observation};

/// A decision that kept its decider: when, whom it downed, and the members it counted.
#[derive(Debug)]
struct Kept {
    at: Duration,
    downed: BTreeSet<UniqueAddress>,
    counted: BTreeSet<UniqueAddress>,
    /// The counted members it did not down: its side.
    side: BTreeSet<UniqueAddress>,
}

/// The members a keep-majority decision counts in `g`: not Joining, WeaklyUp, Down or Exiting.
fn counted(g: &Gossip) -> BTreeSet<UniqueAddress> {
    use MemberStatus::*;
    g.members()
        .filter(|m| !matches!(m.status(), Joining | WeaklyUp | Down | Exiting))
        .map(|m| m.node().clone())
        .collect()
}

/// The S2 checker.
#[derive(Debug, Default)]
pub struct ComplementaryDecisions {
    /// Per deciding incarnation whose last clean-partition decision kept itself.
    kept: BTreeMap<UniqueAddress, Kept>,
}

impl Invariant for ComplementaryDecisions {
    fn id(&self) -> &'static str {
        "S2"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        let window = super::s01_one_live_cluster::bound(obs.config);
        let me = obs.self_node;
        let clean = |d: &Decision| matches!(d, Decision::DownUnreachable | Decision::DownReachable);
        for d in obs.decisions.iter().filter(|d| clean(&d.decision)) {
            if d.downs_self || d.nodes.is_empty() {
                continue;
            }
            let members = counted(obs.before);
            let side: BTreeSet<UniqueAddress> = members.difference(&d.nodes).cloned().collect();
            for other in &d.nodes {
                let Some(k) = self.kept.get(other) else { continue };
                let episode = obs.now.saturating_sub(k.at) <= window;
                let split = k.counted == members && k.side.is_disjoint(&side);
                if k.downed.contains(me) && episode && split {
                    return Err(format!(
                        "{me} kept itself and downed {other} ({:?}), and {other} had kept itself \
                         and downed {me} {:.1} s earlier, both counting the same {} members: \
                         both sides survive",
                        d.decision,
                        (obs.now - k.at).as_secs_f64(),
                        members.len()
                    ));
                }
            }
            let kept = Kept { at: obs.now, downed: d.nodes.clone(), counted: members, side };
            self.kept.insert(me.clone(), kept);
        }
        Ok(())
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.kept.remove(node);
    }
}
