//! Remembered entities in the store (`docs/sharding-design.md`, "Remembered entities").
//!
//! The host decides which entities a shard remembers ([`HostOutput::Remember`] and
//! [`HostOutput::Forget`]) and when a shard that starts here needs its set
//! ([`HostOutput::LoadEntities`]). This task keeps the set of each shard hosted here under the
//! fenced key `remember/<type>/<shard>`: when the shard starts here it claims the key (so that a
//! node that hosted the shard before can no longer write it) and hands the set the claim found to
//! the region task; after changes it writes the whole set again under its ballot, one write at a
//! time per shard, changes made during a write going into the next one.
//!
//! A shard whose set was written non-empty is also listed in the observed-remove set
//! `remember/<type>`. When the region task starts, this task reads that list (until a read
//! succeeds) and has the region wake each shard listed, so that after a full-cluster restart,
//! when no coordinator knows the shards any more, they are allocated again and their remembered
//! entities start without a message.
//!
//! [`HostOutput::Remember`]: convoke_sharding::HostOutput::Remember
//! [`HostOutput::Forget`]: convoke_sharding::HostOutput::Forget
//! [`HostOutput::LoadEntities`]: convoke_sharding::HostOutput::LoadEntities

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_sharding::{EntityId, ShardId};
use tokio::sync::mpsc;

use super::region::Event;
use super::state::{StateStore, claim};
use super::store_task::{self, Handle, StoreTask};
use crate::data::{Ballot, Crdt, CrdtOp, Data, DataError, Fenced, Value, Writer};

/// What the region task asks of the remembered sets.
#[derive(Debug)]
pub(super) enum Cmd {
    /// The shard starts here: claim and read its set.
    Load(ShardId),
    /// Add the entity to its shard's set.
    Add(ShardId, EntityId),
    /// Remove the entity from its shard's set.
    Remove(ShardId, EntityId),
    /// The shard no longer runs here: write what is left to write, then let go of it.
    Release(ShardId),
}

/// The region task's handle of its remembered sets.
pub(super) type Remembrance = Handle<Cmd>;

/// Starts the task of type `store.type_name`'s sets; what it reads goes to `events`.
pub(super) fn start(
    store: StateStore,
    retry: Duration,
    events: mpsc::UnboundedSender<Event>,
) -> Remembrance {
    let list = list_key(&store.type_name);
    tokio::spawn(wake_listed(store.data.clone(), list.clone(), retry, events.clone()));
    store_task::spawn(Sets {
        store,
        list,
        retry,
        events,
        sets: BTreeMap::new(),
        listed: BTreeSet::new(),
        generation: 0,
    })
}

/// The key of shard `shard`'s remembered set.
fn key(type_name: &str, shard: &ShardId) -> String {
    format!("remember/{type_name}/{shard}")
}

/// The key of the list of shards with remembered entities.
fn list_key(type_name: &str) -> String {
    format!("remember/{type_name}")
}

/// Reads the list of shards with remembered entities until a read succeeds, and has the region
/// task wake them.
async fn wake_listed(
    data: Data,
    list: String,
    retry: Duration,
    events: mpsc::UnboundedSender<Event>,
) {
    loop {
        match data.get(&list).await {
            Ok(read) => {
                let shards: Vec<ShardId> = read
                    .values
                    .iter()
                    .filter_map(|v| match v {
                        Value::Crdt(Crdt::OrSet(set)) => Some(set),
                        _ => None,
                    })
                    .flat_map(|set| set.elements().map(ShardId::from))
                    .collect();
                if !shards.is_empty() {
                    let n = shards.len();
                    tracing::info!(key = %list, shards = n, "waking the shards with remembered entities");
                }
                let _ = events.send(Event::Wake(shards));
                return;
            }
            Err(e) => {
                tracing::debug!(key = %list, error = %e, "cannot read the shards with remembered entities yet");
                if events.is_closed() {
                    return;
                }
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// One shard's set, while the shard runs here (or its last changes are being written).
struct Set {
    /// Tells this shard's run here apart from an earlier one, whose answers are ignored.
    generation: u64,
    key: String,
    /// The set's writer, once its claim is answered.
    claimed: Option<Writer>,
    ids: BTreeSet<EntityId>,
    /// Changes made before the claim answered: applied to the set it read.
    early: Vec<(EntityId, bool)>,
    /// The set of this shard's previous run here, with the ballot it was written under, when
    /// that run still had changes to write as the shard started again: it replaces what the
    /// claim read if nobody else wrote the key since.
    carried: Option<(Ballot, BTreeSet<EntityId>)>,
    /// The set changed since the last write began.
    dirty: bool,
    /// A claim, a write or the wait before a retry is under way.
    busy: bool,
    /// The shard stopped here: dropped once written.
    released: bool,
}

impl Set {
    /// Adds or removes `id`; the set is to be written if that changed it.
    fn apply(&mut self, id: EntityId, add: bool) {
        self.dirty |= if add { self.ids.insert(id) } else { self.ids.remove(&id) };
    }
}

/// What a finished claim, write or wait says.
enum Done {
    Claimed { shard: ShardId, generation: u64, result: Result<Claim, DataError> },
    Listed { shard: ShardId, result: Result<(), DataError> },
    Written { shard: ShardId, generation: u64, result: Result<(), DataError> },
    Retry { shard: ShardId, generation: u64 },
}

/// A claim's writer and what it read; `None`: outbid on every try.
type Claim = Option<(Writer, Fenced)>;

type Work = store_task::Work<Done>;

struct Sets {
    store: StateStore,
    /// The key of the list of shards with remembered entities.
    list: String,
    retry: Duration,
    events: mpsc::UnboundedSender<Event>,
    sets: BTreeMap<ShardId, Set>,
    /// Shards listed (or being listed) in `list` by this task.
    listed: BTreeSet<ShardId>,
    generation: u64,
}

impl StoreTask for Sets {
    type Cmd = Cmd;
    type Done = Done;

    fn on_cmd(&mut self, cmd: Cmd, work: &mut Work) {
        match cmd {
            Cmd::Load(shard) => {
                self.generation += 1;
                // A run of the shard here that stopped (a handoff, a freeze) with changes not
                // yet written: they are not lost with it.
                let (carried, early) = match self.sets.remove(&shard) {
                    Some(old) => match old.claimed.as_ref().and_then(Writer::ballot) {
                        Some(ballot) => (Some((ballot, old.ids)), Vec::new()),
                        None => (None, old.early),
                    },
                    None => (None, Vec::new()),
                };
                let set = Set {
                    generation: self.generation,
                    key: key(&self.store.type_name, &shard),
                    claimed: None,
                    ids: BTreeSet::new(),
                    early,
                    carried,
                    dirty: false,
                    busy: true,
                    released: false,
                };
                self.claim(&shard, &set, work);
                self.sets.insert(shard, set);
            }
            Cmd::Add(shard, id) => self.change(shard, id, true, work),
            Cmd::Remove(shard, id) => self.change(shard, id, false, work),
            Cmd::Release(shard) => {
                let Some(set) = self.sets.get_mut(&shard) else { return };
                set.released = true;
                if !(set.busy || set.dirty) {
                    self.sets.remove(&shard);
                }
            }
        }
    }

    fn on_done(&mut self, done: Done, work: &mut Work) {
        let (shard, generation) = match &done {
            Done::Listed { shard, result } => {
                if let Err(e) = result {
                    // Listed again after its next write.
                    tracing::debug!(%shard, error = %e, "cannot list the shard's remembered entities yet");
                    self.listed.remove(shard);
                }
                return;
            }
            Done::Claimed { shard, generation, .. }
            | Done::Written { shard, generation, .. }
            | Done::Retry { shard, generation } => (shard.clone(), *generation),
        };
        let type_name = self.store.type_name.clone();
        let Some(set) = self.sets.get_mut(&shard).filter(|s| s.generation == generation) else {
            return;
        };
        match done {
            Done::Claimed { result: Ok(Some((writer, current))), .. } => {
                let mut stored = decode(&current, &type_name, &shard);
                let written_by = current.state.as_ref().map(|w| w.ballot);
                if let Some((ballot, ids)) = set.carried.take()
                    && written_by.is_none_or(|b| b == ballot)
                    && ids != stored
                {
                    stored = ids;
                    set.dirty = true;
                }
                if !set.released {
                    let ids = stored.iter().cloned().collect();
                    let _ = self.events.send(Event::Loaded(shard.clone(), ids));
                }
                set.ids = stored;
                for (id, add) in std::mem::take(&mut set.early) {
                    set.apply(id, add);
                }
                let ballot = writer.ballot().unwrap_or_default();
                set.claimed = Some(writer);
                set.busy = false;
                let n = set.ids.len();
                tracing::debug!(entity_type = %type_name, %shard, %ballot, entities = n, "remembered entities read");
                self.maybe_write(&shard, work);
            }
            Done::Claimed { result, .. } => {
                let why = result
                    .err()
                    .map_or_else(|| "outbid on every try".to_owned(), |e| e.to_string());
                tracing::debug!(entity_type = %type_name, %shard, %why, "cannot read the shard's remembered entities yet");
                self.wait(&shard, generation, work);
            }
            Done::Written { result: Ok(()), .. } => {
                set.busy = false;
                if !set.ids.is_empty() && self.listed.insert(shard.clone()) {
                    let (data, list) = (self.store.data.clone(), self.list.clone());
                    let op = CrdtOp::Insert(shard.to_string());
                    let shard = shard.clone();
                    work.push(Box::pin(async move {
                        let result = data.update(&list, op).await.map(drop);
                        Done::Listed { shard, result }
                    }));
                }
                if set.released && !set.dirty {
                    self.sets.remove(&shard);
                } else {
                    self.maybe_write(&shard, work);
                }
            }
            Done::Written { result: Err(e), .. } if e.fence_refusal().is_some() => {
                // After a handoff, the last write of the old home may come after the new home's
                // claim; otherwise the shard runs elsewhere too, which the sharding prevents.
                let what = "another node has claimed the shard's remembered entities; this one \
                            no longer writes them";
                if set.released {
                    tracing::debug!(entity_type = %type_name, %shard, "{what}");
                } else {
                    tracing::warn!(entity_type = %type_name, %shard, "{what}");
                }
                self.sets.remove(&shard);
            }
            Done::Written { result: Err(e), .. } => {
                tracing::debug!(entity_type = %type_name, %shard, error = %e, "cannot write the shard's remembered entities yet");
                set.dirty = true;
                self.wait(&shard, generation, work);
            }
            Done::Listed { .. } => {}
            Done::Retry { .. } if set.released && set.claimed.is_none() => {
                // The shard stopped here before its set could be read: nothing to write.
                self.sets.remove(&shard);
            }
            // Still busy: the claim is made again.
            Done::Retry { .. } if set.claimed.is_none() => {
                self.claim(&shard, &self.sets[&shard], work)
            }
            Done::Retry { .. } => {
                set.busy = false;
                self.maybe_write(&shard, work);
            }
        }
    }
}

impl Sets {
    fn change(&mut self, shard: ShardId, id: EntityId, add: bool, work: &mut Work) {
        let Some(set) = self.sets.get_mut(&shard).filter(|s| !s.released) else { return };
        if set.claimed.is_none() {
            set.early.push((id, add));
            return;
        }
        set.apply(id, add);
        self.maybe_write(&shard, work);
    }

    fn claim(&self, shard: &ShardId, set: &Set, work: &mut Work) {
        let (data, key, holder) = (self.store.data.clone(), set.key.clone(), self.store.holder);
        let (shard, generation) = (shard.clone(), set.generation);
        work.push(Box::pin(async move {
            let result = claim(&data, &key, holder).await;
            Done::Claimed { shard, generation, result }
        }));
    }

    /// Tries again after the retry interval.
    fn wait(&self, shard: &ShardId, generation: u64, work: &mut Work) {
        let (shard, retry) = (shard.clone(), self.retry);
        work.push(Box::pin(async move {
            tokio::time::sleep(retry).await;
            Done::Retry { shard, generation }
        }));
    }

    /// Writes the set if it changed and nothing else is under way for it.
    fn maybe_write(&mut self, shard: &ShardId, work: &mut Work) {
        let Some(set) = self.sets.get_mut(shard) else { return };
        if set.busy || !set.dirty {
            return;
        }
        let ids: Vec<&str> = set.ids.iter().map(|id| &**id).collect();
        let bytes = serde_json::to_vec(&ids).unwrap_or_default();
        let Some(op) = set.claimed.as_mut().and_then(|w| w.write(bytes)) else { return };
        set.busy = true;
        set.dirty = false;
        let (data, key) = (self.store.data.clone(), set.key.clone());
        let (shard, generation) = (shard.clone(), set.generation);
        work.push(Box::pin(async move {
            let result = data.fenced_write(&key, op).await.map(drop);
            Done::Written { shard, generation, result }
        }));
    }
}

/// The entity ids a claim found: a JSON list of strings (none when nothing was written).
fn decode(current: &Fenced, type_name: &str, shard: &ShardId) -> BTreeSet<EntityId> {
    let Some(written) = &current.state else { return BTreeSet::new() };
    match serde_json::from_slice::<Vec<String>>(&written.bytes) {
        Ok(ids) => ids.into_iter().map(EntityId::from).collect(),
        Err(e) => {
            tracing::error!(entity_type = %type_name, %shard, error = %e, "the shard's remembered entities are not a list of ids; starting none");
            BTreeSet::new()
        }
    }
}
