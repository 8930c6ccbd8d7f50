//! The singleton's lease operations, as its driver performs them: sent to the store of
//! [`crate::lease`], applied there when they arrive, and answered back to the manager — or, when
//! no answer comes within the operation timeout on the process's clock, answered `false` by the
//! driver, which then drops the late answer. One acquire is outstanding per manager at a time (the
//! manager asks for no other until answered); releases are not answered.

use std::time::Duration;

use convoke_membership::{Address, UniqueAddress};

use super::{Event, Sim};
use crate::lease::LeaseOp;
use crate::processes::SlotState;
use crate::singleton::NAME;

/// An operation on its way to the store.
#[derive(Debug)]
pub(crate) struct Arrival {
    slot: usize,
    incarnation: u32,
    id: u64,
    op: LeaseOp,
    owner: Address,
    /// The store fails it.
    error: bool,
    /// How long its answer takes back, if it is not lost.
    answer_after: Option<Duration>,
}

/// An answer to an acquire on its way back, or the driver's timeout.
#[derive(Debug)]
pub(crate) struct Answer {
    slot: usize,
    incarnation: u32,
    id: u64,
    granted: bool,
    timeout: bool,
}

impl Sim {
    /// The lease store misbehaves from now on (`on`) or no longer.
    pub(super) fn lease_faults(&mut self, on: bool) {
        if let Some(l) = self.singletons.as_mut().and_then(|s| s.lease.as_mut()) {
            l.set_faulty(on);
        }
    }

    /// The manager in `slot` (incarnation `me`) asks for `op`.
    pub(super) fn lease_send(&mut self, slot: usize, me: &UniqueAddress, op: LeaseOp) {
        let now = self.now;
        let incarnation = self.procs.slot(slot).incarnations;
        let local = self.local_instant(slot);
        let Some(s) = self.singletons.as_mut() else { return };
        let id = s.next_lease_op;
        s.next_lease_op += 1;
        s.hash(now, slot, if op == LeaseOp::Acquire { "lease-acquire" } else { "lease-release" });
        let Some(store) = s.lease.as_mut() else {
            // No lease configured: the driver grants at once, as the runtime's does.
            if op == LeaseOp::Acquire {
                s.slot_mut(slot).lease_pending = Some(id);
                let a = Answer { slot, incarnation, id, granted: true, timeout: false };
                self.push(now, Event::LeaseAnswer(a));
            }
            return;
        };
        let timeout = store.config().operation_timeout;
        let trip = store.send(slot, op, now);
        if op == LeaseOp::Acquire {
            s.slot_mut(slot).lease_pending = Some(id);
            let deadline = self.procs.global_at(slot, local + timeout);
            let a = Answer { slot, incarnation, id, granted: false, timeout: true };
            self.push(deadline, Event::LeaseAnswer(a));
        }
        self.note(|| format!("slot {slot} lease {op:?} -> {trip:?}"));
        if let Some(at) = trip.arrives {
            let owner = me.address.clone();
            let (error, answer_after) = (trip.error, trip.answer_after);
            let a = Arrival { slot, incarnation, id, op, owner, error, answer_after };
            self.push(at, Event::LeaseArrive(Box::new(a)));
        }
    }

    /// An operation reaches the store, which applies it (whatever became of its sender since).
    pub(super) fn lease_arrive(&mut self, a: Arrival) {
        let now = self.now;
        let Some(store) = self.singletons.as_mut().and_then(|s| s.lease.as_mut()) else { return };
        let granted = match (a.op, a.error) {
            (LeaseOp::Acquire, true) => {
                store.failed();
                false
            }
            (LeaseOp::Acquire, false) => store.acquire(NAME, &a.owner, now),
            (LeaseOp::Release, true) => false,
            (LeaseOp::Release, false) => {
                store.release(NAME, &a.owner);
                true
            }
        };
        let holder = store.holder(NAME, now).cloned();
        self.note(|| {
            format!("lease store: slot {} {:?} -> {granted}, held by {holder:?}", a.slot, a.op)
        });
        if a.op == LeaseOp::Acquire
            && let Some(after) = a.answer_after
        {
            let answer = Answer {
                slot: a.slot,
                incarnation: a.incarnation,
                id: a.id,
                granted,
                timeout: false,
            };
            self.push(now + after, Event::LeaseAnswer(answer));
        }
    }

    /// An answer (or the driver's timeout) for the acquire `a.id`: the first of the two is the
    /// answer; a paused process takes it in when it resumes.
    pub(super) fn lease_answer(&mut self, a: Answer) {
        if self.procs.slot(a.slot).incarnations != a.incarnation {
            return;
        }
        let paused = self.slot(a.slot).state == SlotState::Paused;
        let live = self.singleton_live(a.slot);
        let Some(s) = self.singletons.as_mut() else { return };
        let ss = s.slot_mut(a.slot);
        if ss.lease_pending != Some(a.id) {
            return;
        }
        ss.lease_pending = None;
        if a.timeout
            && let Some(store) = s.lease.as_mut()
        {
            store.stats.timeouts += 1;
        }
        if paused {
            s.slot_mut(a.slot).lease_answer = Some(a.granted);
        } else if live {
            self.lease_result(a.slot, a.granted);
        }
    }

    /// The manager in `slot` hears whether it holds the lease.
    pub(super) fn lease_result(&mut self, slot: usize, granted: bool) {
        let what = if granted { "lease-granted" } else { "lease-refused" };
        self.note(|| format!("slot {slot} singleton {what}"));
        self.singleton_input(slot, what, |m, now| m.lease_result(now, granted));
        self.end_linger_if_done(slot);
    }
}
