//! Cluster sharding in the simulation: one entity type whose region and replica run in every
//! process, whose coordinator runs as the cluster singleton's instance, and a stream of asks to
//! its entities; what became of them, for the checker (S18), the liveness checks (L9, L10) and
//! the reports.
//!
//! The model:
//! - Every incarnation runs the runtime's sans-IO [`Host`] of entity type [`TYPE_NAME`] (region,
//!   replica, shards, ask correlation), created with the process and fed the members of the
//!   core's gossip whenever they or their reachability change.
//! - The coordinator is the singleton: when the manager in a slot starts its instance, the
//!   host there starts a coordinator, and stops it as soon as the manager asks the instance to
//!   stop, or the process exits. A new coordinator recovers the allocation table from the
//!   replicas.
//! - An entity starts when its host says so, answers every message at once and stops at once
//!   when its host asks it to (passivation, handoff).
//! - The host's frames are encoded as the runtime sends them and go over the modelled network
//!   as a TCP connection would carry them (see [`crate::delivery`]): no loss, in order per pair
//!   of slots, dropped by partitions, held by clogs. A paused process queues them until it
//!   resumes; they are decoded when they are taken in.
//! - A process that shuts down (downed, removed, left) or crashes takes its region, replica,
//!   coordinator, shards and entities with it at once, and the asks it was still waiting for
//!   end with it, as failures (a region that stops answers them so at run time).
//! - With `--remember-entities`, the type remembers its entities. The store of remembered sets
//!   is modelled, not run: a shard's set is read at once when the shard starts, and that read
//!   fences the set against the shard's earlier hosts (as the runtime's claim of the set's fenced
//!   key does), whose later changes are ignored. Every [`PASSIVATE_EVERY`]th ask makes its entity
//!   passivate once answered, so that entities are forgotten too.
//! - With `--entity-state`, each entity keeps a count in the store and answers only once it is
//!   written (see [`crate::state`]).
//! - The load: every [`ASK_INTERVAL`] a running process, drawn from the layer's random stream,
//!   asks one of [`ENTITIES`] entities. The entity answers over the network; a message the
//!   region or shard drops is answered with a failure by the node that dropped it.
//!
//! Like the singleton layer, nothing here touches the membership core or its trace; its steps go
//! into a trace hash of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_data::RequestId;
use convoke_membership::{Address, UniqueAddress};
use convoke_sharding::{EntityId, Host, ShardId, ShardingConfig};
use convoke_singleton::SingletonConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::queue::TimerSlot;
use crate::state::{EntityStates, Incarnation, StateOp};
use crate::trace::TraceHash;

/// The simulated entity type.
pub const TYPE_NAME: &str = "sim-entity";
/// Shards of the simulated entity type.
pub const SHARDS: u32 = 30;
/// Entities the load addresses.
pub const ENTITIES: u32 = 300;
/// How often the load sends an ask.
pub const ASK_INTERVAL: Duration = Duration::from_millis(100);
/// An ask sent while the cluster is settled must be answered, successfully, within this long.
pub const ASK_BOUND: Duration = Duration::from_secs(5);
/// With remembered entities: an ask whose number is a multiple of this makes its entity
/// passivate once it has answered.
pub const PASSIVATE_EVERY: u64 = 10;

/// The sharding settings of a simulated cluster whose singleton runs with `singleton`: short
/// intervals so that rebalancing and passivation happen within a run, and the singleton's
/// removal margin, as the runtime passes it.
pub fn config(singleton: &SingletonConfig) -> ShardingConfig {
    let mut c = ShardingConfig::new(TYPE_NAME);
    c.number_of_shards = SHARDS;
    c.buffer_size = 2_000;
    c.passivate_idle_after = Some(Duration::from_secs(20));
    c.retry_interval = Duration::from_secs(1);
    c.handoff_timeout = Duration::from_secs(20);
    c.shard_start_timeout = Duration::from_secs(5);
    c.rebalance_interval = Duration::from_secs(5);
    c.removal_margin = singleton.removal_margin;
    c
}

/// An entity running in a slot.
#[derive(Clone, Copy, Debug)]
pub struct EntityRun {
    /// When it started (global virtual time).
    pub since: Duration,
    /// The slot's count of long pauses when its shard started (see
    /// [`SlotSharding::long_pauses`]).
    pub long_pauses: u32,
}

/// An entity that started while a paused process held it too. The paused process cannot act on
/// it, so the pair is judged once the pause is over: a pause that outlasted the removal margin,
/// or a process that ended without running again, leaves nothing to judge; a process that
/// resumed sooner must stop the entity within [`Shardings::resume_grace`] (see
/// [`Shardings::pause_over`]).
#[derive(Clone, Debug)]
pub(crate) struct Suspect {
    /// The entity.
    pub entity: EntityId,
    /// The slot it started in, and when.
    pub started_in: usize,
    pub started_at: Duration,
    /// The paused slot that held it, since when it ran there, and when that pause began.
    pub held_by: usize,
    pub held_since: Duration,
    pub paused_at: Duration,
}

/// A [`Suspect`] whose holding process resumed within the removal margin: the two may run side by
/// side until `grace_until`, by when the resumed region has noticed its freeze and stopped the
/// entity; past it, S18 is broken.
#[derive(Clone, Debug)]
pub(crate) struct Resumed {
    /// The entity start and the pause it came during.
    pub suspect: Suspect,
    /// When the holding process ran again.
    pub resumed_at: Duration,
    /// The end of the grace: the resume plus [`Shardings::resume_grace`].
    pub grace_until: Duration,
}

/// The sharding side of one slot.
#[derive(Debug, Default)]
pub struct SlotSharding {
    /// The node of the current incarnation, while its sharding runs.
    pub node: Option<UniqueAddress>,
    /// Its host of the entity type: region, replica, shards, and the coordinator while the
    /// singleton instance runs here and has not been asked to stop. Local asks are known by
    /// their number.
    pub host: Option<Host<u64>>,
    /// The entities that run here, by id.
    pub entities: BTreeMap<EntityId, EntityRun>,
    /// Per hosted shard, the count of long pauses when it started.
    pub shard_epochs: BTreeMap<ShardId, u32>,
    /// Pauses of this process longer than the removal margin so far: an entity that started
    /// before one of them no longer counts for S18.
    pub long_pauses: u32,
    /// When the process was paused, while it is.
    pub paused_at: Option<Duration>,
    /// The messages that queued up during a long pause are being taken in: what they start is
    /// as stale as what ran through the pause.
    pub stale_replay: bool,
    /// Sharding messages that arrived while the process was paused.
    pub(crate) inbox: Vec<crate::delivery::ShardingInFlight>,
    /// The timer of the slot's machines.
    pub(crate) timer: TimerSlot,
    /// With entity state: the incarnations here, by entity (see [`crate::state`]).
    pub(crate) states: BTreeMap<EntityId, Incarnation>,
    /// Writers of entity states made by this incarnation so far: each gets an id of its own.
    pub(crate) writers: u64,
    /// Their claims and writes in flight, by the store's request number.
    pub(crate) state_requests: BTreeMap<RequestId, (EntityId, StateOp)>,
}

impl SlotSharding {
    /// Whether an entity that started with `run` still counts for S18 at `now`, given the
    /// removal margin `margin`: its process has not been frozen for longer than the margin since.
    pub fn counts(&self, run: &EntityRun, now: Duration, margin: Duration) -> bool {
        let frozen_now = self.paused_at.is_some_and(|at| now.saturating_sub(at) > margin);
        run.long_pauses == self.long_pauses && !frozen_now
    }

    /// With entity state, the host asks `entity` to stop: whether it must first finish what it
    /// has queued or in flight (it is then marked to stop once done); otherwise its incarnation
    /// is gone and it stops now.
    pub(crate) fn stop_later(&mut self, entity: &EntityId) -> bool {
        match self.states.get_mut(entity) {
            Some(inc) if !inc.idle() => {
                inc.stopping = true;
                true
            }
            _ => {
                self.states.remove(entity);
                false
            }
        }
    }
}

/// Whether the entity passivates once it has answered the ask with `payload`: every
/// [`PASSIVATE_EVERY`]th ask does, when the type remembers its entities.
pub fn passivates_after(config: &ShardingConfig, payload: &[u8]) -> bool {
    config.remember_entities
        && payload.try_into().is_ok_and(|b| u64::from_le_bytes(b) % PASSIVATE_EVERY == 0)
}

/// One ask of the load.
#[derive(Clone, Debug)]
pub struct AskRecord {
    /// The asking slot, and its incarnation.
    pub from_slot: usize,
    /// The incarnation number of the asking process.
    pub incarnation: u32,
    /// The shard of the entity asked.
    pub shard: ShardId,
    /// The entity asked.
    pub entity: EntityId,
    /// When it was sent.
    pub sent_at: Duration,
    /// When the answer arrived, and whether it was a success.
    pub answered: Option<(Duration, bool)>,
}

/// What the sharding layer did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShardingStats {
    /// Asks sent.
    pub asks: u64,
    /// Asks answered by their entity.
    pub answered_ok: u64,
    /// Asks answered with a failure (dropped by a region or shard).
    pub answered_failed: u64,
    /// Asks whose asking process ended before an answer came (see `Shardings::asker_ended`).
    pub ended_with_asker: u64,
    /// Coordinators started.
    pub coordinators: u64,
    /// Shards started.
    pub shard_starts: u64,
    /// Shards handed off (stopped on the coordinator's order).
    pub hand_offs: u64,
    /// Entities started.
    pub entity_starts: u64,
    /// Entities stopped (passivated, or for a handoff).
    pub entity_stops: u64,
    /// Remembered sets read by a shard that started (remembered entities only).
    pub sets_loaded: u64,
    /// Claims of an entity's state answered (entity state only).
    pub state_claims: u64,
    /// Writes of an entity's state acknowledged.
    pub state_writes: u64,
    /// Incarnations fenced: a write refused and a newer writer's state found on claiming
    /// again (or claims made again too often), or a claim outbid on every try.
    pub state_fenced: u64,
    /// Claims made again after a refused write.
    pub state_reclaims: u64,
    /// Claims and writes that failed otherwise (too few replicas, a timeout).
    pub state_failed: u64,
    /// Of those, the ones that failed while most of the key's replicas were not running.
    pub state_unavailable: u64,
    /// Entities listed in the remembered sets read (each started then unless it ran already).
    pub remembered_starts: u64,
    /// Sharding messages sent.
    pub messages: u64,
    /// Their encoded bytes.
    pub bytes: u64,
}

/// Every slot's sharding, the load, the counters and the trace hash.
#[derive(Debug)]
pub struct Shardings {
    config: ShardingConfig,
    slots: Vec<SlotSharding>,
    rng: ChaCha8Rng,
    asks: BTreeMap<u64, AskRecord>,
    /// Entity starts S18 judges once a pause is over.
    suspects: Vec<Suspect>,
    /// Entity starts whose holding process resumed within the margin, while its grace lasts.
    resumed: Vec<Resumed>,
    /// The modelled store of remembered sets: per shard, the node whose shard read it last
    /// (only its changes are taken) and the entities it holds.
    remembered: BTreeMap<ShardId, (UniqueAddress, BTreeSet<EntityId>)>,
    /// The modelled store of the coordinator's kept homes (`ShardingConfig::keep_homes`): the
    /// latest kept.
    pub(crate) kept_homes: Vec<(ShardId, Address)>,
    /// With entity state: what the entities' writers were told.
    pub(crate) states: Option<EntityStates>,
    /// What happened so far.
    pub stats: ShardingStats,
    trace: TraceHash,
}

impl Shardings {
    /// `n` slots running entity type `config`; the load drawn from `rng`.
    pub fn new(n: usize, config: ShardingConfig, rng: ChaCha8Rng) -> Self {
        let slots = (0..n).map(|_| SlotSharding::default()).collect();
        Self {
            config,
            slots,
            rng,
            asks: BTreeMap::new(),
            suspects: Vec::new(),
            resumed: Vec::new(),
            remembered: BTreeMap::new(),
            kept_homes: Vec::new(),
            states: None,
            stats: ShardingStats::default(),
            trace: TraceHash::new(),
        }
    }

    /// The entities keep a state in the store (see [`crate::state`]).
    pub fn keep_state(mut self) -> Self {
        self.states = Some(EntityStates::default());
        self
    }

    /// What the entities' writers were told, when they keep a state.
    pub fn states(&self) -> Option<&EntityStates> {
        self.states.as_ref()
    }

    /// Slot `i` with the counters, the entities' writer histories and the settings, to change
    /// the first three together.
    pub(crate) fn state_parts(
        &mut self,
        i: usize,
    ) -> (&mut SlotSharding, &mut ShardingStats, Option<&mut EntityStates>, &ShardingConfig) {
        (&mut self.slots[i], &mut self.stats, self.states.as_mut(), &self.config)
    }

    /// The entity type's settings.
    pub fn config(&self) -> &ShardingConfig {
        &self.config
    }

    /// Node `by`'s shard `shard` starts and reads its remembered set, which no earlier host of
    /// the shard may change from now on.
    pub(crate) fn load_remembered(&mut self, shard: &ShardId, by: &UniqueAddress) -> Vec<EntityId> {
        self.stats.sets_loaded += 1;
        let (owner, ids) =
            self.remembered.entry(shard.clone()).or_insert_with(|| (by.clone(), BTreeSet::new()));
        owner.clone_from(by);
        ids.iter().cloned().collect()
    }

    /// Node `by` adds `entity` to (or removes it from) the remembered set of `shard`: taken
    /// only from the node that read the set last.
    pub(crate) fn change_remembered(
        &mut self,
        shard: &ShardId,
        by: &UniqueAddress,
        entity: EntityId,
        add: bool,
    ) {
        let Some((_, ids)) = self.remembered.get_mut(shard).filter(|(o, _)| o == by) else {
            return;
        };
        if add {
            ids.insert(entity);
        } else {
            ids.remove(&entity);
        }
    }

    /// The remembered sets, by shard, with the node that read each last.
    pub fn remembered(&self) -> &BTreeMap<ShardId, (UniqueAddress, BTreeSet<EntityId>)> {
        &self.remembered
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &SlotSharding {
        &self.slots[i]
    }

    /// Slot `i`, to change.
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut SlotSharding {
        &mut self.slots[i]
    }

    /// Every slot.
    pub fn slots(&self) -> &[SlotSharding] {
        &self.slots
    }

    /// The asks so far, by number.
    pub fn asks(&self) -> &BTreeMap<u64, AskRecord> {
        &self.asks
    }

    /// The hash of every sharding step so far.
    pub fn trace_hash(&self) -> u64 {
        std::hash::Hasher::finish(&self.trace)
    }

    /// Hashes one step into the sharding trace.
    pub(crate) fn hash(&mut self, now: Duration, slot: usize, what: &str) {
        self.trace.step(now, slot, what);
    }

    /// Draws the next ask among `running` slots: the asking slot and the entity.
    pub(crate) fn draw_ask(&mut self, running: &[usize]) -> Option<(usize, EntityId)> {
        if running.is_empty() {
            return None;
        }
        let slot = running[self.rng.random_range(0..running.len())];
        let entity = self.rng.random_range(0..ENTITIES);
        Some((slot, format!("e{entity}").into()))
    }

    /// Records a new ask to `entity` of shard `shard` from `from_slot` (incarnation `incarnation`) at `now`;
    /// its number.
    pub(crate) fn new_ask(
        &mut self,
        shard: ShardId,
        entity: EntityId,
        from_slot: usize,
        incarnation: u32,
        now: Duration,
    ) -> u64 {
        let id = u64::try_from(self.asks.len()).unwrap_or(u64::MAX) + 1;
        let ask = AskRecord { from_slot, incarnation, shard, entity, sent_at: now, answered: None };
        self.asks.insert(id, ask);
        self.stats.asks += 1;
        id
    }

    /// The answer to ask `id` reached slot `slot`, incarnation `incarnation`, at `now`.
    pub(crate) fn answered(
        &mut self,
        id: u64,
        ok: bool,
        slot: usize,
        incarnation: u32,
        now: Duration,
    ) {
        let Some(a) = self.asks.get_mut(&id) else { return };
        if a.from_slot != slot || a.incarnation != incarnation || a.answered.is_some() {
            return;
        }
        a.answered = Some((now, ok));
        if ok {
            self.stats.answered_ok += 1;
        } else {
            self.stats.answered_failed += 1;
        }
    }

    /// The process in `slot` ended at `now` (crashed, shut down): the asks it was still waiting
    /// for end with it. At run time a region that stops answers them with
    /// `ShardingError::RegionStopped`; after a crash no one is left to wait. Either way they
    /// count as answered with a failure, and in [`ShardingStats::ended_with_asker`].
    pub(crate) fn asker_ended(&mut self, slot: usize, now: Duration) {
        for a in self.asks.values_mut().filter(|a| a.from_slot == slot && a.answered.is_none()) {
            a.answered = Some((now, false));
            self.stats.ended_with_asker += 1;
        }
    }

    /// The process in `slot` is gone (crashed, shut down): its sharding with it.
    pub(crate) fn on_exit(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.node = None;
        s.host = None;
        s.entities.clear();
        s.shard_epochs.clear();
        s.states.clear();
        s.state_requests.clear();
        s.writers = 0;
        s.inbox.clear();
        s.paused_at = None;
        s.timer.cancel();
    }

    /// S18's question, when `entity` has just started in `slot` at `now`: another slot where it
    /// runs and counts, if any. Neither side counts when its process was frozen for longer than
    /// the removal margin since its shard started (see [`SlotSharding::counts`]); a slot whose
    /// host is in another live cluster than `slot`'s (`split`) is left to S1.
    ///
    /// A slot whose process is paused now, for no longer than the margin so far, is not judged
    /// yet: whether it runs the entity beside `slot` turns on how its pause ends. It comes back as
    /// a [`Suspect`], for [`Shardings::suspect`], and is judged by [`Shardings::pause_over`] and
    /// [`Shardings::judge_resumed`].
    pub(crate) fn other_host(
        &self,
        slot: usize,
        entity: &EntityId,
        now: Duration,
        split: impl Fn(usize) -> bool,
    ) -> Result<Vec<Suspect>, usize> {
        let margin = self.config.removal_margin;
        let counts =
            |s: &SlotSharding| s.entities.get(entity).is_some_and(|r| s.counts(r, now, margin));
        if !counts(&self.slots[slot]) {
            return Ok(Vec::new());
        }
        let mut suspects = Vec::new();
        for (i, held) in self.slots.iter().enumerate() {
            if i == slot || !counts(held) || split(i) {
                continue;
            }
            let Some(paused_at) = held.paused_at else { return Err(i) };
            suspects.push(Suspect {
                entity: entity.clone(),
                started_in: slot,
                started_at: now,
                held_by: i,
                held_since: held.entities.get(entity).map_or(now, |r| r.since),
                paused_at,
            });
        }
        Ok(suspects)
    }

    /// Notes entity starts to judge when a pause is over.
    pub(crate) fn suspect(&mut self, suspects: Vec<Suspect>) {
        self.suspects.extend(suspects);
    }

    /// How long a process that resumed may still run an entity that started elsewhere during its
    /// pause: one retry interval. Its region notices a freeze at its first input after the resume
    /// (its timer is overdue by then, so that input comes at once) and stops every shard before
    /// acting on it; the simulator's entities stop at once. A freeze shorter than two retry
    /// intervals may go unnoticed, and the entity then runs on past the grace.
    pub fn resume_grace(&self) -> Duration {
        self.config.retry_interval
    }

    /// The pause of the process in `slot` is over at `now`: it resumed (`resumed`), or it ended
    /// while paused. Call it before the pause is cleared.
    ///
    /// The entity starts it held back are judged on what the paused process could do. It did not
    /// run while paused, so it ran nothing beside the other start so far. A process that ended
    /// while paused never runs the entity again; one paused for longer than the removal margin
    /// no longer counts (see [`SlotSharding::counts`]); one that resumed sooner may run the entity
    /// beside the other for [`Shardings::resume_grace`] (docs/sharding-design.md, "Frozen
    /// hosts": the far side's margin ended while it was frozen, which no margin covers), and
    /// [`Shardings::judge_resumed`] holds it to that.
    pub(crate) fn pause_over(&mut self, slot: usize, now: Duration, resumed: bool) {
        let margin = self.config.removal_margin;
        let Some(paused_at) = self.slots[slot].paused_at else { return };
        let long = now.saturating_sub(paused_at) > margin;
        let (held, rest): (Vec<Suspect>, Vec<Suspect>) =
            std::mem::take(&mut self.suspects).into_iter().partition(|s| s.held_by == slot);
        self.suspects = rest;
        if long || !resumed {
            return;
        }
        let grace_until = now + self.resume_grace();
        self.resumed.extend(held.into_iter().map(|suspect| Resumed {
            suspect,
            resumed_at: now,
            grace_until,
        }));
    }

    /// S18 at `now` for the entity starts whose holding process resumed within the margin: a
    /// pair whose two runs both go on past the grace is returned (and forgotten); a pair of which
    /// one run has ended is forgotten. Call it before every input that may end a run, so that a
    /// run is never judged after it ended.
    pub(crate) fn judge_resumed(&mut self, now: Duration) -> Option<Resumed> {
        if self.resumed.is_empty() {
            return None;
        }
        let runs = |slot: usize, entity: &EntityId, since: Duration| {
            self.slots[slot].entities.get(entity).is_some_and(|r| r.since == since)
        };
        let mut broken = None;
        let mut keep = Vec::new();
        for r in std::mem::take(&mut self.resumed) {
            let x = &r.suspect;
            let both = runs(x.held_by, &x.entity, x.held_since)
                && runs(x.started_in, &x.entity, x.started_at);
            if !both {
                continue;
            }
            if now > r.grace_until && broken.is_none() {
                broken = Some(r);
            } else {
                keep.push(r);
            }
        }
        self.resumed = keep;
        broken
    }

    /// Shard counts per region in the table of the coordinator that runs, if one does and it
    /// has recovered its table: (slot of the coordinator, counts by region).
    pub fn allocation(&self) -> Option<(usize, BTreeMap<UniqueAddress, usize>)> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let c = s.host.as_ref()?.coordinator()?;
            (c.status().phase == "active").then_some(())?;
            let counts = c.state().regions().map(|(r, shards)| (r.clone(), shards.len())).collect();
            Some((i, counts))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::singleton;

    fn shardings(slots: usize) -> Shardings {
        let single = singleton::config(&convoke_membership::Config::default(), Default::default());
        Shardings::new(
            slots,
            config(&single),
            crate::world::rng(1, crate::world::Stream::ShardingLoad),
        )
    }

    fn run(s: &mut Shardings, slot: usize, entity: &EntityId, since: Duration) {
        let ss = s.slot_mut(slot);
        let long_pauses = ss.long_pauses;
        ss.entities.insert(entity.clone(), EntityRun { since, long_pauses });
    }

    /// `other_host` as an answer to "does it run elsewhere, as far as is known now".
    fn elsewhere(s: &Shardings, slot: usize, e: &EntityId, now: Duration) -> Option<usize> {
        s.other_host(slot, e, now, |_| false).err()
    }

    #[test]
    fn s18_finds_an_entity_that_runs_in_two_slots_unless_one_was_frozen_or_split_off() {
        let mut s = shardings(3);
        let e: EntityId = "e1".into();
        let t = Duration::from_secs(100);
        run(&mut s, 0, &e, t);
        assert_eq!(elsewhere(&s, 0, &e, t), None, "runs once");
        run(&mut s, 2, &e, t);
        assert_eq!(elsewhere(&s, 2, &e, t), Some(0));
        assert_eq!(s.other_host(2, &e, t, |i| i == 0).err(), None, "left to S1");

        // Slot 0 frozen for longer than the margin since its entity started: it does not count,
        // while frozen and after it resumed.
        let margin = s.config().removal_margin;
        s.slot_mut(0).paused_at = Some(t);
        let later = t + margin + Duration::from_secs(1);
        assert_eq!(elsewhere(&s, 2, &e, later), None);
        s.slot_mut(0).paused_at = None;
        s.slot_mut(0).long_pauses += 1;
        assert_eq!(elsewhere(&s, 2, &e, later), None);
    }

    #[test]
    fn s18_holds_a_host_paused_at_the_start_to_stopping_the_entity_soon_after_it_resumes() {
        let mut s = shardings(3);
        let e: EntityId = "e1".into();
        let t = Duration::from_secs(100);
        let margin = s.config().removal_margin;
        let grace = s.resume_grace();
        let start = t + Duration::from_secs(1);
        let started = |s: &mut Shardings| {
            run(s, 0, &e, t);
            s.slot_mut(0).paused_at = Some(t);
            run(s, 2, &e, start);
            let suspects = s.other_host(2, &e, start, |_| false).expect("not judged yet");
            assert_eq!(suspects.len(), 1);
            s.suspect(suspects);
        };

        // The pause outlasts the margin: the paused host no longer counts.
        started(&mut s);
        s.pause_over(0, t + margin + Duration::from_secs(1), true);
        s.slot_mut(0).paused_at = None;
        assert!(s.judge_resumed(t + margin + Duration::from_secs(60)).is_none());

        // The process ends while paused: it never ran the entity beside the other.
        started(&mut s);
        s.pause_over(0, t + Duration::from_secs(3), false);
        s.slot_mut(0).paused_at = None;
        assert!(s.judge_resumed(t + margin).is_none());

        // It resumes within the margin (the far side's margin ended while it was frozen) and
        // stops the entity within the grace: excused.
        started(&mut s);
        let resumed = t + Duration::from_secs(3);
        s.pause_over(0, resumed, true);
        s.slot_mut(0).paused_at = None;
        assert!(s.judge_resumed(resumed + grace).is_none(), "within the grace");
        s.slot_mut(0).entities.remove(&e);
        assert!(s.judge_resumed(resumed + grace + Duration::from_secs(1)).is_none());
        run(&mut s, 0, &e, resumed + grace + Duration::from_secs(2));
        assert!(
            s.judge_resumed(resumed + grace + Duration::from_secs(3)).is_none(),
            "judged once: a later run is another start, judged by other_host"
        );

        // It resumes within the margin and runs the entity on past the grace: two at once.
        let mut s = shardings(3);
        started(&mut s);
        s.pause_over(0, resumed, true);
        s.slot_mut(0).paused_at = None;
        assert!(s.judge_resumed(resumed).is_none());
        let x = s.judge_resumed(resumed + grace + Duration::from_millis(1)).expect("runs on");
        assert_eq!((x.suspect.started_in, x.suspect.held_by, x.suspect.paused_at), (2, 0, t));
        assert_eq!((x.resumed_at, x.grace_until), (resumed, resumed + grace));
        assert!(s.judge_resumed(resumed + grace * 2).is_none(), "reported once");
    }
}
