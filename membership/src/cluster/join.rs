//! The join handshake: seed-node processes, InitJoin, Join and Welcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Cluster, GOSSIP_TO_RANDOM_NODES, JoinError, Phase, ShutdownReason, Timer};
use crate::address::{Address, UniqueAddress};
use crate::compat::check_compat;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::message::{ConfigCheck, Message};
use crate::version::AppVersion;

/// How often the first seed node resends InitJoin while it waits to form a cluster alone.
const FIRST_SEED_RESEND: Duration = Duration::from_secs(1);

/// A running seed-node process: asking the seed nodes who is there, to pick the one to join.
#[derive(Clone, Debug)]
pub(super) enum SeedProcess {
    /// This node is first in the seed list: ask the others, and form a new cluster alone if
    /// nobody answers with an ack before the deadline.
    First { deadline: Instant, remaining: BTreeSet<Address> },
    /// Ask every other seed until one that is part of a cluster acks.
    Others { seeds: Vec<Address> },
}

impl Cluster {
    /// Joins a cluster through seed nodes: forms a new cluster when this node is the first seed
    /// and no other seed answers within `cluster.seed_node_timeout`, otherwise joins through the
    /// first seed that is part of a cluster. Starts over if the join does not complete.
    ///
    /// # Errors
    /// When the list is empty, a seed belongs to another system, or this node is already a member.
    pub fn join_seed_nodes(&mut self, now: Instant, seeds: Vec<Address>) -> Result<(), JoinError> {
        if seeds.is_empty() {
            return Err(JoinError::NoSeedNodes);
        }
        if let Some(bad) = seeds.iter().find(|a| a.system() != self.config.system_name) {
            return Err(JoinError::SystemMismatch {
                address: bad.clone(),
                ours: self.config.system_name.clone(),
            });
        }
        if self.is_initialized() {
            return Err(JoinError::AlreadyMember { address: seeds[0].clone() });
        }
        if let Some(after) = self.config.shutdown_after_unsuccessful_join_seed_nodes {
            self.timers.set(Timer::JoinGiveUp, now + after);
        }
        self.seed_nodes = seeds;
        self.start_seed_process(now);
        self.publish(now);
        Ok(())
    }

    /// Joins the cluster that `address` is a member of (or forms a new one when it is this node).
    ///
    /// # Errors
    /// When `address` belongs to another system, or this node is already a member.
    pub fn join(&mut self, now: Instant, address: Address) -> Result<(), JoinError> {
        self.seed_nodes.clear();
        self.join_to(now, address)?;
        self.publish(now);
        Ok(())
    }

    fn start_seed_process(&mut self, now: Instant) {
        let me = self.self_node.address.clone();
        let seeds = self.seed_nodes.clone();
        self.phase = Phase::Uninitialized;
        self.timers.clear(Timer::JoinRetry);
        if seeds.iter().all(|s| *s == me) {
            self.seed_process = None;
            let _ = self.join_to(now, me);
            return;
        }
        if seeds[0] == me {
            let remaining = seeds.into_iter().filter(|s| *s != me).collect();
            let deadline = now + self.config.seed_node_timeout;
            self.seed_process = Some(SeedProcess::First { deadline, remaining });
        } else {
            let others = seeds.into_iter().filter(|s| *s != me).collect();
            self.seed_process = Some(SeedProcess::Others { seeds: others });
        }
        self.seed_process_tick(now);
    }

    pub(super) fn seed_process_tick(&mut self, now: Instant) {
        let targets: Vec<Address> = match &self.seed_process {
            None => return,
            Some(SeedProcess::First { deadline, .. }) if now >= *deadline => {
                let me = self.self_node.address.clone();
                let _ = self.join_to(now, me);
                return;
            }
            Some(SeedProcess::First { remaining, .. }) => {
                self.timers.set(Timer::SeedProcess, now + FIRST_SEED_RESEND);
                remaining.iter().cloned().collect()
            }
            Some(SeedProcess::Others { seeds }) => {
                self.timers.set(Timer::SeedProcess, now + self.config.seed_node_timeout);
                seeds.clone()
            }
        };
        let config = self.config.compat_keys();
        for to in targets {
            self.send(to, Message::InitJoin { config: config.clone() });
        }
    }

    pub(super) fn on_init_join(&mut self, from: UniqueAddress, theirs: &BTreeMap<String, String>) {
        let address = self.self_node.address.clone();
        let status = self.self_status();
        // After a long pause this node's view may be stale (the others may have removed it), so it
        // points no one at itself until it hears from a member.
        if !self.is_initialized()
            || status.is_down_or_exiting()
            || self.awaiting_contact_after.is_some()
        {
            self.send(from.address, Message::InitJoinNack { address });
            return;
        }
        let ours = self.config.compat_keys();
        let config_check = if theirs.is_empty() {
            ConfigCheck::UnsupportedByJoiningNode
        } else if check_compat(&ours, theirs).is_ok() {
            ConfigCheck::Compatible(
                ours.into_iter().filter(|(k, _)| theirs.contains_key(k)).collect(),
            )
        } else {
            ConfigCheck::Incompatible
        };
        self.send(from.address, Message::InitJoinAck { address, config_check });
    }

    pub(super) fn on_init_join_ack(&mut self, now: Instant, address: Address, check: ConfigCheck) {
        if self.seed_process.is_none() || self.is_initialized() {
            return;
        }
        let enforce = self.config.config_compat_enforce_on_join;
        let verdict = match check {
            ConfigCheck::Compatible(theirs) => check_compat(&self.config.compat_keys(), &theirs),
            ConfigCheck::Incompatible => {
                Err(format!("the seed {address} rejected this node's configuration"))
            }
            ConfigCheck::Unchecked | ConfigCheck::UnsupportedByJoiningNode => Ok(()),
        };
        if let Err(why) = verdict
            && enforce
        {
            self.seed_process = None;
            self.timers.clear(Timer::SeedProcess);
            self.request_shutdown(ShutdownReason::IncompatibleConfig(why));
            return;
        }
        let _ = self.join_to(now, address);
    }

    pub(super) fn on_init_join_nack(&mut self, now: Instant, address: &Address) {
        let Some(SeedProcess::First { remaining, .. }) = &mut self.seed_process else { return };
        remaining.remove(address);
        if remaining.is_empty() {
            let me = self.self_node.address.clone();
            let _ = self.join_to(now, me);
        }
    }

    /// Sends Join to `address`, or forms a new cluster when it is this node.
    fn join_to(&mut self, now: Instant, address: Address) -> Result<(), JoinError> {
        if address.system() != self.config.system_name {
            return Err(JoinError::SystemMismatch {
                address,
                ours: self.config.system_name.clone(),
            });
        }
        if self.is_initialized() {
            return Err(JoinError::AlreadyMember { address });
        }
        self.seed_process = None;
        self.timers.clear(Timer::SeedProcess);
        if address == self.self_node.address {
            self.become_initialized(now);
            let (node, roles, version) =
                (self.self_node.clone(), self.self_roles.clone(), self.app_version.clone());
            self.on_join(now, node, roles, version);
            return Ok(());
        }
        self.phase = Phase::TryingToJoin { join_with: address.clone() };
        match self.config.retry_unsuccessful_join_after {
            Some(after) => self.timers.set(Timer::JoinRetry, now + after),
            None => self.timers.clear(Timer::JoinRetry),
        }
        let join = Message::Join {
            node: self.self_node.clone(),
            roles: self.self_roles.clone(),
            app_version: self.app_version.clone(),
        };
        self.asked_to_join = true;
        self.send(address, join);
        Ok(())
    }

    pub(super) fn join_retry(&mut self, now: Instant) {
        let Phase::TryingToJoin { join_with } = self.phase.clone() else { return };
        if self.seed_nodes.is_empty() {
            self.phase = Phase::Uninitialized;
            let _ = self.join_to(now, join_with);
        } else {
            self.start_seed_process(now);
        }
    }

    fn become_initialized(&mut self, now: Instant) {
        self.phase = Phase::Initialized;
        self.seed_process = None;
        for t in [Timer::SeedProcess, Timer::JoinRetry, Timer::JoinGiveUp] {
            self.timers.clear(t);
        }
        self.start_heartbeats(now);
    }

    /// A Join request on a member, or this node joining itself.
    pub(super) fn on_join(
        &mut self,
        now: Instant,
        node: UniqueAddress,
        roles: BTreeSet<String>,
        app_version: AppVersion,
    ) {
        if !self.is_initialized() || self.preparing_for_shutdown() {
            return;
        }
        if node.address.system() != self.config.system_name {
            return;
        }
        if self.latest.has_member(&self.self_node) && self.self_status().is_down_or_exiting() {
            return;
        }
        // A member that resumed from a long pause admits no one until it hears from a member: it
        // may have been removed meanwhile and would lead a second cluster (see `on_init_join`).
        if node != self.self_node && self.awaiting_contact_after.is_some() {
            return;
        }
        // A removed incarnation never comes back (reliability S5): it must restart with a new uid.
        // It can still ask, when it was removed while it waited for its Welcome (paused, or cut
        // off), and then retries its join.
        if self.latest.tombstones().contains_key(&node) {
            return;
        }
        let existing = self.latest.members().find(|m| m.address() == &node.address).cloned();
        match existing {
            Some(m) if *m.node() == node => {
                if node != self.self_node {
                    self.send_welcome(&node);
                }
            }
            Some(old) => {
                // A new incarnation on the same host:port: the old one is dead. It is downed, and
                // the new one gets in once the old one is removed.
                if old.status() != MemberStatus::Down {
                    let mut g = Gossip::clone(&self.latest);
                    g.reachability_mut().terminated(&self.self_node, old.node());
                    self.update_latest_gossip(g);
                    self.down(now, old.address());
                }
            }
            None => {
                self.heartbeat.forget(&node.address);
                let mut g = Gossip::clone(&self.latest);
                let was_empty = g.is_empty();
                g.update([Member::joining(node.clone(), roles, app_version)]);
                if !g.has_member(&self.self_node) {
                    let me = Member::joining(
                        self.self_node.clone(),
                        self.self_roles.clone(),
                        self.app_version.clone(),
                    );
                    g.update([me]);
                }
                self.update_latest_gossip(g);
                if node == self.self_node {
                    if was_empty {
                        self.publish(now);
                        self.leader_actions(now);
                    }
                } else {
                    self.send_welcome(&node);
                    // The other members hear of the joiner at once, not in the next rounds:
                    // the leader moves it Up only once every member has seen it.
                    self.gossip_unseen_n(GOSSIP_TO_RANDOM_NODES, &node);
                }
            }
        }
    }

    fn send_welcome(&mut self, to: &UniqueAddress) {
        let welcome =
            Message::Welcome { from: self.self_node.clone(), gossip: self.latest.clone() };
        self.send(to.address.clone(), welcome);
    }

    pub(super) fn on_welcome(&mut self, now: Instant, from: UniqueAddress, gossip: Arc<Gossip>) {
        if self.welcome_expected_from(&from) {
            self.admitted(now, from, &gossip);
        }
    }

    /// Gossip addressed to a node that asked to join and is not in yet. A member sends it only
    /// once this incarnation is in its member table, so it stands for a Welcome that was lost:
    /// without it, the joiner would wait a whole `retry_unsuccessful_join_after` (and another on
    /// each further loss) while the rest of the cluster already counts it as a member. The same
    /// senders are accepted as for a Welcome.
    pub(super) fn on_gossip_while_joining(
        &mut self,
        now: Instant,
        from: UniqueAddress,
        gossip: &Gossip,
    ) {
        if self.asked_to_join && self.welcome_expected_from(&from) && gossip.has_member(&from) {
            self.admitted(now, from, gossip);
        }
    }

    /// Whether this node takes its first state from `from`: only as the answer to the join it
    /// has outstanding, from the node it sent it to. Once the join is retried through the seed
    /// nodes, an answer to the earlier one is stale and is not taken: its sender may have died
    /// since, with every member it lists, and a joiner that took it would be the only live member
    /// of that cluster, beside the one that has formed meanwhile (README,
    /// `cluster.retry_unsuccessful_join_after`).
    fn welcome_expected_from(&self, from: &UniqueAddress) -> bool {
        match &self.phase {
            Phase::Initialized | Phase::Uninitialized => false,
            Phase::TryingToJoin { join_with } => *join_with == from.address,
        }
    }

    /// Takes `gossip` from member `from` as this node's first state, when it holds this
    /// incarnation.
    fn admitted(&mut self, now: Instant, from: UniqueAddress, gossip: &Gossip) {
        if !gossip.has_member(&self.self_node) || gossip.check_invariants().is_err() {
            return;
        }
        let mut g = gossip.clone();
        g.add_seen(&self.self_node);
        self.set_latest(g);
        self.become_initialized(now);
        self.down_other_incarnations_of_self();
        self.publish(now);
        if from != self.self_node {
            self.gossip_to(&from);
        }
    }
}
