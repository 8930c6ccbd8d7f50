//! The shard region: [`Region`], one per entity type per node. Every message for an entity of
//! the type goes through the region of the node it is sent from.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::mem;
use std::time::{Duration, Instant};

use convoke_membership::{Member, MemberStatus, UniqueAddress};

use super::{CoordinatorMsg, Departures, RegionMsg, ShardId, ShardingConfig};
use convoke_membership::timers::Timers;
use convoke_singleton::oldest_candidate;

/// Why a region gave a message back instead of routing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The region already holds `buffer_size` messages for shards without a known home.
    BufferFull,
    /// The message waited at the shard's old home when the shard was handed off; delivering it
    /// after messages sent later through other nodes would break their order.
    HandedOff,
    /// The region has shut down.
    RegionStopped,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BufferFull => "the region's buffer for shards without a known home is full",
            Self::HandedOff => "the shard was handed off while the message waited for it",
            Self::RegionStopped => "the shard region has stopped",
        })
    }
}

/// What the region asks its driver to do. `M` is whatever the driver routes (a message with
/// its entity id and reply handle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionOutput<M> {
    /// Send a message to the coordinator on node `to`.
    ToCoordinator {
        /// The coordinator's node.
        to: UniqueAddress,
        /// The message.
        msg: CoordinatorMsg,
    },
    /// Pass `msg` to the region of node `to`, which hosts `shard`; it routes it again there.
    Forward {
        /// The hosting region's node.
        to: UniqueAddress,
        /// The shard.
        shard: ShardId,
        /// The message.
        msg: M,
    },
    /// Hand `msg` to the local shard (started by an earlier [`RegionOutput::StartShard`]).
    Deliver {
        /// The shard.
        shard: ShardId,
        /// The message.
        msg: M,
    },
    /// Start hosting `shard` here.
    StartShard(ShardId),
    /// Stop every entity of the local `shard`, then call
    /// [`Region::shard_stopped`](Region::shard_stopped).
    HandOffShard(ShardId),
    /// `msg` will not be delivered; answer its sender with the reason if it waits for a reply.
    Dropped {
        /// The message.
        msg: M,
        /// Why.
        reason: DropReason,
    },
    /// The graceful shutdown has finished: no shard is hosted here and nothing is buffered.
    Stopped,
}

/// What the region knows and holds, for the management API and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionStatus {
    /// The node the region takes for the coordinator's.
    pub coordinator: Option<UniqueAddress>,
    /// Whether that coordinator has acknowledged the registration.
    pub registered: bool,
    /// Whether the region hosts shards (a proxy does not).
    pub hosting: bool,
    /// The shards hosted here.
    pub local_shards: Vec<ShardId>,
    /// Shards whose home the region knows.
    pub known_homes: usize,
    /// Messages waiting for a shard's home.
    pub buffered: usize,
    /// A graceful shutdown has begun.
    pub shutting_down: bool,
    /// The graceful shutdown has finished.
    pub stopped: bool,
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    /// Re-send Register, GetShardHome for buffered shards, GracefulShutdownReq.
    Retry,
    /// Wake up every retry interval while the region hosts, so that a freeze is noticed.
    Watch,
}

impl convoke_membership::timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Local {
    Running,
    /// Its entities are stopping; ShardStopped goes to this coordinator when they have.
    HandingOff(UniqueAddress),
    /// Its entities are stopping and no coordinator asked for it: the node was frozen, or it
    /// has been leaving for longer than the leave allowance.
    Stopping {
        /// Because of a freeze: what its entities still hold is stale.
        frozen: bool,
    },
}

/// The shard region of one entity type on one node: a deterministic state machine with no IO.
///
/// # Call protocol
/// 1. Build it with [`Region::new`]; `hosting` says whether this node has the type's role.
/// 2. Feed it inputs, each with the current time `now` (never decreasing):
///    - [`handle_members`](Self::handle_members) with the membership whenever it changed;
///    - [`route`](Self::route) for every message for the type, sent from this node or
///      forwarded by another region;
///    - [`handle_message`](Self::handle_message) for every [`RegionMsg`] from a coordinator;
///    - [`shard_stopped`](Self::shard_stopped) when a local shard has stopped all its entities
///      (after [`RegionOutput::HandOffShard`], or on its own);
///    - [`graceful_shutdown`](Self::graceful_shutdown) before the node leaves;
///    - [`handle_timeout`](Self::handle_timeout) once the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed.
/// 3. After every input, carry out everything [`poll_output`](Self::poll_output) gives, in
///    order, and re-arm the timer.
///
/// # Guarantees
/// Messages for one shard leave the region (forwarded or delivered) in the order they were
/// routed, except those answered with [`RegionOutput::Dropped`]. The region never holds more
/// than `buffer_size` messages.
///
/// An input that arrives more than a retry interval after the deadline the region asked for
/// shows that the node was frozen (a stopped process, a long pause); its view may be stale (the
/// others may have removed it meanwhile and, a removal margin later, hosted its shards
/// elsewhere). When another member is in its view, the region then stops every local shard at
/// once, before it acts on the input, and starts none for a removal margin (while it hosts, it
/// asks to be woken every retry interval so that a freeze is noticed).
#[derive(Debug)]
pub struct Region<M> {
    config: ShardingConfig,
    self_node: UniqueAddress,
    hosting: bool,
    coordinator: Option<UniqueAddress>,
    registered: bool,
    /// The next registration retry delay (doubling up to the retry interval).
    register_backoff: Duration,
    homes: BTreeMap<ShardId, UniqueAddress>,
    local: BTreeMap<ShardId, Local>,
    buffers: BTreeMap<ShardId, VecDeque<M>>,
    buffered: usize,
    shutting_down: bool,
    /// When a shutting-down region gives up on messages whose shard has no home.
    shutdown_deadline: Option<Instant>,
    stopped: bool,
    /// The nodes of the latest membership: homes elsewhere are not taken.
    members: BTreeSet<UniqueAddress>,
    /// Members downed or removed without handing off, for a coordinator that starts here.
    departures: Departures,
    /// The deadline of the watch timer when the last input ended: an input long after it shows
    /// that the node was frozen.
    expected: Option<Instant>,
    /// After a freeze, no shard starts here before this instant: the node's own membership
    /// must have had a removal margin of running time to tell it whether it was downed.
    hold_until: Option<Instant>,
    /// Set when this node is first seen leaving: by then the region stops every shard and
    /// shuts down (see [`Region::leave_allowance`]).
    leave_deadline: Option<Instant>,
    timers: Timers<Timer, 2>,
    outputs: VecDeque<RegionOutput<M>>,
}

impl<M> Region<M> {
    /// The region of `config`'s type on `self_node`; a proxy unless `hosting`.
    pub fn new(config: ShardingConfig, self_node: UniqueAddress, hosting: bool) -> Self {
        let register_backoff = first_backoff(config.retry_interval);
        Self {
            config,
            self_node,
            hosting,
            coordinator: None,
            registered: false,
            register_backoff,
            homes: BTreeMap::new(),
            local: BTreeMap::new(),
            buffers: BTreeMap::new(),
            buffered: 0,
            shutting_down: false,
            shutdown_deadline: None,
            stopped: false,
            members: BTreeSet::new(),
            departures: Departures::default(),
            expected: None,
            hold_until: None,
            leave_deadline: None,
            timers: Timers::default(),
            outputs: VecDeque::new(),
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<RegionOutput<M>> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let leave = self.leave_deadline.filter(|_| self.hosting && !self.shutting_down);
        self.timers.earliest().into_iter().chain(leave).min()
    }

    /// How long this region goes on hosting once it has seen its node leaving (Leaving or
    /// Exiting): half the removal margin. Past it the region stops every local shard, as after
    /// a freeze, and shuts down: it hosts nothing any more.
    ///
    /// A leaving node may be cut off right after its leave has spread; the others then move it to
    /// Exiting and remove it without a Down, and a removal margin later its shards start
    /// elsewhere, while the node, hearing nothing, still sees itself Leaving and no resolver acts
    /// for it. The leader moves a member to Exiting only once the member has seen itself
    /// Leaving, so the region's stop comes half a margin before any coordinator gives its shards
    /// away; the other half is for entities to end and for clocks that run at slightly
    /// different rates (see `docs/sharding-design.md`, "A leaving node cut off").
    pub fn leave_allowance(&self) -> Duration {
        self.config.removal_margin / 2
    }

    /// What the region knows and holds.
    pub fn status(&self) -> RegionStatus {
        RegionStatus {
            coordinator: self.coordinator.clone(),
            registered: self.registered,
            hosting: self.hosting,
            local_shards: self.local.keys().cloned().collect(),
            known_homes: self.homes.len(),
            buffered: self.buffered,
            shutting_down: self.shutting_down,
            stopped: self.stopped,
        }
    }

    /// Whether the local `shard` is stopping because the node was found frozen (no coordinator
    /// asked for it): what its entities still hold was queued before the freeze and is stale.
    pub fn stopping_after_freeze(&self, shard: &ShardId) -> bool {
        self.local.get(shard) == Some(&Local::Stopping { frozen: true })
    }

    /// The region the message for `shard` would go to now: `None` while its home is unknown.
    pub fn home(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        self.homes.get(shard)
    }

    /// Members downed, or removed without a graceful leave, until a removal margin after their
    /// removal, as this region saw them: a coordinator starting on this node takes them in with
    /// [`Coordinator::note_departures`](super::Coordinator::note_departures).
    pub fn departures(&self) -> &Departures {
        &self.departures
    }

    /// The membership changed: find the coordinator (on the oldest member with the role), and
    /// forget homes on nodes that are gone.
    pub fn handle_members(&mut self, members: &[Member], now: Instant) {
        self.observe(now);
        self.members_changed(members, now);
        self.leave_if_due(now);
        self.watch(now);
    }

    /// Whether `node` is in the latest membership this region saw.
    pub fn is_member(&self, node: &UniqueAddress) -> bool {
        self.members.contains(node)
    }

    fn members_changed(&mut self, members: &[Member], now: Instant) {
        let dc = members
            .iter()
            .find(|m| *m.node() == self.self_node)
            .map_or("default", |m| m.data_center());
        let coordinator =
            oldest_candidate(members, dc, self.config.role.as_deref()).map(|m| m.node().clone());
        let me = members.iter().find(|m| *m.node() == self.self_node);
        let leaving =
            me.is_some_and(|m| matches!(m.status(), MemberStatus::Leaving | MemberStatus::Exiting));
        if leaving && self.leave_deadline.is_none() {
            // A region that first hears of its node when it is already leaving cannot tell since
            // when: it counts the allowance as spent.
            let seen_before = self.members.contains(&self.self_node);
            let allowance = if seen_before { self.leave_allowance() } else { Duration::ZERO };
            self.leave_deadline = Some(now + allowance);
        }
        self.members = members.iter().map(|m| m.node().clone()).collect();
        self.departures.update(members, now, self.config.removal_margin);
        let known = &self.members;
        self.homes.retain(|_, r| known.contains(r));
        if coordinator != self.coordinator {
            self.coordinator = coordinator;
            self.registered = false;
            self.register_backoff = first_backoff(self.config.retry_interval);
            self.register(now);
        }
    }

    /// Routes `msg` for `shard`: to the local shard, to the region hosting it, or into the
    /// shard's buffer until its home is known.
    pub fn route(&mut self, shard: ShardId, msg: M, now: Instant) {
        self.observe(now);
        self.route_now(shard, msg, now);
        self.watch(now);
    }

    fn route_now(&mut self, shard: ShardId, msg: M, now: Instant) {
        if self.stopped {
            self.outputs
                .push_back(RegionOutput::Dropped { msg, reason: DropReason::RegionStopped });
            return;
        }
        if let Some(home) = self.homes.get(&shard).cloned() {
            if home != self.self_node {
                self.outputs.push_back(RegionOutput::Forward { to: home, shard, msg });
                return;
            }
            if self.local.get(&shard) == Some(&Local::Running) {
                self.outputs.push_back(RegionOutput::Deliver { shard, msg });
                return;
            }
            if !self.local.contains_key(&shard)
                && self.hosting
                && !self.shutting_down
                && !self.held(now)
            {
                // The shard stopped on its own; its home is still here.
                self.start_local(shard.clone());
                self.outputs.push_back(RegionOutput::Deliver { shard, msg });
                return;
            }
            self.homes.remove(&shard);
        }
        self.buffer(shard, msg, now);
    }

    /// Asks the coordinator for `shard`'s home as a message for it would, without a message: a
    /// shard allocated anew then starts (remembered entities after a full-cluster restart). The
    /// shard waits with an empty buffer until its home is known.
    pub fn wake(&mut self, shard: ShardId, now: Instant) {
        self.observe(now);
        if self.stopped || self.homes.contains_key(&shard) || self.buffers.contains_key(&shard) {
            return;
        }
        self.buffers.insert(shard.clone(), VecDeque::new());
        if self.registered {
            self.tell_coordinator(CoordinatorMsg::GetShardHome(shard));
        }
        self.arm_retry(now);
        self.watch(now);
    }

    /// A message from the coordinator on node `from`.
    pub fn handle_message(&mut self, from: UniqueAddress, msg: RegionMsg, now: Instant) {
        self.observe(now);
        self.take_message(from, msg, now);
        self.watch(now);
    }

    fn take_message(&mut self, from: UniqueAddress, msg: RegionMsg, now: Instant) {
        if self.stopped {
            // The RegionStopped sent on stopping may have reached a coordinator that was not
            // listening yet (recovering); whoever still counts on this region hears it again.
            self.send(from, CoordinatorMsg::RegionStopped);
            return;
        }
        let from_coordinator = self.coordinator.as_ref() == Some(&from);
        if !from_coordinator && !matches!(msg, RegionMsg::BeginHandOff(_)) {
            // An earlier coordinator still running somewhere; only forgetting a home (which
            // costs a retry at worst) is taken from anyone.
            return;
        }
        match msg {
            RegionMsg::RegisterAck => {
                self.registered = true;
                self.ask_again(now);
            }
            RegionMsg::RegisterAgain => {
                self.registered = false;
                self.register_backoff = first_backoff(self.config.retry_interval);
                self.register(now);
            }
            RegionMsg::ShardHome { shard, region } => self.set_home(shard, region, now),
            RegionMsg::ShardHomes(homes) => {
                for (shard, region) in homes {
                    self.set_home(shard, region, now);
                }
            }
            RegionMsg::HostShard(shard) => {
                if !self.hosting || self.shutting_down {
                    if self.shutting_down {
                        self.send(from, CoordinatorMsg::GracefulShutdownReq);
                    }
                    return;
                }
                self.set_home(shard.clone(), self.self_node.clone(), now);
                // Not while its entities still stop for an earlier handoff: the coordinator asks
                // again, and the shard starts once they have.
                if self.local.get(&shard) == Some(&Local::Running) {
                    self.send(from, CoordinatorMsg::ShardStarted(shard));
                }
            }
            RegionMsg::BeginHandOff(shard) => {
                self.homes.remove(&shard);
                self.send(from, CoordinatorMsg::BeginHandOffAck(shard));
            }
            RegionMsg::HandOff(shard) => {
                self.homes.remove(&shard);
                if let Some(dropped) = self.buffers.remove(&shard) {
                    self.buffered -= dropped.len();
                    for msg in dropped {
                        let reason = DropReason::HandedOff;
                        self.outputs.push_back(RegionOutput::Dropped { msg, reason });
                    }
                }
                match self.local.get_mut(&shard) {
                    Some(state @ Local::Running) => {
                        *state = Local::HandingOff(from);
                        self.outputs.push_back(RegionOutput::HandOffShard(shard));
                    }
                    Some(Local::HandingOff(to)) => *to = from,
                    Some(state @ Local::Stopping { .. }) => *state = Local::HandingOff(from),
                    None => self.send(from, CoordinatorMsg::ShardStopped(shard)),
                }
            }
        }
        // A shutting-down region stops once its last buffered message has gone to a new home.
        self.maybe_stopped();
    }

    /// The local `shard` has stopped all its entities.
    pub fn shard_stopped(&mut self, shard: ShardId) {
        if let Some(Local::HandingOff(coordinator)) = self.local.remove(&shard) {
            self.send(coordinator, CoordinatorMsg::ShardStopped(shard));
        }
        self.maybe_stopped();
    }

    /// Begins the graceful shutdown: the coordinator moves every local shard elsewhere; the
    /// region reports [`RegionOutput::Stopped`] once none is left and nothing is buffered.
    pub fn graceful_shutdown(&mut self, now: Instant) {
        self.observe(now);
        self.shut_down(now);
        self.watch(now);
    }

    fn shut_down(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        self.shutdown_deadline = Some(now + self.config.handoff_timeout);
        if self.registered {
            self.tell_coordinator(CoordinatorMsg::GracefulShutdownReq);
        }
        self.maybe_stopped();
        self.arm_retry(now);
    }

    /// A deadline from [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.observe(now);
        self.timers.take_due(Timer::Watch, now);
        if self.timers.take_due(Timer::Retry, now) && !self.stopped {
            self.retry(now);
        }
        self.watch(now);
    }

    /// Notes a freeze: `now` is more than a retry interval past the watch deadline. Every local
    /// shard stops at once and none starts for a removal margin, when another member could host
    /// them: while this node was frozen the others may have removed it and, a removal margin
    /// later, started its shards elsewhere. Neither may wait for the node's own membership to
    /// say so, which after a freeze longer than `stable_after` takes the resolver another
    /// `stable_after` (see `docs/sharding-design.md`, "Frozen nodes").
    fn observe(&mut self, now: Instant) {
        let late = self.expected.is_some_and(|d| now > d + self.config.retry_interval);
        let others = self.members.iter().any(|n| *n != self.self_node);
        if late && others && self.hosting && !self.stopped {
            self.hold_until = Some(now + self.config.removal_margin);
            self.stop_every_shard(true);
        }
        self.leave_if_due(now);
    }

    /// Once the node has been leaving for the allowance, every local shard stops and the region
    /// shuts down (see [`Region::leave_allowance`]).
    fn leave_if_due(&mut self, now: Instant) {
        let due = self.leave_deadline.is_some_and(|t| t <= now);
        if !due || !self.hosting || self.shutting_down {
            return;
        }
        self.stop_every_shard(false);
        self.shut_down(now);
    }

    /// Stops every running local shard with no coordinator asking (after a freeze when
    /// `frozen`), and forgets the homes here.
    fn stop_every_shard(&mut self, frozen: bool) {
        let me = self.self_node.clone();
        self.homes.retain(|_, r| *r != me);
        for (shard, state) in &mut self.local {
            if *state == Local::Running {
                *state = Local::Stopping { frozen };
                self.outputs.push_back(RegionOutput::HandOffShard(shard.clone()));
            }
        }
    }

    /// Whether the region starts no shard now, after a freeze.
    fn held(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|t| now < t)
    }

    /// Keeps the watch timer running while the region hosts, and notes its deadline.
    fn watch(&mut self, now: Instant) {
        let watch = Timer::Watch;
        if !self.hosting || self.stopped {
            self.timers.clear(watch);
        } else if self.timers.get(watch).is_none() {
            self.timers.set(watch, now + self.config.retry_interval);
        }
        self.expected = self.timers.get(watch);
    }

    /// The retry timer is due.
    fn retry(&mut self, now: Instant) {
        if self.shutdown_deadline.is_some_and(|at| at <= now) {
            // No region could take these shards (every region is shutting down, or the
            // coordinator is gone): the messages are given back rather than held forever.
            for (_, queue) in mem::take(&mut self.buffers) {
                for msg in queue {
                    let reason = DropReason::RegionStopped;
                    self.outputs.push_back(RegionOutput::Dropped { msg, reason });
                }
            }
            self.buffered = 0;
            self.maybe_stopped();
        }
        if !self.registered {
            self.register(now);
            return;
        }
        self.ask_again(now);
        self.maybe_stopped();
    }

    /// Asks the coordinator again for every buffered shard's home (and to be emptied, when
    /// shutting down), and keeps the retry timer running.
    fn ask_again(&mut self, now: Instant) {
        let shards: Vec<ShardId> = self.buffers.keys().cloned().collect();
        for s in shards {
            self.tell_coordinator(CoordinatorMsg::GetShardHome(s));
        }
        if self.shutting_down {
            self.tell_coordinator(CoordinatorMsg::GracefulShutdownReq);
        }
        self.arm_retry(now);
    }

    fn register(&mut self, now: Instant) {
        if self.coordinator.is_none() || self.stopped {
            self.timers.clear(Timer::Retry);
            if self.shutting_down && !self.stopped {
                // Still wake up to give up at the shutdown deadline.
                self.timers.set(Timer::Retry, now + self.config.retry_interval);
            }
            return;
        }
        let msg = if self.hosting {
            // Every shard with entities here, stopping ones included, and those it would start
            // on the next message.
            let mut hosted: BTreeSet<ShardId> = self.local.keys().cloned().collect();
            let me = &self.self_node;
            hosted.extend(self.homes.iter().filter(|(_, h)| *h == me).map(|(s, _)| s.clone()));
            let hosted = hosted.into_iter().collect();
            CoordinatorMsg::Register { hosted }
        } else {
            CoordinatorMsg::RegisterProxy
        };
        self.tell_coordinator(msg);
        self.timers.set(Timer::Retry, now + self.register_backoff);
        self.register_backoff = (self.register_backoff * 2).min(self.config.retry_interval);
    }

    /// Keeps the retry timer running while anything waits for the coordinator.
    fn arm_retry(&mut self, now: Instant) {
        if self.stopped {
            self.timers.clear(Timer::Retry);
        } else if !self.buffers.is_empty() || self.shutting_down {
            self.timers.set_at_most(Timer::Retry, now + self.config.retry_interval);
        }
    }

    fn buffer(&mut self, shard: ShardId, msg: M, now: Instant) {
        if self.buffered >= self.config.buffer_size {
            self.outputs.push_back(RegionOutput::Dropped { msg, reason: DropReason::BufferFull });
            return;
        }
        let queue = self.buffers.entry(shard.clone()).or_default();
        queue.push_back(msg);
        self.buffered += 1;
        if queue.len() == 1 && self.registered {
            self.tell_coordinator(CoordinatorMsg::GetShardHome(shard));
        }
        self.arm_retry(now);
    }

    fn set_home(&mut self, shard: ShardId, region: UniqueAddress, now: Instant) {
        if !self.members.contains(&region) {
            // The coordinator had not yet seen the node go; the shard is asked for again.
            return;
        }
        if region == self.self_node {
            if !self.hosting || self.shutting_down {
                return;
            }
            if let Some(Local::HandingOff(_) | Local::Stopping { .. }) = self.local.get(&shard) {
                // Hosted again only once the handoff has ended.
                return;
            }
            if !self.local.contains_key(&shard) && self.held(now) {
                // Frozen a moment ago: the messages wait, and the home is asked for again.
                return;
            }
            if !self.local.contains_key(&shard) {
                self.start_local(shard.clone());
            }
        }
        self.homes.insert(shard.clone(), region.clone());
        let Some(queue) = self.buffers.remove(&shard) else { return };
        self.buffered -= queue.len();
        for msg in queue {
            let out = if region == self.self_node {
                RegionOutput::Deliver { shard: shard.clone(), msg }
            } else {
                RegionOutput::Forward { to: region.clone(), shard: shard.clone(), msg }
            };
            self.outputs.push_back(out);
        }
    }

    fn start_local(&mut self, shard: ShardId) {
        self.local.insert(shard.clone(), Local::Running);
        self.outputs.push_back(RegionOutput::StartShard(shard));
    }

    fn maybe_stopped(&mut self) {
        if !self.shutting_down || self.stopped || !self.local.is_empty() || self.buffered > 0 {
            return;
        }
        self.stopped = true;
        self.timers.clear(Timer::Retry);
        self.timers.clear(Timer::Watch);
        self.tell_coordinator(CoordinatorMsg::RegionStopped);
        self.outputs.push_back(RegionOutput::Stopped);
    }

    fn tell_coordinator(&mut self, msg: CoordinatorMsg) {
        if let Some(to) = self.coordinator.clone() {
            self.send(to, msg);
        }
    }

    fn send(&mut self, to: UniqueAddress, msg: CoordinatorMsg) {
        self.outputs.push_back(RegionOutput::ToCoordinator { to, msg });
    }
}

/// The first registration retry: an eighth of the retry interval, at least 100 ms.
fn first_backoff(retry_interval: Duration) -> Duration {
    (retry_interval / 8).max(Duration::from_millis(100))
}
