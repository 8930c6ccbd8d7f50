//! The task of one entity type on one node: it drives the type's [`Region`], the [`Shard`]s it
//! hosts, the [`Replica`] of the coordinator's table and, while the singleton runs here, the
//! [`Coordinator`]; and it runs the entity tasks.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::{Member, UniqueAddress};
use convoke_sharding::sharding::{
    Coordinator, CoordinatorMsg, CoordinatorOutput, CoordinatorStatus, DropReason, EntityId,
    Region, RegionMsg, RegionOutput, RegionStatus, Replica, ReplicaMsg, Shard, ShardId,
    ShardOutput, ShardingConfig,
};
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::wire::{Decoded, Frame, WireEnvelope, WireFailure, WireNode, WireReply};
use super::{Entity, EntityContext, ShardingError};
use crate::control::{Control, Snapshot};
use crate::messaging::{Endpoint, EndpointKey, Messaging, Replier};

/// Requests a region task takes from its node.
pub(super) enum Request {
    /// A message for an entity, from a local sender.
    Message {
        shard: ShardId,
        entity: EntityId,
        payload: Vec<u8>,
        reply: Option<oneshot::Sender<Reply>>,
    },
    /// What the region hosts and knows.
    Report(oneshot::Sender<RegionReport>),
    /// Hand every shard off and stop; answered once stopped.
    Shutdown(oneshot::Sender<()>),
}

/// A message between the coordinators, regions and replicas of one entity type.
enum Protocol {
    ToCoordinator(CoordinatorMsg),
    ToRegion(RegionMsg),
    Replica(ReplicaMsg),
}

/// The singleton tells the region task that the coordinator runs here now (`Up`) or no more
/// (`Down`: it stops once its pending writes are done or `budget` has passed, then says `done`).
pub(super) enum CoordinatorCmd {
    Up,
    Down { done: oneshot::Sender<()>, budget: Duration },
}

type Reply = Result<Vec<u8>, WireFailure>;

/// Where an entity's answer goes.
#[derive(Debug)]
enum ReplyTo {
    None,
    Local(oneshot::Sender<Reply>),
    Remote(UniqueAddress, u64),
}

/// A message on its way to an entity.
#[derive(Debug)]
pub(super) struct Envelope {
    entity: EntityId,
    payload: Vec<u8>,
    reply: ReplyTo,
}

/// One hosted shard's entity count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStats {
    /// The shard.
    pub shard_id: String,
    /// Entities running (or stopping) in it.
    pub num_entities: u64,
}

/// What one entity type's region on this node hosts and knows.
#[derive(Clone, Debug)]
pub struct RegionReport {
    /// The entity type.
    pub type_name: String,
    /// The region: coordinator, registration, buffers, hosted shards.
    pub region: RegionStatus,
    /// The hosted shards with their entity counts.
    pub shards: Vec<ShardStats>,
    /// The coordinator, when it runs on this node.
    pub coordinator: Option<CoordinatorStatus>,
}

/// Starts an entity task for an entity id, on its mailbox.
pub(super) type Spawner = Arc<dyn Fn(EntityTask) + Send + Sync>;

/// What an entity task needs.
pub(super) struct EntityTask {
    id: EntityId,
    shard: ShardId,
    mailbox: mpsc::Receiver<Box<Envelope>>,
    replies: Replies,
    events: mpsc::UnboundedSender<Event>,
}

/// What entity tasks tell their region task.
pub(super) enum Event {
    /// The entity asks to be stopped.
    Passivate(ShardId, EntityId),
    /// The entity's task has ended.
    Stopped(ShardId, EntityId),
}

/// Sends entities' answers to their askers.
#[derive(Clone)]
struct Replies {
    messaging: Messaging,
    key: EndpointKey<Frame, ()>,
}

impl Replies {
    fn send(&self, to: ReplyTo, reply: Reply) {
        match to {
            ReplyTo::None => {}
            ReplyTo::Local(tx) => {
                let _ = tx.send(reply);
            }
            ReplyTo::Remote(node, id) => {
                let frame = Frame::Reply(WireReply { id, result: reply });
                if let Err(e) = self.messaging.tell(&node, &self.key, &frame) {
                    tracing::debug!(to = %node, error = %e, "cannot send an entity's reply");
                    // Too large, or the queue to the asker is full: say so in a small frame
                    // rather than leave the asker to its timeout.
                    let failure = WireFailure::EntityFailed(format!("cannot send the reply: {e}"));
                    let frame = Frame::Reply(WireReply { id, result: Err(failure) });
                    let _ = self.messaging.tell(&node, &self.key, &frame);
                }
            }
        }
    }
}

/// The endpoint of entity type `type_name`.
fn frame_key(type_name: &str) -> EndpointKey<Frame, ()> {
    EndpointKey::named(format!("convoke.sharding/{type_name}"))
}

/// The endpoint that answers the shard stats of `type_name`'s region on a node.
pub(super) fn stats_key(type_name: &str) -> EndpointKey<(), Vec<ShardStats>> {
    EndpointKey::named(format!("convoke.sharding-stats/{type_name}"))
}

/// A spawner making entities of type `E` with `factory`.
pub(super) fn spawner<E, F>(factory: Arc<F>) -> Spawner
where
    E: Entity,
    F: Fn(&str) -> E + Send + Sync + 'static,
{
    Arc::new(move |task: EntityTask| {
        let factory = factory.clone();
        tokio::spawn(run_entity(factory, task));
    })
}

/// Tells the region task that the entity has ended, whichever way its task ends (a panic
/// anywhere included), once the entity value has been dropped.
struct StoppedGuard {
    events: mpsc::UnboundedSender<Event>,
    shard: ShardId,
    id: EntityId,
}

impl Drop for StoppedGuard {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Stopped(self.shard.clone(), self.id.clone()));
    }
}

/// Runs one entity: made by the factory here, off the region task (a slow or panicking factory
/// delays or fails only this entity), then fed its mailbox until the region drops the sender.
async fn run_entity<E, F>(factory: Arc<F>, task: EntityTask)
where
    E: Entity,
    F: Fn(&str) -> E + Send + Sync + 'static,
{
    let EntityTask { id, shard, mut mailbox, replies, events } = task;
    // Declared first, so dropped last: after the entity and its mailbox.
    let _stopped = StoppedGuard { events: events.clone(), shard: shard.clone(), id: id.clone() };
    let failure = match std::panic::catch_unwind(AssertUnwindSafe(|| factory(&id))) {
        Ok(entity) => serve_entity(entity, &id, &shard, &mut mailbox, &replies, &events).await,
        Err(_) => {
            tracing::error!(entity = %id, shard = %shard, "the entity factory panicked");
            format!("the factory of entity '{id}' panicked")
        }
    };
    // Whatever waits in the mailbox of an entity that failed is answered, not dropped.
    mailbox.close();
    while let Ok(envelope) = mailbox.try_recv() {
        replies.send(envelope.reply, Err(WireFailure::EntityFailed(failure.clone())));
    }
}

/// Feeds `entity` its messages; returns why it ended (answered to what is still queued).
async fn serve_entity<E: Entity>(
    mut entity: E,
    id: &EntityId,
    shard: &ShardId,
    mailbox: &mut mpsc::Receiver<Box<Envelope>>,
    replies: &Replies,
    events: &mpsc::UnboundedSender<Event>,
) -> String {
    let mut ctx =
        EntityContext { entity_id: id.clone(), shard_id: shard.clone(), passivate: false };
    while let Some(envelope) = mailbox.recv().await {
        let message = match postcard::from_bytes::<E::Message>(&envelope.payload) {
            Ok(m) => m,
            Err(e) => {
                replies.send(envelope.reply, Err(WireFailure::BadMessage(e.to_string())));
                continue;
            }
        };
        let handled = AssertUnwindSafe(entity.handle(message, &mut ctx)).catch_unwind().await;
        let Ok(reply) = handled else {
            tracing::error!(entity = %id, shard = %shard, "an entity panicked; it is stopped");
            let failure = format!("entity '{id}' panicked");
            replies.send(envelope.reply, Err(WireFailure::EntityFailed(failure.clone())));
            return failure;
        };
        let encoded = postcard::to_stdvec(&reply)
            .map_err(|e| WireFailure::EntityFailed(format!("cannot encode its reply: {e}")));
        replies.send(envelope.reply, encoded);
        if ctx.passivate {
            ctx.passivate = false;
            let _ = events.send(Event::Passivate(shard.clone(), id.clone()));
        }
    }
    format!("entity '{id}' has stopped")
}

/// What `start` hands back to the node.
pub(super) struct Started {
    pub(super) requests: mpsc::Sender<Request>,
    pub(super) coordinator: mpsc::Sender<CoordinatorCmd>,
}

/// Registers the type's endpoints and spawns its region task.
pub(super) fn start(
    config: ShardingConfig,
    hosting: bool,
    mailbox_size: usize,
    messaging: Messaging,
    control: Control,
    spawner: Spawner,
) -> Result<Started, ShardingError> {
    let key = frame_key(&config.type_name);
    let inbox = messaging.endpoint(&key, 4096)?;
    let stats = messaging.endpoint(&stats_key(&config.type_name), 64)?;
    let (requests, requests_rx) = mpsc::channel(4096);
    let (coordinator, coordinator_rx) = mpsc::channel(4);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let self_node = messaging.self_node().clone();
    let task = Task {
        region: Region::new(config.clone(), self_node.clone(), hosting),
        config,
        self_node,
        replica: Replica::new(),
        coordinator: None,
        coordinator_stopping: None,
        instances: 0,
        shards: HashMap::new(),
        entities: HashMap::new(),
        spawner,
        replies: Replies { messaging: messaging.clone(), key: key.clone() },
        events: events_tx,
        pending: HashMap::new(),
        next_id: 1,
        members: Arc::from(Vec::new()),
        unreachable: BTreeSet::new(),
        local: VecDeque::new(),
        shutdown_waiters: Vec::new(),
        mailbox_size,
        messaging,
        key,
    };
    tokio::spawn(task.run(control.watch(), inbox, stats, requests_rx, coordinator_rx, events_rx));
    Ok(Started { requests, coordinator })
}

struct EntityHandle {
    /// `None` once told to stop: the task drains its mailbox and ends.
    /// Boxed: the channel allocates its slots in blocks, and an idle entity's block of
    /// pointers is a fraction of a block of envelopes.
    mailbox: Option<mpsc::Sender<Box<Envelope>>>,
}

struct Task {
    config: ShardingConfig,
    self_node: UniqueAddress,
    region: Region<Envelope>,
    replica: Replica,
    coordinator: Option<Coordinator>,
    /// The coordinator was asked to stop while changes to its table waited to be written: it
    /// stops, and the singleton is told, once they are or at the deadline.
    coordinator_stopping: Option<(oneshot::Sender<()>, Instant)>,
    /// Coordinators started here so far (their ballots' instance numbers).
    instances: u64,
    shards: HashMap<ShardId, Shard<Envelope>>,
    /// Running entity tasks by shard and id (one id may come with two shard ids from two
    /// nodes whose extractors disagree; each is its own entity).
    entities: HashMap<(ShardId, EntityId), EntityHandle>,
    spawner: Spawner,
    replies: Replies,
    events: mpsc::UnboundedSender<Event>,
    /// Asks from here forwarded to another region, waiting for their reply, with the node they
    /// went to.
    pending: HashMap<u64, (UniqueAddress, oneshot::Sender<Reply>)>,
    next_id: u64,
    members: Arc<[Member]>,
    unreachable: BTreeSet<UniqueAddress>,
    /// Messages from this node to itself (coordinator ↔ region ↔ replica on one node).
    local: VecDeque<Protocol>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    mailbox_size: usize,
    messaging: Messaging,
    key: EndpointKey<Frame, ()>,
}

impl Task {
    async fn run(
        mut self,
        mut snapshots: watch::Receiver<Arc<Snapshot>>,
        mut inbox: Endpoint<Frame, ()>,
        mut stats: Endpoint<(), Vec<ShardStats>>,
        mut requests: mpsc::Receiver<Request>,
        mut coordinator_cmds: mpsc::Receiver<CoordinatorCmd>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) {
        let snapshot = snapshots.borrow_and_update().clone();
        self.feed_members(&snapshot);
        let mut sweep = tokio::time::interval(Duration::from_secs(5));
        // Shards check for idle entities every half idle time; this tick looks a little more
        // often, so an entity stops at most a tick late.
        let idle_every = self.config.passivate_idle_after.map_or(Duration::from_secs(3600), |d| {
            (d / 8).clamp(Duration::from_millis(10), Duration::from_secs(5))
        });
        let mut idle = tokio::time::interval(idle_every);
        loop {
            self.drain();
            self.maybe_stop_coordinator();
            let wake = self.next_deadline();
            tokio::select! {
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let snapshot = snapshots.borrow_and_update().clone();
                    self.feed_members(&snapshot);
                }
                request = requests.recv() => match request {
                    Some(r) => self.on_request(r),
                    None => break,
                },
                frame = inbox.recv() => match frame {
                    Some(r) => {
                        let (from, frame, _) = r.into_parts();
                        self.on_frame(from, frame);
                    }
                    None => break,
                },
                Some(r) = stats.recv() => {
                    let (_, (), replier) = r.into_parts();
                    if let Some(replier) = replier {
                        let stats: Replier<Vec<ShardStats>> = replier;
                        stats.reply(&self.shard_stats());
                    }
                }
                Some(cmd) = coordinator_cmds.recv() => self.on_coordinator_cmd(cmd),
                Some(event) = events.recv() => self.on_event(event),
                () = sleep_until(wake) => self.on_timeout(),
                _ = idle.tick() => self.check_idle(),
                _ = sweep.tick() => {
                    // Asks that timed out at their sender leave their reply slot closed.
                    self.pending.retain(|_, (_, tx)| !tx.is_closed());
                }
            }
        }
        tracing::debug!(entity_type = %self.config.type_name, "shard region task ended");
    }

    fn now() -> std::time::Instant {
        Instant::now().into_std()
    }

    /// The region's and the coordinator's next deadline. The shards' (idle checks) are served
    /// by a tick of their own, so that a message costs no walk over every hosted shard.
    fn next_deadline(&self) -> Option<Instant> {
        let coordinator = self.coordinator.as_ref().and_then(Coordinator::poll_timeout);
        let stopping = self.coordinator_stopping.as_ref().map(|(_, at)| *at);
        [self.region.poll_timeout(), coordinator]
            .into_iter()
            .flatten()
            .map(Instant::from_std)
            .chain(stopping)
            .min()
    }

    fn feed_members(&mut self, snapshot: &Snapshot) {
        self.members = Arc::from(snapshot.state.members.clone());
        self.unreachable =
            snapshot.state.unreachable.iter().map(|(m, _)| m.node().clone()).collect();
        // Asks forwarded to a node that is now Down or gone will get no reply: fail them now
        // rather than at their timeout.
        let alive: std::collections::HashSet<&UniqueAddress> = self
            .members
            .iter()
            .filter(|m| m.status() != convoke_membership::MemberStatus::Down)
            .map(Member::node)
            .collect();
        let lost: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (n, _))| !alive.contains(n))
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            if let Some((node, tx)) = self.pending.remove(&id) {
                let why = format!("{node} left the cluster before answering");
                let _ = tx.send(Err(WireFailure::Unreachable(why)));
            }
        }
        let now = Self::now();
        self.region.handle_members(&self.members, now);
        if let Some(c) = &mut self.coordinator {
            c.handle_members(&self.members, &self.unreachable, now);
        }
    }

    fn on_request(&mut self, request: Request) {
        match request {
            Request::Message { shard, entity, payload, reply } => {
                let reply = reply.map_or(ReplyTo::None, ReplyTo::Local);
                self.region.route(shard, Envelope { entity, payload, reply }, Self::now());
            }
            Request::Report(tx) => {
                let _ = tx.send(RegionReport {
                    type_name: self.config.type_name.clone(),
                    region: self.region.status(),
                    shards: self.shard_stats(),
                    coordinator: self.coordinator.as_ref().map(Coordinator::status),
                });
            }
            Request::Shutdown(tx) => {
                if self.region.status().stopped {
                    let _ = tx.send(());
                } else {
                    self.shutdown_waiters.push(tx);
                    self.region.graceful_shutdown(Self::now());
                }
            }
        }
    }

    fn on_coordinator_cmd(&mut self, cmd: CoordinatorCmd) {
        match cmd {
            CoordinatorCmd::Up => {
                // The singleton starts an instance only after the previous one has ended; one
                // still finishing its writes here has been given up on.
                self.stop_coordinator();
                self.instances += 1;
                let entity_type = &self.config.type_name;
                tracing::info!(%entity_type, "shard coordinator starting here");
                let mut coordinator = Coordinator::new(
                    self.config.clone(),
                    self.self_node.clone(),
                    self.instances,
                    &self.members,
                    &self.unreachable,
                    Self::now(),
                );
                coordinator.note_departures(self.region.departures());
                self.coordinator = Some(coordinator);
            }
            CoordinatorCmd::Down { done, budget } => {
                // The last writes (the shards this node just handed off, its region's stop)
                // reach the table the next coordinator reads; nothing new is taken on.
                if let Some(c) = &mut self.coordinator {
                    c.begin_stop();
                }
                self.coordinator_stopping = Some((done, Instant::now() + budget));
                self.maybe_stop_coordinator();
            }
        }
    }

    /// A protocol message for this node's coordinator, region or replica.
    fn on_protocol(&mut self, from: UniqueAddress, msg: Protocol) {
        let now = Self::now();
        match msg {
            Protocol::ToCoordinator(m) => {
                if let Some(c) = &mut self.coordinator {
                    c.handle_region_msg(from, m, now);
                }
            }
            Protocol::ToRegion(m) => self.region.handle_message(from, m, now),
            Protocol::Replica(m @ (ReplicaMsg::Read { .. } | ReplicaMsg::Write { .. })) => {
                if let Some(answer) = self.replica.handle(m) {
                    self.send(&from, Protocol::Replica(answer));
                }
            }
            Protocol::Replica(m) => {
                if let Some(c) = &mut self.coordinator {
                    c.handle_replica_msg(from, m, now);
                }
            }
        }
    }

    fn on_frame(&mut self, from: UniqueAddress, frame: Frame) {
        let now = Self::now();
        let msg = match Decoded::try_from(frame) {
            Ok(Decoded::ToCoordinator(m)) => Protocol::ToCoordinator(m),
            Ok(Decoded::ToRegion(m)) => Protocol::ToRegion(m),
            Ok(Decoded::Replica(m)) => Protocol::Replica(m),
            Ok(Decoded::Entity { shard, entity, payload, reply_to }) => {
                let reply = match reply_to {
                    Some((node, id)) => ReplyTo::Remote(node, id),
                    None => ReplyTo::None,
                };
                let envelope = Envelope { entity: entity.into(), payload, reply };
                self.region.route(shard, envelope, now);
                return;
            }
            Ok(Decoded::Reply { id, result }) => {
                if let Some((_, tx)) = self.pending.remove(&id) {
                    let _ = tx.send(result);
                }
                return;
            }
            Err(e) => {
                tracing::debug!(%from, error = %e, "a sharding message that does not decode");
                return;
            }
        };
        self.on_protocol(from, msg);
    }

    fn on_event(&mut self, event: Event) {
        let now = Self::now();
        match event {
            Event::Passivate(shard, entity) => {
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.passivate(&entity);
                }
                self.drain_shard(&shard);
            }
            Event::Stopped(shard, entity) => {
                self.entities.remove(&(shard.clone(), entity.clone()));
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.entity_stopped(&entity, now);
                }
                self.drain_shard(&shard);
            }
        }
    }

    /// Stops the coordinator asked to stop once its table is written, at the deadline, or as
    /// soon as the singleton no longer waits for it.
    fn maybe_stop_coordinator(&mut self) {
        let Some((done, deadline)) = &self.coordinator_stopping else { return };
        let writing = self.coordinator.as_ref().is_some_and(Coordinator::has_unwritten_changes);
        if writing && Instant::now() < *deadline && !done.is_closed() {
            return;
        }
        self.stop_coordinator();
    }

    /// Stops the coordinator now and tells the singleton if it waits.
    fn stop_coordinator(&mut self) {
        if let Some((done, _)) = self.coordinator_stopping.take() {
            let _ = done.send(());
        }
        if self.coordinator.take().is_some() {
            let entity_type = &self.config.type_name;
            tracing::info!(%entity_type, "shard coordinator stopped here");
        }
    }

    fn on_timeout(&mut self) {
        let now = Self::now();
        if self.region.poll_timeout().is_some_and(|t| t <= now) {
            self.region.handle_timeout(now);
        }
        if let Some(c) = &mut self.coordinator
            && c.poll_timeout().is_some_and(|t| t <= now)
        {
            c.handle_timeout(now);
        }
    }

    /// Lets every shard whose idle check is due stop its idle entities.
    fn check_idle(&mut self) {
        let now = Self::now();
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

    fn shard_stats(&self) -> Vec<ShardStats> {
        let mut stats: Vec<ShardStats> = self
            .shards
            .iter()
            .map(|(id, s)| ShardStats {
                shard_id: id.to_string(),
                num_entities: s.num_entities() as u64,
            })
            .collect();
        stats.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        stats
    }

    /// Sends a protocol message to the same entity type's task on `to`: this node's is handled
    /// in place, without the wire form.
    fn send(&mut self, to: &UniqueAddress, msg: Protocol) {
        if *to == self.self_node {
            self.local.push_back(msg);
            return;
        }
        let frame = match &msg {
            Protocol::ToCoordinator(m) => Frame::ToCoordinator(m.into()),
            Protocol::ToRegion(m) => Frame::ToRegion(m.into()),
            Protocol::Replica(m) => Frame::Replica(m.into()),
        };
        if let Err(e) = self.messaging.tell(to, &self.key, &frame) {
            tracing::debug!(%to, error = %e, "cannot send a sharding frame");
        }
    }

    /// Carries out every output of the machines until none is left.
    fn drain(&mut self) {
        loop {
            let mut moved = false;
            while let Some(out) = self.coordinator.as_mut().and_then(Coordinator::poll_output) {
                moved = true;
                match out {
                    CoordinatorOutput::ToRegion { to, msg } => {
                        self.send(&to, Protocol::ToRegion(msg));
                    }
                    CoordinatorOutput::ToReplica { to, msg } => {
                        self.send(&to, Protocol::Replica(msg));
                    }
                }
            }
            while let Some(out) = self.region.poll_output() {
                moved = true;
                self.on_region_output(out);
            }
            if let Some(msg) = self.local.pop_front() {
                moved = true;
                let me = self.self_node.clone();
                self.on_protocol(me, msg);
            }
            if !moved {
                return;
            }
        }
    }

    fn on_region_output(&mut self, out: RegionOutput<Envelope>) {
        let now = Self::now();
        match out {
            RegionOutput::ToCoordinator { to, msg } => {
                self.send(&to, Protocol::ToCoordinator(msg));
            }
            RegionOutput::Forward { to, shard, msg } => self.forward(&to, &shard, msg),
            RegionOutput::Deliver { shard, msg } => {
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.deliver(msg.entity.clone(), msg, now);
                    self.drain_shard(&shard);
                } else {
                    self.replies.send(msg.reply, Err(WireFailure::RegionStopped));
                }
            }
            RegionOutput::StartShard(shard) => {
                self.shards.insert(shard.clone(), Shard::new(shard, &self.config));
            }
            RegionOutput::HandOffShard(shard) => {
                if let Some(s) = self.shards.get_mut(&shard) {
                    s.hand_off();
                }
                self.drain_shard(&shard);
            }
            RegionOutput::Dropped { msg, reason } => {
                self.replies.send(msg.reply, Err(failure(reason)));
            }
            RegionOutput::Stopped => {
                tracing::info!(entity_type = %self.config.type_name, "shard region stopped");
                for w in self.shutdown_waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }

    fn forward(&mut self, to: &UniqueAddress, shard: &ShardId, msg: Envelope) {
        let Envelope { entity, payload, reply } = msg;
        let reply_to = match reply {
            ReplyTo::None => None,
            ReplyTo::Local(tx) => {
                let id = self.next_id;
                self.next_id += 1;
                self.pending.insert(id, (to.clone(), tx));
                Some((WireNode::from(&self.self_node), id))
            }
            ReplyTo::Remote(node, id) => Some((WireNode::from(&node), id)),
        };
        let id = reply_to.as_ref().map(|(_, id)| *id);
        let frame = Frame::Entity(WireEnvelope {
            shard: shard.to_string(),
            entity: entity.to_string(),
            payload,
            reply_to: reply_to.clone(),
        });
        if let Err(e) = self.messaging.tell(to, &self.key, &frame) {
            let failure = WireFailure::Unreachable(e.to_string());
            match (reply_to, id) {
                (Some((node, _)), Some(id)) if node == WireNode::from(&self.self_node) => {
                    if let Some((_, tx)) = self.pending.remove(&id) {
                        let _ = tx.send(Err(failure));
                    }
                }
                (Some((node, _)), Some(id)) => {
                    if let Ok(node) = UniqueAddress::try_from(node) {
                        self.replies.send(ReplyTo::Remote(node, id), Err(failure));
                    }
                }
                _ => {}
            }
        }
    }

    fn drain_shard(&mut self, id: &ShardId) {
        while let Some(out) = self.shards.get_mut(id).and_then(Shard::poll_output) {
            match out {
                ShardOutput::StartEntity(entity) => {
                    let (tx, rx) = mpsc::channel(self.mailbox_size);
                    let key = (id.clone(), entity.clone());
                    self.entities.insert(key, EntityHandle { mailbox: Some(tx) });
                    (self.spawner)(EntityTask {
                        id: entity,
                        shard: id.clone(),
                        mailbox: rx,
                        replies: self.replies.clone(),
                        events: self.events.clone(),
                    });
                }
                ShardOutput::Deliver { entity, msg } => {
                    let key = (id.clone(), entity.clone());
                    let Some(tx) = self.entities.get(&key).and_then(|h| h.mailbox.as_ref()) else {
                        self.replies.send(msg.reply, Err(WireFailure::RegionStopped));
                        continue;
                    };
                    if let Err(e) = tx.try_send(Box::new(msg)) {
                        let (msg, failure) = match e {
                            mpsc::error::TrySendError::Full(m) => {
                                (m, WireFailure::MailboxFull(entity.to_string()))
                            }
                            mpsc::error::TrySendError::Closed(m) => (
                                m,
                                WireFailure::EntityFailed(format!("entity '{entity}' has stopped")),
                            ),
                        };
                        self.replies.send(msg.reply, Err(failure));
                    }
                }
                ShardOutput::StopEntity(entity) => {
                    if let Some(h) = self.entities.get_mut(&(id.clone(), entity.clone())) {
                        h.mailbox = None;
                    }
                }
                ShardOutput::Dropped { msg, reason } => {
                    self.replies.send(msg.reply, Err(failure(reason)));
                }
                ShardOutput::Stopped => {
                    self.shards.remove(id);
                    self.region.shard_stopped(id.clone());
                }
            }
        }
    }
}

fn failure(reason: DropReason) -> WireFailure {
    match reason {
        DropReason::BufferFull => WireFailure::BufferFull,
        DropReason::HandedOff => WireFailure::HandedOff,
        DropReason::RegionStopped => WireFailure::RegionStopped,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
