//! The sharding layer's steps: every process runs the runtime's sans-IO host of the entity
//! type; membership lists, frames, timers, the coordinator's start and stop and the load's asks
//! are fed to it, and its outputs carried out: frames encoded into the network, entities started,
//! answered and stopped, answers recorded. Every entity start is checked against S18. None of it
//! touches a membership core or the membership trace.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use convoke_membership::gossip::Gossip;
use convoke_membership::{Member, UniqueAddress};
use convoke_sharding::wire::{self, Decoded, Frame};
use convoke_sharding::{
    EntityId, Host, HostOutput, RegionMsg, Reply, ReplyTo, ShardId, answer, shard_for_entity,
};

use super::{Event, Sim, into_queue};
use crate::delivery::ShardingInFlight;
use crate::invariants::Violation;
use crate::invariants::s17_one_singleton::split;
use crate::sharding::{ASK_INTERVAL, EntityRun, SHARDS, passivates_after};

/// A frame's name and shard, for the step log.
fn describe(frame: &Frame) -> String {
    match Decoded::try_from(frame.clone()) {
        Ok(Decoded::ToCoordinator(m)) => format!("{m:?}"),
        Ok(Decoded::ToRegion(RegionMsg::ShardHomes(homes))) => {
            format!("ShardHomes({})", homes.len())
        }
        Ok(Decoded::ToRegion(m)) => format!("{m:?}"),
        _ => frame.name().to_owned(),
    }
}

impl Sim {
    /// Feeds one input to the host of `slot`, if sharding runs there, and carries out the
    /// outputs.
    pub(super) fn sharding_input(
        &mut self,
        slot: usize,
        what: &'static str,
        f: impl FnOnce(&mut Host<u64>, Instant),
    ) {
        self.judge_resumed();
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(host) = s.slot_mut(slot).host.as_mut() else { return };
        f(host, local);
        s.hash(now, slot, what);
        self.sharding_drain(slot);
        let deadline = self.host_deadline(slot);
        self.arm_sharding_timer(slot, deadline);
    }

    fn host_deadline(&self, slot: usize) -> Option<Instant> {
        self.shardings.as_ref()?.slot(slot).host.as_ref()?.poll_timeout()
    }

    /// Carries out every output of the host in `slot` until it has none.
    fn sharding_drain(&mut self, slot: usize) {
        loop {
            if self.violation.is_some() {
                return;
            }
            let Some(s) = self.shardings.as_mut() else { return };
            let ss = s.slot_mut(slot);
            let Some(me) = ss.node.clone() else { return };
            let Some(out) = ss.host.as_mut().and_then(Host::poll_output) else { return };
            self.host_output(slot, &me, out);
        }
    }

    fn host_output(&mut self, slot: usize, me: &UniqueAddress, out: HostOutput<u64>) {
        let local = self.local_instant(slot);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        match out {
            HostOutput::Send { to, frame } => self.sharding_send(slot, me, &to, &frame),
            HostOutput::StartEntity { shard, entity } => {
                s.stats.entity_starts += 1;
                s.hash(now, slot, "start-entity");
                // An entity counts from its shard's start: a process frozen since then for longer
                // than the removal margin may run it on after it resumes (see S18).
                let ss = s.slot_mut(slot);
                let long_pauses = ss.shard_epochs.get(&shard).copied().unwrap_or(ss.long_pauses);
                ss.entities.insert(entity.clone(), EntityRun { since: now, long_pauses });
                self.note(|| format!("slot {slot} entity {entity} starts (shard {shard})"));
                self.check_one_entity(slot, &entity);
            }
            HostOutput::DeliverToEntity { shard, entity, payload, reply } => {
                if s.states.is_some() {
                    // It answers once its state is written.
                    self.state_deliver(slot, shard, entity, payload, reply);
                    return;
                }
                // The entity answers at once, with what it was sent; with remembered entities,
                // every so many asks it passivates then.
                let passivate = passivates_after(s.config(), &payload);
                self.entity_answer(slot, reply, Ok(payload));
                if passivate {
                    self.note(|| format!("slot {slot} entity {entity} passivates"));
                    let host = self.shardings.as_mut().and_then(|s| s.slot_mut(slot).host.as_mut());
                    if let Some(h) = host {
                        h.passivate(&shard, &entity, local);
                    }
                }
            }
            HostOutput::StopEntity { shard, entity } => {
                // An entity stops at once when asked (passivation or handoff), unless it keeps
                // a state and has messages to finish first.
                if s.slot_mut(slot).stop_later(&entity) {
                    return;
                }
                s.stats.entity_stops += 1;
                let ss = s.slot_mut(slot);
                ss.entities.remove(&entity);
                if let Some(h) = ss.host.as_mut() {
                    h.entity_stopped(&shard, &entity, local);
                }
            }
            HostOutput::Reply { to, result } => {
                let incarnation = self.procs.slot(slot).incarnations;
                let ok = result.is_ok();
                s.answered(to, ok, slot, incarnation, now);
                self.note(|| {
                    format!("slot {slot} ask {to} answered: {}", if ok { "ok" } else { "failed" })
                });
            }
            HostOutput::ShardStarted(shard) => {
                s.stats.shard_starts += 1;
                s.hash(now, slot, "start-shard");
                let ss = s.slot_mut(slot);
                // Ordered before a long pause, started only after it: as stale as a shard that
                // ran through the pause.
                let epoch = if ss.stale_replay { ss.long_pauses - 1 } else { ss.long_pauses };
                ss.shard_epochs.insert(shard.clone(), epoch);
                self.note(|| format!("slot {slot} shard {shard} starts"));
            }
            // Simulated entities hold no queue: they answer at once.
            HostOutput::ShardHandingOff { shard, .. } => {
                s.stats.hand_offs += 1;
                s.hash(now, slot, "hand-off");
                self.note(|| format!("slot {slot} shard {shard} hands off"));
            }
            HostOutput::ShardStopped(shard) => {
                s.slot_mut(slot).shard_epochs.remove(&shard);
                self.note(|| format!("slot {slot} shard {shard} stopped"));
            }
            HostOutput::CoordinatorStarted(instance) => {
                s.stats.coordinators += 1;
                self.note(|| format!("slot {slot} COORDINATOR STARTS (instance {instance})"));
            }
            HostOutput::CoordinatorStopped => {
                self.note(|| format!("slot {slot} coordinator stops"));
            }
            // Regions in the simulation never shut down gracefully.
            HostOutput::Stopped => {}
            HostOutput::LoadEntities(shard) => {
                let ids = s.load_remembered(&shard, me);
                let n = ids.len();
                s.stats.remembered_starts += n as u64;
                s.hash(now, slot, "load-entities");
                if let Some(h) = s.slot_mut(slot).host.as_mut() {
                    h.entities_loaded(&shard, ids, local);
                }
                self.note(|| format!("slot {slot} shard {shard} reads {n} remembered entities"));
            }
            HostOutput::Remember { shard, entity } => {
                s.change_remembered(&shard, me, entity, true);
            }
            HostOutput::LoadHomes => {
                let homes = s.kept_homes.clone();
                let n = homes.len();
                s.hash(now, slot, "load-homes");
                if let Some(h) = s.slot_mut(slot).host.as_mut() {
                    h.homes_loaded(homes, local);
                }
                self.note(|| format!("slot {slot} coordinator reads {n} kept homes"));
            }
            HostOutput::SaveHomes(homes) => s.kept_homes = homes,
            HostOutput::Forget { shard, entity } => {
                s.change_remembered(&shard, me, entity, false);
            }
        }
    }

    /// Sends an entity's answer, from `slot`, to whoever waits for it.
    pub(super) fn entity_answer(&mut self, slot: usize, reply: ReplyTo<u64>, result: Reply) {
        let Some(me) = self.shardings.as_ref().and_then(|s| s.slot(slot).node.clone()) else {
            return;
        };
        if let Some(out) = answer(reply, result) {
            self.host_output(slot, &me, out);
        }
    }

    /// Puts `frame`, encoded as the runtime sends it, on the wire from `slot` to `to`.
    fn sharding_send(
        &mut self,
        slot: usize,
        me: &UniqueAddress,
        to: &UniqueAddress,
        frame: &Frame,
    ) {
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let bytes = wire::to_bytes(frame);
        s.stats.messages += 1;
        s.stats.bytes += bytes.len() as u64;
        s.hash(now, slot, frame.name());
        let Some(to_slot) = self.procs.slot_of(&to.address) else { return };
        if !matches!(frame, Frame::Entity(_) | Frame::Reply(_)) {
            self.note(|| format!("slot {slot} sharding -> {to_slot} {}", describe(frame)));
        }
        let m = ShardingInFlight {
            from_slot: slot,
            from: me.clone(),
            to_slot,
            message: (to.clone(), bytes),
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
        self.sharding_input(slot, "timer", |h, now| {
            if h.poll_timeout().is_some_and(|t| t <= now) {
                h.handle_timeout(now);
            }
        });
    }

    /// A new incarnation `node` started in `slot`: its host starts, hosting.
    pub(super) fn sharding_started(&mut self, slot: usize, node: &UniqueAddress) {
        let local = self.local_instant(slot);
        let Some(s) = self.shardings.as_mut() else { return };
        s.on_exit(slot);
        let mut host = Host::new(s.config().clone(), node.clone(), true);
        if s.config().remember_entities {
            // The runtime reads which shards have remembered entities as the type starts, and
            // wakes them (read at once here).
            let listed: Vec<ShardId> = s
                .remembered()
                .iter()
                .filter(|(_, (_, ids))| !ids.is_empty())
                .map(|(shard, _)| shard.clone())
                .collect();
            host.wake(listed, local);
        }
        let ss = s.slot_mut(slot);
        ss.node = Some(node.clone());
        ss.host = Some(host);
    }

    /// The process in `slot` is gone: its sharding with it, and the asks it waited for.
    pub(super) fn sharding_exit(&mut self, slot: usize) {
        self.judge_resumed();
        let now = self.now;
        if let Some(s) = self.shardings.as_mut() {
            s.pause_over(slot, now, false);
            s.asker_ended(slot, now);
            s.on_exit(slot);
        }
    }

    /// The members and unreachable nodes as the core in `slot` sees them.
    fn view_of(&self, slot: usize) -> Option<(Vec<Member>, BTreeSet<UniqueAddress>)> {
        let g = self.procs.core(slot)?.gossip();
        Some((g.members().cloned().collect(), unreachable_in(g).clone()))
    }

    /// After a step of the core in `slot` that changed its members or their reachability: the
    /// host sees them.
    pub(super) fn sharding_members(&mut self, slot: usize, members: &[Member]) {
        let unreachable = self.view_of(slot).map(|(_, u)| u).unwrap_or_default();
        self.sharding_input(slot, "members", |h, now| h.handle_members(members, &unreachable, now));
    }

    /// The singleton instance started in `slot`: so does a coordinator, with the host's next
    /// instance number.
    pub(super) fn coordinator_started(&mut self, slot: usize) {
        self.sharding_input(slot, "coordinator-start", |h, now| h.coordinator_up(now));
    }

    /// The singleton instance in `slot` was asked to stop: the coordinator stops, with no time
    /// to finish its writes (the simulated instance does not wait for it).
    pub(super) fn coordinator_stopped(&mut self, slot: usize) {
        self.sharding_input(slot, "coordinator-stop", |h, now| {
            h.coordinator_down(Duration::ZERO, now);
        });
    }

    /// A sharding message reaches the network interface of its destination.
    pub(super) fn arrive_sharding(&mut self, m: ShardingInFlight) {
        let Some(m) = self.delivery.arrive_sharding(m) else { return };
        self.take_or_queue(m, Self::sharding_message, |sim, to, m| {
            if let Some(s) = sim.shardings.as_mut() {
                s.slot_mut(to).inbox.push(m);
            }
        });
    }

    fn sharding_message(&mut self, m: ShardingInFlight) {
        let to = m.to_slot;
        let (addressee, bytes) = m.message;
        let from = m.from;
        let here = self.shardings.as_ref().and_then(|s| s.slot(to).node.clone());
        if here.as_ref() != Some(&addressee) {
            return;
        }
        let frame = match wire::from_bytes(&bytes) {
            Ok(frame) => frame,
            Err(e) => {
                self.note(|| format!("slot {to} drops a sharding frame that does not decode: {e}"));
                return;
            }
        };
        let name = frame.name();
        let mut refused = None;
        self.sharding_input(to, name, |h, now| refused = h.handle_frame(from, frame, now).err());
        if let Some(e) = refused {
            self.note(|| format!("slot {to} drops a sharding frame: {e}"));
        }
    }

    /// The load's next ask: a running process asks an entity; the next ask is scheduled.
    pub(super) fn sharding_ask(&mut self) {
        let Some(s) = self.shardings.as_ref() else { return };
        let running: Vec<usize> =
            self.procs.running().filter(|i| s.slot(*i).host.is_some()).collect();
        let now = self.now;
        self.push(now + ASK_INTERVAL, Event::ShardingAsk);
        let Some(s) = self.shardings.as_mut() else { return };
        let Some((slot, entity)) = s.draw_ask(&running) else { return };
        let incarnation = self.procs.slot(slot).incarnations;
        let shard = shard_for_entity(&entity, SHARDS);
        let id = s.new_ask(shard.clone(), entity.clone(), slot, incarnation, now);
        // The payload is the ask's number, which the entity sends back.
        let payload = id.to_le_bytes().to_vec();
        self.note(|| format!("slot {slot} asks {entity} (shard {shard}), ask {id}"));
        self.sharding_input(slot, "ask", |h, now| h.ask(shard, entity, payload, Some(id), now));
    }

    /// The process in `slot` was paused at `now`.
    pub(super) fn sharding_paused(&mut self, slot: usize) {
        let now = self.now;
        if let Some(s) = self.shardings.as_mut() {
            s.slot_mut(slot).paused_at = Some(now);
        }
    }

    /// S18 for the entity starts held back by a pause that ended in a resume within the margin:
    /// both runs going on past the resumed process's grace break it.
    fn judge_resumed(&mut self) {
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(r) = s.judge_resumed(now) else { return };
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let x = &r.suspect;
        let message = format!(
            "entity {} started in slot {} at {:.3}s while it ran in slot {} (since {:.3}s), whose \
             process, paused at {:.3}s, resumed at {:.3}s within the removal margin and still ran \
             it at {:.3}s, past {:.3}s, by when its region must have noticed the freeze and \
             stopped it",
            x.entity,
            x.started_in,
            x.started_at.as_secs_f64(),
            x.held_by,
            x.held_since.as_secs_f64(),
            x.paused_at.as_secs_f64(),
            r.resumed_at.as_secs_f64(),
            now.as_secs_f64(),
            r.grace_until.as_secs_f64()
        );
        self.s18(x.held_by, message);
    }

    /// The process in `slot` resumed: what queued up is taken in, the timer re-armed.
    pub(super) fn sharding_resumed(&mut self, slot: usize) {
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        s.pause_over(slot, now, true);
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
        let deadline = self.host_deadline(slot);
        self.arm_sharding_timer(slot, deadline);
    }
}

/// The nodes some member observes as unreachable in `gossip`.
pub(super) fn unreachable_in(gossip: &Gossip) -> &BTreeSet<UniqueAddress> {
    gossip.reachability().all_unreachable_or_terminated()
}
