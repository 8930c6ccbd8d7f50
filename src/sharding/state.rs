//! An entity's state in the replicated store (`docs/sharding-design.md`, "Entities with state").
//!
//! The state of entity `id` of type `T` is the fenced value under key `entity/T/id`. An
//! incarnation of the entity claims the key with a ballot above the key's promise (learnt from
//! the refusal of a lower one) and starts from the state the claim's quorum held; each [`EntityContext::persist`](super::EntityContext::persist) writes the next
//! state under that ballot at a quorum of the key's replicas before the handler goes on. Should
//! another incarnation have claimed the key since (which the sharding prevents, so only after a
//! freeze or a split the resolver has not settled yet), the write is refused and the entity is
//! stopped instead of writing over the newer state. A refusal by the promise of a claim that came
//! to nothing does not stop it: the writer claims again and finds its own state.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::data::{Data, DataError, Fenced, Writer};

/// Why an entity's state could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The store refused or could not complete the read or write (the store not running,
    /// too few replicas reachable, a timeout: see the inner error). A write that timed out
    /// may still have reached some replicas; the state in memory stays the last one stored.
    #[error("entity state: {0}")]
    Data(#[from] DataError),
    /// Another incarnation of the entity has claimed its state since this one did: nothing was
    /// written, and the entity is stopped once this message is handled.
    #[error("entity '{0}' is fenced: another incarnation holds its state; it is stopped")]
    Fenced(String),
    /// The stored state is not of the type asked for.
    #[error("the stored state of entity '{entity}' is not a {expected}: {why}")]
    Type {
        /// The entity.
        entity: String,
        /// The type asked for.
        expected: &'static str,
        /// What did not fit.
        why: String,
    },
}

/// Where an entity keeps its state: the node's store, the key, the writer id.
#[derive(Clone, Debug)]
pub(super) struct StateStore {
    pub(super) data: Data,
    pub(super) type_name: Arc<str>,
    /// This node's uid, from which the ids of its writers are made.
    pub(super) holder: u64,
    /// This node's data center.
    pub(super) data_center: Arc<str>,
}

/// The state of one incarnation, once loaded.
pub(super) struct Loaded {
    /// The claimed key's writer: its ballot and the number of its last write.
    writer: Writer,
    value: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("writer", &self.writer).finish()
    }
}

/// An entity's state handle, kept in its context between messages.
#[derive(Debug)]
pub(super) struct EntityState {
    store: Arc<StateStore>,
    key: String,
    entity: Arc<str>,
    loaded: Option<Loaded>,
    /// Set when a write was refused: the entity stops after this message.
    pub(super) fenced: bool,
}

impl EntityState {
    pub(super) fn new(store: Arc<StateStore>, entity: Arc<str>) -> Self {
        let key = format!("entity/{}/{}", store.type_name, entity);
        Self { store, key, entity, loaded: None, fenced: false }
    }

    fn fenced_error(&mut self) -> StateError {
        self.fenced = true;
        StateError::Fenced(self.entity.to_string())
    }

    /// The state of this incarnation, claimed and read on first use; refused unless it is an
    /// `S`.
    async fn load<S>(&mut self) -> Result<&mut Loaded, StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        if self.fenced {
            return Err(StateError::Fenced(self.entity.to_string()));
        }
        if self.loaded.is_none() {
            let loaded = self.claim::<S>().await?;
            self.loaded = Some(loaded);
        }
        match self.loaded.as_mut() {
            Some(loaded) if loaded.value.is::<S>() => Ok(loaded),
            _ => Err(type_error::<S>(&self.entity, "this entity keeps a state of another type")),
        }
    }

    /// Claims the key with a ballot above its promise and reads the state the claim found.
    async fn claim<S>(&mut self) -> Result<Loaded, StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        let Some((writer, current)) = claim(&self.store.data, &self.key, self.store.holder).await?
        else {
            return Err(self.fenced_error());
        };
        let value: S = match &current.state {
            Some(w) => {
                serde_json::from_slice(&w.bytes).map_err(|e| type_error::<S>(&self.entity, e))?
            }
            None => S::default(),
        };
        let ballot = writer.ballot().unwrap_or_default();
        tracing::debug!(entity = %self.entity, key = %self.key, %ballot, "entity state claimed");
        Ok(Loaded { writer, value: Box::new(value) })
    }

    /// The state, read on first use.
    pub(super) async fn get<S>(&mut self) -> Result<&S, StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        let entity = self.entity.clone();
        let loaded = self.load::<S>().await?;
        loaded.value.downcast_ref::<S>().ok_or_else(|| type_error::<S>(&entity, "not an S"))
    }

    /// Writes `new` as the state; in memory only once stored.
    ///
    /// A refused write means a newer ballot was claimed since this incarnation claimed the key:
    /// it claims again and writes once more if the state it reads is still its own (the newer
    /// ballot was a claim that came to nothing); otherwise another incarnation holds the state,
    /// and this one is fenced (the sans-IO [`Writer`] decides, `docs/data.md`).
    pub(super) async fn persist<S>(&mut self, new: S) -> Result<(), StateError>
    where
        S: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
    {
        let bytes = serde_json::to_vec(&new).map_err(|e| type_error::<S>(&self.entity, e))?;
        self.load::<S>().await?;
        let store = self.store.clone();
        let Some(loaded) = self.loaded.as_mut() else { return Err(self.fenced_error()) };
        let writer = &mut loaded.writer;
        loop {
            // After a refused write, or a claim made again that failed without an answer.
            if !writer.is_claimed()
                && !writer.is_fenced()
                && claim_with(&store.data, &self.key, writer).await?.is_none()
            {
                break;
            }
            let Some(op) = writer.write(bytes.clone()) else { break };
            match store.data.fenced_write(&self.key, op).await {
                Ok(_) => {
                    loaded.value = Box::new(new);
                    return Ok(());
                }
                Err(e) => match e.fence_refusal() {
                    Some(refusal) if writer.write_refused(refusal) => {
                        tracing::debug!(
                            entity = %self.entity,
                            key = %self.key,
                            %refusal,
                            "entity state write refused; claiming the key again"
                        );
                    }
                    Some(_) => break,
                    None => return Err(e.into()),
                },
            }
        }
        tracing::warn!(
            entity = %self.entity,
            key = %self.key,
            "another incarnation holds this entity's state; the write is refused and the entity \
             stops"
        );
        Err(self.fenced_error())
    }
}

/// Writers made in this process so far: each gets an id of its own.
static WRITERS: AtomicU64 = AtomicU64::new(0);

/// Claims fenced key `key` for a new writer of node `node` with a ballot above the key's promise
/// (learnt from the refusal of a lower one), and returns the claimed writer with what the key's
/// replicas held.
/// The answer holds every write acknowledged to an older writer (docs/data.md). `None`: outbid
/// on every attempt. The decisions are the sans-IO [`Writer`]'s, which the simulator drives too.
pub(super) async fn claim(
    data: &Data,
    key: &str,
    node: u64,
) -> Result<Option<(Writer, Fenced)>, DataError> {
    let mut writer = Writer::new(Writer::holder(node, WRITERS.fetch_add(1, Ordering::Relaxed)));
    let read = claim_with(data, key, &mut writer).await?;
    Ok(read.map(|read| (writer, read)))
}

/// Makes `writer`'s claim of `key`, again above each promise that refuses it, and returns what
/// the key's replicas held; `None` when the writer is fenced (outbid on every attempt, or, for a
/// claim made again after a refused write, a newer writer's state found).
async fn claim_with(
    data: &Data,
    key: &str,
    writer: &mut Writer,
) -> Result<Option<Fenced>, DataError> {
    let mut op = writer.claim();
    loop {
        match data.fenced_write(key, op).await {
            Ok(current) => return Ok(writer.claimed(current.state.as_ref()).map(|_| current)),
            // The key has promised a ballot at least this one: claim above it.
            Err(e) => match e.fence_refusal() {
                Some(refusal) => match writer.claim_refused(refusal) {
                    Some(next) => op = next,
                    None => return Ok(None),
                },
                None => return Err(e),
            },
        }
    }
}

fn type_error<S>(entity: &str, why: impl ToString) -> StateError {
    StateError::Type {
        entity: entity.to_owned(),
        expected: std::any::type_name::<S>(),
        why: why.to_string(),
    }
}
