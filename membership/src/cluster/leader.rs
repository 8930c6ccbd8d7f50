//! Leader actions, the unreachable-nodes reaper, and the checks that end a node.

use std::collections::BTreeSet;
use std::time::Instant;

use super::{Cluster, GOSSIP_TO_RANDOM_NODES, MAX_TICKS_BEFORE_SHUTDOWN_WHEN_DOWN, ShutdownReason};
use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::member::{DC_ROLE_PREFIX, Member, MemberStatus, UpNumber};
use crate::message::Message;
use crate::reachability::ReachabilityStatus;

impl Cluster {
    /// The leader-actions tick. The leader part runs only on the leader.
    pub(super) fn leader_actions(&mut self, now: Instant) {
        // A Down this node decided itself (the resolver, an operator's command) can leave a
        // joiner alone with Down members, which the rule checks only after a gossip: checked
        // here too, before a joiner that leads nothing but Down members removes them all and
        // moves itself Up as a cluster of its own.
        self.down_self_if_joined_cluster_is_downed(now);
        if self.membership().is_leader(&self.self_node) {
            if self.membership().convergence(&self.exiting_confirmed) {
                self.leader_action_counter = 0;
                self.leader_actions_on_convergence(now);
            } else {
                self.leader_action_counter = self.leader_action_counter.saturating_add(1);
                let waited =
                    self.config.leader_actions_interval.saturating_mul(self.leader_action_counter);
                if let Some(after) = self.config.allow_weakly_up_members
                    && waited >= after
                    && !self.preparing_for_shutdown()
                {
                    self.move_joining_to_weakly_up(now);
                }
            }
        }
        let latest = &self.latest;
        self.exiting_confirmed.retain(|n| latest.has_member(n));
        self.check_for_prepare_for_shutdown(now);
        self.shutdown_self_when_down();
    }

    fn move_joining_to_weakly_up(&mut self, now: Instant) {
        if !self.min_nr_of_members_fulfilled() {
            return;
        }
        let state = self.membership();
        let r = state.convergence_reachability();
        let changed: Vec<Member> = state
            .dc_members()
            .filter(|m| m.status() == MemberStatus::Joining && r.is_reachable(m.node()))
            .filter(|m| !self.latest.has_other_incarnation(m.node()))
            .filter_map(|m| m.with_status(MemberStatus::WeaklyUp).ok())
            .collect();
        if changed.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.latest);
        g.update(changed);
        self.update_latest_gossip(g);
        self.publish(now);
    }

    /// After a gossip: a leader that now sees convergence while a Down member waits to be
    /// removed removes it at once rather than at its next tick (`docs/benchmarks.md`, "Failover").
    pub(super) fn remove_on_convergence(&mut self, now: Instant) {
        // Runs on every gossip received: most find no member Down or Exiting and stop here.
        if !self.latest.members().any(|m| m.status().is_down_or_exiting()) {
            return;
        }
        let state = self.membership();
        if state.is_leader(&self.self_node)
            && !self.unreachable_down_or_exiting().is_empty()
            && state.convergence(&self.exiting_confirmed)
        {
            self.leader_action_counter = 0;
            self.leader_actions_on_convergence(now);
        }
    }

    /// The Down or Exiting members of this data center that are unreachable: the leader removes
    /// them on convergence.
    ///
    /// Unreachable as convergence reads it, by a member that is not Down itself. A Down member
    /// that only other Down members observe as unreachable (both ends of a broken link, downed
    /// together as indirectly connected) is still in touch with the rest: it stays until it has
    /// taken its Down in and stopped, or until a member that counts sees it unreachable. Removed
    /// at once, before its Down reached it, it could not be told from one that was cut off with
    /// a view in which it keeps itself (see `DowningModel::note_removed`).
    fn unreachable_down_or_exiting(&self) -> BTreeSet<UniqueAddress> {
        let state = self.membership();
        let unreachable = state.convergence_unreachable();
        state
            .dc_members()
            .filter(|m| m.status().is_down_or_exiting() && unreachable.contains(m.node()))
            .map(|m| m.node().clone())
            .collect()
    }

    fn leader_actions_on_convergence(&mut self, now: Instant) {
        let mut removed = self.unreachable_down_or_exiting();
        let state = self.membership();
        removed.extend(
            state
                .dc_members()
                .filter(|m| {
                    m.status() == MemberStatus::Exiting && self.exiting_confirmed.contains(m.node())
                })
                .map(|m| m.node().clone()),
        );

        let may_move_up = self.min_nr_of_members_fulfilled() && !self.preparing_for_shutdown();
        let mut next_up = state.next_up_number();
        let mut changed = Vec::new();
        for m in state.dc_members() {
            let moved = match m.status() {
                // Two incarnations of one address (admitted concurrently by two sides): neither
                // moves up until the dead one is downed and removed (S5).
                MemberStatus::Joining | MemberStatus::WeaklyUp
                    if may_move_up && !self.latest.has_other_incarnation(m.node()) =>
                {
                    let up = m.with_up(next_up);
                    next_up = UpNumber(next_up.0.saturating_add(1));
                    up
                }
                MemberStatus::Leaving => m.with_status(MemberStatus::Exiting),
                MemberStatus::PreparingForShutdown => m.with_status(MemberStatus::ReadyForShutdown),
                _ => continue,
            };
            changed.extend(moved.ok());
        }

        let wall = self.wall_clock(now);
        let mut g = Gossip::clone(&self.latest);
        let exiting: Vec<Member> =
            changed.iter().filter(|m| m.status() == MemberStatus::Exiting).cloned().collect();
        let any_change = !changed.is_empty() || !removed.is_empty();
        let moved_up = changed.iter().any(|m| m.status() == MemberStatus::Up);
        g.update(changed);
        for n in &removed {
            g.remove(n, wall);
            self.exiting_confirmed.remove(n);
        }
        let pruned =
            g.prune_tombstones(wall.saturating_sub(self.config.prune_gossip_tombstones_after));
        if !any_change && !pruned {
            return;
        }
        self.update_latest_gossip(g);
        self.publish(now);
        if !removed.is_empty() || moved_up {
            // A removal is news every member acts on (a singleton moves once its owner is
            // gone), and members moved Up are what a forming cluster waits for: spread at once,
            // as a failure is.
            self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
        }
        if !exiting.is_empty() {
            for target in self.exiting_gossip_targets(&exiting) {
                self.gossip_to(&target);
            }
        }
        if self.self_status() == MemberStatus::Exiting {
            self.self_exiting();
        }
    }

    /// Who hears first that members are exiting: the two oldest of this data center, and the two
    /// oldest having each role of the exiting members.
    fn exiting_gossip_targets(&self, exiting: &[Member]) -> BTreeSet<UniqueAddress> {
        let state = self.membership();
        let mut by_age: Vec<&Member> = state.dc_members().collect();
        by_age.sort_by(|a, b| a.age_cmp(b));
        let mut targets: BTreeSet<UniqueAddress> =
            by_age.iter().take(2).map(|m| m.node().clone()).collect();
        let roles: BTreeSet<&String> = exiting
            .iter()
            .flat_map(|m| m.roles())
            .filter(|r| !r.starts_with(DC_ROLE_PREFIX))
            .collect();
        for role in roles {
            targets.extend(
                by_age.iter().filter(|m| m.has_role(role)).take(2).map(|m| m.node().clone()),
            );
        }
        targets.remove(&self.self_node);
        targets
    }

    /// Turns failure-detector verdicts into this node's reachability rows.
    pub(super) fn reap_unreachable(&mut self, now: Instant) {
        if self.latest.len() <= 1 {
            return;
        }
        let me = self.self_node.clone();
        // A member changes here only when its detector says it is not available or this node
        // flags it: with neither, nothing is walked (this runs every second on every node).
        if !self.heartbeat.any_unavailable(now)
            && self.latest.reachability().all_unreachable_from(&me).is_empty()
        {
            return;
        }
        // Decided on the current gossip, which is copied only when something changed: this runs
        // every second on every node, and a copy costs a member table.
        let (became_reachable, became_unreachable): (Vec<_>, Vec<_>) =
            (self.membership().dc_members())
                .map(Member::node)
                .filter(|n| **n != me)
                .filter_map(|n| {
                    let reachable = self.latest.reachability().status_by(&me, n);
                    let available = self.heartbeat.is_available(&n.address, now);
                    match reachable {
                        ReachabilityStatus::Reachable if !available => Some((n.clone(), false)),
                        ReachabilityStatus::Unreachable if available => Some((n.clone(), true)),
                        _ => None,
                    }
                })
                .partition(|(_, available)| *available);
        if became_reachable.is_empty() && became_unreachable.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.latest);
        // Unreachable rows first, then reachable ones, each in member order.
        for (n, _) in &became_unreachable {
            g.reachability_mut().unreachable(&me, n);
        }
        for (n, _) in &became_reachable {
            g.reachability_mut().reachable(&me, n);
        }
        self.update_latest_gossip(g);
        self.publish(now);
        if !became_unreachable.is_empty() {
            // News of a failure is not left to the next gossip rounds (see `on_gossip`).
            self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
        }
    }

    /// A Down node shuts down once the Down has spread, or after a few ticks.
    pub(super) fn shutdown_self_when_down(&mut self) {
        if self.self_status() != MemberStatus::Down || self.shutdown.is_some() {
            return;
        }
        let state = self.membership();
        let r = state.dc_reachability();
        let spread = state
            .dc_members()
            .filter(|m| m.status() == MemberStatus::Down)
            .all(|m| !r.is_reachable(m.node()) || self.latest.seen_by(m.node()));
        if self.self_down_counter >= MAX_TICKS_BEFORE_SHUTDOWN_WHEN_DOWN || spread {
            self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
            self.request_shutdown(ShutdownReason::Downed);
        } else {
            self.self_down_counter += 1;
        }
    }

    /// Once one member prepares for a full shutdown, every Up member does.
    fn check_for_prepare_for_shutdown(&mut self, now: Instant) {
        if self.self_status() == MemberStatus::Up && self.preparing_for_shutdown() {
            self.start_prepare_for_shutdown(now);
        }
    }

    /// This node saw itself Exiting: tell the next leaders it is done, and shut down.
    pub(super) fn self_exiting(&mut self) {
        if self.exiting_done {
            return;
        }
        self.exiting_done = true;
        self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
        let state = self.membership();
        let others: Vec<&Member> =
            self.latest.members().filter(|m| *m.node() != self.self_node).collect();
        let first = state.leader_of(others.iter().copied()).map(|m| m.node().clone());
        let second = state
            .leader_of(others.iter().copied().filter(|m| Some(m.node()) != first.as_ref()))
            .map(|m| m.node().clone());
        for leader in [first, second].into_iter().flatten() {
            let msg = Message::ExitingConfirmed { node: self.self_node.clone() };
            self.send(leader.address, msg);
        }
        self.request_shutdown(ShutdownReason::Left);
    }
}
