//! The split-brain resolver: automatic downing that keeps at most one side of a
//! partition running.
//!
//! [`SplitBrainResolver`] is a sans-IO state machine that the core feeds with the cluster events
//! it publishes, the current reachability and seen set, a 1 s tick and lease answers. It keeps a
//! [`DowningModel`] of its data center, waits until membership and reachability have been stable
//! for `stable_after`, and then — on the leader only — asks its [`Strategy`] for a [`Decision`]
//! and emits the nodes to down, the others first and itself last. On every node it downs all when
//! reachability keeps changing for longer than `stable_after + down_all_when_unstable`.
//!
//! Layout: this file holds the resolver (timing, instability, lease waiting); `strategy.rs` the
//! strategies and their settings; `decision.rs` the model, the decisions and the nodes each downs;
//! `lease.rs` the lease requests, the [`Lease`] trait and an in-memory lease.

mod decision;
mod lease;
mod strategy;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::address::UniqueAddress;
use crate::config::Config;
use crate::event::ClusterEvent;
use crate::gossip::SeenSet;
use crate::member::Member;
use crate::reachability::Reachability;

pub use self::decision::{Decision, DoubleIndirectlyConnected, DowningModel};
pub use self::lease::{
    Clock, InMemoryLease, InMemoryLeaseTable, Lease, LeaseError, LeaseFuture, LeaseOp,
    LeaseRequest, LeaseSettings, perform,
};
pub use self::strategy::Strategy;

/// How often the resolver looks at its model.
pub const TICK_INTERVAL: Duration = Duration::from_secs(1);

/// What led the resolver to act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecisionTrigger {
    /// Membership and reachability were stable for `stable_after`.
    Stable,
    /// Reachability kept changing past `stable_after + down_all_when_unstable`.
    Unstable,
    /// The lease was already held.
    LeaseHeld,
    /// The lease was acquired.
    LeaseAcquired,
    /// The lease was denied, so the decision was reversed.
    LeaseDenied,
    /// A member quarantined this node.
    QuarantinedByRemote,
    /// This node resumed from a long pause and heard from no member within `stable_after`.
    NoContactAfterPause,
}

/// A decision the resolver acted on, with what it saw: for the node's log.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DowningDecision {
    /// The decision.
    pub decision: Decision,
    /// Why it was taken now.
    pub trigger: DecisionTrigger,
    /// The nodes downed (this node last, if among them).
    pub nodes: BTreeSet<UniqueAddress>,
    /// Whether this node is among them.
    pub downs_self: bool,
    /// Set when the decision could not be applied and all were downed instead.
    pub fallback: Option<DoubleIndirectlyConnected>,
    /// The indirectly connected members seen.
    pub indirectly_connected: BTreeSet<UniqueAddress>,
    /// How many members were unreachable.
    pub unreachable: usize,
    /// How many members counted (not Joining, WeaklyUp, Down or Exiting).
    pub members: usize,
}

impl fmt::Display for DowningDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.address.to_string()).collect();
        write!(f, "split-brain resolver took decision {} ({:?})", self.decision, self.trigger)?;
        if let Some(e) = &self.fallback {
            write!(f, " but {e}")?;
        }
        write!(f, " and is downing [{}]", nodes.join(", "))?;
        if self.downs_self {
            f.write_str(" including this node")?;
        }
        write!(f, "; {} unreachable of {} members", self.unreachable, self.members)?;
        if !self.indirectly_connected.is_empty() {
            let ic: Vec<String> =
                self.indirectly_connected.iter().map(|n| n.address.to_string()).collect();
            write!(f, "; indirectly connected [{}]", ic.join(", "))?;
        }
        Ok(())
    }
}

/// Counts reachability changes since the first one, for down-all-when-unstable.
#[derive(Clone, Copy, Debug)]
struct ChangeStats {
    first: Instant,
    latest: Instant,
    count: u64,
}

impl ChangeStats {
    fn new(now: Instant) -> Self {
        Self { first: now, latest: now, count: 0 }
    }

    fn record(&mut self, now: Instant) {
        if self.count == 0 {
            self.first = now;
        }
        self.latest = now;
        self.count += 1;
    }
}

/// When the lease winner gives the lease back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ReleaseCondition {
    NoLease,
    WhenMembersRemoved(BTreeSet<UniqueAddress>),
    WhenTimeElapsed(Instant),
}

/// A lease decision waiting for the lease.
#[derive(Clone, Copy, Debug)]
enum Waiting {
    /// Asked whether the lease is held already.
    Check(Decision),
    /// Acquiring: after `acquire_at` if set, else the request is out.
    Acquire(Decision),
}

/// An input held back while a lease decision waits for its answer.
#[derive(Clone, Debug)]
enum Input {
    Event(ClusterEvent),
    Reachability(Reachability),
    SeenBy(Arc<SeenSet>),
    QuarantinedByRemote,
}

/// One node's split-brain resolver. See the [module documentation](self).
///
/// Inputs: [`handle_event`](Self::handle_event) for every published cluster event, then
/// [`handle_reachability`](Self::handle_reachability) and [`handle_seen`](Self::handle_seen) with
/// the current gossip's; [`handle_tick`](Self::handle_tick) every [`TICK_INTERVAL`];
/// [`handle_acquire_timeout`](Self::handle_acquire_timeout) once
/// [`acquire_deadline`](Self::acquire_deadline) passes; [`handle_lease_result`](Self::handle_lease_result)
/// for every lease request. Outputs: [`poll_down`](Self::poll_down) (in the order to down),
/// [`poll_lease_request`](Self::poll_lease_request), [`poll_decision`](Self::poll_decision).
#[derive(Debug)]
pub struct SplitBrainResolver {
    self_node: UniqueAddress,
    model: DowningModel,
    stable_after: Duration,
    down_all_when_unstable: Option<Duration>,
    lease_name: String,
    owner: String,
    leader: bool,
    self_member_added: bool,
    stopped: bool,
    stable_deadline: Instant,
    /// After a pause longer than `stable_after`: until when to wait for word from a member
    /// before downing this node. No other decision is taken meanwhile.
    contact_deadline: Option<Instant>,
    stats: ChangeStats,
    release: ReleaseCondition,
    release_in_flight: bool,
    waiting: Option<Waiting>,
    acquire_at: Option<Instant>,
    stash: Vec<Input>,
    downs: VecDeque<UniqueAddress>,
    lease_requests: VecDeque<LeaseRequest>,
    decisions: VecDeque<DowningDecision>,
}

impl SplitBrainResolver {
    /// The resolver of node `self_node` configured by `config` (validated), or `None` when
    /// `cluster.split_brain_resolver.active_strategy` is `"off"`.
    pub fn new(config: &Config, self_node: UniqueAddress, now: Instant) -> Option<Self> {
        let sbr = &config.split_brain_resolver;
        let strategy = Strategy::from_config(sbr)?;
        Some(Self {
            model: DowningModel::new(strategy, config.data_center.clone()),
            stable_after: sbr.stable_after,
            down_all_when_unstable: sbr.down_all_when_unstable_after(),
            lease_name: sbr.lease_majority.effective_lease_name(&config.system_name),
            owner: self_node.address.host_port(),
            self_node,
            leader: false,
            self_member_added: false,
            stopped: false,
            stable_deadline: now + sbr.stable_after,
            contact_deadline: None,
            stats: ChangeStats::new(now),
            release: ReleaseCondition::NoLease,
            release_in_flight: false,
            waiting: None,
            acquire_at: None,
            stash: Vec::new(),
            downs: VecDeque::new(),
            lease_requests: VecDeque::new(),
            decisions: VecDeque::new(),
        })
    }

    // ---- views --------------------------------------------------------------------------------

    /// The model of the data center.
    pub fn model(&self) -> &DowningModel {
        &self.model
    }

    /// Whether this node takes decisions: it is the leader and has been seen Up or WeaklyUp.
    pub fn is_responsible(&self) -> bool {
        self.leader && self.self_member_added
    }

    /// The earliest time a decision may be taken, unless something changes before.
    pub fn stable_deadline(&self) -> Instant {
        self.stable_deadline
    }

    /// After a long pause, until when this node waits to hear from a member (see
    /// [`handle_resumed`](Self::handle_resumed)).
    pub fn contact_deadline(&self) -> Option<Instant> {
        self.contact_deadline
    }

    /// Whether a lease decision is waiting for the lease.
    pub fn is_waiting_for_lease(&self) -> bool {
        self.waiting.is_some()
    }

    /// When to call [`handle_acquire_timeout`](Self::handle_acquire_timeout): the minority's
    /// delayed lease acquisition.
    pub fn acquire_deadline(&self) -> Option<Instant> {
        self.acquire_at
    }

    // ---- outputs ------------------------------------------------------------------------------

    /// The next node to down.
    pub fn poll_down(&mut self) -> Option<UniqueAddress> {
        self.downs.pop_front()
    }

    /// The next lease request.
    pub fn poll_lease_request(&mut self) -> Option<LeaseRequest> {
        self.lease_requests.pop_front()
    }

    /// The next decision acted on.
    pub fn poll_decision(&mut self) -> Option<DowningDecision> {
        self.decisions.pop_front()
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// A cluster event was published.
    pub fn handle_event(&mut self, now: Instant, event: &ClusterEvent) {
        if self.accepts(|| Input::Event(event.clone())) {
            self.apply_event(now, event.clone());
        }
    }

    /// The reachability of the current gossip.
    pub fn handle_reachability(&mut self, reachability: &Reachability) {
        if self.accepts(|| Input::Reachability(reachability.clone())) {
            self.model.set_reachability_seen_from(reachability, Some(&self.self_node));
        }
    }

    /// The nodes that have seen the current gossip.
    pub fn handle_seen(&mut self, seen_by: &Arc<SeenSet>) {
        if self.accepts(|| Input::SeenBy(seen_by.clone())) {
            self.model.set_seen_by(seen_by.clone());
        }
    }

    /// A current member quarantined this node: it downs itself.
    pub fn handle_quarantined_by_member(&mut self, now: Instant) {
        if self.accepts(|| Input::QuarantinedByRemote) {
            self.act(
                now,
                Decision::DownSelfQuarantinedByRemote,
                DecisionTrigger::QuarantinedByRemote,
            );
        }
    }

    /// This node's process did not run for `paused_for` (a stopped process, a suspended VM, a
    /// long stall) and runs again now.
    ///
    /// A pause longer than `stable_after` may have outlasted the others' decision to down this
    /// node: they may have removed it and changed their membership since, and what this node
    /// holds may be out of date in ways it cannot see (members that joined or left meanwhile).
    /// Deciding on that view could keep a side the others gave up, so the resolver takes no
    /// decision until it hears from a member again ([`handle_member_contact`](Self::handle_member_contact)),
    /// and if no member answers within `stable_after` it downs this node
    /// ([`Decision::DownSelfAfterPause`]). This holds for a node still Joining too: the others
    /// may have downed and removed it as well, and cut off from them it would make itself leader,
    /// move itself to WeaklyUp and admit new joiners into a membership nobody else holds. A node
    /// with no other member to hear from, or paused for less, goes on deciding as before. Either
    /// way the reachability changes counted for down-all-when-unstable start over (the pause says
    /// nothing about the network), and so does the wait for stability. (The core reports gaps
    /// longer than `stable_after` only.)
    pub fn handle_resumed(&mut self, now: Instant, paused_for: Duration) {
        if self.stopped {
            return;
        }
        self.stats = ChangeStats::new(now);
        self.reset_stable_deadline(now);
        let others = self.model.members(true, false).any(|m| !self.is_self(m.node()));
        if paused_for > self.stable_after && others {
            self.contact_deadline = Some(now + self.stable_after);
        }
    }

    /// This node heard from a member after resuming from a pause: an answer to a heartbeat sent
    /// since (a gossip read after the pause may have been sent before it, so it does not count). Its view is current again, and decisions resume once it has been
    /// stable for `stable_after`.
    pub fn handle_member_contact(&mut self, now: Instant) {
        if self.contact_deadline.take().is_some() {
            self.reset_stable_deadline(now);
        }
    }

    /// Whether an input is to be applied now: not once stopped, and not while a decision waits
    /// for the lease; then it is held back (made by `input`) and applied after the answer.
    fn accepts(&mut self, input: impl FnOnce() -> Input) -> bool {
        if self.stopped {
            return false;
        }
        if self.waiting.is_some() {
            self.stash.push(input());
            return false;
        }
        true
    }

    fn is_self(&self, node: &UniqueAddress) -> bool {
        *node == self.self_node
    }

    fn in_dc(&self, m: &Member) -> bool {
        m.data_center() == self.model.self_dc()
    }

    fn apply_event(&mut self, now: Instant, event: ClusterEvent) {
        match event {
            ClusterEvent::MemberJoined(m) => self.model.add(m),
            ClusterEvent::MemberWeaklyUp(m) => {
                if self.is_self(m.node()) {
                    self.self_member_added = true;
                }
                self.model.add(m);
            }
            ClusterEvent::MemberUp(m) if self.in_dc(&m) => {
                if self.is_self(m.node()) {
                    self.self_member_added = true;
                }
                self.model.add(m);
                self.reset_stable_deadline(now);
            }
            ClusterEvent::MemberLeft(m) => {
                // Asked to leave while still Joining, a node goes to Leaving without ever being
                // Up or WeaklyUp. It was admitted all the same, and with no member Up it is the
                // leader: were it not responsible, nobody would down a crashed joiner, which
                // blocks convergence for ever.
                if self.is_self(m.node()) {
                    self.self_member_added = true;
                }
                self.model.add(m);
            }
            ClusterEvent::MemberExited(m) if self.in_dc(&m) => {
                self.model.add(m);
                self.reset_stable_deadline(now);
            }
            ClusterEvent::UnreachableMember(m) | ClusterEvent::MemberDowned(m)
                if self.in_dc(&m) && !self.is_self(m.node()) =>
            {
                self.reset_stable_deadline(now);
                self.model.add_unreachable(m);
                self.reachability_changed(now);
            }
            ClusterEvent::ReachableMember(m) if self.in_dc(&m) && !self.is_self(m.node()) => {
                self.reset_stable_deadline(now);
                self.model.add_reachable(m);
                self.reachability_changed(now);
            }
            ClusterEvent::MemberRemoved { member, .. } if self.in_dc(&member) => {
                if self.is_self(member.node()) {
                    self.stopped = true;
                    return;
                }
                self.model.note_removed(member.node());
                self.reset_stats_if_all_unreachable_downed(now);
                if let ReleaseCondition::WhenMembersRemoved(nodes) = &mut self.release {
                    nodes.remove(member.node());
                    if nodes.is_empty() {
                        self.release =
                            ReleaseCondition::WhenTimeElapsed(now + self.release_after());
                    }
                }
            }
            ClusterEvent::LeaderChanged(leader) => {
                self.leader = leader.as_ref() == Some(&self.self_node.address);
            }
            _ => {}
        }
    }

    fn reset_stable_deadline(&mut self, now: Instant) {
        self.stable_deadline = now + self.stable_after;
    }

    fn reachability_changed(&mut self, now: Instant) {
        self.stats.record(now);
        self.reset_stats_if_all_unreachable_downed(now);
    }

    fn reset_stats_if_all_unreachable_downed(&mut self, now: Instant) {
        if self.stats.count > 0 && self.model.is_all_unreachable_down_or_exiting() {
            self.stats = ChangeStats::new(now);
        }
    }

    fn release_after(&self) -> Duration {
        match self.model.strategy() {
            Strategy::LeaseMajority { release_after, .. } => *release_after,
            _ => Duration::ZERO,
        }
    }

    /// The 1 s tick: down all when unstable for too long (on every node), decide when
    /// stable (on the responsible node), and release a lease no longer needed.
    pub fn handle_tick(&mut self, now: Instant) {
        if self.stopped || self.waiting.is_some() {
            return;
        }
        if let Some(deadline) = self.contact_deadline {
            if now >= deadline {
                self.contact_deadline = None;
                self.act(now, Decision::DownSelfAfterPause, DecisionTrigger::NoContactAfterPause);
            }
            return;
        }
        if self.stats.count > 0 {
            let since_first = now.saturating_duration_since(self.stats.first);
            let since_latest = now.saturating_duration_since(self.stats.latest);
            match self.down_all_when_unstable {
                Some(after) if since_first > self.stable_after + after => {
                    self.act(now, Decision::DownAll, DecisionTrigger::Unstable);
                }
                Some(_) => {}
                None if since_latest > self.stable_after * 2 => self.stats = ChangeStats::new(now),
                None => {}
            }
        }
        let due = now >= self.stable_deadline;
        if self.is_responsible() && self.model.has_unreachable_to_decide() && due {
            let mut decision = self.model.decide();
            let indirect = matches!(
                decision,
                Decision::DownIndirectlyConnected
                    | Decision::AcquireLeaseAndDownIndirectlyConnected { .. }
            );
            if indirect && self.model.keeps_itself_alone(decision, &self.self_node) {
                decision = Decision::DownAll;
            }
            if decision.acquire_delay().is_some() {
                self.request_lease(LeaseOp::Check);
                self.waiting = Some(Waiting::Check(decision));
            } else if self
                .model
                .nodes_to_down(decision, &self.self_node)
                .is_ok_and(|n| n.is_empty())
            {
                // Only Down members were unreachable, and this side outweighs those that may
                // keep themselves: nothing to act on.
            } else {
                self.act(now, decision, DecisionTrigger::Stable);
            }
        }
        if due {
            // The members removed before they took their Down in have been counted by the
            // decision just taken (or by the responsible node's, on its own view): they matter
            // to the decision after their removal, not to later episodes.
            self.model.forget_removed_unacknowledged();
        }
        if let ReleaseCondition::WhenTimeElapsed(at) = self.release
            && now >= at
            && !self.release_in_flight
        {
            self.release_in_flight = true;
            self.request_lease(LeaseOp::Release);
        }
    }

    /// The minority's delay before acquiring the lease has passed.
    pub fn handle_acquire_timeout(&mut self, now: Instant) {
        if self.acquire_at.is_some_and(|at| at <= now) {
            self.acquire_at = None;
            self.request_lease(LeaseOp::Acquire);
        }
    }

    /// The answer to the lease request `op`.
    pub fn handle_lease_result(&mut self, now: Instant, op: LeaseOp, granted: bool) {
        if self.stopped {
            return;
        }
        match (op, self.waiting) {
            (LeaseOp::Release, waiting) => {
                self.release_in_flight = false;
                // While a new decision waits for the lease, its outcome supersedes the release.
                if waiting.is_none()
                    && let ReleaseCondition::WhenTimeElapsed(at) = self.release
                    && granted
                    && now >= at
                {
                    self.release = ReleaseCondition::NoLease;
                }
            }
            (LeaseOp::Check, Some(Waiting::Check(decision))) => {
                if granted {
                    self.act(now, decision, DecisionTrigger::LeaseHeld);
                    self.stop_waiting(now);
                    return;
                }
                self.waiting = Some(Waiting::Acquire(decision));
                match decision.acquire_delay() {
                    Some(delay) if !delay.is_zero() => self.acquire_at = Some(now + delay),
                    _ => self.request_lease(LeaseOp::Acquire),
                }
            }
            (LeaseOp::Acquire, Some(Waiting::Acquire(decision))) if self.acquire_at.is_none() => {
                if granted {
                    let downed = self.act(now, decision, DecisionTrigger::LeaseAcquired);
                    self.release =
                        match std::mem::replace(&mut self.release, ReleaseCondition::NoLease) {
                            ReleaseCondition::WhenMembersRemoved(mut nodes) => {
                                nodes.extend(downed);
                                ReleaseCondition::WhenMembersRemoved(nodes)
                            }
                            _ if downed.is_empty() => {
                                ReleaseCondition::WhenTimeElapsed(now + self.release_after())
                            }
                            _ => ReleaseCondition::WhenMembersRemoved(downed),
                        };
                } else {
                    let reverse = decision.reverse().unwrap_or(Decision::DownReachable);
                    self.act(now, reverse, DecisionTrigger::LeaseDenied);
                    self.release = ReleaseCondition::NoLease;
                }
                self.stop_waiting(now);
            }
            // An answer nobody waits for any more.
            _ => {}
        }
    }

    fn stop_waiting(&mut self, now: Instant) {
        self.waiting = None;
        for input in std::mem::take(&mut self.stash) {
            match input {
                Input::Event(e) => self.handle_event(now, &e),
                Input::Reachability(r) => self.handle_reachability(&r),
                Input::SeenBy(s) => self.handle_seen(&s),
                Input::QuarantinedByRemote => self.handle_quarantined_by_member(now),
            }
        }
    }

    fn request_lease(&mut self, op: LeaseOp) {
        self.lease_requests.push_back(LeaseRequest {
            op,
            lease_name: self.lease_name.clone(),
            owner: self.owner.clone(),
        });
    }

    /// Downs the nodes `decision` calls for, the others first and this node last; returns them.
    fn act(
        &mut self,
        now: Instant,
        decision: Decision,
        trigger: DecisionTrigger,
    ) -> BTreeSet<UniqueAddress> {
        let (nodes, fallback) = match self.model.nodes_to_down(decision, &self.self_node) {
            Ok(nodes) => (nodes, None),
            Err(e) => (self.model.downable(), Some(e)),
        };
        let downs_self = nodes.contains(&self.self_node);
        let outvoted = match decision {
            Decision::DownUnreachable | Decision::AcquireLeaseAndDownUnreachable { .. } => {
                nodes.clone()
            }
            Decision::DownIndirectlyConnected
            | Decision::AcquireLeaseAndDownIndirectlyConnected { .. } => {
                let indirect = self.model.indirectly_connected();
                nodes.difference(&indirect).cloned().collect()
            }
            _ => BTreeSet::new(),
        };
        if fallback.is_none() {
            self.model.note_outvoted(outvoted);
        }
        self.decisions.push_back(DowningDecision {
            decision,
            trigger,
            nodes: nodes.clone(),
            downs_self,
            fallback,
            indirectly_connected: self.model.indirectly_connected(),
            unreachable: self.model.unreachable().len(),
            members: self.model.members(false, false).count(),
        });
        if !nodes.is_empty() {
            // Reset before the downs take effect: their MemberDowned events count as new changes.
            self.stats = ChangeStats::new(now);
            self.reset_stable_deadline(now);
            let me = &self.self_node;
            self.downs.extend(nodes.iter().filter(|n| *n != me).cloned());
            if downs_self {
                self.downs.push_back(self.self_node.clone());
            }
        }
        nodes
    }
}
