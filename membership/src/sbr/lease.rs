//! The lease seam of the lease-majority strategy: the requests the core makes, the [`Lease`]
//! trait a runtime implements to answer them, and an in-memory implementation for tests.
//!
//! The core never waits on anything. It emits a [`LeaseRequest`]
//! ([`Cluster::poll_lease_request`](crate::Cluster::poll_lease_request)); the runtime performs it
//! on its [`Lease`], with a timeout, and hands the answer back
//! ([`Cluster::handle_lease_result`](crate::Cluster::handle_lease_result)). An error or a timeout
//! answers `false`: the lease was not taken.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::{
    DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_TIMEOUT, DEFAULT_OPERATION_TIMEOUT,
    LeaseMajorityConfig,
};

/// What the core asks of the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseOp {
    /// Take the lease, or renew it if this owner holds it. Answer whether it is held now.
    Acquire,
    /// Give the lease up. Answer whether it was released.
    Release,
    /// Answer whether this owner holds the lease, without changing anything.
    Check,
}

impl fmt::Display for LeaseOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Acquire => "acquire",
            Self::Release => "release",
            Self::Check => "check",
        })
    }
}

/// A request from the core to the runtime's lease. Every request must be answered exactly once
/// with [`Cluster::handle_lease_result`](crate::Cluster::handle_lease_result), echoing `op`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// What to do.
    pub op: LeaseOp,
    /// The lease, `cluster.split_brain_resolver.lease_majority.lease_name`.
    pub lease_name: String,
    /// Who asks: this node's `host:port`.
    pub owner: String,
}

/// The identity and timing of one lease, as a runtime's [`Lease`] uses them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSettings {
    /// The lease's name, shared by every contender.
    pub lease_name: String,
    /// This contender's name (the node's `host:port`).
    pub owner_name: String,
    /// How often a held lease is renewed.
    pub heartbeat_interval: Duration,
    /// A lease not renewed for this long has expired and may be taken by another owner.
    pub heartbeat_timeout: Duration,
    /// An operation that takes longer has failed (and answers `false`).
    pub operation_timeout: Duration,
}

impl LeaseSettings {
    /// Settings for `lease_name` held by `owner_name`, renewed every 12 s, expiring after 120 s,
    /// with operations timing out after 5 s.
    pub fn new(lease_name: impl Into<String>, owner_name: impl Into<String>) -> Self {
        Self {
            lease_name: lease_name.into(),
            owner_name: owner_name.into(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }

    /// The lease of a node of `system_name` whose contender name is `owner` (its `host:port`),
    /// with the name and timing of `config` (`cluster.split_brain_resolver.lease_majority`).
    pub fn for_node(
        config: &LeaseMajorityConfig,
        system_name: &str,
        owner: impl Into<String>,
    ) -> Self {
        Self {
            heartbeat_interval: config.heartbeat_interval,
            heartbeat_timeout: config.heartbeat_timeout,
            operation_timeout: config.lease_operation_timeout,
            ..Self::new(config.effective_lease_name(system_name), owner)
        }
    }
}

/// Why a lease operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The operation did not finish within the operation timeout.
    #[error("lease operation timed out after {0:?}")]
    Timeout(Duration),
    /// The lease store could not be reached or refused the operation.
    #[error("lease store unavailable: {0}")]
    Unavailable(String),
    /// Another writer changed the lease first (an optimistic-concurrency conflict).
    #[error("lease changed concurrently: {0}")]
    Conflict(String),
}

/// The future a [`Lease`] operation returns.
pub type LeaseFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LeaseError>> + Send + 'a>>;

/// A distributed lease, implemented by a runtime (for instance on Kubernetes `Lease` objects) and
/// used by the lease-majority strategy: of two sides of a partition, only the one that holds the
/// lease survives. Independent of any async runtime.
pub trait Lease: Send + Sync + fmt::Debug {
    /// The lease's name, owner and timing.
    fn settings(&self) -> &LeaseSettings;

    /// Takes the lease for this owner, or renews it if this owner holds it already. `Ok(true)`
    /// when this owner holds it afterwards, `Ok(false)` when another owner does.
    fn acquire(&self) -> LeaseFuture<'_, bool>;

    /// Gives the lease up. `Ok(true)` when it was released, `Ok(false)` when this owner did not
    /// hold it.
    fn release(&self) -> LeaseFuture<'_, bool>;

    /// Whether this owner believes it holds the lease (acquired, not released, not expired).
    fn check_lease(&self) -> bool;
}

/// Performs `op` on `lease` for the core and turns the outcome into the answer it expects: an
/// error is `false` (the runtime applies the operation timeout around it).
pub async fn perform(lease: &dyn Lease, op: LeaseOp) -> bool {
    match op {
        LeaseOp::Acquire => lease.acquire().await.unwrap_or(false),
        LeaseOp::Release => lease.release().await.unwrap_or(false),
        LeaseOp::Check => lease.check_lease(),
    }
}

#[derive(Clone, Debug)]
struct Holder {
    owner: String,
    expires_at: Option<Instant>,
}

/// A table of leases in memory, shared by clones, so that several contenders (the two sides of a
/// partition in a test) compete for the same lease. Time is passed in.
#[derive(Clone, Debug, Default)]
pub struct InMemoryLeaseTable {
    leases: Arc<Mutex<BTreeMap<String, Holder>>>,
}

impl InMemoryLeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Holder>> {
        // A panic while holding the lock cannot leave the map half-updated.
        self.leases.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives `name` to `owner` if it is free, expired or already `owner`'s; it then expires at
    /// `now + ttl` (never with `None`). Returns whether `owner` holds it.
    pub fn acquire(&self, name: &str, owner: &str, now: Instant, ttl: Option<Duration>) -> bool {
        let mut leases = self.lock();
        let free = leases
            .get(name)
            .is_none_or(|h| h.owner == owner || h.expires_at.is_some_and(|at| at <= now));
        if free {
            let holder = Holder { owner: owner.to_owned(), expires_at: ttl.map(|t| now + t) };
            leases.insert(name.to_owned(), holder);
        }
        free
    }

    /// Frees `name` if `owner` holds it. Returns whether it did.
    pub fn release(&self, name: &str, owner: &str) -> bool {
        let mut leases = self.lock();
        let held = leases.get(name).is_some_and(|h| h.owner == owner);
        if held {
            leases.remove(name);
        }
        held
    }

    /// Whether `owner` holds `name` at `now`.
    pub fn check(&self, name: &str, owner: &str, now: Instant) -> bool {
        self.holder(name, now).is_some_and(|h| h == owner)
    }

    /// Who holds `name` at `now`, if anyone.
    pub fn holder(&self, name: &str, now: Instant) -> Option<String> {
        self.lock()
            .get(name)
            .filter(|h| h.expires_at.is_none_or(|at| at > now))
            .map(|h| h.owner.clone())
    }

    /// Answers a core's request at `now`; acquired leases expire after `ttl`.
    pub fn answer(&self, request: &LeaseRequest, now: Instant, ttl: Option<Duration>) -> bool {
        let (name, owner) = (request.lease_name.as_str(), request.owner.as_str());
        match request.op {
            LeaseOp::Acquire => self.acquire(name, owner, now, ttl),
            LeaseOp::Release => self.release(name, owner),
            LeaseOp::Check => self.check(name, owner, now),
        }
    }
}

/// A clock for [`InMemoryLease`]: tests pass a virtual one, a runtime may pass `Instant::now`.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// A [`Lease`] on an [`InMemoryLeaseTable`]. Leases expire after the settings'
/// `heartbeat_timeout` unless acquired again.
#[derive(Clone)]
pub struct InMemoryLease {
    table: InMemoryLeaseTable,
    settings: LeaseSettings,
    clock: Clock,
}

impl InMemoryLease {
    /// A contender for `settings.lease_name` in `table`, reading time from `clock`.
    pub fn new(table: InMemoryLeaseTable, settings: LeaseSettings, clock: Clock) -> Self {
        Self { table, settings, clock }
    }
}

impl fmt::Debug for InMemoryLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryLease")
            .field("table", &self.table)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Lease for InMemoryLease {
    fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn acquire(&self) -> LeaseFuture<'_, bool> {
        let s = &self.settings;
        let held = self.table.acquire(
            &s.lease_name,
            &s.owner_name,
            (self.clock)(),
            Some(s.heartbeat_timeout),
        );
        Box::pin(std::future::ready(Ok(held)))
    }

    fn release(&self) -> LeaseFuture<'_, bool> {
        let released = self.table.release(&self.settings.lease_name, &self.settings.owner_name);
        Box::pin(std::future::ready(Ok(released)))
    }

    fn check_lease(&self) -> bool {
        self.table.check(&self.settings.lease_name, &self.settings.owner_name, (self.clock)())
    }
}
