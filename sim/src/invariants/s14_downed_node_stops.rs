//! S14: a downed node stops.
//!
//! A running process whose core holds itself Down must shut down within a bound of its own running
//! time: the core waits at most four leader ticks for the Down to spread, so the bound is five
//! leader ticks plus a second, stretched by 10 % for clock drift. Time spent paused does not count
//! (a paused process runs nothing).
//!
//! A process paused for longer than `stable_after × 2` may have been downed and removed while it
//! could not hear of it. When every other live member removed it meanwhile, it must stop soon
//! after it resumes, whether or not it can reach them: within `stable_after` (the resolver's wait
//! for word from a member), a resolver tick, the Down-spreading bound above and ten seconds of
//! delivery under loss, stretched by 10 %, of running time. (That it does not bring its old
//! incarnation back or keep a second live cluster meanwhile is S5's and S1's to check.)

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::member::MemberStatus;
use convoke_membership::sbr::TICK_INTERVAL;
use convoke_membership::{Cluster, UniqueAddress};

use super::s01_one_live_cluster::Pace;
use super::{Invariant, WorldView};

/// The S14 checker.
#[derive(Debug, Default)]
pub struct DownedNodeStops {
    pace: Pace,
    /// Per incarnation that holds itself Down: its running time when it was first seen to.
    down_since: BTreeMap<UniqueAddress, Duration>,
    /// Per paused incarnation: since when (virtual time) it has been seen paused.
    paused_since: BTreeMap<UniqueAddress, Duration>,
    /// Per incarnation that resumed from a long pause after the others removed it: its running
    /// time when it was first seen running again.
    resumed_removed: BTreeMap<UniqueAddress, Duration>,
}

/// How long a process that resumed after its removal may keep running.
pub(crate) fn resumed_bound(config: &convoke_membership::Config) -> Duration {
    let sbr = &config.split_brain_resolver;
    (sbr.stable_after + TICK_INTERVAL + bound(config) + Duration::from_secs(10)).mul_f64(1.1)
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
        if self.pace.look(now).is_none() {
            return Ok(());
        }
        let mut still = BTreeMap::new();
        for i in 0..world.slots() {
            let down = |c: &&Cluster| c.self_status() == MemberStatus::Down;
            let Some(core) = world.core(i).filter(down).filter(|_| !world.is_stopped(i)) else {
                continue;
            };
            let me = core.self_node().clone();
            let ran = world.running_time(i);
            let since = self.down_since.get(&me).copied().unwrap_or(ran);
            let total = ran.saturating_sub(since);
            let bound = bound(Cluster::config(core));
            if total > bound {
                return Err(format!(
                    "{me} has held itself Down for {:.1} s of running time and still runs \
                     (bound {:.1} s)",
                    total.as_secs_f64(),
                    bound.as_secs_f64()
                ));
            }
            still.insert(me, since);
        }
        self.down_since = still;
        self.check_resumed(world, now)
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.down_since.remove(node);
        self.paused_since.remove(node);
        self.resumed_removed.remove(node);
    }
}

impl DownedNodeStops {
    /// The pause half: tracks pauses, and the running time of processes that resumed from one
    /// longer than `stable_after × 2` after every other live member removed them.
    fn check_resumed(&mut self, world: &dyn WorldView, now: Duration) -> Result<(), String> {
        for i in 0..world.slots() {
            let Some(core) = world.core(i).filter(|_| !world.is_stopped(i)) else { continue };
            let me = core.self_node().clone();
            if !world.is_running(i) {
                self.paused_since.entry(me).or_insert(now);
                continue;
            }
            if let Some(since) = self.paused_since.remove(&me) {
                let long = Cluster::config(core).split_brain_resolver.stable_after * 2;
                if now.saturating_sub(since) > long && removed_by_all_others(world, i, &me) {
                    self.resumed_removed.insert(me.clone(), world.running_time(i));
                    continue;
                }
            }
            let Some(since) = self.resumed_removed.get(&me) else { continue };
            let ran = world.running_time(i).saturating_sub(*since);
            let bound = resumed_bound(Cluster::config(core));
            if ran > bound {
                return Err(format!(
                    "{me} resumed from a pause longer than 2 × stable_after after every other \
                     live member had removed it, and still runs {:.1} s of running time later \
                     (bound {:.1} s)",
                    ran.as_secs_f64(),
                    bound.as_secs_f64()
                ));
            }
        }
        Ok(())
    }
}

/// Whether some other live member runs and every one holds `me`'s tombstone.
fn removed_by_all_others(world: &dyn WorldView, slot: usize, me: &UniqueAddress) -> bool {
    let others: Vec<&Cluster> = (0..world.slots())
        .filter(|&j| j != slot && world.is_running(j))
        .filter_map(|j| world.core(j))
        .filter(|c| super::s01_one_live_cluster::is_live(c.self_status()))
        .collect();
    !others.is_empty() && others.iter().all(|c| c.gossip().tombstones().contains_key(me))
}
