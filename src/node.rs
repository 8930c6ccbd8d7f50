//! [`Node`]: a running cluster node — the membership core, its driver task and the TCP transport.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::{
    Address, Cluster, ClusterEvent, CurrentClusterState, JoinError, MemberStatus, Uid,
    UniqueAddress,
};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::driver::{Command, Driver, Snapshot, Termination, snapshot, wall_clock_ms};
use crate::management::{HealthChecks, SharedMetrics};
use crate::settings::{Settings, SettingsError};
use crate::transport::{Transport, TransportConfig};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;
/// How many commands may wait for the driver.
const COMMAND_BUFFER: usize = 256;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The settings are invalid.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The transport could not bind its listener.
    #[error("cannot bind the cluster transport to {addr}: {source}")]
    Bind {
        /// What it tried to bind.
        addr: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The configured seed nodes were refused.
    #[error(transparent)]
    Join(#[from] JoinError),
    /// The management server could not start.
    #[error("cannot start the management server on {addr}: {why}")]
    Management {
        /// What it tried to bind.
        addr: String,
        /// Why it failed.
        why: String,
    },
}

/// Why a command could not be delivered: the node has stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cluster node has stopped")]
pub struct NodeStopped;

/// A failure of a join command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinCommandError {
    /// The node has stopped.
    #[error(transparent)]
    Stopped(#[from] NodeStopped),
    /// The core refused the join.
    #[error(transparent)]
    Refused(#[from] JoinError),
}

/// How [`Node::shutdown`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// The node left gracefully (it reached Exiting or Removed, or was never a member).
    Left,
    /// The leave did not complete within `cluster.leave_timeout`; the node stopped anyway.
    TimedOut,
    /// The node had already terminated, for this reason.
    AlreadyTerminated(Termination),
}

/// A running cluster node. Cheap to clone; every clone controls the same node.
///
/// Start one with [`Node::start`]; it joins `cluster.seed_nodes` if any are configured, otherwise
/// it bootstraps (when `bootstrap.enabled` and the management server runs) or waits for
/// [`Node::join`] or [`Node::join_seed_nodes`]. Watch it with
/// [`Node::subscribe`] and [`Node::state`]. A node that is downed shuts itself down:
/// [`Node::terminated`] resolves with the reason.
#[derive(Clone, Debug)]
pub struct Node {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    self_node: UniqueAddress,
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    terminated: watch::Receiver<Option<Termination>>,
    transport: Transport,
    leave_timeout: Duration,
    health: HealthChecks,
    metrics: SharedMetrics,
    management_addr: std::sync::OnceLock<SocketAddr>,
    management_stop: tokio::sync::watch::Sender<bool>,
    bootstrap: std::sync::OnceLock<watch::Receiver<convoke_bootstrap::BootstrapStatus>>,
}

impl Node {
    /// Binds the transport, starts the driver and, when `cluster.seed_nodes` is set, joins them.
    ///
    /// # Errors
    /// Invalid settings, a port that cannot be bound, or seed nodes of another system.
    pub async fn start(settings: &Settings) -> Result<Node, StartError> {
        let mut resolved = settings.clone();
        resolved.resolve_host_address()?;
        let settings = &resolved;
        settings.validate()?;
        let c = &settings.cluster;
        let bind_host = if c.bind_hostname.is_empty() { &c.hostname } else { &c.bind_hostname };
        let bind_port = c.bind_port.0.unwrap_or(c.port);
        let bind = host_port(bind_host, bind_port);
        let listener = TcpListener::bind(&bind)
            .await
            .map_err(|source| StartError::Bind { addr: bind.clone(), source })?;
        let local =
            listener.local_addr().map_err(|source| StartError::Bind { addr: bind, source })?;
        let port = if c.port == 0 { local.port() } else { c.port };
        let address =
            Address::new(&c.system_name, &c.hostname, port).map_err(|e| SettingsError {
                key: "cluster.hostname".into(),
                value: format!("{:?}", c.hostname),
                expected: e.to_string(),
                origin: String::new(),
            })?;
        let self_node = UniqueAddress::new(address, random_uid());
        let mut core_config = settings.core_config()?;
        core_config.seed = random_u64();
        let now = tokio::time::Instant::now().into_std();
        let core = Cluster::new(core_config, self_node.clone(), now, wall_clock_ms())
            .map_err(SettingsError::from)?;
        let lease = crate::lease::LeaseRuntime::from_settings(settings, &self_node)?;

        let transport_config =
            TransportConfig { system_name: c.system_name.clone(), settings: c.transport.clone() };
        let (transport, inbound) = Transport::start(listener, self_node.clone(), transport_config);
        let (commands_tx, commands) = mpsc::channel(COMMAND_BUFFER);
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (snapshots_tx, snapshots) = watch::channel(snapshot(&core));
        let (terminated_tx, terminated) = watch::channel(None);
        let metrics = SharedMetrics::default();
        let driver = Driver {
            core_started: now,
            metrics: metrics.clone(),
            core,
            commands,
            inbound,
            transport: transport.clone(),
            events,
            snapshots: snapshots_tx,
            terminated: terminated_tx,
            lease,
            self_commands: commands_tx.downgrade(),
        };
        tokio::spawn(driver.run());
        tracing::info!(node = %self_node.address, uid = %self_node.uid, listen = %local, "cluster node started");
        let node = Node {
            inner: Arc::new(Inner {
                self_node,
                commands: commands_tx,
                snapshots,
                terminated,
                transport,
                leave_timeout: c.leave_timeout.0,
                health: HealthChecks::default(),
                metrics,
                management_addr: std::sync::OnceLock::new(),
                management_stop: tokio::sync::watch::channel(false).0,
                bootstrap: std::sync::OnceLock::new(),
            }),
        };
        if settings.management.enabled {
            node.start_management(settings).await?;
        }
        if !c.seed_nodes.is_empty() {
            let seeds = c.seed_nodes.iter().filter_map(|s| s.parse().ok()).collect();
            node.join_seed_nodes(seeds).await.map_err(|e| match e {
                JoinCommandError::Refused(e) => StartError::Join(e),
                JoinCommandError::Stopped(_) => StartError::Join(JoinError::NoSeedNodes),
            })?;
        }
        crate::bootstrap::start(&node, settings)?;
        Ok(node)
    }

    pub(crate) fn set_bootstrap_status(
        &self,
        status: watch::Receiver<convoke_bootstrap::BootstrapStatus>,
    ) {
        let _ = self.inner.bootstrap.set(status);
    }

    /// What bootstrap is doing and why (served at `GET /bootstrap/status`).
    pub fn bootstrap_status(&self) -> convoke_bootstrap::BootstrapStatus {
        self.inner.bootstrap.get().map_or_else(
            || convoke_bootstrap::BootstrapStatus::not_used("the node is starting"),
            |rx| rx.borrow().clone(),
        )
    }

    async fn start_management(&self, settings: &Settings) -> Result<(), StartError> {
        let m = &settings.management;
        let host = if m.bind_hostname.is_empty() { &m.hostname } else { &m.bind_hostname };
        let bind = host_port(host, m.bind_port.0.unwrap_or(m.port));
        let fail = |why: String| StartError::Management { addr: bind.clone(), why };
        let tls = match &m.tls {
            Some(t) => Some(
                crate::management::tls_acceptor(&t.cert_path, &t.key_path)
                    .map_err(|e| fail(e.to_string()))?,
            ),
            None => None,
        };
        let listener = TcpListener::bind(&bind).await.map_err(|e| fail(e.to_string()))?;
        let local = listener.local_addr().map_err(|e| fail(e.to_string()))?;
        let _ = self.inner.management_addr.set(local);
        let loopback = local.ip().is_loopback();
        if !m.read_only && m.auth.is_none() && !loopback {
            tracing::warn!(
                %local,
                "the management API accepts write operations without authentication on a non-loopback address; \
                 set [management.auth] or management.read_only = true"
            );
        }
        let router = crate::management::router(self.clone(), m);
        let mut stop = self.inner.management_stop.subscribe();
        let mut terminated = self.inner.terminated.clone();
        let shutdown = async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                _ = terminated.wait_for(Option::is_some) => {}
            }
        };
        let limits = m.limits.clone();
        tokio::spawn(crate::management::serve(
            listener,
            router,
            limits.max_connections,
            limits.header_read_timeout.0,
            tls,
            shutdown,
        ));
        let scheme = if m.tls.is_some() { "https" } else { "http" };
        tracing::info!(url = %format!("{scheme}://{local}{}", m.base_path), "management server listening");
        Ok(())
    }

    /// The address the management server listens on, when it runs.
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.inner.management_addr.get().copied()
    }

    /// The user health checks served with `/ready` and `/alive`; add to them at any time.
    pub fn health_checks(&self) -> &HealthChecks {
        &self.inner.health
    }

    /// Metrics recorded by the runtime (served at `/metrics`).
    pub fn metrics(&self) -> &SharedMetrics {
        &self.inner.metrics
    }

    /// This node's identity (address and incarnation uid).
    pub fn self_node(&self) -> &UniqueAddress {
        &self.inner.self_node
    }

    /// This node's cluster address.
    pub fn self_address(&self) -> &Address {
        &self.inner.self_node.address
    }

    /// The address the transport listens on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.transport.local_addr()
    }

    /// The transport, for its counters.
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    async fn send(&self, cmd: Command) -> Result<(), NodeStopped> {
        self.inner.commands.send(cmd).await.map_err(|_| NodeStopped)
    }

    /// Joins the cluster `address` is a member of, or forms a new one when it is this node.
    ///
    /// # Errors
    /// When the node has stopped, or the core refuses (other system, already a member).
    pub async fn join(&self, address: Address) -> Result<(), JoinCommandError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Join(address, tx)).await?;
        Ok(rx.await.map_err(|_| NodeStopped)??)
    }

    /// Joins through seed nodes (the first seed forms the cluster if nobody answers).
    ///
    /// # Errors
    /// When the node has stopped, or the core refuses the list.
    pub async fn join_seed_nodes(&self, seeds: Vec<Address>) -> Result<(), JoinCommandError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::JoinSeedNodes(seeds, tx)).await?;
        Ok(rx.await.map_err(|_| NodeStopped)??)
    }

    /// Asks the member at `address` to leave gracefully.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn leave(&self, address: Address) -> Result<(), NodeStopped> {
        self.send(Command::Leave(address)).await
    }

    /// Marks the member at `address` Down.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn down(&self, address: Address) -> Result<(), NodeStopped> {
        self.send(Command::Down(address)).await
    }

    /// Starts a full-cluster shutdown: members move to PreparingForShutdown, then
    /// ReadyForShutdown; no new member is admitted.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn prepare_for_full_shutdown(&self) -> Result<(), NodeStopped> {
        self.send(Command::PrepareForFullShutdown).await
    }

    /// A subscription to cluster events, starting with the current state replayed as events.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn subscribe(&self) -> Result<Subscription, NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Subscribe(tx)).await?;
        let (initial, receiver) = rx.await.map_err(|_| NodeStopped)?;
        Ok(Subscription { initial: initial.into(), receiver })
    }

    /// The current view of the cluster.
    pub fn state(&self) -> CurrentClusterState {
        self.inner.snapshots.borrow().state.clone()
    }

    /// A receiver of every new snapshot (state and gossip).
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.snapshots.clone()
    }

    /// This node's status in its own view (Removed before joining and after leaving).
    pub fn self_status(&self) -> MemberStatus {
        self.state().self_member().map_or(MemberStatus::Removed, |m| m.status())
    }

    /// Whether the driver answers within `timeout` (for liveness checks).
    pub async fn ping(&self, timeout: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        let Ok(()) = self.send(Command::Ping(tx)).await else { return false };
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(())))
    }

    /// Why the node terminated, once it has.
    pub fn termination(&self) -> Option<Termination> {
        self.inner.terminated.borrow().clone()
    }

    /// Resolves when the node has terminated, with the reason.
    pub async fn terminated(&self) -> Termination {
        let mut rx = self.inner.terminated.clone();
        loop {
            if let Some(t) = rx.borrow_and_update().clone() {
                return t;
            }
            if rx.changed().await.is_err() {
                return Termination::Stopped;
            }
        }
    }

    /// Stops the node at once, without leaving: its connections close and the other members will
    /// see it unreachable (and down it, or have it downed). Returns when it has stopped.
    pub async fn stop(&self) {
        let _ = self.send(Command::Stop).await;
        self.terminated().await;
    }

    /// Leaves gracefully — Leaving, then Exiting, then the node stops — waiting at most
    /// `cluster.leave_timeout`, then stops the driver and closes every connection.
    pub async fn shutdown(&self) -> ShutdownOutcome {
        if let Some(t) = self.termination() {
            return ShutdownOutcome::AlreadyTerminated(t);
        }
        let joined = self.state().self_member().is_some();
        let outcome = if joined && self.leave(self.self_address().clone()).await.is_ok() {
            match tokio::time::timeout(self.inner.leave_timeout, self.terminated()).await {
                Ok(_) => ShutdownOutcome::Left,
                Err(_) => ShutdownOutcome::TimedOut,
            }
        } else {
            ShutdownOutcome::Left
        };
        self.stop().await;
        outcome
    }
}

/// Cluster events for one subscriber: the current state as events first, then every change.
#[derive(Debug)]
pub struct Subscription {
    initial: VecDeque<ClusterEvent>,
    receiver: broadcast::Receiver<ClusterEvent>,
}

/// Why [`Subscription::recv`] returned no event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The subscriber fell behind and this many events were skipped.
    #[error("the subscriber fell behind; {0} events were skipped")]
    Lagged(u64),
    /// The node stopped.
    #[error("the cluster node has stopped")]
    Closed,
}

impl Subscription {
    /// The next event.
    ///
    /// # Errors
    /// [`RecvError::Lagged`] when events were skipped (the next call continues after them), and
    /// [`RecvError::Closed`] once the node has stopped.
    pub async fn recv(&mut self) -> Result<ClusterEvent, RecvError> {
        if let Some(e) = self.initial.pop_front() {
            return Ok(e);
        }
        self.receiver.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(n) => RecvError::Lagged(n),
            broadcast::error::RecvError::Closed => RecvError::Closed,
        })
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        // No OS randomness: fall back to the clock, which still differs per incarnation.
        wall_clock_ms() ^ u64::from(std::process::id()).rotate_left(32)
    })
}

fn random_uid() -> Uid {
    loop {
        if let Some(uid) = Uid::new(random_u64()) {
            return uid;
        }
    }
}
