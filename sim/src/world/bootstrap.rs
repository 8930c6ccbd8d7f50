//! The bootstrap layer's steps: each process's [`BootstrapMachine`] fed its timers and the
//! answers of the modelled discovery and probes, and its actions carried out — lookups and probes
//! sent, and the final join run on the core. After every join, B1 looks at the world. See
//! [`crate::bootstrap`] for the model.

use std::time::{Duration, Instant};

use convoke_bootstrap::{Action as BootAction, BootstrapMachine, ProbeError};
use convoke_discovery::{DiscoveryError, Resolved, ResolvedTarget};
use convoke_membership::Address;

use super::{Event, Sim};
use crate::bootstrap::{
    BootstrapConfig, BootstrapEvent, Bootstraps, Decided, LookupFailure, PAUSED_POLL, ProbeOutcome,
    contact_point, local_node, seed_nodes, slot_of_contact_point,
};
use crate::invariants::{Invariant, Violation};
use crate::processes::SlotState;

impl Sim {
    /// Adds the bootstrap layer, drawing from its own random stream. Processes started with
    /// [`Sim::start_bootstrapping`] then bootstrap; B1 is watched until
    /// [`Sim::end_bootstrap_watch`].
    pub fn enable_bootstrap(&mut self, config: BootstrapConfig) {
        let rng = super::rng(self.opts.seed, super::Stream::Bootstrap);
        self.bootstraps = Some(Bootstraps::new(self.len(), config, rng));
    }

    /// The bootstrap layer, when the run has one.
    pub fn bootstraps(&self) -> Option<&Bootstraps> {
        self.bootstraps.as_ref()
    }

    /// Starts a new incarnation in `slot`, if no process runs there, that bootstraps: it joins
    /// nothing and runs a bootstrap machine (when the layer is on). Returns whether it started.
    pub fn start_bootstrapping(&mut self, slot: usize) -> bool {
        if !self.start(slot) {
            return false;
        }
        let local = self.local_instant(slot);
        let incarnation = self.slot(slot).incarnations;
        let address = self.slot(slot).address.clone();
        let now = self.now;
        let Some(b) = self.bootstraps.as_mut() else { return true };
        let seed = b.seed();
        let settings = b.config().settings.clone();
        let machine = BootstrapMachine::new(&settings, &local_node(slot, &address), seed, local);
        b.stats.machines += 1;
        b.hash(now, slot, "start");
        if b.slot(slot).machine.is_some() {
            b.stats.machines_lost += 1;
        }
        let s = b.slot_mut(slot);
        s.machine = Some(machine);
        s.incarnation = incarnation;
        s.deferred.clear();
        self.note(|| format!("slot {slot} bootstrap starts"));
        let deadline = self.machine_timeout(slot);
        self.arm_boot_timer(slot, deadline);
        true
    }

    /// Stops watching B1 (the formation is over); returns whether it was watched.
    pub fn end_bootstrap_watch(&mut self) -> bool {
        self.bootstraps.as_mut().is_some_and(|b| b.checker.take().is_some())
    }

    /// Looks at the world for B1 now, while it is watched; a violation is recorded.
    pub fn bootstrap_look(&mut self) {
        let Some(mut checker) = self.bootstraps.as_mut().and_then(|b| b.checker.take()) else {
            return;
        };
        if self.violation.is_none()
            && !self.checkers.is_empty()
            && let Err(message) = checker.check_world(self)
        {
            self.note(|| format!("VIOLATION B1 {message}"));
            self.violation = Some(Violation {
                invariant: checker.id().to_owned(),
                step: self.step,
                time_s: self.now.as_secs_f64(),
                slot: None,
                message,
            });
        }
        if let Some(b) = self.bootstraps.as_mut() {
            b.checker = Some(checker);
        }
    }

    pub(super) fn bootstrap_event(&mut self, e: BootstrapEvent) {
        match e {
            BootstrapEvent::ProbeArrives { slot, incarnation, target, deadline, back } => {
                self.probe_arrives(slot, incarnation, target, deadline, back);
            }
            BootstrapEvent::Resume { slot } => self.boot_resume(slot),
            other => self.boot_deliver(other),
        }
    }

    /// An input for a machine: taken now if its process runs, kept for its resume if paused,
    /// dropped if the process that asked is gone.
    fn boot_deliver(&mut self, e: BootstrapEvent) {
        let (slot, incarnation) = match &e {
            BootstrapEvent::Timer { slot, .. } => (*slot, None),
            BootstrapEvent::Lookup { slot, incarnation, .. }
            | BootstrapEvent::ProbeAnswer { slot, incarnation, .. } => (*slot, Some(*incarnation)),
            BootstrapEvent::ProbeArrives { slot, .. } | BootstrapEvent::Resume { slot } => {
                (*slot, None)
            }
        };
        let proc = self.procs.slot(slot);
        let alive = matches!(proc.state, SlotState::Running | SlotState::Paused);
        let current = proc.incarnations;
        let Some(b) = self.bootstraps.as_mut() else { return };
        let s = b.slot(slot);
        if s.machine.is_some() && (!alive || s.incarnation != current) {
            // Its process is gone: the machine with it.
            b.stats.machines_lost += 1;
            let s = b.slot_mut(slot);
            s.machine = None;
            s.deferred.clear();
            return;
        }
        let s = b.slot(slot);
        if incarnation.is_some_and(|i| i != s.incarnation) || s.machine.is_none() {
            return;
        }
        if let BootstrapEvent::Timer { generation, .. } = &e
            && !s.timer.is_current(*generation)
        {
            return;
        }
        match self.procs.slot(slot).state {
            SlotState::Running => self.boot_take(e),
            SlotState::Paused => {
                let s = b.slot_mut(slot);
                s.deferred.push(e);
                if !s.polling {
                    s.polling = true;
                    self.push(self.now + PAUSED_POLL, resume_event(slot));
                }
            }
            _ => {}
        }
    }

    fn boot_resume(&mut self, slot: usize) {
        let Some(b) = self.bootstraps.as_mut() else { return };
        b.slot_mut(slot).polling = false;
        match self.procs.slot(slot).state {
            SlotState::Paused => {
                b.slot_mut(slot).polling = true;
                self.push(self.now + PAUSED_POLL, resume_event(slot));
            }
            SlotState::Running => {
                let deferred = std::mem::take(&mut b.slot_mut(slot).deferred);
                for e in deferred {
                    self.boot_deliver(e);
                }
            }
            _ => b.slot_mut(slot).deferred.clear(),
        }
    }

    /// Feeds one input to the running machine of its slot.
    fn boot_take(&mut self, e: BootstrapEvent) {
        match e {
            BootstrapEvent::Timer { slot, .. } => {
                if let Some(b) = self.bootstraps.as_mut() {
                    b.slot_mut(slot).timer.forget();
                }
                self.boot_input(slot, "timer", |m, now| m.handle_timeout(now));
            }
            BootstrapEvent::Lookup { slot, error, .. } => {
                let result = self.lookup_result(slot, error);
                self.boot_input(slot, "lookup", |m, now| m.handle_lookup(result, now));
            }
            BootstrapEvent::ProbeAnswer { slot, target: cp, outcome, .. } => {
                let timeout = self.boot_settings_probe_timeout();
                self.boot_input(slot, "probe", |m, now| {
                    let url = m.probe_url(&cp);
                    let result = match outcome {
                        ProbeOutcome::Answer(a) => Ok(a),
                        ProbeOutcome::Timeout => Err(ProbeError::Timeout { url, timeout }),
                        ProbeOutcome::Refused => {
                            Err(ProbeError::Request { url, reason: "connection refused".into() })
                        }
                    };
                    m.handle_probe(cp, result, now);
                });
            }
            BootstrapEvent::ProbeArrives { .. } | BootstrapEvent::Resume { .. } => {}
        }
    }

    fn boot_settings_probe_timeout(&self) -> Duration {
        self.bootstraps
            .as_ref()
            .map_or(Duration::ZERO, |b| b.config().settings.contact_point.probe_timeout)
    }

    /// The answer of a lookup by `slot` ending now: the contact points of the pods listed now,
    /// some left out while faults are on, or the error.
    fn lookup_result(
        &mut self,
        slot: usize,
        error: Option<LookupFailure>,
    ) -> Result<Resolved, DiscoveryError> {
        let now = self.now;
        let Some(b) = self.bootstraps.as_mut() else {
            return Err(DiscoveryError::Config("no discovery".into()));
        };
        let service = crate::bootstrap::SERVICE;
        b.stats.lookups += 1;
        match error {
            Some(LookupFailure::Timeout) => {
                b.stats.lookups_failed += 1;
                let timeout = b.config().settings.resolve_timeout;
                return Err(DiscoveryError::Timeout { lookup: service.into(), timeout });
            }
            Some(LookupFailure::Failed) => {
                b.stats.lookups_failed += 1;
                return Err(DiscoveryError::Failed {
                    lookup: service.into(),
                    reason: "modelled failure".into(),
                });
            }
            None => {}
        }
        let mut targets = Vec::new();
        let service_slots = b.config().service.clone();
        for i in service_slots {
            let s = self.procs.slot(i);
            if !matches!(s.state, SlotState::Running | SlotState::Paused) {
                continue;
            }
            let (incarnation, started) = (s.incarnations, s.started_at);
            if b.listed_from(i, incarnation, started) > now || b.left_out(now, slot, i) {
                continue;
            }
            let cp = contact_point(i);
            targets.push(ResolvedTarget::new(cp.host, cp.port, cp.address));
        }
        Ok(Resolved::new(service, targets))
    }

    /// Runs `f` on the machine of `slot` at its node's time, then carries out its actions and
    /// re-arms its timer. A node that became a member by other means stops its machine instead.
    fn boot_input(
        &mut self,
        slot: usize,
        what: &'static str,
        f: impl FnOnce(&mut BootstrapMachine, Instant),
    ) {
        let now = self.now;
        let local = self.local_instant(slot);
        let me = self.slot(slot).address.clone();
        let joined =
            self.procs.core(slot).is_some_and(|c| c.gossip().members().any(|m| *m.address() == me));
        let Some(b) = self.bootstraps.as_mut() else { return };
        let Some(mut m) = b.slot_mut(slot).machine.take() else { return };
        b.hash(now, slot, what);
        if joined {
            m.stop();
            b.stats.stopped += 1;
            b.slot_mut(slot).deferred.clear();
            self.note(|| format!("slot {slot} bootstrap stops: the node joined otherwise"));
            self.arm_boot_timer(slot, None);
            return;
        }
        f(&mut m, local);
        let mut actions = Vec::new();
        while let Some(a) = m.poll_action() {
            actions.push(a);
        }
        let deadline = m.poll_timeout();
        if let Some(b) = self.bootstraps.as_mut() {
            b.slot_mut(slot).machine = Some(m);
        }
        self.arm_boot_timer(slot, deadline);
        for a in actions {
            self.boot_action(slot, a);
        }
    }

    fn machine_timeout(&self, slot: usize) -> Option<Instant> {
        self.bootstraps.as_ref()?.slot(slot).machine.as_ref()?.poll_timeout()
    }

    fn arm_boot_timer(&mut self, slot: usize, deadline: Option<Instant>) {
        let at = deadline.map(|t| self.procs.global_at(slot, t));
        let Some(b) = self.bootstraps.as_mut() else { return };
        if let Some((at, generation)) = b.slot_mut(slot).timer.arm(at) {
            self.push(at, Event::Bootstrap(BootstrapEvent::Timer { slot, generation }));
        }
    }

    fn boot_action(&mut self, slot: usize, a: BootAction) {
        let now = self.now;
        let Some(b) = self.bootstraps.as_mut() else { return };
        let incarnation = b.slot(slot).incarnation;
        match a {
            BootAction::Lookup => {
                b.hash(now, slot, "lookup");
                let (at, error) = b.lookup_outcome(now);
                self.push(
                    at,
                    Event::Bootstrap(BootstrapEvent::Lookup { slot, incarnation, error }),
                );
            }
            BootAction::Probe(cp) => {
                b.stats.probes += 1;
                b.hash(now, slot, "probe");
                let timeout = b.config().settings.contact_point.probe_timeout;
                let deadline = now + timeout;
                let Some(target) = slot_of_contact_point(&cp, self.procs.len()) else {
                    b.stats.probes_refused += 1;
                    let outcome = ProbeOutcome::Refused;
                    let e = BootstrapEvent::ProbeAnswer { slot, incarnation, target: cp, outcome };
                    self.push(now, Event::Bootstrap(e));
                    return;
                };
                match b.probe_path(now) {
                    None => {
                        b.stats.probes_timed_out += 1;
                        let outcome = ProbeOutcome::Timeout;
                        let e =
                            BootstrapEvent::ProbeAnswer { slot, incarnation, target: cp, outcome };
                        self.push(deadline, Event::Bootstrap(e));
                    }
                    Some((there, back)) => {
                        let e = BootstrapEvent::ProbeArrives {
                            slot,
                            incarnation,
                            target,
                            deadline,
                            back,
                        };
                        self.push((now + there).min(deadline), Event::Bootstrap(e));
                    }
                }
            }
            BootAction::JoinSelf => self.boot_join(slot, "JoinSelf", Vec::new()),
            BootAction::JoinOthers(seeds) => self.boot_join(slot, "JoinOthers", seeds),
        }
    }

    /// A probe from `slot` reaches `target`: answered with what its core would answer now, unless
    /// it gets no answer in time.
    fn probe_arrives(
        &mut self,
        slot: usize,
        incarnation: u32,
        target: usize,
        deadline: Duration,
        back: Duration,
    ) {
        let now = self.now;
        let open = self.delivery.link_open(slot, target) && self.delivery.link_open(target, slot);
        let (outcome, at) = match self.procs.slot(target).state {
            _ if now >= deadline => (ProbeOutcome::Timeout, deadline),
            SlotState::Paused => (ProbeOutcome::Timeout, deadline),
            _ if !open => (ProbeOutcome::Timeout, deadline),
            SlotState::Running => match self.procs.core(target) {
                Some(core) if now + back <= deadline => {
                    (ProbeOutcome::Answer(seed_nodes(core)), now + back)
                }
                _ => (ProbeOutcome::Timeout, deadline),
            },
            _ if now + back <= deadline => (ProbeOutcome::Refused, now + back),
            _ => (ProbeOutcome::Timeout, deadline),
        };
        if let Some(b) = self.bootstraps.as_mut() {
            match outcome {
                ProbeOutcome::Timeout => b.stats.probes_timed_out += 1,
                ProbeOutcome::Refused => b.stats.probes_refused += 1,
                ProbeOutcome::Answer(_) => {}
            }
        }
        let e = BootstrapEvent::ProbeAnswer {
            slot,
            incarnation,
            target: contact_point(target),
            outcome,
        };
        self.push(at, Event::Bootstrap(e));
    }

    /// Carries out the machine's decision in `slot`, as the runtime does: `JoinOthers` joins the
    /// seed nodes other than this node, or this node itself if none is left; `JoinSelf` joins
    /// this node itself. Then B1 looks.
    fn boot_join(&mut self, slot: usize, decision: &'static str, seeds: Vec<String>) {
        let now = self.now;
        let me = self.slot(slot).address.clone();
        let node = self.slot(slot).node.as_ref().map(ToString::to_string).unwrap_or_default();
        let others: Vec<Address> =
            seeds.iter().filter_map(|s| s.parse::<Address>().ok()).filter(|a| *a != me).collect();
        let joined_self = others.is_empty();
        if let Some(b) = self.bootstraps.as_mut() {
            b.hash(now, slot, decision);
            if joined_self {
                b.stats.joins_self += 1;
            } else {
                b.stats.joins_others += 1;
            }
            b.decisions.push(Decided {
                slot,
                node,
                at_s: now.as_secs_f64(),
                decision,
                seeds: seeds.clone(),
                joined_self,
            });
            // The machine has ended.
            b.slot_mut(slot).machine = None;
            b.slot_mut(slot).deferred.clear();
        }
        self.arm_boot_timer(slot, None);
        self.note(|| format!("slot {slot} bootstrap decides {decision} {seeds:?}"));
        if joined_self {
            self.join(slot, slot);
        } else {
            self.command(slot, "bootstrap_join_seed_nodes", |c, now| {
                let _ = c.join_seed_nodes(now, others);
            });
        }
        self.bootstrap_look();
    }
}

fn resume_event(slot: usize) -> Event {
    Event::Bootstrap(BootstrapEvent::Resume { slot })
}
