//! The operator: downing, quarantine and bootstrap, done by the simulator on behalf of the parts
//! of a deployment it does not model (a runtime's transport, Cluster Bootstrap, a human).
//!
//! **Downing.** The cores run the split-brain resolver (keep-majority by default), which downs
//! crashed and cut-off nodes on its own; chaos runs use it by default (`--downing resolver`), and
//! then the operator downs nothing. With `--downing oracle` the resolver is switched off and the
//! operator downs instead, modelled on Akka's test-only AutoDowning: once the leader, in its own
//! view, has seen a member unreachable for `down_after`, it downs it; Reachable or Removed
//! cancels. Unlike AutoDowning, which downs whatever is unreachable on both sides of a partition
//! and so makes split brains, the operator is an *oracle*: it downs only incarnations that really
//! are gone — crashed processes, and nodes a fault deliberately cut off *and* that the fault marks
//! for downing ([`Operator::down_isolated`]). For such an isolated node it also downs the node from
//! itself, as a resolver's minority side would, so that it stops rather than lingering as a
//! zombie. Running both at once would let the oracle pre-empt most of the resolver's decisions, so
//! a run picks one. The oracle downs by address, as an operator does (`convoke down ADDRESS`), and
//! only when the leader's core resolves that address to the incarnation it means
//! (`Cluster::down_target`): a view can hold a restarted node's new incarnation beside its
//! earlier one, Down and waiting for removal, and asked by its first member at the address the
//! oracle once never downed the new one when it crashed too (seed 4220224 at N = 5: the unreachable
//! incarnation held convergence back, so the Down one was never removed either, L2).
//!
//! Two more duties stand in for the runtime and its environment:
//! - **Quarantine.** A transport refuses a removed incarnation (Akka quarantines it), and such a
//!   process can never rejoin; it must be restarted. The operator stops a running incarnation once
//!   a node that removed it (holds its tombstone) can reach it, so a node downed and removed while
//!   partitioned or paused does not live on as a zombie after the heal; the supervisor then
//!   restarts it like any other stopped process.
//! - **Bootstrap.** When no process is a member of any cluster any more, the lowest running slot
//!   forms a new one (see [`Operator::tick`]).
//!
//! The supervisor itself (restarts after a random delay, with a new uid on the same address,
//! joining through every other slot) belongs to the processes ([`crate::processes::Supervisor`]);
//! its delays are configured here, in [`OperatorConfig::restart_after`].
//!
//! The operator acts on the world through [`Control`] only.

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::UniqueAddress;
use convoke_membership::member::MemberStatus;
use serde::Serialize;

use crate::control::{Action, Control};

/// How downing is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Downing {
    /// Nobody downs anything.
    Off,
    /// The leader downs gone incarnations after `down_after` (see the module docs).
    Oracle,
}

/// The operator's settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperatorConfig {
    /// How downing is done.
    pub downing: Downing,
    /// How long the leader must have seen a gone incarnation unreachable before downing it.
    pub down_after: Duration,
    /// How often the operator looks.
    pub tick: Duration,
    /// Whether removed incarnations that are still running are stopped (quarantine).
    pub quarantine: bool,
    /// Restart stopped processes after a delay drawn uniformly from this range; `None`: never.
    pub restart_after: Option<(Duration, Duration)>,
    /// When no process has been a member of any cluster for this long, the lowest running slot
    /// joins itself (see [`Operator::tick`]); `None`: never.
    pub bootstrap_after: Option<Duration>,
}

impl OperatorConfig {
    /// No operator at all.
    pub fn off() -> Self {
        Self {
            downing: Downing::Off,
            down_after: Duration::ZERO,
            tick: Duration::from_secs(1),
            quarantine: false,
            restart_after: None,
            bootstrap_after: None,
        }
    }

    /// No downing (the split-brain resolver in the cores does it): quarantine, restarts after
    /// 1–10 s, and a bootstrap after 10 s without any cluster.
    pub fn supervisor() -> Self {
        Self {
            downing: Downing::Off,
            down_after: Duration::ZERO,
            tick: Duration::from_secs(1),
            quarantine: true,
            restart_after: Some((Duration::from_secs(1), Duration::from_secs(10))),
            bootstrap_after: Some(Duration::from_secs(10)),
        }
    }

    /// Oracle downing after `down_after`, quarantine and restarts after 1–10 s.
    pub fn oracle(down_after: Duration) -> Self {
        Self {
            downing: Downing::Oracle,
            down_after,
            tick: Duration::from_secs(1),
            quarantine: true,
            restart_after: Some((Duration::from_secs(1), Duration::from_secs(10))),
            bootstrap_after: Some(Duration::from_secs(10)),
        }
    }

    /// Whether the operator needs its periodic tick.
    pub fn is_active(&self) -> bool {
        self.downing != Downing::Off || self.quarantine || self.bootstrap_after.is_some()
    }
}

#[derive(Clone, Debug, Default)]
struct Pending {
    /// When it was marked for downing.
    marked_at: Duration,
    /// Since when the current leader has seen it unreachable.
    since: Option<Duration>,
    /// The slot of an isolated node that must also down itself.
    isolated_slot: Option<usize>,
}

/// The operator's state.
#[derive(Debug)]
pub struct Operator {
    config: OperatorConfig,
    /// Incarnations to down, until they are Down or gone everywhere.
    pending: BTreeMap<UniqueAddress, Pending>,
    /// Downs issued (target, issuer slot, time), for reports.
    pub downs: Vec<(UniqueAddress, usize, Duration)>,
    /// Incarnations stopped by quarantine.
    pub quarantined: Vec<UniqueAddress>,
    /// Since when no process has been a member of a cluster.
    no_cluster_since: Option<Duration>,
    /// Bootstraps done (slot, time), for reports.
    pub bootstraps: Vec<(usize, Duration)>,
}

impl Operator {
    /// An operator with these settings.
    pub fn new(config: OperatorConfig) -> Self {
        Self {
            config,
            pending: BTreeMap::new(),
            downs: Vec::new(),
            quarantined: Vec::new(),
            no_cluster_since: None,
            bootstraps: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &OperatorConfig {
        &self.config
    }

    /// An incarnation crashed: down it once the leader sees it unreachable.
    pub fn on_crash(&mut self, node: UniqueAddress, now: Duration) {
        if self.config.downing == Downing::Oracle {
            self.pending.entry(node).or_insert(Pending { marked_at: now, ..Pending::default() });
        }
    }

    /// A fault cut off the incarnation in `slot` for good: down it from the rest once the leader
    /// sees it unreachable, and from itself at the same moment.
    pub fn down_isolated(&mut self, node: UniqueAddress, slot: usize, now: Duration) {
        if self.config.downing == Downing::Oracle {
            self.pending
                .insert(node, Pending { marked_at: now, since: None, isolated_slot: Some(slot) });
        }
    }

    /// Incarnations still to be downed.
    pub fn pending(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.pending.keys()
    }

    /// The operator's periodic look at the world.
    ///
    /// Crashes are taken in here, not as they happen: nothing reads the marks between two looks,
    /// and a mark keeps the time of its crash.
    pub fn tick(&mut self, w: &mut impl Control) {
        for (node, at) in w.take_crashes() {
            self.on_crash(node, at);
        }
        if self.config.downing == Downing::Oracle {
            self.downing_tick(w);
        }
        if self.config.quarantine {
            self.quarantine_tick(w);
        }
        if self.config.bootstrap_after.is_some() {
            self.bootstrap_tick(w);
        }
    }

    /// What Cluster Bootstrap does in a deployment: when the resolver downed every member
    /// (down-all, or each side of a partition downing itself), the restarted processes all try to
    /// join some other slot, and nobody would ever form a cluster again. Once no process (running
    /// or paused) has been a member of any cluster for `bootstrap_after`, the lowest running slot
    /// joins itself; the others' join attempts then find it. As the operator sees the whole world,
    /// this never makes a second cluster.
    fn bootstrap_tick(&mut self, w: &mut impl Control) {
        let now = w.now();
        let any_member =
            (0..w.slots()).any(|i| w.core(i).is_some_and(|c| c.gossip().has_member(c.self_node())));
        let first_running = w.running().next();
        let (Some(slot), false) = (first_running, any_member) else {
            self.no_cluster_since = None;
            return;
        };
        let since = *self.no_cluster_since.get_or_insert(now);
        let wait = self.config.bootstrap_after.unwrap_or(Duration::MAX);
        if now.saturating_sub(since) >= wait {
            self.no_cluster_since = None;
            self.bootstraps.push((slot, now));
            w.join(slot, slot);
        }
    }

    fn downing_tick(&mut self, w: &mut impl Control) {
        let now = w.now();
        let down_after = self.config.down_after;
        let targets: Vec<UniqueAddress> = self.pending.keys().cloned().collect();
        for target in targets {
            let mut member_somewhere = false;
            let mut down_somewhere = false;
            let mut leader_sees_unreachable = None;
            for i in w.running().collect::<Vec<_>>() {
                let core = w.core(i).expect("running");
                let g = core.gossip();
                let Some(m) = g.member(&target) else { continue };
                member_somewhere = true;
                if m.status() == MemberStatus::Down {
                    down_somewhere = true;
                    break;
                }
                let me = core.self_node();
                if *me != target
                    && leader_sees_unreachable.is_none()
                    && core.membership().is_leader(me)
                    && g.reachability().all_unreachable_or_terminated().contains(&target)
                {
                    leader_sees_unreachable = Some(i);
                }
            }
            let p = self.pending.get_mut(&target).expect("listed");
            if !member_somewhere {
                // Gone everywhere; but a join it sent before it died may still be admitted, so
                // wait a while before forgetting it.
                if now.saturating_sub(p.marked_at) > FORGET_AFTER {
                    self.pending.remove(&target);
                }
                continue;
            }
            if down_somewhere {
                p.since = None;
                continue;
            }
            let Some(leader) = leader_sees_unreachable else {
                p.since = None;
                continue;
            };
            let since = *p.since.get_or_insert(now);
            if now.saturating_sub(since) < down_after {
                continue;
            }
            let isolated = p.isolated_slot;
            p.since = None;
            let Some(target_slot) = w.slot_of(&target.address) else { continue };
            self.downs.push((target.clone(), leader, now));
            // `down` takes an address: make sure it names this incarnation in the leader's view,
            // as the core resolves it (the first member at the address would be an earlier,
            // already Down incarnation of a restarted node, and the target never downed).
            let names_target =
                w.core(leader).is_some_and(|c| c.down_target(&target.address) == Some(&target));
            if names_target {
                w.apply(Action::Down { from: leader, target: target_slot });
            }
            if let Some(slot) = isolated
                && w.node(slot) == Some(&target)
            {
                w.apply(Action::Down { from: slot, target: slot });
            }
        }
    }

    fn quarantine_tick(&mut self, w: &mut impl Control) {
        let running: Vec<usize> = w.running().collect();
        let mut victims = Vec::new();
        for &i in &running {
            let Some(node) = w.node(i).cloned() else { continue };
            let removed_by_reachable = running.iter().any(|&j| {
                j != i
                    && w.core(j).is_some_and(|c| c.gossip().tombstones().contains_key(&node))
                    && w.link_open(i, j)
            });
            if removed_by_reachable {
                victims.push((i, node));
            }
        }
        for (i, node) in victims {
            self.quarantined.push(node);
            w.crash(i);
            // A quarantined process exits; the supervisor restarts it like any other stopped one.
            w.schedule_restart(i);
        }
    }
}

impl Default for Operator {
    /// No operator at all.
    fn default() -> Self {
        Self::new(OperatorConfig::off())
    }
}

/// How long a marked incarnation that is nowhere a member stays marked.
const FORGET_AFTER: Duration = Duration::from_secs(120);
