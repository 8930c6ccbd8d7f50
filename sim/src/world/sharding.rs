//! The sharding layer's steps: regions and replicas started with their process, coordinators
//! started and stopped with the singleton instance, membership lists, sharding messages, timers
//! and the load's asks fed to the machines, and their outputs carried out — messages into the
//! network, shards and entities started and stopped, answers sent. Every entity start is checked
//! against S18. None of it touches a membership core or the membership trace.

use std::collections::BTreeSet;
use std::time::Instant;

use convoke_membership::gossip::Gossip;
use convoke_membership::reachability::ReachabilityStatus;
use convoke_membership::{Member, UniqueAddress};
use convoke_sharding::sharding::{
    Coordinator, CoordinatorOutput, EntityId, Region, RegionOutput, Replica, Shard, ShardId,
    ShardOutput, shard_for_entity,
};

use super::{Event, Sim, into_queue};
use crate::delivery::ShardingInFlight;
use crate::delivery::{Ask, ShardingWire};
use crate::invariants::Violation;
use crate::invariants::s17_one_singleton::split;
use crate::processes::SlotState;
use crate::sharding::{ASK_INTERVAL, EntityRun, SHARDS, SlotSharding};

/// One output of a slot's machines, taken out so the world can act on it.
enum Out {
    Coordinator(CoordinatorOutput),
    Region(RegionOutput<Ask>),
    Shard(ShardId, ShardOutput<Ask>),
}

/// The next output of any machine in `s`: the coordinator's, the region's, then the shards'.
fn next_output(s: &mut SlotSharding) -> Option<Out> {
    if let Some(o) = s.coordinator.as_mut().and_then(Coordinator::poll_output) {
        return Some(Out::Coordinator(o));
    }
    if let Some(o) = s.region.as_mut().and_then(Region::poll_output) {
        return Some(Out::Region(o));
    }
    s.shards
        .iter_mut()
        .find_map(|(id, shard)| shard.poll_output().map(|o| Out::Shard(id.clone(), o)))
}

/// The earliest deadline of the machines in `s`.
fn next_deadline(s: &SlotSharding) -> Option<Instant> {
    let c = s.coordinator.as_ref().and_then(Coordinator::poll_timeout);
    let r = s.region.as_ref().and_then(Region::poll_timeout);
    let shards = s.shards.values().filter_map(Shard::poll_timeout).min();
    [c, r, shards].into_iter().flatten().min()
}

impl Sim {
    /// Feeds one input to the sharding of `slot`, if it runs there, and carries out the outputs.
    fn sharding_input(
        &mut self,
        slot: usize,
        what: &'static str,
        f: impl FnOnce(&mut SlotSharding, Instant),
    ) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        if s.slot(slot).node.is_none() {
            return;
        }
        s.hash(now, slot, what);
        f(s.slot_mut(slot), local);
        self.sharding_drain(slot);
        let deadline = self.shardings.as_ref().and_then(|s| next_deadline(s.slot(slot)));
        self.arm_sharding_timer(slot, deadline);
    }

    /// Carries out every output of the machines in `slot` until none has more.
    fn sharding_drain(&mut self, slot: usize) {
        loop {
            if self.violation.is_some() {
                return;
            }
            let Some(s) = self.shardings.as_mut() else { return };
            let Some(me) = s.slot(slot).node.clone() else { return };
            let Some(out) = next_output(s.slot_mut(slot)) else { return };
            match out {
                Out::Coordinator(CoordinatorOutput::ToRegion { to, msg }) => {
                    self.sharding_send(slot, &me, &to, ShardingWire::ToRegion(msg));
                }
                Out::Coordinator(CoordinatorOutput::ToReplica { to, msg }) => {
                    self.sharding_send(slot, &me, &to, ShardingWire::ToReplica(msg));
                }
                Out::Region(o) => self.region_output(slot, &me, o),
                Out::Shard(id, o) => self.shard_output(slot, id, o),
            }
        }
    }

    fn region_output(&mut self, slot: usize, me: &UniqueAddress, o: RegionOutput<Ask>) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        match o {
            RegionOutput::ToCoordinator { to, msg } => {
                self.sharding_send(slot, me, &to, ShardingWire::ToCoordinator(msg));
            }
            RegionOutput::Forward { to, shard, msg } => {
                self.sharding_send(slot, me, &to, ShardingWire::Forward(shard, msg));
            }
            RegionOutput::Deliver { shard, msg } => {
                if let Some(sh) = s.slot_mut(slot).shards.get_mut(&shard) {
                    sh.deliver(msg.entity.clone(), msg, local);
                }
            }
            RegionOutput::StartShard(shard) => {
                s.stats.shard_starts += 1;
                s.hash(now, slot, "start-shard");
                let sh = Shard::new(shard.clone(), s.config());
                let ss = s.slot_mut(slot);
                // Ordered before a long pause, started only after it: as stale as a shard that
                // ran through the pause.
                let epoch = if ss.stale_replay { ss.long_pauses - 1 } else { ss.long_pauses };
                ss.shard_epochs.insert(shard.clone(), epoch);
                ss.shards.insert(shard.clone(), sh);
                self.note(|| format!("slot {slot} shard {shard} starts"));
            }
            RegionOutput::HandOffShard(shard) => {
                s.stats.hand_offs += 1;
                s.hash(now, slot, "hand-off");
                if let Some(sh) = s.slot_mut(slot).shards.get_mut(&shard) {
                    sh.hand_off();
                }
                self.note(|| format!("slot {slot} shard {shard} hands off"));
            }
            RegionOutput::Dropped { msg, .. } => self.answer(slot, me, msg.id, false),
            // Regions in the simulation never shut down gracefully.
            RegionOutput::Stopped => {}
        }
    }

    fn shard_output(&mut self, slot: usize, id: ShardId, o: ShardOutput<Ask>) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(me) = s.slot(slot).node.clone() else { return };
        match o {
            ShardOutput::StartEntity(entity) => {
                s.stats.entity_starts += 1;
                s.hash(now, slot, "start-entity");
                // An entity counts from its shard's start: a process frozen since then for longer
                // than the removal margin may run it on after it resumes (see S18).
                let ss = s.slot_mut(slot);
                let long_pauses = ss.shard_epochs.get(&id).copied().unwrap_or(ss.long_pauses);
                ss.entities.insert(entity.clone(), EntityRun { since: now, long_pauses });
                self.note(|| format!("slot {slot} entity {entity} starts (shard {id})"));
                self.check_one_entity(slot, &entity);
            }
            ShardOutput::Deliver { msg, .. } => self.answer(slot, &me, msg.id, true),
            ShardOutput::StopEntity(entity) => {
                // An entity stops at once when asked (passivation or handoff).
                s.stats.entity_stops += 1;
                let ss = s.slot_mut(slot);
                ss.entities.remove(&entity);
                if let Some(sh) = ss.shards.get_mut(&id) {
                    sh.entity_stopped(&entity, local);
                }
            }
            ShardOutput::Dropped { msg, .. } => self.answer(slot, &me, msg.id, false),
            ShardOutput::Stopped => {
                self.note(|| format!("slot {slot} shard {id} stopped"));
                let Some(s) = self.shardings.as_mut() else { return };
                let ss = s.slot_mut(slot);
                ss.shards.remove(&id);
                ss.shard_epochs.remove(&id);
                if let Some(r) = ss.region.as_mut() {
                    r.shard_stopped(id);
                }
            }
        }
    }

    /// Answers ask `id` from `slot`: through the network to the asking process.
    fn answer(&mut self, slot: usize, me: &UniqueAddress, id: u64, ok: bool) {
        let Some(s) = self.shardings.as_ref() else { return };
        let Some(asker) = s.asks().get(&id).map(|a| a.from_slot) else { return };
        let Some(to) = s.slot(asker).node.clone() else { return };
        self.sharding_send(slot, me, &to, ShardingWire::Reply { id, ok });
    }

    fn sharding_send(
        &mut self,
        slot: usize,
        me: &UniqueAddress,
        to: &UniqueAddress,
        w: ShardingWire,
    ) {
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        s.stats.messages += 1;
        s.hash(now, slot, w.name());
        let Some(to_slot) = self.procs.slot_of(&to.address) else { return };
        if !matches!(w, ShardingWire::Forward(..) | ShardingWire::Reply { .. }) {
            self.note(|| format!("slot {slot} sharding -> {to_slot} {}", w.describe()));
        }
        let m = ShardingInFlight {
            from_slot: slot,
            from: me.clone(),
            to_slot,
            message: (to.clone(), w),
        };
        self.delivery.send_sharding(now, m, into_queue(&mut self.queue, now));
    }

    /// S18: the entity just started in `slot` runs nowhere else, among the members of one
    /// cluster. An entity of a shard whose process was frozen for longer than the removal margin
    /// since the shard started does not count, on either side, nor one whose host is in another
    /// live cluster (S1's to bound).
    fn check_one_entity(&mut self, slot: usize, entity: &EntityId) {
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let Some(s) = self.shardings.as_ref() else { return };
        let split_from = |other: usize| split(self, slot, other);
        match s.other_host(slot, entity, self.now, split_from) {
            Ok(suspects) => {
                if let Some(s) = self.shardings.as_mut() {
                    s.suspect(suspects);
                }
            }
            Err(i) => self.s18_violated(slot, entity, i),
        }
    }

    fn s18_violated(&mut self, slot: usize, entity: &EntityId, i: usize) {
        let Some(s) = self.shardings.as_ref() else { return };
        let since = s.slot(i).entities.get(entity).map_or(0.0, |r| r.since.as_secs_f64());
        self.s18(
            slot,
            format!("entity {entity} started in slot {slot} while it runs in slot {i} (since {since:.3}s)"),
        );
    }

    /// Records an S18 violation at `slot`.
    fn s18(&mut self, slot: usize, message: String) {
        let v = Violation {
            invariant: "S18".to_owned(),
            step: self.step,
            time_s: self.now.as_secs_f64(),
            slot: Some(slot),
            message,
        };
        self.note(|| format!("VIOLATION {v}"));
        self.set_violation(v);
    }

    fn arm_sharding_timer(&mut self, slot: usize, deadline: Option<Instant>) {
        let at = deadline.map(|t| self.procs.global_at(slot, t));
        let Some(s) = self.shardings.as_mut() else { return };
        if let Some((at, generation)) = s.slot_mut(slot).timer.arm(at) {
            self.push(at, Event::ShardingTimer { slot, generation });
        }
    }

    pub(super) fn fire_sharding_timer(&mut self, slot: usize, generation: u64) {
        let current =
            self.shardings.as_ref().is_some_and(|s| s.slot(slot).timer.is_current(generation));
        // A paused process's timer is re-armed when it resumes.
        if !current || !self.is_running(slot) {
            return;
        }
        if let Some(s) = self.shardings.as_mut() {
            s.slot_mut(slot).timer.forget();
        }
        self.sharding_input(slot, "timer", |s, now| {
            if let Some(c) =
                s.coordinator.as_mut().filter(|c| c.poll_timeout().is_some_and(|t| t <= now))
            {
                c.handle_timeout(now);
            }
            if let Some(r) =
                s.region.as_mut().filter(|r| r.poll_timeout().is_some_and(|t| t <= now))
            {
                r.handle_timeout(now);
            }
            for sh in s.shards.values_mut() {
                if sh.poll_timeout().is_some_and(|t| t <= now) {
                    sh.handle_timeout(now);
                }
            }
        });
    }

    /// A new incarnation `node` started in `slot`: its region and replica start.
    pub(super) fn sharding_started(&mut self, slot: usize, node: &UniqueAddress) {
        let Some(s) = self.shardings.as_mut() else { return };
        s.on_exit(slot);
        let region = Region::new(s.config().clone(), node.clone(), true);
        let ss = s.slot_mut(slot);
        ss.node = Some(node.clone());
        ss.region = Some(region);
        ss.replica = Some(Replica::new());
    }

    /// The process in `slot` is gone: its sharding with it.
    pub(super) fn sharding_exit(&mut self, slot: usize) {
        self.judge_pause(slot);
        if let Some(s) = self.shardings.as_mut() {
            s.on_exit(slot);
        }
    }

    /// The members and unreachable nodes as the core in `slot` sees them.
    fn view_of(&self, slot: usize) -> Option<(Vec<Member>, BTreeSet<UniqueAddress>)> {
        let g = self.procs.core(slot)?.gossip();
        Some((g.members().cloned().collect(), unreachable_in(g)))
    }

    /// After a step of the core in `slot` that changed its members: region and coordinator see
    /// them.
    pub(super) fn sharding_members(&mut self, slot: usize, members: &[Member]) {
        let unreachable = self.view_of(slot).map(|(_, u)| u).unwrap_or_default();
        self.sharding_input(slot, "members", |s, now| {
            if let Some(r) = s.region.as_mut() {
                r.handle_members(members, now);
            }
            if let Some(c) = s.coordinator.as_mut() {
                c.handle_members(members, &unreachable, now);
            }
        });
    }

    /// The singleton instance started in `slot`: so does a coordinator, with a fresh instance
    /// number.
    pub(super) fn coordinator_started(&mut self, slot: usize) {
        let Some((members, unreachable)) = self.view_of(slot) else { return };
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(node) = s.slot(slot).node.clone() else { return };
        s.stats.coordinators += 1;
        let instance = s.stats.coordinators;
        let config = s.config().clone();
        self.note(|| format!("slot {slot} COORDINATOR STARTS (instance {instance})"));
        self.sharding_input(slot, "coordinator-start", |s, now| {
            let mut c = Coordinator::new(config, node, instance, &members, &unreachable, now);
            if let Some(r) = &s.region {
                c.note_departures(r.departures());
            }
            s.coordinator = Some(c);
        });
    }

    /// The singleton instance in `slot` was asked to stop, or is gone: the coordinator stops.
    pub(super) fn coordinator_stopped(&mut self, slot: usize) {
        let Some(s) = self.shardings.as_mut() else { return };
        if s.slot_mut(slot).coordinator.take().is_some() {
            self.note(|| format!("slot {slot} coordinator stops"));
        }
    }

    /// A sharding message reaches the network interface of its destination.
    pub(super) fn arrive_sharding(&mut self, m: ShardingInFlight) {
        let Some(m) = self.delivery.arrive_sharding(m) else { return };
        let to = m.to_slot;
        match self.slot(to).state {
            SlotState::Running => self.sharding_message(m),
            SlotState::Paused => {
                if let Some(s) = self.shardings.as_mut() {
                    s.slot_mut(to).inbox.push(m);
                }
            }
            _ => {}
        }
    }

    fn sharding_message(&mut self, m: ShardingInFlight) {
        let to = m.to_slot;
        let (addressee, wire) = m.message;
        let from = m.from;
        let here = self.shardings.as_ref().and_then(|s| s.slot(to).node.clone());
        if here.as_ref() != Some(&addressee) {
            return;
        }
        if let ShardingWire::Reply { id, ok } = wire {
            let incarnation = self.procs.slot(to).incarnations;
            let now = self.now;
            if let Some(s) = self.shardings.as_mut() {
                s.answered(id, ok, to, incarnation, now);
            }
            return;
        }
        let mut reply = None;
        self.sharding_input(to, wire.name(), |s, now| match wire {
            ShardingWire::ToCoordinator(msg) => {
                if let Some(c) = s.coordinator.as_mut() {
                    c.handle_region_msg(from.clone(), msg, now);
                }
            }
            ShardingWire::ToRegion(msg) => {
                if let Some(r) = s.region.as_mut() {
                    r.handle_message(from.clone(), msg, now);
                }
            }
            ShardingWire::ToReplica(msg) => {
                reply = s.replica.as_mut().and_then(|r| r.handle(msg));
            }
            ShardingWire::FromReplica(msg) => {
                if let Some(c) = s.coordinator.as_mut() {
                    c.handle_replica_msg(from.clone(), msg, now);
                }
            }
            ShardingWire::Forward(shard, ask) => {
                if let Some(r) = s.region.as_mut() {
                    r.route(shard, ask, now);
                }
            }
            ShardingWire::Reply { .. } => {}
        });
        if let (Some(reply), Some(me)) = (reply, here) {
            self.sharding_send(to, &me, &from, ShardingWire::FromReplica(reply));
        }
    }

    /// The load's next ask: a running process asks an entity; the next ask is scheduled.
    pub(super) fn sharding_ask(&mut self) {
        let Some(s) = self.shardings.as_ref() else { return };
        let running: Vec<usize> =
            self.procs.running().filter(|i| s.slot(*i).region.is_some()).collect();
        let now = self.now;
        self.push(now + ASK_INTERVAL, Event::ShardingAsk);
        let Some(s) = self.shardings.as_mut() else { return };
        let Some((slot, entity)) = s.draw_ask(&running) else { return };
        let incarnation = self.procs.slot(slot).incarnations;
        let id = s.new_ask(slot, incarnation, now);
        let shard = shard_for_entity(&entity, SHARDS);
        self.sharding_input(slot, "ask", |s, now| {
            if let Some(r) = s.region.as_mut() {
                r.route(shard, Ask { id, entity }, now);
            }
        });
    }

    /// The process in `slot` was paused at `now`.
    pub(super) fn sharding_paused(&mut self, slot: usize) {
        let now = self.now;
        if let Some(s) = self.shardings.as_mut() {
            s.slot_mut(slot).paused_at = Some(now);
        }
    }

    /// The pause of the process in `slot` is over: S18 judges the entity starts it held back.
    fn judge_pause(&mut self, slot: usize) {
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(x) = s.pause_over(slot, now) else { return };
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let message = format!(
            "entity {} started in slot {} at {:.3}s while it ran in slot {} (since {:.3}s), whose \
             process, paused at {:.3}s, ran again or ended at {:.3}s, within the removal margin",
            x.entity,
            x.started_in,
            x.started_at.as_secs_f64(),
            x.held_by,
            x.held_since.as_secs_f64(),
            x.paused_at.as_secs_f64(),
            now.as_secs_f64()
        );
        self.s18(x.started_in, message);
    }

    /// The process in `slot` resumed: what queued up is taken in, the timer re-armed.
    pub(super) fn sharding_resumed(&mut self, slot: usize) {
        self.judge_pause(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let margin = s.config().removal_margin;
        let ss = s.slot_mut(slot);
        let long = ss.paused_at.take().is_some_and(|at| now.saturating_sub(at) > margin);
        if long {
            ss.long_pauses += 1;
        }
        ss.stale_replay = long;
        let inbox = std::mem::take(&mut ss.inbox);
        ss.timer.forget();
        for m in inbox {
            if !self.is_running(slot) || self.violation.is_some() {
                break;
            }
            self.sharding_message(m);
        }
        if let Some(s) = self.shardings.as_mut() {
            s.slot_mut(slot).stale_replay = false;
        }
        let deadline = self.shardings.as_ref().and_then(|s| next_deadline(s.slot(slot)));
        self.arm_sharding_timer(slot, deadline);
    }
}

/// The nodes some member observes as unreachable in `gossip`.
pub(super) fn unreachable_in(gossip: &Gossip) -> BTreeSet<UniqueAddress> {
    gossip
        .reachability()
        .records()
        .filter(|r| r.status != ReachabilityStatus::Reachable)
        .map(|r| r.subject.clone())
        .collect()
}
