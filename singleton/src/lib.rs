//! convoke-singleton: the sans-IO decision logic of the cluster singleton.
//!
//! A cluster singleton is one instance of a service that runs on exactly one member of the
//! cluster, the oldest one (by up-number) among the members that may host it, and moves to the
//! next oldest when that member leaves or is removed. The crate decides *where and when* the
//! instance runs; starting and stopping it, sending the hand-over messages and reading the
//! membership are the driver's job (the node runtime, or the simulator). No tokio, no sockets, no
//! clock reads: time comes in as `Instant`s, outputs go out as data, and the same inputs give the
//! same outputs. `clippy.toml` bans clocks, sleeps, threads and hash maps.
//!
//! The manager, [`SingletonManager`], is one per (node, singleton name) and decides whether the
//! singleton's instance runs on this node.
//!
//! The instance runs on the oldest member that may host it. When that member leaves gracefully it
//! hands the instance over: the new oldest asks with [`HandOver::HandOverToMe`], the old host
//! stops its instance and only then answers [`HandOver::HandOverDone`]. When it crashes or is cut
//! off, nobody can ask it: the new oldest starts only after the old host has been removed from the
//! membership *and* the removal margin has passed, time enough for a host cut off by a partition
//! to have downed itself and stopped. `docs/singleton.md` tells the whole protocol and why the
//! margin closes the partition window.
//!
//! Layout: this file holds the vocabulary shared with the driver (settings, hand-over messages,
//! outputs, phases, status); `manager.rs` the state machine; `view.rs` reads a membership list
//! (candidates, the oldest, departing older members). [`oldest_candidate`] is the rule that picks
//! the host, for the managers and for drivers that must find it.
//!
//! # Example
//!
//! Two Up members, each with its manager: the oldest (up-number 1) starts the instance, the
//! other stands by. A driver feeds every manager the membership whenever it changes and carries
//! out its outputs.
//!
//! ```
//! use std::collections::BTreeSet;
//! use std::time::Instant;
//!
//! use convoke_membership::member::UpNumber;
//! use convoke_membership::version::AppVersion;
//! use convoke_membership::{Address, Member, MemberStatus, Uid, UniqueAddress};
//! use convoke_singleton::{Output, Phase, SingletonConfig, SingletonManager};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let node = |port: u16| -> Result<UniqueAddress, Box<dyn std::error::Error>> {
//!     let uid = Uid::new(u64::from(port)).ok_or("a uid is not zero")?;
//!     Ok(UniqueAddress::new(Address::new("convoke", "127.0.0.1", port)?, uid))
//! };
//! let (a, b) = (node(25520)?, node(25521)?);
//! let dc: BTreeSet<String> = ["dc-default".to_owned()].into();
//! let up = |n: &UniqueAddress, number| {
//!     Member::from_parts(n.clone(), UpNumber(number), MemberStatus::Up, dc.clone(), AppVersion::default())
//! };
//! let members = [up(&a, 1), up(&b, 2)];
//!
//! let now = Instant::now();
//! let mut on_a = SingletonManager::new(SingletonConfig::new("ticker"), a, now);
//! let mut on_b = SingletonManager::new(SingletonConfig::new("ticker"), b, now);
//! on_a.handle_members(now, &members);
//! on_b.handle_members(now, &members);
//!
//! let outputs: Vec<Output> = std::iter::from_fn(|| on_a.poll_output()).collect();
//! assert!(outputs.iter().any(|o| matches!(o, Output::StartInstance)));
//! assert_eq!(on_a.phase(), Phase::Running);
//! assert_eq!(on_b.phase(), Phase::Younger);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod manager;
mod view;

use std::fmt;
use std::time::{Duration, Instant};

use convoke_membership::UniqueAddress;

pub use self::manager::SingletonManager;
pub use self::view::oldest_candidate;

/// How often HandOverToMe and TakeOverFromMe are re-sent, by default.
pub const DEFAULT_HAND_OVER_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// The minimum number of HandOverToMe retries before the manager reports itself stuck, by default.
pub const DEFAULT_MIN_HAND_OVER_RETRIES: u32 = 15;
/// The removal margin when none is given: the split-brain resolver's default `stable_after`.
pub const DEFAULT_REMOVAL_MARGIN: Duration = Duration::from_secs(20);
/// How long after a refused lease the manager asks for it again.
pub const LEASE_RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// How long an instance asked to stop may take before it is aborted, by default.
pub const DEFAULT_HAND_OVER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a held lease is renewed, by default (the lease's own default heartbeat interval).
pub const DEFAULT_LEASE_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(12);
/// How long a lease operation may take, by default (the lease's own default).
pub const DEFAULT_LEASE_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of one singleton.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SingletonConfig {
    /// The singleton's name; one manager per name runs on every node.
    pub name: String,
    /// Only members with this role host it; None = every member.
    pub role: Option<String>,
    /// How often HandOverToMe / TakeOverFromMe are re-sent (default 1 s).
    pub hand_over_retry_interval: Duration,
    /// Minimum number of HandOverToMe retries before giving up waiting (default 15). Giving up
    /// does not mean starting: the manager keeps asking and reports itself stuck
    /// ([`SingletonManager::is_stuck`]) until the previous host answers or is removed.
    pub min_hand_over_retries: u32,
    /// After a previous host is seen Removed, wait this long before starting here (default: the
    /// split-brain resolver's stable_after; the runtime passes it).
    pub removal_margin: Duration,
    /// Whether the instance must hold a lease while it runs.
    pub use_lease: bool,
    /// How long an instance asked to stop may take to end: past it the manager outputs
    /// [`Output::AbortInstance`] (default 10 s; the runtime passes `singleton.hand_over_timeout`).
    pub hand_over_timeout: Duration,
    /// How often a held lease is renewed (with `use_lease`; default 12 s; the runtime passes the
    /// lease's `heartbeat_interval`).
    pub lease_heartbeat_interval: Duration,
    /// How long a lease operation may take (with `use_lease`; default 5 s; the runtime passes the
    /// lease's `operation_timeout`). The driver bounds each call by it; the manager counts a grant
    /// that reaches it later than this after the request as a refusal: the node was frozen in
    /// between, and the lease may have expired meanwhile.
    pub lease_operation_timeout: Duration,
}

impl SingletonConfig {
    /// Settings for singleton `name`: every member may host it, retries every second, at least 15
    /// of them, a 20 s removal margin, a 10 s hand-over timeout, no lease (renewed every 12 s when
    /// one is used).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: None,
            hand_over_retry_interval: DEFAULT_HAND_OVER_RETRY_INTERVAL,
            min_hand_over_retries: DEFAULT_MIN_HAND_OVER_RETRIES,
            removal_margin: DEFAULT_REMOVAL_MARGIN,
            use_lease: false,
            hand_over_timeout: DEFAULT_HAND_OVER_TIMEOUT,
            lease_heartbeat_interval: DEFAULT_LEASE_HEARTBEAT_INTERVAL,
            lease_operation_timeout: DEFAULT_LEASE_OPERATION_TIMEOUT,
        }
    }

    /// A removal margin that covers the other side of a partition, for a cluster configured as
    /// `cluster` whose instances stop within `stop_timeout` once asked: the resolver's
    /// `stable_after` and its `down_all_when_unstable` delay (when on), plus one failure-detection
    /// time (`acceptable_heartbeat_pause` and three heartbeat intervals), plus `stop_timeout`.
    ///
    /// `stable_after` alone is not enough. The side that is cut off may start its resolver's wait
    /// up to one failure-detection time after this side decided: it detects the partition later,
    /// or a moment of healing just before this side's decision restarts its wait. It then waits
    /// `stable_after`, downs itself, and still needs `stop_timeout` to end its instance. If its
    /// reachability keeps changing meanwhile (the partition is not clean), its wait lasts until
    /// down-all-when-unstable ends it, `down_all_when_unstable` after `stable_after`. The
    /// simulator finds runs in which `stable_after` alone lets two instances overlap by a few
    /// seconds, and one in which a margin without the unstable delay lets them overlap by 7 s.
    pub fn removal_margin_for(
        cluster: &convoke_membership::Config,
        stop_timeout: Duration,
    ) -> Duration {
        let fd = &cluster.failure_detector;
        let sbr = &cluster.split_brain_resolver;
        sbr.stable_after
            + sbr.down_all_when_unstable_after().unwrap_or_default()
            + fd.acceptable_heartbeat_pause
            + fd.heartbeat_interval * 3
            + stop_timeout
    }

    /// How many unanswered HandOverToMe retries make the manager report itself stuck: at least
    /// `min_hand_over_retries`, and enough to outlast the removal margin by three.
    pub fn max_hand_over_retries(&self) -> u32 {
        let interval = self.hand_over_retry_interval.as_millis().max(1);
        let margin = self.removal_margin.as_millis().div_ceil(interval);
        let margin = u32::try_from(margin).unwrap_or(u32::MAX);
        self.min_hand_over_retries.max(margin.saturating_add(3))
    }
}

/// The hand-over protocol messages between managers of the same singleton name on different nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum HandOver {
    /// New oldest → a previous host: stop your instance and tell me when it has ended.
    HandOverToMe,
    /// Previous host → new oldest: stopping has begun (or I wait for a host I know of); wait.
    HandOverInProgress,
    /// Previous host → new oldest: no instance runs here and I know of none still running
    /// elsewhere; you may start.
    HandOverDone,
    /// A host that is no longer the oldest → the new oldest: ask me for the instance.
    TakeOverFromMe,
    /// A manager that has shut down → every member: this incarnation runs no instance and never
    /// will again. Sent once its instance (if any) has ended, so that a graceful leave need not
    /// wait for the removal margin when the new oldest's HandOverToMe comes too late to be
    /// answered.
    Released,
}

impl HandOver {
    /// The message's name, for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            Self::HandOverToMe => "HandOverToMe",
            Self::HandOverInProgress => "HandOverInProgress",
            Self::HandOverDone => "HandOverDone",
            Self::TakeOverFromMe => "TakeOverFromMe",
            Self::Released => "Released",
        }
    }
}

/// What the manager asks its driver to do.
///
/// The lease operations are answered one at a time: the manager asks for the next only once the
/// driver has answered the last [`AcquireLease`](Self::AcquireLease) or
/// [`RenewLease`](Self::RenewLease) with [`SingletonManager::lease_result`]. The driver bounds
/// each operation by the lease's operation timeout and answers `false` when it did not complete
/// in time; it never answers one twice, nor late.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Take the lease before starting (only with `use_lease`); answer with `lease_result`.
    AcquireLease,
    /// Renew the held lease (an acquire by its holder; with `use_lease`, every
    /// `lease_heartbeat_interval` while it is held); answer with `lease_result`. A refusal counts
    /// as a lost lease.
    RenewLease,
    /// Release the lease. No answer is expected.
    ReleaseLease,
    /// Start the instance here now.
    StartInstance,
    /// Signal the running instance to stop (cancellation); the driver calls `instance_stopped`
    /// once it has ended.
    StopInstance,
    /// The instance asked to stop has not ended within `hand_over_timeout`: end it by force. The
    /// driver still calls `instance_stopped` once it has ended.
    AbortInstance,
    /// Send a hand-over message to the manager of the same singleton on `to`.
    Send {
        /// The receiving node.
        to: UniqueAddress,
        /// The message.
        message: HandOver,
    },
}

/// The manager's phase, as shown by `GET /cluster/singletons`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not (yet) Up, or not a candidate (lacks the role): nothing runs here.
    Idle,
    /// Another member is the oldest; it runs there.
    Younger,
    /// This node is the oldest and waits for the previous host to hand over.
    BecomingOldest,
    /// The previous host was removed; waiting for the removal margin to pass. (Also after this
    /// node was frozen past a deadline: it waits a margin before it trusts its view again.)
    WaitingForRemoval,
    /// Waiting for the lease before starting.
    AcquiringLease,
    /// The instance runs here. (If it ended by itself, the phase stays: the manager does not
    /// restart it, and `running_here` is false.)
    Running,
    /// This node was the oldest and is stopping its instance for the new oldest.
    HandingOver,
    /// No longer the oldest; the instance still runs here until the new oldest asks for it with
    /// HandOverToMe (TakeOverFromMe is re-sent to it meanwhile).
    WasOldest,
    /// This node is leaving the cluster for good (downed, removed, shut down, or leaving for longer
    /// than [`SingletonManager::leave_allowance`]): instance stopped or stopping.
    Stopped,
}

impl Phase {
    /// The kebab-case name shown by the management API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Younger => "younger",
            Self::BecomingOldest => "becoming-oldest",
            Self::WaitingForRemoval => "waiting-for-removal",
            Self::AcquiringLease => "acquiring-lease",
            Self::Running => "running",
            Self::HandingOver => "handing-over",
            Self::WasOldest => "was-oldest",
            Self::Stopped => "stopped",
        }
    }

    /// The phases in which this node considers itself the oldest and runs, or is about to run, the
    /// instance: a HandOverToMe from anyone else contradicts its view and waits until the view
    /// changes.
    pub(crate) fn claims_oldest(self) -> bool {
        self.is_waiting_to_start() || self == Self::Running
    }

    /// The phases in which this node is the oldest and waits to start.
    pub(crate) fn is_waiting_to_start(self) -> bool {
        matches!(self, Self::BecomingOldest | Self::WaitingForRemoval | Self::AcquiringLease)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What this node believes about the singleton.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SingletonStatus {
    /// The singleton's name.
    pub name: String,
    /// The role its hosts need, if any.
    pub role: Option<String>,
    /// The manager's phase.
    pub phase: Phase,
    /// The member this node sees as the (designated) host: the oldest Up/Leaving member with the
    /// role, by age.
    pub oldest: Option<UniqueAddress>,
    /// Whether the instance runs on this node (stopping counts: it has not ended yet).
    pub running_here: bool,
    /// When the current phase began.
    pub since: Instant,
}

#[cfg(test)]
mod tests;
