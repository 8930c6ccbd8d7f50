//! Cluster Bootstrap in the simulation: the real [`BootstrapMachine`] of `convoke-bootstrap` in
//! every process started to bootstrap, over a modelled discovery service and modelled HTTP probes
//! of the contact points. The simulator decides nothing itself: it answers the machine's lookups
//! and probes, and carries out its join.
//!
//! The model:
//! - **Contact points.** Slot `i` serves its management API (and `/bootstrap/seed-nodes`) at
//!   [`contact_point`]`(i)`: the IP `10.0.0.0 + i` on port [`MANAGEMENT_PORT`], so that the
//!   contact points are ordered as the slots are. A restarted process keeps its slot's contact
//!   point, as it keeps its cluster address.
//! - **Discovery.** A lookup is answered after a latency drawn uniformly from
//!   [`DiscoveryModel::latency_min`]`..=`[`latency_max`](DiscoveryModel::latency_max) with the
//!   contact points of the pods of the service ([`BootstrapConfig::service`]) that are listed at
//!   that moment: a process is listed from a delay after it started (drawn per incarnation from
//!   `0..=`[`DiscoveryModel::register_delay`]) for as long as it runs or is paused, so the answers
//!   change as pods start, crash and restart. While faults are on
//!   ([`BootstrapConfig::faults_until`]) each answer leaves out each pod with probability
//!   [`DiscoveryModel::partial`], a lookup fails with probability [`DiscoveryModel::failure`],
//!   and one outlasts its timeout (`bootstrap.resolve_timeout`, answered as a timeout error) with
//!   probability [`DiscoveryModel::slow`].
//! - **Probes.** A probe travels to its target in one one-way latency and back in another
//!   ([`ProbeModel`]: `min + Exp(mean)`, capped, as the membership network does). At its arrival it
//!   is answered with what the target's core would answer on `/bootstrap/seed-nodes` then
//!   ([`seed_nodes`], the rule of the management route): the reachable Up, WeaklyUp and Joining
//!   members, the first five by address, when the target is a member of a cluster, else none. A
//!   target with no process refuses the connection; a paused target, or one cut off by a
//!   partition or a clog of the membership network, does not answer, and the probe ends with its
//!   timeout error at `bootstrap.contact_point.probe_timeout`; so does a probe whose answer would
//!   come later than that. While faults are on, a probe is lost with probability
//!   [`ProbeModel::loss`] (a timeout error) and slowed by up to [`ProbeModel::slow_delay`] with
//!   probability [`ProbeModel::slow`]. Every lookup and probe is answered exactly once.
//! - **The machine's process.** Its inputs carry its node's drifting clock. A paused process
//!   takes the inputs that reached it (timers, answers) when it resumes; a crashed or restarted
//!   one loses its machine and whatever was in flight for it. A process that becomes a member by
//!   other means (a join by seed nodes, the operator) stops its machine, as the runtime does.
//! - **The join.** `JoinSelf` joins the node to itself; `JoinOthers(seeds)` joins the seed
//!   nodes other than the node itself, or the node itself if none is left — what the runtime's
//!   `src/bootstrap.rs` does with the decision.
//!
//! B1 ([`crate::invariants::OneClusterFormed`]) is checked after every join the layer makes and at
//! every look the driver asks for ([`crate::world::Sim::bootstrap_look`]), while the formation is
//! watched. The layer draws from a random stream of its own and hashes its steps apart, so a run
//! without it is the same run, with the same trace hash, as before it existed.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use convoke_bootstrap::{
    BootstrapMachine, BootstrapSettings, ContactPoint, LocalNode, SeedNodes, SelfContactPoint,
};
use convoke_membership::{Address, Cluster};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::invariants::OneClusterFormed;
use crate::queue::TimerSlot;
use crate::trace::TraceHash;

/// The management port of every simulated node: where its contact point listens.
pub const MANAGEMENT_PORT: u16 = 8558;
/// The service every bootstrapping process looks up.
pub const SERVICE: &str = "convoke-sim";
/// How often a paused process is looked at for the inputs that wait for it.
pub(crate) const PAUSED_POLL: Duration = Duration::from_millis(50);

/// The IP of slot `i`'s contact point: `10.0.0.0 + i`.
fn ip(slot: usize) -> Ipv4Addr {
    let i = u32::try_from(slot).expect("slot fits an IPv4 host part");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + i)
}

/// The contact point of slot `slot`, as discovery lists it.
pub fn contact_point(slot: usize) -> ContactPoint {
    let ip = ip(slot);
    ContactPoint::new(ip.to_string(), Some(MANAGEMENT_PORT), Some(IpAddr::V4(ip)))
}

/// The slot whose contact point is `cp`, if any.
pub fn slot_of_contact_point(cp: &ContactPoint, slots: usize) -> Option<usize> {
    let IpAddr::V4(v4) = cp.address? else { return None };
    let i = u32::from(v4).checked_sub(u32::from(Ipv4Addr::new(10, 0, 0, 0)))?;
    let i = usize::try_from(i).ok()?;
    (i < slots && cp.port == Some(MANAGEMENT_PORT)).then_some(i)
}

/// What the runtime knows about the node of slot `slot`, whose cluster address is `address`.
pub fn local_node(slot: usize, address: &Address) -> LocalNode {
    LocalNode::new(
        address.system(),
        SelfContactPoint::new(ip(slot).to_string(), MANAGEMENT_PORT),
        (address.host().to_owned(), address.port()),
    )
}

/// What `core` answers on `GET /bootstrap/seed-nodes`: the runtime's rule,
/// [`SeedNodes::advertised`], on its state.
pub fn seed_nodes(core: &Cluster) -> SeedNodes {
    SeedNodes::advertised(&core.state())
}

/// The modelled discovery service.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiscoveryModel {
    /// The shortest time a lookup takes.
    pub latency_min: Duration,
    /// The longest time a lookup takes (unless slowed past its timeout).
    pub latency_max: Duration,
    /// A pod is listed from this long at most after its process started (uniform per
    /// incarnation).
    pub register_delay: Duration,
    /// While faults are on: the probability that an answer leaves out a given pod.
    pub partial: f64,
    /// Whether the pods an answer leaves out are drawn once per (looking node, pod) for the whole
    /// fault window, as a stale cache per node would have it, rather than per answer.
    pub sticky: bool,
    /// While faults are on: the probability that a lookup fails.
    pub failure: f64,
    /// While faults are on: the probability that a lookup outlasts its timeout.
    pub slow: f64,
}

impl DiscoveryModel {
    /// A quick and faithful discovery: 1–20 ms, every running pod listed at once.
    pub fn quiet() -> Self {
        Self {
            latency_min: Duration::from_millis(1),
            latency_max: Duration::from_millis(20),
            register_delay: Duration::ZERO,
            partial: 0.0,
            sticky: false,
            failure: 0.0,
            slow: 0.0,
        }
    }
}

/// The modelled HTTP probes of contact points.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeModel {
    /// The smallest one-way latency.
    pub latency_min: Duration,
    /// The mean of the exponential part added to `latency_min`.
    pub latency_mean: Duration,
    /// The cap on the one-way latency (before any slow-down).
    pub latency_max: Duration,
    /// While faults are on: the probability that a probe is lost (it ends with its timeout).
    pub loss: f64,
    /// While faults are on: the probability that a probe's answer is slowed down.
    pub slow: f64,
    /// The largest slow-down (uniform), which may take a probe past its timeout.
    pub slow_delay: Duration,
}

impl ProbeModel {
    /// A quiet LAN: 0.2 ms + Exp(1 ms), at most 10 ms one way; nothing lost or slowed.
    pub fn lan() -> Self {
        Self {
            latency_min: Duration::from_micros(200),
            latency_mean: Duration::from_millis(1),
            latency_max: Duration::from_millis(10),
            loss: 0.0,
            slow: 0.0,
            slow_delay: Duration::ZERO,
        }
    }

    /// The longest round trip of a probe that is not slowed down.
    pub fn round_trip_max(&self) -> Duration {
        self.latency_max * 2
    }

    fn sample_one_way(&self, rng: &mut ChaCha8Rng) -> Duration {
        crate::net::latency(self.latency_min, self.latency_mean, self.latency_max, rng)
    }
}

/// The bootstrap layer's settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BootstrapConfig {
    /// Every bootstrapping process's `[bootstrap]` settings.
    #[serde(skip)]
    pub settings: BootstrapSettings,
    /// The discovery service.
    pub discovery: DiscoveryModel,
    /// The probes.
    pub probes: ProbeModel,
    /// The slots of the service: the pods discovery lists (when they run).
    pub service: Vec<usize>,
    /// Until when (global time) the faults of the discovery and probe models are on.
    pub faults_until: Duration,
}

impl BootstrapConfig {
    /// The slots `service`, each expecting all of them (`required_contact_point_nr` = their
    /// number, the recommended setting) and the other settings at their defaults, over a quiet
    /// discovery and LAN.
    pub fn new(service: Vec<usize>) -> Self {
        let settings = BootstrapSettings {
            service_name: SERVICE.to_owned(),
            required_contact_point_nr: service.len().max(1),
            ..BootstrapSettings::default()
        };
        Self {
            settings,
            discovery: DiscoveryModel::quiet(),
            probes: ProbeModel::lan(),
            service,
            faults_until: Duration::ZERO,
        }
    }
}

/// The events of the layer, in the world's queue.
#[derive(Debug)]
pub enum BootstrapEvent {
    /// The machine's timer in `slot`, of this arming.
    Timer {
        /// The slot.
        slot: usize,
        /// The arming.
        generation: u64,
    },
    /// The lookup of incarnation `incarnation` in `slot` ends now.
    Lookup {
        /// The slot.
        slot: usize,
        /// The incarnation that asked.
        incarnation: u32,
        /// How it ends: `None` answered (with what is listed now), or the error.
        error: Option<LookupFailure>,
    },
    /// A probe from `slot` reaches `target`'s contact point.
    ProbeArrives {
        /// The prober's slot.
        slot: usize,
        /// The prober's incarnation.
        incarnation: u32,
        /// The probed slot.
        target: usize,
        /// When the probe times out.
        deadline: Duration,
        /// The latency of the way back.
        back: Duration,
    },
    /// A probe's outcome reaches the prober.
    ProbeAnswer {
        /// The prober's slot.
        slot: usize,
        /// The prober's incarnation.
        incarnation: u32,
        /// The probed contact point.
        target: ContactPoint,
        /// What came back.
        outcome: ProbeOutcome,
    },
    /// A look at a paused process for the inputs waiting for it.
    Resume {
        /// The slot.
        slot: usize,
    },
}

/// How a modelled lookup fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupFailure {
    /// The discovery method failed.
    Failed,
    /// No answer within `bootstrap.resolve_timeout`.
    Timeout,
}

/// What a probe brings back.
#[derive(Clone, Debug)]
pub enum ProbeOutcome {
    /// The target's answer.
    Answer(SeedNodes),
    /// No answer within the probe timeout.
    Timeout,
    /// The connection was refused: no process listens there.
    Refused,
}

/// What a bootstrapping process decided, for the reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decided {
    /// The slot.
    pub slot: usize,
    /// The incarnation.
    pub node: String,
    /// When, in seconds.
    pub at_s: f64,
    /// `JoinSelf` or `JoinOthers`.
    pub decision: &'static str,
    /// The seed nodes of `JoinOthers`.
    pub seeds: Vec<String>,
    /// Whether the node joined itself: `JoinSelf`, or `JoinOthers` naming only itself.
    pub joined_self: bool,
}

/// What the layer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BootstrapStats {
    /// Machines started.
    pub machines: u64,
    /// Machines lost with their process (crashed, stopped or restarted before deciding).
    pub machines_lost: u64,
    /// Machines stopped because their node became a member by other means.
    pub stopped: u64,
    /// Lookups asked for.
    pub lookups: u64,
    /// Lookups that failed or timed out.
    pub lookups_failed: u64,
    /// Probes asked for.
    pub probes: u64,
    /// Probes that ended with their timeout (lost, slow, to a paused or cut-off target).
    pub probes_timed_out: u64,
    /// Probes refused (no process at the target).
    pub probes_refused: u64,
    /// Nodes that formed a new cluster (joined themselves).
    pub joins_self: u64,
    /// Nodes that joined an existing cluster's seed nodes.
    pub joins_others: u64,
}

/// The layer's state of one slot.
#[derive(Debug, Default)]
pub(crate) struct BootSlot {
    /// The machine of the current incarnation, until it decides or its process ends.
    pub(crate) machine: Option<BootstrapMachine>,
    /// The incarnation the machine belongs to.
    pub(crate) incarnation: u32,
    pub(crate) timer: TimerSlot,
    /// Inputs that reached the paused process, in order.
    pub(crate) deferred: Vec<BootstrapEvent>,
    /// Whether a [`BootstrapEvent::Resume`] look is scheduled.
    pub(crate) polling: bool,
    /// (incarnation, since when discovery lists it).
    pub(crate) listed: Option<(u32, Duration)>,
}

/// The bootstrap layer of a world.
#[derive(Debug)]
pub struct Bootstraps {
    config: BootstrapConfig,
    slots: Vec<BootSlot>,
    rng: ChaCha8Rng,
    trace: TraceHash,
    /// What the layer did.
    pub stats: BootstrapStats,
    /// Every decision, in order.
    pub decisions: Vec<Decided>,
    /// The B1 checker, while the formation is watched.
    pub(crate) checker: Option<OneClusterFormed>,
    /// With sticky partial answers: per looking slot, the pods its answers leave out.
    hidden: Vec<Vec<bool>>,
}

impl Bootstraps {
    /// The layer over `n` slots, drawing from `rng`; B1 is watched from the start.
    pub fn new(n: usize, config: BootstrapConfig, rng: ChaCha8Rng) -> Self {
        Self {
            config,
            slots: (0..n).map(|_| BootSlot::default()).collect(),
            rng,
            trace: TraceHash::new(),
            stats: BootstrapStats::default(),
            decisions: Vec::new(),
            checker: Some(OneClusterFormed),
            hidden: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &BootstrapConfig {
        &self.config
    }

    /// The trace hash of the layer's steps.
    pub fn trace_hash(&self) -> u64 {
        std::hash::Hasher::finish(&self.trace)
    }

    /// Whether the machine of `slot` still runs (its node has not decided).
    pub fn is_bootstrapping(&self, slot: usize) -> bool {
        self.slots[slot].machine.is_some()
    }

    /// Whether any machine still runs.
    pub fn any_bootstrapping(&self) -> bool {
        self.slots.iter().any(|s| s.machine.is_some())
    }

    /// Whether B1 is still watched.
    pub fn is_watching(&self) -> bool {
        self.checker.is_some()
    }

    pub(crate) fn slot(&self, i: usize) -> &BootSlot {
        &self.slots[i]
    }

    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut BootSlot {
        &mut self.slots[i]
    }

    pub(crate) fn hash(&mut self, now: Duration, slot: usize, what: &str) {
        self.trace.step(now, slot, what);
    }

    pub(crate) fn seed(&mut self) -> u64 {
        self.rng.random()
    }

    fn faulty(&self, now: Duration) -> bool {
        now < self.config.faults_until
    }

    fn chance(&mut self, now: Duration, p: f64) -> bool {
        self.faulty(now) && p > 0.0 && self.rng.random::<f64>() < p
    }

    /// How a lookup asked now ends: when (global time) and with which failure, if any.
    pub(crate) fn lookup_outcome(&mut self, now: Duration) -> (Duration, Option<LookupFailure>) {
        let d = &self.config.discovery;
        let timeout = self.config.settings.resolve_timeout;
        let (lo, hi) = (d.latency_min, d.latency_max.max(d.latency_min));
        let (failure, slow) = (d.failure, d.slow);
        let nanos = |x: Duration| u64::try_from(x.as_nanos()).unwrap_or(u64::MAX);
        let latency = Duration::from_nanos(self.rng.random_range(nanos(lo)..=nanos(hi)));
        if self.chance(now, slow) || latency >= timeout {
            return (now + timeout, Some(LookupFailure::Timeout));
        }
        let error = self.chance(now, failure).then_some(LookupFailure::Failed);
        (now + latency, error)
    }

    /// Whether `pod`, listed now, is left out of the answer being made for `observer`.
    pub(crate) fn left_out(&mut self, now: Duration, observer: usize, pod: usize) -> bool {
        let p = self.config.discovery.partial;
        if !self.config.discovery.sticky {
            return self.chance(now, p);
        }
        if self.hidden.is_empty() && p > 0.0 {
            let n = self.slots.len();
            self.hidden =
                (0..n).map(|_| (0..n).map(|_| self.rng.random::<f64>() < p).collect()).collect();
        }
        self.faulty(now) && self.hidden.get(observer).is_some_and(|h| h[pod])
    }

    /// Since when discovery lists incarnation `incarnation` of `slot`, started at `started_at`.
    pub(crate) fn listed_from(
        &mut self,
        slot: usize,
        incarnation: u32,
        started: Duration,
    ) -> Duration {
        if let Some((inc, from)) = self.slots[slot].listed
            && inc == incarnation
        {
            return from;
        }
        let max =
            u64::try_from(self.config.discovery.register_delay.as_nanos()).unwrap_or(u64::MAX);
        let delay = if max > 0 { self.rng.random_range(0..=max) } else { 0 };
        let from = started + Duration::from_nanos(delay);
        self.slots[slot].listed = Some((incarnation, from));
        from
    }

    /// How a probe sent now travels: `None` when it is lost; otherwise the latencies there and
    /// back.
    pub(crate) fn probe_path(&mut self, now: Duration) -> Option<(Duration, Duration)> {
        let loss = self.config.probes.loss;
        if self.chance(now, loss) {
            return None;
        }
        let there = self.config.probes.sample_one_way(&mut self.rng);
        let mut back = self.config.probes.sample_one_way(&mut self.rng);
        let slow = self.config.probes.slow;
        if self.chance(now, slow) {
            let max = u64::try_from(self.config.probes.slow_delay.as_nanos()).unwrap_or(u64::MAX);
            back += Duration::from_nanos(self.rng.random_range(0..=max));
        }
        Some((there, back))
    }
}

#[cfg(test)]
mod tests;
