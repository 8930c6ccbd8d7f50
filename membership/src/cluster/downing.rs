//! The split-brain resolver inside the core: it sees every published event and the current
//! reachability and seen set, ticks every second, and its downs become ordinary downs, as if an
//! operator had issued them. Lease requests and decisions are outputs for the driver.

use std::time::Instant;

use super::{Cluster, Timer};
use crate::address::UniqueAddress;
use crate::event::ClusterEvent;
use crate::sbr::{DowningDecision, LeaseOp, LeaseRequest, SplitBrainResolver, TICK_INTERVAL};

impl Cluster {
    /// The next lease request of the lease-majority strategy. The driver performs it (see
    /// [`crate::sbr::Lease`]) and answers with [`handle_lease_result`](Self::handle_lease_result),
    /// always, `false` on error or timeout: a decision waits for that answer.
    pub fn poll_lease_request(&mut self) -> Option<LeaseRequest> {
        self.sbr.as_mut()?.poll_lease_request()
    }

    /// The answer to a lease request: `op` echoes the request's, `granted` says whether the lease
    /// is held (acquire, check) or was released (release).
    pub fn handle_lease_result(&mut self, now: Instant, op: LeaseOp, granted: bool) {
        if self.shutdown.is_some() {
            return;
        }
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.handle_lease_result(now, op, granted);
        }
        self.apply_downing(now);
    }

    /// The next decision the split-brain resolver acted on, for the node's log.
    pub fn poll_downing_decision(&mut self) -> Option<DowningDecision> {
        self.sbr.as_mut()?.poll_decision()
    }

    /// The remote layer learned that `remote` quarantined this node. If `remote` is a current
    /// member, this node cannot talk to the cluster any more and the split-brain resolver downs it;
    /// a quarantine by a non-member is ignored.
    pub fn handle_quarantined_by(&mut self, now: Instant, remote: &UniqueAddress) {
        if self.shutdown.is_some() || !self.latest.has_member(remote) {
            return;
        }
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.handle_quarantined_by_member(now);
        }
        self.apply_downing(now);
    }

    /// The split-brain resolver, unless `active_strategy` is `"off"`.
    pub fn split_brain_resolver(&self) -> Option<&SplitBrainResolver> {
        self.sbr.as_ref()
    }

    pub(super) fn downing_tick(&mut self, now: Instant) {
        self.timers.set(Timer::Downing, now + TICK_INTERVAL);
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.handle_tick(now);
        }
        self.apply_downing(now);
    }

    pub(super) fn downing_acquire_lease(&mut self, now: Instant) {
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.handle_acquire_timeout(now);
        }
        self.apply_downing(now);
    }

    /// Feeds what was just published to the resolver: the events, then the gossip's reachability
    /// and seen set (in the order the reference publishes them).
    pub(super) fn observe_for_downing(&mut self, now: Instant, events: &[ClusterEvent]) {
        let Some(sbr) = self.sbr.as_mut() else { return };
        for e in events {
            sbr.handle_event(now, e);
        }
        sbr.handle_reachability(self.latest.reachability());
        sbr.handle_seen(&self.latest.shared_seen());
    }

    /// Carries out the resolver's downs, in its order (this node last), and arms its timer.
    fn apply_downing(&mut self, now: Instant) {
        while self.shutdown.is_none() {
            let Some(node) = self.sbr.as_mut().and_then(SplitBrainResolver::poll_down) else {
                break;
            };
            self.down_node(now, &node);
        }
        match self.sbr.as_ref().and_then(SplitBrainResolver::acquire_deadline) {
            Some(at) => self.timers.set(Timer::LeaseAcquire, at),
            None => self.timers.clear(Timer::LeaseAcquire),
        }
    }
}
