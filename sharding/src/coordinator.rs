//! The shard coordinator: [`Coordinator`], one per entity type, on the oldest member with the
//! role (it runs as a cluster singleton).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::mem;
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Member, MemberStatus, UniqueAddress};

use super::allocation::{LeastShardAllocation, RegionLoad};
use super::state::{Ballot, CoordinatorState, ReplicaMsg, StateVersion};
use super::{CoordinatorMsg, Departures, RegionMsg, ShardId, ShardingConfig};
use convoke_membership::timers::Timers;

/// Homes per ShardHomes message sent to a region that registers.
const HOMES_PER_MESSAGE: usize = 500;

/// What the coordinator asks its driver to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorOutput {
    /// A message for the region of the entity type on node `to`.
    ToRegion {
        /// The region's node.
        to: UniqueAddress,
        /// The message.
        msg: RegionMsg,
    },
    /// A message for the replica of the entity type on node `to` (possibly this node).
    ToReplica {
        /// The replica's node.
        to: UniqueAddress,
        /// The message.
        msg: ReplicaMsg,
    },
}

/// What the coordinator is doing, for the management API and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorStatus {
    /// `recovering` (reading the replicas) or `active`.
    pub phase: &'static str,
    /// How many times a replica refused this coordinator because another had read or written
    /// since, sending it back to recovery.
    pub superseded: u64,
    /// The version of the table last written to a majority.
    pub version: Option<StateVersion>,
    /// Each region with its number of shards, in the written table.
    pub regions: Vec<(UniqueAddress, usize)>,
    /// Shards being handed off.
    pub handoffs: usize,
    /// Whether a write is waiting for a majority.
    pub writing: bool,
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    /// Re-send reads, writes and unanswered HostShard.
    Retry,
    /// Look for shards to move.
    Rebalance,
}

impl convoke_membership::timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug)]
enum Phase {
    /// Reading the replicas; the replies so far by node.
    Recovering(BTreeMap<UniqueAddress, Option<(StateVersion, Arc<CoordinatorState>)>>),
    Active,
}

/// Something to do once the change that called for it is on a majority.
#[derive(Clone, Debug)]
enum Effect {
    /// HostShard to the region the shard was allocated to, if it is still there.
    Host(ShardId, UniqueAddress),
    /// RegisterAck and the known homes.
    Welcome(UniqueAddress),
    /// Answer the GetShardHome requests waiting for the shard; with `eager`, allocate it even if
    /// nobody waits.
    Settle { shard: ShardId, eager: bool },
    /// HostShard to every allocated shard's region (after recovery).
    HostAll,
}

#[derive(Debug)]
struct Write {
    version: StateVersion,
    state: Arc<CoordinatorState>,
    acks: BTreeSet<UniqueAddress>,
    effects: Vec<Effect>,
}

#[derive(Debug)]
struct Handoff {
    from: UniqueAddress,
    /// Regions and proxies that have not acknowledged BeginHandOff.
    awaiting: BTreeSet<UniqueAddress>,
    /// HandOff has been sent to `from`.
    handing_off: bool,
    deadline: Instant,
}

/// The shard coordinator of one entity type: a deterministic state machine with no IO.
///
/// # Call protocol
/// 1. Build it with [`Coordinator::new`] when the singleton starts here; it begins by reading
///    the replicas.
/// 2. Feed it inputs, each with the current time `now` (never decreasing):
///    - [`handle_members`](Self::handle_members) with the membership and the unreachable nodes
///      whenever either changed;
///    - [`handle_region_msg`](Self::handle_region_msg) for each [`CoordinatorMsg`] from a region;
///    - [`handle_replica_msg`](Self::handle_replica_msg) for each reply from a replica;
///    - [`handle_timeout`](Self::handle_timeout) once the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed.
/// 3. After every input, send everything [`poll_output`](Self::poll_output) gives, in order,
///    and re-arm the timer with [`poll_timeout`](Self::poll_timeout).
///
/// Drop it when the singleton stops here.
///
/// # Guarantees
/// No region hears of an allocation (HostShard, ShardHome, ShardHomes) before the table holding
/// it has been accepted by a majority of the replicas. A shard is allocated anew only after its
/// old home has answered ShardStopped, told it has stopped (RegionStopped), or has been gone from
/// the membership for the removal margin. A coordinator that meets a higher ballot stops acting
/// and reads the replicas again.
#[derive(Debug)]
pub struct Coordinator {
    config: ShardingConfig,
    rule: LeastShardAllocation,
    self_node: UniqueAddress,
    phase: Phase,
    ballot: Ballot,
    seq: u64,
    /// The table last accepted by a majority.
    committed: Arc<CoordinatorState>,
    committed_version: Option<StateVersion>,
    /// `committed` with the changes not yet on a majority.
    proposed: CoordinatorState,
    /// Effects of changes in `proposed` that are in no write yet.
    queued: Vec<Effect>,
    /// Whether `proposed` has changes in no write yet.
    dirty: bool,
    write: Option<Write>,
    /// GetShardHome requesters waiting for a shard's allocation or handoff.
    waiting: BTreeMap<ShardId, BTreeSet<UniqueAddress>>,
    /// HostShard sent and not answered: region and when to send again (set by the next retry
    /// pass when `None`).
    hosting: BTreeMap<ShardId, (UniqueAddress, Option<Instant>)>,
    handoffs: BTreeMap<ShardId, Handoff>,
    proxies: BTreeSet<UniqueAddress>,
    shutting_down: BTreeSet<UniqueAddress>,
    /// Regions of the table whose node has left the membership, and when that was seen.
    removed: BTreeMap<UniqueAddress, Instant>,
    /// The table was read from a majority in which replicas without a table (new incarnations,
    /// whose predecessors may have acknowledged later writes) outnumbered those with one: its
    /// homes may be stale. Until every region has listed what it hosts, or had the removal
    /// margin to stop (`may_allocate_unknown`), no shard is hosted or given out by it, and a
    /// region that lists a shard becomes its home. See docs/sharding-design.md, "Recovery
    /// beside an empty successor".
    unconfirmed: bool,
    /// Every member's status.
    members: BTreeMap<UniqueAddress, MemberStatus>,
    /// The application version of every member of this data center with the role.
    versions: BTreeMap<UniqueAddress, AppVersion>,
    /// When each of those members was first seen Up here.
    up_since: BTreeMap<UniqueAddress, Instant>,
    /// Every one of those members that is Up runs the same version: no rolling update is under
    /// way, rebalancing may start.
    one_version: bool,
    /// Members that hold a replica.
    replicas: BTreeSet<UniqueAddress>,
    /// Nobody unreachable, joining or weakly up: rebalancing may start.
    calm: bool,
    timers: Timers<Timer, 2>,
    outputs: VecDeque<CoordinatorOutput>,
    /// Times a replica sent this coordinator back to recovery.
    fenced_count: u64,
    /// The time of the latest input.
    now: Instant,
    /// When the table was last recovered (this coordinator became active).
    active_since: Option<Instant>,
    /// Regions that registered since then, with the shards they listed.
    registered: BTreeMap<UniqueAddress, Vec<ShardId>>,
    /// Regions that told this coordinator they have stopped: they host nothing and never
    /// register again, so they hold nothing up.
    stopped: BTreeSet<UniqueAddress>,
    /// Members whose region must register before a shard with no home is allocated: those with
    /// the role in this data center whose registration is accepted.
    must_register: BTreeSet<UniqueAddress>,
    /// Unreachable nodes, as last reported.
    unreachable: BTreeSet<UniqueAddress>,
    /// Members downed, or removed without a graceful leave, until a removal margin after their
    /// removal; those of this data center with the role that neither registered here nor said
    /// their region has stopped hold up the allocation of unknown shards.
    departures: Departures,
    /// This node's data center: members elsewhere have their own coordinator.
    dc: String,
    /// Shards the table had and let go (their region stopped them, or was removed): allocated
    /// again without waiting for registrations.
    freed: BTreeSet<ShardId>,
    /// When RegisterAgain next goes to members not heard from, and the wait after that
    /// (doubling up to the removal margin).
    register_again: Option<(Instant, Duration)>,
    /// Asked to stop: only finishes what it has begun.
    stopping: bool,
    /// The homes kept in the store, when the type keeps them (`ShardingConfig::keep_homes`).
    saved: Saved,
}

/// The homes an earlier coordinator kept in the store, by node address (see
/// docs/sharding-design.md, "Homes kept in the store").
#[derive(Debug, Default)]
struct Saved {
    /// Until when no shard the table does not know is allocated while the driver reads the
    /// saved homes (`None`: read, or not kept).
    awaited_until: Option<Instant>,
    /// Saved homes of shards the table does not place, by the address of their node then.
    hints: BTreeMap<ShardId, Address>,
    /// Something changed that may let a hinted shard go back to its node.
    check: bool,
}

impl Coordinator {
    /// A coordinator for `config`'s entity type on `self_node`, starting at `now` with the given
    /// membership: it reads the replicas before it answers anything.
    /// `instance` tells this coordinator from earlier ones on the same node: the driver gives
    /// each a different number (a counter, or a random number).
    pub fn new(
        config: ShardingConfig,
        self_node: UniqueAddress,
        instance: u64,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        now: Instant,
    ) -> Self {
        let rule = config.allocation();
        let ballot = Ballot { round: 1, node: self_node.clone(), instance };
        let mut c = Self {
            config,
            rule,
            self_node,
            phase: Phase::Recovering(BTreeMap::new()),
            ballot,
            seq: 0,
            committed: Arc::default(),
            committed_version: None,
            proposed: CoordinatorState::default(),
            queued: Vec::new(),
            dirty: false,
            write: None,
            waiting: BTreeMap::new(),
            hosting: BTreeMap::new(),
            handoffs: BTreeMap::new(),
            proxies: BTreeSet::new(),
            shutting_down: BTreeSet::new(),
            removed: BTreeMap::new(),
            unconfirmed: false,
            members: BTreeMap::new(),
            versions: BTreeMap::new(),
            up_since: BTreeMap::new(),
            one_version: true,
            replicas: BTreeSet::new(),
            calm: false,
            timers: Timers::default(),
            outputs: VecDeque::new(),
            fenced_count: 0,
            now,
            active_since: None,
            registered: BTreeMap::new(),
            stopped: BTreeSet::new(),
            must_register: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            departures: Departures::default(),
            dc: String::new(),
            freed: BTreeSet::new(),
            register_again: None,
            stopping: false,
            saved: Saved::default(),
        };
        if c.config.keep_homes {
            c.saved.awaited_until = Some(now + c.config.removal_margin);
        }
        c.read_view(members, unreachable, now);
        c.departures.update(members, now, c.config.removal_margin);
        c.send_reads(now);
        c
    }

    /// The next message to send.
    pub fn poll_output(&mut self) -> Option<CoordinatorOutput> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let handoff = self.handoffs.values().map(|h| h.deadline).min();
        let margin = self.removed.values().min().map(|&at| at + self.config.removal_margin);
        [self.timers.earliest(), handoff, margin, self.saved.awaited_until]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether changes to the table wait to be written to a majority. A coordinator stopped
    /// before they are loses them: its successor reads the table without them (a region that
    /// stopped, shards that were handed off), and waits out a removal margin where it need not.
    /// The driver of a coordinator asked to stop may let it finish, for a bounded time.
    pub fn has_unwritten_changes(&self) -> bool {
        self.write.is_some() || self.dirty
    }

    /// The coordinator is about to be stopped (the singleton hands over): from now on it takes
    /// on nothing new (no registration, rebalance, handoff, or allocation other than new homes
    /// for shards whose handoff has ended), so that the driver can let it finish the writes it
    /// has begun (see
    /// [`has_unwritten_changes`](Self::has_unwritten_changes)) before it drops it.
    pub fn begin_stop(&mut self) {
        self.stopping = true;
        self.timers.clear(Timer::Rebalance);
    }

    /// The table last written to a majority.
    pub fn state(&self) -> &CoordinatorState {
        &self.committed
    }

    /// The version of the table last written to a majority.
    pub fn version(&self) -> Option<&StateVersion> {
        self.committed_version.as_ref()
    }

    /// What the coordinator is doing.
    pub fn status(&self) -> CoordinatorStatus {
        let phase = match self.phase {
            Phase::Recovering(_) => "recovering",
            Phase::Active => "active",
        };
        CoordinatorStatus {
            phase,
            version: self.committed_version.clone(),
            regions: self.committed.regions().map(|(r, s)| (r.clone(), s.len())).collect(),
            handoffs: self.handoffs.len(),
            writing: self.write.is_some(),
            superseded: self.fenced_count,
        }
    }

    /// The membership changed (or the set of unreachable nodes did).
    pub fn handle_members(
        &mut self,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        now: Instant,
    ) {
        self.now = now;
        self.saved.check = true;
        let replicas_before = self.replicas.clone();
        self.read_view(members, unreachable, now);
        self.departures.update(members, now, self.config.removal_margin);
        if self.replicas != replicas_before && matches!(self.phase, Phase::Active) {
            // The table goes to the new replica set in full, so that a majority of it holds
            // the table, not only a majority of the old set.
            self.dirty = true;
        }
        let gone: Vec<UniqueAddress> = self
            .proposed
            .regions()
            .map(|(r, _)| r)
            .filter(|r| !self.members.contains_key(*r) && !self.removed.contains_key(*r))
            .cloned()
            .collect();
        for r in gone {
            self.removed.insert(r, now);
        }
        let members = &self.members;
        self.proxies.retain(|p| members.contains_key(p));
        self.shutting_down.retain(|r| members.contains_key(r));
        for h in self.handoffs.values_mut() {
            h.awaiting.retain(|r| members.contains_key(r));
        }
        let pending: Vec<ShardId> = self.handoffs.keys().cloned().collect();
        for s in pending {
            self.maybe_hand_off(&s);
        }
        self.after_input(now);
    }

    /// Takes in the members that left without a graceful leave as another observer saw them:
    /// the driver passes its node's [`Region::departures`](super::Region::departures) right
    /// after [`Coordinator::new`], so that a removal that came before this coordinator started
    /// still holds up allocation for the removal margin.
    pub fn note_departures(&mut self, seen: &Departures) {
        self.departures.merge(seen, self.now);
    }

    /// The homes an earlier coordinator kept in the store (with `ShardingConfig::keep_homes`,
    /// after [`HostOutput::LoadHomes`](super::HostOutput::LoadHomes)): empty when none were
    /// kept or they cannot be read. A shard the table does not place goes back to the node at
    /// its saved address when that node's region has registered, by the same rules as any
    /// shard the table does not know (see docs/sharding-design.md, "Homes kept in the store").
    /// Until this is called, and for at most a removal margin, no such shard is allocated.
    pub fn homes_loaded(&mut self, homes: Vec<(ShardId, Address)>, now: Instant) {
        self.now = now;
        self.saved.awaited_until = None;
        self.saved.hints.extend(homes);
        self.saved.check = true;
        self.after_input(now);
    }

    /// What to keep in the store as this type's homes: the written table's homes by node
    /// address, and the saved homes not yet placed again. `None` until the saved homes have been
    /// read (what they hold must not be written over by a table that has not placed them).
    pub fn homes_to_save(&self) -> Option<Vec<(ShardId, Address)>> {
        if self.saved.awaited_until.is_some() {
            return None;
        }
        let placed = self.committed.allocations().map(|(s, r)| (s.clone(), r.address.clone()));
        let hinted = (self.saved.hints.iter())
            .filter(|(s, _)| self.committed.home(s).is_none())
            .map(|(s, a)| (s.clone(), a.clone()));
        let mut homes: Vec<(ShardId, Address)> = placed.chain(hinted).collect();
        homes.sort_unstable();
        Some(homes)
    }

    /// A message from the region (or proxy) on node `from`.
    pub fn handle_region_msg(&mut self, from: UniqueAddress, msg: CoordinatorMsg, now: Instant) {
        self.now = now;
        if !matches!(self.phase, Phase::Active) {
            // Regions retry everything they need answered.
            return;
        }
        match msg {
            CoordinatorMsg::Register { hosted } => self.on_register(from, hosted),
            CoordinatorMsg::RegisterProxy => {
                if self.members.contains_key(&from) {
                    self.proxies.insert(from.clone());
                    self.welcome(&from);
                }
            }
            CoordinatorMsg::GetShardHome(shard) => self.get_home(Some(from), shard),
            CoordinatorMsg::ShardStarted(shard) => {
                if self.hosting.get(&shard).is_some_and(|(r, _)| *r == from) {
                    self.hosting.remove(&shard);
                }
            }
            CoordinatorMsg::BeginHandOffAck(shard) => {
                if let Some(h) = self.handoffs.get_mut(&shard) {
                    h.awaiting.remove(&from);
                }
                self.maybe_hand_off(&shard);
            }
            CoordinatorMsg::ShardStopped(shard) => self.on_shard_stopped(&from, shard),
            CoordinatorMsg::GracefulShutdownReq => self.on_graceful_shutdown(&from, now),
            CoordinatorMsg::RegionStopped => {
                self.proxies.remove(&from);
                if self.members.contains_key(&from) {
                    self.stopped.insert(from.clone());
                }
                if self.proposed.has_region(&from) {
                    // Shards it still had were allocated but never started there (it ignores
                    // HostShard while shutting down): regions that were told that home forget it.
                    let stranded: Vec<ShardId> = self.proposed.shards_of(&from).to_vec();
                    for s in stranded {
                        self.broadcast(&RegionMsg::BeginHandOff(s));
                    }
                    self.remove_region(&from);
                }
            }
        }
        self.after_input(now);
    }

    /// A reply from the replica on node `from`.
    pub fn handle_replica_msg(&mut self, from: UniqueAddress, msg: ReplicaMsg, now: Instant) {
        self.now = now;
        match msg {
            ReplicaMsg::ReadReply { ballot, accepted } => {
                if ballot != self.ballot {
                    return;
                }
                if let Phase::Recovering(replies) = &mut self.phase {
                    replies.insert(from, accepted);
                    self.maybe_recovered(now);
                }
            }
            ReplicaMsg::WriteAck { version } => {
                if let Some(w) = &mut self.write
                    && w.version == version
                {
                    w.acks.insert(from);
                    self.maybe_committed();
                }
            }
            ReplicaMsg::Rejected { promised } => {
                if promised <= self.ballot {
                    return;
                }
                // Another coordinator has read or written since: read again with a higher
                // round. Whatever it completed is on a majority and comes back with the read;
                // if it is still alive, its next write is refused in turn.
                self.restart_recovery(promised, now);
            }
            ReplicaMsg::Read { .. } | ReplicaMsg::Write { .. } => {}
        }
        self.after_input(now);
    }

    /// A deadline from [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.saved.check = true;
        if self.saved.awaited_until.is_some_and(|until| until <= now) {
            // Waited long enough for the saved homes; they are still taken if they come.
            self.saved.awaited_until = None;
        }
        if self.timers.take_due(Timer::Retry, now) {
            self.retry(now);
        }
        if self.timers.take_due(Timer::Rebalance, now) {
            self.rebalance(now);
        }
        let expired: Vec<ShardId> = self
            .handoffs
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(s, _)| s.clone())
            .collect();
        for s in expired {
            // The shard stays where it was; the requests that waited for the move are answered
            // with the old home. A region that is shutting down asks again.
            self.handoffs.remove(&s);
            self.settle(s, false);
        }
        let margin = self.config.removal_margin;
        let due: Vec<UniqueAddress> = self
            .removed
            .iter()
            .filter(|&(_, &at)| at + margin <= now)
            .map(|(r, _)| r.clone())
            .collect();
        for r in due {
            self.remove_region(&r);
        }
        self.after_input(now);
    }

    fn read_view(
        &mut self,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        now: Instant,
    ) {
        use MemberStatus::*;
        self.dc = members
            .iter()
            .find(|m| *m.node() == self.self_node)
            .map_or_else(|| "default".to_owned(), |m| m.data_center().to_owned());
        let ours: Vec<&Member> = members.iter().filter(|m| self.ours(m)).collect();
        self.members = members.iter().map(|m| (m.node().clone(), m.status())).collect();
        self.versions = ours.iter().map(|m| (m.node().clone(), m.app_version().clone())).collect();
        let up: Vec<&Member> = ours.iter().copied().filter(|m| m.status() == Up).collect();
        self.up_since.retain(|n, _| up.iter().any(|m| m.node() == n));
        for m in &up {
            self.up_since.entry(m.node().clone()).or_insert(now);
        }
        self.one_version = up.windows(2).all(|w| w[0].app_version() == w[1].app_version());
        self.replicas = ours
            .iter()
            .filter(|m| {
                matches!(
                    m.status(),
                    Up | Leaving | Exiting | PreparingForShutdown | ReadyForShutdown
                )
            })
            .map(|m| m.node().clone())
            .collect();
        self.replicas.insert(self.self_node.clone());
        self.must_register = ours
            .iter()
            .filter(|m| {
                matches!(m.status(), Up | Leaving | PreparingForShutdown | ReadyForShutdown)
            })
            .map(|m| m.node().clone())
            .collect();
        self.unreachable = unreachable.clone();
        self.calm = unreachable.is_empty()
            && members.iter().all(|m| !matches!(m.status(), Joining | WeaklyUp));
    }

    /// Whether `m` is in this coordinator's data center and has the entity type's role.
    fn ours(&self, m: &Member) -> bool {
        m.data_center() == self.dc && self.config.role.as_deref().is_none_or(|r| m.has_role(r))
    }

    fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    fn send_reads(&mut self, now: Instant) {
        let Phase::Recovering(replies) = &self.phase else { return };
        let to: Vec<UniqueAddress> =
            self.replicas.iter().filter(|r| !replies.contains_key(*r)).cloned().collect();
        for r in to {
            let msg = ReplicaMsg::Read { ballot: self.ballot.clone() };
            self.outputs.push_back(CoordinatorOutput::ToReplica { to: r, msg });
        }
        self.timers.set(Timer::Retry, now + self.config.retry_interval);
    }

    fn maybe_recovered(&mut self, now: Instant) {
        let Phase::Recovering(replies) = &self.phase else { return };
        let answered = replies.keys().filter(|r| self.replicas.contains(*r)).count();
        if answered < self.majority() {
            return;
        }
        let newest = replies.values().flatten().max_by(|a, b| a.0.cmp(&b.0)).cloned();
        let holding =
            (replies.iter()).filter(|(r, a)| a.is_some() && self.replicas.contains(*r)).count();
        self.unconfirmed = holding > 0 && holding < self.majority();
        self.phase = Phase::Active;
        // The newest table a majority returns may have reached only a minority: written again
        // under this ballot, it is on a majority before anything is done with it.
        self.proposed = newest.map(|(_, s)| (*s).clone()).unwrap_or_default();
        for (r, _) in self.proposed.regions() {
            if !self.members.contains_key(r) {
                self.removed.insert(r.clone(), now);
            }
        }
        self.dirty = true;
        // An unconfirmed table is hosted only once it is confirmed, by the HostAll that goes
        // with the first write after that (`after_input`), whose table holds what the regions
        // listed meanwhile. Queued here, it would ride the rewrite of the table just read and
        // host that table's stale homes when the rewrite commits.
        if !self.unconfirmed {
            self.queued.push(Effect::HostAll);
        }
        self.timers.set(Timer::Rebalance, now + self.config.rebalance_interval);
        // Registrations heard before a read that a newer coordinator forced stay valid (regions
        // do not register again when a read is forced), and what they listed is taken back into
        // the table just read.
        if self.active_since.is_none() && !self.stopping {
            // Regions register when the coordinator's node changes; one that started on the
            // node of an earlier one (restarted, or back after a freeze) asks them to. Members
            // that stay silent are asked again at doubling intervals (see `retry`).
            let everyone: Vec<UniqueAddress> = self.members.keys().cloned().collect();
            for m in everyone {
                self.send(m, RegionMsg::RegisterAgain);
            }
            let every = self.config.retry_interval;
            self.register_again = Some((now + every, every));
        }
        self.active_since.get_or_insert(now);
        let registered: Vec<(UniqueAddress, Vec<ShardId>)> =
            self.registered.iter().map(|(r, s)| (r.clone(), s.clone())).collect();
        for (r, hosted) in registered {
            if self.members.contains_key(&r) && !self.removed.contains_key(&r) {
                self.proposed.register(r.clone());
                self.adopt(&r, &hosted);
            }
        }
    }

    fn restart_recovery(&mut self, promised: Ballot, now: Instant) {
        self.ballot = Ballot {
            round: promised.round + 1,
            node: self.self_node.clone(),
            instance: self.ballot.instance,
        };
        self.phase = Phase::Recovering(BTreeMap::new());
        self.fenced_count += 1;
        self.write = None;
        self.queued.clear();
        self.dirty = false;
        self.waiting.clear();
        self.hosting.clear();
        self.handoffs.clear();
        self.freed.clear();
        self.timers.clear(Timer::Rebalance);
        self.send_reads(now);
    }

    /// Starts the next write when none is in flight, and keeps the retry timer armed while
    /// anything waits for an answer.
    fn after_input(&mut self, now: Instant) {
        if self.unconfirmed && matches!(self.phase, Phase::Active) && self.may_allocate_unknown() {
            // Every region has listed its shards (they are in the table now) or had the margin
            // to stop: the table's homes hold, and what waited for them goes ahead.
            self.unconfirmed = false;
            self.queued.push(Effect::HostAll);
            let waiting: Vec<ShardId> = self.waiting.keys().cloned().collect();
            for shard in waiting {
                self.queued.push(Effect::Settle { shard, eager: false });
            }
            self.dirty = true;
        }
        if self.saved.check && matches!(self.phase, Phase::Active) {
            self.place_saved();
        }
        if matches!(self.phase, Phase::Active) && self.write.is_none() && self.dirty {
            self.seq += 1;
            let version = StateVersion { ballot: self.ballot.clone(), seq: self.seq };
            let state = Arc::new(self.proposed.clone());
            let effects = mem::take(&mut self.queued);
            self.dirty = false;
            for r in &self.replicas {
                let msg = ReplicaMsg::Write { version: version.clone(), state: Arc::clone(&state) };
                self.outputs.push_back(CoordinatorOutput::ToReplica { to: r.clone(), msg });
            }
            self.write = Some(Write { version, state, acks: BTreeSet::new(), effects });
        }
        let waiting = self.write.is_some() || !self.hosting.is_empty();
        if waiting || matches!(self.phase, Phase::Recovering(_)) {
            self.timers.set_at_most(Timer::Retry, now + self.config.retry_interval);
        }
    }

    /// Allocates each shard with a saved home whose node's region has registered (and is Up),
    /// once shards the table does not know may be allocated; forgets the saved homes of shards
    /// the written table places (not before: until then they are still to be kept).
    fn place_saved(&mut self) {
        let committed = &self.committed;
        self.saved.hints.retain(|s, _| committed.home(s).is_none());
        if self.saved.hints.is_empty() {
            self.saved.check = false;
            return;
        }
        if self.unconfirmed || self.stopping || !self.may_allocate_unknown() {
            return;
        }
        self.saved.check = false;
        let nodes: BTreeSet<&Address> = (self.proposed.regions())
            .map(|(r, _)| r)
            .filter(|r| {
                !self.removed.contains_key(*r)
                    && !self.shutting_down.contains(*r)
                    && self.members.get(*r) == Some(&MemberStatus::Up)
            })
            .map(|r| &r.address)
            .collect();
        let ready: Vec<ShardId> = (self.saved.hints.iter())
            .filter(|(s, home)| {
                nodes.contains(home)
                    && self.proposed.home(s).is_none()
                    && !self.handoffs.contains_key(*s)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in ready {
            self.get_home(None, shard);
        }
    }

    fn maybe_committed(&mut self) {
        let Some(w) = &self.write else { return };
        if w.acks.iter().filter(|r| self.replicas.contains(*r)).count() < self.majority() {
            return;
        }
        let Some(w) = self.write.take() else { return };
        self.committed = w.state;
        self.committed_version = Some(w.version);
        for effect in w.effects {
            self.apply(effect);
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Host(shard, region) => {
                if self.committed.home(&shard) == Some(&region) {
                    self.host(shard, region);
                }
            }
            Effect::Welcome(r) => self.welcome(&r),
            Effect::Settle { shard, eager } => self.settle(shard, eager),
            Effect::HostAll if self.unconfirmed => {}
            Effect::HostAll => {
                // A shard being handed off is hosted at its new home when the move ends (a
                // confirmed table's HostAll may come after a rebalance began).
                let all: Vec<(ShardId, UniqueAddress)> = (self.committed.allocations())
                    .filter(|(s, _)| !self.handoffs.contains_key(*s))
                    .map(|(s, r)| (s.clone(), r.clone()))
                    .collect();
                for (s, r) in all {
                    self.host(s, r);
                }
            }
        }
    }

    fn send(&mut self, to: UniqueAddress, msg: RegionMsg) {
        self.outputs.push_back(CoordinatorOutput::ToRegion { to, msg });
    }

    /// Sends HostShard and remembers to send it again if no ShardStarted comes.
    fn host(&mut self, shard: ShardId, region: UniqueAddress) {
        self.send(region.clone(), RegionMsg::HostShard(shard.clone()));
        self.hosting.insert(shard, (region, None));
    }

    fn retry(&mut self, now: Instant) {
        match self.phase {
            Phase::Recovering(_) => self.send_reads(now),
            Phase::Active => {
                if let Some(w) = &self.write {
                    let to: Vec<UniqueAddress> =
                        self.replicas.iter().filter(|r| !w.acks.contains(*r)).cloned().collect();
                    for r in to {
                        let msg = ReplicaMsg::Write {
                            version: w.version.clone(),
                            state: Arc::clone(&w.state),
                        };
                        self.outputs.push_back(CoordinatorOutput::ToReplica { to: r, msg });
                    }
                    // The replica set may have shrunk to what has already acknowledged.
                    self.maybe_committed();
                }
                let timeout = self.config.shard_start_timeout;
                let mut again = Vec::new();
                for (s, (r, next)) in &mut self.hosting {
                    match next {
                        None => *next = Some(now + timeout),
                        Some(at) if *at <= now => {
                            *next = Some(now + timeout);
                            again.push((r.clone(), s.clone()));
                        }
                        Some(_) => {}
                    }
                }
                for (r, s) in again {
                    self.send(r, RegionMsg::HostShard(s));
                }
                // A RegisterAgain may have been lost (a partition), or undone by a late
                // RegisterAck from an earlier coordinator on this node; a member that never
                // starts the entity type is asked less and less often.
                if let Some((at, every)) = self.register_again
                    && at <= now
                    && !self.stopping
                {
                    for m in self.unheard() {
                        self.send(m, RegionMsg::RegisterAgain);
                    }
                    let every = (every * 2).min(self.config.removal_margin);
                    self.register_again = Some((now + every, every));
                }
            }
        }
        self.timers.set(Timer::Retry, now + self.config.retry_interval);
    }

    /// The home to give out for `shard` now: written to a majority, not about to change.
    fn settled_home(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        if self.unconfirmed {
            return None;
        }
        let home = self.committed.home(shard)?;
        let stable = self.proposed.home(shard) == Some(home)
            && !self.handoffs.contains_key(shard)
            && !self.removed.contains_key(home);
        stable.then_some(home)
    }

    fn get_home(&mut self, requester: Option<UniqueAddress>, shard: ShardId) {
        if let Some(home) = self.settled_home(&shard).cloned() {
            if let Some(r) = requester {
                self.send(r, RegionMsg::ShardHome { shard, region: home });
            }
            return;
        }
        if let Some(r) = requester.clone() {
            if !self.members.contains_key(&r) {
                return;
            }
            if self.handoffs.contains_key(&shard) || self.proposed.home(&shard).is_some() {
                // Answered when the move ends, or when the allocation is written.
                self.waiting.entry(shard).or_default().insert(r);
                return;
            }
        }
        let known = self.freed.contains(&shard);
        // A stopping coordinator still gives the shards it let go a new home (their handoffs
        // were under way), so that the table its successor reads places them.
        let blocked = !known && (self.stopping || !self.may_allocate_unknown());
        if self.proposed.home(&shard).is_some() || blocked {
            // A region asks again while the allocation waits.
            return;
        }
        let Some(region) = self.choose_region(&shard) else { return };
        self.freed.remove(&shard);
        self.proposed.allocate(shard.clone(), region.clone());
        if let Some(r) = requester {
            self.waiting.entry(shard.clone()).or_default().insert(r);
        }
        self.queued.push(Effect::Host(shard.clone(), region));
        self.queued.push(Effect::Settle { shard, eager: false });
        self.dirty = true;
    }

    /// Whether a shard the table does not know may be allocated now. The table may have lost
    /// shards (a majority of the replicas gone at once, their successors empty) that a region
    /// still hosts: such a region lists them when it registers, so a shard is allocated only
    /// once every member with a replica has registered with this coordinator or told it that its
    /// region has stopped (or had the removal margin to do so), and no member that did neither
    /// was downed or left the membership without a graceful leave within the removal margin (a
    /// node cut off from the others has had the time to down itself and stop its entities).
    /// See docs/sharding-design.md.
    fn may_allocate_unknown(&self) -> bool {
        let margin = self.config.removal_margin;
        let now = self.now;
        if self.saved.awaited_until.is_some() {
            return false;
        }
        let mut silent = self.must_register.iter().filter(|r| !self.heard(r));
        // A member that stays silent for the margin does not hold allocation up for good,
        // unless it is unreachable: then it waits for the member's removal and margin.
        let heard_all = match silent.next() {
            None => true,
            Some(first) => {
                self.active_since.is_some_and(|t| t + margin <= now)
                    && std::iter::once(first).chain(silent).all(|r| !self.unreachable.contains(r))
            }
        };
        // A region that registered here listed what it hosts: the table knows its shards, and
        // the removal margin applies to them through `removed`.
        heard_all
            && self
                .departures
                .iter()
                .filter(|(m, _)| self.ours(m) && !self.heard(m.node()))
                .all(|(_, at)| at + margin <= now)
    }

    /// Whether the region of `member` registered with this coordinator or said it has stopped.
    fn heard(&self, member: &UniqueAddress) -> bool {
        self.registered.contains_key(member) || self.stopped.contains(member)
    }

    /// Members whose region must register and has not, once this coordinator is active.
    fn unheard(&self) -> Vec<UniqueAddress> {
        if self.active_since.is_none() {
            return Vec::new();
        }
        self.must_register.iter().filter(|r| !self.heard(r)).cloned().collect()
    }

    /// Takes the shards `region` lists as hosted into the table when the table has no home for
    /// them; a shard the table places in another region is stopped there, so that it does not
    /// run twice.
    fn adopt(&mut self, region: &UniqueAddress, hosted: &[ShardId]) {
        for shard in hosted {
            if self.handoffs.contains_key(shard) {
                continue;
            }
            match self.proposed.home(shard) {
                None => {
                    // Lost from the table, still hosted there: it stays where it is.
                    self.proposed.allocate(shard.clone(), region.clone());
                    self.freed.remove(shard);
                    self.queued.push(Effect::Settle { shard: shard.clone(), eager: false });
                    self.dirty = true;
                }
                Some(home) if home != region && self.unconfirmed => {
                    // The table may be stale; the region that runs the shard is its home.
                    self.proposed.deallocate(shard);
                    self.proposed.allocate(shard.clone(), region.clone());
                    self.dirty = true;
                }
                Some(home) if home != region => {
                    self.send(region.clone(), RegionMsg::HandOff(shard.clone()));
                }
                Some(_) => {}
            }
        }
    }

    /// Where a new shard goes, or `None` while too few regions are registered: the region on
    /// the node of the shard's saved home, if that one is as suitable as the rule's choice
    /// but for its number of shards; the rule's choice otherwise.
    fn choose_region(&self, shard: &ShardId) -> Option<UniqueAddress> {
        let alive: Vec<(&UniqueAddress, &[ShardId])> =
            self.proposed.regions().filter(|(r, _)| !self.removed.contains_key(*r)).collect();
        if alive.len() < usize::try_from(self.config.min_regions).unwrap_or(usize::MAX) {
            return None;
        }
        let loads: Vec<RegionLoad<'_>> = alive
            .into_iter()
            .filter(|(r, _)| !self.shutting_down.contains(*r))
            .filter_map(|(r, shards)| {
                let status = self.members.get(r)?;
                let leaving = match status {
                    MemberStatus::Up => false,
                    MemberStatus::Leaving
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown => true,
                    _ => return None,
                };
                Some(RegionLoad { region: r, shards, leaving, version: self.versions.get(r)? })
            })
            .collect();
        let chosen = self.rule.allocate(&loads)?;
        let version = &self.versions[chosen];
        let saved = self.saved.hints.get(shard).and_then(|home| {
            loads.iter().find(|l| l.region.address == *home && !l.leaving && l.version >= version)
        });
        let (chosen, version) = saved.map_or((chosen, version), |l| (l.region, l.version));
        (!self.newer_region_coming(version)).then(|| chosen.clone())
    }

    /// Whether a member newer than `version` is Up here and its region may register soon: a
    /// new shard waits for it rather than go to a node that a rolling update is replacing. It
    /// waits at most a removal margin after the member came Up, and not for a member that is
    /// unreachable or whose region has stopped (a member of the role that never starts the
    /// entity type does not hold allocation up for good).
    fn newer_region_coming(&self, version: &AppVersion) -> bool {
        self.up_since.iter().any(|(m, since)| {
            self.versions.get(m).is_some_and(|v| v > version)
                && !self.heard(m)
                && !self.unreachable.contains(m)
                && *since + self.config.removal_margin > self.now
        })
    }

    fn settle(&mut self, shard: ShardId, eager: bool) {
        let waiters = self.waiting.remove(&shard).unwrap_or_default();
        if waiters.is_empty() {
            if eager {
                self.get_home(None, shard);
            }
            return;
        }
        for w in waiters {
            self.get_home(Some(w), shard.clone());
        }
    }

    fn on_register(&mut self, from: UniqueAddress, hosted: Vec<ShardId>) {
        use MemberStatus::*;
        let accepted = self
            .members
            .get(&from)
            .is_some_and(|s| matches!(s, Up | Leaving | PreparingForShutdown | ReadyForShutdown));
        if !accepted || self.removed.contains_key(&from) || self.stopping {
            return;
        }
        self.proxies.remove(&from);
        self.saved.check = true;
        let new = self.proposed.register(from.clone());
        let dirty_before = self.dirty;
        self.dirty = false;
        self.adopt(&from, &hosted);
        let adopted = self.dirty;
        self.dirty |= dirty_before;
        self.registered.insert(from.clone(), hosted);
        if new || adopted {
            self.queued.push(Effect::Welcome(from));
            self.dirty = true;
        } else if self.committed.has_region(&from) {
            self.welcome(&from);
        } else {
            // Its registration is being written (or rewritten after recovery).
            self.queued.push(Effect::Welcome(from));
            self.dirty = true;
        }
    }

    fn welcome(&mut self, region: &UniqueAddress) {
        self.send(region.clone(), RegionMsg::RegisterAck);
        let homes: Vec<(ShardId, UniqueAddress)> = self
            .committed
            .allocations()
            .filter(|(s, _)| self.settled_home(s).is_some())
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect();
        for chunk in homes.chunks(HOMES_PER_MESSAGE) {
            self.send(region.clone(), RegionMsg::ShardHomes(chunk.to_vec()));
        }
    }

    fn on_shard_stopped(&mut self, from: &UniqueAddress, shard: ShardId) {
        if self.handoffs.get(&shard).is_none_or(|h| h.from != *from || !h.handing_off) {
            return;
        }
        self.handoffs.remove(&shard);
        self.hosting.remove(&shard);
        self.proposed.deallocate(&shard);
        self.freed.insert(shard.clone());
        // Allocated again at once, so the regions that buffer its messages hear of the new home
        // without waiting for their next retry.
        self.queued.push(Effect::Settle { shard, eager: true });
        self.dirty = true;
    }

    fn on_graceful_shutdown(&mut self, from: &UniqueAddress, now: Instant) {
        if !self.proposed.has_region(from) || self.stopping {
            return;
        }
        self.shutting_down.insert(from.clone());
        let shards: Vec<ShardId> = self
            .committed
            .shards_of(from)
            .iter()
            .filter(|s| self.proposed.home(s) == Some(from) && !self.handoffs.contains_key(*s))
            .cloned()
            .collect();
        for s in shards {
            self.start_handoff(s, now);
        }
    }

    fn remove_region(&mut self, region: &UniqueAddress) {
        self.removed.remove(region);
        self.shutting_down.remove(region);
        let shards = self.proposed.remove_region(region);
        self.freed.extend(shards.iter().cloned());
        // Remembered entities start without a message, so their shards are allocated again
        // at once rather than on their next message.
        let eager = self.config.remember_entities;
        for s in shards {
            self.handoffs.remove(&s);
            self.hosting.remove(&s);
            self.queued.push(Effect::Settle { shard: s, eager });
        }
        let pending: Vec<ShardId> = self.handoffs.keys().cloned().collect();
        for s in pending {
            if let Some(h) = self.handoffs.get_mut(&s) {
                h.awaiting.remove(region);
            }
            self.maybe_hand_off(&s);
        }
        self.dirty = true;
    }

    fn rebalance(&mut self, now: Instant) {
        self.timers.set(Timer::Rebalance, now + self.config.rebalance_interval);
        let quiet = !self.stopping
            && matches!(self.phase, Phase::Active)
            && self.write.is_none()
            && !self.dirty
            && self.handoffs.is_empty()
            && self.removed.is_empty()
            && self.calm
            && self.one_version
            && !self.unconfirmed
            && self.may_allocate_unknown();
        if !quiet {
            return;
        }
        let loads: Vec<RegionLoad<'_>> = self
            .committed
            .regions()
            .filter(|(r, _)| {
                !self.shutting_down.contains(*r) && self.members.get(*r) == Some(&MemberStatus::Up)
            })
            .filter_map(|(region, shards)| {
                let version = self.versions.get(region)?;
                Some(RegionLoad { region, shards, leaving: false, version })
            })
            .collect();
        for s in self.rule.rebalance(&loads) {
            self.start_handoff(s, now);
        }
    }

    /// Every region and proxy whose node is still a member.
    fn audience(&self) -> BTreeSet<UniqueAddress> {
        self.proposed
            .regions()
            .map(|(r, _)| r)
            .filter(|r| !self.removed.contains_key(*r))
            .chain(self.proxies.iter())
            .cloned()
            .collect()
    }

    fn broadcast(&mut self, msg: &RegionMsg) {
        for r in self.audience() {
            self.send(r, msg.clone());
        }
    }

    fn start_handoff(&mut self, shard: ShardId, now: Instant) {
        let Some(from) = self.committed.home(&shard).cloned() else { return };
        let awaiting = self.audience();
        self.broadcast(&RegionMsg::BeginHandOff(shard.clone()));
        let deadline = now + self.config.handoff_timeout;
        self.handoffs
            .insert(shard.clone(), Handoff { from, awaiting, handing_off: false, deadline });
        self.maybe_hand_off(&shard);
    }

    fn maybe_hand_off(&mut self, shard: &ShardId) {
        let Some(h) = self.handoffs.get_mut(shard) else { return };
        // A stopping coordinator stops no more shards: the move is left to its successor.
        if h.handing_off || !h.awaiting.is_empty() || self.stopping {
            return;
        }
        h.handing_off = true;
        let from = h.from.clone();
        self.send(from, RegionMsg::HandOff(shard.clone()));
    }
}
