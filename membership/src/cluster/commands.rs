//! Commands from the application or an operator: leave, down, prepare for full shutdown.

use std::time::Instant;

use super::{Cluster, GOSSIP_TO_RANDOM_NODES};
use crate::address::{Address, UniqueAddress};
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};

impl Cluster {
    /// Asks the member at `address` (any member, this node included) to leave gracefully: it goes
    /// Leaving, the leader moves it to Exiting, and it is removed. Ignored for an unknown address or
    /// a member already leaving, exiting or down.
    pub fn leave(&mut self, now: Instant, address: &Address) {
        if self.shutdown.is_some() {
            return;
        }
        let Some(m) = self.latest.members().find(|m| m.address() == address).cloned() else {
            return;
        };
        let may_leave = matches!(
            m.status(),
            MemberStatus::Joining
                | MemberStatus::WeaklyUp
                | MemberStatus::Up
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown
        );
        let Some(leaving) = m.with_status(MemberStatus::Leaving).ok().filter(|_| may_leave) else {
            return;
        };
        let mut g = Gossip::clone(&self.latest);
        g.update([leaving]);
        self.update_latest_gossip(g);
        self.publish(now);
        self.gossip_once();
    }

    /// Marks the member at `address` Down. The leader removes it once it is unreachable; a node
    /// that sees itself Down shuts down. Ignored for an unknown address or a member already Down.
    /// When two incarnations share the address, the one not yet Down is downed.
    pub fn down(&mut self, now: Instant, address: &Address) {
        let Some(m) = self.down_target(address).cloned() else { return };
        self.down_node(now, &m);
    }

    /// The incarnation [`down`](Self::down) marks Down for `address`: of the members at that
    /// address (a restarted node's new incarnation may be one while its earlier one, already
    /// Down, waits for removal), one that is not Down yet, else the Down one.
    pub fn down_target(&self, address: &Address) -> Option<&UniqueAddress> {
        let at = |m: &&Member| m.address() == address;
        (self.latest.members().filter(at))
            .min_by_key(|m| m.status() == MemberStatus::Down)
            .map(Member::node)
    }

    /// Marks the member `node` (this incarnation only) Down.
    pub(super) fn down_node(&mut self, now: Instant, node: &UniqueAddress) {
        if self.shutdown.is_some() {
            return;
        }
        let mut g = Gossip::clone(&self.latest);
        if !g.mark_as_down(node) {
            return;
        }
        self.update_latest_gossip(g);
        self.publish(now);
        if *node != self.self_node {
            // Tell the downed node directly, so it shuts itself down if it is alive.
            self.gossip_to(node);
        }
        // The members' acknowledgements bring the convergence its removal waits for: they are
        // asked for at once rather than left to the next gossip rounds (`docs/benchmarks.md`, "Failover").
        self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
    }

    /// Starts a full-cluster shutdown: every Up member moves to PreparingForShutdown, no new
    /// member is admitted or moved Up, and the leader moves them on to ReadyForShutdown.
    pub fn prepare_for_full_shutdown(&mut self, now: Instant) {
        if self.shutdown.is_some() || !self.is_initialized() {
            return;
        }
        self.start_prepare_for_shutdown(now);
    }

    pub(super) fn start_prepare_for_shutdown(&mut self, now: Instant) {
        self.preparing_for_shutdown = true;
        let changed: Vec<_> = self
            .latest
            .members()
            .filter(|m| m.status() == MemberStatus::Up)
            .filter_map(|m| m.with_status(MemberStatus::PreparingForShutdown).ok())
            .collect();
        if changed.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.latest);
        g.update(changed);
        self.update_latest_gossip(g);
        self.publish(now);
        self.gossip_once();
    }
}
