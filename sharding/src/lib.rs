//! convoke-sharding: the sans-IO decision logic of cluster sharding. Entities are addressed by
//! id and grouped into shards, each shard is hosted by the region of one node, and homes are
//! decided by a coordinator that runs as a cluster singleton (on the member
//! `convoke_singleton::oldest_candidate` picks). No tokio, no sockets, no clock reads: time comes
//! in as `Instant`s, outputs go out as data, and the same inputs give the same outputs.
//! `clippy.toml` bans clocks, sleeps, threads and hash maps.
//!
//! Four state machines, none doing IO, tied together per entity type and node by the
//! [`Host`] (`host.rs`), which is what the runtime and the simulator drive:
//! - [`Coordinator`] (one per entity type, on the oldest member with the role): allocates shards
//!   to regions, rebalances them with the four-step handoff, takes shards away from regions that
//!   shut down or are removed. Every change to its allocation table is written to a majority of
//!   the [`Replica`]s before anyone is told about it, so a coordinator that starts on another node
//!   recovers the table instead of starting empty.
//! - [`Replica`] (one per entity type on every member with the role): holds the latest table it
//!   accepted and fences out coordinators older than the newest it has heard from.
//! - [`Region`] (one per entity type per node): routes messages by shard, buffers those whose
//!   shard has no known home (bounded), hosts the local shards and hands them off when told.
//! - [`Shard`] (one per hosted shard): starts entities on their first message, passivates idle
//!   ones, stops them all for a handoff.
//!
//! `docs/sharding-design.md` tells the protocol, the state replication and where convoke
//! departs from the usual design.
//!
//! Layout: `lib.rs` holds the vocabulary shared by the machines and their drivers (ids,
//! settings, protocol messages); `departures.rs` the members that went without handing off;
//! `hash.rs` the default shard-id extractor; `allocation.rs` the least-shard allocation and
//! rebalance rule; `state.rs` the coordinator's table and its replication messages; one file per
//! machine; `host.rs` the host; `wire.rs` the frames between nodes.
//!
//! # Example
//!
//! Every node must put an entity in the same shard without asking anyone: the default rule is
//! Java's `String.hashCode` of the id modulo the number of shards, as in Akka, and the least-shard
//! rule decides where a new shard goes.
//!
//! ```
//! use convoke_membership::version::AppVersion;
//! use convoke_membership::{Address, Uid, UniqueAddress};
//! use convoke_sharding::{LeastShardAllocation, RegionLoad, ShardId, java_string_hash, shard_for_entity};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! assert_eq!(java_string_hash("hello"), 99_162_322); // "hello".hashCode() on the JVM
//! assert_eq!(shard_for_entity("hello", 1000), ShardId::new("322"));
//!
//! let node = |port: u16| -> Result<UniqueAddress, Box<dyn std::error::Error>> {
//!     let uid = Uid::new(u64::from(port)).ok_or("a uid is not zero")?;
//!     Ok(UniqueAddress::new(Address::new("convoke", "127.0.0.1", port)?, uid))
//! };
//! let (a, b) = (node(25520)?, node(25521)?);
//! let on_a = [ShardId::new("1"), ShardId::new("2")];
//! let (v1, v2) = (AppVersion::parse("1.0.0"), AppVersion::parse("1.1.0"));
//! let mut regions = [
//!     RegionLoad { region: &a, shards: &on_a, leaving: false, version: &v1 },
//!     RegionLoad { region: &b, shards: &[], leaving: false, version: &v1 },
//! ];
//! // A new shard goes to the region with the fewest...
//! let rule = LeastShardAllocation::new(3, 0.1);
//! assert_eq!(rule.allocate(&regions), Some(&b));
//! // ...on the newest application version (a rolling update).
//! regions[0].version = &v2;
//! assert_eq!(rule.allocate(&regions), Some(&a));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod allocation;
mod coordinator;
mod departures;
mod hash;
mod host;
mod region;
mod shard;
mod state;
pub mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::UniqueAddress;

pub use self::allocation::{LeastShardAllocation, RegionLoad};
pub use self::coordinator::{Coordinator, CoordinatorOutput, CoordinatorStatus};
pub use self::departures::Departures;
pub use self::hash::{java_string_hash, shard_for_entity};
pub use self::host::{Envelope, Host, HostOutput, Reply, ReplyTo, answer, failure};
pub use self::region::{DropReason, Region, RegionOutput, RegionStatus};
pub use self::shard::{Shard, ShardOutput};
pub use self::state::{Ballot, CoordinatorState, Replica, ReplicaMsg, StateVersion};

/// The identifier of a shard: a short string (the default extractor gives `"0"`..`"n-1"`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(Arc<str>);

impl ShardId {
    /// Wraps a shard id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard:{}", self.0)
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ShardId {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

/// The identifier of an entity within its entity type.
pub type EntityId = Arc<str>;

/// Passivate idle entities after this long without a message, by default.
pub const DEFAULT_PASSIVATE_IDLE_AFTER: Duration = Duration::from_secs(120);
/// The default number of shards of the default extractor.
pub const DEFAULT_NUMBER_OF_SHARDS: u32 = 1000;
/// The default bound on the messages a region buffers for shards without a known home.
pub const DEFAULT_BUFFER_SIZE: usize = 100_000;

/// Settings of one sharded entity type. Every node that starts the type must use the same
/// `number_of_shards` (the join check compares it) and the same role.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardingConfig {
    /// The entity type's name: regions, coordinator and replicas of one type talk to each other.
    pub type_name: String,
    /// Only members with this role host shards (and the coordinator); others run proxy regions.
    /// `None` = every member.
    pub role: Option<String>,
    /// Shards of the default extractor (default 1000). About ten times the largest expected
    /// number of nodes.
    pub number_of_shards: u32,
    /// Messages a region holds, over all its shards, while their homes are unknown (default
    /// 100,000). One more is refused with [`DropReason::BufferFull`].
    pub buffer_size: usize,
    /// Stop an entity that received no message for this long (default 120 s); `None` = never.
    pub passivate_idle_after: Option<Duration>,
    /// Re-send registrations, GetShardHome, state reads and writes this often (default 2 s).
    pub retry_interval: Duration,
    /// Give up a handoff that has not finished after this long (default 60 s); the shard stays
    /// where it was.
    pub handoff_timeout: Duration,
    /// Re-send HostShard to a region that has not answered ShardStarted after this long
    /// (default 10 s).
    pub shard_start_timeout: Duration,
    /// How often the coordinator looks for shards to move (default 10 s).
    pub rebalance_interval: Duration,
    /// At most this many shards move in one rebalance round (default 20).
    pub rebalance_absolute_limit: u32,
    /// ... and at most this fraction of all shards (default 0.1).
    pub rebalance_relative_limit: f64,
    /// The coordinator answers no GetShardHome for a new shard until this many regions have
    /// registered (default 1).
    pub min_regions: u32,
    /// After a region's node is removed from the membership, wait this long before its shards
    /// go elsewhere (default 20 s; the runtime passes the singleton's removal margin): time for
    /// a node cut off by a partition to have downed itself and stopped its entities.
    pub removal_margin: Duration,
    /// Keep each shard's running entities in the store and start them wherever the shard
    /// starts next, without waiting for a message (default off). Entities are then never
    /// passivated for being idle (`passivate_idle_after` is not used); one that asks to stop is
    /// forgotten. See `docs/sharding-design.md`, "Remembered entities".
    pub remember_entities: bool,
    /// Keep the coordinator's homes in the store, by node address, and after the table is lost
    /// with every replica (a full-cluster restart) put each shard back on the node at its saved
    /// address (default off; the runtime turns it on where the store runs). See
    /// `docs/sharding-design.md`, "Homes kept in the store".
    pub keep_homes: bool,
}

impl ShardingConfig {
    /// Defaults for entity type `type_name`, hosted on every member.
    pub fn new(type_name: impl Into<String>) -> Self {
        Self {
            type_name: type_name.into(),
            role: None,
            number_of_shards: DEFAULT_NUMBER_OF_SHARDS,
            buffer_size: DEFAULT_BUFFER_SIZE,
            passivate_idle_after: Some(DEFAULT_PASSIVATE_IDLE_AFTER),
            retry_interval: Duration::from_secs(2),
            handoff_timeout: Duration::from_secs(60),
            shard_start_timeout: Duration::from_secs(10),
            rebalance_interval: Duration::from_secs(10),
            rebalance_absolute_limit: 20,
            rebalance_relative_limit: 0.1,
            min_regions: 1,
            removal_margin: convoke_singleton::DEFAULT_REMOVAL_MARGIN,
            remember_entities: false,
            keep_homes: false,
        }
    }

    /// How long an entity may go without a message before it is stopped: `None` when
    /// entities are remembered, which stop only when they ask to.
    pub fn idle_after(&self) -> Option<Duration> {
        if self.remember_entities { None } else { self.passivate_idle_after }
    }

    /// The allocation rule these settings ask for.
    pub fn allocation(&self) -> LeastShardAllocation {
        LeastShardAllocation::new(self.rebalance_absolute_limit, self.rebalance_relative_limit)
    }
}

/// Region → coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorMsg {
    /// A region that hosts shards asks to be known (repeated until RegisterAck), listing the
    /// shards it hosts: a coordinator whose table lost them (a majority of the replicas gone at
    /// once) takes them back rather than allocating them elsewhere.
    Register {
        /// The shards the region hosts now.
        hosted: Vec<ShardId>,
    },
    /// A proxy region (no role here) asks to be known; it hosts nothing.
    RegisterProxy,
    /// Where does this shard live?
    GetShardHome(ShardId),
    /// The region has started hosting the shard (answer to HostShard).
    ShardStarted(ShardId),
    /// The region no longer routes to the shard's old home (answer to BeginHandOff).
    BeginHandOffAck(ShardId),
    /// The region has stopped every entity of the shard (answer to HandOff).
    ShardStopped(ShardId),
    /// The region is shutting down: hand all its shards off, allocate it nothing new (repeated).
    GracefulShutdownReq,
    /// The region has stopped; forget it now rather than at the node's removal.
    RegionStopped,
}

/// Coordinator → region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionMsg {
    /// The coordinator knows the region; it will answer GetShardHome.
    RegisterAck,
    /// A coordinator has just started (possibly on the node of an earlier one, which regions
    /// cannot tell from the membership): register again, listing the shards hosted here.
    RegisterAgain,
    /// The shard lives in the region of that node.
    ShardHome {
        /// The shard.
        shard: ShardId,
        /// The node whose region hosts it.
        region: UniqueAddress,
    },
    /// Known homes, sent after registration so the region need not ask for each.
    ShardHomes(Vec<(ShardId, UniqueAddress)>),
    /// Host this shard.
    HostShard(ShardId),
    /// The shard is about to move: forget its home, buffer its messages, acknowledge.
    BeginHandOff(ShardId),
    /// Stop every entity of the shard, then answer ShardStopped.
    HandOff(ShardId),
}

impl CoordinatorMsg {
    /// The message's name, for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Register { .. } => "Register",
            Self::RegisterProxy => "RegisterProxy",
            Self::GetShardHome(_) => "GetShardHome",
            Self::ShardStarted(_) => "ShardStarted",
            Self::BeginHandOffAck(_) => "BeginHandOffAck",
            Self::ShardStopped(_) => "ShardStopped",
            Self::GracefulShutdownReq => "GracefulShutdownReq",
            Self::RegionStopped => "RegionStopped",
        }
    }
}

impl RegionMsg {
    /// The message's name, for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RegisterAck => "RegisterAck",
            Self::RegisterAgain => "RegisterAgain",
            Self::ShardHome { .. } => "ShardHome",
            Self::ShardHomes(_) => "ShardHomes",
            Self::HostShard(_) => "HostShard",
            Self::BeginHandOff(_) => "BeginHandOff",
            Self::HandOff(_) => "HandOff",
        }
    }
}

#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod tests;
