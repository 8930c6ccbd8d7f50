//! Gossip: the periodic tick, target selection, and receiving gossip and status.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use rand::seq::IndexedRandom;

use super::{Cluster, GOSSIP_TO_RANDOM_NODES, ShutdownReason, Timer};
use crate::address::UniqueAddress;
use crate::config::TargetPreference;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::message::Message;
use crate::reachability::ReachabilityStatus;
use crate::state::MembershipState;
use crate::vclock::{Ordering, VectorClock};

impl Cluster {
    pub(super) fn gossip_tick(&mut self, now: Instant) {
        if !self.is_initialized() {
            return;
        }
        self.gossip_once();
        if self.needs_speedup() {
            let third = self.config.gossip_interval / 3;
            self.timers.set(Timer::GossipSpeedup1, now + third);
            self.timers.set(Timer::GossipSpeedup2, now + third * 2);
        }
    }

    /// Gossip is spread three times as fast while a member is Down or fewer than half the
    /// members have seen the current version.
    pub(super) fn needs_speedup(&self) -> bool {
        let g = &self.latest;
        g.members().any(|m| m.status() == MemberStatus::Down) || g.seen().len() < g.len() / 2
    }

    /// Gossips to one target: the full state when it has not seen it, else only the status.
    pub(super) fn gossip_once(&mut self) {
        if self.latest.len() <= 1 {
            return;
        }
        let Some(target) = self.select_gossip_target() else { return };
        if self.latest.seen_by(&target) {
            self.gossip_status_to(&target);
        } else {
            self.gossip_to(&target);
        }
    }

    /// The members gossip may go to, in member order, each with whether it has seen `g`: those of
    /// this data center that are valid gossip targets (see
    /// [`MembershipState::is_valid_gossip_target`]).
    fn valid_targets<'g>(&self, g: &'g Gossip) -> Vec<(&'g UniqueAddress, bool)> {
        let state = MembershipState::new(g, &self.self_node, &self.config.data_center);
        let one_data_center = g.all_in_data_center(&self.config.data_center);
        g.members_with_seen()
            .filter(|(m, _)| one_data_center || m.data_center() == self.config.data_center)
            .map(|(m, seen)| (m.node(), seen))
            .filter(|(n, _)| state.is_valid_gossip_target(n))
            .collect()
    }

    /// Picks the gossip target: with the configured probability a member that has not
    /// seen the current version, otherwise (or when all have) any valid member.
    fn select_gossip_target(&mut self) -> Option<UniqueAddress> {
        let latest = self.latest.clone();
        let p = match self.config.gossip_target_preference {
            TargetPreference::AlwaysPreferUnseen => 1.0,
            TargetPreference::ReducedProbability => {
                self.config.different_view_probability(latest.len())
            }
        };
        if let Some(target) = self.any_member_when_all_are_targets(&latest, p) {
            return target;
        }
        let candidates = self.valid_targets(&latest);
        if p >= 1.0 || self.rng.random::<f64>() < p {
            let unseen: Vec<&UniqueAddress> =
                candidates.iter().filter(|(_, seen)| !seen).map(|(n, _)| *n).collect();
            if let Some(n) = unseen.choose(&mut self.rng) {
                return Some((*n).clone());
            }
        }
        candidates.choose(&mut self.rng).map(|(n, _)| (*n).clone())
    }

    /// [`select_gossip_target`](Self::select_gossip_target) in the steady state of a formed
    /// cluster, without a list of candidates: when every member has seen `g` (so there is no
    /// unseen one to prefer), all are in this data center and this node flags none, every other
    /// member is a valid target, and the one at a random position among them is taken, with the
    /// same draws from the random generator as the general case. `None` when that does not hold.
    fn any_member_when_all_are_targets(
        &mut self,
        g: &Gossip,
        p: f64,
    ) -> Option<Option<UniqueAddress>> {
        let me = &self.self_node;
        // The seen set holds only members (a gossip invariant): as many means all.
        let all_targets = g.seen().len() == g.len()
            && g.all_in_data_center(&self.config.data_center)
            && g.reachability().all_unreachable_from(me).is_empty();
        if !all_targets {
            return None;
        }
        // The general case draws to decide whether to prefer unseen members, then finds none.
        let _prefer_unseen = p >= 1.0 || self.rng.random::<f64>() < p;
        let others = g.len() - usize::from(g.has_member(me));
        if others == 0 {
            return Some(None);
        }
        let i = self.rng.random_range(..others);
        Some(g.nodes().filter(|n| *n != me).nth(i).cloned())
    }

    /// The digest of the current seen set (computed once per set, see [`Gossip::seen_digest`]).
    fn current_seen_digest(&self) -> [u8; 20] {
        self.latest.seen_digest()
    }

    /// Sends the full gossip to `node` if it is a valid target.
    pub(super) fn gossip_to(&mut self, node: &UniqueAddress) {
        if !self.membership().is_valid_gossip_target(node) {
            return;
        }
        let msg = Message::Gossip {
            from: self.self_node.clone(),
            to: node.clone(),
            gossip: self.latest.clone(),
        };
        self.send(node.address.clone(), msg);
    }

    /// A message from an incarnation this cluster removed (its tombstone is in the gossip) is
    /// not processed, and heartbeats from it get no answer. To what it sends periodically
    /// (heartbeats, gossip, gossip status) this node answers with its gossip, whose tombstone
    /// tells the removed node to stop (see `on_gossip`). Akka gets the same from its transport's
    /// quarantine; here it is part of the protocol, so it holds whatever the transport.
    pub(super) fn answer_removed_incarnation(&mut self, node: &UniqueAddress, message: &Message) {
        if matches!(
            message,
            Message::Heartbeat { .. } | Message::Gossip { .. } | Message::GossipStatus { .. }
        ) {
            let msg = Message::Gossip {
                from: self.self_node.clone(),
                to: node.clone(),
                gossip: self.latest.clone(),
            };
            self.send(node.address.clone(), msg);
        }
    }

    fn gossip_status_to(&mut self, node: &UniqueAddress) {
        if !self.membership().is_valid_gossip_target(node) {
            return;
        }
        let msg = Message::GossipStatus {
            from: self.self_node.clone(),
            version: self.latest.version().clone(),
            seen_digest: self.current_seen_digest().to_vec(),
        };
        self.send(node.address.clone(), msg);
    }

    /// Sends the full gossip to up to `n` random valid members that `pick` accepts.
    /// `pick` is given each candidate and whether it has seen the current version.
    fn gossip_random_n_of(&mut self, n: usize, pick: impl Fn(&UniqueAddress, bool) -> bool) {
        let latest = self.latest.clone();
        let mut candidates = self.valid_targets(&latest);
        candidates.retain(|(t, seen)| pick(t, *seen));
        let targets: Vec<UniqueAddress> =
            candidates.choose_multiple(&mut self.rng, n).map(|(t, _)| (*t).clone()).collect();
        for t in targets {
            self.gossip_to(&t);
        }
    }

    /// Sends the full gossip to up to `n` random valid members.
    pub(super) fn gossip_random_n(&mut self, n: usize) {
        self.gossip_random_n_of(n, |_, _| true);
    }

    /// Sends the full gossip to up to `n` random valid members other than `skip` (who hears of
    /// it anyway) that have not seen it.
    pub(super) fn gossip_unseen_n(&mut self, n: usize, skip: &UniqueAddress) {
        self.gossip_random_n_of(n, |t, seen| !seen && t != skip);
    }

    pub(super) fn on_gossip_status(
        &mut self,
        from: &UniqueAddress,
        version: &VectorClock,
        seen_digest: &[u8],
    ) {
        if !self.is_initialized()
            || !self.latest.has_member(from)
            || !self.latest.reachability().is_reachable_by(&self.self_node, from)
        {
            return;
        }
        let seen_same = seen_digest.is_empty() || seen_digest == self.current_seen_digest();
        if !seen_same {
            self.gossip_to(from);
            return;
        }
        match version.compare(self.latest.version()) {
            Ordering::Same => {}
            Ordering::After => self.gossip_status_to(from),
            Ordering::Before | Ordering::Concurrent => self.gossip_to(from),
        }
    }

    /// Receives a full gossip.
    pub(super) fn on_gossip(
        &mut self,
        now: Instant,
        from: UniqueAddress,
        to: &UniqueAddress,
        remote: Arc<Gossip>,
    ) {
        let me = self.self_node.clone();
        if self.is_initialized()
            && *to == me
            && self.latest.has_member(&from)
            && remote.tombstones().contains_key(&me)
        {
            // The cluster removed this incarnation while it could not hear of it (a process
            // paused past its downing, a partition that outlived it). It is not a member any
            // more and must not act as one: it stops, as a downed node does.
            self.request_shutdown(ShutdownReason::Downed);
            return;
        }
        if self.is_initialized() && *to == me && !self.latest.has_member(&from) {
            self.readmit_forgotten_joiner(now, &from, &remote);
            return;
        }
        if !self.is_initialized() && *to == me {
            self.on_gossip_while_joining(now, from, &remote);
            return;
        }
        if !self.is_initialized()
            || *to != me
            || !self.latest.reachability().is_reachable_by(&me, &from)
            || !remote.has_member(&me)
            || remote.check_received(&self.latest).is_err()
        {
            return;
        }
        let local = self.latest.clone();
        let (mut winner, talk_back) = match remote.version().compare(local.version()) {
            Ordering::Same => {
                let mut g = Gossip::clone(&remote);
                g.merge_seen(&local);
                (g, !remote.seen_by(&me))
            }
            Ordering::Before => (Gossip::clone(&local), true),
            Ordering::After => (Gossip::clone(&remote), !remote.seen_by(&me)),
            // No clock entries are pruned for one-sided Down or Exiting members (as Akka does):
            // the merge keeps such members (see `Gossip::merge`), and removal prunes their entries.
            Ordering::Concurrent => {
                let mut merged = remote.merge(&local);
                // The merge prunes the clock entries of removed nodes. When a change was stamped
                // only by such an entry (a removed node's resolver downed members after the
                // leader that removed it last heard of it), pruning erases the change from the
                // clock: the merged clock may equal one side's, or the clock another node
                // computes from gossips without that change, while the state differs — two
                // states under one version (S11). A merge that pruned an entry therefore gets a
                // version of this node, which no other state carries.
                let pruned = |side: &Gossip| {
                    side.version().entries().any(|(n, _)| merged.tombstones().contains_key(n))
                };
                if pruned(&local) || pruned(&remote) {
                    merged.increment_version(&me);
                }
                (merged, true)
            }
        };
        winner.add_seen(&me);
        // A member this node did not know to be unreachable: the news is passed on to a few
        // random members at once rather than in the next gossip rounds, so it reaches every
        // member in a few hops of a round trip each instead of several gossip rounds of a second
        // each. Each node passes on a given failure once (later gossips hold nothing new).
        let news_of_failure = (winner.reachability().all_unreachable())
            .difference(local.reachability().all_unreachable())
            .next()
            .is_some();
        // A new version while members are joining, taken in by the leader: news of a joiner (or
        // of a joiner's acknowledgement) is passed on at once to members that have not seen it,
        // so the acknowledgements the leader needs to move joiners Up come back within a round
        // trip instead of over several gossip rounds (see docs/benchmarks.md, "Formation").
        let new_version = winner.version() != local.version();
        // Members this node knew as joining that the leader has moved Up: passed on at once to
        // members that have not seen it, as the leader itself does, so that a forming cluster
        // learns it is all Up within a few round trips rather than a few gossip rounds. Only the
        // members whose version changed are read.
        let news_of_up = new_version
            && winner.changed_members(&local).any(|(was, m)| {
                was.is_some_and(|l| l.status().is_joining()) && m.status() == MemberStatus::Up
            });
        // Not word from a member after a pause: a gossip may have been sent before the pause and
        // read only after it (it waited in the socket while the process was stopped), by a member
        // that has since downed this node or died. Only an answer to a heartbeat sent after the
        // pause proves a member hears this node now (see `Message::HeartbeatRsp` in mod.rs).
        let was_down = self.self_status() == MemberStatus::Down;
        for m in winner.members_missing_from(&local) {
            self.heartbeat.forget(m.address());
        }
        self.set_latest(winner);
        let admitting = new_version
            && self.membership().is_leader(&me)
            && self.latest.members().any(|m| m.status().is_joining());
        self.down_other_incarnations_of_self();
        self.down_self_if_joined_cluster_is_downed(now);
        self.publish(now);
        match self.self_status() {
            MemberStatus::Exiting => self.self_exiting(),
            MemberStatus::Down if !was_down => self.shutdown_self_when_down(),
            _ => {}
        }
        if talk_back && self.shutdown.is_none() {
            self.gossip_to(&from);
        }
        if news_of_failure && self.shutdown.is_none() {
            self.gossip_random_n(GOSSIP_TO_RANDOM_NODES);
        }
        if (admitting || news_of_up) && self.shutdown.is_none() {
            self.gossip_unseen_n(GOSSIP_TO_RANDOM_NODES, &from);
        }
        if self.shutdown.is_none() {
            self.remove_on_convergence(now);
        }
    }

    /// A joiner (Joining or WeaklyUp) whose gossip holds a Down member and no other member that
    /// is neither Down nor joining itself: the cluster it joined was downed around it — a
    /// resolver that downed all it knew of had not heard of this joiner yet. It was never part of
    /// a side that a decision kept, and left running it would grow a second cluster of its own
    /// (reliability S1), so it downs itself like the rest.
    ///
    /// A Down member replaced by a new incarnation of its address does not count: admitting the
    /// new one marks the old one terminated and downs it (it stopped, as only one process holds
    /// an address), which says nothing about the cluster. A founder restarted before it moved its
    /// joiners Up, and asking to join again through them, would otherwise make every joiner down
    /// itself.
    pub(super) fn down_self_if_joined_cluster_is_downed(&mut self, now: Instant) {
        let joining = |m: &Member| m.status().is_joining();
        let me = &self.self_node;
        let Some(self_member) = self.latest.member(me) else { return };
        let others = || self.latest.members().filter(|m| m.node() != me);
        let replaced = |m: &Member| {
            self.latest.reachability().status(m.node()) == ReachabilityStatus::Terminated
                || (self.latest.other_incarnations(m.node()))
                    .any(|o| o.status() != MemberStatus::Down)
        };
        let downed_around = joining(self_member)
            && others().any(|m| m.status() == MemberStatus::Down && !replaced(m))
            && others().all(|m| m.status() == MemberStatus::Down || joining(m));
        if downed_around {
            let me = me.clone();
            self.down_node(now, &me);
        }
    }

    /// This process holds its address, so any other incarnation of it in the gossip is dead: an
    /// earlier run, admitted by a side that had not heard of this one, or not yet downed. It is
    /// marked terminated and Down, so the leader removes it and then moves this one up (S5).
    pub(super) fn down_other_incarnations_of_self(&mut self) {
        let me = &self.self_node;
        let stale: Vec<UniqueAddress> = (self.latest.other_incarnations(me))
            .filter(|m| m.status() != MemberStatus::Down)
            .map(|m| m.node().clone())
            .collect();
        if stale.is_empty()
            || !self.latest.has_member(me)
            || self.self_status().is_down_or_exiting()
        {
            return;
        }
        let mut g = Gossip::clone(&self.latest);
        for old in &stale {
            g.reachability_mut().terminated(me, old);
            g.mark_as_down(old);
        }
        self.update_latest_gossip(g);
    }

    /// A node that is not a member sent gossip that holds this node as a member and itself as
    /// Joining or WeaklyUp: it was welcomed by a member that was downed before its gossip about
    /// the joiner spread, so it waits for a cluster that forgot it. It is admitted again as a
    /// joining node, as if it had sent Join — if its gossip is of this cluster (every other member
    /// it holds is a member here, removed from here, or a joiner forgotten like the sender) and
    /// one of its members is Down or removed here (its welcomer, or another member that went
    /// while it waited). Anyone else is ignored: a
    /// joiner whose welcome has simply not reached this node yet, a member of another cluster
    /// (even one that once held this node), or a removed incarnation (which [`Self::on_join`]
    /// refuses).
    fn readmit_forgotten_joiner(&mut self, now: Instant, from: &UniqueAddress, remote: &Gossip) {
        let Some(joiner) = remote.member(from) else { return };
        // A joiner asked to leave before it was moved Up is readmitted too, or it would wait for
        // its removal for ever. Readmitted as Joining, it merges its own Leaving back in, and the
        // leader then lets it leave.
        let joining = joiner.status().is_joining() || joiner.left_while_joining();
        let known = |m: &Member| {
            m.node() == from
                || m.status().is_joining()
                || m.status() == MemberStatus::Down
                || self.latest.has_member(m.node())
                || self.latest.tombstones().contains_key(m.node())
        };
        let gone_here = |m: &Member| {
            self.latest.tombstones().contains_key(m.node())
                || self.latest.member(m.node()).is_some_and(|l| l.status() == MemberStatus::Down)
        };
        let gone_there =
            |m: &Member| m.status() == MemberStatus::Down && self.latest.has_member(m.node());
        if !joining
            || !remote.has_member(&self.self_node)
            || !remote.members().all(known)
            || !remote.members().any(|m| gone_here(m) || gone_there(m))
            || remote.check_invariants().is_err()
        {
            return;
        }
        let (roles, app_version) = (joiner.roles().clone(), joiner.app_version().clone());
        self.on_join(now, from.clone(), roles, app_version);
    }
}
