//! The host of one entity type on one node: [`Host`] ties the type's [`Region`], the [`Shard`]s
//! it hosts, the [`Replica`] of the coordinator's table and, while the singleton runs here, the
//! [`Coordinator`] together, and correlates the asks this node sent elsewhere with their replies.
//! The node runtime and the simulator both drive it; `docs/sharding-design.md` ("The host
//! machine") walks through one ask.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use convoke_membership::timers::Timers;
use convoke_membership::{Address, Member, MemberStatus, UniqueAddress};

use super::wire::{Decoded, Frame, WireEnvelope, WireFailure, WireNode, WireReply};
use super::{
    Coordinator, CoordinatorMsg, CoordinatorOutput, CoordinatorStatus, DropReason, EntityId,
    Region, RegionMsg, RegionOutput, RegionStatus, Replica, ReplicaMsg, Shard, ShardId,
    ShardOutput, ShardingConfig, StateVersion,
};

/// What an entity's answer goes back to.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyTo<R> {
    /// Nobody waits for one (a tell).
    None,
    /// The driver's handle of an ask made on this node.
    Local(R),
    /// Ask `id` of node `node`, which waits for a [`Frame`] with the answer.
    Remote(UniqueAddress, u64),
}

/// An entity's answer, or why there is none.
pub type Reply = Result<Vec<u8>, WireFailure>;

/// A message on its way to an entity, as the region and shards hold it.
#[derive(Debug)]
pub struct Envelope<R> {
    entity: EntityId,
    payload: Vec<u8>,
    reply: ReplyTo<R>,
}

/// What the host asks its driver to do. `R` is the driver's handle of a local ask.
#[derive(Debug)]
pub enum HostOutput<R> {
    /// Send `frame` to the same entity type on node `to`. If it cannot be sent, pass it back to
    /// [`Host::undeliverable`].
    Send {
        /// The node.
        to: UniqueAddress,
        /// The frame.
        frame: Frame,
    },
    /// Create entity `entity` of shard `shard` (from the type's factory). Tell
    /// [`Host::entity_stopped`] when it has ended, whichever way.
    StartEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// Hand a message to the running entity; its answer goes to `reply` (see [`answer`]).
    DeliverToEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// The user's message, encoded.
        payload: Vec<u8>,
        /// Where the answer goes.
        reply: ReplyTo<R>,
    },
    /// Let the entity finish what it holds and end (passivation, handoff).
    StopEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// The local ask `to` is answered.
    Reply {
        /// The driver's handle.
        to: R,
        /// The answer, or why there is none.
        result: Reply,
    },
    /// Shard `0` starts here (for logs and checks: entities start on their first message).
    ShardStarted(ShardId),
    /// Remembered entities only, right after [`HostOutput::ShardStarted`]: read the shard's
    /// remembered entities from the store and pass them to [`Host::entities_loaded`].
    LoadEntities(ShardId),
    /// Remembered entities only: add `entity` to its shard's remembered set in the store.
    /// Changes of one shard's set are to be applied in the order they come.
    Remember {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// Remembered entities only: remove `entity` from its shard's remembered set (it was
    /// passivated, or ended on its own).
    Forget {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// A shard stops every entity, for a handoff or because the node was found frozen.
    ShardHandingOff {
        /// The shard.
        shard: ShardId,
        /// The node was frozen: the others may host the shard by now, so whatever its entities
        /// still hold, queued before the freeze, must be answered with a failure, not handled.
        frozen: bool,
    },
    /// Shard `0` has stopped every entity and is no longer hosted here.
    ShardStopped(ShardId),
    /// With `ShardingConfig::keep_homes`, right after [`HostOutput::CoordinatorStarted`]: read
    /// the homes kept in the store and pass them to [`Host::homes_loaded`] (none if there are
    /// none or the store cannot be read).
    LoadHomes,
    /// With `ShardingConfig::keep_homes`: keep these homes in the store, in place of those kept
    /// before. Only the latest matters: one that comes while an earlier one is being written
    /// replaces it.
    SaveHomes(Vec<(ShardId, Address)>),
    /// The coordinator has started here, with its instance number.
    CoordinatorStarted(u64),
    /// The coordinator asked to stop with [`Host::coordinator_down`] has stopped.
    CoordinatorStopped,
    /// The graceful shutdown has finished: nothing is hosted or buffered here.
    Stopped,
}

/// Where an entity's answer to a message delivered with [`HostOutput::DeliverToEntity`] goes:
/// to the local asker, or in a frame to the node of a remote one. `None` for a tell. A pure
/// function, so that entities answer without a round trip through the host.
pub fn answer<R>(reply: ReplyTo<R>, result: Reply) -> Option<HostOutput<R>> {
    match reply {
        ReplyTo::None => None,
        ReplyTo::Local(to) => Some(HostOutput::Reply { to, result }),
        ReplyTo::Remote(to, id) => {
            Some(HostOutput::Send { to, frame: Frame::Reply(WireReply { id, result }) })
        }
    }
}

/// A protocol message between the machines of one entity type.
#[derive(Debug)]
enum Protocol {
    ToCoordinator(CoordinatorMsg),
    ToRegion(RegionMsg),
    Replica(ReplicaMsg),
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    /// Let shards stop their idle entities.
    Idle,
    /// Stop the coordinator asked to stop, written or not.
    CoordinatorStop,
}

impl convoke_membership::timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

/// The machines of one entity type on one node, with no IO.
///
/// # Call protocol
/// 1. Build it with [`Host::new`]; `hosting` says whether this node has the type's role.
/// 2. Feed it inputs, each with the current time `now` (never decreasing):
///    - [`handle_members`](Self::handle_members) with the membership whenever it changed;
///    - [`ask`](Self::ask) for every message for an entity sent from this node;
///    - [`handle_frame`](Self::handle_frame) for every frame from the type on another node;
///    - [`entity_stopped`](Self::entity_stopped), [`passivate`](Self::passivate) from the
///      entities;
///    - [`coordinator_up`](Self::coordinator_up) / [`coordinator_down`](Self::coordinator_down)
///      as the coordinator's singleton instance starts and stops here;
///    - [`graceful_shutdown`](Self::graceful_shutdown) before the node leaves;
///    - [`handle_timeout`](Self::handle_timeout) once the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed.
/// 3. After every input, carry out everything [`poll_output`](Self::poll_output) gives, in
///    order, and re-arm the timer.
///
/// Messages between the machines of this node are handled in place, without a frame. An ask
/// forwarded to another node waits here for its reply; it is failed when that node is downed or
/// leaves, or when the driver gives up on it ([`forget_asks`](Self::forget_asks)).
#[derive(Debug)]
pub struct Host<R> {
    config: ShardingConfig,
    self_node: UniqueAddress,
    region: Region<Envelope<R>>,
    replica: Replica,
    coordinator: Option<Coordinator>,
    /// Coordinators started here so far: the instance numbers of their ballots.
    instances: u64,
    /// The coordinator was asked to stop: it stops once its table is written, or at the deadline.
    stopping: bool,
    /// The version of the coordinator's table whose homes were last looked at for keeping, and
    /// the homes last given to keep (`ShardingConfig::keep_homes`).
    saved_version: Option<StateVersion>,
    saved_homes: Option<Vec<(ShardId, Address)>>,
    shards: BTreeMap<ShardId, Shard<Envelope<R>>>,
    /// Asks from here forwarded to another region, by their wire id, with the node they went to.
    pending: BTreeMap<u64, (UniqueAddress, R)>,
    next_id: u64,
    members: Vec<Member>,
    unreachable: BTreeSet<UniqueAddress>,
    /// Messages from this node to itself.
    local: VecDeque<Protocol>,
    timers: Timers<Timer, 2>,
    outputs: VecDeque<HostOutput<R>>,
}

impl<R> Host<R> {
    /// The host of `config`'s type on `self_node`; a proxy unless `hosting`.
    pub fn new(config: ShardingConfig, self_node: UniqueAddress, hosting: bool) -> Self {
        Self {
            region: Region::new(config.clone(), self_node.clone(), hosting),
            config,
            self_node,
            replica: Replica::new(),
            coordinator: None,
            instances: 0,
            stopping: false,
            saved_version: None,
            saved_homes: None,
            shards: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_id: 1,
            members: Vec::new(),
            unreachable: BTreeSet::new(),
            local: VecDeque::new(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<HostOutput<R>> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let coordinator = self.coordinator.as_ref().and_then(Coordinator::poll_timeout);
        [self.region.poll_timeout(), coordinator, self.timers.earliest()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The region's status.
    pub fn region_status(&self) -> RegionStatus {
        self.region.status()
    }

    /// The coordinator's status, while it runs here.
    pub fn coordinator_status(&self) -> Option<CoordinatorStatus> {
        self.coordinator.as_ref().map(Coordinator::status)
    }

    /// The coordinator, while it runs here (the simulator's checks read its table).
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }

    /// The hosted shards with their entity counts, in shard order.
    pub fn shard_counts(&self) -> impl Iterator<Item = (&ShardId, usize)> {
        self.shards.iter().map(|(id, s)| (id, s.num_entities()))
    }

    /// Asks forwarded elsewhere that wait for their reply.
    pub fn pending_asks(&self) -> usize {
        self.pending.len()
    }

    /// The membership changed: region and coordinator see it; asks forwarded to a node that is
    /// now downed or gone are failed, since no reply will come.
    pub fn handle_members(
        &mut self,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        now: Instant,
    ) {
        self.members = members.to_vec();
        self.unreachable.clone_from(unreachable);
        let alive: BTreeSet<&UniqueAddress> =
            members.iter().filter(|m| m.status() != MemberStatus::Down).map(Member::node).collect();
        let lost: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (n, _))| !alive.contains(n))
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            if let Some((node, to)) = self.pending.remove(&id) {
                let why = format!("{node} left the cluster before answering");
                let result = Err(WireFailure::Unreachable(why));
                self.outputs.push_back(HostOutput::Reply { to, result });
            }
        }
        self.region.handle_members(members, now);
        if let Some(c) = &mut self.coordinator {
            c.handle_members(members, unreachable, now);
        }
        self.drain(now);
    }

    /// A message from this node for `entity` of `shard`; `reply` waits for the answer if set.
    pub fn ask(
        &mut self,
        shard: ShardId,
        entity: EntityId,
        payload: Vec<u8>,
        reply: Option<R>,
        now: Instant,
    ) {
        let reply = reply.map_or(ReplyTo::None, ReplyTo::Local);
        self.region.route(shard, Envelope { entity, payload, reply }, now);
        self.drain(now);
    }

    /// A frame from the same entity type on node `from`. A frame that does not decode is
    /// dropped, and the reason returned for the driver's log.
    ///
    /// # Errors
    /// A node address in the frame is not valid.
    pub fn handle_frame(
        &mut self,
        from: UniqueAddress,
        frame: Frame,
        now: Instant,
    ) -> Result<(), String> {
        let msg = match Decoded::try_from(frame)? {
            Decoded::ToCoordinator(m) => Protocol::ToCoordinator(m),
            Decoded::ToRegion(m) => Protocol::ToRegion(m),
            Decoded::Replica(m) => Protocol::Replica(m),
            Decoded::Entity { shard, entity, payload, reply_to } => {
                let reply = match reply_to {
                    Some((node, id)) => ReplyTo::Remote(node, id),
                    None => ReplyTo::None,
                };
                let envelope = Envelope { entity: entity.into(), payload, reply };
                self.region.route(shard, envelope, now);
                self.drain(now);
                return Ok(());
            }
            Decoded::Reply { id, result } => {
                if let Some((_, to)) = self.pending.remove(&id) {
                    self.outputs.push_back(HostOutput::Reply { to, result });
                }
                return Ok(());
            }
        };
        self.on_protocol(from, msg, now);
        self.drain(now);
        Ok(())
    }

    /// A frame from [`HostOutput::Send`] could not be sent: an ask it carries is failed with
    /// `error`.
    pub fn undeliverable(&mut self, frame: Frame, error: &str) {
        let Frame::Entity(WireEnvelope { reply_to: Some((node, id)), .. }) = frame else { return };
        let failure = WireFailure::Unreachable(error.to_owned());
        if node == WireNode::from(&self.self_node) {
            if let Some((_, to)) = self.pending.remove(&id) {
                self.outputs.push_back(HostOutput::Reply { to, result: Err(failure) });
            }
        } else if let Ok(node) = UniqueAddress::try_from(node) {
            self.outputs.extend(answer(ReplyTo::Remote(node, id), Err(failure)));
        }
    }

    /// Forgets the forwarded asks whose handle `keep` refuses (their asker gave up waiting).
    pub fn forget_asks(&mut self, mut keep: impl FnMut(&R) -> bool) {
        self.pending.retain(|_, (_, r)| keep(r));
    }

    /// The entity asks to be stopped.
    pub fn passivate(&mut self, shard: &ShardId, entity: &EntityId, now: Instant) {
        if let Some(s) = self.shards.get_mut(shard) {
            s.passivate(entity);
        }
        self.drain_shard(shard);
        self.drain(now);
    }

    /// The remembered entities of `shard`, read from the store after
    /// [`HostOutput::LoadEntities`]: those not running start. Ignored unless the shard is
    /// hosted here and has not had its set yet.
    pub fn entities_loaded(
        &mut self,
        shard: &ShardId,
        ids: impl IntoIterator<Item = EntityId>,
        now: Instant,
    ) {
        if let Some(s) = self.shards.get_mut(shard) {
            s.start_remembered(ids, now);
        }
        self.drain_shard(shard);
        self.drain(now);
    }

    /// Asks for the home of each of `shards` as a message would, so that those not allocated
    /// start (the driver reads which shards remembered entities after a full-cluster restart).
    pub fn wake(&mut self, shards: impl IntoIterator<Item = ShardId>, now: Instant) {
        for shard in shards {
            self.region.wake(shard, now);
        }
        self.drain(now);
    }

    /// The entity has ended (asked to, or on its own).
    pub fn entity_stopped(&mut self, shard: &ShardId, entity: &EntityId, now: Instant) {
        if let Some(s) = self.shards.get_mut(shard) {
            s.entity_stopped(entity, now);
        }
        self.drain_shard(shard);
        self.drain(now);
    }

    /// The coordinator's singleton instance starts here. One still finishing its writes here is
    /// given up on: the singleton starts an instance only after the previous one has ended.
    pub fn coordinator_up(&mut self, now: Instant) {
        self.stop_coordinator();
        self.instances += 1;
        let mut coordinator = Coordinator::new(
            self.config.clone(),
            self.self_node.clone(),
            self.instances,
            &self.members,
            &self.unreachable,
            now,
        );
        coordinator.note_departures(self.region.departures());
        self.coordinator = Some(coordinator);
        self.outputs.push_back(HostOutput::CoordinatorStarted(self.instances));
        if self.config.keep_homes {
            // Another node's coordinator may have kept other homes since this node last did.
            self.saved_homes = None;
            self.outputs.push_back(HostOutput::LoadHomes);
        }
        self.drain(now);
    }

    /// The homes kept in the store, read after [`HostOutput::LoadHomes`] (empty if there were
    /// none or they could not be read).
    pub fn homes_loaded(&mut self, homes: Vec<(ShardId, Address)>, now: Instant) {
        if let Some(c) = &mut self.coordinator {
            c.homes_loaded(homes, now);
        }
        self.drain(now);
    }

    /// The coordinator's instance is asked to stop: it takes on nothing new, and stops once the
    /// changes to its table are written (the shards just handed off here reach the table the
    /// next coordinator reads), or after `budget`, then says [`HostOutput::CoordinatorStopped`].
    pub fn coordinator_down(&mut self, budget: Duration, now: Instant) {
        let Some(c) = &mut self.coordinator else {
            self.outputs.push_back(HostOutput::CoordinatorStopped);
            return;
        };
        c.begin_stop();
        self.stopping = true;
        self.timers.set(Timer::CoordinatorStop, now + budget);
        self.drain(now);
    }

    /// Stops the coordinator now, written or not (nobody waits for it any longer).
    pub fn coordinator_stop_now(&mut self) {
        self.stop_coordinator();
    }

    /// Begins the graceful shutdown: every local shard moves elsewhere; the host says
    /// [`HostOutput::Stopped`] once none is left and nothing is buffered.
    pub fn graceful_shutdown(&mut self, now: Instant) {
        self.region.graceful_shutdown(now);
        self.drain(now);
    }

    /// A deadline from [`poll_timeout`](Self::poll_timeout) has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.region.poll_timeout().is_some_and(|t| t <= now) {
            self.region.handle_timeout(now);
        }
        if let Some(c) = &mut self.coordinator
            && c.poll_timeout().is_some_and(|t| t <= now)
        {
            c.handle_timeout(now);
        }
        if self.timers.take_due(Timer::Idle, now) {
            let due: Vec<ShardId> = self
                .shards
                .iter()
                .filter(|(_, s)| s.poll_timeout().is_some_and(|t| t <= now))
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                if let Some(s) = self.shards.get_mut(&id) {
                    s.handle_timeout(now);
                }
                self.drain_shard(&id);
            }
        }
        self.drain(now);
    }

    /// Shards look for idle entities every half idle time; the host wakes them a little more
    /// often, so that an entity stops at most one tick late and a message costs no walk over
    /// every hosted shard.
    fn idle_tick(&self) -> Option<Duration> {
        let d = self.config.idle_after()?;
        Some((d / 8).clamp(Duration::from_millis(10), Duration::from_secs(5)))
    }

    fn on_protocol(&mut self, from: UniqueAddress, msg: Protocol, now: Instant) {
        match msg {
            Protocol::ToCoordinator(m) => {
                if let Some(c) = &mut self.coordinator {
                    c.handle_region_msg(from, m, now);
                }
            }
            Protocol::ToRegion(m) => self.region.handle_message(from, m, now),
            Protocol::Replica(m @ (ReplicaMsg::Read { .. } | ReplicaMsg::Write { .. })) => {
                // A table accepted from outside this node's own cluster would outrank the
                // tables of the cluster it joins later (docs/sharding-design.md, "A replica
                // belongs to one cluster"): a node not yet welcomed answers no coordinator.
                if !self.in_cluster_with(&from) {
                    return;
                }
                if let Some(answer) = self.replica.handle(m) {
                    self.send(from, Protocol::Replica(answer));
                }
            }
            Protocol::Replica(m) => {
                if let Some(c) = &mut self.coordinator {
                    c.handle_replica_msg(from, m, now);
                }
            }
        }
    }

    /// Whether this node is in its own membership view (it was welcomed into a cluster) and
    /// `node` is a member of that view too.
    fn in_cluster_with(&self, node: &UniqueAddress) -> bool {
        self.region.is_member(&self.self_node) && self.region.is_member(node)
    }

    /// Sends a protocol message to the same entity type on `to`: this node's is handled in
    /// place.
    fn send(&mut self, to: UniqueAddress, msg: Protocol) {
        if to == self.self_node {
            self.local.push_back(msg);
            return;
        }
        let frame = match &msg {
            Protocol::ToCoordinator(m) => Frame::ToCoordinator(m.into()),
            Protocol::ToRegion(m) => Frame::ToRegion(m.into()),
            Protocol::Replica(m) => Frame::Replica(m.into()),
        };
        self.outputs.push_back(HostOutput::Send { to, frame });
    }

    /// Carries out the machines' outputs among themselves until none is left.
    fn drain(&mut self, now: Instant) {
        loop {
            let mut moved = false;
            while let Some(out) = self.coordinator.as_mut().and_then(Coordinator::poll_output) {
                moved = true;
                match out {
                    CoordinatorOutput::ToRegion { to, msg } => {
                        self.send(to, Protocol::ToRegion(msg))
                    }
                    CoordinatorOutput::ToReplica { to, msg } => {
                        self.send(to, Protocol::Replica(msg));
                    }
                }
            }
            while let Some(out) = self.region.poll_output() {
                moved = true;
                self.on_region_output(out, now);
            }
            if let Some(msg) = self.local.pop_front() {
                moved = true;
                let me = self.self_node.clone();
                self.on_protocol(me, msg, now);
            }
            if !moved {
                break;
            }
        }
        self.maybe_stop_coordinator(now);
        self.arm_idle(now);
        self.maybe_save_homes();
    }

    /// Asks the driver to keep the coordinator's homes when the written table changed them.
    fn maybe_save_homes(&mut self) {
        let Some(c) = self.coordinator.as_ref().filter(|_| self.config.keep_homes) else {
            return;
        };
        let Some(version) = c.version().filter(|v| self.saved_version.as_ref() != Some(*v)) else {
            return;
        };
        let version = version.clone();
        let Some(homes) = c.homes_to_save() else { return };
        self.saved_version = Some(version);
        if self.saved_homes.as_ref() != Some(&homes) {
            self.saved_homes = Some(homes.clone());
            self.outputs.push_back(HostOutput::SaveHomes(homes));
        }
    }

    fn on_region_output(&mut self, out: RegionOutput<Envelope<R>>, now: Instant) {
        match out {
            RegionOutput::ToCoordinator { to, msg } => self.send(to, Protocol::ToCoordinator(msg)),
            RegionOutput::Forward { to, shard, msg } => self.forward(to, &shard, msg),
            RegionOutput::Deliver { shard, msg } => {
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.deliver(msg.entity.clone(), msg, now);
                    self.drain_shard(&shard);
                } else {
                    self.outputs.extend(answer(msg.reply, Err(WireFailure::RegionStopped)));
                }
            }
            RegionOutput::StartShard(shard) => {
                self.shards.insert(shard.clone(), Shard::new(shard.clone(), &self.config));
                self.outputs.push_back(HostOutput::ShardStarted(shard.clone()));
                if self.config.remember_entities {
                    self.outputs.push_back(HostOutput::LoadEntities(shard));
                }
            }
            RegionOutput::HandOffShard(shard) => {
                let frozen = self.region.stopping_after_freeze(&shard);
                self.outputs
                    .push_back(HostOutput::ShardHandingOff { shard: shard.clone(), frozen });
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.hand_off();
                }
                self.drain_shard(&shard);
            }
            RegionOutput::Dropped { msg, reason } => {
                self.outputs.extend(answer(msg.reply, Err(failure(reason))));
            }
            RegionOutput::Stopped => self.outputs.push_back(HostOutput::Stopped),
        }
    }

    /// Sends `msg` to the region of `to`; a local ask waits here for its reply.
    fn forward(&mut self, to: UniqueAddress, shard: &ShardId, msg: Envelope<R>) {
        let Envelope { entity, payload, reply } = msg;
        let reply_to = match reply {
            ReplyTo::None => None,
            ReplyTo::Local(r) => {
                let id = self.next_id;
                self.next_id += 1;
                self.pending.insert(id, (to.clone(), r));
                Some((WireNode::from(&self.self_node), id))
            }
            ReplyTo::Remote(node, id) => Some((WireNode::from(&node), id)),
        };
        let frame = Frame::Entity(WireEnvelope {
            shard: shard.to_string(),
            entity: entity.to_string(),
            payload,
            reply_to,
        });
        self.outputs.push_back(HostOutput::Send { to, frame });
    }

    fn drain_shard(&mut self, id: &ShardId) {
        while let Some(out) = self.shards.get_mut(id).and_then(Shard::poll_output) {
            let shard = id.clone();
            match out {
                ShardOutput::StartEntity(entity) => {
                    self.outputs.push_back(HostOutput::StartEntity { shard, entity });
                }
                ShardOutput::Deliver { entity, msg } => {
                    let Envelope { payload, reply, .. } = msg;
                    let out = HostOutput::DeliverToEntity { shard, entity, payload, reply };
                    self.outputs.push_back(out);
                }
                ShardOutput::StopEntity(entity) => {
                    self.outputs.push_back(HostOutput::StopEntity { shard, entity });
                }
                ShardOutput::Remember(entity) => {
                    self.outputs.push_back(HostOutput::Remember { shard, entity });
                }
                ShardOutput::Forget(entity) => {
                    self.outputs.push_back(HostOutput::Forget { shard, entity });
                }
                ShardOutput::Dropped { msg, reason } => {
                    self.outputs.extend(answer(msg.reply, Err(failure(reason))));
                }
                ShardOutput::Stopped => {
                    self.shards.remove(id);
                    self.outputs.push_back(HostOutput::ShardStopped(shard));
                    self.region.shard_stopped(id.clone());
                }
            }
        }
    }

    /// Stops the coordinator asked to stop once its table is written or at the deadline.
    fn maybe_stop_coordinator(&mut self, now: Instant) {
        if !self.stopping {
            return;
        }
        let writing = self.coordinator.as_ref().is_some_and(Coordinator::has_unwritten_changes);
        let late = self.timers.get(Timer::CoordinatorStop).is_none_or(|at| at <= now);
        if writing && !late {
            return;
        }
        self.stop_coordinator();
    }

    fn stop_coordinator(&mut self) {
        self.timers.clear(Timer::CoordinatorStop);
        self.coordinator = None;
        if std::mem::take(&mut self.stopping) {
            self.outputs.push_back(HostOutput::CoordinatorStopped);
        }
    }

    /// Keeps the idle tick running while shards are hosted.
    fn arm_idle(&mut self, now: Instant) {
        match self.idle_tick() {
            Some(every) if !self.shards.is_empty() => {
                if !self.timers.is_set(Timer::Idle) {
                    self.timers.set(Timer::Idle, now + every);
                }
            }
            _ => self.timers.clear(Timer::Idle),
        }
    }
}

/// The failure an ask is answered with when the region or a shard drops its message.
pub fn failure(reason: DropReason) -> WireFailure {
    match reason {
        DropReason::BufferFull => WireFailure::BufferFull,
        DropReason::HandedOff => WireFailure::HandedOff,
        DropReason::RegionStopped => WireFailure::RegionStopped,
    }
}
