//! The simulated world: node slots running membership cores over the modelled network, driven one
//! event at a time in virtual time.
//!
//! A *slot* is a host:port. It holds at most one process at a time, an *incarnation* of a node
//! with its own uid; a restart puts a new incarnation (new uid) in the same slot. Everything that
//! happens is an event in one priority queue ordered by (time, sequence number): a message
//! arriving, a node's timer, or a scheduled action (a fault, a command, the operator's tick, the
//! nemesis). Processing an event that feeds a core is a *step*; after every step the outputs are
//! drained (transmits into the network, events into the trackers), the node's timer is re-armed,
//! and the invariant checkers look at what changed.
//!
//! Randomness comes from independent ChaCha streams derived from the run's seed (network, node
//! uids and core seeds, clocks, operator), so a run is a pure function of (seed, options), and
//! switching the checkers off does not change what happens.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke_membership::config::Config;
use convoke_membership::event::ClusterEvent;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::MemberStatus;
use convoke_membership::message::{Message, Transmit};
use convoke_membership::{Address, Cluster, ShutdownReason, Uid, UniqueAddress};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::counters::{NodeCounters, SizeMode, Sizer, kind_index};
use crate::faults::Nemesis;
use crate::invariants::{
    Cause, Checkers, Delivered, Observation, SbrDecision, Violation, WorldView,
};
use crate::net::{Links, NetConfig};
use crate::operator::{Operator, OperatorConfig};
use crate::time::Clock;
use crate::trace::TraceHash;

/// The host name of every simulated node.
pub const HOST: &str = "sim";
/// The port of slot 0; slot `i` listens on `BASE_PORT + i`. Five digits for every slot, so every
/// address encodes to the same length.
pub const BASE_PORT: u16 = 10_000;
/// The wall clock at the start of a run, in ms since the Unix epoch (2023-11-14).
pub const WALL_START_MS: u64 = 1_700_000_000_000;

/// Independent random streams derived from the seed.
#[derive(Clone, Copy, Debug)]
#[repr(u64)]
pub(crate) enum Stream {
    Net = 1,
    Nodes = 2,
    Clocks = 3,
    Faults = 4,
    Shape = 5,
    Operator = 6,
    Size = 7,
}

/// The random stream `stream` of run `seed`.
pub(crate) fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream as u64);
    r
}

/// Everything a run depends on besides its seed.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The run's seed.
    pub seed: u64,
    /// The number of slots.
    pub nodes: usize,
    /// The configuration of every core (its `seed` is replaced per incarnation).
    pub config: Config,
    /// The network quality at the start.
    pub net: NetConfig,
    /// Each node's clock drifts by up to this many parts per million, either way.
    pub max_drift_ppm: i32,
    /// Each node's wall clock is off by up to this much, either way.
    pub max_wall_offset: Duration,
    /// Downing and restarting on behalf of an operator.
    pub operator: OperatorConfig,
    /// Whether to run the invariant checkers after every step.
    pub check_invariants: bool,
    /// How many of the latest steps to keep as text, for failure reports (0: none).
    pub log_steps: usize,
    /// How gossip sizes are computed for the counters.
    pub size_mode: SizeMode,
}

impl SimOptions {
    /// `nodes` slots with the default core configuration on a quiet LAN, checkers on, no operator.
    pub fn new(seed: u64, nodes: usize) -> Self {
        Self {
            seed,
            nodes,
            config: Config::default(),
            net: NetConfig::lan(),
            max_drift_ppm: 0,
            max_wall_offset: Duration::ZERO,
            operator: OperatorConfig::off(),
            check_invariants: true,
            log_steps: 0,
            size_mode: SizeMode::default(),
        }
    }
}

/// What occupies a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Nothing was ever started here.
    Idle,
    /// A process runs.
    Running,
    /// The process is stopped (SIGSTOP): it processes nothing; messages queue.
    Paused,
    /// The process crashed.
    Crashed,
    /// The core asked to shut down and the process exited.
    Stopped(ShutdownReason),
}

/// A message on the wire.
#[derive(Debug)]
struct InFlight {
    from_slot: usize,
    from: UniqueAddress,
    to_slot: usize,
    message: Message,
    bytes: usize,
}

/// One host:port and the process on it.
#[derive(Debug)]
pub struct Slot {
    /// The address.
    pub address: Address,
    /// The host's monotonic clock.
    pub clock: Clock,
    /// The host's wall-clock offset in ms.
    pub wall_offset_ms: i64,
    /// What runs here.
    pub state: SlotState,
    /// Incarnations started here so far.
    pub incarnations: u32,
    /// The identity of the current (or last) incarnation.
    pub node: Option<UniqueAddress>,
    /// When the current incarnation started.
    pub started_at: Duration,
    /// How long the current incarnation spent paused, up to its last resume.
    paused_total: Duration,
    /// When the current pause began, while paused.
    paused_at: Option<Duration>,
    core: Option<Cluster>,
    /// Messages that arrived while paused, with their arrival time.
    inbox: Vec<(Duration, InFlight)>,
    timer_gen: u64,
    armed: Option<Duration>,
    /// Nodes whose ExitingConfirmed reached this incarnation.
    confirmed: BTreeSet<UniqueAddress>,
    /// Timer firings at the same instant in a row (a livelock guard).
    same_instant_timers: u32,
}

#[derive(Debug)]
enum Event {
    Deliver(Box<InFlight>),
    Timer { slot: usize, generation: u64 },
    Action(Action),
    Nemesis,
    OperatorTick,
}

#[derive(Debug)]
struct Entry {
    at: Duration,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A scheduled action on the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Start a new incarnation in the slot (if nothing runs there) and join through `seeds`.
    Start {
        /// The slot.
        slot: usize,
        /// Seed slots, in order; empty: do not join.
        seeds: Vec<usize>,
    },
    /// Restart the slot's process if incarnation `after` is still what stopped there: the
    /// supervisor bringing a process back. Joins through every other slot.
    Restart {
        /// The slot.
        slot: usize,
        /// The incarnation count when the restart was scheduled.
        after: u32,
    },
    /// Crash the slot's process.
    Crash(usize),
    /// Pause the slot's process.
    Pause(usize),
    /// Resume it.
    Resume(usize),
    /// Start partition `id`.
    Block {
        /// Partition id.
        id: u64,
        /// Blocked directed links.
        links: Vec<(usize, usize)>,
    },
    /// End partition `id`.
    Unblock(u64),
    /// Clog a node.
    Clog(usize),
    /// Unclog it.
    Unclog(usize),
    /// Change the network quality.
    SetNet(NetConfig),
    /// The node in `slot` leaves gracefully.
    Leave(usize),
    /// The node in `from` downs the current incarnation in slot `target`.
    Down {
        /// Who issues the command.
        from: usize,
        /// Whose current incarnation is downed.
        target: usize,
    },
    /// Deliver messages the node must reject (S13).
    Stray(usize),
}

/// The simulated world.
#[derive(Debug)]
pub struct Sim {
    opts: SimOptions,
    base: Instant,
    now: Duration,
    seq: u64,
    step: u64,
    queue: BinaryHeap<Reverse<Entry>>,
    slots: Vec<Slot>,
    links: Links,
    held: Vec<InFlight>,
    net: NetConfig,
    rng_net: ChaCha8Rng,
    rng_nodes: ChaCha8Rng,
    pub(crate) rng_operator: ChaCha8Rng,
    trace: TraceHash,
    counters: Vec<NodeCounters>,
    sizer: Sizer,
    checkers: Checkers,
    violation: Option<Violation>,
    pub(crate) operator: Operator,
    nemesis: Option<Nemesis>,
    up: UpTracker,
    log: VecDeque<String>,
    delivered: u64,
    decisions: u64,
}

/// Who has seen whom Up, for the convergence figures.
#[derive(Debug, Default)]
pub struct UpTracker {
    /// Per member incarnation: when the first node saw it Up, and how many nodes have so far.
    seen_up: BTreeMap<UniqueAddress, (Duration, usize)>,
    /// Per member incarnation: when all `target` nodes had seen it Up.
    pub all_saw_up: BTreeMap<UniqueAddress, (Duration, Duration)>,
    /// How many observers count as "all".
    pub target: usize,
}

impl UpTracker {
    fn on_up(&mut self, member: &UniqueAddress, now: Duration) {
        let e = self.seen_up.entry(member.clone()).or_insert((now, 0));
        e.1 += 1;
        if e.1 == self.target {
            self.all_saw_up.insert(member.clone(), (e.0, now));
        }
    }
}

impl Sim {
    /// A world with `opts.nodes` idle slots.
    pub fn new(opts: SimOptions) -> Self {
        let mut clocks = rng(opts.seed, Stream::Clocks);
        // Every slot's address shares the system and host strings.
        let first = Address::new(&opts.config.system_name, HOST, BASE_PORT)
            .expect("valid simulated address");
        let slots = (0..opts.nodes)
            .map(|i| {
                let port = u16::try_from(i).ok().and_then(|i| BASE_PORT.checked_add(i));
                let port = port.expect("too many slots for the port range");
                let drift = if opts.max_drift_ppm > 0 {
                    clocks.random_range(-opts.max_drift_ppm..=opts.max_drift_ppm)
                } else {
                    0
                };
                let max_off = i64::try_from(opts.max_wall_offset.as_millis()).unwrap_or(i64::MAX);
                let wall_offset_ms =
                    if max_off > 0 { clocks.random_range(-max_off..=max_off) } else { 0 };
                Slot {
                    address: first.with_port(port),
                    clock: Clock::new(drift),
                    wall_offset_ms,
                    state: SlotState::Idle,
                    incarnations: 0,
                    node: None,
                    started_at: Duration::ZERO,
                    paused_total: Duration::ZERO,
                    paused_at: None,
                    core: None,
                    inbox: Vec::new(),
                    timer_gen: 0,
                    armed: None,
                    confirmed: BTreeSet::new(),
                    same_instant_timers: 0,
                }
            })
            .collect();
        let checkers = if opts.check_invariants {
            Checkers::new(crate::invariants::registry())
        } else {
            Checkers::none()
        };
        let n = opts.nodes;
        // The one clock read of a run: only differences from it reach the cores.
        let base = Instant::now();
        let mut sim = Self {
            base,
            now: Duration::ZERO,
            seq: 0,
            step: 0,
            queue: BinaryHeap::new(),
            slots,
            links: Links::new(n),
            held: Vec::new(),
            net: opts.net.clone(),
            rng_net: rng(opts.seed, Stream::Net),
            rng_nodes: rng(opts.seed, Stream::Nodes),
            rng_operator: rng(opts.seed, Stream::Operator),
            trace: TraceHash::new(),
            counters: vec![NodeCounters::default(); n],
            sizer: Sizer::new(n, opts.size_mode),
            checkers,
            violation: None,
            operator: Operator::new(opts.operator.clone()),
            nemesis: None,
            up: UpTracker { target: n, ..UpTracker::default() },
            log: VecDeque::new(),
            delivered: 0,
            decisions: 0,
            opts,
        };
        if sim.operator.config().is_active() {
            let tick = sim.operator.config().tick;
            sim.push(tick, Event::OperatorTick);
        }
        sim
    }

    // ---- views --------------------------------------------------------------------------------

    /// The options the world was built with.
    pub fn options(&self) -> &SimOptions {
        &self.opts
    }

    /// Global virtual time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Messages handed to cores so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    /// The core in slot `i`, running or paused.
    pub fn core(&self, i: usize) -> Option<&Cluster> {
        self.slots[i].core.as_ref()
    }

    /// Whether slot `i` has a running (not paused) process.
    pub fn is_running(&self, i: usize) -> bool {
        self.slots[i].state == SlotState::Running
    }

    /// Slots with a running process.
    pub fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slots.len()).filter(|i| self.is_running(*i))
    }

    /// The slot of `address`, if it is a simulated node.
    pub fn slot_of(&self, address: &Address) -> Option<usize> {
        if address.host() != HOST || address.system() != self.opts.config.system_name {
            return None;
        }
        let i = usize::from(address.port().checked_sub(BASE_PORT)?);
        (i < self.slots.len()).then_some(i)
    }

    /// The first violated invariant, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// The trace hash so far.
    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }

    /// Per-slot traffic counters.
    pub fn counters(&self) -> &[NodeCounters] {
        &self.counters
    }

    /// Split-brain resolver decisions taken so far, by all nodes.
    pub fn decisions(&self) -> u64 {
        self.decisions
    }

    /// Gossip messages encoded to size them so far.
    pub fn gossips_encoded(&self) -> u64 {
        self.sizer.encoded
    }

    /// Resets the traffic counters (e.g. to measure a steady state).
    pub fn reset_counters(&mut self) {
        self.counters.iter_mut().for_each(|c| *c = NodeCounters::default());
    }

    /// Who has seen whom Up.
    pub fn up_tracker(&self) -> &UpTracker {
        &self.up
    }

    /// The current network quality.
    pub fn net(&self) -> &NetConfig {
        &self.net
    }

    /// The link state.
    pub fn links(&self) -> &Links {
        &self.links
    }

    /// The latest steps as text (when `log_steps` > 0).
    pub fn log(&self) -> impl Iterator<Item = &str> {
        self.log.iter().map(String::as_str)
    }

    /// The names of the registered invariant checkers.
    pub fn checker_ids(&self) -> Vec<&'static str> {
        self.checkers.ids()
    }

    /// The current time on slot `i`'s clock, as the core sees it.
    pub fn local_instant(&self, i: usize) -> Instant {
        self.base + self.slots[i].clock.local(self.now)
    }

    /// The wall-clock time on slot `i`, in ms since the Unix epoch.
    pub fn wall_ms(&self, i: usize) -> u64 {
        let now = u64::try_from(self.now.as_millis()).unwrap_or(u64::MAX);
        (WALL_START_MS + now).saturating_add_signed(self.slots[i].wall_offset_ms)
    }

    // ---- driving ------------------------------------------------------------------------------

    fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Entry { at: at.max(self.now), seq: self.seq, event }));
    }

    /// Schedules `action` at global time `at` (not before now).
    pub fn schedule(&mut self, at: Duration, action: Action) {
        self.push(at, Event::Action(action));
    }

    /// Installs the nemesis and schedules its first move at `at`.
    pub fn set_nemesis(&mut self, nemesis: Nemesis, at: Duration) {
        self.nemesis = Some(nemesis);
        self.push(at, Event::Nemesis);
    }

    /// Schedules the nemesis' next move (called by the nemesis).
    pub(crate) fn schedule_nemesis(&mut self, at: Duration) {
        self.push(at, Event::Nemesis);
    }

    /// Removes the nemesis (no more faults), returning it.
    pub fn take_nemesis(&mut self) -> Option<Nemesis> {
        self.nemesis.take()
    }

    /// Processes the next event if it is due at or before `deadline`; false when there is none.
    pub fn step_until(&mut self, deadline: Duration) -> bool {
        let due = self.queue.peek().is_some_and(|Reverse(e)| e.at <= deadline);
        if !due || self.violation.is_some() {
            return false;
        }
        let Reverse(e) = self.queue.pop().expect("peeked");
        self.now = self.now.max(e.at);
        match e.event {
            Event::Deliver(m) => self.arrive(*m),
            Event::Timer { slot, generation } => self.fire_timer(slot, generation),
            Event::Action(a) => self.apply(a),
            Event::Nemesis => {
                if let Some(mut n) = self.nemesis.take() {
                    n.fire(self);
                    if self.nemesis.is_none() {
                        self.nemesis = Some(n);
                    }
                }
            }
            Event::OperatorTick => {
                crate::operator::tick(self);
                let tick = self.operator.config().tick;
                self.push(self.now + tick, Event::OperatorTick);
            }
        }
        true
    }

    /// Runs every event up to `deadline`, then sets the clock to it. Stops early at a violation.
    pub fn run_until(&mut self, deadline: Duration) {
        while self.step_until(deadline) {}
        if self.violation.is_none() {
            self.now = self.now.max(deadline);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until `pred` holds, checking every `every` of virtual time, for at most `max`; returns
    /// whether it held. Stops early at a violation.
    pub fn run_until_pred(
        &mut self,
        max: Duration,
        every: Duration,
        mut pred: impl FnMut(&Sim) -> bool,
    ) -> bool {
        let deadline = self.now + max;
        loop {
            if pred(self) {
                return true;
            }
            if self.now >= deadline || self.violation.is_some() {
                return false;
            }
            self.run_until((self.now + every).min(deadline));
        }
    }

    // ---- actions ------------------------------------------------------------------------------

    /// Applies an action now.
    pub fn apply(&mut self, action: Action) {
        self.note(|| format!("action {action:?}"));
        match action {
            Action::Start { slot, seeds } => {
                if self.start(slot) && !seeds.is_empty() {
                    self.join_seeds(slot, &seeds);
                }
            }
            Action::Restart { slot, after } => {
                let s = &self.slots[slot];
                let down = matches!(s.state, SlotState::Crashed | SlotState::Stopped(_));
                if down && s.incarnations == after {
                    let seeds: Vec<usize> = (0..self.slots.len()).filter(|i| *i != slot).collect();
                    self.start(slot);
                    self.join_seeds(slot, &seeds);
                }
            }
            Action::Crash(slot) => self.crash(slot),
            Action::Pause(slot) => self.pause(slot),
            Action::Resume(slot) => self.resume(slot),
            Action::Block { id, links } => self.links.block(id, links),
            Action::Unblock(id) => {
                self.links.unblock(id);
                self.release_held();
            }
            Action::Clog(slot) => self.links.set_clogged(slot, true),
            Action::Unclog(slot) => {
                self.links.set_clogged(slot, false);
                self.release_held();
            }
            Action::SetNet(net) => self.net = net,
            Action::Leave(slot) => {
                let address = self.slots[slot].address.clone();
                self.command(slot, "leave", |c, now| c.leave(now, &address));
            }
            Action::Down { from, target } => {
                let address = self.slots[target].address.clone();
                self.command(from, "down", |c, now| c.down(now, &address));
            }
            Action::Stray(slot) => self.stray(slot),
        }
    }

    /// Starts a new incarnation in `slot` with a fresh uid, if no process runs there. Returns
    /// whether it started.
    pub fn start(&mut self, slot: usize) -> bool {
        if matches!(self.slots[slot].state, SlotState::Running | SlotState::Paused) {
            return false;
        }
        // The top bit set keeps every uid's encoded length the same (see counters).
        let uid = self.rng_nodes.random::<u64>() | (1 << 63);
        let mut config = self.opts.config.clone();
        config.seed = self.rng_nodes.random();
        let node =
            UniqueAddress::new(self.slots[slot].address.clone(), Uid::new(uid).expect("nonzero"));
        let now = self.local_instant(slot);
        let wall = self.wall_ms(slot);
        let core = Cluster::new(config, node.clone(), now, wall).expect("valid simulated config");
        self.note(|| format!("start slot {slot} as {node}"));
        node.uid.get().hash(&mut self.trace);
        let s = &mut self.slots[slot];
        s.core = Some(core);
        s.state = SlotState::Running;
        s.incarnations += 1;
        s.node = Some(node);
        s.started_at = self.now;
        s.paused_total = Duration::ZERO;
        s.paused_at = None;
        s.inbox.clear();
        s.confirmed.clear();
        s.armed = None;
        self.arm_timer(slot);
        true
    }

    /// Joins `slot` through the seed slots, in order.
    pub fn join_seeds(&mut self, slot: usize, seeds: &[usize]) {
        let seeds: Vec<Address> = seeds.iter().map(|s| self.slots[*s].address.clone()).collect();
        self.command(slot, "join_seed_nodes", |c, now| {
            let _ = c.join_seed_nodes(now, seeds);
        });
    }

    /// Joins `slot` to the node in slot `to`.
    pub fn join(&mut self, slot: usize, to: usize) {
        let address = self.slots[to].address.clone();
        self.command(slot, "join", |c, now| {
            let _ = c.join(now, address);
        });
    }

    /// Runs a command on the running core in `slot`; nothing if none runs there.
    pub fn command(
        &mut self,
        slot: usize,
        name: &'static str,
        f: impl FnOnce(&mut Cluster, Instant),
    ) {
        if !self.is_running(slot) {
            return;
        }
        self.note(|| format!("command {name} on slot {slot}"));
        self.input(slot, Cause::Command(name), f);
    }

    /// Crashes the process in `slot`: it stops at once, without a word to anyone.
    pub fn crash(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if !matches!(s.state, SlotState::Running | SlotState::Paused) {
            return;
        }
        s.state = SlotState::Crashed;
        s.core = None;
        s.inbox.clear();
        s.armed = None;
        if let Some(node) = s.node.clone() {
            self.checkers.forget(&node);
            self.operator.on_crash(node, self.now);
        }
        "crash".hash(&mut self.trace);
        slot.hash(&mut self.trace);
    }

    /// Pauses the process in `slot`.
    pub fn pause(&mut self, slot: usize) {
        if self.slots[slot].state == SlotState::Running {
            self.slots[slot].state = SlotState::Paused;
            self.slots[slot].paused_at = Some(self.now);
            "pause".hash(&mut self.trace);
        }
    }

    /// Resumes the paused process in `slot`: it takes in what queued up, then its overdue timers.
    pub fn resume(&mut self, slot: usize) {
        if self.slots[slot].state != SlotState::Paused {
            return;
        }
        let s = &mut self.slots[slot];
        s.state = SlotState::Running;
        if let Some(at) = s.paused_at.take() {
            s.paused_total += self.now.saturating_sub(at);
        }
        "resume".hash(&mut self.trace);
        let inbox = std::mem::take(&mut self.slots[slot].inbox);
        for (received_at, m) in inbox {
            if !self.is_running(slot) || self.violation.is_some() {
                break;
            }
            self.hand_over(m, received_at);
        }
        self.slots[slot].armed = None;
        self.arm_timer(slot);
    }

    /// Ends every partition, clog and pause, and restores `net`.
    pub fn heal(&mut self, net: NetConfig) {
        // Faults the nemesis scheduled before the heal (the later steps of a swizzle-clog, a
        // partition or pause still to come) must not strike after it. Restarts stay: a crashed
        // process's supervisor still brings it back.
        let queue = std::mem::take(&mut self.queue);
        self.queue = queue
            .into_iter()
            .filter(|Reverse(e)| {
                !matches!(
                    e.event,
                    Event::Action(
                        Action::Pause(_)
                            | Action::Block { .. }
                            | Action::Clog(_)
                            | Action::SetNet(_)
                            | Action::Stray(_)
                    )
                )
            })
            .collect();
        self.links.heal();
        self.release_held();
        self.net = net;
        for i in 0..self.slots.len() {
            self.resume(i);
        }
    }

    fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        for m in held {
            if self.links.is_clogged(m.from_slot) || self.links.is_clogged(m.to_slot) {
                self.held.push(m);
            } else {
                let at = self.now + self.net.sample_delay(&mut self.rng_net);
                self.push(at, Event::Deliver(Box::new(m)));
            }
        }
    }

    /// Delivers messages `slot` must reject: a gossip for another incarnation, a gossip from a
    /// stranger, a join from another actor system.
    fn stray(&mut self, slot: usize) {
        let Some(core) = self.slots[slot].core.as_ref() else { return };
        let me = core.self_node().clone();
        let gossip = core.gossip().clone();
        let other_uid = Uid::new(me.uid.get() ^ 0x5555).expect("nonzero");
        let stranger = UniqueAddress::new(
            Address::new(&self.opts.config.system_name, "stranger", 1).expect("valid"),
            other_uid,
        );
        let foreign = UniqueAddress::new(
            Address::new("other", HOST, me.address.port()).expect("valid"),
            other_uid,
        );
        let member = gossip.members().map(|m| m.node().clone()).find(|n| *n != me);
        let mut msgs = vec![
            (
                stranger.clone(),
                Message::Gossip { from: stranger.clone(), to: me.clone(), gossip: gossip.clone() },
            ),
            (
                foreign.clone(),
                Message::Join {
                    node: foreign,
                    roles: BTreeSet::new(),
                    app_version: Default::default(),
                },
            ),
        ];
        if let Some(m) = member {
            let wrong = UniqueAddress::new(me.address.clone(), other_uid);
            msgs.push((m.clone(), Message::Gossip { from: m, to: wrong, gossip }));
        }
        for (from, message) in msgs {
            let at = self.now + self.net.sample_delay(&mut self.rng_net);
            let bytes = 0;
            let m = InFlight { from_slot: slot, from, to_slot: slot, message, bytes };
            self.push(at, Event::Deliver(Box::new(m)));
        }
    }

    // ---- the step -----------------------------------------------------------------------------

    /// Feeds one input to the core in `slot` and processes the outputs.
    fn input(&mut self, slot: usize, cause: Cause, f: impl FnOnce(&mut Cluster, Instant)) {
        let now = self.local_instant(slot);
        let Some(mut core) = self.slots[slot].core.take() else { return };
        let before = core.gossip().clone();
        f(&mut core, now);
        self.step += 1;
        self.after_input(slot, core, before, cause);
    }

    fn after_input(&mut self, slot: usize, mut core: Cluster, before: Arc<Gossip>, cause: Cause) {
        let me = core.self_node().clone();
        while let Some(t) = core.poll_transmit() {
            self.send(slot, &me, t);
        }
        let mut leader_moved = false;
        while let Some(e) = core.poll_event() {
            leader_moved |= matches!(
                e,
                ClusterEvent::MemberWeaklyUp(_)
                    | ClusterEvent::MemberUp(_)
                    | ClusterEvent::MemberExited(_)
                    | ClusterEvent::MemberRemoved { .. }
            );
            self.on_event(slot, &e);
        }
        // No strategy the simulator configures asks for a lease; a request is dropped, so a
        // lease-majority decision would wait for ever (and the liveness phase would say so).
        while core.poll_lease_request().is_some() {}
        let mut decisions = Vec::new();
        while let Some(d) = core.poll_downing_decision() {
            "decision".hash(&mut self.trace);
            self.note(|| format!("slot {slot} {d}"));
            self.decisions += 1;
            decisions.push(SbrDecision::from(&d));
        }
        let changed = !Arc::ptr_eq(&before, core.gossip()) || !decisions.is_empty();
        let confirms = matches!(cause, Cause::Message(Delivered::Other("ExitingConfirmed")));
        if (changed || confirms) && !self.checkers.is_empty() && self.violation.is_none() {
            let leader = core.membership().leader().cloned();
            let obs = Observation::of_core(
                self.step,
                self.now,
                slot,
                &core,
                &cause,
                &before,
                leader.as_ref(),
                &self.slots[slot].confirmed,
                &decisions,
                leader_moved,
            );
            if let Some(v) = self.checkers.check_step(&obs) {
                self.note(|| format!("VIOLATION {v}"));
                self.violation = Some(v);
            }
        }
        if self.checkers.wants_world() && self.violation.is_none() {
            self.slots[slot].core = Some(core);
            let mut checkers = std::mem::take(&mut self.checkers);
            let v = checkers.check_world(self.step, self);
            self.checkers = checkers;
            if v.is_some() {
                self.violation = v;
            }
            core = self.slots[slot].core.take().expect("just put back");
        }
        if let Some(reason) = core.shutdown_reason().cloned() {
            self.note(|| format!("slot {slot} ({me}) shuts down: {reason}"));
            "shutdown".hash(&mut self.trace);
            let s = &mut self.slots[slot];
            s.state = SlotState::Stopped(reason);
            s.inbox.clear();
            s.armed = None;
            self.checkers.forget(&me);
            crate::operator::on_stopped(self, slot);
            return;
        }
        self.slots[slot].core = Some(core);
        self.arm_timer(slot);
    }

    fn on_event(&mut self, slot: usize, e: &ClusterEvent) {
        e.type_name().hash(&mut self.trace);
        if let ClusterEvent::MemberUp(m) = e
            && m.status() == MemberStatus::Up
        {
            self.up.on_up(m.node(), self.now);
        }
        if self.opts.log_steps > 0 {
            let member = e.member().map(|m| m.node().to_string()).unwrap_or_default();
            self.note(|| format!("  slot {slot} event {} {member}", e.type_name()));
        }
    }

    fn send(&mut self, from_slot: usize, from: &UniqueAddress, t: Transmit) {
        let kind = kind_index(&t.message);
        let (bytes, members) = self.sizer.size(from_slot, &t.message);
        self.counters[from_slot].on_sent(kind, bytes, members);
        let Some(to_slot) = self.slot_of(&t.to) else { return };
        let copies = self.net.sample_copies(&mut self.rng_net);
        let mut message = Some(t.message);
        for c in 0..copies {
            let at = self.now + self.net.sample_delay(&mut self.rng_net);
            let message = if c + 1 == copies {
                message.take().expect("last copy")
            } else {
                message.clone().expect("not yet moved")
            };
            let m = InFlight { from_slot, from: from.clone(), to_slot, message, bytes };
            self.push(at, Event::Deliver(Box::new(m)));
        }
    }

    /// A message reaches the network interface of its destination.
    fn arrive(&mut self, m: InFlight) {
        if !self.links.is_open(m.from_slot, m.to_slot) {
            return;
        }
        if self.links.is_clogged(m.from_slot) || self.links.is_clogged(m.to_slot) {
            self.held.push(m);
            return;
        }
        let to = m.to_slot;
        match self.slots[to].state {
            SlotState::Running => self.hand_over(m, self.now),
            SlotState::Paused => self.slots[to].inbox.push((self.now, m)),
            _ => {}
        }
    }

    /// Hands a message that arrived at `received_at` to its destination's running core.
    fn hand_over(&mut self, m: InFlight, received_at: Duration) {
        let to = m.to_slot;
        let kind = kind_index(&m.message);
        self.counters[to].on_received(kind, m.bytes);
        self.delivered += 1;
        self.now.hash(&mut self.trace);
        to.hash(&mut self.trace);
        kind.hash(&mut self.trace);
        m.from.uid.get().hash(&mut self.trace);
        // Measured on the node's own clock, as the core measures it.
        let clock = self.slots[to].clock;
        let queued_for = clock.local(self.now).saturating_sub(clock.local(received_at));
        if self.opts.log_steps > 0 {
            let (k, from) = (m.message.kind(), m.from.clone());
            self.note(|| format!("slot {to} <- {k} from {from} (queued {queued_for:?})"));
        }
        let cause = if self.checkers.is_empty() {
            Cause::Message(Delivered::Other(m.message.kind()))
        } else {
            Cause::Message(match &m.message {
                Message::Gossip { from, to, gossip } => Delivered::Gossip {
                    from: from.clone(),
                    to: to.clone(),
                    gossip: gossip.clone(),
                    queued_for,
                },
                Message::Join { node, .. } => Delivered::Join { node: node.clone() },
                Message::Welcome { .. } => Delivered::Welcome,
                other => Delivered::Other(other.kind()),
            })
        };
        if let Message::ExitingConfirmed { node } = &m.message {
            self.slots[to].confirmed.insert(node.clone());
        }
        let received_local = self.base + self.slots[to].clock.local(received_at);
        let (from, message) = (m.from, m.message);
        self.input(to, cause, |c, now| c.handle_queued_message(now, received_local, from, message));
    }

    fn arm_timer(&mut self, slot: usize) {
        let base = self.base;
        let s = &mut self.slots[slot];
        let deadline = s
            .core
            .as_ref()
            .and_then(Cluster::poll_timeout)
            .map(|t| s.clock.global_at(t.saturating_duration_since(base)));
        if deadline == s.armed {
            return;
        }
        s.armed = deadline;
        s.timer_gen += 1;
        let generation = s.timer_gen;
        if let Some(at) = deadline {
            self.push(at, Event::Timer { slot, generation });
        }
    }

    fn fire_timer(&mut self, slot: usize, generation: u64) {
        let s = &mut self.slots[slot];
        if s.timer_gen != generation || s.state != SlotState::Running {
            return;
        }
        s.armed = None;
        self.now.hash(&mut self.trace);
        slot.hash(&mut self.trace);
        self.note(|| format!("slot {slot} timer"));
        self.input(slot, Cause::Timer, |c, now| c.handle_timeout(now));
        // A core that keeps asking to be woken at an instant it has already handled would spin
        // forever in virtual time.
        let s = &mut self.slots[slot];
        if s.armed == Some(self.now) {
            s.same_instant_timers += 1;
            if s.same_instant_timers > 1000 && self.violation.is_none() {
                self.violation = Some(Violation {
                    invariant: "timer".to_owned(),
                    step: self.step,
                    time_s: self.now.as_secs_f64(),
                    slot: Some(slot),
                    message: "the core's next deadline stays at an instant it has handled"
                        .to_owned(),
                });
            }
        } else {
            s.same_instant_timers = 0;
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.opts.log_steps == 0 {
            return;
        }
        if self.log.len() == self.opts.log_steps {
            self.log.pop_front();
        }
        let l = format!("[{:>10.3}s #{}] {}", self.now.as_secs_f64(), self.step, line());
        self.log.push_back(l);
    }

    /// Every slot's state and view, one line per slot plus one per member, for failure reports.
    pub fn dump(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let node = s.node.as_ref().map_or("-".to_owned(), ToString::to_string);
            out.push(format!("slot {i} {:?} {node}", s.state));
            let Some(c) = &s.core else { continue };
            let g = c.gossip();
            let leader =
                c.membership().leader().map_or("-".to_owned(), |l| l.address.port().to_string());
            out.push(format!(
                "  converged {} leader {leader} version {:?}",
                c.convergence(),
                g.version().entries().map(|(n, v)| (n.address.port(), v)).collect::<Vec<_>>()
            ));
            for m in g.members() {
                let seen = if g.seen_by(m.node()) { "seen" } else { "" };
                out.push(format!("  {} {} up#{} {seen}", m.node(), m.status(), m.up_number().0));
            }
            for r in g.reachability().records() {
                out.push(format!(
                    "  reach {} -> {} {:?} v{}",
                    r.observer.address.port(),
                    r.subject.address.port(),
                    r.status,
                    r.version
                ));
            }
            for t in g.tombstones().keys() {
                out.push(format!("  tombstone {t}"));
            }
        }
        out
    }

    /// Records a violation found outside the step checkers (liveness).
    pub fn set_violation(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }
}

impl WorldView for Sim {
    fn now(&self) -> Duration {
        self.now
    }

    fn slots(&self) -> usize {
        self.slots.len()
    }

    fn core(&self, slot: usize) -> Option<&Cluster> {
        self.slots[slot].core.as_ref()
    }

    fn is_stopped(&self, slot: usize) -> bool {
        matches!(
            self.slots[slot].state,
            SlotState::Crashed | SlotState::Stopped(_) | SlotState::Idle
        )
    }

    fn link_open(&self, from: usize, to: usize) -> bool {
        self.links.is_open(from, to) && !self.links.is_clogged(from) && !self.links.is_clogged(to)
    }

    fn is_running(&self, slot: usize) -> bool {
        self.slots[slot].state == SlotState::Running
    }

    fn running_time(&self, slot: usize) -> Duration {
        let s = &self.slots[slot];
        let paused = s.paused_total + s.paused_at.map_or(Duration::ZERO, |at| self.now - at);
        self.now.saturating_sub(s.started_at).saturating_sub(paused)
    }
}
