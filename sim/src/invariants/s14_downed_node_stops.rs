//! S14: a downed node stops.
//!
//! A running process whose core holds itself Down must shut down within a bound of its own running
//! time: the core waits for the Down to spread, at most four leader ticks (membership.md §9.3), so
//! the bound is five leader ticks plus a second, stretched by 10 % for clock drift. Time spent
//! paused does not count (a paused process runs nothing); what a process paused for longer than
//! `stable_after × 2` does after it resumes is covered by S5 and S1: it must not bring its old
//! incarnation back, nor keep a second live cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::member::MemberStatus;
use convoke_membership::{Cluster, UniqueAddress};

use super::s01_one_live_cluster::LOOK_EVERY;
use super::{Invariant, WorldView};

/// The S14 checker.
#[derive(Debug, Default)]
pub struct DownedNodeStops {
    last_look: Option<Duration>,
    /// Per running incarnation that holds itself Down: running time since it first did.
    down_for: BTreeMap<UniqueAddress, Duration>,
}

/// How long a Down node may keep running.
pub(super) fn bound(config: &convoke_membership::Config) -> Duration {
    (config.leader_actions_interval * 5 + Duration::from_secs(1)).mul_f64(1.1)
}

impl Invariant for DownedNodeStops {
    fn id(&self) -> &'static str {
        "S14"
    }

    fn wants_world(&self) -> bool {
        true
    }

    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let now = world.now();
        let elapsed = match self.last_look {
            Some(t) if now < t + LOOK_EVERY => return Ok(()),
            Some(t) => now - t,
            None => Duration::ZERO,
        };
        self.last_look = Some(now);
        let mut still = BTreeMap::new();
        for i in 0..world.slots() {
            let Some(core) = world.core(i).filter(|c| c.self_status() == MemberStatus::Down) else {
                continue;
            };
            let me = core.self_node().clone();
            let before = self.down_for.get(&me).copied();
            let ran = if world.is_running(i) { elapsed } else { Duration::ZERO };
            let total = before.map_or(Duration::ZERO, |d| d + ran);
            let bound = bound(Cluster::config(core));
            if total > bound {
                return Err(format!(
                    "{me} has held itself Down for {:.1} s of running time and still runs \
                     (bound {:.1} s)",
                    total.as_secs_f64(),
                    bound.as_secs_f64()
                ));
            }
            still.insert(me, total);
        }
        self.down_for = still;
        Ok(())
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.down_for.remove(node);
    }
}
