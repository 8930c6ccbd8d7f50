//! One hosted shard: [`Shard`] starts its entities on their first message (and, when entities
//! are remembered, the ones the store remembers for it), stops the idle ones and the ones that
//! ask to stop, and stops them all for a handoff.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::{DropReason, EntityId, ShardId, ShardingConfig};

/// What the shard asks its driver to do with its entities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardOutput<M> {
    /// Create the entity (from the type's factory).
    StartEntity(EntityId),
    /// Hand `msg` to the running entity.
    Deliver {
        /// The entity.
        entity: EntityId,
        /// The message.
        msg: M,
    },
    /// Stop the entity; call [`Shard::entity_stopped`] once it has ended.
    StopEntity(EntityId),
    /// `msg` will not be delivered.
    Dropped {
        /// The message.
        msg: M,
        /// Why.
        reason: DropReason,
    },
    /// Remembered entities only: add the entity to the shard's remembered set in the store.
    Remember(EntityId),
    /// Remembered entities only: remove the entity from the shard's remembered set.
    Forget(EntityId),
    /// The handoff has finished: every entity has stopped.
    Stopped,
}

#[derive(Debug)]
enum Entity<M> {
    Active {
        last_message: Instant,
    },
    /// Asked to stop; messages wait here and start it again once it has stopped. `forget`:
    /// it was passivated (asked, or idle), so it leaves the remembered set when it ends, unless
    /// a message waits for it.
    Stopping {
        waiting: VecDeque<M>,
        forget: bool,
    },
}

/// One shard hosted by this node's region: a deterministic state machine with no IO.
///
/// # Call protocol
/// Feed it [`deliver`](Self::deliver) for every message the region delivers to it,
/// [`passivate`](Self::passivate) when an entity asks to stop,
/// [`entity_stopped`](Self::entity_stopped) when an entity has ended (asked or not),
/// [`hand_off`](Self::hand_off) when the region hands the shard off, and
/// [`handle_timeout`](Self::handle_timeout) at the deadline from
/// [`poll_timeout`](Self::poll_timeout); after each, carry out every
/// [`poll_output`](Self::poll_output) in order.
///
/// With `remember_entities`, also feed it [`start_remembered`](Self::start_remembered) once the
/// shard's remembered set is read; it says [`ShardOutput::Remember`] and
/// [`ShardOutput::Forget`] as that set changes.
///
/// # Guarantees
/// At most one instance of an entity exists at a time: a stopping entity is started again only
/// after it has ended. Messages to one entity are delivered in the order they came, except those
/// answered with [`ShardOutput::Dropped`]. The messages waiting for stopping entities never
/// exceed `buffer_size`.
#[derive(Debug)]
pub struct Shard<M> {
    id: ShardId,
    idle_after: Option<Duration>,
    buffer_size: usize,
    entities: BTreeMap<EntityId, Entity<M>>,
    waiting: usize,
    handing_off: bool,
    stopped: bool,
    next_idle_check: Option<Instant>,
    /// Whether entities are remembered.
    remember: bool,
    /// The entities the store remembers for this shard, as far as this shard has told it.
    remembered: BTreeSet<EntityId>,
    /// Whether the remembered set was read and started ([`Shard::start_remembered`]).
    loaded: bool,
    /// Entities forgotten before the remembered set was read: not started from it.
    forgotten: BTreeSet<EntityId>,
    outputs: VecDeque<ShardOutput<M>>,
}

impl<M> Shard<M> {
    /// Shard `id` with `config`'s passivation and buffer settings.
    pub fn new(id: ShardId, config: &ShardingConfig) -> Self {
        Self {
            id,
            idle_after: config.idle_after(),
            buffer_size: config.buffer_size,
            entities: BTreeMap::new(),
            waiting: 0,
            handing_off: false,
            stopped: false,
            next_idle_check: None,
            remember: config.remember_entities,
            remembered: BTreeSet::new(),
            loaded: false,
            forgotten: BTreeSet::new(),
            outputs: VecDeque::new(),
        }
    }

    /// The shard's id.
    pub fn id(&self) -> &ShardId {
        &self.id
    }

    /// The number of entities running or stopping.
    pub fn num_entities(&self) -> usize {
        self.entities.len()
    }

    /// The ids of the entities running or stopping.
    pub fn entity_ids(&self) -> impl Iterator<Item = &EntityId> {
        self.entities.keys()
    }

    /// Whether the handoff has finished.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<ShardOutput<M>> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_idle_check
    }

    /// A message for `entity`: delivered, starting the entity if it is not running.
    pub fn deliver(&mut self, entity: EntityId, msg: M, now: Instant) {
        if self.handing_off {
            self.outputs.push_back(ShardOutput::Dropped { msg, reason: DropReason::HandedOff });
            return;
        }
        match self.entities.get_mut(&entity) {
            Some(Entity::Active { last_message }) => {
                *last_message = now;
                self.outputs.push_back(ShardOutput::Deliver { entity, msg });
            }
            Some(Entity::Stopping { waiting, .. }) => {
                if self.waiting >= self.buffer_size {
                    let reason = DropReason::BufferFull;
                    self.outputs.push_back(ShardOutput::Dropped { msg, reason });
                    return;
                }
                waiting.push_back(msg);
                self.waiting += 1;
            }
            None => {
                if self.remember && self.remembered.insert(entity.clone()) {
                    self.forgotten.remove(&entity);
                    self.outputs.push_back(ShardOutput::Remember(entity.clone()));
                }
                self.start(entity.clone(), now);
                self.outputs.push_back(ShardOutput::Deliver { entity, msg });
            }
        }
    }

    /// The shard's remembered entities, as read from the store: each one not running starts
    /// (without a message). Taken once; entities forgotten here before it came are left out.
    pub fn start_remembered(&mut self, ids: impl IntoIterator<Item = EntityId>, now: Instant) {
        if !self.remember || self.loaded || self.handing_off {
            return;
        }
        self.loaded = true;
        let forgotten = std::mem::take(&mut self.forgotten);
        for id in ids {
            if forgotten.contains(&id) || self.entities.contains_key(&id) {
                continue;
            }
            self.remembered.insert(id.clone());
            self.start(id, now);
        }
    }

    /// The ids of the entities the store remembers for this shard, as far as it was told.
    pub fn remembered(&self) -> impl Iterator<Item = &EntityId> {
        self.remembered.iter()
    }

    /// Whether the remembered set has been read and started.
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    fn start(&mut self, entity: EntityId, now: Instant) {
        self.entities.insert(entity.clone(), Entity::Active { last_message: now });
        self.outputs.push_back(ShardOutput::StartEntity(entity));
        if self.next_idle_check.is_none() {
            self.next_idle_check = self.idle_after.map(|d| now + check_every(d));
        }
    }

    /// The entity asks to be stopped (passivation). Messages that come for it meanwhile wait
    /// and start it again once it has stopped.
    pub fn passivate(&mut self, entity: &EntityId) {
        self.stop(entity, true);
    }

    /// The entity has ended, asked to or not.
    pub fn entity_stopped(&mut self, entity: &EntityId, now: Instant) {
        let Some(state) = self.entities.remove(entity) else { return };
        match state {
            Entity::Stopping { waiting, forget } => {
                self.waiting -= waiting.len();
                if self.handing_off {
                    for msg in waiting {
                        let reason = DropReason::HandedOff;
                        self.outputs.push_back(ShardOutput::Dropped { msg, reason });
                    }
                    if forget {
                        self.forget(entity);
                    }
                } else if !waiting.is_empty() {
                    self.start(entity.clone(), now);
                    for msg in waiting {
                        let entity = entity.clone();
                        self.outputs.push_back(ShardOutput::Deliver { entity, msg });
                    }
                } else if forget {
                    self.forget(entity);
                }
            }
            // Ended on its own (a failure): no longer running, so no longer remembered.
            Entity::Active { .. } => self.forget(entity),
        }
        self.maybe_stopped();
    }

    /// Stops every entity for a handoff; [`ShardOutput::Stopped`] follows once all have ended.
    pub fn hand_off(&mut self) {
        if self.handing_off {
            return;
        }
        self.handing_off = true;
        self.next_idle_check = None;
        let ids: Vec<EntityId> = self.entities.keys().cloned().collect();
        for id in ids {
            self.stop(&id, false);
        }
        self.maybe_stopped();
    }

    /// The deadline from [`poll_timeout`](Self::poll_timeout) has passed: stops the entities
    /// idle for `passivate_idle_after`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(idle_after) = self.idle_after else { return };
        if self.next_idle_check.is_none_or(|at| at > now) {
            return;
        }
        let idle: Vec<EntityId> = self
            .entities
            .iter()
            .filter(|(_, e)| match e {
                Entity::Active { last_message } => *last_message + idle_after <= now,
                Entity::Stopping { .. } => false,
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.stop(&id, true);
        }
        self.next_idle_check =
            (!self.entities.is_empty() && !self.handing_off).then(|| now + check_every(idle_after));
    }

    /// Asks `entity` to stop; `forget`: it is passivated, not handed off.
    fn stop(&mut self, entity: &EntityId, forget: bool) {
        let Some(state) = self.entities.get_mut(entity) else { return };
        match state {
            Entity::Active { .. } => {
                *state = Entity::Stopping { waiting: VecDeque::new(), forget };
                self.outputs.push_back(ShardOutput::StopEntity(entity.clone()));
            }
            Entity::Stopping { forget: f, .. } => *f |= forget,
        }
    }

    /// `entity` no longer runs and is not to run again until a message comes.
    fn forget(&mut self, entity: &EntityId) {
        if !self.remember {
            return;
        }
        if !self.loaded {
            self.forgotten.insert(entity.clone());
        }
        if self.remembered.remove(entity) {
            self.outputs.push_back(ShardOutput::Forget(entity.clone()));
        }
    }

    fn maybe_stopped(&mut self) {
        if self.handing_off && !self.stopped && self.entities.is_empty() {
            self.stopped = true;
            self.outputs.push_back(ShardOutput::Stopped);
        }
    }
}

/// How often idle entities are looked for: half the idle time, so an entity stops between one
/// and one and a half idle times after its last message.
fn check_every(idle_after: Duration) -> Duration {
    (idle_after / 2).max(Duration::from_millis(1))
}
