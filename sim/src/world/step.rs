//! The step: one input to one core, then its outputs — transmits into the network, events into
//! the trackers and the trace, decisions and the new gossip to the checkers — and its timer
//! re-armed. Messages and timers come here from the queue; commands from the actions.

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke_membership::event::ClusterEvent;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::{Member, MemberStatus};
use convoke_membership::message::{Message, Transmit};
use convoke_membership::{Cluster, UniqueAddress};

use super::sharding::unreachable_in;
use super::{Sim, into_queue};
use crate::delivery::InFlight;
use crate::invariants::{Cause, Delivered, Observation, SbrDecision, Violation};
use crate::processes::SlotState;

impl Sim {
    /// Feeds one input to the core in `slot` and processes the outputs.
    pub(super) fn input(
        &mut self,
        slot: usize,
        cause: Cause,
        f: impl FnOnce(&mut Cluster, Instant),
    ) {
        let now = self.local_instant(slot);
        let Some(mut core) = self.procs.take_core(slot) else { return };
        let before = core.gossip().clone();
        f(&mut core, now);
        self.step += 1;
        self.after_input(slot, core, before, cause);
    }

    fn after_input(
        &mut self,
        slot: usize,
        mut core: Box<Cluster>,
        before: Arc<Gossip>,
        cause: Cause,
    ) {
        let me = core.self_node().clone();
        while let Some(t) = core.poll_transmit() {
            self.send(slot, &me, t);
        }
        let mut leader_moved = false;
        let mut members_changed = false;
        while let Some(e) = core.poll_event() {
            leader_moved |= matches!(
                e,
                ClusterEvent::MemberWeaklyUp(_)
                    | ClusterEvent::MemberUp(_)
                    | ClusterEvent::MemberExited(_)
                    | ClusterEvent::MemberRemoved { .. }
            );
            members_changed |= is_member_change(&e);
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
        let reachability_changed = (self.shardings.is_some() || self.data.is_some())
            && !Arc::ptr_eq(&before, core.gossip())
            && before.reachability() != core.gossip().reachability()
            && unreachable_in(&before) != unreachable_in(core.gossip());
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
                self.procs.confirmed(slot),
                &decisions,
                leader_moved,
            );
            if let Some(v) = self.checkers.check_step(&obs) {
                self.note(|| format!("VIOLATION {v}"));
                self.violation = Some(v);
            }
        }
        if self.checkers.wants_world() && self.violation.is_none() {
            self.procs.put_core(slot, core);
            let mut checkers = std::mem::take(&mut self.checkers);
            let v = checkers.check_world(self.step, self);
            self.checkers = checkers;
            if v.is_some() {
                self.violation = v;
            }
            core = self.procs.take_core(slot).expect("just put back");
        }
        // The singleton manager reads the members once the core is back in its slot (or gone).
        let members: Option<Vec<Member>> = (members_changed
            && (self.singletons.is_some() || self.data.is_some()))
        .then(|| core.gossip().members().cloned().collect());
        if let Some(reason) = core.shutdown_reason().cloned() {
            self.note(|| format!("slot {slot} ({me}) shuts down: {reason}"));
            "shutdown".hash(&mut self.trace);
            if let Some(members) = &members {
                self.singleton_members(slot, members);
            }
            self.sharding_exit(slot);
            self.data_exit(slot, false);
            self.singleton_terminated(slot, &reason);
            let restart = self.supervisor.on_stopped(&reason);
            self.procs.stop(slot, reason);
            self.checkers.forget(&me);
            if let Some(delay) = restart {
                self.restart_in(slot, delay);
            }
            return;
        }
        self.procs.put_core(slot, core);
        self.arm_timer(slot);
        if let Some(members) = &members {
            self.singleton_members(slot, members);
            self.sharding_members(slot, members);
            self.data_members(slot, members);
        } else if reachability_changed {
            // The coordinator holds rebalancing while a member is unreachable; the runtime
            // feeds it every change of the cluster state, reachability included (also what
            // other members observe of this node, which raises no event here).
            let members: Vec<Member> = self
                .procs
                .core(slot)
                .map(|c| c.gossip().members().cloned().collect())
                .unwrap_or_default();
            self.sharding_members(slot, &members);
            self.data_members(slot, &members);
        }
    }

    fn on_event(&mut self, slot: usize, e: &ClusterEvent) {
        e.type_name().hash(&mut self.trace);
        if let ClusterEvent::MemberUp(m) = e
            && m.status() == MemberStatus::Up
        {
            self.up.on_up(m.node(), self.now);
        }
        if self.trace.is_logging() {
            let member = e.member().map(|m| m.node().to_string()).unwrap_or_default();
            self.note(|| format!("  slot {slot} event {} {member}", e.type_name()));
        }
    }

    fn send(&mut self, from_slot: usize, from: &UniqueAddress, t: Transmit) {
        let to_slot = self.procs.slot_of(&t.to);
        let now = self.now;
        let queue = into_queue(&mut self.queue, now);
        self.delivery.send(now, from_slot, from, to_slot, t.message, queue);
    }

    /// A message reaches the network interface of its destination.
    pub(super) fn arrive(&mut self, m: InFlight) {
        let Some(m) = self.delivery.arrive(m) else { return };
        match self.slot(m.to_slot).state {
            SlotState::Running => self.hand_over(m, self.now),
            SlotState::Paused => self.procs.queue_while_paused(self.now, m),
            _ => {}
        }
    }

    /// Hands a message that arrived at `received_at` to its destination's running core.
    pub(super) fn hand_over(&mut self, m: InFlight, received_at: Duration) {
        let to = m.to_slot;
        let kind = self.delivery.received(&m);
        self.now.hash(&mut self.trace);
        to.hash(&mut self.trace);
        kind.hash(&mut self.trace);
        m.from.uid.get().hash(&mut self.trace);
        // Measured on the node's own clock, as the core measures it.
        let clock = self.slot(to).clock;
        let queued_for = clock.local(self.now).saturating_sub(clock.local(received_at));
        if self.trace.is_logging() {
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
            self.procs.confirm(to, node.clone());
        }
        let received_local = self.procs.local_instant(to, received_at);
        let (from, message) = (m.from, m.message);
        self.input(to, cause, |c, now| c.handle_queued_message(now, received_local, from, message));
    }

    pub(super) fn fire_timer(&mut self, slot: usize, generation: u64) {
        if !self.procs.take_timer(slot, generation) {
            return;
        }
        self.now.hash(&mut self.trace);
        slot.hash(&mut self.trace);
        self.note(|| format!("slot {slot} timer"));
        self.input(slot, Cause::Timer, |c, now| c.handle_timeout(now));
        if self.procs.is_spinning(slot, self.now) && self.violation.is_none() {
            self.violation = Some(Violation {
                invariant: "timer".to_owned(),
                step: self.step,
                time_s: self.now.as_secs_f64(),
                slot: Some(slot),
                message: "the core's next deadline stays at an instant it has handled".to_owned(),
            });
        }
    }
}

/// Whether `e` reports a change to the member list: a member added, removed, or given a new status
/// or up-number (what the singleton managers read).
fn is_member_change(e: &ClusterEvent) -> bool {
    matches!(
        e,
        ClusterEvent::MemberJoined(_)
            | ClusterEvent::MemberWeaklyUp(_)
            | ClusterEvent::MemberUp(_)
            | ClusterEvent::MemberLeft(_)
            | ClusterEvent::MemberExited(_)
            | ClusterEvent::MemberDowned(_)
            | ClusterEvent::MemberRemoved { .. }
            | ClusterEvent::MemberPreparingForShutdown(_)
            | ClusterEvent::MemberReadyForShutdown(_)
    )
}
