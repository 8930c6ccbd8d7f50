//! S2: complementary decisions, end to end.
//!
//! The property of the pure `decide()` is tested in the core. Here the simulator pairs the
//! decisions that nodes actually acted on: when a node keeps itself and downs another, and that
//! other node, also keeping itself, downs the first within the same episode (the S1 bound of each
//! other), both sides kept themselves — the split brain the resolver exists to prevent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_membership::UniqueAddress;

use super::{Invariant, Observation};

/// The S2 checker.
#[derive(Debug, Default)]
pub struct ComplementaryDecisions {
    /// Per deciding incarnation that kept itself: when, and whom it downed.
    kept: BTreeMap<UniqueAddress, (Duration, BTreeSet<UniqueAddress>)>,
}

impl Invariant for ComplementaryDecisions {
    fn id(&self) -> &'static str {
        "S2"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        let window = super::s01_one_live_cluster::bound(obs.config);
        let me = obs.self_node;
        for d in obs.decisions.iter().filter(|d| !d.downs_self && !d.nodes.is_empty()) {
            for other in &d.nodes {
                let Some((at, downed)) = self.kept.get(other) else { continue };
                if downed.contains(me) && obs.now.saturating_sub(*at) <= window {
                    return Err(format!(
                        "{me} kept itself and downed {other} ({:?}), and {other} had kept itself \
                         and downed {me} {:.1} s earlier: both sides survive",
                        d.decision,
                        (obs.now - *at).as_secs_f64()
                    ));
                }
            }
            self.kept.insert(me.clone(), (obs.now, d.nodes.clone()));
        }
        Ok(())
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.kept.remove(node);
    }
}
