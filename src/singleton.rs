//! Cluster singletons: a task that runs on exactly one member, the oldest with a role, handed
//! over when that member leaves and restarted elsewhere when it is removed. Design:
//! `docs/singleton.md`.
//!
//! The decisions are made by [`convoke_singleton::SingletonManager`], a sans-IO state
//! machine that the simulator also runs. Here, one task per singleton feeds it the node's
//! membership snapshots, the hand-over messages of the other nodes' managers (tells on the
//! messaging endpoint `convoke.singleton/<name>`), its timers, the instance's end and the
//! lease's answers, and carries out what it outputs: start the instance, signal it to stop, abort
//! it (the manager says when: `singleton.hand_over_timeout` after the stop), send a hand-over
//! message, acquire, renew or release the lease. The manager also decides when the lease is
//! renewed and what an answer means; the only timing left here is the lease's operation timeout,
//! an IO timeout around each lease call (an operation that does not answer in time answers
//! `false`).
//!
//! [`SingletonProxy`] routes asks to wherever the instance runs: to the endpoint the instance
//! registers on its node, on the oldest member with the role, waiting (within its timeout, at
//! most `singleton.proxy_buffer_size` asks at once) while there is none.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convoke_membership::sbr::{Lease, LeaseOp, perform};
use convoke_membership::{Member, UniqueAddress};
use convoke_singleton::{
    HandOver, Output, SingletonConfig, SingletonManager, SingletonStatus, oldest_candidate,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::control::{Control, Snapshot};
use crate::messaging::{AskError, EndpointError, EndpointKey, Messaging};
use crate::settings::SingletonSettings;

/// The statuses of the singletons started on a node, for `GET /cluster/singletons`.
#[derive(Clone, Debug, Default)]
pub struct Statuses {
    by_name: Arc<Mutex<BTreeMap<String, watch::Receiver<SingletonStatus>>>>,
    /// Singletons whose manager has known the oldest member at least once.
    knew_oldest: Arc<Mutex<BTreeSet<String>>>,
}

impl Statuses {
    /// Every singleton started on this node, by name.
    pub fn list(&self) -> Vec<SingletonStatus> {
        let by_name = self.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        by_name.values().map(|rx| rx.borrow().clone()).collect()
    }

    /// The singletons started on this node whose manager has never known the oldest member
    /// with the singleton's role, by name: until it does, it cannot tell whether the instance
    /// runs here or where to send. Once it has, the singleton is never listed again, so that
    /// `/ready` does not fail while the oldest changes. The singleton readiness check
    /// (`management.health_checks.singletons`).
    pub fn without_oldest(&self) -> Vec<String> {
        let by_name = self.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        let mut knew = self.knew_oldest.lock().unwrap_or_else(PoisonError::into_inner);
        let mut waiting = Vec::new();
        for (name, rx) in by_name.iter() {
            if knew.contains(name) {
                continue;
            }
            if rx.borrow().oldest.is_some() {
                knew.insert(name.clone());
            } else {
                waiting.push(name.clone());
            }
        }
        waiting
    }
}

/// The wall-clock time (milliseconds since the Unix epoch) of a monotonic instant in the past.
pub fn epoch_millis(at: std::time::Instant) -> u64 {
    let ago = std::time::Instant::now().saturating_duration_since(at);
    let wall = SystemTime::now().checked_sub(ago).unwrap_or(UNIX_EPOCH);
    wall.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Why a singleton could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SingletonError {
    /// A singleton of that name is already started on this node.
    #[error("singleton '{0}' is already started on this node")]
    AlreadyStarted(String),
    /// Its hand-over endpoint could not be registered.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
}

/// What a singleton's instance is given.
#[derive(Clone, Debug)]
pub struct SingletonContext {
    name: String,
    stop: CancellationToken,
    messaging: Messaging,
}

impl SingletonContext {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Resolves when the instance must stop (hand-over, leave, or the node going down). An
    /// instance still running `singleton.hand_over_timeout` later is aborted.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Whether the instance has been told to stop.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The node's messaging, to register the instance's endpoints.
    pub fn messaging(&self) -> &Messaging {
        &self.messaging
    }

    /// Registers endpoint `key` now and answers its requests with `handler`, one at a time,
    /// until the instance is told to stop; then the endpoint is unregistered (proxies wait for
    /// the next instance).
    ///
    /// # Errors
    /// The endpoint name is taken or invalid.
    pub fn serve<'a, Req, Resp, F, Fut>(
        &'a self,
        key: &EndpointKey<Req, Resp>,
        capacity: usize,
        mut handler: F,
    ) -> impl Future<Output = Result<(), EndpointError>> + 'a
    where
        Req: DeserializeOwned + 'a,
        Resp: Serialize + 'a,
        F: FnMut(UniqueAddress, Req) -> Fut + 'a,
        Fut: Future<Output = Resp> + 'a,
    {
        let endpoint = self.messaging.endpoint(key, capacity);
        async move {
            let mut endpoint = endpoint?;
            loop {
                let request = tokio::select! {
                    biased;
                    () = self.stopped() => return Ok(()),
                    r = endpoint.recv() => match r {
                        Some(r) => r,
                        None => return Ok(()),
                    },
                };
                let (from, message, replier) = request.into_parts();
                let response = handler(from, message).await;
                if let Some(replier) = replier {
                    replier.reply(&response);
                }
            }
        }
    }
}

type Factory =
    Arc<dyn Fn(SingletonContext) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The singletons of one node. Cheap to clone; get it from [`crate::Node::singletons`].
#[derive(Clone)]
pub struct Singletons {
    inner: Arc<Inner>,
}

struct Inner {
    messaging: Messaging,
    control: Control,
    settings: SingletonSettings,
    removal_margin: Duration,
    statuses: Statuses,
    /// Graceful hand-over requests, by singleton.
    leaves: Mutex<Vec<mpsc::Sender<oneshot::Sender<()>>>>,
}

impl Singletons {
    /// How long an instance asked to stop may take before it is aborted.
    pub(crate) fn hand_over_timeout(&self) -> Duration {
        self.inner.settings.hand_over_timeout
    }
}

impl fmt::Debug for Singletons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Singletons").field("statuses", &self.inner.statuses).finish_non_exhaustive()
    }
}

impl Singletons {
    pub(crate) fn new(
        messaging: Messaging,
        control: Control,
        settings: SingletonSettings,
        removal_margin: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                messaging,
                control,
                settings,
                removal_margin,
                statuses: Statuses::default(),
                leaves: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The statuses shown by `GET /cluster/singletons`.
    pub fn statuses(&self) -> Statuses {
        self.inner.statuses.clone()
    }

    /// Starts singleton `name`: `factory`'s task runs on the oldest Up member with `role` (any
    /// member when `None`) among the members that started the same singleton, and on no other.
    /// Call it on every node that may host it, and on the others too if they should show it in
    /// `GET /cluster/singletons`.
    ///
    /// # Errors
    /// A singleton of that name is already started here.
    pub fn start<F, Fut>(
        &self,
        name: &str,
        role: Option<&str>,
        factory: F,
    ) -> Result<(), SingletonError>
    where
        F: Fn(SingletonContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.start_inner(name, role, None, Arc::new(move |ctx| Box::pin(factory(ctx))))
    }

    /// As [`Singletons::start`], and the instance runs only while this node holds `lease`
    /// (acquired before it starts, renewed while it runs, released after it stops; an instance
    /// whose lease is lost is told to stop).
    ///
    /// # Errors
    /// A singleton of that name is already started here.
    pub fn start_with_lease<F, Fut>(
        &self,
        name: &str,
        role: Option<&str>,
        lease: Arc<dyn Lease>,
        factory: F,
    ) -> Result<(), SingletonError>
    where
        F: Fn(SingletonContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.start_inner(name, role, Some(lease), Arc::new(move |ctx| Box::pin(factory(ctx))))
    }

    fn start_inner(
        &self,
        name: &str,
        role: Option<&str>,
        lease: Option<Arc<dyn Lease>>,
        factory: Factory,
    ) -> Result<(), SingletonError> {
        let inner = &self.inner;
        let mut by_name = inner.statuses.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        if by_name.contains_key(name) {
            return Err(SingletonError::AlreadyStarted(name.to_owned()));
        }
        let inbox = inner.messaging.endpoint(&hand_over_key(name), 256)?;
        let s = &inner.settings;
        let mut config = SingletonConfig::new(name);
        config.role = role.map(str::to_owned);
        config.hand_over_retry_interval = s.hand_over_retry_interval;
        config.min_hand_over_retries = s.min_number_of_hand_over_retries;
        config.removal_margin = inner.removal_margin;
        config.use_lease = lease.is_some();
        config.hand_over_timeout = s.hand_over_timeout;
        if let Some(l) = &lease {
            config.lease_heartbeat_interval = l.settings().heartbeat_interval;
            config.lease_operation_timeout = l.settings().operation_timeout;
        }
        let now = Instant::now().into_std();
        let manager = SingletonManager::new(config, inner.messaging.self_node().clone(), now);
        let (status_tx, status_rx) = watch::channel(manager.status());
        by_name.insert(name.to_owned(), status_rx);
        let (leave_tx, leave_rx) = mpsc::channel(4);
        inner.leaves.lock().unwrap_or_else(PoisonError::into_inner).push(leave_tx);
        let task = Task {
            manager,
            name: name.to_owned(),
            factory,
            lease,
            messaging: inner.messaging.clone(),
            control: inner.control.clone(),
            status: status_tx,
            instance: None,
            leave_waiters: Vec::new(),
        };
        tokio::spawn(task.run(inbox, leave_rx));
        tracing::info!(singleton = name, role = role.unwrap_or(""), "singleton manager started");
        Ok(())
    }

    /// Hands every singleton running here over, as before a graceful leave: each instance is
    /// told to stop and waited for (at most `singleton.hand_over_timeout`, then aborted), and
    /// no singleton starts here again. [`crate::Node::shutdown`] calls it before leaving.
    pub async fn hand_over_all(&self) {
        let leaves = self.inner.leaves.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut waits = Vec::new();
        for leave in leaves {
            let (tx, rx) = oneshot::channel();
            if leave.send(tx).await.is_ok() {
                waits.push(rx);
            }
        }
        for rx in waits {
            let _ = rx.await;
        }
    }

    /// A proxy to singleton endpoint `key`: its asks go to the instance of the singleton whose
    /// hosts have `role`, wherever it runs.
    pub fn proxy<Req, Resp>(
        &self,
        role: Option<&str>,
        key: EndpointKey<Req, Resp>,
    ) -> SingletonProxy<Req, Resp> {
        SingletonProxy {
            messaging: self.inner.messaging.clone(),
            snapshots: self.inner.control.watch(),
            role: role.map(str::to_owned),
            key,
            buffer: Arc::new(Semaphore::new(self.inner.settings.proxy_buffer_size)),
            buffer_size: self.inner.settings.proxy_buffer_size,
            retry: self.inner.settings.hand_over_retry_interval.min(Duration::from_millis(200)),
        }
    }
}

fn hand_over_key(name: &str) -> EndpointKey<HandOver, ()> {
    EndpointKey::named(format!("convoke.singleton/{name}"))
}

/// A running instance.
struct Instance {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The task of one singleton on one node.
struct Task {
    manager: SingletonManager,
    name: String,
    factory: Factory,
    lease: Option<Arc<dyn Lease>>,
    messaging: Messaging,
    control: Control,
    status: watch::Sender<SingletonStatus>,
    instance: Option<Instance>,
    /// Graceful hand-overs waiting for the instance to end.
    leave_waiters: Vec<oneshot::Sender<()>>,
}

impl Task {
    async fn run(
        mut self,
        mut inbox: crate::messaging::Endpoint<HandOver, ()>,
        mut leaves: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut snapshots = self.control.watch();
        let (lease_tx, mut lease_rx) = mpsc::channel::<bool>(4);
        let mut terminated = false;
        let mut inbox_open = true;
        self.feed_members(&snapshots.borrow_and_update());
        loop {
            self.drain(&lease_tx);
            let _ = self.status.send(self.manager.status());
            // A lease answer still due is waited for (at most the operation timeout), so that a
            // lease this node turns out to hold is released.
            if terminated && self.instance.is_none() && !self.manager.lease_pending() {
                self.release_waiters();
                return;
            }
            let wake = self.manager.poll_timeout().map(Instant::from_std);
            tokio::select! {
                changed = snapshots.changed(), if !terminated => {
                    if changed.is_err() {
                        terminated = true;
                        self.manager.shutdown(now());
                    } else {
                        let snapshot = snapshots.borrow_and_update().clone();
                        self.feed_members(&snapshot);
                    }
                }
                _ = self.control.terminated(), if !terminated => {
                    terminated = true;
                    self.manager.shutdown(now());
                }
                request = inbox.recv(), if inbox_open => match request {
                    Some(r) => {
                        let (from, message, _) = r.into_parts();
                        tracing::debug!(singleton = %self.name, %from, message = message.name(), "hand-over message");
                        self.manager.handle_message(now(), &from, message);
                    }
                    None => {
                        inbox_open = false;
                        terminated = true;
                        self.manager.shutdown(now());
                    }
                },
                ended = ended(&mut self.instance) => {
                    if let Err(e) = ended
                        && e.is_panic()
                    {
                        tracing::error!(singleton = %self.name, "the singleton instance panicked");
                    }
                    self.instance = None;
                    tracing::info!(singleton = %self.name, "singleton instance stopped");
                    self.manager.instance_stopped(now());
                    self.release_waiters();
                }
                Some(granted) = lease_rx.recv() => self.manager.lease_result(now(), granted),
                Some(waiter) = leaves.recv() => {
                    self.manager.shutdown(now());
                    self.leave_waiters.push(waiter);
                    // Answered at once when no instance runs here; otherwise once it has ended.
                    self.release_waiters();
                }
                () = sleep_until(wake) => self.manager.handle_timeout(now()),
            }
        }
    }

    /// Answers the graceful hand-overs once nothing runs here.
    fn release_waiters(&mut self) {
        if self.instance.is_none() {
            for w in self.leave_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    fn feed_members(&mut self, snapshot: &Snapshot) {
        let members: &[Member] = &snapshot.state.members;
        self.manager.handle_members(now(), members);
    }

    fn drain(&mut self, lease_tx: &mpsc::Sender<bool>) {
        while let Some(output) = self.manager.poll_output() {
            match output {
                Output::StartInstance => {
                    let stop = CancellationToken::new();
                    let ctx = SingletonContext {
                        name: self.name.clone(),
                        stop: stop.clone(),
                        messaging: self.messaging.clone(),
                    };
                    let task = tokio::spawn((self.factory)(ctx));
                    self.instance = Some(Instance { stop, task });
                    tracing::info!(singleton = %self.name, node = %self.messaging.self_node().address, "singleton instance started");
                }
                Output::StopInstance => {
                    if let Some(i) = &self.instance {
                        i.stop.cancel();
                        tracing::info!(singleton = %self.name, "stopping the singleton instance");
                    }
                }
                Output::AbortInstance => {
                    if let Some(i) = &self.instance {
                        let timeout = self.manager.config().hand_over_timeout;
                        tracing::warn!(singleton = %self.name, ?timeout, "the singleton instance did not stop within singleton.hand_over_timeout; aborting it");
                        i.task.abort();
                    }
                }
                Output::Send { to, message } => {
                    if let Err(e) = self.messaging.tell(&to, &hand_over_key(&self.name), &message) {
                        tracing::debug!(singleton = %self.name, %to, message = message.name(), error = %e, "cannot send a hand-over message");
                    }
                }
                Output::AcquireLease | Output::RenewLease => match &self.lease {
                    Some(l) => spawn_acquire(l.clone(), lease_tx.clone()),
                    None => self.manager.lease_result(now(), true),
                },
                Output::ReleaseLease => {
                    if let Some(l) = &self.lease {
                        let lease = l.clone();
                        tokio::spawn(async move {
                            let timeout = lease.settings().operation_timeout;
                            let _ =
                                tokio::time::timeout(timeout, perform(&*lease, LeaseOp::Release))
                                    .await;
                        });
                    }
                }
            }
        }
    }
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// Acquires (or renews) the lease off the task, bounded by its operation timeout; an error or
/// a timeout answers `false`.
fn spawn_acquire(lease: Arc<dyn Lease>, answer: mpsc::Sender<bool>) {
    tokio::spawn(async move {
        let timeout = lease.settings().operation_timeout;
        let op = perform(&*lease, LeaseOp::Acquire);
        let granted = tokio::time::timeout(timeout, op).await.unwrap_or(false);
        let _ = answer.send(granted).await;
    });
}

/// Resolves when the instance's task ends; never when there is none.
async fn ended(instance: &mut Option<Instance>) -> Result<(), tokio::task::JoinError> {
    match instance {
        Some(i) => (&mut i.task).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Why a proxy's ask failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// No instance answered within the timeout (none ran, or it was being handed over).
    #[error("no instance of the singleton answered within {0:?}")]
    Timeout(Duration),
    /// `singleton.proxy_buffer_size` asks already wait for an instance.
    #[error("{0} asks already wait for the singleton (singleton.proxy_buffer_size)")]
    BufferFull(usize),
    /// The instance was found but the ask failed for a reason waiting would not cure.
    #[error(transparent)]
    Ask(AskError),
}

/// Routes asks to a singleton's endpoint wherever its instance runs; see
/// [`Singletons::proxy`].
pub struct SingletonProxy<Req, Resp> {
    messaging: Messaging,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    role: Option<String>,
    key: EndpointKey<Req, Resp>,
    buffer: Arc<Semaphore>,
    buffer_size: usize,
    retry: Duration,
}

impl<Req, Resp> Clone for SingletonProxy<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            messaging: self.messaging.clone(),
            snapshots: self.snapshots.clone(),
            role: self.role.clone(),
            key: self.key.clone(),
            buffer: self.buffer.clone(),
            buffer_size: self.buffer_size,
            retry: self.retry,
        }
    }
}

impl<Req, Resp> fmt::Debug for SingletonProxy<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingletonProxy")
            .field("role", &self.role)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<Req: Serialize, Resp: DeserializeOwned> SingletonProxy<Req, Resp> {
    /// Where this node believes the instance runs: the oldest member that may host it (Up or
    /// Leaving, with the role, in this node's data center).
    pub fn host(&self) -> Option<UniqueAddress> {
        oldest_host(&self.snapshots.borrow(), self.role.as_deref())
    }

    /// Asks the singleton's instance, waiting (within `timeout`) while none runs or it is being
    /// handed over. At most once: a request the instance took is never sent again.
    ///
    /// # Errors
    /// See [`ProxyError`].
    pub async fn ask(&self, message: &Req, timeout: Duration) -> Result<Resp, ProxyError> {
        let deadline = Instant::now() + timeout;
        let mut slot = None;
        let mut snapshots = self.snapshots.clone();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ProxyError::Timeout(timeout));
            }
            let host = oldest_host(&snapshots.borrow_and_update(), self.role.as_deref());
            if let Some(host) = host {
                match self.messaging.ask(&host, &self.key, message, left).await {
                    Ok(r) => return Ok(r),
                    Err(AskError::Timeout { .. }) => return Err(ProxyError::Timeout(timeout)),
                    // No instance there (yet, or any more): wait for one.
                    Err(
                        AskError::NoSuchEndpoint { .. }
                        | AskError::NotAMember { .. }
                        | AskError::TargetRemoved { .. },
                    ) => {}
                    Err(e) => return Err(ProxyError::Ask(e)),
                }
            }
            if slot.is_none() {
                match self.buffer.clone().try_acquire_owned() {
                    Ok(permit) => slot = Some(permit),
                    Err(_) => return Err(ProxyError::BufferFull(self.buffer_size)),
                }
            }
            // Try again on the next membership change, or after a short pause (an instance
            // starting registers its endpoint without changing the membership).
            let pause = self.retry.min(deadline.saturating_duration_since(Instant::now()));
            tokio::select! {
                _ = snapshots.changed() => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Where the instance runs as `snapshot` shows it: the managers' own rule for the oldest
/// candidate with `role`, in this node's data center.
fn oldest_host(snapshot: &Snapshot, role: Option<&str>) -> Option<UniqueAddress> {
    let dc = snapshot.state.self_member()?.data_center();
    oldest_candidate(&snapshot.state.members, dc, role).map(|m| m.node().clone())
}
