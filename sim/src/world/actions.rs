//! Actions on the world: applying a scheduled [`Action`], the process and network faults behind
//! them and the commands they run on cores; and [`Control`], the same for the nemesis and the
//! operator.

use std::hash::Hash;
use std::time::{Duration, Instant};

use convoke_membership::{Address, Cluster, UniqueAddress};

use super::data::LEAVE_TIMEOUT;
use super::{Event, Sim, into_queue};
use crate::control::{Action, Control};
use crate::invariants::Cause;
use crate::net::NetConfig;
use crate::processes::SlotState;

impl Sim {
    /// Applies an action now.
    pub fn apply(&mut self, action: Action) {
        self.note(|| format!("action {action:?}"));
        let now = self.now;
        match action {
            Action::Start { slot, seeds } => {
                if self.start(slot) && !seeds.is_empty() {
                    self.join_seeds(slot, &seeds);
                }
            }
            Action::Restart { slot, after } => {
                let s = self.procs.slot(slot);
                let down = matches!(s.state, SlotState::Crashed | SlotState::Stopped(_));
                if down && s.incarnations == after {
                    let seeds: Vec<usize> = (0..self.len()).filter(|i| *i != slot).collect();
                    self.start(slot);
                    self.join_seeds(slot, &seeds);
                }
            }
            Action::Crash(slot) => self.crash(slot),
            Action::Pause(slot) => self.pause(slot),
            Action::Resume(slot) => self.resume(slot),
            Action::Block { id, links } => self.delivery.block(id, links),
            Action::Unblock(id) => self.delivery.unblock(id, now, into_queue(&mut self.queue, now)),
            Action::Clog(slot) => self.delivery.clog(slot),
            Action::Unclog(slot) => {
                self.delivery.unclog(slot, now, into_queue(&mut self.queue, now));
            }
            Action::SetNet(net) => self.delivery.set_net(net),
            Action::Leave(slot) => {
                // As the runtime, the store hands its keys over before the node leaves, for at
                // most the leave timeout.
                if self.data_begin_leave(slot) {
                    let incarnation = self.procs.slot(slot).incarnations;
                    self.push(now + LEAVE_TIMEOUT, Event::LeaveTimeout { slot, incarnation });
                } else {
                    self.leave_now(slot);
                }
            }
            Action::Down { from, target } => {
                let address = self.slot(target).address.clone();
                self.command(from, "down", |c, now| c.down(now, &address));
            }
            Action::Stray(slot) => {
                let Some(core) = self.procs.core(slot) else { return };
                let system = &self.opts.config.system_name;
                self.delivery.stray(now, slot, core, system, into_queue(&mut self.queue, now));
            }
        }
    }

    /// The process in `slot` leaves the cluster.
    pub(super) fn leave_now(&mut self, slot: usize) {
        let address = self.slot(slot).address.clone();
        self.command(slot, "leave", |c, now| c.leave(now, &address));
    }

    /// Starts a new incarnation in `slot` with a fresh uid, if no process runs there. Returns
    /// whether it started.
    pub fn start(&mut self, slot: usize) -> bool {
        let Some(node) = self.procs.start(slot, self.now) else { return false };
        self.note(|| format!("start slot {slot} as {node}"));
        node.uid.get().hash(&mut self.trace);
        let local = self.local_instant(slot);
        self.sharding_started(slot, &node);
        self.data_started(slot, &node);
        if let Some(s) = self.singletons.as_mut() {
            s.on_start(slot, node, local);
        }
        self.arm_timer(slot);
        true
    }

    /// Joins `slot` through the seed slots, in order.
    pub fn join_seeds(&mut self, slot: usize, seeds: &[usize]) {
        let seeds: Vec<Address> = seeds.iter().map(|s| self.slot(*s).address.clone()).collect();
        self.command(slot, "join_seed_nodes", |c, now| {
            let _ = c.join_seed_nodes(now, seeds);
        });
    }

    /// Joins `slot` to the node in slot `to`.
    pub fn join(&mut self, slot: usize, to: usize) {
        let address = self.slot(to).address.clone();
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
        if !self.procs.crash(slot) {
            return;
        }
        if let Some(s) = self.singletons.as_mut() {
            s.on_exit(slot);
        }
        self.sharding_exit(slot);
        self.data_exit(slot, true);
        if let Some(node) = self.slot(slot).node.clone() {
            self.checkers.forget(&node);
            // Only the operator reads these, on its tick.
            if self.opts.operator.is_active() {
                self.crashes.push((node, self.now));
            }
        }
        "crash".hash(&mut self.trace);
        slot.hash(&mut self.trace);
    }

    /// Pauses the process in `slot`.
    pub fn pause(&mut self, slot: usize) {
        if self.procs.pause(slot, self.now) {
            "pause".hash(&mut self.trace);
            self.singleton_paused(slot);
            self.sharding_paused(slot);
        }
    }

    /// Resumes the paused process in `slot`: it takes in what queued up, then its overdue timers.
    pub fn resume(&mut self, slot: usize) {
        let Some(inbox) = self.procs.resume(slot, self.now) else { return };
        "resume".hash(&mut self.trace);
        for (received_at, m) in inbox {
            if !self.is_running(slot) || self.violation.is_some() {
                break;
            }
            self.hand_over(m, received_at);
        }
        self.procs.disarm(slot);
        self.arm_timer(slot);
        self.singleton_resumed(slot);
        self.sharding_resumed(slot);
        self.data_resumed(slot);
    }

    /// Ends every partition, clog and pause, and restores `net`.
    pub fn heal(&mut self, net: NetConfig) {
        // Faults the nemesis scheduled before the heal (the later steps of a swizzle-clog, a
        // partition or pause still to come) must not strike after it. Restarts stay: a crashed
        // process's supervisor still brings it back.
        self.queue.retain(|e| {
            !matches!(
                e,
                Event::Action(
                    Action::Pause(_)
                        | Action::Block { .. }
                        | Action::Clog(_)
                        | Action::SetNet(_)
                        | Action::Stray(_)
                )
            )
        });
        let now = self.now;
        self.delivery.heal(net, now, into_queue(&mut self.queue, now));
        self.lease_faults(false);
        for i in 0..self.len() {
            self.resume(i);
        }
    }
}

impl Control for Sim {
    fn node(&self, slot: usize) -> Option<&UniqueAddress> {
        self.slot(slot).node.as_ref()
    }

    fn slot_of(&self, address: &Address) -> Option<usize> {
        self.procs.slot_of(address)
    }

    fn apply(&mut self, action: Action) {
        Sim::apply(self, action);
    }

    fn schedule(&mut self, at: Duration, action: Action) {
        Sim::schedule(self, at, action);
    }

    fn crash(&mut self, slot: usize) {
        Sim::crash(self, slot);
    }

    fn join(&mut self, slot: usize, to: usize) {
        Sim::join(self, slot, to);
    }

    fn schedule_restart(&mut self, slot: usize) {
        if let Some(delay) = self.supervisor.restart_delay() {
            self.restart_in(slot, delay);
        }
    }

    fn take_crashes(&mut self) -> Vec<(UniqueAddress, Duration)> {
        std::mem::take(&mut self.crashes)
    }

    fn down_after(&self) -> Duration {
        self.operator.config().down_after
    }

    fn down_isolated(&mut self, node: UniqueAddress, slot: usize) {
        self.operator.down_isolated(node, slot, self.now);
    }
}
