//! S5: a downed or removed incarnation never comes back.
//!
//! Per observer (one incarnation of one node): once it has seen a `UniqueAddress` Down, or seen it
//! disappear from its gossip, that incarnation never shows up again in its gossip other than as
//! Down.
//!
//! And a new incarnation on the same host:port does not become a full member next to the old one:
//! in any one gossip, at most one incarnation of an address is Up (or Leaving, or preparing for
//! shutdown) at a time. Admitting the new incarnation only after downing the old one is a local
//! decision of the node that handles the Join, so two sides of a partition can each admit a
//! different incarnation and the merged gossip then holds both, Joining or WeaklyUp, until the
//! old one is downed; what must never happen is both being Up.

use std::collections::{BTreeMap, BTreeSet};

use convoke_membership::UniqueAddress;
use convoke_membership::member::MemberStatus;

use super::{Invariant, Observation};

/// The S5 checker.
#[derive(Debug, Default)]
pub struct NoResurrection {
    /// Per observer: the incarnations it has seen Down or removed.
    gone: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>>,
}

impl Invariant for NoResurrection {
    fn id(&self) -> &'static str {
        "S5"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if obs.members_kept() {
            // The members `before` passed with, and nothing gone since.
            return Ok(());
        }
        let gone = self.gone.entry(obs.self_node.clone()).or_default();
        for n in gone.iter() {
            if let Some(m) = obs.after.member(n)
                && m.status() != MemberStatus::Down
            {
                return Err(format!(
                    "{} saw {n} Down or removed, and now sees it {}",
                    obs.self_node,
                    m.status()
                ));
            }
        }
        let mut full: Option<&convoke_membership::Member> = None;
        for m in obs.after.members() {
            if full.is_some_and(|p| p.address() != m.address()) {
                full = None;
            }
            if !super::view::is_leader_status(m.status()) {
                continue;
            }
            if let Some(p) = full {
                return Err(format!(
                    "two incarnations of {} are full members in {}'s gossip: uid {} ({}) and uid \
                     {} ({})",
                    m.address(),
                    obs.self_node,
                    p.node().uid,
                    p.status(),
                    m.node().uid,
                    m.status()
                ));
            }
            full = Some(m);
        }
        gone.extend(
            obs.after
                .members()
                .filter(|m| m.status() == MemberStatus::Down)
                .map(|m| m.node().clone()),
        );
        gone.extend(
            super::view::before_and_after(obs.before, obs.after)
                .filter(|(_, now)| now.is_none())
                .map(|(m, _)| m.node().clone()),
        );
        Ok(())
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.gone.remove(node);
    }
}
