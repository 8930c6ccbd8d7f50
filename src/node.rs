//! [`Node`]: the user's handle on a running cluster node. It holds channel ends and shared
//! handles only; the node is assembled and started in [`crate::runtime`] ([`Node::start`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use convoke_bootstrap::BootstrapStatus;
use convoke_membership::{Address, CurrentClusterState, MemberStatus, UniqueAddress};
use tokio::sync::watch;

use crate::control::{Control, JoinCommandError, NodeStopped, Snapshot, Subscription, Termination};
use crate::data::Data;
use crate::health::HealthChecks;
use crate::management;
use crate::messaging::Messaging;
use crate::metrics::Metrics;
use crate::sharding::Sharding;
use crate::singleton::Singletons;
use crate::transport::Transport;

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
    handle: management::Handle,
    transport: Transport,
    messaging: Messaging,
    singletons: Singletons,
    sharding: Sharding,
    data: Data,
    leave_timeout: Duration,
    management_addr: Option<SocketAddr>,
    /// Dropped with the last handle, which stops the management server.
    _management_stop: watch::Sender<()>,
}

/// What [`Node::start`] assembled, handed to the handle.
#[derive(Debug)]
pub(crate) struct NodeParts {
    pub(crate) handle: management::Handle,
    pub(crate) transport: Transport,
    pub(crate) messaging: Messaging,
    pub(crate) singletons: Singletons,
    pub(crate) sharding: Sharding,
    pub(crate) data: Data,
    pub(crate) leave_timeout: Duration,
    pub(crate) management_addr: Option<SocketAddr>,
    pub(crate) management_stop: watch::Sender<()>,
}

impl Node {
    pub(crate) fn new(parts: NodeParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                handle: parts.handle,
                transport: parts.transport,
                messaging: parts.messaging,
                singletons: parts.singletons,
                sharding: parts.sharding,
                data: parts.data,
                leave_timeout: parts.leave_timeout,
                management_addr: parts.management_addr,
                _management_stop: parts.management_stop,
            }),
        }
    }

    fn control(&self) -> &Control {
        &self.inner.handle.control
    }

    /// What the management routes need of this node, to mount them on a server of your own with
    /// [`management::router`].
    pub fn management_handle(&self) -> management::Handle {
        self.inner.handle.clone()
    }

    /// What bootstrap is doing and why (served at `GET /bootstrap/status`).
    pub fn bootstrap_status(&self) -> BootstrapStatus {
        self.inner.handle.bootstrap.borrow().clone()
    }

    /// The address the management server listens on, when it runs.
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.inner.management_addr
    }

    /// The user health checks served with `/ready` and `/alive`; add to them at any time.
    pub fn health_checks(&self) -> &HealthChecks {
        &self.inner.handle.health
    }

    /// Metrics recorded by the runtime (served at `/metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.handle.metrics
    }

    /// This node's identity (address and incarnation uid).
    pub fn self_node(&self) -> &UniqueAddress {
        &self.inner.handle.self_node
    }

    /// This node's cluster address.
    pub fn self_address(&self) -> &Address {
        &self.inner.handle.self_node.address
    }

    /// The address the transport listens on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.transport.local_addr()
    }

    /// Typed messaging with the other members: endpoints, asks, tells and member watch.
    pub fn messaging(&self) -> &Messaging {
        &self.inner.messaging
    }

    /// Cluster singletons: start one, or get a proxy to one.
    pub fn singletons(&self) -> &Singletons {
        &self.inner.singletons
    }

    /// Cluster sharding: start an entity type, send to its entities.
    pub fn sharding(&self) -> &Sharding {
        &self.inner.sharding
    }

    /// The replicated store: keys partitioned over the members, read and written at the level
    /// a caller picks (`docs/data.md`). Answers [`crate::data::DataError::NotRunning`] unless
    /// `data.enabled`.
    pub fn data(&self) -> &Data {
        &self.inner.data
    }

    /// The transport, for its counters.
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    /// Joins the cluster `address` is a member of, or forms a new one when it is this node.
    ///
    /// # Errors
    /// When the node has stopped, or the core refuses (other system, already a member).
    pub async fn join(&self, address: Address) -> Result<(), JoinCommandError> {
        self.control().join(address).await
    }

    /// Joins through seed nodes (the first seed forms the cluster if nobody answers).
    ///
    /// # Errors
    /// When the node has stopped, or the core refuses the list.
    pub async fn join_seed_nodes(&self, seeds: Vec<Address>) -> Result<(), JoinCommandError> {
        self.control().join_seed_nodes(seeds).await
    }

    /// Asks the member at `address` to leave gracefully.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn leave(&self, address: Address) -> Result<(), NodeStopped> {
        self.control().leave(address).await
    }

    /// Marks the member at `address` Down.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn down(&self, address: Address) -> Result<(), NodeStopped> {
        self.control().down(address).await
    }

    /// Starts a full-cluster shutdown: members move to PreparingForShutdown, then
    /// ReadyForShutdown; no new member is admitted.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn prepare_for_full_shutdown(&self) -> Result<(), NodeStopped> {
        self.control().prepare_for_full_shutdown().await
    }

    /// A subscription to cluster events, starting with the current state replayed as events.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn subscribe(&self) -> Result<Subscription, NodeStopped> {
        self.control().subscribe().await
    }

    /// The current view of the cluster.
    pub fn state(&self) -> CurrentClusterState {
        self.control().state()
    }

    /// A receiver of every new snapshot (state and gossip).
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.control().watch()
    }

    /// This node's status in its own view (Removed before joining and after leaving).
    pub fn self_status(&self) -> MemberStatus {
        self.control().self_status()
    }

    /// Whether the driver answers within `timeout` (for liveness checks).
    pub async fn ping(&self, timeout: Duration) -> bool {
        self.control().ping(timeout).await
    }

    /// Why the node terminated, once it has.
    pub fn termination(&self) -> Option<Termination> {
        self.control().termination()
    }

    /// Resolves when the node has terminated, with the reason.
    pub async fn terminated(&self) -> Termination {
        self.control().terminated().await
    }

    /// Stops the node at once, without leaving: its connections close and the other members will
    /// see it unreachable (and down it, or have it downed). Returns when it has stopped.
    pub async fn stop(&self) {
        self.control().stop().await;
    }

    /// Leaves gracefully — hands off the shards and over the singletons running here, then the
    /// store's keys to the members that stay, then Leaving, Exiting, and the node stops — waiting at most `cluster.leave_timeout` for the
    /// shards and again for the leave, then stops the driver and closes every connection.
    pub async fn shutdown(&self) -> ShutdownOutcome {
        if let Some(t) = self.termination() {
            return ShutdownOutcome::AlreadyTerminated(t);
        }
        let joined = self.state().self_member().is_some();
        if joined {
            // Shards first: the coordinator (a singleton) may run here and must see them off.
            self.inner.sharding.shut_down_all(self.inner.leave_timeout).await;
            self.inner.singletons.hand_over_all().await;
            // Then the store's keys, to the replicas that stay: the shards' last writes too.
            let started = tokio::time::Instant::now();
            if self.inner.data.hand_over_before_leaving(self.inner.leave_timeout).await {
                tracing::info!(took = ?started.elapsed(), "the store's keys handed to the members that stay");
            } else {
                tracing::warn!(
                    timeout = ?self.inner.leave_timeout,
                    "leaving before every store key was handed over; writes held only here may be lost"
                );
            }
        }
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
