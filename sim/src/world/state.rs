//! The steps of entities that keep a state (`--entity-state`, see [`crate::state`]): messages
//! queue behind their incarnation's claim or write, which go to the slot's store as the
//! runtime's requests; the store's answers drive the runtime's sans-IO writer, answer the
//! messages and feed S19 and S20.

use convoke_data::fenced::{FenceOp, HistoryError};
use convoke_data::{DataError, Level, Refused, Reply, Request, RequestId};
use convoke_sharding::wire::WireFailure;
use convoke_sharding::{EntityId, ReplyTo, ShardId};

use super::Sim;
use crate::invariants::Violation;
use crate::sharding::{TYPE_NAME, passivates_after};
use crate::state::{Incarnation, StateOp, counted, encode, key};

impl Sim {
    /// A message reached `entity` in `slot`: it waits behind the claim or write in flight.
    pub(super) fn state_deliver(
        &mut self,
        slot: usize,
        shard: ShardId,
        entity: EntityId,
        payload: Vec<u8>,
        reply: ReplyTo<u64>,
    ) {
        let Some(s) = self.shardings.as_mut() else { return };
        let ss = s.slot_mut(slot);
        let Some(node) = ss.node.as_ref().map(|n| n.uid.get()) else { return };
        let writers = &mut ss.writers;
        let inc = ss.states.entry(entity.clone()).or_insert_with(|| {
            *writers += 1;
            Incarnation::new(shard, node, *writers)
        });
        inc.queue.push_back((payload, reply));
        self.state_pump(slot, &entity);
    }

    /// Starts the next claim or write of `entity` in `slot` when none is in flight; fails what
    /// waits once it is fenced; stops it once done when its host asked it to.
    fn state_pump(&mut self, slot: usize, entity: &EntityId) {
        let Some(s) = self.shardings.as_mut() else { return };
        let Some(inc) = s.slot_mut(slot).states.get_mut(entity) else { return };
        if inc.busy {
            return;
        }
        if inc.writer.is_fenced() {
            let queued: Vec<_> = inc.queue.drain(..).collect();
            let passivate = !(inc.stopping || inc.passivating);
            inc.passivating = true;
            let shard = inc.shard.clone();
            let why = format!("entity '{entity}' is fenced: another incarnation holds its state");
            for (_, reply) in queued {
                self.entity_answer(slot, reply, Err(WireFailure::EntityFailed(why.clone())));
            }
            if passivate {
                self.note(|| format!("slot {slot} entity {entity} is fenced and passivates"));
                self.sharding_input(slot, "fenced", |h, now| h.passivate(&shard, entity, now));
            }
            self.state_stop_if_done(slot, entity);
            return;
        }
        if inc.queue.is_empty() {
            self.state_stop_if_done(slot, entity);
            return;
        }
        // Not claimed: the first claim, or one made again after a refused write (either also
        // after a claim that failed without an answer).
        let (op, kind) = match inc.count.filter(|_| inc.writer.is_claimed()) {
            None => (inc.writer.claim(), StateOp::Claim),
            Some(count) => {
                let Some(op) = inc.writer.write(encode(count + 1)) else { return };
                (op, StateOp::Write { seq: inc.writer.seq(), count: count + 1 })
            }
        };
        inc.busy = true;
        self.state_request(slot, entity, op, kind);
    }

    /// Sends `op` of `entity`'s incarnation in `slot` to the slot's store, at quorum.
    fn state_request(&mut self, slot: usize, entity: &EntityId, op: FenceOp, kind: StateOp) {
        let at = self.local_instant(slot);
        let now = self.now;
        self.note(|| format!("slot {slot} entity {entity} state {op:?}"));
        let key = key(TYPE_NAME, entity);
        let request = Request::FencedWrite { key, op, w: Level::Quorum };
        // A process's store and sharding start and end together: both are here.
        let Some(d) = self.data.as_mut() else { return };
        let Some(store) = d.slot_mut(slot).store.as_mut() else { return };
        let id = store.request(request, at);
        d.hash(now, slot, "entity-state");
        if let Some(s) = self.shardings.as_mut() {
            s.slot_mut(slot).state_requests.insert(id, (entity.clone(), kind));
        }
        self.data_after_input(slot);
    }

    /// The slot's store answered request `id`, an entity's claim or write.
    pub(super) fn state_reply(
        &mut self,
        slot: usize,
        id: RequestId,
        result: Result<Reply, DataError>,
    ) {
        let Some(s) = self.shardings.as_mut() else { return };
        let ss = s.slot_mut(slot);
        let Some((entity, kind)) = ss.state_requests.remove(&id) else { return };
        let Some(inc) = ss.states.get_mut(&entity) else { return };
        inc.busy = false;
        if self.opts.log_steps > 0 {
            let outcome = match &result {
                Ok(Reply::Read(read)) => format!("{:?}", read.fenced().and_then(counted)),
                Ok(Reply::Written(_)) => "written".to_owned(),
                Err(e) => e.to_string(),
            };
            let note = format!("slot {slot} entity {entity} state {kind:?}: {outcome}");
            self.note(|| note);
        }
        // Judged now, as it fails (not fenced), from the processes running (liveness, L9).
        let failed =
            result.is_err() && !matches!(result, Err(DataError::Refused(Refused::Fenced(_))));
        let gone = failed && self.state_quorum_gone(&entity);
        let now = self.now;
        let Some(s) = self.shardings.as_mut() else { return };
        let (ss, stats, states, config) = s.state_parts(slot);
        let Some(inc) = ss.states.get_mut(&entity) else { return };
        let mut checked = Ok(());
        let then = match (kind, result) {
            (StateOp::Claim, Ok(Reply::Read(read))) => {
                let held = read.fenced().and_then(counted);
                match inc.writer.claimed(read.fenced().and_then(|f| f.state.as_ref())) {
                    Some(ballot) => {
                        // A claim made again after a refused write carries on from the count
                        // in memory: the state it read is this incarnation's own.
                        inc.count =
                            Some(inc.count.unwrap_or(held.map_or(0, |(_, _, count)| count)));
                        stats.state_claims += 1;
                        if let Some(states) = states {
                            checked = states.claimed(&entity, ballot, held);
                        }
                    }
                    None => stats.state_fenced += 1,
                }
                Then::Pump
            }
            (StateOp::Write { seq, count }, Ok(_)) => {
                inc.count = Some(count);
                let ballot = inc.writer.ballot().unwrap_or_default();
                stats.state_writes += 1;
                if let Some(states) = states {
                    checked = states.acked(&entity, (ballot, seq, count));
                }
                match inc.queue.pop_front() {
                    Some((payload, reply)) => {
                        let passivate = passivates_after(config, &payload);
                        Then::Answer(Ok(payload), reply, passivate.then(|| inc.shard.clone()))
                    }
                    None => Then::Pump,
                }
            }
            (StateOp::Claim, Err(DataError::Refused(Refused::Fenced(refusal)))) => {
                match inc.writer.claim_refused(&refusal) {
                    Some(op) => {
                        inc.busy = true;
                        Then::Again(op)
                    }
                    None => {
                        stats.state_fenced += 1;
                        Then::Pump
                    }
                }
            }
            (StateOp::Write { .. }, Err(DataError::Refused(Refused::Fenced(refusal)))) => {
                if inc.writer.write_refused(&refusal) {
                    stats.state_reclaims += 1;
                    inc.busy = true;
                    Then::Again(inc.writer.claim())
                } else {
                    stats.state_fenced += 1;
                    Then::Pump
                }
            }
            (kind, result) => {
                // The message it was for fails; the next one tries again.
                stats.state_failed += 1;
                if let Some(states) = states.filter(|_| gone) {
                    stats.state_unavailable += 1;
                    states.unavailable(&entity, now);
                }
                let why = match result {
                    Err(e) => e.to_string(),
                    Ok(_) => format!("a {kind:?} answered with the wrong kind of reply"),
                };
                let why = format!("entity '{entity}': its state: {why}");
                match inc.queue.pop_front() {
                    Some((_, reply)) => {
                        Then::Answer(Err(WireFailure::EntityFailed(why)), reply, None)
                    }
                    None => Then::Pump,
                }
            }
        };
        if let Err(e) = checked {
            self.state_violated(slot, &entity, &e);
            return;
        }
        match then {
            Then::Pump => {}
            Then::Again(op) => return self.state_request(slot, &entity, op, StateOp::Claim),
            Then::Answer(result, reply, passivate) => {
                self.entity_answer(slot, reply, result);
                if let Some(shard) = passivate {
                    self.note(|| format!("slot {slot} entity {entity} passivates"));
                    self.sharding_input(slot, "passivate", |h, now| {
                        h.passivate(&shard, &entity, now);
                    });
                }
            }
        }
        self.state_pump(slot, &entity);
    }

    /// An incarnation its host asked to stop stops once nothing waits or is in flight.
    fn state_stop_if_done(&mut self, slot: usize, entity: &EntityId) {
        let Some(s) = self.shardings.as_mut() else { return };
        let ss = s.slot_mut(slot);
        let done = ss.states.get(entity).is_some_and(|i| i.stopping && i.idle());
        if !done {
            return;
        }
        let Some(inc) = ss.states.remove(entity) else { return };
        ss.entities.remove(entity);
        s.stats.entity_stops += 1;
        self.sharding_input(slot, "entity-stopped", |h, now| {
            h.entity_stopped(&inc.shard, entity, now);
        });
    }

    /// Records a violation of `entity`'s state at `slot`: S19 for a fork, S20 for a lost write.
    fn state_violated(&mut self, slot: usize, entity: &EntityId, e: &HistoryError) {
        if self.checkers.is_empty() || self.violation.is_some() {
            return;
        }
        let invariant = match e {
            HistoryError::Fork(_) => "S19",
            HistoryError::Lost(_) => "S20",
        };
        let v = Violation {
            invariant: invariant.to_owned(),
            step: self.step,
            time_s: self.now.as_secs_f64(),
            slot: Some(slot),
            message: format!("entity {entity}'s state: {e}"),
        };
        self.note(|| format!("VIOLATION {v}"));
        self.set_violation(v);
    }
}

/// What follows an answer of the store to an entity's claim or write.
enum Then {
    /// The next claim or write, if something waits.
    Pump,
    /// A claim again: above the promise that refused the claim, or the write, before.
    Again(FenceOp),
    /// Answer a message (and passivate the entity, of this shard, once it has answered).
    Answer(convoke_sharding::Reply, ReplyTo<u64>, Option<ShardId>),
}
