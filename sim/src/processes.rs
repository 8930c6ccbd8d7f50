//! The processes: one slot per host:port, the membership core running in it, and its life —
//! started, paused, resumed, crashed, stopped by its core, restarted by a supervisor.
//!
//! A *slot* is a host:port. It holds at most one process at a time, an *incarnation* of a node
//! with its own uid; a restart puts a new incarnation (new uid) in the same slot. Each host has its
//! own drifting monotonic clock and wall-clock offset ([`crate::time`]), drawn once per run.
//!
//! Nothing here touches the event queue or the trace: operations report what happened (whether a
//! process started, which timer to schedule, what queued up during a pause) and the world
//! schedules, hashes and checks.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use convoke_membership::config::Config;
use convoke_membership::{Address, Cluster, ShutdownReason, Uid, UniqueAddress};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::delivery::InFlight;
use crate::time::Clock;

/// The host name of every simulated node.
pub const HOST: &str = "sim";
/// The port of slot 0; slot `i` listens on `BASE_PORT + i`. Five digits for every slot, so every
/// address encodes to the same length.
pub const BASE_PORT: u16 = 10_000;
/// The wall clock at the start of a run, in ms since the Unix epoch (2023-11-14).
pub const WALL_START_MS: u64 = 1_700_000_000_000;

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
    /// Boxed: a core is taken out and put back for every input, and a move of the box is a
    /// pointer's, not the whole state's.
    core: Option<Box<Cluster>>,
    /// Messages that arrived while paused, with their arrival time.
    inbox: Vec<(Duration, InFlight)>,
    timer_gen: u64,
    armed: Option<Duration>,
    /// Nodes whose ExitingConfirmed reached this incarnation.
    confirmed: BTreeSet<UniqueAddress>,
    /// Timer firings at the same instant in a row (a livelock guard).
    same_instant_timers: u32,
}

/// Every slot, and what a new incarnation is made of.
#[derive(Debug)]
pub struct Processes {
    slots: Vec<Slot>,
    /// The one clock read of a run: only differences from it reach the cores.
    base: Instant,
    /// The configuration of every core (its `seed` is replaced per incarnation).
    config: Config,
    /// Uids and core seeds.
    uids: ChaCha8Rng,
}

impl Processes {
    /// `n` idle slots whose clocks drift by up to `max_drift_ppm` and whose wall clocks are off
    /// by up to `max_wall_offset`, either way, drawn from `clocks`; new incarnations draw their
    /// uids and core seeds from `uids`.
    pub fn new(
        n: usize,
        config: Config,
        max_drift_ppm: i32,
        max_wall_offset: Duration,
        mut clocks: ChaCha8Rng,
        uids: ChaCha8Rng,
    ) -> Self {
        // Every slot's address shares the system and host strings.
        let first =
            Address::new(&config.system_name, HOST, BASE_PORT).expect("valid simulated address");
        let slots = (0..n)
            .map(|i| {
                let port = u16::try_from(i).ok().and_then(|i| BASE_PORT.checked_add(i));
                let port = port.expect("too many slots for the port range");
                let drift = if max_drift_ppm > 0 {
                    clocks.random_range(-max_drift_ppm..=max_drift_ppm)
                } else {
                    0
                };
                let max_off = i64::try_from(max_wall_offset.as_millis()).unwrap_or(i64::MAX);
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
        Self { slots, base: Instant::now(), config, uids }
    }

    // ---- views --------------------------------------------------------------------------------

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
        self.slots[i].core.as_deref()
    }

    /// Whether slot `i` has a running (not paused) process.
    pub fn is_running(&self, i: usize) -> bool {
        self.slots[i].state == SlotState::Running
    }

    /// Whether slot `i` has no process that could still come back on its own: crashed, shut
    /// down by its core, or never started.
    pub fn is_stopped(&self, i: usize) -> bool {
        matches!(self.slots[i].state, SlotState::Crashed | SlotState::Stopped(_) | SlotState::Idle)
    }

    /// Slots with a running process.
    pub fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slots.len()).filter(|i| self.is_running(*i))
    }

    /// The slot of `address`, if it is a simulated node.
    pub fn slot_of(&self, address: &Address) -> Option<usize> {
        if address.host() != HOST || address.system() != self.config.system_name {
            return None;
        }
        let i = usize::from(address.port().checked_sub(BASE_PORT)?);
        (i < self.slots.len()).then_some(i)
    }

    /// The time on slot `i`'s clock at global time `now`, as the core sees it.
    pub fn local_instant(&self, i: usize, now: Duration) -> Instant {
        self.base + self.slots[i].clock.local(now)
    }

    /// The earliest global time at which slot `i`'s clock reads `deadline`.
    pub fn global_at(&self, i: usize, deadline: Instant) -> Duration {
        self.slots[i].clock.global_at(deadline.saturating_duration_since(self.base))
    }

    /// The wall-clock time on slot `i` at global time `now`, in ms since the Unix epoch.
    pub fn wall_ms(&self, i: usize, now: Duration) -> u64 {
        let now = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        (WALL_START_MS + now).saturating_add_signed(self.slots[i].wall_offset_ms)
    }

    /// How long the current (or last) process in slot `i` has run by `now`, pauses not counted.
    pub fn running_time(&self, i: usize, now: Duration) -> Duration {
        let s = &self.slots[i];
        let paused = s.paused_total + s.paused_at.map_or(Duration::ZERO, |at| now - at);
        now.saturating_sub(s.started_at).saturating_sub(paused)
    }

    /// Nodes whose ExitingConfirmed reached the incarnation in slot `i`.
    pub fn confirmed(&self, i: usize) -> &BTreeSet<UniqueAddress> {
        &self.slots[i].confirmed
    }

    // ---- life ---------------------------------------------------------------------------------

    /// Starts a new incarnation in `slot` with a fresh uid at global time `now`, if no process
    /// runs there; its identity.
    pub fn start(&mut self, slot: usize, now: Duration) -> Option<UniqueAddress> {
        if matches!(self.slots[slot].state, SlotState::Running | SlotState::Paused) {
            return None;
        }
        // The top bit set keeps every uid's encoded length the same (see counters).
        let uid = self.uids.random::<u64>() | (1 << 63);
        let mut config = self.config.clone();
        config.seed = self.uids.random();
        let node =
            UniqueAddress::new(self.slots[slot].address.clone(), Uid::new(uid).expect("nonzero"));
        let instant = self.local_instant(slot, now);
        let wall = convoke_membership::gossip::WallMillis(self.wall_ms(slot, now));
        let core =
            Cluster::new(config, node.clone(), instant, wall).expect("valid simulated config");
        let s = &mut self.slots[slot];
        s.core = Some(Box::new(core));
        s.state = SlotState::Running;
        s.incarnations += 1;
        s.node = Some(node.clone());
        s.started_at = now;
        s.paused_total = Duration::ZERO;
        s.paused_at = None;
        s.inbox.clear();
        s.confirmed.clear();
        s.armed = None;
        Some(node)
    }

    /// Crashes the process in `slot`: it stops at once, without a word to anyone. Whether there
    /// was one.
    pub fn crash(&mut self, slot: usize) -> bool {
        let s = &mut self.slots[slot];
        if !matches!(s.state, SlotState::Running | SlotState::Paused) {
            return false;
        }
        s.state = SlotState::Crashed;
        s.core = None;
        s.inbox.clear();
        s.armed = None;
        true
    }

    /// The process in `slot` exits because its core asked to shut down.
    pub fn stop(&mut self, slot: usize, reason: ShutdownReason) {
        let s = &mut self.slots[slot];
        s.state = SlotState::Stopped(reason);
        s.inbox.clear();
        s.armed = None;
    }

    /// Pauses the running process in `slot` at `now`. Whether it was running.
    pub fn pause(&mut self, slot: usize, now: Duration) -> bool {
        let s = &mut self.slots[slot];
        if s.state != SlotState::Running {
            return false;
        }
        s.state = SlotState::Paused;
        s.paused_at = Some(now);
        true
    }

    /// Resumes the paused process in `slot` at `now`: what queued up while it was paused, to be
    /// handed over in order of arrival; `None` if it was not paused.
    pub fn resume(&mut self, slot: usize, now: Duration) -> Option<Vec<(Duration, InFlight)>> {
        let s = &mut self.slots[slot];
        if s.state != SlotState::Paused {
            return None;
        }
        s.state = SlotState::Running;
        if let Some(at) = s.paused_at.take() {
            s.paused_total += now.saturating_sub(at);
        }
        Some(std::mem::take(&mut s.inbox))
    }

    /// Queues `m`, which arrived at `at` while the process in its destination slot was paused.
    pub fn queue_while_paused(&mut self, at: Duration, m: InFlight) {
        self.slots[m.to_slot].inbox.push((at, m));
    }

    /// Records that `node`'s ExitingConfirmed reached the incarnation in `slot`.
    pub fn confirm(&mut self, slot: usize, node: UniqueAddress) {
        self.slots[slot].confirmed.insert(node);
    }

    /// Takes the core out of `slot` to feed it an input; [`Processes::put_core`] puts it back.
    pub fn take_core(&mut self, slot: usize) -> Option<Box<Cluster>> {
        self.slots[slot].core.take()
    }

    /// Puts the core of `slot` back.
    pub fn put_core(&mut self, slot: usize, core: Box<Cluster>) {
        self.slots[slot].core = Some(core);
    }

    // ---- timers -------------------------------------------------------------------------------

    /// Re-reads the core's next deadline in `slot`. When it moved: the global time to wake the
    /// core and the generation that firing must carry (earlier generations are stale).
    pub fn arm_timer(&mut self, slot: usize) -> Option<(Duration, u64)> {
        let base = self.base;
        let s = &mut self.slots[slot];
        let deadline = s
            .core
            .as_deref()
            .and_then(Cluster::poll_timeout)
            .map(|t| s.clock.global_at(t.saturating_duration_since(base)));
        if deadline == s.armed {
            return None;
        }
        s.armed = deadline;
        s.timer_gen += 1;
        deadline.map(|at| (at, s.timer_gen))
    }

    /// Forgets the armed deadline of `slot`, so that the next [`Processes::arm_timer`] schedules
    /// one even if it has not moved.
    pub fn disarm(&mut self, slot: usize) {
        self.slots[slot].armed = None;
    }

    /// A timer of `generation` fires in `slot`: whether it is current and the process runs to
    /// take it.
    pub fn take_timer(&mut self, slot: usize, generation: u64) -> bool {
        let s = &mut self.slots[slot];
        if s.timer_gen != generation || s.state != SlotState::Running {
            return false;
        }
        s.armed = None;
        true
    }

    /// After a timer in `slot` was handled at `now`: whether the core keeps asking to be woken at
    /// an instant it has already handled, which would spin forever in virtual time.
    pub fn is_spinning(&mut self, slot: usize, now: Duration) -> bool {
        let s = &mut self.slots[slot];
        if s.armed == Some(now) {
            s.same_instant_timers += 1;
            s.same_instant_timers > 1000
        } else {
            s.same_instant_timers = 0;
            false
        }
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
}

/// The process supervisor (what Kubernetes would be): it brings a stopped process back after a
/// random delay.
#[derive(Debug)]
pub struct Supervisor {
    restart_after: Option<(Duration, Duration)>,
    rng: ChaCha8Rng,
}

impl Supervisor {
    /// Restarts after a delay drawn uniformly from `restart_after` with `rng`; `None`: never.
    pub fn new(restart_after: Option<(Duration, Duration)>, rng: ChaCha8Rng) -> Self {
        Self { restart_after, rng }
    }

    /// How long until a process whose core shut it down for `reason` is restarted; `None`: it
    /// is left stopped (always so when its core gave up joining).
    pub fn on_stopped(&mut self, reason: &ShutdownReason) -> Option<Duration> {
        if matches!(reason, ShutdownReason::JoinUnsuccessful) {
            return None;
        }
        self.restart_delay()
    }

    /// How long until a process that stopped now is restarted; `None`: never.
    pub fn restart_delay(&mut self) -> Option<Duration> {
        let (lo, hi) = self.restart_after?;
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Some(Duration::from_nanos(self.rng.random_range(nanos(lo)..=nanos(hi).max(nanos(lo)))))
    }
}
