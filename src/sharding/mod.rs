//! Cluster sharding: stateful entities addressed by id, spread over the members, each running
//! on at most one node, moved when nodes join, leave or crash. Design: `docs/sharding-design.md`.
//!
//! Every decision is made by the sans-IO [`Host`](convoke_sharding::Host) of
//! [`convoke_sharding`] (region, shards, coordinator, replica and the correlation of
//! forwarded asks), which the simulator runs too. Here, one task per entity type per node
//! (`region.rs`) feeds it the membership snapshots, the frames of the other nodes (tells on the
//! messaging endpoint `convoke.sharding/<type>`), the local asks and tells, the entities' ends
//! and the timer, and carries out what it outputs: send a frame, start, feed or stop an entity
//! task, answer a local asker. The coordinator runs where the cluster singleton
//! `sharding/<type>` runs.
//!
//! An entity is a value implementing [`Entity`], created by the type's factory on its first
//! message; it handles one message at a time in a task of its own.

mod homes;
mod region;
mod remember;
mod state;
mod store_task;
#[doc(hidden)]
pub use convoke_sharding::wire;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use convoke_sharding::{ShardId, shard_for_entity};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};

use crate::control::Control;
use crate::messaging::{AskError, EndpointError, Messaging};
use crate::settings::ShardingSettings;
use crate::singleton::Singletons;

pub use self::region::{RegionReport, ShardStats};
use self::region::{Request, Spawner};
pub use self::state::StateError;
use self::wire::WireFailure;

/// A sharded entity: created by its type's factory on its first message, it handles its
/// messages one at a time, in the order they came.
pub trait Entity: Send + 'static {
    /// What it is sent.
    type Message: Serialize + DeserializeOwned + Send + 'static;
    /// What it answers.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Handles one message. The reply goes to the asker (and nowhere for a tell).
    fn handle(
        &mut self,
        message: Self::Message,
        ctx: &mut EntityContext,
    ) -> impl Future<Output = Self::Reply> + Send;
}

/// What an entity knows of itself while it handles a message, and its state in the store.
#[derive(Debug)]
pub struct EntityContext {
    entity_id: Arc<str>,
    shard_id: ShardId,
    passivate: bool,
    state: state::EntityState,
}

impl EntityContext {
    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The shard it belongs to.
    pub fn shard_id(&self) -> &str {
        self.shard_id.as_str()
    }

    /// Asks to be stopped once this message is handled (passivation). Messages that come
    /// meanwhile wait and start it again.
    pub fn passivate(&mut self) {
        self.passivate = true;
    }

    /// The entity's state, kept in the replicated store under `entity/<type>/<id>` (the
    /// node needs `data.enabled`): read on first use in this incarnation, `S::default()` when
    /// none was ever stored. Whichever node the entity runs on, it finds the state its last
    /// incarnation stored (`docs/sharding-design.md`, "Entities with state").
    ///
    /// # Errors
    /// [`StateError::Data`] when the store cannot be read (not running, too few replicas),
    /// [`StateError::Type`] when the stored state is not an `S`, [`StateError::Fenced`] when
    /// another incarnation holds the state.
    pub async fn state<S>(&mut self) -> Result<&S, StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        self.state.get::<S>().await
    }

    /// Stores `state` as the entity's state at a quorum of its replicas, and returns once it is
    /// durable there: reply only after it, and an acknowledged change is never lost. The write
    /// is fenced: if another incarnation of the entity has claimed the state since this one
    /// read it, nothing is written, [`StateError::Fenced`] is returned and the entity is
    /// stopped once this message is handled, rather than write over a newer state.
    ///
    /// # Errors
    /// As [`EntityContext::state`]; [`StateError::Data`] also when the write did not reach a
    /// quorum in time (it may have reached some replicas; the state this incarnation reads
    /// stays the last one stored).
    pub async fn persist<S>(&mut self, state: S) -> Result<(), StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        self.state.persist(state).await
    }
}

/// Why an ask or a tell to a sharded entity failed, or a type could not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// An entity type of that name is already started on this node.
    #[error("entity type '{0}' is already started on this node")]
    AlreadyStarted(String),
    /// The type's messaging endpoint could not be registered.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The type's coordinator singleton could not be started.
    #[error("cannot start the coordinator of entity type '{0}': {1}")]
    Coordinator(String, String),
    /// The type remembers its entities (`sharding.remember_entities`) but the store does not
    /// run here.
    #[error(
        "entity type '{0}' remembers its entities (sharding.remember_entities), which are kept in \
         the store, but the store does not run on this node: set data.enabled = true"
    )]
    Remember(String),
    /// The message could not be encoded, or the reply decoded.
    #[error("cannot encode or decode: {0}")]
    Codec(String),
    /// No reply within the timeout.
    #[error("no reply from entity '{entity}' within {timeout:?}")]
    Timeout {
        /// The entity.
        entity: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The region already holds `sharding.buffer_size` messages for shards without a known
    /// home (the coordinator may be unavailable).
    #[error("the shard region's buffer is full (sharding.buffer_size); is the coordinator up?")]
    BufferFull,
    /// The message waited at the shard's old home when the shard moved.
    #[error("the entity's shard moved while the message waited for it; send it again")]
    HandedOff,
    /// The region the message reached has shut down, or this node's region has (its task
    /// ended with the node).
    #[error("the shard region has stopped")]
    RegionStopped,
    /// The entity's mailbox holds `sharding.entity_mailbox_size` messages.
    #[error("entity '{0}' has a full mailbox (sharding.entity_mailbox_size)")]
    MailboxFull(String),
    /// The entity could not decode the message as its type's message.
    #[error("the entity could not decode the message: {0}")]
    BadMessage(String),
    /// The entity panicked while it handled the message, or ended before answering.
    #[error("the entity failed: {0}")]
    EntityFailed(String),
    /// This node's region cannot take more local messages right now.
    #[error("the shard region's queue of local messages is full")]
    Overloaded,
    /// The message could not be sent to the region hosting the shard.
    #[error("cannot send to the region hosting the shard: {0}")]
    Send(String),
}

impl From<WireFailure> for ShardingError {
    fn from(f: WireFailure) -> Self {
        match f {
            WireFailure::BufferFull => Self::BufferFull,
            WireFailure::HandedOff => Self::HandedOff,
            WireFailure::RegionStopped => Self::RegionStopped,
            WireFailure::MailboxFull(e) => Self::MailboxFull(e),
            WireFailure::BadMessage(e) => Self::BadMessage(e),
            WireFailure::EntityFailed(e) => Self::EntityFailed(e),
            WireFailure::Unreachable(e) => Self::Send(e),
        }
    }
}

/// How an entity id becomes a shard id.
pub type Extractor = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The sharded entity types of one node. Cheap to clone; get it from
/// [`crate::Node::sharding`].
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

struct Inner {
    messaging: Messaging,
    control: Control,
    singletons: Singletons,
    settings: ShardingSettings,
    roles: BTreeSet<String>,
    /// This node's data center: each has its own coordinators, and keeps their homes apart.
    data_center: String,
    removal_margin: Duration,
    data: crate::data::Data,
    types: Mutex<BTreeMap<String, TypeHandle>>,
}

#[derive(Clone)]
struct TypeHandle {
    requests: mpsc::Sender<Request>,
    hosting: bool,
    /// The region has been registered with a coordinator at least once.
    registered: Arc<AtomicBool>,
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding").field("types", &self.type_names()).finish_non_exhaustive()
    }
}

impl Sharding {
    pub(crate) fn new(
        messaging: Messaging,
        control: Control,
        singletons: Singletons,
        settings: ShardingSettings,
        core: &convoke_membership::config::Config,
        removal_margin: Duration,
        data: crate::data::Data,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                messaging,
                control,
                singletons,
                settings,
                roles: core.roles.clone(),
                data_center: core.data_center.clone(),
                removal_margin,
                data,
                types: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Starts entity type `type_name` on this node and returns the handle that sends to its
    /// entities. On a node with `role` (any node when `None`) the region hosts shards and
    /// `factory` makes the entities, given their ids; elsewhere it only routes (a proxy). Start
    /// the type on every node that sends to it, with the same role. Entity ids map to
    /// `sharding.number_of_shards` shards by the default extractor (`docs/sharding-design.md`).
    ///
    /// # Errors
    /// The type is already started here, or its endpoint or coordinator cannot be registered.
    pub fn start<E, F>(
        &self,
        type_name: &str,
        role: Option<&str>,
        factory: F,
    ) -> Result<EntityRef<E>, ShardingError>
    where
        E: Entity,
        F: Fn(&str) -> E + Send + Sync + 'static,
    {
        let n = self.inner.settings.number_of_shards;
        let extractor: Extractor = Arc::new(move |id| shard_for_entity(id, n).to_string());
        self.start_with_extractor(type_name, role, extractor, factory)
    }

    /// As [`Sharding::start`], with shard ids from `extractor` (the same function on every
    /// node) instead of the default.
    ///
    /// # Errors
    /// As [`Sharding::start`].
    pub fn start_with_extractor<E, F>(
        &self,
        type_name: &str,
        role: Option<&str>,
        extractor: Extractor,
        factory: F,
    ) -> Result<EntityRef<E>, ShardingError>
    where
        E: Entity,
        F: Fn(&str) -> E + Send + Sync + 'static,
    {
        let inner = &self.inner;
        let mut types = inner.types.lock().unwrap_or_else(PoisonError::into_inner);
        if types.contains_key(type_name) {
            return Err(ShardingError::AlreadyStarted(type_name.to_owned()));
        }
        let hosting = role.is_none_or(|r| inner.roles.contains(r));
        let mut config = inner.settings.config_for(type_name, role, inner.removal_margin);
        // Where the store runs, the coordinator keeps its homes in it, so that after a full
        // restart the shards go back to their nodes.
        config.keep_homes = hosting && inner.data.is_running();
        let store = state::StateStore {
            data: inner.data.clone(),
            type_name: type_name.into(),
            holder: inner.messaging.self_node().uid.get(),
            data_center: inner.data_center.as_str().into(),
        };
        if config.remember_entities && hosting && !inner.data.is_running() {
            return Err(ShardingError::Remember(type_name.to_owned()));
        }
        let spawner: Spawner = region::spawner::<E, F>(Arc::new(factory), store.clone());
        let started = region::start(
            config,
            hosting,
            inner.settings.entity_mailbox_size,
            inner.messaging.clone(),
            inner.control.clone(),
            spawner,
            store,
        )?;
        if hosting {
            let coordinator = started.coordinator.clone();
            // A coordinator asked to stop may finish its writes for four retry intervals, and
            // never for more than half of the time after which the singleton aborts it.
            let budget =
                (inner.settings.retry_interval * 4).min(inner.singletons.hand_over_timeout() / 2);
            inner
                .singletons
                .start(&format!("sharding/{type_name}"), role, move |ctx| {
                    let coordinator = coordinator.clone();
                    async move {
                        let (done, stopped) = oneshot::channel();
                        if coordinator.send(region::CoordinatorCmd::Up).await.is_err() {
                            return;
                        }
                        ctx.stopped().await;
                        let down = region::CoordinatorCmd::Down { done, budget };
                        let _ = coordinator.send(down).await;
                        let _ = stopped.await;
                    }
                })
                .map_err(|e| ShardingError::Coordinator(type_name.to_owned(), e.to_string()))?;
        }
        types.insert(
            type_name.to_owned(),
            TypeHandle {
                requests: started.requests.clone(),
                hosting,
                registered: Arc::new(AtomicBool::new(false)),
            },
        );
        tracing::info!(
            entity_type = type_name,
            role = role.unwrap_or(""),
            hosting,
            "sharding started"
        );
        Ok(EntityRef {
            type_name: type_name.to_owned(),
            requests: started.requests,
            extractor,
            _entity: PhantomData,
        })
    }

    /// The entity types started on this node whose region hosts shards (proxies are not
    /// listed), by name.
    pub fn type_names(&self) -> Vec<String> {
        let types = self.inner.types.lock().unwrap_or_else(PoisonError::into_inner);
        types.iter().filter(|(_, t)| t.hosting).map(|(n, _)| n.clone()).collect()
    }

    /// What the region of `type_name` on this node hosts and knows; `None` when the type is
    /// not started here (or its region has ended).
    pub async fn report(&self, type_name: &str) -> Option<RegionReport> {
        let requests = self.handle(type_name)?.requests;
        let (tx, rx) = oneshot::channel();
        requests.send(Request::Report(tx)).await.ok()?;
        rx.await.ok()
    }

    /// The entity types started on this node (proxies too) whose region has never had its
    /// registration acknowledged by a coordinator — which answers only once it has read its
    /// table — each region asked with `timeout`. Once a region has been registered its type is
    /// never listed again, so that `/ready` does not fail on every node while the coordinator
    /// moves. The sharding readiness check (`management.health_checks.sharding`).
    pub async fn unregistered(&self, timeout: Duration) -> Vec<String> {
        let waiting: Vec<(String, TypeHandle)> = {
            let types = self.inner.types.lock().unwrap_or_else(PoisonError::into_inner);
            types
                .iter()
                .filter(|(_, t)| !t.registered.load(Ordering::Relaxed))
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect()
        };
        let asks = waiting.into_iter().map(|(name, handle)| async move {
            let (tx, rx) = oneshot::channel();
            let report = async {
                handle.requests.send(Request::Report(tx)).await.ok()?;
                rx.await.ok()
            };
            let registered = tokio::time::timeout(timeout, report)
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.region.registered);
            if registered {
                handle.registered.store(true, Ordering::Relaxed);
            }
            (!registered).then_some(name)
        });
        futures::future::join_all(asks).await.into_iter().flatten().collect()
    }

    /// The shards of `type_name` hosted by each member (by its address), asked of every member
    /// with `timeout`; members that did not answer are listed apart.
    pub async fn cluster_stats(&self, type_name: &str, timeout: Duration) -> Option<ClusterStats> {
        self.handle(type_name)?;
        let snapshot = self.inner.control.watch().borrow().clone();
        let key = region::stats_key(type_name);
        let asks = snapshot.state.members.iter().map(|m| {
            let node = m.node().clone();
            let messaging = self.inner.messaging.clone();
            let key = key.clone();
            async move {
                let answer: Result<Vec<ShardStats>, AskError> =
                    messaging.ask(&node, &key, &(), timeout).await;
                (node, answer)
            }
        });
        let mut stats = ClusterStats::default();
        for (node, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(shards) => {
                    stats.regions.insert(node.address.to_string(), shards);
                }
                Err(e) => {
                    stats.failed.insert(node.address.to_string(), e.to_string());
                }
            }
        }
        Some(stats)
    }

    /// Hands every region's shards off, as before a graceful leave, and waits until each has
    /// stopped or `timeout` has passed. [`crate::Node::shutdown`] calls it first.
    pub async fn shut_down_all(&self, timeout: Duration) {
        let handles: Vec<TypeHandle> = {
            let types = self.inner.types.lock().unwrap_or_else(PoisonError::into_inner);
            types.values().cloned().collect()
        };
        let waits = handles.into_iter().map(|h| async move {
            let (tx, rx) = oneshot::channel();
            if h.requests.send(Request::Shutdown(tx)).await.is_ok() {
                let _ = rx.await;
            }
        });
        let _ = tokio::time::timeout(timeout, futures::future::join_all(waits)).await;
    }

    fn handle(&self, type_name: &str) -> Option<TypeHandle> {
        let types = self.inner.types.lock().unwrap_or_else(PoisonError::into_inner);
        types.get(type_name).cloned()
    }
}

/// The shards every member hosts for one entity type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Each member's shards, by member address.
    pub regions: BTreeMap<String, Vec<ShardStats>>,
    /// Members that did not answer, with the reason.
    pub failed: BTreeMap<String, String>,
}

/// Sends messages to the entities of one type, wherever they run. Cheap to clone.
pub struct EntityRef<E: Entity> {
    type_name: String,
    requests: mpsc::Sender<Request>,
    extractor: Extractor,
    _entity: PhantomData<fn(E)>,
}

impl<E: Entity> Clone for EntityRef<E> {
    fn clone(&self) -> Self {
        Self {
            type_name: self.type_name.clone(),
            requests: self.requests.clone(),
            extractor: self.extractor.clone(),
            _entity: PhantomData,
        }
    }
}

impl<E: Entity> fmt::Debug for EntityRef<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityRef").field("type_name", &self.type_name).finish_non_exhaustive()
    }
}

impl<E: Entity> EntityRef<E> {
    /// The entity type's name.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The shard entity `entity_id` belongs to.
    pub fn shard_of(&self, entity_id: &str) -> String {
        (self.extractor)(entity_id)
    }

    /// Sends `message` to entity `entity_id` and waits at most `timeout` for its reply.
    ///
    /// # Errors
    /// See [`ShardingError`]: a full buffer or mailbox, a shard that moved while the message
    /// waited, a stopped region, a failed entity (and the messages queued behind its failure)
    /// and a hosting node that left are answered at once; otherwise the ask ends with
    /// [`ShardingError::Timeout`].
    pub async fn ask(
        &self,
        entity_id: &str,
        message: &E::Message,
        timeout: Duration,
    ) -> Result<E::Reply, ShardingError> {
        let payload =
            postcard::to_stdvec(message).map_err(|e| ShardingError::Codec(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        let request = Request::Message {
            shard: ShardId::new(self.shard_of(entity_id)),
            entity: entity_id.into(),
            payload,
            reply: Some(tx),
        };
        let timed_out = || ShardingError::Timeout { entity: entity_id.to_owned(), timeout };
        let answer = tokio::time::timeout(timeout, async {
            self.requests.send(request).await.map_err(|_| ShardingError::RegionStopped)?;
            rx.await.map_err(|_| ShardingError::RegionStopped)
        })
        .await
        .map_err(|_| timed_out())??;
        let bytes = answer.map_err(ShardingError::from)?;
        postcard::from_bytes(&bytes).map_err(|e| ShardingError::Codec(e.to_string()))
    }

    /// Sends `message` to entity `entity_id` without waiting for anything (at most once).
    ///
    /// # Errors
    /// The message cannot be encoded, or this node's region cannot take it now.
    pub fn tell(&self, entity_id: &str, message: &E::Message) -> Result<(), ShardingError> {
        let payload =
            postcard::to_stdvec(message).map_err(|e| ShardingError::Codec(e.to_string()))?;
        let request = Request::Message {
            shard: ShardId::new(self.shard_of(entity_id)),
            entity: entity_id.into(),
            payload,
            reply: None,
        };
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ShardingError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => ShardingError::RegionStopped,
        })
    }
}
