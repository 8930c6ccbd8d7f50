//! The driver's interface to the rest of the runtime: `Command`s in, [`Snapshot`]s and a
//! [`Termination`] out. [`Control`] bundles the three channel ends; the user's [`Node`], the
//! management routes and bootstrap each hold one and know nothing else of the driver.
//!
//! [`Node`]: crate::Node

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::gossip::Gossip;
use convoke_membership::{
    Address, ClusterEvent, CurrentClusterState, JoinError, MemberStatus, ShutdownReason,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

/// What other tasks ask of the driver.
#[derive(Debug)]
pub(crate) enum Command {
    JoinSeedNodes(Vec<Address>, oneshot::Sender<Result<(), JoinError>>),
    Join(Address, oneshot::Sender<Result<(), JoinError>>),
    Leave(Address),
    Down(Address),
    PrepareForFullShutdown,
    Subscribe(oneshot::Sender<(Vec<ClusterEvent>, broadcast::Receiver<ClusterEvent>)>),
    Ping(oneshot::Sender<()>),
    Phi(oneshot::Sender<Vec<(Address, f64)>>),
    Stop,
}

/// What the driver publishes after every input that changed something.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The current view.
    pub state: CurrentClusterState,
    /// The gossip it was computed from.
    pub gossip: Arc<Gossip>,
}

/// Why the driver stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Termination {
    /// The core asked for shutdown.
    Core(ShutdownReason),
    /// The node was stopped by its owner.
    Stopped,
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Core(reason) => reason.fmt(f),
            Self::Stopped => f.write_str("stopped"),
        }
    }
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

/// The three ends of the driver's channels. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Control {
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    terminated: watch::Receiver<Option<Termination>>,
}

impl Control {
    pub(crate) fn new(
        commands: mpsc::Sender<Command>,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        terminated: watch::Receiver<Option<Termination>>,
    ) -> Self {
        Self { commands, snapshots, terminated }
    }

    async fn send(&self, cmd: Command) -> Result<(), NodeStopped> {
        self.commands.send(cmd).await.map_err(|_| NodeStopped)
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

    /// Whether the driver answers within `timeout` (for liveness checks).
    pub async fn ping(&self, timeout: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        let Ok(()) = self.send(Command::Ping(tx)).await else { return false };
        matches!(tokio::time::timeout(timeout, rx).await, Ok(Ok(())))
    }

    /// The failure detector's φ of every member this node monitors, now, in address order.
    ///
    /// # Errors
    /// When the node has stopped.
    pub async fn phi(&self) -> Result<Vec<(Address, f64)>, NodeStopped> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Phi(tx)).await?;
        rx.await.map_err(|_| NodeStopped)
    }

    /// Stops the driver at once, without leaving. Returns when it has stopped.
    pub async fn stop(&self) {
        let _ = self.send(Command::Stop).await;
        self.terminated().await;
    }

    /// The current view of the cluster.
    pub fn state(&self) -> CurrentClusterState {
        self.snapshots.borrow().state.clone()
    }

    /// The current snapshot, shared (a new one is published on every change).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }

    /// A receiver of every new snapshot (state and gossip).
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.clone()
    }

    /// This node's status in its own view (Removed before joining and after leaving).
    pub fn self_status(&self) -> MemberStatus {
        self.state().self_member().map_or(MemberStatus::Removed, |m| m.status())
    }

    /// Why the driver terminated, once it has.
    pub fn termination(&self) -> Option<Termination> {
        self.terminated.borrow().clone()
    }

    /// Resolves when the driver has terminated, with the reason.
    pub async fn terminated(&self) -> Termination {
        let mut rx = self.terminated.clone();
        loop {
            if let Some(t) = rx.borrow_and_update().clone() {
                return t;
            }
            if rx.changed().await.is_err() {
                return Termination::Stopped;
            }
        }
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
