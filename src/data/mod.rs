//! The replicated store on a node (`docs/data.md`): keys partitioned over the members, N
//! replicas each, read and written at the level a caller picks, durable on every replica's disk.
//!
//! Every decision is made by the sans-IO [`Store`](convoke_data::Store) of [`convoke_data`].
//! Here, one driver on a thread of its own (`driver.rs`; the storage calls block on the disk)
//! feeds it the membership snapshots, the other nodes' messages (tells on the messaging endpoint
//! `convoke.data`), the callers' requests and the timer, syncs the disk before any
//! acknowledgement leaves, and carries out what it outputs. The disk is fjall (`storage.rs`).
//! [`Data`] is the callers' handle.

mod driver;
mod storage;

use std::time::Duration;

pub use convoke_data::crdt::{Crdt, CrdtKind, CrdtOp};
pub use convoke_data::fenced::{Ballot, FenceOp, FenceRefusal, Fenced, Writer, Written};
pub use convoke_data::version::VersionVector;
use convoke_data::{Key, Reply, Request};
pub use convoke_data::{Level, Read, Value};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::control::Control;
use crate::messaging::{EndpointError, Messaging};
use crate::settings::DataSettings;
pub use storage::DiskError;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The store refused or could not complete it (see the inner error).
    #[error(transparent)]
    Store(#[from] convoke_data::DataError),
    /// The key is not a valid key.
    #[error(transparent)]
    Key(convoke_data::Refused),
    /// The store is not running on this node (`data.enabled = false`), or has stopped.
    #[error("the replicated store is not running on this node (data.enabled)")]
    NotRunning,
    /// A typed value could not be encoded or decoded as JSON.
    #[error("the value is not the expected JSON: {0}")]
    Json(String),
}

impl DataError {
    /// Why a fenced claim or write was refused, when a newer writer holds the key.
    pub fn fence_refusal(&self) -> Option<&FenceRefusal> {
        match self {
            Self::Store(e) => e.fence_refusal(),
            _ => None,
        }
    }
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataStartError {
    /// Its directory could not be opened.
    #[error("cannot open the store's directory {dir}: {source}")]
    Disk {
        /// `data.dir`.
        dir: String,
        /// Why.
        source: DiskError,
    },
    /// Its messaging endpoint is taken.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// Its thread could not be started.
    #[error("cannot start the store's thread: {0}")]
    Thread(std::io::Error),
}

/// What the store on this node holds and does.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataStats {
    /// Keys in this node's replicas.
    pub keys: u64,
    /// Bytes the store takes on disk.
    pub bytes_on_disk: u64,
    /// Writes held for unreachable replicas.
    pub hinted_handoffs_pending: u64,
    /// Requests in flight on this node.
    pub requests_in_flight: u64,
    /// Members on the ring, absent holders included.
    pub ring_members: u64,
    /// Members kept on the ring while away (crashed or downed, not left), with the seconds
    /// since they went: keys they replicate wait for them (`data.absent_timeout`).
    pub absent_holders: std::collections::BTreeMap<String, f64>,
    /// Per peer, seconds since the last anti-entropy exchange with it.
    pub last_anti_entropy: std::collections::BTreeMap<String, f64>,
}

/// A request of a caller, with where its answer goes.
pub(crate) enum Command {
    Request(Request, oneshot::Sender<Result<Reply, convoke_data::DataError>>),
    Stats(oneshot::Sender<DataStats>),
    /// Hand every key to the ring without this node; answered once all are acknowledged.
    BeginLeave(oneshot::Sender<()>),
}

/// The replicated store, as callers on this node use it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Data {
    inner: Option<Inner>,
}

#[derive(Clone, Debug)]
struct Inner {
    commands: mpsc::Sender<Command>,
    changes: broadcast::Sender<Key>,
    settings: DataSettings,
    stopped: watch::Receiver<bool>,
}

impl Data {
    /// Starts the store's driver when `data.enabled`; a handle that answers
    /// [`DataError::NotRunning`] otherwise.
    pub(crate) fn start(
        settings: &DataSettings,
        messaging: &Messaging,
        control: &Control,
    ) -> Result<Self, DataStartError> {
        if !settings.enabled {
            return Ok(Self { inner: None });
        }
        let driver::Started { commands, changes, stopped } =
            driver::start(settings, messaging, control)?;
        Ok(Self { inner: Some(Inner { commands, changes, settings: settings.clone(), stopped }) })
    }

    /// A handle to no store: every call answers [`DataError::NotRunning`] (for a
    /// [`management::Handle`](crate::management::Handle) built without a node).
    pub fn disabled() -> Self {
        Self { inner: None }
    }

    /// Resolves once the store has stopped (its node terminated) and released its directory,
    /// which a node started on the same `data.dir` can then open.
    pub async fn stopped(&self) {
        if let Some(inner) = &self.inner {
            let mut stopped = inner.stopped.clone();
            let _ = stopped.wait_for(|s| *s).await;
        }
    }

    /// Hands every key this node holds to its replicas on the ring without this node, ahead of
    /// a graceful leave, so that a node replaced by one with an empty disk (a rolling update)
    /// takes no acknowledged write away; waits at most `timeout`. Returns whether every key
    /// was acknowledged (always `true` without a store). [`crate::Node::shutdown`] calls it
    /// before leaving. See docs/data.md, "Handoff".
    pub async fn hand_over_before_leaving(&self, timeout: Duration) -> bool {
        let Some(inner) = &self.inner else { return true };
        let (tx, rx) = oneshot::channel();
        if inner.commands.send(Command::BeginLeave(tx)).await.is_err() {
            return false;
        }
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(())))
    }

    /// Whether the store runs on this node.
    pub fn is_running(&self) -> bool {
        self.inner.is_some()
    }

    fn key(&self, key: &str) -> Result<Key, DataError> {
        let max = self.inner.as_ref().map_or(usize::MAX, |i| i.settings.max_key_bytes);
        Key::new(key, max).map_err(DataError::Key)
    }

    async fn call(&self, request: Request) -> Result<Reply, DataError> {
        let inner = self.inner.as_ref().ok_or(DataError::NotRunning)?;
        let (tx, rx) = oneshot::channel();
        inner
            .commands
            .send(Command::Request(request, tx))
            .await
            .map_err(|_| DataError::NotRunning)?;
        Ok(rx.await.map_err(|_| DataError::NotRunning)??)
    }

    /// The write level a request without one gets (`data.write`).
    pub fn write_level(&self) -> Level {
        self.levels().1
    }

    /// The largest value a write may carry (`data.max_value_bytes`).
    pub fn max_value_bytes(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.settings.max_value_bytes)
    }

    fn levels(&self) -> (Level, Level) {
        self.inner
            .as_ref()
            .map_or((Level::Quorum, Level::Quorum), |i| (i.settings.read, i.settings.write))
    }

    /// Reads `key` at the default read level (`data.read`).
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn get(&self, key: &str) -> Result<Read, DataError> {
        self.get_with(key, self.levels().0).await
    }

    /// Reads `key` from `r` replicas: every current value (siblings when concurrent writes were
    /// not yet resolved; none when absent or deleted) and the context for the next write.
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn get_with(&self, key: &str, r: Level) -> Result<Read, DataError> {
        match self.call(Request::Get { key: self.key(key)?, r }).await? {
            Reply::Read(read) => Ok(read),
            Reply::Written(_) => Err(DataError::NotRunning),
        }
    }

    /// Writes `value` under `key` at the default write level, superseding what `context` (from
    /// a read; empty for a blind write) saw; returns the context of the new version.
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        context: &VersionVector,
    ) -> Result<VersionVector, DataError> {
        self.put_with(key, Value::Bytes(value), context, self.levels().1).await
    }

    /// Writes `value` (bytes, or [`Value::Tombstone`] to delete) at level `w`.
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn put_with(
        &self,
        key: &str,
        value: Value,
        context: &VersionVector,
        w: Level,
    ) -> Result<VersionVector, DataError> {
        let request = Request::Put { key: self.key(key)?, value, context: context.clone(), w };
        match self.call(request).await? {
            Reply::Written(ctx) => Ok(ctx),
            Reply::Read(_) => Err(DataError::NotRunning),
        }
    }

    /// Deletes `key` as `context` saw it (a tombstone that supersedes what the read returned).
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn delete(
        &self,
        key: &str,
        context: &VersionVector,
    ) -> Result<VersionVector, DataError> {
        self.put_with(key, Value::Tombstone, context, self.levels().1).await
    }

    /// Applies `op` to the CRDT under `key` (an empty one of the op's kind when absent);
    /// concurrent updates through any node merge.
    ///
    /// # Errors
    /// See [`DataError`]; refused when the key holds bytes or another kind.
    pub async fn update(&self, key: &str, op: CrdtOp) -> Result<VersionVector, DataError> {
        let now_ms = crate::driver::wall_clock().0;
        let request = Request::Update { key: self.key(key)?, op, now_ms, w: self.levels().1 };
        match self.call(request).await? {
            Reply::Written(ctx) => Ok(ctx),
            Reply::Read(_) => Err(DataError::NotRunning),
        }
    }

    /// Reads the fenced value under `key` (`None` when the key holds none) from a quorum of the
    /// key's own replicas, so that it meets every fenced write acknowledged before it
    /// (`docs/data.md`, "Fenced values"). Entity state is kept this way
    /// ([`crate::sharding::EntityContext::state`]).
    ///
    /// # Errors
    /// See [`DataError`]; [`DataError::Json`] never. Unavailable when fewer than a quorum of
    /// the key's replicas are reachable (stand-ins do not count).
    pub async fn fenced_read(&self, key: &str) -> Result<Option<Fenced>, DataError> {
        let request = Request::FencedRead { key: self.key(key)?, r: Level::Quorum };
        match self.call(request).await? {
            Reply::Read(read) => Ok(read.fenced().cloned()),
            Reply::Written(_) => Err(DataError::NotRunning),
        }
    }

    /// Claims or writes the fenced value under `key` at a quorum of the key's own replicas;
    /// returns the fenced value those replicas hold once they have taken it in, merged. A
    /// claim's answer is therefore what the new writer starts from: it holds every write
    /// acknowledged to an older writer, even one acknowledged after the claim.
    ///
    /// # Errors
    /// See [`DataError`]; a claim or write of a superseded writer is refused with
    /// [`convoke_data::Refused::Fenced`] (see [`DataError::fence_refusal`]).
    pub async fn fenced_write(&self, key: &str, op: FenceOp) -> Result<Fenced, DataError> {
        let request = Request::FencedWrite { key: self.key(key)?, op, w: Level::Quorum };
        match self.call(request).await? {
            Reply::Read(read) => Ok(read.fenced().cloned().unwrap_or_default()),
            Reply::Written(_) => Err(DataError::NotRunning),
        }
    }

    /// Reads `key` as JSON values of type `T`: every current value, and the context.
    ///
    /// # Errors
    /// See [`DataError`]; [`DataError::Json`] when a value is not a `T`.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<(Vec<T>, VersionVector), DataError> {
        let read = self.get(key).await?;
        let values = read
            .values
            .iter()
            .map(|v| match v {
                Value::Bytes(b) => {
                    serde_json::from_slice(b).map_err(|e| DataError::Json(e.to_string()))
                }
                other => Err(DataError::Json(format!("not bytes: {other:?}"))),
            })
            .collect::<Result<_, _>>()?;
        Ok((values, read.context))
    }

    /// Writes `value` as JSON under `key`, superseding what `context` saw.
    ///
    /// # Errors
    /// See [`DataError`].
    pub async fn put_json<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        context: &VersionVector,
    ) -> Result<VersionVector, DataError> {
        let bytes = serde_json::to_vec(value).map_err(|e| DataError::Json(e.to_string()))?;
        self.put(key, bytes, context).await
    }

    /// Changes of `key`: the first [`Subscription::next`] returns its current read, each later
    /// one the next read whose context differs. Changes on this node's replica wake it at once;
    /// others are seen within `every`.
    ///
    /// # Errors
    /// The store is not running, or the key is not valid.
    pub fn subscribe(&self, key: &str, every: Duration) -> Result<Subscription, DataError> {
        let inner = self.inner.as_ref().ok_or(DataError::NotRunning)?;
        let key = self.key(key)?;
        Ok(Subscription {
            data: self.clone(),
            changes: inner.changes.subscribe(),
            key,
            every,
            last: None,
        })
    }

    /// What the store on this node holds and does.
    ///
    /// # Errors
    /// The store is not running.
    pub async fn stats(&self) -> Result<DataStats, DataError> {
        let inner = self.inner.as_ref().ok_or(DataError::NotRunning)?;
        let (tx, rx) = oneshot::channel();
        inner.commands.send(Command::Stats(tx)).await.map_err(|_| DataError::NotRunning)?;
        rx.await.map_err(|_| DataError::NotRunning)
    }
}

/// The changes of one key (see [`Data::subscribe`]).
#[derive(Debug)]
pub struct Subscription {
    data: Data,
    changes: broadcast::Receiver<Key>,
    key: Key,
    every: Duration,
    last: Option<VersionVector>,
}

impl Subscription {
    /// The key's next read whose context differs from the last one returned.
    ///
    /// # Errors
    /// The store stopped.
    pub async fn next(&mut self) -> Result<Read, DataError> {
        loop {
            match self.data.get(self.key.as_str()).await {
                Ok(read) if self.last.as_ref() != Some(&read.context) => {
                    self.last = Some(read.context.clone());
                    return Ok(read);
                }
                Ok(_) | Err(DataError::Store(_)) => {}
                Err(e) => return Err(e),
            }
            let wait = async {
                loop {
                    match self.changes.recv().await {
                        Ok(k) if k == self.key => return,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                    }
                }
            };
            let _ = tokio::time::timeout(self.every, wait).await;
        }
    }
}
