//! What the world shows: to the commands and their reports, and to the checkers as a
//! [`WorldView`].

use std::time::{Duration, Instant};

use convoke_membership::{Address, Cluster};

use super::{Sim, SimOptions, UpTracker};
use crate::counters::NodeCounters;
use crate::invariants::{InstanceView, Violation, WorldView};
use crate::net::{Links, NetConfig};
use crate::operator::Operator;
use crate::processes::Slot;
use crate::sharding::Shardings;
use crate::singleton::Singletons;

impl Sim {
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
        self.delivery.delivered()
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &Slot {
        self.procs.slot(i)
    }

    /// The core in slot `i`, running or paused.
    pub fn core(&self, i: usize) -> Option<&Cluster> {
        self.procs.core(i)
    }

    /// Whether slot `i` has a running (not paused) process.
    pub fn is_running(&self, i: usize) -> bool {
        self.procs.is_running(i)
    }

    /// Slots with a running process.
    pub fn running(&self) -> impl Iterator<Item = usize> + '_ {
        self.procs.running()
    }

    /// The slot of `address`, if it is a simulated node.
    pub fn slot_of(&self, address: &Address) -> Option<usize> {
        self.procs.slot_of(address)
    }

    /// The first violated invariant, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// The trace hash so far.
    pub fn trace_hash(&self) -> u64 {
        std::hash::Hasher::finish(&self.trace)
    }

    /// Per-slot traffic counters.
    pub fn counters(&self) -> &[NodeCounters] {
        self.delivery.counters()
    }

    /// Split-brain resolver decisions taken so far, by all nodes.
    pub fn decisions(&self) -> u64 {
        self.decisions
    }

    /// Gossip messages encoded to size them so far.
    pub fn gossips_encoded(&self) -> u64 {
        self.delivery.gossips_encoded()
    }

    /// Zeroes the traffic counters.
    pub fn reset_counters(&mut self) {
        self.delivery.reset_counters();
    }

    /// Who has seen whom Up.
    pub fn up_tracker(&self) -> &UpTracker {
        &self.up
    }

    /// The current network quality.
    pub fn net(&self) -> &NetConfig {
        self.delivery.net()
    }

    /// The link state.
    pub fn links(&self) -> &Links {
        self.delivery.links()
    }

    /// The operator: what it downed, quarantined and bootstrapped so far.
    pub fn operator(&self) -> &Operator {
        &self.operator
    }

    /// The latest steps as text (when `log_steps` > 0).
    pub fn log(&self) -> impl Iterator<Item = &str> {
        self.trace.log()
    }

    /// The names of the registered invariant checkers.
    pub fn checker_ids(&self) -> Vec<&'static str> {
        self.checkers.ids()
    }

    /// The current time on slot `i`'s clock, as the core sees it.
    pub fn local_instant(&self, i: usize) -> Instant {
        self.procs.local_instant(i, self.now)
    }

    /// The wall-clock time on slot `i`, in ms since the Unix epoch.
    pub fn wall_ms(&self, i: usize) -> u64 {
        self.procs.wall_ms(i, self.now)
    }

    /// Every slot's state and view, one line per slot plus one per member, for failure reports.
    pub fn dump(&self) -> Vec<String> {
        self.procs.dump()
    }

    /// The cluster sharding layer, when the run has one.
    pub fn shardings(&self) -> Option<&Shardings> {
        self.shardings.as_ref()
    }

    /// The replicated store layer, when the run has one.
    pub fn data(&self) -> Option<&crate::data::DataLayer> {
        self.data.as_ref()
    }

    /// The replicated store layer, for the chaos run's last phase.
    pub fn data_mut(&mut self) -> Option<&mut crate::data::DataLayer> {
        self.data.as_mut()
    }

    /// Per key of the store's load, the slots of its replicas as the first running store's ring
    /// places them, those with a running process only.
    pub fn data_replicas(&self) -> std::collections::BTreeMap<u32, Vec<usize>> {
        let Some(d) = self.data.as_ref() else { return Default::default() };
        let Some(store) = (0..self.procs.len()).find_map(|i| {
            let s = d.slot(i).store.as_ref()?;
            self.is_running(i).then_some(s)
        }) else {
            return Default::default();
        };
        let n = d.config().replicas;
        (0..crate::data::KEYS)
            .map(|k| {
                let slots = store
                    .ring()
                    .replicas(crate::data::key(k).as_bytes(), n)
                    .into_iter()
                    .filter_map(|a| self.procs.slot_of(a))
                    // An absent holder's copy waits for its return (docs/data.md).
                    .filter(|i| self.is_running(*i))
                    .collect();
                (k, slots)
            })
            .collect()
    }

    /// Whether fewer than a quorum of the replicas of `entity`'s state have a running process,
    /// on a ring some running process's store places the key by (its current ring, absent
    /// holders included, or one it remembers): the state is out of reach until they return or
    /// `data.absent_timeout` passes. False without entity state.
    pub fn state_quorum_gone(&self, entity: &convoke_sharding::EntityId) -> bool {
        if self.shardings.as_ref().and_then(|s| s.states()).is_none() {
            return false;
        }
        let Some(d) = self.data.as_ref() else { return false };
        let n = d.config().replicas;
        let key = crate::state::key(crate::sharding::TYPE_NAME, entity);
        let short = |ring: &convoke_data::ring::Ring| {
            let replicas = ring.replicas(key.as_bytes(), n);
            let running = replicas
                .iter()
                .filter(|a| self.procs.slot_of(a).is_some_and(|i| self.is_running(i)))
                .count();
            running < n / 2 + 1
        };
        (0..self.procs.len()).filter(|i| self.is_running(*i)).any(|i| {
            d.slot(i)
                .store
                .as_ref()
                .is_some_and(|s| std::iter::once(s.ring()).chain(s.past_rings()).any(short))
        })
    }

    /// The cluster singleton layer, when the run has one.
    pub fn singletons(&self) -> Option<&Singletons> {
        self.singletons.as_ref()
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
        self.procs.len()
    }

    fn core(&self, slot: usize) -> Option<&Cluster> {
        self.procs.core(slot)
    }

    fn is_stopped(&self, slot: usize) -> bool {
        self.procs.is_stopped(slot)
    }

    fn link_open(&self, from: usize, to: usize) -> bool {
        self.delivery.link_open(from, to)
    }

    fn is_running(&self, slot: usize) -> bool {
        self.procs.is_running(slot)
    }

    fn running_time(&self, slot: usize) -> Duration {
        self.procs.running_time(slot, self.now)
    }

    fn singleton(&self, slot: usize) -> Option<InstanceView> {
        let s = self.singletons.as_ref()?;
        let i = s.slot(slot).instance.as_ref()?;
        Some(InstanceView {
            node: i.node.clone(),
            since: i.since,
            stopping: i.stop_asked_at.is_some(),
            long_pause_from: i.long_pause_from(self.now, s.config().removal_margin),
            stale_until: i.long_pause_until.map(|u| {
                u + s.config().hand_over_retry_interval + crate::singleton::MAX_STOP_DELAY
            }),
            paused: i.paused_at.is_some(),
            resume_grace_until: i.resumed_at.map(|u| {
                u + s.config().hand_over_retry_interval + crate::singleton::MAX_STOP_DELAY
            }),
            leased: i.leased_at_start,
        })
    }
}
