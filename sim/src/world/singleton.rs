//! The singleton layer's steps: membership lists, hand-over messages, timers, instance stops and
//! terminations fed to the managers, and their outputs carried out — messages into the network,
//! instances started, asked to stop and aborted, lease operations sent to the store (`lease`).
//! After each such step the singleton checker (S17) looks at every instance. None of it touches a
//! membership core or the membership trace.

use std::time::{Duration, Instant};

use convoke_membership::{Member, ShutdownReason, UniqueAddress};
use convoke_singleton::{HandOver, Output, SingletonManager};

use super::{Event, Sim, into_queue};
use crate::delivery::HandOverInFlight;
use crate::lease::LeaseOp;
use crate::processes::SlotState;
use crate::singleton::{Instance, linger};

impl Sim {
    /// Feeds one input to the manager in `slot`, if it has one, and carries out its outputs.
    pub(super) fn singleton_input(
        &mut self,
        slot: usize,
        what: &'static str,
        f: impl FnOnce(&mut SingletonManager, Instant),
    ) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.singletons.as_mut() else { return };
        let Some(mut m) = s.slot_mut(slot).manager.take() else { return };
        s.hash(now, slot, what);
        let before = m.phase();
        f(&mut m, local);
        let me = m.self_node().clone();
        while let Some(o) = m.poll_output() {
            self.carry_out(slot, &me, o);
        }
        let after = m.phase();
        if before != after {
            self.note(|| format!("slot {slot} singleton {what}: {before} -> {after}"));
        }
        let deadline = m.poll_timeout();
        if let Some(s) = self.singletons.as_mut() {
            s.slot_mut(slot).manager = Some(m);
        }
        self.arm_singleton_timer(slot, deadline);
        self.check_singletons();
    }

    fn carry_out(&mut self, slot: usize, me: &UniqueAddress, o: Output) {
        let now = self.now;
        let Some(s) = self.singletons.as_mut() else { return };
        match o {
            Output::Send { to, message } => {
                s.stats.messages_sent += 1;
                s.hash(now, slot, message.name());
                let Some(to_slot) = self.procs.slot_of(&to.address) else { return };
                self.note(|| format!("slot {slot} singleton -> {} {}", to_slot, message.name()));
                let m = HandOverInFlight { from_slot: slot, from: me.clone(), to_slot, message };
                self.delivery.send_hand_over(now, m, into_queue(&mut self.queue, now));
            }
            Output::StartInstance => {
                s.stats.starts += 1;
                s.hash(now, slot, "start");
                let leased = s.lease.as_ref().map(|l| {
                    l.holder(crate::singleton::NAME, now).is_some_and(|h| *h == me.address)
                });
                s.slot_mut(slot).instance = Some(Instance {
                    node: me.clone(),
                    since: now,
                    stop_asked_at: None,
                    paused_at: None,
                    long_pause_from: None,
                    long_pause_until: None,
                    resumed_at: None,
                    leased_at_start: leased,
                });
                self.note(|| format!("slot {slot} SINGLETON STARTS ({me})"));
                self.coordinator_started(slot);
            }
            Output::StopInstance => {
                s.hash(now, slot, "stop");
                let delay = s.stop_delay();
                let Some(instance) = s.slot_mut(slot).instance.as_mut() else { return };
                if instance.stop_asked_at.is_some() {
                    return;
                }
                instance.stop_asked_at = Some(now);
                let since = instance.since;
                self.coordinator_stopped(slot);
                let incarnation = self.procs.slot(slot).incarnations;
                self.push(now + delay, Event::InstanceStopped { slot, incarnation, since });
                self.note(|| format!("slot {slot} singleton asked to stop (ends in {delay:?})"));
            }
            Output::AbortInstance => {
                s.hash(now, slot, "abort");
                let Some(since) = s.slot(slot).instance.as_ref().map(|i| i.since) else { return };
                s.stats.aborts += 1;
                let incarnation = self.procs.slot(slot).incarnations;
                self.push(now, Event::InstanceStopped { slot, incarnation, since });
                self.note(|| format!("slot {slot} singleton aborted"));
            }
            Output::AcquireLease | Output::RenewLease => {
                self.lease_send(slot, me, LeaseOp::Acquire)
            }
            Output::ReleaseLease => self.lease_send(slot, me, LeaseOp::Release),
        }
    }

    fn arm_singleton_timer(&mut self, slot: usize, deadline: Option<Instant>) {
        let at = deadline.map(|t| self.procs.global_at(slot, t));
        let Some(s) = self.singletons.as_mut() else { return };
        if let Some((at, generation)) = s.slot_mut(slot).timer.arm(at) {
            self.push(at, Event::SingletonTimer { slot, generation });
        }
    }

    /// Whether the process in `slot` takes singleton input now: it runs, or it lingers to hand
    /// over.
    pub(super) fn singleton_live(&self, slot: usize) -> bool {
        self.is_running(slot) || self.singletons.as_ref().is_some_and(|s| s.slot(slot).lingering)
    }

    /// After a step of the core in `slot` that changed its members: the manager sees them.
    pub(super) fn singleton_members(&mut self, slot: usize, members: &[Member]) {
        self.singleton_input(slot, "members", |m, now| m.handle_members(now, members));
    }

    /// The core in `slot` shut its node down: a node that left and still holds the instance
    /// lingers to hand it over; any other exits at once, its instance with it.
    pub(super) fn singleton_terminated(&mut self, slot: usize, reason: &ShutdownReason) {
        let Some(s) = self.singletons.as_mut() else { return };
        let ss = s.slot(slot);
        if matches!(reason, ShutdownReason::Left) && ss.manager.is_some() && ss.instance.is_some() {
            s.slot_mut(slot).lingering = true;
            let until = self.now + linger(s.config());
            let incarnation = self.procs.slot(slot).incarnations;
            self.push(until, Event::LingerEnd { slot, incarnation });
            self.note(|| format!("slot {slot} lingers to hand the singleton over"));
            return;
        }
        self.singleton_exit(slot);
    }

    /// The manager in `slot` is told its node is gone, and the process exits.
    fn singleton_exit(&mut self, slot: usize) {
        self.singleton_input(slot, "shutdown", |m, now| m.shutdown(now));
        if let Some(s) = self.singletons.as_mut() {
            s.on_exit(slot);
        }
        self.check_singletons();
    }

    /// A lingering process exits once its instance has ended and no lease answer is due.
    pub(super) fn end_linger_if_done(&mut self, slot: usize) {
        let done = self.singletons.as_ref().is_some_and(|s| {
            let ss = s.slot(slot);
            ss.lingering
                && ss.instance.is_none()
                && !ss.manager.as_ref().is_some_and(SingletonManager::lease_pending)
        });
        if done {
            self.note(|| format!("slot {slot} handed the singleton over and exits"));
            self.singleton_exit(slot);
        }
    }

    /// A hand-over message reaches the network interface of its destination.
    pub(super) fn arrive_hand_over(&mut self, m: HandOverInFlight) {
        let Some(m) = self.delivery.arrive_hand_over(m) else { return };
        let to = m.to_slot;
        if self.singleton_live(to) {
            self.hand_over_message(m);
        } else if self.slot(to).state == SlotState::Paused
            && let Some(s) = self.singletons.as_mut()
        {
            s.slot_mut(to).inbox.push(m);
        }
    }

    fn hand_over_message(&mut self, m: HandOverInFlight) {
        let to = m.to_slot;
        if let Some(s) = self.singletons.as_mut() {
            s.stats.messages_delivered += 1;
            if m.message == HandOver::HandOverDone {
                s.stats.hand_over_done += 1;
            }
        }
        let (from, message) = (m.from, m.message);
        self.note(|| format!("slot {to} singleton <- {} from {from}", message.name()));
        self.singleton_input(to, message.name(), |mgr, now| {
            mgr.handle_message(now, &from, message)
        });
        self.end_linger_if_done(to);
    }

    pub(super) fn fire_singleton_timer(&mut self, slot: usize, generation: u64) {
        let current =
            self.singletons.as_ref().is_some_and(|s| s.slot(slot).timer.is_current(generation));
        // A paused process's timer is re-armed when it resumes.
        if !current || !self.singleton_live(slot) {
            return;
        }
        if let Some(s) = self.singletons.as_mut() {
            s.slot_mut(slot).timer.forget();
        }
        self.singleton_input(slot, "timer", |m, now| m.handle_timeout(now));
        self.end_linger_if_done(slot);
    }

    /// The instance in `slot` of incarnation `incarnation` started at `since` has ended, as
    /// asked (or aborted).
    pub(super) fn instance_stopped(&mut self, slot: usize, incarnation: u32, since: Duration) {
        if self.procs.slot(slot).incarnations != incarnation {
            return;
        }
        let paused = self.slot(slot).state == SlotState::Paused;
        let Some(s) = self.singletons.as_mut() else { return };
        let ss = s.slot_mut(slot);
        if ss.instance.as_ref().is_none_or(|i| i.stop_asked_at.is_none() || i.since != since) {
            return;
        }
        if paused {
            ss.stop_due = true;
            return;
        }
        self.end_instance(slot);
    }

    fn end_instance(&mut self, slot: usize) {
        let now = self.now;
        let Some(s) = self.singletons.as_mut() else { return };
        if s.slot_mut(slot).instance.take().is_none() {
            return;
        }
        s.stats.stops += 1;
        s.hash(now, slot, "stopped");
        self.note(|| format!("slot {slot} SINGLETON STOPPED"));
        self.singleton_input(slot, "instance-stopped", |m, now| m.instance_stopped(now));
        self.end_linger_if_done(slot);
    }

    /// The linger of the process in `slot`, incarnation `incarnation`, is over.
    pub(super) fn linger_end(&mut self, slot: usize, incarnation: u32) {
        let lingering = self.singletons.as_ref().is_some_and(|s| s.slot(slot).lingering);
        if lingering && self.procs.slot(slot).incarnations == incarnation {
            self.note(|| format!("slot {slot} stops lingering"));
            self.singleton_exit(slot);
        }
    }

    /// The process in `slot` was paused at `now`: so is its instance.
    pub(super) fn singleton_paused(&mut self, slot: usize) {
        let now = self.now;
        if let Some(i) = self.singletons.as_mut().and_then(|s| s.slot_mut(slot).instance.as_mut()) {
            i.paused_at = Some(now);
        }
    }

    /// The process in `slot` resumed: its instance runs on, the hand-over messages that queued up
    /// are taken in, a stop due meanwhile completes, and its timer is re-armed.
    pub(super) fn singleton_resumed(&mut self, slot: usize) {
        let now = self.now;
        let Some(s) = self.singletons.as_mut() else { return };
        let margin = s.config().removal_margin;
        let ss = s.slot_mut(slot);
        if let Some(i) = ss.instance.as_mut()
            && let Some(at) = i.paused_at.take()
        {
            i.resumed_at = Some(now);
            if now.saturating_sub(at) > margin && i.long_pause_from.is_none() {
                i.long_pause_from = Some(at);
                i.long_pause_until = Some(now);
            }
        }
        let inbox = std::mem::take(&mut ss.inbox);
        let stop_due = std::mem::take(&mut ss.stop_due);
        let lease_answer = ss.lease_answer.take();
        ss.timer.forget();
        for m in inbox {
            if !self.singleton_live(slot) || self.violation.is_some() {
                break;
            }
            self.hand_over_message(m);
        }
        if stop_due {
            self.end_instance(slot);
        }
        if let Some(granted) = lease_answer {
            self.lease_result(slot, granted);
        }
        let deadline = self
            .singletons
            .as_ref()
            .and_then(|s| s.slot(slot).manager.as_ref())
            .and_then(SingletonManager::poll_timeout);
        self.arm_singleton_timer(slot, deadline);
    }

    /// Runs the singleton checkers on the world as it is now.
    fn check_singletons(&mut self) {
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let mut checkers = std::mem::take(&mut self.checkers);
        let v = checkers.check_singletons(self.step, self);
        self.checkers = checkers;
        if let Some(v) = v {
            self.note(|| format!("VIOLATION {v}"));
            self.violation = Some(v);
        }
    }
}
