//! The replicated store's steps: every process runs the runtime's sans-IO store over its slot's
//! modelled disk; membership, messages, timers, syncs and the load's requests are fed to it, and
//! its outputs carried out: messages encoded into the network, replies checked (D2, D4). None of
//! it touches a membership core or the membership trace.

use std::time::Instant;

use convoke_data::message::{decode, encode};
use convoke_data::{MemoryStorage, Output, Reply, Storage, Store};
use convoke_membership::{Member, UniqueAddress};

use super::sharding::unreachable_in;
use super::{Event, Sim, into_queue};
use crate::data::{DataLayer, OP_INTERVAL, Outcome};
use crate::delivery::DataInFlight;
use crate::invariants::Violation;

/// How long a leaving process waits for its store to hand its keys over, as
/// `cluster.leave_timeout` (default) bounds it in the runtime.
pub const LEAVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

impl Sim {
    /// Whether the process in `slot` began to leave and its membership leave still waits for
    /// its store to hand its keys over (up to [`LEAVE_TIMEOUT`]).
    pub fn store_leaving(&self, slot: usize) -> bool {
        self.data.as_ref().is_some_and(|d| d.slot(slot).leaving)
    }

    /// Feeds one input to the store of `slot`, if one runs there, and carries out the outputs.
    fn data_input(
        &mut self,
        slot: usize,
        what: &'static str,
        f: impl FnOnce(&mut Store<MemoryStorage>, Instant),
    ) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(d) = self.data.as_mut() else { return };
        let Some(store) = d.slot_mut(slot).store.as_mut() else { return };
        f(store, local);
        d.hash(now, slot, what);
        self.data_after_input(slot);
    }

    /// The process in `slot` is about to leave: its store hands every key to the ring without
    /// it, as `Node::shutdown` has it do. Returns whether a store runs there: if so the leave
    /// itself waits for [`Sim::data_leave_ready`] or [`LEAVE_TIMEOUT`].
    pub(super) fn data_begin_leave(&mut self, slot: usize) -> bool {
        let Some(d) = self.data.as_mut() else { return false };
        let s = d.slot_mut(slot);
        if s.store.is_none() {
            return false;
        }
        if std::mem::replace(&mut s.leaving, true) {
            return true;
        }
        self.data_input(slot, "begin leave", Store::begin_leave);
        true
    }

    /// Whether the store in `slot` was told to leave and has handed every key over; the leave
    /// pending on it is taken.
    fn data_leave_ready(&mut self, slot: usize) -> bool {
        let Some(d) = self.data.as_mut() else { return false };
        let s = d.slot_mut(slot);
        let ready = s.leaving && s.store.as_ref().is_some_and(Store::handed_over);
        if ready {
            s.leaving = false;
        }
        ready
    }

    /// `cluster.leave_timeout` passed since incarnation `incarnation` of `slot` began to hand
    /// its keys over: it leaves now if it has not already.
    pub(super) fn data_leave_timeout(&mut self, slot: usize, incarnation: u32) {
        if self.procs.slot(slot).incarnations != incarnation {
            return;
        }
        let Some(d) = self.data.as_mut() else { return };
        if std::mem::take(&mut d.slot_mut(slot).leaving) {
            self.leave_now(slot);
        }
    }

    /// After an input: outputs out, the sync scheduled when writes are staged, the timer armed.
    pub(super) fn data_after_input(&mut self, slot: usize) {
        self.data_drain(slot);
        if self.data_leave_ready(slot) {
            self.leave_now(slot);
        }
        let Some(d) = self.data.as_mut() else { return };
        let needs_sync = d.slot(slot).store.as_ref().is_some_and(Store::needs_sync);
        if needs_sync {
            let at = self.now + d.disk_delay();
            if let Some((at, generation)) = d.slot_mut(slot).sync.arm(Some(at)) {
                self.push(at, Event::DataSync { slot, generation });
            }
        }
        let deadline = self.data.as_ref().and_then(|d| d.slot(slot).store.as_ref()?.poll_timeout());
        let at = deadline.map(|t| self.procs.global_at(slot, t));
        let Some(d) = self.data.as_mut() else { return };
        if let Some((at, generation)) = d.slot_mut(slot).timer.arm(at) {
            self.push(at, Event::DataTimer { slot, generation });
        }
    }

    /// Carries out every output of the store in `slot`.
    fn data_drain(&mut self, slot: usize) {
        loop {
            let now = self.now;
            let Some(d) = self.data.as_mut() else { return };
            let s = d.slot_mut(slot);
            let Some(me) = s.node.clone() else { return };
            let Some(out) = s.store.as_mut().and_then(Store::poll_output) else { return };
            match out {
                Output::Send { to, message } => self.data_send(slot, &me, &to, &message),
                Output::Reply { id, result } => {
                    let Some(n) = d.slot_mut(slot).requests.remove(&id) else {
                        // Not the load's: an entity's claim or write of its state.
                        self.state_reply(slot, id, result);
                        continue;
                    };
                    let outcome = match result {
                        Ok(Reply::Read(read)) => {
                            DataLayer::read_outcome(&read.values, read.context)
                        }
                        Ok(Reply::Written(ctx)) => Outcome::Written(ctx),
                        Err(e) => Outcome::Failed(e.to_string()),
                    };
                    if let Err((id, message)) = d.ended(n, now, outcome) {
                        self.data_violation(slot, id, message);
                        return;
                    }
                }
                Output::Changed(_) => {}
            }
        }
    }

    /// Puts `message`, encoded as the runtime sends it, on the wire from `slot` to `to`.
    fn data_send(
        &mut self,
        slot: usize,
        me: &UniqueAddress,
        to: &UniqueAddress,
        message: &convoke_data::Message,
    ) {
        let Some(to_slot) = self.procs.slot_of(&to.address) else { return };
        let bytes = encode(message);
        let now = self.now;
        let Some(d) = self.data.as_mut() else { return };
        d.stats.messages += 1;
        d.stats.bytes += bytes.len() as u64;
        d.hash(now, slot, message.name());
        let m = DataInFlight {
            from_slot: slot,
            from: me.clone(),
            to_slot,
            message: (to.clone(), bytes),
        };
        self.delivery.send_data(now, m, into_queue(&mut self.queue, now));
    }

    fn data_violation(&mut self, slot: usize, id: &str, message: String) {
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let v = Violation {
            invariant: id.to_owned(),
            step: self.step,
            time_s: self.now.as_secs_f64(),
            slot: Some(slot),
            message,
        };
        self.note(|| format!("VIOLATION {v}"));
        self.set_violation(v);
    }

    /// A new incarnation `node` started in `slot`: its store opens the slot's disk.
    pub(super) fn data_started(&mut self, slot: usize, node: &UniqueAddress) {
        let local = self.local_instant(slot);
        let Some(d) = self.data.as_mut() else { return };
        let config = d.config().clone();
        let s = d.slot_mut(slot);
        let disk = std::mem::take(&mut s.disk);
        match Store::new(config, node.clone(), disk, local) {
            Ok(store) => {
                s.store = Some(store);
                s.node = Some(node.clone());
                s.read_contexts.clear();
                s.leaving = false;
            }
            Err(e) => match e {},
        }
        self.data_after_input(slot);
    }

    /// The process in `slot` ended: its requests with it; a crash loses what was staged and not
    /// synced, a shutdown syncs first.
    pub(super) fn data_exit(&mut self, slot: usize, crashed: bool) {
        let now = self.now;
        let Some(d) = self.data.as_mut() else { return };
        d.requests_ended(slot, now);
        let s = d.slot_mut(slot);
        s.leaving = false;
        if let Some(store) = s.store.take() {
            let unsynced = store.needs_sync();
            let mut disk = store.into_storage();
            if crashed {
                disk.crash();
            } else {
                let _ = disk.sync();
            }
            s.disk = disk;
            if crashed && unsynced {
                d.stats.crashes_with_unsynced += 1;
            }
        }
        let s = d.slot_mut(slot);
        s.node = None;
        s.inbox.clear();
        s.timer.cancel();
        s.sync.cancel();
        if crashed {
            self.data_check_d1(slot, "after a crash");
        }
    }

    /// D1 now; `slot` and `when` name the occasion in a violation.
    fn data_check_d1(&mut self, slot: usize, when: &str) {
        if self.checkers.is_empty() {
            return;
        }
        let Some(d) = self.data.as_mut() else { return };
        if let Err((id, why)) = d.check_no_acked_write_lost() {
            self.data_violation(slot, id, format!("{why} ({when})"));
        }
    }

    /// After a step of the core in `slot` that changed its members or their reachability.
    pub(super) fn data_members(&mut self, slot: usize, members: &[Member]) {
        let unreachable =
            self.procs.core(slot).map(|c| unreachable_in(c.gossip()).clone()).unwrap_or_default();
        self.data_input(slot, "members", |s, now| s.handle_members(members, &unreachable, now));
    }

    pub(super) fn fire_data_timer(&mut self, slot: usize, generation: u64) {
        let current = self.data.as_ref().is_some_and(|d| d.slot(slot).timer.is_current(generation));
        if !current || !self.is_running(slot) {
            return;
        }
        if let Some(d) = self.data.as_mut() {
            d.slot_mut(slot).timer.forget();
        }
        self.data_input(slot, "timer", |s, now| {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        });
    }

    /// The disk has taken the staged writes of `slot`: the answers owed for them go out.
    pub(super) fn data_sync(&mut self, slot: usize, generation: u64) {
        let current = self.data.as_ref().is_some_and(|d| d.slot(slot).sync.is_current(generation));
        // A paused process makes no call to the disk; its sync is scheduled again on resume.
        if !current || !self.is_running(slot) {
            return;
        }
        if let Some(d) = self.data.as_mut() {
            d.slot_mut(slot).sync.forget();
            d.stats.syncs += 1;
        }
        self.data_input(slot, "sync", |s, now| s.sync(now));
    }

    /// A store message reaches the network interface of its destination.
    pub(super) fn arrive_data(&mut self, m: DataInFlight) {
        let Some(m) = self.delivery.arrive_data(m) else { return };
        self.take_or_queue(m, Self::data_message, |sim, to, m| {
            if let Some(d) = sim.data.as_mut() {
                d.slot_mut(to).inbox.push(m);
            }
        });
    }

    fn data_message(&mut self, m: DataInFlight) {
        let to = m.to_slot;
        let (addressee, bytes) = m.message;
        let here = self.data.as_ref().and_then(|d| d.slot(to).node.clone());
        if here.as_ref() != Some(&addressee) {
            return;
        }
        let Ok(message) = decode(&bytes) else {
            self.note(|| format!("slot {to} drops a store message that does not decode"));
            return;
        };
        let from = m.from;
        self.data_input(to, message.name(), |s, now| s.handle_message(&from, message, now));
    }

    /// The load's next request: a running process reads or writes a key; the next is scheduled.
    pub(super) fn data_op(&mut self) {
        let now = self.now;
        self.push(now + OP_INTERVAL, Event::DataOp);
        let Some(d) = self.data.as_ref() else { return };
        let running: Vec<usize> =
            self.procs.running().filter(|i| d.slot(*i).store.is_some()).collect();
        let local = |sim: &Self, slot| sim.local_instant(slot);
        let Some(d) = self.data.as_mut() else { return };
        let Some((slot, n, request)) = d.draw_op(&running, now) else { return };
        let at = local(self, slot);
        let Some(d) = self.data.as_mut() else { return };
        let s = d.slot_mut(slot);
        let Some(store) = s.store.as_mut() else { return };
        let id = store.request(request, at);
        s.requests.insert(id, n);
        d.hash(now, slot, "request");
        let due = d.d1_due(now);
        self.data_after_input(slot);
        if due {
            self.data_check_d1(slot, "under load");
        }
    }

    /// The process in `slot` resumed: what queued up is taken in, the timer and the sync re-armed.
    pub(super) fn data_resumed(&mut self, slot: usize) {
        let Some(d) = self.data.as_mut() else { return };
        let s = d.slot_mut(slot);
        let inbox = std::mem::take(&mut s.inbox);
        s.timer.forget();
        s.sync.forget();
        for m in inbox {
            if !self.is_running(slot) || self.violation.is_some() {
                break;
            }
            self.data_message(m);
        }
        self.data_after_input(slot);
    }
}
