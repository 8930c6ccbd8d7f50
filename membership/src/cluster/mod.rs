//! The core state machine, [`Cluster`]: one node's membership, driven by the caller.
//!
//! Layout: this file holds the type, its inputs and outputs and the timer table; `join.rs` the
//! join handshake and seed-node processes; `gossiping.rs` gossip sending, receiving and target
//! selection; `leader.rs` leader actions, the reaper and the self-shutdown checks; `commands.rs`
//! leave, down and prepare-for-full-shutdown; `downing.rs` the split-brain resolver's tick, downs
//! and lease requests.

mod commands;
mod downing;
mod gossiping;
mod join;
mod leader;

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::address::{Address, UniqueAddress};
use crate::config::{Config, ConfigError};
use crate::event::{ClusterEvent, CurrentClusterState, diff};
use crate::gossip::{Gossip, MemberTable, WallMillis};
use crate::heartbeat::{HeartbeatSender, HeartbeatSettings};
use crate::member::MemberStatus;
use crate::message::{Message, Transmit};
use crate::phi::PhiSettings;
use crate::reachability::Reachability;
use crate::sbr::{SplitBrainResolver, TICK_INTERVAL};
use crate::state::MembershipState;
use crate::version::AppVersion;

use self::join::SeedProcess;

/// Why the core asks its driver to shut the node down.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownReason {
    /// This node left gracefully: it saw itself Exiting and told the leaders.
    Left,
    /// This node was marked Down.
    Downed,
    /// Joining the seed nodes did not succeed within
    /// `cluster.shutdown_after_unsuccessful_join_seed_nodes`.
    JoinUnsuccessful,
    /// The cluster's configuration is incompatible with this node's.
    IncompatibleConfig(String),
    /// This node asked to join and then did not run for longer than
    /// `split_brain_resolver.stable_after` before it was welcomed. The cluster may have admitted
    /// and then removed it meanwhile, and a removed incarnation is never let back in, so it stops;
    /// restarted, it joins with a new incarnation.
    PausedWhileJoining,
}

impl std::fmt::Display for ShutdownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Left => f.write_str("left the cluster gracefully"),
            Self::Downed => f.write_str("this node was downed"),
            Self::JoinUnsuccessful => f.write_str(
                "could not join the seed nodes within \
                 cluster.shutdown_after_unsuccessful_join_seed_nodes",
            ),
            Self::IncompatibleConfig(why) => {
                write!(f, "the cluster's configuration is incompatible: {why}")
            }
            Self::PausedWhileJoining => f.write_str(
                "this node did not run for longer than split_brain_resolver.stable_after \
                 after asking to join; the cluster may have removed it meanwhile",
            ),
        }
    }
}

/// Why a join command was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The address belongs to another cluster system.
    #[error("cannot join {address}: its system name differs from this node's {ours:?}")]
    SystemMismatch {
        /// The address given.
        address: Address,
        /// This node's system name.
        ours: String,
    },
    /// This node is already a member of a cluster.
    #[error("cannot join {address}: this node is already a member of a cluster")]
    AlreadyMember {
        /// The address given.
        address: Address,
    },
    /// No seed nodes were given.
    #[error("cannot join: the seed-node list is empty")]
    NoSeedNodes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Uninitialized,
    TryingToJoin { join_with: Address },
    Initialized,
}

/// The core's timers; `poll_timeout` returns the earliest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Gossip,
    GossipSpeedup1,
    GossipSpeedup2,
    LeaderActions,
    Reaper,
    Heartbeat,
    SeedProcess,
    JoinRetry,
    JoinGiveUp,
    Downing,
    LeaseAcquire,
}

const TIMERS: [Timer; 11] = [
    Timer::Gossip,
    Timer::GossipSpeedup1,
    Timer::GossipSpeedup2,
    Timer::LeaderActions,
    Timer::Reaper,
    Timer::Heartbeat,
    Timer::SeedProcess,
    Timer::JoinRetry,
    Timer::JoinGiveUp,
    Timer::Downing,
    Timer::LeaseAcquire,
];

impl crate::timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

type Timers = crate::timers::Timers<Timer, { TIMERS.len() }>;

/// How many nodes get a full gossip when this node is downed or leaves.
const GOSSIP_TO_RANDOM_NODES: usize = 5;
/// Leader ticks a Down node waits for the Down to spread before it shuts down anyway.
const MAX_TICKS_BEFORE_SHUTDOWN_WHEN_DOWN: u32 = 4;

/// One node's cluster membership: a deterministic state machine with no IO.
///
/// # Call protocol
/// 1. Build it with [`Cluster::new`], passing the current time.
/// 2. Feed it inputs, each with the current time `now` (monotonic, never decreasing):
///    - [`handle_message`](Self::handle_message) for every message a peer sent (the transport
///      tells which node it came from), or [`handle_queued_message`](Self::handle_queued_message)
///      when it waited in a queue, so stale gossip can be dropped;
///    - [`handle_timeout`](Self::handle_timeout) whenever the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed;
///    - commands: [`join_seed_nodes`](Self::join_seed_nodes), [`join`](Self::join),
///      [`leave`](Self::leave), [`down`](Self::down),
///      [`prepare_for_full_shutdown`](Self::prepare_for_full_shutdown);
///    - [`handle_lease_result`](Self::handle_lease_result) with the answer to every lease request
///      (lease-majority strategy only), and
///      [`handle_quarantined_by`](Self::handle_quarantined_by) from the remote layer.
/// 3. After every input, drain the outputs: [`poll_transmit`](Self::poll_transmit) until `None`
///    (send each message), [`poll_event`](Self::poll_event) until `None` (publish each event),
///    [`poll_lease_request`](Self::poll_lease_request) until `None` (start each lease operation),
///    [`poll_downing_decision`](Self::poll_downing_decision) until `None` (log each), then
///    re-arm the timer with [`poll_timeout`](Self::poll_timeout), and check
///    [`shutdown_reason`](Self::shutdown_reason): once it is `Some`, the core ignores all further
///    inputs and the driver should stop the node after sending what is queued.
///
/// The core never reads a clock or a global RNG: randomness comes from `Config::seed` mixed with
/// this node's uid, so the same inputs give the same outputs, bit for bit.
#[derive(Debug)]
pub struct Cluster {
    config: Config,
    self_node: UniqueAddress,
    self_roles: BTreeSet<String>,
    app_version: AppVersion,
    rng: ChaCha8Rng,
    start: Instant,
    wall_at_start: WallMillis,
    phase: Phase,
    latest: Arc<Gossip>,
    published: Arc<Gossip>,
    seed_nodes: Vec<Address>,
    seed_process: Option<SeedProcess>,
    exiting_confirmed: BTreeSet<UniqueAddress>,
    exiting_done: bool,
    leader_action_counter: u32,
    self_down_counter: u32,
    preparing_for_shutdown: bool,
    heartbeat: HeartbeatSender,
    heartbeat_active: bool,
    /// The member table the heartbeat ring was last built from (its data center's members).
    heartbeat_members: MemberTable,
    /// The members of `heartbeat_members` that the ring treats as unreachable, and the table
    /// they were read from.
    heartbeat_unreachable: BTreeSet<UniqueAddress>,
    heartbeat_reachability: Reachability,
    sbr: Option<SplitBrainResolver>,
    /// The time of the latest input: a gap longer than `stable_after` between two is a pause.
    last_input: Option<Instant>,
    /// After such a pause, the heartbeat sequence number then: an answer to a later heartbeat is
    /// word from a member (see [`SplitBrainResolver::handle_resumed`]). A gossip is not: it may
    /// have been sent before the pause.
    awaiting_contact_after: Option<u64>,
    /// Whether this node has sent Join to another node (see [`Self::note_input`]).
    asked_to_join: bool,
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<ClusterEvent>,
    shutdown: Option<ShutdownReason>,
}

impl Cluster {
    /// A node that has not joined any cluster yet. `wall_clock_ms` is the wall-clock time at `now`
    /// (milliseconds since the Unix epoch); it only ages tombstones.
    ///
    /// # Errors
    /// When the configuration is invalid, or `self_node`'s system differs from
    /// `cluster.system_name`.
    pub fn new(
        config: Config,
        self_node: UniqueAddress,
        now: Instant,
        wall_clock_ms: WallMillis,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if self_node.address.system() != config.system_name {
            return Err(ConfigError::new(
                "cluster.system_name",
                config.system_name.clone(),
                format!("the system of this node's address {}", self_node.address),
            ));
        }
        let fd = &config.failure_detector;
        let settings = HeartbeatSettings {
            phi: PhiSettings {
                threshold: fd.threshold,
                max_sample_size: fd.max_sample_size,
                min_std_deviation: fd.min_std_deviation,
                acceptable_heartbeat_pause: fd.acceptable_heartbeat_pause,
                first_heartbeat_estimate: fd.heartbeat_interval,
            },
            heartbeat_interval: fd.heartbeat_interval,
            expected_response_after: fd.expected_response_after,
            monitored_by_nr_of_members: fd.monitored_by_nr_of_members,
        };
        let mut timers = Timers::default();
        for (t, interval) in [
            (Timer::Gossip, config.gossip_interval),
            (Timer::LeaderActions, config.leader_actions_interval),
            (Timer::Reaper, config.unreachable_nodes_reaper_interval),
        ] {
            timers.set(t, now + interval.max(config.periodic_tasks_initial_delay));
        }
        let sbr = SplitBrainResolver::new(&config, self_node.clone(), now);
        if sbr.is_some() {
            timers.set(Timer::Downing, now + TICK_INTERVAL);
        }
        let empty = Arc::new(Gossip::empty());
        Ok(Self {
            self_roles: config.self_roles(),
            app_version: AppVersion::parse(&config.app_version),
            rng: ChaCha8Rng::seed_from_u64(config.seed ^ self_node.uid.get()),
            heartbeat: HeartbeatSender::new(self_node.clone(), settings),
            config,
            self_node,
            start: now,
            wall_at_start: wall_clock_ms,
            phase: Phase::Uninitialized,
            latest: empty.clone(),
            published: empty,
            seed_nodes: Vec::new(),
            seed_process: None,
            exiting_confirmed: BTreeSet::new(),
            exiting_done: false,
            leader_action_counter: 0,
            self_down_counter: 0,
            preparing_for_shutdown: false,
            heartbeat_active: false,
            heartbeat_members: MemberTable::default(),
            heartbeat_unreachable: BTreeSet::new(),
            heartbeat_reachability: Reachability::new(),
            sbr,
            last_input: None,
            awaiting_contact_after: None,
            asked_to_join: false,
            timers,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            shutdown: None,
        })
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// A message from `from` arrived now.
    pub fn handle_message(&mut self, now: Instant, from: UniqueAddress, message: Message) {
        self.handle_queued_message(now, now, from, message);
    }

    /// A message from `from` that arrived at `received_at` is processed now. Gossip that waited
    /// longer than `cluster.gossip_time_to_live` is dropped (overload protection). A message that
    /// names a sender other than `from` (the node the transport authenticated) is dropped, so a
    /// peer cannot speak for another node.
    pub fn handle_queued_message(
        &mut self,
        now: Instant,
        received_at: Instant,
        from: UniqueAddress,
        message: Message,
    ) {
        if self.shutdown.is_some() {
            return;
        }
        let spoofed = message.claimed_sender().is_some_and(|s| *s != from)
            || message.claimed_address().is_some_and(|a| *a != from.address);
        if spoofed {
            return;
        }
        self.note_input(now);
        if self.latest.tombstones().contains_key(&from) {
            self.answer_removed_incarnation(&from, &message);
            return;
        }
        let stale = now.saturating_duration_since(received_at) > self.config.gossip_time_to_live;
        match message {
            Message::InitJoin { config } => self.on_init_join(from, &config),
            Message::InitJoinAck { address, config_check } => {
                self.on_init_join_ack(now, address, config_check);
            }
            Message::InitJoinNack { address } => self.on_init_join_nack(now, &address),
            Message::Join { node, roles, app_version } => {
                self.on_join(now, node, roles, app_version);
            }
            Message::Welcome { from, gossip } => self.on_welcome(now, from, gossip),
            Message::Gossip { from, to, gossip } if !stale => {
                self.on_gossip(now, from, &to, gossip);
            }
            Message::Gossip { .. } => {}
            Message::GossipStatus { from, version, seen_digest } => {
                self.on_gossip_status(&from, &version, &seen_digest);
            }
            Message::Heartbeat { sequence_nr, .. } => {
                let rsp = Message::HeartbeatRsp { from: self.self_node.clone(), sequence_nr };
                self.send(from.address, rsp);
            }
            Message::HeartbeatRsp { from, sequence_nr, .. } => {
                if self.heartbeat_active {
                    self.heartbeat.handle_response(&from, now);
                }
                if self.awaiting_contact_after.is_some_and(|seq| sequence_nr > seq)
                    && self.latest.has_member(&from)
                {
                    self.heard_from_member(now);
                }
            }
            Message::ExitingConfirmed { node } => {
                if self.latest.has_member(&node) {
                    self.exiting_confirmed.insert(node);
                }
            }
        }
        self.publish(now);
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.shutdown.is_some() {
            return;
        }
        self.note_input(now);
        for timer in TIMERS {
            if self.shutdown.is_some() || !self.timers.take_due(timer, now) {
                continue;
            }
            match timer {
                Timer::Gossip => {
                    self.timers.set(timer, now + self.config.gossip_interval);
                    self.gossip_tick(now);
                }
                Timer::GossipSpeedup1 | Timer::GossipSpeedup2 => {
                    if self.is_initialized() && self.needs_speedup() {
                        self.gossip_once();
                    }
                }
                Timer::LeaderActions => {
                    self.timers.set(timer, now + self.config.leader_actions_interval);
                    if self.is_initialized() {
                        self.leader_actions(now);
                    }
                }
                Timer::Reaper => {
                    self.timers.set(timer, now + self.config.unreachable_nodes_reaper_interval);
                    if self.is_initialized() {
                        self.reap_unreachable(now);
                    }
                }
                Timer::Heartbeat => {
                    self.timers.set(timer, now + self.config.failure_detector.heartbeat_interval);
                    self.heartbeat_tick(now);
                }
                Timer::SeedProcess => self.seed_process_tick(now),
                Timer::JoinRetry => self.join_retry(now),
                Timer::JoinGiveUp => {
                    if !self.is_initialized() {
                        self.request_shutdown(ShutdownReason::JoinUnsuccessful);
                    }
                }
                Timer::Downing => self.downing_tick(now),
                Timer::LeaseAcquire => self.downing_acquire_lease(now),
            }
            self.publish(now);
        }
        if self.heartbeat_active && self.shutdown.is_none() {
            self.heartbeat.handle_timeout(now);
        }
    }

    // ---- outputs ------------------------------------------------------------------------------

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        pop_and_trim(&mut self.transmits)
    }

    /// The next cluster event.
    pub fn poll_event(&mut self) -> Option<ClusterEvent> {
        pop_and_trim(&mut self.events)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called; `None` after shutdown.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.shutdown.is_some() {
            return None;
        }
        let hb = self.heartbeat_active.then(|| self.heartbeat.next_deadline()).flatten();
        [self.timers.earliest(), hb].into_iter().flatten().min()
    }

    /// Set once the core wants the node shut down; it then ignores all inputs.
    pub fn shutdown_reason(&self) -> Option<&ShutdownReason> {
        self.shutdown.as_ref()
    }

    // ---- views --------------------------------------------------------------------------------

    /// This node's identity.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// This node's address.
    pub fn self_address(&self) -> &Address {
        &self.self_node.address
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The current gossip.
    pub fn gossip(&self) -> &Arc<Gossip> {
        &self.latest
    }

    /// The current gossip seen from this node.
    pub fn membership(&self) -> MembershipState<'_> {
        MembershipState::new(&self.latest, &self.self_node, &self.config.data_center)
    }

    /// This node's status (Removed when not a member).
    pub fn self_status(&self) -> MemberStatus {
        self.membership().self_status()
    }

    /// A snapshot of the current state.
    pub fn state(&self) -> CurrentClusterState {
        CurrentClusterState::of(&self.membership(), &self.exiting_confirmed)
    }

    /// Whether the current gossip has converged.
    pub fn convergence(&self) -> bool {
        self.membership().convergence(&self.exiting_confirmed)
    }

    /// The failure detector's φ for a monitored node, for metrics.
    pub fn phi(&self, address: &Address, now: Instant) -> Option<f64> {
        self.heartbeat.phi(address, now)
    }

    /// The failure detector's φ of every monitored node at `now`, in address order, for metrics.
    pub fn monitored_phi(&self, now: Instant) -> Vec<(Address, f64)> {
        let registry = self.heartbeat.registry();
        registry.addresses().filter_map(|a| Some((a.clone(), registry.phi(a, now)?))).collect()
    }

    /// The cluster events that replay the current state from scratch (for new subscribers).
    pub fn initial_events(&self) -> Vec<ClusterEvent> {
        let empty = Gossip::empty();
        let before = MembershipState::new(&empty, &self.self_node, &self.config.data_center);
        diff(&before, &self.membership())
    }

    // ---- internals shared by the submodules ---------------------------------------------------

    fn is_initialized(&self) -> bool {
        self.phase == Phase::Initialized
    }

    fn wall_clock(&self, now: Instant) -> WallMillis {
        self.wall_at_start.saturating_add(now.saturating_duration_since(self.start))
    }

    fn send(&mut self, to: Address, message: Message) {
        if to == self.self_node.address {
            return;
        }
        self.transmits.push_back(Transmit { to, message });
    }

    fn request_shutdown(&mut self, reason: ShutdownReason) {
        if self.shutdown.is_none() {
            self.shutdown = Some(reason);
        }
    }

    /// Installs `g` as a local change: bumps this node's clock entry and marks only self as seen.
    fn update_latest_gossip(&mut self, mut g: Gossip) {
        g.increment_version(&self.self_node);
        g.only_seen(&self.self_node);
        self.set_latest(g);
    }

    fn set_latest(&mut self, g: Gossip) {
        debug_assert!(g.check_invariants().is_ok(), "{:?}", g.check_invariants());
        self.latest = Arc::new(g);
    }

    /// Emits the events between the last published state and now, and keeps the heartbeat ring
    /// in step with the membership.
    fn publish(&mut self, now: Instant) {
        if Arc::ptr_eq(&self.latest, &self.published) {
            return;
        }
        let dc = self.config.data_center.clone();
        let before = MembershipState::new(&self.published, &self.self_node, &dc);
        let after = MembershipState::new(&self.latest, &self.self_node, &dc);
        let events = diff(&before, &after);
        self.published = self.latest.clone();
        self.observe_for_downing(now, &events);
        self.events.extend(events);
        self.sync_heartbeat_ring(now);
    }

    fn sync_heartbeat_ring(&mut self, now: Instant) {
        if !self.heartbeat_active {
            return;
        }
        // Most changes (seen sets, statuses) leave the ring's input as it was, and most of those
        // leave the member table and the reachability table themselves as they were.
        let same_table = self.heartbeat_members.is_of(&self.latest);
        if same_table && self.heartbeat_reachability == *self.latest.reachability() {
            return;
        }
        self.heartbeat_reachability = self.latest.reachability().clone();
        let state = self.membership();
        let unreachable = state.unreachable_members();
        if same_table && unreachable == self.heartbeat_unreachable {
            return;
        }
        // The members of this data center that joined and left the ring, each in member order:
        // one walk over the old and the new table.
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        if !same_table {
            let dc = state.self_dc;
            let mut old = self.heartbeat_members.nodes_in_data_center(dc).peekable();
            for n in self.latest.nodes_in_data_center(dc) {
                while let Some(gone) = old.next_if(|o| *o < n) {
                    removed.push(gone.clone());
                }
                if old.next_if(|o| *o == n).is_none() {
                    added.push(n.clone());
                }
            }
            removed.extend(old.cloned());
        }
        let now_unreachable: Vec<_> =
            unreachable.difference(&self.heartbeat_unreachable).cloned().collect();
        let now_reachable: Vec<_> =
            self.heartbeat_unreachable.difference(&unreachable).cloned().collect();
        self.heartbeat.add_members(added, now);
        for n in &removed {
            self.heartbeat.remove_member(n, now);
        }
        for n in &now_unreachable {
            self.heartbeat.unreachable_member(n, now);
        }
        for n in &now_reachable {
            self.heartbeat.reachable_member(n, now);
        }
        self.heartbeat_members = self.latest.member_table();
        self.heartbeat_unreachable = unreachable;
    }

    /// Notes an input at `now`. The driver calls in at least every second (the resolver's tick),
    /// so a longer gap means the process did not run; one longer than `stable_after` is a pause
    /// the resolver must know of. A node that asked to join and was not welcomed before such a
    /// pause stops: it may have been admitted, downed and removed meanwhile, and then no member
    /// would ever let this incarnation in again.
    fn note_input(&mut self, now: Instant) {
        let gap = self.last_input.map(|last| now.saturating_duration_since(last));
        self.last_input = Some(self.last_input.map_or(now, |last| last.max(now)));
        let stable_after = self.config.split_brain_resolver.stable_after;
        let Some(paused_for) = gap.filter(|g| *g > stable_after) else { return };
        if self.asked_to_join && !self.is_initialized() {
            self.request_shutdown(ShutdownReason::PausedWhileJoining);
            return;
        }
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.handle_resumed(now, paused_for);
            if sbr.contact_deadline().is_some() {
                self.awaiting_contact_after = Some(self.heartbeat.sequence_nr());
            }
        }
    }

    /// Word from a member after a pause (see [`SplitBrainResolver::handle_member_contact`]).
    pub(super) fn heard_from_member(&mut self, now: Instant) {
        if self.awaiting_contact_after.take().is_some()
            && let Some(sbr) = self.sbr.as_mut()
        {
            sbr.handle_member_contact(now);
        }
    }

    fn heartbeat_tick(&mut self, now: Instant) {
        if !self.heartbeat_active || !self.latest.has_member(&self.self_node) {
            return;
        }
        let (sequence_nr, receivers) = self.heartbeat.tick(now);
        for to in receivers {
            let hb = Message::Heartbeat { from: self.self_node.clone(), sequence_nr };
            self.send(to.address, hb);
        }
    }

    fn start_heartbeats(&mut self, now: Instant) {
        if self.heartbeat_active {
            return;
        }
        self.heartbeat_active = true;
        let interval = self.config.failure_detector.heartbeat_interval;
        self.timers
            .set(Timer::Heartbeat, now + interval.max(self.config.periodic_tasks_initial_delay));
        self.sync_heartbeat_ring(now);
    }

    /// Whether a full-cluster shutdown is under way: this node started one, or some member is
    /// preparing for or ready for it. While it is, no member is admitted or moved Up.
    fn preparing_for_shutdown(&self) -> bool {
        self.preparing_for_shutdown
            || self.latest.members().any(|m| m.status().is_shutdown_preparation())
    }

    fn min_nr_of_members_fulfilled(&self) -> bool {
        let g = &self.latest;
        g.len() >= self.config.min_nr_of_members
            && self
                .config
                .role_min_nr_of_members
                .iter()
                .all(|(role, min)| g.members().filter(|m| m.has_role(role)).count() >= *min)
    }
}

/// Pops the front of an output queue, and gives back its buffer once it is drained if it grew
/// past a few entries: a node that took in a large cluster at once (a welcome, a merge after a
/// partition) would otherwise keep room for hundreds of events or messages for good, which adds
/// up over the nodes of one process.
fn pop_and_trim<T>(queue: &mut VecDeque<T>) -> Option<T> {
    const KEPT: usize = 16;
    let front = queue.pop_front();
    if queue.is_empty() && queue.capacity() > KEPT {
        *queue = VecDeque::new();
    }
    front
}

#[cfg(test)]
mod tests;
