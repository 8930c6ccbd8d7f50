//! Entity state in the simulation (`--entity-state`): every simulated entity keeps a count in
//! the replicated store, as `EntityContext::persist` keeps an entity's state at run time, and S19
//! and S20 check what the writers were told.
//!
//! The model:
//! - The state of entity `e` is the fenced value under [`key`]`(type, e)`, in the store every process
//!   runs (so the store layer runs too). Each incarnation of the entity is one sans-IO
//!   [`Writer`], the runtime's: on its first message it claims the key (again above the promise
//!   a refusal names, a few times), then for every message it writes the count it read plus the
//!   messages acknowledged since, plus one, at quorum, and answers the message only once the
//!   write is acknowledged. Messages wait in the incarnation's queue meanwhile, one claim or write
//!   in flight at a time.
//! - A refused write makes the writer claim the key again; it carries on if the state that
//!   claim reads is its own (the higher ballot was a claim that came to nothing). A state of
//!   another writer found then, or a claim outbid on every try, means another incarnation holds
//!   the state: the queued messages fail, and the entity passivates, as at run time. A write or claim that
//!   fails otherwise (too few replicas, a timeout) fails the message it was for; the next message
//!   tries again.
//! - An entity the host asks to stop finishes what is queued first (the runtime's entity drains
//!   its mailbox), then stops.
//!
//! At every answered claim and acknowledged write of an entity, the check of [`History`] over
//! the claims and writes of every incarnation of the entity in the run: **S19**, the state never
//! forks (in ballot and sequence order, every acknowledged count is above the one before);
//! **S20**, no acknowledged write is lost (every claim starts from every acknowledged write of a
//! lower ballot, whenever that write was acknowledged).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use convoke_data::Key;
use convoke_data::fenced::{Ballot, Counted, Fenced, History, HistoryError, Writer};
use convoke_sharding::{EntityId, ReplyTo, ShardId};

/// The store key of the state of `entity` of type `type_name`, as the runtime names it.
pub fn key(type_name: &str, entity: &EntityId) -> Key {
    Key::new(format!("entity/{type_name}/{entity}"), usize::MAX)
        .expect("an entity key is never empty")
}

/// A count as the state's bytes.
pub fn encode(count: u64) -> Vec<u8> {
    serde_json::to_vec(&count).unwrap_or_default()
}

/// A stored state as S19 and S20 read it: its ballot, sequence number and count.
pub fn counted(value: &Fenced) -> Option<Counted> {
    let w = value.state.as_ref()?;
    Some((w.ballot, w.seq, serde_json::from_slice(&w.bytes).unwrap_or(u64::MAX)))
}

/// A claim or write of an incarnation in flight.
#[derive(Clone, Debug)]
pub enum StateOp {
    /// Its claim.
    Claim,
    /// Its write of `count` as number `seq`.
    Write {
        /// The write's sequence number.
        seq: u64,
        /// The count written.
        count: u64,
    },
}

/// One incarnation of an entity that keeps a state.
#[derive(Debug)]
pub struct Incarnation {
    /// Its shard.
    pub shard: ShardId,
    /// Its writer of the state.
    pub(crate) writer: Writer,
    /// The count, once the claim has read it.
    pub(crate) count: Option<u64>,
    /// A claim or a write is in flight.
    pub(crate) busy: bool,
    /// Messages waiting for the state: payload and where the answer goes.
    pub(crate) queue: VecDeque<(Vec<u8>, ReplyTo<u64>)>,
    /// Its host asked it to stop: it stops once the queue is empty and nothing is in flight.
    pub(crate) stopping: bool,
    /// It asked its host to passivate it after being fenced.
    pub(crate) passivating: bool,
}

impl Incarnation {
    /// A new incarnation of an entity of `shard`, writer number `n` of the node with uid `node`.
    pub fn new(shard: ShardId, node: u64, n: u64) -> Self {
        Self {
            shard,
            writer: Writer::new(Writer::holder(node, n)),
            count: None,
            busy: false,
            queue: VecDeque::new(),
            stopping: false,
            passivating: false,
        }
    }

    /// Whether it may stop now: nothing in flight and nothing queued.
    pub fn idle(&self) -> bool {
        !self.busy && self.queue.is_empty()
    }
}

/// What the entities' states did in a run, and what their writers were told.
#[derive(Debug, Default)]
pub struct EntityStates {
    /// Per entity, the claims answered and the writes acknowledged, over all incarnations.
    histories: BTreeMap<EntityId, History>,
    /// Per entity, when a claim or write of its state failed while most of the key's replicas,
    /// on some ring a store still asks, were not running (`Sim::state_quorum_gone`): the
    /// message it was for failed, as it must (docs/data.md, "Absent holders").
    unavailable: BTreeMap<EntityId, Vec<Duration>>,
}

impl EntityStates {
    /// Records an answered claim of `entity` with `ballot` that read `held`; S19 and S20 on its history.
    pub(crate) fn claimed(
        &mut self,
        entity: &EntityId,
        ballot: Ballot,
        held: Option<Counted>,
    ) -> Result<(), HistoryError> {
        let h = self.histories.entry(entity.clone()).or_default();
        h.claims.push((ballot, held));
        h.check()
    }

    /// Records an acknowledged write of `entity`; S19 and S20 on its history.
    pub(crate) fn acked(&mut self, entity: &EntityId, write: Counted) -> Result<(), HistoryError> {
        let h = self.histories.entry(entity.clone()).or_default();
        h.acked.push(write);
        h.check()
    }

    /// Records that a claim or write of `entity` failed `at` while its replicas were mostly gone.
    pub(crate) fn unavailable(&mut self, entity: &EntityId, at: Duration) {
        self.unavailable.entry(entity.clone()).or_default().push(at);
    }

    /// Whether a claim or write of `entity` failed within `from..=to` while its replicas were
    /// mostly gone: an ask of it answered with a failure then was answered as it must be.
    pub fn was_unavailable(&self, entity: &EntityId, from: Duration, to: Duration) -> bool {
        self.unavailable.get(entity).is_some_and(|at| at.iter().any(|t| (from..=to).contains(t)))
    }

    /// Per entity, what its writers were told.
    pub fn histories(&self) -> &BTreeMap<EntityId, History> {
        &self.histories
    }
}

#[cfg(test)]
mod tests {
    use convoke_data::fenced::Written;

    use super::*;

    #[test]
    fn s19_finds_a_lost_write_and_a_fork_of_one_entity_only() {
        let mut s = EntityStates::default();
        let (e1, e2): (EntityId, EntityId) = ("e1".into(), "e2".into());
        let (a, b) = (Ballot { round: 1, holder: 1 }, Ballot { round: 2, holder: 2 });
        s.claimed(&e1, a, None).expect("a first claim");
        s.acked(&e1, (a, 1, 1)).expect("one");
        s.acked(&e2, (a, 1, 1)).expect("another entity");
        // A claim of a higher ballot that did not see e1's acknowledged write: lost.
        assert!(matches!(s.claimed(&e1, b, None), Err(HistoryError::Lost(_))));
        // e2: a later ballot's write that does not count on from the earlier one: a fork.
        s.claimed(&e2, b, Some((a, 1, 1))).expect("saw it");
        assert!(matches!(s.acked(&e2, (b, 1, 1)), Err(HistoryError::Fork(_))));
        assert_eq!(s.histories().len(), 2);
    }

    #[test]
    fn a_failure_with_the_replicas_gone_excuses_only_the_asks_of_its_entity_it_fell_within() {
        let mut s = EntityStates::default();
        let (e1, e2): (EntityId, EntityId) = ("e1".into(), "e2".into());
        let at = Duration::from_secs;
        s.unavailable(&e1, at(670));
        assert!(s.was_unavailable(&e1, at(670), at(671)));
        assert!(s.was_unavailable(&e1, at(669), at(670)));
        assert!(!s.was_unavailable(&e1, at(671), at(672)), "sent after it");
        assert!(!s.was_unavailable(&e1, at(660), at(669)), "answered before it");
        assert!(!s.was_unavailable(&e2, at(660), at(680)), "another entity");
    }

    #[test]
    fn a_state_reads_back_as_written() {
        let value = Fenced {
            promise: Ballot { round: 3, holder: 9 },
            state: Some(Written {
                ballot: Ballot { round: 3, holder: 9 },
                seq: 4,
                bytes: encode(17),
            }),
        };
        assert_eq!(counted(&value), Some((Ballot { round: 3, holder: 9 }, 4, 17)));
        assert_eq!(counted(&Fenced::default()), None);
        assert_eq!(key("sim-entity", &"e5".into()).to_string(), "entity/sim-entity/e5");
    }
}
