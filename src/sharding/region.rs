//! The task of one entity type on one node: it drives the type's sans-IO [`Host`] (region,
//! shards, replica, coordinator and the correlation of forwarded asks), moves its frames through
//! the messaging layer, runs the entity tasks and arms its timer. Every decision is the host's;
//! `docs/architecture.md` walks through one sharded ask.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use convoke_sharding::wire::{Frame, WireFailure};
use convoke_sharding::{
    CoordinatorStatus, EntityId, Host, HostOutput, RegionStatus, ReplyTo, ShardId, ShardingConfig,
    answer,
};
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::homes::{self, Homes};
use super::remember::{self, Cmd, Remembrance};
use super::state::{EntityState, StateStore};
use super::{Entity, EntityContext, ShardingError};
use crate::control::{Control, Snapshot};
use crate::messaging::{Endpoint, EndpointKey, Messaging, Replier};

/// The most requests, or frames, the region task takes from its queue in one turn of its loop:
/// enough that a burst costs one turn, few enough that timers and the other queues are not kept
/// waiting behind a busy one.
const BATCH: usize = 64;

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

/// The singleton tells the region task that the coordinator runs here now (`Up`) or no more
/// (`Down`: it stops once its pending writes are done or `budget` has passed, then says `done`).
pub(super) enum CoordinatorCmd {
    Up,
    Down { done: oneshot::Sender<()>, budget: Duration },
}

type Reply = convoke_sharding::Reply;
/// The handle of a local ask: where its answer goes.
type Asker = oneshot::Sender<Reply>;

/// A message on its way into an entity's mailbox.
#[derive(Debug)]
pub(super) struct Envelope {
    payload: Vec<u8>,
    reply: ReplyTo<Asker>,
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
    gate: Arc<Gate>,
    /// Set when the entity's shard stopped because the node was found frozen.
    abandoned: Arc<AtomicBool>,
}

/// Holds the entities of one entity type while their region task has not run for longer than
/// the host's watch interval: the process may have been frozen, and until the region task has
/// run (and, if it was, stopped the shards), nothing queued before the freeze is handled. See
/// `docs/sharding-design.md`, "Frozen hosts".
pub(super) struct Gate {
    origin: Instant,
    /// When the region task last ran, in milliseconds since `origin`.
    ran_at: AtomicU64,
    ran: Notify,
    /// Entities wait when the region task has not run for this long.
    silence: Duration,
}

impl Gate {
    fn new(silence: Duration) -> Self {
        Self { origin: Instant::now(), ran_at: AtomicU64::new(0), ran: Notify::new(), silence }
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The region task has run, after taking any freeze into account.
    fn ran(&self) {
        self.ran_at.store(self.millis(), Ordering::Release);
        self.ran.notify_waiters();
    }

    /// Waits until the region task has run within the silence.
    async fn pass(&self) {
        let silence = u64::try_from(self.silence.as_millis()).unwrap_or(u64::MAX);
        loop {
            let ran = self.ran.notified();
            if self.millis().saturating_sub(self.ran_at.load(Ordering::Acquire)) <= silence {
                return;
            }
            ran.await;
        }
    }
}

/// What entity tasks tell their region task.
pub(super) enum Event {
    /// The entity asks to be stopped.
    Passivate(ShardId, EntityId),
    /// The entity's task has ended.
    Stopped(ShardId, EntityId),
    /// The remembered entities of a shard that started here, read from the store.
    Loaded(ShardId, Vec<EntityId>),
    /// Shards that have remembered entities, to be allocated if they are not.
    Wake(Vec<ShardId>),
    /// The coordinator's homes kept in the store, read as it started here: the number of the
    /// read ([`HostOutput::LoadHomes`] counted on this node), and the homes.
    Homes(u64, Vec<(ShardId, convoke_membership::Address)>),
}

/// Sends entities' answers to their askers, where the host's [`answer`] says.
#[derive(Clone)]
struct Replies {
    messaging: Messaging,
    key: EndpointKey<Frame, ()>,
}

impl Replies {
    fn send(&self, to: ReplyTo<Asker>, reply: Reply) {
        let ReplyTo::Remote(node, id) = to else {
            if let Some(HostOutput::Reply { to, result }) = answer(to, reply) {
                let _ = to.send(result);
            }
            return;
        };
        let Some(HostOutput::Send { to, frame }) =
            answer::<Asker>(ReplyTo::Remote(node, id), reply)
        else {
            return;
        };
        if let Err(e) = self.messaging.tell(&to, &self.key, &frame) {
            tracing::debug!(%to, error = %e, "cannot send an entity's reply");
            // Too large, or the queue to the asker is full: say so in a small frame rather
            // than leave the asker to its timeout.
            let failure = WireFailure::EntityFailed(format!("cannot send the reply: {e}"));
            if let Some(HostOutput::Send { to, frame }) =
                answer::<Asker>(ReplyTo::Remote(to, id), Err(failure))
            {
                let _ = self.messaging.tell(&to, &self.key, &frame);
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
pub(super) fn spawner<E, F>(factory: Arc<F>, store: StateStore) -> Spawner
where
    E: Entity,
    F: Fn(&str) -> E + Send + Sync + 'static,
{
    // One handle for all the type's entities: an idle entity holds a pointer to it, not a copy.
    let store = Arc::new(store);
    Arc::new(move |task: EntityTask| {
        let factory = factory.clone();
        tokio::spawn(run_entity(factory, task, store.clone()));
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
async fn run_entity<E, F>(factory: Arc<F>, task: EntityTask, store: Arc<StateStore>)
where
    E: Entity,
    F: Fn(&str) -> E + Send + Sync + 'static,
{
    let EntityTask { id, shard, mut mailbox, replies, events, gate, abandoned } = task;
    // Declared first, so dropped last: after the entity and its mailbox.
    let _stopped = StoppedGuard { events: events.clone(), shard: shard.clone(), id: id.clone() };
    let failure = match std::panic::catch_unwind(AssertUnwindSafe(|| factory(&id))) {
        Ok(entity) => {
            let fence = Fence { gate: &gate, abandoned: &abandoned };
            let ctx = EntityContext {
                entity_id: id.clone(),
                shard_id: shard.clone(),
                passivate: false,
                state: EntityState::new(store, id.clone()),
            };
            serve_entity(entity, ctx, &mut mailbox, &replies, &events, fence).await
        }
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

/// What an entity checks before each message: that its region task has run lately, and that
/// its shard was not stopped for a freeze.
struct Fence<'a> {
    gate: &'a Gate,
    abandoned: &'a AtomicBool,
}

/// Feeds `entity` its messages; returns why it ended (answered to what is still queued).
async fn serve_entity<E: Entity>(
    mut entity: E,
    mut ctx: EntityContext,
    mailbox: &mut mpsc::Receiver<Box<Envelope>>,
    replies: &Replies,
    events: &mpsc::UnboundedSender<Event>,
    fence: Fence<'_>,
) -> String {
    let (id, shard) = (ctx.entity_id.clone(), ctx.shard_id.clone());
    while let Some(envelope) = mailbox.recv().await {
        fence.gate.pass().await;
        if fence.abandoned.load(Ordering::Acquire) {
            // Queued before a freeze, after which another node may host the entity.
            replies.send(envelope.reply, Err(WireFailure::HandedOff));
            continue;
        }
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
        // An entity fenced out of its state stops as a passivated one does: what comes
        // meanwhile waits and starts a new incarnation, which reads the newer state.
        if ctx.passivate || ctx.state.fenced {
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

/// Registers the type's endpoints and spawns its region task; `store` keeps the remembered
/// entities, when the type remembers them.
pub(super) fn start(
    config: ShardingConfig,
    hosting: bool,
    mailbox_size: usize,
    messaging: Messaging,
    control: Control,
    spawner: Spawner,
    store: StateStore,
) -> Result<Started, ShardingError> {
    let key = frame_key(&config.type_name);
    let inbox = messaging.endpoint(&key, 4096)?;
    let stats = messaging.endpoint(&stats_key(&config.type_name), 64)?;
    let (requests, requests_rx) = mpsc::channel(4096);
    let (coordinator, coordinator_rx) = mpsc::channel(4);
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let self_node = messaging.self_node().clone();
    let homes = (config.keep_homes && hosting)
        .then(|| homes::start(store.clone(), config.retry_interval, events_tx.clone()));
    let remembrance = (config.remember_entities && hosting)
        .then(|| remember::start(store, config.retry_interval, events_tx.clone()));
    let task = Task {
        remembrance,
        homes,
        home_loads: 0,
        gate: Arc::new(Gate::new(config.retry_interval)),
        host: Host::new(config.clone(), self_node, hosting),
        type_name: config.type_name,
        coordinator_done: None,
        entities: HashMap::new(),
        spawner,
        replies: Replies { messaging: messaging.clone(), key: key.clone() },
        events: events_tx,
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
    abandoned: Arc<AtomicBool>,
}

struct Task {
    /// Where the remembered entities are kept, when the type remembers them.
    remembrance: Option<Remembrance>,
    /// Where the coordinator's homes are kept, when the store runs here.
    homes: Option<Homes>,
    /// The reads of the kept homes asked for so far.
    home_loads: u64,
    type_name: String,
    host: Host<Asker>,
    gate: Arc<Gate>,
    /// The singleton waits for the coordinator asked to stop.
    coordinator_done: Option<oneshot::Sender<()>>,
    /// Running entity tasks by shard and id (one id may come with two shard ids from two
    /// nodes whose extractors disagree; each is its own entity).
    entities: HashMap<(ShardId, EntityId), EntityHandle>,
    spawner: Spawner,
    replies: Replies,
    events: mpsc::UnboundedSender<Event>,
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
        loop {
            // Due timers first: after a freeze, the host must see how late it is (and stop its
            // shards) before the gate lets an entity handle anything queued.
            if self.host.poll_timeout().is_some_and(|t| t <= now()) {
                self.host.handle_timeout(now());
            }
            self.drain();
            if self.coordinator_done.as_ref().is_some_and(oneshot::Sender::is_closed) {
                // The singleton no longer waits: the coordinator stops now, written or not.
                self.host.coordinator_stop_now();
                self.drain();
            }
            self.gate.ran();
            let wake = self.host.poll_timeout().map(Instant::from_std);
            tokio::select! {
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let snapshot = snapshots.borrow_and_update().clone();
                    self.feed_members(&snapshot);
                }
                // What arrived with the request or frame that woke the task is taken in the
                // same turn (up to a batch): under load, one turn of the loop per burst.
                request = requests.recv() => match request {
                    Some(r) => {
                        self.on_request(r);
                        for r in std::iter::from_fn(|| requests.try_recv().ok()).take(BATCH - 1) {
                            self.on_request(r);
                        }
                    }
                    None => break,
                },
                frame = inbox.recv() => match frame {
                    Some(r) => {
                        self.on_frame(r);
                        for r in std::iter::from_fn(|| inbox.try_recv()).take(BATCH - 1) {
                            self.on_frame(r);
                        }
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
                Some(event) = events.recv() => match event {
                    Event::Passivate(shard, entity) => self.host.passivate(&shard, &entity, now()),
                    Event::Stopped(shard, entity) => {
                        self.entities.remove(&(shard.clone(), entity.clone()));
                        self.host.entity_stopped(&shard, &entity, now());
                    }
                    Event::Loaded(shard, ids) => self.host.entities_loaded(&shard, ids, now()),
                    Event::Wake(shards) => self.host.wake(shards, now()),
                    // A read for a coordinator that has stopped here since is not this one's.
                    Event::Homes(load, homes) if load == self.home_loads => {
                        self.host.homes_loaded(homes, now());
                    }
                    Event::Homes(..) => {}
                },
                () = sleep_until(wake) => self.host.handle_timeout(now()),
                _ = sweep.tick() => {
                    // Asks that timed out at their sender leave their reply slot closed.
                    self.host.forget_asks(|tx| !tx.is_closed());
                }
            }
        }
        tracing::debug!(entity_type = %self.type_name, "shard region task ended");
    }

    fn feed_members(&mut self, snapshot: &Snapshot) {
        let unreachable =
            snapshot.state.unreachable.iter().map(|(m, _)| m.node().clone()).collect();
        self.host.handle_members(&snapshot.state.members, &unreachable, now());
    }

    fn on_frame(&mut self, received: crate::messaging::Request<Frame, ()>) {
        let (from, frame, _) = received.into_parts();
        if let Err(e) = self.host.handle_frame(from.clone(), frame, now()) {
            tracing::debug!(%from, error = %e, "a sharding message that does not decode");
        }
    }

    fn on_request(&mut self, request: Request) {
        match request {
            Request::Message { shard, entity, payload, reply } => {
                self.host.ask(shard, entity, payload, reply, now());
            }
            Request::Report(tx) => {
                let _ = tx.send(RegionReport {
                    type_name: self.type_name.clone(),
                    region: self.host.region_status(),
                    shards: self.shard_stats(),
                    coordinator: self.host.coordinator_status(),
                });
            }
            Request::Shutdown(tx) => {
                if self.host.region_status().stopped {
                    let _ = tx.send(());
                } else {
                    self.shutdown_waiters.push(tx);
                    self.host.graceful_shutdown(now());
                }
            }
        }
    }

    fn on_coordinator_cmd(&mut self, cmd: CoordinatorCmd) {
        match cmd {
            CoordinatorCmd::Up => self.host.coordinator_up(now()),
            CoordinatorCmd::Down { done, budget } => {
                self.coordinator_done = Some(done);
                self.host.coordinator_down(budget, now());
            }
        }
    }

    /// Passes `cmd` to the remembered sets, when the type remembers its entities.
    fn remember(&self, cmd: Cmd) {
        if let Some(r) = &self.remembrance {
            r.send(cmd);
        }
    }

    /// Passes `cmd` to the kept homes, when the store runs here.
    fn keep_homes(&self, cmd: homes::Cmd) {
        if let Some(h) = &self.homes {
            h.send(cmd);
        }
    }

    fn shard_stats(&self) -> Vec<ShardStats> {
        // The host lists its shards in shard order.
        self.host
            .shard_counts()
            .map(|(id, n)| ShardStats { shard_id: id.to_string(), num_entities: n as u64 })
            .collect()
    }

    /// Carries out every output of the host.
    fn drain(&mut self) {
        while let Some(out) = self.host.poll_output() {
            self.on_output(out);
        }
    }

    fn on_output(&mut self, out: HostOutput<Asker>) {
        let entity_type = &self.type_name;
        match out {
            HostOutput::Send { to, frame } => {
                if let Err(e) = self.messaging.tell(&to, &self.key, &frame) {
                    tracing::debug!(%to, error = %e, "cannot send a sharding frame");
                    self.host.undeliverable(frame, &e.to_string());
                }
            }
            HostOutput::StartEntity { shard, entity } => {
                let (tx, rx) = mpsc::channel(self.mailbox_size);
                let key = (shard.clone(), entity.clone());
                let abandoned = Arc::new(AtomicBool::new(false));
                let handle = EntityHandle { mailbox: Some(tx), abandoned: abandoned.clone() };
                self.entities.insert(key, handle);
                (self.spawner)(EntityTask {
                    id: entity,
                    shard,
                    mailbox: rx,
                    replies: self.replies.clone(),
                    events: self.events.clone(),
                    gate: self.gate.clone(),
                    abandoned,
                });
            }
            HostOutput::DeliverToEntity { shard, entity, payload, reply } => {
                let envelope = Box::new(Envelope { payload, reply });
                let key = (shard, entity);
                let Some(tx) = self.entities.get(&key).and_then(|h| h.mailbox.as_ref()) else {
                    self.replies.send(envelope.reply, Err(WireFailure::RegionStopped));
                    return;
                };
                if let Err(e) = tx.try_send(envelope) {
                    let entity = &key.1;
                    let (envelope, failure) = match e {
                        mpsc::error::TrySendError::Full(m) => {
                            (m, WireFailure::MailboxFull(entity.to_string()))
                        }
                        mpsc::error::TrySendError::Closed(m) => {
                            (m, WireFailure::EntityFailed(format!("entity '{entity}' has stopped")))
                        }
                    };
                    self.replies.send(envelope.reply, Err(failure));
                }
            }
            HostOutput::StopEntity { shard, entity } => {
                if let Some(h) = self.entities.get_mut(&(shard, entity)) {
                    h.mailbox = None;
                }
            }
            HostOutput::Reply { to, result } => {
                let _ = to.send(result);
            }
            HostOutput::ShardStarted(shard) => {
                tracing::debug!(%entity_type, %shard, "shard starts here");
            }
            HostOutput::LoadEntities(shard) => self.remember(Cmd::Load(shard)),
            HostOutput::Remember { shard, entity } => self.remember(Cmd::Add(shard, entity)),
            HostOutput::Forget { shard, entity } => self.remember(Cmd::Remove(shard, entity)),
            HostOutput::ShardHandingOff { shard, frozen } => {
                if frozen {
                    tracing::warn!(%entity_type, %shard, "this node was frozen; stopping the shard, failing what its entities hold");
                    let held = self.entities.iter().filter(|((s, _), _)| *s == shard);
                    for (_, h) in held {
                        h.abandoned.store(true, Ordering::Release);
                    }
                } else {
                    tracing::debug!(%entity_type, %shard, "shard hands off");
                }
            }
            HostOutput::ShardStopped(shard) => {
                tracing::debug!(%entity_type, %shard, "shard stopped here");
                self.remember(Cmd::Release(shard));
            }
            HostOutput::LoadHomes => {
                self.home_loads += 1;
                self.keep_homes(homes::Cmd::Load);
            }
            HostOutput::SaveHomes(homes) => self.keep_homes(homes::Cmd::Save(homes)),
            HostOutput::CoordinatorStarted(instance) => {
                tracing::info!(%entity_type, instance, "shard coordinator starting here");
            }
            HostOutput::CoordinatorStopped => {
                tracing::info!(%entity_type, "shard coordinator stopped here");
                self.keep_homes(homes::Cmd::Stop);
                if let Some(done) = self.coordinator_done.take() {
                    let _ = done.send(());
                }
            }
            HostOutput::Stopped => {
                tracing::info!(%entity_type, "shard region stopped");
                for w in self.shutdown_waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_gate_holds_entities_while_their_region_task_has_not_run_lately() {
        let gate = Gate::new(Duration::from_secs(1));
        let wait = Duration::from_millis(100);
        gate.ran();
        assert!(tokio::time::timeout(wait, gate.pass()).await.is_ok(), "it ran just now");
        // The process was frozen (or the task starved) for two seconds.
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(tokio::time::timeout(wait, gate.pass()).await.is_err(), "held");
        let held = gate.pass();
        tokio::pin!(held);
        assert!(futures::poll!(held.as_mut()).is_pending());
        gate.ran();
        assert!(tokio::time::timeout(wait, held).await.is_ok(), "let through once it has run");
    }
}
