//! The cluster singleton in the simulation: a [`SingletonManager`] in every process, the instance
//! it runs, and what became of them, for the checkers (S17, L8) and the reports.
//!
//! The model:
//! - Every incarnation runs a manager of one singleton ([`NAME`]); it is created with the process
//!   and fed the members of the core's gossip after every step that changed them (status,
//!   up-number or membership), the hand-over messages that reach the process, and its timers.
//! - Hand-over messages travel over the modelled network like membership messages: same latency,
//!   loss, duplication and reordering, same partitions and clogs (from a random stream of their
//!   own, see [`crate::delivery`]). A paused process queues them until it resumes.
//! - The instance: `StartInstance` marks it running at that virtual time. `StopInstance` makes it
//!   end after a delay drawn from `0..=`[`MAX_STOP_DELAY`] (the seeded stream of this layer), and
//!   then the manager hears `instance_stopped`. The managers run with a hand-over timeout of
//!   [`HAND_OVER_TIMEOUT`], shorter than the longest stop: an instance whose stop takes longer is
//!   ended by the manager's `AbortInstance` instead. A crashed process's instance is gone at
//!   once. A paused process's instance is paused with it: a stop due meanwhile completes when it
//!   resumes.
//! - The lease, when the run has one (`chaos --singleton-lease`): the managers acquire it before
//!   they start, renew it, release it, over the modelled store of [`crate::lease`]; the answers
//!   come back like messages (a paused process takes them in when it resumes), or the driver's
//!   operation timeout answers `false`.
//! - The node's termination: when its core shuts it down because it was downed (or removed, or
//!   gave up joining) the manager is told `shutdown` and the process exits, taking its instance
//!   with it. When the node *left* gracefully and still holds the instance, the process lingers
//!   for up to [`linger`] to hand it over, as a runtime's graceful shutdown does: its manager keeps
//!   answering hand-over messages until its instance has stopped, then the process exits; at the
//!   end of the linger it is shut down like a downed one. The linger is shorter than the removal
//!   margin: a new host that stops waiting for the leaver when the margin after its removal has
//!   passed must find it gone.
//!
//! Nothing here touches the event queue or the membership trace: the world drives it (in
//! `world/singleton.rs`), and its steps go into a trace hash of their own, so that a run's
//! membership trace hash is the same with or without the singleton.

use std::time::Duration;

use convoke_membership::{Config, UniqueAddress};
use convoke_singleton::{SingletonConfig, SingletonManager};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::delivery::HandOverInFlight;
use crate::lease::{self, LeaseConfig, LeaseStore};
use crate::queue::TimerSlot;
use crate::trace::TraceHash;

/// The name of the simulated singleton.
pub const NAME: &str = "sim-singleton";
/// The longest an instance takes to end once asked to stop.
pub const MAX_STOP_DELAY: Duration = Duration::from_secs(2);
/// How long an instance asked to stop may take before its manager aborts it: short enough that
/// an abort, timed on a node's clock that runs up to 2 % fast or slow, still ends the instance
/// within [`MAX_STOP_DELAY`]; long enough that about one stop in ten is ended by an abort.
pub const HAND_OVER_TIMEOUT: Duration = Duration::from_millis(1_800);
/// The longest a process that left gracefully stays to hand its instance over: half the removal
/// margin.
pub fn linger(config: &SingletonConfig) -> Duration {
    config.removal_margin / 2
}

/// Which removal margin the simulated managers use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Margin {
    /// [`SingletonConfig::removal_margin_for`] with [`MAX_STOP_DELAY`]: the resolver's
    /// `stable_after` and down-all-when-unstable delay, a failure-detection time and the time an
    /// instance takes to stop.
    #[default]
    Recommended,
    /// The resolver's `stable_after` alone, which lets two instances overlap (see
    /// [`SingletonConfig::removal_margin_for`]); kept to show it.
    StableAfter,
}

/// The singleton settings for a simulated cluster configured as `cluster`: retries every second,
/// the removal margin `margin`, the hand-over timeout [`HAND_OVER_TIMEOUT`], no lease.
pub fn config(cluster: &Config, margin: Margin) -> SingletonConfig {
    let mut c = SingletonConfig::new(NAME);
    c.hand_over_retry_interval = Duration::from_secs(1);
    c.hand_over_timeout = HAND_OVER_TIMEOUT;
    c.removal_margin = match margin {
        Margin::Recommended => SingletonConfig::removal_margin_for(cluster, MAX_STOP_DELAY),
        Margin::StableAfter => cluster.split_brain_resolver.stable_after,
    };
    c
}

/// The settings `c` with the lease on, renewed every [`lease::HEARTBEAT_INTERVAL`], operations
/// bounded by [`lease::OPERATION_TIMEOUT`].
pub fn with_lease(mut c: SingletonConfig) -> SingletonConfig {
    c.use_lease = true;
    c.lease_heartbeat_interval = lease::HEARTBEAT_INTERVAL;
    c.lease_operation_timeout = lease::OPERATION_TIMEOUT;
    c
}

/// An instance of the singleton.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The incarnation that runs it.
    pub node: UniqueAddress,
    /// When it started (global virtual time).
    pub since: Duration,
    /// When its manager asked it to stop, if it did.
    pub stop_asked_at: Option<Duration>,
    /// When its process was paused, while it is.
    pub paused_at: Option<Duration>,
    /// When the first pause of its process since it started that lasted longer than the removal
    /// margin began, once one has ended.
    pub long_pause_from: Option<Duration>,
    /// When the first such pause ended.
    pub long_pause_until: Option<Duration>,
    /// When its process last resumed from a pause since the instance started.
    pub resumed_at: Option<Duration>,
    /// With the lease: whether its host held it, by the store, when it started.
    pub leased_at_start: Option<bool>,
}

impl Instance {
    /// When the first pause of its process longer than `margin` since the instance started
    /// began, counting the current one once it has lasted that long at `now`.
    pub fn long_pause_from(&self, now: Duration, margin: Duration) -> Option<Duration> {
        let current = self.paused_at.filter(|at| now.saturating_sub(*at) > margin);
        self.long_pause_from.or(current)
    }
}

/// The singleton side of one slot.
#[derive(Debug, Default)]
pub struct SlotSingleton {
    /// The manager of the current incarnation; `None` before the first start, after a crash, and
    /// once the process exited.
    pub manager: Option<SingletonManager>,
    /// The instance, running or stopping.
    pub instance: Option<Instance>,
    /// The process left gracefully and stays only to hand its instance over.
    pub lingering: bool,
    /// Hand-over messages that arrived while the process was paused.
    pub(crate) inbox: Vec<HandOverInFlight>,
    /// The instance's stop completed while the process was paused.
    pub(crate) stop_due: bool,
    /// The manager's timer.
    pub(crate) timer: TimerSlot,
    /// The acquire whose answer the manager waits for.
    pub(crate) lease_pending: Option<u64>,
    /// Its answer, come while the process was paused.
    pub(crate) lease_answer: Option<bool>,
}

/// What the singletons did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SingletonStats {
    /// Instances started.
    pub starts: u64,
    /// Instances that ended after their manager asked them to stop.
    pub stops: u64,
    /// Instances gone with their process (a crash, an exit).
    pub gone_with_process: u64,
    /// Hand-over messages sent.
    pub messages_sent: u64,
    /// Hand-over messages handed to a manager.
    pub messages_delivered: u64,
    /// HandOverDone messages handed to a manager.
    pub hand_over_done: u64,
    /// Instances ended by their manager's abort, past the hand-over timeout.
    pub aborts: u64,
}

/// Every slot's singleton, the random stream of stop delays, the lease store, the counters and
/// the trace hash.
#[derive(Debug)]
pub struct Singletons {
    config: SingletonConfig,
    slots: Vec<SlotSingleton>,
    rng: ChaCha8Rng,
    /// The lease store, when the managers use a lease.
    pub(crate) lease: Option<LeaseStore>,
    /// The number of the next lease operation.
    pub(crate) next_lease_op: u64,
    /// What happened so far.
    pub stats: SingletonStats,
    trace: TraceHash,
}

impl Singletons {
    /// `n` slots running singleton `config`; stop delays drawn from `rng`, and with the lease
    /// (`config.use_lease`) the store's draws from `lease_rng`.
    pub fn new(
        n: usize,
        config: SingletonConfig,
        rng: ChaCha8Rng,
        lease_rng: impl FnOnce() -> ChaCha8Rng,
    ) -> Self {
        let slots = (0..n).map(|_| SlotSingleton::default()).collect();
        let lease = config
            .use_lease
            .then(|| LeaseStore::new(n, LeaseConfig::for_singleton(&config), lease_rng()));
        Self {
            config,
            slots,
            rng,
            lease,
            next_lease_op: 0,
            stats: SingletonStats::default(),
            trace: TraceHash::new(),
        }
    }

    /// The lease store, when the managers use a lease.
    pub fn lease(&self) -> Option<&LeaseStore> {
        self.lease.as_ref()
    }

    /// The settings every manager runs with.
    pub fn config(&self) -> &SingletonConfig {
        &self.config
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &SlotSingleton {
        &self.slots[i]
    }

    /// Slot `i`, to change.
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut SlotSingleton {
        &mut self.slots[i]
    }

    /// The hash of every singleton step so far.
    pub fn trace_hash(&self) -> u64 {
        std::hash::Hasher::finish(&self.trace)
    }

    /// Hashes one step into the singleton trace.
    pub(crate) fn hash(&mut self, now: Duration, slot: usize, what: &str) {
        self.trace.step(now, slot, what);
    }

    /// How long the instance in `slot`, asked to stop now, takes to end.
    pub(crate) fn stop_delay(&mut self) -> Duration {
        let max = u64::try_from(MAX_STOP_DELAY.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.random_range(0..=max))
    }

    /// The instances that exist now, with their slots.
    pub fn instances(&self) -> impl Iterator<Item = (usize, &Instance)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.instance.as_ref().map(|x| (i, x)))
    }

    /// A new incarnation `node` starts in `slot` at `now` (`local_now` on its clock): whatever the
    /// last one left there is gone, and a new manager starts.
    pub(crate) fn on_start(
        &mut self,
        slot: usize,
        node: UniqueAddress,
        local_now: std::time::Instant,
    ) {
        self.on_exit(slot);
        let s = &mut self.slots[slot];
        s.manager = Some(SingletonManager::new(self.config.clone(), node, local_now));
    }

    /// The process in `slot` is gone (crashed, or exited): its manager and instance with it.
    pub(crate) fn on_exit(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if s.instance.take().is_some() {
            self.stats.gone_with_process += 1;
        }
        s.manager = None;
        s.lingering = false;
        s.inbox.clear();
        s.stop_due = false;
        s.timer.cancel();
        s.lease_pending = None;
        s.lease_answer = None;
    }
}
