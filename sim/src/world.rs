//! The simulated world: node slots running membership cores over the modelled network, driven one
//! event at a time in virtual time.
//!
//! [`Sim`] composes the parts: the [`processes`](crate::processes) in their slots, the
//! [`delivery`](crate::delivery) of messages between them, one [`queue`](crate::queue) of events,
//! the [`trace`](crate::trace), the invariant checkers, and the nemesis and the operator, which act
//! back on it through [`Control`](crate::control::Control). This file holds the composition and
//! the event loop; `step` feeds the cores, `actions` applies actions, `views` shows the world.
//!
//! Everything that happens is an event in the queue ordered by (time, sequence number): a message
//! arriving, a node's timer, or a scheduled action (a fault, a command, the operator's tick, the
//! nemesis). Processing an event that feeds a core is a *step*; after every step the outputs are
//! drained (transmits into the network, events into the trackers), the node's timer is re-armed,
//! and the invariant checkers look at what changed.
//!
//! Randomness comes from independent ChaCha streams derived from the run's seed (network, node
//! uids and core seeds, clocks, operator), so a run is a pure function of (seed, options), and
//! switching the checkers off does not change what happens.
//!
//! When [`SimOptions::singleton`] is set, every process also runs a cluster singleton manager
//! ([`crate::singleton`]); `singleton` feeds it. Its randomness (stop delays, hand-over messages'
//! fates) comes from streams of its own and its steps are hashed apart, so the membership part of
//! a run, and its trace hash, are the same with or without it. A singleton configured with a lease
//! acquires it from the modelled store of [`crate::lease`] (`lease` drives it), from a stream of
//! its own too. [`SimOptions::sharding`] adds the sharding layer on top of it
//! ([`crate::sharding`], fed by `sharding`), the same way.

mod actions;
mod bootstrap;
mod data;
mod lease;
mod sharding;
mod singleton;
mod state;
mod step;
mod views;

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::UniqueAddress;
use convoke_membership::config::Config;
use convoke_sharding::ShardingConfig;
use convoke_singleton::SingletonConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use crate::control::Action;
use crate::counters::SizeMode;
use crate::data::DataLayer;
use crate::delivery::{DataInFlight, Delivery, HandOverInFlight, InFlight, ShardingInFlight, Wire};
use crate::faults::Nemesis;
use crate::invariants::{Checkers, Violation};
use crate::net::NetConfig;
use crate::operator::{Operator, OperatorConfig};
pub use crate::processes::{BASE_PORT, HOST, Slot, SlotState, WALL_START_MS};
use crate::processes::{Processes, Supervisor};
use crate::queue::Queue;
use crate::sharding::Shardings;
use crate::singleton::Singletons;
use crate::trace::Trace;
pub use data::LEAVE_TIMEOUT;

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
    Singleton = 8,
    HandOver = 9,
    Sharding = 10,
    ShardingLoad = 11,
    Lease = 13,
    Bootstrap = 12,
    Data = 14,
    DataLoad = 15,
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
    /// The cluster singleton every process runs, if any.
    pub singleton: Option<SingletonConfig>,
    /// The sharded entity type every process runs, with its coordinator as the singleton's
    /// instance (so only together with `singleton`), and the load of asks to it.
    pub sharding: Option<ShardingConfig>,
    /// The replicated store every process runs over its slot's disk, and the load of reads and
    /// writes to it.
    pub data: Option<convoke_data::DataConfig>,
    /// The sharded entities keep a state in the store (only together with `sharding` and
    /// `data`; see [`crate::state`]).
    pub entity_state: bool,
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
            singleton: None,
            sharding: None,
            data: None,
            entity_state: false,
        }
    }
}

#[derive(Debug)]
enum Event {
    Deliver(Box<InFlight>),
    Timer { slot: usize, generation: u64 },
    Action(Action),
    Nemesis,
    OperatorTick,
    DeliverHandOver(HandOverInFlight),
    SingletonTimer { slot: usize, generation: u64 },
    InstanceStopped { slot: usize, incarnation: u32, since: Duration },
    LingerEnd { slot: usize, incarnation: u32 },
    LeaveTimeout { slot: usize, incarnation: u32 },
    DeliverSharding(ShardingInFlight),
    ShardingTimer { slot: usize, generation: u64 },
    ShardingAsk,
    DeliverData(DataInFlight),
    DataTimer { slot: usize, generation: u64 },
    DataSync { slot: usize, generation: u64 },
    DataOp,
    LeaseArrive(Box<lease::Arrival>),
    LeaseAnswer(lease::Answer),
    Bootstrap(crate::bootstrap::BootstrapEvent),
}

/// The simulated world.
#[derive(Debug)]
pub struct Sim {
    opts: SimOptions,
    now: Duration,
    step: u64,
    queue: Queue<Event>,
    procs: Processes,
    supervisor: Supervisor,
    delivery: Delivery,
    trace: Trace,
    checkers: Checkers,
    violation: Option<Violation>,
    operator: Operator,
    nemesis: Option<Nemesis>,
    /// Incarnations crashed since the operator last looked, with when.
    crashes: Vec<(UniqueAddress, Duration)>,
    up: UpTracker,
    decisions: u64,
    singletons: Option<Singletons>,
    shardings: Option<Shardings>,
    data: Option<DataLayer>,
    bootstraps: Option<crate::bootstrap::Bootstraps>,
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

/// Where delivery puts the copies it sends: into `queue`, not before `now`.
fn into_queue(queue: &mut Queue<Event>, now: Duration) -> impl FnMut(Duration, Wire) + '_ {
    move |at, w| {
        let event = match w {
            Wire::Membership(m) => Event::Deliver(Box::new(m)),
            Wire::HandOver(m) => Event::DeliverHandOver(m),
            Wire::Sharding(m) => Event::DeliverSharding(m),
            Wire::Data(m) => Event::DeliverData(m),
        };
        queue.push(at.max(now), event);
    }
}

impl Sim {
    /// A world with `opts.nodes` idle slots.
    pub fn new(opts: SimOptions) -> Self {
        let n = opts.nodes;
        let procs = Processes::new(
            n,
            opts.config.clone(),
            opts.max_drift_ppm,
            opts.max_wall_offset,
            rng(opts.seed, Stream::Clocks),
            rng(opts.seed, Stream::Nodes),
        );
        let checkers = if opts.check_invariants {
            Checkers::new(crate::invariants::registry())
        } else {
            Checkers::none()
        };
        let mut sim = Self {
            now: Duration::ZERO,
            step: 0,
            queue: Queue::default(),
            procs,
            supervisor: Supervisor::new(
                opts.operator.restart_after,
                rng(opts.seed, Stream::Operator),
            ),
            delivery: Delivery::new(
                n,
                opts.net.clone(),
                [
                    rng(opts.seed, Stream::Net),
                    rng(opts.seed, Stream::HandOver),
                    rng(opts.seed, Stream::Sharding),
                    rng(opts.seed, Stream::Data),
                ],
                opts.size_mode,
            ),
            trace: Trace::new(opts.log_steps),
            checkers,
            violation: None,
            operator: Operator::new(opts.operator.clone()),
            nemesis: None,
            crashes: Vec::new(),
            up: UpTracker { target: n, ..UpTracker::default() },
            decisions: 0,
            singletons: opts.singleton.clone().map(|c| {
                let seed = opts.seed;
                Singletons::new(n, c, rng(seed, Stream::Singleton), || rng(seed, Stream::Lease))
            }),
            shardings: opts
                .sharding
                .clone()
                .filter(|_| opts.singleton.is_some())
                .map(|c| Shardings::new(n, c, rng(opts.seed, Stream::ShardingLoad)))
                .map(|s| if opts.entity_state && opts.data.is_some() { s.keep_state() } else { s }),
            data: opts.data.clone().map(|c| DataLayer::new(n, c, rng(opts.seed, Stream::DataLoad))),
            bootstraps: None,
            opts,
        };
        if sim.shardings.is_some() {
            sim.push(crate::sharding::ASK_INTERVAL, Event::ShardingAsk);
        }
        if sim.data.is_some() {
            sim.push(crate::data::OP_INTERVAL, Event::DataOp);
        }
        if sim.operator.config().is_active() {
            let tick = sim.operator.config().tick;
            sim.push(tick, Event::OperatorTick);
        }
        sim
    }

    // ---- driving ------------------------------------------------------------------------------

    fn push(&mut self, at: Duration, event: Event) {
        self.queue.push(at.max(self.now), event);
    }

    /// Schedules `action` at global time `at` (not before now).
    pub fn schedule(&mut self, at: Duration, action: Action) {
        self.push(at, Event::Action(action));
    }

    /// Installs the nemesis and schedules its first move at `at`.
    pub fn set_nemesis(&mut self, nemesis: Nemesis, at: Duration) {
        self.nemesis = Some(nemesis);
        self.lease_faults(true);
        self.push(at, Event::Nemesis);
    }

    /// Removes the nemesis (no more faults), returning it.
    pub fn take_nemesis(&mut self) -> Option<Nemesis> {
        self.nemesis.take()
    }

    /// Processes the next event if it is due at or before `deadline`; false when there is none.
    pub fn step_until(&mut self, deadline: Duration) -> bool {
        if self.violation.is_some() {
            return false;
        }
        let Some((at, event)) = self.queue.pop_due(deadline) else { return false };
        self.now = self.now.max(at);
        match event {
            Event::Deliver(m) => self.arrive(*m),
            Event::Timer { slot, generation } => self.fire_timer(slot, generation),
            Event::Action(a) => self.apply(a),
            Event::Nemesis => {
                if let Some(mut n) = self.nemesis.take() {
                    let next = n.fire(self);
                    if self.nemesis.is_none() {
                        self.nemesis = Some(n);
                    }
                    if let Some(at) = next {
                        self.push(at, Event::Nemesis);
                    }
                }
            }
            Event::DeliverHandOver(m) => self.arrive_hand_over(m),
            Event::SingletonTimer { slot, generation } => {
                self.fire_singleton_timer(slot, generation)
            }
            Event::InstanceStopped { slot, incarnation, since } => {
                self.instance_stopped(slot, incarnation, since)
            }
            Event::LingerEnd { slot, incarnation } => self.linger_end(slot, incarnation),
            Event::LeaveTimeout { slot, incarnation } => {
                self.data_leave_timeout(slot, incarnation);
            }
            Event::DeliverSharding(m) => self.arrive_sharding(m),
            Event::ShardingTimer { slot, generation } => self.fire_sharding_timer(slot, generation),
            Event::ShardingAsk => self.sharding_ask(),
            Event::DeliverData(m) => self.arrive_data(m),
            Event::DataTimer { slot, generation } => self.fire_data_timer(slot, generation),
            Event::DataSync { slot, generation } => self.data_sync(slot, generation),
            Event::DataOp => self.data_op(),
            Event::LeaseArrive(a) => self.lease_arrive(*a),
            Event::LeaseAnswer(a) => self.lease_answer(a),
            Event::Bootstrap(e) => self.bootstrap_event(e),
            Event::OperatorTick => {
                // Out of the world while it acts on it; nothing it does calls back into it.
                let mut operator = std::mem::take(&mut self.operator);
                operator.tick(self);
                self.operator = operator;
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

    // ---- shared by the steps and the actions ------------------------------------------------

    fn restart_in(&mut self, slot: usize, delay: Duration) {
        let after = self.slot(slot).incarnations;
        self.schedule(self.now + delay, Action::Restart { slot, after });
    }

    fn arm_timer(&mut self, slot: usize) {
        if let Some((at, generation)) = self.procs.arm_timer(slot) {
            self.push(at, Event::Timer { slot, generation });
        }
    }

    /// A sharding or store message `m` (the two lanes carry the same encoded form) at its
    /// destination's interface: taken in (`take`) when the process
    /// there runs, queued (`queue`) while it is paused, dropped when none runs.
    fn take_or_queue(
        &mut self,
        m: ShardingInFlight,
        take: impl FnOnce(&mut Self, ShardingInFlight),
        queue: impl FnOnce(&mut Self, usize, ShardingInFlight),
    ) {
        let to = m.to_slot;
        match self.slot(to).state {
            SlotState::Running => take(self, m),
            SlotState::Paused => queue(self, to, m),
            _ => {}
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        self.trace.note(self.now, self.step, line);
    }
}
